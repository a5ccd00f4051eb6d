//! Crash-loop backoff and failure reports for `tokenscale up`'s replicas (pure: no clock, no
//! I/O). A replica that fails is replaced at once; replicas that keep failing before they
//! become ready (or keep dying soon after) wait longer each time (1 s, 2 s, 4 s, … 30 s), as
//! Kubernetes backs off a crash-looping pod, and every report says what happened and where
//! the log is.

use std::path::PathBuf;
use std::time::Duration;

/// A replica up and ready this long counts as having run well: the backoff starts over.
pub const STABLE_AFTER: Duration = Duration::from_secs(10);
/// The longest wait between two starts of a failing replica.
const MAX_DELAY: Duration = Duration::from_secs(30);

/// Failures in a row, and what they mean for the next start.
#[derive(Debug, Default, Clone)]
pub struct CrashLoop {
    in_a_row: u32,
}

impl CrashLoop {
    /// A replica failed; `was_ready`: it had answered its health check; `ran_well`: for
    /// [`STABLE_AFTER`] at least. Returns the wait before the next start: none for a first
    /// failure, nor for one of a replica that had been serving (killed, OOM) unless that
    /// happened five times in a row.
    pub fn failed(&mut self, was_ready: bool, ran_well: bool) -> Duration {
        self.in_a_row = if ran_well { 1 } else { self.in_a_row + 1 };
        let waits_from = if was_ready { 5 } else { 2 };
        match self.in_a_row.checked_sub(waits_from) {
            None => Duration::ZERO,
            Some(n) => Duration::from_secs(1 << n.min(5)).min(MAX_DELAY),
        }
    }

    /// A replica has run well: the next failure is a first one again.
    pub fn stable(&mut self) {
        self.in_a_row = 0;
    }

    /// Failures in a row so far.
    pub fn in_a_row(&self) -> u32 {
        self.in_a_row
    }
}

/// What happened to a replica, for the log and the status line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// `replica-3`.
    pub replica: String,
    /// `exited with exit status: 1`, `was killed by signal: 9 (SIGKILL)`, `stopped answering
    /// /health`.
    pub what: String,
    /// How long it had run.
    pub after: Duration,
    /// Its last lines of output.
    pub last_lines: Vec<String>,
    /// Its log file.
    pub log: PathBuf,
    /// Wait before its replacement starts.
    pub retry_in: Duration,
    /// Failures in a row, this one included.
    pub in_a_row: u32,
}

impl Failure {
    /// The line printed when it happens.
    pub fn log_line(&self) -> String {
        let mut line = format!(
            "tokenscale up: {} {} after {:.1}s",
            self.replica,
            self.what,
            self.after.as_secs_f64()
        );
        if !self.last_lines.is_empty() {
            line.push_str("; its last output:");
            for l in &self.last_lines {
                line.push_str("\n    ");
                line.push_str(l);
            }
            line.push('\n');
        } else {
            line.push_str("; ");
        }
        line.push_str(&format!("  log: {}; ", self.log.display()));
        line.push_str(&self.next_start());
        line
    }

    /// The short form for the status line.
    pub fn status_note(&self) -> String {
        let said = self
            .last_lines
            .last()
            .map(|l| format!(": {l:?}"))
            .unwrap_or_default();
        format!(
            "last failure: {} {}{said} ({})",
            self.replica,
            self.what,
            self.next_start()
        )
    }

    fn next_start(&self) -> String {
        if self.retry_in.is_zero() {
            "replaced at once".into()
        } else {
            format!(
                "crash loop: {} failures in a row, next start in {:.0}s",
                self.in_a_row,
                self.retry_in.as_secs_f64()
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_first_failure_restarts_at_once_and_repeated_ones_back_off() {
        let mut crash = CrashLoop::default();
        let waits: Vec<u64> = (0..9)
            .map(|_| crash.failed(false, false).as_secs())
            .collect();
        assert_eq!(waits, [0, 1, 2, 4, 8, 16, 30, 30, 30]);
        // A replica that ran well and then died is replaced at once.
        assert_eq!(crash.failed(true, true), Duration::ZERO);
        crash.stable();
        assert_eq!(crash.failed(false, false), Duration::ZERO);
        assert_eq!(crash.in_a_row(), 1);
        // Replicas killed while serving are replaced at once, unless it keeps happening.
        let mut killed = CrashLoop::default();
        let waits: Vec<u64> = (0..7)
            .map(|_| killed.failed(true, false).as_secs())
            .collect();
        assert_eq!(waits, [0, 0, 0, 0, 1, 2, 4]);
    }

    #[test]
    fn reports_name_the_replica_what_happened_its_output_and_the_next_start() {
        let failure = Failure {
            replica: "replica-2".into(),
            what: "exited with exit status: 1".into(),
            after: Duration::from_millis(300),
            last_lines: vec!["Error: sim profile \"x\" is neither ...".into()],
            log: PathBuf::from("/tmp/up/replica-2.log"),
            retry_in: Duration::from_secs(4),
            in_a_row: 4,
        };
        let line = failure.log_line();
        assert!(
            line.contains("replica-2 exited with exit status: 1 after 0.3s"),
            "{line}"
        );
        assert!(
            line.contains("Error: sim profile") && line.contains("/tmp/up/replica-2.log"),
            "{line}"
        );
        assert!(
            line.contains("4 failures in a row, next start in 4s"),
            "{line}"
        );
        let note = failure.status_note();
        assert!(
            note.starts_with("last failure: replica-2 exited with exit status: 1: \"Error"),
            "{note}"
        );
    }
}
