//! Which code a kernel with a hand-written SIMD form runs: that form where this CPU has it,
//! or the portable code it is tested and benchmarked against.

/// The code a kernel runs (decode attention, activation quantization, the gated SiLU).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Code {
    /// The SIMD form where this CPU has its instructions, else the portable code (what
    /// the engine runs).
    #[default]
    Native,
    /// The portable code (Rust loops the compiler vectorizes, or candle's ops).
    Portable,
}
