//! Publishing the layer position inside a step (format v1.1) when the compute actually
//! reaches it.
//!
//! On the CPU a layer's work is done when the forward hands it to the hook, so the
//! position is published at once ([`Immediate`]). On CUDA the hook runs when the layer's
//! kernels are *enqueued*, which says nothing about where the GPU is; [`Deferred`] instead
//! queues a host callback behind the layer's kernels on the compute stream
//! (`cuLaunchHostFunc`), and the callback publishes the position when the stream reaches
//! it. The host never waits for it. The callback runs on a driver thread, so it publishes
//! through a [`SubstepPublisher`], whose updates the writer serialises with the compute
//! thread's own (layout/FORMAT.md §5.4).
//!
//! [`CallbackQueue`] is the one thing the deferred path needs from a device: run a
//! closure in order once everything queued before it has run. CUDA streams provide it
//! (`cuda::StreamQueue`); tests drive the same path with a thread that runs closures in
//! order.

use candle_core::Device;
use hydra_layout::{clock, Substep, SubstepPublisher};

/// A finished layer of one slot's step: `done` of `total` layers of the forward of the
/// step that started at `step_start_ns`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LayerMark {
    /// Slot the forward computes for.
    pub slot: usize,
    /// Layers finished (1 after the first).
    pub done: u64,
    /// Layers in the forward.
    pub total: u64,
    /// `STEP_START_NS` of the step in flight.
    pub step_start_ns: u64,
}

impl LayerMark {
    /// Publishes the mark as the slot's substep words, stamped with the time now.
    fn publish(&self, publisher: &SubstepPublisher) {
        let substep = Substep {
            done: self.done,
            total: self.total,
            at_ns: clock::monotonic_ns(),
            step_start_ns: self.step_start_ns,
        };
        // The slot index comes from the compute thread's own validated slot.
        if let Err(e) = publisher.publish(self.slot, &substep) {
            tracing::error!("publishing the layer position of slot {}: {e}", self.slot);
        }
    }
}

/// Something that hears a layer's work has been issued and publishes the position when
/// the device has done it.
pub trait LayerSignal {
    /// The layer `mark` names has been issued.
    fn layer_done(&mut self, mark: LayerMark);
}

/// For synchronous devices (the CPU): the layer is done when issued; publish now.
#[derive(Debug, Clone)]
pub struct Immediate(pub SubstepPublisher);

impl LayerSignal for Immediate {
    #[inline]
    fn layer_done(&mut self, mark: LayerMark) {
        mark.publish(&self.0);
    }
}

/// A queue that runs closures in order, each once everything queued before it (work and
/// closures) has run, without the caller waiting: a device stream's host callbacks.
pub trait CallbackQueue {
    /// Queues `f`; an error means it will never run.
    fn enqueue(&self, f: Box<dyn FnOnce() + Send + 'static>) -> Result<(), String>;
}

/// For asynchronous devices: publish each layer from a callback queued behind its work.
#[derive(Debug)]
pub struct Deferred<Q> {
    publisher: SubstepPublisher,
    queue: Q,
}

impl<Q: CallbackQueue> Deferred<Q> {
    /// Publishes through `publisher` from callbacks on `queue`.
    pub fn new(publisher: SubstepPublisher, queue: Q) -> Self {
        Self { publisher, queue }
    }
}

impl<Q: CallbackQueue> LayerSignal for Deferred<Q> {
    fn layer_done(&mut self, mark: LayerMark) {
        let publisher = self.publisher.clone();
        if let Err(e) = self
            .queue
            .enqueue(Box::new(move || mark.publish(&publisher)))
        {
            // Never publish at enqueue time instead: that position would be a lie.
            tracing::debug!("layer position of slot {} not queued: {e}", mark.slot);
        }
    }
}

/// The signal for whatever device a forward runs on: immediate on the CPU, deferred to
/// the compute stream on CUDA (its queue made on first use). Other devices publish no
/// position.
#[derive(Debug)]
pub struct DeviceLayerSignal {
    immediate: Immediate,
    #[cfg(feature = "cuda")]
    cuda: Option<Deferred<cuda::StreamQueue>>,
}

impl DeviceLayerSignal {
    /// Publishes through `publisher`.
    pub fn new(publisher: SubstepPublisher) -> Self {
        Self {
            immediate: Immediate(publisher),
            #[cfg(feature = "cuda")]
            cuda: None,
        }
    }

    /// Layer `mark` has been issued on `device`.
    #[inline]
    pub fn layer_done(&mut self, device: &Device, mark: LayerMark) {
        match device {
            Device::Cpu => self.immediate.layer_done(mark),
            #[cfg(feature = "cuda")]
            Device::Cuda(d) => {
                let publisher = &self.immediate.0;
                self.cuda
                    .get_or_insert_with(|| {
                        Deferred::new(publisher.clone(), cuda::StreamQueue::new(d))
                    })
                    .layer_done(mark)
            }
            #[allow(unreachable_patterns)] // CUDA is a pattern of its own with the feature
            _ => {}
        }
    }
}

/// The compute stream's host callbacks (`cuLaunchHostFunc`): unsafe code because cudarc has
/// no safe API for it.
#[cfg(feature = "cuda")]
#[allow(unsafe_code)]
mod cuda {
    use super::CallbackQueue;
    use candle_core::cuda::cudarc::driver::{result::stream::launch_host_function, CudaStream};
    use std::ffi::c_void;
    use std::sync::Arc;

    type Callback = Box<dyn FnOnce() + Send + 'static>;

    /// Host callbacks on the stream candle launches a device's kernels on.
    #[derive(Debug)]
    pub struct StreamQueue(Arc<CudaStream>);

    impl StreamQueue {
        pub fn new(device: &candle_core::CudaDevice) -> Self {
            Self(device.cuda_stream())
        }
    }

    /// Runs the callback `enqueue` leaked into `arg`, exactly once, on a driver thread.
    unsafe extern "C" fn run_callback(arg: *mut c_void) {
        // SAFETY: `arg` is the `Box<Callback>` that `enqueue` leaked for this launch, and the
        // driver calls each launched host function exactly once.
        let f = unsafe { Box::from_raw(arg.cast::<Callback>()) };
        // A panic must not unwind into the driver; the publish it guards cannot panic.
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
    }

    impl CallbackQueue for StreamQueue {
        fn enqueue(&self, f: Callback) -> Result<(), String> {
            self.0
                .context()
                .bind_to_thread()
                .map_err(|e| e.to_string())?;
            let arg = Box::into_raw(Box::new(f));
            let stream = self.0.cu_stream();
            // SAFETY: the stream is alive (held by the Arc) and belongs to the context bound
            // above; `run_callback` makes no CUDA call and takes ownership of `arg`.
            let launched = unsafe { launch_host_function(stream, run_callback, arg.cast()) };
            launched.map_err(|e| {
                // SAFETY: a failed launch did not hand `arg` to the driver: it is still ours.
                drop(unsafe { Box::from_raw(arg) });
                e.to_string()
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hydra_layout::{Phase, SegmentConfig, SegmentReader, SegmentWriter, SlotState, WorkUnit};
    use std::sync::mpsc;
    use std::time::{Duration, Instant};

    /// A CPU stand-in for a device stream: one thread runs queued closures in order.
    struct ThreadQueue {
        tx: Option<mpsc::Sender<Box<dyn FnOnce() + Send>>>,
        worker: Option<std::thread::JoinHandle<()>>,
    }

    impl ThreadQueue {
        fn new() -> Self {
            let (tx, rx) = mpsc::channel::<Box<dyn FnOnce() + Send>>();
            let worker = std::thread::spawn(move || {
                for f in rx {
                    f();
                }
            });
            Self {
                tx: Some(tx),
                worker: Some(worker),
            }
        }
    }

    impl CallbackQueue for ThreadQueue {
        fn enqueue(&self, f: Box<dyn FnOnce() + Send + 'static>) -> Result<(), String> {
            let tx = self.tx.as_ref().ok_or("queue closed")?;
            tx.send(f).map_err(|e| e.to_string())
        }
    }

    impl Drop for ThreadQueue {
        fn drop(&mut self) {
            drop(self.tx.take());
            if let Some(w) = self.worker.take() {
                let _ = w.join();
            }
        }
    }

    fn segment(dir: &std::path::Path) -> (SegmentWriter, SlotState) {
        let mut w = SegmentWriter::create(&SegmentConfig {
            dir: dir.to_path_buf(),
            engine_id: "layers".into(),
            slot_count: 2,
            description: hydra_layout::EngineDescription {
                capabilities: hydra_layout::header::capabilities::LAYER_PROGRESS,
                ..Default::default()
            },
        })
        .unwrap();
        let mut s = SlotState::default();
        let now = clock::monotonic_ns();
        s.begin_task(1, Phase::Prefill, WorkUnit::Tokens, 512, now);
        s.start_step(512, now + 1);
        w.publish(1, &s).unwrap();
        (w, s)
    }

    fn mark(done: u64, s: &SlotState) -> LayerMark {
        LayerMark {
            slot: 1,
            done,
            total: 5,
            step_start_ns: s.step_start_ns,
        }
    }

    #[test]
    fn immediate_publishes_each_layer_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let (w, s) = segment(dir.path());
        let r = SegmentReader::open(w.path()).unwrap();
        let mut signal = Immediate(w.substep_publisher());
        for done in 1..=5 {
            let before = clock::monotonic_ns();
            signal.layer_done(mark(done, &s));
            let layer = r.slot(1).unwrap().layer().expect("a position in the step");
            assert_eq!((layer.done, layer.total), (done, 5));
            assert!(layer.at_ns >= before);
        }
    }

    /// The deferred path on the CPU: nothing is published while the queue is busy with
    /// earlier work (the layer is only enqueued); once the queue reaches the callbacks they
    /// publish every layer, in order, stamped when they ran, and the caller never waited.
    #[test]
    fn deferred_publishes_when_the_queue_reaches_the_layer_not_when_it_is_queued() {
        let dir = tempfile::tempdir().unwrap();
        let (w, s) = segment(dir.path());
        let r = SegmentReader::open(w.path()).unwrap();
        let seq_before = r.slot(1).unwrap().seq;
        let queue = ThreadQueue::new();
        // The "device" is busy with earlier work until the gate opens.
        let (open, gate) = mpsc::channel::<()>();
        queue
            .enqueue(Box::new(move || {
                let _ = gate.recv_timeout(Duration::from_secs(60));
            }))
            .unwrap();
        let mut signal = Deferred::new(w.substep_publisher(), queue);
        for done in 1..=5 {
            signal.layer_done(mark(done, &s));
        }
        let snap = r.slot(1).unwrap();
        assert_eq!(snap.layer(), None, "published at enqueue time");
        assert_eq!(snap.seq, seq_before);

        let released = clock::monotonic_ns();
        open.send(()).unwrap();
        let deadline = Instant::now() + Duration::from_secs(30);
        let last = loop {
            let snap = r.slot(1).unwrap();
            if snap.layer().is_some_and(|l| l.done == 5) {
                break snap;
            }
            assert!(Instant::now() < deadline, "callbacks never ran");
            std::thread::sleep(Duration::from_millis(1));
        };
        let layer = last.layer().unwrap();
        assert!(
            layer.at_ns >= released,
            "stamped before the queue reached it"
        );
        // One update per layer, nothing else touched.
        assert_eq!(last.seq, seq_before + 2 * 5);
        assert_eq!(last.state, s);
    }

    #[test]
    fn a_previous_steps_late_callback_is_not_the_current_position() {
        let dir = tempfile::tempdir().unwrap();
        let (mut w, mut s) = segment(dir.path());
        let r = SegmentReader::open(w.path()).unwrap();
        let old = mark(5, &s);
        let now = clock::monotonic_ns();
        s.finish_step(512, now);
        s.start_step(1, now + 1);
        w.publish(1, &s).unwrap();
        Immediate(w.substep_publisher()).layer_done(old);
        let snap = r.slot(1).unwrap();
        assert_eq!(snap.substep.map(|l| l.done), Some(5));
        assert_eq!(snap.layer(), None);
    }
}
