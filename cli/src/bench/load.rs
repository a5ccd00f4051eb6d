//! The load drivers: closed loop (N clients back to back) and open loop (Poisson arrivals),
//! each until a request count or a duration; every finished request ticks the progress bar.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use indicatif::ProgressBar;

use super::client::{HttpClient, RequestShape, send};
use super::report::Outcome;
use super::stats::Sample;

/// When a load point ends.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Stop {
    /// After this many requests were sent (all of them awaited).
    Requests(u64),
    /// No request is sent after this long (those in flight are awaited).
    Duration(Duration),
}

/// What every request of a point shares.
#[derive(Debug, Clone)]
pub struct Ctx {
    pub client: HttpClient,
    pub shape: Arc<RequestShape>,
    pub bar: ProgressBar,
}

impl Ctx {
    /// Sends request number `i`: its prompt starts with the run's tag and `i` so no two
    /// share a cached prefix.
    async fn one(&self, i: u64) -> Result<Sample, String> {
        let mut shape = (*self.shape).clone();
        shape.prompt = format!("{}{i} {}", self.shape.run_tag, self.shape.prompt);
        let result = send(&self.client, &shape, shape.body()).await;
        self.bar.inc(1);
        result
    }
}

fn merge(outcome: &mut Outcome, result: Result<Sample, String>) {
    match result {
        Ok(sample) => outcome.samples.push(sample),
        Err(kind) => *outcome.errors.entry(kind).or_insert(0) += 1,
    }
}

/// `concurrency` clients, each sending its next request when the last one ends.
pub async fn closed_loop(ctx: &Ctx, concurrency: u32, stop: Stop) -> Outcome {
    let start = Instant::now();
    let issued = Arc::new(AtomicU64::new(0));
    let mut workers = Vec::new();
    for _ in 0..concurrency.max(1) {
        let (ctx, issued) = (ctx.clone(), issued.clone());
        workers.push(tokio::spawn(async move {
            let mut outcome = Outcome::default();
            loop {
                let i = issued.fetch_add(1, Ordering::Relaxed);
                let more = match stop {
                    Stop::Requests(n) => i < n,
                    Stop::Duration(d) => start.elapsed() < d,
                };
                if !more {
                    break;
                }
                merge(&mut outcome, ctx.one(i).await);
            }
            outcome
        }));
    }
    let mut all = Outcome::default();
    for worker in workers {
        match worker.await {
            Ok(outcome) => {
                all.samples.extend(outcome.samples);
                for (kind, n) in outcome.errors {
                    *all.errors.entry(kind).or_insert(0) += n;
                }
            }
            Err(_) => *all.errors.entry("client_task".into()).or_insert(0) += 1,
        }
    }
    all.elapsed_s = start.elapsed().as_secs_f64();
    all
}

/// Requests arriving as a Poisson process of `rate_per_s`, whatever the server's speed.
pub async fn open_loop(ctx: &Ctx, rate_per_s: f64, stop: Stop, seed: u64) -> Outcome {
    let start = Instant::now();
    let mut arrivals = Arrivals::new(rate_per_s, seed);
    let mut tasks = Vec::new();
    for i in 0.. {
        let at_s = arrivals.next_s();
        let more = match stop {
            Stop::Requests(n) => i < n,
            Stop::Duration(d) => at_s < d.as_secs_f64(),
        };
        if !more {
            break;
        }
        tokio::time::sleep_until((start + Duration::from_secs_f64(at_s)).into()).await;
        let ctx = ctx.clone();
        tasks.push(tokio::spawn(async move { ctx.one(i).await }));
    }
    let mut outcome = Outcome {
        samples: Vec::new(),
        errors: BTreeMap::new(),
        elapsed_s: 0.0,
    };
    for task in tasks {
        merge(
            &mut outcome,
            task.await.unwrap_or_else(|_| Err("client_task".into())),
        );
    }
    outcome.elapsed_s = start.elapsed().as_secs_f64();
    outcome
}

/// Poisson arrival times: exponential gaps of mean `1 / rate`, from a seeded SplitMix64.
#[derive(Debug, Clone)]
pub struct Arrivals {
    rate_per_s: f64,
    state: u64,
    t_s: f64,
}

impl Arrivals {
    /// Arrivals at `rate_per_s` (must be > 0) for `seed`.
    pub fn new(rate_per_s: f64, seed: u64) -> Self {
        Self {
            rate_per_s,
            state: seed ^ 0x9E37_79B9_7F4A_7C15,
            t_s: 0.0,
        }
    }

    /// Seconds from the start to the next arrival.
    pub fn next_s(&mut self) -> f64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        // Uniform in (0, 1]: never ln(0).
        let u = ((z >> 11) as f64 + 1.0) / (1u64 << 53) as f64;
        self.t_s += -u.ln() / self.rate_per_s;
        self.t_s
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn poisson_arrivals_have_the_asked_rate_and_repeat_for_a_seed() {
        let mut a = Arrivals::new(50.0, 7);
        let times: Vec<f64> = (0..20_000).map(|_| a.next_s()).collect();
        let rate = times.len() as f64 / times[times.len() - 1];
        assert!((rate - 50.0).abs() < 2.0, "{rate}");
        assert!(times.windows(2).all(|w| w[1] > w[0]));
        let mut b = Arrivals::new(50.0, 7);
        assert_eq!(b.next_s(), times[0]);
    }
}
