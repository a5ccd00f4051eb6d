//! Errors of the tokenizer module: bad metadata, unsupported models, bad ids, template failures.

/// Errors building a tokenizer or using it.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A `tokenizer.*` key is missing or has the wrong type.
    #[error("tokenizer metadata: {0}")]
    Gguf(#[from] crate::gguf::Error),
    /// `tokenizer.ggml.model` names a tokenizer this engine does not implement.
    #[error("tokenizer.ggml.model = {model:?} is not supported (supported: gpt2, llama)")]
    UnsupportedModel { model: String },
    /// `tokenizer.ggml.pre` names a pre-tokenizer this engine does not implement.
    #[error("tokenizer.ggml.pre = {pre:?} is not supported (supported: {supported})")]
    UnsupportedPreTokenizer { pre: String, supported: String },
    /// The vocabulary, types or merges are inconsistent.
    #[error("tokenizer vocabulary: {0}")]
    InvalidVocab(String),
    /// The `tokenizers` crate refused the configuration.
    #[error("building the tokenizer: {0}")]
    Build(String),
    /// Encoding text failed.
    #[error("encoding text: {0}")]
    Encode(String),
    /// A token id outside the vocabulary.
    #[error("token id {id} is outside the vocabulary of {vocab_size} tokens")]
    UnknownTokenId { id: u32, vocab_size: usize },
    /// The chat template does not compile, or failed (or refused) to render these messages.
    #[error("chat template: {0}")]
    ChatTemplate(String),
}
