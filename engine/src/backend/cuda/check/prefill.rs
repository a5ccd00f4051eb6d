//! Prefill attention parity on the GPU past 512 keys: each prefill kernel (naive, mma) against
//! the host reference over the same random bf16 cache, chunks continuing deep into a sequence
//! beside fresh prompts that span several query tiles, in SmolLM2's attention shape (9 heads
//! over 3 KV heads, head dim 64) and a head-dim-128 one (8 over 2).

use half::bf16;

use super::attention::{host_f32, result};
use super::ops::OpResult;
use super::reference as r;
use crate::backend::cuda::geometry::prefill_tiles;
use crate::backend::cuda::launch::{self, Attend, PrefillArgs};
use crate::backend::cuda::{Gpu, PrefillAttention, Result};

const BLOCK: usize = 16;
const CACHE_BLOCKS: usize = 128;

/// One shape and its sequences: `(start_pos, tokens)` each.
struct Case {
    heads: usize,
    kv_heads: usize,
    head_dim: usize,
    seqs: &'static [(usize, usize)],
}

const CASES: [Case; 2] = [
    Case {
        heads: 9,
        kv_heads: 3,
        head_dim: 64,
        seqs: &[(520, 80), (0, 130), (1000, 40)],
    },
    Case {
        heads: 8,
        kv_heads: 2,
        head_dim: 128,
        seqs: &[(600, 70), (0, 65)],
    },
];

/// Cache block of logical block `i` of sequence `s` (scattered; sharing is harmless: reads).
fn block_of(s: usize, i: usize) -> usize {
    (s * 41 + i * 37 + 5) % CACHE_BLOCKS
}

impl Case {
    /// The parity row's name: kernel, head dimension, longest context (chunks continue).
    fn label(&self, kernel: PrefillAttention) -> String {
        let longest = self.seqs.iter().map(|&(p, t)| p + t).max().unwrap_or(0);
        format!(
            "attention_prefill {kernel} (hd{}, ctx {longest})",
            self.head_dim
        )
    }

    fn row_width(&self) -> usize {
        (self.heads + 2 * self.kv_heads) * self.head_dim
    }

    /// Keys and values of kv head `h` of sequence `s`, positions `0..len`, from the host cache.
    fn gather(&self, cache: &[bf16], s: usize, h: usize, len: usize) -> Vec<Vec<f32>> {
        let hd = self.head_dim;
        (0..len)
            .map(|p| {
                let at = ((block_of(s, p / BLOCK) * self.kv_heads + h) * BLOCK + p % BLOCK) * hd;
                cache[at..at + hd].iter().map(|x| x.to_f32()).collect()
            })
            .collect()
    }

    /// The reference output rows `[tokens, heads * head_dim]`.
    fn reference(&self, k: &[bf16], v: &[bf16], qkv: &[f32]) -> Vec<f64> {
        let (hd, group) = (self.head_dim, self.heads / self.kv_heads);
        let scale = 1.0 / (hd as f64).sqrt();
        let mut want = Vec::new();
        let mut row = 0;
        for (s, &(start, tokens)) in self.seqs.iter().enumerate() {
            let kv: Vec<_> = (0..self.kv_heads)
                .map(|h| {
                    (
                        self.gather(k, s, h, start + tokens),
                        self.gather(v, s, h, start + tokens),
                    )
                })
                .collect();
            for pos in start..start + tokens {
                for head in 0..self.heads {
                    let (keys, values) = &kv[head / group];
                    let q = &qkv[row * self.row_width() + head * hd..][..hd];
                    want.extend(r::attend(q, &keys[..=pos], &values[..=pos], scale));
                }
                row += 1;
            }
        }
        want
    }

    /// Runs every kernel on this case; one result each.
    fn run(&self, gpu: &Gpu, rand: &mut dyn FnMut() -> f32) -> Result<Vec<OpResult>> {
        let (hd, group) = (self.head_dim, self.heads / self.kv_heads);
        let elems = CACHE_BLOCKS * self.kv_heads * BLOCK * hd;
        let k: Vec<bf16> = (0..elems).map(|_| bf16::from_f32(rand())).collect();
        let v: Vec<bf16> = (0..elems).map(|_| bf16::from_f32(rand())).collect();
        let tokens: usize = self.seqs.iter().map(|&(_, t)| t).sum();
        // Spread 4: sharp scores, so the running max moves between key tiles.
        let qkv: Vec<f32> = (0..tokens * self.row_width())
            .map(|_| 4.0 * rand())
            .collect();
        let max_blocks = self
            .seqs
            .iter()
            .map(|&(p, t)| (p + t).div_ceil(BLOCK))
            .max()
            .unwrap_or(1);
        let mut tables = vec![0i32; self.seqs.len() * max_blocks];
        for (s, &(p, t)) in self.seqs.iter().enumerate() {
            for i in 0..(p + t).div_ceil(BLOCK) {
                tables[s * max_blocks + i] = block_of(s, i) as i32;
            }
        }
        let want = self.reference(&k, &v, &qkv);
        let st = &gpu.stream;
        let (d_k, d_v, d_qkv, d_tables) = (
            st.clone_htod(&k)?,
            st.clone_htod(&v)?,
            st.clone_htod(&qkv)?,
            st.clone_htod(&tables)?,
        );
        let mut first_row = 0;
        let seq_rows: Vec<(usize, usize, usize)> = self
            .seqs
            .iter()
            .map(|&(p, t)| {
                first_row += t;
                (first_row - t, p, t)
            })
            .collect();
        let attend = Attend {
            qkv: &d_qkv,
            k_cache: &d_k,
            v_cache: &d_v,
            block_tables: &d_tables,
            num_heads: self.heads,
            num_kv_heads: self.kv_heads,
            head_dim: hd,
            block_size: BLOCK,
            max_blocks_per_seq: max_blocks,
            cache_blocks: CACHE_BLOCKS,
        };
        let mut out = Vec::new();
        for kernel in [PrefillAttention::Naive, PrefillAttention::Mma] {
            let tiles = prefill_tiles(&seq_rows, kernel.tile_tokens(group, hd));
            let d_tiles = st.clone_htod(&tiles)?;
            let mut d_out = st.alloc_zeros::<bf16>(tokens * self.heads * hd)?;
            let args = PrefillArgs {
                out: &mut d_out,
                tiles: &d_tiles,
                num_tiles: tiles.len(),
                tokens,
                seqs: self.seqs.len(),
                scale: 1.0 / (hd as f32).sqrt(),
                kernel,
            };
            launch::attention_prefill(gpu, &attend, args)?;
            let got = host_f32(gpu, &d_out)?;
            out.push(result(&self.label(kernel), r::rel_err(&got, &want)));
        }
        Ok(out)
    }
}

/// Runs every case with both kernels: one parity row per (case, kernel).
pub fn run(gpu: &Gpu, rand: &mut dyn FnMut() -> f32) -> Result<Vec<OpResult>> {
    let mut out = Vec::new();
    for case in &CASES {
        out.extend(case.run(gpu, rand)?);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::cuda::prefill::MMA_ROWS;

    #[test]
    fn the_cases_cover_long_chunked_and_multi_tile_prefill_for_both_head_dims() {
        for case in &CASES {
            assert!(
                crate::backend::cuda::geometry::check_attention_shape(
                    case.heads,
                    case.kv_heads,
                    case.head_dim
                )
                .is_ok()
            );
            let group = case.heads / case.kv_heads;
            // The MMA kernel runs (not the naive fallback) on every case.
            assert_eq!(
                PrefillAttention::Mma.for_head_dim(case.head_dim),
                PrefillAttention::Mma
            );
            assert!(
                case.seqs.iter().any(|&(p, t)| p > 512 && p + t > 512),
                "a chunk past 512"
            );
            assert!(
                case.seqs
                    .iter()
                    .any(|&(p, t)| p == 0 && t * group > MMA_ROWS),
                "multi-tile"
            );
            assert!(
                case.label(PrefillAttention::Mma).len() <= 46,
                "fits the table's op column"
            );
        }
        assert_eq!(
            CASES.map(|c| c.head_dim),
            [64, 128],
            "both MMA entry points are checked"
        );
    }
}
