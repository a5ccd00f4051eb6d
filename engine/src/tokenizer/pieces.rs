//! The bytes each token id decodes to, computed once at load: detokenisation is then a table
//! lookup, and the incremental decoder can work on bytes without re-running a decoder.

use super::byte_level::{char_to_byte, token_to_bytes};
use super::spec::{TokenType, TokenizerSpec};

/// Per-token output bytes and whether the token is special (hidden when skipping specials).
#[derive(Debug, Clone)]
pub struct Pieces {
    /// [vocab] bytes of each token.
    bytes: Vec<Vec<u8>>,
    /// [vocab] true for control tokens.
    special: Vec<bool>,
}

impl Pieces {
    /// Pieces of a byte-level (gpt2) vocabulary.
    pub fn byte_level(spec: &TokenizerSpec) -> Self {
        let map = char_to_byte();
        let mut bytes = Vec::with_capacity(spec.tokens.len());
        let mut special = Vec::with_capacity(spec.tokens.len());
        for (id, token) in spec.tokens.iter().enumerate() {
            let ty = spec.token_type(id);
            bytes.push(match ty {
                // Control and user-defined tokens are stored as the text they stand for.
                TokenType::Control | TokenType::UserDefined => token.as_bytes().to_vec(),
                TokenType::Unused => Vec::new(),
                _ => token_to_bytes(token, &map),
            });
            special.push(ty == TokenType::Control);
        }
        Self { bytes, special }
    }

    /// The bytes of `id`, or `None` when `id` is outside the vocabulary.
    pub fn get(&self, id: u32) -> Option<&[u8]> {
        self.bytes.get(id as usize).map(Vec::as_slice)
    }

    /// Pieces of a SentencePiece (llama) vocabulary.
    pub fn sentencepiece(spec: &TokenizerSpec) -> Self {
        let bytes = (0..spec.tokens.len())
            .map(|id| super::spm::piece_bytes(&spec.tokens[id], spec.token_type(id)));
        let special = (0..spec.tokens.len()).map(|id| spec.token_type(id) == TokenType::Control);
        Self {
            bytes: bytes.collect(),
            special: special.collect(),
        }
    }

    /// Whether `id` is a control token.
    pub fn is_special(&self, id: u32) -> bool {
        self.special.get(id as usize).copied().unwrap_or(false)
    }

    /// Number of tokens.
    pub fn len(&self) -> usize {
        self.bytes.len()
    }
}
