//! Tests of the report's arithmetic: summaries, the SLO check and the operating point.

#![allow(clippy::unwrap_used)]

use super::*;

fn sample(ttft_s: f64, e2e_s: f64, output_tokens: u64) -> Sample {
    Sample {
        ttft_s,
        e2e_s,
        output_tokens,
        input_tokens: 10,
    }
}

fn point(tokens_per_s: f64, ttft_p95_s: f64, tpot_p95_s: f64) -> Point {
    let outcome = Outcome {
        samples: vec![sample(0.0, 1.0, 2)],
        errors: BTreeMap::new(),
        elapsed_s: 1.0,
    };
    let mut p = Point::summarise(Some(1), None, &outcome, 1);
    p.output_tokens_per_s = tokens_per_s;
    p.ttft_s = Some(Percentiles {
        p50: ttft_p95_s,
        p95: ttft_p95_s,
        p99: ttft_p95_s,
    });
    p.tpot_s = Some(Percentiles {
        p50: tpot_p95_s,
        p95: tpot_p95_s,
        p99: tpot_p95_s,
    });
    p
}

#[test]
fn a_summary_counts_tokens_rates_and_errors() {
    let mut errors = BTreeMap::new();
    errors.insert("status_503".to_string(), 2);
    let outcome = Outcome {
        samples: vec![sample(0.1, 1.0, 10), sample(0.3, 2.0, 10)],
        errors,
        elapsed_s: 4.0,
    };
    let p = Point::summarise(None, Some(0.5), &outcome, 2);
    assert_eq!(
        (p.requests_ok, p.requests_failed, p.output_tokens),
        (2, 2, 20)
    );
    assert!((p.output_tokens_per_s - 5.0).abs() < 1e-12);
    assert!((p.tokens_per_s_per_gpu - 2.5).abs() < 1e-12);
    assert!((p.requests_per_s - 0.5).abs() < 1e-12);
    assert!((p.ttft_s.unwrap().p50 - 0.2).abs() < 1e-12);
    assert!((p.mean_input_tokens - 10.0).abs() < 1e-12);
    let json = serde_json::to_value(&p).unwrap();
    assert_eq!(json["rate"], 0.5);
    assert!(json.get("concurrency").is_none());
    assert_eq!(json["errors"]["status_503"], 2);
}

#[test]
fn the_operating_point_is_the_fastest_point_within_the_slo() {
    let slo = Slo {
        ttft_p95_s: 0.5,
        tpot_p95_s: 0.05,
    };
    let points = vec![
        point(100.0, 0.1, 0.01),
        point(400.0, 0.4, 0.04),
        point(800.0, 0.9, 0.04),
        point(600.0, 0.3, 0.06),
    ];
    assert_eq!(operating_point(&points, &slo), Some(1));
    let strict = Slo {
        ttft_p95_s: 0.01,
        tpot_p95_s: 0.001,
    };
    assert_eq!(operating_point(&points, &strict), None);
}

#[test]
fn a_point_without_successes_never_meets_the_slo() {
    let outcome = Outcome {
        samples: vec![],
        errors: BTreeMap::new(),
        elapsed_s: 1.0,
    };
    let p = Point::summarise(Some(4), None, &outcome, 1);
    assert!(!p.meets(&Slo {
        ttft_p95_s: 10.0,
        tpot_p95_s: 10.0
    }));
    assert_eq!(p.ttft_s, None);
}

/// A report of `points` against a server at 127.0.0.1:1 that said `server`.
fn report(points: Vec<Point>, operating_point: Option<usize>, server: ServerInfo) -> Report {
    Report {
        url: "http://127.0.0.1:1".into(),
        model: "m".into(),
        server,
        client_hardware: Hardware::default(),
        input_tokens: 1,
        output_tokens: 2,
        gpus: 1,
        seed: 0,
        slo: None,
        points,
        operating_point,
    }
}

#[test]
fn the_table_marks_the_operating_point() {
    let points = vec![point(100.0, 0.1, 0.01), point(400.0, 0.4, 0.04)];
    let report = report(points, Some(1), ServerInfo::default());
    let text = table(&report);
    let marked: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("operating point"))
        .collect();
    assert_eq!(marked.len(), 1);
    assert!(marked[0].contains("400.0"), "{text}");
}

#[test]
fn the_table_says_where_the_servers_token_count_came_from_or_that_it_is_unavailable() {
    let server = ServerInfo {
        metrics_url: "http://127.0.0.1:1/metrics".into(),
        ..ServerInfo::default()
    };
    let mut report = report(vec![point(100.0, 0.1, 0.01)], None, server);
    let text = table(&report);
    assert!(
        text.contains(
            "generated-token count is unavailable: no counter at http://127.0.0.1:1/metrics"
        ),
        "{text}"
    );
    report.server.generation_tokens_delta = Some(64.0);
    let text = table(&report);
    assert!(
        text.contains("the server counted 64 generated tokens (http://127.0.0.1:1/metrics)"),
        "{text}"
    );
}
