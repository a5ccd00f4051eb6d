//! `tokenscale bench --calibrate`: fits the shared performance model (step time = t0 +
//! a·prefill tokens + b·decode sequences + c·KV tokens read) to a server from what a client
//! sees, and writes it as a profile that `tokenscale sim` and the engine's `sim` backend read.
//!
//! Client-side timings work against any OpenAI-compatible server. The measurements:
//! - closed-loop points with short prompts (L tokens) and output length N, one of them at
//!   concurrency 1: per-request time per output token (p50) against concurrency k is a line
//!   `t0 + k·(b + c·ctx)`: every step decodes k sequences that hold `ctx = L + N/2` tokens on
//!   average. Other requests' prefills land in some of those steps; with short prompts they
//!   are a small share, counted as decode work (an overestimate of b, on the safe side);
//! - one more request series at concurrency 1 with a prompt four times longer: the growth of
//!   time to first token per prompt token is `a`, the growth of time per output token per
//!   context token is `c`.
//!
//! The fit is pure; the measuring is the bench's own load driver.

use std::fmt::Write as _;

use tokenscale_common::perf_model::{KvBudget, PerfProfile, StepCost};

/// What one load point measured, as the fit needs it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Measured {
    /// Clients sending back to back.
    pub concurrency: u32,
    /// Prompt tokens per request (the server's count where it reported one).
    pub input_tokens: f64,
    /// Output tokens per request.
    pub output_tokens: f64,
    /// Median time to first token, seconds.
    pub ttft_p50_s: f64,
    /// Median time per output token after the first, seconds.
    pub tpot_p50_s: f64,
}

/// A fit and how well it reproduces each measurement.
#[derive(Debug, Clone, PartialEq)]
pub struct Fit {
    pub step: StepCost,
    /// `(measured, model's TTFT, model's TPOT)` per point; the model's TTFT is the prefill
    /// step alone (the rest is the server's and the network's fixed overhead).
    pub rows: Vec<(Measured, f64, f64)>,
    /// Parameters the noise pushed below zero and that were set to zero.
    pub clamped: Vec<&'static str>,
}

/// Why the measurements cannot be fitted.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum FitError {
    #[error("calibration needs a point at concurrency 1 and at least one above it")]
    TooFewPoints,
    #[error(
        "the long-prompt point must have a longer prompt than the others ({long} vs {short} tokens)"
    )]
    PromptNotLonger { short: f64, long: f64 },
    #[error("a point has no time per output token (outputs of one token?)")]
    NoTpot,
}

/// Fits the step cost to closed-loop points at one prompt length (`loaded`, one at
/// concurrency 1) and a concurrency-1 point with a longer prompt (`long`).
pub fn fit(loaded: &[Measured], long: &Measured) -> Result<Fit, FitError> {
    let single = loaded
        .iter()
        .find(|m| m.concurrency == 1)
        .ok_or(FitError::TooFewPoints)?;
    if !loaded.iter().any(|m| m.concurrency > 1) {
        return Err(FitError::TooFewPoints);
    }
    if loaded
        .iter()
        .chain([long])
        .any(|m| !(m.tpot_p50_s.is_finite() && m.tpot_p50_s > 0.0))
    {
        return Err(FitError::NoTpot);
    }
    let extra_prompt = long.input_tokens - single.input_tokens;
    if extra_prompt.is_nan() || extra_prompt <= 0.0 {
        return Err(FitError::PromptNotLonger {
            short: single.input_tokens,
            long: long.input_tokens,
        });
    }
    let mut clamped = Vec::new();
    let mut non_negative = |name: &'static str, value: f64| {
        if value < 0.0 {
            clamped.push(name);
            0.0
        } else {
            value
        }
    };
    let prefill = non_negative(
        "prefill_s_per_token",
        (long.ttft_p50_s - single.ttft_p50_s) / extra_prompt,
    );
    let kv_read = non_negative(
        "kv_read_s_per_token",
        (long.tpot_p50_s - single.tpot_p50_s) / extra_prompt,
    );
    let (intercept, slope) = least_squares(
        &loaded
            .iter()
            .map(|m| (f64::from(m.concurrency), m.tpot_p50_s))
            .collect::<Vec<_>>(),
    );
    let context = single.input_tokens + single.output_tokens.max(1.0) / 2.0;
    let t0 = non_negative("t0_s", intercept);
    let decode = non_negative("decode_s_per_seq", slope - kv_read * context);
    let step = StepCost {
        t0_s: t0,
        prefill_s_per_token: prefill,
        decode_s_per_seq: decode,
        kv_read_s_per_token: kv_read,
    };
    let rows = loaded
        .iter()
        .chain([long])
        .map(|m| (*m, model_ttft(&step, m), model_tpot(&step, m)))
        .collect();
    Ok(Fit {
        step,
        rows,
        clamped,
    })
}

/// The model's time to first token of a point: its prefill step.
fn model_ttft(step: &StepCost, m: &Measured) -> f64 {
    step.t0_s + step.prefill_s_per_token * m.input_tokens
}

/// The model's time per output token of a closed-loop point (see the module docs).
fn model_tpot(step: &StepCost, m: &Measured) -> f64 {
    let k = f64::from(m.concurrency);
    let context = m.input_tokens + m.output_tokens.max(1.0) / 2.0;
    step.t0_s + k * (step.decode_s_per_seq + step.kv_read_s_per_token * context)
}

/// Ordinary least squares `y = intercept + slope·x`.
fn least_squares(points: &[(f64, f64)]) -> (f64, f64) {
    let n = points.len() as f64;
    let mean_x = points.iter().map(|p| p.0).sum::<f64>() / n;
    let mean_y = points.iter().map(|p| p.1).sum::<f64>() / n;
    let sxx: f64 = points.iter().map(|p| (p.0 - mean_x).powi(2)).sum();
    let sxy: f64 = points.iter().map(|p| (p.0 - mean_x) * (p.1 - mean_y)).sum();
    let slope = if sxx > 0.0 { sxy / sxx } else { 0.0 };
    (mean_y - slope * mean_x, slope)
}

/// What the profile needs beyond the fit.
#[derive(Debug, Clone)]
pub struct ProfileFacts {
    pub name: String,
    pub description: String,
    pub source: String,
    pub gpus_per_replica: u32,
    pub kv: KvBudget,
    pub max_num_seqs: u32,
    pub max_batch_tokens: u32,
    pub cold_start_s: f64,
}

/// The profile the fit and the facts make.
pub fn profile(fit: &Fit, facts: &ProfileFacts) -> PerfProfile {
    PerfProfile {
        name: facts.name.clone(),
        description: facts.description.clone(),
        source: facts.source.clone(),
        gpus_per_replica: facts.gpus_per_replica,
        step: fit.step,
        kv: facts.kv,
        max_num_seqs: facts.max_num_seqs,
        max_batch_tokens: facts.max_batch_tokens,
        cold_start_s: facts.cold_start_s,
    }
}

/// The profile as YAML, with the fit's table as a comment so a reader sees how well it holds.
pub fn to_yaml(profile: &PerfProfile, fit: &Fit) -> String {
    // JSON strings are valid YAML scalars: quoting done right for any text.
    let quote = |s: &str| serde_json::to_string(s).unwrap_or_else(|_| "\"\"".into());
    let mut out = String::new();
    let _ = writeln!(
        out,
        "# Written by `tokenscale bench --calibrate`: step time = t0 + a·prefill tokens +\n\
         # b·decode sequences + c·KV tokens read, fitted to client-side p50 timings.\n#\n{}",
        table(fit)
            .lines()
            .map(|l| format!("# {l}"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    let s = &profile.step;
    let _ = write!(
        out,
        "name: {}\ndescription: {}\nsource: {}\ngpus_per_replica: {}\nstep:\n  t0_s: {:e}\n  \
         prefill_s_per_token: {:e}\n  decode_s_per_seq: {:e}\n  kv_read_s_per_token: {:e}\n\
         kv:\n  block_tokens: {}\n  blocks: {}\nmax_num_seqs: {}\nmax_batch_tokens: {}\n\
         cold_start_s: {}\n",
        quote(&profile.name),
        quote(&profile.description),
        quote(&profile.source),
        profile.gpus_per_replica,
        s.t0_s,
        s.prefill_s_per_token,
        s.decode_s_per_seq,
        s.kv_read_s_per_token,
        profile.kv.block_tokens,
        profile.kv.blocks,
        profile.max_num_seqs,
        profile.max_batch_tokens,
        profile.cold_start_s,
    );
    out
}

/// The fit in words: parameters, then measured against modelled per point.
pub fn table(fit: &Fit) -> String {
    let s = &fit.step;
    let mut out = format!(
        "fit: t0 {:.3} ms, prefill {:.4} ms/token, decode {:.4} ms/sequence, KV read {:.6} ms/token\n",
        s.t0_s * 1e3,
        s.prefill_s_per_token * 1e3,
        s.decode_s_per_seq * 1e3,
        s.kv_read_s_per_token * 1e3
    );
    if !fit.clamped.is_empty() {
        let _ = writeln!(
            out,
            "set to 0 (measured slightly negative, within noise): {}",
            fit.clamped.join(", ")
        );
    }
    let _ = writeln!(
        out,
        "{:>5} {:>7} {:>7} {:>22} {:>22}",
        "conc", "input", "output", "TTFT p50 meas/model ms", "TPOT p50 meas/model ms"
    );
    for (m, ttft, tpot) in &fit.rows {
        let _ = writeln!(
            out,
            "{:>5} {:>7.0} {:>7.0} {:>10.2} / {:>9.2} {:>10.3} / {:>9.3}",
            m.concurrency,
            m.input_tokens,
            m.output_tokens,
            m.ttft_p50_s * 1e3,
            ttft * 1e3,
            m.tpot_p50_s * 1e3,
            tpot * 1e3
        );
    }
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    const TRUE: StepCost = StepCost {
        t0_s: 0.0065,
        prefill_s_per_token: 0.0000295,
        decode_s_per_seq: 0.00002,
        kv_read_s_per_token: 0.000000051,
    };

    fn point(concurrency: u32, input_tokens: f64) -> Measured {
        let m = Measured {
            concurrency,
            input_tokens,
            output_tokens: 128.0,
            ttft_p50_s: 0.0,
            tpot_p50_s: 0.0,
        };
        Measured {
            ttft_p50_s: model_ttft(&TRUE, &m) + 0.002,
            tpot_p50_s: model_tpot(&TRUE, &m),
            ..m
        }
    }

    #[test]
    fn exact_measurements_give_back_the_model() {
        let loaded: Vec<Measured> = [1, 4, 16, 64].iter().map(|&k| point(k, 128.0)).collect();
        let fit = fit(&loaded, &point(1, 512.0)).unwrap();
        let close = |a: f64, b: f64| (a - b).abs() <= 1e-9 + 1e-6 * b.abs();
        assert!(close(fit.step.t0_s, TRUE.t0_s), "{:?}", fit.step);
        assert!(
            close(fit.step.prefill_s_per_token, TRUE.prefill_s_per_token),
            "{:?}",
            fit.step
        );
        assert!(
            close(fit.step.decode_s_per_seq, TRUE.decode_s_per_seq),
            "{:?}",
            fit.step
        );
        assert!(
            close(fit.step.kv_read_s_per_token, TRUE.kv_read_s_per_token),
            "{:?}",
            fit.step
        );
        assert!(fit.clamped.is_empty());
        assert_eq!(fit.rows.len(), 5);
    }

    #[test]
    fn noise_below_zero_is_clamped_and_said() {
        let loaded = vec![point(1, 128.0), point(8, 128.0)];
        let mut long = point(1, 512.0);
        long.tpot_p50_s = loaded[0].tpot_p50_s * 0.99;
        let fit = fit(&loaded, &long).unwrap();
        assert_eq!(fit.step.kv_read_s_per_token, 0.0);
        assert_eq!(fit.clamped, vec!["kv_read_s_per_token"]);
        assert!(table(&fit).contains("set to 0"));
    }

    #[test]
    fn missing_points_are_named() {
        assert_eq!(
            fit(&[point(1, 128.0)], &point(1, 512.0)),
            Err(FitError::TooFewPoints)
        );
        assert_eq!(
            fit(&[point(4, 128.0), point(8, 128.0)], &point(1, 512.0)),
            Err(FitError::TooFewPoints)
        );
        assert!(matches!(
            fit(&[point(1, 128.0), point(8, 128.0)], &point(1, 64.0)),
            Err(FitError::PromptNotLonger { .. })
        ));
    }

    #[test]
    fn the_written_profile_reads_back_as_written() {
        let loaded = vec![point(1, 128.0), point(16, 128.0)];
        let fit = fit(&loaded, &point(1, 512.0)).unwrap();
        let facts = ProfileFacts {
            name: "test-gpu".into(),
            description: "a \"quoted\" model: on one GPU".into(),
            source: "unit test".into(),
            gpus_per_replica: 1,
            kv: KvBudget {
                block_tokens: 16,
                blocks: 1000,
            },
            max_num_seqs: 64,
            max_batch_tokens: 2048,
            cold_start_s: 30.0,
        };
        let written = profile(&fit, &facts);
        let read = PerfProfile::from_yaml(&to_yaml(&written, &fit)).unwrap();
        assert_eq!(read, written);
    }
}
