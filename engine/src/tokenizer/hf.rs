//! The tokenizer of a Hugging Face checkpoint: `tokenizer.json` encodes (the `tokenizers`
//! crate runs it as `transformers` does), `tokenizer_config.json` gives the chat template and
//! the BOS/EOS texts (or `chat_template.jinja`, where newer checkpoints keep the template),
//! `generation_config.json` the ids that end a generation. The files are turned into the same
//! [`TokenizerSpec`] a GGUF file gives, so decoding and templates work the same way for both.

use std::path::Path;

use serde_json::Value;

use super::bpe::Encoders;
use super::spec::{TokenType, TokenizerSpec};
use super::{Error, Tokenizer};

/// The tokenizer files of a checkpoint (the fetch takes these).
pub const TOKENIZER_FILE: &str = "tokenizer.json";
pub const TOKENIZER_CONFIG_FILE: &str = "tokenizer_config.json";
pub const GENERATION_CONFIG_FILE: &str = "generation_config.json";
pub const CHAT_TEMPLATE_FILE: &str = "chat_template.jinja";

impl Tokenizer {
    /// The tokenizer of the checkpoint in `dir` (`tokenizer.json` is required; the other
    /// files are optional: without a template, chats use ChatML).
    pub fn from_hf_dir(dir: &Path) -> Result<Self, Error> {
        let read = |name: &str| -> Result<Option<String>, Error> {
            let path = dir.join(name);
            match std::fs::read_to_string(&path) {
                Ok(text) => Ok(Some(text)),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
                Err(e) => Err(Error::Build(format!("reading {}: {e}", path.display()))),
            }
        };
        let tokenizer_json = read(TOKENIZER_FILE)?.ok_or_else(|| {
            Error::Build(format!(
                "{} has no {TOKENIZER_FILE} (only tokenizer.json tokenizers are supported)",
                dir.display()
            ))
        })?;
        let files = HfFiles {
            tokenizer_json,
            tokenizer_config: read(TOKENIZER_CONFIG_FILE)?,
            generation_config: read(GENERATION_CONFIG_FILE)?,
            chat_template: read(CHAT_TEMPLATE_FILE)?,
        };
        files.tokenizer()
    }
}

/// The texts of a checkpoint's tokenizer files.
#[derive(Debug, Clone, Default)]
pub struct HfFiles {
    pub tokenizer_json: String,
    pub tokenizer_config: Option<String>,
    pub generation_config: Option<String>,
    pub chat_template: Option<String>,
}

fn json(text: &str, file: &str) -> Result<Value, Error> {
    serde_json::from_str(text).map_err(|e| Error::Build(format!("{file} is not valid JSON: {e}")))
}

impl HfFiles {
    /// Builds the tokenizer these files describe.
    pub fn tokenizer(&self) -> Result<Tokenizer, Error> {
        let raw = json(&self.tokenizer_json, TOKENIZER_FILE)?;
        let encoder: tokenizers::Tokenizer = self
            .tokenizer_json
            .parse()
            .map_err(|e| Error::Build(format!("{TOKENIZER_FILE}: {e}")))?;
        let config = match &self.tokenizer_config {
            Some(text) => json(text, TOKENIZER_CONFIG_FILE)?,
            None => Value::Null,
        };
        let generation = match &self.generation_config {
            Some(text) => json(text, GENERATION_CONFIG_FILE)?,
            None => Value::Null,
        };
        let model = decoder_family(&raw)?;
        let (tokens, token_types) = vocabulary(&encoder, &raw, model);
        let id_of = |text: &str| encoder.token_to_id(text);
        let bos_token_id = special_text(&config, "bos_token").and_then(|t| id_of(&t));
        let eos_token_id = special_text(&config, "eos_token").and_then(|t| id_of(&t));
        let extra_eos_token_ids = ids(&generation["eos_token_id"]);
        let add_bos = match config.get("add_bos_token").and_then(Value::as_bool) {
            Some(add) => add,
            // Whether the post-processor adds BOS is what `transformers` does by default.
            None => bos_token_id.is_some_and(|bos| {
                encoder
                    .encode_fast("a", true)
                    .is_ok_and(|e| e.get_ids().first() == Some(&bos))
            }),
        };
        let chat_template = chat_template(&config).or_else(|| self.chat_template.clone());
        let spec = TokenizerSpec {
            model: model.to_string(),
            pre: None,
            tokens,
            token_types,
            merges: Vec::new(),
            bos_token_id,
            eos_token_id,
            extra_eos_token_ids,
            add_bos: Some(add_bos),
            chat_template,
            scores: Vec::new(),
            add_space_prefix: Some(model == "llama" && prepends_space(&raw)),
        };
        let mut literal = encoder.clone();
        literal.set_encode_special_tokens(true);
        let encoders = Encoders {
            parsing_special: encoder,
            literal,
            add_bos_default: add_bos,
        };
        Tokenizer::assemble(&spec, encoders)
    }
}

/// `gpt2` for byte-level decoders (Llama 3, Qwen, SmolLM), `llama` for SentencePiece-style
/// ones (`▁` for spaces, `<0xNN>` byte fallback: Llama 2, Mistral).
fn decoder_family(raw: &Value) -> Result<&'static str, Error> {
    let mut types = Vec::new();
    collect_types(&raw["decoder"], &mut types);
    if types.iter().any(|t| t == "ByteLevel") {
        return Ok("gpt2");
    }
    if types
        .iter()
        .any(|t| t == "ByteFallback" || t == "Metaspace")
    {
        return Ok("llama");
    }
    Err(Error::UnsupportedModel {
        model: format!("tokenizer.json with decoder {types:?}"),
    })
}

/// The `type` of a tokenizer.json component and of its `decoders` / `pretokenizers` children.
fn collect_types(v: &Value, out: &mut Vec<String>) {
    if let Some(t) = v.get("type").and_then(Value::as_str) {
        out.push(t.to_string());
    }
    for key in ["decoders", "pretokenizers", "normalizers"] {
        for child in v.get(key).and_then(Value::as_array).into_iter().flatten() {
            collect_types(child, out);
        }
    }
}

/// Whether SentencePiece-style text gets a `▁` prepended (so decoding drops a leading space).
fn prepends_space(raw: &Value) -> bool {
    let mut types = Vec::new();
    collect_types(&raw["normalizer"], &mut types);
    collect_types(&raw["pre_tokenizer"], &mut types);
    types.iter().any(|t| t == "Prepend" || t == "Metaspace")
}

/// Every id's token text (holes left empty) and type: added special tokens are control
/// tokens, other added tokens user-defined, `<0xNN>` of a SentencePiece vocabulary bytes.
fn vocabulary(
    encoder: &tokenizers::Tokenizer,
    raw: &Value,
    model: &str,
) -> (Vec<String>, Vec<TokenType>) {
    let vocab = encoder.get_vocab(true);
    let size = vocab.values().map(|&id| id as usize + 1).max().unwrap_or(0);
    let mut tokens = vec![String::new(); size];
    let mut types = vec![TokenType::Unused; size];
    for (text, id) in vocab {
        let is_byte =
            model == "llama" && text.len() == 6 && text.starts_with("<0x") && text.ends_with('>');
        types[id as usize] = if is_byte {
            TokenType::Byte
        } else {
            TokenType::Normal
        };
        tokens[id as usize] = text;
    }
    for added in raw["added_tokens"].as_array().into_iter().flatten() {
        let id = added["id"].as_u64().map(|id| id as usize);
        let special = added["special"].as_bool().unwrap_or(false);
        if let Some(id) = id.filter(|&id| id < size) {
            types[id] = if special {
                TokenType::Control
            } else {
                TokenType::UserDefined
            };
        }
    }
    (tokens, types)
}

/// A special token's text from tokenizer_config.json: a string, or an object with `content`.
fn special_text(config: &Value, key: &str) -> Option<String> {
    let v = config.get(key)?;
    v.as_str()
        .or_else(|| v.get("content").and_then(Value::as_str))
        .map(str::to_string)
}

/// An id or a list of ids.
fn ids(v: &Value) -> Vec<u32> {
    match v {
        Value::Number(n) => n.as_u64().map(|id| id as u32).into_iter().collect(),
        Value::Array(a) => a
            .iter()
            .filter_map(Value::as_u64)
            .map(|id| id as u32)
            .collect(),
        _ => Vec::new(),
    }
}

/// `chat_template`: a string, or a list of named templates (the `default` one).
fn chat_template(config: &Value) -> Option<String> {
    match config.get("chat_template")? {
        Value::String(s) => Some(s.clone()),
        Value::Array(list) => list
            .iter()
            .find(|t| t["name"].as_str() == Some("default"))
            .and_then(|t| t["template"].as_str())
            .map(str::to_string),
        _ => None,
    }
}
