//! What foresight asks of the policy this period: replicas to pre-warm for a rise predicted
//! within the lead time, and a floor under scale-in for a rise predicted within the lead time
//! plus the scale-in window (replicas let go now would have to be ordered back before it).

use super::super::spec::PolicySpec;
use super::Foresight;

/// A predicted rise above what the policy plans for now.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Ahead {
    /// Replicas the highest demand predicted within the lead time needs (0: no rise there).
    pub prewarm_replicas: u32,
    /// That demand, tokens/s.
    pub prewarm_tokens_per_s: f64,
    /// Replicas the highest demand predicted within the lead time and the scale-in window
    /// needs: no scale-in below them.
    pub hold_replicas: u32,
    /// That demand, tokens/s.
    pub hold_tokens_per_s: f64,
    /// How far ahead the rise is predicted, seconds.
    pub rise_in_s: f64,
    /// When, on the wall clock (seconds since the Unix epoch), if the caller told it.
    pub rise_at_unix_s: Option<f64>,
    /// The period it recurs with, seconds.
    pub period_s: f64,
}

/// The rise `foresight` predicts above `planned_tokens_per_s` (what the measured demand
/// asks for) over the next lead time (`spec.startup_time` and a period) and scale-in window
/// `window_s`; `None` when it predicts none, foresight is off, or capacity is unknown.
pub(crate) fn ahead(
    spec: &PolicySpec,
    foresight: &Foresight,
    capacity: Option<f64>,
    planned_tokens_per_s: f64,
    window_s: f64,
    now_s: f64,
) -> Option<Ahead> {
    if !spec.foresight {
        return None;
    }
    let per_replica = capacity.filter(|c| *c > 0.0)? * spec.target_utilization;
    // The history holds the stable window's mean, which trails the demand by half a window:
    // the demand at `t` was recorded at `t + shift`.
    let shift_s = 0.5 * spec.stable_window.as_secs_f64();
    let lead_s = spec.startup_time.as_secs_f64() + spec.period.as_secs_f64();
    let from_s = now_s + shift_s;
    let hold = foresight.peak(from_s, from_s + lead_s + window_s)?;
    if hold.tokens_per_s <= planned_tokens_per_s {
        return None;
    }
    let prewarm = foresight
        .peak(from_s, from_s + lead_s)
        .filter(|p| p.tokens_per_s > planned_tokens_per_s);
    let replicas = |tokens_per_s: f64| (tokens_per_s / per_replica).ceil().min(1e6) as u32;
    let rise = prewarm.unwrap_or(hold);
    let rise_in_s = (rise.at_s - shift_s - now_s).max(0.0);
    Some(Ahead {
        prewarm_replicas: prewarm.map_or(0, |p| replicas(p.tokens_per_s)),
        prewarm_tokens_per_s: prewarm.map_or(0.0, |p| p.tokens_per_s),
        hold_replicas: replicas(hold.tokens_per_s),
        hold_tokens_per_s: hold.tokens_per_s,
        rise_in_s,
        rise_at_unix_s: foresight.wall_offset_s.map(|o| now_s + rise_in_s + o),
        period_s: rise.period_s,
    })
}

impl Ahead {
    /// When the rise is predicted, in words: `HH:MM` (UTC) when the wall clock is known,
    /// else how far ahead.
    pub(crate) fn when(&self) -> String {
        match self.rise_at_unix_s {
            Some(unix_s) => {
                let minute = (unix_s / 60.0).floor().rem_euclid(24.0 * 60.0) as u32;
                format!("{:02}:{:02}", minute / 60, minute % 60)
            }
            None => format!("in {:.0} s", self.rise_in_s),
        }
    }
}

/// The interactive replicas and planned demand with the pre-warm for `ahead` in: the higher
/// of what the measured demand and the predicted one ask for.
pub(crate) fn prewarmed(
    ahead: Option<&Ahead>,
    interactive: u32,
    planned_tokens_per_s: f64,
) -> (u32, f64) {
    match ahead {
        Some(a) if a.prewarm_replicas > interactive => (
            a.prewarm_replicas,
            planned_tokens_per_s.max(a.prewarm_tokens_per_s),
        ),
        _ => (interactive, planned_tokens_per_s),
    }
}

/// The fewest replicas a scale-in may leave before a predicted rise (0: no rise ahead),
/// never more than the `current` ones.
pub(crate) fn scale_in_floor(ahead: Option<&Ahead>, current: u32) -> u32 {
    ahead.map_or(0, |a| a.hold_replicas.min(current))
}
