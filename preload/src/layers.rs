//! Inside one decode call: which ubatch and which layer the compute has reached.
//!
//! llama.cpp computes every ubatch of a `llama_decode`/`llama_process` call with
//! `ggml_backend_sched_graph_compute_async` (libggml-base, called from libllama across the
//! library boundary, so this library's export of the same name is the one bound). The
//! wrapper counts the forward graphs of the tracked call running on this thread, so each
//! sequence is credited as each ubatch finishes (see [`crate::tracker::Tracker::ubatch_done`]).
//!
//! **Layers.** When the scheduler has an eval callback, its compute asks the callback about
//! each node (`ask = true`), cuts the graph after every node the callback wants, computes
//! each piece, synchronises the backend and shows the node (`ask = false`). A call of at
//! least [`LAYER_MIN_TOKENS_ENV`] tokens is *armed*: for each of its forward graphs the
//! wrapper installs [`chain`] on the scheduler, which wants the decoder layers' outputs
//! (`l_out-<il>`, `l_last-<il>`) and whatever the host's own callback wants, publishes
//! `il + 1` of `n_layer` as the slot's substep position (format v1.1), passes the host's
//! nodes on to the host's callback, and **always returns true** (false would skip the
//! rest of the split and leave the outputs silently wrong). The host's callback
//! (llama.cpp sets `cb_eval` through `ggml_backend_sched_set_eval_callback`, which this
//! library wraps to remember it per scheduler) is put back right after the compute, which
//! has called every callback by then (each piece is synchronised before it is shown).
//!
//! Never armed: calls below the threshold (decode batches: one more synchronisation per
//! layer costs a CPU thread-pool start and barrier, and on CUDA a stream synchronisation
//! and the CUDA-graph replay), graphs without layer outputs (K-shift, defragmentation),
//! computes outside a tracked decode call (mtmd/clip and other users of a scheduler), and
//! schedulers with `n_copies > 1` (pipeline parallelism, whose overlap a synchronisation
//! per layer would serialise) — unless [`LAYERS_ENV`]`=always`. Missing symbols (a static
//! build, another ggml) or unexpected tensor names simply mean no layer position.

use crate::ffi::*;
use crate::symbols;
use hydra_layout::{clock, Substep, SubstepPublisher};
use std::cell::RefCell;
use std::ffi::{c_void, CStr};
use std::sync::{Mutex, OnceLock};

/// Environment variable: `auto` (default: arm calls of at least the minimum size),
/// `always` (arm every forward graph of a tracked call, pipeline-parallel schedulers
/// included) or `off` (never; no `LAYER_PROGRESS` capability).
pub const LAYERS_ENV: &str = "HYDRA_PRELOAD_LAYERS";
/// Environment variable: the fewest tokens a decode call must carry for its graphs to be
/// armed (default [`DEFAULT_LAYER_MIN_TOKENS`]).
pub const LAYER_MIN_TOKENS_ENV: &str = "HYDRA_PRELOAD_LAYER_MIN_TOKENS";
/// Default of [`LAYER_MIN_TOKENS_ENV`]: see BENCHMARKS.md, "Preload: layers per ubatch"
/// (an armed 64-token call costs well under 1% on the CPU; decode batches of a few
/// sequences stay far below it).
pub const DEFAULT_LAYER_MIN_TOKENS: u32 = 64;

/// When calls are armed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Calls of at least `min_tokens` tokens, on schedulers without pipeline copies.
    Auto,
    /// Every forward graph of a tracked call.
    Always,
    /// Never.
    Off,
}

/// The arming policy, from the environment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Policy {
    /// When to arm.
    pub mode: Mode,
    /// Fewest tokens of an armed call (`Auto`).
    pub min_tokens: u32,
}

impl Policy {
    /// Parses the two variables' values (unset or unreadable: the defaults, logged once).
    pub fn parse(layers: Option<&str>, min_tokens: Option<&str>) -> Self {
        let mode = match layers.map(str::trim) {
            None | Some("") | Some("auto") => Mode::Auto,
            Some("always") => Mode::Always,
            Some("off") | Some("0") | Some("never") => Mode::Off,
            Some(other) => {
                crate::log::warn_once!("{LAYERS_ENV}={other:?} is not auto, always or off: auto");
                Mode::Auto
            }
        };
        let min_tokens = match min_tokens.map(|v| v.trim().parse::<u32>()) {
            None => DEFAULT_LAYER_MIN_TOKENS,
            Some(Ok(n)) => n.max(1),
            Some(Err(_)) => {
                crate::log::warn_once!(
                    "{LAYER_MIN_TOKENS_ENV} is not a token count: {DEFAULT_LAYER_MIN_TOKENS}"
                );
                DEFAULT_LAYER_MIN_TOKENS
            }
        };
        Self { mode, min_tokens }
    }

    /// Whether a call of `n_tokens` tokens is armed.
    pub fn arms(&self, n_tokens: u32) -> bool {
        match self.mode {
            Mode::Auto => n_tokens >= self.min_tokens,
            Mode::Always => true,
            Mode::Off => false,
        }
    }

    /// This process's policy.
    pub fn get() -> &'static Policy {
        static POLICY: OnceLock<Policy> = OnceLock::new();
        POLICY.get_or_init(|| {
            let layers = std::env::var(LAYERS_ENV).ok();
            let min = std::env::var(LAYER_MIN_TOKENS_ENV).ok();
            Policy::parse(layers.as_deref(), min.as_deref())
        })
    }
}

/// Whether this process publishes layer positions: the symbols resolved and the policy is
/// not `off` (the `LAYER_PROGRESS` capability).
pub fn available() -> bool {
    Policy::get().mode != Mode::Off && symbols::get().layers_available()
}

/// The layer a tensor name is the output of: `l_out-<il>` or `l_last-<il>` gives `il`.
pub fn layer_of(name: &[u8]) -> Option<u32> {
    let digits = name
        .strip_prefix(b"l_out-")
        .or_else(|| name.strip_prefix(b"l_last-"))?;
    if digits.is_empty() || digits.len() > 6 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(digits).ok()?.parse().ok()
}

// ---- the host's callbacks, per scheduler ----

/// A host callback and its user data, as the host set them.
#[derive(Debug, Clone, Copy)]
struct HostCallback {
    sched: usize,
    callback: EvalCallback,
    user_data: usize,
}

/// Every scheduler's callback as last set (schedulers without an entry have none).
static HOST_CALLBACKS: Mutex<Vec<HostCallback>> = Mutex::new(Vec::new());

fn host_callbacks() -> std::sync::MutexGuard<'static, Vec<HostCallback>> {
    HOST_CALLBACKS.lock().unwrap_or_else(|e| e.into_inner())
}

/// `ggml_backend_sched_set_eval_callback(sched, callback, user_data)` is being called by
/// the host (llama.cpp passes its context's `cb_eval`, usually null).
pub fn host_callback_set(sched: *mut GgmlSched, callback: EvalCallback, user_data: *mut c_void) {
    let mut v = host_callbacks();
    v.retain(|h| h.sched != sched as usize);
    if callback.is_some() {
        v.push(HostCallback {
            sched: sched as usize,
            callback,
            user_data: user_data as usize,
        });
    }
}

/// `sched` is being freed: forget its callback (another scheduler may get its address).
pub fn sched_freed(sched: *mut GgmlSched) {
    host_callbacks().retain(|h| h.sched != sched as usize);
}

/// The callback the host set on `sched` (none: null).
pub fn host_callback(sched: *mut GgmlSched) -> (EvalCallback, *mut c_void) {
    host_callbacks()
        .iter()
        .find(|h| h.sched == sched as usize)
        .map_or((None, std::ptr::null_mut()), |h| {
            (h.callback, h.user_data as *mut c_void)
        })
}

// ---- the decode call in flight on this thread ----

/// What the tracker tells about a call as it starts.
#[derive(Debug)]
pub struct CallStart {
    /// Tokens of the call.
    pub n_tokens: u32,
    /// Tokens per ubatch (0 = unknown).
    pub n_ubatch: u32,
    /// Layers of the model (0 = unknown: counted in the graph).
    pub n_layer: u64,
    /// `STEP_START_NS` of the call's step.
    pub step_start_ns: u64,
    /// Where the layer position goes, when the call is armed.
    pub publisher: Option<SubstepPublisher>,
    /// Where its positions go when they are layers sent (see [`plan`]); none: never
    /// published as sent.
    pub sent_sink: Option<SentSink>,
}

/// Publishes that the step in flight of the call of a context on its slots has handed
/// layers `0..k` to their devices (the caller's function, through the call's tracker).
pub type SentSink = fn(*mut LlamaContext, &[usize], u64);

/// The tracked call on this thread, and the armed compute's state.
#[derive(Default)]
struct Call {
    active: bool,
    /// The call returned and its outputs are awaited (see `Tracker::decode_returned`):
    /// its waits are still published to its slots.
    awaiting: bool,
    ctx: usize,
    /// The scheduler that computed the call's forwards (0: none seen).
    sched: usize,
    n_tokens: u32,
    n_ubatch: u32,
    n_layer: u64,
    /// Forward graphs computed so far in the call.
    forwards: u32,
    step_start_ns: u64,
    publisher: Option<SubstepPublisher>,
    sent_sink: Option<SentSink>,
    /// Slots of the call (reused from call to call).
    slots: Vec<usize>,
    // The armed compute:
    host: EvalCallback,
    host_data: usize,
    /// What the host answered for the last node asked (the node shown next).
    host_wants: bool,
    /// Layers of the forward being computed.
    total: u64,
    /// Whether the armed positions are layers sent, not done (an RPC split of 0c1e570,
    /// whose client only sends a piece before the callback sees it): published as the
    /// step's `LAYERS_SENT` (format v1.3) instead of its layer position.
    sent: bool,
}

thread_local! {
    static CALL: RefCell<Call> = RefCell::new(Call::default());
}

fn with_call<R>(f: impl FnOnce(&mut Call) -> R) -> Option<R> {
    CALL.try_with(|c| c.try_borrow_mut().ok().map(|mut c| f(&mut c)))
        .ok()
        .flatten()
}

/// A tracked call of `ctx` starts on this thread; `slots` are its sequences' slots.
pub fn call_begin(ctx: *mut LlamaContext, start: CallStart, slots: impl Iterator<Item = usize>) {
    with_call(|c| {
        c.active = true;
        c.awaiting = false;
        c.ctx = ctx as usize;
        c.sched = 0;
        c.n_tokens = start.n_tokens;
        c.n_ubatch = start.n_ubatch;
        c.n_layer = start.n_layer;
        c.forwards = 0;
        c.step_start_ns = start.step_start_ns;
        c.publisher = start.publisher;
        c.sent_sink = start.sent_sink;
        c.slots.clear();
        c.slots.extend(slots);
    });
}

/// Runs `f` with the context and the slots of the tracked call on this thread; none when
/// no call is in flight here (or its state is in use further up this thread's stack).
pub fn with_call_slots<R>(f: impl FnOnce(*mut LlamaContext, &[usize]) -> R) -> Option<R> {
    with_call(|c| (c.active || c.awaiting).then(|| f(c.ctx as *mut LlamaContext, &c.slots)))
        .flatten()
}

/// The context of the tracked call on this thread and its model's layer count (0 =
/// unknown); none when no call is in flight here.
pub fn call_context() -> Option<(*mut LlamaContext, u64)> {
    with_call(|c| c.active.then_some((c.ctx as *mut LlamaContext, c.n_layer))).flatten()
}

/// Whether the tracked call on this thread computed its forwards through a scheduler.
pub fn call_scheduled() -> bool {
    with_call(|c| c.active && c.sched != 0).unwrap_or(false)
}

/// The tracked call on this thread returned; `awaiting`: its outputs are still awaited,
/// until [`outputs_awaited_on`] and [`awaiting_end`].
pub fn call_end(awaiting: bool) {
    with_call(|c| {
        c.active = false;
        c.awaiting = awaiting;
        c.publisher = None;
    });
}

/// The context of the call on this thread whose outputs are awaited from `sched`; none
/// when no call awaits them, or they come from another scheduler.
pub fn outputs_awaited_on(sched: *mut GgmlSched) -> Option<*mut LlamaContext> {
    with_call(|c| (c.awaiting && c.sched == sched as usize).then_some(c.ctx as *mut LlamaContext))
        .flatten()
}

/// The outputs of the call on this thread are no longer awaited.
pub fn awaiting_end() {
    with_call(|c| c.awaiting = false);
}

/// What the compute wrapper does with one graph.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Plan {
    /// Not part of a tracked call's ubatches: straight through.
    Pass,
    /// A forward graph of a tracked call, computed as it is.
    Count,
    /// A forward graph of a tracked call, computed with [`chain`] installed; the host's
    /// callback goes back afterwards.
    Arm,
}

/// Reads the name of `t` (empty if none).
///
/// # Safety
/// `t` is a tensor of a live graph; `get_name` is ggml's `ggml_get_name`.
unsafe fn name_of<'a>(get_name: GetNameFn, t: *const GgmlTensor) -> &'a [u8] {
    if t.is_null() {
        return b"";
    }
    // SAFETY: per this function's contract; ggml returns the tensor's NUL-terminated
    // name buffer, which lives as long as the tensor.
    let p = unsafe { get_name(t) };
    if p.is_null() {
        return b"";
    }
    // SAFETY: `p` is a NUL-terminated string (ggml's fixed-size name field).
    unsafe { CStr::from_ptr(p) }.to_bytes()
}

/// What `graph` is: a forward graph has a `result_*` last node or layer outputs; returns
/// (forward, layers found = highest `il` + 1).
///
/// # Safety
/// `graph` is the live graph the host is computing.
unsafe fn inspect(graph: *mut GgmlGraph, scan_layers: bool) -> (bool, u64) {
    let s = symbols::get();
    let (Some(n_nodes), Some(node), Some(get_name)) = (s.graph_n_nodes, s.graph_node, s.get_name)
    else {
        return (false, 0);
    };
    // SAFETY: ggml's functions on the host's live graph; indices within 0..n.
    let n = unsafe { n_nodes(graph) };
    if n <= 0 {
        return (false, 0);
    }
    // SAFETY: as above (n > 0, so the last node exists).
    let last = unsafe { name_of(get_name, node(graph, n - 1)) };
    let result = last.starts_with(b"result_");
    if !scan_layers {
        return (result, 0);
    }
    let mut layers = 0u64;
    for i in 0..n {
        // SAFETY: as above.
        if let Some(il) = layer_of(unsafe { name_of(get_name, node(graph, i)) }) {
            layers = layers.max(u64::from(il) + 1);
        }
    }
    (result || layers > 0, layers)
}

/// Decides what to do with `graph`, about to be computed by `sched` on this thread, and
/// prepares an armed compute; a tracked call in flight here records `sched` as its own.
/// `sent()`: whether the scheduler's pieces are only sent when the callback sees them (an
/// RPC split of 0c1e570, whose client queues each piece to a dispatcher thread), asked
/// only of a forward graph of an armed call (never of a decode token's): its positions are
/// then layers sent, published through the call's [`SentSink`], and its pipeline is armed
/// whatever its copies (arming it costs nothing resolved: BENCHMARKS row 52).
///
/// # Safety
/// `sched` and `graph` are the host's live scheduler and graph.
pub unsafe fn plan(
    sched: *mut GgmlSched,
    graph: *mut GgmlGraph,
    sent: impl FnOnce() -> bool,
) -> Plan {
    // SAFETY: forwarded.
    let plan = unsafe { decide(sched, graph, sent) };
    #[cfg(feature = "test-hooks")]
    if let Some((true, n)) = with_call(|c| (c.active, c.n_tokens)) {
        crate::test_hooks::planned(n, plan);
    }
    plan
}

/// [`plan`]'s decision.
///
/// # Safety
/// As [`plan`].
unsafe fn decide(
    sched: *mut GgmlSched,
    graph: *mut GgmlGraph,
    sent: impl FnOnce() -> bool,
) -> Plan {
    let Some((armed_call, multi)) = with_call(|c| {
        if c.active {
            // The call's scheduler, whose synchronize its outputs are awaited from.
            c.sched = sched as usize;
        }
        (
            c.active && c.publisher.is_some(),
            c.active && c.n_ubatch > 0 && c.n_tokens > c.n_ubatch,
        )
    }) else {
        return Plan::Pass;
    };
    // A decode-sized call (one ubatch, not armed) is credited when it returns.
    if !armed_call && !multi {
        return Plan::Pass;
    }
    // SAFETY: forwarded from this function's contract.
    let (forward, layers) = unsafe { inspect(graph, armed_call) };
    if !forward {
        return Plan::Pass;
    }
    let policy = Policy::get();
    let sent =
        armed_call && layers > 0 && with_call(|c| c.sent_sink.is_some()).unwrap_or(false) && sent();
    let copies_ok = policy.mode == Mode::Always
        || sent
        || symbols::get()
            .sched_n_copies
            // SAFETY: the live scheduler, ggml's getter.
            .is_none_or(|f| unsafe { f(sched) } <= 1);
    if !(armed_call && layers > 0 && copies_ok) {
        return Plan::Count;
    }
    let (host, host_data) = host_callback(sched);
    let now = clock::monotonic_ns();
    with_call(|c| {
        c.host = host;
        c.host_data = host_data as usize;
        c.host_wants = false;
        c.sent = sent;
        // The model's layer count when known; the graph's own otherwise.
        c.total = if c.n_layer >= layers {
            c.n_layer
        } else {
            layers
        };
        let sub = Substep {
            done: 0,
            total: c.total,
            at_ns: now,
            step_start_ns: c.step_start_ns,
        };
        publish(c, &sub);
    })
    .map_or(Plan::Count, |()| Plan::Arm)
}

fn publish(c: &Call, sub: &Substep) {
    if c.sent {
        if let Some(sink) = c.sent_sink {
            sink(c.ctx as *mut LlamaContext, &c.slots, sub.done);
        }
        return;
    }
    if let Some(p) = &c.publisher {
        for &slot in &c.slots {
            let _ = p.publish(slot, sub);
        }
    }
}

/// A forward graph of the call finished computing (returned `status`): the ubatch count
/// and, when more ubatches follow, the tokens covered so far (`None` for the last one,
/// which the call's return credits). Returns (ctx, tokens covered).
pub fn forward_done(status: i32) -> Option<(*mut LlamaContext, u32)> {
    with_call(|c| {
        c.forwards += 1;
        let covered = c.forwards.saturating_mul(c.n_ubatch).min(c.n_tokens);
        (status == 0 && covered < c.n_tokens).then_some((c.ctx as *mut LlamaContext, covered))
    })
    .flatten()
}

/// The step of the call restarted at `step_start_ns` (the next ubatch).
pub fn step_restarted(step_start_ns: u64) {
    with_call(|c| c.step_start_ns = step_start_ns);
}

/// The eval callback of an armed compute. Wants layer outputs and whatever the host
/// wants; shows the host the nodes it wanted; publishes each finished layer. Always
/// returns true.
///
/// # Safety
/// Called by ggml's scheduler with a live tensor of the graph it computes.
pub unsafe extern "C-unwind" fn chain(t: *mut GgmlTensor, ask: bool, _data: *mut c_void) -> bool {
    let Some(get_name) = symbols::get().get_name else {
        return true;
    };
    // SAFETY: `t` is live (this function's contract).
    let layer = layer_of(unsafe { name_of(get_name, t) });
    let host =
        with_call(|c| (c.host, c.host_data as *mut c_void)).unwrap_or((None, std::ptr::null_mut()));
    if ask {
        // SAFETY: the host's own callback, called as the scheduler would have called it.
        let host_wants = host.0.is_some_and(|h| unsafe { h(t, true, host.1) });
        with_call(|c| c.host_wants = host_wants);
        return host_wants || layer.is_some();
    }
    if let Some(il) = layer {
        let _ = std::panic::catch_unwind(|| {
            with_call(|c| {
                let sub = Substep {
                    done: u64::from(il) + 1,
                    total: c.total,
                    at_ns: clock::monotonic_ns(),
                    step_start_ns: c.step_start_ns,
                };
                publish(c, &sub);
            });
        });
        #[cfg(feature = "test-hooks")]
        crate::test_hooks::layer_finished(u64::from(il) + 1);
    }
    let host_wanted = with_call(|c| std::mem::take(&mut c.host_wants)).unwrap_or(false);
    if host_wanted {
        if let Some(h) = host.0 {
            // SAFETY: the host asked for `t`; it is shown to it as the scheduler would.
            // Its answer is not passed on: this callback always returns true.
            let _ = unsafe { h(t, false, host.1) };
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layer_names() {
        assert_eq!(layer_of(b"l_out-0"), Some(0));
        assert_eq!(layer_of(b"l_out-29"), Some(29));
        assert_eq!(layer_of(b"l_last-3"), Some(3));
        for odd in [
            &b"l_out"[..],
            b"l_out-",
            b"l_out-x",
            b"l_out-1 (copy)",
            b"attn_out-3",
            b"l_out-9999999",
            b"",
        ] {
            assert_eq!(layer_of(odd), None, "{:?}", String::from_utf8_lossy(odd));
        }
    }

    #[test]
    fn policy_from_the_environment_values() {
        let p = Policy::parse(None, None);
        assert_eq!(
            (p.mode, p.min_tokens),
            (Mode::Auto, DEFAULT_LAYER_MIN_TOKENS)
        );
        assert!(!p.arms(1) && !p.arms(DEFAULT_LAYER_MIN_TOKENS - 1));
        assert!(p.arms(DEFAULT_LAYER_MIN_TOKENS));
        let p = Policy::parse(Some("always"), Some("9"));
        assert!(p.arms(1));
        let p = Policy::parse(Some("off"), Some("1"));
        assert!(!p.arms(100_000));
        let p = Policy::parse(Some("bogus"), Some("lots"));
        assert_eq!(
            (p.mode, p.min_tokens),
            (Mode::Auto, DEFAULT_LAYER_MIN_TOKENS)
        );
        assert_eq!(Policy::parse(None, Some("0")).min_tokens, 1);
    }

    #[test]
    fn host_callbacks_follow_set_and_free() {
        unsafe extern "C-unwind" fn cb(_: *mut GgmlTensor, _: bool, _: *mut c_void) -> bool {
            true
        }
        let s = 0x5000 as *mut GgmlSched;
        assert!(host_callback(s).0.is_none());
        host_callback_set(s, Some(cb), 7 as *mut c_void);
        assert_eq!(host_callback(s).1 as usize, 7);
        host_callback_set(s, None, std::ptr::null_mut());
        assert!(host_callback(s).0.is_none());
        host_callback_set(s, Some(cb), 8 as *mut c_void);
        sched_freed(s);
        assert!(host_callback(s).0.is_none());
    }
}
