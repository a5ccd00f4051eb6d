//! One resolution of the demand history: fixed-width bins of the mean demand over a bounded
//! span, the period detected in them, and the level they predict for a coming instant.

use std::collections::VecDeque;

use super::period::{self, Period};

/// A tier looks for its period about this often, seconds (at every bin when they are wider).
const DETECT_EVERY_S: f64 = 60.0;

/// A ring of demand bins at one width.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Tier {
    /// Width of a bin, seconds.
    pub(super) bin_s: f64,
    /// Most closed bins kept.
    pub(super) capacity: usize,
    /// When the first kept bin begins (policy clock, seconds).
    pub(super) start_s: f64,
    /// Mean demand of each closed bin, tokens/s (NaN: no sample in it).
    pub(super) bins: VecDeque<f64>,
    /// The open bin (the one after the last closed): its sum and sample count.
    open: (f64, u32),
    /// The period found at the last detection.
    period: Option<Period>,
    /// Bins closed so far (paces the detection).
    closed: usize,
}

impl Tier {
    /// An empty tier of `capacity` bins of `bin_s` seconds.
    pub(super) fn new(bin_s: f64, capacity: usize) -> Self {
        Self {
            bin_s,
            capacity,
            start_s: 0.0,
            bins: VecDeque::new(),
            open: (0.0, 0),
            period: None,
            closed: 0,
        }
    }

    /// A tier restored from a record: its closed bins beginning at `start_s`. The period is
    /// detected again at once (it is not part of the record).
    pub(super) fn restored(bin_s: f64, capacity: usize, start_s: f64, bins: Vec<f64>) -> Self {
        let mut tier = Self::new(bin_s, capacity);
        tier.start_s = start_s;
        tier.bins = bins.into_iter().collect();
        tier.trim();
        tier.detect();
        tier
    }

    /// Adds a demand sample taken at `now_s`. Samples older than the open bin are dropped
    /// (a clock that went back, or a restored record's last, partial bin).
    pub(super) fn record(&mut self, now_s: f64, tokens_per_s: f64) {
        if !tokens_per_s.is_finite() {
            return;
        }
        if self.bins.is_empty() && self.open.1 == 0 {
            self.start_s = (now_s / self.bin_s).floor() * self.bin_s;
        }
        let index = ((now_s - self.start_s) / self.bin_s).floor();
        let open_index = self.bins.len() as f64;
        if index < open_index {
            return;
        }
        if index > open_index {
            self.close(index - open_index);
        }
        self.open.0 += tokens_per_s;
        self.open.1 += 1;
    }

    /// Closes the open bin and `gap - 1` empty ones after it, then looks for the period again.
    fn close(&mut self, gap: f64) {
        let (sum, count) = self.open;
        self.bins.push_back(if count > 0 {
            sum / f64::from(count)
        } else {
            f64::NAN
        });
        self.open = (0.0, 0);
        let empty = (gap - 1.0).min(self.capacity as f64) as usize;
        self.bins.extend(std::iter::repeat_n(f64::NAN, empty));
        self.trim();
        // Looked for about once a minute: a period is seen over many bins, and each look
        // compares hundreds of lags.
        let every = (DETECT_EVERY_S / self.bin_s).ceil().max(1.0) as usize;
        self.closed = self.closed.wrapping_add(1);
        if self.closed.is_multiple_of(every) || self.period.is_some() {
            self.detect();
        }
    }

    fn trim(&mut self) {
        while self.bins.len() > self.capacity {
            self.bins.pop_front();
            self.start_s += self.bin_s;
        }
    }

    fn detect(&mut self) {
        self.period = period::detect(self.bins.make_contiguous());
    }

    /// The period detected, if any.
    pub(super) fn period(&self) -> Option<Period> {
        self.period
    }

    /// The closed bins and the open one's mean so far (for the record).
    pub(super) fn levels(&self) -> impl Iterator<Item = f64> + '_ {
        let (sum, count) = self.open;
        let open = (count > 0).then(|| sum / f64::from(count));
        self.bins.iter().copied().chain(open)
    }

    /// The demand the detected period predicts at `t_s`: the lower of what the two most
    /// recent cycles had at that phase (a rise counts only when both had it), read between
    /// bin centres. `None` without a period or without both cycles.
    pub(super) fn predict(&self, t_s: f64) -> Option<f64> {
        let period = self.period?;
        let period_s = period.lag as f64 * self.bin_s;
        let closed_end_s = self.start_s + self.bins.len() as f64 * self.bin_s;
        // The first cycle back whose phase is already in the closed bins.
        let first = ((t_s - closed_end_s) / period_s).floor().max(0.0) + 1.0;
        let a = self.level_at(t_s - first * period_s)?;
        let b = self.level_at(t_s - (first + 1.0) * period_s)?;
        Some(a.min(b))
    }

    /// The level at `t_s`, linear between the centres of the closed bins around it.
    fn level_at(&self, t_s: f64) -> Option<f64> {
        if t_s < self.start_s {
            return None;
        }
        let position = (t_s - self.start_s) / self.bin_s - 0.5;
        let last = self.bins.len().checked_sub(1)? as f64;
        let position = position.clamp(0.0, last);
        let below = position.floor();
        let fraction = position - below;
        let low = *self.bins.get(below as usize)?;
        let high = *self.bins.get((below as usize + 1).min(last as usize))?;
        match (low.is_finite(), high.is_finite()) {
            (true, true) => Some(low + fraction * (high - low)),
            (true, false) => Some(low),
            (false, true) => Some(high),
            (false, false) => None,
        }
    }
}
