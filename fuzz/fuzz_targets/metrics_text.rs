//! Fuzz target: the one Prometheus text parser (common's; the operator, the gateway and the
//! CLI read every `/metrics` with it) must turn any text into samples and typed line errors,
//! never panic, and keep its bounds (names well-formed, at most 100 errors, line numbers in
//! order and within the input).
#![cfg_attr(fuzzing, no_main)]

#[macro_use]
#[path = "../replay.rs"]
mod replay;

// The parser is self-contained (it depends on thiserror only), so it is compiled here from
// its source file alone.
#[allow(dead_code)]
#[path = "../../common/src/prom_text.rs"]
mod text_format;

/// The property, for any input.
fn check(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let parsed = text_format::parse(text);
    let lines = text.lines().count().min(text_format::MAX_LINES);
    assert!(parsed.samples.len() + parsed.errors.len() <= lines);
    assert!(parsed.errors.len() <= 100);
    assert!(parsed.errors.windows(2).all(|w| w[0].line < w[1].line));
    assert!(parsed.errors.iter().all(|e| e.line >= 1 && e.line <= lines));
    for sample in &parsed.samples {
        let mut chars = sample.name.chars();
        let first = chars.next().expect("a sample has a name");
        assert!(first.is_ascii_alphabetic() || first == '_' || first == ':');
        assert!(chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':'));
        for (key, _) in &sample.labels {
            assert!(sample.label(key).is_some());
        }
    }
}

fuzz_main!("metrics_text");
