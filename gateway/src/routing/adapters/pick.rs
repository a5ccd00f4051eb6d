//! The adapter picker: a request for a LoRA adapter goes to a replica that holds it, unless
//! that replica is over the load bound (consistent hashing with bounded loads, Mirrokni et
//! al., as Envoy's bounded-load hashing); with none holding it under the bound, to the
//! adapter's home (rendezvous hashing of its name), so one adapter's traffic concentrates on
//! few replicas instead of loading it everywhere; the same bound spills it over.

use super::super::picker::{
    Candidate, least_loaded, load_bound, mix, rendezvous_order, under_bound,
};

/// Stable hash of an adapter's name: the same home on every gateway pod and after restarts.
pub fn adapter_key(adapter: &str) -> u64 {
    use std::hash::{Hash, Hasher};
    // SipHash with fixed zero keys: stable across processes, unlike `RandomState`.
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    adapter.hash(&mut hasher);
    hasher.finish()
}

/// Picks a candidate index for a request of the adapter `adapter_key`; `held[i]` says whether
/// candidate `i` likely holds it. `None` only for an empty slice. Among the holders under the
/// bound: with a prompt prefix, the first in the prefix's rendezvous order (the engine's
/// prefix cache is per adapter), else the least loaded. Then the adapter's own rendezvous
/// order under the bound. Past every bound, the least-loaded replica.
pub fn pick(
    candidates: &[Candidate],
    held: &[bool],
    adapter_key: u64,
    prefix_hash: Option<u64>,
    random: u64,
) -> Option<usize> {
    if candidates.is_empty() {
        return None;
    }
    let bound = load_bound(candidates);
    let home_order = rendezvous_order(candidates, adapter_key);
    let open_holder =
        |&i: &usize| held.get(i).copied().unwrap_or(false) && under_bound(&candidates[i], bound);
    let holder = match prefix_hash {
        Some(prefix) => rendezvous_order(candidates, mix(prefix ^ adapter_key))
            .into_iter()
            .find(open_holder),
        // The least loaded holder; among equals, the first in the adapter's order (stable).
        None => home_order
            .iter()
            .copied()
            .filter(open_holder)
            .min_by(|&a, &b| candidates[a].load().total_cmp(&candidates[b].load())),
    };
    let home = || {
        home_order
            .iter()
            .copied()
            .find(|&i| under_bound(&candidates[i], bound))
    };
    Some(
        holder
            .or_else(home)
            .unwrap_or_else(|| least_loaded(candidates, random)),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn replica(key: u64, in_flight: u32) -> Candidate {
        Candidate {
            key,
            in_flight_requests: in_flight,
            in_flight_tokens: 100 * u64::from(in_flight),
            scraped: Some((0.0, 0.1)),
            concurrency: 8,
        }
    }

    fn idle() -> [Candidate; 3] {
        [replica(11, 0), replica(22, 0), replica(33, 0)]
    }

    #[test]
    fn a_replica_holding_the_adapter_takes_it_over_an_idler_one() {
        // 2 in flight: bound ceil(1.25 × 3 / 3) = 2, so the holder may take a second one.
        let mut c = idle();
        c[1].in_flight_requests = 1;
        c[2].in_flight_requests = 1;
        let held = [false, false, true];
        for random in 0..16 {
            assert_eq!(pick(&c, &held, adapter_key("sql"), None, random), Some(2));
            assert_eq!(
                pick(&c, &held, adapter_key("sql"), Some(7), random),
                Some(2)
            );
        }
    }

    #[test]
    fn a_holder_over_the_bound_spills_to_the_adapters_home_order() {
        // 3 in flight on the holder, none elsewhere: bound ceil(1.25 × 4 / 3) = 2.
        let mut c = idle();
        c[0].in_flight_requests = 3;
        let held = [true, false, false];
        let key = adapter_key("sql");
        let spilled = pick(&c, &held, key, None, 0).expect("non-empty");
        assert_ne!(spilled, 0, "the holder is over the bound");
        let order = rendezvous_order(&c, key);
        let first_open = order.into_iter().find(|&i| i != 0);
        assert_eq!(Some(spilled), first_open, "the next in the adapter's order");
        // Two holders under the bound: the least loaded of them.
        c[0].in_flight_requests = 1;
        c[1].in_flight_requests = 2;
        let held = [true, true, false];
        assert_eq!(pick(&c, &held, key, None, 0), Some(0));
    }

    #[test]
    fn without_a_holder_each_adapter_has_a_stable_home_and_homes_spread() {
        let c = idle();
        let none = [false; 3];
        let home = pick(&c, &none, adapter_key("legal"), None, 0).expect("non-empty");
        for random in 0..16 {
            assert_eq!(
                pick(&c, &none, adapter_key("legal"), None, mix(random)),
                Some(home)
            );
        }
        // Removing another replica keeps the home (rendezvous hashing).
        let others: Vec<usize> = (0..3).filter(|&i| i != home).collect();
        let two = [c[home], c[others[0]]];
        assert_eq!(
            pick(&two, &[false; 2], adapter_key("legal"), None, 0),
            Some(0)
        );
        let homes: std::collections::HashSet<usize> = (0..64)
            .filter_map(|n| pick(&c, &none, adapter_key(&format!("a{n}")), None, 0))
            .collect();
        assert_eq!(homes.len(), 3, "adapters' homes spread over the replicas");
    }

    #[test]
    fn past_every_bound_the_least_loaded_replica_takes_it() {
        // The holder is full, another stale, the third full too but less loaded: none is
        // under the bound, so load alone decides.
        let mut c = idle();
        c[0].in_flight_requests = 8;
        c[1].scraped = None;
        c[2].in_flight_requests = 6;
        c[2].concurrency = 6;
        c[2].scraped = Some((0.0, 0.0));
        assert_eq!(
            pick(&c, &[true, false, false], adapter_key("x"), None, 0),
            Some(2)
        );
        assert_eq!(pick(&[], &[], adapter_key("x"), None, 0), None);
    }
}
