//! Log-probabilities of sampled tokens (OpenAI's `logprobs` / `top_logprobs`): the
//! model's distribution over the vocabulary, `log_softmax` of the raw logits, before any
//! temperature or truncation, as OpenAI and llama-server report them.

use crate::slots::Logits;

/// The log-probability of one chosen token, and of the most likely tokens at its position.
#[derive(Debug, Clone, PartialEq)]
pub struct TokenLogprob {
    /// The chosen token.
    pub token: u32,
    /// Its natural-log probability.
    pub logprob: f32,
    /// The `top_n` most likely tokens, best first (lowest id among ties), with theirs.
    pub top: Vec<(u32, f32)>,
}

/// The log-probability of `token` under `logits`, and the `top_n` best tokens'.
/// NaN scores count as impossible (`-inf`); a token outside the vocabulary too.
pub fn token_logprob(logits: &Logits, token: u32, top_n: usize) -> TokenLogprob {
    let v = logits.as_slice();
    let max = v
        .iter()
        .copied()
        .filter(|x| !x.is_nan())
        .fold(f32::NEG_INFINITY, f32::max);
    let sum: f64 = v
        .iter()
        .filter(|x| !x.is_nan())
        .map(|&x| f64::from(x - max).exp())
        .sum();
    let lse = f64::from(max) + sum.ln();
    let lp = |x: f32| {
        if x.is_nan() {
            f32::NEG_INFINITY
        } else {
            (f64::from(x) - lse) as f32
        }
    };
    let logprob = v.get(token as usize).map_or(f32::NEG_INFINITY, |&x| lp(x));
    let mut top: Vec<(u32, f32)> = Vec::new();
    if top_n > 0 {
        let mut all: Vec<(u32, f32)> = v
            .iter()
            .enumerate()
            .filter(|(_, x)| !x.is_nan())
            .map(|(i, &x)| (i as u32, x))
            .collect();
        let by_score = |a: &(u32, f32), b: &(u32, f32)| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0));
        let n = top_n.min(all.len());
        if n > 0 && n < all.len() {
            all.select_nth_unstable_by(n - 1, by_score);
        }
        all.truncate(n);
        all.sort_unstable_by(by_score);
        top = all.into_iter().map(|(i, x)| (i, lp(x))).collect();
    }
    TokenLogprob {
        token,
        logprob,
        top,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_softmax_of_the_chosen_and_the_best() {
        let l = Logits::from(vec![0.0, 2.0, 1.0, 2.0, f32::NAN]);
        let r = token_logprob(&l, 2, 3);
        let z: f64 = [0.0f64, 2.0, 1.0, 2.0].iter().map(|x| x.exp()).sum();
        let expect = |x: f64| (x - z.ln()) as f32;
        assert!((r.logprob - expect(1.0)).abs() < 1e-6);
        assert_eq!(r.top.iter().map(|t| t.0).collect::<Vec<_>>(), vec![1, 3, 2]);
        assert!((r.top[0].1 - expect(2.0)).abs() < 1e-6);
        let total: f64 = (0..4)
            .map(|t| f64::from(token_logprob(&l, t, 0).logprob).exp())
            .sum();
        assert!(
            (total - 1.0).abs() < 1e-6,
            "probabilities sum to one: {total}"
        );
        assert_eq!(token_logprob(&l, 4, 0).logprob, f32::NEG_INFINITY);
        assert_eq!(token_logprob(&l, 99, 0).logprob, f32::NEG_INFINITY);
        assert!(token_logprob(&l, 1, 0).top.is_empty());
        assert_eq!(
            token_logprob(&l, 1, 50).top.len(),
            4,
            "at most the finite scores"
        );
    }
}
