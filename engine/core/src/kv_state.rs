//! The KV state byte format (version 1).
//!
//! All integers little-endian. The checksum ([`crate::hash::hash64`] of
//! every byte before it) makes truncation and corruption detectable; the
//! fingerprint ties the state to the exact weights it was computed with.
//!
//! | offset | size | field                                           |
//! |-------:|-----:|-------------------------------------------------|
//! |      0 |    8 | magic `HYDRAKV\0`                               |
//! |      8 |    2 | format version (1)                              |
//! |     10 |    2 | element type (0 = f32)                          |
//! |     12 |    4 | header length (56)                              |
//! |     16 |    8 | model fingerprint                               |
//! |     24 |    4 | n_layer                                         |
//! |     28 |    4 | n_kv_head                                       |
//! |     32 |    4 | head_dim                                        |
//! |     36 |    4 | reserved, 0                                     |
//! |     40 |    8 | n_past                                          |
//! |     48 |    8 | payload length in bytes                         |
//! |     56 |    P | payload: for each layer, K then V, each `[n_kv_head][n_past][head_dim]` f32; then, when n_past > 0, the next-token scores, `[vocab_size]` f32 |
//! |   56+P |    8 | checksum of bytes `0..56+P`                     |

use std::io::{Read, Write};

use candle_core::{Device, Tensor};

use crate::error::{EngineError, Result, StateError};
use crate::hash::Hasher64;
use crate::model::config::LlamaConfig;
use crate::model::kv_cache::KvCache;

/// First bytes of every state.
pub const MAGIC: [u8; 8] = *b"HYDRAKV\0";
/// The version this build writes and reads.
pub const VERSION: u16 = 1;
/// Element type code for f32.
pub const DTYPE_F32: u16 = 0;

const OFF_MAGIC: usize = 0;
const OFF_VERSION: usize = OFF_MAGIC + 8;
const OFF_DTYPE: usize = OFF_VERSION + 2;
const OFF_HEADER_LEN: usize = OFF_DTYPE + 2;
const OFF_FINGERPRINT: usize = OFF_HEADER_LEN + 4;
const OFF_N_LAYER: usize = OFF_FINGERPRINT + 8;
const OFF_N_KV_HEAD: usize = OFF_N_LAYER + 4;
const OFF_HEAD_DIM: usize = OFF_N_KV_HEAD + 4;
const OFF_RESERVED: usize = OFF_HEAD_DIM + 4;
const OFF_N_PAST: usize = OFF_RESERVED + 4;
const OFF_PAYLOAD_LEN: usize = OFF_N_PAST + 8;
/// Length of the fixed header.
pub const HEADER_LEN: usize = OFF_PAYLOAD_LEN + 8;
/// Length of the trailing checksum.
pub const TRAILER_LEN: usize = 8;
const _: () = assert!(HEADER_LEN == 56);

/// Bytes written per I/O call (and between progress reports).
const CHUNK: usize = 1 << 20;

/// Bytes of the next-token scores a state of `n_past` tokens carries (none when empty):
/// with them a restored slot can decode at once, as llama.cpp's states allow.
fn logits_len(cfg: &LlamaConfig, n_past: usize) -> u64 {
    if n_past > 0 {
        cfg.vocab_size as u64 * 4
    } else {
        0
    }
}

fn payload_len(cfg: &LlamaConfig, n_past: usize) -> u64 {
    (cfg.kv_bytes_per_token() as u64) * n_past as u64 + logits_len(cfg, n_past)
}

/// Exact size of a state holding `n_past` tokens.
pub fn state_size(cfg: &LlamaConfig, n_past: usize) -> u64 {
    (HEADER_LEN + TRAILER_LEN) as u64 + payload_len(cfg, n_past)
}

/// The fields of a state header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StateHeader {
    /// Format version.
    pub version: u16,
    /// Element type code.
    pub dtype: u16,
    /// Fingerprint of the model that wrote it.
    pub fingerprint: u64,
    /// Layers.
    pub n_layer: u32,
    /// KV heads per layer.
    pub n_kv_head: u32,
    /// Head size.
    pub head_dim: u32,
    /// Tokens held.
    pub n_past: u64,
    /// Payload bytes.
    pub payload_len: u64,
}

impl StateHeader {
    fn encode(&self) -> [u8; HEADER_LEN] {
        let mut b = [0u8; HEADER_LEN];
        b[OFF_MAGIC..OFF_MAGIC + 8].copy_from_slice(&MAGIC);
        b[OFF_VERSION..OFF_VERSION + 2].copy_from_slice(&self.version.to_le_bytes());
        b[OFF_DTYPE..OFF_DTYPE + 2].copy_from_slice(&self.dtype.to_le_bytes());
        b[OFF_HEADER_LEN..OFF_HEADER_LEN + 4].copy_from_slice(&(HEADER_LEN as u32).to_le_bytes());
        b[OFF_FINGERPRINT..OFF_FINGERPRINT + 8].copy_from_slice(&self.fingerprint.to_le_bytes());
        b[OFF_N_LAYER..OFF_N_LAYER + 4].copy_from_slice(&self.n_layer.to_le_bytes());
        b[OFF_N_KV_HEAD..OFF_N_KV_HEAD + 4].copy_from_slice(&self.n_kv_head.to_le_bytes());
        b[OFF_HEAD_DIM..OFF_HEAD_DIM + 4].copy_from_slice(&self.head_dim.to_le_bytes());
        b[OFF_N_PAST..OFF_N_PAST + 8].copy_from_slice(&self.n_past.to_le_bytes());
        b[OFF_PAYLOAD_LEN..OFF_PAYLOAD_LEN + 8].copy_from_slice(&self.payload_len.to_le_bytes());
        b
    }

    /// Parse a header, checking magic, version and header length in that order.
    pub fn decode(b: &[u8; HEADER_LEN]) -> Result<Self, StateError> {
        let u16_at = |o: usize| u16::from_le_bytes([b[o], b[o + 1]]);
        let u32_at = |o: usize| u32::from_le_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]]);
        let u64_at = |o: usize| {
            let mut w = [0u8; 8];
            w.copy_from_slice(&b[o..o + 8]);
            u64::from_le_bytes(w)
        };
        if b[OFF_MAGIC..OFF_MAGIC + 8] != MAGIC {
            return Err(StateError::BadMagic);
        }
        let version = u16_at(OFF_VERSION);
        if version != VERSION {
            return Err(StateError::Version {
                found: version,
                expected: VERSION,
            });
        }
        if u32_at(OFF_HEADER_LEN) as usize != HEADER_LEN {
            return Err(StateError::Layout(format!(
                "header length {} (expected {HEADER_LEN})",
                u32_at(OFF_HEADER_LEN)
            )));
        }
        Ok(Self {
            version,
            dtype: u16_at(OFF_DTYPE),
            fingerprint: u64_at(OFF_FINGERPRINT),
            n_layer: u32_at(OFF_N_LAYER),
            n_kv_head: u32_at(OFF_N_KV_HEAD),
            head_dim: u32_at(OFF_HEAD_DIM),
            n_past: u64_at(OFF_N_PAST),
            payload_len: u64_at(OFF_PAYLOAD_LEN),
        })
    }
}

/// The bytes of a state stream so far, saved or restored: their hash and count, told to
/// `progress` as they pass.
struct Tally<'a> {
    hash: Hasher64,
    done: u64,
    total: u64,
    progress: &'a mut dyn FnMut(u64, u64),
}

impl Tally<'_> {
    /// `c` went through (its length already counted in `done`): hash it and tell.
    fn passed(&mut self, c: &[u8]) {
        self.hash.update(c);
        (self.progress)(self.done, self.total);
    }
}

/// Writes through to `w` while hashing and counting.
struct Out<'a, W: Write + ?Sized> {
    w: &'a mut W,
    t: Tally<'a>,
}

impl<W: Write + ?Sized> Out<'_, W> {
    fn put(&mut self, bytes: &[u8]) -> Result<()> {
        for c in bytes.chunks(CHUNK) {
            self.w.write_all(c).map_err(EngineError::StateIo)?;
            self.t.done += c.len() as u64;
            self.t.passed(c);
        }
        Ok(())
    }
}

pub(crate) fn save<W: Write + ?Sized>(
    cfg: &LlamaConfig,
    fingerprint: u64,
    cache: &KvCache,
    logits: Option<&[f32]>,
    w: &mut W,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<u64> {
    let n_past = cache.len();
    let header = StateHeader {
        version: VERSION,
        dtype: DTYPE_F32,
        fingerprint,
        n_layer: cfg.n_layer as u32,
        n_kv_head: cfg.n_kv_head as u32,
        head_dim: cfg.head_dim() as u32,
        n_past: n_past as u64,
        payload_len: payload_len(cfg, n_past),
    };
    let total = state_size(cfg, n_past);
    progress(0, total);
    let mut out = Out {
        w,
        t: Tally {
            hash: Hasher64::new(),
            done: 0,
            total,
            progress,
        },
    };
    out.put(&header.encode())?;
    if n_past > 0 {
        for i in 0..cfg.n_layer {
            let Some((k, v)) = cache.layer(i) else {
                return Err(EngineError::InvalidOption {
                    name: "slot",
                    message: "slot has tokens but a layer has no cache".into(),
                });
            };
            for t in [k, v] {
                let vals = t.flatten_all()?.to_vec1::<f32>()?;
                let mut bytes = Vec::with_capacity(vals.len() * 4);
                for x in vals {
                    bytes.extend_from_slice(&x.to_le_bytes());
                }
                out.put(&bytes)?;
            }
        }
        let Some(logits) = logits.filter(|l| l.len() == cfg.vocab_size) else {
            return Err(EngineError::InvalidOption {
                name: "slot",
                message: "slot has tokens but no next-token scores of the vocabulary's size".into(),
            });
        };
        let mut bytes = Vec::with_capacity(logits.len() * 4);
        for x in logits {
            bytes.extend_from_slice(&x.to_le_bytes());
        }
        out.put(&bytes)?;
    }
    let sum = out.t.hash.finish();
    out.put(&sum.to_le_bytes())?;
    out.w.flush().map_err(EngineError::StateIo)?;
    debug_assert_eq!(out.t.done, total);
    Ok(out.t.done)
}

/// Reads exactly `buf.len()` bytes, mapping a short read to `Truncated`.
fn read_full<R: Read + ?Sized>(
    r: &mut R,
    buf: &mut [u8],
    done: &mut u64,
    expected: u64,
) -> Result<()> {
    let mut filled = 0;
    while filled < buf.len() {
        match r.read(&mut buf[filled..]) {
            Ok(0) => {
                return Err(StateError::Truncated {
                    expected,
                    got: *done + filled as u64,
                }
                .into())
            }
            Ok(n) => filled += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(EngineError::StateIo(e)),
        }
    }
    *done += buf.len() as u64;
    Ok(())
}

pub(crate) fn restore<R: Read + ?Sized>(
    cfg: &LlamaConfig,
    fingerprint: u64,
    n_ctx: usize,
    device: &Device,
    r: &mut R,
    total_len: u64,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<(KvCache, Option<Vec<f32>>)> {
    let min = (HEADER_LEN + TRAILER_LEN) as u64;
    if total_len < HEADER_LEN as u64 {
        return Err(StateError::Truncated {
            expected: min,
            got: total_len,
        }
        .into());
    }
    let mut done = 0u64;
    let mut hb = [0u8; HEADER_LEN];
    read_full(r, &mut hb, &mut done, min)?;
    let h = StateHeader::decode(&hb)?;
    let (n_past, expected) = check_header(&h, cfg, fingerprint, n_ctx, total_len)?;
    let mut hash = Hasher64::new();
    hash.update(&hb);
    progress(done, expected);
    let mut body = Body {
        r,
        t: Tally {
            hash,
            done,
            total: expected,
            progress,
        },
    };
    let (n_kv, hd) = (cfg.n_kv_head, cfg.head_dim());
    let mut layers = Vec::with_capacity(cfg.n_layer);
    let mut logits = None;
    if n_past > 0 {
        let mut bytes = vec![0u8; n_kv * n_past * hd * 4];
        for _ in 0..cfg.n_layer {
            let k = Tensor::from_vec(body.f32s(&mut bytes)?, (1, n_kv, n_past, hd), device)?;
            let v = Tensor::from_vec(body.f32s(&mut bytes)?, (1, n_kv, n_past, hd), device)?;
            layers.push((k, v));
        }
        let mut bytes = vec![0u8; logits_len(cfg, n_past) as usize];
        logits = Some(body.f32s(&mut bytes)?);
    }
    let mut tb = [0u8; TRAILER_LEN];
    read_full(body.r, &mut tb, &mut body.t.done, expected)?;
    (body.t.progress)(body.t.done, expected);
    let found = u64::from_le_bytes(tb);
    let computed = body.t.hash.finish();
    if found != computed {
        return Err(StateError::Corrupt { found, computed }.into());
    }
    Ok((KvCache::from_layers(layers, n_past), logits))
}

/// Whether header `h` describes a state of this model that fits `n_ctx` tokens and is
/// exactly `total_len` bytes long; its token count and length if so.
fn check_header(
    h: &StateHeader,
    cfg: &LlamaConfig,
    fingerprint: u64,
    n_ctx: usize,
    total_len: u64,
) -> Result<(usize, u64)> {
    if h.fingerprint != fingerprint {
        return Err(StateError::ForeignModel {
            expected: fingerprint,
            found: h.fingerprint,
        }
        .into());
    }
    let want = (
        cfg.n_layer as u32,
        cfg.n_kv_head as u32,
        cfg.head_dim() as u32,
    );
    if (h.n_layer, h.n_kv_head, h.head_dim) != want || h.dtype != DTYPE_F32 {
        return Err(StateError::Layout(format!(
            "state has {} layers x {} KV heads x {} dims (type {}), model has {} x {} x {} (f32)",
            h.n_layer, h.n_kv_head, h.head_dim, h.dtype, want.0, want.1, want.2
        ))
        .into());
    }
    if h.n_past > n_ctx as u64 {
        return Err(StateError::TooLong {
            n_past: h.n_past,
            n_ctx,
        }
        .into());
    }
    let n_past = h.n_past as usize;
    if h.payload_len != payload_len(cfg, n_past) {
        return Err(StateError::Layout(format!(
            "payload length {} does not match {} tokens",
            h.payload_len, h.n_past
        ))
        .into());
    }
    let expected = state_size(cfg, n_past);
    if total_len < expected {
        return Err(StateError::Truncated {
            expected,
            got: total_len,
        }
        .into());
    }
    if total_len > expected {
        return Err(StateError::TrailingData {
            expected,
            got: total_len,
        }
        .into());
    }
    Ok((n_past, expected))
}

/// The payload of a state being read: every byte hashed and its progress told.
struct Body<'a, R: Read + ?Sized> {
    r: &'a mut R,
    t: Tally<'a>,
}

impl<R: Read + ?Sized> Body<'_, R> {
    /// Fills `bytes` from the stream, in chunks, and returns them as little-endian f32s.
    fn f32s(&mut self, bytes: &mut [u8]) -> Result<Vec<f32>> {
        for c in bytes.chunks_mut(CHUNK) {
            read_full(self.r, c, &mut self.t.done, self.t.total)?;
            self.t.passed(c);
        }
        Ok(bytes
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect())
    }
}
