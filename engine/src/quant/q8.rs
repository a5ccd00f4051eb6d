//! Quantisation of activations into [`BlockQ8`] for the integer dot products.

use super::Simd;
use super::blocks::{BlockQ8, QK};

/// Activation rows quantised for the integer kernels.
///
/// Besides the blocks, each block's scaled sum `s` is kept again in rows padded with zeros to
/// a multiple of 8 blocks: the weight-offset term `Σ_k min[k] · s[k]` of a dot product then
/// runs as a few 8-wide FMAs after the kernel's inner loop instead of a scalar chain in it.
#[derive(Debug, Clone, Default)]
pub struct Q8Rows {
    /// `[m, cols / 32]`
    pub blocks: Vec<BlockQ8>,
    /// `[m, padded_blocks(cols / 32)]`
    pub sums: Vec<f32>,
    /// `[m, 2 · cols / 32]`: each half block's `Σ qs`, the integer the interleaved kernels
    /// take a weight offset off with (see `interleaved`).
    pub ysums: Vec<i32>,
}

/// Blocks per row of a padded per-block array ([`Q8Rows::sums`], a matrix's offsets).
pub(crate) fn padded_blocks(blocks_per_row: usize) -> usize {
    blocks_per_row.next_multiple_of(8)
}

impl Q8Rows {
    /// Quantises `x` (`[m, cols]`, `cols` a multiple of 32) into these buffers (reused).
    pub fn quantize(&mut self, x: &[f32], cols: usize) {
        let bpr = cols / QK;
        let m = x.len() / cols;
        self.blocks.resize(m * bpr, BlockQ8::default());
        quantize_q8(x, &mut self.blocks);
        self.ysums.clear();
        self.ysums.extend(self.blocks.iter().flat_map(|b| {
            let (lo, hi) = b.qs.split_at(QK / 2);
            [lo, hi].map(|h| h.iter().map(|&q| i32::from(q)).sum::<i32>())
        }));
        let stride = padded_blocks(bpr);
        self.sums.clear();
        self.sums.resize(m * stride, 0.0);
        for (sums, blocks) in self
            .sums
            .chunks_exact_mut(stride)
            .zip(self.blocks.chunks_exact(bpr))
        {
            for (s, b) in sums.iter_mut().zip(blocks) {
                *s = b.s;
            }
        }
    }
}

/// Quantises `x` (a multiple of 32 long) into `out` (`x.len() / 32` blocks), rounding each
/// value to the nearest of 255 levels spread over the block's absolute maximum.
pub fn quantize_q8(x: &[f32], out: &mut [BlockQ8]) {
    debug_assert_eq!(x.len(), out.len() * QK);
    #[cfg(target_arch = "x86_64")]
    if Simd::detect().has_avx2() {
        // SAFETY: `detect` found AVX2 and FMA on this CPU.
        unsafe { super::kernels::avx2::quantize_q8(x, out) };
        return;
    }
    super::kernels::scalar::quantize_q8(x, out);
}
