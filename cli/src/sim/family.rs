//! The trace family (`--trace family:SEED`): a generator that draws a workload's shape from a
//! distribution instead of replaying one tuned example. A policy that holds the SLO at a fair
//! cost across the family holds it on workloads it was never tuned on; one tuned to a trace
//! does not. The seed picks everything; the same seed gives the same trace on every machine.
//!
//! A trace is `base × baseline(t) × events(t)` over [`DURATION_S`]:
//! - **base** rate: log-uniform in 20–400 requests/s;
//! - **baseline**: flat (40%) or a diurnal cosine over the trace (60%), its trough 15–60% of
//!   its peak, at a random phase;
//! - **events**, one after another with quiet gaps of 5–40 minutes between them, each drawn
//!   from: a *step* of 1.5–5× held 2–30 minutes (10 s edges); *on/off* load of 1.5–4× in 2–5
//!   cycles, each on and each off 2–20 minutes; a *ramp* to 1.5–5× over 1–60 minutes, held
//!   5–30 minutes, and back over 1–60 minutes; a *flash crowd* to 3–5× within 20–60 s that
//!   decays with a time constant of 3–15 minutes; or *nothing* for 10–60 minutes;
//! - **request lengths** from lognormals (prompt median 200–1,500 tokens, output median
//!   60–400 tokens, σ 0.5–1.0 each), cut into six equally likely classes at their quantiles.
//!
//! The shapes and their ranges come from the autoscaling issue's description of what real
//! fleets see; they are not fitted to any policy's results.

use super::rng::Rng;
use super::trace::{MAX_CLASSES, RequestClass};

/// Length of a family trace: a day compressed to 12 hours, long enough for several events.
pub const DURATION_S: f64 = 12.0 * 3600.0;
/// Request classes a family trace has.
const CLASSES: usize = 6;
const _: () = assert!(
    CLASSES <= MAX_CLASSES,
    "the fluid model holds at most MAX_CLASSES"
);
/// A step's edges are this steep: abrupt, but not a discontinuity within one tick.
const EDGE_S: f64 = 10.0;

/// A generated trace: its rate every second and its request mix.
#[derive(Debug, Clone)]
pub struct Generated {
    /// Expected requests/s at each whole second.
    pub per_second: Vec<f64>,
    /// The request mix (weights sum to 1).
    pub classes: Vec<RequestClass>,
    /// The events drawn, in words (for reports and for telling seeds apart).
    pub description: String,
}

/// One event of the shape, as a multiplier over time.
#[derive(Debug, Clone, Copy)]
enum Event {
    /// A plateau with steep edges (a step, or one "on" of on/off load).
    Plateau {
        start_s: f64,
        rise_s: f64,
        hold_s: f64,
        fall_s: f64,
        multiplier: f64,
    },
    /// A flash crowd: a fast rise, a short hold, an exponential decay.
    Flash {
        start_s: f64,
        rise_s: f64,
        hold_s: f64,
        decay_s: f64,
        multiplier: f64,
    },
}

impl Event {
    fn factor(&self, t_s: f64) -> f64 {
        match *self {
            Self::Plateau {
                start_s,
                rise_s,
                hold_s,
                fall_s,
                multiplier,
            } => {
                let into = t_s - start_s;
                let share = if into < 0.0 || into > rise_s + hold_s + fall_s {
                    0.0
                } else if into < rise_s {
                    into / rise_s
                } else if into <= rise_s + hold_s {
                    1.0
                } else {
                    (rise_s + hold_s + fall_s - into) / fall_s
                };
                1.0 + (multiplier - 1.0) * share
            }
            Self::Flash {
                start_s,
                rise_s,
                hold_s,
                decay_s,
                multiplier,
            } => {
                let into = t_s - start_s;
                let share = if into < 0.0 {
                    0.0
                } else if into < rise_s {
                    into / rise_s
                } else if into <= rise_s + hold_s {
                    1.0
                } else {
                    (-(into - rise_s - hold_s) / decay_s).exp()
                };
                1.0 + (multiplier - 1.0) * share
            }
        }
    }
}

/// Draws the trace of `seed`.
pub fn generate(seed: u64) -> Generated {
    // A different stream from the arrival noise of the same number.
    let mut rng = Rng::new(seed.wrapping_mul(0x2545_F491_4F6C_DD1D) ^ 0xFA41_1E5E_ED00_0001);
    let mut between = |lo: f64, hi: f64| lo + (hi - lo) * rng.uniform();
    let base_rps = (20f64.ln() + (400f64.ln() - 20f64.ln()) * between(0.0, 1.0)).exp();
    let diurnal = between(0.0, 1.0) < 0.6;
    let trough = between(0.15, 0.6);
    let phase = between(0.0, std::f64::consts::TAU);
    let mut words = vec![format!(
        "base {base_rps:.0} req/s, {}",
        if diurnal {
            format!("diurnal (trough {:.0}% of peak)", trough * 100.0)
        } else {
            "flat".to_string()
        }
    )];

    let mut events = Vec::new();
    let mut t_s = 60.0 * between(5.0, 30.0);
    while t_s < DURATION_S {
        let kind = between(0.0, 1.0);
        let minutes = |rng: &mut dyn FnMut(f64, f64) -> f64, lo: f64, hi: f64| 60.0 * rng(lo, hi);
        let end_s = if kind < 0.25 {
            let multiplier = between(1.5, 5.0);
            let hold_s = minutes(&mut between, 2.0, 30.0);
            events.push(Event::Plateau {
                start_s: t_s,
                rise_s: EDGE_S,
                hold_s,
                fall_s: EDGE_S,
                multiplier,
            });
            words.push(format!(
                "step {multiplier:.1}x for {:.0} min at {:.0} min",
                hold_s / 60.0,
                t_s / 60.0
            ));
            t_s + hold_s + 2.0 * EDGE_S
        } else if kind < 0.45 {
            let multiplier = between(1.5, 4.0);
            let cycles = between(2.0, 6.0).floor() as u32;
            let on_s = minutes(&mut between, 2.0, 20.0);
            let off_s = minutes(&mut between, 2.0, 20.0);
            for cycle in 0..cycles {
                events.push(Event::Plateau {
                    start_s: t_s + f64::from(cycle) * (on_s + off_s),
                    rise_s: EDGE_S,
                    hold_s: on_s,
                    fall_s: EDGE_S,
                    multiplier,
                });
            }
            words.push(format!(
                "on/off {multiplier:.1}x, {cycles} cycles of {:.0} on / {:.0} off min at {:.0} min",
                on_s / 60.0,
                off_s / 60.0,
                t_s / 60.0
            ));
            t_s + f64::from(cycles) * (on_s + off_s)
        } else if kind < 0.65 {
            let multiplier = between(1.5, 5.0);
            let rise_s = minutes(&mut between, 1.0, 60.0);
            let hold_s = minutes(&mut between, 5.0, 30.0);
            let fall_s = minutes(&mut between, 1.0, 60.0);
            events.push(Event::Plateau {
                start_s: t_s,
                rise_s,
                hold_s,
                fall_s,
                multiplier,
            });
            words.push(format!(
                "ramp to {multiplier:.1}x over {:.0} min, {:.0} min held, down over {:.0} min at {:.0} min",
                rise_s / 60.0,
                hold_s / 60.0,
                fall_s / 60.0,
                t_s / 60.0
            ));
            t_s + rise_s + hold_s + fall_s
        } else if kind < 0.8 {
            let multiplier = between(3.0, 5.0);
            let rise_s = between(20.0, 60.0);
            let hold_s = minutes(&mut between, 0.5, 3.0);
            let decay_s = minutes(&mut between, 3.0, 15.0);
            events.push(Event::Flash {
                start_s: t_s,
                rise_s,
                hold_s,
                decay_s,
                multiplier,
            });
            words.push(format!(
                "flash crowd {multiplier:.1}x in {rise_s:.0} s, decaying over {:.0} min at {:.0} min",
                decay_s / 60.0,
                t_s / 60.0
            ));
            // The decay is 95% done after three time constants.
            t_s + rise_s + hold_s + 3.0 * decay_s
        } else {
            t_s + minutes(&mut between, 10.0, 60.0)
        };
        t_s = end_s + minutes(&mut between, 5.0, 40.0);
    }

    let per_second = (0..=DURATION_S as usize)
        .map(|s| {
            let t = s as f64;
            let day = if diurnal {
                let cos = (std::f64::consts::TAU * t / DURATION_S + phase).cos();
                trough + (1.0 - trough) * 0.5 * (1.0 + cos)
            } else {
                1.0
            };
            // Events do not overlap in time, but a flash crowd's tail may reach the next one:
            // the larger multiplier holds.
            let lift = events.iter().map(|e| e.factor(t)).fold(1.0, f64::max);
            base_rps * day * lift
        })
        .collect();

    let classes = mix(&mut between);
    words.push(format!(
        "mean prompt {:.0} / output {:.0} tokens",
        classes
            .iter()
            .map(|c| c.weight * c.input_tokens)
            .sum::<f64>(),
        classes
            .iter()
            .map(|c| c.weight * c.output_tokens)
            .sum::<f64>()
    ));
    Generated {
        per_second,
        classes,
        description: words.join("; "),
    }
}

/// Six equally likely classes at the midpoint quantiles of lognormal prompt and output lengths
/// (drawn together: long prompts do not imply long answers, so each class pairs the same
/// quantile of both only after a shuffle of the output quantiles).
fn mix(between: &mut dyn FnMut(f64, f64) -> f64) -> Vec<RequestClass> {
    let prompt_median = between(200.0, 1500.0);
    let prompt_sigma = between(0.5, 1.0);
    let output_median = between(60.0, 400.0);
    let output_sigma = between(0.5, 1.0);
    let mut order: Vec<usize> = (0..CLASSES).collect();
    for i in (1..CLASSES).rev() {
        let j = (between(0.0, (i + 1) as f64).floor() as usize).min(i);
        order.swap(i, j);
    }
    (0..CLASSES)
        .map(|i| {
            let z = |k: usize| normal_quantile((k as f64 + 0.5) / CLASSES as f64);
            RequestClass {
                weight: 1.0 / CLASSES as f64,
                input_tokens: (prompt_median * (prompt_sigma * z(i)).exp())
                    .round()
                    .clamp(1.0, 16_000.0),
                output_tokens: (output_median * (output_sigma * z(order[i])).exp())
                    .round()
                    .clamp(1.0, 4_000.0),
            }
        })
        .collect()
}

/// The standard normal's quantile (Acklam's rational approximation, |error| < 1.2e-9).
fn normal_quantile(p: f64) -> f64 {
    const A: [f64; 6] = [
        -3.969_683_028_665_376e1,
        2.209_460_984_245_205e2,
        -2.759_285_104_469_687e2,
        1.383_577_518_672_69e2,
        -3.066_479_806_614_716e1,
        2.506_628_277_459_239,
    ];
    const B: [f64; 5] = [
        -5.447_609_879_822_406e1,
        1.615_858_368_580_409e2,
        -1.556_989_798_598_866e2,
        6.680_131_188_771_972e1,
        -1.328_068_155_288_572e1,
    ];
    const C: [f64; 6] = [
        -7.784_894_002_430_293e-3,
        -3.223_964_580_411_365e-1,
        -2.400_758_277_161_838,
        -2.549_732_539_343_734,
        4.374_664_141_464_968,
        2.938_163_982_698_783,
    ];
    const D: [f64; 4] = [
        7.784_695_709_041_462e-3,
        3.224_671_290_700_398e-1,
        2.445_134_137_142_996,
        3.754_408_661_907_416,
    ];
    let tail = |q: f64| {
        (((((C[0] * q + C[1]) * q + C[2]) * q + C[3]) * q + C[4]) * q + C[5])
            / ((((D[0] * q + D[1]) * q + D[2]) * q + D[3]) * q + 1.0)
    };
    if p < 0.02425 {
        tail((-2.0 * p.ln()).sqrt())
    } else if p > 1.0 - 0.02425 {
        -tail((-2.0 * (1.0 - p).ln()).sqrt())
    } else {
        let q = p - 0.5;
        let r = q * q;
        (((((A[0] * r + A[1]) * r + A[2]) * r + A[3]) * r + A[4]) * r + A[5]) * q
            / (((((B[0] * r + B[1]) * r + B[2]) * r + B[3]) * r + B[4]) * r + 1.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seed_gives_the_same_trace_and_seeds_differ() {
        let (a, b) = (generate(7), generate(7));
        assert_eq!(a.per_second, b.per_second);
        assert_eq!(a.description, b.description);
        assert_ne!(generate(8).per_second, a.per_second);
    }

    #[test]
    fn shapes_stay_within_their_ranges() {
        for seed in 0..50 {
            let g = generate(seed);
            assert_eq!(g.per_second.len(), DURATION_S as usize + 1);
            // base ≥ 20 × trough ≥ 0.15; peak ≤ 400 × 5.
            assert!(g.per_second.iter().all(|r| *r >= 2.9 && *r <= 2000.0));
            let weights: f64 = g.classes.iter().map(|c| c.weight).sum();
            assert!((weights - 1.0).abs() < 1e-9);
            assert!(g.classes.iter().all(|c| c.output_tokens >= 1.0));
        }
    }

    #[test]
    fn normal_quantiles() {
        assert!(normal_quantile(0.5).abs() < 1e-9);
        assert!((normal_quantile(0.975) - 1.959_964).abs() < 1e-5);
        assert!((normal_quantile(0.01) + 2.326_348).abs() < 1e-5);
    }
}
