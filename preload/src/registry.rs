//! Which tracker belongs to which llama context.
//!
//! A short list behind a `RwLock`: the decode path takes the read side (uncontended, no
//! allocation) and scans a handful of entries; the write side is taken only when a context
//! appears or is freed. Each context's tracker has its own mutex, held for microseconds
//! by its decode thread and, now and then, by the idle sweeper.
//!
//! The first context of the process publishes as `HYDRA_ENGINE_ID` (default `llama-<pid>`);
//! a second live context as `<id>-ctx1`, and so on (the lowest free number). A context whose
//! segment cannot be created is remembered as such, logged once, and passed through.

use crate::describe::ContextFacts;
use crate::ffi::LlamaContext;
use crate::log::warn_once;
use crate::tracker::Tracker;
use hydra_layout::{clock, naming, SegmentConfig, SegmentWriter};
use std::sync::{Mutex, MutexGuard, Once, RwLock};
use std::time::Duration;

/// Environment variable naming the engine (default `llama-<pid>`).
pub const ENGINE_ID_ENV: &str = "HYDRA_ENGINE_ID";
/// Environment variable: how long (ms) a prefilling or decoding sequence may go without a
/// step before its slot is shown idle (default [`DEFAULT_IDLE_MS`]).
pub const IDLE_MS_ENV: &str = "HYDRA_PRELOAD_IDLE_MS";
/// Default of [`IDLE_MS_ENV`].
pub const DEFAULT_IDLE_MS: u64 = 1000;

struct Entry {
    ctx: usize,
    memory: usize,
    ordinal: usize,
    /// `None`: creating the segment failed; the context is passed through.
    tracker: Option<Box<Mutex<Tracker>>>,
}

static REGISTRY: RwLock<Vec<Entry>> = RwLock::new(Vec::new());

fn lock(m: &Mutex<Tracker>) -> MutexGuard<'_, Tracker> {
    // A panic while holding it disables the preload (see `interpose`); the data stays usable.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Runs `f` on the tracker of `ctx` if it has one. `None` if the context is unknown or
/// passed through.
pub fn with_existing<R>(ctx: *mut LlamaContext, f: impl FnOnce(&mut Tracker) -> R) -> Option<R> {
    let reg = REGISTRY.read().unwrap_or_else(|e| e.into_inner());
    let e = reg.iter().find(|e| e.ctx == ctx as usize)?;
    e.tracker.as_deref().map(|m| f(&mut lock(m)))
}

/// Runs `f` on the tracker of the context whose memory is `memory`.
pub fn with_memory<R>(memory: usize, f: impl FnOnce(&mut Tracker) -> R) -> Option<R> {
    if memory == 0 {
        return None;
    }
    let reg = REGISTRY.read().unwrap_or_else(|e| e.into_inner());
    let e = reg.iter().find(|e| e.memory == memory)?;
    e.tracker.as_deref().map(|m| f(&mut lock(m)))
}

/// Runs `f` on the tracker of `ctx`, creating its segment from `facts()` on first sight.
pub fn with_tracker<R>(
    ctx: *mut LlamaContext,
    facts: impl FnOnce() -> ContextFacts,
    f: impl FnOnce(&mut Tracker) -> R,
) -> Option<R> {
    {
        let reg = REGISTRY.read().unwrap_or_else(|e| e.into_inner());
        if let Some(e) = reg.iter().find(|e| e.ctx == ctx as usize) {
            return e.tracker.as_deref().map(|m| f(&mut lock(m)));
        }
    }
    attach(ctx, facts());
    with_existing(ctx, f)
}

/// The engine id of the context numbered `ordinal` in this process.
pub fn engine_id(ordinal: usize) -> String {
    let base = std::env::var(ENGINE_ID_ENV)
        .ok()
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| format!("llama-{}", std::process::id()));
    match ordinal {
        0 => base,
        n => format!("{base}-ctx{n}"),
    }
}

/// Creates the segment of `ctx` (unless it has an entry already) and remembers it. A
/// failure is logged once and remembered too, so the context is then passed through.
pub fn attach(ctx: *mut LlamaContext, facts: ContextFacts) {
    let mut reg = REGISTRY.write().unwrap_or_else(|e| e.into_inner());
    if reg.iter().any(|e| e.ctx == ctx as usize) {
        return;
    }
    let ordinal = (0..)
        .find(|n| !reg.iter().any(|e| e.ordinal == *n))
        .unwrap_or(0);
    let config = SegmentConfig {
        dir: naming::resolve_dir(None),
        engine_id: engine_id(ordinal),
        slot_count: facts.n_seqs.clamp(1, hydra_layout::MAX_SLOTS),
        description: facts.description.clone(),
    };
    let tracker = match SegmentWriter::create(&config) {
        Ok(w) => {
            let kv_total = if facts.n_ctx > 0 {
                facts.n_ctx
            } else {
                facts.n_ctx_seq * config.slot_count as u64
            };
            let mut t = Tracker::new(w, facts.n_ctx_seq, kv_total);
            t.set_shape(facts.n_ubatch, facts.n_layer);
            t.set_ubatch_steps(crate::symbols::get().ubatches_countable());
            Some(Box::new(Mutex::new(t)))
        }
        Err(e) => {
            warn_once!(
                "not publishing progress for engine {:?} (passing through): {e}",
                config.engine_id
            );
            None
        }
    };
    if tracker.is_some() {
        start_background();
    }
    reg.push(Entry {
        ctx: ctx as usize,
        memory: facts.memory,
        ordinal,
        tracker,
    });
}

/// Forgets `ctx` (it is being freed): its segment is marked closed and removed.
pub fn detach(ctx: *mut LlamaContext) {
    let entry = {
        let mut reg = REGISTRY.write().unwrap_or_else(|e| e.into_inner());
        let Some(i) = reg.iter().position(|e| e.ctx == ctx as usize) else {
            return;
        };
        reg.swap_remove(i)
    };
    if let Some(m) = entry.tracker {
        m.into_inner().unwrap_or_else(|e| e.into_inner()).close();
    }
}

/// The idle delay from [`IDLE_MS_ENV`].
pub fn idle_after() -> Duration {
    let ms = std::env::var(IDLE_MS_ENV)
        .ok()
        .and_then(|v| v.trim().parse::<u64>().ok())
        .filter(|&ms| ms > 0)
        .unwrap_or(DEFAULT_IDLE_MS);
    Duration::from_millis(ms)
}

/// Ends the tasks of sequences the host stopped decoding (see [`Tracker::sweep_idle`]) and
/// samples the RPC peers' reads ([`Tracker::watch_peers`]) in every context; never waits
/// for a tracker its decode thread holds.
pub fn sweep(now: u64, idle_after_ns: u64) -> usize {
    let reg = REGISTRY.read().unwrap_or_else(|e| e.into_inner());
    reg.iter()
        .filter_map(|e| e.tracker.as_deref())
        .filter_map(|m| m.try_lock().ok())
        .map(|mut t| {
            t.watch_peers(now);
            t.sweep_idle(now, idle_after_ns)
        })
        .sum()
}

/// Starts, once per process, the idle sweeper thread and the exit hook that closes every
/// segment on a clean exit (`exit()` or a return from `main`).
fn start_background() {
    static STARTED: Once = Once::new();
    STARTED.call_once(|| {
        let idle = idle_after();
        let period = (idle / 4).clamp(Duration::from_millis(10), Duration::from_millis(250));
        let spawned = std::thread::Builder::new()
            .name("hydra-preload".into())
            .spawn(move || loop {
                std::thread::sleep(period);
                let _ = std::panic::catch_unwind(|| {
                    sweep(clock::monotonic_ns(), idle.as_nanos() as u64)
                });
            });
        if let Err(e) = spawned {
            warn_once!("no idle sweeper thread ({e}): finished requests stay shown busy");
        }
        // SAFETY: `close_all` is `extern "C"`, takes nothing, never unwinds (it catches panics),
        // and lives as long as the process (a preloaded library is never unloaded).
        if unsafe { libc::atexit(close_all) } != 0 {
            warn_once!("atexit failed: a clean exit will read as dead");
        }
    });
}

/// Marks every segment closed and removes it. Skips (leaving it to read as dead) anything
/// another thread holds at exit rather than wait.
extern "C" fn close_all() {
    let _ = std::panic::catch_unwind(|| {
        let Ok(mut reg) = REGISTRY.try_write() else {
            return;
        };
        for e in reg.drain(..) {
            if let Some(m) = e.tracker {
                if let Ok(t) = m.into_inner() {
                    t.close();
                }
            }
        }
    });
}
