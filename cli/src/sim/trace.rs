//! Arrivals: a rate curve (diurnal or piecewise-linear, with bursts) and a request mix read
//! from a YAML trace spec, or a recorded JSONL trace (`{"t": s, "input_tokens": n,
//! "output_tokens": m}` a line, and Batch API jobs as `{"batch": {"at_s": s, "output_tokens":
//! n, "window_s": w}}` lines). Requests are grouped into a few classes of similar length so
//! the fluid fleet model can move them as cohorts.

use serde::Deserialize;

use super::SimError;
use super::batch::BatchJob;
use super::rng::Rng;

/// Most request classes a trace may have.
pub const MAX_CLASSES: usize = 8;
/// Arrivals of one tick, per class.
pub type ClassCounts = [f64; MAX_CLASSES];

/// One kind of request in a trace's mix.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RequestClass {
    /// Share of requests (normalised over the mix).
    pub weight: f64,
    /// Prompt tokens.
    pub input_tokens: f64,
    /// Output tokens.
    pub output_tokens: f64,
}

/// The shape of the request rate over time.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum Curve {
    /// A cosine day: `trough_rps` to `peak_rps`, peak at `peak_at_s`, one cycle per `period_s`.
    Diurnal {
        trough_rps: f64,
        peak_rps: f64,
        period_s: f64,
        peak_at_s: f64,
    },
    /// Straight lines between `[t_s, requests_per_s]` points (held flat after the last).
    Points { points: Vec<[f64; 2]> },
}

/// A rate multiplier that ramps up, holds, and ramps down.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Burst {
    /// When the ramp up starts, seconds.
    pub start_s: f64,
    /// Ramp up (and down) time, seconds.
    pub ramp_s: f64,
    /// Time at full multiplier, seconds.
    pub hold_s: f64,
    /// Rate multiplier at the top (2.0 doubles the rate).
    pub multiplier: f64,
}

/// A trace spec file (YAML).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TraceSpec {
    /// Short name.
    pub name: String,
    /// In words.
    #[serde(default)]
    pub description: String,
    /// Length, seconds.
    pub duration_s: f64,
    /// The rate curve.
    pub curve: Curve,
    /// Bursts on top of the curve.
    #[serde(default)]
    pub bursts: Vec<Burst>,
    /// The request mix.
    pub mix: Vec<RequestClass>,
    /// A shift of every class's prompt length, if any (at most half of `MAX_CLASSES`
    /// classes: each gets a shifted twin).
    #[serde(default)]
    pub prompt_shift: Option<PromptShift>,
}

/// Prompts that grow (or shrink) by `factor` over `ramp_s` from `start_s` and stay so (a
/// retrieval feature rolled out, a client that starts sending whole documents): the share of
/// requests drawn from the shifted twins of the mix's classes ramps from 0 to 1.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PromptShift {
    /// When the shift starts, seconds.
    pub start_s: f64,
    /// How long it takes, seconds.
    pub ramp_s: f64,
    /// Prompt length after it over before.
    pub factor: f64,
}

impl PromptShift {
    /// Share of requests with the shifted prompts at `t_s`.
    fn share(&self, t_s: f64) -> f64 {
        ((t_s - self.start_s) / self.ramp_s.max(1e-9)).clamp(0.0, 1.0)
    }
}

/// Where arrivals come from.
#[derive(Debug, Clone)]
enum Source {
    /// Poisson arrivals around a curve scaled by `scale`.
    Curve { spec: TraceSpec, scale: f64 },
    /// Poisson arrivals around a rate given every second (a generated trace), scaled by
    /// `scale`, held at its last rate past its end.
    Sampled { per_second: Vec<f64>, scale: f64 },
    /// Recorded requests `(t_s, class)`, sorted by time, plus per-second counts for the oracle.
    Recorded {
        requests: Vec<(f64, u8)>,
        per_second: Vec<f64>,
        next: usize,
    },
}

/// A trace ready to replay.
#[derive(Debug, Clone)]
pub struct Trace {
    /// Name shown in reports.
    pub name: String,
    /// Length, seconds.
    pub duration_s: f64,
    /// Request classes, weights normalised to 1.
    pub classes: Vec<RequestClass>,
    /// Batch API jobs submitted during the trace (served on the capacity interactive
    /// traffic leaves; see `batch`).
    pub batches: Vec<BatchJob>,
    /// The prompt shift and the weights of the mix before it: `classes` holds the mix (at its
    /// weights before the shift) and then each class's shifted twin (weight 0).
    shift: Option<(PromptShift, Vec<f64>)>,
    source: Source,
}

/// The traces shipped inside the binary.
pub const BUNDLED: [(&str, &str); 4] = [
    ("diurnal", include_str!("../../traces/diurnal.yaml")),
    ("bursty", include_str!("../../traces/bursty.yaml")),
    ("ramp", include_str!("../../traces/ramp.yaml")),
    (
        "prompt-shift",
        include_str!("../../traces/prompt-shift.yaml"),
    ),
];

impl Trace {
    /// Loads a bundled trace by name, a member of the trace family (`family:SEED`), a `.jsonl`
    /// recording, or a YAML trace spec file.
    pub fn load(name_or_path: &str) -> Result<Self, SimError> {
        if let Some(seed) = name_or_path.strip_prefix("family:") {
            let seed = seed.trim().parse::<u64>().map_err(|_| {
                SimError::Usage(format!(
                    "trace `{name_or_path}`: the family takes a seed, e.g. `family:7`"
                ))
            })?;
            return Ok(Self::family(seed));
        }
        if let Some((_, text)) = BUNDLED.iter().find(|(name, _)| *name == name_or_path) {
            return Self::from_spec_yaml(text, name_or_path);
        }
        let text = std::fs::read_to_string(name_or_path).map_err(|source| SimError::Read {
            path: name_or_path.to_string(),
            source,
        })?;
        if name_or_path.ends_with(".jsonl") {
            Self::from_jsonl(&text, name_or_path)
        } else {
            Self::from_spec_yaml(&text, name_or_path)
        }
    }

    /// The trace family's member `seed` (see `family`).
    pub fn family(seed: u64) -> Self {
        let generated = super::family::generate(seed);
        Self {
            name: format!("family:{seed} ({})", generated.description),
            duration_s: super::family::DURATION_S,
            classes: generated.classes,
            batches: Vec::new(),
            shift: None,
            source: Source::Sampled {
                per_second: generated.per_second,
                scale: 1.0,
            },
        }
    }

    /// Parses a YAML trace spec.
    pub fn from_spec_yaml(text: &str, origin: &str) -> Result<Self, SimError> {
        let spec: TraceSpec = serde_saphyr::from_str(text).map_err(|e| SimError::Trace {
            origin: origin.to_string(),
            message: e.to_string(),
        })?;
        let bad = |message: String| SimError::Trace {
            origin: origin.to_string(),
            message,
        };
        if spec.duration_s.is_nan() || spec.duration_s <= 0.0 {
            return Err(bad(format!(
                "duration_s must be positive, got {}",
                spec.duration_s
            )));
        }
        if spec.mix.is_empty() || spec.mix.len() > MAX_CLASSES {
            return Err(bad(format!(
                "mix needs 1 to {MAX_CLASSES} classes, got {}",
                spec.mix.len()
            )));
        }
        if let Curve::Points { points } = &spec.curve
            && (points.is_empty() || points.windows(2).any(|w| w[1][0] < w[0][0]))
        {
            return Err(bad(
                "curve points must be non-empty and sorted by time".into()
            ));
        }
        let mut classes = normalise(&spec.mix).map_err(bad)?;
        let shift = match spec.prompt_shift {
            None => None,
            Some(shift) => {
                let sane = shift.factor.is_finite()
                    && shift.factor > 0.0
                    && shift.start_s >= 0.0
                    && shift.ramp_s >= 0.0;
                if !sane || 2 * classes.len() > MAX_CLASSES {
                    return Err(bad(format!(
                        "prompt_shift needs factor > 0, start_s ≥ 0, ramp_s ≥ 0 and at most {} \
                         mix classes",
                        MAX_CLASSES / 2
                    )));
                }
                let weights = classes.iter().map(|c| c.weight).collect();
                let twins: Vec<RequestClass> = (classes.iter())
                    .map(|c| RequestClass {
                        weight: 0.0,
                        input_tokens: c.input_tokens * shift.factor,
                        output_tokens: c.output_tokens,
                    })
                    .collect();
                classes.extend(twins);
                Some((shift, weights))
            }
        };
        Ok(Self {
            name: spec.name.clone(),
            duration_s: spec.duration_s,
            classes,
            batches: Vec::new(),
            shift,
            source: Source::Curve { spec, scale: 1.0 },
        })
    }

    /// Parses a JSONL recording; lengths are grouped into four classes by output-length quartile.
    pub fn from_jsonl(text: &str, origin: &str) -> Result<Self, SimError> {
        #[derive(Deserialize)]
        struct Line {
            t: f64,
            input_tokens: f64,
            output_tokens: f64,
        }
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct BatchLine {
            batch: BatchFields,
        }
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct BatchFields {
            at_s: f64,
            output_tokens: f64,
            window_s: f64,
        }
        let mut lines = Vec::new();
        let mut batches = Vec::new();
        for (n, line) in text
            .lines()
            .enumerate()
            .filter(|(_, l)| !l.trim().is_empty())
        {
            let bad = |message: String| SimError::Trace {
                origin: origin.to_string(),
                message: format!("line {}: {message}", n + 1),
            };
            let value: serde_json::Value =
                serde_json::from_str(line).map_err(|e| bad(e.to_string()))?;
            if value.get("batch").is_some() {
                let b: BatchLine = serde_json::from_value(value).map_err(|e| bad(e.to_string()))?;
                let job = BatchJob {
                    at_s: b.batch.at_s,
                    output_tokens: b.batch.output_tokens,
                    window_s: b.batch.window_s,
                };
                job.validate().map_err(bad)?;
                batches.push(job);
                continue;
            }
            let parsed: Line = serde_json::from_value(value).map_err(|e| bad(e.to_string()))?;
            let ok = parsed.t >= 0.0 && parsed.input_tokens >= 0.0 && parsed.output_tokens >= 1.0;
            if !ok || !parsed.t.is_finite() {
                let message = format!(
                    "line {}: t ≥ 0, input_tokens ≥ 0 and output_tokens ≥ 1 are required",
                    n + 1
                );
                return Err(SimError::Trace {
                    origin: origin.to_string(),
                    message,
                });
            }
            lines.push(parsed);
        }
        if lines.is_empty() {
            return Err(SimError::Trace {
                origin: origin.to_string(),
                message: "no requests".into(),
            });
        }
        lines.sort_by(|a, b| a.t.total_cmp(&b.t));
        let mut outputs: Vec<f64> = lines.iter().map(|l| l.output_tokens).collect();
        outputs.sort_by(f64::total_cmp);
        let bounds: Vec<f64> = (1..4).map(|q| outputs[outputs.len() * q / 4]).collect();
        let class_of = |out: f64| bounds.iter().filter(|b| out >= **b).count();
        let mut sums = [[0.0f64; 3]; 4];
        for l in &lines {
            let c = class_of(l.output_tokens);
            sums[c][0] += 1.0;
            sums[c][1] += l.input_tokens;
            sums[c][2] += l.output_tokens;
        }
        // Empty quartiles (many equal lengths) are dropped, and their requests remapped.
        let kept: Vec<usize> = (0..4).filter(|&c| sums[c][0] > 0.0).collect();
        let mix: Vec<RequestClass> = kept
            .iter()
            .map(|&c| RequestClass {
                weight: sums[c][0],
                input_tokens: sums[c][1] / sums[c][0],
                output_tokens: sums[c][2] / sums[c][0],
            })
            .collect();
        let duration_s = lines.last().map_or(1.0, |l| l.t + 1.0);
        let mut per_second = vec![0.0; duration_s.ceil() as usize + 1];
        let requests = lines
            .iter()
            .map(|l| {
                per_second[l.t as usize] += 1.0;
                let class = kept
                    .iter()
                    .position(|&c| c == class_of(l.output_tokens))
                    .unwrap_or(0);
                (l.t, class as u8)
            })
            .collect();
        let classes = normalise(&mix).map_err(|message| SimError::Trace {
            origin: origin.to_string(),
            message,
        })?;
        Ok(Self {
            name: origin.to_string(),
            duration_s,
            classes,
            batches,
            shift: None,
            source: Source::Recorded {
                requests,
                per_second,
                next: 0,
            },
        })
    }

    /// Sets the length: a rate curve runs as long as asked (a diurnal curve repeats, points
    /// hold their last rate); a recording can only be cut shorter.
    pub fn set_duration(&mut self, duration_s: f64) {
        self.duration_s = match self.source {
            Source::Curve { .. } | Source::Sampled { .. } => duration_s,
            Source::Recorded { .. } => self.duration_s.min(duration_s),
        };
    }

    /// Scales a rate-curve trace so its peak is `peak_rps` (recordings are replayed as is).
    pub fn scale_peak(&mut self, peak_rps: f64) -> Result<(), SimError> {
        let peak = self.peak_rps();
        match &mut self.source {
            Source::Curve { scale, .. } | Source::Sampled { scale, .. } if peak > 0.0 => {
                *scale *= peak_rps / peak;
                Ok(())
            }
            _ => Err(SimError::Usage(
                "--peak-rps applies to rate-curve traces only".into(),
            )),
        }
    }

    /// Highest expected rate over the trace (one-second resolution), requests/s.
    pub fn peak_rps(&self) -> f64 {
        (0..self.duration_s.ceil() as usize)
            .map(|s| self.rate_rps(s as f64))
            .fold(0.0, f64::max)
    }

    /// Expected requests/s at `t_s` (what an oracle knows about the future).
    pub fn rate_rps(&self, t_s: f64) -> f64 {
        match &self.source {
            Source::Curve { spec, scale } => scale * curve_rate(spec, t_s),
            Source::Sampled { per_second, scale } => {
                let t = t_s.max(0.0);
                let i = t.floor() as usize;
                let at = |i: usize| per_second.get(i).or(per_second.last()).copied();
                match (at(i), at(i + 1)) {
                    (Some(a), Some(b)) => scale * (a + (b - a) * t.fract()),
                    _ => 0.0,
                }
            }
            Source::Recorded { per_second, .. } => per_second
                .get(t_s.max(0.0) as usize)
                .copied()
                .unwrap_or(0.0),
        }
    }

    /// Mean output tokens per request over the mix.
    pub fn mean_output_tokens(&self) -> f64 {
        self.classes
            .iter()
            .map(|c| c.weight * c.output_tokens)
            .sum()
    }

    /// Share of requests in `class` at `t_s` (the mix's weight but during a prompt shift).
    fn weight_at(&self, class: usize, t_s: f64) -> f64 {
        let Some((shift, weights)) = &self.shift else {
            return self.classes.get(class).map_or(0.0, |c| c.weight);
        };
        let share = shift.share(t_s);
        match weights.get(class) {
            Some(weight) => weight * (1.0 - share),
            None => weights
                .get(class - weights.len())
                .map_or(0.0, |weight| weight * share),
        }
    }

    /// Arrivals in `[t_s, t_s + dt_s)`, per class.
    pub fn arrivals(&mut self, t_s: f64, dt_s: f64, rng: &mut Rng) -> ClassCounts {
        let mut counts = [0.0; MAX_CLASSES];
        match &mut self.source {
            Source::Curve { .. } | Source::Sampled { .. } => {
                let mean = self.rate_rps(t_s + dt_s / 2.0) * dt_s;
                for (class, count) in counts.iter_mut().enumerate().take(self.classes.len()) {
                    *count = rng.poisson(mean * self.weight_at(class, t_s));
                }
            }
            Source::Recorded { requests, next, .. } => {
                while let Some(&(_, class)) = requests.get(*next).filter(|(t, _)| *t < t_s + dt_s) {
                    counts[usize::from(class)] += 1.0;
                    *next += 1;
                }
            }
        }
        counts
    }
}

fn normalise(mix: &[RequestClass]) -> Result<Vec<RequestClass>, String> {
    let total: f64 = mix.iter().map(|c| c.weight).sum();
    let valid =
        |c: &RequestClass| c.weight >= 0.0 && c.input_tokens >= 0.0 && c.output_tokens >= 1.0;
    if total.is_nan() || total <= 0.0 || !mix.iter().all(valid) {
        return Err(
            "mix weights must be ≥ 0 with a positive sum, input_tokens ≥ 0, output_tokens ≥ 1"
                .into(),
        );
    }
    Ok(mix
        .iter()
        .map(|c| RequestClass {
            weight: c.weight / total,
            ..*c
        })
        .collect())
}

fn curve_rate(spec: &TraceSpec, t_s: f64) -> f64 {
    let base = match &spec.curve {
        Curve::Diurnal {
            trough_rps,
            peak_rps,
            period_s,
            peak_at_s,
        } => {
            let phase = std::f64::consts::TAU * (t_s - peak_at_s) / period_s;
            trough_rps + (peak_rps - trough_rps) * 0.5 * (1.0 + phase.cos())
        }
        Curve::Points { points } => piecewise(points, t_s),
    };
    let multiplier = spec
        .bursts
        .iter()
        .map(|b| burst_factor(b, t_s))
        .fold(1.0, f64::max);
    (base * multiplier).max(0.0)
}

fn piecewise(points: &[[f64; 2]], t_s: f64) -> f64 {
    match points.iter().position(|p| p[0] > t_s) {
        None => points.last().map_or(0.0, |p| p[1]),
        Some(0) => points[0][1],
        Some(i) => {
            let ([t0, r0], [t1, r1]) = (points[i - 1], points[i]);
            r0 + (r1 - r0) * (t_s - t0) / (t1 - t0)
        }
    }
}

fn burst_factor(b: &Burst, t_s: f64) -> f64 {
    let into = t_s - b.start_s;
    let ramp = b.ramp_s.max(1e-9);
    let share = if into < 0.0 || into > 2.0 * b.ramp_s + b.hold_s {
        0.0
    } else if into < b.ramp_s {
        into / ramp
    } else if into <= b.ramp_s + b.hold_s {
        1.0
    } else {
        (2.0 * b.ramp_s + b.hold_s - into) / ramp
    };
    1.0 + (b.multiplier - 1.0) * share
}
