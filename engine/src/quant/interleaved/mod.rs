//! Weights interleaved sixteen rows to a block: each vector lane of the integer kernels holds
//! one weight row, so a block's integer dot stays in its lane for all 32 elements and is
//! scaled once per sixteen rows, not once per four elements.
//!
//! The row-per-block layout spends a convert, a multiply and an FMA on every `vpdpbusd`: at 32
//! sequences a step then runs about one float operation per integer one. Here eight `vpdpbusd`
//! (a block of sixteen rows) share one convert, multiply and FMA (two with a scale per half
//! block), and an integer offset of the stored values (Q5_0's 16, the signed bytes' 128) is
//! taken off in the integers (`OFFSET · Σ y` per half, [`Q8Rows::ysums`]). The forms (see
//! `blocks`) take the bytes their row-per-block forms take.
//!
//! Every path computes, for each row, per block: `i₀, i₁` = the exact integer dots of the two
//! halves, then `acc = fma(d₀ · dₐ, i₀ + i₁, acc)` (or one FMA per half with its own scale),
//! then `acc = fma(m, sₐ, acc)` for forms with an offset `m`. So the scalar, AVX2 and AVX-512
//! kernels give the same bits, and a row's result depends on no other row (a matrix's last
//! group is padded with zero rows).
//!
//! [`Q8Rows::ysums`]: super::Q8Rows::ysums

mod blocks;

use std::ops::Range;

pub use blocks::{BlockQ4_1x16, BlockQ5_0x16, BlockQ8_0x16, BlockQ8Hx16, BlockQ8x16};

use super::blocks::{Block, BlockQ8, QK};
use super::kernels::QBlock;

/// Weight rows per interleaved group.
pub const GROUP: usize = 16;

/// A block of sixteen interleaved rows.
pub(crate) trait Lanes: Copy + std::fmt::Debug + Send + Sync + 'static {
    /// The row-per-block form one lane holds.
    type Row: QBlock;
    /// What is taken off each stored (unsigned) value: `x = d · (u − OFFSET) (+ m)`.
    const OFFSET: i32;
    /// Whether each half block has its own scale (`d[1]`; else `d[0]` serves both).
    const HALVES: bool;
    /// Whether values carry an offset `m` besides `d · (u − OFFSET)`.
    const MIN: bool;
    /// Sixteen rows' blocks (`None`: a padding row, all zero).
    fn pack(rows: [Option<&Self::Row>; GROUP]) -> Self;
    /// Row `r`'s block in its row-per-block form.
    fn row(&self, r: usize) -> Self::Row;
    /// Row `r`'s stored value `u` of element `e`.
    fn value(&self, r: usize, e: usize) -> i32;
    /// The scales of each half (`[d₀, d₁]`), one per row.
    fn scales(&self) -> [&[f32; GROUP]; 2];
    /// The offsets `m`, one per row (zero for forms without).
    fn mins(&self) -> &[f32; GROUP];
}

/// A matrix in interleaved groups: group `g`'s block `k` at `g · blocks_per_row + k`.
#[derive(Debug, Clone)]
pub(super) struct Rows<B> {
    rows: usize,
    blocks_per_row: usize,
    pub(super) blocks: Vec<B>,
}

impl<B: Lanes> Rows<B> {
    /// Interleaves row-major blocks (`rows × blocks_per_row`).
    pub fn new(blocks: &[B::Row], rows: usize, blocks_per_row: usize) -> Self {
        let groups = rows.div_ceil(GROUP);
        let mut out = Vec::with_capacity(groups * blocks_per_row);
        for g in 0..groups {
            for k in 0..blocks_per_row {
                out.push(B::pack(std::array::from_fn(|r| {
                    let row = g * GROUP + r;
                    (row < rows).then(|| &blocks[row * blocks_per_row + k])
                })));
            }
        }
        Self {
            rows,
            blocks_per_row,
            blocks: out,
        }
    }

    /// Appends `other`'s rows when this matrix ends on a whole group (returns whether it did).
    pub fn append(&mut self, other: &Self) -> bool {
        if !self.rows.is_multiple_of(GROUP) || self.blocks_per_row != other.blocks_per_row {
            return false;
        }
        self.blocks.extend_from_slice(&other.blocks);
        self.rows += other.rows;
        true
    }

    fn group(&self, row: usize) -> &[B] {
        &self.blocks[(row / GROUP) * self.blocks_per_row..][..self.blocks_per_row]
    }

    /// Dequantises row `row` into `out` (`[cols]`).
    pub fn row_f32(&self, row: usize, out: &mut [f32]) {
        for (b, o) in self.group(row).iter().zip(out.chunks_exact_mut(QK)) {
            let mut block = [0f32; QK];
            b.row(row % GROUP).dequantize(&mut block);
            o.copy_from_slice(&block);
        }
    }

    /// Weight rows × f32 activations, as the portable kernel computes them.
    pub fn gemv_f32<const R: usize>(&self, rows: Range<usize>, acts: [&[f32]; R], out: &mut [f32]) {
        let n = rows.len();
        for (i, row) in rows.enumerate() {
            let group = self.group(row);
            for (r, act) in acts.iter().enumerate() {
                out[r * n + i] = group
                    .iter()
                    .zip(act.chunks_exact(QK))
                    .map(|(b, x)| b.row(row % GROUP).dot_f32(x))
                    .sum();
            }
        }
    }

    /// The portable kernel: weight rows × quantised activations, the SIMD kernels' bits.
    pub fn gemv_q8<const R: usize>(
        &self,
        rows: Range<usize>,
        acts: [&[BlockQ8]; R],
        out: &mut [f32],
    ) {
        let n = rows.len();
        for (i, row) in rows.enumerate() {
            let lane = row % GROUP;
            for (r, act) in acts.iter().enumerate() {
                let mut acc = 0f32;
                for (b, a) in self.group(row).iter().zip(act.iter()) {
                    let half = |h: usize| -> i32 {
                        (16 * h..16 * h + 16)
                            .map(|e| (b.value(lane, e) - B::OFFSET) * i32::from(a.qs[e]))
                            .sum()
                    };
                    let [d0, d1] = b.scales().map(|d| d[lane]);
                    if B::HALVES {
                        acc = (d0 * a.d).mul_add(half(0) as f32, acc);
                        acc = (d1 * a.d).mul_add(half(1) as f32, acc);
                    } else {
                        acc = (d0 * a.d).mul_add((half(0) + half(1)) as f32, acc);
                    }
                    if B::MIN {
                        acc = b.mins()[lane].mul_add(a.s, acc);
                    }
                }
                out[r * n + i] = acc;
            }
        }
    }
}
