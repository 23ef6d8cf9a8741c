//! The pre-tokenizers of byte-level BPE vocabularies, by their GGUF name
//! (`tokenizer.ggml.pre`).
//!
//! Each pre-tokenizer is a list of regular expressions applied one after the
//! other: every expression splits each piece the previous ones produced,
//! keeping both the matches and the text between them as pieces. The
//! expressions are llama.cpp's (`llm_tokenizer_bpe` in `src/llama-vocab.cpp`),
//! which restate each model's `tokenizer.json` pattern without case-insensitive
//! groups; the vocabulary test vectors check them.

/// The GPT-2 pattern as llama.cpp writes it (the trailing `|\s+` of the
/// original is implied: text no alternative matches stays a piece of its own).
const GPT2: &str = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)";

/// The Llama 3 pattern (digits in runs of up to three).
const LLAMA3: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// The Qwen2 pattern: the Llama 3 one with every digit alone.
const QWEN2: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// DeepSeek LLM's letter class: the cased letters of many scripts, spelled out.
/// Written with escapes: a source normaliser (NFC) would silently change some of
/// these characters (U+1F7D, U+2126, U+212A, ...) and break the ranges.
const DEEPSEEK_LLM_LETTERS: &str = concat!(
    "\\s?[A-Za-z\u{B5}\u{C0}-\u{D6}\u{D8}-\u{F6}\u{F8}-\u{1BA}\u{1BC}-\u{1BF}",
    "\u{1C4}-\u{293}\u{295}-\u{2AF}\u{370}-\u{373}\u{376}\u{377}\u{37B}-\u{37D}\u{37F}",
    "\u{386}\u{388}-\u{38A}\u{38C}\u{38E}-\u{3A1}\u{3A3}-\u{3F5}\u{3F7}-\u{481}",
    "\u{48A}-\u{52F}\u{531}-\u{556}\u{10A0}-\u{10C5}\u{13A0}-\u{13F5}\u{13F8}-\u{13FD}",
    "\u{1C90}-\u{1CBA}\u{1CBD}-\u{1CBF}\u{1D00}-\u{1D2B}\u{1D6B}-\u{1D77}",
    "\u{1D79}-\u{1D9A}\u{1E00}-\u{1F15}\u{1F18}-\u{1F1D}\u{1F20}-\u{1F45}",
    "\u{1F48}-\u{1F4D}\u{1F50}-\u{1F57}\u{1F59}\u{1F5B}\u{1F5D}\u{1F5F}-\u{1F7D}",
    "\u{1F80}-\u{1FB4}\u{1FB6}-\u{1FBC}\u{1FBE}\u{1FC2}-\u{1FC4}\u{1FC6}-\u{1FCC}",
    "\u{1FD0}-\u{1FD3}\u{1FD6}-\u{1FDB}\u{1FE0}-\u{1FEC}\u{1FF2}-\u{1FF4}",
    "\u{1FF6}-\u{1FFC}\u{2102}\u{2107}\u{210A}-\u{2113}\u{2115}\u{2119}-\u{211D}\u{2124}",
    "\u{2126}\u{2128}\u{212A}-\u{212D}\u{212F}-\u{2134}\u{2139}\u{213C}-\u{213F}",
    "\u{2145}-\u{2149}\u{214E}\u{2183}\u{2184}\u{2C00}-\u{2C7B}\u{2C7E}-\u{2CE4}",
    "\u{2CEB}-\u{2CEE}\u{2CF2}\u{2CF3}\u{A640}-\u{A66D}\u{A680}-\u{A69B}\u{A722}-\u{A76F}",
    "\u{A771}-\u{A787}\u{A78B}-\u{A78E}\u{AB70}-\u{ABBF}\u{FB00}-\u{FB06}",
    "\u{FB13}-\u{FB17}\u{FF21}-\u{FF3A}\u{FF41}-\u{FF5A}\u{10400}-\u{1044F}",
    "\u{104B0}-\u{104D3}\u{104D8}-\u{104FB}\u{10C80}-\u{10CB2}\u{10CC0}-\u{10CF2}",
    "\u{118A0}-\u{118DF}\u{1E900}-\u{1E943}]+",
);

/// DeepSeek LLM's punctuation runs (ASCII, full-width forms, quotes, CJK marks).
const DEEPSEEK_LLM_PUNCT: &str =
    "\\s?[!-/:-~\u{FF01}-\u{FF0F}\u{FF1A}-\u{FF5E}\u{2018}-\u{201F}\u{3000}-\u{3002}]+";

/// CJK and Hangul runs (DeepSeek).
const DEEPSEEK_CJK: &str = "[\u{4E00}-\u{9FA5}\u{800}-\u{4E00}\u{AC00}-\u{D7FF}]+";

/// A byte-level BPE pre-tokenizer: its regexes and whether words that are
/// whole vocabulary entries skip the merges (llama.cpp's `ignore_merges`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PreTokenizerSpec {
    /// The GGUF name it was chosen by (`default` when the file names none).
    pub(crate) name: String,
    /// Applied in order, each splitting the pieces of the one before.
    pub(crate) regexes: Vec<&'static str>,
    /// Words found whole in the vocabulary are emitted without merging.
    pub(crate) ignore_merges: bool,
}

/// The pre-tokenizer names this build knows, for error messages.
pub(crate) const KNOWN: &[&str] = &[
    "default",
    "llama-bpe",
    "llama3",
    "llama-v3",
    "qwen2",
    "deepseek-llm",
    "deepseek-coder",
    "deepseek-r1-qwen",
    "falcon",
    "gpt-2",
    "gpt2",
    "phi-2",
    "starcoder",
    "refact",
    "command-r",
    "smollm",
    "codeshell",
    "mpt",
    "olmo",
    "stablelm2",
];

impl PreTokenizerSpec {
    /// The pre-tokenizer named `name` (`None`: the file has no `tokenizer.ggml.pre`,
    /// which llama.cpp treats as `default`). Unknown names give `None`.
    pub(crate) fn from_gguf_name(name: Option<&str>) -> Option<Self> {
        let name = name.unwrap_or("default");
        let (regexes, ignore_merges): (Vec<&'static str>, bool) = match name {
            "default" => (
                vec![r"[\p{P}\$\+<=>\^~\|]+", GPT2, r"\p{N}+", "[0-9][0-9][0-9]"],
                false,
            ),
            "llama-bpe" | "llama3" | "llama-v3" => (vec![LLAMA3], true),
            "qwen2" | "deepseek-r1-qwen" | "stablelm2" => (vec![QWEN2], false),
            "deepseek-llm" => (
                vec![
                    "[\r\n]",
                    DEEPSEEK_LLM_LETTERS,
                    DEEPSEEK_LLM_PUNCT,
                    r"\s+$",
                    DEEPSEEK_CJK,
                    r"\p{N}+",
                ],
                false,
            ),
            "deepseek-coder" => (
                vec!["[\r\n]", r"\s?\p{L}+", r"\s?\p{P}+", DEEPSEEK_CJK, r"\p{N}"],
                false,
            ),
            "falcon" => (
                vec![r"[\p{P}\$\+<=>\^~\|`]+", GPT2, "[0-9][0-9][0-9]"],
                false,
            ),
            "starcoder" | "refact" | "command-r" | "smollm" | "codeshell" => {
                (vec![r"\p{N}", GPT2], false)
            }
            "gpt-2" | "gpt2" | "phi-2" | "mpt" | "olmo" => (vec![GPT2], false),
            _ => return None,
        };
        Some(Self {
            name: name.to_string(),
            regexes,
            ignore_merges,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_known_name_resolves_and_unknown_ones_do_not() {
        for n in KNOWN {
            assert!(PreTokenizerSpec::from_gguf_name(Some(n)).is_some(), "{n}");
        }
        assert_eq!(
            PreTokenizerSpec::from_gguf_name(None).unwrap().name,
            "default"
        );
        assert!(PreTokenizerSpec::from_gguf_name(Some("tekken")).is_none());
        assert!(
            PreTokenizerSpec::from_gguf_name(Some("llama-bpe"))
                .unwrap()
                .ignore_merges
        );
    }

    #[test]
    fn every_regex_compiles() {
        for n in KNOWN {
            for r in PreTokenizerSpec::from_gguf_name(Some(n)).unwrap().regexes {
                let pattern = tokenizers::pre_tokenizers::split::SplitPattern::Regex(r.into());
                tokenizers::pre_tokenizers::split::Split::new(
                    pattern,
                    tokenizers::SplitDelimiterBehavior::Isolated,
                    false,
                )
                .unwrap_or_else(|e| panic!("{n}: {r}: {e}"));
            }
        }
    }
}
