//! A load generator for an OpenAI-compatible server: `concurrency` clients each send streaming
//! completions (fixed prompt and output lengths, EOS ignored) back to back, and the run reports
//! output tokens/s, requests/s, and p50/p95 of time to first token and time per output token.
//! `tokenscale-engine`'s example `loadgen` drives it; `tokenscale bench` can reuse it.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde_json::json;

/// One load level.
#[derive(Debug, Clone)]
pub struct LoadSpec {
    pub addr: SocketAddr,
    /// Served model name; empty leaves `model` out of the requests.
    pub model: String,
    /// Clients sending at once.
    pub concurrency: usize,
    /// Requests in all.
    pub num_requests: usize,
    /// Prompt length in tokens (token-id prompts, distinct per request: no prefix sharing).
    pub prompt_tokens: usize,
    /// Output tokens per request (`max_tokens` with `ignore_eos`).
    pub output_tokens: usize,
}

/// What one request measured.
#[derive(Debug, Clone, Copy)]
struct Sample {
    ttft_s: f64,
    /// Mean time per output token after the first, in seconds.
    tpot_s: Option<f64>,
    output_tokens: u64,
}

/// The figures of one load level.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct LoadReport {
    pub concurrency: usize,
    pub requests: usize,
    pub failed: usize,
    pub wall_s: f64,
    pub output_tokens_per_s: f64,
    pub requests_per_s: f64,
    pub ttft_p50_s: f64,
    pub ttft_p95_s: f64,
    pub tpot_p50_s: f64,
    pub tpot_p95_s: f64,
}

/// Runs one load level to completion.
pub async fn run(spec: &LoadSpec) -> LoadReport {
    let next = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let mut workers = Vec::with_capacity(spec.concurrency);
    for _ in 0..spec.concurrency.max(1) {
        let (spec, next) = (spec.clone(), next.clone());
        workers.push(tokio::spawn(async move {
            let mut samples = Vec::new();
            let mut failed = 0usize;
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= spec.num_requests {
                    break;
                }
                match one_request(&spec, i).await {
                    Ok(sample) => samples.push(sample),
                    Err(err) => {
                        tracing::warn!("request {i} failed: {err}");
                        failed += 1;
                    }
                }
            }
            (samples, failed)
        }));
    }
    let mut samples = Vec::new();
    let mut failed = 0;
    for worker in workers {
        if let Ok((s, f)) = worker.await {
            samples.extend(s);
            failed += f;
        }
    }
    summarise(spec.concurrency, samples, failed, started.elapsed())
}

fn summarise(
    concurrency: usize,
    samples: Vec<Sample>,
    failed: usize,
    wall: Duration,
) -> LoadReport {
    let wall_s = wall.as_secs_f64().max(1e-9);
    let tokens: u64 = samples.iter().map(|s| s.output_tokens).sum();
    let mut ttft: Vec<f64> = samples.iter().map(|s| s.ttft_s).collect();
    let mut tpot: Vec<f64> = samples.iter().filter_map(|s| s.tpot_s).collect();
    LoadReport {
        concurrency,
        requests: samples.len(),
        failed,
        wall_s,
        output_tokens_per_s: tokens as f64 / wall_s,
        requests_per_s: samples.len() as f64 / wall_s,
        ttft_p50_s: percentile(&mut ttft, 0.50),
        ttft_p95_s: percentile(&mut ttft, 0.95),
        tpot_p50_s: percentile(&mut tpot, 0.50),
        tpot_p95_s: percentile(&mut tpot, 0.95),
    }
}

/// Nearest-rank percentile (`q` in 0–1); NaN for no samples.
pub fn percentile(values: &mut [f64], q: f64) -> f64 {
    if values.is_empty() {
        return f64::NAN;
    }
    values.sort_by(f64::total_cmp);
    let rank = ((q * values.len() as f64).ceil() as usize).clamp(1, values.len());
    values[rank - 1]
}

/// A prompt of `len` ordinary token ids, different for every request from its first token on.
pub fn prompt_ids(request: usize, len: usize) -> Vec<u32> {
    (0..len)
        .map(|j| 1000 + ((request * 7919 + j * 104_729 + j * j * 31) % 30_000) as u32)
        .collect()
}

async fn one_request(spec: &LoadSpec, index: usize) -> Result<Sample, String> {
    let mut body = json!({
        "model": spec.model,
        "prompt": prompt_ids(index, spec.prompt_tokens),
        "max_tokens": spec.output_tokens,
        "ignore_eos": true,
        "temperature": 0,
        "stream": true,
        "stream_options": {"include_usage": true},
    });
    if spec.model.is_empty() {
        // Unknown served name: let the server use its only model.
        body.as_object_mut().map(|o| o.remove("model"));
    }
    let request = hyper::Request::post(format!("http://{}/v1/completions", spec.addr))
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body.to_string())))
        .map_err(|e| e.to_string())?;
    let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let sent = Instant::now();
    let response = client.request(request).await.map_err(|e| e.to_string())?;
    if response.status() != 200 {
        return Err(format!("status {}", response.status()));
    }
    let mut body = response.into_body();
    let (mut first, mut last, mut pending, mut output_tokens) = (None, None, String::new(), 0u64);
    while let Some(frame) = body.frame().await {
        let Ok(data) = frame.map_err(|e| e.to_string())?.into_data() else {
            continue;
        };
        pending.push_str(&String::from_utf8_lossy(&data));
        while let Some(end) = pending.find("\n\n") {
            let event: String = pending.drain(..end + 2).collect();
            let Some(payload) = event.trim().strip_prefix("data: ") else {
                continue;
            };
            if payload == "[DONE]" {
                continue;
            }
            let value: serde_json::Value =
                serde_json::from_str(payload).map_err(|e| e.to_string())?;
            if let Some(n) = value["usage"]["completion_tokens"].as_u64() {
                output_tokens = n;
            }
            if value["choices"][0]["text"]
                .as_str()
                .is_some_and(|t| !t.is_empty())
            {
                let now = Instant::now();
                first.get_or_insert(now);
                last = Some(now);
            }
        }
    }
    let first = first.ok_or("no token arrived")?;
    let last = last.unwrap_or(first);
    let tpot_s =
        (output_tokens > 1).then(|| (last - first).as_secs_f64() / (output_tokens - 1) as f64);
    Ok(Sample {
        ttft_s: (first - sent).as_secs_f64(),
        tpot_s,
        output_tokens,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_use_the_nearest_rank() {
        let mut v = vec![5.0, 1.0, 4.0, 2.0, 3.0];
        assert_eq!(percentile(&mut v, 0.5), 3.0);
        assert_eq!(percentile(&mut v, 0.95), 5.0);
        assert!(percentile(&mut [], 0.5).is_nan());
    }

    #[test]
    fn prompts_differ_from_their_first_token() {
        assert_ne!(prompt_ids(0, 4)[0], prompt_ids(1, 4)[0]);
        assert_eq!(prompt_ids(3, 128).len(), 128);
        assert!(
            prompt_ids(3, 128)
                .iter()
                .all(|&t| (1000..31_000).contains(&t))
        );
    }
}
