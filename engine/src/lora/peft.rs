//! A PEFT LoRA folder (`adapter_config.json` + `adapter_model.safetensors`) read into an
//! [`LoraAdapter`] for one base model: every setting that would change the computation and is
//! not computed here refuses the adapter by name, and every tensor's shape is checked against
//! the base, so an adapter made for another model is refused with the reason.

use std::collections::HashMap;
use std::path::Path;

use serde_json::Value;

use super::{Delta, LoraAdapter, LoraError, LoraLayer, MAX_RANK, TARGET_MODULES};
use crate::gguf::GgmlType;
use crate::model::{ModelConfig, RopeLayout};

/// What an adapter may be: `--max-lora-rank`.
#[derive(Debug, Clone, Copy)]
pub struct LoraLimits {
    pub max_rank: usize,
}

/// The settings of `adapter_config.json` this engine computes.
#[derive(Debug)]
struct PeftConfig {
    rank: usize,
    scale: f32,
    targets: Vec<usize>,
    base: String,
}

/// Reads the adapter in `dir` for `base`, naming it `name` and stamping it `id`.
pub fn load_adapter(
    name: &str,
    dir: &Path,
    base: &ModelConfig,
    limits: LoraLimits,
    id: u64,
) -> Result<LoraAdapter, LoraError> {
    let invalid = |reason: String| LoraError::Invalid {
        name: name.to_string(),
        reason,
    };
    let read = |file: &str| {
        std::fs::read(dir.join(file)).map_err(|e| LoraError::Source {
            name: name.to_string(),
            source_name: dir.join(file).display().to_string(),
            reason: e.to_string(),
        })
    };
    let config_text = read("adapter_config.json")?;
    let config: Value = serde_json::from_slice(&config_text)
        .map_err(|e| invalid(format!("adapter_config.json is not JSON: {e}")))?;
    let config = parse_config(&config, limits).map_err(invalid)?;
    let bytes = read("adapter_model.safetensors")?;
    let tensors = read_tensors(&bytes).map_err(invalid)?;
    let layers = build_layers(&config, tensors, base).map_err(invalid)?;
    let (q, kv) = (base.q_dim(), base.kv_dim());
    let (h, f) = (base.hidden_size, base.ffn_size);
    Ok(LoraAdapter {
        name: name.to_string(),
        id,
        scale: config.scale,
        rank: config.rank,
        layers,
        widths: [q, kv, kv, h, f, f, h],
    })
}

/// Checks `adapter_config.json`, naming the first key that asks for what is not computed.
fn parse_config(c: &Value, limits: LoraLimits) -> Result<PeftConfig, String> {
    if let Some(kind) = c.get("peft_type").and_then(Value::as_str)
        && kind != "LORA"
    {
        return Err(format!("peft_type {kind:?} is not LORA"));
    }
    let rank = c
        .get("r")
        .and_then(Value::as_u64)
        .filter(|&r| r > 0)
        .ok_or("adapter_config.json has no rank `r` (a positive integer)")? as usize;
    let max = limits.max_rank.min(MAX_RANK);
    if rank > max {
        return Err(format!(
            "rank r={rank} exceeds --max-lora-rank {}",
            limits.max_rank
        ));
    }
    // PEFT's default alpha is 8.
    let alpha = c.get("lora_alpha").and_then(Value::as_f64).unwrap_or(8.0);
    let rslora = c.get("use_rslora").and_then(Value::as_bool) == Some(true);
    let scale = if rslora {
        alpha / (rank as f64).sqrt()
    } else {
        alpha / rank as f64
    } as f32;
    for key in [
        "use_dora",
        "fan_in_fan_out",
        "modules_to_save",
        "layers_to_transform",
        "rank_pattern",
        "alpha_pattern",
        "layer_replication",
    ] {
        let set = match c.get(key) {
            None | Some(Value::Null) | Some(Value::Bool(false)) => false,
            Some(Value::Object(m)) => !m.is_empty(),
            Some(Value::Array(a)) => !a.is_empty(),
            Some(_) => true,
        };
        if set {
            return Err(format!(
                "{key} is set in adapter_config.json; it is not computed"
            ));
        }
    }
    if let Some(bias) = c.get("bias").and_then(Value::as_str)
        && bias != "none"
    {
        return Err(format!("bias {bias:?}: only \"none\" is computed"));
    }
    Ok(PeftConfig {
        rank,
        scale,
        targets: targets(c.get("target_modules"))?,
        base: c
            .get("base_model_name_or_path")
            .and_then(Value::as_str)
            .unwrap_or("an unnamed base")
            .to_string(),
    })
}

/// `target_modules`: a list of module names, or `"all-linear"`.
fn targets(v: Option<&Value>) -> Result<Vec<usize>, String> {
    let names: Vec<&str> = match v {
        Some(Value::String(s)) if s == "all-linear" => TARGET_MODULES.to_vec(),
        Some(Value::String(s)) => vec![s.as_str()],
        Some(Value::Array(a)) => a.iter().filter_map(Value::as_str).collect(),
        _ => return Err("target_modules is missing".into()),
    };
    let mut out = Vec::new();
    for n in names {
        let t = TARGET_MODULES
            .iter()
            .position(|m| *m == n)
            .ok_or_else(|| format!("target module {n:?} is not one of {TARGET_MODULES:?}"))?;
        if !out.contains(&t) {
            out.push(t);
        }
    }
    if out.is_empty() {
        return Err("target_modules is empty".into());
    }
    Ok(out)
}

/// A stored tensor: shape and f32 values.
type Tensor = (Vec<usize>, Vec<f32>);

/// Every tensor of `adapter_model.safetensors`, widened to f32.
fn read_tensors(bytes: &[u8]) -> Result<HashMap<String, Tensor>, String> {
    let file = safetensors::SafeTensors::deserialize(bytes)
        .map_err(|e| format!("adapter_model.safetensors is not a valid safetensors file: {e}"))?;
    let mut out = HashMap::new();
    for (name, view) in file.tensors() {
        let ty = match view.dtype() {
            safetensors::Dtype::F32 => GgmlType::F32,
            safetensors::Dtype::F16 => GgmlType::F16,
            safetensors::Dtype::BF16 => GgmlType::BF16,
            other => return Err(format!("tensor {name} is {other:?}; F32, F16 or BF16 only")),
        };
        let shape = view.shape().to_vec();
        let mut values = vec![0f32; shape.iter().product()];
        crate::quant::dequantize(ty, view.data(), &mut values)
            .map_err(|e| format!("tensor {name}: {e}"))?;
        out.insert(name, (shape, values));
    }
    Ok(out)
}

/// PEFT's name of a target's `lora_A`/`lora_B` weight in block `l`.
fn tensor_name(l: usize, t: usize, ab: char) -> String {
    let group = if t < 4 { "self_attn" } else { "mlp" };
    format!(
        "base_model.model.model.layers.{l}.{group}.{}.lora_{ab}.weight",
        TARGET_MODULES[t]
    )
}

/// Each block's deltas, shapes checked against `base`; a tensor left over is refused too.
fn build_layers(
    c: &PeftConfig,
    mut tensors: HashMap<String, Tensor>,
    base: &ModelConfig,
) -> Result<Vec<LoraLayer>, String> {
    let (h, f, q, kv) = (base.hidden_size, base.ffn_size, base.q_dim(), base.kv_dim());
    // (in, out) of each target module.
    let dims = [(h, q), (h, kv), (h, kv), (q, h), (h, f), (h, f), (f, h)];
    let made_for = |what: String| {
        format!(
            "{what} (made for {}; this base has hidden {h}, ffn {f}, {} layers)",
            c.base, base.num_layers
        )
    };
    let mut layers = vec![LoraLayer::default(); base.num_layers];
    for (l, layer) in layers.iter_mut().enumerate() {
        for &t in &c.targets {
            let (in_w, out_w) = dims[t];
            let mut take = |ab: char, want: [usize; 2]| {
                let name = tensor_name(l, t, ab);
                let (shape, values) = tensors
                    .remove(&name)
                    .ok_or_else(|| format!("tensor {name} is missing"))?;
                if shape != want {
                    let what = format!(
                        "tensor {name} has shape {shape:?}, expected {want:?} for rank r={}",
                        c.rank
                    );
                    return Err(made_for(what));
                }
                Ok(values)
            };
            let a = take('A', [c.rank, in_w])?;
            let mut b = take('B', [out_w, c.rank])?;
            // PEFT writes Hugging Face's row order; a GGUF `llama` base stores Q and K rows as
            // llama.cpp permuted them, and B's rows must follow.
            if base.rope_layout == RopeLayout::Adjacent && t < 2 {
                b = to_adjacent(&b, base.head_dim, c.rank);
            }
            layer.deltas[t] = Some(Delta {
                a,
                b,
                rank: c.rank,
                in_w,
                out_w,
            });
        }
    }
    if let Some(name) = tensors.keys().min() {
        return Err(made_for(format!(
            "tensor {name} is not a LoRA weight of a target module of this base"
        )));
    }
    Ok(layers)
}

/// llama.cpp's permutation of Q/K rows, applied to `B` (`[heads · head_dim, rank]`): within
/// each head, Hugging Face row `h · head_dim/2 + i` becomes row `2i + h`.
fn to_adjacent(b: &[f32], head_dim: usize, rank: usize) -> Vec<f32> {
    let half = head_dim / 2;
    let mut out = vec![0f32; b.len()];
    for (src, dst) in b
        .chunks_exact(head_dim * rank)
        .zip(out.chunks_exact_mut(head_dim * rank))
    {
        for h in 0..2 {
            for i in 0..half {
                let from = (h * half + i) * rank;
                let to = (2 * i + h) * rank;
                dst[to..to + rank].copy_from_slice(&src[from..from + rank]);
            }
        }
    }
    out
}
