//! A weight matrix in its in-memory block layout, and the tile kernel dispatch.

use std::ops::Range;

use super::blocks::{Block, BlockQ2H, BlockQ4_0, BlockQ5_1, BlockQ8, BlockQ8H, QK};
use super::dequant::{dequantize, repack_q4_0, repack_q4_1, repack_q5_0, repack_q5_1, repack_q8_0};
use super::float::FloatRows;
use super::interleaved::{BlockQ4_1x16, BlockQ5_0x16, BlockQ8_0x16, BlockQ8Hx16, Rows};
use super::kernels::{QBlock, scalar};
use super::q8::{Q8Rows, padded_blocks};
use super::superblocks::{repack_q2_k, repack_q3_k, repack_q4_k, repack_q5_k, repack_q6_k};
use super::{Error, Simd};
use crate::gguf::GgmlType;

/// Activation rows handled by one kernel call (each weight block is unpacked once per tile).
pub const TILE_ROWS: usize = 8;

/// Weights, row-major: row `n` is blocks `n * blocks_per_row ..`. The K-quants are repacked
/// into the 32-element form of their sub-blocks (see `superblocks`): Q4_K is Q4_1 with
/// computed scales, Q5_K is Q5_1, Q6_K and Q3_K are signed bytes with a scale per half; Q4_1,
/// Q5_0, Q8_0 and those forms of Q4_K, Q6_K and Q3_K are then interleaved (see `interleaved`).
#[derive(Debug, Clone)]
enum Weights {
    Q4_0(Vec<BlockQ4_0>),
    /// Q5_0, sixteen rows interleaved (see `interleaved`).
    Q5_0x16(Rows<BlockQ5_0x16>),
    /// Q4_1 and Q4_K, sixteen rows interleaved.
    Q4_1x16(Rows<BlockQ4_1x16>),
    /// Q6_K and Q3_K, sixteen rows interleaved (a scale per half block).
    Q8Hx16(Rows<BlockQ8Hx16>),
    /// Q8_0, sixteen rows interleaved (one scale a block).
    Q8_0x16(Rows<BlockQ8_0x16>),
    /// Q5_1 and Q5_K.
    Q5_1(Vec<BlockQ5_1>),
    /// Q2_K.
    Q2H(Vec<BlockQ2H>),
    /// F32, F16 and BF16 GGUF tensors: kept as f32.
    F32(Vec<f32>),
    /// f32 / f16 / bf16 rows used in place from a mapped checkpoint (see `float`).
    Float(FloatRows),
}

impl Weights {
    /// Appends `other`'s blocks when both are the same form (returns whether it did).
    fn append(&mut self, other: &Weights) -> bool {
        match (self, other) {
            (Weights::Q4_0(a), Weights::Q4_0(b)) => a.extend_from_slice(b),
            (Weights::Q5_0x16(a), Weights::Q5_0x16(b)) => return a.append(b),
            (Weights::Q4_1x16(a), Weights::Q4_1x16(b)) => return a.append(b),
            (Weights::Q8Hx16(a), Weights::Q8Hx16(b)) => return a.append(b),
            (Weights::Q8_0x16(a), Weights::Q8_0x16(b)) => return a.append(b),
            (Weights::Q5_1(a), Weights::Q5_1(b)) => a.extend_from_slice(b),
            (Weights::Q2H(a), Weights::Q2H(b)) => a.extend_from_slice(b),
            (Weights::F32(a), Weights::F32(b)) => a.extend_from_slice(b),
            (Weights::Float(a), Weights::Float(b)) => match FloatRows::stack(&[a, b]) {
                Some(both) => *a = both,
                None => return false,
            },
            _ => return false,
        }
        true
    }
}

/// Runs `$body` with `$w` bound to the block vector of whichever block variant `$weights`
/// is (`$f32` for the f32 variant, `$mapped` for float rows used in place, `$x16` for the
/// interleaved rows): one place lists the block types.
macro_rules! with_blocks {
    (
        $weights:expr, $w:ident => $body:expr, $f32:ident => $float:expr,
        $mapped:ident => $rows:expr, $x16:ident => $inter:expr
    ) => {
        match $weights {
            Weights::Q4_0($w) => $body,
            Weights::Q5_0x16($x16) => $inter,
            Weights::Q4_1x16($x16) => $inter,
            Weights::Q8Hx16($x16) => $inter,
            Weights::Q8_0x16($x16) => $inter,
            Weights::Q5_1($w) => $body,
            Weights::Q2H($w) => $body,
            Weights::F32($f32) => $float,
            Weights::Float($mapped) => $rows,
        }
    };
}

/// A `[rows, cols]` weight matrix (a linear layer maps `cols` inputs to `rows` outputs).
///
/// Stacked matrices whose types differ (a `Q4_K_M` file's `attn_v` is often Q6_K beside a
/// Q4_K `attn_q`) keep one part per block form; a row range is computed part by part.
#[derive(Debug, Clone)]
pub struct QMatrix {
    rows: usize,
    cols: usize,
    parts: Vec<Part>,
    simd: Simd,
}

/// Rows `start .. start + rows` of a [`QMatrix`], in one block form.
#[derive(Debug, Clone)]
struct Part {
    start: usize,
    rows: usize,
    weights: Weights,
}

/// A batch of activation rows: `f32` is `[m, cols]`; `q8`, when given, is the same rows
/// quantised, and selects the integer kernels for quantised weights.
#[derive(Debug, Clone, Copy)]
pub struct Acts<'a> {
    pub f32: &'a [f32],
    pub q8: Option<&'a Q8Rows>,
}

impl QMatrix {
    /// Builds a `[rows, cols]` matrix from a GGUF tensor's bytes.
    pub fn from_ggml(ty: GgmlType, bytes: &[u8], rows: usize, cols: usize) -> Result<Self, Error> {
        let elements = rows * cols;
        let bpr = cols / QK;
        let weights = match ty {
            GgmlType::Q4_1 => {
                Weights::Q4_1x16(Rows::new(&repack_q4_1(bytes, elements)?, rows, bpr))
            }
            GgmlType::Q4_0 => Weights::Q4_0(repack_q4_0(bytes, elements)?),
            GgmlType::Q5_0 => {
                Weights::Q5_0x16(Rows::new(&repack_q5_0(bytes, elements)?, rows, bpr))
            }
            GgmlType::Q5_1 => Weights::Q5_1(repack_q5_1(bytes, elements)?),
            GgmlType::Q8_0 => {
                // The signed-byte form with one scale a block (its halves' scales equal).
                let blocks = repack_q8_0(bytes, elements)?.into_iter();
                let halves: Vec<BlockQ8H> = blocks
                    .map(|b| BlockQ8H {
                        d: [b.d, b.d],
                        qs: b.qs,
                    })
                    .collect();
                Weights::Q8_0x16(Rows::new(&halves, rows, bpr))
            }
            GgmlType::Q2K => Weights::Q2H(repack_q2_k(bytes, elements)?),
            GgmlType::Q3K => Weights::Q8Hx16(Rows::new(&repack_q3_k(bytes, elements)?, rows, bpr)),
            GgmlType::Q4K => Weights::Q4_1x16(Rows::new(&repack_q4_k(bytes, elements)?, rows, bpr)),
            GgmlType::Q5K => Weights::Q5_1(repack_q5_k(bytes, elements)?),
            GgmlType::Q6K => Weights::Q8Hx16(Rows::new(&repack_q6_k(bytes, elements)?, rows, bpr)),
            _ => {
                let mut out = vec![0f32; elements];
                dequantize(ty, bytes, &mut out)?;
                Weights::F32(out)
            }
        };
        Ok(Self {
            rows,
            cols,
            parts: vec![Part {
                start: 0,
                rows,
                weights,
            }],
            simd: Simd::detect(),
        })
    }

    /// A matrix over float rows used in place (safetensors weights).
    pub fn from_float(rows: FloatRows) -> Self {
        Self {
            rows: rows.rows(),
            cols: rows.cols(),
            parts: vec![Part {
                start: 0,
                rows: rows.rows(),
                weights: Weights::Float(rows),
            }],
            simd: Simd::detect(),
        }
    }

    /// Stacks matrices with the same width along rows (`None` when widths differ): runs of
    /// the same block form are concatenated into one part.
    pub fn stack(matrices: &[QMatrix]) -> Option<QMatrix> {
        let first = matrices.first()?;
        if matrices.iter().any(|m| m.cols != first.cols) {
            return None;
        }
        let mut parts: Vec<Part> = Vec::new();
        let mut start = 0;
        for part in matrices.iter().flat_map(|m| &m.parts) {
            let merged = parts.last_mut().is_some_and(|last| {
                let same = last.weights.append(&part.weights);
                if same {
                    last.rows += part.rows;
                }
                same
            });
            if !merged {
                parts.push(Part {
                    start,
                    rows: part.rows,
                    weights: part.weights.clone(),
                });
            }
            start += part.rows;
        }
        Some(QMatrix {
            rows: start,
            cols: first.cols,
            parts,
            simd: first.simd,
        })
    }

    /// Output features.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Input features.
    pub fn cols(&self) -> usize {
        self.cols
    }

    /// Runs the kernels of `simd` (tests compare every path in [`Simd::available`]).
    /// A path this CPU lacks falls back to its best one (never an illegal instruction).
    pub fn with_simd(mut self, simd: Simd) -> Self {
        self.simd = simd.min(Simd::best());
        self
    }

    /// `(address, bytes)` of each part's weights held in memory this matrix owns (float rows
    /// mapped from a checkpoint are left out): what [`super::advise_huge_pages`] advises.
    pub fn weight_ranges(&self) -> Vec<(usize, usize)> {
        fn span<T>(v: &[T]) -> (usize, usize) {
            (v.as_ptr() as usize, std::mem::size_of_val(v))
        }
        self.parts
            .iter()
            .filter_map(|p| {
                with_blocks!(&p.weights, w => Some(span(w)), w => Some(span(w)), _m => None,
                    x => Some(span(&x.blocks)))
            })
            .collect()
    }

    /// How many parts (runs of one block form) the matrix holds.
    #[cfg(test)]
    pub(super) fn part_count(&self) -> usize {
        self.parts.len()
    }

    /// Whether the integer (quantised-activation) kernels apply to this matrix.
    pub fn is_quantized(&self) -> bool {
        self.parts
            .iter()
            .any(|p| !matches!(p.weights, Weights::F32(_) | Weights::Float(_)))
    }

    /// Dequantises row `row` into `out` (`[cols]`): embedding lookups.
    pub fn row_f32(&self, row: usize, out: &mut [f32]) {
        let bpr = self.cols / QK;
        let mut block = [0f32; QK];
        let Some(part) = self.parts.iter().find(|p| row < p.start + p.rows) else {
            return;
        };
        let row = row - part.start;
        with_blocks!(&part.weights, w => {
            for (b, o) in w[row * bpr..(row + 1) * bpr].iter().zip(out.chunks_exact_mut(QK)) {
                b.dequantize(&mut block);
                o.copy_from_slice(&block);
            }
        }, w => out.copy_from_slice(&w[row * self.cols..(row + 1) * self.cols]),
        w => w.row_f32(row, out), x => x.row_f32(row, out))
    }

    /// `out[r * rows.len() + i] = dot(weight row rows.start + i, activation row m0 + r)` for
    /// `r < tile` (`1 ≤ tile ≤ TILE_ROWS`).
    pub fn gemv_tile(
        &self,
        acts: Acts<'_>,
        m0: usize,
        tile: usize,
        rows: Range<usize>,
        out: &mut [f32],
    ) {
        if let [part] = self.parts.as_slice() {
            return self.part_tile(&part.weights, acts, m0, tile, rows, out);
        }
        // Mixed forms: each part computes its share of the rows; a share that is not the whole
        // range goes through a scratch tile (its row stride differs from `out`'s).
        let n = rows.len();
        for part in &self.parts {
            let (lo, hi) = (
                rows.start.max(part.start),
                rows.end.min(part.start + part.rows),
            );
            if lo >= hi {
                continue;
            }
            let local = lo - part.start..hi - part.start;
            if (lo, hi) == (rows.start, rows.end) {
                return self.part_tile(&part.weights, acts, m0, tile, local, out);
            }
            let len = hi - lo;
            let mut share = vec![0f32; tile * len];
            self.part_tile(&part.weights, acts, m0, tile, local, &mut share);
            for r in 0..tile {
                out[r * n + lo - rows.start..][..len].copy_from_slice(&share[r * len..][..len]);
            }
        }
    }

    fn part_tile(
        &self,
        weights: &Weights,
        acts: Acts<'_>,
        m0: usize,
        tile: usize,
        rows: Range<usize>,
        out: &mut [f32],
    ) {
        match tile {
            1 => self.tile::<1>(weights, acts, m0, rows, out),
            2 => self.tile::<2>(weights, acts, m0, rows, out),
            3 => self.tile::<3>(weights, acts, m0, rows, out),
            4 => self.tile::<4>(weights, acts, m0, rows, out),
            5 => self.tile::<5>(weights, acts, m0, rows, out),
            6 => self.tile::<6>(weights, acts, m0, rows, out),
            7 => self.tile::<7>(weights, acts, m0, rows, out),
            _ => self.tile::<8>(weights, acts, m0, rows, out),
        }
    }

    fn tile<const R: usize>(
        &self,
        weights: &Weights,
        acts: Acts<'_>,
        m0: usize,
        rows: Range<usize>,
        out: &mut [f32],
    ) {
        let (cols, bpr) = (self.cols, self.cols / QK);
        let f32_rows: [&[f32]; R] =
            std::array::from_fn(|r| &acts.f32[(m0 + r) * cols..(m0 + r + 1) * cols]);
        let q8_rows: Option<Q8Tile<'_, R>> = acts.q8.map(|q| {
            let stride = padded_blocks(bpr);
            Q8Tile {
                blocks: std::array::from_fn(|r| &q.blocks[(m0 + r) * bpr..(m0 + r + 1) * bpr]),
                sums: std::array::from_fn(|r| &q.sums[(m0 + r) * stride..(m0 + r + 1) * stride]),
                ysums: std::array::from_fn(|r| {
                    &q.ysums[2 * (m0 + r) * bpr..2 * (m0 + r + 1) * bpr]
                }),
            }
        });
        with_blocks!(weights, w => self.run(w, rows, f32_rows, q8_rows, out), w => {
            let n = rows.len();
            for (i, row) in rows.enumerate() {
                let wrow = &w[row * cols..(row + 1) * cols];
                for (r, x) in f32_rows.iter().enumerate() {
                    out[r * n + i] = wrow.iter().zip(x.iter()).map(|(a, b)| a * b).sum();
                }
            }
        }, w => w.gemv_tile(&f32_rows, rows, self.simd, out),
        x => self.run_x16(x, rows, f32_rows, q8_rows, out))
    }

    /// [`Self::run`] for the interleaved rows.
    fn run_x16<B: LaneKernel, const R: usize>(
        &self,
        w: &Rows<B>,
        rows: Range<usize>,
        f32_rows: [&[f32]; R],
        q8_rows: Option<Q8Tile<'_, R>>,
        out: &mut [f32],
    ) {
        let Some(q) = q8_rows else {
            return w.gemv_f32(rows, f32_rows, out);
        };
        #[cfg(target_arch = "x86_64")]
        if self.simd.has_avx2() {
            use super::kernels::interleaved::{Operands, gemv_q8_avx2, gemv_q8_avx512};
            let ops = Operands {
                w: &w.blocks,
                blocks_per_row: self.cols / QK,
                acts: q.blocks,
                ysums: q.ysums,
            };
            // SAFETY: `Simd::Avx2` and `Simd::Avx512` only ever come from `Simd::detect`
            // finding their features on this CPU (or a test that took them from
            // `Simd::available`).
            unsafe {
                if self.simd == Simd::Avx512 {
                    gemv_q8_avx512(&ops, rows, out);
                } else {
                    gemv_q8_avx2(&ops, rows, out);
                }
            }
            return;
        }
        w.gemv_q8(rows, q.blocks, out);
    }

    #[allow(unused_variables)]
    fn run<B: QBlock + KernelBlock, const R: usize>(
        &self,
        w: &[B],
        rows: Range<usize>,
        f32_rows: [&[f32]; R],
        q8_rows: Option<Q8Tile<'_, R>>,
        out: &mut [f32],
    ) {
        let bpr = self.cols / QK;
        #[cfg(target_arch = "x86_64")]
        if self.simd.has_avx2() {
            use super::kernels::{avx2, avx512};
            // SAFETY: `Simd::Avx2` and `Simd::Avx512` only ever come from `Simd::detect`
            // finding their features on this CPU (or a test that took them from
            // `Simd::available`); the f32 path needs AVX2 and FMA only.
            unsafe {
                match q8_rows {
                    Some(q) if self.simd == Simd::Avx512 => {
                        avx512::gemv_q8::<B, R>(w, bpr, rows, q.blocks, q.sums, out)
                    }
                    Some(q) => avx2::gemv_q8::<B, R>(w, bpr, rows, q.blocks, q.sums, out),
                    None => avx2::gemv_f32::<B, R>(w, bpr, rows, f32_rows, out),
                }
            }
            return;
        }
        match q8_rows {
            Some(q) => scalar::gemv_q8::<B, R>(w, bpr, rows, q.blocks, out),
            None => scalar::gemv_f32::<B, R>(w, bpr, rows, f32_rows, out),
        }
    }
}

/// One tile's rows of [`Q8Rows`].
struct Q8Tile<'a, const R: usize> {
    blocks: [&'a [BlockQ8]; R],
    sums: [&'a [f32]; R],
    ysums: [&'a [i32]; R],
}

/// The interleaved forms with kernels on every target.
#[cfg(target_arch = "x86_64")]
trait LaneKernel: super::kernels::interleaved::X86Lanes {}
#[cfg(target_arch = "x86_64")]
impl<B: super::kernels::interleaved::X86Lanes> LaneKernel for B {}
#[cfg(not(target_arch = "x86_64"))]
trait LaneKernel: super::interleaved::Lanes {}
#[cfg(not(target_arch = "x86_64"))]
impl<B: super::interleaved::Lanes> LaneKernel for B {}

/// The block types with kernels on every target.
#[cfg(target_arch = "x86_64")]
trait KernelBlock: super::kernels::avx2::Avx2Block {}
#[cfg(target_arch = "x86_64")]
impl<B: super::kernels::avx2::Avx2Block> KernelBlock for B {}
#[cfg(not(target_arch = "x86_64"))]
trait KernelBlock {}
#[cfg(not(target_arch = "x86_64"))]
impl<B> KernelBlock for B {}
