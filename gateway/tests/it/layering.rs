//! The gateway's modules import downward only: each `crate::<module>` a source file names is on
//! its own floor or one below (the floors are in the README's "Layering"), but for the few
//! exceptions listed here with their reason.

use std::collections::BTreeSet;
use std::path::Path;

/// The floors, bottom first; modules on one line share a floor and may import each other.
const FLOORS: &[&[&str]] = &[
    &["vocab", "json_members"],
    &["body"],
    &["error"],
    &["config"],
    &["store", "auth", "usage", "metrics"],
    &["admission"],
    &["routing"],
    &["request"],
    &["limits"],
    &["proxy"],
    &["health", "discovery"],
    &["stack"],
    &["batch"],
    &["server", "load", "reload"],
];

/// Upward imports that stay, as (from, to): why is in the README's "Layering".
const EXCEPTIONS: &[(&str, &str)] = &[
    // `Parsed` holds its model's pool: routing's layers (admission, fallback, pick) take it.
    ("routing", "request"),
    // The metrics sink every layer writes to reads the limiter, the pools and `Parsed`
    // (and its golden test builds batch metrics).
    ("metrics", "limits"),
    ("metrics", "routing"),
    ("metrics", "request"),
    ("metrics", "batch"),
];

/// Names that `crate::` reaches through `lib.rs`'s re-exports, by the module defining them.
const REEXPORTS: &[(&str, &str)] = &[
    ("Body", "body"),
    ("GatewayError", "error"),
    ("Registry", "discovery"),
    ("Gateway", "server"),
    ("RunningGateway", "server"),
    ("Workers", "server"),
    ("serve", "server"),
];

fn floor(module: &str) -> Option<usize> {
    FLOORS.iter().position(|floor| floor.contains(&module))
}

/// Every `crate::<name>` on a line of `text` that is not a comment.
fn named_modules(text: &str) -> Vec<(usize, String)> {
    let mut named = Vec::new();
    for (index, line) in text.lines().enumerate() {
        let line = line.trim_start();
        if line.starts_with("//") {
            continue;
        }
        for (at, _) in line.match_indices("crate::") {
            let before = line[..at].chars().next_back();
            if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
                continue;
            }
            let rest = &line[at + "crate::".len()..];
            let name: String = rest
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            let module = REEXPORTS
                .iter()
                .find(|(item, _)| *item == name)
                .map_or(name.clone(), |(_, module)| module.to_string());
            named.push((index + 1, module));
        }
    }
    named
}

fn rust_files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    let entries = std::fs::read_dir(dir).expect("read the source folder");
    for entry in entries {
        let path = entry.expect("a folder entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn every_import_between_modules_runs_downward_or_is_a_listed_exception() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut upward = BTreeSet::new();
    let mut unplaced = BTreeSet::new();
    for file in &files {
        let relative = file.strip_prefix(&src).expect("under src");
        let top = relative
            .iter()
            .next()
            .and_then(|c| c.to_str())
            .unwrap_or("");
        let from = top.trim_end_matches(".rs");
        if from == "lib" || from == "main" {
            continue;
        }
        let text = std::fs::read_to_string(file).expect("read a source file");
        for (line, to) in named_modules(&text) {
            if to == from {
                continue;
            }
            match (floor(from), floor(&to)) {
                (Some(a), Some(b)) if b <= a => {}
                (Some(_), Some(_)) if EXCEPTIONS.contains(&(from, to.as_str())) => {}
                (Some(_), Some(_)) => {
                    upward.insert(format!("{}:{line} imports `{to}`", relative.display()));
                }
                _ => {
                    unplaced.insert(format!("`{from}` or `{to}`"));
                }
            }
        }
    }
    assert!(
        unplaced.is_empty(),
        "modules on no floor (add them to FLOORS and the README): {unplaced:?}"
    );
    assert!(upward.is_empty(), "imports running upward: {upward:#?}");
}
