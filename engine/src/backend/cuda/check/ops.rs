//! Per-kernel parity on the GPU: each kernel on random inputs of SmolLM2's shapes against its
//! host reference (`reference`), as ‖Δ‖/‖ref‖ with a bf16 tolerance of 1e-2.

use cudarc::cublas::CudaBlas;
use cudarc::driver::{CudaSlice, DeviceRepr, LaunchConfig, PushKernelArg};
use half::bf16;

use super::reference as r;
use crate::backend::cuda::geometry::{DecodeSplit, decode_split, prefill_tiles};
use crate::backend::cuda::{Gpu, Result, gemm};

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

fn cfg1(n: usize, threads: u32) -> LaunchConfig {
    LaunchConfig {
        grid_dim: (n as u32, 1, 1),
        block_dim: (threads, 1, 1),
        shared_mem_bytes: 0,
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
    out.push(rope(&gpu, &mut rng, true)?);
    out.push(rope(&gpu, &mut rng, false)?);
    out.push(silu(&gpu, &mut rng)?);
    out.push(linear(&gpu, &mut rng)?);
    out.extend(super::attention::run(&gpu, &mut || rng.next())?);
    out.extend(sampling(&gpu, &mut rng)?);
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
    let (hidden, v) = (H as i32, vocab as i32);
    // SAFETY (all launches here): arguments match the kernel signatures; buffers are sized
    // for the grids used.
    unsafe {
        gpu.stream
            .launch_builder(gpu.function("embedding_gather")?)
            .arg(&mut d_out)
            .arg(&d_table)
            .arg(&d_ids)
            .arg(&hidden)
            .arg(&v)
            .launch(cfg1(t, 256))
    }?;
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
    let (hidden, eps) = (H as i32, 1e-5f32);
    unsafe {
        gpu.stream
            .launch_builder(gpu.function("rmsnorm_residual")?)
            .arg(&mut d_res)
            .arg(&d_delta)
            .arg(&d_w)
            .arg(&mut d_out)
            .arg(&hidden)
            .arg(&eps)
            .launch(cfg1(t, 256))
    }?;
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

fn rope(gpu: &Gpu, rng: &mut Rng, adjacent: bool) -> Result<OpResult> {
    let positions: Vec<i32> = vec![0, 1, 17, 511, 4095, 8191];
    let t = positions.len();
    let qkv = rng.vec(t * QKV, 1.0);
    let mut d_qkv = up(gpu, &qkv)?;
    let d_pos = up(gpu, &positions)?;
    let (nh, nkv, hd, base) = (NH as i32, NKV as i32, HD as i32, 100_000f32);
    let name = if adjacent {
        "rope_adjacent"
    } else {
        "rope_half_split"
    };
    unsafe {
        gpu.stream
            .launch_builder(gpu.function(name)?)
            .arg(&mut d_qkv)
            .arg(&d_pos)
            .arg(&nh)
            .arg(&nkv)
            .arg(&hd)
            .arg(&base)
            .launch(cfg1(t, 128))
    }?;
    let mut want = Vec::with_capacity(qkv.len());
    for (row, &pos) in qkv.chunks(QKV).zip(&positions) {
        for (h, head) in row.chunks(HD).enumerate() {
            if h < NH + NKV {
                want.extend(r::rope_head(head, pos as usize, 100_000.0, adjacent));
            } else {
                want.extend(head.iter().map(|&v| v as f64)); // values are not rotated
            }
        }
    }
    Ok(result(name, r::rel_err(&down(gpu, &d_qkv)?, &want)))
}

fn silu(gpu: &Gpu, rng: &mut Rng) -> Result<OpResult> {
    let t = 3;
    let gate_up = rng.vec(t * 2 * FFN, 4.0);
    let d_in = up(gpu, &gate_up)?;
    let mut d_out = gpu.stream.alloc_zeros::<bf16>(t * FFN)?;
    let (tokens, ffn) = (t as i32, FFN as i32);
    unsafe {
        gpu.stream
            .launch_builder(gpu.function("silu_mul")?)
            .arg(&d_in)
            .arg(&mut d_out)
            .arg(&tokens)
            .arg(&ffn)
            .launch(cfg1((t * FFN).div_ceil(256), 256))
    }?;
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
    let v = vocab as i32;
    unsafe {
        gpu.stream
            .launch_builder(gpu.function("argmax_rows")?)
            .arg(&d_logits)
            .arg(&mut d_out)
            .arg(&v)
            .launch(cfg1(rows, 1024))
    }?;
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
    unsafe {
        gpu.stream
            .launch_builder(gpu.function("sample_top_k_top_p")?)
            .arg(&d_logits)
            .arg(&d_t)
            .arg(&d_k)
            .arg(&d_p)
            .arg(&d_u)
            .arg(&mut d_out)
            .arg(&v)
            .launch(cfg1(rows, 1024))
    }?;
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
    Ok(vec![
        result("argmax_rows (mismatched rows)", greedy_misses as f64),
        result(
            "sample_top_k_top_p (rows outside their set)",
            sampler_misses as f64,
        ),
    ])
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
) -> Vec<crate::backend::cuda::geometry::QueryTile> {
    prefill_tiles(
        seqs,
        crate::backend::cuda::geometry::prefill_tile_tokens(group, HD),
    )
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
