//! The limiter: one set of buckets per (tenant, model); reserve on arrival, settle on completion.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::bucket::TokenBucket;
use super::headers::{BucketHeader, RateLimitHeaders};
use crate::auth::Tenant;
use crate::config::LimitsConfig;
use crate::request::Usage;

/// Which limit refused a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LimitKind {
    /// Requests per minute.
    Requests,
    /// Input tokens per minute.
    InputTokens,
    /// Output tokens per minute.
    OutputTokens,
}

impl LimitKind {
    /// Label value on the rate-limited counter.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Requests => "requests",
            Self::InputTokens => "input_tokens",
            Self::OutputTokens => "output_tokens",
        }
    }
}

/// A request refused by a limit.
#[derive(Debug, Clone)]
pub struct Refusal {
    /// The limit that is furthest from allowing the request.
    pub limit: LimitKind,
    /// When it would pass (if nothing else is taken meanwhile).
    pub retry_after: Duration,
    /// Whether it can never pass (asks for more than the bucket holds).
    pub too_large: bool,
    /// Header values describing the buckets.
    pub headers: RateLimitHeaders,
}

/// What a request took, to settle against when it ends.
#[derive(Debug, Clone)]
pub struct Reservation {
    buckets: Arc<Mutex<Buckets>>,
    input_tokens: u64,
    output_tokens: u64,
}

/// How a request ended, for settlement.
#[derive(Debug, Clone, Copy)]
pub enum Settle {
    /// The engine reported usage: charge uncached prompt tokens and actual completion tokens.
    Usage(Usage),
    /// The request failed before the engine did work: give the tokens back.
    Failed,
    /// It ended without usage (client left mid-stream): keep what was reserved.
    Unknown,
}

#[derive(Debug)]
struct Buckets {
    config: LimitsConfig,
    requests: Option<TokenBucket>,
    input: Option<TokenBucket>,
    output: Option<TokenBucket>,
}

/// All buckets of all tenants: tenant → model → buckets. Looked up by `&str` (a request
/// allocates no key), each (tenant, model) locked on its own.
#[derive(Debug, Default)]
pub struct Limiter {
    buckets: Mutex<HashMap<String, ModelBuckets>>,
}

/// One tenant's buckets by model.
type ModelBuckets = HashMap<String, Arc<Mutex<Buckets>>>;

impl Buckets {
    fn new(config: LimitsConfig, now: Instant) -> Self {
        let bucket = |limit: Option<u64>| limit.map(|l| TokenBucket::per_minute(l, now));
        Self {
            config,
            requests: bucket(config.requests_per_minute),
            input: bucket(config.input_tokens_per_minute),
            output: bucket(config.output_tokens_per_minute),
        }
    }

    /// Follows a reloaded config, keeping levels.
    fn reconfigure(&mut self, config: LimitsConfig, now: Instant) {
        if self.config == config {
            return;
        }
        let fresh = Self::new(config, now);
        let keep = |old: &mut Option<TokenBucket>, new: Option<TokenBucket>, limit: Option<u64>| {
            *old = match (old.take(), new, limit) {
                (Some(mut bucket), _, Some(limit)) => {
                    bucket.set_limit(limit);
                    Some(bucket)
                }
                (_, new, _) => new,
            };
        };
        keep(
            &mut self.requests,
            fresh.requests,
            config.requests_per_minute,
        );
        keep(&mut self.input, fresh.input, config.input_tokens_per_minute);
        keep(
            &mut self.output,
            fresh.output,
            config.output_tokens_per_minute,
        );
        self.config = config;
    }

    fn headers(&self) -> RateLimitHeaders {
        let describe = |b: &Option<TokenBucket>| {
            b.as_ref().map(|b| BucketHeader {
                limit: b.limit(),
                remaining: b.remaining(),
                reset: b.time_to_full(),
            })
        };
        RateLimitHeaders {
            requests: describe(&self.requests),
            input_tokens: describe(&self.input),
            output_tokens: describe(&self.output),
        }
    }
}

impl Limiter {
    /// Reserves one request, `input_tokens` and `output_tokens` for `tenant` on `model`,
    /// all or nothing. `Ok(None)` when the tenant has no limits.
    pub fn reserve(
        &self,
        tenant: &Tenant,
        model: &str,
        input_tokens: u64,
        output_tokens: u64,
        now: Instant,
    ) -> Result<Option<(Reservation, RateLimitHeaders)>, Refusal> {
        let Some(config) = tenant.limits else {
            return Ok(None);
        };
        let shared = self.buckets_of(&tenant.name, model, config, now);
        let mut guard = shared.lock().unwrap_or_else(|p| p.into_inner());
        let buckets = &mut *guard;
        buckets.reconfigure(config, now);
        let wants = [
            (LimitKind::Requests, &mut buckets.requests, 1.0),
            (
                LimitKind::InputTokens,
                &mut buckets.input,
                input_tokens as f64,
            ),
            (
                LimitKind::OutputTokens,
                &mut buckets.output,
                output_tokens as f64,
            ),
        ];
        let mut worst: Option<(LimitKind, Duration, bool)> = None;
        for (kind, bucket, amount) in wants {
            let Some(bucket) = bucket else { continue };
            bucket.refill(now);
            let wait = bucket.wait_for(amount);
            let too_large = !bucket.can_ever_hold(amount);
            let worse = worst
                .is_none_or(|(_, w, big)| (too_large && !big) || (too_large == big && wait > w));
            if (wait > Duration::ZERO || too_large) && worse {
                worst = Some((kind, wait, too_large));
            }
        }
        if let Some((limit, retry_after, too_large)) = worst {
            return Err(Refusal {
                limit,
                retry_after,
                too_large,
                headers: buckets.headers(),
            });
        }
        for (bucket, amount) in [
            (&mut buckets.requests, 1.0),
            (&mut buckets.input, input_tokens as f64),
            (&mut buckets.output, output_tokens as f64),
        ] {
            if let Some(bucket) = bucket {
                bucket.take(amount);
            }
        }
        let headers = buckets.headers();
        drop(guard);
        Ok(Some((
            Reservation {
                buckets: shared,
                input_tokens,
                output_tokens,
            },
            headers,
        )))
    }

    /// The buckets of (`tenant`, `model`), created full on first use.
    fn buckets_of(
        &self,
        tenant: &str,
        model: &str,
        config: LimitsConfig,
        now: Instant,
    ) -> Arc<Mutex<Buckets>> {
        let mut all = self.buckets.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(found) = all.get(tenant).and_then(|models| models.get(model)) {
            return found.clone();
        }
        let created = Arc::new(Mutex::new(Buckets::new(config, now)));
        all.entry(tenant.to_string())
            .or_default()
            .insert(model.to_string(), created.clone());
        created
    }

    /// Corrects a reservation with how the request ended. Prompt tokens served from the
    /// prefix cache are not charged.
    pub fn settle(&self, reservation: &Reservation, how: Settle, now: Instant) {
        let (input_delta, output_delta) = match how {
            Settle::Usage(usage) => (
                usage.prompt_tokens.saturating_sub(usage.cached_tokens) as f64
                    - reservation.input_tokens as f64,
                usage.completion_tokens as f64 - reservation.output_tokens as f64,
            ),
            Settle::Failed => (
                -(reservation.input_tokens as f64),
                -(reservation.output_tokens as f64),
            ),
            Settle::Unknown => return,
        };
        let mut guard = reservation
            .buckets
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let buckets = &mut *guard;
        for (bucket, delta) in [
            (&mut buckets.input, input_delta),
            (&mut buckets.output, output_delta),
        ] {
            if let Some(bucket) = bucket {
                bucket.refill(now);
                bucket.take(delta);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tenant() -> Tenant {
        let limits = LimitsConfig {
            requests_per_minute: Some(60),
            input_tokens_per_minute: Some(6000),
            output_tokens_per_minute: Some(2000),
        };
        Tenant {
            name: "team-a".into(),
            limits: Some(limits),
        }
    }

    #[test]
    fn burst_up_to_the_bucket_then_refusal_then_refill() {
        let (limiter, t0, tenant) = (Limiter::default(), Instant::now(), tenant());
        for i in 0..60 {
            let ok = limiter
                .reserve(&tenant, "m", 10, 10, t0)
                .expect("within the burst");
            assert_eq!(
                ok.expect("limited tenant")
                    .1
                    .requests
                    .expect("rpm")
                    .remaining,
                59 - i
            );
        }
        let refused = limiter
            .reserve(&tenant, "m", 10, 10, t0)
            .expect_err("61st refused");
        assert_eq!(refused.limit, LimitKind::Requests);
        assert_eq!(refused.retry_after, Duration::from_secs(1));
        // Another model has its own buckets.
        assert!(limiter.reserve(&tenant, "other", 10, 10, t0).is_ok());
        assert!(
            limiter
                .reserve(&tenant, "m", 10, 10, t0 + Duration::from_secs(1))
                .is_ok()
        );
    }

    #[test]
    fn tokens_refuse_on_the_tightest_bucket_and_too_large_is_flagged() {
        let (limiter, t0, tenant) = (Limiter::default(), Instant::now(), tenant());
        assert!(limiter.reserve(&tenant, "m", 5000, 100, t0).is_ok());
        let refused = limiter
            .reserve(&tenant, "m", 2000, 100, t0)
            .expect_err("input exhausted");
        assert_eq!(refused.limit, LimitKind::InputTokens);
        assert_eq!(refused.retry_after, Duration::from_secs(10)); // 1000 tokens at 100/s
        let big = limiter
            .reserve(&tenant, "m", 10, 2001, t0)
            .expect_err("never fits");
        assert!(big.too_large);
        assert_eq!(big.limit, LimitKind::OutputTokens);
    }

    #[test]
    fn settlement_charges_uncached_input_and_refunds_unused_output() {
        let (limiter, t0, tenant) = (Limiter::default(), Instant::now(), tenant());
        let (reservation, _) = limiter
            .reserve(&tenant, "m", 1000, 500, t0)
            .expect("ok")
            .expect("limited");
        let usage = Usage {
            prompt_tokens: 1000,
            completion_tokens: 100,
            cached_tokens: 800,
        };
        limiter.settle(&reservation, Settle::Usage(usage), t0);
        let (_, headers) = limiter
            .reserve(&tenant, "m", 0, 0, t0)
            .expect("ok")
            .expect("limited");
        assert_eq!(headers.input_tokens.expect("itpm").remaining, 6000 - 200);
        assert_eq!(headers.output_tokens.expect("otpm").remaining, 2000 - 100);
        let (failed, _) = limiter
            .reserve(&tenant, "m", 300, 300, t0)
            .expect("ok")
            .expect("limited");
        limiter.settle(&failed, Settle::Failed, t0);
        let (_, headers) = limiter
            .reserve(&tenant, "m", 0, 0, t0)
            .expect("ok")
            .expect("limited");
        assert_eq!(headers.input_tokens.expect("itpm").remaining, 6000 - 200);
    }
}
