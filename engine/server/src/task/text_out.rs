//! The text a client sees of a generation, token by token: each token's bytes go through a
//! [`Utf8Holder`] (a character split across tokens waits until it is complete), then
//! through a [`StopMatcher`] (text that may be the start of a stop string waits until it
//! cannot be, and a stop string ends the generation without being sent).

use super::stop::{StopCheck, StopMatcher};
use hydra_engine_core::tokenizer::Utf8Holder;

/// What one token adds to the visible text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Piece {
    /// Text to send now (possibly empty).
    pub text: String,
    /// A stop string completed: the generation ends here.
    pub stopped: bool,
}

/// Turns a generation's token bytes into the text to send.
#[derive(Debug, Clone, Default)]
pub struct TextOut {
    utf8: Utf8Holder,
    stop: StopMatcher,
}

impl TextOut {
    /// For a generation that ends at any of `stops`.
    pub fn new(stops: Vec<String>) -> Self {
        Self {
            utf8: Utf8Holder::new(),
            stop: StopMatcher::new(stops),
        }
    }

    /// Adds one token's bytes.
    pub fn push(&mut self, bytes: &[u8]) -> Piece {
        let text = self.utf8.push(bytes);
        if text.is_empty() {
            return Piece {
                text,
                stopped: false,
            };
        }
        self.check(&text)
    }

    fn check(&mut self, text: &str) -> Piece {
        match self.stop.push(text) {
            StopCheck::Continue(text) => Piece {
                text,
                stopped: false,
            },
            StopCheck::Stopped(text) => Piece {
                text,
                stopped: true,
            },
        }
    }

    /// The generation ended for another reason: what is still held.
    pub fn finish(&mut self) -> Piece {
        let tail = self.utf8.finish();
        let mut piece = self.check(&tail);
        if !piece.stopped {
            piece.text.push_str(&self.stop.finish());
        }
        piece
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_character_then_stop_string() {
        let mut t = TextOut::new(vec!["\n\n".into()]);
        assert_eq!(t.push(b"caf").text, "caf");
        assert_eq!(t.push(&[0xC3]).text, "", "half of é");
        assert_eq!(
            t.push(&[0xA9, b'\n']).text,
            "é",
            "the newline may start the stop"
        );
        let p = t.push(b"\nnext");
        assert_eq!((p.text.as_str(), p.stopped), ("", true));
    }

    #[test]
    fn finish_flushes_what_is_held() {
        let mut t = TextOut::new(vec!["END".into()]);
        assert_eq!(t.push(b"ok EN").text, "ok ");
        assert_eq!(t.push(&[0xE2]).text, "");
        let p = t.finish();
        assert_eq!((p.text.as_str(), p.stopped), ("EN\u{FFFD}", false));
        let mut t = TextOut::new(Vec::new());
        assert_eq!(t.push(b"a").text, "a");
        assert_eq!(t.finish().text, "");
    }
}
