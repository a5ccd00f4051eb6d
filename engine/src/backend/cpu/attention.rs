//! Causal grouped-query attention over the paged KV cache.

use rayon::prelude::*;

use super::kv_store::KvStore;
#[cfg(target_arch = "x86_64")]
use crate::quant::Simd;

/// Where each token of the flattened batch sits.
#[derive(Debug, Clone, Copy)]
pub(super) struct TokenPlace<'a> {
    /// Position in its sequence.
    pub pos: usize,
    /// Its sequence's block table.
    pub block_table: &'a [u32],
}

/// Shape of the attention heads.
#[derive(Debug, Clone, Copy)]
pub(super) struct Heads {
    pub num_heads: usize,
    pub num_kv_heads: usize,
    pub head_dim: usize,
}

/// `out[t]` = attention of token `t`'s query heads over keys/values at positions `0..=pos` of
/// its sequence (read through its block table from layer `layer` of `kv`).
/// `qkv` is `[tokens, q_dim + 2 * kv_dim]` (only the Q part is read); `out` is `[tokens, q_dim]`.
pub(super) fn attention(
    qkv: &[f32],
    kv: &KvStore,
    layer: usize,
    places: &[TokenPlace<'_>],
    heads: Heads,
    out: &mut [f32],
) {
    let q_dim = heads.num_heads * heads.head_dim;
    let qkv_dim = q_dim + 2 * heads.num_kv_heads * heads.head_dim;
    #[cfg(target_arch = "x86_64")]
    let avx2 = Simd::detect() == Simd::Avx2;
    out.par_chunks_mut(q_dim)
        .enumerate()
        .for_each_init(Scratch::default, |scratch, (t, out_t)| {
            let token = Token {
                q: &qkv[t * qkv_dim..t * qkv_dim + q_dim],
                place: places[t],
            };
            #[cfg(target_arch = "x86_64")]
            if avx2 {
                // SAFETY: `detect` found AVX2 and FMA on this CPU.
                unsafe { attend_avx2(token, kv, layer, heads, scratch, out_t) };
                return;
            }
            attend(token, kv, layer, heads, scratch, out_t);
        });
}

/// Per-thread buffers reused across tokens.
#[derive(Default)]
struct Scratch {
    /// `[group, ctx]`: a KV head group's scores, then its softmax weights.
    scores: Vec<f32>,
    /// `[ctx]`: where each position's keys and values start in a layer's storage.
    slots: Vec<usize>,
}

/// One token of the batch: its query heads (`[heads, head_dim]`) and where it sits.
#[derive(Clone, Copy)]
struct Token<'a> {
    q: &'a [f32],
    place: TokenPlace<'a>,
}

/// [`attend`] compiled for AVX2: the same operations in the same order, 8 lanes wide instead
/// of SSE2's 4 (no FMA contraction, so the results are bit for bit those of the portable build).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn attend_avx2(
    token: Token<'_>,
    kv: &KvStore,
    layer: usize,
    heads: Heads,
    scratch: &mut Scratch,
    out_t: &mut [f32],
) {
    attend(token, kv, layer, heads, scratch, out_t);
}

/// Attention of one token (`out_t`: `[heads, head_dim]`).
#[inline(always)]
fn attend(
    token: Token<'_>,
    kv: &KvStore,
    layer: usize,
    heads: Heads,
    scratch: &mut Scratch,
    out_t: &mut [f32],
) {
    let Heads {
        num_heads,
        num_kv_heads,
        head_dim,
    } = heads;
    let group = num_heads / num_kv_heads;
    let scale = 1.0 / (head_dim as f32).sqrt();
    let (keys, values) = (&kv.keys[layer], &kv.values[layer]);
    let Token { q: q_t, place } = token;
    let ctx = place.pos + 1;
    let Scratch { scores, slots } = scratch;
    scores.clear();
    scores.resize(group * ctx, 0.0); // [group, ctx]
    // Slot offsets once per token, block by block (no division per position and head).
    slots.clear();
    for &block in place.block_table {
        let start = block as usize * kv.block_size * kv.kv_dim;
        let left = (ctx - slots.len()).min(kv.block_size);
        slots.extend((0..left).map(|i| start + i * kv.kv_dim));
        if slots.len() == ctx {
            break;
        }
    }
    for g in 0..num_kv_heads {
        for (j, &slot) in slots.iter().enumerate() {
            let off = slot + g * head_dim;
            let k = &keys[off..off + head_dim];
            for h in 0..group {
                let q = &q_t[(g * group + h) * head_dim..][..head_dim];
                scores[h * ctx + j] = dot(q, k) * scale;
            }
        }
        for row in scores.chunks_exact_mut(ctx) {
            softmax(row);
        }
        let out_g = &mut out_t[g * group * head_dim..(g + 1) * group * head_dim];
        out_g.fill(0.0);
        for (j, &slot) in slots.iter().enumerate() {
            let off = slot + g * head_dim;
            let v = &values[off..off + head_dim];
            for (h, o) in out_g.chunks_exact_mut(head_dim).enumerate() {
                let w = scores[h * ctx + j];
                for (o, v) in o.iter_mut().zip(v) {
                    *o += w * v;
                }
            }
        }
    }
}

/// A dot product with eight independent sums, so the compiler vectorises it.
#[inline(always)]
fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0f32; 8];
    let (ac, bc) = (a.chunks_exact(8), b.chunks_exact(8));
    let tail: f32 = ac
        .remainder()
        .iter()
        .zip(bc.remainder())
        .map(|(x, y)| x * y)
        .sum();
    for (x, y) in ac.zip(bc) {
        for i in 0..8 {
            acc[i] += x[i] * y[i];
        }
    }
    acc.iter().sum::<f32>() + tail
}

#[inline(always)]
fn softmax(row: &mut [f32]) {
    let max = row.iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v));
    let mut sum = 0.0;
    for v in row.iter_mut() {
        *v = (*v - max).exp();
        sum += *v;
    }
    for v in row.iter_mut() {
        *v /= sum;
    }
}
