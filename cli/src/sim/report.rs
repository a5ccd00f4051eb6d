//! The comparison as a table for people and as JSON lines for programs.

use serde_json::json;

use super::Comparison;
use super::run::PolicyResult;

/// One JSON object per policy, a line each.
pub fn json(results: &[PolicyResult]) -> String {
    results
        .iter()
        .map(|r| {
            json!({
                "policy": r.policy,
                "slo_minute_attainment": r.slo_minute_attainment,
                "request_attainment": r.request_attainment,
                "gpu_hours": r.gpu_hours,
                "goodput_tokens_per_s_per_gpu": r.goodput_tokens_per_s_per_gpu,
                "scale_events": r.scale_events,
                "direction_changes": r.direction_changes,
                "peak_replicas": r.peak_replicas,
                "requests": r.requests,
                "rejected_requests": r.rejected,
                "preemptions": r.preemptions,
            })
            .to_string()
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// A header with the setting and one row per policy.
pub fn table(c: &Comparison, results: &[PolicyResult]) -> String {
    let cfg = &c.config;
    let mut out = format!(
        "trace {} ({:.1} h, peak {:.0} req/s), profile {}, SLO p95 TTFT {} ms / TPOT {} ms, seed {}\n\
         true capacity per replica within the SLO: {:.0} output tokens/s ({:.2} req/s); cold start {:.0} s\n\n",
        c.trace.name,
        c.trace.duration_s / 3600.0,
        c.trace.peak_rps(),
        cfg.profile.name,
        (cfg.slo.ttft_p95_s * 1000.0).round(),
        (cfg.slo.tpot_p95_s * 1000.0).round(),
        cfg.seed,
        c.knee.tokens_per_s,
        c.knee.requests_per_s,
        cfg.profile.cold_start_s,
    );
    out.push_str(&format!(
        "{:<12} {:>10} {:>10} {:>10} {:>14} {:>8} {:>8} {:>6}\n",
        "policy", "SLO min %", "SLO req %", "GPU-hours", "goodput/GPU", "scales", "flips", "peak"
    ));
    for r in results {
        out.push_str(&format!(
            "{:<12} {:>10.2} {:>10.2} {:>10.1} {:>14.0} {:>8} {:>8} {:>6}\n",
            r.policy,
            r.slo_minute_attainment * 100.0,
            r.request_attainment * 100.0,
            r.gpu_hours,
            r.goodput_tokens_per_s_per_gpu,
            r.scale_events,
            r.direction_changes,
            r.peak_replicas
        ));
    }
    out
}
