//! Load-time conversion of quantized weights to types with fast kernels.
//!
//! candle's CPU backend has SIMD dot products for Q4_0, Q8_0 and the K-quants,
//! but only scalar code for Q4_1, Q5_0, Q5_1 and Q8_1. On a CPU with AVX2 the engine
//! runs Q4_0, Q4_1 and Q8_0 with its own kernels (`kernels::packed`), so of these only
//! Q5_0, Q5_1 and Q8_1 are slow there; on a GPU, candle's kernels cover them all.
//! Conversion dequantizes to f32 and requantizes; to Q8_0 it is close to lossless,
//! to Q4_0 it loses a little more but keeps the size.

use std::fmt;
use std::path::Path;
use std::str::FromStr;

use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::Device;

use crate::error::{EngineError, Result};
use crate::kernels::packed::PackedMatrix;

/// The quantized type to convert slow weights to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum QuantTarget {
    /// 8-bit blocks of 32 (about 1.06 bytes per weight), near lossless.
    #[default]
    Q8_0,
    /// 4-bit blocks of 32 (about 0.56 bytes per weight).
    Q4_0,
}

impl QuantTarget {
    /// The candle type.
    pub fn dtype(self) -> GgmlDType {
        match self {
            Self::Q8_0 => GgmlDType::Q8_0,
            Self::Q4_0 => GgmlDType::Q4_0,
        }
    }
}

/// When to convert weights at load time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Conversion {
    /// Convert only types without a fast kernel on the chosen device (default, to Q8_0).
    Auto(QuantTarget),
    /// Convert every quantized matrix of another type to the target.
    Always(QuantTarget),
    /// Keep the weights exactly as stored.
    Never,
}

impl Default for Conversion {
    fn default() -> Self {
        Self::Auto(QuantTarget::Q8_0)
    }
}

impl FromStr for Conversion {
    type Err = EngineError;

    /// `auto`, `auto:q4_0`, `q8_0`, `q4_0` (always), `none`.
    fn from_str(s: &str) -> Result<Self> {
        match s.trim().to_ascii_lowercase().as_str() {
            "auto" | "auto:q8_0" => Ok(Self::Auto(QuantTarget::Q8_0)),
            "auto:q4_0" => Ok(Self::Auto(QuantTarget::Q4_0)),
            "q8_0" => Ok(Self::Always(QuantTarget::Q8_0)),
            "q4_0" => Ok(Self::Always(QuantTarget::Q4_0)),
            "none" | "off" | "never" => Ok(Self::Never),
            _ => Err(EngineError::InvalidOption {
                name: "convert",
                message: format!("{s:?}: expected auto, auto:q4_0, q8_0, q4_0 or none"),
            }),
        }
    }
}

impl fmt::Display for Conversion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Auto(QuantTarget::Q8_0) => f.write_str("auto"),
            Self::Auto(QuantTarget::Q4_0) => f.write_str("auto:q4_0"),
            Self::Always(t) => f.write_str(dtype_name(t.dtype())),
            Self::Never => f.write_str("none"),
        }
    }
}

/// The llama.cpp name of a ggml type ("Q4_1", "F32", ...).
pub fn dtype_name(d: GgmlDType) -> &'static str {
    match d {
        GgmlDType::F32 => "F32",
        GgmlDType::F16 => "F16",
        GgmlDType::BF16 => "BF16",
        GgmlDType::Q4_0 => "Q4_0",
        GgmlDType::Q4_1 => "Q4_1",
        GgmlDType::Q5_0 => "Q5_0",
        GgmlDType::Q5_1 => "Q5_1",
        GgmlDType::Q8_0 => "Q8_0",
        GgmlDType::Q8_1 => "Q8_1",
        GgmlDType::Q2K => "Q2_K",
        GgmlDType::Q3K => "Q3_K",
        GgmlDType::Q4K => "Q4_K",
        GgmlDType::Q5K => "Q5_K",
        GgmlDType::Q6K => "Q6_K",
        GgmlDType::Q8K => "Q8_K",
    }
}

/// Whether the engine has a fast matmul kernel for `dtype` on `device` (its own for Q4_1
/// on a CPU with AVX2, candle's for the rest).
pub fn has_fast_path(dtype: GgmlDType, device: &Device) -> bool {
    match dtype {
        GgmlDType::Q4_1 => !device.is_cpu() || PackedMatrix::is_fast_here(),
        GgmlDType::Q5_0 | GgmlDType::Q5_1 | GgmlDType::Q8_1 => !device.is_cpu(),
        _ => true,
    }
}

fn is_quantized(d: GgmlDType) -> bool {
    !matches!(d, GgmlDType::F32 | GgmlDType::F16 | GgmlDType::BF16)
}

/// The type `t` should be converted to under `conv` on `device`, if any.
///
/// Only 2-D quantized matrices whose rows fit the target's block size are converted.
pub fn conversion_for(t: &QTensor, conv: Conversion, device: &Device) -> Option<GgmlDType> {
    let d = t.dtype();
    let (target, wanted) = match conv {
        Conversion::Never => return None,
        Conversion::Auto(tg) => (tg.dtype(), is_quantized(d) && !has_fast_path(d, device)),
        Conversion::Always(tg) => (tg.dtype(), is_quantized(d)),
    };
    let dims = t.shape().dims();
    let fits = dims.len() == 2 && dims[1].is_multiple_of(target.block_size());
    (wanted && fits && d != target).then_some(target)
}

/// Convert `t` to `target` (dequantize to f32, requantize).
pub fn convert(t: &QTensor, target: GgmlDType) -> Result<QTensor> {
    let f = t.dequantize(&t.device())?;
    Ok(QTensor::quantize(&f, target)?)
}

/// A short description of the types of a set of weight matrices, as
/// llama.cpp names them: the most common quantized type ("Q4_1"), followed
/// by "->Q8_0" when conversion changed it.
pub fn describe(before: &[GgmlDType], after: &[GgmlDType]) -> String {
    fn dominant(ts: &[GgmlDType]) -> Option<GgmlDType> {
        let mut counts: Vec<(GgmlDType, usize)> = Vec::new();
        for &t in ts {
            match counts.iter_mut().find(|(d, _)| *d == t) {
                Some((_, n)) => *n += 1,
                None => counts.push((t, 1)),
            }
        }
        counts.sort_by_key(|c| std::cmp::Reverse(c.1));
        counts
            .iter()
            .find(|(d, _)| is_quantized(*d))
            .or(counts.first())
            .map(|(d, _)| *d)
    }
    match (dominant(before), dominant(after)) {
        (Some(b), Some(a)) if a != b => format!("{}->{}", dtype_name(b), dtype_name(a)),
        (Some(b), _) => dtype_name(b).to_string(),
        _ => "none".to_string(),
    }
}

/// Write a copy of the GGUF at `src` to `dst` with `conv` applied to its
/// weights (metadata unchanged), so other implementations can run the very
/// weights [`crate::Model::load_gguf`] would. Returns the quantization string
/// ("Q4_1->Q8_0").
pub fn convert_gguf_file(src: &Path, dst: &Path, conv: Conversion) -> Result<String> {
    use candle_core::quantized::gguf_file::Content;
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| EngineError::Io { path, source }
    };
    let invalid = |message: String| EngineError::InvalidModel {
        path: src.to_path_buf(),
        message,
    };
    let mut r = std::io::BufReader::new(std::fs::File::open(src).map_err(io(src))?);
    let ct = Content::read(&mut r).map_err(|e| invalid(e.to_string()))?;
    let dev = Device::Cpu;
    let mut names: Vec<&String> = ct.tensor_infos.keys().collect();
    names.sort();
    let (mut before, mut after) = (Vec::new(), Vec::new());
    let mut tensors = Vec::with_capacity(names.len());
    for name in names {
        let t = ct
            .tensor(&mut r, name, &dev)
            .map_err(|e| invalid(format!("tensor {name}: {e}")))?;
        let t = match conversion_for(&t, conv, &dev) {
            Some(target) => convert(&t, target)?,
            None => t,
        };
        if t.shape().rank() == 2 {
            after.push(t.dtype());
        }
        tensors.push((name.as_str(), t));
    }
    for info in ct.tensor_infos.values() {
        if info.shape.rank() == 2 {
            before.push(info.ggml_dtype);
        }
    }
    let mut md: Vec<(&String, &candle_core::quantized::gguf_file::Value)> =
        ct.metadata.iter().collect();
    md.sort_by(|a, b| a.0.cmp(b.0));
    let md: Vec<(&str, &candle_core::quantized::gguf_file::Value)> =
        md.into_iter().map(|(k, v)| (k.as_str(), v)).collect();
    let refs: Vec<(&str, &QTensor)> = tensors.iter().map(|(n, t)| (*n, t)).collect();
    let mut w = std::io::BufWriter::new(std::fs::File::create(dst).map_err(io(dst))?);
    candle_core::quantized::gguf_file::write(&mut w, &md, &refs)?;
    std::io::Write::flush(&mut w).map_err(io(dst))?;
    Ok(describe(&before, &after))
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Tensor;

    #[test]
    fn auto_converts_only_slow_types() {
        let dev = Device::Cpu;
        let f = Tensor::arange(0f32, 64.0 * 32.0, &dev)
            .unwrap()
            .reshape((64, 32))
            .unwrap();
        let q41 = QTensor::quantize(&f, GgmlDType::Q4_1).unwrap();
        let q50 = QTensor::quantize(&f, GgmlDType::Q5_0).unwrap();
        let q80 = QTensor::quantize(&f, GgmlDType::Q8_0).unwrap();
        let auto = Conversion::default();
        assert_eq!(conversion_for(&q50, auto, &dev), Some(GgmlDType::Q8_0));
        // Q4_1 has the engine's own kernel where the CPU has AVX2.
        let q41_target = (!PackedMatrix::is_fast_here()).then_some(GgmlDType::Q8_0);
        assert_eq!(conversion_for(&q41, auto, &dev), q41_target);
        assert_eq!(conversion_for(&q80, auto, &dev), None);
        assert_eq!(conversion_for(&q50, Conversion::Never, &dev), None);
        let c = convert(&q41, GgmlDType::Q8_0).unwrap();
        assert_eq!(c.dtype(), GgmlDType::Q8_0);
        assert_eq!(c.shape().dims(), &[64, 32]);
        assert_eq!(
            describe(
                &[GgmlDType::Q4_1, GgmlDType::F32],
                &[GgmlDType::Q8_0, GgmlDType::F32]
            ),
            "Q4_1->Q8_0"
        );
        assert_eq!(
            "q4_0".parse::<Conversion>().unwrap(),
            Conversion::Always(QuantTarget::Q4_0)
        );
        assert!("q3".parse::<Conversion>().is_err());
    }
}
