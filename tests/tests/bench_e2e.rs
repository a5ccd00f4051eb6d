//! `tokenscale bench` against a real SmolLM2 engine on loopback: a small closed-loop run
//! produces a complete report whose token counts agree with the server's own metrics; against
//! a simulated engine, a concurrency sweep marks the operating point its rows imply.

#![allow(clippy::unwrap_used)]

mod cli_support;

use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use cli_support::{
    Procs, SIM_PROFILE, binary, get, metric_sum, scratch_dir, start_engine, start_sim_engine,
    wait_exit,
};

const MODEL: &str = "smollm2-135m";
const REQUESTS: u64 = 6;
const OUTPUT_TOKENS: u64 = 8;

/// `tokenscale bench` against the server at `addr`, writing its report and plot there.
fn bench_command(addr: SocketAddr, report: &Path, plot: &Path) -> Command {
    let mut command = Command::new(binary("tokenscale"));
    let url = format!("http://{addr}");
    command.args(["bench", "--url", &url, "--model", MODEL]);
    command.arg("--out").arg(report).arg("--plot").arg(plot);
    command
}

#[test]
fn bench_reports_every_point_and_agrees_with_the_servers_token_count() {
    let mut procs = Procs::default();
    let addr = start_engine(&mut procs, &["--model", MODEL], Duration::from_secs(180));
    let dir = scratch_dir("bench-e2e");
    let report_path = dir.join("report.json");
    let plot_path = dir.join("report.svg");
    let mut bench = bench_command(addr, &report_path, &plot_path)
        .args(["--concurrency", "1,4", "--requests", &REQUESTS.to_string()])
        .args([
            "--input-tokens",
            "16",
            "--output-tokens",
            &OUTPUT_TOKENS.to_string(),
        ])
        .args(["--slo-ttft", "60s", "--slo-tpot", "10s"])
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
        report["operating_point"]["concurrency"].as_u64().is_some(),
        "a loose SLO is met by some point"
    );
    let svg = std::fs::read_to_string(&plot_path).expect("plot written");
    assert!(svg.contains("<svg"));
}

/// The SLO of the sweep, in seconds: TTFT, TPOT.
const SLO_S: (f64, f64) = (2.0, 0.04);

#[test]
fn a_concurrency_sweep_marks_the_fastest_level_inside_both_slos() {
    let dir = scratch_dir("bench-curve");
    let mut procs = Procs::default();
    let profile = dir.join("profile.yaml");
    // Steps grow steeply with the batch (4 ms a sequence over 10 ms), so the sweep crosses a
    // tight TPOT target.
    let steep = SIM_PROFILE.replace("decode_s_per_seq: 0.001", "decode_s_per_seq: 0.004");
    assert_ne!(steep, SIM_PROFILE, "the profile's decode cost changed");
    std::fs::write(&profile, steep).expect("profile");
    let addr = start_sim_engine(&mut procs, &profile.display().to_string(), MODEL);
    let (report_path, plot_path) = (dir.join("curve.json"), dir.join("curve.svg"));
    let mut bench = bench_command(addr, &report_path, &plot_path)
        .args(["--concurrency", "1,4,16", "--requests", "32"])
        .args(["--input-tokens", "16", "--output-tokens", "32"])
        .args(["--slo-ttft", "2s", "--slo-tpot", "40ms"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("bench starts");
    let status = wait_exit(&mut bench, "tokenscale bench", Duration::from_secs(300));
    assert!(status.success(), "bench failed: {status}");
    let mut table = String::new();
    std::io::Read::read_to_string(&mut bench.stdout.take().expect("stdout"), &mut table)
        .expect("table");
    println!("{table}");

    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&report_path).expect("report written"))
            .expect("report is JSON");
    assert_eq!(report["slo"]["ttft_p95_s"].as_f64(), Some(SLO_S.0));
    assert_eq!(report["slo"]["tpot_p95_s"].as_f64(), Some(SLO_S.1));
    // The rows' own figures decide: the highest tokens/s whose p95s are both within.
    let rows: Vec<(u64, f64, bool)> = report["points"]
        .as_array()
        .expect("points")
        .iter()
        .map(|p| {
            let p95 = |key: &str| p[key]["p95"].as_f64().expect("p95");
            let within = p95("ttft_s") <= SLO_S.0 && p95("tpot_s") <= SLO_S.1;
            let tokens = p["output_tokens_per_s"].as_f64().expect("tokens/s");
            (
                p["concurrency"].as_u64().expect("concurrency"),
                tokens,
                within,
            )
        })
        .collect();
    assert_eq!(rows.iter().map(|r| r.0).collect::<Vec<_>>(), vec![1, 4, 16]);
    let expected = rows
        .iter()
        .filter(|r| r.2)
        .max_by(|a, b| a.1.total_cmp(&b.1))
        .map(|r| r.0);
    let op = &report["operating_point"];
    assert_eq!(op["concurrency"].as_u64(), expected, "{table}");
    let marked: Vec<&str> = table
        .lines()
        .filter(|l| l.ends_with("<- operating point"))
        .collect();
    assert!(
        table.starts_with("SLO: TTFT p95 <= 2000.0 ms, TPOT p95 <= 40.0 ms"),
        "{table}"
    );
    let plot = std::fs::read_to_string(&plot_path).expect("plot written");
    assert!(plot.contains("TPOT SLO 40.0 ms") && plot.contains("TTFT SLO 2000.0 ms"));
    match expected {
        Some(c) => {
            assert_eq!(marked.len(), 1, "{table}");
            assert!(marked[0].starts_with(&format!("c={c} ")), "{table}");
            let tokens = op["output_tokens_per_s"].as_f64().expect("tokens/s");
            let line = format!("operating point: concurrency {c}, {tokens:.1} tokens/s");
            assert!(table.contains(&line), "{table}");
            assert!(plot.contains("operating point"), "the plot circles it");
        }
        None => {
            assert!(op.is_null() && marked.is_empty(), "{table}");
            assert!(table.contains("no level meets the SLO"), "{table}");
        }
    }
}
