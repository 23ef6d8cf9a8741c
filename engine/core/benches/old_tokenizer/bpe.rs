//! The engine's previous hand-written byte-level BPE (before the `tokenizers`
//! crate), kept only to measure the new tokenizer against it.

use std::collections::HashMap;

use super::pretok::PreTokenizer;

/// Marks a byte the vocabulary has no token for.
const MISSING: u32 = u32::MAX;

/// The BPE model: byte symbols, merge ranks and the pre-tokenizer.
#[derive(Debug, Clone)]
pub struct Bpe {
    /// Token id of each single byte (`MISSING` when the vocabulary lacks it).
    byte_ids: [u32; 256],
    /// Stands in for bytes the vocabulary lacks; without it they are dropped.
    unk: Option<u32>,
    /// (left, right) -> (rank, merged id).
    merges: HashMap<(u32, u32), (u32, u32)>,
    pre: PreTokenizer,
}

impl Bpe {
    /// Build from byte-level vocabulary strings (`"Ġthe"`) and `"a b"` merges.
    pub fn new(
        vocab: &HashMap<String, u32>,
        merges: &[(String, String)],
        pre: PreTokenizer,
        unk: Option<u32>,
    ) -> Result<Self, String> {
        let b2u = hydra_engine_core::tokenizer::bytes_to_unicode();
        let mut byte_ids = [MISSING; 256];
        for (b, c) in b2u.iter().enumerate() {
            if let Some(&id) = vocab.get(&c.to_string()) {
                byte_ids[b] = id;
            }
        }
        // Some vocabularies (SmolLM2) lack a few control bytes; printable ASCII is a must.
        if let Some(b) = (b'!'..=b'~').find(|&b| byte_ids[b as usize] == MISSING) {
            return Err(format!(
                "byte-level vocabulary lacks the token for byte 0x{b:02x}"
            ));
        }
        let mut map = HashMap::with_capacity(merges.len());
        for (rank, (a, b)) in merges.iter().enumerate() {
            let (Some(&ia), Some(&ib)) = (vocab.get(a), vocab.get(b)) else {
                continue;
            };
            let Some(&im) = vocab.get(&format!("{a}{b}")) else {
                continue;
            };
            map.entry((ia, ib)).or_insert((rank as u32, im));
        }
        Ok(Self {
            byte_ids,
            unk,
            merges: map,
            pre,
        })
    }

    /// Encode ordinary text (no special tokens) into `out`.
    pub fn encode(&self, text: &str, out: &mut Vec<u32>) {
        let mut pieces = Vec::new();
        self.pre.split(text, &mut pieces);
        let mut syms = Vec::new();
        for piece in pieces {
            syms.clear();
            syms.extend(piece.bytes().map(|b| self.byte_ids[b as usize]));
            self.merge(&mut syms);
            out.extend(
                syms.iter()
                    .filter_map(|&t| if t == MISSING { self.unk } else { Some(t) }),
            );
        }
    }

    /// Apply merges lowest rank first, leftmost first among equals.
    fn merge(&self, syms: &mut Vec<u32>) {
        while syms.len() > 1 {
            let mut best: Option<(u32, usize, u32)> = None;
            for i in 0..syms.len() - 1 {
                if let Some(&(rank, id)) = self.merges.get(&(syms[i], syms[i + 1])) {
                    if best.is_none_or(|(r, _, _)| rank < r) {
                        best = Some((rank, i, id));
                    }
                }
            }
            let Some((_, i, id)) = best else { break };
            syms[i] = id;
            syms.remove(i + 1);
        }
    }
}
