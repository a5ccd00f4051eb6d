//! Which prefill attention kernel runs (`--prefill-attention naive|mma`) and the launch
//! geometry of each (pure). The constants mirror the `#define`s of
//! `kernels/attention_prefill.cu` (naive) and `kernels/attention_prefill_mma.cu` (mma).

use std::fmt;
use std::str::FromStr;

use super::geometry::prefill_tile_tokens;

/// Threads per block of both prefill kernels (`PRE_THREADS`, `MMA_THREADS`).
pub const PREFILL_THREADS: u32 = 128;
/// Query rows (tokens × GQA group) one MMA block owns: 16 per warp (`MMA_ROWS`).
pub const MMA_ROWS: usize = 64;
/// Keys per shared-memory K/V tile of the MMA kernel (`MMA_KEYS`).
pub const MMA_KEYS: usize = 64;
/// bf16 padding per shared-memory row of the MMA kernel (`MMA_PAD`).
const MMA_PAD: usize = 8;
/// Head dimensions the MMA kernel has an instance for: SmolLM2 and Llama-3.2-1B-shaped models.
pub const MMA_HEAD_DIMS: [usize; 2] = [64, 128];
/// The largest of them, which sizes the kernel's shared memory (`MMA_MAX_HD`).
const MMA_MAX_HD: usize = 128;
/// Static shared memory a block may declare on sm_80 and sm_90 without an opt-in.
pub const STATIC_SHARED_LIMIT: usize = 48 * 1024;

/// The prefill attention kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PrefillAttention {
    /// `attention_prefill`: scalar fp32 math, up to 16 query rows per block. The reference,
    /// and the default until the MMA kernel's row of the GPU parity table has passed on a GPU.
    #[default]
    Naive,
    /// `attention_prefill_mma`: 64 query rows per block, bf16 tensor-core MMA
    /// (FlashAttention-2 style). Head dimensions other than 64 and 128 run the naive kernel.
    Mma,
}

impl PrefillAttention {
    /// The kernel that actually runs for `head_dim`: the MMA kernel only where it has an
    /// entry point, the naive one otherwise.
    pub fn for_head_dim(self, head_dim: usize) -> Self {
        match self {
            Self::Mma if MMA_HEAD_DIMS.contains(&head_dim) => Self::Mma,
            _ => Self::Naive,
        }
    }

    /// Query tokens per block for a GQA `group` and `head_dim` (the tiles `prefill_tiles`
    /// cuts must match the kernel that runs them).
    pub fn tile_tokens(self, group: usize, head_dim: usize) -> usize {
        match self.for_head_dim(head_dim) {
            Self::Naive => prefill_tile_tokens(group, head_dim),
            Self::Mma => (MMA_ROWS / group.max(1)).max(1),
        }
    }

    /// The function name, in the compiled module, of the kernel that runs for `head_dim` (both
    /// take the same arguments).
    pub fn function(self, head_dim: usize) -> &'static str {
        match self.for_head_dim(head_dim) {
            Self::Mma => "attention_prefill_mma",
            Self::Naive => "attention_prefill",
        }
    }

    /// Static shared memory of one block, in bytes (as ptxas reports it).
    pub fn shared_bytes(self, head_dim: usize) -> usize {
        match self.for_head_dim(head_dim) {
            // q_s (f32), k_s (padded), v_s, s_s (f32), m/l/alpha (f32): attention_prefill.cu.
            Self::Naive => {
                let (rows, tile, max_hd) = (16, 32, 256);
                rows * 128 * 4
                    + tile * (max_hd + 2) * 2
                    + tile * max_hd * 2
                    + rows * tile * 4
                    + 3 * rows * 4
            }
            // K and V tiles of the largest head dimension (Q is staged through them).
            Self::Mma => {
                let stride = MMA_MAX_HD + MMA_PAD;
                2 * (2 * MMA_KEYS * stride).max(MMA_ROWS * stride)
            }
        }
    }

    /// The flag's spelling.
    pub fn name(self) -> &'static str {
        match self {
            Self::Naive => "naive",
            Self::Mma => "mma",
        }
    }
}

impl fmt::Display for PrefillAttention {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for PrefillAttention {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "naive" => Ok(Self::Naive),
            "mma" => Ok(Self::Mma),
            other => Err(format!(
                "unknown prefill attention kernel {other:?}: expected naive or mma"
            )),
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::backend::cuda::geometry::prefill_tiles;

    #[test]
    fn the_flag_parses_both_kernels_and_names_a_bad_one() {
        for k in [PrefillAttention::Naive, PrefillAttention::Mma] {
            assert_eq!(k.to_string().parse::<PrefillAttention>().unwrap(), k);
        }
        let err = "flash".parse::<PrefillAttention>().unwrap_err();
        assert!(
            err.contains("\"flash\"") && err.contains("naive or mma"),
            "{err}"
        );
        assert_eq!(PrefillAttention::default(), PrefillAttention::Naive);
    }

    #[test]
    fn mma_runs_only_where_it_has_an_entry_point() {
        let mma = PrefillAttention::Mma;
        assert_eq!(mma.function(64), "attention_prefill_mma");
        assert_eq!(mma.function(128), "attention_prefill_mma");
        for hd in [8, 32, 96, 256] {
            assert_eq!(mma.for_head_dim(hd), PrefillAttention::Naive);
            assert_eq!(mma.function(hd), "attention_prefill");
            assert_eq!(mma.tile_tokens(3, hd), prefill_tile_tokens(3, hd));
        }
    }

    #[test]
    fn mma_tiles_fill_64_rows_of_the_gqa_group() {
        let mma = PrefillAttention::Mma;
        assert_eq!(mma.tile_tokens(3, 64), 21); // SmolLM2: 63 rows
        assert_eq!(mma.tile_tokens(4, 128), 16); // Llama 3.2 1B: 64 rows
        assert_eq!(mma.tile_tokens(1, 64), 64);
        assert_eq!(mma.tile_tokens(16, 128), 4);
        for group in 1..=16 {
            let t = mma.tile_tokens(group, 128);
            assert!(
                t * group <= MMA_ROWS && (t + 1) * group > MMA_ROWS,
                "group {group}"
            );
        }
        // A 1000-token prompt continuing at 600 in SmolLM2's shape: 48 blocks per kv head.
        let tiles = prefill_tiles(&[(0, 600, 1000)], mma.tile_tokens(3, 64));
        assert_eq!(tiles.len(), 1000usize.div_ceil(21));
        assert_eq!(tiles.iter().map(|t| t.count as usize).sum::<usize>(), 1000);
        assert_eq!((tiles[1].first_row, tiles[1].first_pos), (21, 621));
    }

    #[test]
    fn both_kernels_fit_the_static_shared_memory_of_sm_80_and_sm_90() {
        for hd in MMA_HEAD_DIMS {
            let bytes = PrefillAttention::Mma.shared_bytes(hd);
            assert!(bytes <= STATIC_SHARED_LIMIT, "hd {hd}: {bytes}");
        }
        // What ptxas reports for sm_90 (-Xptxas -v): one buffer serves both head dimensions.
        assert_eq!(PrefillAttention::Mma.shared_bytes(64), 34_816);
        assert_eq!(PrefillAttention::Mma.shared_bytes(128), 34_816);
        assert!(PrefillAttention::Naive.shared_bytes(64) <= STATIC_SHARED_LIMIT);
        // Four warps of 16 rows each own the block's rows.
        assert_eq!(PREFILL_THREADS as usize / 32 * 16, MMA_ROWS);
    }
}
