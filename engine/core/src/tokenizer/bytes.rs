//! The byte tokenizer of the embedded model: one token per byte plus a few
//! specials.
//!
//! | ids      | meaning                     |
//! |----------|-----------------------------|
//! | 0..=255  | the byte with that value    |
//! | 256      | `<|bos|>` beginning of text |
//! | 257      | `<|eos|>` end of text       |
//! | 258      | `<|pad|>` reserved          |
//! | 259      | `<|unk|>` reserved          |

/// Family name reported for the byte tokenizer.
pub const FAMILY: &str = "hydra-bytes";
/// Beginning-of-text id.
pub const BOS: u32 = 256;
/// End-of-text id.
pub const EOS: u32 = 257;
/// Special token texts, in id order from 256.
pub const SPECIALS: [&str; 4] = ["<|bos|>", "<|eos|>", "<|pad|>", "<|unk|>"];
/// Vocabulary size.
pub const VOCAB_SIZE: usize = 256 + SPECIALS.len();

/// Byte pieces of every token, in id order.
pub(crate) fn pieces() -> Vec<Vec<u8>> {
    (0..=255u8)
        .map(|b| vec![b])
        .chain(SPECIALS.iter().map(|s| s.as_bytes().to_vec()))
        .collect()
}
