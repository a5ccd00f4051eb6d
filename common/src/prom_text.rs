//! A small, tolerant parser of the Prometheus text exposition format: every well-formed
//! sample line becomes a [`Sample`]; a malformed line becomes a typed [`LineError`] and is
//! skipped, so one bad line never hides the rest. Bounded and panic-free on any input.

/// Most lines read from one scrape; the rest is ignored (a guard against runaway exporters).
pub const MAX_LINES: usize = 200_000;
/// Longest line accepted, in bytes.
pub const MAX_LINE_BYTES: usize = 64 * 1024;

/// One sample: a metric name, its labels and its value.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    /// Metric name as exposed (e.g. `vllm:generation_tokens_total`, `x_bucket`).
    pub name: String,
    /// Labels in the order written.
    pub labels: Vec<(String, String)>,
    /// The value.
    pub value: f64,
}

impl Sample {
    /// The value of label `key`, if present.
    pub fn label(&self, key: &str) -> Option<&str> {
        self.labels
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

/// Why one line was skipped.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LineErrorKind {
    /// The metric name is missing or has characters outside `[a-zA-Z0-9_:]`.
    #[error("invalid metric name")]
    Name,
    /// The label set is not `{k="v",...}`.
    #[error("invalid label set")]
    Labels,
    /// The value is not a number (`NaN`, `+Inf` and `-Inf` are numbers).
    #[error("invalid value")]
    Value,
    /// The line is longer than [`MAX_LINE_BYTES`].
    #[error("line too long")]
    TooLong,
}

/// A skipped line and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {kind}")]
pub struct LineError {
    /// 1-based line number.
    pub line: usize,
    /// What was wrong.
    pub kind: LineErrorKind,
}

/// The result of parsing one exposition.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Exposition {
    /// Every well-formed sample.
    pub samples: Vec<Sample>,
    /// Every malformed line (at most the first 100 are kept).
    pub errors: Vec<LineError>,
}

/// Parses an exposition. Comments (`# HELP`, `# TYPE`) and blank lines are skipped.
pub fn parse(text: &str) -> Exposition {
    let mut out = Exposition::default();
    for (index, line) in text.lines().take(MAX_LINES).enumerate() {
        let line_no = index + 1;
        let trimmed = line.trim();
        if trimmed.is_empty() || trimmed.starts_with('#') {
            continue;
        }
        let result = if line.len() > MAX_LINE_BYTES {
            Err(LineErrorKind::TooLong)
        } else {
            parse_line(trimmed)
        };
        match result {
            Ok(sample) => out.samples.push(sample),
            Err(kind) if out.errors.len() < 100 => out.errors.push(LineError {
                line: line_no,
                kind,
            }),
            Err(_) => {}
        }
    }
    out
}

fn is_name_char(c: char, first: bool) -> bool {
    c.is_ascii_alphabetic() || c == '_' || c == ':' || (!first && c.is_ascii_digit())
}

fn parse_line(line: &str) -> Result<Sample, LineErrorKind> {
    let name_len = line
        .char_indices()
        .find(|&(i, c)| !is_name_char(c, i == 0))
        .map_or(line.len(), |(i, _)| i);
    if name_len == 0 {
        return Err(LineErrorKind::Name);
    }
    let (name, mut rest) = line.split_at(name_len);
    let mut labels = Vec::new();
    if let Some(after_brace) = rest.strip_prefix('{') {
        let (parsed, after) = parse_labels(after_brace)?;
        labels = parsed;
        rest = after;
    }
    if !rest.starts_with([' ', '\t']) {
        return Err(if rest.is_empty() {
            LineErrorKind::Value
        } else {
            LineErrorKind::Name
        });
    }
    // Value, then an optional timestamp we do not need.
    let value_text = rest.split_whitespace().next().ok_or(LineErrorKind::Value)?;
    let value = parse_value(value_text).ok_or(LineErrorKind::Value)?;
    Ok(Sample {
        name: name.to_string(),
        labels,
        value,
    })
}

/// Label pairs in the order written.
type Labels = Vec<(String, String)>;

/// Parses `k="v",k2="v2"}` (the opening brace already consumed); returns the rest after `}`.
fn parse_labels(mut rest: &str) -> Result<(Labels, &str), LineErrorKind> {
    let mut labels = Vec::new();
    loop {
        rest = rest.trim_start();
        if let Some(after) = rest.strip_prefix('}') {
            return Ok((labels, after));
        }
        let key_len = rest
            .char_indices()
            .find(|&(i, c)| !(c.is_ascii_alphabetic() || c == '_' || (i > 0 && c.is_ascii_digit())))
            .map_or(rest.len(), |(i, _)| i);
        if key_len == 0 {
            return Err(LineErrorKind::Labels);
        }
        let key = &rest[..key_len];
        rest = rest[key_len..]
            .trim_start()
            .strip_prefix('=')
            .ok_or(LineErrorKind::Labels)?;
        rest = rest
            .trim_start()
            .strip_prefix('"')
            .ok_or(LineErrorKind::Labels)?;
        let mut value = String::new();
        let mut chars = rest.char_indices();
        let end = loop {
            match chars.next() {
                None => return Err(LineErrorKind::Labels),
                Some((i, '"')) => break i,
                Some((_, '\\')) => match chars.next() {
                    Some((_, 'n')) => value.push('\n'),
                    Some((_, c @ ('\\' | '"'))) => value.push(c),
                    _ => return Err(LineErrorKind::Labels),
                },
                Some((_, c)) => value.push(c),
            }
        };
        labels.push((key.to_string(), value));
        rest = rest[end + 1..].trim_start();
        if let Some(after) = rest.strip_prefix(',') {
            rest = after;
        } else if !rest.starts_with('}') {
            return Err(LineErrorKind::Labels);
        }
    }
}

fn parse_value(text: &str) -> Option<f64> {
    match text {
        "+Inf" | "Inf" => Some(f64::INFINITY),
        "-Inf" => Some(f64::NEG_INFINITY),
        "NaN" => Some(f64::NAN),
        // Rust's parser also takes "inf"/"infinity"; the format spells them as above only.
        _ if text
            .chars()
            .any(|c| c.is_ascii_alphabetic() && c != 'e' && c != 'E') =>
        {
            None
        }
        _ => text.parse().ok(),
    }
}

#[cfg(test)]
// The path is spelled out so that the fuzz target including this file finds it too.
#[path = "prom_text/tests.rs"]
mod tests;
