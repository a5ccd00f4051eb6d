//! Launch geometry of the attention kernels (pure): how a decode batch is split across thread
//! blocks, how prefill queries are tiled, and which model shapes the kernels support. The
//! constants mirror the `#define`s of `kernels/attention_*.cu`.

/// Tokens per shared-memory KV tile in both attention kernels.
pub const KV_TILE_TOKENS: usize = 32;
/// Most `group * head_dim` one decode block holds (`DEC_MAX_GHD`).
const DECODE_MAX_GROUP_DIM: usize = 1024;
/// Most query heads per KV head (`DEC_MAX_GROUP`).
const MAX_GROUP: usize = 16;
/// Largest head dimension (`DEC_MAX_HD`, `PRE_MAX_HD`).
const MAX_HEAD_DIM: usize = 256;
/// Most query rows (tokens × group) one prefill block holds (`PRE_MAX_ROWS`).
const PREFILL_MAX_ROWS: usize = 16;
/// Most `rows * head_dim` one prefill block holds (`PRE_MAX_ROWS * 128`).
const PREFILL_MAX_ROW_DIM: usize = PREFILL_MAX_ROWS * 128;
/// Fewest tokens a decode split covers: below this the merge costs more than it saves.
const MIN_PARTITION_TOKENS: usize = 64;

/// Why the kernels cannot run a model of this attention shape, if they cannot.
pub fn check_attention_shape(
    num_heads: usize,
    num_kv_heads: usize,
    head_dim: usize,
) -> Result<(), String> {
    if num_kv_heads == 0 || !num_heads.is_multiple_of(num_kv_heads) {
        return Err(format!(
            "{num_heads} query heads are not a multiple of {num_kv_heads} KV heads"
        ));
    }
    let group = num_heads / num_kv_heads;
    if head_dim == 0 || !head_dim.is_multiple_of(8) || head_dim > MAX_HEAD_DIM {
        return Err(format!(
            "head dimension {head_dim} unsupported (a multiple of 8, at most {MAX_HEAD_DIM})"
        ));
    }
    if group > MAX_GROUP || group * head_dim > DECODE_MAX_GROUP_DIM {
        return Err(format!(
            "GQA group of {group} heads × {head_dim} unsupported (at most {MAX_GROUP} heads and \
             {DECODE_MAX_GROUP_DIM} values per group)"
        ));
    }
    Ok(())
}

/// How decode attention is split: `splits` thread blocks per (sequence, KV head), each
/// covering `partition_tokens` positions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DecodeSplit {
    pub splits: usize,
    pub partition_tokens: usize,
}

/// The decode split for up to `num_seqs` sequences of at most `max_context` tokens: enough
/// blocks to give every SM two (`2 * sm_count`), no split shorter than 64 tokens, the split
/// count a power of two (so few CUDA graphs cover all shapes), and `splits * partition_tokens
/// >= max_context` always.
pub fn decode_split(
    num_seqs: usize,
    num_kv_heads: usize,
    max_context: usize,
    sm_count: usize,
) -> DecodeSplit {
    let max_context = max_context.max(1);
    let base_blocks = (num_seqs * num_kv_heads).max(1);
    let wanted = (2 * sm_count.max(1)).div_ceil(base_blocks);
    let most = max_context.div_ceil(MIN_PARTITION_TOKENS).max(1);
    let splits = wanted.clamp(1, most).next_power_of_two();
    let mut splits = if splits > most {
        (splits / 2).max(1)
    } else {
        splits
    };
    let partition = |splits: usize| {
        max_context
            .div_ceil(splits)
            .next_multiple_of(KV_TILE_TOKENS)
    };
    // Rounding partitions up to whole tiles can leave the last split empty: use fewer.
    while splits > 1 && (splits - 1) * partition(splits) >= max_context {
        splits /= 2;
    }
    DecodeSplit {
        splits,
        partition_tokens: partition(splits),
    }
}

/// Rows of partial results (sequences × splits) the decode buffers must hold: the largest
/// over every batch bucket and context bucket a step can be launched with.
pub fn max_split_rows(
    batch_buckets: &[usize],
    context_buckets: &[usize],
    num_kv_heads: usize,
    sm_count: usize,
) -> usize {
    batch_buckets
        .iter()
        .flat_map(|&b| {
            context_buckets
                .iter()
                .map(move |&c| b * decode_split(b, num_kv_heads, c, sm_count).splits)
        })
        .max()
        .unwrap_or(1)
}

/// One prefill query tile, laid out exactly like `QueryTile` in `attention_prefill.cu`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct QueryTile {
    /// Index of the sequence (row of the block-table matrix).
    pub seq: i32,
    /// Row of the tile's first token in the step's token rows.
    pub first_row: i32,
    /// Absolute position of that token in its sequence.
    pub first_pos: i32,
    /// Tokens in the tile.
    pub count: i32,
}

// SAFETY: `QueryTile` is `repr(C)` of four `i32`, matching the kernel's struct; any bits are valid.
unsafe impl cudarc::driver::DeviceRepr for QueryTile {}
// SAFETY: all-zero bits are a valid `QueryTile`.
unsafe impl cudarc::driver::ValidAsZeroBits for QueryTile {}

/// Most query tokens per prefill block for this shape (rows = tokens × group must fit).
pub fn prefill_tile_tokens(group: usize, head_dim: usize) -> usize {
    let by_rows = PREFILL_MAX_ROWS / group.max(1);
    let by_dim = PREFILL_MAX_ROW_DIM / (group.max(1) * head_dim.max(1));
    by_rows.min(by_dim).max(1)
}

/// Tiles covering every prefill token: for each sequence `(first_row, start_pos, tokens)`,
/// consecutive runs of at most `tile_tokens` tokens.
pub fn prefill_tiles(seqs: &[(usize, usize, usize)], tile_tokens: usize) -> Vec<QueryTile> {
    let tile_tokens = tile_tokens.max(1);
    let mut tiles = Vec::new();
    for (seq, &(first_row, start_pos, tokens)) in seqs.iter().enumerate() {
        for offset in (0..tokens).step_by(tile_tokens) {
            tiles.push(QueryTile {
                seq: seq as i32,
                first_row: (first_row + offset) as i32,
                first_pos: (start_pos + offset) as i32,
                count: tile_tokens.min(tokens - offset) as i32,
            });
        }
    }
    tiles
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn decode_split_always_covers_the_context() {
        for seqs in [1, 3, 32, 256] {
            for ctx in [1, 31, 64, 512, 513, 4096, 8192, 32768] {
                for sms in [1, 108, 132] {
                    let s = decode_split(seqs, 3, ctx, sms);
                    assert!(s.splits.is_power_of_two(), "{s:?}");
                    assert!(
                        s.splits * s.partition_tokens >= ctx,
                        "{seqs} {ctx} {sms}: {s:?}"
                    );
                    assert_eq!(s.partition_tokens % KV_TILE_TOKENS, 0);
                    // No split is empty for a sequence of the full context.
                    assert!(
                        (s.splits - 1) * s.partition_tokens < ctx,
                        "{seqs} {ctx} {sms}: {s:?}"
                    );
                }
            }
        }
    }

    #[test]
    fn small_batches_split_long_contexts_and_large_batches_do_not() {
        // One sequence, 3 KV heads, 132 SMs: 88 blocks wanted, 4096 / 64 = 64 allowed.
        assert_eq!(
            decode_split(1, 3, 4096, 132),
            DecodeSplit {
                splits: 64,
                partition_tokens: 64
            }
        );
        // 256 × 8 blocks already fill the GPU.
        assert_eq!(
            decode_split(256, 8, 512, 132),
            DecodeSplit {
                splits: 1,
                partition_tokens: 512
            }
        );
        // A short context is never split into partitions under 64 tokens.
        assert_eq!(
            decode_split(1, 1, 100, 132),
            DecodeSplit {
                splits: 2,
                partition_tokens: 64
            }
        );
        assert_eq!(decode_split(1, 1, 60, 132).splits, 1);
    }

    #[test]
    fn split_counts_are_not_monotone_in_context_so_all_buckets_are_sized() {
        // 512 tokens split 8 ways (64 each) but 513 only 4 ways (rounding to whole tiles).
        assert_eq!(decode_split(1, 3, 512, 132).splits, 8);
        assert_eq!(decode_split(1, 3, 513, 132).splits, 4);
        assert_eq!(max_split_rows(&[1], &[513], 3, 132), 4);
        assert_eq!(max_split_rows(&[1], &[512, 513], 3, 132), 8);
        assert_eq!(max_split_rows(&[1, 256], &[512, 1024], 3, 132), 256);
    }

    #[test]
    fn prefill_tiles_cover_each_sequence_in_order() {
        let tiles = prefill_tiles(&[(0, 0, 12), (12, 40, 1), (13, 7, 5)], 5);
        let expect = [
            (0, 0, 0, 5),
            (0, 5, 5, 5),
            (0, 10, 10, 2),
            (1, 12, 40, 1),
            (2, 13, 7, 5),
        ];
        let got: Vec<_> = tiles
            .iter()
            .map(|t| (t.seq, t.first_row, t.first_pos, t.count))
            .collect();
        assert_eq!(got, expect);
    }

    #[test]
    fn prefill_tile_fits_the_kernel_limits() {
        assert_eq!(prefill_tile_tokens(3, 64), 5); // SmolLM2: 15 rows
        assert_eq!(prefill_tile_tokens(4, 64), 4); // Llama 3.2 1B
        assert_eq!(prefill_tile_tokens(4, 128), 4); // Llama 3 8B
        assert_eq!(prefill_tile_tokens(8, 256), 1); // at the limit
        for (g, d) in [(1, 64), (2, 128), (7, 128), (16, 64)] {
            let t = prefill_tile_tokens(g, d);
            assert!(t * g <= PREFILL_MAX_ROWS && t * g * d <= PREFILL_MAX_ROW_DIM);
        }
    }

    #[test]
    fn unsupported_shapes_are_named() {
        assert!(check_attention_shape(9, 3, 64).is_ok());
        assert!(check_attention_shape(32, 8, 128).is_ok());
        assert!(
            check_attention_shape(9, 2, 64)
                .unwrap_err()
                .contains("multiple")
        );
        assert!(
            check_attention_shape(8, 8, 60)
                .unwrap_err()
                .contains("head dimension")
        );
        assert!(
            check_attention_shape(64, 2, 128)
                .unwrap_err()
                .contains("GQA group")
        );
    }
}
