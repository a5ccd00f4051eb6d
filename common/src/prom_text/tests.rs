//! Tests of the exposition parser, including malformed and adversarial input.

use super::*;

const ENGINE: &str = r#"# HELP vllm:generation_tokens_total Tokens generated.
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{model_name="smollm2"} 1234
vllm:num_requests_waiting{model_name="smollm2"} 3 1700000000000
vllm:time_to_first_token_seconds_bucket{model_name="smollm2",le="0.5"} 10
vllm:time_to_first_token_seconds_bucket{model_name="smollm2",le="+Inf"} 12
up 1
"#;

#[test]
fn parses_counters_gauges_buckets_and_timestamps() {
    let exp = parse(ENGINE);
    assert!(exp.errors.is_empty(), "{:?}", exp.errors);
    assert_eq!(exp.samples.len(), 5);
    assert_eq!(exp.samples[0].name, "vllm:generation_tokens_total");
    assert_eq!(exp.samples[0].label("model_name"), Some("smollm2"));
    assert_eq!(exp.samples[0].value, 1234.0);
    assert_eq!(exp.samples[1].value, 3.0);
    assert_eq!(exp.samples[3].label("le"), Some("+Inf"));
    assert_eq!(exp.samples[4].labels, vec![]);
}

#[test]
fn label_escapes_and_special_values() {
    let exp = parse("m{a=\"x\\\"y\\\\z\\n\", b = \"\",} NaN\nn +Inf\no -1.5e3\n");
    assert!(exp.errors.is_empty(), "{:?}", exp.errors);
    assert_eq!(exp.samples[0].label("a"), Some("x\"y\\z\n"));
    assert_eq!(exp.samples[0].label("b"), Some(""));
    assert!(exp.samples[0].value.is_nan());
    assert_eq!(exp.samples[1].value, f64::INFINITY);
    assert_eq!(exp.samples[2].value, -1500.0);
}

#[test]
fn malformed_lines_are_reported_and_skipped() {
    let text = "ok 1\n9bad 1\nm{a=\"unterminated} 1\nm{a=x} 1\nm notanumber\nm\nm{a=\"b\"}1\nm inf\nok2 2\n";
    let exp = parse(text);
    let names: Vec<&str> = exp.samples.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["ok", "ok2"]);
    let kinds: Vec<(usize, LineErrorKind)> = exp
        .errors
        .iter()
        .map(|e| (e.line, e.kind.clone()))
        .collect();
    assert_eq!(
        kinds,
        [
            (2, LineErrorKind::Name),
            (3, LineErrorKind::Labels),
            (4, LineErrorKind::Labels),
            (5, LineErrorKind::Value),
            (6, LineErrorKind::Value),
            (7, LineErrorKind::Name),
            (8, LineErrorKind::Value),
        ]
    );
}

#[test]
fn never_panics_on_arbitrary_bytes() {
    // A deterministic pseudo-random fuzz over an alphabet rich in the format's delimiters.
    let alphabet: Vec<char> = "ab_:{}=\",\\ \n#.+-0123456789eInfNa\u{e9}\u{1F600}"
        .chars()
        .collect();
    let mut seed: u64 = 0x9E37_79B9_7F4A_7C15;
    for _ in 0..2_000 {
        let len = (seed % 80) as usize;
        let text: String = (0..len)
            .map(|_| {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                alphabet[(seed % alphabet.len() as u64) as usize]
            })
            .collect();
        let exp = parse(&text);
        assert!(exp.samples.len() + exp.errors.len() <= text.lines().count());
    }
}

#[test]
fn overlong_lines_are_rejected() {
    let long = format!("m{{a=\"{}\"}} 1\nok 1\n", "x".repeat(MAX_LINE_BYTES));
    let exp = parse(&long);
    assert_eq!(exp.samples.len(), 1);
    assert_eq!(exp.errors[0].kind, LineErrorKind::TooLong);
}
