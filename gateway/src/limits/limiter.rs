//! The limiter: the tenant's buckets taken on arrival, settled when the request ends, in
//! the store the config names. With Redis, a failed or slow call falls back (for one second,
//! then Redis is tried again) to this pod's own buckets at its share of each quota, or
//! refuses (`on_store_failure: deny`); a metric and a log line say so.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use super::memory::MemoryStore;
use super::plan::{self, BucketState, Refusal, Scope, Take};
use super::redis::RedisStore;
use crate::auth::Tenant;
use crate::config::{LimitsStoreConfig, OnStoreFailure, StoreKind};
use crate::store::{RedisClient, StoreError};
use crate::vocab::{GatewayShare, LimitKind, RateLimitHeaders, Usage};

/// Why the limiter did not let a request through.
#[derive(Debug, Clone)]
pub enum LimitError {
    /// A limit refused it (429).
    Refused(Refusal),
    /// The shared store is unreachable and the config says to refuse then (503).
    StoreDown,
}

/// What a request took, to settle against when it ends.
#[derive(Debug, Clone)]
pub struct Reservation {
    tenant: Arc<str>,
    model: String,
    /// The token takes (requests are not settled).
    takes: Vec<Take>,
    /// Where it was taken.
    shared: bool,
}

/// How a request ended, for settlement.
#[derive(Debug, Clone, Copy)]
pub enum Settle {
    /// The engine reported usage: charge uncached prompt tokens and actual completion tokens.
    Usage(Usage),
    /// The engine did no work for it (refused, failed before the response, or the client
    /// left before the response started): give the tokens back.
    Failed,
    /// It ended without usage (client left mid-stream): keep what was reserved.
    Unknown,
}

/// The shared store and its state.
struct Shared {
    store: RedisStore,
    client: RedisClient,
    on_failure: OnStoreFailure,
    /// Milliseconds after `epoch` until which Redis is not tried (after a failure).
    down_until_ms: AtomicU64,
    epoch: Instant,
}

/// The limiter of one gateway pod.
pub struct Limiter {
    local: MemoryStore,
    shared: Option<Shared>,
    share: Arc<GatewayShare>,
    /// Health of the shared store, for `/metrics`.
    pub health: StoreHealth,
}

/// Counters and the up gauge of the shared store.
#[derive(Debug)]
pub struct StoreHealth {
    /// Whether the last call to Redis succeeded (always true in memory mode).
    pub up: AtomicBool,
    /// Calls that failed or timed out.
    pub failures: AtomicU64,
    /// Requests limited by this pod alone while Redis was down.
    pub local_fallbacks: AtomicU64,
    /// Settlements that could not be written to Redis (their reservation stays charged).
    pub lost_settlements: AtomicU64,
}

impl Default for StoreHealth {
    fn default() -> Self {
        Self {
            up: AtomicBool::new(true),
            failures: AtomicU64::new(0),
            local_fallbacks: AtomicU64::new(0),
            lost_settlements: AtomicU64::new(0),
        }
    }
}

/// How long Redis is left alone after a failed call.
const RETRY_AFTER: Duration = Duration::from_secs(1);

impl Limiter {
    /// A limiter keeping every bucket in this process.
    pub fn memory(share: Arc<GatewayShare>) -> Self {
        Self {
            local: MemoryStore::default(),
            shared: None,
            share,
            health: StoreHealth::default(),
        }
    }

    /// The limiter `config` asks for; Redis is connected lazily.
    pub fn new(config: &LimitsStoreConfig, share: Arc<GatewayShare>) -> Result<Self, StoreError> {
        let mut limiter = Self::memory(share);
        if config.store == StoreKind::Redis {
            let client = RedisClient::new(config)?;
            limiter.shared = Some(Shared {
                store: RedisStore::new(client.clone()),
                client,
                on_failure: config.on_store_failure,
                down_until_ms: AtomicU64::new(0),
                epoch: Instant::now(),
            });
        }
        Ok(limiter)
    }

    /// The Redis client, when limits are shared (for the pods' membership).
    pub fn redis(&self) -> Option<&RedisClient> {
        self.shared.as_ref().map(|s| &s.client)
    }

    /// Before the body is read: one request from the tenant's tenant-wide bucket.
    pub async fn admit_request(&self, tenant: &Tenant) -> Result<(), LimitError> {
        let mut takes = Vec::new();
        let one = [
            (LimitKind::Requests, 1.0),
            (LimitKind::InputTokens, 0.0),
            (LimitKind::OutputTokens, 0.0),
        ];
        plan::takes(Scope::Tenant, tenant.total_limits.as_ref(), one, &mut takes);
        takes.retain(|t| t.kind == LimitKind::Requests);
        if takes.is_empty() {
            return Ok(());
        }
        let (_, taken, states) = self.take(&tenant.name, "", &mut takes, false).await?;
        match plan::refusal(&takes, &states).filter(|_| !taken) {
            Some(refusal) => Err(LimitError::Refused(refusal)),
            None => Ok(()),
        }
    }

    /// After the body: one request on `model` and the estimated `input_tokens` and reserved
    /// `output_tokens`, from the model's and the tenant-wide buckets, all or nothing.
    /// `Ok(None)` when the tenant has no limits.
    pub async fn reserve(
        &self,
        tenant: &Tenant,
        model: &str,
        input_tokens: u64,
        output_tokens: u64,
    ) -> Result<Option<(Reservation, RateLimitHeaders)>, LimitError> {
        let mut takes = reserve_takes(tenant, input_tokens, output_tokens);
        if takes.is_empty() {
            return Ok(None);
        }
        let (shared, taken, states) = self.take(&tenant.name, model, &mut takes, false).await?;
        reserved(tenant, model, takes, shared, taken, &states)
    }

    /// [`reserve`](Self::reserve) when every bucket is in this process (`limits.store:
    /// memory`): at once, with no future to build and poll. `None` with a shared store.
    pub fn reserve_local(
        &self,
        tenant: &Tenant,
        model: &str,
        input_tokens: u64,
        output_tokens: u64,
    ) -> Option<Result<Option<(Reservation, RateLimitHeaders)>, LimitError>> {
        if self.shared.is_some() {
            return None;
        }
        let takes = reserve_takes(tenant, input_tokens, output_tokens);
        if takes.is_empty() {
            return Some(Ok(None));
        }
        let (taken, states) = self
            .local
            .take(&tenant.name, model, &takes, false, Instant::now());
        Some(reserved(tenant, model, takes, false, taken, &states))
    }

    /// Corrects a reservation with how the request ended (prompt tokens served from the
    /// prefix cache are not charged). With Redis this runs on its own task.
    pub fn settle(self: &Arc<Self>, reservation: Reservation, how: Settle) {
        let mut takes = reservation.takes;
        for take in &mut takes {
            take.amount = match (how, take.kind) {
                (Settle::Unknown, _) => return,
                (Settle::Failed, _) => -take.amount,
                (Settle::Usage(u), LimitKind::InputTokens) => {
                    u.prompt_tokens.saturating_sub(u.cached_tokens) as f64 - take.amount
                }
                (Settle::Usage(u), _) => u.completion_tokens as f64 - take.amount,
            };
        }
        takes.retain(|t| t.amount != 0.0);
        if takes.is_empty() {
            return;
        }
        let (tenant, model) = (reservation.tenant, reservation.model);
        match (&self.shared, reservation.shared) {
            (Some(_), true) => {
                let this = self.clone();
                tokio::spawn(async move {
                    let Some(shared) = &this.shared else { return };
                    match shared.store.take(&tenant, &model, &takes, true).await {
                        Ok(_) => this.store_up(),
                        Err(error) => {
                            this.health.lost_settlements.fetch_add(1, Ordering::Relaxed);
                            this.store_failed(shared, &error);
                        }
                    }
                });
            }
            // Taken locally: `takes` already carry this pod's share of each quota.
            _ => {
                self.local.settle(&tenant, &model, &takes, Instant::now());
            }
        }
    }

    /// Takes from Redis when it is shared and up, else from this pod's buckets at its share
    /// of each quota (`takes` then say so: their headers and settlements use that share).
    /// Returns (taken in Redis, taken, states).
    async fn take(
        &self,
        tenant: &str,
        model: &str,
        takes: &mut [Take],
        force: bool,
    ) -> Result<(bool, bool, Vec<BucketState>), LimitError> {
        if let Some(shared) = &self.shared {
            let now_ms = shared.epoch.elapsed().as_millis() as u64;
            if now_ms >= shared.down_until_ms.load(Ordering::Relaxed) {
                // Boxed: the Redis call's future is ~4 KB; inline, it made every caller's
                // future (and each request's move of it) that large on the memory path too.
                match Box::pin(shared.store.take(tenant, model, takes, force)).await {
                    Ok((taken, states)) => {
                        self.store_up();
                        return Ok((true, taken, states));
                    }
                    Err(error) => self.store_failed(shared, &error),
                }
            }
            if shared.on_failure == OnStoreFailure::Deny {
                return Err(LimitError::StoreDown);
            }
            self.health.local_fallbacks.fetch_add(1, Ordering::Relaxed);
        }
        if self.shared.is_some() {
            // Redis is down: this pod's share of each quota, at least 1 a minute.
            for take in takes.iter_mut() {
                take.per_minute = self.share.of(take.per_minute).max(1);
            }
        }
        let (taken, states) = self.local.take(tenant, model, takes, force, Instant::now());
        Ok((false, taken, states))
    }

    fn store_up(&self) {
        if !self.health.up.swap(true, Ordering::Relaxed) {
            tracing::info!("limits store reachable again: limits are shared between pods");
        }
    }

    fn store_failed(&self, shared: &Shared, error: &StoreError) {
        self.health.failures.fetch_add(1, Ordering::Relaxed);
        let until = shared.epoch.elapsed() + RETRY_AFTER;
        shared
            .down_until_ms
            .store(until.as_millis() as u64, Ordering::Relaxed);
        if self.health.up.swap(false, Ordering::Relaxed) {
            let (pods, _) = self.share.get();
            match shared.on_failure {
                OnStoreFailure::Local => tracing::warn!(
                    %error, pods,
                    "limits store unreachable: limiting in this pod alone at 1/{pods} of each quota"
                ),
                OnStoreFailure::Deny => tracing::warn!(
                    %error,
                    "limits store unreachable: refusing limited tenants' requests (on_store_failure: deny)"
                ),
            }
        }
    }
}

/// What a reservation takes: one request and the tokens on the model; the tokens on the
/// tenant-wide buckets (whose request was taken before the body).
fn reserve_takes(tenant: &Tenant, input_tokens: u64, output_tokens: u64) -> Vec<Take> {
    let mut takes = Vec::with_capacity(5);
    let amounts = |requests| {
        [
            (LimitKind::Requests, requests),
            (LimitKind::InputTokens, input_tokens as f64),
            (LimitKind::OutputTokens, output_tokens as f64),
        ]
    };
    plan::takes(
        Scope::Model,
        tenant.limits.as_ref(),
        amounts(1.0),
        &mut takes,
    );
    plan::takes(
        Scope::Tenant,
        tenant.total_limits.as_ref(),
        amounts(0.0),
        &mut takes,
    );
    takes.retain(|t| !(t.scope == Scope::Tenant && t.kind == LimitKind::Requests));
    takes
}

/// The reservation (and its headers) `takes` made, or the refusal.
fn reserved(
    tenant: &Tenant,
    model: &str,
    mut takes: Vec<Take>,
    shared: bool,
    taken: bool,
    states: &[BucketState],
) -> Result<Option<(Reservation, RateLimitHeaders)>, LimitError> {
    if !taken && let Some(refusal) = plan::refusal(&takes, states) {
        return Err(LimitError::Refused(refusal));
    }
    let headers = plan::headers(&takes, states);
    takes.retain(|t| t.kind != LimitKind::Requests);
    let reservation = Reservation {
        tenant: tenant.name.clone(),
        model: model.to_string(),
        takes,
        shared,
    };
    Ok(Some((reservation, headers)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::LimitsConfig;

    fn tenant(total: Option<LimitsConfig>) -> Tenant {
        let mut tenant = Tenant::unlimited("team-a");
        tenant.limits = Some(LimitsConfig {
            requests_per_minute: Some(60),
            input_tokens_per_minute: Some(6000),
            output_tokens_per_minute: Some(2000),
        });
        tenant.total_limits = total;
        tenant
    }

    fn limiter() -> Arc<Limiter> {
        Arc::new(Limiter::memory(Arc::default()))
    }

    fn refused(result: Result<Option<(Reservation, RateLimitHeaders)>, LimitError>) -> Refusal {
        match result {
            Err(LimitError::Refused(refusal)) => refusal,
            other => panic!("expected a refusal, got {other:?}"),
        }
    }

    #[tokio::test]
    async fn burst_up_to_the_bucket_then_refusal() {
        let (limiter, tenant) = (limiter(), tenant(None));
        for i in 0..60 {
            let (_, headers) = limiter
                .reserve(&tenant, "m", 10, 10)
                .await
                .expect("within the burst")
                .expect("limited tenant");
            assert_eq!(headers.requests.expect("rpm").remaining, 59 - i);
        }
        let refusal = refused(limiter.reserve(&tenant, "m", 10, 10).await);
        assert_eq!(refusal.limit, LimitKind::Requests);
        assert!(refusal.retry_after <= Duration::from_secs(1));
        // Another model has its own buckets.
        assert!(limiter.reserve(&tenant, "other", 10, 10).await.is_ok());
        let big = refused(limiter.reserve(&tenant, "other", 10, 2001).await);
        assert!(big.too_large);
        assert_eq!(big.limit, LimitKind::OutputTokens);
    }

    #[tokio::test]
    async fn settlement_charges_uncached_input_and_refunds_unused_or_failed() {
        let (limiter, tenant) = (limiter(), tenant(None));
        let (reservation, _) = limiter
            .reserve(&tenant, "m", 1000, 500)
            .await
            .expect("ok")
            .expect("limited");
        let usage = Usage {
            prompt_tokens: 1000,
            completion_tokens: 100,
            cached_tokens: 800,
        };
        limiter.settle(reservation, Settle::Usage(usage));
        let (failed, headers) = limiter
            .reserve(&tenant, "m", 300, 300)
            .await
            .expect("ok")
            .expect("limited");
        let itpm = headers.input_tokens.expect("itpm").remaining;
        assert!((5500..5510).contains(&itpm), "{itpm}");
        limiter.settle(failed, Settle::Failed);
        let (_, headers) = limiter
            .reserve(&tenant, "m", 0, 0)
            .await
            .expect("ok")
            .expect("limited");
        let itpm = headers.input_tokens.expect("itpm").remaining;
        assert!((5800..5810).contains(&itpm), "{itpm}");
        assert!(headers.output_tokens.expect("otpm").remaining >= 1900);
    }

    #[test]
    fn the_memory_paths_futures_stay_small() {
        // Every request moves these futures whole (they are held inline by the limits
        // layers' boxed futures); the Redis call's (~4 KB) must stay boxed out of them.
        let (limiter, tenant) = (limiter(), tenant(None));
        let reserve = limiter.reserve(&tenant, "m", 1, 1);
        let admit = limiter.admit_request(&tenant);
        assert!(
            std::mem::size_of_val(&reserve) < 1024,
            "{}",
            std::mem::size_of_val(&reserve)
        );
        assert!(
            std::mem::size_of_val(&admit) < 1024,
            "{}",
            std::mem::size_of_val(&admit)
        );
    }

    #[tokio::test]
    async fn tenant_wide_limits_bind_across_models() {
        let total = LimitsConfig {
            requests_per_minute: Some(3),
            input_tokens_per_minute: None,
            output_tokens_per_minute: Some(100),
        };
        let (limiter, tenant) = (limiter(), tenant(Some(total)));
        for _ in 0..3 {
            limiter
                .admit_request(&tenant)
                .await
                .expect("three requests");
        }
        match limiter.admit_request(&tenant).await {
            Err(LimitError::Refused(r)) => {
                assert_eq!((r.limit, r.scope), (LimitKind::Requests, Scope::Tenant))
            }
            other => panic!("the fourth request must be refused: {other:?}"),
        }
        assert!(limiter.reserve(&tenant, "a", 1, 60).await.is_ok());
        let refusal = refused(limiter.reserve(&tenant, "b", 1, 60).await);
        assert_eq!(
            (refusal.limit, refusal.scope),
            (LimitKind::OutputTokens, Scope::Tenant)
        );
    }
}
