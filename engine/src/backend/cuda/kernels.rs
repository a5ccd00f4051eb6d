//! The CUDA C kernel sources (compiled into the binary) and the kernels each one defines.

/// Shared helpers prepended to every kernel file (bf16 conversions, warp and block reductions,
/// the paged KV tile loader and the tile-softmax steps both attention kernels use).
pub const PRELUDE: &str = include_str!("kernels/prelude.cuh");

/// One `.cu` file and the `extern "C"` kernels it defines.
#[derive(Debug, Clone, Copy)]
pub struct KernelSource {
    /// File name under `kernels/`, also the NVRTC program name.
    pub file: &'static str,
    /// The file's text, without the prelude.
    pub text: &'static str,
    /// Names of the kernels it defines, as loaded from the compiled module.
    pub kernels: &'static [&'static str],
}

impl KernelSource {
    /// The full program NVRTC compiles: prelude, then the file.
    pub fn program(&self) -> String {
        format!(
            "#line 1 \"prelude.cuh\"\n{PRELUDE}\n#line 1 \"{}\"\n{}",
            self.file, self.text
        )
    }
}

/// Every kernel file of the backend.
pub const SOURCES: &[KernelSource] = &[
    KernelSource {
        file: "embedding.cu",
        text: include_str!("kernels/embedding.cu"),
        kernels: &["embedding_gather", "gather_rows"],
    },
    KernelSource {
        file: "rmsnorm.cu",
        text: include_str!("kernels/rmsnorm.cu"),
        kernels: &["rmsnorm_residual"],
    },
    KernelSource {
        file: "rope.cu",
        text: include_str!("kernels/rope.cu"),
        kernels: &["qkv_position_adjacent", "qkv_position_half_split"],
    },
    KernelSource {
        file: "kv_write.cu",
        text: include_str!("kernels/kv_write.cu"),
        kernels: &["kv_cache_write"],
    },
    KernelSource {
        file: "attention_decode.cu",
        text: include_str!("kernels/attention_decode.cu"),
        kernels: &["attention_decode", "attention_merge"],
    },
    KernelSource {
        file: "attention_prefill.cu",
        text: include_str!("kernels/attention_prefill.cu"),
        kernels: &["attention_prefill"],
    },
    KernelSource {
        file: "attention_prefill_mma.cu",
        text: include_str!("kernels/attention_prefill_mma.cu"),
        kernels: &["attention_prefill_mma"],
    },
    KernelSource {
        file: "silu_mul.cu",
        text: include_str!("kernels/silu_mul.cu"),
        kernels: &["silu_mul"],
    },
    KernelSource {
        file: "sampling.cu",
        text: include_str!("kernels/sampling.cu"),
        kernels: &[
            "apply_token_mask",
            "argmax_rows",
            "sample_top_k_top_p",
            "apply_logit_edits",
            "sample_rows",
            "row_logprobs",
        ],
    },
];

/// The PTX text of each `.entry` in `ptx`, by kernel name: from its `.entry` line up to the
/// next entry (or the end), so the sizes add up to the module minus its header.
pub fn ptx_entries(ptx: &str) -> Vec<(&str, &str)> {
    let starts: Vec<usize> = ptx.match_indices(".entry ").map(|(i, _)| i).collect();
    starts
        .iter()
        .enumerate()
        .filter_map(|(n, &start)| {
            let end = starts.get(n + 1).copied().unwrap_or(ptx.len());
            let body = &ptx[start..end];
            let name = body[".entry ".len()..]
                .split(|c: char| c == '(' || c.is_whitespace())
                .next()?;
            Some((name, body))
        })
        .collect()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn every_declared_kernel_is_defined_extern_c_in_its_file() {
        for source in SOURCES {
            for kernel in source.kernels {
                let defined = source.text.contains(&format!("void {kernel}("))
                    || source.text.contains(&format!(") {kernel}("));
                assert!(defined, "{kernel} not defined in {}", source.file);
            }
            let declared = source.text.matches("extern \"C\" __global__").count();
            assert_eq!(
                declared,
                source.kernels.len(),
                "kernel list of {} is incomplete",
                source.file
            );
        }
    }

    #[test]
    fn ptx_entries_are_split_by_name() {
        let ptx = ".version 8.0\n.visible .entry foo(\n.param .u64 a\n)\n{ ret; }\n\
                   .visible .entry bar_baz(\n)\n{ ret; }\n";
        let entries = ptx_entries(ptx);
        let names: Vec<&str> = entries.iter().map(|(n, _)| *n).collect();
        assert_eq!(names, ["foo", "bar_baz"]);
        assert!(entries[0].1.contains(".param .u64 a") && !entries[0].1.contains("bar_baz"));
    }
}
