//! OpenAI API wire types (completions, chat completions, models, errors), shared by the engine
//! that serves them, the gateway that proxies them and the bench tool that sends them. Fields
//! beyond OpenAI's are vLLM's extensions (`top_k`, `min_p`, `ignore_eos`, …) plus tokenscale's
//! `priority`. Numbers a client may get wrong (`max_tokens`, `n`, `top_k`) are signed here so
//! the server can answer a negative value with a message naming the field.

mod member_at_fault;
mod structured;
mod tools;

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

pub use member_at_fault::{error_reason, member_at_fault};
pub use structured::{JsonSchemaFormat, ResponseFormat, StructuredFields};
pub use tools::{
    FunctionCall, FunctionCallDelta, FunctionDefinition, FunctionName, NamedToolChoice,
    TOOL_TYPE_FUNCTION, Tool, ToolCall, ToolCallDelta, ToolChoice, merge_tool_call_delta,
};

/// `object` of a completion and of its stream chunks.
pub const OBJECT_TEXT_COMPLETION: &str = "text_completion";
/// `object` of a chat completion.
pub const OBJECT_CHAT_COMPLETION: &str = "chat.completion";
/// `object` of a chat completion stream chunk.
pub const OBJECT_CHAT_COMPLETION_CHUNK: &str = "chat.completion.chunk";
/// The line that ends an SSE stream.
pub const SSE_DONE: &str = "[DONE]";
/// tokenscale extension, top-level member of a stream chunk (when the request carried the
/// [`STREAM_TOKEN_IDS`](crate::headers::STREAM_TOKEN_IDS) header): the ids of the generated
/// tokens whose text this chunk completes, in order. Across a stream they add up to every
/// output token whose text has been sent; a token whose text is still held back (an
/// unfinished character, a possible stop string) comes with a later chunk.
pub const TOKEN_IDS_MEMBER: &str = "tokenscale_token_ids";

/// A completion prompt: text, several texts, token ids, or several token-id lists.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Prompt {
    Text(String),
    Texts(Vec<String>),
    Tokens(Vec<u32>),
    TokenLists(Vec<Vec<u32>>),
}

/// `stop`: one string or a list.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Stop {
    One(String),
    Many(Vec<String>),
}

impl Stop {
    /// The stop strings as a list.
    pub fn into_vec(self) -> Vec<String> {
        match self {
            Self::One(s) => vec![s],
            Self::Many(v) => v,
        }
    }
}

/// `stream_options`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StreamOptions {
    /// Send a last chunk with `usage` (and no choices) before `[DONE]`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub include_usage: Option<bool>,
}

/// Sampling and stopping fields common to both endpoints (flattened into each request).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SamplingFields {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_p: Option<f32>,
    /// vLLM extension; `-1` or `0` keeps every token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_k: Option<i64>,
    /// vLLM extension.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_p: Option<f32>,
    /// Completions per prompt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub n: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream_options: Option<StreamOptions>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop: Option<Stop>,
    /// vLLM extension: token ids that end generation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_token_ids: Option<Vec<u32>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub presence_penalty: Option<f32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub frequency_penalty: Option<f32>,
    /// vLLM extension.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repetition_penalty: Option<f32>,
    /// vLLM extension: keep generating past EOS.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ignore_eos: Option<bool>,
    /// vLLM extension: leave special tokens out of the text (default true).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skip_special_tokens: Option<bool>,
    /// tokenscale: `interactive` (default) or `batch`; the `x-tokenscale-priority` header wins.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<String>,
    /// vLLM extension: per-tenant salt of the prefix cache.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_salt: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// tokenscale extension: this request continues an answer that was cut off elsewhere.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokenscale_resume: Option<Resume>,
    /// tokenscale extension: `false` turns speculative decoding off for this request (the
    /// output is the same either way; speculation only changes its speed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub speculative: Option<bool>,
}

/// The start of an answer already generated (and streamed) by another replica, which this
/// request continues: the response is exactly the rest of the uninterrupted answer. Limits,
/// penalties, the seeded generator, stop strings and `usage` all count the whole answer, and no
/// chat role chunk is sent again. Needs one prompt and `n` = 1.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Resume {
    /// The answer's generated token ids so far, as the stream's
    /// [`TOKEN_IDS_MEMBER`] reported them.
    pub token_ids: Vec<u32>,
}

/// `POST /v1/completions` body.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CompletionRequest {
    /// Served model name; the engine accepts its own name only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    pub prompt: Prompt,
    /// Return the logprobs of this many most likely tokens per position (0–20).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub logprobs: Option<i64>,
    /// Prepend the prompt to the completion text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub echo: Option<bool>,
    #[serde(flatten)]
    pub sampling: SamplingFields,
    #[serde(flatten)]
    pub structured: StructuredFields,
    /// Every other member, for the engine to accept-and-ignore or refuse by name (never to
    /// drop silently). Must stay the last flattened field: it takes what the others left.
    #[serde(flatten)]
    pub extra: BTreeMap<String, Value>,
}

/// Content of a chat message: text, or a list of parts (only `text` parts are read).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum ChatContent {
    Text(String),
    Parts(Vec<ChatContentPart>),
}

impl ChatContent {
    /// The text of the message (text parts joined).
    pub fn text(&self) -> String {
        match self {
            Self::Text(t) => t.clone(),
            Self::Parts(parts) => parts.iter().filter_map(|p| p.text.as_deref()).collect(),
        }
    }
}

/// One part of a multi-part message (`type` `text`; others are refused by the engine).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChatContentPart {
    #[serde(rename = "type")]
    pub kind: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
}

/// One message of a chat request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChatMessage {
    /// `system`, `user`, `assistant` (or `developer`, `tool`).
    pub role: String,
    #[serde(default)]
    pub content: Option<ChatContent>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// An assistant message's calls.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<Vec<ToolCall>>,
    /// A `tool` message: the call it answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
}

/// `POST /v1/chat/completions` body.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChatCompletionRequest {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    pub messages: Vec<ChatMessage>,
    /// The newer name of `max_tokens`; wins when both are given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_completion_tokens: Option<i64>,
    /// Return the chosen tokens' logprobs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub logprobs: Option<bool>,
    /// And this many alternatives per position (0–20; needs `logprobs`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_logprobs: Option<i64>,
    /// Functions the model may call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools: Option<Vec<Tool>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_choice: Option<ToolChoice>,
    /// Whether one message may hold several calls (default true).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parallel_tool_calls: Option<bool>,
    #[serde(flatten)]
    pub sampling: SamplingFields,
    #[serde(flatten)]
    pub structured: StructuredFields,
    /// Every other member (see [`CompletionRequest::extra`]). Must stay the last flattened field.
    #[serde(flatten)]
    pub extra: BTreeMap<String, Value>,
}

/// Token counts of a response.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    pub total_tokens: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_tokens_details: Option<PromptTokensDetails>,
    /// Set when the model's output was split into reasoning and content.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion_tokens_details: Option<CompletionTokensDetails>,
}

/// Detail of the completion's tokens.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CompletionTokensDetails {
    /// Generated tokens that were reasoning (`reasoning_content`), not the answer.
    pub reasoning_tokens: u64,
}

/// Detail of the prompt's tokens.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PromptTokensDetails {
    /// Prompt tokens served from the prefix cache.
    pub cached_tokens: u64,
}

/// Logprobs of a completion choice (the legacy completions shape).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CompletionLogprobs {
    pub tokens: Vec<String>,
    pub token_logprobs: Vec<Option<f32>>,
    pub top_logprobs: Vec<Option<BTreeMap<String, f32>>>,
    pub text_offset: Vec<u32>,
}

/// One choice of a completion (or of a completion stream chunk).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CompletionChoice {
    pub index: u32,
    pub text: String,
    #[serde(default)]
    pub logprobs: Option<CompletionLogprobs>,
    /// `stop` or `length`; `null` in stream chunks before the last.
    #[serde(default)]
    pub finish_reason: Option<String>,
}

/// `POST /v1/completions` response, and each of its stream chunks.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CompletionResponse {
    pub id: String,
    pub object: String,
    /// Unix seconds.
    pub created: u64,
    pub model: String,
    pub choices: Vec<CompletionChoice>,
    #[serde(default)]
    pub usage: Option<Usage>,
}

/// A candidate token with its logprob (chat shape).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TopLogprob {
    pub token: String,
    pub logprob: f32,
    #[serde(default)]
    pub bytes: Option<Vec<u8>>,
}

/// The chosen token at one position, with its alternatives (chat shape).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChatTokenLogprob {
    pub token: String,
    pub logprob: f32,
    #[serde(default)]
    pub bytes: Option<Vec<u8>>,
    pub top_logprobs: Vec<TopLogprob>,
}

/// Logprobs of a chat choice.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ChatLogprobs {
    pub content: Vec<ChatTokenLogprob>,
}

/// The assistant's message in a chat response.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChatResponseMessage {
    pub role: String,
    /// `null` when the message is only tool calls (or only reasoning).
    #[serde(default)]
    pub content: Option<String>,
    /// A reasoning model's thinking, split out of `content` (vLLM's member).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_content: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<Vec<ToolCall>>,
}

/// One choice of a chat completion.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChatChoice {
    pub index: u32,
    pub message: ChatResponseMessage,
    #[serde(default)]
    pub logprobs: Option<ChatLogprobs>,
    #[serde(default)]
    pub finish_reason: Option<String>,
}

/// `POST /v1/chat/completions` response.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChatCompletionResponse {
    pub id: String,
    pub object: String,
    pub created: u64,
    pub model: String,
    pub choices: Vec<ChatChoice>,
    #[serde(default)]
    pub usage: Option<Usage>,
}

/// What a chat stream chunk adds to the message.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ChatDelta {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
    /// A piece of the reasoning (see [`ChatResponseMessage::reasoning_content`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_content: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<Vec<ToolCallDelta>>,
}

/// One choice of a chat stream chunk.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChatChunkChoice {
    pub index: u32,
    pub delta: ChatDelta,
    #[serde(default)]
    pub logprobs: Option<ChatLogprobs>,
    #[serde(default)]
    pub finish_reason: Option<String>,
}

/// A chat completion stream chunk.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChatCompletionChunk {
    pub id: String,
    pub object: String,
    pub created: u64,
    pub model: String,
    pub choices: Vec<ChatChunkChoice>,
    #[serde(default)]
    pub usage: Option<Usage>,
}

/// One entry of `GET /v1/models`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelCard {
    pub id: String,
    pub object: String,
    pub created: u64,
    pub owned_by: String,
    /// Longest prompt plus completion, in tokens (vLLM extension).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_model_len: Option<u64>,
    /// Compute backend serving it (tokenscale extension): `cpu`, `cuda` or `sim`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backend: Option<String>,
    /// True when no model runs: the `sim` backend's modelled speed and placeholder tokens
    /// (tokenscale extension), so no client mistakes its output or its speed for a model's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub simulated: Option<bool>,
    /// The Hub commit the model was fetched at, for `hf://` sources (tokenscale extension).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<String>,
    /// What the model was loaded from (vLLM's `root`; a LoRA adapter's source).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub root: Option<String>,
    /// The base model of a LoRA adapter (vLLM's `parent`); `None` for a base model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<String>,
}

/// `GET /v1/models` response.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelList {
    pub object: String,
    pub data: Vec<ModelCard>,
}

/// The body of every error response.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ErrorResponse {
    pub error: ErrorBody,
}

/// What went wrong.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ErrorBody {
    pub message: String,
    /// `invalid_request_error`, `not_found_error`, `server_error`, …
    #[serde(rename = "type")]
    pub kind: String,
    /// The request field at fault.
    pub param: Option<String>,
    /// A machine-readable code (`model_not_found`, `context_length_exceeded`, …).
    pub code: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_prompt_shape_parses() {
        let shapes = [
            (r#""hi""#, Prompt::Text("hi".into())),
            (r#"["a","b"]"#, Prompt::Texts(vec!["a".into(), "b".into()])),
            ("[1,2]", Prompt::Tokens(vec![1, 2])),
            ("[[1],[2,3]]", Prompt::TokenLists(vec![vec![1], vec![2, 3]])),
        ];
        for (json, want) in shapes {
            let got: Prompt = serde_json::from_str(json).unwrap_or(Prompt::Text(String::new()));
            assert_eq!(got, want, "{json}");
        }
    }

    #[test]
    fn sampling_fields_flatten_into_the_request() {
        let body = r#"{"model":"m","prompt":"x","max_tokens":-1,"top_k":5,"stop":"\n","stream":true,
                      "stream_options":{"include_usage":true},"extra":1}"#;
        let req: CompletionRequest = serde_json::from_str(body)
            .map_err(|e| e.to_string())
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(req.sampling.max_tokens, Some(-1));
        assert_eq!(req.sampling.top_k, Some(5));
        assert_eq!(
            req.sampling.stop.map(Stop::into_vec),
            Some(vec!["\n".to_string()])
        );
        assert_eq!(
            req.sampling.stream_options.and_then(|o| o.include_usage),
            Some(true)
        );
        // What no flattened struct took lands in `extra`, and only that.
        assert_eq!(req.extra.keys().collect::<Vec<_>>(), ["extra"]);
    }

    #[test]
    fn tools_tool_choice_and_response_formats_parse() {
        let body = r#"{"messages":[{"role":"assistant","content":null,
            "tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{}"}}]},
            {"role":"tool","tool_call_id":"c1","content":"42"}],
            "tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object"}}}],
            "tool_choice":{"type":"function","function":{"name":"f"}},
            "response_format":{"type":"json_schema","json_schema":{"name":"n","schema":{"type":"object"},"strict":true}},
            "guided_choice":["a","b"],"store":false}"#;
        let req: ChatCompletionRequest = serde_json::from_str(body)
            .map_err(|e| e.to_string())
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(req.messages[1].tool_call_id.as_deref(), Some("c1"));
        let calls = req.messages[0].tool_calls.clone().unwrap_or_default();
        assert_eq!(calls[0].function.name, "f");
        assert!(
            matches!(req.tool_choice, Some(ToolChoice::Named(ref n)) if n.function.name == "f")
        );
        assert!(matches!(
            req.structured.response_format,
            Some(ResponseFormat::JsonSchema { ref json_schema }) if json_schema.strict == Some(true)
        ));
        assert!(req.structured.is_constrained());
        assert_eq!(req.extra.keys().collect::<Vec<_>>(), ["store"]);
        let mode: ToolChoice =
            serde_json::from_str(r#""required""#).unwrap_or(ToolChoice::Mode(String::new()));
        assert_eq!(mode, ToolChoice::Mode("required".into()));
    }

    #[test]
    fn errors_serialise_in_the_openai_shape() {
        let e = ErrorResponse {
            error: ErrorBody {
                message: "m".into(),
                kind: "invalid_request_error".into(),
                param: None,
                code: None,
            },
        };
        let v = serde_json::to_value(&e).unwrap_or_default();
        assert_eq!(v["error"]["type"], "invalid_request_error");
        assert!(v["error"]["param"].is_null());
    }
}
