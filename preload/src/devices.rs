//! The devices a context computes on and the device a step waits on (format v1.3,
//! FORMAT.md §5.6, §19), learnt from ggml's own calls with no traffic to any device.
//!
//! **The table.** The first time a forward graph of a tracked call has been computed by a
//! scheduler, [`learn`] asks the scheduler for its backends
//! (`ggml_backend_sched_get_n_backends`, `_get_backend`), each backend for its name and
//! device (`ggml_backend_name`, `ggml_backend_get_device`, `ggml_backend_dev_type`,
//! `ggml_backend_dev_description`), and the scheduler for the backend of each layer's
//! output (`ggml_backend_sched_get_tensor_backend` on `l_out-<il>`) and of the graph's
//! last node (the output head). All of these read the scheduler's and the backends' own
//! memory: none sends an RPC command, which would queue behind a stalled peer. An RPC
//! backend (named `RPC<n>[host:port]` in 0c1e570, `RPC[host:port]` before) is kind `rpc`
//! with the text between the brackets as its endpoint.
//!
//! **The waits.** The calls in which the host thread blocks on a device are interposed
//! (`ggml_backend_synchronize`, `ggml_backend_event_synchronize`, `ggml_backend_tensor_get`,
//! `ggml_backend_tensor_set`, `ggml_backend_tensor_copy`, and `ggml_backend_graph_compute_async`, which is a whole
//! round trip for an RPC backend of the 0.3.16 generation and the send of the command in
//! 0c1e570; and, for 0c1e570's RPC buffers, whose every command with a reply queues behind
//! the graphs in flight: `ggml_backend_buft_get_alloc_size` (a new tensor shape asks the
//! peer, which froze the host there in a frozen-peer run), `ggml_backend_tensor_memset`
//! and `ggml_backend_buffer_clear`). Inside one of them, on a thread running a tracked call, on a device that is
//! not a CPU, [`crate::waits::Wait`] publishes "waiting on device D since t" for the call's slots and
//! clears it when the call returns or unwinds. They nest (a copy between two peers gets
//! from one and sets into the other): the innermost names the device, and when it ends
//! the one around it is published again, with its own start. Until a table with a device
//! other than a CPU is known, every wrapper goes straight through after one relaxed load.

use crate::ffi::*;
use crate::layers;
use crate::symbols::{self, Symbols};
use hydra_layout::{Device, DeviceKind, Devices, LayerRange};
use std::cell::Cell;
use std::ffi::{c_char, CStr};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::RwLock;

/// One backend of a scheduler, as its table entry.
#[derive(Debug, Clone, Copy)]
struct Backend {
    backend: usize,
    device: usize,
    id: u64,
    kind: DeviceKind,
}

/// The backends of one scheduler, in its order (entry `j` has id `j + 1`).
#[derive(Debug)]
struct SchedTable {
    sched: usize,
    backends: Vec<Backend>,
}

/// Every scheduler's table, as learnt.
static TABLES: RwLock<Vec<SchedTable>> = RwLock::new(Vec::new());
/// Some learnt table has a device other than a CPU: only then do the wrappers look.
static ANY_WAITABLE: AtomicBool = AtomicBool::new(false);
/// Bumped when a scheduler is freed, so that a thread's [`KNOWN`] is not taken for a new
/// scheduler at the same address.
static FREED: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    /// The scheduler whose table this thread last found known, and [`FREED`] then: every
    /// forward graph asks [`learn`], which then returns without taking the tables' lock.
    static KNOWN: Cell<(usize, usize)> = const { Cell::new((0, usize::MAX)) };
}

/// Whether this process can learn devices and publish waits (the `devices` and
/// `device_wait` capabilities).
pub fn available() -> bool {
    symbols::get().devices_available()
}

/// The kind of a backend named `name` whose device has ggml type `dev_type`. The type's
/// values moved between generations: 0c1e570 has `IGPU` (2) before `ACCEL` (3), the 0.3.16
/// generation `ACCEL` at 2 (`current`: 0c1e570's numbering). RPC devices say `GPU`: their
/// name tells them apart.
pub fn kind_of(name: &str, dev_type: i32, current: bool) -> DeviceKind {
    if name.starts_with("RPC") {
        return DeviceKind::Rpc;
    }
    match (dev_type, current) {
        (0, _) => DeviceKind::Cpu,
        (1, _) | (2, true) => DeviceKind::Gpu,
        (2, false) | (3, true) => DeviceKind::Accel,
        _ => DeviceKind::Unspecified,
    }
}

/// An RPC backend's endpoint: the text between the brackets of its name
/// (`RPC0[127.0.0.1:50052]`, `RPC[[fd00::5]:50052]`), else its device's description.
pub fn endpoint_of(name: &str, description: &str) -> String {
    match (name.find('['), name.ends_with(']')) {
        (Some(open), true) if open + 1 < name.len() - 1 => name[open + 1..name.len() - 1].into(),
        _ => description.into(),
    }
}

/// Runs of consecutive layers on one device: `(il, device id)` pairs in any order become
/// sorted, non-overlapping ranges (a layer listed twice keeps its first device).
pub fn ranges_of(mut layers: Vec<(u64, u64)>) -> Vec<LayerRange> {
    layers.sort_by_key(|&(il, _)| il);
    layers.dedup_by_key(|&mut (il, _)| il);
    let mut ranges: Vec<LayerRange> = Vec::new();
    for (il, device) in layers {
        match ranges.last_mut() {
            Some(r) if r.device == device && r.last + 1 == il => r.last = il,
            _ => ranges.push(LayerRange {
                first: il,
                last: il,
                device,
            }),
        }
    }
    ranges
}

/// Reads a C string ggml returned (empty for null; invalid UTF-8 replaced).
///
/// # Safety
/// `p` is null or a NUL-terminated string that lives for this call.
unsafe fn text(p: *const c_char) -> String {
    if p.is_null() {
        return String::new();
    }
    // SAFETY: per this function's contract.
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

/// The backends of `sched` and their table entries.
///
/// # Safety
/// `sched` is the host's live scheduler; the symbols are ggml's.
unsafe fn backends_of(s: &Symbols, sched: *mut GgmlSched) -> Option<(Vec<Backend>, Vec<Device>)> {
    let (n_backends, get_backend, name, device, dev_type, describe) = (
        s.sched_n_backends?,
        s.sched_backend?,
        s.backend_name?,
        s.backend_device?,
        s.dev_type?,
        s.dev_description?,
    );
    let current = s.process.is_some();
    // SAFETY: ggml's getters on the live scheduler.
    let n = unsafe { n_backends(sched) }.clamp(0, hydra_layout::devices::MAX_DEVICES as i32);
    let mut backends = Vec::new();
    let mut table = Vec::new();
    for i in 0..n {
        // SAFETY: `i` is below the scheduler's backend count.
        let backend = unsafe { get_backend(sched, i) };
        if backend.is_null() {
            return None;
        }
        // SAFETY: ggml's getters on a live backend and its device; none talks to it.
        let (backend_name, dev) = unsafe { (text(name(backend)), device(backend)) };
        let (ty, description) = if dev.is_null() {
            (-1, String::new())
        } else {
            // SAFETY: as above, on the backend's live device.
            unsafe { (dev_type(dev), text(describe(dev))) }
        };
        let kind = kind_of(&backend_name, ty, current);
        let endpoint = if kind == DeviceKind::Rpc {
            endpoint_of(&backend_name, &description)
        } else {
            String::new()
        };
        backends.push(Backend {
            backend: backend as usize,
            device: dev as usize,
            id: i as u64 + 1,
            kind,
        });
        table.push(Device {
            kind,
            name: backend_name,
            endpoint,
        });
    }
    Some((backends, table))
}

/// The id of `backend` among `backends` (0: none).
fn id_of(backends: &[Backend], backend: *mut GgmlBackend) -> u64 {
    backends
        .iter()
        .find(|b| b.backend == backend as usize)
        .map_or(0, |b| b.id)
}

/// The layer map and the output head's device of `graph` as `sched` placed it.
///
/// # Safety
/// `sched` and `graph` are live; `graph` was just computed by `sched`.
unsafe fn placement(
    s: &Symbols,
    sched: *mut GgmlSched,
    graph: *mut GgmlGraph,
    backends: &[Backend],
) -> Option<(Vec<(u64, u64)>, u64)> {
    let (n_nodes, node, get_name, tensor_backend) = (
        s.graph_n_nodes?,
        s.graph_node?,
        s.get_name?,
        s.sched_tensor_backend?,
    );
    // SAFETY: ggml's readers on the live graph, indices within 0..n.
    let n = unsafe { n_nodes(graph) };
    let mut layers = Vec::new();
    for i in 0..n {
        // SAFETY: as above.
        let t = unsafe { node(graph, i) };
        // SAFETY: a node of the live graph.
        let name = unsafe { get_name(t) };
        if name.is_null() {
            continue;
        }
        // SAFETY: ggml's NUL-terminated name buffer of the live tensor.
        let il = layers::layer_of(unsafe { CStr::from_ptr(name) }.to_bytes());
        if let Some(il) = il {
            // SAFETY: the scheduler's own record of where it placed the node.
            let id = id_of(backends, unsafe { tensor_backend(sched, t) });
            if id != 0 {
                layers.push((u64::from(il), id));
            }
        }
    }
    if layers.is_empty() {
        return None;
    }
    // SAFETY: as above; n > 0 since a layer node was found.
    let output = id_of(backends, unsafe {
        tensor_backend(sched, node(graph, n - 1))
    });
    Some((layers, output))
}

/// After `sched` computed `graph` for a tracked call: the first time a scheduler's forward
/// graph shows its layers, its table and layer map (`n_layer` layers, 0 = as the graph
/// says), to publish; none otherwise (already known, not a forward graph, or symbols
/// missing).
///
/// # Safety
/// `sched` and `graph` are the host's live scheduler and the graph it just computed.
pub unsafe fn learn(sched: *mut GgmlSched, graph: *mut GgmlGraph, n_layer: u64) -> Option<Devices> {
    let this = (sched as usize, FREED.load(Ordering::Acquire));
    if KNOWN.try_with(Cell::get).ok() == Some(this) {
        return None;
    }
    let known = |tables: &Vec<SchedTable>| tables.iter().any(|t| t.sched == sched as usize);
    if known(&TABLES.read().unwrap_or_else(|e| e.into_inner())) {
        let _ = KNOWN.try_with(|k| k.set(this));
        return None;
    }
    let s = symbols::get();
    // SAFETY: forwarded from this function's contract.
    let (backends, table) = unsafe { backends_of(s, sched) }?;
    // SAFETY: forwarded.
    let (layers, output) = unsafe { placement(s, sched, graph, &backends) }?;
    let seen = layers.iter().map(|&(il, _)| il + 1).max().unwrap_or(0);
    let mut tables = TABLES.write().unwrap_or_else(|e| e.into_inner());
    if known(&tables) {
        return None;
    }
    if backends.iter().any(|b| b.kind != DeviceKind::Cpu) {
        ANY_WAITABLE.store(true, Ordering::Relaxed);
    }
    tables.push(SchedTable {
        sched: sched as usize,
        backends,
    });
    Some(Devices {
        devices: table,
        layer_count: n_layer.max(seen),
        ranges: ranges_of(layers),
        output_device: output,
    })
}

/// `sched` is being freed: forget its table (another scheduler may get its address).
pub fn sched_freed(sched: *mut GgmlSched) {
    TABLES
        .write()
        .unwrap_or_else(|e| e.into_inner())
        .retain(|t| t.sched != sched as usize);
    FREED.fetch_add(1, Ordering::Release);
}

/// Whether `sched`'s learnt backends are RPC peers and CPUs only, at least one peer: a
/// split whose compute on its devices a host only *sends* (0c1e570's RPC client queues a
/// graph to its dispatcher thread and returns; its synchronize waits until the command is
/// written, not computed). False for an unknown scheduler, or one with another device.
pub fn rpc_only(sched: *mut GgmlSched) -> bool {
    let tables = TABLES.read().unwrap_or_else(|e| e.into_inner());
    tables
        .iter()
        .find(|t| t.sched == sched as usize)
        .is_some_and(|t| {
            t.backends.iter().any(|b| b.kind == DeviceKind::Rpc)
                && t.backends
                    .iter()
                    .all(|b| matches!(b.kind, DeviceKind::Rpc | DeviceKind::Cpu))
        })
}

/// The device id of the first learnt backend that `matches`, unless it is a CPU.
fn waitable(matches: impl Fn(&Backend) -> bool) -> Option<u64> {
    if !ANY_WAITABLE.load(Ordering::Relaxed) {
        return None;
    }
    let tables = TABLES.read().unwrap_or_else(|e| e.into_inner());
    let b = tables
        .iter()
        .flat_map(|t| &t.backends)
        .find(|b| matches(b))?;
    (b.kind != DeviceKind::Cpu).then_some(b.id)
}

/// The waitable device id of `backend`.
pub fn of_backend(backend: *mut GgmlBackend) -> Option<u64> {
    if backend.is_null() {
        return None;
    }
    waitable(|b| b.backend == backend as usize)
}

/// The waitable device id of a ggml device.
pub fn of_device(device: *mut GgmlDevice) -> Option<u64> {
    if device.is_null() {
        return None;
    }
    waitable(|b| b.device == device as usize)
}

/// The waitable device id of the device that holds `t`'s data.
///
/// # Safety
/// `t` is null or a live tensor the host passes to ggml.
pub unsafe fn of_tensor(t: *const GgmlTensor) -> Option<u64> {
    if !ANY_WAITABLE.load(Ordering::Relaxed) {
        return None;
    }
    // SAFETY: per this function's contract.
    let buffer = unsafe { tensor_buffer(t) };
    // SAFETY: the tensor's buffer is live with it (or null).
    unsafe { of_buffer(buffer) }
}

/// The waitable device id of the device a buffer lives on.
///
/// # Safety
/// `buffer` is null or a live buffer the host passes to ggml.
pub unsafe fn of_buffer(buffer: *mut GgmlBuffer) -> Option<u64> {
    if !ANY_WAITABLE.load(Ordering::Relaxed) || buffer.is_null() {
        return None;
    }
    let buffer_type = symbols::get().buffer_type?;
    // SAFETY: ggml's getter on the live buffer; its type lives as long as the backend.
    unsafe { of_buffer_type(buffer_type(buffer)) }
}

/// The waitable device id of a buffer type's device.
///
/// # Safety
/// `buft` is null or a live buffer type the host passes to ggml.
pub unsafe fn of_buffer_type(buft: *mut GgmlBufferType) -> Option<u64> {
    if !ANY_WAITABLE.load(Ordering::Relaxed) || buft.is_null() {
        return None;
    }
    let buffer_type_device = symbols::get().buffer_type_device?;
    // SAFETY: ggml's getter on the live buffer type.
    of_device(unsafe { buffer_type_device(buft) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_follow_the_name_then_the_generations_numbering() {
        assert_eq!(kind_of("RPC0[127.0.0.1:50052]", 1, true), DeviceKind::Rpc);
        assert_eq!(kind_of("RPC[127.0.0.1:50052]", 1, false), DeviceKind::Rpc);
        assert_eq!(kind_of("CPU", 0, true), DeviceKind::Cpu);
        assert_eq!(kind_of("CUDA0", 1, false), DeviceKind::Gpu);
        assert_eq!(kind_of("Vulkan0", 2, true), DeviceKind::Gpu);
        assert_eq!(kind_of("BLAS", 2, false), DeviceKind::Accel);
        assert_eq!(kind_of("BLAS", 3, true), DeviceKind::Accel);
        assert_eq!(kind_of("odd", 9, true), DeviceKind::Unspecified);
    }

    #[test]
    fn endpoints_come_from_the_brackets_of_the_name() {
        assert_eq!(endpoint_of("RPC0[127.0.0.1:50052]", "x"), "127.0.0.1:50052");
        assert_eq!(endpoint_of("RPC[[fd00::5]:50052]", ""), "[fd00::5]:50052");
        assert_eq!(endpoint_of("RPC0", "10.0.0.5:50052"), "10.0.0.5:50052");
        assert_eq!(endpoint_of("RPC[]", "d"), "d");
    }

    #[test]
    fn layers_become_sorted_ranges_per_device() {
        let split: Vec<(u64, u64)> = (0..30)
            .rev()
            .map(|il| (il, 2 + u64::from(il >= 16)))
            .collect();
        assert_eq!(
            ranges_of(split),
            vec![
                LayerRange {
                    first: 0,
                    last: 15,
                    device: 2
                },
                LayerRange {
                    first: 16,
                    last: 29,
                    device: 3
                },
            ]
        );
        // A gap and a device that comes back make ranges of their own.
        let odd = vec![(0, 1), (1, 1), (3, 1), (4, 2), (5, 1), (5, 2)];
        assert_eq!(
            ranges_of(odd),
            vec![
                LayerRange {
                    first: 0,
                    last: 1,
                    device: 1
                },
                LayerRange {
                    first: 3,
                    last: 3,
                    device: 1
                },
                LayerRange {
                    first: 4,
                    last: 4,
                    device: 2
                },
                LayerRange {
                    first: 5,
                    last: 5,
                    device: 1
                },
            ]
        );
        assert!(ranges_of(vec![]).is_empty());
    }
}
