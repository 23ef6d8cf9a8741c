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
const DEEPSEEK_LLM_LETTERS: &str = r"\s?[A-Za-zµÀ-ÖØ-öø-ƺƼ-ƿǄ-ʓʕ-ʯͰ-ͳͶͷͻ-ͽͿΆΈ-ΊΌΎ-ΡΣ-ϵϷ-ҁҊ-ԯԱ-ՖႠ-ჅᎠ-Ᏽᏸ-ᏽᲐ-ᲺᲽ-Ჿᴀ-ᴫᵫ-ᵷᵹ-ᶚḀ-ἕἘ-Ἕἠ-ὅὈ-Ὅὐ-ὗὙὛὝὟ-ώᾀ-ᾴᾶ-ᾼιῂ-ῄῆ-ῌῐ-ΐῖ-Ίῠ-Ῥῲ-ῴῶ-ῼℂℇℊ-ℓℕℙ-ℝℤΩℨK-ℭℯ-ℴℹℼ-ℿⅅ-ⅉⅎↃↄⰀ-ⱻⱾ-ⳤⳫ-ⳮⳲⳳꙀ-ꙭꚀ-ꚛꜢ-ꝯꝱ-ꞇꞋ-ꞎꭰ-ꮿﬀ-ﬆﬓ-ﬗＡ-Ｚａ-ｚ𐐀-𐑏𐒰-𐓓𐓘-𐓻𐲀-𐲲𐳀-𐳲𑢠-𑣟𞤀-𞥃]+";

/// CJK and Hangul runs (DeepSeek).
const DEEPSEEK_CJK: &str = r"[一-龥ࠀ-一가-퟿]+";

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
                    r"\s?[!-/:-~！-／：-～‘-‟　-。]+",
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
