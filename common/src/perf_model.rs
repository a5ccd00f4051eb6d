//! The one performance model of a replica, shared by the engine's `sim` backend and
//! `tokenscale sim`: step time = t0 + a·(prefill tokens) + b·(decode sequences) + c·(KV tokens
//! read), a KV block budget, batch limits and a cold-start delay. Profiles are YAML (or JSON)
//! files, bundled or written by `tokenscale bench --calibrate`.

use serde::{Deserialize, Serialize};

/// Cost of one engine step (one batched forward pass), in seconds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StepCost {
    /// Fixed cost of a step: weights read once, launches, scheduling (seconds).
    pub t0_s: f64,
    /// Per prompt token computed in the step (seconds per token).
    pub prefill_s_per_token: f64,
    /// Per sequence decoding one token in the step (seconds per sequence).
    pub decode_s_per_seq: f64,
    /// Per token of KV cache read by attention in the step (seconds per token).
    pub kv_read_s_per_token: f64,
}

/// The KV cache of one replica.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KvBudget {
    /// Tokens per block.
    pub block_tokens: u32,
    /// Blocks in the pool.
    pub blocks: u32,
}

/// A named performance profile: one model on one kind of hardware.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PerfProfile {
    /// Short name, e.g. `llama3-8b-h100`.
    pub name: String,
    /// Model and hardware in words.
    #[serde(default)]
    pub description: String,
    /// Where the numbers come from (published figures, or a calibration run).
    #[serde(default)]
    pub source: String,
    /// GPUs one replica uses (0 for a CPU profile: then it counts as one device).
    pub gpus_per_replica: u32,
    /// Step cost.
    pub step: StepCost,
    /// KV cache budget.
    pub kv: KvBudget,
    /// Most sequences in one batch.
    pub max_num_seqs: u32,
    /// Most tokens (prefill plus decode) in one step.
    pub max_batch_tokens: u32,
    /// Seconds from "replica created" to "ready" (image, weights, warm-up).
    pub cold_start_s: f64,
}

/// Profiles shipped inside the binaries, by name (sources in `common/profiles/`): what
/// `tokenscale sim --profile` and the engine's `--sim-profile` accept besides a file path.
pub const BUNDLED_PROFILES: [(&str, &str); 2] = [
    (
        "llama3-8b-h100",
        include_str!("../profiles/llama3-8b-h100.yaml"),
    ),
    ("smollm2-cpu", include_str!("../profiles/smollm2-cpu.yaml")),
];

/// The YAML text of the bundled profile `name`.
pub fn bundled_profile(name: &str) -> Option<&'static str> {
    BUNDLED_PROFILES
        .iter()
        .find(|(bundled, _)| *bundled == name)
        .map(|(_, text)| *text)
}

/// The names of the bundled profiles, comma-separated (for messages).
pub fn bundled_profile_names() -> String {
    BUNDLED_PROFILES.map(|(name, _)| name).join(", ")
}

/// A profile that could not be read or makes no sense.
#[derive(Debug, thiserror::Error)]
pub enum PerfModelError {
    /// Not valid YAML/JSON for a profile.
    #[error("performance profile is not valid: {0}")]
    Parse(String),
    /// A field out of range.
    #[error("performance profile `{profile}`: {field} must be {rule}, got {value}")]
    Invalid {
        /// Profile name.
        profile: String,
        /// Field path.
        field: &'static str,
        /// What it must be.
        rule: &'static str,
        /// What it is.
        value: f64,
    },
}

impl PerfProfile {
    /// Parses a YAML (or JSON, a subset) profile and checks it.
    pub fn from_yaml(text: &str) -> Result<Self, PerfModelError> {
        let profile: Self =
            serde_saphyr::from_str(text).map_err(|e| PerfModelError::Parse(e.to_string()))?;
        profile.validate()?;
        Ok(profile)
    }

    /// Checks every number is in range.
    pub fn validate(&self) -> Result<(), PerfModelError> {
        let invalid = |field, rule, value| PerfModelError::Invalid {
            profile: self.name.clone(),
            field,
            rule,
            value,
        };
        let non_negative = [
            ("step.t0_s", self.step.t0_s),
            ("step.prefill_s_per_token", self.step.prefill_s_per_token),
            ("step.decode_s_per_seq", self.step.decode_s_per_seq),
            ("step.kv_read_s_per_token", self.step.kv_read_s_per_token),
            ("cold_start_s", self.cold_start_s),
        ];
        for (field, value) in non_negative {
            if !(value.is_finite() && value >= 0.0) {
                return Err(invalid(field, "a finite number ≥ 0", value));
            }
        }
        if self.step_time_s(0, 1, 0) <= 0.0 {
            return Err(invalid(
                "step",
                "a positive cost for a one-sequence step",
                0.0,
            ));
        }
        let positive = [
            ("kv.block_tokens", self.kv.block_tokens),
            ("kv.blocks", self.kv.blocks),
            ("max_num_seqs", self.max_num_seqs),
            ("max_batch_tokens", self.max_batch_tokens),
        ];
        for (field, value) in positive {
            if value == 0 {
                return Err(invalid(field, "at least 1", 0.0));
            }
        }
        Ok(())
    }

    /// Seconds one step takes with `prefill_tokens` prompt tokens computed, `decode_seqs`
    /// sequences each decoding one token, and `kv_tokens` tokens of KV cache read.
    pub fn step_time_s(&self, prefill_tokens: u64, decode_seqs: u64, kv_tokens: u64) -> f64 {
        self.step_time_s_f64(prefill_tokens as f64, decode_seqs as f64, kv_tokens as f64)
    }

    /// `step_time_s` for fractional (fluid) quantities, as a fleet simulation averages them.
    pub fn step_time_s_f64(&self, prefill_tokens: f64, decode_seqs: f64, kv_tokens: f64) -> f64 {
        let s = &self.step;
        s.t0_s
            + s.prefill_s_per_token * prefill_tokens
            + s.decode_s_per_seq * decode_seqs
            + s.kv_read_s_per_token * kv_tokens
    }

    /// Tokens the KV cache holds.
    pub fn kv_capacity_tokens(&self) -> u64 {
        u64::from(self.kv.block_tokens) * u64::from(self.kv.blocks)
    }

    /// Blocks a sequence of `tokens` tokens occupies.
    pub fn blocks_for(&self, tokens: u64) -> u64 {
        tokens.div_ceil(u64::from(self.kv.block_tokens.max(1)))
    }

    /// Devices one replica counts for in GPU-hours (a CPU profile counts as one).
    pub fn devices_per_replica(&self) -> u32 {
        self.gpus_per_replica.max(1)
    }

    /// Output tokens/s of one replica decoding `batch` sequences that each hold `context`
    /// tokens, with no prefill: the decode-only throughput curve.
    pub fn decode_tokens_per_s(&self, batch: u32, context: u32) -> f64 {
        let batch = u64::from(batch.min(self.max_num_seqs).max(1));
        batch as f64 / self.step_time_s(0, batch, batch * u64::from(context))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PROFILE: &str = "
name: test
gpus_per_replica: 1
step: {t0_s: 0.005, prefill_s_per_token: 0.00003, decode_s_per_seq: 0.00004, kv_read_s_per_token: 0.00000005}
kv: {block_tokens: 16, blocks: 1000}
max_num_seqs: 64
max_batch_tokens: 2048
cold_start_s: 30
";

    #[test]
    fn step_time_is_the_linear_model() {
        let p = PerfProfile::from_yaml(PROFILE).expect("the test profile parses");
        let t = p.step_time_s(100, 10, 20_000);
        assert!((t - (0.005 + 0.003 + 0.0004 + 0.001)).abs() < 1e-12, "{t}");
        assert_eq!(p.kv_capacity_tokens(), 16_000);
        assert_eq!(p.blocks_for(17), 2);
    }

    #[test]
    fn batching_raises_throughput_and_step_time_less() {
        let p = PerfProfile::from_yaml(PROFILE).expect("the test profile parses");
        let one = p.decode_tokens_per_s(1, 500);
        let many = p.decode_tokens_per_s(32, 500);
        assert!(many > 10.0 * one, "{one} vs {many}");
    }

    #[test]
    fn json_loads_too() {
        let json = r#"{"name":"j","gpus_per_replica":2,"step":{"t0_s":0.01,"prefill_s_per_token":0,"decode_s_per_seq":0,"kv_read_s_per_token":0},"kv":{"block_tokens":16,"blocks":8},"max_num_seqs":4,"max_batch_tokens":64,"cold_start_s":0}"#;
        assert_eq!(
            PerfProfile::from_yaml(json)
                .expect("JSON is YAML")
                .gpus_per_replica,
            2
        );
    }

    #[test]
    fn bad_profiles_name_the_field() {
        let negative = PROFILE.replace("t0_s: 0.005", "t0_s: -1");
        let err = PerfProfile::from_yaml(&negative)
            .expect_err("negative refused")
            .to_string();
        assert!(err.contains("step.t0_s"), "{err}");
        let zero_blocks = PROFILE.replace("blocks: 1000", "blocks: 0");
        assert!(
            PerfProfile::from_yaml(&zero_blocks)
                .expect_err("zero blocks refused")
                .to_string()
                .contains("kv.blocks")
        );
        let unknown = format!("{PROFILE}\nturbo: true\n");
        assert!(matches!(
            PerfProfile::from_yaml(&unknown),
            Err(PerfModelError::Parse(_))
        ));
    }
}
