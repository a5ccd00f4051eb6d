//! Q5_0 weights interleaved sixteen rows to a block ([`BlockQ5_0x16`]): each vector lane of
//! the integer kernels holds one weight row, so a block's integer dot stays in its lane for
//! all 32 elements and is scaled once per sixteen rows, not once per four elements.
//!
//! The row-per-block layout ([`BlockQ5_0`]) spends a convert, a multiply and an FMA on every
//! `vpdpbusd`: at 32 sequences a step then runs about one float operation per integer one.
//! Here eight `vpdpbusd` (a block of sixteen rows) share one convert, multiply and FMA, and the
//! weight offset (`−16 d`) is taken off in the integers (`−16 Σ y`, [`Q8Rows::ysums`]), not
//! by a second FMA. Sixteen rows × 32 elements take 384 bytes: the 6 bits a weight of
//! [`BlockQ5_0`] takes.
//!
//! Every path computes, for each row, `acc = fma(d · dₐ, Σ (q − 16) y, acc)` block by block
//! (the integer exact), so the scalar, AVX2 and AVX-512 kernels give the same bits, and a
//! row's result depends on no other row (a matrix's last group is padded with zero rows).
//!
//! [`Q8Rows::ysums`]: super::Q8Rows::ysums

use std::ops::Range;

use super::blocks::{Block, BlockQ5_0, BlockQ8, QK};
use super::kernels::QBlock;

/// Weight rows per interleaved group.
pub const GROUP: usize = 16;

/// Block `k` of sixteen weight rows of Q5_0: `x[r][e] = d[r] · (q[r][e] − 16)`.
#[derive(Debug, Clone, Copy, PartialEq)]
#[repr(C, align(64))]
pub struct BlockQ5_0x16 {
    /// Chunk `c` holds row `r`'s `qs[4c .. 4c + 4]` (Q5_0's nibbles) at bytes `4r ..`: its low
    /// nibbles are elements `4c ..` of every row, its high nibbles elements `16 + 4c ..`.
    pub qs: [[u8; 64]; 4],
    /// Quad `j` (elements `4j .. 4j + 4`): bit `4r + b` is bit 4 of row `r`'s element `4j + b`.
    pub qh: [u64; 8],
    /// Row `r`'s scale.
    pub d: [f32; GROUP],
}

const ZERO: BlockQ5_0x16 = BlockQ5_0x16 {
    qs: [[0; 64]; 4],
    qh: [0; 8],
    d: [0.0; GROUP],
};

impl BlockQ5_0x16 {
    /// Sixteen rows' block `k` (`None`: a padding row, all zero).
    fn pack(rows: [Option<&BlockQ5_0>; GROUP]) -> Self {
        let mut out = ZERO;
        for (r, b) in rows.iter().enumerate() {
            let Some(b) = b else { continue };
            out.d[r] = b.d;
            for (c, chunk) in out.qs.iter_mut().enumerate() {
                chunk[4 * r..4 * r + 4].copy_from_slice(&b.qs[4 * c..4 * c + 4]);
            }
            for (j, mask) in out.qh.iter_mut().enumerate() {
                let bits = u64::from((b.qh >> (4 * j)) & 0x0F);
                *mask |= bits << (4 * r);
            }
        }
        out
    }

    /// Row `r`'s block back in the row-per-block layout.
    fn row(&self, r: usize) -> BlockQ5_0 {
        let qh = (0..8).fold(0u32, |h, j| {
            h | ((((self.qh[j] >> (4 * r)) & 0x0F) as u32) << (4 * j))
        });
        BlockQ5_0 {
            d: self.d[r],
            qh,
            qs: std::array::from_fn(|i| self.qs[i / 4][4 * r + i % 4]),
        }
    }
}

/// A Q5_0 matrix in [`BlockQ5_0x16`] groups: group `g`'s block `k` at `g · blocks_per_row + k`.
#[derive(Debug, Clone)]
pub(super) struct Q5_0x16 {
    rows: usize,
    blocks_per_row: usize,
    pub(super) blocks: Vec<BlockQ5_0x16>,
}

impl Q5_0x16 {
    /// Interleaves row-major blocks (`rows × blocks_per_row`).
    pub fn new(blocks: &[BlockQ5_0], rows: usize, blocks_per_row: usize) -> Self {
        let groups = rows.div_ceil(GROUP);
        let mut out = Vec::with_capacity(groups * blocks_per_row);
        for g in 0..groups {
            for k in 0..blocks_per_row {
                out.push(BlockQ5_0x16::pack(std::array::from_fn(|r| {
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
        if self.rows % GROUP != 0 || self.blocks_per_row != other.blocks_per_row {
            return false;
        }
        self.blocks.extend_from_slice(&other.blocks);
        self.rows += other.rows;
        true
    }

    /// Row `row`'s block `k`.
    fn block(&self, row: usize, k: usize) -> BlockQ5_0 {
        self.blocks[(row / GROUP) * self.blocks_per_row + k].row(row % GROUP)
    }

    /// Dequantises row `row` into `out` (`[cols]`).
    pub fn row_f32(&self, row: usize, out: &mut [f32]) {
        for (k, o) in out.chunks_exact_mut(QK).enumerate() {
            let mut block = [0f32; QK];
            self.block(row, k).dequantize(&mut block);
            o.copy_from_slice(&block);
        }
    }

    /// Weight rows × f32 activations, as the portable kernel computes them.
    pub fn gemv_f32<const R: usize>(&self, rows: Range<usize>, acts: [&[f32]; R], out: &mut [f32]) {
        let n = rows.len();
        for (i, row) in rows.enumerate() {
            for (r, act) in acts.iter().enumerate() {
                out[r * n + i] = act
                    .chunks_exact(QK)
                    .enumerate()
                    .map(|(k, x)| self.block(row, k).dot_f32(x))
                    .sum();
            }
        }
    }
}

/// `Σ (q − 16) y` of one row's block: the integer every path scales.
fn int_dot(b: &BlockQ5_0, a: &BlockQ8) -> i32 {
    (0..QK)
        .map(|j| {
            let nibble = if j < 16 {
                b.qs[j] & 0x0F
            } else {
                b.qs[j - 16] >> 4
            };
            let q = i32::from(nibble) | (((b.qh >> j) & 1) << 4) as i32;
            (q - 16) * i32::from(a.qs[j])
        })
        .sum()
}

/// The portable kernel: weight rows × quantised activations, the SIMD kernels' bits.
pub(super) fn gemv_q8<const R: usize>(
    w: &Q5_0x16,
    rows: Range<usize>,
    acts: [&[BlockQ8]; R],
    out: &mut [f32],
) {
    let n = rows.len();
    for (i, row) in rows.enumerate() {
        for (r, act) in acts.iter().enumerate() {
            let mut acc = 0f32;
            for (k, a) in act.iter().take(w.blocks_per_row).enumerate() {
                let b = w.block(row, k);
                let dot = int_dot(&b, a) as f32;
                acc = (b.d * a.d).mul_add(dot, acc);
            }
            out[r * n + i] = acc;
        }
    }
}
