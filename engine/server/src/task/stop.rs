//! Stop strings (`"stop"`: a string or a list), matched in the generated text across token
//! boundaries. Text is released only once it cannot be the start of a stop string, so a
//! client never sees any part of the stop text, streamed or not.

/// Watches generated text for stop strings.
#[derive(Debug, Clone, Default)]
pub struct StopMatcher {
    stops: Vec<String>,
    /// Text not yet released: a suffix that may still become a stop string.
    held: String,
}

/// What [`StopMatcher::push`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StopCheck {
    /// No stop string yet: this text is safe to send.
    Continue(String),
    /// A stop string completed: send this text (what came before it), then stop.
    Stopped(String),
}

impl StopMatcher {
    /// A matcher for `stops` (empty strings are ignored: they would match everywhere).
    pub fn new(stops: impl IntoIterator<Item = String>) -> Self {
        Self {
            stops: stops.into_iter().filter(|s| !s.is_empty()).collect(),
            held: String::new(),
        }
    }

    /// Whether there is any stop string to watch for.
    pub fn is_active(&self) -> bool {
        !self.stops.is_empty()
    }

    /// Adds newly generated text.
    pub fn push(&mut self, text: &str) -> StopCheck {
        if self.stops.is_empty() {
            return StopCheck::Continue(text.to_owned());
        }
        self.held.push_str(text);
        // The earliest stop string in what is held (the longest one where two start at once).
        let first = self
            .stops
            .iter()
            .filter_map(|s| self.held.find(s.as_str()))
            .min();
        if let Some(at) = first {
            let before = self.held[..at].to_owned();
            self.held.clear();
            return StopCheck::Stopped(before);
        }
        // Keep the longest suffix that is the start of some stop string.
        let keep_from = self
            .held
            .char_indices()
            .map(|(i, _)| i)
            .find(|&i| {
                let tail = &self.held[i..];
                self.stops.iter().any(|s| s.starts_with(tail))
            })
            .unwrap_or(self.held.len());
        let rest = self.held.split_off(keep_from);
        StopCheck::Continue(std::mem::replace(&mut self.held, rest))
    }

    /// Generation ended without a stop string: what is still held is ordinary text.
    pub fn finish(&mut self) -> String {
        std::mem::take(&mut self.held)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feeds `pieces`; returns everything released and whether a stop string ended it.
    fn run(stops: &[&str], pieces: &[&str]) -> (String, bool) {
        let mut m = StopMatcher::new(stops.iter().map(|s| s.to_string()));
        let mut out = String::new();
        for p in pieces {
            match m.push(p) {
                StopCheck::Continue(t) => out.push_str(&t),
                StopCheck::Stopped(t) => {
                    out.push_str(&t);
                    return (out, true);
                }
            }
        }
        out.push_str(&m.finish());
        (out, false)
    }

    #[test]
    fn stop_split_across_tokens_is_never_released() {
        assert_eq!(
            run(&["\n\n"], &["Paris", ".", "\n", "\nNext"]),
            ("Paris.".into(), true)
        );
        assert_eq!(
            run(&["END"], &["abc E", "N", "D tail"]),
            ("abc ".into(), true)
        );
        // A false start is released once it cannot match any more.
        let mut m = StopMatcher::new(["END".to_string()]);
        assert_eq!(m.push("xE"), StopCheck::Continue("x".into()));
        assert_eq!(m.push("NX"), StopCheck::Continue("ENX".into()));
        assert_eq!(m.push("E"), StopCheck::Continue("".into()));
        assert_eq!(m.finish(), "E");
    }

    #[test]
    fn earliest_of_several_and_multibyte() {
        assert_eq!(run(&["b", "abc"], &["xa", "bc"]), ("x".into(), true));
        assert_eq!(run(&["é!"], &["café", "é", "!"]), ("café".into(), true));
        assert_eq!(run(&["é!"], &["caf", "é"]), ("café".into(), false));
        assert_eq!(run(&[], &["a", "b"]), ("ab".into(), false));
        assert_eq!(run(&[""], &["a"]), ("a".into(), false));
    }

    #[test]
    fn released_text_is_a_prefix_of_the_whole_before_the_stop() {
        // Every split of a text into pieces releases the same text.
        let text = "one two\n\nthree STOP four";
        for cut in 0..=text.len() {
            if !text.is_char_boundary(cut) {
                continue;
            }
            let (a, b) = text.split_at(cut);
            assert_eq!(run(&["STOP", "\n\n"], &[a, b]), ("one two".into(), true));
            assert_eq!(run(&["STOP"], &[a, b]), ("one two\n\nthree ".into(), true));
            assert_eq!(run(&["never"], &[a, b]), (text.into(), false));
        }
    }
}
