//! The comparison as a table for people and as JSON lines for programs.

use serde_json::json;

use super::BatchEffect;
use super::Comparison;
use super::batch::BatchOutcome;
use super::run::PolicyResult;

/// One JSON object per policy, a line each; with batch jobs, what became of them.
pub fn json(results: &[PolicyResult], effects: &[BatchEffect]) -> String {
    results
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let mut object = json!({
                "policy": r.policy,
                "slo_minute_attainment": r.slo_minute_attainment,
                "missed_minutes": r.missed_minutes,
                "request_attainment": r.request_attainment,
                "gpu_hours": r.gpu_hours,
                "goodput_tokens_per_s_per_gpu": r.goodput_tokens_per_s_per_gpu,
                "scale_events": r.scale_events,
                "direction_changes": r.direction_changes,
                "peak_replicas": r.peak_replicas,
                "requests": r.requests,
                "rejected_requests": r.rejected,
                "preemptions": r.preemptions,
            });
            if let Some(lead_time_s) = r.lead_time_s {
                object["lead_time_s"] = json!(lead_time_s);
            }
            if let Some(effect) = effects.get(i) {
                object["batches"] = r
                    .batches
                    .iter()
                    .zip(&effect.extra_gpu_hours)
                    .map(|(b, extra)| {
                        json!({
                            "at_s": b.job.at_s,
                            "output_tokens": b.job.output_tokens,
                            "window_s": b.job.window_s,
                            "finished_at_s": b.finished_at_s,
                            "left_tokens": b.left_tokens,
                            "deadline_met": b.deadline_met(),
                            "extra_gpu_hours": extra,
                        })
                    })
                    .collect();
                object["without_batches"] = json!({
                    "slo_minute_attainment": effect.without.slo_minute_attainment,
                    "request_attainment": effect.without.request_attainment,
                    "gpu_hours": effect.without.gpu_hours,
                });
            }
            object.to_string()
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// A header with the setting and one row per policy.
pub fn table(c: &Comparison, results: &[PolicyResult]) -> String {
    let cfg = &c.config;
    let mut out = format!(
        "trace {} ({:.1} h, peak {:.0} req/s), profile {}, SLO p95 TTFT {} ms / TPOT {} ms, seed {}\n\
         true capacity per replica within the SLO: {:.0} output tokens/s ({:.2} req/s)\n\
         replica start: median {:.0} s, p95 {:.1}x the median, after {:.0} s waiting for a GPU (tokenscale measures it); \
         tokenscale: period {:.0} s, target utilisation {:.2}, {}\n\n",
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
        cfg.start_tail,
        cfg.gpu_wait_s,
        cfg.period_s,
        cfg.target_utilization,
        match cfg.hint_factor {
            Some(h) => format!("capacity hint {h:.2}x the true capacity"),
            None => "no capacity hint (learned)".to_string(),
        },
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

/// Batch jobs, one row per policy and job: when it finished, whether by its deadline, the
/// GPU-hours it added, and the interactive SLO attainment with the jobs and (in brackets)
/// without them. Empty without batch jobs.
pub fn batch_table(effects: &[BatchEffect]) -> String {
    if effects.is_empty() {
        return String::new();
    }
    let mut out = String::from(
        "\nbatch jobs (served on the capacity interactive traffic leaves; extra GPU-hours against the same run without the job)\n",
    );
    out.push_str(&format!(
        "{:<12} {:>4} {:>7} {:>9} {:>8} {:>10} {:>9} {:>11} {:>19} {:>19}\n",
        "policy",
        "job",
        "at h",
        "tokens",
        "window h",
        "finished h",
        "deadline",
        "extra GPU-h",
        "SLO min % (w/o)",
        "SLO req % (w/o)"
    ));
    for effect in effects {
        let (with, without) = (&effect.with, &effect.without);
        for (i, (b, extra)) in with.batches.iter().zip(&effect.extra_gpu_hours).enumerate() {
            out.push_str(&format!(
                "{:<12} {:>4} {:>7.2} {:>9} {:>8.2} {:>10} {:>9} {:>11.1} {:>19} {:>19}\n",
                with.policy,
                i + 1,
                b.job.at_s / 3600.0,
                tokens(b.job.output_tokens),
                b.job.window_s / 3600.0,
                b.finished_at_s
                    .map_or_else(|| "-".to_string(), |t| format!("{:.2}", t / 3600.0)),
                deadline(b),
                extra,
                format!(
                    "{:.2} ({:.2})",
                    with.slo_minute_attainment * 100.0,
                    without.slo_minute_attainment * 100.0
                ),
                format!(
                    "{:.2} ({:.2})",
                    with.request_attainment * 100.0,
                    without.request_attainment * 100.0
                ),
            ));
        }
    }
    out
}

/// `50.0M`-style token counts.
fn tokens(n: f64) -> String {
    match n {
        n if n >= 1e9 => format!("{:.1}G", n / 1e9),
        n if n >= 1e6 => format!("{:.1}M", n / 1e6),
        n if n >= 1e3 => format!("{:.1}K", n / 1e3),
        n => format!("{n:.0}"),
    }
}

fn deadline(b: &BatchOutcome) -> &'static str {
    match b.deadline_met() {
        Some(true) => "met",
        Some(false) => "MISSED",
        None => "open",
    }
}
