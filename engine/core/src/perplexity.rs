//! The perplexity of a model over a text, computed as llama.cpp's `llama-perplexity`
//! computes it by default (`tools/perplexity`), so that the two can be compared on the same
//! file and text:
//! - the text is tokenized once, with the BOS token when the vocabulary adds one;
//! - it is cut into `tokens / ctx` windows of `ctx` tokens (the rest is dropped), and each
//!   is evaluated from an empty cache, its first token replaced by BOS when the
//!   vocabulary adds one;
//! - in each window only the second half is scored, so that every scored token has at
//!   least `ctx / 2` tokens of context: the negative log-likelihood of token `j + 1` given
//!   the logits after token `j`, for `j` from `ctx / 2` to `ctx - 2`;
//! - the perplexity is `exp` of the mean, and its error `ppl * sqrt(var / (count - 1))`
//!   with `var` the variance of the per-token values; each `log_softmax` takes the largest
//!   logit in f32 and sums `expf(l - max)` in f64, as llama.cpp's does.

use crate::error::{EngineError, Result};
use crate::slots::Slots;

/// The slot the windows run in.
const SLOT: usize = 0;

/// A perplexity and what it was computed over.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Perplexity {
    /// `exp` of the mean negative log-likelihood.
    pub ppl: f64,
    /// Its standard error, as llama.cpp reports it (`PPL = ppl +/- error`).
    pub error: f64,
    /// Windows evaluated.
    pub windows: usize,
    /// Tokens scored.
    pub scored: usize,
}

/// Progress after each window: windows done, windows in all, the perplexity so far.
pub type Progress<'a> = dyn FnMut(usize, usize, f64) + 'a;

/// Windows of `ctx` tokens that `n_tokens` tokens give, or the error llama.cpp gives too:
/// it needs at least two.
pub fn windows(n_tokens: usize, ctx: usize) -> Result<usize> {
    if ctx < 4 {
        return Err(EngineError::InvalidOption {
            name: "ctx",
            message: format!("{ctx}: a perplexity window needs at least 4 tokens"),
        });
    }
    if n_tokens < 2 * ctx {
        return Err(EngineError::InvalidOption {
            name: "file",
            message: format!(
                "the text tokenizes to {n_tokens} tokens; a context of {ctx} needs at least {}",
                2 * ctx
            ),
        });
    }
    Ok(n_tokens / ctx)
}

/// `-log_softmax(logits)[target]`, as llama.cpp computes it.
pub fn negative_log_likelihood(logits: &[f32], target: usize) -> f64 {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let sum: f64 = logits.iter().map(|&l| f64::from((l - max).exp())).sum();
    -(f64::from(logits[target] - max) - sum.ln())
}

/// The perplexity of the model of `slots` over `tokens` (the whole text, tokenized) with
/// windows of `ctx` tokens, each run in prefill chunks of at most `ubatch`; `bos`
/// replaces each window's first token when the vocabulary adds one. Uses slot 0, which it
/// leaves holding the last window. `progress` hears each window done.
pub fn perplexity(
    slots: &mut Slots,
    tokens: &[u32],
    ctx: usize,
    ubatch: usize,
    bos: Option<u32>,
    progress: &mut Progress<'_>,
) -> Result<Perplexity> {
    let n = windows(tokens.len(), ctx)?;
    if ubatch == 0 {
        return Err(EngineError::InvalidOption {
            name: "ubatch",
            message: "must be at least 1".into(),
        });
    }
    if ctx > slots.n_ctx() {
        return Err(EngineError::InvalidOption {
            name: "ctx",
            message: format!("{ctx} is beyond the slots' context of {}", slots.n_ctx()),
        });
    }
    slots.model().check_tokens(tokens)?;
    let first = ctx / 2;
    let (mut nll, mut nll2, mut count) = (0f64, 0f64, 0usize);
    for w in 0..n {
        let start = w * ctx;
        let mut window = tokens[start..start + ctx].to_vec();
        if let Some(bos) = bos {
            window[0] = bos;
        }
        let slot = slots.id(SLOT)?;
        slots.erase(slot);
        let mut done = 0;
        for chunk in window.chunks(ubatch) {
            let end = done + chunk.len();
            if end <= first {
                slots.prefill(slot, chunk, chunk.len(), &mut ())?;
            } else {
                let from = first.saturating_sub(done);
                let scored = slots.prefill_scored(slot, chunk, from)?;
                // Logits after token `done + from + i` score the text's next token.
                for (i, logits) in scored.iter().enumerate() {
                    let j = done + from + i;
                    if j + 1 >= ctx {
                        break;
                    }
                    let v =
                        negative_log_likelihood(logits.as_slice(), tokens[start + j + 1] as usize);
                    nll += v;
                    nll2 += v * v;
                    count += 1;
                }
            }
            done = end;
        }
        progress(w + 1, n, (nll / count as f64).exp());
    }
    let mean = nll / count as f64;
    let ppl = mean.exp();
    let var = nll2 / count as f64 - mean * mean;
    let error = if var > 0.0 && count > 1 {
        (var / (count - 1) as f64).sqrt() * ppl
    } else {
        0.0
    };
    Ok(Perplexity {
        ppl,
        error,
        windows: n,
        scored: count,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn log_likelihood_is_log_softmax() {
        let logits = [1.0f32, 2.0, 3.0, -4.0];
        let z: f64 = logits.iter().map(|&l| f64::from(l).exp()).sum();
        for t in 0..4 {
            let want = -(f64::from(logits[t]).exp() / z).ln();
            assert!((negative_log_likelihood(&logits, t) - want).abs() < 1e-6);
        }
        // Uniform over n: log n.
        let flat = [0.5f32; 8];
        assert!((negative_log_likelihood(&flat, 3) - 8f64.ln()).abs() < 1e-12);
    }

    #[test]
    fn too_short_texts_and_bad_options_are_errors() {
        assert!(windows(1023, 512).is_err());
        assert_eq!(windows(1024, 512).unwrap(), 2);
        assert_eq!(windows(1600, 512).unwrap(), 3);
        assert!(windows(100, 2).is_err());
    }

    /// The windows' scores are those of a token-by-token decode of each window, and the
    /// prefill chunking does not change them.
    #[test]
    fn scores_the_second_half_of_each_window_like_a_decode() {
        let model = Arc::new(crate::Model::builtin().unwrap());
        let tokens: Vec<u32> = model.tokenizer().encode(
            "The quick brown fox jumps over the lazy dog, again and again, until the dog \
             wakes up and the fox runs away into the forest behind the old farm house.",
            false,
        );
        let ctx = 32;
        assert!(tokens.len() >= 2 * ctx, "{} tokens", tokens.len());
        let mut slots = Slots::new(model.clone(), 1, 64).unwrap();
        let mut seen = Vec::new();
        let one = perplexity(&mut slots, &tokens, ctx, 64, Some(1), &mut |d, n, p| {
            seen.push((d, n, p))
        })
        .unwrap();
        let n = tokens.len() / ctx;
        assert_eq!((one.windows, one.scored), (n, n * (ctx - ctx / 2 - 1)));
        assert_eq!(seen.len(), n);
        assert_eq!(seen.last().unwrap().2, one.ppl);
        let chunked = perplexity(&mut slots, &tokens, ctx, 5, Some(1), &mut |_, _, _| {}).unwrap();
        assert!(
            (chunked.ppl - one.ppl).abs() <= 1e-4 * one.ppl,
            "{chunked:?} vs {one:?}"
        );
        // By hand: every window decoded one token at a time.
        let mut nll = 0f64;
        for w in 0..n {
            let mut window = tokens[w * ctx..(w + 1) * ctx].to_vec();
            window[0] = 1;
            slots.erase(slots.id(0).unwrap());
            let mut logits = slots
                .prefill(slots.id(0).unwrap(), &window[..1], 1, &mut ())
                .unwrap();
            for j in 0..ctx - 1 {
                if j >= ctx / 2 {
                    nll += negative_log_likelihood(
                        logits.as_slice(),
                        tokens[w * ctx + j + 1] as usize,
                    );
                }
                logits = slots
                    .decode_step(slots.id(0).unwrap(), window[j + 1])
                    .unwrap();
            }
        }
        let by_hand = (nll / one.scored as f64).exp();
        assert!(
            (by_hand - one.ppl).abs() <= 1e-4 * one.ppl,
            "{by_hand} vs {one:?}"
        );
        assert!(one.ppl > 1.0 && one.error > 0.0, "{one:?}");
        assert!(perplexity(&mut slots, &tokens, ctx, 0, None, &mut |_, _, _| {}).is_err());
        assert!(perplexity(&mut slots, &tokens, 128, 8, None, &mut |_, _, _| {}).is_err());
    }
}
