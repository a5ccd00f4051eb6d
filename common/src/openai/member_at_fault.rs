//! Which member of a JSON request body a data error is about, for a 400 that names it.
//!
//! serde_json's messages say what was wrong ("invalid type: string \"yes\", expected a
//! boolean") but not where, and through `#[serde(flatten)]` (the request types flatten their
//! sampling fields) no path survives at all: a flattened struct is parsed from buffered
//! content, out of the document. So, on the error path only, the body is parsed again with one
//! member left out at a time: the member whose absence changes the error is the one at fault,
//! and its own members are searched the same way (`stream_options.include_usage`,
//! `messages[0].role`).

use serde_json::Value;

/// Bytes of re-parsed bodies one search may spend: a large bad body gets fewer probes.
const PROBE_BUDGET_BYTES: usize = 32 << 20;
/// Re-parses one search may spend, whatever the body's size.
const MAX_PROBES: usize = 256;
/// Arrays longer than this are named as a whole (a prompt of token ids, not its 900th id).
const MAX_ELEMENTS: usize = 64;

/// A step of the path to a member.
#[derive(Debug, Clone)]
enum Step {
    Member(String),
    Index(usize),
}

/// The error's message without serde_json's " at line L column C" (for a flattened field it
/// points at the end of the body, not at the field).
pub fn error_reason(error: &serde_json::Error) -> String {
    let text = error.to_string();
    let position = format!(" at line {} column {}", error.line(), error.column());
    text.strip_suffix(&position).unwrap_or(&text).to_string()
}

/// The path of the member of `body` that `error` (from parsing `body`) is about, e.g.
/// `speculative` or `stream_options.include_usage`; `None` when the error is not a data error,
/// the body is not a JSON object, or no single member is at fault. `parse` parses a body as the
/// caller does and returns its error (`None` when it parses).
pub fn member_at_fault(
    body: &[u8],
    error: &serde_json::Error,
    parse: impl Fn(&[u8]) -> Option<serde_json::Error>,
) -> Option<String> {
    if !error.is_data() {
        return None;
    }
    let root: Value = serde_json::from_slice(body).ok()?;
    if !root.is_object() {
        return None;
    }
    let reason = error_reason(error);
    let mut probes = MAX_PROBES
        .min(PROBE_BUDGET_BYTES / body.len().max(1))
        .max(1);
    let mut path: Vec<Step> = Vec::new();
    while let Some(step) = culprit_below(&root, &path, &reason, &parse, &mut probes) {
        path.push(step);
    }
    (!path.is_empty()).then(|| render(&path))
}

/// Of the members (or elements) of the value at `path`, the one whose absence changes the
/// error. One whose absence only makes the parse miss it ("missing field `x`") is taken only
/// when no other changes anything: a required member left out always changes the error.
fn culprit_below(
    root: &Value,
    path: &[Step],
    reason: &str,
    parse: &impl Fn(&[u8]) -> Option<serde_json::Error>,
    probes: &mut usize,
) -> Option<Step> {
    let mut missed_only = None;
    for step in children(at(root, path)?) {
        if *probes == 0 {
            break;
        }
        *probes -= 1;
        let mut candidate = root.clone();
        remove(&mut candidate, path, &step);
        let bytes = serde_json::to_vec(&candidate).ok()?;
        let Some(error) = parse(&bytes) else {
            return Some(step);
        };
        let now = error_reason(&error);
        if now == reason {
            continue;
        }
        match &step {
            Step::Member(name) if now == format!("missing field `{name}`") => {
                missed_only.get_or_insert(step);
            }
            _ => return Some(step),
        }
    }
    missed_only
}

/// The value at `path`.
fn at<'a>(root: &'a Value, path: &[Step]) -> Option<&'a Value> {
    path.iter().try_fold(root, |value, step| match step {
        Step::Member(name) => value.get(name),
        Step::Index(i) => value.get(i),
    })
}

/// The steps one level below `value`: its members, or its elements when there are few.
fn children(value: &Value) -> Vec<Step> {
    match value {
        Value::Object(map) => map.keys().cloned().map(Step::Member).collect(),
        Value::Array(items) if items.len() <= MAX_ELEMENTS => {
            (0..items.len()).map(Step::Index).collect()
        }
        _ => Vec::new(),
    }
}

/// Leaves `step` out of the value at `path`.
fn remove(root: &mut Value, path: &[Step], step: &Step) {
    let mut value = root;
    for s in path {
        let next = match s {
            Step::Member(name) => value.get_mut(name),
            Step::Index(i) => value.get_mut(*i),
        };
        let Some(next) = next else {
            return;
        };
        value = next;
    }
    match (value, step) {
        (Value::Object(map), Step::Member(name)) => {
            map.shift_remove(name);
        }
        (Value::Array(items), Step::Index(i)) if *i < items.len() => {
            items.remove(*i);
        }
        _ => {}
    }
}

/// `a.b[2].c`.
fn render(path: &[Step]) -> String {
    let mut out = String::new();
    for step in path {
        match step {
            Step::Member(name) if out.is_empty() => out += name,
            Step::Member(name) => {
                out.push('.');
                out += name;
            }
            Step::Index(i) => out += &format!("[{i}]"),
        }
    }
    out
}

#[cfg(test)]
#[path = "member_at_fault_tests.rs"]
mod tests;
