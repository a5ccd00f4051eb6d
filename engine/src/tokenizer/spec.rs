//! The tokenizer as the GGUF file describes it (`tokenizer.ggml.*`), as a plain struct: the
//! tokenizer is built from this, so tests and other formats need no GGUF file.

use crate::gguf::GgufFile;

use super::Error;

/// What a vocabulary entry is (`tokenizer.ggml.token_type`, llama.cpp's numbering).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenType {
    /// Ordinary text produced by the BPE model.
    Normal,
    /// The unknown-token placeholder.
    Unknown,
    /// A special token that steers the model (`<|im_start|>`, EOS, ...): matched in prompts as a
    /// whole, hidden from output when special tokens are skipped.
    Control,
    /// Added plain-text vocabulary: matched as a whole, always shown.
    UserDefined,
    /// Reserved, never produced.
    Unused,
    /// A raw byte (SentencePiece byte fallback, `<0x0A>`).
    Byte,
}

impl TokenType {
    /// The type for GGUF's integer code; unknown codes count as `Normal`, as llama.cpp does.
    pub fn from_code(code: i32) -> Self {
        match code {
            2 => Self::Unknown,
            3 => Self::Control,
            4 => Self::UserDefined,
            5 => Self::Unused,
            6 => Self::Byte,
            _ => Self::Normal,
        }
    }
}

/// Everything needed to build a [`super::Tokenizer`].
#[derive(Debug, Clone, PartialEq, Default)]
pub struct TokenizerSpec {
    /// `tokenizer.ggml.model`: `gpt2` (byte-level BPE) or `llama` (SentencePiece BPE).
    pub model: String,
    /// `tokenizer.ggml.pre`: the pre-tokenizer; `None` means llama.cpp's `default`.
    pub pre: Option<String>,
    /// `tokenizer.ggml.tokens`: the vocabulary, indexed by token id.
    pub tokens: Vec<String>,
    /// `tokenizer.ggml.token_type`, one per token; empty means all `Normal`.
    pub token_types: Vec<TokenType>,
    /// `tokenizer.ggml.merges`: BPE merges, `"left right"`, highest priority first.
    pub merges: Vec<String>,
    /// `tokenizer.ggml.bos_token_id`.
    pub bos_token_id: Option<u32>,
    /// `tokenizer.ggml.eos_token_id`.
    pub eos_token_id: Option<u32>,
    /// `tokenizer.ggml.eot_token_id` / `eom_token_id`: more end-of-generation tokens.
    pub extra_eos_token_ids: Vec<u32>,
    /// `tokenizer.ggml.add_bos_token`; `None` means the model type's default (false for gpt2,
    /// true for the Llama-3 pre-tokenizer, as in llama.cpp).
    pub add_bos: Option<bool>,
    /// `tokenizer.chat_template`, a Jinja template.
    pub chat_template: Option<String>,
    /// `tokenizer.ggml.scores`, one per token: SentencePiece (`llama`) merge priorities.
    pub scores: Vec<f32>,
    /// `tokenizer.ggml.add_space_prefix`: SentencePiece prepends a space to text (default true).
    pub add_space_prefix: Option<bool>,
}

impl TokenizerSpec {
    /// Reads the `tokenizer.*` metadata of a GGUF file.
    pub fn from_gguf(file: &GgufFile) -> Result<Self, Error> {
        let optional_u32 = |key: &str| file.get(key).map(|_| file.get_u32(key)).transpose();
        let optional_str = |key: &str| file.get(key).map(|_| file.get_str(key)).transpose();
        let token_types = match file.get("tokenizer.ggml.token_type") {
            None => Vec::new(),
            Some(_) => {
                let codes = file.get_i32_array("tokenizer.ggml.token_type")?;
                codes.into_iter().map(TokenType::from_code).collect()
            }
        };
        let merges = match file.get("tokenizer.ggml.merges") {
            None => Vec::new(),
            Some(_) => owned(file.get_str_array("tokenizer.ggml.merges")?),
        };
        let extra_eos_token_ids = ["tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id"]
            .into_iter()
            .filter_map(|key| optional_u32(key).transpose())
            .collect::<Result<Vec<_>, _>>()?;
        let optional_bool = |key: &str| file.get(key).map(|_| file.get_bool(key)).transpose();
        let scores = match file.get("tokenizer.ggml.scores") {
            None => Vec::new(),
            Some(_) => file.get_f32_array("tokenizer.ggml.scores")?,
        };
        Ok(Self {
            model: file.get_str("tokenizer.ggml.model")?.to_string(),
            pre: optional_str("tokenizer.ggml.pre")?.map(str::to_string),
            tokens: owned(file.get_str_array("tokenizer.ggml.tokens")?),
            token_types,
            merges,
            bos_token_id: optional_u32("tokenizer.ggml.bos_token_id")?,
            eos_token_id: optional_u32("tokenizer.ggml.eos_token_id")?,
            extra_eos_token_ids,
            add_bos: optional_bool("tokenizer.ggml.add_bos_token")?,
            chat_template: optional_str("tokenizer.chat_template")?.map(str::to_string),
            scores,
            add_space_prefix: optional_bool("tokenizer.ggml.add_space_prefix")?,
        })
    }

    /// The type of token `id` (`Normal` when the file lists no types).
    pub fn token_type(&self, id: usize) -> TokenType {
        self.token_types
            .get(id)
            .copied()
            .unwrap_or(TokenType::Normal)
    }
}

fn owned(items: Vec<&str>) -> Vec<String> {
    items.into_iter().map(str::to_string).collect()
}
