//! The two fixed bucket layouts of the statistics' histograms (FORMAT.md §17.2): time in
//! microseconds, two buckets per power of two from 128 µs to 2³³ µs (2 h 23 min), and
//! actual/predicted ratios in Q20 fixed point, four per power of two from 1/64 to 64.
//! Integer arithmetic only; the layouts never change within format major 1.

/// Buckets of a time histogram (53 finite bounds and `+Inf`).
pub const TIME_BUCKETS: usize = 54;
/// Buckets of a ratio histogram (49 finite bounds and `+Inf`).
pub const RATIO_BUCKETS: usize = 50;
/// One in Q20 fixed point: a step that took exactly its prediction.
pub const Q20_ONE: u64 = 1 << 20;
/// The most a ratio adds to its histogram's `SUM` (4096 in Q20), so a stalled step cannot
/// overflow it.
pub const RATIO_SUM_CAP: u64 = 1 << 32;

const TIME_FIRST_US: u64 = 128;
const TIME_LAST_US: u64 = 1 << 33;
const RATIO_FIRST: u64 = 1 << 14;
const RATIO_LAST: u64 = 1 << 26;

/// The bucket of a duration of `ns` nanoseconds.
#[inline]
pub fn time_bucket(ns: u64) -> usize {
    let us = ns / 1000 + u64::from(ns % 1000 != 0);
    if us <= TIME_FIRST_US {
        return 0;
    }
    if us > TIME_LAST_US {
        return TIME_BUCKETS - 1;
    }
    let x = us - 1;
    let e = 63 - x.leading_zeros() as usize;
    1 + 2 * (e - 7) + ((x >> (e - 1)) & 1) as usize
}

/// The inclusive upper bound of time bucket `k` in microseconds; `None` for the last
/// (`+Inf`) bucket and past it.
pub fn time_bound_us(k: usize) -> Option<u64> {
    match k {
        0 => Some(TIME_FIRST_US),
        1..=52 => {
            let e = 7 + (k - 1) / 2;
            let m = ((k - 1) % 2) as u64;
            Some((1u64 << e) + (m + 1) * (1u64 << (e - 1)))
        }
        _ => None,
    }
}

/// The ratio `actual_ns / predicted_ns` in Q20, `floor(actual * 2^20 / predicted)`,
/// saturated; `None` without a prediction.
#[inline]
pub fn ratio_q20(actual_ns: u64, predicted_ns: u64) -> Option<u64> {
    if predicted_ns == 0 {
        return None;
    }
    let r = (u128::from(actual_ns) << 20) / u128::from(predicted_ns);
    Some(u64::try_from(r).unwrap_or(u64::MAX))
}

/// The bucket of a Q20 ratio `r`.
#[inline]
pub fn ratio_bucket(r: u64) -> usize {
    if r <= RATIO_FIRST {
        return 0;
    }
    if r > RATIO_LAST {
        return RATIO_BUCKETS - 1;
    }
    let x = r - 1;
    let e = 63 - x.leading_zeros() as usize;
    1 + 4 * (e - 14) + ((x >> (e - 2)) & 3) as usize
}

/// The inclusive upper bound of ratio bucket `k` in Q20; `None` for `+Inf` and past it.
pub fn ratio_bound_q20(k: usize) -> Option<u64> {
    match k {
        0 => Some(RATIO_FIRST),
        1..=48 => {
            let e = 14 + (k - 1) / 4;
            let m = ((k - 1) % 4) as u64;
            Some((1u64 << e) + (m + 1) * (1u64 << (e - 2)))
        }
        _ => None,
    }
}

/// A time bound in seconds as the exact decimal an exporter writes as its `le` label
/// (`"0.000128"`, `"1.048576"`, `"8589.934592"`); `"+Inf"` for the last bucket.
pub fn time_le(k: usize) -> String {
    match time_bound_us(k) {
        Some(us) => exact_decimal(u128::from(us), 1_000_000, 6),
        None => "+Inf".to_owned(),
    }
}

/// A ratio bound as the exact decimal of its binary fraction (`"0.015625"`, `"1.25"`);
/// `"+Inf"` for the last bucket.
pub fn ratio_le(k: usize) -> String {
    match ratio_bound_q20(k) {
        // r / 2^20 = r * 5^20 / 10^20: exact in 20 decimal places.
        Some(r) => exact_decimal(u128::from(r) * 5u128.pow(20), 10u128.pow(20), 20),
        None => "+Inf".to_owned(),
    }
}

/// `value / scale` (scale = 10^places) written exactly, without trailing zeros.
fn exact_decimal(value: u128, scale: u128, places: usize) -> String {
    let whole = value / scale;
    let frac = value % scale;
    if frac == 0 {
        return whole.to_string();
    }
    let digits = format!("{frac:0places$}");
    format!("{whole}.{}", digits.trim_end_matches('0'))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The 53 finite bounds of FORMAT.md §17.2, in µs.
    const TIME_TABLE: [u64; 53] = [
        128, 192, 256, 384, 512, 768, 1024, 1536, 2048, 3072, 4096, 6144, 8192, 12288, 16384,
        24576, 32768, 49152, 65536, 98304, 131072, 196608, 262144, 393216, 524288, 786432, 1048576,
        1572864, 2097152, 3145728, 4194304, 6291456, 8388608, 12582912, 16777216, 25165824,
        33554432, 50331648, 67108864, 100663296, 134217728, 201326592, 268435456, 402653184,
        536870912, 805306368, 1073741824, 1610612736, 2147483648, 3221225472, 4294967296,
        6442450944, 8589934592,
    ];

    #[test]
    fn time_bounds_are_the_table_of_the_format() {
        for (k, &b) in TIME_TABLE.iter().enumerate() {
            assert_eq!(time_bound_us(k), Some(b), "bucket {k}");
        }
        assert_eq!(time_bound_us(53), None);
        assert_eq!(time_le(0), "0.000128");
        assert_eq!(time_le(1), "0.000192");
        assert_eq!(time_le(26), "1.048576");
        assert_eq!(time_le(52), "8589.934592");
        assert_eq!(time_le(53), "+Inf");
    }

    #[test]
    fn a_time_falls_in_the_first_bucket_whose_bound_holds_it() {
        // Exhaustive at every bound's edges: v == bound is in the bucket, bound + 1 ns in
        // the next.
        for (k, &b) in TIME_TABLE.iter().enumerate() {
            assert_eq!(time_bucket(b * 1000), k, "{b} µs");
            assert_eq!(time_bucket(b * 1000 - 999), k, "just over {} µs", b - 1);
            assert_eq!(time_bucket(b * 1000 + 1), k + 1, "just over {b} µs");
        }
        assert_eq!(time_bucket(0), 0);
        assert_eq!(time_bucket(u64::MAX), 53);
        assert_eq!(time_bucket(1_000_000), 6, "1 ms");
        assert_eq!(time_bucket(7_200_000_000_000), 52, "2 h");
        // A scan against the definition: the first bucket whose bound is >= ceil(v / 1000).
        for us in (0..20_000u64).chain((1u64 << 33) - 5..(1u64 << 33) + 5) {
            let want = TIME_TABLE.iter().position(|&b| us <= b).unwrap_or(53);
            assert_eq!(time_bucket(us * 1000), want, "{us} µs");
        }
    }

    #[test]
    fn ratio_bounds_and_buckets_follow_the_format() {
        assert_eq!(ratio_le(0), "0.015625");
        assert_eq!(ratio_le(1), "0.01953125");
        assert_eq!(ratio_le(24), "1");
        assert_eq!(ratio_le(25), "1.25");
        assert_eq!(ratio_le(48), "64");
        assert_eq!(ratio_le(49), "+Inf");
        assert_eq!(ratio_bucket(Q20_ONE), 24, "exactly the prediction");
        assert_eq!(ratio_bucket(Q20_ONE + 1), 25);
        for k in 0..49 {
            let b = ratio_bound_q20(k).unwrap();
            assert_eq!(ratio_bucket(b), k);
            assert_eq!(ratio_bucket(b + 1), k + 1);
        }
        assert_eq!(ratio_bucket(u64::MAX), 49);
        // The worked example of FORMAT.md §20.
        assert_eq!(ratio_q20(160_000_000, 140_000_000), Some(1_198_372));
        assert_eq!(ratio_q20(12_000_000, 10_000_000), Some(1_258_291));
        assert_eq!(ratio_q20(13_000_000, 12_000_000), Some(1_135_957));
        assert_eq!(ratio_q20(1, 0), None);
        assert_eq!(ratio_q20(u64::MAX, 1), Some(u64::MAX));
    }
}
