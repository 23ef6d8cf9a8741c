//! The writer's online cost model: how long a step should take, learnt from the writer's
//! own finished steps, and the predictions of format v1.2 built from it.
//!
//! # The model
//! A step is one forward pass. Its duration is modelled per [`StepKind`] as
//!
//! ```text
//! t = a + b·n + c·A
//! ```
//!
//! where `n` is the number of new tokens the forward computes (a prefill chunk's size, or a
//! decode batch's rows) and `A` the number of (query, cached key) pairs its attention reads:
//! `n·ctx + n(n+1)/2` for a prefill chunk of `n` tokens after `ctx` cached ones, and
//! `Σ(ctx_i + 1)` over the rows of a decode batch ([`StepShape`]). `a` is the fixed cost of a
//! forward (kernel launches, the output head, sampling), `b` the per-token cost of the
//! weights, `c` the per-pair cost of attention, which is what makes later chunks and later
//! tokens slower.
//!
//! # The update rule
//! Least squares with exponential forgetting (`λ` = [`ModelConfig::forgetting`]), kept
//! recursively in information form, on features scaled per kind to comparable magnitudes.
//! For each finished step with features `x` and duration `y` (ms):
//!
//! ```text
//! A ← λ·A + x·xᵀ      b ← λ·b + x·y      θ = (A + R)⁻¹·b
//! ```
//!
//! starting from `A = 0`, `b = 0` (no training run: the first step is fitted almost
//! exactly, the next ones refine it). The ridge `R` ([`ModelConfig::ridge`]) is constant: it
//! does not fade with the data, so a coefficient that the recent steps do not tell apart
//! (the fixed cost and the per-token cost when every decode step has `n` = 1; the attention
//! cost when the context moves by one token per step, in step with any drift in time)
//! stays small instead of being fitted to noise or drift and extrapolated.
//!
//! # The first step of a kind
//! The first forward of a kind after the writer starts carries one-time costs: the first
//! touch of memory-mapped weights, the first allocation of the cache and scratch buffers,
//! cold caches. On the embedded model the first 512-token chunk takes longer than the
//! second, although the second attends more. Fitted together with the next steps, it
//! makes the attention cost look smaller than it is for several steps (the ETA of a
//! 7,000-token prefill came out 25-40% short at a quarter of the way). So it
//! is learnt alone, which gives the second step a prediction, and then forgotten: the fit
//! is built from the second step on, and the first check of the error is the third step's.
//!
//! # Decode batches of several sizes
//! A decode batch's cost is `a + b·rows + c·A`, but a run of steps of one size cannot tell
//! `a` from `b·rows`, and the forgetting keeps some 20 steps in mind. A serving engine's
//! rows finish at different times: after hundreds of 4-row steps, the fit knows nothing of
//! a 1-row step (a long generation's ETA came out 20-40% short when its batch shrank). So
//! besides the fit of every decode step, the model keeps one fit per batch size up to
//! [`ROW_FITS`] rows, each fed only the steps of its size, and predicts a batch of a size
//! seen twice by that size's fit ([`CostModel::predict_batch_remaining`] sums the
//! segments of a shrinking batch, each by its size's fit). With one size only, that fit
//! is the kind's fit exactly.
//!
//! # The attention cost of decode
//! Within the ~20 steps a fast fit remembers, a decode's context moves by one token per
//! step, so the attention cost `c` cannot be told from the fixed cost, and the ridge keeps
//! it near its center: a long generation's later steps were then predicted as cheap as its
//! first ones (SmolLM2: 10.6 ms at 356 cached tokens, 12.8 ms at 1,100; the ETA at a
//! quarter came out 39-46% short). So the model keeps one more decode fit, forgotten slowly
//! ([`ModelConfig::slow_forgetting`], some 500 steps: many requests' contexts, which do
//! tell `c` apart), and centres the fast decode fits' ridge on its `c` once it has
//! [`SLOW_MIN_SAMPLES`] steps at contexts spread enough to tell `c` from the other costs
//! ([`SLOW_MIN_SPREAD`]) and finds it positive (before that, on 0): the fast fits
//! keep following the level of the recent steps, and the slope comes from the long view.
//! Its attention cost is solved as at least 0: over steps whose machine sped up while the
//! context grew (the first decode steps after a start are slower), the plain solution had
//! come out negative for hundreds of steps, and the slow fit had said nothing.
//!
//! # The slow fit's shape at the recent level
//! Once the slow fit's shape is known (the same two conditions), two decode predictions come
//! from it, scaled by the level of the recent steps: the mean of each learnt step's
//! duration over the slow fit's prediction for it, weighted by age (see
//! [`ModelConfig::level_forgetting`]).
//! - **The rest of a phase** ([`CostModel::predict_remaining`],
//!   [`CostModel::predict_batch_remaining`]): hundreds of steps ahead, the slope of the
//!   slow fit and a level of some 200 steps are what hold. A fast fit's level and slope
//!   follow the last 20 steps, and one burst of slow steps (the machine's host busy for a
//!   moment) was extrapolated over the whole rest: a long generation's end came out 42%
//!   late at half way.
//! - **A step of a batch size whose fit is stale** (it learnt nothing in the last ~20
//!   decode steps, what a fast fit remembers): the size's own fit holds the machine's
//!   level of its last steps, hundreds of steps ago. When 3 of 4 rows left, the first
//!   1-row steps were predicted at the level of the warm-up request, 15-25% short. The
//!   slow fit has seen every size, and the level of the last steps of any size (same
//!   forgetting as the fast fits) moves it to now.
//!
//! The steps of a size that is being computed keep their own fit: it follows the steps as
//! fast as the model's error bound does. Replayed on five traces of the batched-decode
//! bench (`layout/tests/eta_replay.rs`), the mean ETA error from a quarter on went from
//! 13.2% to 8.0%, the worst point from 54.6% to 21.4%; on five traces recorded after
//! these rules were chosen, from 9.9% to 8.3% and from 52.6% to 28.7%.
//!
//! # How sure it is
//! Before each update the model's prediction for the finished step is compared with the
//! step's real duration: the relative residual `e = (y − ŷ)/ŷ`. An exponentially weighted
//! mean of `e²` (same `λ`) gives the **error bound** `2·√mean(e²)` (about 95% for normal
//! residuals). The bound is stated only after [`ModelConfig::min_checked`] such checks;
//! before that the model has predictions but says it is not confident.
//!
//! # What it leaves out
//! Steps that were interrupted (an error, a cancellation) never reach [`CostModel::observe`]:
//! the caller drops them. A step that took longer than [`ModelConfig::outlier_factor`] times a
//! confident prediction is taken for a stall and left out too, unless that happens
//! [`ModelConfig::outliers_to_accept`] times in a row: then the world changed (another
//! device, a hog that stays) and the model learns it.

use crate::slot::Prediction;

/// What kind of forward a step is: each kind has its own coefficients.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StepKind {
    /// A prefill chunk of one row.
    Prefill,
    /// A decode step of a batch of rows, one new token per row.
    Decode,
}

impl StepKind {
    fn index(self) -> usize {
        match self {
            Self::Prefill => 0,
            Self::Decode => 1,
        }
    }
}

/// What a step's duration depends on. See the [module docs](self).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StepShape {
    /// Prefill chunk or decode batch.
    pub kind: StepKind,
    /// New tokens the forward computes (chunk size, or decode rows).
    pub tokens: u64,
    /// Tokens cached before the step: the row's for a prefill chunk, the sum over the rows
    /// for a decode batch.
    pub context: u64,
}

impl StepShape {
    /// A prefill chunk of `tokens` new tokens after `context` cached ones.
    pub fn prefill(tokens: u64, context: u64) -> Self {
        Self {
            kind: StepKind::Prefill,
            tokens,
            context,
        }
    }

    /// A decode step of `rows` rows whose caches hold `context_sum` tokens in all.
    pub fn decode(rows: u64, context_sum: u64) -> Self {
        Self {
            kind: StepKind::Decode,
            tokens: rows,
            context: context_sum,
        }
    }

    /// The forward that computes, for each sequence, `tokens` new tokens after its
    /// `context` cached ones (`shares`: one `(tokens, context)` per sequence in the
    /// forward). Sequences that each carry one token make a decode batch of that many rows
    /// over their cached tokens; anything else is a prefill chunk of all the tokens, after
    /// the context `C` at which one row's chunk reads as many (query, key) pairs as every
    /// sequence's share does (`n·C + n(n+1)/2 = Σ nᵢ·ctxᵢ + nᵢ(nᵢ+1)/2`; exact for one
    /// sequence, and 0 when the shares are too short to need any). `None` without a token.
    ///
    /// The one rule by which every writer (the engine's batched decode, the preload's
    /// llama.cpp batches) names the shape of a forward over several slots.
    pub fn of_shares(shares: impl IntoIterator<Item = (u64, u64)>) -> Option<Self> {
        let (mut n, mut rows, mut ctx_sum, mut pairs) = (0u64, 0u64, 0u64, 0u128);
        let mut one_each = true;
        for (k, ctx) in shares {
            if k == 0 {
                continue;
            }
            n = n.saturating_add(k);
            rows += 1;
            one_each &= k == 1;
            ctx_sum = ctx_sum.saturating_add(ctx);
            pairs += u128::from(k) * u128::from(ctx) + u128::from(k) * u128::from(k + 1) / 2;
        }
        if n == 0 {
            return None;
        }
        if one_each {
            return Some(Self::decode(rows, ctx_sum));
        }
        let own = u128::from(n) * u128::from(n + 1) / 2;
        let context = (pairs.saturating_sub(own) + u128::from(n / 2)) / u128::from(n);
        Some(Self::prefill(n, u64::try_from(context).unwrap_or(u64::MAX)))
    }

    /// (query, key) pairs the step's attention reads.
    pub fn attended(&self) -> f64 {
        let n = self.tokens as f64;
        let ctx = self.context as f64;
        match self.kind {
            StepKind::Prefill => n * ctx + n * (n + 1.0) / 2.0,
            StepKind::Decode => ctx + n,
        }
    }

    fn features(&self) -> Features {
        Features {
            steps: 1.0,
            tokens: self.tokens as f64,
            attended: self.attended(),
        }
    }

    /// The features of every step from this one (included) to the end of a phase with
    /// `remaining` tokens left for the slot, `tokens` per step, context growing as the
    /// tokens go in: in closed form, since the model is linear in its features.
    fn remaining_features(&self, remaining: u64) -> Features {
        let r = remaining as f64;
        let ctx = self.context as f64;
        match self.kind {
            StepKind::Prefill => {
                let n = self.tokens.max(1);
                Features {
                    steps: remaining.div_ceil(n) as f64,
                    tokens: r,
                    // Token j (0-based) of the rest attends ctx + j + 1 positions, however
                    // the rest is cut into chunks.
                    attended: r * ctx + r * (r + 1.0) / 2.0,
                }
            }
            StepKind::Decode => {
                // One token per row per step for `remaining` steps; every row's cache grows
                // by one per step (the batch is assumed to keep its rows).
                let rows = self.tokens.max(1) as f64;
                Features {
                    steps: r,
                    tokens: r * rows,
                    attended: r * (ctx + rows) + rows * r * (r - 1.0) / 2.0,
                }
            }
        }
    }
}

/// Unscaled feature sums of one or more steps.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Features {
    steps: f64,
    tokens: f64,
    attended: f64,
}

/// Feature scales per kind (tokens, attended pairs): a step's features divided by these
/// are of order 1 for typical steps (a prefill chunk of 64-2048 tokens at a position of
/// thousands; a decode batch of 1-16 rows of thousands of cached tokens), so that the
/// least squares stay well conditioned.
const PREFILL_SCALE: (f64, f64) = (64.0, 65_536.0);
const DECODE_SCALE: (f64, f64) = (1.0, 4_096.0);
const NS_PER_MS: f64 = 1e6;

impl Features {
    fn scaled(&self, kind: StepKind) -> [f64; 3] {
        let (tokens, attended) = match kind {
            StepKind::Prefill => PREFILL_SCALE,
            StepKind::Decode => DECODE_SCALE,
        };
        [self.steps, self.tokens / tokens, self.attended / attended]
    }
}

/// The knobs of the model, with their defaults and reasons.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ModelConfig {
    /// Forgetting factor λ of the least squares and of the error mean. Default **0.95**: the
    /// last ~20 steps of a kind weigh most, so a CPU hog or a thermal slowdown is learnt
    /// within a second of decode, while one prefill's 14 chunks still fit one fit.
    pub forgetting: f64,
    /// The constant ridge added to the normal equations, per scaled feature (fixed cost,
    /// tokens, attended pairs). Default **1e-3, 1e-3, 1e-2**: small enough that the first
    /// step is fitted almost exactly, and large enough that the attention coefficient is
    /// learnt only from steps whose contexts differ (a decode's context grows by one per
    /// step, in step with any drift in time such as a CPU hog starting: without the ridge,
    /// that drift would be taken for attention cost and extrapolated).
    pub ridge: [f64; 3],
    /// Checked predictions before the model states an error bound. Default **3**.
    pub min_checked: u32,
    /// A finished step longer than this many times a confident prediction is taken for a
    /// stall and left out. Default **8** (the stall verdict's factor is larger).
    pub outlier_factor: f64,
    /// Outliers in a row after which they are learnt anyway. Default **3**.
    pub outliers_to_accept: u32,
    /// Forgetting factor of the slow decode fit whose attention cost the fast decode fits'
    /// ridge pulls toward (see "The attention cost of decode" in the module docs). Default
    /// **0.998**: some 500 steps, many requests' contexts.
    pub slow_forgetting: f64,
    /// Forgetting factor of the level at which the slow decode fit predicts the rest of a
    /// phase (see "The slow fit's shape at the recent level" in the module docs). Default
    /// **0.995**: some 200 steps, so that a burst of slow steps moves a long generation's
    /// end by a fraction of the burst. Replayed on the recorded traces, 0.99 gave a mean
    /// error of 8.6% and 0.995 8.0%.
    pub level_forgetting: f64,
}

impl Default for ModelConfig {
    fn default() -> Self {
        Self {
            forgetting: 0.95,
            ridge: [1e-3, 1e-3, 1e-2],
            min_checked: 3,
            outlier_factor: 8.0,
            outliers_to_accept: 3,
            slow_forgetting: 0.998,
            level_forgetting: 0.995,
        }
    }
}

/// A predicted duration and how sure the model is of it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Estimate {
    /// Predicted duration, ns (at least 1).
    pub ns: u64,
    /// Relative error bound (0.2 = ±20%), once the model has checked enough predictions.
    pub rel_error: Option<f64>,
}

impl Estimate {
    /// The error bound in parts per million, as format v1.2 publishes it (0 = none; a
    /// stated bound is at least 1 ppm).
    pub fn error_ppm(&self) -> u64 {
        match self.rel_error {
            Some(e) if e.is_finite() => (e * 1e6).clamp(1.0, u64::MAX as f64) as u64,
            Some(_) => u64::MAX,
            None => 0,
        }
    }
}

/// What [`CostModel::observe`] did with a finished step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Observed {
    /// The step was learnt.
    Learnt,
    /// The step was left out: far longer than a confident prediction (a stall).
    LeftOutAsStall,
    /// The step was left out: no tokens, or no duration.
    LeftOutEmpty,
}

/// Least squares with forgetting for one step kind, kept recursively in information form:
/// the forgotten normal equations `A = Σ λ^age·x·xᵀ`, `b = Σ λ^age·x·y`, solved with a
/// constant ridge `R` each time a prediction is needed.
#[derive(Debug, Clone, PartialEq)]
struct Fit {
    a: [[f64; 3]; 3],
    b: [f64; 3],
    theta: [f64; 3],
    /// What the ridge pulls the attention coefficient toward (the others are pulled toward
    /// 0): 0, but for a fast decode fit's, the slow fit's attention cost.
    attention_prior: f64,
    samples: u64,
    checked: u32,
    mean_sq_error: f64,
    outliers_in_row: u32,
    /// The model's count of learnt decode steps when this fit last learnt one (a fit by
    /// batch size: whether it is fresh, [`CostModel::fresh_fit`]).
    learnt_at: u64,
}

impl Fit {
    fn new() -> Self {
        Self {
            a: [[0.0; 3]; 3],
            b: [0.0; 3],
            theta: [0.0; 3],
            attention_prior: 0.0,
            samples: 0,
            checked: 0,
            mean_sq_error: 0.0,
            outliers_in_row: 0,
            learnt_at: 0,
        }
    }

    /// Predicted ms for scaled features `x`; None before the first sample or when the fit
    /// says nothing sensible (not positive, not finite).
    fn predict_ms(&self, x: &[f64; 3]) -> Option<f64> {
        if self.samples == 0 {
            return None;
        }
        let y = dot(&self.theta, x);
        (y.is_finite() && y > 0.0).then_some(y)
    }

    fn rel_error(&self, cfg: &ModelConfig) -> Option<f64> {
        (self.checked >= cfg.min_checked).then(|| 2.0 * self.mean_sq_error.sqrt())
    }

    /// A step predicted at `predicted` ms took `y`: its relative residual enters the
    /// weighted mean of the squared errors.
    fn record_error(&mut self, predicted: f64, y: f64, cfg: &ModelConfig) {
        let e = (y - predicted) / predicted;
        self.mean_sq_error = if self.checked == 0 {
            e * e
        } else {
            cfg.forgetting * self.mean_sq_error + (1.0 - cfg.forgetting) * e * e
        };
        self.checked = self.checked.saturating_add(1);
    }

    /// Learns a step of features `x` that took `y` ms, its prediction checked first once
    /// the fit has a sample (no warm-up, no outlier rule: a fit by batch size, fed what
    /// the kind's fit accepted).
    fn learn(&mut self, x: &[f64; 3], y: f64, cfg: &ModelConfig) {
        if let Some(predicted) = self.predict_ms(x) {
            self.record_error(predicted, y, cfg);
        }
        self.update(x, y, cfg.forgetting, cfg);
    }

    /// Drops what the normal equations hold (the sample and check counts stay).
    fn forget(&mut self) {
        self.a = [[0.0; 3]; 3];
        self.b = [0.0; 3];
    }

    /// Learns a step of features `x` that took `y` ms, the older ones forgotten by
    /// `lambda`.
    fn update(&mut self, x: &[f64; 3], y: f64, lambda: f64, cfg: &ModelConfig) {
        self.accumulate(x, y, lambda);
        self.resolve(cfg);
    }

    /// Adds a step of features `x` that took `y` ms to the normal equations, the older ones
    /// forgotten by `lambda`, without solving them: [`resolve`](Self::resolve) does.
    fn accumulate(&mut self, x: &[f64; 3], y: f64, lambda: f64) {
        for i in 0..3 {
            for j in 0..3 {
                self.a[i][j] = lambda * self.a[i][j] + x[i] * x[j];
            }
            self.b[i] = lambda * self.b[i] + x[i] * y;
        }
        self.samples += 1;
    }

    /// Solves the normal equations into the coefficients.
    fn resolve(&mut self, cfg: &ModelConfig) {
        match self.solve(cfg) {
            Some(theta) => self.theta = theta,
            // Cannot happen with a positive ridge and finite inputs; never keep a poisoned
            // fit: it starts over.
            None => *self = Self::new(),
        }
    }

    /// The coefficients of the normal equations with the ridge; `None` when they are not
    /// finite.
    fn solve(&self, cfg: &ModelConfig) -> Option<[f64; 3]> {
        let (m, rhs) = self.ridged(cfg);
        solve_finite(m, rhs)
    }

    /// The normal equations with the ridge, pulled toward 0 but for the attention
    /// coefficient's centre ([`Fit::set_attention_prior`]).
    fn ridged(&self, cfg: &ModelConfig) -> ([[f64; 3]; 3], [f64; 3]) {
        let mut m = self.a;
        for (i, row) in m.iter_mut().enumerate() {
            row[i] += cfg.ridge[i];
        }
        let mut rhs = self.b;
        rhs[2] += cfg.ridge[2] * self.attention_prior;
        (m, rhs)
    }

    /// How widely the attention feature of the fit's steps varies beyond what the fixed and
    /// per-token features explain: `√(S / n)`, where `S` is the Schur complement of the
    /// normal matrix's attention entry (the information the steps hold about the attention
    /// cost) and `n` the steps' weight. In scaled units (4,096 pairs for decode); 0 for a
    /// fit without steps.
    fn attention_spread(&self, cfg: &ModelConfig) -> f64 {
        let n = self.a[0][0];
        // The top-left 2x2 block with the ridge, so that one batch size (rows constant,
        // the block singular) still has an inverse.
        let (m, _) = self.ridged(cfg);
        let (p, q, r) = (m[0][0], m[0][1], m[1][1]);
        let det = p * r - q * q;
        if n <= 0.0 || det <= 0.0 {
            return 0.0;
        }
        let (u, v) = (m[0][2], m[1][2]);
        // [u v] · inverse · [u v]ᵀ
        let explained = (r * u * u - 2.0 * q * u * v + p * v * v) / det;
        let s = (self.a[2][2] - explained).max(0.0);
        (s / n).sqrt()
    }

    /// Solves the normal equations into the coefficients with the attention cost at least 0:
    /// when the plain solution's is negative, the one without attention cost (the least
    /// squares of the fixed and per-token costs alone).
    fn resolve_attention_at_least_zero(&mut self, cfg: &ModelConfig) {
        self.resolve(cfg);
        if self.theta[2] >= 0.0 {
            return;
        }
        // The third unknown pinned to 0: its column out of the first two equations, and
        // the equation `c = 0` in place of the third.
        let (mut m, mut rhs) = self.ridged(cfg);
        m[0][2] = 0.0;
        m[1][2] = 0.0;
        m[2] = [0.0, 0.0, 1.0];
        rhs[2] = 0.0;
        if let Some(theta) = solve_finite(m, rhs) {
            self.theta = theta;
        }
    }

    /// Pulls the attention coefficient toward `c` from now on (re-solved at once when the
    /// fit has samples). A move of less than [`PRIOR_TOLERANCE`] of the current centre is
    /// ignored: the slow fit's `c` moves a little at every decode step, and re-solving
    /// every fast decode fit each time would be work on the engine's per-token path for
    /// nothing a prediction would show.
    fn set_attention_prior(&mut self, c: f64, cfg: &ModelConfig) {
        let now = self.attention_prior;
        if (c - now).abs() <= PRIOR_TOLERANCE * now.abs() {
            return;
        }
        self.attention_prior = c;
        if self.samples > 0 {
            if let Some(theta) = self.solve(cfg) {
                self.theta = theta;
            }
        }
    }
}

fn dot(a: &[f64; 3], b: &[f64; 3]) -> f64 {
    a[0] * b[0] + a[1] * b[1] + a[2] * b[2]
}

/// [`solve3`], when every coefficient it gives is finite.
fn solve_finite(m: [[f64; 3]; 3], b: [f64; 3]) -> Option<[f64; 3]> {
    solve3(m, b).filter(|theta| theta.iter().all(|t| t.is_finite()))
}

/// Solves `m·θ = b` by Gaussian elimination with partial pivoting; None when `m` is
/// singular.
fn solve3(mut m: [[f64; 3]; 3], mut b: [f64; 3]) -> Option<[f64; 3]> {
    for col in 0..3 {
        let pivot = (col..3).max_by(|&i, &j| m[i][col].abs().total_cmp(&m[j][col].abs()))?;
        // A zero (or NaN) pivot: singular.
        if m[pivot][col].abs().partial_cmp(&0.0) != Some(std::cmp::Ordering::Greater) {
            return None;
        }
        m.swap(col, pivot);
        b.swap(col, pivot);
        let pivot_row = m[col];
        for row in col + 1..3 {
            let f = m[row][col] / pivot_row[col];
            for (v, p) in m[row].iter_mut().zip(pivot_row).skip(col) {
                *v -= f * p;
            }
            b[row] -= f * b[col];
        }
    }
    let mut x = [0.0; 3];
    for row in (0..3).rev() {
        let rest: f64 = (row + 1..3).map(|k| m[row][k] * x[k]).sum();
        x[row] = (b[row] - rest) / m[row][row];
    }
    Some(x)
}

/// One writer's cost model: a fit per [`StepKind`]. See the [module docs](self).
#[derive(Debug, Clone, PartialEq)]
pub struct CostModel {
    fits: [Fit; 2],
    /// Decode steps again, one fit per batch size (index `rows - 1`, up to
    /// [`ROW_FITS`] rows): see [`CostModel::fit_for`].
    decode_by_rows: Vec<Fit>,
    /// Decode steps once more, forgotten slowly: the attention cost the fast decode fits
    /// are pulled toward (see "The attention cost of decode" in the module docs).
    decode_slow: Fit,
    /// Decode steps learnt by the fits by batch size (the clock of [`Fit::learnt_at`]).
    decode_learnt: u64,
    /// Whether the slow fit's shape is known ([`Self::slow_shape_known`]), decided each
    /// time it is solved.
    slow_known: bool,
    /// The level of the recent decode steps against the slow fit (see "The slow fit's
    /// shape at the recent level" in the module docs).
    level: Level,
    config: ModelConfig,
}

/// The recent decode steps' durations over the slow fit's predictions for them, weighted
/// by age: fast (the fast fits' forgetting) for a step of a stale size, slow
/// ([`ModelConfig::level_forgetting`]) for the rest of a phase. 1 before any step.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Level {
    step: f64,
    phase: f64,
}

/// What a decode estimate is for: the step about to run, or the rest of a phase.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Horizon {
    Step,
    Phase,
}

/// What one fit has learnt, as plain numbers (see [`Learnt`]).
#[derive(Debug, Clone, Copy, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct LearntFit {
    /// The forgotten normal equations' matrix `A` (scaled features).
    pub a: [[f64; 3]; 3],
    /// Their right-hand side `b`.
    pub b: [f64; 3],
    /// Steps learnt.
    pub samples: u64,
    /// Predictions checked against their step.
    pub checked: u32,
    /// The weighted mean of the checked relative residuals squared.
    pub mean_sq_error: f64,
}

/// What a [`CostModel`] has learnt, as numbers a writer may keep between runs of the same
/// model on the same device and threads ([`CostModel::learnt`], [`CostModel::with_learnt`]),
/// so that its first request after a restart is predicted from the start: the prefill
/// fit, the decode fit, then the decode fits by batch size.
#[derive(Debug, Clone, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(transparent))]
pub struct Learnt {
    /// The fits, in the model's order.
    pub fits: Vec<LearntFit>,
}

/// Batch sizes the model keeps a decode fit of their own for (larger batches are
/// predicted by the decode fit of every size).
pub const ROW_FITS: usize = 16;

/// Decode steps the slow fit needs before its attention cost is used (64).
pub const SLOW_MIN_SAMPLES: u64 = 64;

/// The slow fit is solved, and the fast decode fits re-centred on its attention cost, once
/// every this many decode steps (16): it remembers some 500, so solving it at every step
/// would cost the engine's per-token path some 1,500 instructions for a slope that moves
/// by a fraction of a percent between two solves (`scripts/bench-publish-cost.sh`).
pub const SLOW_SOLVE_EVERY: u64 = 16;

/// The spread of the slow decode fit's contexts (the weighted standard deviation of its
/// steps' attended pairs that its fixed and per-row costs do not explain, in units of
/// 4,096 pairs) from which its attention cost and shape are used: 0.04, some 160 pairs.
/// One generation's steps alone reach it after some 600 tokens; requests at other
/// contexts, or batches of other sizes, sooner. Below it, a drift of the machine over the
/// steps of one context range is taken for attention cost and extrapolated
/// (`one_generation_s_drift_is_not_taken_for_attention_cost`: 900 steps priced 26% long
/// after a slowdown over the first 100 without the condition). One live first generation,
/// during a build, was priced 3x too long at a tenth; its steps were not recorded, so that
/// this was its cause is likely, not shown. On the recorded traces, 0.03 to 0.0625 replay
/// within 0.3 points of each other.
pub const SLOW_MIN_SPREAD: f64 = 0.04;

/// The relative move of the slow fit's attention cost below which the fast decode fits
/// keep their centre (1 %).
const PRIOR_TOLERANCE: f64 = 0.01;

impl Default for CostModel {
    fn default() -> Self {
        Self::new(ModelConfig::default())
    }
}

impl CostModel {
    /// An empty model (it predicts nothing until its first step of a kind).
    pub fn new(config: ModelConfig) -> Self {
        Self {
            fits: [Fit::new(), Fit::new()],
            decode_by_rows: vec![Fit::new(); ROW_FITS],
            decode_slow: Fit::new(),
            decode_learnt: 0,
            slow_known: false,
            level: Level {
                step: 1.0,
                phase: 1.0,
            },
            config,
        }
    }

    /// What it has learnt so far.
    pub fn learnt(&self) -> Learnt {
        let fits = self
            .fits
            .iter()
            .chain(&self.decode_by_rows)
            .chain([&self.decode_slow]);
        Learnt {
            fits: fits
                .map(|f| LearntFit {
                    a: f.a,
                    b: f.b,
                    samples: f.samples,
                    checked: f.checked,
                    mean_sq_error: f.mean_sq_error,
                })
                .collect(),
        }
    }

    /// A model of `config` that starts from `learnt` (a run of the same model on the same
    /// device and threads). `None` when `learnt` is not a model's: another number of fits,
    /// or a figure that is not finite, negative where it cannot be, or a matrix the ridge
    /// cannot solve (a foreign or damaged file). Its predictions then come from the start;
    /// its forgetting makes the new run's steps outweigh the old ones within some 20 steps.
    pub fn with_learnt(config: ModelConfig, learnt: &Learnt) -> Option<Self> {
        // Without the slow decode fit (an earlier writer's file), it starts empty.
        if !(2 + ROW_FITS..=3 + ROW_FITS).contains(&learnt.fits.len()) {
            return None;
        }
        let mut model = Self::new(config);
        let fits = model
            .fits
            .iter_mut()
            .chain(model.decode_by_rows.iter_mut())
            .chain([&mut model.decode_slow]);
        for (fit, l) in fits.zip(&learnt.fits) {
            let finite = l.a.iter().flatten().chain(&l.b).all(|x| x.is_finite());
            let sane = l.mean_sq_error.is_finite() && l.mean_sq_error >= 0.0;
            let diagonal = (0..3).all(|i| l.a[i][i] >= 0.0);
            if !(finite && sane && diagonal) {
                return None;
            }
            fit.a = l.a;
            fit.b = l.b;
            fit.samples = l.samples;
            fit.checked = l.checked;
            fit.mean_sq_error = l.mean_sq_error;
            if l.samples > 0 {
                fit.theta = fit.solve(&config)?;
            }
        }
        model.resolve_slow();
        Some(model)
    }

    /// The slow decode fit's attention cost, once it has seen enough steps at contexts
    /// spread enough ([`Self::slow_shape_known`]) and found it positive; 0 before.
    fn slow_attention(&self) -> f64 {
        let c = self.decode_slow.theta[2];
        if self.slow_shape_known() && c.is_finite() && c > 0.0 {
            c
        } else {
            0.0
        }
    }

    /// Whether the slow decode fit has seen enough steps ([`SLOW_MIN_SAMPLES`]) to be used.
    fn slow_ready(&self) -> bool {
        self.decode_slow.samples >= SLOW_MIN_SAMPLES
    }

    /// Whether the slow decode fit's shape may price steps and phases: it is ready, and its
    /// steps' contexts are spread widely enough that the attention cost is told from the
    /// fixed and per-row costs ([`Fit::attention_spread`] at least [`SLOW_MIN_SPREAD`]).
    fn slow_shape_known(&self) -> bool {
        self.slow_known
    }

    /// Solves the slow decode fit (its attention cost at least 0), decides whether its
    /// shape is known, and centres the fast decode fits on its attention cost.
    fn resolve_slow(&mut self) {
        self.decode_slow
            .resolve_attention_at_least_zero(&self.config);
        self.slow_known =
            self.slow_ready() && self.decode_slow.attention_spread(&self.config) >= SLOW_MIN_SPREAD;
        self.pull_decode_attention();
    }

    /// Decode steps a fast fit remembers, about: `1 / (1 − λ)` (20 at the default).
    fn remembered_steps(&self) -> u64 {
        (1.0 / (1.0 - self.config.forgetting).max(1e-6)).round() as u64
    }

    /// The fit of decode batches of `rows` rows, when it has learnt two steps and one of
    /// them among the last decode steps it would remember ([`Self::remembered_steps`]).
    fn fresh_fit(&self, rows: u64) -> Option<&Fit> {
        let i = usize::try_from(rows).ok()?.checked_sub(1)?;
        let fit = self.decode_by_rows.get(i)?;
        let age = self.decode_learnt.saturating_sub(fit.learnt_at);
        (fit.samples >= 2 && age <= self.remembered_steps()).then_some(fit)
    }

    /// The level to scale the slow decode fit's prediction by, when a decode estimate of
    /// `rows` rows for `horizon` comes from it (see "The slow fit's shape at the recent
    /// level" in the module docs); None when it comes from a fast fit.
    fn slow_level(&self, kind: StepKind, rows: u64, horizon: Horizon) -> Option<f64> {
        if kind != StepKind::Decode || !self.slow_shape_known() {
            return None;
        }
        match horizon {
            Horizon::Phase => Some(self.level.phase),
            Horizon::Step => self.fresh_fit(rows).is_none().then_some(self.level.step),
        }
    }

    /// Pulls every fast decode fit's attention cost toward the slow fit's.
    fn pull_decode_attention(&mut self) {
        let c = self.slow_attention();
        let cfg = self.config;
        let fast = std::iter::once(&mut self.fits[StepKind::Decode.index()])
            .chain(self.decode_by_rows.iter_mut());
        for fit in fast {
            fit.set_attention_prior(c, &cfg);
        }
    }

    /// The knobs it runs with.
    pub fn config(&self) -> &ModelConfig {
        &self.config
    }

    /// Steps of `kind` learnt so far.
    pub fn samples(&self, kind: StepKind) -> u64 {
        self.fits[kind.index()].samples
    }

    /// The relative error bound of `kind`'s predictions, once stated.
    pub fn rel_error(&self, kind: StepKind) -> Option<f64> {
        self.fits[kind.index()].rel_error(&self.config)
    }

    /// The fit that predicts steps of `kind` with `rows` rows: for a decode batch of a size
    /// seen in at least two recent steps, the fit of that size. The fit of every size
    /// forgets in some 20 steps; a batch that shrinks after hundreds of steps of another
    /// size (a serving engine's rows finish at different times) would otherwise be
    /// predicted from the wrong size's costs, when the fixed and per-row costs cannot be
    /// told apart from steps of one size.
    fn fit_for(&self, kind: StepKind, rows: u64) -> &Fit {
        let own = match kind {
            StepKind::Decode => usize::try_from(rows)
                .ok()
                .and_then(|r| r.checked_sub(1))
                .and_then(|i| self.decode_by_rows.get(i))
                .filter(|fit| fit.samples >= 2),
            StepKind::Prefill => None,
        };
        own.unwrap_or(&self.fits[kind.index()])
    }

    fn estimate(
        &self,
        kind: StepKind,
        rows: u64,
        f: &Features,
        horizon: Horizon,
    ) -> Option<Estimate> {
        let x = f.scaled(kind);
        let (ms, bound) = match self.slow_level(kind, rows, horizon) {
            // The kind's fit checks every decode step: its bound is that of the recent ones.
            Some(level) => (
                self.decode_slow.predict_ms(&x)? * level,
                &self.fits[kind.index()],
            ),
            None => {
                let fit = self.fit_for(kind, rows);
                (fit.predict_ms(&x)?, fit)
            }
        };
        let ns = (ms * NS_PER_MS).clamp(1.0, u64::MAX as f64) as u64;
        Some(Estimate {
            ns,
            rel_error: bound.rel_error(&self.config),
        })
    }

    /// How long a step of `shape` should take; None before the first step of its kind.
    pub fn predict(&self, shape: &StepShape) -> Option<Estimate> {
        self.estimate(shape.kind, shape.tokens, &shape.features(), Horizon::Step)
    }

    /// How long the rest of a phase should take, from the start of the step of `shape`
    /// (included) until `remaining` more tokens of the slot are done (`remaining` counts
    /// the step's own tokens for that slot), with the context growing as they go in.
    pub fn predict_remaining(&self, shape: &StepShape, remaining: u64) -> Option<Estimate> {
        if remaining == 0 {
            return None;
        }
        self.estimate(
            shape.kind,
            shape.tokens,
            &shape.remaining_features(remaining),
            Horizon::Phase,
        )
    }

    /// How long the rest of a decode phase should take for one row of a batch, from the
    /// start of the step in flight (included) until that row's `remaining` tokens are
    /// done, when the batch's other rows have `others` tokens left each: rows leave the
    /// batch as they finish theirs, so the steps get cheaper (no row joins: nobody knows
    /// when one will). `rows` holds every row's context now, `(context, remaining)`, this
    /// row's included, each growing by one token per step.
    pub fn predict_batch_remaining(&self, remaining: u64, rows: &[(u64, u64)]) -> Option<Estimate> {
        if remaining == 0 {
            return None;
        }
        // The moments rows leave, before this row's end: each segment between two of
        // them is a batch of constant rows.
        let mut ends: Vec<u64> = rows
            .iter()
            .map(|(_, r)| (*r).min(remaining))
            .filter(|r| *r > 0)
            .collect();
        ends.push(remaining);
        ends.sort_unstable();
        ends.dedup();
        // Each segment by the fit of its batch size; the bound is the widest of theirs.
        let mut total = Estimate {
            ns: 0,
            rel_error: Some(0.0),
        };
        let mut from = 0u64;
        for to in ends {
            let alive = rows.iter().filter(|(_, r)| *r > from);
            let (m, ctx) = alive.fold((0u64, 0u64), |(m, c), (ctx, _)| {
                (m + 1, c.saturating_add(ctx.saturating_add(from)))
            });
            let shape = StepShape::decode(m.max(1), ctx);
            let e = self.estimate(
                StepKind::Decode,
                shape.tokens,
                &shape.remaining_features(to - from),
                Horizon::Phase,
            )?;
            total.ns = total.ns.saturating_add(e.ns);
            total.rel_error = match (total.rel_error, e.rel_error) {
                (Some(a), Some(b)) => Some(a.max(b)),
                _ => None,
            };
            from = to;
        }
        Some(total)
    }

    /// Learns from a finished, uninterrupted step of `shape` that took `duration_ns`.
    pub fn observe(&mut self, shape: &StepShape, duration_ns: u64) -> Observed {
        if shape.tokens == 0 || duration_ns == 0 {
            return Observed::LeftOutEmpty;
        }
        let cfg = self.config;
        let x = shape.features().scaled(shape.kind);
        let y = duration_ns as f64 / NS_PER_MS;
        let fit = &mut self.fits[shape.kind.index()];
        // A prediction made from the warm-up step alone says nothing of the model's error.
        let from_warm_up = fit.samples < 2;
        if let Some(predicted) = fit.predict_ms(&x).filter(|_| !from_warm_up) {
            let confident = fit.rel_error(&cfg).is_some();
            if confident && y > cfg.outlier_factor * predicted {
                fit.outliers_in_row += 1;
                if fit.outliers_in_row < cfg.outliers_to_accept {
                    return Observed::LeftOutAsStall;
                }
            }
            fit.record_error(predicted, y, &cfg);
        }
        fit.outliers_in_row = 0;
        if fit.samples == 1 {
            // The kind's first step was a warm-up (see the module docs): it is forgotten
            // now that a second one is there.
            fit.forget();
        }
        fit.update(&x, y, cfg.forgetting, &cfg);
        // The fits by batch size start after the kind's warm-up step, and check each step
        // from their second on: with one size only, each is the kind's fit exactly.
        if shape.kind == StepKind::Decode && fit.samples >= 2 {
            let by_rows = usize::try_from(shape.tokens - 1)
                .ok()
                .and_then(|i| self.decode_by_rows.get_mut(i));
            self.decode_learnt += 1;
            if let Some(by_rows) = by_rows {
                by_rows.learn(&x, y, &cfg);
                by_rows.learnt_at = self.decode_learnt;
            }
            self.learn_level(&x, y);
            self.decode_slow.accumulate(&x, y, cfg.slow_forgetting);
            if self.decode_slow.samples % SLOW_SOLVE_EVERY == 0 {
                self.resolve_slow();
            }
        }
        Observed::Learnt
    }

    /// A decode step of scaled features `x` took `y` ms: the levels move toward its
    /// duration over the slow fit's prediction for it, once that fit is used.
    fn learn_level(&mut self, x: &[f64; 3], y: f64) {
        if !self.slow_ready() {
            return;
        }
        let Some(predicted) = self.decode_slow.predict_ms(x) else {
            return;
        };
        // A step far off the slow fit's prediction (a stall the outlier rule let through,
        // a slow fit not yet sensible for this shape) moves the levels no further than the
        // outlier factor.
        let cap = self.config.outlier_factor;
        let r = (y / predicted).clamp(1.0 / cap, cap);
        let (fast, slow) = (self.config.forgetting, self.config.level_forgetting);
        self.level.step = fast * self.level.step + (1.0 - fast) * r;
        self.level.phase = slow * self.level.phase + (1.0 - slow) * r;
    }

    /// The format v1.2 prediction words for a step of `shape` that started at
    /// `step_start_ns` in the phase that started at `phase_start_ns`, with `remaining`
    /// tokens of the phase left for the slot (the step's own included; `None` when the
    /// phase's total is unknown). Fields the model cannot predict yet are 0 (unknown).
    pub fn prediction(
        &self,
        shape: &StepShape,
        step_start_ns: u64,
        phase_start_ns: u64,
        remaining: Option<u64>,
    ) -> Prediction {
        let step = self.predict(shape);
        let rest = remaining.and_then(|r| self.predict_remaining(shape, r));
        Prediction {
            step_expected_ns: step.map_or(0, |e| e.ns),
            step_start_ns,
            task_expected_end_ns: rest.map_or(0, |e| step_start_ns.saturating_add(e.ns)),
            phase_start_ns,
            error_ppm: step.map_or(0, |e| e.error_ppm()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    /// A "true" engine: 2 ms per forward, 0.1 ms per token, 40 ns per attended pair.
    fn truth(shape: &StepShape) -> u64 {
        (2.0 * MS as f64 + 0.1 * MS as f64 * shape.tokens as f64 + 40.0 * shape.attended()) as u64
    }

    fn rel(a: u64, b: u64) -> f64 {
        (a as f64 - b as f64).abs() / b as f64
    }

    #[test]
    fn nothing_is_predicted_before_the_first_step() {
        let m = CostModel::default();
        assert_eq!(m.predict(&StepShape::decode(1, 10)), None);
        let p = m.prediction(&StepShape::decode(1, 10), 5, 3, Some(100));
        assert_eq!(
            (p.step_expected_ns, p.task_expected_end_ns, p.error_ppm),
            (0, 0, 0)
        );
        assert_eq!((p.step_start_ns, p.phase_start_ns), (5, 3));
    }

    #[test]
    fn the_first_step_is_fitted_and_confidence_comes_after_checks() {
        let mut m = CostModel::default();
        let s = StepShape::prefill(512, 0);
        assert_eq!(m.observe(&s, truth(&s)), Observed::Learnt);
        let e = m.predict(&s).unwrap();
        assert!(rel(e.ns, truth(&s)) < 0.01, "{e:?}");
        assert_eq!(e.rel_error, None, "one sample: no bound yet");
        // The second step's prediction comes from the warm-up step alone and is not
        // checked; the third, fourth and fifth are.
        learn_chunks(&mut m, 1..5);
        assert!(m.rel_error(StepKind::Prefill).is_some());
        assert_eq!(m.rel_error(StepKind::Decode), None, "kinds are apart");
    }

    /// Learns the true durations of the 512-token chunks `chunks` of one prompt.
    fn learn_chunks(m: &mut CostModel, chunks: std::ops::Range<u64>) {
        for i in chunks {
            let s = StepShape::prefill(512, 512 * i);
            m.observe(&s, truth(&s));
        }
    }

    /// 512-token chunks 3 to 13 of one prompt are each predicted within 5% of the truth
    /// before the model learns them.
    fn assert_chunks_3_to_13_predicted(m: &mut CostModel) {
        for i in 3..14 {
            let s = StepShape::prefill(512, 512 * i);
            let e = m.predict(&s).unwrap();
            assert!(
                rel(e.ns, truth(&s)) < 0.05,
                "chunk {i}: {} vs {}",
                e.ns,
                truth(&s)
            );
            m.observe(&s, truth(&s));
        }
    }

    #[test]
    fn prefill_chunks_that_grow_with_context_are_predicted_after_a_few() {
        let mut m = CostModel::default();
        // 14 chunks of 512: the first three teach the model, the rest are checked.
        learn_chunks(&mut m, 0..3);
        assert_chunks_3_to_13_predicted(&mut m);
        // The rate of the first chunks would be far off for the last one.
        let last = StepShape::prefill(512, 512 * 13);
        let first = StepShape::prefill(512, 0);
        assert!(truth(&last) > 2 * truth(&first));
    }

    #[test]
    fn a_slow_first_step_does_not_bend_the_fit() {
        let mut m = CostModel::default();
        // The warm-up: mapped weights touched for the first time, first allocations.
        let first = StepShape::prefill(512, 0);
        m.observe(&first, 3 * truth(&first));
        let second = StepShape::prefill(512, 512);
        assert!(m.predict(&second).is_some(), "the warm-up alone predicts");
        learn_chunks(&mut m, 1..3);
        assert_chunks_3_to_13_predicted(&mut m);
        // Kept in the fit, the warm-up would have bent it: plain least squares fed the same
        // steps (the warm-up rule lives in `observe`, not in `Fit::update`) is off at the
        // fourth chunk.
        let mut kept = Fit::new();
        let cfg = ModelConfig::default();
        for i in 0..3 {
            let s = StepShape::prefill(512, 512 * i);
            let y = if i == 0 { 3 * truth(&s) } else { truth(&s) };
            kept.update(
                &s.features().scaled(StepKind::Prefill),
                y as f64 / NS_PER_MS,
                cfg.forgetting,
                &cfg,
            );
        }
        let fourth = StepShape::prefill(512, 512 * 3);
        let bent = kept
            .predict_ms(&fourth.features().scaled(StepKind::Prefill))
            .unwrap();
        assert!(
            rel((bent * NS_PER_MS) as u64, truth(&fourth)) > 0.1,
            "{bent} ms vs {} ns",
            truth(&fourth)
        );
    }

    #[test]
    fn the_remaining_phase_sums_context_growth() {
        let mut m = CostModel::default();
        learn_chunks(&mut m, 0..6);
        // 7,000 tokens from 3,072: chunks of 512 (the last one 344 tokens).
        let from = StepShape::prefill(512, 3072);
        let mut real = 0;
        let mut ctx = 3072;
        let mut left = 7000 - 3072;
        while left > 0 {
            let n = left.min(512);
            real += truth(&StepShape::prefill(n, ctx));
            ctx += n;
            left -= n;
        }
        let e = m.predict_remaining(&from, 7000 - 3072).unwrap();
        assert!(rel(e.ns, real) < 0.05, "{} vs {real}", e.ns);

        let mut m = CostModel::default();
        for c in 100..120 {
            let s = StepShape::decode(1, c);
            m.observe(&s, truth(&s));
        }
        let from = StepShape::decode(1, 7000);
        let real: u64 = (0..1024)
            .map(|k| truth(&StepShape::decode(1, 7000 + k)))
            .sum();
        // Decode contexts seen so far are far shorter; the prediction still has to be
        // within the stated bound of the truth after it saw long ones.
        for c in [6000u64, 6500, 7000] {
            let s = StepShape::decode(1, c);
            m.observe(&s, truth(&s));
        }
        let e = m.predict_remaining(&from, 1024).unwrap();
        assert!(rel(e.ns, real) < 0.10, "{} vs {real}", e.ns);
        assert_eq!(m.predict_remaining(&from, 0), None);
    }

    #[test]
    fn a_stall_is_left_out_but_a_lasting_change_is_learnt() {
        let mut m = CostModel::default();
        for c in 0..30 {
            let s = StepShape::decode(1, 100 + c);
            m.observe(&s, truth(&s));
        }
        let s = StepShape::decode(1, 130);
        let before = m.predict(&s).unwrap().ns;
        assert_eq!(m.observe(&s, 50 * truth(&s)), Observed::LeftOutAsStall);
        assert_eq!(
            m.predict(&s).unwrap().ns,
            before,
            "the stall changed nothing"
        );
        // A hog that triples every step: learnt, and within a few dozen steps the
        // predictions follow it.
        for c in 0..60 {
            let s = StepShape::decode(1, 131 + c);
            assert_eq!(m.observe(&s, 3 * truth(&s)), Observed::Learnt);
        }
        let s = StepShape::decode(1, 200);
        let got = m.predict(&s).unwrap().ns;
        assert!(rel(got, 3 * truth(&s)) < 0.05, "{got} vs {}", 3 * truth(&s));
        // A change far beyond the outlier factor that lasts is learnt after a few.
        let mut results = Vec::new();
        for c in 0..4 {
            let s = StepShape::decode(1, 300 + c);
            results.push(m.observe(&s, 100 * truth(&s)));
        }
        assert_eq!(
            results,
            [
                Observed::LeftOutAsStall,
                Observed::LeftOutAsStall,
                Observed::Learnt,
                Observed::Learnt
            ]
        );
        assert_eq!(
            m.observe(&StepShape::decode(0, 5), 10),
            Observed::LeftOutEmpty
        );
        assert_eq!(
            m.observe(&StepShape::decode(1, 5), 0),
            Observed::LeftOutEmpty
        );
    }

    #[test]
    fn noisy_steps_give_a_bound_that_covers_them() {
        let mut m = CostModel::default();
        // +-10% deterministic noise around the truth.
        let noise = [1.0, 1.1, 0.9, 1.05, 0.95, 1.08, 0.92];
        for k in 0..200u64 {
            let s = StepShape::decode(1, 500 + k);
            let y = (truth(&s) as f64 * noise[(k % 7) as usize]) as u64;
            m.observe(&s, y);
        }
        let bound = m.rel_error(StepKind::Decode).unwrap();
        assert!((0.05..0.4).contains(&bound), "bound {bound}");
        let e = m.predict(&StepShape::decode(1, 700)).unwrap();
        assert_eq!(e.error_ppm(), (bound * 1e6) as u64);
    }

    #[test]
    fn decode_only_history_does_not_wind_up() {
        // Thousands of identical-shape steps under forgetting: P must stay bounded and the
        // prediction right.
        let mut m = CostModel::default();
        for _ in 0..10_000 {
            let s = StepShape::decode(1, 64);
            m.observe(&s, truth(&s));
        }
        let s = StepShape::decode(1, 64);
        assert!(rel(m.predict(&s).unwrap().ns, truth(&s)) < 1e-3);
        let fit = &m.fits[StepKind::Decode.index()];
        assert!(
            fit.theta.iter().all(|t| t.is_finite() && t.abs() < 1e3),
            "{:?}",
            fit.theta
        );
    }

    #[test]
    fn a_long_generation_s_later_steps_are_priced_from_many_requests_contexts() {
        // SmolLM2's shape: 10 ms a step, 3 us per cached token read.
        let t = |s: &StepShape| (10.0 * MS as f64 + 3_000.0 * s.attended()) as u64;
        let generate = |m: &mut CostModel, from: u64, n: u64| {
            for k in 0..n {
                let s = StepShape::decode(1, from + k);
                m.observe(&s, t(&s));
            }
        };
        let rest_from = |m: &CostModel, at: u64, left: u64| {
            let truth: u64 = (0..left).map(|k| t(&StepShape::decode(1, at + k))).sum();
            let predicted = m
                .predict_remaining(&StepShape::decode(1, at), left)
                .unwrap();
            (predicted.ns, truth)
        };
        // Earlier requests at other contexts, then 100 tokens of a new one from 300.
        let mut m = CostModel::default();
        for from in [0, 600, 1_200, 0, 600, 1_200] {
            generate(&mut m, from, 100);
        }
        generate(&mut m, 300, 100);
        let (predicted, truth) = rest_from(&m, 400, 900);
        assert!(
            rel(predicted, truth) < 0.03,
            "{predicted} vs {truth} ns: the slope comes from the slow fit"
        );
        // The same generation after 60 steps of one request only (the slow fit not used
        // yet): its end is predicted far too early, the fast fit's slope held at 0.
        let mut fresh = CostModel::default();
        generate(&mut fresh, 300, 60);
        let (predicted, truth) = rest_from(&fresh, 360, 940);
        assert!(
            (predicted as f64) < 0.9 * truth as f64,
            "{predicted} vs {truth} ns"
        );
    }

    /// SmolLM2-like decode batches: 8 ms a forward, 1.5 ms a row, 3 us per cached token
    /// read, on a machine running at `speed` (1 = as fast as at the start).
    fn batch_truth(s: &StepShape, speed: f64) -> u64 {
        ((8.0 * MS as f64 + 1.5 * MS as f64 * s.tokens as f64 + 3_000.0 * s.attended()) * speed)
            as u64
    }

    /// What `n` one-row decode steps from context `ctx` on take, at `speed`.
    fn rest_truth(ctx: u64, n: u64, speed: f64) -> u64 {
        (0..n)
            .map(|k| batch_truth(&StepShape::decode(1, ctx + k), speed))
            .sum()
    }

    /// `steps` decode steps of `rows` rows from contexts `ctx` each, at `speed`.
    fn run_batch(m: &mut CostModel, rows: u64, ctx: u64, steps: u64, speed: f64) {
        for k in 0..steps {
            let s = StepShape::decode(rows, rows * (ctx + k));
            m.observe(&s, batch_truth(&s, speed));
        }
    }

    #[test]
    fn a_batch_size_whose_fit_is_stale_is_predicted_at_the_machine_s_level_now() {
        let mut m = CostModel::default();
        // Batches of one and of four rows in turn (the slow fit learns the shape), then 60
        // steps of four rows while the machine slows to 1.25x its speed.
        for ctx in [100, 600, 300, 900, 200, 500] {
            run_batch(&mut m, 1, ctx, 30, 1.0);
            run_batch(&mut m, 4, ctx, 30, 1.0);
        }
        run_batch(&mut m, 4, 400, 60, 1.25);
        // 3 of the 4 rows leave: the next one-row step.
        let next = StepShape::decode(1, 600);
        let truth = batch_truth(&next, 1.25);
        // Within 8%: the 60 slower 4-row steps also moved the slow fit's shape a little.
        let e = m.predict(&next).unwrap();
        assert!(rel(e.ns, truth) < 0.08, "{} vs {truth}", e.ns);
        // The one-row fit alone still holds the start's level.
        let stale = m.decode_by_rows[0].predict_ms(&next.features().scaled(StepKind::Decode));
        let stale = (stale.unwrap() * NS_PER_MS) as u64;
        assert!(rel(stale, truth) > 0.15, "{stale} vs {truth}");
    }

    #[test]
    fn a_burst_of_slow_steps_moves_the_end_of_a_long_phase_by_a_fraction_of_it() {
        let mut m = CostModel::default();
        for ctx in [100, 900, 500] {
            run_batch(&mut m, 1, ctx, 100, 1.0);
        }
        // 15 steps at 1.5x, then the rest of a 1,000-token generation at 700.
        run_batch(&mut m, 1, 685, 15, 1.5);
        let at = StepShape::decode(1, 700);
        let rest = rest_truth(700, 500, 1.0);
        let p = m.predict_remaining(&at, 500).unwrap();
        assert!(rel(p.ns, rest) < 0.08, "{} vs {rest}", p.ns);
        // The fast fit, which followed the burst, would have put the end far later.
        let fast = m.fit_for(StepKind::Decode, 1);
        let x = at.remaining_features(500).scaled(StepKind::Decode);
        let fast_ns = fast.predict_ms(&x).unwrap() * NS_PER_MS;
        assert!(fast_ns > 1.2 * rest as f64, "{fast_ns} vs {rest}");
        // The step in flight follows the burst (a step's prediction judges a stall).
        let step = m.predict(&at).unwrap().ns as f64;
        assert!(step > 1.2 * batch_truth(&at, 1.0) as f64, "{step}");
    }

    #[test]
    fn an_attention_cost_that_drift_makes_negative_is_taken_as_zero() {
        let mut m = CostModel::default();
        // The machine speeds up from 1.6x to 1x over 200 steps while the context grows:
        // durations fall as the context grows.
        for k in 0..200u64 {
            let s = StepShape::decode(1, 100 + k);
            let speed = 1.6 - 0.6 * k as f64 / 200.0;
            m.observe(&s, batch_truth(&s, speed));
        }
        assert_eq!(m.decode_slow.theta[2], 0.0, "{:?}", m.decode_slow.theta);
        assert_eq!(m.slow_attention(), 0.0);
        // Its level still prices the steps from now on.
        let next = StepShape::decode(1, 300);
        let p = m.predict_remaining(&next, 100).unwrap().ns as f64;
        let truth = (100 * batch_truth(&next, 1.0)) as f64;
        assert!(p > 0.8 * truth && p < 1.3 * truth, "{p} vs {truth}");
    }

    #[test]
    fn one_generation_s_drift_is_not_taken_for_attention_cost() {
        // The first generation after a start, at 7,000 cached tokens: the machine slows to
        // 1.5x over its first 100 steps (a build starting) and stays there.
        let mut m = CostModel::default();
        let speed = |k: u64| 1.0 + 0.5 * (k.min(100) as f64 / 100.0);
        for k in 0..110u64 {
            let s = StepShape::decode(1, 7_000 + k);
            m.observe(&s, batch_truth(&s, speed(k)));
        }
        assert!(m.slow_ready());
        assert!(
            !m.slow_shape_known(),
            "{}",
            m.decode_slow.attention_spread(&m.config)
        );
        let at = StepShape::decode(1, 7_110);
        let rest = rest_truth(7_110, 900, 1.5);
        let p = m.predict_remaining(&at, 900).unwrap();
        assert!(rel(p.ns, rest) < 0.25, "{} vs {rest}", p.ns);
    }

    #[test]
    fn the_prediction_words_name_their_step_and_phase() {
        let mut m = CostModel::default();
        for i in 0..5 {
            let s = StepShape::prefill(256, 256 * i);
            m.observe(&s, truth(&s));
        }
        let s = StepShape::prefill(256, 1280);
        let p = m.prediction(&s, 10_000, 9_000, Some(1024));
        let step = m.predict(&s).unwrap();
        let rest = m.predict_remaining(&s, 1024).unwrap();
        assert_eq!(p.step_expected_ns, step.ns);
        assert_eq!(p.task_expected_end_ns, 10_000 + rest.ns);
        assert_eq!((p.step_start_ns, p.phase_start_ns), (10_000, 9_000));
        assert_eq!(p.error_ppm, step.error_ppm());
        assert_ne!(p.error_ppm, 0);
        assert!(
            rest.ns > 3 * step.ns,
            "four chunks, each longer than this one"
        );
        let unknown = m.prediction(&s, 10_000, 9_000, None);
        assert_eq!(unknown.task_expected_end_ns, 0);
    }

    #[test]
    fn what_a_model_learnt_starts_another_and_a_damaged_one_is_refused() {
        let mut m = CostModel::default();
        learn_chunks(&mut m, 0..8);
        for k in 0..40u64 {
            let s = StepShape::decode(1 + k % 3, 300 + k);
            m.observe(&s, truth(&s));
        }
        let learnt = m.learnt();
        let again = CostModel::with_learnt(ModelConfig::default(), &learnt).expect("restored");
        for s in [StepShape::prefill(512, 2048), StepShape::decode(2, 700)] {
            assert_eq!(again.predict(&s), m.predict(&s), "{s:?}");
        }
        assert_eq!(again.learnt(), learnt);
        // An earlier writer's file, without the slow decode fit: it starts empty.
        let mut earlier = learnt.clone();
        earlier.fits.pop();
        let again = CostModel::with_learnt(ModelConfig::default(), &earlier).expect("restored");
        assert_eq!(again.decode_slow.samples, 0);
        let mut short = earlier;
        short.fits.pop();
        assert!(CostModel::with_learnt(ModelConfig::default(), &short).is_none());
        let mut nan = learnt.clone();
        nan.fits[1].b[0] = f64::NAN;
        assert!(CostModel::with_learnt(ModelConfig::default(), &nan).is_none());
        let mut negative = learnt;
        negative.fits[0].mean_sq_error = -1.0;
        assert!(CostModel::with_learnt(ModelConfig::default(), &negative).is_none());
    }
}
