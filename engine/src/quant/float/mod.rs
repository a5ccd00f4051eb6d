//! Unquantised weights (f32, f16, bf16) used where they lie: rows read in place from a
//! memory-mapped checkpoint (safetensors), never widened into an f32 copy, so a bf16 model
//! takes its file's bytes in memory and no more. Stacked matrices (q|k|v, gate|up) are lists
//! of row ranges over different places of the map.
//!
//! The dot products are the f32 path's (no activation quantisation): each weight element is
//! widened in registers. A row's result depends only on that row and that activation row,
//! never on the tile it is computed in, so batching stays bit-for-bit invariant.

#[cfg(target_arch = "x86_64")]
mod avx2;
mod scalar;

use std::ops::Range;

use super::{Error, Simd};
use crate::gguf::GgmlType;

/// Bytes shared with whoever keeps them alive (a memory map of a checkpoint, or a vector).
pub type SharedBytes = std::sync::Arc<dyn AsRef<[u8]> + Send + Sync>;

/// A run of consecutive rows stored contiguously.
#[derive(Clone)]
struct Part {
    /// Index of its first row in the whole matrix.
    first_row: usize,
    rows: usize,
    bytes: SharedBytes,
    /// Byte offset of the first row inside `bytes`.
    start: usize,
}

/// A `[rows, cols]` matrix of f32, f16 or bf16 elements held by shared (mapped) bytes.
#[derive(Clone)]
pub struct FloatRows {
    ty: GgmlType,
    rows: usize,
    cols: usize,
    parts: Vec<Part>,
}

impl std::fmt::Debug for FloatRows {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FloatRows")
            .field("ty", &self.ty)
            .field("rows", &self.rows)
            .field("cols", &self.cols)
            .field("parts", &self.parts.len())
            .finish()
    }
}

/// Bytes per element of a float type this module computes with.
fn elem_bytes(ty: GgmlType) -> Option<usize> {
    match ty {
        GgmlType::F32 => Some(4),
        GgmlType::F16 | GgmlType::BF16 => Some(2),
        _ => None,
    }
}

impl FloatRows {
    /// A `[rows, cols]` matrix of `ty` elements in `bytes[range]`.
    pub fn new(
        ty: GgmlType,
        rows: usize,
        cols: usize,
        bytes: SharedBytes,
        range: Range<usize>,
    ) -> Result<Self, Error> {
        let size = elem_bytes(ty).ok_or(Error::Unsupported(ty))?;
        let available = (*bytes).as_ref().len();
        let want = rows.checked_mul(cols).and_then(|n| n.checked_mul(size));
        if want != Some(range.len()) || range.end > available || !cols.is_multiple_of(8) {
            return Err(Error::SizeMismatch {
                ty,
                bytes: range.len(),
                elements: rows.saturating_mul(cols),
            });
        }
        Ok(Self {
            ty,
            rows,
            cols,
            parts: vec![Part {
                first_row: 0,
                rows,
                bytes,
                start: range.start,
            }],
        })
    }

    /// Stacks matrices of one type and width along rows (`None` when they differ); no bytes
    /// are copied.
    pub fn stack(parts: &[&FloatRows]) -> Option<FloatRows> {
        let first = parts.first()?;
        let mut out = FloatRows {
            ty: first.ty,
            rows: 0,
            cols: first.cols,
            parts: Vec::new(),
        };
        for m in parts {
            if m.ty != first.ty || m.cols != first.cols {
                return None;
            }
            for p in &m.parts {
                out.parts.push(Part {
                    first_row: out.rows + p.first_row,
                    ..p.clone()
                });
            }
            out.rows += m.rows;
        }
        Some(out)
    }

    /// Element type.
    pub fn ty(&self) -> GgmlType {
        self.ty
    }

    /// Output features.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Input features.
    pub fn cols(&self) -> usize {
        self.cols
    }

    /// Bytes of the weights (what one pass over the matrix reads).
    pub fn byte_len(&self) -> usize {
        self.rows * self.cols * elem_bytes(self.ty).unwrap_or(0)
    }

    /// The stored bytes of rows `rows` that lie in one part, starting at `rows.start`:
    /// `(bytes, rows covered)`.
    fn run_at(&self, rows: Range<usize>) -> (&[u8], usize) {
        let part = self
            .parts
            .iter()
            .rev()
            .find(|p| p.first_row <= rows.start)
            .unwrap_or(&self.parts[0]);
        let row_bytes = self.cols * elem_bytes(self.ty).unwrap_or(0);
        let local = rows.start - part.first_row;
        let n = (part.rows - local).min(rows.len());
        let start = part.start + local * row_bytes;
        let all: &[u8] = (*part.bytes).as_ref();
        (&all[start..start + n * row_bytes], n)
    }

    /// Row `row` widened to f32 (embedding lookups).
    pub fn row_f32(&self, row: usize, out: &mut [f32]) {
        let (bytes, _) = self.run_at(row..row + 1);
        scalar::widen(self.ty, bytes, out);
    }

    /// `out[r * rows.len() + i] = dot(row rows.start + i, xs[r])` for every activation row.
    pub fn gemv_tile(&self, xs: &[&[f32]], rows: Range<usize>, simd: Simd, out: &mut [f32]) {
        let n = rows.len();
        let row_bytes = self.cols * elem_bytes(self.ty).unwrap_or(0);
        let mut at = rows.start;
        while at < rows.end {
            let (bytes, count) = self.run_at(at..rows.end);
            for (j, w) in bytes.chunks_exact(row_bytes).enumerate() {
                let i = at - rows.start + j;
                // Groups of at most four activation rows share one pass over the weight row;
                // the grouping never changes a result (each row has its own accumulators).
                for (g, group) in xs.chunks(4).enumerate() {
                    let mut dots = [0f32; 4];
                    self.dot(w, group, simd, &mut dots[..group.len()]);
                    for (r, d) in dots[..group.len()].iter().enumerate() {
                        out[(4 * g + r) * n + i] = *d;
                    }
                }
            }
            at += count;
        }
    }

    fn dot(&self, w: &[u8], xs: &[&[f32]], simd: Simd, out: &mut [f32]) {
        #[cfg(target_arch = "x86_64")]
        if simd.has_avx2() && (self.ty != GgmlType::F16 || avx2::has_f16c()) {
            // SAFETY: `Avx2` and above come from `Simd::detect` finding AVX2 and FMA (F16C is
            // checked above for f16); `w` holds `cols` elements of `ty` and every `xs[r]`
            // `cols` floats (the caller's shapes), `cols` a multiple of 8 (checked in `new`).
            unsafe { avx2::dots(self.ty, w, xs, out) };
            return;
        }
        let _ = simd;
        scalar::dots(self.ty, w, xs, out);
    }
}

#[cfg(test)]
mod tests;
