//! A token bucket that refills continuously (not a per-minute reset), with time passed in.

use std::time::{Duration, Instant};

/// `capacity` units, refilled at `capacity` per minute. The level may go below zero when a
/// settlement charges more than was reserved; requests then wait until it refills.
#[derive(Debug, Clone, PartialEq)]
pub struct TokenBucket {
    capacity: f64,
    per_s: f64,
    level: f64,
    updated: Instant,
}

impl TokenBucket {
    /// A full bucket of `per_minute` units.
    pub fn per_minute(per_minute: u64, now: Instant) -> Self {
        let capacity = per_minute as f64;
        Self {
            capacity,
            per_s: capacity / 60.0,
            level: capacity,
            updated: now,
        }
    }

    /// The configured units per minute.
    pub fn limit(&self) -> u64 {
        self.capacity as u64
    }

    /// Whole units available now.
    pub fn remaining(&self) -> u64 {
        self.level.max(0.0).floor() as u64
    }

    /// Time until the bucket is full again.
    pub fn time_to_full(&self) -> Duration {
        Duration::from_secs_f64(((self.capacity - self.level) / self.per_s).max(0.0))
    }

    /// Adds what accrued since the last update.
    pub fn refill(&mut self, now: Instant) {
        let elapsed_s = now.saturating_duration_since(self.updated).as_secs_f64();
        self.level = (self.level + elapsed_s * self.per_s).min(self.capacity);
        self.updated = now;
    }

    /// How long until `amount` is available (zero when it is now). Call after `refill`.
    pub fn wait_for(&self, amount: f64) -> Duration {
        if self.level >= amount {
            return Duration::ZERO;
        }
        Duration::from_secs_f64((amount - self.level) / self.per_s)
    }

    /// Whether `amount` can ever fit.
    pub fn can_ever_hold(&self, amount: f64) -> bool {
        amount <= self.capacity
    }

    /// Takes `amount` (the caller checked `wait_for`); negative amounts give back.
    pub fn take(&mut self, amount: f64) {
        self.level = (self.level - amount).min(self.capacity);
    }

    /// Changes the limit keeping the current level (capped at the new capacity).
    pub fn set_limit(&mut self, per_minute: u64) {
        self.capacity = per_minute as f64;
        self.per_s = self.capacity / 60.0;
        self.level = self.level.min(self.capacity);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refills_continuously_and_caps_at_capacity() {
        let t0 = Instant::now();
        let mut bucket = TokenBucket::per_minute(60, t0);
        bucket.take(60.0);
        assert_eq!(bucket.remaining(), 0);
        assert_eq!(bucket.wait_for(1.0), Duration::from_secs(1));
        bucket.refill(t0 + Duration::from_millis(2500));
        assert_eq!(bucket.remaining(), 2);
        assert_eq!(bucket.wait_for(3.0), Duration::from_millis(500));
        bucket.refill(t0 + Duration::from_secs(600));
        assert_eq!(bucket.remaining(), 60);
        assert_eq!(bucket.time_to_full(), Duration::ZERO);
    }

    #[test]
    fn debts_and_refunds() {
        let t0 = Instant::now();
        let mut bucket = TokenBucket::per_minute(6000, t0);
        bucket.take(5000.0);
        bucket.take(2000.0); // settlement charged more than reserved: into debt
        assert_eq!(bucket.remaining(), 0);
        assert_eq!(bucket.wait_for(100.0), Duration::from_secs(11));
        bucket.take(-10_000.0); // refunds never overfill
        assert_eq!(bucket.remaining(), 6000);
        assert!(!bucket.can_ever_hold(6001.0));
    }
}
