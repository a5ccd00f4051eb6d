//! Batch API jobs in a simulation: each job submits `output_tokens` at `at_s`, due a window
//! later. The simulated gateway serves them, earliest deadline first, only with the capacity
//! interactive traffic leaves (interactive requests are served first and their SLO
//! accounting never sees a batch line), expires what is left at the deadline, and exports
//! the backlog and the required throughput as the real gateway computes them.

use super::{SimError, parse_duration_s};

/// One batch job.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BatchJob {
    /// Submitted at, seconds from the trace's start.
    pub at_s: f64,
    /// Output tokens its lines generate.
    pub output_tokens: f64,
    /// Completion window, seconds (OpenAI's `24h`).
    pub window_s: f64,
}

impl BatchJob {
    /// Parses `at=2h,tokens=50M,window=24h` (durations as `--duration`, plus `d`; tokens with
    /// an optional `K`, `M` or `G`).
    pub fn parse(text: &str) -> Result<Self, SimError> {
        let usage = |why: String| {
            SimError::Usage(format!(
                "--batch `{text}`: {why} (e.g. `at=2h,tokens=50M,window=24h`)"
            ))
        };
        let (mut at_s, mut tokens, mut window_s) = (None, None, None);
        for part in text.split(',').filter(|p| !p.trim().is_empty()) {
            let Some((key, value)) = part.split_once('=') else {
                return Err(usage(format!("`{part}` is not key=value")));
            };
            let value = value.trim();
            match key.trim() {
                "at" => at_s = Some(parse_at_s(value).map_err(|e| usage(e.to_string()))?),
                "tokens" => tokens = Some(parse_tokens(value).map_err(usage)?),
                "window" => {
                    window_s = Some(parse_duration_s(value).map_err(|e| usage(e.to_string()))?)
                }
                other => return Err(usage(format!("unknown key `{other}`"))),
            }
        }
        match (at_s, tokens, window_s) {
            (Some(at_s), Some(output_tokens), Some(window_s)) => Ok(Self {
                at_s,
                output_tokens,
                window_s,
            }),
            _ => Err(usage("at, tokens and window are all required".into())),
        }
    }

    /// When its window ends, seconds from the trace's start.
    pub fn deadline_s(&self) -> f64 {
        self.at_s + self.window_s
    }

    /// Checks the numbers of a job read from a trace.
    pub fn validate(&self) -> Result<(), String> {
        let ok = self.at_s.is_finite()
            && self.at_s >= 0.0
            && self.output_tokens.is_finite()
            && self.output_tokens >= 1.0
            && self.window_s.is_finite()
            && self.window_s > 0.0;
        if ok {
            Ok(())
        } else {
            Err("a batch needs at_s ≥ 0, output_tokens ≥ 1 and window_s > 0".into())
        }
    }
}

/// `0` or a duration.
fn parse_at_s(text: &str) -> Result<f64, SimError> {
    if text.trim().parse::<f64>().is_ok_and(|v| v == 0.0) {
        return Ok(0.0);
    }
    parse_duration_s(text)
}

/// `50M`, `1.5G`, `200K`, `12000`.
fn parse_tokens(text: &str) -> Result<f64, String> {
    let (number, scale) = match text.chars().last().map(|c| c.to_ascii_uppercase()) {
        Some('K') => (&text[..text.len() - 1], 1e3),
        Some('M') => (&text[..text.len() - 1], 1e6),
        Some('G') => (&text[..text.len() - 1], 1e9),
        _ => (text, 1.0),
    };
    match number.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && v * scale >= 1.0 => Ok(v * scale),
        _ => Err(format!(
            "tokens `{text}` is not a count (a number, optionally with K, M or G)"
        )),
    }
}

/// What became of one job.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BatchOutcome {
    /// The job.
    pub job: BatchJob,
    /// When its last token was generated; `None`: not finished.
    pub finished_at_s: Option<f64>,
    /// Output tokens left when it expired (at its deadline) or the trace ended.
    pub left_tokens: f64,
    /// Whether its deadline passed within the trace with work left (the gateway expires it).
    pub expired: bool,
}

impl BatchOutcome {
    /// `Some(true)`: finished by its deadline; `Some(false)`: expired unfinished; `None`: the
    /// trace ended before either.
    pub fn deadline_met(&self) -> Option<bool> {
        match self.finished_at_s {
            Some(t) => Some(t <= self.job.deadline_s()),
            None if self.expired => Some(false),
            None => None,
        }
    }
}

/// Time the gateway keeps at the end of a window for writing the output files and for the
/// estimate being off: 5% of the window, at most 10 minutes (the gateway's own rule).
fn margin_s(window_s: f64) -> f64 {
    (window_s / 20.0).min(600.0)
}

/// The jobs of one run, as the gateway tracks them.
#[derive(Debug, Clone)]
pub struct Batches {
    jobs: Vec<BatchOutcome>,
}

impl Batches {
    /// The jobs, none started.
    pub fn new(jobs: &[BatchJob]) -> Self {
        Self {
            jobs: jobs
                .iter()
                .map(|&job| BatchOutcome {
                    job,
                    finished_at_s: None,
                    left_tokens: job.output_tokens,
                    expired: false,
                })
                .collect(),
        }
    }

    /// Submitted, unfinished and not expired at `now_s`, earliest deadline first.
    fn running(&mut self, now_s: f64) -> Vec<&mut BatchOutcome> {
        for b in &mut self.jobs {
            if b.finished_at_s.is_none() && now_s >= b.job.deadline_s() {
                b.expired = true;
            }
        }
        let mut running: Vec<&mut BatchOutcome> = self
            .jobs
            .iter_mut()
            .filter(|b| b.job.at_s <= now_s && b.finished_at_s.is_none() && !b.expired)
            .collect();
        running.sort_by(|a, b| a.job.deadline_s().total_cmp(&b.job.deadline_s()));
        running
    }

    /// Serves up to `tokens` (the tick's idle capacity, ending at `end_s`), earliest deadline
    /// first; returns the tokens served.
    pub fn serve(&mut self, now_s: f64, end_s: f64, tokens: f64) -> f64 {
        let mut left = tokens.max(0.0);
        for b in self.running(now_s) {
            if left <= 0.0 {
                break;
            }
            let served = left.min(b.left_tokens);
            b.left_tokens -= served;
            left -= served;
            if b.left_tokens <= 1e-6 {
                b.left_tokens = 0.0;
                // The tick's capacity comes evenly over it: the job ends when what it and
                // the jobs before it took has come.
                let used = (tokens - left) / tokens;
                b.finished_at_s = Some(now_s + (end_s - now_s) * used);
            }
        }
        tokens.max(0.0) - left
    }

    /// `(backlog output tokens, required output tokens/s)` at `now_s`, as the gateway exports
    /// them: the most, over the deadlines `d`, of what is due by `d` over the time left
    /// before `d` less its margin (at least a second).
    pub fn gauges(&mut self, now_s: f64) -> (f64, f64) {
        let mut due: Vec<(f64, f64)> = self
            .running(now_s)
            .into_iter()
            .map(|b| (b.job.deadline_s() - margin_s(b.job.window_s), b.left_tokens))
            .collect();
        due.sort_by(|a, b| a.0.total_cmp(&b.0));
        let (mut due_by, mut rate) = (0.0, 0.0f64);
        for (end_s, tokens) in due {
            due_by += tokens;
            rate = rate.max(due_by / (end_s - now_s).max(1.0));
        }
        (due_by, rate)
    }

    /// Whether any job is still to be served now or later.
    pub fn any_left(&self) -> bool {
        self.jobs
            .iter()
            .any(|b| b.finished_at_s.is_none() && !b.expired)
    }

    /// What became of each job, in the order given.
    pub fn outcomes(&self) -> Vec<BatchOutcome> {
        self.jobs.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_flag() {
        let job = BatchJob::parse("at=2h,tokens=50M,window=24h").expect("valid");
        assert_eq!(
            job,
            BatchJob {
                at_s: 7_200.0,
                output_tokens: 50e6,
                window_s: 86_400.0
            }
        );
        let job = BatchJob::parse("window=1d, tokens=1.5k, at=0").expect("valid");
        assert_eq!(
            (job.at_s, job.output_tokens, job.window_s),
            (0.0, 1_500.0, 86_400.0)
        );
        for bad in [
            "at=2h,tokens=5M",
            "at=2h,tokens=lots,window=1h",
            "at=2h,tokens=5M,window=1h,x=1",
            "nonsense",
        ] {
            let err = BatchJob::parse(bad).expect_err(bad).to_string();
            assert!(err.contains("--batch"), "{err}");
        }
    }

    #[test]
    fn serves_earliest_deadline_first_and_expires_at_the_deadline() {
        let late = BatchJob {
            at_s: 0.0,
            output_tokens: 1_000.0,
            window_s: 100.0,
        };
        let soon = BatchJob {
            at_s: 0.0,
            output_tokens: 500.0,
            window_s: 20.0,
        };
        let mut b = Batches::new(&[late, soon]);
        // 10 s of 50 tokens/s: all to the one due sooner.
        assert_eq!(b.serve(0.0, 10.0, 500.0), 500.0);
        let out = b.outcomes();
        assert_eq!(out[1].finished_at_s, Some(10.0));
        assert_eq!(out[1].deadline_met(), Some(true));
        assert_eq!(out[0].left_tokens, 1_000.0);
        assert_eq!(out[0].deadline_met(), None);
        // Half of the next tick finishes the other.
        b.serve(10.0, 20.0, 2_000.0);
        assert_eq!(b.outcomes()[0].finished_at_s, Some(15.0));
        // A job not served by its deadline expires and is served no more.
        let mut b = Batches::new(&[soon]);
        b.serve(0.0, 10.0, 100.0);
        assert_eq!(b.serve(20.0, 30.0, 1_000.0), 0.0);
        let out = b.outcomes()[0];
        assert_eq!((out.left_tokens, out.deadline_met()), (400.0, Some(false)));
        assert!(!b.any_left());
    }

    #[test]
    fn gauges_are_the_gateways() {
        // 1,000 tokens due at 100 s (margin 5 s) and 500 more at 20 s (margin 1 s): the rate
        // is the most of 500 / 19 and 1,500 / 95.
        let mut b = Batches::new(&[
            BatchJob {
                at_s: 0.0,
                output_tokens: 1_000.0,
                window_s: 100.0,
            },
            BatchJob {
                at_s: 0.0,
                output_tokens: 500.0,
                window_s: 20.0,
            },
            BatchJob {
                at_s: 50.0,
                output_tokens: 7.0,
                window_s: 20.0,
            },
        ]);
        let (backlog, required) = b.gauges(0.0);
        assert_eq!(backlog, 1_500.0, "not yet submitted: not counted");
        assert!((required - 500.0 / 19.0).abs() < 1e-9, "{required}");
        // Past its deadline a job counts no more.
        let (backlog, _) = b.gauges(30.0);
        assert_eq!(backlog, 1_000.0);
    }
}
