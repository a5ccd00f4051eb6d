//! Fuzz target: the Batch API's input-file check (JSONL, one request a line). It may not
//! panic on any bytes; a file it accepts has at least one request, strictly increasing line
//! numbers, unique ids, one model and object bodies; a file it refuses gets at most the
//! capped list of errors, each naming a line the file has.
#![cfg_attr(fuzzing, no_main)]

#[macro_use]
#[path = "../replay.rs"]
mod replay;

/// The items the checked files need from the gateway's error module.
mod error {
    #[derive(Debug, thiserror::Error)]
    pub enum GatewayError {
        #[error("{message}")]
        BadRequest {
            message: String,
            param: Option<&'static str>,
        },
        #[error("The model `{0}` does not exist or you do not have access to it.")]
        ModelNotFound(String),
    }
    impl GatewayError {
        pub fn bad_request(message: impl Into<String>, param: Option<&'static str>) -> Self {
            Self::BadRequest {
                message: message.into(),
                param,
            }
        }
    }
}

/// The gateway's token settings, as `config` defines them.
mod config {
    pub struct TokenConfig {
        pub default_max_tokens: u64,
        pub chars_per_token: f64,
    }
}

/// The gateway's request module, reduced to its body parse.
mod request {
    pub use super::parse::parse_body;
}

// Fields the gateway reads elsewhere (priority, stream_options) are unread here.
#[allow(dead_code)]
#[path = "../../gateway/src/request/parse.rs"]
mod parse;
#[allow(dead_code)]
#[path = "../../gateway/src/batch/validate.rs"]
mod validate;

use std::collections::HashSet;

use validate::{Endpoint, Limits, MAX_ERRORS};

/// The property, for any input, under both endpoints and both default and small limits.
fn check(data: &[u8]) {
    let tokens = config::TokenConfig {
        default_max_tokens: 256,
        chars_per_token: 4.0,
    };
    let small = Limits {
        max_line_bytes: 256,
        max_lines: 4,
        max_file_bytes: 4096,
    };
    let may_use = |model: &str| !model.starts_with('x');
    let lines_in_file = data.split(|&b| b == b'\n').count() as u64;
    for endpoint in [Endpoint::ChatCompletions, Endpoint::Completions] {
        for limits in [&Limits::default(), &small] {
            match validate::validate(data, endpoint, &may_use, limits, &tokens) {
                Ok(valid) => accepted(&valid, limits),
                Err(errors) => {
                    assert!(!errors.is_empty() && errors.len() <= MAX_ERRORS + 1);
                    for e in &errors {
                        let line = e.line.map_or(1, u64::from);
                        assert!((1..=lines_in_file).contains(&line), "{e:?}");
                    }
                }
            }
        }
    }
}

/// What every accepted file must satisfy.
fn accepted(valid: &validate::Validated, limits: &Limits) {
    assert!(!valid.lines.is_empty() && valid.lines.len() <= limits.max_lines);
    assert!(valid.lines.windows(2).all(|w| w[0].number < w[1].number));
    let mut ids = HashSet::new();
    for line in &valid.lines {
        assert!(!line.custom_id.is_empty() && ids.insert(&line.custom_id));
        // Read as the live path reads it: serde_json's `Value` refuses some JSON the live
        // path forwards (numbers such as 1e999), so it is not the reference here.
        assert!(line.body.get().starts_with('{'));
        let body = parse::parse_body(line.body.get().as_bytes()).expect("a kept body parses");
        assert_eq!(body.model.as_deref(), Some(valid.model.as_str()));
    }
}

fuzz_main!("batch_input");
