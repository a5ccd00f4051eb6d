//! The policy's memory as a compact, clock-free record for `status.autoscaler`, so a new
//! leader (another process, another monotonic clock) carries on where the old one stopped
//! instead of relearning capacity and forgetting the scale-down hysteresis.
//!
//! Pure: [`snapshot`] turns a [`PolicyState`] on the caller's monotonic clock into instants on
//! the wall clock; [`restore`] turns them back onto the new caller's clock. Both take "now" on
//! both clocks. Windows of samples keep only what can still change a future answer (see
//! [`staircase`]), so the record stays a handful of entries whatever the period.

use std::collections::VecDeque;

use jiff::Timestamp;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::foresight::{Foresight, ForesightRecord};
use super::state::PolicyState;

/// What the autoscaler remembers about a model, as written into its status. Instants are
/// RFC 3339 (millisecond precision); a value the policy had not learned is absent.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PolicySnapshot {
    /// Learned output tokens/s one replica sustains within the SLO.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity_tokens_per_second_per_replica: Option<f64>,
    /// Output tokens/s per replica at which the SLO last broke under real load (the learned
    /// capacity never probes past it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity_ceiling_tokens_per_second: Option<f64>,
    /// Mean output tokens per request last seen (turns arrivals into tokens/s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mean_output_tokens_per_request: Option<f64>,
    /// Since when the policy has watched the model (its warm-up hold is over a window later).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub watching_since: Option<String>,
    /// Ready replicas at the last decision, and since when that count held.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready: Option<CountSince>,
    /// Since when replicas have been starting with none becoming ready.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending_since: Option<String>,
    /// Requests queued at the last decision (a shrinking queue is spare capacity).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queued_requests: Option<u64>,
    /// Panic mode (a burst being absorbed, no scale-down) lasts until then.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub panic_until: Option<String>,
    /// Since when no demand at all has been seen (for scale to zero).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idle_since: Option<String>,
    /// When a decision last changed the replica count.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_scale: Option<String>,
    /// The adaptive scale-in stabilisation window in force, seconds (absent: the spec's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scale_in_window_seconds: Option<f64>,
    /// When the scale-in window last changed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scale_in_window_changed: Option<String>,
    /// The last scale-in: when, and to how many replicas.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_scale_in: Option<CountSince>,
    /// Replica counts recommended within the scale-down stabilisation window that can still
    /// be its highest (each lower than the one before): a scale-down goes no lower.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub recommendations: Vec<Sample>,
    /// Offered demand of recent periods, output tokens/s (the trend is read from it).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub demand_tokens_per_second: Vec<Sample>,
    /// Short-window output tokens/s per replica of recent periods that can still be the
    /// window's peak (where a broken p95 puts the knee).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub burst_tokens_per_second_per_replica: Vec<Sample>,
    /// The demand history foresight learns recurring demand from (u16 levels per bin at a
    /// few resolutions: a few kilobytes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub foresight: Option<ForesightRecord>,
}

/// A replica count and an instant.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CountSince {
    /// Replicas.
    pub replicas: u32,
    /// When (RFC 3339).
    pub at: String,
}

/// One value of a window of samples, and when it was taken.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Sample {
    /// When (RFC 3339).
    pub at: String,
    /// The value, in the unit the list's name gives.
    pub value: f64,
}

/// "Now" on both clocks: the caller's monotonic seconds and the wall clock.
#[derive(Debug, Clone, Copy)]
pub struct Clocks {
    /// The policy's clock, seconds (what `decide` is given).
    pub now_s: f64,
    /// The wall clock at the same moment.
    pub wall: Timestamp,
}

impl Clocks {
    /// "Now" at `now_s` on the policy clock and `unix_s` seconds since the Unix epoch on the
    /// wall clock (to the millisecond; the epoch itself if out of range). For callers without
    /// a `Timestamp` of their own: `tokenscale up` and the simulator.
    pub fn from_unix_s(now_s: f64, unix_s: f64) -> Self {
        let wall = Timestamp::from_millisecond((unix_s * 1e3).round() as i64).unwrap_or_default();
        Self { now_s, wall }
    }

    /// The wall clock in seconds since the Unix epoch.
    pub fn unix_s(self) -> f64 {
        self.wall.as_millisecond() as f64 / 1e3
    }

    /// The instant `t_s` (policy clock) on the wall clock, to the millisecond.
    fn to_wall(self, t_s: f64) -> Option<String> {
        let offset_ms = ((t_s - self.now_s) * 1e3).round();
        if !offset_ms.is_finite() {
            return None;
        }
        // Saturating: an instant beyond the wall clock's range is dropped below.
        let ms = self.wall.as_millisecond().saturating_add(offset_ms as i64);
        Timestamp::from_millisecond(ms).ok().map(|t| t.to_string())
    }

    /// The wall-clock instant `at` on the policy clock; `None` when it does not parse.
    fn to_policy(self, at: &str) -> Option<f64> {
        let at: Timestamp = at.parse().ok()?;
        let offset_ms = at.as_millisecond() - self.wall.as_millisecond();
        Some(self.now_s + offset_ms as f64 / 1e3)
    }
}

/// The record of `state` for status, its instants on the wall clock of `clocks`.
pub fn snapshot(state: &PolicyState, clocks: Clocks) -> PolicySnapshot {
    let wall = |t: Option<f64>| t.and_then(|t| clocks.to_wall(t));
    let samples = |window: &VecDeque<(f64, f64)>| -> Vec<Sample> {
        window
            .iter()
            .filter(|(_, v)| v.is_finite())
            .filter_map(|&(t, value)| {
                Some(Sample {
                    at: clocks.to_wall(t)?,
                    value,
                })
            })
            .collect()
    };
    let recommendations: VecDeque<(f64, f64)> = staircase(&state.recommendations)
        .into_iter()
        .map(|(t, r)| (t, f64::from(r)))
        .collect();
    let burst = staircase(&state.burst_history);
    let finite = |v: Option<f64>| v.filter(|v| v.is_finite());
    PolicySnapshot {
        capacity_tokens_per_second_per_replica: finite(state.capacity_tokens_per_s_per_replica),
        capacity_ceiling_tokens_per_second: finite(state.capacity_ceiling_tokens_per_s),
        mean_output_tokens_per_request: finite(state.mean_output_tokens),
        watching_since: wall(state.first_seen_s),
        ready: state.ready_count.and_then(|replicas| {
            Some(CountSince {
                replicas,
                at: clocks.to_wall(state.ready_since_s)?,
            })
        }),
        pending_since: wall(state.pending_since_s),
        queued_requests: state.last_queued_requests,
        panic_until: wall(state.panic_until_s),
        idle_since: wall(state.idle_since_s),
        last_scale: wall(state.last_scale_s),
        scale_in_window_seconds: finite(state.scale_in_window_s),
        scale_in_window_changed: wall(state.scale_in_window_changed_s),
        last_scale_in: state.last_scale_in.and_then(|(t, replicas)| {
            Some(CountSince {
                replicas,
                at: clocks.to_wall(t)?,
            })
        }),
        recommendations: samples(&recommendations),
        demand_tokens_per_second: samples(&state.demand_history),
        burst_tokens_per_second_per_replica: samples(&burst),
        foresight: state.foresight.to_record(|t| clocks.to_wall(t)),
    }
}

/// The policy state `snapshot` describes, its instants on the policy clock of `clocks`. An
/// instant that does not parse is treated as never set (the policy relearns that part).
pub fn restore(snapshot: &PolicySnapshot, clocks: Clocks) -> PolicyState {
    let policy = |at: &Option<String>| at.as_deref().and_then(|at| clocks.to_policy(at));
    let samples = |list: &[Sample]| -> VecDeque<(f64, f64)> {
        list.iter()
            .filter_map(|s| Some((clocks.to_policy(&s.at)?, s.value)))
            .collect()
    };
    let count = |c: &Option<CountSince>| {
        c.as_ref()
            .and_then(|c| Some((clocks.to_policy(&c.at)?, c.replicas)))
    };
    let ready = count(&snapshot.ready);
    PolicyState {
        capacity_tokens_per_s_per_replica: snapshot.capacity_tokens_per_second_per_replica,
        capacity_ceiling_tokens_per_s: snapshot.capacity_ceiling_tokens_per_second,
        panic_until_s: policy(&snapshot.panic_until),
        idle_since_s: policy(&snapshot.idle_since),
        last_scale_s: policy(&snapshot.last_scale),
        first_seen_s: policy(&snapshot.watching_since),
        ready_count: ready.map(|(_, replicas)| replicas),
        ready_since_s: ready.map_or(0.0, |(t, _)| t),
        recommendations: samples(&snapshot.recommendations)
            .into_iter()
            .map(|(t, r)| (t, r.round().clamp(0.0, f64::from(u32::MAX)) as u32))
            .collect(),
        mean_output_tokens: snapshot.mean_output_tokens_per_request,
        pending_since_s: policy(&snapshot.pending_since),
        last_queued_requests: snapshot.queued_requests,
        demand_history: samples(&snapshot.demand_tokens_per_second),
        burst_history: samples(&snapshot.burst_tokens_per_second_per_replica),
        scale_in_window_s: snapshot.scale_in_window_seconds,
        last_scale_in: count(&snapshot.last_scale_in),
        scale_in_window_changed_s: policy(&snapshot.scale_in_window_changed),
        batch_required_history: VecDeque::new(),
        foresight: snapshot
            .foresight
            .as_ref()
            .map(|record| Foresight::from_record(record, |at| clocks.to_policy(at)))
            .unwrap_or_default(),
    }
}

/// The samples of a time-ordered window that can still be its highest value as older ones
/// expire: those above every later sample. The window's maximum from now on is the same
/// over them as over all samples, so they stand for the window exactly.
fn staircase<T: PartialOrd + Copy>(window: &VecDeque<(f64, T)>) -> VecDeque<(f64, T)> {
    let mut kept = VecDeque::new();
    for &(t, v) in window.iter().rev() {
        if kept.front().is_none_or(|&(_, later)| v > later) {
            kept.push_front((t, v));
        }
    }
    kept
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::autoscaler::{Demand, Observations, PolicySpec, Slo, WindowedRate, decide};

    fn spec() -> PolicySpec {
        let mut spec = PolicySpec::new(
            1,
            20,
            Slo {
                ttft_p95_s: 1.0,
                tpot_p95_s: 0.05,
            },
        );
        spec.initial_tokens_per_s_per_gpu = Some(400.0);
        spec.scale_down_stabilization = Duration::from_secs(120);
        spec
    }

    /// Period `i` of a day with a rise, a burst, a knee that breaks and a fall: enough to
    /// move every part of the state.
    fn observation(i: u32, ready: u32) -> Observations {
        let tokens = match i {
            0..=9 => 600.0 + 80.0 * f64::from(i),
            10..=14 => 2_400.0,
            15..=24 => 1_500.0,
            _ => 300.0,
        };
        let per_replica = tokens / f64::from(ready.max(1));
        // Latency reaches the SLO at 500 tokens/s per replica.
        let ratio = 0.3 + 0.7 * (per_replica / 500.0).powi(2);
        Observations {
            ready_replicas: ready,
            pending_replicas: 0,
            current_replicas: ready,
            demand: Some(Demand {
                output_tokens_per_s: WindowedRate {
                    stable: tokens,
                    panic: tokens * if i == 11 { 1.6 } else { 1.0 },
                },
                arrival_requests_per_s: WindowedRate {
                    stable: tokens / 200.0,
                    panic: tokens / 200.0,
                },
                mean_output_tokens_per_request: Some(200.0),
                queued_requests: u64::from(i % 3),
                running_requests: 10,
                completed_requests: 100,
                ..Demand::default()
            }),
            ttft_p95_s: Some(ratio),
            tpot_p95_s: Some(0.05 * ratio),
            replica_loads: Vec::new(),
            concurrency_cap: None,
        }
    }

    fn wall(unix_s: i64) -> Timestamp {
        Timestamp::from_second(unix_s).expect("in range")
    }

    /// The policy run for `periods` of 10 s on a clock starting at `start_s`, the replicas it
    /// asks for ready by the next period; returns each decision's replicas and message.
    fn run(
        state: &mut PolicyState,
        start_s: f64,
        from: u32,
        periods: u32,
        ready: u32,
    ) -> Vec<(u32, String)> {
        let spec = spec();
        let mut ready = ready;
        let mut out = Vec::new();
        for i in from..from + periods {
            let now_s = start_s + 10.0 * f64::from(i);
            let decision = decide(&spec, &observation(i, ready), state, now_s);
            ready = decision.replicas;
            out.push((decision.replicas, decision.message));
        }
        out
    }

    #[test]
    fn a_restored_state_decides_as_the_original_on_the_same_observations() {
        // Leader A's clock starts at 0; it runs 12 periods (rise and burst) and writes a
        // snapshot at t = 110 s, 2027-01-15T08:00:00Z on the wall.
        let mut original = PolicyState::new(&spec());
        let before = run(&mut original, 0.0, 0, 12, 2);
        let ready = before.last().map(|(r, _)| *r).expect("decided");
        let a = Clocks {
            now_s: 110.0,
            wall: wall(1_800_000_000),
        };
        let record = snapshot(&original, a);
        // The record goes through JSON, as status does.
        let json = serde_json::to_string(&record).expect("serialises");
        let record: PolicySnapshot = serde_json::from_str(&json).expect("parses");
        // Leader B's clock reads 5 000 s at the same wall instant.
        let b = Clocks {
            now_s: 5_000.0,
            wall: wall(1_800_000_000),
        };
        let mut restored = restore(&record, b);
        assert_eq!(
            restored.capacity_tokens_per_s_per_replica,
            original.capacity_tokens_per_s_per_replica
        );
        let next_original = run(&mut original, 0.0, 12, 30, ready);
        let next_restored = run(&mut restored, 5_000.0 - 110.0, 12, 30, ready);
        assert_eq!(next_original, next_restored);
        let replicas: Vec<u32> = next_original.iter().map(|(r, _)| *r).collect();
        assert!(
            replicas.windows(2).any(|w| w[1] < w[0]),
            "the run scales down, so the stabilisation memory was exercised: {replicas:?}"
        );
    }

    #[test]
    fn instants_move_to_the_new_clock_and_windows_keep_only_what_can_still_matter() {
        let mut state = PolicyState {
            panic_until_s: Some(130.0),
            idle_since_s: Some(40.5),
            last_scale_in: Some((90.0, 3)),
            scale_in_window_s: Some(180.0),
            ..PolicyState::default()
        };
        state.recommendations = [(10.0, 5), (20.0, 7), (30.0, 4), (40.0, 6), (50.0, 2)]
            .into_iter()
            .collect();
        let a = Clocks {
            now_s: 100.0,
            wall: wall(1_800_000_000),
        };
        let record = snapshot(&state, a);
        assert_eq!(record.panic_until.as_deref(), Some("2027-01-15T08:00:30Z"));
        assert_eq!(record.idle_since.as_deref(), Some("2027-01-15T07:59:00.5Z"));
        let kept: Vec<f64> = record.recommendations.iter().map(|s| s.value).collect();
        assert_eq!(
            kept,
            [7.0, 6.0, 2.0],
            "5 and 4 can never be the highest again"
        );
        let restored = restore(
            &record,
            Clocks {
                now_s: 7.0,
                wall: wall(1_800_000_010),
            },
        );
        assert_eq!(
            restored.panic_until_s,
            Some(27.0),
            "still 20 s of panic left"
        );
        assert_eq!(restored.idle_since_s, Some(-62.5));
        assert_eq!(restored.last_scale_in, Some((-13.0, 3)));
        assert_eq!(restored.scale_in_window_s, Some(180.0));
        assert_eq!(
            restored.recommendations,
            [(-83.0, 7), (-63.0, 6), (-53.0, 2)]
        );
    }

    #[test]
    fn an_unreadable_instant_is_forgotten_not_fatal() {
        let record = PolicySnapshot {
            capacity_tokens_per_second_per_replica: Some(321.0),
            panic_until: Some("soon".into()),
            ..PolicySnapshot::default()
        };
        let clocks = Clocks {
            now_s: 0.0,
            wall: wall(1_800_000_000),
        };
        let state = restore(&record, clocks);
        assert_eq!(state.panic_until_s, None);
        assert_eq!(state.capacity_tokens_per_s_per_replica, Some(321.0));
        assert_eq!(
            snapshot(&PolicyState::default(), clocks),
            PolicySnapshot::default()
        );
    }
}
