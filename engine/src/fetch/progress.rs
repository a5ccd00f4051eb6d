//! Download progress: a bar on a terminal, and on anything else (a pod's log) one line every
//! few seconds, so a 16 GB fetch is visibly alive in `kubectl logs`. One `Progress` sums every
//! part of every file in flight (shared by reference: the counts sit behind a lock).

use std::io::IsTerminal;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Seconds between progress lines when stderr is not a terminal.
const LINE_EVERY: Duration = Duration::from_secs(10);

/// Reports the bytes of one fetch.
pub struct Progress {
    what: String,
    total: u64,
    started: Instant,
    bar: Option<indicatif::ProgressBar>,
    quiet: bool,
    counts: Mutex<Counts>,
}

/// What changes as bytes arrive.
struct Counts {
    done: u64,
    last_line: Instant,
}

/// `1.5 GiB`-style sizes.
pub fn human_bytes(n: u64) -> String {
    indicatif::HumanBytes(n).to_string()
}

impl Progress {
    /// Progress of fetching `total` bytes of `what`; a bar when stderr is a terminal.
    pub fn new(what: &str, total: u64, quiet: bool) -> Self {
        let bar = (!quiet && std::io::stderr().is_terminal()).then(|| {
            let bar = indicatif::ProgressBar::new(total);
            let style = indicatif::ProgressStyle::with_template(
                "{msg} {bar:30} {bytes}/{total_bytes} {bytes_per_sec} eta {eta}",
            )
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar());
            bar.set_style(style);
            bar.set_message(what.to_string());
            bar
        });
        if bar.is_none() && !quiet {
            eprintln!("fetching {what}: {} to download", human_bytes(total));
        }
        Self {
            what: what.to_string(),
            total,
            started: Instant::now(),
            bar,
            quiet,
            counts: Mutex::new(Counts {
                done: 0,
                last_line: Instant::now(),
            }),
        }
    }

    /// The counts; a panic elsewhere while they were held leaves them usable.
    fn counts(&self) -> std::sync::MutexGuard<'_, Counts> {
        self.counts.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `n` more bytes arrived (of file `file`, from any of its parts).
    pub fn add(&self, n: u64, file: &str) {
        let mut counts = self.counts();
        counts.done += n;
        if let Some(bar) = &self.bar {
            bar.set_position(counts.done);
            return;
        }
        if !self.quiet && counts.last_line.elapsed() >= LINE_EVERY {
            counts.last_line = Instant::now();
            eprintln!(
                "fetching {}: {} ({file})",
                self.what,
                self.status(counts.done)
            );
        }
    }

    /// `n` bytes that had arrived are discarded (a restarted download).
    pub fn rewind(&self, n: u64) {
        let mut counts = self.counts();
        counts.done = counts.done.saturating_sub(n);
    }

    /// `done of total (percent) at rate`.
    fn status(&self, done: u64) -> String {
        let secs = self.started.elapsed().as_secs_f64().max(1e-3);
        let pct = if self.total > 0 {
            100.0 * done as f64 / self.total as f64
        } else {
            100.0
        };
        format!(
            "{} of {} ({pct:.0}%) at {}/s",
            human_bytes(done),
            human_bytes(self.total),
            human_bytes((done as f64 / secs) as u64)
        )
    }

    /// The fetch ended.
    pub fn finish(self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
        let done = self.counts().done;
        if !self.quiet && done > 0 {
            eprintln!(
                "fetched {}: {} in {:.1} s",
                self.what,
                human_bytes(done),
                self.started.elapsed().as_secs_f64()
            );
        }
    }
}
