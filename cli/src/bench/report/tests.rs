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

/// The SLO of most tests: 500 ms TTFT, 50 ms TPOT.
pub(crate) const SLO: Slo = Slo {
    ttft_p95_s: 0.5,
    tpot_p95_s: 0.05,
};

fn point(tokens_per_s: f64, ttft_p95_s: f64, tpot_p95_s: f64) -> Point {
    at(1, tokens_per_s, ttft_p95_s, tpot_p95_s)
}

/// A point at `concurrency` with these figures.
pub(crate) fn at(concurrency: u32, tokens_per_s: f64, ttft_p95_s: f64, tpot_p95_s: f64) -> Point {
    let outcome = Outcome {
        samples: vec![sample(0.0, 1.0, 2)],
        errors: BTreeMap::new(),
        elapsed_s: 1.0,
    };
    let mut p = Point::summarise(Some(concurrency), None, &outcome, 1);
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
fn a_faster_level_that_breaks_tpot_is_not_chosen() {
    let points = vec![
        at(1, 100.0, 0.1, 0.01),
        at(16, 300.0, 0.3, 0.045),
        at(64, 900.0, 0.4, 0.051),
    ];
    assert_eq!(operating_point(&points, &SLO), Some(1));
}

#[test]
fn ties_go_to_the_lighter_load_then_to_the_first_given() {
    let points = vec![
        at(16, 400.0, 0.3, 0.04),
        at(4, 400.0, 0.2, 0.03),
        at(8, 100.0, 0.1, 0.01),
    ];
    assert_eq!(operating_point(&points, &SLO), Some(1));
    let same = vec![at(4, 400.0, 0.3, 0.04), at(4, 400.0, 0.2, 0.03)];
    assert_eq!(operating_point(&same, &SLO), Some(0));
}

#[test]
fn no_level_within_the_slo_gives_no_operating_point() {
    let points = vec![
        at(1, 100.0, 0.6, 0.01),
        at(4, 400.0, 0.4, 0.06),
        at(16, 500.0, 0.9, 0.09),
    ];
    assert_eq!(operating_point(&points, &SLO), None);
    assert_eq!(OperatingPoint::of(&points, &SLO), None);
    assert_eq!(operating_point(&[], &SLO), None);
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

/// A report of `points` against a server at 127.0.0.1:1 that said `server`, its operating
/// point chosen under `slo`.
pub(crate) fn report(points: Vec<Point>, slo: Option<Slo>, server: ServerInfo) -> Report {
    let operating_point = slo.and_then(|s| OperatingPoint::of(&points, &s));
    Report {
        url: "http://127.0.0.1:1".into(),
        model: "m".into(),
        server,
        client_hardware: Hardware::default(),
        input_tokens: 1,
        output_tokens: 2,
        gpus: 1,
        seed: 0,
        slo,
        points,
        operating_point,
    }
}

#[test]
fn the_table_marks_the_operating_point_and_prints_the_slo_and_the_conclusion() {
    let points = vec![at(1, 100.0, 0.1, 0.01), at(4, 400.0, 0.4, 0.04)];
    let report = report(points, Some(SLO), ServerInfo::default());
    let text = table(&report);
    let marked: Vec<&str> = text
        .lines()
        .filter(|l| l.ends_with("<- operating point"))
        .collect();
    assert_eq!(marked.len(), 1, "{text}");
    assert!(marked[0].starts_with("c=4 "), "{text}");
    assert!(marked[0].contains("400.0"), "{text}");
    assert_eq!(
        text.lines().next(),
        Some("SLO: TTFT p95 <= 500.0 ms, TPOT p95 <= 50.0 ms")
    );
    assert!(
        text.contains(
            "operating point: concurrency 4, 400.0 tokens/s, TTFT p95 400.0 ms, TPOT p95 40.0 ms (SLO 500.0 ms / 50.0 ms)"
        ),
        "{text}"
    );
}

#[test]
fn without_a_level_inside_the_slo_the_table_says_so_and_the_json_holds_null() {
    let points = vec![at(1, 100.0, 0.6, 0.01), at(4, 400.0, 0.4, 0.07)];
    let report = report(points, Some(SLO), ServerInfo::default());
    let text = table(&report);
    assert!(!text.contains("<- operating point"), "{text}");
    assert!(
        text.contains("operating point: none, no level meets the SLO (SLO 500.0 ms / 50.0 ms)"),
        "{text}"
    );
    let json = serde_json::to_value(&report).unwrap();
    assert!(json["operating_point"].is_null(), "{json}");
    assert_eq!(json["slo"]["tpot_p95_s"], 0.05);
}

#[test]
fn without_an_slo_nothing_is_marked_and_the_table_says_how_to_ask() {
    let report = report(vec![at(1, 100.0, 0.1, 0.01)], None, ServerInfo::default());
    let text = table(&report);
    assert!(
        text.starts_with("SLO: none (--slo-ttft and --slo-tpot"),
        "{text}"
    );
    assert!(!text.contains("operating point:"), "{text}");
}

#[test]
fn a_missing_target_does_not_constrain_and_reads_any() {
    let slo = Slo {
        ttft_p95_s: f64::INFINITY,
        tpot_p95_s: 0.05,
    };
    let points = vec![at(1, 100.0, 0.1, 0.01), at(4, 400.0, 30.0, 0.04)];
    let report = report(points, Some(slo), ServerInfo::default());
    assert_eq!(report.operating_point.map(|op| op.index), Some(1));
    let text = table(&report);
    assert!(
        text.contains("TTFT p95 <= any, TPOT p95 <= 50.0 ms"),
        "{text}"
    );
}

#[test]
fn the_json_operating_point_names_its_level_throughput_and_p95s() {
    let points = vec![at(1, 100.0, 0.1, 0.01), at(16, 400.0, 0.4, 0.04)];
    let report = report(points, Some(SLO), ServerInfo::default());
    let json = serde_json::to_value(&report).unwrap();
    let op = &json["operating_point"];
    assert_eq!(op["index"], 1);
    assert_eq!(op["concurrency"], 16);
    assert!(op.get("rate").is_none(), "{op}");
    assert_eq!(op["output_tokens_per_s"], 400.0);
    assert_eq!(op["ttft_p95_s"], 0.4);
    assert_eq!(op["tpot_p95_s"], 0.04);
    assert_eq!(json["slo"]["ttft_p95_s"], 0.5);
}

#[test]
fn the_table_says_where_the_servers_token_count_came_from_or_that_it_is_unavailable() {
    let server = ServerInfo {
        metrics_url: "http://127.0.0.1:1/metrics".into(),
        ..ServerInfo::default()
    };
    let mut report = report(vec![at(1, 100.0, 0.1, 0.01)], None, server);
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
