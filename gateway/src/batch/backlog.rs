//! What running batches ask of a model's replicas: output tokens left, and the output
//! tokens per second that finish every batch by its deadline (what the autoscaler compares
//! with the capacity interactive traffic leaves).

use std::collections::BTreeMap;

/// One unfinished batch: its model, output tokens left, and its deadline (seconds since the
/// epoch).
#[derive(Debug, Clone, PartialEq)]
pub struct Due {
    /// The model its lines use.
    pub model: String,
    /// Output tokens its unanswered lines may generate.
    pub tokens: u64,
    /// When its window ends.
    pub deadline_s: u64,
    /// Its window, in seconds (the finalising margin is a part of it).
    pub window_s: u64,
}

/// Time kept at the end of a window for writing the output files and for the estimate
/// being off: 5% of the window, at most 10 minutes.
pub fn margin_s(window_s: u64) -> u64 {
    (window_s / 20).min(600)
}

/// Per model: (tokens left, output tokens/s needed). The rate is the most, over the
/// deadlines `d` of the model's batches, of what is due by `d` over the time left before
/// `d` less its margin: a batch due soon behind a large one due later needs its own rate.
/// A deadline already inside its margin counts as one second away (as fast as possible).
pub fn required(now_s: u64, due: &[Due]) -> BTreeMap<String, (u64, f64)> {
    let mut by_model: BTreeMap<String, Vec<&Due>> = BTreeMap::new();
    for d in due.iter().filter(|d| d.tokens > 0) {
        by_model.entry(d.model.clone()).or_default().push(d);
    }
    by_model
        .into_iter()
        .map(|(model, mut batches)| {
            batches.sort_by_key(|d| d.deadline_s.saturating_sub(margin_s(d.window_s)));
            let (mut due_by, mut rate) = (0u64, 0f64);
            for d in &batches {
                due_by += d.tokens;
                let end = d.deadline_s.saturating_sub(margin_s(d.window_s));
                let left = end.saturating_sub(now_s).max(1);
                rate = rate.max(due_by as f64 / left as f64);
            }
            (model, (due_by, rate))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn due(model: &str, tokens: u64, deadline_s: u64) -> Due {
        Due {
            model: model.into(),
            tokens,
            deadline_s,
            window_s: 2000,
        }
    }

    #[test]
    fn the_rate_is_the_tightest_deadline_with_everything_due_before_it() {
        // Margin 100 s. One batch: 9000 tokens over 1000 − 100 − 0 s.
        let one = required(0, &[due("m", 9000, 1000)]);
        assert_eq!(one["m"].0, 9000);
        assert!((one["m"].1 - 10.0).abs() < 1e-9);
        // A small batch due soon needs more than the large one due later.
        let two = required(0, &[due("m", 100_000, 10_100), due("m", 4000, 300)]);
        assert_eq!(two["m"].0, 104_000);
        assert!((two["m"].1 - 20.0).abs() < 1e-9, "{:?}", two);
        // Models apart; finished batches ask nothing.
        let apart = required(0, &[due("a", 900, 1000), due("b", 0, 1000)]);
        assert!(apart.contains_key("a") && !apart.contains_key("b"));
    }

    #[test]
    fn a_deadline_inside_its_margin_asks_for_everything_now() {
        let late = required(950, &[due("m", 500, 1000)]);
        assert!((late["m"].1 - 500.0).abs() < 1e-9);
    }
}
