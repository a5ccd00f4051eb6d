//! Row-range matrix–vector kernels, generic over the weight block type, for a tile of `R`
//! activation rows at once (each weight block is unpacked once per tile, not once per row).
//!
//! Every kernel computes `out[r * rows.len() + i] = dot(weight row rows.start + i, act r)`.
//! A row's result never depends on which tile or which neighbours it is computed with: the
//! batching invariance tests compare a sequence alone and inside a batch bit for bit.

#[cfg(target_arch = "x86_64")]
pub(super) mod avx2;
pub(super) mod scalar;

use super::blocks::{BlockQ4_0, BlockQ4_1, BlockQ8, BlockQ8_0, QK};

/// What every weight block offers the portable kernels.
pub(super) trait QBlock: Copy + Send + Sync {
    /// Whether the block's values carry an offset `min` besides `d * q` (the `Σ x` term).
    const HAS_MIN: bool;
    /// The offset added to every value of the block (0 without one).
    fn min(&self) -> f32;
    /// `Σ w[j] * x[j]` with the weights dequantised and `x` in f32.
    fn dot_f32(&self, x: &[f32]) -> f32;
    /// `Σ w[j] * x[j]` with `x` quantised: an integer dot scaled, plus the offset term.
    fn dot_q8(&self, a: &BlockQ8) -> f32;
}

fn int_dot_nibbles(qs: &[u8; 16], y: &[i8; 32]) -> i32 {
    let mut sum = 0i32;
    for j in 0..16 {
        sum += i32::from(qs[j] & 0x0F) * i32::from(y[j]);
        sum += i32::from(qs[j] >> 4) * i32::from(y[j + 16]);
    }
    sum
}

impl QBlock for BlockQ4_1 {
    const HAS_MIN: bool = true;
    fn min(&self) -> f32 {
        self.m
    }
    fn dot_f32(&self, x: &[f32]) -> f32 {
        let mut w = [0f32; QK];
        self.dequantize(&mut w);
        w.iter().zip(x).map(|(a, b)| a * b).sum()
    }
    fn dot_q8(&self, a: &BlockQ8) -> f32 {
        self.d * a.d * int_dot_nibbles(&self.qs, &a.qs) as f32 + self.m * a.s
    }
}

impl QBlock for BlockQ4_0 {
    // Q4_0 stores q in 0..16 with an implied −8: `d * (q − 8) = d * q + (−8 d)`.
    const HAS_MIN: bool = true;
    fn min(&self) -> f32 {
        -8.0 * self.d
    }
    fn dot_f32(&self, x: &[f32]) -> f32 {
        let mut w = [0f32; QK];
        self.dequantize(&mut w);
        w.iter().zip(x).map(|(a, b)| a * b).sum()
    }
    fn dot_q8(&self, a: &BlockQ8) -> f32 {
        // Σ d(q-8)·da·y = d·da·Σ q·y − 8·d·(da·Σ y)
        self.d * a.d * int_dot_nibbles(&self.qs, &a.qs) as f32 - 8.0 * self.d * a.s
    }
}

impl QBlock for BlockQ8_0 {
    const HAS_MIN: bool = false;
    fn min(&self) -> f32 {
        0.0
    }
    fn dot_f32(&self, x: &[f32]) -> f32 {
        self.qs
            .iter()
            .zip(x)
            .map(|(&q, b)| f32::from(q) * b)
            .sum::<f32>()
            * self.d
    }
    fn dot_q8(&self, a: &BlockQ8) -> f32 {
        let sum: i32 = self
            .qs
            .iter()
            .zip(&a.qs)
            .map(|(&w, &y)| i32::from(w) * i32::from(y))
            .sum();
        self.d * a.d * sum as f32
    }
}
