//! SLO attainment and goodput: each scaling period's p95s judged against the SLO, kept per
//! wall-clock minute for the last hour and per hour for the last day, compact enough to live
//! in `status.slo.history` (so a new leader keeps the story) and read back by `tokenscale up`.
//!
//! **How a minute is judged.** A period meets the SLO when its p95 TTFT and p95 TPOT are both
//! within their targets; a period with no finished request (no p95) meets it, since nobody
//! waited. A minute is met when every judged period in it met the SLO. A period whose metrics
//! could not be read is not judged: a minute with no judged period (metrics missing, or no
//! operator running) counts neither way. Attainment is met minutes ÷ judged minutes.
//!
//! **Goodput** is output tokens/s served in met minutes per GPU held: the sum over the last
//! hour's judged minutes of each met minute's mean output tokens/s, divided by the sum of
//! each judged minute's mean GPUs held (ready replicas × GPUs per replica; a CPU replica
//! counts as one). Tokens served in a missed minute are not good, and GPUs held in it count.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::autoscaler::Slo;

/// Minutes kept one by one (the last hour).
const MINUTES: usize = 60;
/// Minutes in the day the older per-hour counts cover.
const DAY_MINUTES: i64 = 24 * 60;

/// One scaling period as the SLO sees it.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct PeriodSample {
    /// p95 time to first token, seconds; `None`: no request finished.
    pub ttft_p95_s: Option<f64>,
    /// p95 time per output token, seconds; `None`: no request finished.
    pub tpot_p95_s: Option<f64>,
    /// Output tokens/s served; `None`: metrics missing (the period is not judged).
    pub output_tokens_per_s: Option<f64>,
    /// GPUs held by ready replicas (a CPU replica counts as one).
    pub gpus: f64,
}

impl PeriodSample {
    /// Whether both p95s are within `slo` (an absent p95 is: no one waited).
    pub fn met(&self, slo: &Slo) -> bool {
        self.ttft_p95_s.is_none_or(|v| v <= slo.ttft_p95_s)
            && self.tpot_p95_s.is_none_or(|v| v <= slo.tpot_p95_s)
    }
}

/// Minute-by-minute SLO record of one model, as kept in status.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SloHistory {
    /// The minute of the first character of `minutes`, in minutes since the Unix epoch.
    #[serde(default)]
    pub first_minute: i64,
    /// One character per minute from `first_minute` (at most the last 60): `1` met, `0`
    /// missed, `-` not judged (metrics missing, or the operator not running).
    #[serde(default)]
    pub minutes: String,
    /// Per minute of `minutes`: mean output tokens/s served if the minute was met, else 0.
    #[serde(default)]
    pub good_tokens_per_second: Vec<f64>,
    /// Per minute of `minutes`: mean GPUs held.
    #[serde(default)]
    pub gpus: Vec<f64>,
    /// Periods folded into the last minute so far (to average the next one in).
    #[serde(default)]
    pub periods_in_last_minute: u32,
    /// Minutes older than `minutes`, counted per hour, for the last day.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hours: Vec<HourCount>,
}

/// Judged and met minutes of one hour.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HourCount {
    /// The hour, in hours since the Unix epoch.
    pub hour: i64,
    /// Minutes judged.
    pub judged: u32,
    /// Minutes met.
    pub met: u32,
}

/// What the history says now.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Attainment {
    /// Share (0–1) of the last hour's judged minutes that met the SLO; `None`: none judged.
    pub last_hour: Option<f64>,
    /// The same over the last day (the older hours whole); `None`: none judged.
    pub last_24h: Option<f64>,
    /// Output tokens/s per GPU served within the SLO over the last hour; `None`: no GPU held.
    pub goodput_tokens_per_s_per_gpu: Option<f64>,
}

impl SloHistory {
    /// Folds one period, seen at `unix_s` (wall clock, seconds), into its minute.
    pub fn record(&mut self, unix_s: f64, slo: &Slo, period: PeriodSample) {
        let minute = (unix_s / 60.0).floor() as i64;
        // After a gap longer than the kept minutes, start afresh from this one.
        if self.minutes.is_empty() || minute - self.last_minute() > MINUTES as i64 {
            while !self.minutes.is_empty() {
                self.retire_oldest();
            }
            self.first_minute = minute;
            self.push_unjudged();
        }
        // A wall clock that stepped back folds into the latest minute.
        while self.last_minute() < minute {
            self.push_unjudged();
        }
        while self.minutes.len() > MINUTES {
            self.retire_oldest();
        }
        self.hours
            .retain(|h| (h.hour + 1) * 60 > minute - DAY_MINUTES);
        let Some(tokens_per_s) = period.output_tokens_per_s else {
            return;
        };
        let met = period.met(slo);
        let last = self.minutes.len() - 1;
        let (was, n) = match self.minutes.as_bytes()[last] {
            b'-' => (true, 0.0),
            flag => (flag == b'1', f64::from(self.periods_in_last_minute)),
        };
        let met = was && met;
        let mean = |old: f64, new: f64| round2((old * n + new) / (n + 1.0));
        self.good_tokens_per_second[last] = if met {
            mean(self.good_tokens_per_second[last], tokens_per_s)
        } else {
            0.0
        };
        self.gpus[last] = mean(self.gpus[last], period.gpus);
        self.periods_in_last_minute = self.periods_in_last_minute.saturating_add(1);
        self.minutes.pop();
        self.minutes.push(if met { '1' } else { '0' });
    }

    /// Attainment and goodput as of `unix_s` (wall clock, seconds).
    pub fn attainment(&self, unix_s: f64) -> Attainment {
        let now = (unix_s / 60.0).floor() as i64;
        let recent = self
            .minutes
            .bytes()
            .zip(self.good_tokens_per_second.iter().zip(&self.gpus))
            .enumerate()
            .filter(|(i, (flag, _))| {
                *flag != b'-' && self.first_minute + *i as i64 > now - MINUTES as i64
            })
            .map(|(_, v)| v);
        let (mut judged, mut met, mut good, mut gpus) = (0u32, 0u32, 0.0, 0.0);
        for (flag, (g, held)) in recent {
            judged += 1;
            met += u32::from(flag == b'1');
            good += g;
            gpus += held;
        }
        let (day_judged, day_met) = self
            .hours
            .iter()
            .filter(|h| (h.hour + 1) * 60 > now - DAY_MINUTES)
            .fold((judged, met), |(j, m), h| (j + h.judged, m + h.met));
        let share =
            |met: u32, judged: u32| (judged > 0).then(|| f64::from(met) / f64::from(judged));
        Attainment {
            last_hour: share(met, judged),
            last_24h: share(day_met, day_judged),
            goodput_tokens_per_s_per_gpu: (gpus > 0.0).then(|| good / gpus),
        }
    }

    fn last_minute(&self) -> i64 {
        self.first_minute + self.minutes.len() as i64 - 1
    }

    fn push_unjudged(&mut self) {
        self.minutes.push('-');
        self.good_tokens_per_second.push(0.0);
        self.gpus.push(0.0);
        self.periods_in_last_minute = 0;
    }

    /// Moves the oldest minute into its hour's counts.
    fn retire_oldest(&mut self) {
        let flag = self.minutes.remove(0);
        self.good_tokens_per_second.remove(0);
        self.gpus.remove(0);
        let hour = self.first_minute.div_euclid(60);
        self.first_minute += 1;
        if flag == '-' {
            return;
        }
        if self.hours.last().is_none_or(|h| h.hour != hour) {
            self.hours.push(HourCount {
                hour,
                ..HourCount::default()
            });
        }
        if let Some(h) = self.hours.last_mut() {
            h.judged += 1;
            h.met += u32::from(flag == '1');
        }
    }

    /// Repairs a record read from status that a person or an old version left inconsistent:
    /// lengths that disagree are cut to the shortest, unknown flags read as not judged.
    pub fn repaired(mut self) -> Self {
        let n = self
            .minutes
            .len()
            .min(self.good_tokens_per_second.len())
            .min(self.gpus.len());
        self.minutes = self
            .minutes
            .chars()
            .take(n)
            .map(|c| if c == '0' || c == '1' { c } else { '-' })
            .collect();
        self.good_tokens_per_second.truncate(n);
        self.gpus.truncate(n);
        self
    }
}

fn round2(v: f64) -> f64 {
    (v * 100.0).round() / 100.0
}

#[cfg(test)]
mod tests {
    use super::*;

    const SLO: Slo = Slo {
        ttft_p95_s: 0.5,
        tpot_p95_s: 0.05,
    };
    /// 2027-01-15T08:00:00Z, on a minute and an hour boundary.
    const T0: f64 = 1_800_000_000.0;

    fn period(ttft: Option<f64>, tokens: Option<f64>, gpus: f64) -> PeriodSample {
        PeriodSample {
            ttft_p95_s: ttft,
            tpot_p95_s: ttft.map(|_| 0.01),
            output_tokens_per_s: tokens,
            gpus,
        }
    }

    #[test]
    fn a_minute_is_met_only_when_every_judged_period_in_it_was() {
        let mut h = SloHistory::default();
        // Minute 0: met, then broken once: missed. Minute 1: only no-traffic periods: met.
        // Minute 2: metrics missing: not judged. Minute 3: met.
        h.record(T0, &SLO, period(Some(0.2), Some(100.0), 2.0));
        h.record(T0 + 15.0, &SLO, period(Some(0.9), Some(300.0), 2.0));
        h.record(T0 + 60.0, &SLO, period(None, Some(0.0), 2.0));
        h.record(T0 + 120.0, &SLO, period(Some(0.2), None, 2.0));
        h.record(T0 + 180.0, &SLO, period(Some(0.2), Some(200.0), 2.0));
        h.record(T0 + 195.0, &SLO, period(Some(0.3), Some(400.0), 6.0));
        assert_eq!(h.minutes, "01-1");
        assert_eq!(h.good_tokens_per_second, [0.0, 0.0, 0.0, 300.0]);
        assert_eq!(h.gpus, [2.0, 2.0, 0.0, 4.0]);
        let a = h.attainment(T0 + 200.0);
        assert_eq!(a.last_hour, Some(2.0 / 3.0));
        assert_eq!(a.last_24h, Some(2.0 / 3.0));
        // 300 good tokens/s over 2 + 2 + 4 GPUs held in the judged minutes.
        assert_eq!(a.goodput_tokens_per_s_per_gpu, Some(300.0 / 8.0));
    }

    #[test]
    fn older_minutes_move_into_hours_and_the_day_forgets_its_oldest() {
        let mut h = SloHistory::default();
        // Two hours, one period a minute; the first 30 minutes broken.
        for m in 0..120 {
            let ttft = if m < 30 { 0.9 } else { 0.1 };
            h.record(
                T0 + 60.0 * f64::from(m),
                &SLO,
                period(Some(ttft), Some(50.0), 1.0),
            );
        }
        assert_eq!(h.minutes.len(), 60);
        assert_eq!(h.minutes, "1".repeat(60));
        let hour0 = (T0 / 3600.0) as i64;
        assert_eq!(
            h.hours,
            [HourCount {
                hour: hour0,
                judged: 60,
                met: 30
            }]
        );
        let a = h.attainment(T0 + 119.0 * 60.0);
        assert_eq!(a.last_hour, Some(1.0));
        assert_eq!(a.last_24h, Some(90.0 / 120.0));
        assert_eq!(a.goodput_tokens_per_s_per_gpu, Some(50.0));
        // A day later, with the operator away in between: only the new minute counts.
        let later = T0 + 26.0 * 3600.0;
        h.record(later, &SLO, period(Some(0.9), Some(50.0), 1.0));
        assert!(h.hours.iter().all(|c| c.hour > hour0), "{:?}", h.hours);
        let a = h.attainment(later);
        assert_eq!((a.last_hour, a.last_24h), (Some(0.0), Some(0.0)));
        assert_eq!(a.goodput_tokens_per_s_per_gpu, Some(0.0));
    }

    #[test]
    fn an_empty_or_damaged_history_says_nothing_rather_than_panicking() {
        assert_eq!(SloHistory::default().attainment(T0), Attainment::default());
        let damaged = SloHistory {
            first_minute: 30_000_000,
            minutes: "1x10".into(),
            good_tokens_per_second: vec![1.0, 2.0, 3.0],
            gpus: vec![1.0, 1.0, 1.0, 1.0],
            ..SloHistory::default()
        }
        .repaired();
        assert_eq!(damaged.minutes, "1-1");
        let mut h = damaged;
        h.record(T0, &SLO, period(Some(0.1), Some(1.0), 1.0));
        assert!(h.minutes.ends_with('1'));
    }
}
