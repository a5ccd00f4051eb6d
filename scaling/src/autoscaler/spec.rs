//! The policy's input from the `ModelDeployment` spec: replica bounds, the SLO and the knobs
//! of the scaling loop, as plain numbers (the CRD owner maps strings like "5m" to these).

use std::time::Duration;

/// [`PolicySpec::prompt_token_cost`] unless told: a prompt token costs a fraction of an
/// output token on a GPU engine (prefill runs batched; decode reads the KV cache a token at a
/// time). `tokenscale sim` derives it from its profile (0.63 for the H100 profile on the
/// prompt-shift trace's mix); this default is on the low side, since weighing prompts too
/// little only leaves to the SLO's breaking what it would have seen anyway.
pub const DEFAULT_PROMPT_TOKEN_COST: f64 = 0.3;

/// The latency targets a model is held to, both at the 95th percentile.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Slo {
    /// p95 time to first token, seconds.
    pub ttft_p95_s: f64,
    /// p95 time per output token (after the first), seconds.
    pub tpot_p95_s: f64,
}

/// Everything the policy needs to know about one model's scaling rules.
#[derive(Debug, Clone, PartialEq)]
pub struct PolicySpec {
    /// Never fewer replicas than this (0 allows scale to zero).
    pub min_replicas: u32,
    /// Never more replicas than this.
    pub max_replicas: u32,
    /// With `min_replicas == 0`: go to zero after this long without any demand. `None`: never.
    pub scale_to_zero_after: Option<Duration>,
    /// The latency SLO.
    pub slo: Slo,
    /// Share (0–1] of the learned capacity a replica is planned to run at.
    pub target_utilization: f64,
    /// Demand is averaged over this window (Knative's stable window, 60 s).
    pub stable_window: Duration,
    /// Short window that reacts to bursts (Knative's panic window, 6 s).
    pub panic_window: Duration,
    /// Panic when the panic-window demand needs at least this many times the ready replicas.
    pub panic_threshold: f64,
    /// Scale-up per decision is capped at `max(current × this, current + scale_up_min_step)`.
    pub scale_up_max_factor: f64,
    /// Scale-up per decision may always add at least this many replicas.
    pub scale_up_min_step: u32,
    /// Scale-down per decision removes at most `max(1, floor(current × this))` replicas.
    pub scale_down_max_fraction: f64,
    /// A scale-down uses the highest recommendation of this long a window (hysteresis).
    pub scale_down_stabilization: Duration,
    /// Learn the model's recurring demand from its history and pre-warm for a predicted rise
    /// (`foresight`); on by default.
    pub foresight: bool,
    /// Starting estimate of output tokens/s one GPU sustains within the SLO (from a bench or a
    /// profile). `None`: learned from the first measurements.
    pub initial_tokens_per_s_per_gpu: Option<f64>,
    /// GPUs one replica uses; capacity per replica = per GPU × this.
    pub gpus_per_replica: u32,
    /// How often `decide` runs.
    pub period: Duration,
    /// How long a new replica takes to become ready (scheduling, image, weights, warm-up).
    /// On rising demand the policy plans this far ahead, so capacity arrives in time.
    pub startup_time: Duration,
    /// What one prompt token costs a replica, in output tokens (its prefill against a decode
    /// step's share): demand is weighed by the prompt mix with it (see `work`). 0: prompts
    /// are not counted.
    pub prompt_token_cost: f64,
}

impl PolicySpec {
    /// A spec with the documented defaults and the given bounds and SLO.
    pub fn new(min_replicas: u32, max_replicas: u32, slo: Slo) -> Self {
        Self {
            min_replicas,
            max_replicas,
            scale_to_zero_after: None,
            slo,
            target_utilization: 0.8,
            stable_window: Duration::from_secs(60),
            panic_window: Duration::from_secs(6),
            panic_threshold: 2.0,
            scale_up_max_factor: 2.0,
            scale_up_min_step: 4,
            scale_down_max_fraction: 0.25,
            scale_down_stabilization: Duration::from_secs(60),
            foresight: true,
            initial_tokens_per_s_per_gpu: None,
            gpus_per_replica: 1,
            period: Duration::from_secs(10),
            startup_time: Duration::from_secs(60),
            prompt_token_cost: DEFAULT_PROMPT_TOKEN_COST,
        }
    }

    /// Checks the numbers make sense together; the CRD schema should make this unreachable.
    pub fn validate(&self) -> Result<(), SpecError> {
        if self.min_replicas > self.max_replicas {
            return Err(SpecError::Bounds {
                min: self.min_replicas,
                max: self.max_replicas,
            });
        }
        let positive = |name: &'static str, v: f64| {
            if v.is_finite() && v > 0.0 {
                Ok(())
            } else {
                Err(SpecError::NotPositive { name, value: v })
            }
        };
        positive("slo.ttft_p95_s", self.slo.ttft_p95_s)?;
        positive("slo.tpot_p95_s", self.slo.tpot_p95_s)?;
        positive("target_utilization", self.target_utilization)?;
        positive("scale_up_max_factor", self.scale_up_max_factor)?;
        positive("scale_down_max_fraction", self.scale_down_max_fraction)?;
        positive("stable_window", self.stable_window.as_secs_f64())?;
        positive("period", self.period.as_secs_f64())?;
        if self.target_utilization > 1.0 {
            return Err(SpecError::NotPositive {
                name: "target_utilization ≤ 1",
                value: self.target_utilization,
            });
        }
        if let Some(hint) = self.initial_tokens_per_s_per_gpu {
            positive("initial_tokens_per_s_per_gpu", hint)?;
        }
        if !(self.prompt_token_cost.is_finite() && self.prompt_token_cost >= 0.0) {
            return Err(SpecError::NotPositive {
                name: "prompt_token_cost ≥ 0",
                value: self.prompt_token_cost,
            });
        }
        if self.gpus_per_replica == 0 {
            return Err(SpecError::NotPositive {
                name: "gpus_per_replica",
                value: 0.0,
            });
        }
        Ok(())
    }
}

/// A policy spec that cannot be acted on.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum SpecError {
    /// `min_replicas` above `max_replicas`.
    #[error("min replicas {min} is above max replicas {max}")]
    Bounds {
        /// The minimum given.
        min: u32,
        /// The maximum given.
        max: u32,
    },
    /// A number that must be positive and finite is not.
    #[error("{name} must be a positive number, got {value}")]
    NotPositive {
        /// Which field.
        name: &'static str,
        /// The value given.
        value: f64,
    },
}
