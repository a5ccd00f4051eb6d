//! Turns the sampling fields of a request (body and headers) into the engine's
//! `SamplingParams` and the serving options around them, rejecting anything out of range with
//! a 400 that names the field.

use std::collections::BTreeMap;

use axum::http::HeaderMap;
use serde_json::Value;
use tokenscale_common::headers::{PRIORITY, STREAM_TOKEN_IDS};
use tokenscale_common::openai::{SamplingFields, Stop};

use super::ApiError;
use crate::grammar::Constraint;
use crate::reasoning::ReasoningStreamer;
use crate::sampling::{MAX_TOP_LOGPROBS, SamplingParams};
use crate::sched::Priority;
use crate::tools::ToolCallStreamer;

/// Most completions one request may ask for (`n` times the number of prompts).
pub const MAX_CHOICES: usize = 64;
/// `max_tokens` of a completion that does not say (OpenAI's default).
pub const DEFAULT_COMPLETION_MAX_TOKENS: usize = 16;

/// Everything the handlers need besides the prompt.
#[derive(Debug, Clone)]
pub struct Resolved {
    /// `max_tokens` is `None` here: it is set per prompt by [`fit_max_tokens`].
    pub params: SamplingParams,
    pub max_tokens: Option<usize>,
    pub n: usize,
    pub stream: bool,
    pub include_usage: bool,
    pub skip_special_tokens: bool,
    pub priority: Priority,
    pub cache_salt: Option<String>,
    /// The answer's start when this request resumes one (`tokenscale_resume.token_ids`).
    pub resume: Option<Vec<u32>>,
    /// Stream chunks carry their generated token ids (the `x-tokenscale-token-ids` header).
    pub stream_token_ids: bool,
    /// The grammar each choice follows (each choice gets its own copy).
    pub constraint: Option<Constraint>,
    /// Splits each choice's text into content and tool calls.
    pub tool_calls: Option<ToolCallStreamer>,
    /// Splits the text into reasoning and content (chat with a reasoning model).
    pub reasoning: Option<ReasoningStreamer>,
    /// The LoRA adapter the request's `model` names (`None`: the base model).
    pub adapter: Option<std::sync::Arc<crate::lora::LoraAdapter>>,
}

/// Reads the shared fields; `max_tokens` is the endpoint's own (chat's
/// `max_completion_tokens` wins over `max_tokens`), `logprobs` the number of alternatives,
/// `logit_bias` the request's member of that name (it arrives among the unnamed members).
pub fn resolve(
    fields: &SamplingFields,
    max_tokens: Option<i64>,
    logprobs: Option<u32>,
    logit_bias: Option<&Value>,
    headers: &HeaderMap,
    vocab_size: usize,
) -> Result<Resolved, ApiError> {
    let max_tokens = match max_tokens {
        None => None,
        Some(m) if m < 1 => {
            return Err(ApiError::invalid_param(
                "max_tokens",
                format!("max_tokens must be at least 1, got {m}"),
            ));
        }
        Some(m) => Some(usize::try_from(m).unwrap_or(usize::MAX)),
    };
    let n = fields.n.unwrap_or(1);
    if !(1..=MAX_CHOICES as i64).contains(&n) {
        return Err(ApiError::invalid_param(
            "n",
            format!("n must be between 1 and {MAX_CHOICES}, got {n}"),
        ));
    }
    let top_k = match fields.top_k.unwrap_or(0) {
        -1 | 0 => 0,
        k if k < -1 => {
            return Err(ApiError::invalid_param(
                "top_k",
                format!("top_k must be -1 (off) or positive, got {k}"),
            ));
        }
        k => u32::try_from(k).unwrap_or(u32::MAX),
    };
    if logprobs.is_some_and(|l| l > MAX_TOP_LOGPROBS) {
        return Err(ApiError::invalid_param(
            "logprobs",
            format!("at most {MAX_TOP_LOGPROBS} logprobs per token"),
        ));
    }
    let defaults = SamplingParams::default();
    let params = SamplingParams {
        temperature: fields.temperature.unwrap_or(defaults.temperature),
        top_k,
        top_p: fields.top_p.unwrap_or(defaults.top_p),
        min_p: fields.min_p.unwrap_or(defaults.min_p),
        seed: fields.seed.map(|s| s as u64),
        repetition_penalty: fields
            .repetition_penalty
            .unwrap_or(defaults.repetition_penalty),
        presence_penalty: fields.presence_penalty.unwrap_or(0.0),
        frequency_penalty: fields.frequency_penalty.unwrap_or(0.0),
        stop_token_ids: fields.stop_token_ids.clone().unwrap_or_default(),
        stop: fields.stop.clone().map(Stop::into_vec).unwrap_or_default(),
        max_tokens: None,
        ignore_eos: fields.ignore_eos.unwrap_or(false),
        logprobs,
        logit_bias: parse_logit_bias(logit_bias)?,
        // Set by the completions route when it echoes with logprobs.
        prompt_logprobs: None,
        speculative: fields.speculative.unwrap_or(true),
    };
    params.validate(vocab_size)?;
    let include_usage = fields
        .stream_options
        .as_ref()
        .and_then(|o| o.include_usage)
        .unwrap_or(false);
    Ok(Resolved {
        params,
        max_tokens,
        n: n as usize,
        stream: fields.stream.unwrap_or(false),
        include_usage,
        skip_special_tokens: fields.skip_special_tokens.unwrap_or(true),
        priority: priority(headers, fields.priority.as_deref())?,
        cache_salt: fields.cache_salt.clone().filter(|s| !s.is_empty()),
        resume: fields
            .tokenscale_resume
            .as_ref()
            .map(|r| r.token_ids.clone()),
        stream_token_ids: headers
            .get(STREAM_TOKEN_IDS)
            .is_some_and(|v| v.as_bytes() != b"0" && v.as_bytes() != b"false"),
        constraint: None,
        tool_calls: None,
        reasoning: None,
        adapter: None,
    })
}

/// OpenAI's `logit_bias`: an object of token ids, written as strings, to numbers. The shape is
/// checked here; the count, the ids and the range by `SamplingParams::validate`.
fn parse_logit_bias(value: Option<&Value>) -> Result<BTreeMap<u32, f32>, ApiError> {
    let invalid = |message: String| ApiError::invalid_param("logit_bias", message);
    let map = match value {
        None | Some(Value::Null) => return Ok(BTreeMap::new()),
        Some(Value::Object(map)) => map,
        Some(other) => {
            return Err(invalid(format!(
                "logit_bias must be an object of token id to bias, got {other}"
            )));
        }
    };
    map.iter()
        .map(|(key, bias)| {
            let id = key.parse::<u32>().map_err(|_| {
                invalid(format!(
                    "logit_bias key {key:?} is not a token id (a non-negative integer)"
                ))
            })?;
            let bias = bias.as_f64().ok_or_else(|| {
                invalid(format!("logit_bias[{key:?}] must be a number, got {bias}"))
            })?;
            Ok((id, bias as f32))
        })
        .collect()
}

/// The priority class: the `x-tokenscale-priority` header wins over the body's `priority`.
fn priority(headers: &HeaderMap, body: Option<&str>) -> Result<Priority, ApiError> {
    let header = headers
        .get(PRIORITY)
        .map(|v| v.to_str().unwrap_or("\u{fffd}"));
    match header.or(body) {
        None => Ok(Priority::Interactive),
        Some(text) => Priority::parse(text).ok_or_else(|| {
            ApiError::invalid_param(
                "priority",
                format!("priority must be `interactive` or `batch`, got {text:?}"),
            )
        }),
    }
}

/// The `max_tokens` of one prompt: the request's, or `default` (`None`: whatever room is
/// left), checked against the context.
pub fn fit_max_tokens(
    prompt_len: usize,
    asked: Option<usize>,
    default: Option<usize>,
    max_model_len: usize,
) -> Result<u32, ApiError> {
    if prompt_len == 0 {
        return Err(ApiError::invalid_param("prompt", "the prompt is empty"));
    }
    if prompt_len >= max_model_len {
        return Err(ApiError::context_length(format!(
            "the prompt is {prompt_len} tokens; this model's context holds {max_model_len}, which leaves no room to generate"
        )));
    }
    let room = max_model_len - prompt_len;
    let max_tokens = match asked {
        Some(asked) if asked > room => {
            return Err(ApiError::context_length(format!(
                "the prompt ({prompt_len} tokens) plus max_tokens ({asked}) exceed this model's context of {max_model_len} tokens"
            )));
        }
        Some(asked) => asked,
        None => default.map_or(room, |d| d.min(room)),
    };
    Ok(u32::try_from(max_tokens).unwrap_or(u32::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields(json: &str) -> SamplingFields {
        serde_json::from_str(json).unwrap_or_default()
    }

    fn err_param(result: Result<Resolved, ApiError>) -> Option<String> {
        result.err().and_then(|e| e.param)
    }

    #[test]
    fn out_of_range_fields_are_named() {
        let h = HeaderMap::new();
        assert_eq!(
            err_param(resolve(&fields("{}"), Some(-1), None, None, &h, 100)).as_deref(),
            Some("max_tokens")
        );
        assert_eq!(
            err_param(resolve(&fields(r#"{"n":0}"#), None, None, None, &h, 100)).as_deref(),
            Some("n")
        );
        assert_eq!(
            err_param(resolve(
                &fields(r#"{"top_k":-5}"#),
                None,
                None,
                None,
                &h,
                100
            ))
            .as_deref(),
            Some("top_k")
        );
        assert_eq!(
            err_param(resolve(
                &fields(r#"{"temperature":9}"#),
                None,
                None,
                None,
                &h,
                100
            ))
            .as_deref(),
            Some("temperature")
        );
        assert_eq!(
            err_param(resolve(
                &fields(r#"{"priority":"vip"}"#),
                None,
                None,
                None,
                &h,
                100
            ))
            .as_deref(),
            Some("priority")
        );
        assert_eq!(
            err_param(resolve(&fields("{}"), None, Some(21), None, &h, 100)).as_deref(),
            Some("logprobs")
        );
    }

    #[test]
    fn logit_bias_is_checked_by_shape_count_id_and_range() {
        let h = HeaderMap::new();
        let bias = |json: &str| {
            let value: Value = serde_json::from_str(json).unwrap_or(Value::Null);
            resolve(&fields("{}"), None, None, Some(&value), &h, 100)
        };
        let ok = bias(r#"{"5": -100, "7": 100, "9": 0.5}"#).map(|r| r.params.logit_bias);
        assert_eq!(
            ok.ok(),
            Some(BTreeMap::from([(5, -100.0), (7, 100.0), (9, 0.5)]))
        );
        for bad in [
            r#"[1, 2]"#,
            r#"{"x": 1}"#,
            r#"{"-1": 1}"#,
            r#"{"5": "high"}"#,
            r#"{"100": 1}"#,
            r#"{"5": 100.5}"#,
            r#"{"5": -101}"#,
        ] {
            let param = err_param(bias(bad));
            assert_eq!(param.as_deref(), Some("logit_bias"), "{bad}");
        }
        let many: serde_json::Map<String, Value> =
            (0..301).map(|i| (i.to_string(), Value::from(1))).collect();
        let many = resolve(
            &fields("{}"),
            None,
            None,
            Some(&Value::Object(many)),
            &h,
            1000,
        );
        assert_eq!(err_param(many).as_deref(), Some("logit_bias"));
    }

    #[test]
    fn the_priority_header_wins_over_the_body() {
        let mut h = HeaderMap::new();
        h.insert(PRIORITY, axum::http::HeaderValue::from_static("batch"));
        let r = resolve(
            &fields(r#"{"priority":"interactive"}"#),
            None,
            None,
            None,
            &h,
            100,
        );
        assert_eq!(r.map(|r| r.priority).ok(), Some(Priority::Batch));
        let r = resolve(
            &fields(r#"{"priority":"batch"}"#),
            None,
            None,
            None,
            &HeaderMap::new(),
            100,
        );
        assert_eq!(r.map(|r| r.priority).ok(), Some(Priority::Batch));
    }

    #[test]
    fn max_tokens_must_fit_the_context() {
        assert_eq!(fit_max_tokens(10, None, Some(16), 100).ok(), Some(16));
        assert_eq!(fit_max_tokens(90, None, Some(16), 100).ok(), Some(10));
        assert_eq!(fit_max_tokens(90, None, None, 100).ok(), Some(10));
        assert_eq!(fit_max_tokens(90, Some(10), None, 100).ok(), Some(10));
        let too_long = fit_max_tokens(90, Some(11), None, 100).err();
        assert_eq!(
            too_long.and_then(|e| e.code),
            Some("context_length_exceeded")
        );
        assert!(fit_max_tokens(100, None, None, 100).is_err());
        assert_eq!(
            fit_max_tokens(0, None, None, 100)
                .err()
                .and_then(|e| e.param)
                .as_deref(),
            Some("prompt")
        );
    }

    #[test]
    fn speculative_is_on_unless_the_request_turns_it_off() {
        let h = HeaderMap::new();
        let speculative = |json| {
            resolve(&fields(json), None, None, None, &h, 100)
                .map(|r| r.params.speculative)
                .ok()
        };
        assert_eq!(speculative("{}"), Some(true));
        assert_eq!(speculative(r#"{"speculative":false}"#), Some(false));
    }
}
