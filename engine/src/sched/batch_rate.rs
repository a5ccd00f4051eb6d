//! Decode throughput by running-set size, as measured: the step-time model is a straight line,
//! so more sequences always look like more tokens a second, but a backend's cost need not be
//! (on the CPU backend a decode step of 4 sequences took 12.7 ms, 3.2 ms a sequence, and one
//! of 8 took 49 ms, 6.1 a sequence). A smaller batch that measured clearly faster wins.

/// Weight of a size's earlier measurements per new one.
const FORGET: f64 = 0.8;
/// Measurements of a size before its rate is trusted.
const MIN_SAMPLES: u32 = 3;
/// Steps after which a size's rate is stale: the batch the line allows is then tried again,
/// so a machine whose cost changed is measured anew.
const FRESH_STEPS: u32 = 300;
/// How much faster (tokens a second) a smaller batch must have measured to be chosen.
const BETTER_BY: f64 = 1.15;
/// Sizes tracked (larger running sets are planned by the line alone).
const MAX_SIZE: usize = 256;

/// One size's measured decode step time.
#[derive(Debug, Clone, Copy, Default)]
struct Measured {
    seconds: f64,
    samples: u32,
    /// The step count when last measured.
    at_step: u32,
}

/// Decode-only step times by running-set size.
#[derive(Debug, Clone, Default)]
pub struct DecodeRates {
    by_size: Vec<Measured>,
}

impl DecodeRates {
    /// Records a decode-only step of `sequences` that took `seconds`, at step `step`.
    pub fn observe(&mut self, sequences: usize, seconds: f64, step: u32) {
        if sequences == 0 || sequences > MAX_SIZE {
            return;
        }
        if self.by_size.len() <= sequences {
            self.by_size.resize(sequences + 1, Measured::default());
        }
        let m = &mut self.by_size[sequences];
        m.seconds = if m.samples == 0 {
            seconds
        } else {
            FORGET * m.seconds + (1.0 - FORGET) * seconds
        };
        m.samples = m.samples.saturating_add(1);
        m.at_step = step;
    }

    /// Tokens a second of a decode step of `n`, when measured often and lately enough.
    fn rate(&self, n: usize, step: u32) -> Option<f64> {
        let m = self.by_size.get(n)?;
        let fresh = step.saturating_sub(m.at_step) <= FRESH_STEPS;
        (m.samples >= MIN_SAMPLES && fresh && m.seconds > 0.0).then(|| n as f64 / m.seconds)
    }

    /// The running-set limit to use instead of `limit` (whose decode step the line predicts
    /// takes `predicted_s`): the smaller size of the best measured rate when it beats the
    /// limit's rate (measured, else predicted) by `BETTER_BY`; `limit` otherwise.
    pub fn best_within(&self, limit: usize, predicted_s: f64, step: u32) -> usize {
        let at_limit = self
            .rate(limit, step)
            .unwrap_or(limit as f64 / predicted_s.max(1e-9));
        (1..limit)
            .filter_map(|n| Some((n, self.rate(n, step)?)))
            .filter(|&(_, rate)| rate > BETTER_BY * at_limit)
            .max_by(|x, y| x.1.total_cmp(&y.1))
            .map_or(limit, |(n, _)| n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn measured(times: &[(usize, f64)]) -> DecodeRates {
        let mut rates = DecodeRates::default();
        for (step, &(n, seconds)) in times.iter().cycle().take(times.len() * 3).enumerate() {
            rates.observe(n, seconds, step as u32);
        }
        rates
    }

    #[test]
    fn a_smaller_batch_that_measured_clearly_faster_is_chosen() {
        // The CPU backend's shape: 4 at 12.7 ms, 8 at 49, 16 at 91.
        let rates = measured(&[(4, 0.0127), (8, 0.049), (16, 0.091)]);
        assert_eq!(rates.best_within(16, 0.09, 10), 4);
        assert_eq!(rates.best_within(3, 0.01, 10), 3, "never above the limit");
    }

    #[test]
    fn on_a_machine_where_batches_pay_the_limit_stands() {
        // 20 ms + 2 ms a sequence: more sequences, more tokens a second.
        let rates = measured(&[(4, 0.028), (8, 0.036), (16, 0.052)]);
        assert_eq!(rates.best_within(20, 0.060, 10), 20);
        // Within the margin: 10% faster is not enough to give up the batch.
        let close = measured(&[(8, 0.080), (16, 0.176)]);
        assert_eq!(close.best_within(16, 0.176, 10), 16);
    }

    #[test]
    fn stale_or_thin_measurements_do_not_count() {
        let rates = measured(&[(4, 0.0127), (16, 0.091)]);
        assert_eq!(rates.best_within(16, 0.09, 10 + FRESH_STEPS), 16);
        let mut once = DecodeRates::default();
        once.observe(4, 0.0127, 0);
        assert_eq!(once.best_within(16, 0.09, 1), 16);
    }
}
