//! Row-range matrix–vector kernels, generic over the weight block type, for a tile of `R`
//! activation rows at once (each weight block is unpacked once per tile, not once per row).
//!
//! Every kernel computes `out[r * rows.len() + i] = dot(weight row rows.start + i, act r)`.
//! A row's result never depends on which tile or which neighbours it is computed with: the
//! batching invariance tests compare a sequence alone and inside a batch bit for bit.

#[cfg(target_arch = "x86_64")]
#[macro_use]
mod tile;
#[cfg(target_arch = "x86_64")]
pub(super) mod avx2;
#[cfg(target_arch = "x86_64")]
pub(super) mod avx512;
#[cfg(target_arch = "x86_64")]
pub(super) mod interleaved;
pub(super) mod scalar;

use super::blocks::{
    Block, BlockQ2H, BlockQ4_0, BlockQ4_1, BlockQ5_0, BlockQ5_1, BlockQ8, BlockQ8_0, BlockQ8H, QK,
};

/// The operands of one x86-64 integer kernel call (`int_tile_kernel!`'s AVX2 `gemv_q8` and
/// `avx512::gemv_q8`; each level adds its own register-tile method): the weight blocks, and
/// each activation row's Q8 blocks and padded block sums (see `Q8Rows`).
#[cfg(target_arch = "x86_64")]
struct Tile<'a, B, const R: usize> {
    w: &'a [B],
    blocks_per_row: usize,
    acts: [&'a [BlockQ8]; R],
    sums: [&'a [f32]; R],
}

#[cfg(target_arch = "x86_64")]
impl<'a, B, const R: usize> Tile<'a, B, R> {
    /// The operands, each activation row cut to one weight row's blocks.
    fn new(
        w: &'a [B],
        blocks_per_row: usize,
        acts: [&'a [BlockQ8]; R],
        sums: [&'a [f32]; R],
    ) -> Self {
        Self {
            w,
            blocks_per_row,
            acts: acts.map(|a| &a[..blocks_per_row]),
            sums,
        }
    }
}

/// What every weight block offers the portable kernels.
pub(super) trait QBlock: Block {
    /// Whether the block's values carry an offset `min` besides `d * q` (the `Σ x` term).
    const HAS_MIN: bool;
    /// The offset added to every value of the block (0 without one).
    fn min(&self) -> f32;
    /// `Σ w[j] * x[j]` with the weights dequantised and `x` in f32.
    fn dot_f32(&self, x: &[f32]) -> f32 {
        let mut w = [0f32; QK];
        self.dequantize(&mut w);
        w.iter().zip(x).map(|(a, b)| a * b).sum()
    }
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

/// `Σ q[j] * y[j]` over 5-bit values.
fn int_dot_q5(qs: &[u8; 16], qh: u32, y: &[i8; 32]) -> i32 {
    let mut sum = 0i32;
    for j in 0..16 {
        let lo = i32::from(qs[j] & 0x0F) | (((qh >> j) & 1) << 4) as i32;
        let hi = i32::from(qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4) as i32;
        sum += lo * i32::from(y[j]) + hi * i32::from(y[j + 16]);
    }
    sum
}

impl QBlock for BlockQ5_0 {
    // Like Q4_0: `d * (q − 16) = d * q + (−16 d)`.
    const HAS_MIN: bool = true;
    fn min(&self) -> f32 {
        -16.0 * self.d
    }
    fn dot_q8(&self, a: &BlockQ8) -> f32 {
        self.d * a.d * int_dot_q5(&self.qs, self.qh, &a.qs) as f32 - 16.0 * self.d * a.s
    }
}

impl QBlock for BlockQ5_1 {
    const HAS_MIN: bool = true;
    fn min(&self) -> f32 {
        self.m
    }
    fn dot_q8(&self, a: &BlockQ8) -> f32 {
        self.d * a.d * int_dot_q5(&self.qs, self.qh, &a.qs) as f32 + self.m * a.s
    }
}

impl QBlock for BlockQ8H {
    const HAS_MIN: bool = false;
    fn min(&self) -> f32 {
        0.0
    }
    fn dot_q8(&self, a: &BlockQ8) -> f32 {
        let half = |h: usize| -> i32 {
            (16 * h..16 * h + 16)
                .map(|j| i32::from(self.qs[j]) * i32::from(a.qs[j]))
                .sum()
        };
        a.d * (self.d[0] * half(0) as f32 + self.d[1] * half(1) as f32)
    }
}

impl QBlock for BlockQ2H {
    // Its offsets are per half block: folded in here, not through the block sums.
    const HAS_MIN: bool = false;
    fn min(&self) -> f32 {
        0.0
    }
    fn dot_q8(&self, a: &BlockQ8) -> f32 {
        let mut total = 0f32;
        for h in 0..2 {
            let (mut qy, mut y) = (0i32, 0i32);
            for j in 16 * h..16 * h + 16 {
                qy += i32::from(self.q(j)) * i32::from(a.qs[j]);
                y += i32::from(a.qs[j]);
            }
            total += self.d[h] * qy as f32 + self.m[h] * y as f32;
        }
        a.d * total
    }
}
