//! Attention parity on the GPU: the KV-cache write, split-K paged decode + merge (with splits
//! forced, some of them empty) and chunked causal prefill (both prefill kernels; the long
//! contexts in `prefill`), each against the host reference over the same bf16 cache contents.

use cudarc::driver::CudaSlice;
use half::bf16;

use super::ops::{OpResult, SHAPE, TOLERANCE, tiles_for};
use super::reference as r;
use crate::backend::SeqStep;
use crate::backend::cuda::geometry::DecodeSplit;
use crate::backend::cuda::launch::{self, Attend, CacheShape, DecodeArgs, PrefillArgs};
use crate::backend::cuda::plan::{PlanLimits, StepPlan, plan_step};
use crate::backend::cuda::{Gpu, PrefillAttention, Result};

const BLOCKS: usize = 64;
const MAX_BLOCKS: usize = 48;

/// Host copy of one layer's cache: `[blocks, kv_heads, block_size, head_dim]`.
struct HostCache {
    k: Vec<bf16>,
    v: Vec<bf16>,
}

impl HostCache {
    fn at(&self, block: usize, head: usize, slot: usize) -> usize {
        let (_, nkv, hd, bs) = SHAPE;
        ((block * nkv + head) * bs + slot) * hd
    }

    /// Keys and values of kv head `head` for positions `0..len` through `table`.
    fn gather(&self, table: &[u32], head: usize, len: usize) -> (Vec<Vec<f32>>, Vec<Vec<f32>>) {
        let (_, _, hd, bs) = SHAPE;
        (0..len)
            .map(|p| {
                let at = self.at(table[p / bs] as usize, head, p % bs);
                let row = |c: &[bf16]| {
                    c[at..at + hd]
                        .iter()
                        .map(|x| x.to_f32())
                        .collect::<Vec<f32>>()
                };
                (row(&self.k), row(&self.v))
            })
            .unzip()
    }
}

/// A device bf16 buffer as host f32 values.
pub(super) fn host_f32(gpu: &Gpu, d: &CudaSlice<bf16>) -> Result<Vec<f32>> {
    Ok(gpu
        .stream
        .clone_dtoh(d)?
        .iter()
        .map(|x| x.to_f32())
        .collect())
}

/// One parity row, passing within `TOLERANCE`.
pub(super) fn result(op: &str, rel_err: f64) -> OpResult {
    OpResult {
        op: op.to_string(),
        rel_err,
        pass: rel_err <= TOLERANCE,
    }
}

fn limits() -> PlanLimits {
    let (_, _, _, bs) = SHAPE;
    PlanLimits {
        block_size: bs,
        num_blocks: BLOCKS,
        vocab_size: 1,
        max_blocks_per_seq: MAX_BLOCKS,
        max_tokens: 64,
        max_seqs: 8,
        max_logit_rows: 8,
    }
}

/// Reference attention output rows `[rows, heads * head_dim]` for queries at `positions`.
fn reference(cache: &HostCache, qkv: &[f32], queries: &[(usize, &[u32], usize)]) -> Vec<f64> {
    let (nh, nkv, hd, _) = SHAPE;
    let row_width = (nh + 2 * nkv) * hd;
    let mut want = Vec::new();
    for &(row, table, len) in queries {
        for h in 0..nh {
            let (keys, values) = cache.gather(table, h / (nh / nkv), len);
            let q = &qkv[row * row_width + h * hd..][..hd];
            want.extend(r::attend(q, &keys, &values, 1.0 / (hd as f64).sqrt()));
        }
    }
    want
}

/// Runs the attention checks.
pub fn run(gpu: &Gpu, rand: &mut dyn FnMut() -> f32) -> Result<Vec<OpResult>> {
    let (nh, nkv, hd, bs) = SHAPE;
    let elems = BLOCKS * nkv * bs * hd;
    let mut host = HostCache {
        k: (0..elems).map(|_| bf16::from_f32(rand())).collect(),
        v: (0..elems).map(|_| bf16::from_f32(rand())).collect(),
    };
    let (d_k, d_v) = (
        gpu.stream.clone_htod(&host.k)?,
        gpu.stream.clone_htod(&host.v)?,
    );
    let row_width = (nh + 2 * nkv) * hd;
    let mut out = Vec::new();

    // Chunked prefill: sequence A continues at position 37 with 20 tokens; B starts afresh.
    let (table_a, table_b): (Vec<u32>, Vec<u32>) = ((10..14).rev().collect(), vec![40]);
    let tokens = [0u32; 20];
    let batch = [
        SeqStep {
            tokens: &tokens[..20],
            start_pos: 37,
            block_table: &table_a,
            want_logits: true,
        },
        SeqStep {
            tokens: &tokens[..9],
            start_pos: 0,
            block_table: &table_b,
            want_logits: true,
        },
    ];
    let plan = plan_step(&batch, &limits()).map_err(crate::backend::cuda::Error::Step)?;
    let qkv: Vec<f32> = (0..plan.num_tokens() * row_width).map(|_| rand()).collect();
    let d_qkv = gpu.stream.clone_htod(&qkv)?;
    let d_slots = gpu.stream.clone_htod(&plan.slots)?;
    let cache_shape = CacheShape {
        num_blocks: BLOCKS,
        num_heads: nh,
        num_kv_heads: nkv,
        head_dim: hd,
        block_size: bs,
    };
    let d_tokens = plan.num_tokens();
    launch::kv_cache_write(gpu, &d_qkv, &d_k, &d_v, &d_slots, d_tokens, cache_shape)?;
    write_expected(&mut host, &qkv, &plan);
    let want_k: Vec<f64> = host.k.iter().map(|x| x.to_f64()).collect();
    let want_v: Vec<f64> = host.v.iter().map(|x| x.to_f64()).collect();
    let got_k: Vec<f32> = host_f32(gpu, &d_k)?;
    let got_v: Vec<f32> = host_f32(gpu, &d_v)?;
    out.push(result(
        "kv_cache_write (whole cache)",
        r::rel_err(&got_k, &want_k).max(r::rel_err(&got_v, &want_v)),
    ));

    let d_tables = gpu.stream.clone_htod(&plan.block_tables)?;
    let scale = 1.0 / (hd as f32).sqrt();
    let prefill_inputs = Attend {
        qkv: &d_qkv,
        k_cache: &d_k,
        v_cache: &d_v,
        block_tables: &d_tables,
        num_heads: nh,
        num_kv_heads: nkv,
        head_dim: hd,
        block_size: bs,
        max_blocks_per_seq: MAX_BLOCKS,
        cache_blocks: BLOCKS,
    };
    let queries: Vec<(usize, &[u32], usize)> = (0..plan.num_tokens())
        .map(|row| {
            let table: &[u32] = if row < 20 { &table_a } else { &table_b };
            (row, table, plan.positions[row] as usize + 1)
        })
        .collect();
    let want = reference(&host, &qkv, &queries);
    for kernel in [PrefillAttention::Naive, PrefillAttention::Mma] {
        let tiles = tiles_for(&plan.seq_rows, nh / nkv, kernel);
        let d_tiles = gpu.stream.clone_htod(&tiles)?;
        let mut d_attn = gpu
            .stream
            .alloc_zeros::<bf16>(plan.num_tokens() * nh * hd)?;
        let prefill = PrefillArgs {
            out: &mut d_attn,
            tiles: &d_tiles,
            num_tiles: tiles.len(),
            tokens: plan.num_tokens(),
            seqs: plan.num_seqs(),
            scale,
            kernel,
        };
        launch::attention_prefill(gpu, &prefill_inputs, prefill)?;
        let got: Vec<f32> = host_f32(gpu, &d_attn)?;
        out.push(result(
            &format!("attention_prefill {kernel} (chunked, causal)"),
            r::rel_err(&got, &want),
        ));
    }

    // Decode: contexts 1, 17, 100 and 700 tokens, with 1 split and with 8 (some empty).
    let contexts = [1usize, 17, 100, 700];
    let mut next_block = 14u32;
    let tables: Vec<Vec<u32>> = contexts
        .iter()
        .map(|&c| {
            let n = c.div_ceil(bs) as u32;
            // Reuse blocks cyclically (the check reads, so sharing blocks is harmless).
            let t = (0..n)
                .map(|i| (next_block + i * 7) % BLOCKS as u32)
                .collect();
            next_block += 3;
            t
        })
        .collect();
    let mut flat = vec![0i32; contexts.len() * MAX_BLOCKS];
    for (s, t) in tables.iter().enumerate() {
        for (i, &b) in t.iter().enumerate() {
            flat[s * MAX_BLOCKS + i] = b as i32;
        }
    }
    let q: Vec<f32> = (0..contexts.len() * row_width).map(|_| rand()).collect();
    let lens: Vec<i32> = contexts.iter().map(|&c| c as i32).collect();
    let (d_q, d_flat, d_lens) = (
        gpu.stream.clone_htod(&q)?,
        gpu.stream.clone_htod(&flat)?,
        gpu.stream.clone_htod(&lens)?,
    );
    let queries: Vec<(usize, &[u32], usize)> = tables
        .iter()
        .enumerate()
        .map(|(s, t)| (s, t.as_slice(), contexts[s]))
        .collect();
    let want = reference(&host, &q, &queries);
    for split in [
        DecodeSplit {
            splits: 1,
            partition_tokens: 704,
        },
        DecodeSplit {
            splits: 8,
            partition_tokens: 96,
        },
    ] {
        let seqs = contexts.len();
        let rows = seqs * nh * split.splits;
        let mut part_out = gpu.stream.alloc_zeros::<f32>(rows * hd)?;
        let (mut part_max, mut part_sum) = (
            gpu.stream.alloc_zeros::<f32>(rows)?,
            gpu.stream.alloc_zeros::<f32>(rows)?,
        );
        let mut d_out = gpu.stream.alloc_zeros::<bf16>(seqs * nh * hd)?;
        let decode = DecodeArgs {
            part_out: &mut part_out,
            part_max: &mut part_max,
            part_sum: &mut part_sum,
            context_lens: &d_lens,
            seqs,
            split,
            scale,
        };
        let decode_inputs = Attend {
            qkv: &d_q,
            block_tables: &d_flat,
            ..prefill_inputs
        };
        launch::attention_decode(gpu, &decode_inputs, decode)?;
        launch::attention_merge(
            gpu,
            &mut d_out,
            &part_out,
            &part_max,
            &part_sum,
            seqs,
            nh,
            hd,
            split.splits,
        )?;
        let got: Vec<f32> = host_f32(gpu, &d_out)?;
        out.push(result(
            &format!("attention_decode + merge ({} splits)", split.splits),
            r::rel_err(&got, &want),
        ));
    }
    out.extend(super::prefill::run(gpu, rand)?);
    Ok(out)
}

/// What `kv_cache_write` must leave in the host copy: each token's k and v at its slot.
fn write_expected(cache: &mut HostCache, qkv: &[f32], plan: &StepPlan) {
    let (nh, nkv, hd, bs) = SHAPE;
    let row_width = (nh + 2 * nkv) * hd;
    for (t, &slot) in plan.slots.iter().enumerate() {
        let slot = slot as usize;
        for h in 0..nkv {
            let at = cache.at(slot / bs, h, slot % bs);
            let k = &qkv[t * row_width + (nh + h) * hd..][..hd];
            let v = &qkv[t * row_width + (nh + nkv + h) * hd..][..hd];
            for d in 0..hd {
                cache.k[at + d] = bf16::from_f32(k[d]);
                cache.v[at + d] = bf16::from_f32(v[d]);
            }
        }
    }
}
