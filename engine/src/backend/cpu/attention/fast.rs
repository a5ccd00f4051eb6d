//! The fast path: keys and values stored as f16, scores and weighted sums in f32. Per KV head
//! the query heads of its group share each pass over that head's keys and values. The AVX2
//! kernel (`avx2`) widens a block of a head at a time with F16C and keeps its sums in
//! registers; other CPUs run the reference loops over the same f16 cache.

use super::{Heads, Scratch, Token};
use crate::backend::cpu::kv_store::{F16Bits, KvStore};

/// Which kernel runs, decided once per batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::backend::cpu) struct Plan {
    avx2: bool,
    /// The value pass on 512-bit vectors (see `avx512`).
    avx512: bool,
}

impl Plan {
    pub(super) fn detect(heads: Heads) -> Self {
        #[cfg(target_arch = "x86_64")]
        let avx2 = heads.head_dim.is_multiple_of(8)
            && crate::quant::Simd::detect().has_avx2()
            && is_x86_feature_detected!("f16c");
        #[cfg(target_arch = "x86_64")]
        let avx512 = avx2
            && heads.head_dim.is_multiple_of(16)
            && crate::quant::Simd::detect() == crate::quant::Simd::Avx512;
        #[cfg(not(target_arch = "x86_64"))]
        let (avx2, avx512) = {
            let _ = heads;
            (false, false)
        };
        Self { avx2, avx512 }
    }

    /// The AVX2 kernel with its 256-bit value pass (tests compare it with the wide one).
    #[cfg(test)]
    pub(super) fn narrow(self) -> Self {
        Self {
            avx512: false,
            ..self
        }
    }

    /// The portable loops whatever the CPU (tests compare both kernels).
    #[cfg(test)]
    pub(super) fn portable() -> Self {
        Self {
            avx2: false,
            avx512: false,
        }
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
        // SAFETY: `Plan::detect` found AVX2, FMA and F16C, and a head size divisible by 8
        // (and AVX-512 F with one divisible by 16 where it set `avx512`).
        unsafe { super::avx2::attend(token, kv, layer, heads, scratch, out_g, plan.avx512) };
        return;
    }
    let _ = plan;
    // Other CPUs: the reference loops, reading the f16 cache.
    super::reference::attend(token, kv, layer, heads, scratch, out_g);
}
