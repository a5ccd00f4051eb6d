//! The typed boundary to the CUDA kernels: one safe function per `extern "C"` kernel, with the
//! kernel's parameters as typed buffers and sizes, in the `.cu` signature's order. Each checks
//! every buffer against what its launch geometry touches before the launch, so the `unsafe`
//! launch inside has one argument to make (written beside it): argument types and order match
//! the kernel, and no thread reads or writes past a buffer. `forward`, `backend` and the GPU
//! checks launch kernels only through these.

mod attention;
mod embedding;
mod kv_write;
mod rmsnorm;
mod rope;
mod sampling;
mod serve_sampling;
mod silu;

pub use attention::{
    Attend, DecodeArgs, PrefillArgs, attention_decode, attention_merge, attention_prefill,
};
pub use embedding::{embedding_gather, gather_rows};
pub use kv_write::{CacheShape, kv_cache_write};
pub use rmsnorm::rmsnorm_residual;
pub use rope::{QkvPosition, qkv_position};
pub use sampling::{SamplingRows, apply_token_mask, argmax_rows, sample_top_k_top_p};
pub use serve_sampling::{
    LogprobRows, MAX_TOP_LOGPROBS, apply_logit_edits, row_logprobs, sample_rows,
};
pub use silu::silu_mul;

use cudarc::driver::LaunchConfig;

use super::{Error, Result};

/// A launch of `(x, y, z)` blocks of `threads` threads.
fn grid(x: usize, y: usize, z: usize, threads: u32) -> Result<LaunchConfig> {
    let dim = |n: usize| {
        u32::try_from(n).map_err(|_| Error::Step(format!("grid dimension {n} too large")))
    };
    Ok(LaunchConfig {
        grid_dim: (dim(x)?, dim(y)?, dim(z)?),
        block_dim: (threads, 1, 1),
        shared_mem_bytes: 0,
    })
}

/// A size as the kernels' `int`.
fn int(n: usize, what: &str) -> Result<i32> {
    i32::try_from(n).map_err(|_| Error::Step(format!("{what} = {n} exceeds a kernel int")))
}

/// Fails unless every `(name, length, needed)` buffer holds what the launch touches.
fn need(kernel: &str, buffers: &[(&str, usize, usize)]) -> Result<()> {
    for &(name, len, needed) in buffers {
        if len < needed {
            return Err(Error::Step(format!(
                "{kernel}: buffer {name} holds {len} elements, the launch needs {needed}"
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn short_buffers_and_oversized_grids_are_errors_not_launches() {
        assert!(need("k", &[("a", 10, 10), ("b", 3, 2)]).is_ok());
        let err = need("k", &[("a", 10, 10), ("b", 3, 4)])
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("k: buffer b holds 3 elements, the launch needs 4"),
            "{err}"
        );
        assert!(grid(usize::MAX, 1, 1, 128).is_err());
        assert!(
            int(1 << 40, "hidden")
                .unwrap_err()
                .to_string()
                .contains("hidden")
        );
    }
}
