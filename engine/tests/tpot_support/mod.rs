//! Shared by the `--tpot-target` tests (sim and CPU backends): each stream's time per output
//! token from its token arrival times, runs pooled over repeats, and the verdict on a sweep of
//! fixed `--max-num-seqs` against the run under the target (with its table).
#![allow(dead_code)]

use std::time::Instant;

/// One or more runs' figures, pooled.
#[derive(Debug, Clone, Default)]
pub struct Measured {
    /// Per stream: (last token − first token) / (tokens − 1), seconds.
    pub tpots_s: Vec<f64>,
    /// Output tokens received.
    pub tokens: usize,
    /// Seconds the runs took, from the first request sent to the last token.
    pub elapsed_s: f64,
}

impl Measured {
    /// The figures of one run whose streams' token arrival times are `streams`, started at
    /// `started` and over now.
    pub fn from_streams(streams: &[Vec<Instant>], started: Instant) -> Self {
        Self {
            tpots_s: streams.iter().filter_map(|t| tpot_s(t)).collect(),
            tokens: streams.iter().map(Vec::len).sum(),
            elapsed_s: started.elapsed().as_secs_f64(),
        }
    }

    /// Adds another run of the same configuration.
    pub fn pool(&mut self, other: Measured) {
        self.tpots_s.extend(other.tpots_s);
        self.tokens += other.tokens;
        self.elapsed_s += other.elapsed_s;
    }

    /// p95 over streams of the time per output token, seconds (infinite with no stream).
    pub fn tpot_p95_s(&self) -> f64 {
        p95(&self.tpots_s)
    }

    /// Output tokens per second over the runs.
    pub fn tokens_per_s(&self) -> f64 {
        self.tokens as f64 / self.elapsed_s.max(1e-9)
    }
}

/// A stream's time per output token, seconds; `None` under two tokens.
pub fn tpot_s(times: &[Instant]) -> Option<f64> {
    let (first, last) = (times.first()?, times.last()?);
    (times.len() >= 2).then(|| last.duration_since(*first).as_secs_f64() / (times.len() - 1) as f64)
}

/// The 95th percentile (nearest rank) of `values`; infinite when empty.
pub fn p95(values: &[f64]) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let rank = ((sorted.len() as f64 * 0.95).ceil() as usize).saturating_sub(1);
    sorted.get(rank).copied().unwrap_or(f64::INFINITY)
}

/// A sweep of fixed caps and the run under the target, for the table and the verdict.
pub struct Sweep<'a> {
    /// `(max_num_seqs, figures)` per fixed cap.
    pub fixed: &'a [(usize, Measured)],
    /// The target, seconds.
    pub target_s: f64,
    /// The run with `--tpot-target`.
    pub held: &'a Measured,
    /// What the target run showed of its waiting (printed in its row).
    pub note: String,
}

impl Sweep<'_> {
    /// The best throughput a fixed cap reaches within the target (0 when none holds it).
    pub fn best_fixed_tokens_per_s(&self) -> f64 {
        self.fixed
            .iter()
            .filter(|(_, m)| m.tpot_p95_s() <= self.target_s)
            .map(|(_, m)| m.tokens_per_s())
            .fold(0.0, f64::max)
    }

    /// The table: one row per fixed cap, then the target's.
    pub fn table(&self) -> String {
        let mut table = String::from("  max_num_seqs  tpot p95 ms  tokens/s\n");
        for (cap, m) in self.fixed {
            table += &format!(
                "  {cap:>12}  {:>11.1}  {:>8.0}\n",
                m.tpot_p95_s() * 1e3,
                m.tokens_per_s()
            );
        }
        table += &format!(
            "  target {:>6.1}  {:>10.1}  {:>8.0}  ({})\n",
            self.target_s * 1e3,
            self.held.tpot_p95_s() * 1e3,
            self.held.tokens_per_s(),
            self.note
        );
        table
    }

    /// Prints the table and asserts the acceptance (`verdict`).
    pub fn assert_held(&self, waited: bool) {
        if let Err(why) = self.verdict(waited) {
            panic!("{why}");
        }
    }

    /// Prints the table and checks the acceptance: some fixed cap holds the target, the run
    /// under the target holds it too, its excess waited (`waited`), and its throughput is at
    /// least 90% of the best fixed cap's within the target. The error names the rule broken.
    pub fn verdict(&self, waited: bool) -> Result<(), String> {
        let table = self.table();
        println!("{table}");
        let best_fixed = self.best_fixed_tokens_per_s();
        let broken = if best_fixed <= 0.0 {
            "no fixed cap holds the target"
        } else if self.held.tpot_p95_s() > self.target_s {
            "with --tpot-target the p95 time per token is over the target"
        } else if !waited {
            "the excess did not wait: the running set was not capped below the streams"
        } else if self.held.tokens_per_s() < 0.9 * best_fixed {
            "throughput below 90% of the best fixed cap within the target"
        } else {
            return Ok(());
        };
        Err(format!("{broken}\n{table}"))
    }
}
