//! AVX2 + FMA kernels for f32 / f16 / bf16 rows: 8 elements widened per load (bf16 by a
//! 16-bit shift, f16 by F16C), two accumulator chains per activation row so the FMA latency
//! is hidden even for one row (a decode step of one sequence).

use std::arch::x86_64::*;

use crate::gguf::GgmlType;

/// Whether the CPU converts halves in hardware (every AVX2 CPU made does; checked anyway).
pub(super) fn has_f16c() -> bool {
    is_x86_feature_detected!("f16c")
}

/// Eight elements of `w` from element `k`, as f32.
///
/// # Safety
/// AVX2 (and F16C for f16); `w` holds at least `k + 8` elements of `ty`.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
unsafe fn load8(ty: GgmlType, w: *const u8, k: usize) -> __m256 {
    // SAFETY: the caller guarantees `k + 8` readable elements; the loads are unaligned.
    unsafe {
        match ty {
            GgmlType::F32 => _mm256_loadu_ps(w.cast::<f32>().add(k)),
            GgmlType::F16 => _mm256_cvtph_ps(_mm_loadu_si128(w.add(2 * k).cast())),
            _ => {
                let h = _mm256_cvtepu16_epi32(_mm_loadu_si128(w.add(2 * k).cast()));
                _mm256_castsi256_ps(_mm256_slli_epi32(h, 16))
            }
        }
    }
}

#[target_feature(enable = "avx2,fma")]
#[inline]
fn hsum(v: __m256) -> f32 {
    let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    let s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
    _mm_cvtss_f32(s)
}

/// `out[r] = Σ_k w[k] · xs[r][k]` for up to four activation rows.
///
/// # Safety
/// AVX2 and FMA (F16C for f16); `w` holds `xs[r].len()` elements of `ty` for every `r`, a
/// multiple of 8; `xs.len() == out.len() <= 4`.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn dots(ty: GgmlType, w: &[u8], xs: &[&[f32]], out: &mut [f32]) {
    let n = xs.len().min(4);
    let cols = xs.first().map_or(0, |x| x.len());
    let zero = _mm256_setzero_ps();
    let (mut a0, mut a1) = ([zero; 4], [zero; 4]);
    let x: [*const f32; 4] =
        std::array::from_fn(|r| xs.get(r).map_or(std::ptr::null(), |x| x.as_ptr()));
    let wp = w.as_ptr();
    let mut k = 0;
    // SAFETY (all loads below): `k + 16 <= cols` / `k + 8 <= cols`, and `w` and each `xs[r]`
    // (r < n) hold `cols` elements (the caller's contract).
    unsafe {
        while k + 16 <= cols {
            let w0 = load8(ty, wp, k);
            let w1 = load8(ty, wp, k + 8);
            for r in 0..n {
                a0[r] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(x[r].add(k)), a0[r]);
                a1[r] = _mm256_fmadd_ps(w1, _mm256_loadu_ps(x[r].add(k + 8)), a1[r]);
            }
            k += 16;
        }
        if k + 8 <= cols {
            let w0 = load8(ty, wp, k);
            for r in 0..n {
                a0[r] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(x[r].add(k)), a0[r]);
            }
        }
    }
    for r in 0..n {
        out[r] = hsum(_mm256_add_ps(a0[r], a1[r]));
    }
}
