//! How long a new replica takes from being asked for to ready: the wait for a free GPU (a
//! cluster without spare nodes waits for one to be provisioned) plus the replica's own start
//! (image pull, weights, load, warm-up), drawn per replica. Real starts have a heavy right
//! tail: a node that pulls the image afresh, a slow weight download, a compile cache miss, so
//! the draw is log-normal around the median with the 95th percentile at `tail` × the median.

use super::rng::Rng;

/// z of the normal distribution's 95th percentile.
const Z95: f64 = 1.644_853_626_951_472_2;

/// Replicas ordered together are drawn in at most this many groups: a 1,000-replica step
/// costs a handful of fluid groups, and each group still gets its own start time.
pub const MAX_DRAWS_PER_ORDER: u32 = 16;

/// The start-time distribution and its own random stream (apart from the arrivals', so a
/// policy that orders more replicas does not change the arrival noise the others see).
#[derive(Debug, Clone)]
pub struct StartTimes {
    median_s: f64,
    /// σ of the underlying normal: ln(p95 / median) / z95 (0: every start takes the median).
    sigma: f64,
    gpu_wait_s: f64,
    rng: Rng,
}

impl StartTimes {
    /// Starts of `median_s` seconds with the 95th percentile at `tail` × the median (1: every
    /// start takes the median), after `gpu_wait_s` seconds of waiting for a GPU.
    pub fn new(median_s: f64, tail: f64, gpu_wait_s: f64, seed: u64) -> Self {
        Self {
            median_s,
            sigma: tail.max(1.0).ln() / Z95,
            gpu_wait_s,
            // Any fixed offset: a stream apart from the arrivals' for the same seed.
            rng: Rng::new(seed ^ 0x5354_4152_5453),
        }
    }

    /// Every start takes exactly `s` seconds, with no GPU wait.
    pub fn fixed(s: f64) -> Self {
        Self::new(s, 1.0, 0.0, 0)
    }

    /// The median time from ordered to ready, seconds (GPU wait included).
    pub fn median_s(&self) -> f64 {
        self.gpu_wait_s + self.median_s
    }

    /// One replica's time from ordered to ready, seconds.
    pub fn draw(&mut self) -> f64 {
        let start = if self.sigma == 0.0 {
            self.median_s
        } else {
            self.median_s * (self.sigma * self.rng.normal()).exp()
        };
        self.gpu_wait_s + start
    }

    /// `replicas` ordered at once, in groups that share a start: `(replicas, seconds)` pairs.
    pub fn draw_order(&mut self, replicas: u32) -> Vec<(u32, f64)> {
        let groups = replicas.min(MAX_DRAWS_PER_ORDER);
        (0..groups)
            .map(|g| {
                // Even shares, the remainder to the first groups.
                let share = replicas / groups + u32::from(g < replicas % groups);
                (share, self.draw())
            })
            .filter(|&(share, _)| share > 0)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn quantile(mut v: Vec<f64>, q: f64) -> f64 {
        v.sort_by(f64::total_cmp);
        v[((v.len() as f64 * q).ceil() as usize).saturating_sub(1)]
    }

    #[test]
    fn the_median_and_the_tail_are_as_asked() {
        let mut starts = StartTimes::new(60.0, 2.0, 0.0, 7);
        let draws: Vec<f64> = (0..40_000).map(|_| starts.draw()).collect();
        let (p50, p95) = (quantile(draws.clone(), 0.5), quantile(draws, 0.95));
        assert!((p50 - 60.0).abs() < 2.0, "median {p50}");
        assert!((p95 / p50 - 2.0).abs() < 0.1, "p95 / median {}", p95 / p50);
    }

    #[test]
    fn a_fixed_start_and_the_gpu_wait() {
        let mut fixed = StartTimes::fixed(30.0);
        assert!((0..10).all(|_| fixed.draw() == 30.0));
        let mut waited = StartTimes::new(30.0, 1.0, 120.0, 1);
        assert_eq!((waited.draw(), waited.median_s()), (150.0, 150.0));
    }

    #[test]
    fn an_order_is_split_into_groups_that_sum_to_it() {
        let mut starts = StartTimes::new(60.0, 2.0, 0.0, 3);
        for replicas in [1, 3, 16, 17, 100, 1000] {
            let order = starts.draw_order(replicas);
            assert_eq!(order.iter().map(|g| g.0).sum::<u32>(), replicas);
            assert!(order.len() as u32 <= MAX_DRAWS_PER_ORDER);
        }
    }
}
