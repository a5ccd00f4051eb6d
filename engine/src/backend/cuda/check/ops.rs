//! Per-kernel parity on the GPU: each kernel on random inputs of SmolLM2's shapes against its
//! host reference (`reference`), as ‖Δ‖/‖ref‖ with a bf16 tolerance of 1e-2.

use cudarc::cublas::CudaBlas;
use cudarc::driver::{CudaSlice, DeviceRepr};
use half::bf16;

use super::reference as r;
use crate::backend::cuda::geometry::{DecodeSplit, decode_split, prefill_tiles};
use crate::backend::cuda::launch::{self, QkvPosition};
use crate::backend::cuda::{Gpu, Result, gemm};
use crate::model::{RopeLayout, RopeScaling};

/// Relative-error bound for bf16 storage with fp32 accumulation.
pub const TOLERANCE: f64 = 1e-2;

/// One op's result.
#[derive(Debug, Clone)]
pub struct OpResult {
    pub op: String,
    pub rel_err: f64,
    pub pass: bool,
}

fn result(op: &str, rel_err: f64) -> OpResult {
    OpResult {
        op: op.to_string(),
        rel_err,
        pass: rel_err <= TOLERANCE,
    }
}

/// Shapes of SmolLM2-135M, where the golden vectors come from.
const H: usize = 576;
const NH: usize = 9;
const NKV: usize = 3;
const HD: usize = 64;
const FFN: usize = 1536;
const BS: usize = 16;
const QKV: usize = (NH + 2 * NKV) * HD;

/// A deterministic generator of test inputs.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> f32 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 >> 40) as f32 / (1u64 << 23) as f32 - 1.0
    }
    fn vec(&mut self, n: usize, scale: f32) -> Vec<f32> {
        (0..n).map(|_| self.next() * scale).collect()
    }
}

fn bf(v: &[f32]) -> Vec<bf16> {
    v.iter().map(|&x| bf16::from_f32(x)).collect()
}

fn widen(v: &[bf16]) -> Vec<f32> {
    v.iter().map(|x| x.to_f32()).collect()
}

fn up<T: DeviceRepr>(gpu: &Gpu, v: &[T]) -> Result<CudaSlice<T>> {
    Ok(gpu.stream.clone_htod(v)?)
}

fn down<T: DeviceRepr + Default + Clone>(gpu: &Gpu, v: &CudaSlice<T>) -> Result<Vec<T>> {
    Ok(gpu.stream.clone_dtoh(v)?)
}

/// Runs every op check on GPU 0.
pub fn run_all() -> Result<Vec<OpResult>> {
    let gpu = Gpu::open(0)?;
    let mut rng = Rng(0x5eed);
    let mut out = vec![embedding(&gpu, &mut rng)?];
    out.extend(rmsnorm(&gpu, &mut rng)?);
    out.extend(positions(&gpu, &mut rng)?);
    out.push(silu(&gpu, &mut rng)?);
    out.push(linear(&gpu, &mut rng)?);
    out.extend(super::attention::run(&gpu, &mut || rng.next())?);
    out.extend(sampling(&gpu, &mut rng)?);
    out.extend(super::serve_sampling::run(&gpu)?);
    Ok(out)
}

fn embedding(gpu: &Gpu, rng: &mut Rng) -> Result<OpResult> {
    let (vocab, t) = (1000usize, 7usize);
    let table = bf(&rng.vec(vocab * H, 1.0));
    let ids: Vec<u32> = (0..t as u32)
        .map(|i| (i * 137 + 11) % vocab as u32)
        .collect();
    let (d_table, d_ids) = (up(gpu, &table)?, up(gpu, &ids)?);
    let mut d_out = gpu.stream.alloc_zeros::<f32>(t * H)?;
    launch::embedding_gather(gpu, &mut d_out, &d_table, &d_ids, t, H, vocab)?;
    let want: Vec<f64> = ids
        .iter()
        .flat_map(|&i| table[i as usize * H..][..H].iter().map(|x| x.to_f64()))
        .collect();
    Ok(result(
        "embedding_gather",
        r::rel_err(&down(gpu, &d_out)?, &want),
    ))
}

fn rmsnorm(gpu: &Gpu, rng: &mut Rng) -> Result<Vec<OpResult>> {
    let t = 5;
    let (res, delta, weight) = (rng.vec(t * H, 2.0), rng.vec(t * H, 1.0), rng.vec(H, 1.0));
    let mut d_res = up(gpu, &res)?;
    let (d_delta, d_w) = (up(gpu, &delta)?, up(gpu, &weight)?);
    let mut d_out = gpu.stream.alloc_zeros::<bf16>(t * H)?;
    launch::rmsnorm_residual(
        gpu,
        &mut d_res,
        Some(&d_delta),
        &d_w,
        &mut d_out,
        t,
        H,
        1e-5,
    )?;
    let (want_res, want_out) = r::rmsnorm(&res, &delta, &weight, 1e-5);
    Ok(vec![
        result(
            "rmsnorm_residual (residual)",
            r::rel_err(&down(gpu, &d_res)?, &want_res),
        ),
        result(
            "rmsnorm_residual (output)",
            r::rel_err(&widen(&down(gpu, &d_out)?), &want_out),
        ),
    ])
}

/// `qkv_position` in each configuration the architectures use: plain RoPE in both pairings
/// (Llama GGUF, SmolLM2), Llama 3.1's `llama3` scaling at positions far past its original
/// context, Qwen2's biases, and Qwen3's q/k norms with a head of 128 and YaRN's scale.
fn positions(gpu: &Gpu, rng: &mut Rng) -> Result<Vec<OpResult>> {
    let llama3 = RopeScaling::Llama3 {
        factor: 8.0,
        low_freq_factor: 1.0,
        high_freq_factor: 4.0,
        original_context: 8192,
    };
    let yarn = RopeScaling::Yarn {
        factor: 4.0,
        original_context: 32_768,
        beta_fast: 32.0,
        beta_slow: 1.0,
        attention_factor: RopeScaling::yarn_attention_factor(4.0),
    };
    let cases = [
        (
            "qkv_position (adjacent, plain)",
            RopeLayout::Adjacent,
            RopeScaling::None,
            HD,
            false,
            false,
        ),
        (
            "qkv_position (half-split, plain)",
            RopeLayout::HalfSplit,
            RopeScaling::None,
            HD,
            false,
            false,
        ),
        (
            "qkv_position (llama3 scaling)",
            RopeLayout::HalfSplit,
            llama3,
            HD,
            false,
            false,
        ),
        (
            "qkv_position (qwen2 bias)",
            RopeLayout::HalfSplit,
            RopeScaling::None,
            HD,
            true,
            false,
        ),
        (
            "qkv_position (qwen3 q/k norm, yarn)",
            RopeLayout::HalfSplit,
            yarn,
            128,
            false,
            true,
        ),
    ];
    let positions: Vec<i32> = vec![0, 1, 17, 511, 8191, 40_000];
    let d_pos = up(gpu, &positions)?;
    let mut out = Vec::new();
    for (name, layout, scaling, hd, with_bias, with_norm) in cases {
        let t = positions.len();
        let width = (NH + 2 * NKV) * hd;
        let qkv = rng.vec(t * width, 1.0);
        let bias = rng.vec(width, 0.5);
        let (q_norm, k_norm) = (rng.vec(hd, 1.0), rng.vec(hd, 1.0));
        let inv_freq = scaling.inv_freqs(hd, 100_000.0);
        let scale = scaling.attention_factor();
        let mut d_qkv = up(gpu, &qkv)?;
        let (d_bias, d_qn, d_kn, d_freq) = (
            up(gpu, &bias)?,
            up(gpu, &q_norm)?,
            up(gpu, &k_norm)?,
            up(gpu, &inv_freq)?,
        );
        let p = QkvPosition {
            tokens: t,
            num_heads: NH,
            num_kv_heads: NKV,
            head_dim: hd,
            layout,
            bias: with_bias.then_some(&d_bias),
            qk_norm: with_norm.then_some((&d_qn, &d_kn)),
            eps: 1e-6,
            inv_freq: &d_freq,
            rope_scale: scale as f32,
        };
        launch::qkv_position(gpu, &mut d_qkv, &d_pos, &p)?;
        let mut want = Vec::with_capacity(qkv.len());
        for (row, &pos) in qkv.chunks(width).zip(&positions) {
            for (h, head) in row.chunks(hd).enumerate() {
                let b = with_bias.then(|| &bias[h * hd..(h + 1) * hd]);
                if h >= NH + NKV {
                    // Values get the bias only.
                    want.extend(
                        head.iter()
                            .enumerate()
                            .map(|(i, &v)| v as f64 + b.map_or(0.0, |b| b[i] as f64)),
                    );
                    continue;
                }
                let w = if h < NH { &q_norm } else { &k_norm };
                let norm = with_norm.then_some((w.as_slice(), 1e-6));
                let adjacent = layout == RopeLayout::Adjacent;
                want.extend(r::position_head(
                    head,
                    b,
                    norm,
                    pos as usize,
                    &inv_freq,
                    scale,
                    adjacent,
                ));
            }
        }
        out.push(result(name, r::rel_err(&down(gpu, &d_qkv)?, &want)));
    }
    Ok(out)
}

fn silu(gpu: &Gpu, rng: &mut Rng) -> Result<OpResult> {
    let t = 3;
    let gate_up = rng.vec(t * 2 * FFN, 4.0);
    let d_in = up(gpu, &gate_up)?;
    let mut d_out = gpu.stream.alloc_zeros::<bf16>(t * FFN)?;
    launch::silu_mul(gpu, &d_in, &mut d_out, t, FFN)?;
    Ok(result(
        "silu_mul",
        r::rel_err(&widen(&down(gpu, &d_out)?), &r::silu_mul(&gate_up, FFN)),
    ))
}

fn linear(gpu: &Gpu, rng: &mut Rng) -> Result<OpResult> {
    let (rows, n) = (13, QKV);
    let (x, w) = (bf(&rng.vec(rows * H, 1.0)), bf(&rng.vec(n * H, 0.05)));
    let (d_x, d_w) = (up(gpu, &x)?, up(gpu, &w)?);
    let mut d_y = gpu.stream.alloc_zeros::<f32>(rows * n)?;
    let blas = CudaBlas::new(gpu.stream.clone())?;
    gemm::linear(&blas, &gpu.stream, &d_x, &d_w, &mut d_y, rows, H, n)?;
    let want = r::linear(&widen(&x), &widen(&w), H);
    Ok(result(
        "cublas linear (bf16 → f32)",
        r::rel_err(&down(gpu, &d_y)?, &want),
    ))
}

/// Greedy argmax must be exact; the sampler must keep to its top-k / top-p sets.
fn sampling(gpu: &Gpu, rng: &mut Rng) -> Result<Vec<OpResult>> {
    let (rows, vocab) = (6usize, 49_152usize);
    let logits = rng.vec(rows * vocab, 8.0);
    let d_logits = up(gpu, &logits)?;
    let mut d_out = gpu.stream.alloc_zeros::<i32>(rows)?;
    launch::argmax_rows(gpu, &d_logits, &mut d_out, rows, vocab)?;
    let argmax: Vec<usize> = logits
        .chunks(vocab)
        .map(|row| {
            row.iter()
                .enumerate()
                .fold(0, |best, (i, &x)| if x > row[best] { i } else { best })
        })
        .collect();
    let got: Vec<usize> = down(gpu, &d_out)?.into_iter().map(|i| i as usize).collect();
    let greedy_misses = got.iter().zip(&argmax).filter(|(a, b)| a != b).count();
    // Rows: greedy (T = 0), top-k 1, top-k 5, top-p 1e-6, top-k 50 + top-p 0.9, plain T = 1.
    let temperature = [0.0f32, 1.0, 1.0, 1.0, 0.7, 1.0];
    let top_k = [0i32, 1, 5, 0, 50, 0];
    let top_p = [1.0f32, 1.0, 1.0, 1e-6, 0.9, 1.0];
    let uniforms: Vec<f32> = (0..rows)
        .map(|_| (rng.next() + 1.0) / 2.0 * 0.999)
        .collect();
    let (d_t, d_k, d_p, d_u) = (
        up(gpu, &temperature)?,
        up(gpu, &top_k)?,
        up(gpu, &top_p)?,
        up(gpu, &uniforms)?,
    );
    let settings = launch::SamplingRows {
        temperature: &d_t,
        top_k: &d_k,
        top_p: &d_p,
        uniforms: &d_u,
    };
    launch::sample_top_k_top_p(gpu, &d_logits, &settings, &mut d_out, rows, vocab)?;
    let sampled = down(gpu, &d_out)?;
    let in_top = |row: usize, k: usize| {
        let r = &logits[row * vocab..][..vocab];
        let x = r[sampled[row].max(0) as usize];
        r.iter().filter(|&&y| y > x).count() < k
    };
    let ok = [
        in_top(0, 1),
        in_top(1, 1),
        in_top(2, 5),
        in_top(3, 1),
        in_top(4, 50),
        (0..vocab as i32).contains(&sampled[5]),
    ];
    let sampler_misses = ok.iter().filter(|&&b| !b).count();
    let masked_misses =
        masked_sampling(gpu, &logits[..rows * vocab], vocab, &d_t, &d_k, &d_p, &d_u)?;
    Ok(vec![
        result("argmax_rows (mismatched rows)", greedy_misses as f64),
        result(
            "sample_top_k_top_p (rows outside their set)",
            sampler_misses as f64,
        ),
        result(
            "apply_token_mask + sampler (rows outside mask or set)",
            masked_misses as f64,
        ),
    ])
}

/// A grammar mask allowing 7 tokens per row (never the row's argmax): every row, greedy or
/// sampled, must pick an allowed token, and greedy rows the best allowed one (the host
/// reference: `TokenMask::apply`, then argmax).
fn masked_sampling(
    gpu: &Gpu,
    logits: &[f32],
    vocab: usize,
    d_t: &CudaSlice<f32>,
    d_k: &CudaSlice<i32>,
    d_p: &CudaSlice<f32>,
    d_u: &CudaSlice<f32>,
) -> Result<usize> {
    let rows = logits.len() / vocab;
    let words = vocab.div_ceil(32);
    let allowed: Vec<Vec<u32>> = (0..rows)
        .map(|r| {
            (0..7)
                .map(|j| ((r * 7919 + j * 6007) % vocab) as u32)
                .collect()
        })
        .collect();
    let mut masks = Vec::with_capacity(rows * words);
    let mut reference = logits.to_vec();
    for (r, ids) in allowed.iter().enumerate() {
        let mask = crate::grammar::TokenMask::allowing(vocab, ids);
        masks.extend_from_slice(mask.words());
        mask.apply(&mut reference[r * vocab..][..vocab]);
    }
    let mut d_logits = up(gpu, logits)?;
    let d_masks = up(gpu, &masks)?;
    let mut d_out = gpu.stream.alloc_zeros::<i32>(rows)?;
    launch::apply_token_mask(gpu, &mut d_logits, &d_masks, rows, vocab)?;
    let settings = launch::SamplingRows {
        temperature: d_t,
        top_k: d_k,
        top_p: d_p,
        uniforms: d_u,
    };
    launch::sample_top_k_top_p(gpu, &d_logits, &settings, &mut d_out, rows, vocab)?;
    let sampled = down(gpu, &d_out)?;
    let misses = (0..rows)
        .filter(|&r| {
            let row = &reference[r * vocab..][..vocab];
            let best = (0..vocab).fold(0, |b, i| if row[i] > row[b] { i } else { b });
            let got = sampled[r].max(0) as u32;
            // Row 0 is greedy (temperature 0): exactly the best allowed token.
            !allowed[r].contains(&got) || (r == 0 && got as usize != best)
        })
        .count();
    Ok(misses)
}

/// The decode split the attention check forces (several splits over short contexts).
pub fn forced_split(max_context: usize) -> DecodeSplit {
    let s = decode_split(1, 1, max_context, 64);
    DecodeSplit {
        splits: s.splits.max(2),
        partition_tokens: max_context.div_ceil(s.splits.max(2)).next_multiple_of(32),
    }
}

/// Prefill tiles of the attention check's sequences.
pub fn tiles_for(
    seqs: &[(usize, usize, usize)],
    group: usize,
    kernel: crate::backend::cuda::PrefillAttention,
) -> Vec<crate::backend::cuda::geometry::QueryTile> {
    prefill_tiles(seqs, kernel.tile_tokens(group, HD))
}

/// Shapes shared with the attention check.
pub const SHAPE: (usize, usize, usize, usize) = (NH, NKV, HD, BS);

/// Formats the results as a table.
pub fn table(rows: &[OpResult]) -> String {
    let mut s = format!("{:<46} {:>12} {:>6}\n", "op", "rel_err", "pass");
    for row in rows {
        s += &format!(
            "{:<46} {:>12.3e} {:>6}\n",
            row.op,
            row.rel_err,
            if row.pass { "yes" } else { "NO" }
        );
    }
    s
}
