//! The body of each wrapper, generic over the real function so that the benchmark and the
//! tests can drive it with a stand-in. Bookkeeping runs under `catch_unwind` and never
//! holds a lock across the real call; after any internal panic the preload turns itself
//! off (logged once) and every later call goes straight through.

use crate::describe;
use crate::devices;
use crate::ext;
use crate::ffi::*;
use crate::layers;
use crate::log::warn_once;
use crate::registry;
use crate::symbols;
use hydra_layout::{clock, Phase};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};

static DISABLED: AtomicBool = AtomicBool::new(false);

/// Runs bookkeeping `f`; `None` if the preload is off or `f` panicked (which turns it off).
fn guarded<R>(f: impl FnOnce() -> Option<R>) -> Option<R> {
    // Relaxed: a flag read on every call; seeing it a call late is harmless.
    if DISABLED.load(Ordering::Relaxed) {
        return None;
    }
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(_) => {
            DISABLED.store(true, Ordering::Relaxed);
            warn_once!("internal error: progress publishing is off for the rest of this process");
            None
        }
    }
}

/// Runs bookkeeping `f` that says whether it did something; false when the preload is off
/// or `f` panicked (which turns it off).
pub(crate) fn guarded_bool(f: impl FnOnce() -> bool) -> bool {
    guarded(|| Some(f())).unwrap_or(false)
}

/// Which device a blocking ggml call waits on, looked up panic-proof (none when the
/// preload is off).
pub fn lookup(f: impl FnOnce() -> Option<u64>) -> Option<u64> {
    guarded(f)
}

/// Facts of `ctx` read through the process's libllama.
pub(crate) fn facts(ctx: *mut LlamaContext) -> describe::ContextFacts {
    // SAFETY: `ctx` is the live context the host is passing to llama.cpp right now, and the
    // symbols come from the libllama that owns it.
    unsafe { describe::describe(symbols::get(), ctx) }
}

/// `llama_decode` around `real`: marks each sequence's step in flight, calls `real`,
/// credits the tokens, publishes and beats the heartbeat. `facts` describes a context seen
/// for the first time.
///
/// # Safety
/// `real` may be called with `ctx` and `batch` (the host's arguments, passed on unchanged).
pub unsafe fn decode_with(
    real: DecodeFn,
    ctx: *mut LlamaContext,
    batch: LlamaBatch,
    facts: impl FnOnce() -> describe::ContextFacts,
) -> i32 {
    let started = guarded(|| {
        registry::with_tracker(ctx, facts, |t| {
            // SAFETY: `batch` is what the host passes to llama_decode, which requires it
            // to be well formed; `BatchScan::read` reads only within what llama.cpp reads.
            match unsafe { t.decode_started(&batch, clock::monotonic_ns()) } {
                Ok(()) => {
                    begin_call(ctx, t);
                    true
                }
                Err(e) => {
                    warn_once!("a batch was not recorded ({e}); passing such batches through");
                    false
                }
            }
        })
    })
    .unwrap_or(false);
    let mut call = EndCall::new(ctx, started);
    // SAFETY: forwarded from this function's contract.
    let ret = unsafe { real(ctx, batch) };
    call.returned(ret)
}

/// The recorded call of `ctx` (its step just started in `t`) is about to run on this
/// thread: the compute wrapper counts its ubatches and arms its layers from here on.
fn begin_call(ctx: *mut LlamaContext, t: &crate::tracker::Tracker) {
    let policy = layers::Policy::get();
    let mut start = t.call_start(|n| layers::available() && policy.arms(n));
    start.sent_sink = Some(publish_layers_sent);
    layers::call_begin(ctx, start, t.call_slots());
}

/// [`layers::SentSink`]: the layers sent by the step in flight of `ctx`'s call, through
/// its tracker.
fn publish_layers_sent(ctx: *mut LlamaContext, slots: &[usize], layers_sent: u64) {
    registry::with_existing(ctx, |t| t.layers_sent(slots, layers_sent));
}

/// Ends a recorded call when it is dropped: with the real function's result after a
/// normal return, or as failed (-1) when a C++ exception unwinds through the wrapper, so
/// that no call and no step stays in flight.
struct EndCall {
    ctx: *mut LlamaContext,
    started: bool,
    ret: i32,
}

impl EndCall {
    fn new(ctx: *mut LlamaContext, started: bool) -> Self {
        Self {
            ctx,
            started,
            ret: -1,
        }
    }

    /// The real function returned `ret`; the call ends now. Returns `ret`.
    fn returned(&mut self, ret: i32) -> i32 {
        self.ret = ret;
        ret
    }
}

impl Drop for EndCall {
    fn drop(&mut self) {
        if self.started {
            end_call(self.ctx, self.ret);
        }
    }
}

/// The recorded call of `ctx` returned `ret`: the rest of its tokens are credited, now
/// or, when its outputs are awaited, once the host has synchronized them
/// ([`sched_synchronize_with`]; which calls: [`Tracker::decode_returned`]).
///
/// [`Tracker::decode_returned`]: crate::tracker::Tracker::decode_returned
fn end_call(ctx: *mut LlamaContext, ret: i32) {
    let deferrable = layers::call_scheduled() && symbols::get().sched_synchronize.is_some();
    let awaiting = guarded(|| {
        registry::with_existing(ctx, |t| {
            t.decode_returned(ret, clock::monotonic_ns(), deferrable)
        })
    })
    .unwrap_or(false);
    layers::call_end(awaiting);
}

/// `ggml_backend_sched_synchronize` around `real`: when this thread's last tracked call
/// awaits its outputs from `sched`, its step stays in flight through the real call (the
/// waits inside it are published to its slots) and ends when it returns, or unwinds.
/// Anything else goes straight through.
///
/// # Safety
/// `real` may be called with `sched` (the host's, passed on unchanged).
pub unsafe fn sched_synchronize_with(real: SchedSynchronizeFn, sched: *mut GgmlSched) {
    /// Ends the awaited step when the synchronize returns or unwinds.
    struct Synced(Option<*mut LlamaContext>);
    impl Drop for Synced {
        fn drop(&mut self) {
            if let Some(ctx) = self.0 {
                layers::awaiting_end();
                let now = clock::monotonic_ns();
                guarded(|| registry::with_existing(ctx, |t| t.outputs_synchronized(now)));
            }
        }
    }
    let synced = Synced(guarded(|| {
        let ctx = layers::outputs_awaited_on(sched)?;
        let begun = registry::with_existing(ctx, |t| t.sync_begun()).unwrap_or(false);
        if !begun {
            layers::awaiting_end();
        }
        begun.then_some(ctx)
    }));
    // SAFETY: forwarded from this function's contract.
    unsafe { real(sched) };
    drop(synced);
}

/// `ggml_backend_sched_graph_compute_async` around `real`: a forward graph of a tracked
/// call is counted (its ubatch credited when more follow), and, when the call is armed,
/// computed with [`layers::chain`] as the scheduler's callback (`set`, the real setter),
/// the host's callback put back afterwards. Anything else goes straight through.
///
/// # Safety
/// `real` may be called with `sched` and `graph` (the host's, passed on unchanged), and
/// `set` with `sched`.
pub unsafe fn sched_compute_with(
    real: SchedComputeFn,
    set: Option<SchedSetEvalCallbackFn>,
    sched: *mut GgmlSched,
    graph: *mut GgmlGraph,
) -> i32 {
    // On 0c1e570 (`llama_process`) an RPC split's pieces are only sent when the callback
    // sees them (see `layers::plan`); asked only of a graph about to be armed.
    let sent = || symbols::get().process.is_some() && devices::rpc_only(sched);
    // SAFETY: forwarded from this function's contract.
    let plan =
        guarded(|| Some(unsafe { layers::plan(sched, graph, sent) })).unwrap_or(layers::Plan::Pass);
    if plan == layers::Plan::Pass {
        // SAFETY: forwarded from this function's contract.
        let status = unsafe { real(sched, graph) };
        // SAFETY: the live scheduler and the graph it just computed.
        unsafe { learn_devices(sched, graph) };
        return status;
    }
    /// Puts the host's callback back even if the compute unwinds.
    struct Restore(Option<(SchedSetEvalCallbackFn, *mut GgmlSched)>);
    impl Drop for Restore {
        fn drop(&mut self) {
            if let Some((set, sched)) = self.0 {
                let (cb, data) = layers::host_callback(sched);
                // SAFETY: the real setter on the live scheduler, with what the host set.
                unsafe { set(sched, cb, data) };
            }
        }
    }
    let restore = Restore(match (plan, set) {
        (layers::Plan::Arm, Some(set)) => {
            // SAFETY: the real setter on the live scheduler; `chain` has the callback's
            // signature and needs no user data.
            unsafe { set(sched, Some(layers::chain), std::ptr::null_mut()) };
            Some((set, sched))
        }
        _ => None,
    });
    // SAFETY: forwarded from this function's contract.
    let status = unsafe { real(sched, graph) };
    drop(restore);
    // SAFETY: the live scheduler and the graph it just computed.
    unsafe { learn_devices(sched, graph) };
    guarded(|| {
        let (ctx, covered) = layers::forward_done(status)?;
        let start =
            registry::with_existing(ctx, |t| t.ubatch_done(covered, clock::monotonic_ns()))?;
        layers::step_restarted(start);
        Some(())
    });
    status
}

/// After `sched` computed `graph` on a thread running a tracked call: the scheduler's
/// devices and layer map, published once (FORMAT §19), the first time a forward graph
/// shows them.
///
/// # Safety
/// `sched` and `graph` are the host's live scheduler and the graph it just computed.
unsafe fn learn_devices(sched: *mut GgmlSched, graph: *mut GgmlGraph) {
    guarded(|| {
        let (ctx, n_layer) = layers::call_context()?;
        if !devices::available() {
            return None;
        }
        // SAFETY: forwarded from this function's contract.
        let table = unsafe { devices::learn(sched, graph, n_layer) }?;
        registry::with_existing(ctx, |t| t.publish_devices(&table))
    });
}

/// `llama_decode` around `real`, describing new contexts through libllama.
///
/// # Safety
/// As [`decode_with`].
pub unsafe fn decode(real: DecodeFn, ctx: *mut LlamaContext, batch: LlamaBatch) -> i32 {
    // SAFETY: forwarded.
    unsafe { decode_with(real, ctx, batch, || facts(ctx)) }
}

/// `llama_process` around `real`: a DECODE of an extended batch is recorded like a
/// `llama_decode` of the same tokens (from what this thread's builder calls put in it);
/// an ENCODE, or a batch filled on another thread, passes through unrecorded.
///
/// # Safety
/// `real` may be called with `ctx`, `kind` and `batch` (passed on unchanged).
pub unsafe fn process_with(
    real: ProcessFn,
    ctx: *mut LlamaContext,
    kind: i32,
    batch: *mut LlamaBatchExt,
    facts: impl FnOnce() -> describe::ContextFacts,
) -> i32 {
    let started = kind == LLAMA_PROCESS_TYPE_DECODE
        && guarded(|| {
            registry::with_tracker(ctx, facts, |t| {
                let mut known = true;
                let r = t.decode_started_with(
                    |scan| {
                        known = ext::fill(batch, scan);
                        Ok(())
                    },
                    clock::monotonic_ns(),
                );
                if !known {
                    warn_once!("an extended batch filled on another thread was not recorded");
                }
                let ok = r.is_ok() && known;
                if ok {
                    begin_call(ctx, t);
                }
                ok
            })
        })
        .unwrap_or(false);
    let mut call = EndCall::new(ctx, started);
    // SAFETY: forwarded from this function's contract.
    let ret = unsafe { real(ctx, kind, batch) };
    call.returned(ret)
}

/// Runs a builder-call record update, panic-proof.
pub fn record(f: impl FnOnce()) {
    guarded(|| {
        f();
        Some(())
    });
}

/// After a successful removal of `[p0, p1)` of `seq` from `memory`.
pub fn seq_removed_from_memory(memory: *mut LlamaMemory, seq: i32, p0: i32, p1: i32) {
    guarded(|| registry::with_memory(memory as usize, |t| t.seq_removed(seq, p0, p1)));
}

/// After a successful removal of `[p0, p1)` of `seq` from `ctx`'s cache.
pub fn seq_removed_from_context(ctx: *mut LlamaContext, seq: i32, p0: i32, p1: i32) {
    guarded(|| registry::with_existing(ctx, |t| t.seq_removed(seq, p0, p1)));
}

/// After `memory` was cleared.
pub fn memory_cleared(memory: *mut LlamaMemory) {
    guarded(|| registry::with_memory(memory as usize, |t| t.cleared()));
}

/// Before `ctx` is freed: its segment closes.
pub fn context_freed(ctx: *mut LlamaContext) {
    guarded(|| {
        registry::detach(ctx);
        Some(())
    });
}

/// A state save (`phase` save) or restore of `seq` of `total` bytes (0 unknown) around
/// `call`, which runs the real function and returns the bytes it moved (0: failed) and,
/// for a restore that tells it, the cache's token count. `phase` `None`: not a transfer
/// (only `call` runs). Returns the bytes `call` returned.
pub fn transfer(
    ctx: *mut LlamaContext,
    seq: i32,
    phase: Option<Phase>,
    total: u64,
    call: impl FnOnce() -> (usize, Option<u64>),
) -> usize {
    let started = phase.and_then(|phase| {
        guarded(|| {
            registry::with_tracker(
                ctx,
                || facts(ctx),
                |t| t.transfer_started(seq, phase, total, clock::monotonic_ns()),
            )
            .flatten()
        })
    });
    let (bytes, n_past) = call();
    if let Some(x) = started {
        guarded(|| {
            registry::with_existing(ctx, |t| {
                t.transfer_finished(x, bytes as u64, n_past, clock::monotonic_ns())
            })
        });
    }
    bytes
}
