//! How much KV cache fits on the device (pure): the blocks left after weights and activation
//! buffers, within `--gpu-memory-utilization` of the device's total memory.

/// Bytes one KV block takes across all layers: keys and values, bf16.
pub fn kv_block_bytes(
    num_layers: usize,
    num_kv_heads: usize,
    head_dim: usize,
    block_size: usize,
) -> usize {
    2 * num_layers * num_kv_heads * block_size * head_dim * std::mem::size_of::<u16>()
}

/// KV blocks to allocate, measured after weights and activation buffers were allocated:
/// the memory this process may still take is `free − total × (1 − utilization)` (what other
/// processes and this one already hold counts against the budget), minus `reserve_bytes` for
/// cuBLAS workspaces and graph memory. Errors when not even `min_blocks` fit.
pub fn kv_blocks(
    free_bytes: usize,
    total_bytes: usize,
    utilization: f64,
    reserve_bytes: usize,
    block_bytes: usize,
    min_blocks: usize,
) -> Result<usize, String> {
    if !(utilization > 0.0 && utilization <= 1.0) {
        return Err(format!(
            "--gpu-memory-utilization must be in (0, 1], got {utilization}"
        ));
    }
    let held_back = (total_bytes as f64 * (1.0 - utilization)).ceil() as usize;
    let usable = free_bytes
        .saturating_sub(held_back)
        .saturating_sub(reserve_bytes);
    let blocks = usable / block_bytes.max(1);
    if blocks < min_blocks {
        return Err(format!(
            "KV cache: {} MiB usable of {} MiB free leaves {blocks} blocks of {} KiB, need at \
             least {min_blocks}; raise --gpu-memory-utilization or shorten --max-model-len",
            usable >> 20,
            free_bytes >> 20,
            block_bytes >> 10
        ));
    }
    Ok(blocks)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    const GIB: usize = 1 << 30;

    #[test]
    fn block_bytes_of_smollm2() {
        // 30 layers, 3 KV heads of 64, 16 slots: K and V in bf16.
        assert_eq!(kv_block_bytes(30, 3, 64, 16), 2 * 30 * 3 * 16 * 64 * 2);
    }

    #[test]
    fn blocks_fill_the_budget_left_after_what_is_held() {
        let per_block = 1 << 20;
        // 80 GiB device, 70 GiB free after weights: 0.75 keeps 20 GiB back → 50 GiB − 1 GiB reserve.
        let blocks = kv_blocks(70 * GIB, 80 * GIB, 0.75, GIB, per_block, 1).unwrap();
        assert_eq!(blocks, 49 * 1024);
        // A higher utilisation gives more blocks; other processes' memory gives fewer.
        assert!(kv_blocks(70 * GIB, 80 * GIB, 0.9, GIB, per_block, 1).unwrap() > blocks);
        assert!(kv_blocks(40 * GIB, 80 * GIB, 0.75, GIB, per_block, 1).unwrap() < blocks);
    }

    #[test]
    fn too_little_memory_or_a_bad_fraction_is_an_error() {
        let err = kv_blocks(9 * GIB, 80 * GIB, 0.9, GIB, 1 << 20, 16).unwrap_err();
        assert!(err.contains("need at least 16"), "{err}");
        for bad in [0.0, -0.5, 1.5, f64::NAN] {
            assert!(
                kv_blocks(GIB, GIB, bad, 0, 1, 1)
                    .unwrap_err()
                    .contains("utilization")
            );
        }
    }
}
