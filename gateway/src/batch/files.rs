//! A finished batch's output and error files, written up from its recorded answers.

use std::collections::HashMap;

use serde_json::json;

use super::types::{BatchRecord, Closing, LineResult, Progress};
use super::validate::Line;

pub(super) fn error_line(id: &str, custom_id: &str, code: &str, message: &str) -> String {
    json!({
        "id": id,
        "custom_id": custom_id,
        "response": null,
        "error": {"code": code, "message": message},
    })
    .to_string()
}

/// A finished batch's files.
pub(super) struct WrittenUp {
    pub(super) output: Vec<u8>,
    pub(super) output_bytes: u64,
    pub(super) errors: Vec<u8>,
    pub(super) errors_bytes: u64,
    pub(super) errors_count: u32,
    pub(super) progress: Progress,
}

/// The output file (2xx answers) and error file (other answers, and for an expired or
/// cancelled batch every unanswered line) in input order, one JSON line each; and the final
/// counts (an unanswered line of an expired or cancelled batch counts as failed).
pub(super) fn write_up(
    batch: &BatchRecord,
    closing: Closing,
    results: &HashMap<u32, LineResult>,
    lines: Option<&[Line]>,
) -> WrittenUp {
    let (mut output, mut errors) = (Vec::new(), Vec::new());
    let mut progress = Progress::default();
    let mut errors_count = 0;
    let mut indices: Vec<u32> = results.keys().copied().collect();
    if let Some(lines) = lines {
        indices = (0..lines.len() as u32).collect();
    }
    indices.sort_unstable();
    let (code, message) = match closing {
        Closing::Expired => (
            "batch_expired",
            "This request could not be executed before the completion window expired.",
        ),
        _ => (
            "batch_cancelled",
            "This request was not executed: the batch was cancelled.",
        ),
    };
    for index in indices {
        match results.get(&index) {
            Some(result) => {
                progress.add(result);
                let file = if result.ok { &mut output } else { &mut errors };
                if !result.ok {
                    errors_count += 1;
                }
                file.extend_from_slice(result.line.as_bytes());
                file.push(b'\n');
            }
            None => {
                let Some(line) = lines.and_then(|l| l.get(index as usize)) else {
                    continue;
                };
                let id = format!(
                    "batch_req_{}_{index}",
                    batch.id.trim_start_matches("batch-")
                );
                errors
                    .extend_from_slice(error_line(&id, &line.custom_id, code, message).as_bytes());
                errors.push(b'\n');
                errors_count += 1;
                progress.failed += 1;
            }
        }
    }
    WrittenUp {
        output_bytes: output.len() as u64,
        errors_bytes: errors.len() as u64,
        output,
        errors,
        errors_count,
        progress,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    fn line(custom_id: &str) -> Line {
        Line {
            number: 1,
            custom_id: custom_id.into(),
            body: serde_json::value::RawValue::from_string("{}".into()).expect("json"),
            estimated_prompt_tokens: 1,
            reserved_output_tokens: 1,
        }
    }

    fn answered(ok: bool, text: &str) -> LineResult {
        LineResult {
            ok,
            line: text.into(),
            prompt_tokens: 2,
            cached_tokens: 0,
            completion_tokens: 3,
        }
    }

    #[test]
    fn an_expired_batch_lists_every_line_once_in_input_order() {
        let batch = crate::batch::types::tests::sample();
        let lines = [line("a"), line("b"), line("c"), line("d")];
        let results: HashMap<u32, LineResult> = [
            (2, answered(false, "{\"c\":1}")),
            (0, answered(true, "{\"a\":1}")),
        ]
        .into();
        let files = write_up(&batch, Closing::Expired, &results, Some(&lines));
        assert_eq!(String::from_utf8_lossy(&files.output), "{\"a\":1}\n");
        let errors = String::from_utf8_lossy(&files.errors).into_owned();
        let ids: Vec<String> = errors
            .lines()
            .map(|l| {
                let v: Value = serde_json::from_str(l).unwrap_or(Value::String(l.into()));
                v.get("custom_id")
                    .and_then(Value::as_str)
                    .map_or_else(|| l.to_string(), str::to_string)
            })
            .collect();
        // The recorded failure keeps its own line; the two unanswered ones say why.
        assert_eq!(ids, ["b", "{\"c\":1}", "d"]);
        assert!(errors.contains("batch_expired"));
        assert_eq!(files.errors_count, 3);
        assert_eq!((files.progress.completed, files.progress.failed), (1, 3));
        assert_eq!(files.progress.completion_tokens, 6);
    }

    #[test]
    fn a_completed_batch_without_failures_writes_no_errors() {
        let batch = crate::batch::types::tests::sample();
        let results: HashMap<u32, LineResult> = [(0, answered(true, "{}"))].into();
        let files = write_up(&batch, Closing::Completed, &results, Some(&[line("a")]));
        assert_eq!(files.errors_count, 0);
        assert!(files.errors.is_empty());
        assert_eq!(files.output_bytes, 3);
    }
}
