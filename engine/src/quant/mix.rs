//! llama.cpp's quantisation mixes (`llama-quant.cpp`: `llama_tensor_get_type` and
//! `tensor_type_fallback`, no importance matrix): which type each tensor of a model gets for a
//! file type such as `Q4_K_M`. Pure: names and shapes in, types out.

use std::fmt;
use std::str::FromStr;

use crate::gguf::GgmlType;

/// A whole-file quantisation (`llama_ftype`), as `llama-quantize` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[allow(non_camel_case_types)] // the names users type
pub enum FileType {
    F32,
    F16,
    BF16,
    Q8_0,
    Q4_0,
    Q4_1,
    Q5_0,
    Q5_1,
    Q2_K,
    Q3_K_S,
    Q3_K_M,
    Q3_K_L,
    Q4_K_S,
    Q4_K_M,
    Q5_K_S,
    Q5_K_M,
    Q6_K,
}

/// Every file type with its name and `general.file_type` id.
const FILE_TYPES: [(FileType, &str, u32); 17] = [
    (FileType::F32, "F32", 0),
    (FileType::F16, "F16", 1),
    (FileType::BF16, "BF16", 32),
    (FileType::Q8_0, "Q8_0", 7),
    (FileType::Q4_0, "Q4_0", 2),
    (FileType::Q4_1, "Q4_1", 3),
    (FileType::Q5_0, "Q5_0", 8),
    (FileType::Q5_1, "Q5_1", 9),
    (FileType::Q2_K, "Q2_K", 10),
    (FileType::Q3_K_S, "Q3_K_S", 11),
    (FileType::Q3_K_M, "Q3_K_M", 12),
    (FileType::Q3_K_L, "Q3_K_L", 13),
    (FileType::Q4_K_S, "Q4_K_S", 14),
    (FileType::Q4_K_M, "Q4_K_M", 15),
    (FileType::Q5_K_S, "Q5_K_S", 16),
    (FileType::Q5_K_M, "Q5_K_M", 17),
    (FileType::Q6_K, "Q6_K", 18),
];

impl FileType {
    /// The `general.file_type` value llama.cpp writes for this mix.
    pub fn id(self) -> u32 {
        FILE_TYPES.iter().find(|t| t.0 == self).map_or(0, |t| t.2)
    }

    /// The type most tensors get (`llama_ftype_get_default_type`).
    pub fn default_type(self) -> GgmlType {
        use FileType as F;
        match self {
            F::F32 => GgmlType::F32,
            F::F16 => GgmlType::F16,
            F::BF16 => GgmlType::BF16,
            F::Q8_0 => GgmlType::Q8_0,
            F::Q4_0 => GgmlType::Q4_0,
            F::Q4_1 => GgmlType::Q4_1,
            F::Q5_0 => GgmlType::Q5_0,
            F::Q5_1 => GgmlType::Q5_1,
            F::Q2_K => GgmlType::Q2K,
            F::Q3_K_S | F::Q3_K_M | F::Q3_K_L => GgmlType::Q3K,
            F::Q4_K_S | F::Q4_K_M => GgmlType::Q4K,
            F::Q5_K_S | F::Q5_K_M => GgmlType::Q5K,
            F::Q6_K => GgmlType::Q6K,
        }
    }
}

impl fmt::Display for FileType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = FILE_TYPES
            .iter()
            .find(|t| t.0 == *self)
            .map_or("?", |t| t.1);
        f.write_str(name)
    }
}

impl FromStr for FileType {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        FILE_TYPES
            .iter()
            .find(|t| t.1.eq_ignore_ascii_case(s))
            .map(|t| t.0)
            .ok_or_else(|| {
                let names: Vec<&str> = FILE_TYPES.iter().map(|t| t.1).collect();
                format!(
                    "unknown quantisation type {s:?} (supported: {})",
                    names.join(", ")
                )
            })
    }
}

/// What the rules need to know about the model.
#[derive(Debug, Clone)]
pub struct ModelShape {
    pub arch: String,
    pub n_layer: usize,
    /// Query heads per KV head.
    pub n_gqa: usize,
    pub n_expert: usize,
}

/// One tensor of the input file.
#[derive(Debug, Clone)]
pub struct TensorShape<'a> {
    pub name: &'a str,
    /// GGUF order: `dims[0]` is the row length.
    pub dims: &'a [u64],
    /// Its type in the input file (kept when the tensor is not quantised).
    pub ty: GgmlType,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Category {
    Output,
    TokenEmbd,
    AttnV,
    AttnK,
    AttnOutput,
    FfnDown,
    Other,
}

fn category(name: &str) -> Category {
    match name {
        "output.weight" => Category::Output,
        "token_embd.weight" => Category::TokenEmbd,
        _ if name.contains("attn_qkv.weight")
            || name.contains("attn_kv_b.weight")
            || name.contains("attn_v.weight") =>
        {
            Category::AttnV
        }
        _ if name.contains("attn_k.weight") => Category::AttnK,
        _ if name.contains("attn_output.weight") => Category::AttnOutput,
        _ if name.contains("ffn_down") => Category::FfnDown,
        _ => Category::Other,
    }
}

/// Whether llama.cpp quantises this tensor at all: weight matrices, not norms or 1-D tensors.
fn quantisable(t: &TensorShape<'_>) -> bool {
    t.dims.len() >= 2
        && t.name.ends_with("weight")
        && !t.name.contains("_norm.weight")
        && !t.name.contains("ffn_gate_inp.weight")
        && !t.name.contains("position_embd")
        && !t.name.contains("token_types")
}

/// The layers that get more bits in the `_M` mixes: the first and last eighth, and every
/// third one between.
fn use_more_bits(i_layer: usize, n_layers: usize) -> bool {
    i_layer < n_layers / 8
        || i_layer >= 7 * n_layers / 8
        // C's `%`: truncated, so a negative difference is never 2 (Rust's `%` is the same).
        || (i_layer as i64 - (n_layers / 8) as i64) % 3 == 2
}

/// The order llama.cpp quantises and writes a model's tensors in (its loader's
/// `weight_name_comparer`): tensors outside the blocks first, then block by block, by name
/// within each. The mixes count `attn_v` tensors in this order, so [`choose_types`] must get
/// them in it.
pub fn llama_order(names: &[&str]) -> Vec<usize> {
    let key = |name: &str| (layer_of(name).map_or(-1, |l| l as i64), name.to_string());
    let mut order: Vec<usize> = (0..names.len()).collect();
    order.sort_by_key(|&i| key(names[i]));
    order
}

/// The type of every tensor of `tensors` (in [`llama_order`]) under `ftype`.
pub fn choose_types(
    ftype: FileType,
    model: &ModelShape,
    tensors: &[TensorShape<'_>],
) -> Vec<GgmlType> {
    let n_attention_wv = tensors
        .iter()
        .filter(|t| category(t.name) == Category::AttnV)
        .count();
    let tied = !tensors.iter().any(|t| category(t.name) == Category::Output);
    let mut state = Counters {
        n_attention_wv,
        ..Counters::default()
    };
    tensors
        .iter()
        .map(|t| {
            if !quantisable(t) {
                return t.ty;
            }
            let ty = rule(ftype, model, tied, t, &mut state);
            fallback(ty, t.dims[0])
        })
        .collect()
}

#[derive(Debug, Default)]
struct Counters {
    n_attention_wv: usize,
    i_attention_wv: usize,
    i_ffn_down: usize,
}

/// `llama_tensor_get_type_impl` for the non-IQ file types.
fn rule(
    f: FileType,
    m: &ModelShape,
    tied: bool,
    t: &TensorShape<'_>,
    c: &mut Counters,
) -> GgmlType {
    use FileType as F;
    use GgmlType as G;
    let mut ty = f.default_type();
    if !matches!(
        ty,
        G::Q4_0
            | G::Q4_1
            | G::Q5_0
            | G::Q5_1
            | G::Q8_0
            | G::Q2K
            | G::Q3K
            | G::Q4K
            | G::Q5K
            | G::Q6K
    ) {
        return ty; // float files: every weight matrix in that float type
    }
    let falcon = m.arch == "falcon";
    let cat = category(t.name);
    match cat {
        Category::Output | Category::TokenEmbd if cat == Category::Output || tied => {
            // The output head (or the embeddings that double as it) gets Q6_K.
            let qk = ty.block_len() as u64;
            if falcon || !t.dims[0].is_multiple_of(qk) {
                ty = G::Q8_0;
            } else if ty != G::Q8_0 {
                ty = G::Q6K;
            }
        }
        Category::TokenEmbd => {}
        Category::AttnV => {
            let (i, n) = (c.i_attention_wv, c.n_attention_wv);
            match f {
                F::Q2_K => ty = if m.n_gqa >= 4 { G::Q4K } else { G::Q3K },
                F::Q3_K_M => ty = if i < 2 { G::Q5K } else { G::Q4K },
                F::Q3_K_L => ty = G::Q5K,
                F::Q4_K_M | F::Q5_K_M if use_more_bits(i, n) => ty = G::Q6K,
                F::Q4_K_S if i < 4 => ty = G::Q5K,
                _ => {}
            }
            // llama.cpp's 70B rule (8 query heads share each V): llama models of 80 layers.
            if m.arch == "llama" && m.n_layer == 80 && matches!(ty, G::Q3K | G::Q4K) {
                ty = G::Q5K;
            }
            if m.n_expert == 8 {
                ty = G::Q8_0;
            }
            c.i_attention_wv += 1;
        }
        Category::AttnK if m.n_expert == 8 => ty = G::Q8_0,
        Category::FfnDown => {
            let (i, n) = (layer_of(t.name).unwrap_or(c.i_ffn_down), m.n_layer.max(1));
            match f {
                F::Q2_K => ty = G::Q3K,
                F::Q3_K_M => {
                    ty = if i < n / 16 {
                        G::Q5K
                    } else if !falcon || use_more_bits(i, n) {
                        G::Q4K
                    } else {
                        G::Q3K
                    }
                }
                F::Q3_K_L => ty = if falcon { G::Q4K } else { G::Q5K },
                F::Q4_K_M if falcon => {
                    ty = if i < n / 16 {
                        G::Q6K
                    } else if use_more_bits(i, n) {
                        G::Q5K
                    } else {
                        G::Q4K
                    }
                }
                F::Q4_K_M | F::Q5_K_M if use_more_bits(i, n) => ty = G::Q6K,
                F::Q4_K_S if !falcon && i < n / 8 => ty = G::Q5K,
                _ => {}
            }
            c.i_ffn_down += 1;
        }
        Category::AttnOutput if !falcon && m.n_expert == 8 => {
            if matches!(f, F::Q2_K | F::Q3_K_S | F::Q3_K_M | F::Q4_K_S | F::Q4_K_M) {
                ty = G::Q5K;
            }
        }
        Category::AttnOutput if !falcon => match f {
            F::Q2_K => ty = G::Q3K,
            F::Q3_K_M => ty = G::Q4K,
            F::Q3_K_L => ty = G::Q5K,
            _ => {}
        },
        Category::AttnOutput if f == F::Q3_K_L => ty = G::Q4K,
        _ => {}
    }
    ty
}

/// The layer index in a `blk.N.` tensor name.
fn layer_of(name: &str) -> Option<usize> {
    name.strip_prefix("blk.")?.split('.').next()?.parse().ok()
}

/// `tensor_type_fallback`: a row that is not whole blocks of the chosen type gets the
/// nearest 32-element type instead (F16 when not even that fits).
fn fallback(ty: GgmlType, row_len: u64) -> GgmlType {
    use GgmlType as G;
    if row_len.is_multiple_of(ty.block_len() as u64) {
        return ty;
    }
    let alt = match ty {
        G::Q2K | G::Q3K => G::Q4_0,
        G::Q4K => G::Q5_0,
        G::Q5K => G::Q5_1,
        G::Q6K => G::Q8_0,
        other => other,
    };
    if row_len.is_multiple_of(alt.block_len() as u64) {
        alt
    } else {
        G::F16
    }
}

#[cfg(test)]
mod tests;
