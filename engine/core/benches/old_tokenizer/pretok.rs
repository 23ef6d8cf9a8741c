//! The previous hand-written pre-tokenizers (kept only for the tokenizer benchmark).
//!
//! A hand-written equivalent of the GPT-2 pattern
//! `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`,
//! optionally preceded by a split of every digit into its own piece
//! (llama.cpp's `smollm` pre-tokenizer, Hugging Face's `Digits(individual_digits)`).
//! `\p{L}` is approximated by `char::is_alphabetic` minus numerics, which
//! differs from the Unicode letter category only on combining marks.

/// Which pre-tokenizer a vocabulary uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PreTokenizer {
    /// The GPT-2 pattern.
    Gpt2,
    /// Every digit alone, then the GPT-2 pattern (SmolLM, StarCoder).
    Gpt2DigitsSplit,
}

impl PreTokenizer {
    /// From `tokenizer.ggml.pre`; `None` for patterns not implemented.
    pub fn from_gguf_name(name: Option<&str>) -> Option<Self> {
        match name {
            None | Some("default") | Some("gpt2") | Some("gpt-2") => Some(Self::Gpt2),
            Some("smollm") | Some("starcoder") | Some("refact") => Some(Self::Gpt2DigitsSplit),
            Some(_) => None,
        }
    }

    /// Split `text` into pieces, appending them to `out`.
    pub fn split<'a>(self, text: &'a str, out: &mut Vec<&'a str>) {
        match self {
            Self::Gpt2 => split_gpt2(text, out),
            Self::Gpt2DigitsSplit => {
                let mut start = 0;
                for (i, c) in text.char_indices() {
                    if c.is_numeric() {
                        split_gpt2(&text[start..i], out);
                        out.push(&text[i..i + c.len_utf8()]);
                        start = i + c.len_utf8();
                    }
                }
                split_gpt2(&text[start..], out);
            }
        }
    }
}

fn is_letter(c: char) -> bool {
    c.is_alphabetic() && !c.is_numeric()
}

#[derive(PartialEq, Eq, Clone, Copy)]
enum Class {
    Letter,
    Number,
    Other,
    Space,
}

fn class(c: char) -> Class {
    if c.is_whitespace() {
        Class::Space
    } else if c.is_numeric() {
        Class::Number
    } else if is_letter(c) {
        Class::Letter
    } else {
        Class::Other
    }
}

fn split_gpt2<'a>(s: &'a str, out: &mut Vec<&'a str>) {
    let cs: Vec<(usize, char)> = s.char_indices().collect();
    let n = cs.len();
    let at = |k: usize| if k < n { cs[k].0 } else { s.len() };
    let mut i = 0;
    while i < n {
        let c = cs[i].1;
        // 's 't 're 've 'm 'll 'd
        if c == '\'' && i + 1 < n {
            let c1 = cs[i + 1].1;
            let len = if matches!(c1, 's' | 't' | 'm' | 'd') {
                2
            } else if i + 2 < n && matches!((c1, cs[i + 2].1), ('r', 'e') | ('v', 'e') | ('l', 'l'))
            {
                3
            } else {
                0
            };
            if len > 0 {
                out.push(&s[at(i)..at(i + len)]);
                i += len;
                continue;
            }
        }
        // ` ?X+` for X in letters, numbers, other: an optional single space joins the run.
        let start = if c == ' ' && i + 1 < n && class(cs[i + 1].1) != Class::Space {
            i + 1
        } else {
            i
        };
        let cls = class(cs[start].1);
        if cls != Class::Space {
            let mut j = start + 1;
            while j < n && class(cs[j].1) == cls {
                j += 1;
            }
            out.push(&s[at(i)..at(j)]);
            i = j;
            continue;
        }
        // Whitespace: `\s+(?!\S)` then `\s+`.
        let mut r = i + 1;
        while r < n && class(cs[r].1) == Class::Space {
            r += 1;
        }
        let end = if r == n || r - i == 1 { r } else { r - 1 };
        out.push(&s[at(i)..at(end)]);
        i = end;
    }
}
