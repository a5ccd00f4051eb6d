//! Checks a Batch API input file (JSONL, one request a line) before any of it runs: a bad
//! file fails the batch with every problem listed by line, and nothing is sent.
//!
//! The request bodies go through the same partial parse and token estimate as interactive
//! requests (`crate::request`), so a line that passes here is one the live path accepts.

use std::collections::HashMap;

use serde::Deserialize;
use serde_json::value::RawValue;

use crate::config::TokenConfig;
use crate::error::GatewayError;
use crate::request::parse_body;

/// The API a batch's lines call (the batch's `endpoint`, each line's `url`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Endpoint {
    /// Chat completions.
    #[serde(rename = "/v1/chat/completions")]
    ChatCompletions,
    /// Legacy text completions.
    #[serde(rename = "/v1/completions")]
    Completions,
}

impl Endpoint {
    /// The URL path, as OpenAI writes it.
    pub fn path(self) -> &'static str {
        match self {
            Self::ChatCompletions => "/v1/chat/completions",
            Self::Completions => "/v1/completions",
        }
    }

    /// The endpoint of a URL path; `None` for one the Batch API does not serve here.
    pub fn parse(s: &str) -> Option<Self> {
        [Self::ChatCompletions, Self::Completions]
            .into_iter()
            .find(|e| e.path() == s)
    }
}

/// Bounds on an input file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// Largest line, in bytes.
    pub max_line_bytes: usize,
    /// Most requests (non-blank lines).
    pub max_lines: usize,
    /// Largest file, in bytes.
    pub max_file_bytes: usize,
}

impl Default for Limits {
    /// OpenAI's limits: 50,000 requests and 200 MB a file; lines of at most 1 MiB.
    fn default() -> Self {
        Self {
            max_line_bytes: 1 << 20,
            max_lines: 50_000,
            max_file_bytes: 200 << 20,
        }
    }
}

/// One valid request of the file.
#[derive(Debug)]
pub struct Line {
    /// 1-based line number in the file (blank lines count).
    pub number: u32,
    /// The client's id for the request, unique in the file.
    pub custom_id: String,
    /// The request body as sent, to forward verbatim.
    pub body: Box<RawValue>,
    /// Prompt tokens estimated from the prompt's characters, as for interactive requests.
    pub estimated_prompt_tokens: u64,
    /// Completion tokens reserved: `max_tokens` (or the default) times `n`.
    pub reserved_output_tokens: u64,
}

/// A file that passed every check.
#[derive(Debug)]
pub struct Validated {
    /// The one model every line names.
    pub model: String,
    /// Its requests, in file order.
    pub lines: Vec<Line>,
}

/// One problem with the file: OpenAI's `errors.data[]` objects.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct LineError {
    /// A snake_case code (`invalid_json_line`, `duplicate_custom_id`, ...).
    pub code: String,
    /// What is wrong, for a person.
    pub message: String,
    /// The offending field (`custom_id`, `body.model`, ...), if one.
    pub param: Option<String>,
    /// The 1-based line, if the problem is one line's.
    pub line: Option<u32>,
}

/// The most errors listed; one last entry counts the rest.
pub const MAX_ERRORS: usize = 100;

/// Checks every line of `bytes` as a batch for `endpoint` whose models must pass `may_use`
/// (the tenant's access), and returns the requests, or every problem found (at most
/// [`MAX_ERRORS`] and a count of the rest).
pub fn validate(
    bytes: &[u8],
    endpoint: Endpoint,
    may_use: &dyn Fn(&str) -> bool,
    limits: &Limits,
    tokens: &TokenConfig,
) -> Result<Validated, Vec<LineError>> {
    if bytes.len() > limits.max_file_bytes {
        let message = format!(
            "The file is {} bytes; a batch input file may be at most {} bytes.",
            bytes.len(),
            limits.max_file_bytes
        );
        return Err(vec![error("file_too_large", message, None, None)]);
    }
    let mut check = Checker {
        endpoint,
        may_use,
        limits,
        tokens,
        errors: Errors::default(),
        ids: HashMap::new(),
        model: None,
        lines: Vec::new(),
        requests: 0,
    };
    for (index, line) in bytes.split(|&b| b == b'\n').enumerate() {
        let number = u32::try_from(index + 1).unwrap_or(u32::MAX);
        check.line(number, line.strip_suffix(b"\r").unwrap_or(line));
    }
    check.finish()
}

/// The state of one pass over the file.
struct Checker<'a> {
    endpoint: Endpoint,
    may_use: &'a dyn Fn(&str) -> bool,
    limits: &'a Limits,
    tokens: &'a TokenConfig,
    errors: Errors,
    /// Each `custom_id` seen and the line it was first on.
    ids: HashMap<String, u32>,
    /// The first model named and its line: the batch's model.
    model: Option<(String, u32)>,
    lines: Vec<Line>,
    /// Non-blank lines so far.
    requests: usize,
}

/// One line's request, fields kept raw so each has its own clear error.
#[derive(Deserialize)]
struct Request<'a> {
    #[serde(borrow)]
    custom_id: Option<&'a RawValue>,
    #[serde(borrow)]
    method: Option<&'a RawValue>,
    #[serde(borrow)]
    url: Option<&'a RawValue>,
    #[serde(borrow)]
    body: Option<&'a RawValue>,
}

/// What a valid body tells the batch.
struct BodyFacts {
    model: String,
    estimated_prompt_tokens: u64,
    reserved_output_tokens: u64,
}

impl Checker<'_> {
    /// Checks line `number` (its line break removed) and records a request or its errors.
    fn line(&mut self, number: u32, raw: &[u8]) {
        if raw.iter().all(u8::is_ascii_whitespace) {
            return;
        }
        self.requests += 1;
        let at = Some(number);
        if self.requests == self.limits.max_lines.saturating_add(1) {
            let message = format!(
                "The file has more than {} requests, the most a batch may have (this line is \
                 the first past it).",
                self.limits.max_lines
            );
            self.errors
                .push(error("too_many_requests", message, None, at));
        }
        if raw.len() > self.limits.max_line_bytes {
            let message = format!(
                "The line is {} bytes; a line may be at most {} bytes.",
                raw.len(),
                self.limits.max_line_bytes
            );
            return self.errors.push(error("line_too_large", message, None, at));
        }
        // JSON text is UTF-8 (RFC 8259), so a line that is not is not JSON either.
        let Ok(text) = std::str::from_utf8(raw) else {
            let message = "The line is not valid UTF-8, so not valid JSON.";
            return self
                .errors
                .push(error("invalid_json_line", message, None, at));
        };
        let request = match serde_json::from_str::<&RawValue>(text) {
            Err(e) => Err(format!("The line is not valid JSON: {e}.")),
            Ok(value) if !value.get().starts_with('{') => {
                Err("The line is not a JSON object.".to_string())
            }
            Ok(_) => serde_json::from_str::<Request>(text)
                .map_err(|e| format!("The line is not a valid request object: {e}.")),
        };
        match request {
            Ok(request) => self.request(number, &request),
            Err(message) => self
                .errors
                .push(error("invalid_json_line", message, None, at)),
        }
    }

    /// Checks one line's request object: every field, each with its own error.
    fn request(&mut self, number: u32, request: &Request) {
        let at = Some(number);
        let custom_id = self.custom_id(number, request.custom_id);
        if string(request.method).as_deref() != Some("POST") {
            let message = "`method` must be \"POST\".";
            self.errors
                .push(error("invalid_method", message, Some("method"), at));
        }
        let url = string(request.url);
        if url.as_deref() != Some(self.endpoint.path()) {
            let message = match url {
                Some(url) => format!(
                    "The line's `url` is `{}`, but the batch's endpoint is `{}`.",
                    shorten(&url),
                    self.endpoint.path()
                ),
                None => format!(
                    "`url` must be the batch's endpoint, `{}`.",
                    self.endpoint.path()
                ),
            };
            self.errors
                .push(error("mismatched_url", message, Some("url"), at));
        }
        let facts = match request.body {
            Some(body) if body.get().starts_with('{') => self.body(number, body),
            _ => {
                let message = "`body` must be a JSON object: the request's body.";
                self.errors
                    .push(error("invalid_body", message, Some("body"), at));
                None
            }
        };
        // Requests are kept only while the file is still valid: a failed batch runs nothing.
        if let (Some(custom_id), Some(facts), Some(body)) = (custom_id, facts, request.body)
            && self.errors.is_empty()
        {
            self.lines.push(Line {
                number,
                custom_id,
                body: body.to_owned(),
                estimated_prompt_tokens: facts.estimated_prompt_tokens,
                reserved_output_tokens: facts.reserved_output_tokens,
            });
        }
    }

    /// A non-empty string id not used on an earlier line.
    fn custom_id(&mut self, number: u32, raw: Option<&RawValue>) -> Option<String> {
        let at = Some(number);
        let id = string(raw).filter(|id| !id.is_empty());
        let Some(id) = id else {
            let message = "`custom_id` must be a non-empty string.";
            self.errors
                .push(error("invalid_custom_id", message, Some("custom_id"), at));
            return None;
        };
        if let Some(first) = self.ids.get(&id) {
            let message = format!(
                "The custom_id `{}` is already used on line {first}.",
                shorten(&id)
            );
            self.errors
                .push(error("duplicate_custom_id", message, Some("custom_id"), at));
            return None;
        }
        self.ids.insert(id.clone(), number);
        Some(id)
    }

    /// Checks a body as the live path would, then its model against the tenant's access
    /// and the batch's one model.
    fn body(&mut self, number: u32, body: &RawValue) -> Option<BodyFacts> {
        let at = Some(number);
        let facts = match body_facts(body, self.endpoint, self.tokens) {
            Ok(facts) => facts,
            Err(e) => {
                let param = match &e {
                    GatewayError::BadRequest { param: Some(p), .. } => format!("body.{p}"),
                    _ => "body".to_string(),
                };
                self.errors
                    .push(error("invalid_body", e.to_string(), Some(&param), at));
                return None;
            }
        };
        if !(self.may_use)(&facts.model) {
            // The wording the live path gives: whether a model exists is not disclosed.
            let message = GatewayError::ModelNotFound(shorten(&facts.model)).to_string();
            self.errors
                .push(error("model_not_found", message, Some("body.model"), at));
            return None;
        }
        match &self.model {
            None => self.model = Some((facts.model.clone(), number)),
            Some((first, line)) if *first != facts.model => {
                let message = format!(
                    "A batch uses one model: line {line} names `{}`, this line `{}`.",
                    shorten(first),
                    shorten(&facts.model)
                );
                self.errors
                    .push(error("mismatched_model", message, Some("body.model"), at));
                return None;
            }
            Some(_) => {}
        }
        Some(facts)
    }

    /// The requests, or every error found.
    fn finish(self) -> Result<Validated, Vec<LineError>> {
        if self.requests == 0 {
            let message = "The file has no requests: every line is empty.";
            return Err(vec![error("empty_file", message, None, None)]);
        }
        match (self.errors.is_empty(), self.model) {
            (true, Some((model, _))) => Ok(Validated {
                model,
                lines: self.lines,
            }),
            _ => Err(self.errors.finish()),
        }
    }
}

/// The live path's checks of one body (`crate::request`), plus the batch's own: no
/// streaming, and the field its endpoint needs.
fn body_facts(
    body: &RawValue,
    endpoint: Endpoint,
    tokens: &TokenConfig,
) -> Result<BodyFacts, GatewayError> {
    let parsed = parse_body(body.get().as_bytes())?;
    let model = parsed
        .model
        .as_deref()
        .ok_or_else(|| GatewayError::bad_request("`model` is required.", Some("model")))?;
    if parsed.stream == Some(true) {
        let message = "Batch requests are not streamed: remove `stream` or set it to false.";
        return Err(GatewayError::bad_request(message, Some("stream")));
    }
    let (needed, present) = match endpoint {
        Endpoint::ChatCompletions => ("messages", parsed.messages.is_some()),
        Endpoint::Completions => ("prompt", parsed.prompt.is_some()),
    };
    if !present {
        let message = format!("`{needed}` is required for {}.", endpoint.path());
        return Err(GatewayError::bad_request(message, Some(needed)));
    }
    // No prefix hash: a batch line's replica is picked when it runs.
    let prompt = parsed.summarize_prompt(0)?;
    Ok(BodyFacts {
        model: model.to_string(),
        estimated_prompt_tokens: prompt.estimated_tokens(tokens.chars_per_token),
        reserved_output_tokens: parsed.reserved_output_tokens(tokens.default_max_tokens)?,
    })
}

/// A raw member's value when it is a JSON string.
fn string(raw: Option<&RawValue>) -> Option<String> {
    serde_json::from_str(raw?.get()).ok()
}

/// At most 100 characters of a client's value, for a message: the errors are kept with the
/// batch, and a line may be 1 MiB.
fn shorten(value: &str) -> String {
    match value.char_indices().nth(100) {
        Some((end, _)) => format!("{}...", &value[..end]),
        None => value.to_string(),
    }
}

fn error(
    code: &str,
    message: impl Into<String>,
    param: Option<&str>,
    line: Option<u32>,
) -> LineError {
    LineError {
        code: code.to_string(),
        message: message.into(),
        param: param.map(str::to_string),
        line,
    }
}

/// The errors found, at most [`MAX_ERRORS`], and how many more there were.
#[derive(Default)]
struct Errors {
    listed: Vec<LineError>,
    more: usize,
}

impl Errors {
    fn push(&mut self, e: LineError) {
        if self.listed.len() < MAX_ERRORS {
            self.listed.push(e);
        } else {
            self.more += 1;
        }
    }

    fn is_empty(&self) -> bool {
        self.listed.is_empty()
    }

    fn finish(mut self) -> Vec<LineError> {
        if self.more > 0 {
            let message = format!("... and {} more errors.", self.more);
            self.listed
                .push(error("too_many_errors", message, None, None));
        }
        self.listed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CHAT: &str = r#"{"custom_id":"a","method":"POST","url":"/v1/chat/completions","body":{"model":"m","messages":[{"role":"user","content":"hello world!"}],"max_tokens":10,"n":2}}"#;

    fn chat(id: &str, body: &str) -> String {
        format!(
            r#"{{"custom_id":"{id}","method":"POST","url":"/v1/chat/completions","body":{body}}}"#
        )
    }

    fn run(file: &str, limits: &Limits) -> Result<Validated, Vec<LineError>> {
        let may_use = |model: &str| model != "secret";
        validate(
            file.as_bytes(),
            Endpoint::ChatCompletions,
            &may_use,
            limits,
            &TokenConfig::default(),
        )
    }

    /// The errors of a file, as `(code, line)`.
    fn errors(file: &str) -> Vec<(String, Option<u32>)> {
        let errors = run(file, &Limits::default()).expect_err("invalid");
        errors.into_iter().map(|e| (e.code, e.line)).collect()
    }

    fn one_error(file: &str) -> LineError {
        let mut errors = run(file, &Limits::default()).expect_err("invalid");
        assert_eq!(errors.len(), 1, "{errors:?}");
        errors.remove(0)
    }

    #[test]
    fn a_valid_file_yields_its_requests_and_their_token_estimates() {
        let second = chat(
            "b",
            r#"{"model":"m","messages":[{"role":"user","content":"hi"}]}"#,
        );
        let file = format!("{CHAT}\r\n\n  \n{second}\n");
        let valid = run(&file, &Limits::default()).expect("valid");
        assert_eq!(valid.model, "m");
        let [first, last] = &valid.lines[..] else {
            panic!("two lines expected: {:?}", valid.lines);
        };
        assert_eq!((first.number, first.custom_id.as_str()), (1, "a"));
        // "user\nhello world!\n" is 18 characters: 4.5 tokens at 4 a token, rounded up.
        assert_eq!(first.estimated_prompt_tokens, 5);
        assert_eq!(first.reserved_output_tokens, 20, "max_tokens 10 times n 2");
        assert!(first.body.get().starts_with(r#"{"model":"m","messages""#));
        // Blank lines count for numbering; the default `max_tokens` is reserved.
        assert_eq!((last.number, last.custom_id.as_str()), (4, "b"));
        assert_eq!(
            last.reserved_output_tokens,
            TokenConfig::default().default_max_tokens
        );
        assert_eq!(last.estimated_prompt_tokens, 2);
    }

    #[test]
    fn completions_need_a_prompt_and_chat_needs_messages() {
        let line = r#"{"custom_id":"a","method":"POST","url":"/v1/completions","body":{"model":"m","prompt":"abcdefgh"}}"#;
        let may_use = |_: &str| true;
        let tokens = TokenConfig::default();
        let valid = validate(
            line.as_bytes(),
            Endpoint::Completions,
            &may_use,
            &Limits::default(),
            &tokens,
        )
        .expect("valid");
        assert_eq!(valid.lines[0].estimated_prompt_tokens, 2);
        let no_prompt = line.replace(r#","prompt":"abcdefgh""#, "");
        let e = validate(
            no_prompt.as_bytes(),
            Endpoint::Completions,
            &may_use,
            &Limits::default(),
            &tokens,
        )
        .expect_err("invalid");
        assert_eq!(
            (e[0].code.as_str(), e[0].param.as_deref()),
            ("invalid_body", Some("body.prompt"))
        );
        let e = one_error(&chat("a", r#"{"model":"m","prompt":"x"}"#));
        assert_eq!(
            (e.code.as_str(), e.param.as_deref()),
            ("invalid_body", Some("body.messages"))
        );
    }

    #[test]
    fn bad_json_and_non_objects_quote_the_reason() {
        let e = one_error(r#"{"custom_id": "a","#);
        assert_eq!((e.code.as_str(), e.line), ("invalid_json_line", Some(1)));
        assert!(e.message.contains("EOF while parsing"), "{}", e.message);
        assert_eq!(
            one_error("[1, 2]").message,
            "The line is not a JSON object."
        );
        let e = one_error(&format!("{CHAT}\n\"text\""));
        assert_eq!((e.code.as_str(), e.line), ("invalid_json_line", Some(2)));
        let e =
            one_error(&CHAT.replace(r#""custom_id":"a","#, r#""custom_id":"a","custom_id":"b","#));
        assert!(
            e.message.contains("duplicate field `custom_id`"),
            "{}",
            e.message
        );
    }

    #[test]
    fn non_utf8_lines_are_invalid_json() {
        let mut file = format!("{CHAT}\n").into_bytes();
        file.extend(b"{\"custom_id\":\"\xff\"}\n");
        let may_use = |_: &str| true;
        let limits = Limits::default();
        let e = validate(
            &file,
            Endpoint::ChatCompletions,
            &may_use,
            &limits,
            &TokenConfig::default(),
        )
        .expect_err("invalid");
        assert_eq!(
            (e[0].code.as_str(), e[0].line),
            ("invalid_json_line", Some(2))
        );
        assert!(e[0].message.contains("UTF-8"));
    }

    #[test]
    fn custom_ids_must_be_non_empty_strings_used_once() {
        for id in [
            r#""custom_id":"","#,
            r#""custom_id":7,"#,
            r#""custom_id":null,"#,
            "",
        ] {
            let e = one_error(&CHAT.replace(r#""custom_id":"a","#, id));
            assert_eq!(
                (e.code.as_str(), e.param.as_deref()),
                ("invalid_custom_id", Some("custom_id")),
                "{id}"
            );
        }
        let file = format!(
            "{CHAT}\n{}\n{CHAT}",
            chat("b", r#"{"model":"m","messages":[]}"#)
        );
        let e = one_error(&file);
        assert_eq!((e.code.as_str(), e.line), ("duplicate_custom_id", Some(3)));
        assert_eq!(e.message, "The custom_id `a` is already used on line 1.");
        let (long, body) = ("i".repeat(5000), r#"{"model":"m","messages":[]}"#);
        let e = one_error(&format!("{}\n{}", chat(&long, body), chat(&long, body)));
        assert!(
            e.message.len() < 200,
            "client values are shortened: {}",
            e.message
        );
    }

    #[test]
    fn method_url_and_body_are_each_checked_on_one_line() {
        let line = r#"{"custom_id":"a","method":"GET","url":"/v1/completions","body":[]}"#;
        let codes: Vec<_> = errors(line).into_iter().map(|(code, _)| code).collect();
        assert_eq!(codes, ["invalid_method", "mismatched_url", "invalid_body"]);
        let e = one_error(&CHAT.replace(r#""url":"/v1/chat/completions","#, ""));
        assert_eq!(e.code, "mismatched_url");
        let e = one_error(&CHAT.replace(r#","method":"POST""#, ""));
        assert_eq!(e.code, "invalid_method");
        let e = one_error(r#"{"custom_id":"a","method":"POST","url":"/v1/chat/completions"}"#);
        assert_eq!(
            (e.code.as_str(), e.param.as_deref()),
            ("invalid_body", Some("body"))
        );
    }

    #[test]
    fn bodies_get_the_live_paths_checks() {
        let cases = [
            (r#"{"messages":[]}"#, "body.model"),
            (
                r#"{"model":"m","messages":[],"stream":true}"#,
                "body.stream",
            ),
            (r#"{"model":"m","messages":"hi"}"#, "body.messages"),
            (r#"{"model":"m","messages":[],"n":0}"#, "body.n"),
            (
                r#"{"model":"m","messages":[],"max_tokens":-1}"#,
                "body.max_tokens",
            ),
            (r#"{"model":"m","messages":[],"max_tokens":"x"}"#, "body"),
        ];
        for (body, param) in cases {
            let e = one_error(&chat("a", body));
            assert_eq!(
                (e.code.as_str(), e.param.as_deref(), e.line),
                ("invalid_body", Some(param), Some(1)),
                "{body}"
            );
        }
        let e = one_error(&chat(
            "a",
            r#"{"model":"m","messages":[],"max_tokens":"x"}"#,
        ));
        assert!(
            e.message
                .starts_with("Invalid JSON body: max_tokens: invalid type"),
            "{}",
            e.message
        );
        assert!(
            run(
                &chat("a", r#"{"model":"m","messages":[],"stream":false}"#),
                &Limits::default()
            )
            .is_ok()
        );
    }

    #[test]
    fn models_must_be_usable_and_one_per_batch() {
        let e = one_error(&chat("a", r#"{"model":"secret","messages":[]}"#));
        assert_eq!(
            (e.code.as_str(), e.param.as_deref()),
            ("model_not_found", Some("body.model"))
        );
        assert_eq!(
            e.message,
            GatewayError::ModelNotFound("secret".into()).to_string()
        );
        let file = format!(
            "{CHAT}\n{}",
            chat("b", r#"{"model":"other","messages":[]}"#)
        );
        let e = one_error(&file);
        assert_eq!((e.code.as_str(), e.line), ("mismatched_model", Some(2)));
        assert_eq!(
            e.message,
            "A batch uses one model: line 1 names `m`, this line `other`."
        );
    }

    #[test]
    fn every_line_is_checked_and_the_list_is_capped() {
        let file = "x\n".repeat(MAX_ERRORS + 5);
        let list = run(&file, &Limits::default()).expect_err("invalid");
        assert_eq!(list.len(), MAX_ERRORS + 1);
        assert_eq!(list[MAX_ERRORS - 1].line, Some(MAX_ERRORS as u32));
        let last = &list[MAX_ERRORS];
        assert_eq!(
            (last.code.as_str(), last.message.as_str()),
            ("too_many_errors", "... and 5 more errors.")
        );
        assert_eq!(
            errors(&format!("x\n{CHAT}\ny")),
            [
                ("invalid_json_line".into(), Some(1)),
                ("invalid_json_line".into(), Some(3))
            ]
        );
    }

    #[test]
    fn size_limits_are_enforced() {
        let small = Limits {
            max_line_bytes: 300,
            max_lines: 2,
            max_file_bytes: 1000,
        };
        let prompt = "x".repeat(300);
        let long = chat("b", &format!(r#"{{"model":"m","messages":"{prompt}"}}"#));
        let e = run(&format!("{CHAT}\n{long}"), &small).expect_err("invalid");
        assert_eq!((e[0].code.as_str(), e[0].line), ("line_too_large", Some(2)));
        assert_eq!(e.len(), 1, "a line too large is not parsed: {e:?}");
        let lines = (0..3).map(|i| chat(&i.to_string(), r#"{"model":"m","messages":[]}"#));
        let three = lines.collect::<Vec<_>>().join("\n");
        let e = run(&three, &small).expect_err("invalid");
        assert_eq!(e.len(), 1, "{e:?}");
        assert_eq!(
            (e[0].code.as_str(), e[0].line),
            ("too_many_requests", Some(3))
        );
        let e = run(&"\n".repeat(1001), &small).expect_err("invalid");
        assert_eq!((e[0].code.as_str(), e.len()), ("file_too_large", 1));
    }

    #[test]
    fn an_empty_file_is_refused() {
        for file in ["", "\n", " \r\n\t\n"] {
            assert_eq!(errors(file), [("empty_file".into(), None)], "{file:?}");
        }
    }

    #[test]
    fn endpoints_round_trip_through_their_paths() {
        for e in [Endpoint::ChatCompletions, Endpoint::Completions] {
            assert_eq!(Endpoint::parse(e.path()), Some(e));
            assert_eq!(
                serde_json::to_string(&e).ok(),
                Some(format!("\"{}\"", e.path()))
            );
        }
        assert_eq!(Endpoint::parse("/v1/embeddings"), None);
    }
}
