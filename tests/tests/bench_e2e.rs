//! `tokenscale bench` against a real SmolLM2 engine on loopback: a small closed-loop run
//! produces a complete report whose token counts agree with the server's own metrics.

#![allow(clippy::unwrap_used)]

mod cli_support;

use std::process::Command;
use std::time::Duration;

use cli_support::{Procs, binary, get, metric_sum, scratch_dir, start_engine, wait_exit};

const MODEL: &str = "smollm2-135m";
const REQUESTS: u64 = 6;
const OUTPUT_TOKENS: u64 = 8;

#[test]
fn bench_reports_every_point_and_agrees_with_the_servers_token_count() {
    let mut procs = Procs::default();
    let addr = start_engine(&mut procs, &["--model", MODEL], Duration::from_secs(180));
    let dir = scratch_dir("bench-e2e");
    let report_path = dir.join("report.json");
    let plot_path = dir.join("report.svg");
    let mut bench = Command::new(binary("tokenscale"))
        .args([
            "bench",
            "--url",
            &format!("http://{addr}"),
            "--model",
            MODEL,
        ])
        .args(["--concurrency", "1,4", "--requests", &REQUESTS.to_string()])
        .args([
            "--input-tokens",
            "16",
            "--output-tokens",
            &OUTPUT_TOKENS.to_string(),
        ])
        .args(["--slo-ttft", "60s", "--slo-tpot", "10s"])
        .arg("--out")
        .arg(&report_path)
        .arg("--plot")
        .arg(&plot_path)
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("bench starts");
    let status = wait_exit(&mut bench, "tokenscale bench", Duration::from_secs(300));
    assert!(status.success(), "bench failed: {status}");

    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&report_path).expect("report written"))
            .expect("report is JSON");
    assert_eq!(report["model"], MODEL);
    assert_eq!(report["server"]["backend"], "cpu");
    assert_eq!(report["server"]["simulated"], false);
    assert!(
        report["server"]["block_size"]
            .as_u64()
            .is_some_and(|b| b > 0)
    );
    assert!(
        report["client_hardware"]["cpu_cores"]
            .as_u64()
            .is_some_and(|c| c > 0)
    );
    let points = report["points"].as_array().expect("points");
    assert_eq!(
        points
            .iter()
            .map(|p| p["concurrency"].as_u64())
            .collect::<Vec<_>>(),
        vec![Some(1), Some(4)]
    );
    let mut total_tokens = 0;
    for p in points {
        assert_eq!(p["requests_ok"], REQUESTS, "{p}");
        assert_eq!(p["errors"].as_object().map(|e| e.len()), Some(0), "{p}");
        assert_eq!(
            p["output_tokens"],
            REQUESTS * OUTPUT_TOKENS,
            "ignore_eos gives exactly max_tokens: {p}"
        );
        for key in [
            "output_tokens_per_s",
            "tokens_per_s_per_gpu",
            "requests_per_s",
        ] {
            assert!(p[key].as_f64().is_some_and(|v| v > 0.0), "{key}: {p}");
        }
        for key in ["ttft_s", "tpot_s", "e2e_s"] {
            let (p50, p95, p99) = (
                p[key]["p50"].as_f64().unwrap(),
                p[key]["p95"].as_f64().unwrap(),
                p[key]["p99"].as_f64().unwrap(),
            );
            assert!(0.0 < p50 && p50 <= p95 && p95 <= p99, "{key}: {p}");
        }
        assert!(p["e2e_s"]["p50"].as_f64() >= p["ttft_s"]["p50"].as_f64());
        total_tokens += p["output_tokens"].as_u64().unwrap();
    }
    // The server counted exactly what the bench counted: this engine served nothing else.
    let (_, metrics) = get(addr, "/metrics").expect("metrics");
    let served = metric_sum(&metrics, "vllm:generation_tokens_total").expect("generation counter");
    assert_eq!(served, total_tokens as f64);
    assert_eq!(
        report["server"]["generation_tokens_delta"].as_f64(),
        Some(served)
    );
    assert!(
        report["operating_point"].as_u64().is_some(),
        "a loose SLO is met by some point"
    );
    let svg = std::fs::read_to_string(&plot_path).expect("plot written");
    assert!(svg.contains("<svg"));
}
