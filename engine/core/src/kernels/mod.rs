//! The engine's CPU kernels, each with a hand-written x86-64 SIMD form and the portable code
//! it is tested and benchmarked against, chosen by one token, [`Isa`]:
//! - [`packed`]: quantized weight matmuls with few rows (decode steps, short prefill
//!   chunks) over weights repacked into tiles, and the activation quantization they take;
//! - [`attention`]: attention of new tokens over the CPU KV-cache buffers in place;
//! - [`silu_mul`]: the gated SiLU of a SwiGLU feed-forward block in one pass;
//! - [`residual`]: a layer's residual additions, on the calling thread (no SIMD of its
//!   own: the compiler vectorises the sum);
//! - `exp8`: `e^x` on eight lanes, which the softmax and the SiLU share.
//!
//! Every SIMD form is tested against its portable code on x86-64 (both paths, whatever
//! the CPU the engine would pick), and `engine/core/benches/` measures them side by side.

pub mod attention;
mod cpu_slices;
// SIMD code (its test loads and stores through raw pointers).
#[cfg(target_arch = "x86_64")]
#[allow(unsafe_code)]
mod exp8;
pub mod isa;
pub mod packed;
pub mod residual;
pub mod silu_mul;

pub use isa::{Isa, Level};
