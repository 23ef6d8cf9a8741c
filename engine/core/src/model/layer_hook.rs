//! What a forward pass says as it finishes each transformer layer.
//!
//! One forward (a prefill chunk, or one decode step for one or several slots) runs every
//! layer in turn; the hook hears each one, so progress can move inside a step rather than
//! only between steps.

use candle_core::Device;
use std::ops::ControlFlow;

/// Told after each transformer layer of a forward has been issued on `device`.
///
/// On the CPU the layer's work is complete when this is called. On an asynchronous device
/// (CUDA) only its kernels have been enqueued: an implementation that publishes progress
/// must defer the write until the device reaches this point (a host callback on the
/// device's stream), never publish at enqueue time. The forward never waits for the hook.
pub trait LayerHook {
    /// `layers_done` of `n_layers` layers of this forward are issued (1 after the first).
    /// `Break` stops the forward at this layer boundary: it fails with
    /// [`EngineError::Interrupted`](crate::EngineError::Interrupted) and no cache takes
    /// its tokens.
    fn layer_done(
        &mut self,
        device: &Device,
        layers_done: usize,
        n_layers: usize,
    ) -> ControlFlow<()>;
}

/// The hook that hears nothing.
impl LayerHook for () {
    fn layer_done(&mut self, _device: &Device, _done: usize, _n_layers: usize) -> ControlFlow<()> {
        ControlFlow::Continue(())
    }
}
