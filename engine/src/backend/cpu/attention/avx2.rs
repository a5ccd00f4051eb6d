//! The fast path's AVX2 + FMA + F16C kernel. Per KV head and block: widen the head's keys of
//! the block to f32 once (`block`), then for each query head of the group score eight slots
//! at a time (eight independent FMA chains, reduced together by a `hadd` tree instead of eight
//! horizontal sums); after the softmax, widen the values the same way and accumulate each
//! query head's output in registers, 64 dimensions at a time.

use std::arch::x86_64::*;

use super::{Heads, Scratch, Token, blocks};
use crate::backend::cpu::kv_store::{F16Bits, KvStore};

/// Attention of one token's query heads of one KV head group (`out_g`: `[group, head_dim]`).
///
/// `wide_values` runs the value pass on 512-bit vectors (see `avx512`; the same bits).
///
/// # Safety
/// The CPU must support AVX2, FMA and F16C; `heads.head_dim` must be a multiple of 8. With
/// `wide_values`, the CPU must support AVX-512 F and `heads.head_dim` be a multiple of 16.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn attend(
    token: Token<'_>,
    kv: &KvStore<F16Bits>,
    layer: usize,
    heads: Heads,
    scratch: &mut Scratch,
    out_g: &mut [f32],
    wide_values: bool,
) {
    let (hd, group, bs) = (heads.head_dim, heads.group(), kv.block_size);
    debug_assert_eq!(hd % 8, 0);
    let scale = _mm256_set1_ps(1.0 / (hd as f32).sqrt());
    let (keys, values) = (&kv.keys[layer], &kv.values[layer]);
    let Token {
        q: q_g,
        kv_head: g,
        place,
    } = token;
    let ctx = place.pos + 1;
    // Every score is written before it is read, and the block's slots past those in use are
    // zeroed per block below: the buffers only grow, never get cleared.
    let (scores, block) = scratch.buffers(group * ctx, bs.next_multiple_of(8) * hd);
    // The cache's blocks are scattered (paged): the hardware prefetcher follows a stream
    // within a block but not the jump to the next one, so each block's lines are asked for
    // one block ahead (a decode step reads every sequence's whole cache once, from memory).
    let ahead = |data: &[F16Bits], i: usize| {
        let start = (i + 1) * bs;
        if let (Some(&next), true) = (place.block_table.get(i + 1), start < ctx) {
            let base = kv.head_block(next, g);
            prefetch(&data[base..base + (ctx - start).min(bs) * hd]);
        }
    };
    for (i, b, n) in blocks(place.block_table, bs, ctx) {
        ahead(keys, i);
        let base = kv.head_block(b, g);
        widen(&keys[base..base + n * hd], block);
        block[n * hd..n.next_multiple_of(8) * hd].fill(0.0);
        for h in 0..group {
            let q = &q_g[h * hd..][..hd];
            let row = &mut scores[h * ctx + i * bs..][..n];
            for s0 in (0..n).step_by(8) {
                let dots = _mm256_mul_ps(dot8(q, &block[s0 * hd..(s0 + 8) * hd]), scale);
                let mut lanes = [0f32; 8];
                // SAFETY: `lanes` is 8 writable floats.
                unsafe { _mm256_storeu_ps(lanes.as_mut_ptr(), dots) };
                let m = (n - s0).min(8);
                row[s0..s0 + m].copy_from_slice(&lanes[..m]);
            }
        }
    }
    // The first block of values, while the softmax runs.
    if let Some(&first) = place.block_table.first() {
        let base = kv.head_block(first, g);
        prefetch(&values[base..base + ctx.min(bs) * hd]);
    }
    for row in scores.chunks_exact_mut(ctx) {
        softmax(row);
    }
    out_g.fill(0.0);
    for (i, b, n) in blocks(place.block_table, bs, ctx) {
        ahead(values, i);
        let base = kv.head_block(b, g);
        if wide_values {
            // SAFETY: the caller's contract for `wide_values`.
            unsafe {
                super::avx512::accumulate_block(
                    scores,
                    ctx,
                    i * bs,
                    &values[base..base + n * hd],
                    hd,
                    out_g,
                );
            }
            continue;
        }
        widen(&values[base..base + n * hd], block);
        for (h, out_h) in out_g.chunks_exact_mut(hd).enumerate() {
            let weights = &scores[h * ctx + i * bs..][..n];
            for d0 in (0..hd).step_by(64) {
                let width = (hd - d0).min(64);
                if width == 64 {
                    accumulate::<8>(weights, block, hd, d0, &mut out_h[d0..d0 + 64]);
                } else {
                    for d in (d0..d0 + width).step_by(8) {
                        accumulate::<1>(weights, block, hd, d, &mut out_h[d..d + 8]);
                    }
                }
            }
        }
    }
}

/// Asks for every cache line of `data` to be brought into L1.
#[target_feature(enable = "sse")]
fn prefetch(data: &[F16Bits]) {
    let bytes = std::mem::size_of_val(data);
    let start = data.as_ptr().cast::<i8>();
    for offset in (0..bytes).step_by(64) {
        // SAFETY: `offset < bytes`, so the address lies inside `data`; a prefetch never
        // faults and changes no memory.
        unsafe { _mm_prefetch::<_MM_HINT_T0>(start.add(offset)) };
    }
}

/// `dst = src` widened from f16 (`src.len()` a multiple of 8, `dst` at least as long).
#[target_feature(enable = "avx2,f16c")]
fn widen(src: &[F16Bits], dst: &mut [f32]) {
    assert!(dst.len() >= src.len() && src.len().is_multiple_of(8));
    for (i, chunk) in src.chunks_exact(8).enumerate() {
        // SAFETY: `chunk` is 8 readable halves (16 bytes); `dst[8 i .. 8 i + 8]` is in bounds
        // (asserted above); unaligned loads and stores.
        unsafe {
            let h = _mm_loadu_si128(chunk.as_ptr().cast());
            _mm256_storeu_ps(dst.as_mut_ptr().add(8 * i), _mm256_cvtph_ps(h));
        }
    }
}

/// The dot products of `q` (`[hd]`) with eight key rows (`keys`: `[8, hd]`), as one vector.
#[target_feature(enable = "avx2,fma")]
fn dot8(q: &[f32], keys: &[f32]) -> __m256 {
    let hd = q.len();
    assert!(keys.len() == 8 * hd && hd.is_multiple_of(8));
    let mut acc = [_mm256_setzero_ps(); 8];
    for d in (0..hd).step_by(8) {
        // SAFETY: `d + 8 <= hd`, so `q[d..d + 8]` and `keys[s * hd + d..][..8]` are in bounds
        // (asserted above); unaligned loads.
        unsafe {
            let qv = _mm256_loadu_ps(q.as_ptr().add(d));
            let k = keys.as_ptr().add(d);
            for (s, a) in acc.iter_mut().enumerate() {
                *a = _mm256_fmadd_ps(qv, _mm256_loadu_ps(k.add(s * hd)), *a);
            }
        }
    }
    // Pairwise sums: after two `hadd` rounds each 128-bit half holds one partial sum per
    // slot (slots 0-3 in the first vector, 4-7 in the second); the halves then add up.
    let t0 = _mm256_hadd_ps(acc[0], acc[1]);
    let t1 = _mm256_hadd_ps(acc[2], acc[3]);
    let t2 = _mm256_hadd_ps(acc[4], acc[5]);
    let t3 = _mm256_hadd_ps(acc[6], acc[7]);
    let u0 = _mm256_hadd_ps(t0, t1);
    let u1 = _mm256_hadd_ps(t2, t3);
    let lo = _mm256_permute2f128_ps(u0, u1, 0x20);
    let hi = _mm256_permute2f128_ps(u0, u1, 0x31);
    _mm256_add_ps(lo, hi)
}

/// `out[0 .. 8 V] += Σ_s weights[s] · block[s, d0 .. d0 + 8 V]` with the sums in registers.
#[target_feature(enable = "avx2,fma")]
fn accumulate<const V: usize>(
    weights: &[f32],
    block: &[f32],
    hd: usize,
    d0: usize,
    out: &mut [f32],
) {
    assert!(out.len() == 8 * V && d0 + 8 * V <= hd && block.len() >= weights.len() * hd);
    // SAFETY (all loads and stores below): `out` holds 8 V floats and row `s < weights.len()`
    // of `block` holds `hd ≥ d0 + 8 V` (asserted above); unaligned accesses.
    let mut acc: [__m256; V] =
        std::array::from_fn(|c| unsafe { _mm256_loadu_ps(out.as_ptr().add(8 * c)) });
    for (s, &w) in weights.iter().enumerate() {
        let w = _mm256_set1_ps(w);
        let row = unsafe { block.as_ptr().add(s * hd + d0) };
        for (c, a) in acc.iter_mut().enumerate() {
            *a = _mm256_fmadd_ps(w, unsafe { _mm256_loadu_ps(row.add(8 * c)) }, *a);
        }
    }
    for (c, a) in acc.iter().enumerate() {
        unsafe { _mm256_storeu_ps(out.as_mut_ptr().add(8 * c), *a) };
    }
}

/// Softmax in place, with the vectorisable `exp` (libm's is a scalar call per score).
#[inline(always)]
fn softmax(row: &mut [f32]) {
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
