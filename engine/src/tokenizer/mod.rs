//! Tokenizer and chat template from GGUF metadata (`tokenizer.ggml.*`) or a Hugging Face
//! checkpoint's tokenizer files (`hf`), with incremental detokenisation. Encoding runs the `tokenizers` crate's BPE; decoding is a per-token byte
//! table, so streaming output never re-decodes what it already sent.
//!
//! Supported: `tokenizer.ggml.model = gpt2` (byte-level BPE) with the pre-tokenizers listed in
//! [`SUPPORTED_PRE`], and `llama` (SentencePiece BPE by scores, byte fallback). Control tokens
//! (type 3) are special tokens; user-defined tokens (type 4) are matched whole. BOS is added
//! only when `tokenizer.ggml.add_bos_token` says so, or, when the file is silent, when
//! llama.cpp's default for the model does (`llama` and the Llama 3 pre-tokenizer).

mod bpe;
mod byte_level;
mod chat;
mod error;
mod hf;
mod incremental;
mod pieces;
mod spec;
mod spm;
mod strftime;

use serde::Serialize;

use crate::gguf::GgufFile;

pub use bpe::SUPPORTED_PRE;
pub use chat::{ChatMessage, ChatTemplate, FALLBACK_CHATML, SERVER_CONTEXT_KEYS, TemplateKwargs};
pub use error::Error;
pub use hf::{
    CHAT_TEMPLATE_FILE, GENERATION_CONFIG_FILE, HfFiles, TOKENIZER_CONFIG_FILE, TOKENIZER_FILE,
};
pub use incremental::IncrementalDecoder;
pub use spec::{TokenType, TokenizerSpec};

use pieces::Pieces;

/// Texts of control tokens that end a turn in common chat formats: generation stops on them
/// even when the file's `eos_token_id` names another token (llama.cpp's end-of-generation set).
const END_OF_GENERATION_TEXTS: &[&str] = &[
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "<|eom_id|>",
    "<EOT>",
    "<|end_of_text|>",
];

/// How to encode text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EncodeOptions {
    /// Prepend BOS (only if the model has one).
    pub add_bos: bool,
    /// Match control-token strings (`<|im_start|>`) as the control tokens; off, they are
    /// encoded as plain text (for untrusted text that must not inject turns).
    pub parse_special: bool,
}

/// A model's tokenizer: text ↔ token ids, chat template, special-token ids.
pub struct Tokenizer {
    encoder: bpe::Encoders,
    pieces: Pieces,
    bos_token_id: Option<u32>,
    eos_token_ids: Vec<u32>,
    add_bos: bool,
    /// SentencePiece: `decode` drops the space that encoding prepended.
    strip_space_prefix: bool,
    chat: ChatTemplate,
}

impl std::fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tokenizer")
            .field("vocab_size", &self.vocab_size())
            .field("bos_token_id", &self.bos_token_id)
            .field("eos_token_ids", &self.eos_token_ids)
            .field("add_bos", &self.add_bos)
            .finish_non_exhaustive()
    }
}

impl Tokenizer {
    /// The tokenizer described by a GGUF file's `tokenizer.*` metadata.
    pub fn from_gguf(file: &GgufFile) -> Result<Self, Error> {
        Self::from_spec(&TokenizerSpec::from_gguf(file)?)
    }

    /// The tokenizer described by `spec`.
    pub fn from_spec(spec: &TokenizerSpec) -> Result<Self, Error> {
        check_consistent(spec)?;
        let encoder = match spec.model.as_str() {
            "gpt2" => bpe::build(spec)?,
            "llama" => spm::build(spec)?,
            _ => {
                return Err(Error::UnsupportedModel {
                    model: spec.model.clone(),
                });
            }
        };
        Self::assemble(spec, encoder)
    }

    /// The tokenizer of `spec` encoding with `encoder` (built from the spec, or read from a
    /// checkpoint's `tokenizer.json`).
    fn assemble(spec: &TokenizerSpec, encoder: bpe::Encoders) -> Result<Self, Error> {
        check_consistent(spec)?;
        let pieces = match spec.model.as_str() {
            "llama" => Pieces::sentencepiece(spec),
            _ => Pieces::byte_level(spec),
        };
        let strip_space_prefix = spec.model == "llama" && spec.add_space_prefix.unwrap_or(true);
        let text_of = |id: Option<u32>| {
            id.and_then(|id| spec.tokens.get(id as usize))
                .map_or("", String::as_str)
        };
        let chat = ChatTemplate::new(
            spec.chat_template.as_deref(),
            text_of(spec.bos_token_id),
            text_of(spec.eos_token_id),
        );
        if let Some(err) = chat.compile_error() {
            tracing::warn!("the model's chat template does not compile, chats will fail: {err}");
        }
        Ok(Self {
            add_bos: spec.add_bos.unwrap_or(encoder.add_bos_default) && spec.bos_token_id.is_some(),
            encoder,
            pieces,
            bos_token_id: spec.bos_token_id,
            eos_token_ids: eos_token_ids(spec),
            strip_space_prefix,
            chat,
        })
    }

    /// Encodes `text`, matching control-token strings as control tokens; `add_special` adds
    /// BOS when the model wants one.
    pub fn encode(&self, text: &str, add_special: bool) -> Result<Vec<u32>, Error> {
        self.encode_with(
            text,
            EncodeOptions {
                add_bos: add_special && self.add_bos,
                parse_special: true,
            },
        )
    }

    /// Encodes `text` with explicit options.
    pub fn encode_with(&self, text: &str, options: EncodeOptions) -> Result<Vec<u32>, Error> {
        let encoder = if options.parse_special {
            &self.encoder.parsing_special
        } else {
            &self.encoder.literal
        };
        let encoding = encoder
            .encode_fast(text, false)
            .map_err(|e| Error::Encode(e.to_string()))?;
        let mut ids = Vec::with_capacity(encoding.len() + 1);
        if let Some(bos) = self.bos_token_id.filter(|_| options.add_bos) {
            ids.push(bos);
        }
        ids.extend_from_slice(encoding.get_ids());
        Ok(ids)
    }

    /// Decodes `ids` as a whole text; with `skip_special`, control tokens are left out. Bytes
    /// that do not form UTF-8 become U+FFFD. (SentencePiece: the space that encoding prepends
    /// is removed again; [`IncrementalDecoder`] keeps it, since generated text continues a
    /// prompt.)
    pub fn decode(&self, ids: &[u32], skip_special: bool) -> Result<String, Error> {
        let mut bytes = Vec::new();
        // SentencePiece encoding prepends a space at the start and after each control token.
        let mut at_text_start = true;
        for &id in ids {
            let piece = self.token_bytes(id).ok_or(Error::UnknownTokenId {
                id,
                vocab_size: self.vocab_size(),
            })?;
            if self.is_special(id) {
                at_text_start = true;
                if !skip_special {
                    bytes.extend_from_slice(piece);
                }
                continue;
            }
            let strip = self.strip_space_prefix && at_text_start && piece.first() == Some(&b' ');
            bytes.extend_from_slice(if strip { &piece[1..] } else { piece });
            at_text_start = false;
        }
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    }

    /// Renders a chat with the model's template (ChatML if it has none).
    pub fn apply_chat_template<M: Serialize>(
        &self,
        messages: &[M],
        add_generation_prompt: bool,
    ) -> Result<String, Error> {
        self.chat
            .render(messages, None, add_generation_prompt, None)
    }

    /// Renders a chat and encodes it (control tokens parsed; BOS added when the model wants
    /// one and the template did not already write it).
    pub fn encode_chat<M: Serialize>(
        &self,
        messages: &[M],
        add_generation_prompt: bool,
    ) -> Result<Vec<u32>, Error> {
        self.encode_chat_with_tools(messages, None, add_generation_prompt, None)
    }

    /// [`encode_chat`](Self::encode_chat) with a `tools` list and extra variables
    /// (`chat_template_kwargs`) for the template.
    pub fn encode_chat_with_tools<M: Serialize>(
        &self,
        messages: &[M],
        tools: Option<&serde_json::Value>,
        add_generation_prompt: bool,
        kwargs: Option<&TemplateKwargs>,
    ) -> Result<Vec<u32>, Error> {
        let text = self
            .chat
            .render(messages, tools, add_generation_prompt, kwargs)?;
        let mut ids = self.encode_with(
            &text,
            EncodeOptions {
                add_bos: false,
                parse_special: true,
            },
        )?;
        if let Some(bos) = self.bos_token_id.filter(|_| self.add_bos)
            && ids.first() != Some(&bos)
        {
            ids.insert(0, bos);
        }
        Ok(ids)
    }

    /// The chat template in use.
    pub fn chat_template(&self) -> &ChatTemplate {
        &self.chat
    }

    /// Number of tokens in the vocabulary.
    pub fn vocab_size(&self) -> usize {
        self.pieces.len()
    }

    /// The bytes token `id` stands for (control tokens: their text).
    pub fn token_bytes(&self, id: u32) -> Option<&[u8]> {
        self.pieces.get(id)
    }

    /// Whether `id` is a control (special) token.
    pub fn is_special(&self, id: u32) -> bool {
        self.pieces.is_special(id)
    }

    /// The BOS token, if the model has one.
    pub fn bos_token_id(&self) -> Option<u32> {
        self.bos_token_id
    }

    /// Whether `encode(.., true)` adds BOS.
    pub fn adds_bos(&self) -> bool {
        self.add_bos
    }

    /// Tokens that end generation: EOS, EOT/EOM, and control tokens with a known end-of-turn
    /// text. Sorted, no duplicates.
    pub fn eos_token_ids(&self) -> &[u32] {
        &self.eos_token_ids
    }
}

fn check_consistent(spec: &TokenizerSpec) -> Result<(), Error> {
    let vocab = spec.tokens.len();
    if vocab == 0 {
        return Err(Error::InvalidVocab("tokenizer.ggml.tokens is empty".into()));
    }
    if !spec.token_types.is_empty() && spec.token_types.len() != vocab {
        let types = spec.token_types.len();
        return Err(Error::InvalidVocab(format!(
            "{types} token types for {vocab} tokens"
        )));
    }
    let ids = [
        ("bos_token_id", spec.bos_token_id),
        ("eos_token_id", spec.eos_token_id),
    ];
    let extra = spec
        .extra_eos_token_ids
        .iter()
        .map(|id| ("eot/eom_token_id", Some(*id)));
    for (key, id) in ids.into_iter().chain(extra) {
        if let Some(id) = id.filter(|id| *id as usize >= vocab) {
            return Err(Error::InvalidVocab(format!(
                "tokenizer.ggml.{key} = {id} is outside the vocabulary of {vocab}"
            )));
        }
    }
    Ok(())
}

fn eos_token_ids(spec: &TokenizerSpec) -> Vec<u32> {
    let mut ids: Vec<u32> = spec
        .eos_token_id
        .into_iter()
        .chain(spec.extra_eos_token_ids.iter().copied())
        .collect();
    for (id, token) in spec.tokens.iter().enumerate() {
        if spec.token_type(id) == TokenType::Control
            && END_OF_GENERATION_TEXTS.contains(&token.as_str())
        {
            ids.push(id as u32);
        }
    }
    ids.sort_unstable();
    ids.dedup();
    ids
}
