//! Causal grouped-query attention over the paged KV cache.

use rayon::prelude::*;

use super::kv_store::KvStore;

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
    let Heads {
        num_heads,
        num_kv_heads,
        head_dim,
    } = heads;
    let (q_dim, kv_dim) = (num_heads * head_dim, num_kv_heads * head_dim);
    let qkv_dim = q_dim + 2 * kv_dim;
    let group = num_heads / num_kv_heads;
    let scale = 1.0 / (head_dim as f32).sqrt();
    let (keys, values) = (&kv.keys[layer], &kv.values[layer]);
    out.par_chunks_mut(q_dim)
        .enumerate()
        .for_each(|(t, out_t)| {
            let place = places[t];
            let q_t = &qkv[t * qkv_dim..t * qkv_dim + q_dim]; // [heads, head_dim]
            let ctx = place.pos + 1;
            let mut scores = vec![0f32; group * ctx]; // [group, ctx]
            for g in 0..num_kv_heads {
                for j in 0..ctx {
                    let off = kv.slot_offset(place.block_table, j) + g * head_dim;
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
                for j in 0..ctx {
                    let off = kv.slot_offset(place.block_table, j) + g * head_dim;
                    let v = &values[off..off + head_dim];
                    for (h, o) in out_g.chunks_exact_mut(head_dim).enumerate() {
                        let w = scores[h * ctx + j];
                        for (o, v) in o.iter_mut().zip(v) {
                            *o += w * v;
                        }
                    }
                }
            }
        });
}

/// A dot product with eight independent sums, so the compiler vectorises it.
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
