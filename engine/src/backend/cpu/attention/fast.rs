//! The fast path: keys and values stored as f16, scores and weighted sums in f32. Per KV head
//! the query heads of its group share each pass over that head's keys and values. The AVX2
//! kernel (`avx2`) widens a block of a head at a time with F16C and keeps its sums in
//! registers; this file's portable loops compute the same maths for other CPUs.

use super::{Heads, Scratch, Token, blocks};
use crate::backend::cpu::kv_store::{F16Bits, KvElem, KvStore};

/// Which kernel runs, decided once per batch.
#[derive(Debug, Clone, Copy)]
pub(in crate::backend::cpu) struct Plan {
    avx2: bool,
}

impl Plan {
    pub(super) fn detect(heads: Heads) -> Self {
        #[cfg(target_arch = "x86_64")]
        let avx2 = heads.head_dim.is_multiple_of(8)
            && crate::quant::Simd::detect() == crate::quant::Simd::Avx2
            && is_x86_feature_detected!("f16c");
        #[cfg(not(target_arch = "x86_64"))]
        let avx2 = {
            let _ = heads;
            false
        };
        Self { avx2 }
    }

    /// The portable loops whatever the CPU (tests compare both kernels).
    #[cfg(test)]
    pub(super) fn portable() -> Self {
        Self { avx2: false }
    }
}

/// Attention of one token's query heads of one KV head group (`out_g`: `[group, head_dim]`).
pub(super) fn attend(
    plan: Plan,
    token: Token<'_>,
    kv: &KvStore<F16Bits>,
    layer: usize,
    heads: Heads,
    scratch: &mut Scratch,
    out_g: &mut [f32],
) {
    #[cfg(target_arch = "x86_64")]
    if plan.avx2 {
        // SAFETY: `Plan::detect` found AVX2, FMA and F16C, and a head size divisible by 8.
        unsafe { super::avx2::attend(token, kv, layer, heads, scratch, out_g) };
        return;
    }
    let _ = plan;
    portable(token, kv, layer, heads, scratch, out_g);
}

fn portable(
    token: Token<'_>,
    kv: &KvStore<F16Bits>,
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
    let (scores, block) = scratch.buffers(group * ctx, hd); // scores: [group, ctx]
    for (i, b, n) in blocks(place.block_table, kv.block_size, ctx) {
        let base = kv.head_block(b, g);
        for s in 0..n {
            widen(&keys[base + s * hd..][..hd], block);
            for h in 0..group {
                let q = &q_g[h * hd..][..hd];
                let dot: f32 = q.iter().zip(&*block).map(|(q, k)| q * k).sum();
                scores[h * ctx + i * kv.block_size + s] = dot * scale;
            }
        }
    }
    for row in scores.chunks_exact_mut(ctx) {
        softmax(row);
    }
    out_g.fill(0.0);
    for (i, b, n) in blocks(place.block_table, kv.block_size, ctx) {
        let base = kv.head_block(b, g);
        for s in 0..n {
            widen(&values[base + s * hd..][..hd], block);
            for (h, o) in out_g.chunks_exact_mut(hd).enumerate() {
                let w = scores[h * ctx + i * kv.block_size + s];
                for (o, v) in o.iter_mut().zip(&*block) {
                    *o += w * v;
                }
            }
        }
    }
}

fn widen(src: &[F16Bits], dst: &mut [f32]) {
    for (d, &s) in dst.iter_mut().zip(src) {
        *d = s.to_f32();
    }
}

/// Softmax in place, with the vectorisable `exp` (libm's is a scalar call per score).
#[inline(always)]
pub(super) fn softmax(row: &mut [f32]) {
    let max = row.iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v));
    let mut sums = [0f32; 8];
    for chunk in row.chunks_mut(8) {
        for (v, s) in chunk.iter_mut().zip(&mut sums) {
            *v = crate::sampling::exp(*v - max);
            *s += *v;
        }
    }
    let inv = 1.0 / sums.iter().sum::<f32>();
    row.iter_mut().for_each(|v| *v *= inv);
}
