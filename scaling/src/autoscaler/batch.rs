//! Batch API work in the sizing: the replicas running batches need beyond the capacity
//! interactive traffic leaves them.
//!
//! The gateway runs batch lines only on capacity interactive traffic leaves, and exports per
//! model the output tokens/s that finish every running batch by its deadline: the backlog
//! spread evenly over the time left. That is the least steady throughput that still finishes
//! in time, so sizing for it adds as few replicas as the window allows; and it is compared
//! with the idle capacity every period, so replicas are added only once the idle capacity no
//! longer covers it, as late as the window allows (a batch that falls behind raises its own
//! required rate as its deadline nears, and is caught up then).
//!
//! Idle capacity is counted at the learned knee `C`, not at `C × targetUtilization`: batch
//! lines yield to interactive ones (lower priority in the engines, none sent while interactive
//! requests queue), so the headroom the target keeps for bursts carries batch work between
//! bursts and is taken back by them. At `C × u` the idle figure would swing between zero and a
//! replica from one period to the next with the rounding of the interactive count, and an
//! ample batch would add a replica whenever the rounding happened to be tight.

use super::observations::BatchDemand;

/// What running batches ask of the fleet on top of interactive demand.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct BatchNeed {
    /// Output tokens/s the batches need to finish by their deadlines.
    pub required_tokens_per_s: f64,
    /// Capacity the interactive replicas leave idle, output tokens/s.
    pub idle_tokens_per_s: f64,
    /// Replicas to add for batch work on top of the interactive ones.
    pub replicas: u32,
}

/// The batch need when the interactive sizing wants `interactive_replicas` for
/// `interactive_tokens_per_s` (both as planned, backlog drain included), one replica sustains
/// `capacity_tokens_per_s` within the SLO, and a new replica takes `startup_s` to serve.
pub(super) fn need(
    batch: &BatchDemand,
    interactive_replicas: u32,
    interactive_tokens_per_s: f64,
    capacity_tokens_per_s: f64,
    startup_s: f64,
) -> BatchNeed {
    let required = finite_or_zero(batch.required_output_tokens_per_s);
    let idle = (f64::from(interactive_replicas) * capacity_tokens_per_s - interactive_tokens_per_s)
        .max(0.0);
    let none = BatchNeed {
        required_tokens_per_s: required,
        idle_tokens_per_s: idle,
        replicas: 0,
    };
    if required <= idle || capacity_tokens_per_s <= 0.0 {
        return none;
    }
    // Replicas ordered now serve only after their startup `s`. Over a horizon `H` the idle
    // capacity serves `idle × H` and the added ones carry the rest in `H − s`:
    // k × C × (H − s) ≥ backlog − idle × H. `H` is the time left `T` (= backlog / required)
    // while that is at least two startups; closer to the deadline, replicas cannot make it
    // anyway and `H` stays at two startups: they are ordered only for what the idle capacity
    // would not serve by then. (Aiming at `T` there asked for hundreds of replicas when a
    // batch paced to end at its deadline had a few tokens left at the last second.)
    let backlog = finite_or_zero(batch.backlog_output_tokens);
    let shortfall_tokens_per_s = if backlog > 0.0 {
        let horizon_s = (backlog / required).max(2.0 * startup_s);
        (backlog - idle * horizon_s).max(0.0) / (horizon_s - startup_s)
    } else {
        // No backlog figure: the rate alone, from now.
        required - idle
    };
    let replicas = (shortfall_tokens_per_s / capacity_tokens_per_s)
        .ceil()
        .min(f64::from(u32::MAX)) as u32;
    BatchNeed { replicas, ..none }
}

fn finite_or_zero(value: f64) -> f64 {
    if value.is_finite() {
        value.max(0.0)
    } else {
        0.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch(required: f64, backlog: f64) -> BatchDemand {
        BatchDemand {
            required_output_tokens_per_s: required,
            backlog_output_tokens: backlog,
            ..BatchDemand::default()
        }
    }

    /// 10 interactive replicas of 1,000 tokens/s carry 8,500 tokens/s: 1,500 are idle.
    const C: f64 = 1_000.0;

    #[test]
    fn an_ample_window_adds_nothing() {
        // 24 h to serve 100M tokens: 1,157 tokens/s, under the 1,500 idle.
        let b = batch(100e6 / 86_400.0, 100e6);
        let n = need(&b, 10, 8_500.0, C, 60.0);
        assert_eq!(n.replicas, 0);
        assert_eq!(n.idle_tokens_per_s, 1_500.0);
        assert_eq!(
            need(&BatchDemand::default(), 10, 8_500.0, C, 60.0).replicas,
            0
        );
    }

    #[test]
    fn a_tight_window_adds_the_shortfall_and_no_more() {
        // 4,000 tokens/s for 10 h: 2,500 over the idle, 2.5 replicas → 3 (the startup lift of
        // 60 s over 10 h changes nothing here).
        let b = batch(4_000.0, 4_000.0 * 36_000.0);
        assert_eq!(need(&b, 10, 8_500.0, C, 60.0).replicas, 3);
        // Exactly covered: nothing; a token/s more: one replica.
        assert_eq!(need(&batch(1_500.0, 1e9), 10, 8_500.0, C, 60.0).replicas, 0);
        assert_eq!(need(&batch(1_501.0, 1e9), 10, 8_500.0, C, 60.0).replicas, 1);
    }

    #[test]
    fn little_time_left_counts_the_startup() {
        // 600 s left, 60 s startup: the added replicas serve for 540 s, so 1,850 short needs
        // 1,850 × 600 / 540 = 2,056 tokens/s → 3 replicas, where 2 would do from now.
        let b = batch(3_350.0, 3_350.0 * 600.0);
        assert_eq!(need(&b, 10, 8_500.0, C, 60.0).replicas, 3);
        assert_eq!(need(&b, 10, 8_500.0, C, 0.0).replicas, 2);
        // 30 s left (the gateway says one second once inside its margin): nothing the idle
        // 1,500 tokens/s serve within two startups (180,000 tokens) asks for a replica ...
        let b = batch(4_000.0, 4_000.0 * 30.0);
        assert_eq!(need(&b, 10, 8_500.0, C, 60.0).replicas, 0);
        assert_eq!(
            need(&batch(5_000.0, 5_000.0), 10, 8_500.0, C, 60.0).replicas,
            0
        );
        // ... the rest does, to be done a startup after they are ready: 2.82M over 60 s.
        let b = batch(100_000.0, 3e6);
        assert_eq!(need(&b, 10, 8_500.0, C, 60.0).replicas, 47);
    }

    #[test]
    fn with_no_interactive_replicas_everything_is_batch() {
        let n = need(&batch(2_500.0, 1e8), 0, 0.0, C, 60.0);
        assert_eq!((n.idle_tokens_per_s, n.replicas), (0.0, 3));
        // Interactive demand over its replicas' knee (a backlog): nothing idle, not negative.
        assert_eq!(
            need(&batch(500.0, 1e8), 2, 2_400.0, C, 60.0).idle_tokens_per_s,
            0.0
        );
    }

    #[test]
    fn nonsense_figures_add_nothing_or_saturate() {
        for required in [f64::NAN, f64::INFINITY, -5.0] {
            assert_eq!(need(&batch(required, 1e6), 1, 0.0, C, 60.0).replicas, 0);
        }
        assert_eq!(need(&batch(500.0, 1e6), 1, 0.0, 0.0, 60.0).replicas, 0);
        assert_eq!(
            need(&batch(1e300, 1e301), 0, 0.0, C, 60.0).replicas,
            u32::MAX
        );
    }
}
