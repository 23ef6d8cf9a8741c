//! ggml's K-quant super-blocks (Q4_K, Q5_K, Q6_K) decoded into what the packed layout
//! keeps of them ([`super::tile`]'s K-quants section): 256 unsigned quants, each block's
//! two integer scales and the f16 scales.
//!
//! The source layouts (ggml's `block_q4_K`, `block_q5_K`, `block_q6_K`):
//! - Q4_K, 144 bytes: `d`, `dmin` (f16), 12 bytes of eight 6-bit scales and minimums,
//!   128 bytes of nibbles; each 32 bytes hold blocks `2c` (low nibbles) and `2c + 1`
//!   (high nibbles);
//! - Q5_K, 176 bytes: as Q4_K, with 32 bytes of fifth bits (`qh`) before the nibbles: bit
//!   `b` of `qh[l]` is the fifth bit of value `l` of block `b`;
//! - Q6_K, 210 bytes: 128 bytes of low nibbles (`ql`), 64 of two-bit high parts (`qh`), 16
//!   signed scales (one per 16 values), then `d`.

use half::f16;

use super::tile::{Kind, SUPER};
use super::BLOCK;

/// Weights per super-block.
pub const SUPER_WEIGHTS: usize = SUPER * BLOCK;

/// A decoded super-block.
#[derive(Debug, Clone)]
pub struct SuperBlock {
    /// The super-block's scale.
    pub d: f16,
    /// Its minimum scale (zero for Q6_K).
    pub dmin: f16,
    /// Unsigned quants: Q4_K 0-15, Q5_K 0-31, Q6_K 0-63 (the weight's `q - 32`, plus 32).
    pub q: [u8; SUPER_WEIGHTS],
    /// Per block, `(sc, m)` (Q4_K, Q5_K), or the halves' signed scales as bytes (Q6_K).
    pub subs: [[u8; 2]; SUPER],
}

/// Bytes of one ggml super-block of `kind`; `None` for kinds that are not K-quants.
pub fn source_bytes(kind: Kind) -> Option<usize> {
    match kind {
        Kind::Q4K => Some(144),
        Kind::Q5K => Some(176),
        Kind::Q6K => Some(210),
        _ => None,
    }
}

/// Block `j`'s 6-bit scale and minimum of Q4_K's and Q5_K's 12 packed bytes.
fn scale_min(j: usize, s: &[u8]) -> (u8, u8) {
    if j < 4 {
        (s[j] & 63, s[j + 4] & 63)
    } else {
        (
            (s[j + 4] & 0x0F) | ((s[j - 4] >> 6) << 4),
            (s[j + 4] >> 4) | ((s[j] >> 6) << 4),
        )
    }
}

/// Decode one super-block of `kind`.
///
/// # Panics
/// When `src` is not [`source_bytes`] long.
pub fn decode(kind: Kind, src: &[u8]) -> SuperBlock {
    assert_eq!(Some(src.len()), source_bytes(kind), "{kind:?} super-block");
    let f = |at: usize| f16::from_le_bytes([src[at], src[at + 1]]);
    let mut q = [0u8; SUPER_WEIGHTS];
    let mut subs = [[0u8; 2]; SUPER];
    match kind {
        Kind::Q4K | Kind::Q5K => {
            for (j, s) in subs.iter_mut().enumerate() {
                let (sc, m) = scale_min(j, &src[4..16]);
                *s = [sc, m];
            }
            let (qh, qs) = if kind == Kind::Q5K {
                (Some(&src[16..48]), &src[48..176])
            } else {
                (None, &src[16..144])
            };
            for c in 0..SUPER / 2 {
                for l in 0..BLOCK {
                    let byte = qs[BLOCK * c + l];
                    let (lo, hi) = (2 * c, 2 * c + 1);
                    let fifth = |b: usize| qh.map_or(0, |h| ((h[l] >> b) & 1) << 4);
                    q[BLOCK * lo + l] = (byte & 0x0F) | fifth(lo);
                    q[BLOCK * hi + l] = (byte >> 4) | fifth(hi);
                }
            }
            SuperBlock {
                d: f(0),
                dmin: f(2),
                q,
                subs,
            }
        }
        Kind::Q6K => {
            let (ql, qh, sc) = (&src[..128], &src[128..192], &src[192..208]);
            for n in 0..2 {
                let (ql, qh) = (&ql[64 * n..], &qh[32 * n..]);
                for l in 0..32 {
                    let base = 128 * n + l;
                    q[base] = (ql[l] & 0x0F) | ((qh[l] & 3) << 4);
                    q[base + 32] = (ql[l + 32] & 0x0F) | (((qh[l] >> 2) & 3) << 4);
                    q[base + 64] = (ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4);
                    q[base + 96] = (ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4);
                }
            }
            for (b, s) in subs.iter_mut().enumerate() {
                *s = [sc[2 * b], sc[2 * b + 1]];
            }
            SuperBlock {
                d: f(208),
                dmin: f16::ZERO,
                q,
                subs,
            }
        }
        _ => unreachable!("checked by source_bytes"),
    }
}
