//! Linear layers on the thread pool: weight rows are split across threads, and each thread
//! walks all activation rows in tiles while its slice of weights stays in cache.

use rayon::prelude::*;

use crate::quant::{Acts, QMatrix, TILE_ROWS};

/// A raw output pointer shared by tasks that write disjoint column ranges of it.
#[derive(Clone, Copy)]
struct OutPtr(*mut f32);
// SAFETY: tasks write disjoint elements (see `linear`), and `linear` does not return until
// every task has finished, so no access outlives the borrow it came from.
unsafe impl Send for OutPtr {}
// SAFETY: as above.
unsafe impl Sync for OutPtr {}

impl OutPtr {
    /// The pointer (a method, so closures capture the whole `Send` wrapper, not its field).
    fn get(self) -> *mut f32 {
        self.0
    }
}

/// `out[m, n] = Σ_k acts[m, k] · w[n, k]`: `acts` is `[m, cols]` (with its Q8 copy for the
/// fast path), `out` is `[m, w.rows()]`. Runs on the current rayon pool with `threads` tasks
/// per wave.
pub(super) fn linear(w: &QMatrix, acts: Acts<'_>, m: usize, out: &mut [f32], threads: usize) {
    let n = w.rows();
    assert_eq!(out.len(), m * n, "linear: output is not [m, rows]");
    // Several chunks per thread, so a core that is busy elsewhere does not hold up the step.
    let chunk = n
        .div_ceil(threads.max(1) * 8)
        .next_multiple_of(SUB_ROWS)
        .max(SUB_ROWS);
    let num_chunks = n.div_ceil(chunk);
    let out_ptr = OutPtr(out.as_mut_ptr());
    (0..num_chunks).into_par_iter().for_each(|c| {
        let mut tile_out = [0f32; TILE_ROWS * SUB_ROWS]; // [tile, sub-chunk rows]
        let chunk_end = ((c + 1) * chunk).min(n);
        // Sub-chunks of weight rows small enough to stay in L1 while every tile of
        // activation rows passes over them: weights are read from memory once per step.
        let mut sub_start = c * chunk;
        while sub_start < chunk_end {
            let rows = sub_start..(sub_start + SUB_ROWS).min(chunk_end);
            let len = rows.len();
            let mut m0 = 0;
            while m0 < m {
                let tile = (m - m0).min(TILE_ROWS);
                w.gemv_tile(acts, m0, tile, rows.clone(), &mut tile_out[..tile * len]);
                for r in 0..tile {
                    let src = &tile_out[r * len..(r + 1) * len];
                    // SAFETY: element (m0 + r, rows) lies inside `out` ([m, n], asserted
                    // above); chunk `c` alone writes columns `rows`, so no two tasks touch
                    // one element.
                    unsafe {
                        let dst = out_ptr.get().add((m0 + r) * n + rows.start);
                        if len == SUB_ROWS {
                            // A constant length: a few vector moves, not a `memcpy` call.
                            std::ptr::copy_nonoverlapping(src.as_ptr(), dst, SUB_ROWS);
                        } else {
                            std::ptr::copy_nonoverlapping(src.as_ptr(), dst, len);
                        }
                    }
                }
                m0 += tile;
            }
            sub_start += len;
        }
    });
}

/// Weight rows per sub-chunk (16 rows of 576 Q4_1 weights ≈ 7 KiB; one interleaved group).
const SUB_ROWS: usize = 16;
