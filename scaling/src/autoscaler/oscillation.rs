//! Adaptive scale-in stabilisation: hold capacity through load that comes back, without
//! paying for it on load that does not.
//!
//! A fixed scale-in window is wrong for someone: short, and on/off load (a batch client that
//! pauses, a crowd that comes and goes) is scaled in at every pause and breaks the SLO at
//! every return, for a cold start each time; long, and every fall is paid for in idle GPUs.
//! So the window is learned per model from what happened after its own scale-ins:
//! - a scale-in **undone** (a scale-out that takes back at least half of it, within
//!   [`REGRET_HORIZON_S`] of its first step) was a mistake the window was too short to avoid: the window grows
//!   to cover that whole dip (the time from the scale-in back to the return, plus the window
//!   that preceded the scale-in) with a margin, at least doubling, up to [`MAX_WINDOW_S`];
//! - a scale-in that **stands** for the horizon was right: the window halves, down to the
//!   spec's `scale_down_stabilization`.
//!
//! It reads only the policy's own decisions (measured history), never a trace's period.

use super::spec::PolicySpec;
use super::state::PolicyState;

/// Load that returns within this long after a scale-in is load that came back; after it, new.
pub const REGRET_HORIZON_S: f64 = 10.0 * 60.0;
/// The longest scale-in window learned: holding through longer dips costs more than a cold
/// start's worth of SLO breaches is worth.
pub const MAX_WINDOW_S: f64 = 10.0 * 60.0;
/// A learned window covers the dip it failed on with this margin (dips vary in length).
const MARGIN: f64 = 1.25;

/// The scale-in stabilisation window in force, seconds.
pub(super) fn window_s(spec: &PolicySpec, state: &PolicyState) -> f64 {
    let base = spec.scale_down_stabilization.as_secs_f64();
    state.scale_in_window_s.unwrap_or(base).max(base)
}

/// Learns from a decision from `current` to `replicas` at `now_s`.
pub(super) fn note(
    spec: &PolicySpec,
    state: &mut PolicyState,
    current: u32,
    replicas: u32,
    now_s: f64,
) {
    let base = spec.scale_down_stabilization.as_secs_f64();
    let window = window_s(spec, state);
    if let Some((at_s, before)) = state.last_scale_in {
        let dip = before.saturating_sub(current);
        // Noise moves a fleet by a replica or so: only a dip of a quarter of the fleet (two
        // replicas at least) taken back by half is load that came back.
        let significant = dip >= 2 && 4 * dip >= before;
        let undone = significant && replicas > current && 2 * (replicas - current) >= dip;
        if undone && now_s - at_s <= REGRET_HORIZON_S {
            // Load came back: the dip lasted from (about) a window before the scale-in to now.
            let dip_s = now_s - at_s + window;
            let grown = (MARGIN * dip_s)
                .max(2.0 * window)
                .min(MAX_WINDOW_S.max(base));
            set(state, grown, base, now_s);
            state.last_scale_in = None;
        } else if now_s - at_s > REGRET_HORIZON_S {
            // The scale-in stood: the window may shrink.
            set(state, (0.5 * window).max(base), base, now_s);
            state.last_scale_in = None;
        }
    }
    if replicas < current && state.last_scale_in.is_none() {
        // A run of scale-in steps is one scale-in: from its first step's time and count.
        state.last_scale_in = Some((now_s, current));
    }
}

fn set(state: &mut PolicyState, window_s: f64, base_s: f64, now_s: f64) {
    let new = (window_s > base_s).then_some(window_s);
    if new != state.scale_in_window_s {
        state.scale_in_window_s = new;
        state.scale_in_window_changed_s = Some(now_s);
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::autoscaler::Slo;

    fn spec() -> PolicySpec {
        let mut spec = PolicySpec::new(
            1,
            100,
            Slo {
                ttft_p95_s: 1.0,
                tpot_p95_s: 0.05,
            },
        );
        spec.scale_down_stabilization = Duration::from_secs(60);
        spec
    }

    #[test]
    fn load_that_comes_back_lengthens_the_window_and_calm_shortens_it() {
        let (spec, mut state) = (spec(), PolicyState::default());
        assert_eq!(window_s(&spec, &state), 60.0);
        // Scaled in 10 → 8 → 6 (a run of steps), back to 10 five minutes after the first.
        note(&spec, &mut state, 10, 8, 1000.0);
        note(&spec, &mut state, 8, 6, 1010.0);
        assert_eq!(state.last_scale_in, Some((1000.0, 10)));
        note(&spec, &mut state, 6, 10, 1300.0);
        let grown = window_s(&spec, &state);
        assert!((grown - 1.25 * (300.0 + 60.0)).abs() < 1e-9, "{grown}");
        // A scale-in that stands for the horizon halves it, down to the spec's.
        note(&spec, &mut state, 10, 6, 5000.0);
        note(&spec, &mut state, 6, 6, 5000.0 + REGRET_HORIZON_S + 1.0);
        assert!((window_s(&spec, &state) - 0.5 * grown).abs() < 1e-9);
        for round in 0..3 {
            let at = 9000.0 + f64::from(round) * 4000.0;
            note(&spec, &mut state, 6, 5, at);
            note(&spec, &mut state, 5, 6, at + REGRET_HORIZON_S + 1.0);
        }
        assert_eq!(window_s(&spec, &state), 60.0);
        assert_eq!(state.scale_in_window_s, None);
    }

    #[test]
    fn growth_is_capped_and_new_load_is_not_a_regret() {
        let (spec, mut state) = (spec(), PolicyState::default());
        for round in 0..10 {
            let t = f64::from(round) * 1000.0;
            note(&spec, &mut state, 10, 5, t);
            note(&spec, &mut state, 5, 10, t + 0.5 * REGRET_HORIZON_S);
        }
        assert_eq!(window_s(&spec, &state), MAX_WINDOW_S);
        // A rise after the horizon, or one that stays below the scaled-in count, is new load.
        let (mut calm, at) = (PolicyState::default(), 50_000.0);
        note(&spec, &mut calm, 10, 5, at);
        note(&spec, &mut calm, 5, 5, at + 10.0);
        note(&spec, &mut calm, 5, 9, at + REGRET_HORIZON_S + 5.0);
        assert_eq!(window_s(&spec, &calm), 60.0);
    }
}
