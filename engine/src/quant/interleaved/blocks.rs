//! The interleaved forms: Q5_0 (and nothing else: Q5_1 and Q5_K keep their rows), Q4_K's
//! sub-blocks ([`BlockQ4_1`] with `f32` scales) and the signed bytes of Q8_0, Q6_K and Q3_K
//! ([`BlockQ8H`]; Q8_0 with one scale a block). Nibble forms keep their 4-bit packing: chunk `c` of 64 bytes holds row `r`'s
//! `qs[4c .. 4c + 4]` at `4r`, its low nibbles elements `4c ..` of every row, its high
//! nibbles elements `16 + 4c ..`, so one load and two masks give two vectors of a row per lane.

use super::{GROUP, Lanes};
use crate::quant::blocks::{BlockQ4_1, BlockQ5_0, BlockQ8H, QK};

/// The 4-bit values' chunks of sixteen rows' nibble bytes.
fn pack_nibbles(qs: [Option<&[u8; 16]>; GROUP]) -> [[u8; 64]; 4] {
    let mut out = [[0; 64]; 4];
    for (r, q) in qs.iter().enumerate() {
        let Some(q) = q else { continue };
        for (c, chunk) in out.iter_mut().enumerate() {
            chunk[4 * r..4 * r + 4].copy_from_slice(&q[4 * c..4 * c + 4]);
        }
    }
    out
}

/// Row `r`'s nibble bytes back.
fn row_nibbles(chunks: &[[u8; 64]; 4], r: usize) -> [u8; 16] {
    std::array::from_fn(|i| chunks[i / 4][4 * r + i % 4])
}

/// Row `r`'s 4-bit value of element `e`.
fn nibble(chunks: &[[u8; 64]; 4], r: usize, e: usize) -> i32 {
    let byte = chunks[(e % 16) / 4][4 * r + e % 4];
    i32::from(if e < 16 { byte & 0x0F } else { byte >> 4 })
}

/// Block `k` of sixteen rows of Q5_0: `x[r][e] = d[r] · (q[r][e] − 16)`.
#[derive(Debug, Clone, Copy, PartialEq)]
#[repr(C, align(64))]
pub struct BlockQ5_0x16 {
    /// The low four bits (see the module).
    pub qs: [[u8; 64]; 4],
    /// Quad `j` (elements `4j .. 4j + 4`): bit `4r + b` is bit 4 of row `r`'s element `4j + b`.
    pub qh: [u64; 8],
    pub d: [f32; GROUP],
}

impl Lanes for BlockQ5_0x16 {
    type Row = BlockQ5_0;
    const OFFSET: i32 = 16;
    const HALVES: bool = false;
    const MIN: bool = false;
    fn pack(rows: [Option<&BlockQ5_0>; GROUP]) -> Self {
        let mut qh = [0u64; 8];
        for (r, b) in rows.iter().enumerate() {
            let Some(b) = b else { continue };
            for (j, mask) in qh.iter_mut().enumerate() {
                *mask |= u64::from((b.qh >> (4 * j)) & 0x0F) << (4 * r);
            }
        }
        Self {
            qs: pack_nibbles(rows.map(|b| b.map(|b| &b.qs))),
            qh,
            d: rows.map(|b| b.map_or(0.0, |b| b.d)),
        }
    }
    fn row(&self, r: usize) -> BlockQ5_0 {
        let qh = (0..8).fold(0u32, |h, j| {
            h | ((((self.qh[j] >> (4 * r)) & 0x0F) as u32) << (4 * j))
        });
        BlockQ5_0 {
            d: self.d[r],
            qh,
            qs: row_nibbles(&self.qs, r),
        }
    }
    fn value(&self, r: usize, e: usize) -> i32 {
        let high = (self.qh[e / 4] >> (4 * r + e % 4)) & 1;
        nibble(&self.qs, r, e) | (high as i32) << 4
    }
    fn scales(&self) -> [&[f32; GROUP]; 2] {
        [&self.d, &self.d]
    }
    fn mins(&self) -> &[f32; GROUP] {
        &[0.0; GROUP]
    }
}

/// Block `k` of sixteen rows of Q4_K's sub-blocks: `x[r][e] = d[r] · q[r][e] + m[r]`.
#[derive(Debug, Clone, Copy, PartialEq)]
#[repr(C, align(64))]
pub struct BlockQ4_1x16 {
    /// The 4-bit values (see the module).
    pub qs: [[u8; 64]; 4],
    pub d: [f32; GROUP],
    pub m: [f32; GROUP],
}

impl Lanes for BlockQ4_1x16 {
    type Row = BlockQ4_1;
    const OFFSET: i32 = 0;
    const HALVES: bool = false;
    const MIN: bool = true;
    fn pack(rows: [Option<&BlockQ4_1>; GROUP]) -> Self {
        Self {
            qs: pack_nibbles(rows.map(|b| b.map(|b| &b.qs))),
            d: rows.map(|b| b.map_or(0.0, |b| b.d)),
            m: rows.map(|b| b.map_or(0.0, |b| b.m)),
        }
    }
    fn row(&self, r: usize) -> BlockQ4_1 {
        BlockQ4_1 {
            d: self.d[r],
            m: self.m[r],
            qs: row_nibbles(&self.qs, r),
        }
    }
    fn value(&self, r: usize, e: usize) -> i32 {
        nibble(&self.qs, r, e)
    }
    fn scales(&self) -> [&[f32; GROUP]; 2] {
        [&self.d, &self.d]
    }
    fn mins(&self) -> &[f32; GROUP] {
        &self.m
    }
}

/// Block `k` of sixteen rows of signed bytes with `H` scales a row:
/// `x[r][e] = d[e · H / 32][r] · (u[r][e] − 128)`. Q6_K and Q3_K keep a scale per half block
/// (`H = 2`, [`BlockQ8Hx16`]); Q8_0 has one for the whole block (`H = 1`, [`BlockQ8_0x16`]):
/// 64 bytes less a block, and one convert, multiply and FMA less per activation row.
#[derive(Debug, Clone, Copy, PartialEq)]
#[repr(C, align(64))]
pub struct BlockQ8x16<const H: usize> {
    /// Quad `j` holds row `r`'s elements `4j .. 4j + 4`, each plus 128, at bytes `4r ..`.
    pub qs: [[u8; 64]; 8],
    /// The scales: one per half block, or one per block.
    pub d: [[f32; GROUP]; H],
}

/// Q6_K's and Q3_K's signed bytes: a scale per half block.
pub type BlockQ8Hx16 = BlockQ8x16<2>;
/// Q8_0: one scale per block (a lane's row block is a [`BlockQ8H`] with equal halves).
pub type BlockQ8_0x16 = BlockQ8x16<1>;

impl<const H: usize> Lanes for BlockQ8x16<H> {
    type Row = BlockQ8H;
    const OFFSET: i32 = 128;
    const HALVES: bool = {
        assert!(H == 1 || H == 2, "a block has one scale or one per half");
        H == 2
    };
    const MIN: bool = false;
    /// With `H = 1` the rows' first half scale serves the block (Q8_0's rows have equal halves).
    fn pack(rows: [Option<&BlockQ8H>; GROUP]) -> Self {
        let mut qs = [[128u8; 64]; 8];
        for (r, b) in rows.iter().enumerate() {
            let Some(b) = b else { continue };
            for (j, quad) in qs.iter_mut().enumerate() {
                for i in 0..4 {
                    quad[4 * r + i] = (b.qs[4 * j + i] as u8) ^ 0x80;
                }
            }
        }
        Self {
            qs,
            d: std::array::from_fn(|h| rows.map(|b| b.map_or(0.0, |b| b.d[h]))),
        }
    }
    fn row(&self, r: usize) -> BlockQ8H {
        BlockQ8H {
            d: [self.d[0][r], self.d[H - 1][r]],
            qs: std::array::from_fn(|e| (self.qs[e / 4][4 * r + e % 4] ^ 0x80) as i8),
        }
    }
    fn value(&self, r: usize, e: usize) -> i32 {
        i32::from(self.qs[e / 4][4 * r + e % 4])
    }
    fn scales(&self) -> [&[f32; GROUP]; 2] {
        [&self.d[0], &self.d[H - 1]]
    }
    fn mins(&self) -> &[f32; GROUP] {
        &[0.0; GROUP]
    }
}

const _: () = assert!(QK == 32, "the forms above hold 32 elements a row");
