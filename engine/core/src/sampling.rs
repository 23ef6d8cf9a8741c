//! Choosing the next token, and the generation loop built on
//! [`Slots::decode_step`].

use std::ops::ControlFlow;

use crate::error::{EngineError, Result};
use crate::model::Model;
use crate::slots::{Logits, SlotId, Slots, StepDone, StepObserver, StepStart};

/// Sampling settings. `temperature == 0` is greedy.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SamplerConfig {
    /// Softmax temperature; 0 picks the highest score.
    pub temperature: f32,
    /// Keep only the `top_k` best tokens (0: all).
    pub top_k: usize,
    /// Keep the smallest set of best tokens whose probability reaches `top_p` (1: all).
    pub top_p: f32,
    /// Seed of the random generator.
    pub seed: u64,
}

impl Default for SamplerConfig {
    /// Greedy.
    fn default() -> Self {
        Self::greedy()
    }
}

impl SamplerConfig {
    /// Always the highest-scoring token.
    pub fn greedy() -> Self {
        Self {
            temperature: 0.0,
            top_k: 0,
            top_p: 1.0,
            seed: 0,
        }
    }
}

/// Draws tokens from logits according to a [`SamplerConfig`].
#[derive(Debug, Clone)]
pub struct Sampler {
    cfg: SamplerConfig,
    rng: u64,
    scratch: Vec<(u32, f32)>,
}

impl Sampler {
    /// A sampler; rejects a negative or non-finite temperature and a
    /// `top_p` outside `(0, 1]`.
    pub fn new(cfg: SamplerConfig) -> Result<Self> {
        if !cfg.temperature.is_finite() || cfg.temperature < 0.0 {
            return Err(EngineError::InvalidOption {
                name: "temperature",
                message: format!("{} is not a finite number >= 0", cfg.temperature),
            });
        }
        if !(cfg.top_p > 0.0 && cfg.top_p <= 1.0) {
            return Err(EngineError::InvalidOption {
                name: "top_p",
                message: format!("{} is not in (0, 1]", cfg.top_p),
            });
        }
        Ok(Self {
            cfg,
            rng: cfg.seed,
            scratch: Vec::new(),
        })
    }

    /// A greedy sampler.
    pub fn greedy() -> Self {
        Self {
            cfg: SamplerConfig::greedy(),
            rng: 0,
            scratch: Vec::new(),
        }
    }

    /// The settings.
    pub fn config(&self) -> &SamplerConfig {
        &self.cfg
    }

    /// splitmix64 -> uniform in [0, 1).
    fn next_f64(&mut self) -> f64 {
        self.rng = self.rng.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.rng;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        (z >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Pick the next token.
    pub fn sample(&mut self, logits: &Logits) -> u32 {
        let c = self.cfg;
        if c.temperature == 0.0 || c.top_k == 1 {
            return logits.argmax();
        }
        let v = logits.as_slice();
        let u = self.next_f64();
        let s = &mut self.scratch;
        s.clear();
        s.extend(
            v.iter()
                .enumerate()
                .filter(|(_, x)| !x.is_nan())
                .map(|(i, &x)| (i as u32, x)),
        );
        if s.is_empty() {
            return 0;
        }
        let by_score = |a: &(u32, f32), b: &(u32, f32)| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0));
        if c.top_k > 0 && c.top_k < s.len() {
            s.select_nth_unstable_by(c.top_k - 1, by_score);
            s.truncate(c.top_k);
        }
        s.sort_unstable_by(by_score);
        let max = s[0].1;
        let inv_t = 1.0 / c.temperature;
        let mut sum = 0f64;
        for e in s.iter_mut() {
            e.1 = ((e.1 - max) * inv_t).exp();
            sum += f64::from(e.1);
        }
        if c.top_p < 1.0 {
            let mut cum = 0f64;
            let mut keep = s.len();
            for (i, e) in s.iter().enumerate() {
                cum += f64::from(e.1) / sum;
                if cum >= f64::from(c.top_p) {
                    keep = i + 1;
                    break;
                }
            }
            s.truncate(keep);
            sum = s.iter().map(|e| f64::from(e.1)).sum();
        }
        let mut x = u * sum;
        for e in s.iter() {
            x -= f64::from(e.1);
            if x < 0.0 {
                return e.0;
            }
        }
        s[s.len() - 1].0
    }
}

/// Why a generation stopped: the one stop reason, from sampling to the wire (each HTTP
/// surface writes it in its own words).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopReason {
    /// An end-of-generation token was sampled (not included in the tokens).
    Eos,
    /// A stop string of the request appeared in the text (the server's text output
    /// watches for them; sampling itself never stops for one).
    StopWord,
    /// `n_predict` tokens were generated.
    Length,
    /// The slot's context is full.
    ContextFull,
    /// The observer asked to stop (the request was cancelled, or its client went away).
    Cancelled,
}

/// Generation settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GenerateParams {
    /// Most tokens to generate.
    pub n_predict: usize,
    /// Stop when the model's EOS token is sampled.
    pub stop_at_eos: bool,
}

impl Default for GenerateParams {
    fn default() -> Self {
        Self {
            n_predict: 128,
            stop_at_eos: true,
        }
    }
}

/// What [`generate`] produced.
#[derive(Debug, Clone, PartialEq)]
pub struct Generation {
    /// Generated tokens, each already in the slot's cache.
    pub tokens: Vec<u32>,
    /// Why it stopped.
    pub finish: StopReason,
    /// Logits after the last token in the slot, for continuing.
    pub next_logits: Logits,
}

/// One generation, a step at a time: which token comes next, when it stops, and what each
/// step reports. [`generate`] drives it to the end for one slot; the server's batched
/// schedule drives one per busy slot, a step of each in every forward.
#[derive(Debug, Clone)]
pub struct Generator {
    params: GenerateParams,
    tokens: Vec<u32>,
    logits: Logits,
}

impl Generator {
    /// A generation continuing from the logits `first` (those of the prefill, or of the
    /// previous generation).
    pub fn new(first: Logits, params: GenerateParams) -> Self {
        Self {
            params,
            tokens: Vec::with_capacity(params.n_predict.min(4096)),
            logits: first,
        }
    }

    /// The token to decode next into a slot holding `n_past` of `n_ctx` tokens, or why
    /// the generation ends here: `n_predict` reached, EOS sampled (with `stop_at_eos`),
    /// or the context full. Draws from `sampler` (once per call that samples).
    pub fn next_token(
        &mut self,
        sampler: &mut Sampler,
        model: &Model,
        n_past: usize,
        n_ctx: usize,
    ) -> std::result::Result<u32, StopReason> {
        if self.tokens.len() >= self.params.n_predict {
            return Err(StopReason::Length);
        }
        let t = sampler.sample(&self.logits);
        if self.params.stop_at_eos && model.is_eos(t) {
            return Err(StopReason::Eos);
        }
        if n_past >= n_ctx {
            return Err(StopReason::ContextFull);
        }
        Ok(t)
    }

    /// What the step that decodes `token` into `slot` (holding `n_past` tokens) reports
    /// before its forward.
    pub fn step_start(&self, slot: usize, n_past: usize) -> StepStart {
        StepStart {
            slot,
            n_tokens: 1,
            done: self.tokens.len(),
            total: self.params.n_predict,
            n_past,
        }
    }

    /// `token` is in the slot (which now holds `n_past` tokens) and `logits` follow it;
    /// returns what the step reports after its forward.
    pub fn accept(&mut self, slot: usize, token: u32, logits: Logits, n_past: usize) -> StepDone {
        let step = self.step_start(slot, n_past.saturating_sub(1));
        self.tokens.push(token);
        self.logits = logits;
        step.finished(n_past, Some(token))
    }

    /// The scores the next token is drawn from.
    pub fn logits(&self) -> &Logits {
        &self.logits
    }

    /// Tokens generated so far.
    pub fn tokens(&self) -> &[u32] {
        &self.tokens
    }

    /// The generation, ended for `finish`.
    pub fn finish(self, finish: StopReason) -> Generation {
        Generation {
            tokens: self.tokens,
            finish,
            next_logits: self.logits,
        }
    }
}

/// Generate up to `params.n_predict` tokens in `slot`, starting from the
/// logits `first` (those returned by the prefill or by the previous call).
///
/// Each accepted token is decoded into the slot at once, so afterwards the
/// slot holds the prompt and every generated token, and
/// [`Generation::next_logits`] continues from there. The observer hears
/// `before_step` (with `n_tokens = 1`) before each decode and `after_step`
/// (with the token) after it; a break stops with
/// [`StopReason::Cancelled`], keeping what was generated.
pub fn generate<O: StepObserver + ?Sized>(
    slots: &mut Slots,
    slot: SlotId,
    first: Logits,
    sampler: &mut Sampler,
    params: &GenerateParams,
    observer: &mut O,
) -> Result<Generation> {
    let model = slots.model().clone();
    let n_ctx = slots.n_ctx();
    let mut gen = Generator::new(first, *params);
    let start = std::time::Instant::now();
    let finish = loop {
        let n_past = slots.n_past(slot);
        let t = match gen.next_token(sampler, &model, n_past, n_ctx) {
            Ok(t) => t,
            Err(finish) => break finish,
        };
        if let ControlFlow::Break(()) = observer.before_step(&gen.step_start(slot.get(), n_past)) {
            break StopReason::Cancelled;
        }
        let logits = slots.decode_step_observed(slot, t, observer)?;
        if let ControlFlow::Break(()) =
            observer.after_step(&gen.accept(slot.get(), t, logits, n_past + 1))
        {
            break StopReason::Cancelled;
        }
    };
    let secs = start.elapsed().as_secs_f64();
    tracing::debug!(
        slot = slot.get(),
        n_tokens = gen.tokens().len(),
        tokens_per_s = gen.tokens().len() as f64 / secs.max(1e-9),
        finish = ?finish,
        "generation done"
    );
    Ok(gen.finish(finish))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn greedy_and_seeded_sampling() {
        let l = Logits::from(vec![0.0, 3.0, 1.0, 3.0, -1.0]);
        assert_eq!(Sampler::greedy().sample(&l), 1);
        let cfg = SamplerConfig {
            temperature: 1.0,
            top_k: 2,
            top_p: 1.0,
            seed: 7,
        };
        let mut a = Sampler::new(cfg).unwrap();
        let mut b = Sampler::new(cfg).unwrap();
        let xs: Vec<u32> = (0..200).map(|_| a.sample(&l)).collect();
        let ys: Vec<u32> = (0..200).map(|_| b.sample(&l)).collect();
        assert_eq!(xs, ys, "same seed, same tokens");
        assert!(
            xs.iter().all(|&t| t == 1 || t == 3),
            "top_k=2 keeps ids 1 and 3"
        );
        assert!(xs.contains(&1) && xs.contains(&3));
        let mut p = Sampler::new(SamplerConfig { top_p: 0.1, ..cfg }).unwrap();
        assert!(
            (0..50).all(|_| p.sample(&l) == 1),
            "top_p keeps the single best"
        );
        assert!(Sampler::new(SamplerConfig {
            temperature: -1.0,
            ..cfg
        })
        .is_err());
        assert!(Sampler::new(SamplerConfig { top_p: 0.0, ..cfg }).is_err());
    }
}
