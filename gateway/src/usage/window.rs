//! `UsageWindows`: one tenant's use of one model over the last minute and the last hour, in
//! rolling buckets (60 of one second, 60 of one minute) kept by a clock the caller passes in.

use crate::vocab::LimitKind;

/// What a tenant used (and was refused) over some span.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    /// Requests that passed the limits and finished, any status.
    pub requests: u64,
    /// Prompt tokens not served from the prefix cache: what the input limit charges.
    pub input_tokens: u64,
    /// Prompt tokens served from the prefix cache (not charged).
    pub cached_input_tokens: u64,
    /// Completion tokens.
    pub output_tokens: u64,
    /// 429s, indexed by [`kind_index`].
    pub rate_limited: [u64; 3],
}

impl Counts {
    /// One finished request with the engine's token counts (`None`: none reported).
    pub fn finished(usage: Option<crate::vocab::Usage>) -> Self {
        let usage = usage.unwrap_or_default();
        Self {
            requests: 1,
            input_tokens: usage.prompt_tokens.saturating_sub(usage.cached_tokens),
            cached_input_tokens: usage.cached_tokens,
            output_tokens: usage.completion_tokens,
            rate_limited: [0; 3],
        }
    }

    /// One request refused (429) by `kind`.
    pub fn refused(kind: LimitKind) -> Self {
        let mut counts = Self::default();
        counts.rate_limited[kind_index(kind)] = 1;
        counts
    }

    /// The amount of `kind` used (requests, uncached input or output tokens).
    pub fn used(&self, kind: LimitKind) -> u64 {
        match kind {
            LimitKind::Requests => self.requests,
            LimitKind::InputTokens => self.input_tokens,
            LimitKind::OutputTokens => self.output_tokens,
        }
    }

    /// 429s by `kind`.
    pub fn refusals(&self, kind: LimitKind) -> u64 {
        self.rate_limited[kind_index(kind)]
    }

    fn add(&mut self, other: &Counts) {
        self.requests += other.requests;
        self.input_tokens += other.input_tokens;
        self.cached_input_tokens += other.cached_input_tokens;
        self.output_tokens += other.output_tokens;
        for (sum, more) in self.rate_limited.iter_mut().zip(other.rate_limited) {
            *sum += more;
        }
    }
}

/// Every limit kind, in the order of [`Counts::rate_limited`] and of the report.
pub const KINDS: [LimitKind; 3] = [
    LimitKind::Requests,
    LimitKind::InputTokens,
    LimitKind::OutputTokens,
];

/// Index of `kind` in [`KINDS`].
pub fn kind_index(kind: LimitKind) -> usize {
    match kind {
        LimitKind::Requests => 0,
        LimitKind::InputTokens => 1,
        LimitKind::OutputTokens => 2,
    }
}

/// Buckets in each ring: 60 seconds make the minute, 60 minutes the hour.
const SLOTS: usize = 60;

/// One bucket: the second (or minute) it holds, and what was counted in it.
#[derive(Debug, Clone, Copy, Default)]
struct Slot {
    at: u64,
    counts: Counts,
}

/// A ring of [`SLOTS`] buckets, each `at` one unit of time; a bucket is reused (cleared) when
/// its unit comes round again, so nothing has to expire on a timer.
#[derive(Debug, Clone)]
struct Ring([Slot; SLOTS]);

impl Ring {
    fn add(&mut self, unit: u64, counts: &Counts) {
        let slot = &mut self.0[(unit % SLOTS as u64) as usize];
        if slot.at != unit {
            *slot = Slot {
                at: unit,
                counts: Counts::default(),
            };
        }
        slot.counts.add(counts);
    }

    /// The sum of the buckets of the last [`SLOTS`] units up to `unit`, this one included.
    fn sum(&self, unit: u64) -> Counts {
        let oldest = unit.saturating_sub(SLOTS as u64 - 1);
        let mut total = Counts::default();
        for slot in self.0.iter().filter(|s| (oldest..=unit).contains(&s.at)) {
            total.add(&slot.counts);
        }
        total
    }
}

/// Rolling use of one tenant on one model. Time is whole seconds on the caller's clock
/// (monotonic, from any epoch): the minute is this second and the 59 before it, the hour this
/// minute and the 59 before it.
#[derive(Debug, Clone)]
pub struct UsageWindows {
    seconds: Ring,
    minutes: Ring,
}

impl Default for UsageWindows {
    fn default() -> Self {
        Self {
            seconds: Ring([Slot::default(); SLOTS]),
            minutes: Ring([Slot::default(); SLOTS]),
        }
    }
}

impl UsageWindows {
    /// Adds `counts` at second `now_s`.
    pub fn add(&mut self, now_s: u64, counts: &Counts) {
        self.seconds.add(now_s, counts);
        self.minutes.add(now_s / 60, counts);
    }

    /// What was counted in the last minute as of second `now_s`.
    pub fn last_minute(&self, now_s: u64) -> Counts {
        self.seconds.sum(now_s)
    }

    /// What was counted in the last hour as of second `now_s`.
    pub fn last_hour(&self, now_s: u64) -> Counts {
        self.minutes.sum(now_s / 60)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vocab::Usage;

    fn request(prompt: u64, cached: u64, completion: u64) -> Counts {
        Counts::finished(Some(Usage {
            prompt_tokens: prompt,
            completion_tokens: completion,
            cached_tokens: cached,
        }))
    }

    #[test]
    fn cached_tokens_are_counted_apart_from_the_input_the_limit_charges() {
        let counts = request(100, 30, 7);
        assert_eq!(
            (
                counts.requests,
                counts.input_tokens,
                counts.cached_input_tokens,
                counts.output_tokens
            ),
            (1, 70, 30, 7)
        );
        let unreported = Counts::finished(None);
        assert_eq!(
            (unreported.requests, unreported.used(LimitKind::InputTokens)),
            (1, 0)
        );
    }

    #[test]
    fn the_minute_forgets_after_sixty_seconds_and_the_hour_after_sixty_minutes() {
        let mut windows = UsageWindows::default();
        windows.add(1_000, &request(10, 0, 1));
        windows.add(1_030, &request(20, 0, 2));
        windows.add(1_030, &Counts::refused(LimitKind::OutputTokens));
        let minute = windows.last_minute(1_059);
        assert_eq!((minute.requests, minute.input_tokens), (2, 30));
        assert_eq!(minute.refusals(LimitKind::OutputTokens), 1);
        // Second 1000 is 60 seconds old at 1060: out of the minute, still in the hour.
        let later = windows.last_minute(1_060);
        assert_eq!((later.requests, later.input_tokens), (1, 20));
        assert_eq!(windows.last_hour(1_060).requests, 2);
        // Minute 16 (seconds 960..1019) leaves the hour when minute 76 begins.
        assert_eq!(windows.last_hour(75 * 60 + 59).requests, 2);
        assert_eq!(windows.last_hour(76 * 60).requests, 1);
        assert_eq!(windows.last_hour(77 * 60), Counts::default());
    }

    #[test]
    fn a_bucket_reused_a_lap_later_starts_from_zero() {
        let mut windows = UsageWindows::default();
        windows.add(5, &request(10, 0, 0));
        // Second 65 lands in second 5's bucket: the old count must not leak into it.
        windows.add(65, &request(1, 0, 0));
        assert_eq!(windows.last_minute(65).input_tokens, 1);
        assert_eq!(windows.last_minute(70).requests, 1);
        // Both are in minute 0 and minute 1 of the hour.
        assert_eq!(windows.last_hour(65).input_tokens, 11);
    }
}
