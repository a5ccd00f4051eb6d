//! Builds a `tokenizers` byte-level BPE tokenizer from a `gpt2`-type GGUF vocabulary: the
//! pre-tokenizer named by `tokenizer.ggml.pre` (its split regexes, as llama.cpp and the Hugging
//! Face tokenizer.json files define them), the merges, and control / user-defined tokens as
//! added tokens.

use tokenizers::models::bpe::{BPE, Merges, Vocab};
use tokenizers::pre_tokenizers::PreTokenizerWrapper;
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::sequence::Sequence;
use tokenizers::pre_tokenizers::split::{Split, SplitPattern};
use tokenizers::{AddedToken, SplitDelimiterBehavior};

use super::Error;
use super::spec::{TokenType, TokenizerSpec};

/// GPT-2's word split (as in the `tokenizers` ByteLevel pre-tokenizer).
const GPT2: &str = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+";
/// Every digit on its own (StarCoder / SmolLM), applied before `GPT2`.
const DIGITS: &str = r"\p{N}";
/// Llama 3's split: case-insensitive contractions, numbers in groups of up to three.
const LLAMA3: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
/// Qwen2's split: Llama 3's with single digits.
const QWEN2: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// The `tokenizer.ggml.pre` values this engine supports, for error messages.
pub const SUPPORTED_PRE: &[&str] = &[
    "default",
    "gpt-2",
    "gpt2",
    "smollm",
    "starcoder",
    "refact",
    "codeshell",
    "llama-bpe",
    "llama3",
    "llama-v3",
    "qwen2",
];

/// How one pre-tokenizer splits text before BPE.
struct PreTokenizer {
    /// Regexes applied in order; each match becomes its own piece.
    splits: &'static [&'static str],
    /// Whether a whole piece found in the vocabulary skips the merges (Llama 3 does this).
    ignore_merges: bool,
    /// Whether the model adds BOS when the file does not say.
    add_bos_default: bool,
}

fn pre_tokenizer(name: &str) -> Option<PreTokenizer> {
    let plain = |splits| PreTokenizer {
        splits,
        ignore_merges: false,
        add_bos_default: false,
    };
    Some(match name {
        "default" | "gpt-2" | "gpt2" => plain(&[GPT2]),
        "smollm" | "starcoder" | "refact" | "codeshell" => plain(&[DIGITS, GPT2]),
        "llama-bpe" | "llama3" | "llama-v3" => PreTokenizer {
            splits: &[LLAMA3],
            ignore_merges: true,
            add_bos_default: true,
        },
        "qwen2" => plain(&[QWEN2]),
        _ => return None,
    })
}

/// Two encoders over the same vocabulary, and whether BOS is added by default.
pub struct Encoders {
    /// Matches control tokens written in the text as the control tokens.
    pub parsing_special: tokenizers::Tokenizer,
    /// Encodes control-token strings in the text as ordinary text.
    pub literal: tokenizers::Tokenizer,
    /// Whether to add BOS when the caller asks for special tokens and the file does not say.
    pub add_bos_default: bool,
}

/// Builds the byte-level BPE encoders for a `gpt2`-type spec.
pub fn build(spec: &TokenizerSpec) -> Result<Encoders, Error> {
    let pre_name = spec.pre.as_deref().unwrap_or("default");
    let pre = pre_tokenizer(pre_name).ok_or_else(|| Error::UnsupportedPreTokenizer {
        pre: pre_name.to_string(),
        supported: SUPPORTED_PRE.join(", "),
    })?;
    let bpe = BPE::builder()
        .vocab_and_merges(vocab(spec), merges(spec)?)
        .ignore_merges(pre.ignore_merges)
        .build()
        .map_err(|e| Error::InvalidVocab(format!("BPE merges: {e}")))?;
    let mut splits: Vec<PreTokenizerWrapper> = Vec::new();
    for regex in pre.splits {
        let split = Split::new(
            SplitPattern::Regex(regex.to_string()),
            SplitDelimiterBehavior::Isolated,
            false,
        )
        .map_err(|e| Error::Build(format!("pre-tokenizer {pre_name}: {e}")))?;
        splits.push(split.into());
    }
    // The regexes above did the splitting; ByteLevel only maps bytes to its alphabet.
    splits.push(ByteLevel::new(false, false, false).into());
    let mut tokenizer = tokenizers::Tokenizer::new(bpe);
    tokenizer.with_pre_tokenizer(Some(Sequence::new(splits)));
    Ok(Encoders::new(tokenizer, spec, pre.add_bos_default))
}

impl Encoders {
    /// Adds the spec's control and user-defined tokens to `tokenizer` and makes the literal twin.
    pub fn new(
        mut tokenizer: tokenizers::Tokenizer,
        spec: &TokenizerSpec,
        add_bos_default: bool,
    ) -> Self {
        let (special, user): (Vec<_>, Vec<_>) = added_tokens(spec).partition(|t| t.special);
        tokenizer.add_special_tokens(&special);
        tokenizer.add_tokens(&user);
        let mut literal = tokenizer.clone();
        literal.set_encode_special_tokens(true);
        Self {
            parsing_special: tokenizer,
            literal,
            add_bos_default,
        }
    }
}

/// Token text → id; on a duplicated text the first id wins.
pub fn vocab(spec: &TokenizerSpec) -> Vocab {
    let mut vocab = Vocab::with_capacity(spec.tokens.len());
    for (id, token) in spec.tokens.iter().enumerate() {
        vocab.entry(token.clone()).or_insert(id as u32);
    }
    vocab
}

fn merges(spec: &TokenizerSpec) -> Result<Merges, Error> {
    spec.merges
        .iter()
        .enumerate()
        .map(|(i, merge)| {
            // Split at the first space after the first character: byte-level tokens never
            // contain a raw space, but a merge's left side may start with one in odd vocabularies.
            let at = merge
                .char_indices()
                .skip(1)
                .find(|(_, c)| *c == ' ')
                .map(|(at, _)| at);
            match at {
                Some(at) => Ok((merge[..at].to_string(), merge[at + 1..].to_string())),
                None => Err(Error::InvalidVocab(format!(
                    "merge {i} ({merge:?}) is not \"left right\""
                ))),
            }
        })
        .collect()
}

/// Control tokens as special added tokens, user-defined tokens as plain added tokens.
fn added_tokens(spec: &TokenizerSpec) -> impl Iterator<Item = AddedToken> + '_ {
    spec.tokens
        .iter()
        .enumerate()
        .filter(|(_, t)| !t.is_empty())
        .filter_map(|(id, token)| match spec.token_type(id) {
            TokenType::Control => Some(AddedToken::from(token.clone(), true)),
            TokenType::UserDefined => {
                Some(AddedToken::from(token.clone(), false).normalized(false))
            }
            _ => None,
        })
}
