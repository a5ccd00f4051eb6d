//! The in-memory store: every bucket in this process. Right for one gateway pod; with Redis,
//! it is also a pod's fallback while Redis cannot be reached.

use std::sync::Mutex;
use std::time::Instant;

use hashbrown::HashMap;

use super::bucket::TokenBucket;
use super::plan::{BucketState, Scope, Take};
use crate::vocab::LimitKind;

/// A row of buckets, indexed by [`LimitKind`] (see `slot`).
type Row = [Option<TokenBucket>; 3];

/// One tenant's buckets: across models, and per model.
#[derive(Debug, Default)]
struct TenantBuckets {
    total: Row,
    models: HashMap<String, Row>,
}

/// All buckets of all tenants, behind one lock held for a few bucket updates. Looked up by
/// `&str`: a request allocates no key.
#[derive(Debug, Default)]
pub struct MemoryStore {
    tenants: Mutex<HashMap<String, TenantBuckets>>,
}

fn slot(kind: LimitKind) -> usize {
    match kind {
        LimitKind::Requests => 0,
        LimitKind::InputTokens => 1,
        LimitKind::OutputTokens => 2,
    }
}

impl MemoryStore {
    /// Takes every amount of `takes` from `tenant`'s buckets (on `model` for the model
    /// scope), or none of them if one cannot give its amount now; `force` takes regardless
    /// (settlements). Returns whether they were taken and each bucket's state.
    pub fn take(
        &self,
        tenant: &str,
        model: &str,
        takes: &[Take],
        force: bool,
        now: Instant,
    ) -> (bool, Vec<BucketState>) {
        let mut all = self.tenants.lock().unwrap_or_else(|p| p.into_inner());
        let (total, mut on_model) = rows(&mut all, tenant, model, takes);
        // Refilled and checked first; the states (two float-to-duration conversions each)
        // are worked out once, for the outcome.
        let mut fits = true;
        for take in takes {
            let Some(buckets) = row(take.scope, total, &mut on_model) else {
                return (false, Vec::new());
            };
            let bucket = bucket(buckets, take, now);
            bucket.refill(now);
            if take.amount > 0.0
                && (!bucket.wait_for(take.amount).is_zero() || !bucket.can_ever_hold(take.amount))
            {
                fits = false;
            }
        }
        let taken = fits || force;
        let mut states = Vec::with_capacity(takes.len());
        for take in takes {
            let Some(buckets) = row(take.scope, total, &mut on_model) else {
                return (false, Vec::new());
            };
            let bucket = bucket(buckets, take, now);
            let wait = if taken {
                bucket.take(take.amount);
                std::time::Duration::ZERO
            } else {
                bucket.wait_for(take.amount)
            };
            states.push(BucketState {
                remaining: bucket.remaining(),
                reset: bucket.time_to_full(),
                wait,
            });
        }
        (taken, states)
    }

    /// Adds every amount of `takes` (a settlement's corrections, either sign) to `tenant`'s
    /// buckets, regardless of level: `take` with `force`, without the states nobody reads.
    pub fn settle(&self, tenant: &str, model: &str, takes: &[Take], now: Instant) {
        let mut all = self.tenants.lock().unwrap_or_else(|p| p.into_inner());
        let (total, mut on_model) = rows(&mut all, tenant, model, takes);
        for take in takes {
            if let Some(buckets) = row(take.scope, total, &mut on_model) {
                let bucket = bucket(buckets, take, now);
                bucket.refill(now);
                bucket.take(take.amount);
            }
        }
    }
}

/// The rows `takes` use: the tenant's, and its row on `model` when a take is on the model
/// (created empty on first use). Found once, by `&str`: no key is allocated per bucket or per
/// request.
fn rows<'a>(
    all: &'a mut HashMap<String, TenantBuckets>,
    tenant: &str,
    model: &str,
    takes: &[Take],
) -> (&'a mut Row, Option<&'a mut Row>) {
    let TenantBuckets { total, models } = all.entry_ref(tenant).or_default();
    let on_model = if takes.iter().any(|t| t.scope == Scope::Model) {
        Some(models.entry_ref(model).or_default())
    } else {
        models.get_mut(model)
    };
    (total, on_model)
}

/// The tenant's row of buckets, or its row on the request's model, by `scope`.
fn row<'a>(
    scope: Scope,
    total: &'a mut Row,
    on_model: &'a mut Option<&mut Row>,
) -> Option<&'a mut Row> {
    match scope {
        Scope::Tenant => Some(total),
        Scope::Model => on_model.as_deref_mut(),
    }
}

/// The bucket of `row` (a tenant's or a tenant's model's) that `take` names, created full on
/// first use and following a changed quota.
fn bucket<'a>(row: &'a mut Row, take: &Take, now: Instant) -> &'a mut TokenBucket {
    let bucket =
        row[slot(take.kind)].get_or_insert_with(|| TokenBucket::per_minute(take.per_minute, now));
    if bucket.limit() != take.per_minute {
        bucket.set_limit(take.per_minute);
    }
    bucket
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn all_or_nothing_across_model_and_tenant_buckets() {
        let (store, t0) = (MemoryStore::default(), Instant::now());
        let takes = [
            Take::new(Scope::Model, LimitKind::Requests, 60, 1.0),
            Take::new(Scope::Tenant, LimitKind::Requests, 2, 1.0),
        ];
        assert!(store.take("a", "m", &takes, false, t0).0);
        assert!(store.take("a", "other", &takes, false, t0).0);
        // The tenant-wide bucket (2/min) is empty: nothing is taken from the model's.
        let (taken, states) = store.take("a", "m", &takes, false, t0);
        assert!(!taken);
        assert_eq!(states[0].remaining, 59);
        assert_eq!(states[1].wait, Duration::from_secs(30));
        // Settlements take regardless (and give back with negative amounts).
        let refund = [Take::new(Scope::Tenant, LimitKind::Requests, 2, -1.0)];
        assert!(store.take("a", "m", &refund, true, t0).0);
        let (taken, states) = store.take("a", "m", &takes, false, t0);
        assert!(taken);
        assert_eq!((states[0].remaining, states[1].remaining), (58, 0));
        // Another tenant has buckets of its own.
        assert!(store.take("b", "m", &takes, false, t0).0);
    }

    #[test]
    fn a_changed_quota_keeps_the_level() {
        let (store, t0) = (MemoryStore::default(), Instant::now());
        let at = |per_minute, amount| {
            [Take::new(
                Scope::Model,
                LimitKind::OutputTokens,
                per_minute,
                amount,
            )]
        };
        assert!(store.take("a", "m", &at(100, 90.0), false, t0).0);
        let (taken, states) = store.take("a", "m", &at(50, 0.0), false, t0);
        assert!(taken);
        assert_eq!(states[0].remaining, 10);
        assert!(!store.take("a", "m", &at(50, 11.0), false, t0).0);
    }
}
