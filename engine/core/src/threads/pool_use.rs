//! Whether a decode step's kernels spread over the thread pool or run on the compute thread
//! alone, chosen from the steps' own timings.
//!
//! The engine's kernels (the packed weight matmuls, decode attention) hand pieces of a step
//! to rayon's pool and join them, about five times per layer. On a quiet machine that makes
//! a decode step faster. When another process keeps a core busy, a pool thread holding a
//! piece can be descheduled for a scheduler slice (milliseconds) while the compute thread
//! waits at the join, and SmolLM2's 30 layers make about 150 joins per token: the step then
//! takes longer than on the compute thread alone. Nothing in the process sees the other
//! process directly, but the step times show its effect. [`PoolChooser`] times the steps in
//! the mode it uses, runs a few in the other mode now and then (a trial), and keeps the
//! faster.
//!
//! A trial starts:
//! - on a schedule that backs off (every 64, 128, then 256 steps) while the current mode
//!   keeps winning, so that on a quiet machine trials cost about 1% of the steps (256 at
//!   once after a switch back to the pool);
//! - on the pool, as soon as the window refills after a step that took [`JUMP`] times the
//!   recent ones (contention starting);
//! - running alone, once the kernel's count of runnable tasks (`/proc/loadavg`, read every
//!   4th step) leaves room for every pool thread on the CPUs this process may use, twice in
//!   a row (contention over), at most once per switch to running alone.
//!
//! A trial's steps are weighed against the window's median, and the median ratio decides,
//! so that one step out of line (a stall, or the pool's workers waking) decides nothing. A
//! trial that wins must also beat the `CONFIRM_STEPS` steps that follow it in the current
//! mode: a burst of slow steps slows both modes, and a trial run as it ends would otherwise
//! beat a window taken during it.
//!
//! Only steps of up to [`MAX_ROWS`] rows (decode batches) are timed and steered; a prefill
//! chunk's kernels always use the pool. Both modes compute the same values (each output of
//! a kernel is computed by one call, whichever thread makes it), so the choice changes only
//! the time a step takes.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// How decode steps use the thread pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PoolUse {
    /// Time the steps and keep whichever of the pool and the compute thread alone is faster
    /// now (default).
    #[default]
    Adaptive,
    /// Always spread the kernels over the pool.
    Always,
    /// Run decode steps' kernels on the compute thread alone (prefill chunks of more than
    /// [`MAX_ROWS`] rows still use the pool).
    Never,
}

crate::error::named_values!(PoolUse, "pool-use", {
    "adaptive" => Adaptive,
    "always" => Always,
    "never" => Never,
});

/// Steps of more rows than this always use the pool: prefill chunks, whose pieces are long
/// enough that a late worker costs a small part of the step.
pub const MAX_ROWS: usize = 16;

/// Step times kept for the current mode (the rows of the last steps); a trial's steps are
/// compared with their median.
const WINDOW: usize = 4;

/// Steps a trial runs in the other mode.
const TRIAL_STEPS: usize = 3;

/// Steps in the current mode right after a trial that beat the window, which the trial must
/// beat as well before the chooser switches: a burst of slow steps (the virtual machine's
/// host busy for a few milliseconds) slows both modes, and a trial run as it ends would
/// otherwise beat a window taken in it.
const CONFIRM_STEPS: usize = 3;

/// Steps between trials at the start, after a jump and after a switch to the compute thread
/// alone; doubled after each trial the current mode wins.
const FIRST_INTERVAL: u32 = 64;

/// The longest interval between trials, in steps (also the first after a switch back to
/// the pool).
const LONGEST_INTERVAL: u32 = 256;

/// A step that takes this many times the window's mean starts a trial once the window has
/// refilled: the conditions changed.
pub const JUMP: f64 = 1.5;

/// The other mode wins a trial when its median step time is below this share of the
/// current mode's (a margin against noise).
const WIN: f64 = 0.9;

/// The shortest time between two info-level lines about switches (a machine whose load
/// comes and goes could otherwise switch every few steps).
const LOG_EVERY: Duration = Duration::from_secs(10);

/// Consecutive reads of the run queue with a CPU to spare that start a trial of the pool.
const SPARE_READS: u32 = 2;

/// Steps between two reads of the run queue while running alone: a read costs 6-11 µs,
/// 2-4% of a step of the embedded model if made every step.
const SPARE_READ_EVERY: u32 = 4;

/// Runnable tasks on the machine other than the caller (`/proc/loadavg`'s fourth field
/// counts the reader itself); `None` where it cannot be read.
pub fn others_runnable() -> Option<usize> {
    let text = std::fs::read_to_string("/proc/loadavg").ok()?;
    let running = text.split_whitespace().nth(3)?.split('/').next()?;
    running.parse::<usize>().ok()?.checked_sub(1)
}

/// Chooses, step by step, whether the step's kernels use the pool (see the module
/// documentation). One per compute thread: [`plan`](Self::plan) before a step,
/// [`record`](Self::record) after it.
#[derive(Debug)]
pub struct PoolChooser {
    policy: PoolUse,
    threads: usize,
    /// The CPUs this process may run on.
    cpus: usize,
    use_pool: bool,
    /// Per row count (1 to [`MAX_ROWS`]), the last [`WINDOW`] step times in the current
    /// mode: steps of a batch size are compared with steps of the same size.
    windows: Vec<VecDeque<Duration>>,
    /// The running trial's steps: their rows and times.
    trial: Vec<(usize, Duration)>,
    in_trial: bool,
    /// After a trial that beat the window: steps in the current mode right after it, which
    /// the trial must beat too ([`CONFIRM_STEPS`]).
    confirm: Vec<(usize, Duration)>,
    confirming: bool,
    /// Steps in the current mode before the next trial.
    until_trial: u32,
    interval: u32,
    /// Whether a spare CPU may still start a trial (set when the chooser goes alone).
    watch_spare: bool,
    spare_reads: u32,
    /// The step being run, when it is steered: its rows and whether it uses the pool.
    planned: Option<(usize, bool)>,
    runnable: fn() -> Option<usize>,
    /// When a switch was last logged at info level, and the switches since.
    last_log: Option<Instant>,
    switches: u32,
}

impl PoolChooser {
    /// A chooser for rayon's pool as seen from the calling thread, on the CPUs this process
    /// may use, starting with the pool.
    pub fn new(policy: PoolUse) -> Self {
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        Self::with_run_queue(policy, rayon::current_num_threads(), cpus, others_runnable)
    }

    /// As [`new`](Self::new), for a pool of `threads` threads on `cpus` CPUs, reading the
    /// other runnable tasks from `runnable`.
    pub fn with_run_queue(
        policy: PoolUse,
        threads: usize,
        cpus: usize,
        runnable: fn() -> Option<usize>,
    ) -> Self {
        Self {
            policy,
            threads,
            cpus,
            use_pool: true,
            windows: vec![VecDeque::with_capacity(WINDOW + 1); MAX_ROWS],
            trial: Vec::with_capacity(TRIAL_STEPS),
            in_trial: false,
            confirm: Vec::with_capacity(CONFIRM_STEPS),
            confirming: false,
            until_trial: FIRST_INTERVAL,
            interval: FIRST_INTERVAL,
            watch_spare: false,
            spare_reads: 0,
            planned: None,
            runnable,
            last_log: None,
            switches: 0,
        }
    }

    /// The policy.
    pub fn policy(&self) -> PoolUse {
        self.policy
    }

    /// Whether steps currently run their kernels on the pool (trials aside).
    pub fn using_pool(&self) -> bool {
        self.use_pool
    }

    /// Whether the next step, of `rows` rows, should spread its kernels over the pool.
    pub fn plan(&mut self, rows: usize) -> bool {
        let decode = (1..=MAX_ROWS).contains(&rows);
        if self.policy != PoolUse::Adaptive || self.threads < 2 || !decode {
            self.planned = None;
            return !(self.policy == PoolUse::Never && decode);
        }
        if self.confirming {
            self.planned = Some((rows, self.use_pool));
            return self.use_pool;
        }
        // A trial step counts only against a full window of its own batch size.
        if !self.in_trial && self.until_trial == 0 && self.window(rows).len() == WINDOW {
            self.in_trial = true;
        }
        let pool = self.use_pool != (self.in_trial && self.window(rows).len() == WINDOW);
        self.planned = Some((rows, pool));
        pool
    }

    /// The step planned last took `took` (call only after a step that completed).
    pub fn record(&mut self, took: Duration) {
        let Some((rows, pool)) = self.planned.take() else {
            return;
        };
        if self.confirming {
            self.confirm.push((rows, took));
            if self.confirm.len() == CONFIRM_STEPS {
                self.confirmed();
            }
            return;
        }
        if pool != self.use_pool {
            self.trial.push((rows, took));
            if self.trial.len() == TRIAL_STEPS {
                self.decide();
            }
            return;
        }
        let window = &mut self.windows[rows - 1];
        // On the pool, a jump is contention starting. Alone, it is more contention, which a
        // trial of the pool would only suffer more from.
        if self.use_pool
            && window.len() == WINDOW
            && took.as_secs_f64() > JUMP * mean(window.iter())
        {
            window.clear();
            self.until_trial = 0;
            self.interval = FIRST_INTERVAL;
        }
        if window.len() == WINDOW {
            window.pop_front();
        }
        window.push_back(took);
        self.until_trial = self.until_trial.saturating_sub(1);
        let read_due = self.until_trial.is_multiple_of(SPARE_READ_EVERY);
        if !self.use_pool && self.watch_spare && self.until_trial > 0 && read_due {
            // Room for every pool thread besides the other runnable tasks.
            let spare = (self.runnable)().is_some_and(|others| others + self.threads <= self.cpus);
            self.spare_reads = if spare { self.spare_reads + 1 } else { 0 };
            if self.spare_reads >= SPARE_READS {
                self.until_trial = 0;
                self.watch_spare = false;
            }
        }
    }

    fn window(&self, rows: usize) -> &VecDeque<Duration> {
        &self.windows[rows - 1]
    }

    /// The end of a trial: when the other mode was clearly faster than the window, confirm
    /// it against the steps that follow; otherwise the current mode stays. Each trial step is
    /// weighed against the median of its batch size's window, and the trial's median ratio
    /// decides. Medians, so that one step out of line decides nothing: a stall of the
    /// virtual machine in the window, or the first step of a trial of the pool, which waits
    /// for its sleeping workers to wake (0.05-0.1 ms, half a step of a small model).
    fn decide(&mut self) {
        let ratio = self.trial_ratio(|c, rows| median(c.window(rows).iter().map(secs)));
        self.in_trial = false;
        self.spare_reads = 0;
        if ratio < WIN {
            self.confirming = true;
        } else {
            self.trial.clear();
            self.interval = (self.interval * 2).min(LONGEST_INTERVAL);
            self.until_trial = self.interval;
        }
    }

    /// The end of the confirming steps: switch when the trial beats them too.
    fn confirmed(&mut self) {
        self.confirming = false;
        // Each trial step against the confirming steps of its batch size (the window's
        // where there are none).
        let ratio = self.trial_ratio(|c, rows| {
            let same: Vec<f64> = c
                .confirm
                .iter()
                .filter(|(r, _)| *r == rows)
                .map(|(_, t)| t.as_secs_f64())
                .collect();
            if same.is_empty() {
                median(c.window(rows).iter().map(secs))
            } else {
                median(same)
            }
        });
        let confirm = std::mem::take(&mut self.confirm);
        if ratio < WIN {
            self.use_pool = !self.use_pool;
            self.watch_spare = !self.use_pool;
            self.windows.iter_mut().for_each(VecDeque::clear);
            for (rows, t) in self.trial.drain(..) {
                self.windows[rows - 1].push_back(t);
            }
            // Back on the pool, contention is over, and a new one shows as a jump: trials
            // can wait long. Alone, the next trial of the pool comes sooner.
            self.interval = if self.use_pool {
                LONGEST_INTERVAL
            } else {
                FIRST_INTERVAL
            };
            self.log_switch(ratio);
        } else {
            // The steps right after the trial were as fast: the window was out of line.
            self.trial.clear();
            for (rows, t) in confirm {
                let window = &mut self.windows[rows - 1];
                if window.len() == WINDOW {
                    window.pop_front();
                }
                window.push_back(t);
            }
        }
        self.until_trial = self.interval;
    }

    /// The median over the trial's steps of each one's time over `reference(rows)`.
    fn trial_ratio(&self, reference: impl Fn(&Self, usize) -> f64) -> f64 {
        median(
            self.trial
                .iter()
                .map(|&(rows, t)| t.as_secs_f64() / reference(self, rows)),
        )
    }

    /// Logs a switch at info level at most once per [`LOG_EVERY`], with the switches since
    /// the last such line; the others at debug level.
    fn log_switch(&mut self, ratio: f64) {
        let mode = if self.use_pool {
            "on the thread pool"
        } else {
            "on the compute thread alone (CPU contention)"
        };
        self.switches += 1;
        let due = self.last_log.is_none_or(|t| t.elapsed() >= LOG_EVERY);
        if due {
            tracing::info!(
                time_ratio = format_args!("{ratio:.2}"),
                switches = self.switches,
                "decode steps now run their kernels {mode}"
            );
            self.last_log = Some(Instant::now());
            self.switches = 0;
        } else {
            tracing::debug!(
                time_ratio = format_args!("{ratio:.2}"),
                "decode steps now run their kernels {mode}"
            );
        }
    }
}

/// The median of `values` (for an even count, the mean of the middle two; 0 for none).
fn median(values: impl IntoIterator<Item = f64>) -> f64 {
    let mut v: Vec<f64> = values.into_iter().collect();
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => 0.0,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// `t` in seconds.
fn secs(t: &Duration) -> f64 {
    t.as_secs_f64()
}

/// The mean of `times`, in seconds (0 for none).
fn mean<'a>(times: impl IntoIterator<Item = &'a Duration>) -> f64 {
    let (sum, n) = times
        .into_iter()
        .fold((0.0, 0u32), |(s, n), t| (s + t.as_secs_f64(), n + 1));
    if n == 0 {
        0.0
    } else {
        sum / f64::from(n)
    }
}

#[cfg(test)]
mod tests;
