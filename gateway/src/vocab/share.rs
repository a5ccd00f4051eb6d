//! This gateway pod's share of what all pods split: each model's replica concurrency (so
//! engines never see more requests than they were sized for, however many pods send them),
//! a tenant's in-flight cap, and, while Redis is down, each limit quota.

use std::sync::atomic::{AtomicU64, Ordering};

/// This pod's part of `total` units split by `pods` pods, `index` being its place among them
/// (0-based): equal parts, and the remainder one unit each to the first pods, so the parts add
/// up to `total` exactly. A pod beyond the remainder may get 0 when `total < pods`.
pub fn pod_share(total: u64, pods: u32, index: u32) -> u64 {
    let pods = u64::from(pods.max(1));
    let index = u64::from(index).min(pods - 1);
    total / pods + u64::from(index < total % pods)
}

/// How many gateway pods split the shared limits and where this one stands; one pod and
/// index 0 unless a shared store says otherwise (see `store::membership`).
#[derive(Debug)]
pub struct GatewayShare {
    /// `pods << 32 | index`, one atomic so readers never see a torn pair.
    packed: AtomicU64,
}

impl Default for GatewayShare {
    fn default() -> Self {
        Self {
            packed: AtomicU64::new(1 << 32),
        }
    }
}

impl GatewayShare {
    /// Gateway pods alive, and this pod's place among them.
    pub fn get(&self) -> (u32, u32) {
        let packed = self.packed.load(Ordering::Relaxed);
        ((packed >> 32) as u32, packed as u32)
    }

    /// Records the pods alive; returns whether the split changed.
    pub fn set(&self, pods: u32, index: u32) -> bool {
        let packed = (u64::from(pods.max(1)) << 32) | u64::from(index);
        self.packed.swap(packed, Ordering::Relaxed) != packed
    }

    /// This pod's part of `total`.
    pub fn of(&self, total: u64) -> u64 {
        let (pods, index) = self.get();
        pod_share(total, pods, index)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_add_up_to_the_whole_and_differ_by_at_most_one() {
        for total in 0..50u64 {
            for pods in 1..7u32 {
                let parts: Vec<u64> = (0..pods).map(|i| pod_share(total, pods, i)).collect();
                assert_eq!(parts.iter().sum::<u64>(), total, "{total} over {pods}");
                let (min, max) = (parts.iter().min(), parts.iter().max());
                assert!(max.zip(min).is_some_and(|(a, b)| a - b <= 1));
            }
        }
        assert_eq!(pod_share(64, 0, 0), 64, "no pods known: all of it");
        assert_eq!(pod_share(1, 2, 1), 0);
    }

    #[test]
    fn the_split_is_read_whole() {
        let share = GatewayShare::default();
        assert_eq!((share.get(), share.of(64)), ((1, 0), 64));
        assert!(share.set(3, 2));
        assert!(!share.set(3, 2));
        assert_eq!(share.of(64), 21);
    }
}
