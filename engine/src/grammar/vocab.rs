//! The model's vocabulary as llguidance sees it: a token trie over each token's bytes (control
//! tokens marked special, so no grammar can spell them as text) and the engine's own BPE for
//! the text llguidance tokenizes (forced prefixes).

use std::sync::Arc;

use llguidance::toktrie::{TokRxInfo, TokTrie, TokenId, TokenizerEnv};

use super::GrammarError;
use crate::tokenizer::{EncodeOptions, Tokenizer};

/// The engine tokenizer behind llguidance's `TokenizerEnv`.
pub struct EngineTokEnv {
    tokenizer: Arc<Tokenizer>,
    trie: TokTrie,
}

impl EngineTokEnv {
    /// A trie of `vocab_size` tokens (the logits' width, which may exceed the tokenizer's
    /// vocabulary: ids past it are padding and never allowed); `eos` is the token a finished
    /// grammar allows.
    pub fn new(
        tokenizer: Arc<Tokenizer>,
        vocab_size: usize,
        eos: u32,
    ) -> Result<Self, GrammarError> {
        if vocab_size == 0 || eos as usize >= vocab_size {
            return Err(GrammarError::Vocabulary(format!(
                "EOS id {eos} outside a vocabulary of {vocab_size}"
            )));
        }
        let words: Vec<Vec<u8>> = (0..vocab_size as u32)
            .map(|id| match tokenizer.token_bytes(id) {
                Some(bytes) if tokenizer.is_special(id) => special(bytes),
                Some(bytes) => bytes.to_vec(),
                // Padding rows of the output head: a special name no grammar references.
                None => special(format!("<|padding_{id}|>").as_bytes()),
            })
            .collect();
        let info = TokRxInfo::new(vocab_size as u32, eos);
        let trie = TokTrie::from(&info, &words);
        Ok(Self { tokenizer, trie })
    }
}

/// A special token's trie entry: the marker byte, then its text.
fn special(text: &[u8]) -> Vec<u8> {
    let mut word = Vec::with_capacity(text.len() + 1);
    word.push(TokTrie::SPECIAL_TOKEN_MARKER);
    word.extend_from_slice(text);
    word
}

impl TokenizerEnv for EngineTokEnv {
    fn tok_trie(&self) -> &TokTrie {
        &self.trie
    }

    fn tokenize_bytes(&self, bytes: &[u8]) -> Vec<TokenId> {
        let literal = EncodeOptions {
            add_bos: false,
            parse_special: false,
        };
        // Text that is not UTF-8 (a forced prefix may end mid-character) has no BPE encoding
        // of its own: the trie's greedy split is the best there is.
        match std::str::from_utf8(bytes) {
            Ok(text) => self
                .tokenizer
                .encode_with(text, literal)
                .unwrap_or_else(|_| self.trie.greedy_tokenize(bytes)),
            Err(_) => self.trie.greedy_tokenize(bytes),
        }
    }
}
