//! The integer register-tile kernel of the AVX2 level.
//!
//! Written as a macro because a generic function cannot carry a feature level: the
//! intrinsics would not inline into it. The AVX-512 level (`avx512`) keeps this tile's
//! per-lane operations and their order, two weight rows to a 512-bit register, so both
//! levels give the same bits.

/// Runs `$body` once for each constant `$i` in `0..8` below `$n` (a const generic): loops over
/// a register tile must be unrolled, or LLVM keeps the whole tile of accumulators in memory.
macro_rules! unrolled {
    ($i:ident < $n:expr => $body:block) => {
        unrolled!(@ $i ($n) $body 0 1 2 3 4 5 6 7)
    };
    (@ $i:ident ($n:expr) $body:block $($k:literal)*) => {
        $({
            let $i: usize = $k;
            if $i < $n $body
        })*
    };
}

/// Defines `gemv_q8` (weight rows × quantised activations) in the invoking module, compiled
/// for the target features `$features`, with `$dot(u, y)` as the byte dot (lane `l` of its
/// result: `Σ u[j] · y[j]` over `j` in `4 l .. 4 l + 4`), `Avx2Block::$unpack` as the
/// weight unpacking and `$nw(R)` weight rows per register tile.
///
/// The micro-kernel holds a register tile of `NW` weight rows × `R` activation rows, one
/// accumulator each: an unpacked weight block serves `R` rows, a loaded activation block `NW`.
/// `NW` changes no result (each accumulator is independent), only how many registers a level
/// can hold.
macro_rules! int_tile_kernel {
    ($features:literal, $dot:path, $unpack:ident, $nw:path) => {
        /// Weight rows × quantised activations (see `int_tile_kernel!`). `sums[r]` holds the
        /// padded block sums of activation row `r` (see `Q8Rows`).
        #[target_feature(enable = $features)]
        pub(crate) fn gemv_q8<B: Avx2Block, const R: usize>(
            w: &[B],
            blocks_per_row: usize,
            rows: std::ops::Range<usize>,
            acts: [&[BlockQ8]; R],
            sums: [&[f32]; R],
            out: &mut [f32],
        ) {
            let n = rows.len();
            let tile = super::Tile::new(w, blocks_per_row, acts, sums);
            let nw = $nw(R);
            let mut i = 0;
            while i + nw <= n {
                let row = rows.start + i;
                match nw {
                    8 => tile.rows::<8>(row, i, n, out),
                    4 => tile.rows::<4>(row, i, n, out),
                    2 => tile.rows::<2>(row, i, n, out),
                    _ => tile.rows::<1>(row, i, n, out),
                }
                i += nw;
            }
            while i < n {
                tile.rows::<1>(rows.start + i, i, n, out);
                i += 1;
            }
        }

        impl<B: Avx2Block, const R: usize> super::Tile<'_, B, R> {
            /// Weight rows `row .. row + NW` against every activation row, written to
            /// `out[r * n + i ..]`. Each accumulator sees the same operations in the same
            /// order whatever `NW` and `R` are.
            #[target_feature(enable = $features)]
            #[inline]
            fn rows<const NW: usize>(&self, row: usize, i: usize, n: usize, out: &mut [f32]) {
                const { assert!(NW <= 8 && R <= 8, "`unrolled!` covers tiles up to 8 × 8") };
                let bpr = self.blocks_per_row;
                let mut wrows: [&[B]; NW] = [&[]; NW];
                unrolled!(j < NW => {
                    wrows[j] = &self.w[(row + j) * bpr..][..bpr];
                });
                let acts = &self.acts;
                let ones_u8 = _mm256_set1_epi8(1);
                let mut acc = [[_mm256_setzero_ps(); R]; NW];
                for k in 0..bpr {
                    let mut unpacked = [(_mm256_setzero_si256(), _mm256_setzero_si256()); NW];
                    let mut dw = [_mm256_setzero_ps(); NW];
                    let mut mw = [_mm256_setzero_ps(); NW];
                    unrolled!(j < NW => {
                        // SAFETY: `k < bpr`, the length of every row slice; this function only
                        // runs on CPUs with `$features` (its target_feature), which include
                        // AVX2.
                        let wb = unsafe { wrows[j].get_unchecked(k) };
                        unpacked[j] = unsafe { wb.$unpack() };
                        dw[j] = unsafe { wb.scales() };
                        if B::LANE_MINS {
                            mw[j] = unsafe { wb.lane_mins() };
                        }
                    });
                    unrolled!(r < R => {
                        // SAFETY: `k < bpr`, the length of every activation row slice.
                        let a = unsafe { acts[r].get_unchecked(k) };
                        // SAFETY: `qs` is 32 readable bytes; loadu has no alignment
                        // requirement.
                        let y = unsafe { _mm256_loadu_si256(a.qs.as_ptr().cast()) };
                        let da = _mm256_set1_ps(a.d);
                        // Σ y over each lane's four elements, for offsets per half block.
                        let ysum = if B::LANE_MINS {
                            _mm256_cvtepi32_ps($dot(ones_u8, y))
                        } else {
                            _mm256_setzero_ps()
                        };
                        unrolled!(j < NW => {
                            let (u, sign) = unpacked[j];
                            let y = if B::SIGNED {
                                _mm256_sign_epi8(y, sign)
                            } else {
                                y
                            };
                            let p = $dot(u, y);
                            let scale = _mm256_mul_ps(dw[j], da);
                            acc[j][r] = _mm256_fmadd_ps(scale, _mm256_cvtepi32_ps(p), acc[j][r]);
                            if B::LANE_MINS {
                                let m = _mm256_mul_ps(mw[j], da);
                                acc[j][r] = _mm256_fmadd_ps(m, ysum, acc[j][r]);
                            }
                        });
                    });
                }
                if B::HAS_MIN {
                    // Σ_k min[k] · s[k]: the offsets times the activation block sums, 8 blocks
                    // a step (the sums are padded with zeros to a multiple of 8).
                    unrolled!(j < NW => {
                        for k0 in (0..bpr).step_by(8) {
                            // SAFETY: `k0 < bpr`, the row's length; AVX2 is among this
                            // function's features.
                            let m = unsafe { B::mins(wrows[j], k0) };
                            unrolled!(r < R => {
                                let s = &self.sums[r][k0..k0 + 8];
                                // SAFETY: `s` is 8 readable floats.
                                let s = unsafe { _mm256_loadu_ps(s.as_ptr()) };
                                acc[j][r] = _mm256_fmadd_ps(m, s, acc[j][r]);
                            });
                        }
                    });
                }
                unrolled!(j < NW => {
                    unrolled!(r < R => {
                        out[r * n + i + j] = hsum(acc[j][r]);
                    });
                });
            }
        }
    };
}
