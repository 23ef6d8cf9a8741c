//! CUDA GPUs (the `cuda` feature): opened once per process, described for the start-up log,
//! and their errors told apart.
//!
//! Each ordinal gets one candle device on one explicit stream
//! ([`candle_core::Device::new_cuda_with_stream`]), shared by every thread: the weights
//! uploaded by the loading thread and the compute thread's kernels are then ordered on the
//! same stream, and every tensor belongs to the same candle device (candle refuses to mix
//! devices opened separately, even on the same GPU).

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock, PoisonError};

use candle_core::cuda_backend::cudarc::cublas::sys::cublasStatus_t;
use candle_core::cuda_backend::cudarc::driver::sys::CUresult;
use candle_core::cuda_backend::cudarc::driver::DriverError;
use candle_core::cuda_backend::CudaError;
use candle_core::Device;

use crate::error::{EngineError, Result};

/// The devices opened so far, by ordinal.
static OPENED: OnceLock<Mutex<HashMap<usize, Device>>> = OnceLock::new();

/// The device for `ordinal`, opened on first use.
pub(crate) fn open(ordinal: usize) -> Result<Device> {
    let mut opened = OPENED
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    if let Some(device) = opened.get(&ordinal) {
        return Ok(device.clone());
    }
    let device = Device::new_cuda_with_stream(ordinal).map_err(|e| unavailable(ordinal, &e))?;
    opened.insert(ordinal, device.clone());
    Ok(device)
}

/// "cuda:0: NVIDIA H200, compute capability 9.0, 139.8 GiB memory (139.2 GiB free)".
pub(crate) fn describe(ordinal: usize) -> Result<String> {
    let device = open(ordinal)?;
    let stream = device.as_cuda_device()?.cuda_stream();
    let context = stream.context();
    let failed = |e: DriverError| EngineError::DeviceUnavailable {
        spec: format!("cuda:{ordinal}"),
        message: driver_message(&e),
    };
    let name = context.name().map_err(failed)?;
    let (major, minor) = context.compute_capability().map_err(failed)?;
    let (free, total) = context.mem_get_info().map_err(failed)?;
    let gib = |bytes: usize| bytes as f64 / f64::from(1u32 << 30);
    Ok(format!(
        "cuda:{ordinal}: {name}, compute capability {major}.{minor}, {:.1} GiB memory ({:.1} GiB free)",
        gib(total),
        gib(free)
    ))
}

/// Whether `e` is the GPU running out of memory: the driver's `CUDA_ERROR_OUT_OF_MEMORY`
/// (an allocation, a module load) or cuBLAS failing to allocate its workspace.
pub(crate) fn is_out_of_memory(e: &candle_core::Error) -> bool {
    match cuda_error(e) {
        Some(CudaError::Cuda(d) | CudaError::Load { cuda: d, .. }) => {
            d.0 == CUresult::CUDA_ERROR_OUT_OF_MEMORY
        }
        Some(CudaError::Cublas(c)) => c.0 == cublasStatus_t::CUBLAS_STATUS_ALLOC_FAILED,
        _ => false,
    }
}

/// The CUDA error inside candle's wrappers (context, path, backtrace), if there is one.
fn cuda_error(e: &candle_core::Error) -> Option<&CudaError> {
    use candle_core::Error;
    match e {
        Error::Cuda(inner) => inner.downcast_ref::<CudaError>(),
        Error::Context { inner, .. }
        | Error::WithPath { inner, .. }
        | Error::WithBacktrace { inner, .. } => cuda_error(inner),
        _ => None,
    }
}

/// Why opening the GPU failed, in one line: the driver's own words when it gave any.
fn unavailable(ordinal: usize, e: &candle_core::Error) -> EngineError {
    let message = match cuda_error(e) {
        Some(CudaError::Cuda(d)) => driver_message(d),
        _ => e.to_string(),
    };
    EngineError::DeviceUnavailable {
        spec: format!("cuda:{ordinal}"),
        message,
    }
}

/// "no CUDA-capable device is detected (CUDA_ERROR_NO_DEVICE)".
fn driver_message(e: &DriverError) -> String {
    let name = e
        .error_name()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|_| format!("{:?}", e.0));
    match e.error_string() {
        Ok(text) => format!("{} ({name})", text.to_string_lossy()),
        Err(_) => name,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn driver(code: CUresult) -> candle_core::Error {
        candle_core::Error::Cuda(Box::new(CudaError::Cuda(DriverError(code))))
    }

    #[test]
    fn out_of_memory_is_told_apart_through_candles_wrappers() {
        let oom = driver(CUresult::CUDA_ERROR_OUT_OF_MEMORY);
        assert!(is_out_of_memory(&oom));
        let wrapped = oom.context("loading blk.0.attn_q.weight");
        assert!(is_out_of_memory(&wrapped));
        assert!(matches!(
            EngineError::from(wrapped),
            EngineError::OutOfMemory(_)
        ));
        let cublas = candle_core::Error::Cuda(Box::new(CudaError::Cublas(
            candle_core::cuda_backend::cudarc::cublas::result::CublasError(
                cublasStatus_t::CUBLAS_STATUS_ALLOC_FAILED,
            ),
        )));
        assert!(is_out_of_memory(&cublas));
    }

    #[test]
    fn other_errors_stay_backend_errors() {
        for e in [
            driver(CUresult::CUDA_ERROR_LAUNCH_FAILED),
            candle_core::Error::Msg("shape mismatch".into()),
        ] {
            assert!(!is_out_of_memory(&e));
            assert!(matches!(EngineError::from(e), EngineError::Candle(_)));
        }
    }
}
