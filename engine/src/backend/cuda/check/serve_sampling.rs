//! The serving sampler on the GPU (`apply_logit_edits` + `sample_rows`) against its Rust
//! transcription (`sample_model`), which the CPU tests hold to the host sampler: every row's
//! id must be the same, over greedy, top-k, top-p, min-p, tied logits and logit edits.

use super::ops::OpResult;
use crate::backend::cuda::launch::MAX_TOP_LOGPROBS;
use crate::backend::cuda::sample_model::{apply_edits, row_logprobs, sample_row};
use crate::backend::cuda::{Gpu, Result, launch};
use crate::sampling::Rng;
use crate::sampling::spec::{Edit, RowSampling};

/// Rows of the check: each setting on smooth and on tied logits.
fn settings(rng: &mut Rng) -> Vec<RowSampling> {
    let mut rows = Vec::new();
    for (inv_t, top_k, top_p, min_p) in [
        (0.0, 0, 1.0, 0.0),
        (1.0, 0, 1.0, 0.0),
        (1.0, 1, 1.0, 0.0),
        (1.4, 50, 1.0, 0.0),
        (1.0, 0, 0.9, 0.0),
        (0.8, 40, 0.5, 0.05),
        (1.0, 0, 0.3, 0.1),
    ] {
        for _ in 0..2 {
            rows.push(RowSampling {
                inv_t,
                min_weight: crate::sampling::spec::min_weight(min_p),
                top_k,
                top_p,
                uniform: rng.next_f64(),
            });
        }
    }
    rows
}

/// Mismatched rows between the kernels and the transcription (0 passes).
pub fn run(gpu: &Gpu) -> Result<Vec<OpResult>> {
    let vocab = 49_152usize;
    let mut rng = Rng::seeded(0x5a3b);
    let rows = settings(&mut rng);
    let n = rows.len();
    let mut logits = Vec::with_capacity(n * vocab);
    for r in 0..n {
        for _ in 0..vocab {
            let x = (rng.next_f64() * 16.0 - 12.0) as f32;
            // Odd rows: quarter steps, so many logits tie.
            logits.push(if r % 2 == 1 {
                (x * 4.0).round() / 4.0
            } else {
                x
            });
        }
    }
    // Row r's edits: a bias, a repetition penalty and a subtraction on a few tokens.
    let mut edits = Vec::new();
    let mut offsets = vec![0i32];
    for r in 0..n {
        for j in 0..(r % 4) * 3 {
            edits.push(Edit {
                id: ((r * 977 + j * 4099) % vocab) as u32,
                bias: 2.0,
                repetition: 1.3,
                subtract: 0.25 * j as f32,
            });
        }
        offsets.push(edits.len() as i32);
    }
    let st = &gpu.stream;
    let mut d_logits = st.clone_htod(&logits)?;
    let d_edits = st.clone_htod(&if edits.is_empty() {
        vec![blank()]
    } else {
        edits.clone()
    })?;
    let d_offsets = st.clone_htod(&offsets)?;
    let d_settings = st.clone_htod(&rows)?;
    let mut d_out = st.alloc_zeros::<i32>(n)?;
    launch::apply_logit_edits(
        gpu,
        &mut d_logits,
        &d_edits,
        &d_offsets,
        edits.len(),
        n,
        vocab,
    )?;
    launch::sample_rows(gpu, &mut d_logits, &d_settings, &mut d_out, n, vocab)?;
    let got = st.clone_dtoh(&d_out)?;
    let misses = (0..n)
        .filter(|&r| {
            let mut row = logits[r * vocab..][..vocab].to_vec();
            let span = offsets[r] as usize..offsets[r + 1] as usize;
            apply_edits(&mut row, &edits[span]);
            sample_row(&row, &rows[r]) != got[r]
        })
        .count();
    let logprob_misses = logprobs(gpu, &logits, &d_out, n, vocab)?;
    Ok(vec![
        OpResult {
            op: "apply_logit_edits + sample_rows vs sample_model (mismatched rows)".into(),
            rel_err: misses as f64,
            pass: misses == 0,
        },
        OpResult {
            op: "row_logprobs vs sample_model (rows off by > 1e-4 or other ids)".into(),
            rel_err: logprob_misses as f64,
            pass: logprob_misses == 0,
        },
    ])
}

/// `row_logprobs` with 5 alternatives per row, against the transcription on the raw rows.
fn logprobs(
    gpu: &Gpu,
    raw: &[f32],
    chosen: &cudarc::driver::CudaSlice<i32>,
    n: usize,
    vocab: usize,
) -> Result<usize> {
    let st = &gpu.stream;
    let d_raw = st.clone_htod(raw)?;
    let rows_of: Vec<i32> = (0..n as i32).collect();
    let d_rows_of = st.clone_htod(&rows_of)?;
    let d_n = st.clone_htod(&vec![5i32; n])?;
    let mut d_lp = st.alloc_zeros::<f32>(n * (1 + MAX_TOP_LOGPROBS))?;
    let mut d_ids = st.alloc_zeros::<i32>(n * MAX_TOP_LOGPROBS)?;
    let buffers = launch::LogprobRows {
        raw: &d_raw,
        rows_of: &d_rows_of,
        chosen,
        n_top: &d_n,
        lp: &mut d_lp,
        ids: &mut d_ids,
    };
    launch::row_logprobs(gpu, buffers, n, vocab)?;
    let (lp, ids, tokens) = (
        st.clone_dtoh(&d_lp)?,
        st.clone_dtoh(&d_ids)?,
        st.clone_dtoh(chosen)?,
    );
    let misses = (0..n)
        .filter(|&r| {
            let (want, top) = row_logprobs(&raw[r * vocab..][..vocab], tokens[r], 5);
            let row = &lp[r * (1 + MAX_TOP_LOGPROBS)..];
            let off = (row[0] - want).abs() > 1e-4;
            let others = top.iter().enumerate().any(|(j, t)| {
                ids[r * MAX_TOP_LOGPROBS + j] != t.token_id as i32
                    || (row[1 + j] - t.logprob).abs() > 1e-4
            });
            off || others
        })
        .count();
    Ok(misses)
}

fn blank() -> Edit {
    Edit {
        id: 0,
        bias: 0.0,
        repetition: 1.0,
        subtract: 0.0,
    }
}
