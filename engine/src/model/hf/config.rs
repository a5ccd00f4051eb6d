//! `config.json` of a Hugging Face checkpoint → [`ModelConfig`]: the four Llama-family
//! architectures this engine computes, and a clear refusal, naming the key, for everything it
//! does not (experts, sliding windows it cannot cap, quantisation schemes, other activations,
//! an attention output bias). A key the file leaves out takes the value transformers' config
//! class of that architecture gives it ([`FamilyDefaults`]), never a value of another family.

use serde_json::{Map, Value};

use crate::model::config::{ModelConfig, RopeLayout};
use crate::model::rope::RopeScaling;
use crate::{Error, Result};

/// `architectures[0]` values this engine runs, and the family name each maps to.
pub const HF_ARCHITECTURES: &[(&str, &str)] = &[
    ("LlamaForCausalLM", "llama"),
    ("MistralForCausalLM", "mistral"),
    ("Qwen2ForCausalLM", "qwen2"),
    ("Qwen3ForCausalLM", "qwen3"),
];

/// What transformers' config class of a family (`LlamaConfig`, `MistralConfig`,
/// `Qwen2Config`, `Qwen3Config`) computes for a key `config.json` leaves out: what Hugging Face
/// itself runs for such a file, so the engine computes the same model. Model cards may quote
/// other values (Llama 3's 500000, Qwen2's 1000000) but those checkpoints state them; a file
/// without the key gets the class default from transformers too.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FamilyDefaults {
    /// `rope_theta`: 10000.0 in all four classes.
    pub rope_theta: f64,
    /// `num_key_value_heads`: `None` means as many as the attention heads (Llama's `None`);
    /// Mistral's class says 8, Qwen2's and Qwen3's 32.
    pub num_kv_heads: Option<usize>,
    /// `head_dim`: `None` means `hidden_size / num_attention_heads`; Qwen3's class says 128.
    pub head_dim: Option<usize>,
}

impl FamilyDefaults {
    /// The defaults of `family` (one of [`HF_ARCHITECTURES`]' families).
    pub fn of(family: &str) -> Self {
        let (num_kv_heads, head_dim) = match family {
            "mistral" => (Some(8), None),
            "qwen2" => (Some(32), None),
            "qwen3" => (Some(32), Some(128)),
            _ => (None, None),
        };
        Self {
            rope_theta: 10_000.0,
            num_kv_heads,
            head_dim,
        }
    }
}

/// Reads `config.json` text (`file` names it in errors).
pub fn parse_config(text: &str, file: &str) -> Result<ModelConfig> {
    let value: Value = serde_json::from_str(text)
        .map_err(|e| Error::Model(format!("{file} is not valid JSON: {e}")))?;
    let obj = value
        .as_object()
        .ok_or_else(|| Error::Model(format!("{file} is not a JSON object")))?;
    Keys { obj, file }.config()
}

/// Typed access to the keys of one JSON object, with errors that name file and key.
struct Keys<'a> {
    obj: &'a Map<String, Value>,
    file: &'a str,
}

impl Keys<'_> {
    fn err(&self, what: String) -> Error {
        Error::Model(format!("{}: {what}", self.file))
    }

    fn present(&self, key: &str) -> Option<&Value> {
        self.obj.get(key).filter(|v| !v.is_null())
    }

    fn usize(&self, key: &str) -> Result<Option<usize>> {
        self.present(key)
            .map(|v| {
                v.as_u64().map(|n| n as usize).ok_or_else(|| {
                    self.err(format!("{key} must be a non-negative integer, got {v}"))
                })
            })
            .transpose()
    }

    fn need_usize(&self, key: &str) -> Result<usize> {
        self.usize(key)?
            .ok_or_else(|| self.err(format!("{key} is missing")))
    }

    fn f64(&self, key: &str) -> Result<Option<f64>> {
        self.present(key)
            .map(|v| {
                v.as_f64()
                    .ok_or_else(|| self.err(format!("{key} must be a number, got {v}")))
            })
            .transpose()
    }

    fn bool(&self, key: &str) -> Result<Option<bool>> {
        self.present(key)
            .map(|v| {
                v.as_bool()
                    .ok_or_else(|| self.err(format!("{key} must be true or false, got {v}")))
            })
            .transpose()
    }

    fn str(&self, key: &str) -> Option<&str> {
        self.present(key).and_then(Value::as_str)
    }

    fn config(&self) -> Result<ModelConfig> {
        let family = self.family()?;
        self.refuse_unsupported(family)?;
        let defaults = FamilyDefaults::of(family);
        let num_heads = self.need_usize("num_attention_heads")?;
        let hidden_size = self.need_usize("hidden_size")?;
        let head_dim = match self.usize("head_dim")?.or(defaults.head_dim) {
            Some(d) => d,
            None => hidden_size.checked_div(num_heads).unwrap_or(0),
        };
        let max_positions = self.need_usize("max_position_embeddings")?;
        let rope = self.rope_parameters()?;
        let rope_scaling = self.rope_scaling(rope, max_positions)?;
        let mut context_length = match &rope_scaling {
            // `linear` and `yarn` checkpoints state the pre-training context: the extended one
            // is `factor` times it (vLLM's reading). Llama 3.1 states the extended one.
            RopeScaling::Linear { factor } => (max_positions as f64 * factor) as usize,
            RopeScaling::Yarn {
                factor,
                original_context,
                ..
            } => max_positions.max((*original_context as f64 * factor) as usize),
            _ => max_positions,
        };
        if let Some(window) = self.sliding_window(family)? {
            context_length = crate::model::gguf::cap_to_window(context_length, window);
        }
        let config = ModelConfig {
            architecture: family.to_string(),
            num_layers: self.need_usize("num_hidden_layers")?,
            hidden_size,
            ffn_size: self.need_usize("intermediate_size")?,
            num_heads,
            num_kv_heads: self
                .usize("num_key_value_heads")?
                .or(defaults.num_kv_heads)
                .unwrap_or(num_heads),
            head_dim,
            rope_base: self.rope_theta(rope)?.unwrap_or(defaults.rope_theta) as f32,
            // transformers' rotate_half: dimension i turns with i + head_dim / 2.
            rope_layout: RopeLayout::HalfSplit,
            rope_scaling,
            // 1e-6 and untied are the defaults of all four transformers classes.
            rms_norm_eps: self.f64("rms_norm_eps")?.unwrap_or(1e-6) as f32,
            context_length,
            vocab_size: self.need_usize("vocab_size")?,
            tied_embeddings: self.bool("tie_word_embeddings")?.unwrap_or(false),
            // transformers' Qwen2 attention always has q/k/v biases (and no o_proj bias), and
            // reads no attention_bias; Mistral's has none, whatever the key says; Llama's and
            // Qwen3's attention_bias (which would add o_proj's) is refused above.
            qkv_bias: family == "qwen2",
            qk_norm: family == "qwen3",
        };
        config.validate()?;
        Ok(config)
    }

    /// The family of `architectures[0]`, or an error listing what is supported.
    fn family(&self) -> Result<&'static str> {
        let supported = || {
            HF_ARCHITECTURES
                .iter()
                .map(|(a, _)| *a)
                .collect::<Vec<_>>()
                .join(", ")
        };
        let arch = self
            .present("architectures")
            .and_then(Value::as_array)
            .and_then(|a| a.first())
            .and_then(Value::as_str)
            .ok_or_else(|| {
                self.err(format!(
                    "architectures is missing (supported: {})",
                    supported()
                ))
            })?;
        HF_ARCHITECTURES
            .iter()
            .find(|(a, _)| *a == arch)
            .map(|(_, family)| *family)
            .ok_or_else(|| {
                self.err(format!(
                    "architecture {arch} is not supported (supported: {})",
                    supported()
                ))
            })
    }

    /// Refuses configurations that would make the forward compute another model.
    fn refuse_unsupported(&self, family: &str) -> Result<()> {
        for key in ["num_experts", "num_local_experts", "n_routed_experts"] {
            if self.usize(key)?.unwrap_or(0) > 0 {
                return Err(self.err(format!(
                    "{key} is set: mixture-of-experts models are not supported"
                )));
            }
        }
        if let Some(q) = self.present("quantization_config") {
            let method = q.get("quant_method").and_then(Value::as_str).unwrap_or("?");
            return Err(self.err(format!(
                "quantization_config ({method}) is set: only f32, f16 and bf16 safetensors \
                 checkpoints are supported (for quantised weights use a GGUF file)"
            )));
        }
        if let Some(act) = self.str("hidden_act").filter(|a| *a != "silu") {
            return Err(self.err(format!(
                "hidden_act {act:?} is not supported ({family} runs silu)"
            )));
        }
        if self.bool("mlp_bias")?.unwrap_or(false) {
            return Err(self.err("mlp_bias is true: MLP biases are not supported".into()));
        }
        if let Some(f) = self.f64("partial_rotary_factor")?.filter(|f| *f != 1.0) {
            return Err(self.err(format!(
                "partial_rotary_factor {f} is not supported (RoPE on the whole head only)"
            )));
        }
        // transformers' Llama and Qwen3 attention put the bias on all four projections, o_proj
        // included; the forward here has q/k/v biases only, so loading these would drop
        // o_proj's and compute another model.
        if matches!(family, "llama" | "qwen3") && self.bool("attention_bias")?.unwrap_or(false) {
            return Err(self.err(format!(
                "attention_bias is true: {family}'s attention then has a bias on o_proj too \
                 (self_attn.o_proj.bias), which this engine does not apply"
            )));
        }
        if let Some(types) = self.present("layer_types").and_then(Value::as_array) {
            let known = ["full_attention", "sliding_attention"];
            if let Some(t) = types
                .iter()
                .find(|t| !known.contains(&t.as_str().unwrap_or("")))
            {
                return Err(self.err(format!(
                    "layer_types has {t}: only full_attention and sliding_attention layers are \
                     supported"
                )));
            }
        }
        Ok(())
    }

    /// transformers 5's `rope_parameters` (the theta and the scaling in one object, in place
    /// of `rope_theta` and `rope_scaling`), when present.
    fn rope_parameters(&self) -> Result<Option<&Map<String, Value>>> {
        let Some(v) = self.present("rope_parameters") else {
            return Ok(None);
        };
        let obj = v
            .as_object()
            .ok_or_else(|| self.err(format!("rope_parameters must be an object, got {v}")))?;
        // Parameters per layer type (`{"full_attention": {…}, …}`) belong to other families.
        if let Some((key, _)) = obj.iter().find(|(_, v)| v.is_object()) {
            return Err(self.err(format!(
                "rope_parameters.{key}: RoPE parameters per layer type are not supported"
            )));
        }
        Ok(Some(obj))
    }

    /// `rope_theta`, or `rope_parameters.rope_theta`; both, when they differ, are refused.
    fn rope_theta(&self, rope: Option<&Map<String, Value>>) -> Result<Option<f64>> {
        let top = self.f64("rope_theta")?;
        let nested = match rope {
            Some(obj) => Keys {
                obj,
                file: self.file,
            }
            .f64("rope_theta")?,
            None => None,
        };
        match (top, nested) {
            (Some(a), Some(b)) if a != b => Err(self.err(format!(
                "rope_theta {a} and rope_parameters.rope_theta {b} disagree"
            ))),
            (a, b) => Ok(a.or(b)),
        }
    }

    /// The attention window when one is in force (Mistral's `sliding_window`; Qwen's only
    /// with `use_sliding_window`; Llama's attention has none, as in transformers).
    fn sliding_window(&self, family: &str) -> Result<Option<usize>> {
        let window = self.usize("sliding_window")?.filter(|&w| w > 0);
        let used = match family {
            "qwen2" | "qwen3" => self.bool("use_sliding_window")?.unwrap_or(false),
            "mistral" => true,
            _ => false,
        };
        Ok(window.filter(|_| used))
    }

    /// `rope_scaling` (or, without it, `rope_parameters`), by its `rope_type` (or the older
    /// `type`).
    fn rope_scaling(
        &self,
        rope: Option<&Map<String, Value>>,
        max_positions: usize,
    ) -> Result<RopeScaling> {
        let obj = match (self.present("rope_scaling"), rope) {
            (Some(v), _) => v
                .as_object()
                .ok_or_else(|| self.err(format!("rope_scaling must be an object, got {v}")))?,
            (None, Some(obj)) => obj,
            (None, None) => return Ok(RopeScaling::None),
        };
        let s = Keys {
            obj,
            file: self.file,
        };
        let kind = s
            .str("rope_type")
            .or_else(|| s.str("type"))
            .unwrap_or("default");
        let need = |key: &str| -> Result<f64> {
            s.f64(key)?
                .ok_or_else(|| self.err(format!("rope_scaling.{key} is missing")))
        };
        Ok(match kind {
            "default" => RopeScaling::None,
            "linear" => RopeScaling::Linear {
                factor: need("factor")?,
            },
            "llama3" => RopeScaling::Llama3 {
                factor: need("factor")?,
                low_freq_factor: need("low_freq_factor")?,
                high_freq_factor: need("high_freq_factor")?,
                original_context: need("original_max_position_embeddings")? as usize,
            },
            "yarn" => {
                if s.present("mscale").is_some() || s.present("mscale_all_dim").is_some() {
                    return Err(self.err(
                        "rope_scaling yarn with mscale / mscale_all_dim is not supported".into(),
                    ));
                }
                if s.bool("truncate")? == Some(false) {
                    return Err(
                        self.err("rope_scaling yarn with truncate = false is not supported".into())
                    );
                }
                let factor = need("factor")?;
                RopeScaling::Yarn {
                    factor,
                    original_context: s
                        .usize("original_max_position_embeddings")?
                        .unwrap_or(max_positions),
                    beta_fast: s.f64("beta_fast")?.unwrap_or(32.0),
                    beta_slow: s.f64("beta_slow")?.unwrap_or(1.0),
                    attention_factor: s
                        .f64("attention_factor")?
                        .unwrap_or_else(|| RopeScaling::yarn_attention_factor(factor)),
                }
            }
            other => {
                return Err(self.err(format!(
                    "rope_scaling type {other:?} is not supported (supported: default, linear, \
                     llama3, yarn)"
                )));
            }
        })
    }
}
