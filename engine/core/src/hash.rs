//! A small, fast, non-cryptographic 64-bit hash used for model fingerprints
//! and KV state checksums.
//!
//! It consumes 8-byte little-endian words (the tail zero-padded, the length
//! mixed in at the end). Every step is a bijection of the state for a fixed
//! input word, so any single changed word (in particular any flipped bit)
//! changes the result. It detects corruption; it does not resist forgery.

const PRIME: u64 = 0x9E37_79B9_7F4A_7C15;
const SEED: u64 = 0xCBF2_9CE4_8422_2325;

/// Incremental hasher; feed bytes with [`Hasher64::update`].
#[derive(Debug, Clone)]
pub struct Hasher64 {
    state: u64,
    len: u64,
    pending: [u8; 8],
    n_pending: usize,
}

impl Default for Hasher64 {
    fn default() -> Self {
        Self::new()
    }
}

impl Hasher64 {
    /// A fresh hasher.
    pub fn new() -> Self {
        Self {
            state: SEED,
            len: 0,
            pending: [0; 8],
            n_pending: 0,
        }
    }

    #[inline]
    fn mix(&mut self, word: u64) {
        self.state = (self.state ^ word).wrapping_mul(PRIME).rotate_left(29);
    }

    /// Feed bytes.
    pub fn update(&mut self, mut bytes: &[u8]) {
        self.len += bytes.len() as u64;
        if self.n_pending > 0 {
            let take = (8 - self.n_pending).min(bytes.len());
            self.pending[self.n_pending..self.n_pending + take].copy_from_slice(&bytes[..take]);
            self.n_pending += take;
            bytes = &bytes[take..];
            if self.n_pending < 8 {
                return;
            }
            let w = u64::from_le_bytes(self.pending);
            self.mix(w);
            self.n_pending = 0;
        }
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            let mut w = [0u8; 8];
            w.copy_from_slice(c);
            self.mix(u64::from_le_bytes(w));
        }
        let rest = chunks.remainder();
        self.pending[..rest.len()].copy_from_slice(rest);
        self.n_pending = rest.len();
    }

    /// Feed a `u64` (as 8 little-endian bytes).
    pub fn update_u64(&mut self, v: u64) {
        self.update(&v.to_le_bytes());
    }

    /// Feed a string, length-prefixed so that concatenations differ.
    pub fn update_str(&mut self, s: &str) {
        self.update_u64(s.len() as u64);
        self.update(s.as_bytes());
    }

    /// The hash of everything fed so far.
    pub fn finish(&self) -> u64 {
        let mut h = self.clone();
        if h.n_pending > 0 {
            let mut w = [0u8; 8];
            w[..h.n_pending].copy_from_slice(&h.pending[..h.n_pending]);
            h.mix(u64::from_le_bytes(w));
        }
        h.mix(h.len);
        // Final avalanche (splitmix64 finaliser).
        let mut z = h.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

/// Hash a byte slice in one go.
pub fn hash64(bytes: &[u8]) -> u64 {
    let mut h = Hasher64::new();
    h.update(bytes);
    h.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn incremental_equals_one_shot() {
        let data: Vec<u8> = (0..1000u32).map(|i| (i * 7 + 3) as u8).collect();
        let mut h = Hasher64::new();
        for c in data.chunks(13) {
            h.update(c);
        }
        assert_eq!(h.finish(), hash64(&data));
    }

    #[test]
    fn every_bit_flip_changes_the_hash() {
        let data: Vec<u8> = (0..67u8).collect();
        let base = hash64(&data);
        for i in 0..data.len() * 8 {
            let mut d = data.clone();
            d[i / 8] ^= 1 << (i % 8);
            assert_ne!(hash64(&d), base, "bit {i}");
        }
        assert_ne!(hash64(&data[..66]), base);
        assert_ne!(hash64(&[0u8; 8]), hash64(&[0u8; 9]));
    }
}
