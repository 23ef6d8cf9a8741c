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
    /// AVX2 and AVX-512 VNNI (`vpdpbusd`) with AVX512-F, BW and VL: on 256-bit vectors,
    /// and for the K-quants' products over weights in the cache on 512-bit ones.
    Avx512Vnni,
}

/// The environment variable that caps the instruction set of the engine's kernels
/// (`avx512vnni`, `avx2` or `portable`; unset: the fastest this CPU has). To measure or
/// rule out one kernel path on a CPU that has a faster one.
pub const CEILING_ENV: &str = "HYDRA_KERNEL_ISA";

impl Level {
    /// Every level, fastest first.
    pub const ALL: [Level; 3] = [Level::Avx512Vnni, Level::Avx2, Level::Portable];

    /// Its name, as the engine logs it and [`CEILING_ENV`] takes it.
    pub fn name(self) -> &'static str {
        match self {
            Level::Portable => "portable",
            Level::Avx2 => "avx2",
            Level::Avx512Vnni => "avx512vnni",
        }
    }

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
                    && is_x86_feature_detected!("avx512f")
                    && is_x86_feature_detected!("avx512bw")
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

    /// The fastest level this CPU has, at most the ceiling [`CEILING_ENV`] names (what the
    /// engine runs). A ceiling that cannot be used is left out here; the engine refuses to
    /// start with it ([`Isa::ceiling`]).
    pub fn best() -> Isa {
        static BEST: std::sync::OnceLock<Isa> = std::sync::OnceLock::new();
        *BEST.get_or_init(|| {
            let ceiling = Self::ceiling().ok().flatten();
            Self::fastest_at_most(ceiling.map_or(Level::Avx512Vnni, Isa::level))
        })
    }

    /// The fastest level this CPU has at or below `ceiling`.
    pub fn fastest_at_most(ceiling: Level) -> Isa {
        Self::available()
            .find(|isa| isa.level() <= ceiling)
            .unwrap_or(Self::PORTABLE)
    }

    /// The ceiling [`CEILING_ENV`] sets, if it is set: an error names a value that is not a
    /// level or a level this CPU does not have.
    pub fn ceiling() -> Result<Option<Isa>, String> {
        match std::env::var(CEILING_ENV) {
            Ok(value) => Self::parse_ceiling(&value).map(Some),
            Err(std::env::VarError::NotPresent) => Ok(None),
            Err(e) => Err(format!("{CEILING_ENV}: {e}")),
        }
    }

    /// The level a ceiling's value names (`avx512vnni`, `avx2`, `portable`), where this CPU
    /// has it.
    pub fn parse_ceiling(value: &str) -> Result<Isa, String> {
        let level = Level::ALL
            .into_iter()
            .find(|l| l.name() == value.trim().to_ascii_lowercase())
            .ok_or_else(|| {
                let names: Vec<&str> = Level::ALL.iter().map(|l| l.name()).collect();
                format!("{CEILING_ENV}={value:?}: not one of {}", names.join(", "))
            })?;
        Isa::get(level).ok_or_else(|| format!("{CEILING_ENV}={value}: this CPU has no {value}"))
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
        assert_eq!(Isa::fastest_at_most(Level::Avx512Vnni), all[0]);
        assert_eq!(Isa::fastest_at_most(Level::Portable), Isa::PORTABLE);
        if let Some(avx2) = Isa::get(Level::Avx2) {
            assert_eq!(Isa::fastest_at_most(Level::Avx2), avx2);
        }
        assert!(all.contains(&Isa::best()));
        if Isa::ceiling() == Ok(None) {
            assert_eq!(all.first(), Some(&Isa::best()));
        }
        assert!(all.windows(2).all(|w| w[0].level() > w[1].level()));
        assert!(!Isa::PORTABLE.has_avx2());
        if let Some(avx2) = Isa::get(Level::Avx2) {
            assert!(avx2.has_avx2());
        }
    }

    #[test]
    fn a_ceiling_names_a_level_this_cpu_has() {
        assert_eq!(Isa::parse_ceiling("portable"), Ok(Isa::PORTABLE));
        for level in Level::ALL {
            let parsed = Isa::parse_ceiling(&format!(" {} ", level.name().to_uppercase()));
            match Isa::get(level) {
                Some(isa) => assert_eq!(parsed, Ok(isa)),
                None => assert!(parsed.unwrap_err().contains("this CPU has no")),
            }
        }
        let bad = Isa::parse_ceiling("sse4").unwrap_err();
        assert!(bad.contains("HYDRA_KERNEL_ISA=\"sse4\": not one of avx512vnni, avx2, portable"));
    }
}
