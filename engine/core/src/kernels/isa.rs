//! [`Isa`], the one token every CPU kernel takes to choose its code: the hand-written SIMD
//! form of an instruction set this CPU has, or the portable code the SIMD forms are tested
//! and benchmarked against.
//!
//! Only [`Isa::best`] and [`Isa::get`] make one above [`Level::Portable`], after checking
//! the CPU, so a kernel given an `Isa` of [`Level::Avx2`] or more may run AVX2 code
//! without a check of its own: that is the proof its `unsafe` blocks rest on.

/// An instruction set the kernels are written for, slowest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Level {
    /// Portable Rust (loops the compiler vectorizes, or candle's ops); the reference the
    /// others are tested against.
    Portable,
    /// x86-64 AVX2, FMA and F16C (`vpmaddubsw`, `vpmaddwd`, vector `exp`).
    Avx2,
    /// AVX2 and AVX-512 VNNI on 256-bit vectors (`vpdpbusd`), with AVX512-VL.
    Avx512Vnni,
}

impl Level {
    /// Every level, fastest first.
    pub const ALL: [Level; 3] = [Level::Avx512Vnni, Level::Avx2, Level::Portable];

    /// Whether this CPU has the instructions of `self`.
    fn is_available(self) -> bool {
        match self {
            Level::Portable => true,
            #[cfg(target_arch = "x86_64")]
            Level::Avx2 => {
                is_x86_feature_detected!("avx2")
                    && is_x86_feature_detected!("fma")
                    && is_x86_feature_detected!("f16c")
            }
            #[cfg(target_arch = "x86_64")]
            Level::Avx512Vnni => {
                Level::Avx2.is_available()
                    && is_x86_feature_detected!("avx512vnni")
                    && is_x86_feature_detected!("avx512vl")
            }
            #[cfg(not(target_arch = "x86_64"))]
            _ => false,
        }
    }
}

/// A [`Level`] that this CPU has: proof of its instructions for the kernels it is given to
/// (std caches the CPU's features, so making one is a few atomic loads).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Isa(Level);

impl Isa {
    /// The portable code, on every CPU.
    pub const PORTABLE: Isa = Isa(Level::Portable);

    /// `level` where this CPU has it.
    pub fn get(level: Level) -> Option<Isa> {
        level.is_available().then_some(Isa(level))
    }

    /// The fastest level this CPU has (what the engine runs).
    pub fn best() -> Isa {
        Self::available().next().unwrap_or(Self::PORTABLE)
    }

    /// Every level this CPU has, fastest first (the portable code last).
    pub fn available() -> impl Iterator<Item = Isa> {
        Level::ALL.into_iter().filter_map(Isa::get)
    }

    /// Its level.
    pub fn level(self) -> Level {
        self.0
    }

    /// Whether kernels given `self` may run AVX2, FMA and F16C code.
    pub fn has_avx2(self) -> bool {
        self.0 >= Level::Avx2
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn portable_is_always_there_and_last() {
        let all: Vec<Isa> = Isa::available().collect();
        assert_eq!(all.last(), Some(&Isa::PORTABLE));
        assert_eq!(all.first(), Some(&Isa::best()));
        assert!(all.windows(2).all(|w| w[0].level() > w[1].level()));
        assert!(!Isa::PORTABLE.has_avx2());
        if let Some(avx2) = Isa::get(Level::Avx2) {
            assert!(avx2.has_avx2());
        }
    }
}
