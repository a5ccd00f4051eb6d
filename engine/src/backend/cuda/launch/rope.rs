//! `rope.cu`: bias, q/k norm and rotary position, in place on the fused qkv rows.

use cudarc::driver::{CudaSlice, PushKernelArg};

use super::{grid, int, need};
use crate::backend::cuda::{Error, Gpu, Result};
use crate::model::RopeLayout;

/// The shape and the per-layer parameters of a `qkv_position` launch.
pub struct QkvPosition<'a> {
    pub tokens: usize,
    pub num_heads: usize,
    pub num_kv_heads: usize,
    pub head_dim: usize,
    pub layout: RopeLayout,
    /// `[(heads + 2 kv_heads) * head_dim]` (Qwen2).
    pub bias: Option<&'a CudaSlice<f32>>,
    /// `([head_dim], [head_dim])` (Qwen3).
    pub qk_norm: Option<(&'a CudaSlice<f32>, &'a CudaSlice<f32>)>,
    /// RMSNorm epsilon of the q/k norms.
    pub eps: f32,
    /// `[head_dim / 2]`
    pub inv_freq: &'a CudaSlice<f64>,
    /// YaRN's attention factor on cos and sin (1 otherwise).
    pub rope_scale: f32,
}

/// Adds the bias, normalises q and k heads, and rotates them by `positions`.
pub fn qkv_position(
    gpu: &Gpu,
    qkv: &mut CudaSlice<f32>,   // [tokens, (heads + 2 kv_heads) * head_dim]
    positions: &CudaSlice<i32>, // [tokens]
    p: &QkvPosition<'_>,
) -> Result<()> {
    let heads = p.num_heads + 2 * p.num_kv_heads;
    let width = heads * p.head_dim;
    if !p.head_dim.is_multiple_of(2) {
        return Err(Error::Step(format!(
            "qkv_position: odd head size {}",
            p.head_dim
        )));
    }
    need(
        "qkv_position",
        &[
            ("qkv", qkv.len(), p.tokens * width),
            ("positions", positions.len(), p.tokens),
            ("bias", p.bias.map_or(width, |b| b.len()), width),
            (
                "q_norm",
                p.qk_norm.map_or(p.head_dim, |n| n.0.len()),
                p.head_dim,
            ),
            (
                "k_norm",
                p.qk_norm.map_or(p.head_dim, |n| n.1.len()),
                p.head_dim,
            ),
            ("inv_freq", p.inv_freq.len(), p.head_dim / 2),
        ],
    )?;
    if p.tokens == 0 {
        return Ok(());
    }
    let (nh, nkv, hd) = (
        int(p.num_heads, "heads")?,
        int(p.num_kv_heads, "kv heads")?,
        int(p.head_dim, "head size")?,
    );
    let name = match p.layout {
        RopeLayout::Adjacent => "qkv_position_adjacent",
        RopeLayout::HalfSplit => "qkv_position_half_split",
    };
    let f = gpu.function(name)?;
    let null: u64 = 0;
    let mut launch = gpu.stream.launch_builder(f);
    launch.arg(qkv).arg(positions);
    match p.bias {
        Some(b) => launch.arg(b),
        None => launch.arg(&null),
    };
    match p.qk_norm {
        Some((q, k)) => launch.arg(q).arg(k),
        None => launch.arg(&null).arg(&null),
    };
    launch
        .arg(p.inv_freq)
        .arg(&nh)
        .arg(&nkv)
        .arg(&hd)
        .arg(&p.eps)
        .arg(&p.rope_scale);
    // SAFETY: (float*, const int*, const float*, const float*, const float*, const double*,
    // int, int, int, float, float) as in rope.cu, absent bias / norms as null pointers (the
    // kernel tests for them). Block (t, h) touches head h of row t of `qkv`, positions[t],
    // `head_dim` bias, norm and `head_dim / 2` frequency entries: inside the sizes checked.
    unsafe { launch.launch(grid(p.tokens, heads, 1, 64)?) }?;
    Ok(())
}
