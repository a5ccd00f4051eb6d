//! Foresight on synthetic series: recurrence is learned and predicted one lead time ahead,
//! noise, a one-off step and a ramp predict nothing, the policy pre-warms and holds for a
//! predicted rise, and the history survives a failover through the snapshot.

use jiff::Timestamp;

use super::super::edge_tests::{obs, spec};
use super::super::{
    Clocks, DecisionReason, PolicySnapshot, PolicyState, decide, restore, snapshot,
};
use super::*;

const DAY_S: f64 = 86_400.0;
/// Samples every decision period.
const PERIOD_S: f64 = 15.0;

/// Deterministic noise in [-1, 1) (xorshift).
struct Noise(u64);

impl Noise {
    fn next(&mut self) -> f64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 >> 11) as f64 / (1u64 << 52) as f64 - 1.0
    }
}

/// Records `level(t)` with ±`noise` relative noise every period over `[from_s, to_s)`.
fn feed(f: &mut Foresight, from_s: f64, to_s: f64, noise: f64, level: impl Fn(f64) -> f64) {
    let mut rng = Noise(0x9E37_79B9_7F4A_7C15 ^ from_s.to_bits());
    let mut t = from_s;
    while t < to_s {
        f.record(t, level(t) * (1.0 + noise * rng.next()));
        t += PERIOD_S;
    }
}

/// A working day: 100 tokens/s at night, up to 1,000 from 08:00 to 10:00, down from 17:00
/// to 19:00.
fn working_day(t_s: f64) -> f64 {
    let h = t_s.rem_euclid(DAY_S) / 3600.0;
    let up = ((h - 8.0) / 2.0).clamp(0.0, 1.0);
    let down = ((h - 17.0) / 2.0).clamp(0.0, 1.0);
    100.0 + 900.0 * (up - down)
}

/// On/off load: 3 minutes at 8,000 tokens/s, 3 minutes at 1,000.
fn on_off(t_s: f64) -> f64 {
    if t_s.rem_euclid(360.0) < 180.0 {
        8_000.0
    } else {
        1_000.0
    }
}

#[test]
fn a_daily_curve_is_learned_in_two_days_and_predicts_the_morning_rise_one_lead_ahead() {
    let mut f = Foresight::default();
    let morning = 2.0 * DAY_S + 7.0 * 3600.0 + 50.0 * 60.0;
    feed(&mut f, 0.0, DAY_S + 7.0 * 3600.0, 0.05, working_day);
    assert_eq!(
        f.peak(DAY_S + 7.0 * 3600.0, DAY_S + 9.0 * 3600.0),
        None,
        "one day is no evidence"
    );
    feed(&mut f, DAY_S + 7.0 * 3600.0, morning, 0.05, working_day);
    assert_eq!(f.period_s(), Some(DAY_S));
    // At 07:50, a lead of 30 minutes ahead: the rise to 250 tokens/s by 08:20.
    let p = f
        .peak(morning, morning + 1800.0)
        .expect("a rise is predicted");
    assert!((220.0..=280.0).contains(&p.tokens_per_s), "{p:?}");
    assert!(
        p.at_s > morning + 1500.0,
        "the highest point is the end of the lead: {p:?}"
    );
    // At night nothing rises: the prediction stays at the night's level.
    let night = 2.0 * DAY_S + 3.0 * 3600.0 - morning;
    let quiet = f.peak(morning + night, morning + night + 1800.0);
    assert!(quiet.is_none_or(|p| p.tokens_per_s < 130.0), "{quiet:?}");
}

#[test]
fn an_on_off_cycle_of_minutes_is_learned() {
    let mut f = Foresight::default();
    let now = 4.0 * 360.0 - 60.0;
    feed(&mut f, 0.0, now, 0.1, on_off);
    assert_eq!(f.period_s(), Some(360.0));
    let p = f.peak(now, now + 90.0).expect("the next on is predicted");
    assert!(p.tokens_per_s > 6_000.0, "{p:?}");
    assert!(
        p.at_s > now + 60.0,
        "predicted when it comes, not before: {p:?}"
    );
}

#[test]
fn white_noise_a_one_off_step_and_a_ramp_predict_nothing() {
    let series: [Series; 3] = [
        ("white noise", |_| 500.0, 0.4),
        (
            "a one-off step",
            |t| if t < 6.0 * 3600.0 { 200.0 } else { 800.0 },
            0.1,
        ),
        ("a ramp", |t| 100.0 + t / 10.0, 0.05),
    ];
    for (name, level, noise) in series {
        let mut f = Foresight::default();
        let mut t = 0.0;
        while t < 2.0 * DAY_S {
            feed(&mut f, t, t + 600.0, noise, level);
            t += 600.0;
            assert_eq!(
                f.peak(t, t + 3600.0),
                None,
                "{name} predicted something at {t} s"
            );
        }
    }
}

/// A named level over time and its relative noise.
type Series = (&'static str, fn(f64) -> f64, f64);

/// A policy state that has seen `cycles` of the on/off load up to `now_s`.
fn learned(cycles_until_s: f64) -> PolicyState {
    let mut state = PolicyState::new(&spec()).seen_since(-10_000.0);
    feed(&mut state.foresight, 0.0, cycles_until_s, 0.05, on_off);
    state
}

#[test]
fn the_policy_pre_warms_one_lead_ahead_and_holds_for_a_rise_within_the_scale_in_window() {
    let spec = spec();
    // 60 s before the fourth "on": its 8,000 tokens/s need 10 replicas at 1,000 × 0.8.
    let now = 4.0 * 360.0 - 60.0;
    let mut state = learned(now);
    state.note_wall_clock(Clocks::from_unix_s(now, 1_800_000_000.0));
    let d = decide(&spec, &obs(2, 0, 1_000.0), &mut state, now);
    assert_eq!(
        (d.reason, d.replicas),
        (DecisionReason::PreWarm, 10),
        "{}",
        d.message
    );
    assert!(
        d.message
            .contains("pre-warming for the predicted rise at 08:00"),
        "{}",
        d.message
    );

    // 110 s before it (past the lead, within it and the scale-in window) 10 replicas hold.
    let now = 4.0 * 360.0 - 110.0;
    let mut state = learned(now);
    let d = decide(&spec, &obs(10, 0, 1_000.0), &mut state, now);
    assert_eq!(
        (d.reason, d.replicas),
        (DecisionReason::HoldPredictedRise, 10),
        "{}",
        d.message
    );

    // Foresight off: the same moment scales in.
    let mut off = spec.clone();
    off.foresight = false;
    let mut state = learned(now);
    let d = decide(&off, &obs(10, 0, 1_000.0), &mut state, now);
    assert_eq!(d.reason, DecisionReason::ScaleDown, "{}", d.message);
}

#[test]
fn the_history_survives_a_failover_through_the_snapshot() {
    let now = 4.0 * 360.0 - 60.0;
    let state = learned(now);
    let wall = Timestamp::from_second(1_800_000_000).expect("in range");
    let record = snapshot(&state, Clocks { now_s: now, wall });
    let json = serde_json::to_string(&record).expect("serialises");
    assert!(
        json.len() < 8_000,
        "status stays small: {} bytes",
        json.len()
    );
    let record: PolicySnapshot = serde_json::from_str(&json).expect("parses");
    // The new leader's clock reads 50,000 s at the same instant.
    let restored = restore(
        &record,
        Clocks {
            now_s: 50_000.0,
            wall,
        },
    );
    assert_eq!(restored.recurring_period_s(), Some(360.0));
    let before = state.foresight.peak(now, now + 90.0).expect("predicted");
    let after = restored
        .foresight
        .peak(50_000.0, 50_000.0 + 90.0)
        .expect("still predicted");
    assert!(
        (after.tokens_per_s - before.tokens_per_s).abs() < 1.0,
        "{before:?} {after:?}"
    );
    assert!((after.at_s - 50_000.0 - (before.at_s - now)).abs() < 1e-6);
}

#[test]
fn levels_round_trip_through_base64() {
    for values in [
        vec![],
        vec![0u16],
        vec![1, 65535],
        vec![7, 300, 65534],
        (0..1000).collect(),
    ] {
        assert_eq!(record::decode(&record::encode(&values)), Some(values));
    }
    assert_eq!(record::decode("not base64!"), None);
}
