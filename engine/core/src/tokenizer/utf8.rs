//! Streamed text is sent a character at a time at the earliest: the bytes of a UTF-8
//! character split across tokens are held until the character is complete.

/// Holds back the bytes of an incomplete UTF-8 character.
#[derive(Debug, Clone, Default)]
pub struct Utf8Holder {
    pending: Vec<u8>,
}

impl Utf8Holder {
    /// A holder with nothing held.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds `bytes` (one token's); returns the text that is now complete (possibly empty).
    /// Bytes that can never be part of a character come out as U+FFFD.
    pub fn push(&mut self, bytes: &[u8]) -> String {
        self.pending.extend_from_slice(bytes);
        let mut out = String::new();
        loop {
            match std::str::from_utf8(&self.pending) {
                Ok(s) => {
                    out.push_str(s);
                    self.pending.clear();
                    return out;
                }
                Err(e) => {
                    let good = e.valid_up_to();
                    // Valid up to `good`: from_utf8 said so.
                    out.push_str(&String::from_utf8_lossy(&self.pending[..good]));
                    match e.error_len() {
                        // An incomplete character at the end: keep it for the next token.
                        None => {
                            self.pending.drain(..good);
                            return out;
                        }
                        Some(bad) => {
                            out.push('\u{FFFD}');
                            self.pending.drain(..good + bad);
                        }
                    }
                }
            }
        }
    }

    /// Whether bytes are held.
    pub fn is_holding(&self) -> bool {
        !self.pending.is_empty()
    }

    /// The end of the text: what is held, as U+FFFD if incomplete.
    pub fn finish(&mut self) -> String {
        let s = String::from_utf8_lossy(&self.pending).into_owned();
        self.pending.clear();
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_characters_wait_until_complete() {
        let mut h = Utf8Holder::new();
        assert_eq!(h.push(b"a"), "a");
        // 🦀 is F0 9F A6 80: nothing until its last byte.
        assert_eq!(h.push(&[0xF0]), "");
        assert_eq!(h.push(&[0x9F, 0xA6]), "");
        assert!(h.is_holding());
        assert_eq!(h.push(&[0x80, b'!']), "🦀!");
        assert!(!h.is_holding());
        assert_eq!(h.push(&[0xFF, b'x']), "\u{FFFD}x");
        assert_eq!(h.push(&[0xE2, 0x82]), "");
        assert_eq!(h.finish(), "\u{FFFD}");
        assert_eq!(h.finish(), "");
    }

    #[test]
    fn any_split_gives_the_whole_text() {
        let text = "héllo 日本 🦀 ok".as_bytes();
        for cut in 0..=text.len() {
            let mut h = Utf8Holder::new();
            let mut out = h.push(&text[..cut]);
            out.push_str(&h.push(&text[cut..]));
            out.push_str(&h.finish());
            assert_eq!(out.as_bytes(), text, "cut at {cut}");
        }
    }
}
