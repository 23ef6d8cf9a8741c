//! Where the model runs: `cpu` or `cuda:N`.
//!
//! On a CUDA build (the `cuda` feature) each GPU is opened once per process, on one explicit
//! stream that every thread shares (see the `cuda` module), so weights loaded on the main thread and
//! the compute thread's work are ordered on the same stream and belong to the same candle
//! device.

#[cfg(feature = "cuda")]
pub mod cuda;

use std::fmt;
use std::str::FromStr;

use crate::error::{EngineError, Result};

/// A compute device as given on a command line (`cpu`, `cuda`, `cuda:N`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DeviceSpec {
    /// The CPU backend (always available).
    #[default]
    Cpu,
    /// The CUDA GPU with this ordinal (needs the `cuda` cargo feature).
    Cuda(usize),
}

impl FromStr for DeviceSpec {
    type Err = EngineError;

    fn from_str(s: &str) -> Result<Self> {
        let bad = |message: &str| EngineError::InvalidDevice {
            spec: s.to_string(),
            message: message.to_string(),
        };
        let t = s.trim().to_ascii_lowercase();
        match t.as_str() {
            "cpu" => Ok(Self::Cpu),
            "cuda" | "gpu" => Ok(Self::Cuda(0)),
            _ => {
                let Some(n) = t.strip_prefix("cuda:") else {
                    return Err(bad("expected \"cpu\" or \"cuda:N\""));
                };
                n.parse::<usize>().map(Self::Cuda).map_err(|_| {
                    bad("the CUDA ordinal after \"cuda:\" must be a number, as in cuda:0")
                })
            }
        }
    }
}

impl fmt::Display for DeviceSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Cpu => f.write_str("cpu"),
            Self::Cuda(n) => write!(f, "cuda:{n}"),
        }
    }
}

impl DeviceSpec {
    /// Whether this build can use the device at all (CUDA needs the `cuda` feature).
    pub fn is_supported(&self) -> bool {
        match self {
            Self::Cpu => true,
            Self::Cuda(_) => cfg!(feature = "cuda"),
        }
    }

    /// Open the candle device. A CUDA device is opened once per process and shared: every
    /// call for the same ordinal returns the same device.
    ///
    /// On a build without the `cuda` feature, `cuda:N` is an
    /// [`EngineError::InvalidDevice`] that says so; a GPU that cannot be opened (no driver,
    /// no such ordinal) is an [`EngineError::DeviceUnavailable`].
    pub fn open(&self) -> Result<candle_core::Device> {
        match self {
            Self::Cpu => Ok(candle_core::Device::Cpu),
            #[cfg(feature = "cuda")]
            Self::Cuda(n) => cuda::open(*n),
            #[cfg(not(feature = "cuda"))]
            Self::Cuda(_) => Err(self.no_cuda_support()),
        }
    }

    /// One line naming the device for the start-up log: for a GPU its name, compute
    /// capability and memory (opening it if needed, so an unusable GPU fails here).
    pub fn describe(&self) -> Result<String> {
        match self {
            Self::Cpu => Ok("cpu".into()),
            #[cfg(feature = "cuda")]
            Self::Cuda(n) => cuda::describe(*n),
            #[cfg(not(feature = "cuda"))]
            Self::Cuda(_) => Err(self.no_cuda_support()),
        }
    }

    #[cfg(not(feature = "cuda"))]
    fn no_cuda_support(&self) -> EngineError {
        EngineError::InvalidDevice {
            spec: self.to_string(),
            message: "this build has no CUDA support (rebuild with --features cuda)".into(),
        }
    }
}

/// Whether a candle error is the device running out of memory (CUDA's
/// `CUDA_ERROR_OUT_OF_MEMORY`, or cuBLAS failing to allocate). Always false on the CPU,
/// where an allocation failure aborts the process.
pub fn is_out_of_memory(e: &candle_core::Error) -> bool {
    #[cfg(feature = "cuda")]
    {
        cuda::is_out_of_memory(e)
    }
    #[cfg(not(feature = "cuda"))]
    {
        let _ = e;
        false
    }
}

/// Candle's errors become [`EngineError::Candle`], except the device running out of memory,
/// which is told apart once here ([`is_out_of_memory`]) so that every `?` reports it as
/// [`EngineError::OutOfMemory`].
impl From<candle_core::Error> for EngineError {
    fn from(e: candle_core::Error) -> Self {
        if is_out_of_memory(&e) {
            Self::OutOfMemory(e)
        } else {
            Self::Candle(e)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_cpu_and_cuda() {
        assert_eq!("cpu".parse::<DeviceSpec>().unwrap(), DeviceSpec::Cpu);
        assert_eq!(" CPU ".parse::<DeviceSpec>().unwrap(), DeviceSpec::Cpu);
        assert_eq!("cuda:1".parse::<DeviceSpec>().unwrap(), DeviceSpec::Cuda(1));
        assert_eq!("cuda".parse::<DeviceSpec>().unwrap(), DeviceSpec::Cuda(0));
        assert_eq!(DeviceSpec::Cuda(3).to_string(), "cuda:3");
    }

    #[test]
    fn rejects_garbage_clearly() {
        let e = "tpu".parse::<DeviceSpec>().unwrap_err().to_string();
        assert!(e.contains("expected \"cpu\" or \"cuda:N\""), "{e}");
        let e = "cuda:x".parse::<DeviceSpec>().unwrap_err().to_string();
        assert!(e.contains("ordinal"), "{e}");
    }

    #[cfg(not(feature = "cuda"))]
    #[test]
    fn cuda_without_feature_is_a_clear_error() {
        let e = DeviceSpec::Cuda(0).open().unwrap_err().to_string();
        assert!(e.contains("no CUDA support"), "{e}");
        let e = DeviceSpec::Cuda(0).describe().unwrap_err().to_string();
        assert!(e.contains("no CUDA support"), "{e}");
        assert!(DeviceSpec::Cpu.open().is_ok());
        assert_eq!(DeviceSpec::Cpu.describe().unwrap(), "cpu");
    }

    #[test]
    fn candle_errors_are_backend_errors_on_the_cpu() {
        let e = candle_core::Error::Msg("shape mismatch".into());
        assert!(!is_out_of_memory(&e));
        assert!(matches!(EngineError::from(e), EngineError::Candle(_)));
    }
}
