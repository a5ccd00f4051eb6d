//! The replica picker: a pure function from replica loads and a prompt prefix to a choice.
//!
//! Load of a replica = (requests in flight through the gateway + requests waiting in the
//! engine) / its concurrency target + KV-cache usage; a replica whose scraped load is stale
//! counts as full. With a prefix, replicas are ranked by rendezvous (highest-random-weight)
//! hashing — consistent hashing: adding or removing a replica moves only its share of
//! prefixes — and the first one under the load bound takes the request, so one hot prefix
//! cannot overload a replica. Otherwise, or when every ranked replica is over the bound, the
//! least-loaded replica wins, with power of two choices among ties.

/// What the picker knows about one routable replica.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Candidate {
    /// Stable hash of the replica's URL.
    pub key: u64,
    /// Requests in flight through this gateway.
    pub in_flight_requests: u32,
    /// Estimated tokens in flight through this gateway.
    pub in_flight_tokens: u64,
    /// Scraped `(num_requests_waiting, kv_cache_usage_perc)`; `None` when stale (full).
    pub scraped: Option<(f64, f64)>,
    /// Concurrency target of the replica.
    pub concurrency: u32,
}

/// Load bound factor for prefix affinity: a replica may take a prefix's request while its
/// in-flight requests stay within `AFFINITY_BOUND × (average + 1)`.
pub const AFFINITY_BOUND: f64 = 1.25;

/// Load that stale (unknown) replicas are given: more than any real replica reaches.
const FULL: f64 = 1e6;

impl Candidate {
    /// The load score (lower is better).
    pub fn load(&self) -> f64 {
        match self.scraped {
            None => FULL,
            Some((waiting, kv)) => {
                (self.in_flight_requests as f64 + waiting.max(0.0)) / self.concurrency.max(1) as f64
                    + kv.clamp(0.0, 1.0)
            }
        }
    }
}

/// Picks a candidate index; `None` only for an empty slice. `random` drives the
/// power-of-two-choices draw (pass fresh random bits).
pub fn pick(candidates: &[Candidate], prefix_hash: Option<u64>, random: u64) -> Option<usize> {
    if candidates.is_empty() {
        return None;
    }
    if let Some(prefix) = prefix_hash
        && let Some(index) = pick_by_prefix(candidates, prefix)
    {
        return Some(index);
    }
    Some(least_loaded(candidates, random))
}

/// Rendezvous-hash order with bounded load: the highest-weight replica whose in-flight
/// requests are under the bound and not full.
fn pick_by_prefix(candidates: &[Candidate], prefix: u64) -> Option<usize> {
    let bound = load_bound(candidates);
    rendezvous_order(candidates, prefix)
        .into_iter()
        .find(|&i| under_bound(&candidates[i], bound))
}

/// The most in-flight requests one replica may carry with one more request, as consistent
/// hashing with bounded loads puts it: `ceil(AFFINITY_BOUND × (total + 1) / replicas)`.
pub(super) fn load_bound(candidates: &[Candidate]) -> f64 {
    let total: u64 = candidates.iter().map(|c| c.in_flight_requests as u64).sum();
    (AFFINITY_BOUND * ((total + 1) as f64 / candidates.len().max(1) as f64)).ceil()
}

/// Whether `c` may take one more request under `bound` (and is neither stale nor full).
pub(super) fn under_bound(c: &Candidate, bound: f64) -> bool {
    c.scraped.is_some()
        && c.in_flight_requests < c.concurrency
        && (c.in_flight_requests as f64 + 1.0) <= bound
}

/// Candidate indices by rendezvous weight for `key`, highest first: the same order for the
/// same replicas, and removing one moves only what ranked it first.
pub(super) fn rendezvous_order(candidates: &[Candidate], key: u64) -> Vec<usize> {
    let mut order: Vec<usize> = (0..candidates.len()).collect();
    order.sort_by_key(|&i| std::cmp::Reverse(mix(key ^ candidates[i].key)));
    order
}

/// Least load; among ties, two random draws and the one with fewer in-flight tokens.
pub(super) fn least_loaded(candidates: &[Candidate], random: u64) -> usize {
    let best = candidates
        .iter()
        .map(Candidate::load)
        .fold(f64::INFINITY, f64::min);
    let tied: Vec<usize> = (0..candidates.len())
        .filter(|&i| candidates[i].load() - best <= 1e-9)
        .collect();
    if tied.len() == 1 {
        return tied[0];
    }
    let a = tied[(random % tied.len() as u64) as usize];
    let b = tied[((mix(random) >> 1) % tied.len() as u64) as usize];
    if candidates[b].in_flight_tokens < candidates[a].in_flight_tokens {
        b
    } else {
        a
    }
}

/// SplitMix64 finaliser: a cheap, well-spread 64-bit mix.
pub fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn replica(key: u64, in_flight: u32, waiting: f64, kv: f64) -> Candidate {
        Candidate {
            key,
            in_flight_requests: in_flight,
            in_flight_tokens: 100 * in_flight as u64,
            scraped: Some((waiting, kv)),
            concurrency: 8,
        }
    }

    #[test]
    fn least_loaded_wins_and_engine_queue_and_kv_count() {
        let c = [
            replica(1, 3, 0.0, 0.1),
            replica(2, 1, 0.0, 0.1),
            replica(3, 2, 0.0, 0.1),
        ];
        assert_eq!(pick(&c, None, 7), Some(1));
        // Replica 2 is idle for the gateway but its engine has a queue and a full KV cache.
        let c = [replica(1, 1, 0.0, 0.2), replica(2, 0, 6.0, 0.95)];
        assert_eq!(pick(&c, None, 7), Some(0));
    }

    #[test]
    fn stale_counts_as_full_but_is_used_when_nothing_else_is_left() {
        let mut stale = replica(1, 0, 0.0, 0.0);
        stale.scraped = None;
        let c = [stale, replica(2, 7, 3.0, 0.9)];
        assert_eq!(pick(&c, None, 1), Some(1));
        assert_eq!(pick(&[stale], Some(42), 1), Some(0));
        assert_eq!(pick(&[], None, 1), None);
    }

    #[test]
    fn ties_are_broken_by_two_random_choices_over_in_flight_tokens() {
        let mut a = replica(1, 0, 0.0, 0.0);
        let mut b = replica(2, 0, 0.0, 0.0);
        a.in_flight_tokens = 500;
        b.in_flight_tokens = 10;
        let c = [a, b];
        let mut chose_b = 0;
        for random in 0..64u64 {
            let index = pick(&c, None, mix(random)).expect("non-empty");
            chose_b += (index == 1) as u32;
        }
        // b wins every draw that sees it; a wins only when both draws land on a.
        assert!(chose_b >= 32, "b chosen {chose_b}/64");
        assert!(chose_b < 64, "a is sometimes drawn twice");
    }

    #[test]
    fn a_prefix_sticks_to_one_replica_until_it_is_over_the_bound() {
        let idle = [
            replica(11, 0, 0.0, 0.0),
            replica(22, 0, 0.0, 0.0),
            replica(33, 0, 0.0, 0.0),
        ];
        let home = pick(&idle, Some(99), 0).expect("non-empty");
        for random in 0..16 {
            assert_eq!(pick(&idle, Some(99), random), Some(home));
        }
        // Different prefixes spread over replicas.
        let homes: std::collections::HashSet<usize> = (0..64u64)
            .filter_map(|p| pick(&idle, Some(mix(p)), 0))
            .collect();
        assert_eq!(homes.len(), 3);
        // The home replica carries 3 of 3 in-flight requests: over the bound, so another
        // replica (the next in the prefix's order) takes it.
        let mut loaded = idle;
        loaded[home].in_flight_requests = 3;
        let next = pick(&loaded, Some(99), 0).expect("non-empty");
        assert_ne!(next, home);
        assert_eq!(
            pick(&loaded, Some(99), 5),
            Some(next),
            "the fallback is stable too"
        );
    }

    #[test]
    fn removing_a_replica_moves_only_its_prefixes() {
        let three = [
            replica(11, 0, 0.0, 0.0),
            replica(22, 0, 0.0, 0.0),
            replica(33, 0, 0.0, 0.0),
        ];
        let two = [three[0], three[1]];
        for p in 0..200u64 {
            let before = pick(&three, Some(mix(p)), 0).expect("non-empty");
            let after = pick(&two, Some(mix(p)), 0).expect("non-empty");
            if before != 2 {
                assert_eq!(before, after, "prefix {p} moved though its replica stayed");
            }
        }
    }
}
