//! Where the model runs: `cpu` or `cuda:N`.

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

    /// Open the candle device.
    ///
    /// On a build without the `cuda` feature, `cuda:N` is an
    /// [`EngineError::InvalidDevice`] that says so.
    pub fn open(&self) -> Result<candle_core::Device> {
        match self {
            Self::Cpu => Ok(candle_core::Device::Cpu),
            Self::Cuda(n) => {
                if !cfg!(feature = "cuda") {
                    return Err(EngineError::InvalidDevice {
                        spec: self.to_string(),
                        message: "this build has no CUDA support (rebuild with --features cuda)"
                            .into(),
                    });
                }
                candle_core::Device::new_cuda(*n).map_err(|e| EngineError::InvalidDevice {
                    spec: self.to_string(),
                    message: e.to_string(),
                })
            }
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
        assert!(DeviceSpec::Cpu.open().is_ok());
    }
}
