//! Which buckets a request takes from, and what their states say back (headers, the refusal):
//! pure functions shared by the in-memory and the Redis store, so both decide alike.

use std::time::Duration;

use crate::config::LimitsConfig;
use crate::vocab::{BucketHeader, LimitKind, RateLimitHeaders};

/// Whose bucket: the tenant's on one model, or the tenant's across all its models.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Scope {
    /// Per (tenant, model): the tenant's `limits`.
    Model,
    /// Per tenant: its `total_limits`.
    Tenant,
}

/// One bucket a request takes `amount` from (a negative amount gives back).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Take {
    /// Whose.
    pub scope: Scope,
    /// Which limit.
    pub kind: LimitKind,
    /// Its quota (units per minute, also its capacity).
    pub per_minute: u64,
    /// How much.
    pub amount: f64,
}

impl Take {
    /// `amount` from `scope`'s `kind` bucket of `per_minute`.
    pub fn new(scope: Scope, kind: LimitKind, per_minute: u64, amount: f64) -> Self {
        Self {
            scope,
            kind,
            per_minute,
            amount,
        }
    }
}

/// A bucket after a take, as the store saw it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BucketState {
    /// Whole units left.
    pub remaining: u64,
    /// Time until it is full again.
    pub reset: Duration,
    /// Time until the take's amount would fit (zero when it was taken).
    pub wait: Duration,
}

/// A request refused by a limit.
#[derive(Debug, Clone)]
pub struct Refusal {
    /// The limit that is furthest from allowing the request.
    pub limit: LimitKind,
    /// Whose limit it is.
    pub scope: Scope,
    /// When it would pass (if nothing else is taken meanwhile).
    pub retry_after: Duration,
    /// Whether it can never pass (asks for more than the bucket holds).
    pub too_large: bool,
    /// Header values describing the buckets.
    pub headers: RateLimitHeaders,
}

impl Refusal {
    /// Label value on the rate-limited counter: the kind, `total_` before it for a
    /// tenant-wide bucket.
    pub fn label(&self) -> &'static str {
        match (self.scope, self.limit) {
            (Scope::Model, kind) => kind.as_str(),
            (Scope::Tenant, LimitKind::Requests) => "total_requests",
            (Scope::Tenant, LimitKind::InputTokens) => "total_input_tokens",
            (Scope::Tenant, LimitKind::OutputTokens) => "total_output_tokens",
        }
    }
}

/// Appends the buckets `limits` (of `scope`) set for `amounts` of requests, input and output
/// tokens; a kind without a quota is left out.
pub fn takes(
    scope: Scope,
    limits: Option<&LimitsConfig>,
    amounts: [(LimitKind, f64); 3],
    out: &mut Vec<Take>,
) {
    let Some(limits) = limits else { return };
    for (kind, amount) in amounts {
        if let Some(per_minute) = limits.quota(kind) {
            out.push(Take::new(scope, kind, per_minute, amount));
        }
    }
}

/// The refusal for `states` of `takes`, if any bucket could not give its amount: the one that
/// can never hold its amount first, else the longest wait.
pub fn refusal(takes: &[Take], states: &[BucketState]) -> Option<Refusal> {
    let mut worst: Option<(&Take, Duration, bool)> = None;
    for (take, state) in takes.iter().zip(states) {
        let too_large = take.amount > take.per_minute as f64;
        if state.wait.is_zero() && !too_large {
            continue;
        }
        let worse = worst.is_none_or(|(_, wait, big)| {
            (too_large && !big) || (too_large == big && state.wait > wait)
        });
        if worse {
            worst = Some((take, state.wait, too_large));
        }
    }
    let (take, retry_after, too_large) = worst?;
    Some(Refusal {
        limit: take.kind,
        scope: take.scope,
        retry_after,
        too_large,
        headers: headers(takes, states),
    })
}

/// The `x-ratelimit-*` values: per kind, the bucket with the fewest units left (the model's
/// or the tenant's, whichever binds).
pub fn headers(takes: &[Take], states: &[BucketState]) -> RateLimitHeaders {
    let mut out = RateLimitHeaders::default();
    for (take, state) in takes.iter().zip(states) {
        let slot = match take.kind {
            LimitKind::Requests => &mut out.requests,
            LimitKind::InputTokens => &mut out.input_tokens,
            LimitKind::OutputTokens => &mut out.output_tokens,
        };
        let this = BucketHeader {
            limit: take.per_minute,
            remaining: state.remaining,
            reset: state.reset,
        };
        if slot.is_none_or(|kept| this.remaining < kept.remaining) {
            *slot = Some(this);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(remaining: u64, wait_ms: u64) -> BucketState {
        BucketState {
            remaining,
            reset: Duration::from_secs(1),
            wait: Duration::from_millis(wait_ms),
        }
    }

    #[test]
    fn too_large_beats_the_longest_wait_and_headers_show_the_binding_bucket() {
        let takes = [
            Take::new(Scope::Model, LimitKind::Requests, 60, 1.0),
            Take::new(Scope::Model, LimitKind::OutputTokens, 100, 500.0),
            Take::new(Scope::Tenant, LimitKind::Requests, 100, 1.0),
        ];
        let states = [state(0, 1000), state(100, 0), state(40, 0)];
        let refused = refusal(&takes, &states).expect("refused");
        assert_eq!(refused.limit, LimitKind::OutputTokens);
        assert!(refused.too_large);
        let headers = refused.headers;
        assert_eq!(
            headers.requests.map(|h| (h.limit, h.remaining)),
            Some((60, 0))
        );
        let passing = [state(59, 0), state(100, 0), state(40, 0)];
        assert!(refusal(&takes[..1], &passing[..1]).is_none());
        let both = headers_of(&takes, &[state(59, 0), state(0, 0), state(39, 0)]);
        assert_eq!(
            both.requests.map(|h| (h.limit, h.remaining)),
            Some((100, 39))
        );
    }

    fn headers_of(takes: &[Take], states: &[BucketState]) -> RateLimitHeaders {
        headers(takes, states)
    }

    #[test]
    fn only_configured_quotas_become_takes() {
        let limits = LimitsConfig {
            requests_per_minute: Some(60),
            input_tokens_per_minute: None,
            output_tokens_per_minute: Some(10),
        };
        let mut out = Vec::new();
        let amounts = [
            (LimitKind::Requests, 1.0),
            (LimitKind::InputTokens, 5.0),
            (LimitKind::OutputTokens, 7.0),
        ];
        takes(Scope::Model, Some(&limits), amounts, &mut out);
        takes(Scope::Tenant, None, amounts, &mut out);
        let kinds: Vec<_> = out.iter().map(|t| t.kind).collect();
        assert_eq!(kinds, [LimitKind::Requests, LimitKind::OutputTokens]);
    }
}
