//! The reference: plain loops in the order the maths is written (scores, softmax, weighted sum
//! of values), the baseline the golden vectors check (over an f32 cache) and the fast path is
//! compared with; over an f16 cache it is also the fast path's fallback on CPUs without AVX2.

use super::{Heads, Scratch, Token, blocks};
use crate::backend::cpu::kv_store::{KvElem, KvStore};

/// Attention of one token's query heads of one KV head group (`out_g`: `[group, head_dim]`).
pub(super) fn attend<T: KvElem>(
    token: Token<'_>,
    kv: &KvStore<T>,
    layer: usize,
    heads: Heads,
    scratch: &mut Scratch,
    out_g: &mut [f32],
) {
    let (hd, group) = (heads.head_dim, heads.group());
    let scale = 1.0 / (hd as f32).sqrt();
    let (keys, values) = (&kv.keys[layer], &kv.values[layer]);
    let Token {
        q: q_g,
        kv_head: g,
        place,
    } = token;
    let ctx = place.pos + 1;
    let (scores, _) = scratch.buffers(group * ctx, 0); // [group, ctx]
    for (i, block, n) in blocks(place.block_table, kv.block_size, ctx) {
        let base = kv.head_block(block, g);
        for s in 0..n {
            let k = &keys[base + s * hd..][..hd];
            for h in 0..group {
                let q = &q_g[h * hd..][..hd];
                scores[h * ctx + i * kv.block_size + s] = dot(q, k) * scale;
            }
        }
    }
    for row in scores.chunks_exact_mut(ctx) {
        softmax(row);
    }
    out_g.fill(0.0);
    for (i, block, n) in blocks(place.block_table, kv.block_size, ctx) {
        let base = kv.head_block(block, g);
        for s in 0..n {
            let v = &values[base + s * hd..][..hd];
            for (h, o) in out_g.chunks_exact_mut(hd).enumerate() {
                let w = scores[h * ctx + i * kv.block_size + s];
                for (o, v) in o.iter_mut().zip(v) {
                    *o += w * v.to_f32();
                }
            }
        }
    }
}

/// A dot product with eight independent sums, so the compiler vectorises it.
#[inline(always)]
fn dot<T: KvElem>(a: &[f32], b: &[T]) -> f32 {
    let mut acc = [0f32; 8];
    let (ac, bc) = (a.chunks_exact(8), b.chunks_exact(8));
    let tail: f32 = ac
        .remainder()
        .iter()
        .zip(bc.remainder())
        .map(|(x, y)| x * y.to_f32())
        .sum();
    for (x, y) in ac.zip(bc) {
        for i in 0..8 {
            acc[i] += x[i] * y[i].to_f32();
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
