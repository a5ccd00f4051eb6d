//! The Llama-family forward pass over a flattened batch (every sequence's new tokens in one
//! `[tokens, hidden]` matrix), reading and writing the paged KV cache.

use rayon::prelude::*;

use super::Precision;
use super::attention::{Attend, Heads, TokenPlace, attention};
use super::kv_store::KvStore;
use super::linear::linear;
use super::lora::Lora;
use super::ops::{add_in_place, rms_norm, rms_norm_heads, rope, rope_tables, swiglu};
use crate::backend::{SeqStep, StepOutput};
use crate::lora::{Fused, LoraAdapter};
use crate::model::{Layer, Model};
use crate::quant::{Acts, Q8Rows, QMatrix};

/// Settings of one forward call.
#[derive(Debug, Clone, Copy)]
pub(super) struct Run {
    pub precision: Precision,
    pub threads: usize,
}

impl Run {
    /// `out = x · wᵀ` for `x` `[m, w.cols()]`, quantising `x` first on the fast path.
    fn linear(&self, w: &QMatrix, x: &[f32], m: usize, xq: &mut Q8Rows, out: &mut [f32]) {
        let q8 = if self.precision == Precision::Fast && w.is_quantized() {
            xq.quantize(x, w.cols());
            Some(&*xq)
        } else {
            None
        };
        linear(w, Acts { f32: x, q8 }, m, out, self.threads);
    }
}

/// One step's batch and what each entry asks for.
#[derive(Clone, Copy)]
pub(super) struct Step<'a, 'b> {
    pub batch: &'a [SeqStep<'b>],
    /// Entries with `every_row[i]` set get a logits row per token (prompt logprobs); empty:
    /// none does.
    pub every_row: &'a [bool],
    /// The LoRA adapter of each entry (`None`: the base; empty: none for any).
    pub adapters: &'a [Option<&'a LoraAdapter>],
}

/// Runs the batch; the caller has validated token ids, positions, block tables and adapters.
pub(super) fn forward<T: Attend>(
    model: &Model,
    kv: &mut KvStore<T>,
    step: Step<'_, '_>,
    run: Run,
) -> StepOutput {
    let Step {
        batch,
        every_row,
        adapters,
    } = step;
    let c = &model.config;
    let (hidden, ffn, head_dim) = (c.hidden_size, c.ffn_size, c.head_dim);
    let (q_dim, kv_dim) = (c.q_dim(), c.kv_dim());
    let qkv_dim = q_dim + 2 * kv_dim;

    // Flatten the batch: one entry per new token.
    let tokens: Vec<u32> = batch
        .iter()
        .flat_map(|s| s.tokens.iter().copied())
        .collect();
    let places: Vec<TokenPlace<'_>> = batch
        .iter()
        .flat_map(|s| {
            (0..s.tokens.len()).map(|i| TokenPlace {
                pos: s.start_pos + i,
                block_table: s.block_table,
            })
        })
        .collect();
    let t = tokens.len();
    let lora = Lora::per_token(batch, adapters); // [t] adapter of each token
    let positions: Vec<usize> = places.iter().map(|p| p.pos).collect();
    let scale = c.rope_scaling.attention_factor();
    let (cos, sin) = rope_tables(&positions, &model.rope_inv_freqs, scale); // [t, head_dim / 2] each
    let heads = Heads {
        num_heads: c.num_heads,
        num_kv_heads: c.num_kv_heads,
        head_dim,
    };

    let mut x = vec![0f32; t * hidden]; // [t, hidden] residual stream
    for (row, &tok) in x.chunks_exact_mut(hidden).zip(&tokens) {
        model.token_embd.row_f32(tok as usize, row);
    }
    let mut xn = vec![0f32; t * hidden]; // [t, hidden] normalised
    let mut xq = Q8Rows::default(); // [t, width / 32] quantised activations (fast path)
    let mut qkv = vec![0f32; t * qkv_dim]; // [t, q_dim + 2 kv_dim]
    let mut attn = vec![0f32; t * q_dim]; // [t, q_dim]
    let mut proj = vec![0f32; t * hidden]; // [t, hidden]
    let mut gate_up = vec![0f32; t * 2 * ffn]; // [t, 2 ffn]
    let mut act = vec![0f32; t * ffn]; // [t, ffn]

    for (l, layer) in model.layers.iter().enumerate() {
        rms_norm(&x, &layer.attn_norm, c.rms_norm_eps, &mut xn);
        run.linear(&layer.wqkv, &xn, t, &mut xq, &mut qkv);
        lora.add(l, Fused::Qkv, &xn, &mut qkv);
        let shape = QkvShape {
            q_dim,
            kv_dim,
            head_dim,
            eps: c.rms_norm_eps,
            layout: c.rope_layout,
        };
        position_qkv(layer, &mut qkv, shape, &cos, &sin);
        write_kv(kv, l, &qkv, &places, q_dim, kv_dim);
        attention(&qkv, kv, l, &places, heads, &mut attn);
        run.linear(&layer.wo, &attn, t, &mut xq, &mut proj);
        lora.add(l, Fused::O, &attn, &mut proj);
        add_in_place(&mut x, &proj);

        rms_norm(&x, &layer.ffn_norm, c.rms_norm_eps, &mut xn);
        run.linear(&layer.w_gate_up, &xn, t, &mut xq, &mut gate_up);
        lora.add(l, Fused::GateUp, &xn, &mut gate_up);
        par_rows(&gate_up, 2 * ffn, &mut act, ffn, |gu, a| swiglu(gu, ffn, a));
        run.linear(&layer.w_down, &act, t, &mut xq, &mut proj);
        lora.add(l, Fused::Down, &act, &mut proj);
        add_in_place(&mut x, &proj);
    }

    // Logits for the last token of each sequence that asked, or for all of its tokens.
    let mut rows = Vec::new();
    let mut last = 0;
    for (i, s) in batch.iter().enumerate() {
        let first = last;
        last += s.tokens.len();
        if every_row.get(i).copied().unwrap_or(false) {
            rows.extend((first..last).map(|tok| (i, tok)));
        } else if s.want_logits {
            rows.push((i, last - 1));
        }
    }
    let r = rows.len();
    let mut xl = vec![0f32; r * hidden]; // [r, hidden]
    for (dst, &(_, tok)) in xl.chunks_exact_mut(hidden).zip(&rows) {
        rms_norm(
            &x[tok * hidden..(tok + 1) * hidden],
            &model.output_norm,
            c.rms_norm_eps,
            dst,
        );
    }
    let mut logits = vec![0f32; r * c.vocab_size]; // [r, vocab]
    run.linear(model.head(), &xl, r, &mut xq, &mut logits);
    StepOutput {
        logits,
        rows: rows.iter().map(|&(i, _)| i).collect(),
    }
}

/// Widths of a fused `[q | k | v]` row and how its heads are positioned.
#[derive(Debug, Clone, Copy)]
struct QkvShape {
    q_dim: usize,
    kv_dim: usize,
    head_dim: usize,
    /// RMSNorm epsilon of the q/k norms.
    eps: f32,
    layout: crate::model::RopeLayout,
}

/// Adds the QKV bias (if any), normalises the heads of Q and K (if the model does), and
/// rotates Q and K of every token by its position.
fn position_qkv(layer: &Layer, qkv: &mut [f32], s: QkvShape, cos: &[f32], sin: &[f32]) {
    let half = s.head_dim / 2;
    qkv.par_chunks_mut(s.q_dim + 2 * s.kv_dim)
        .enumerate()
        .for_each(|(t, row)| {
            if let Some(bias) = &layer.bqkv {
                add_in_place(row, bias);
            }
            let (q, rest) = row.split_at_mut(s.q_dim);
            if let (Some(qn), Some(kn)) = (&layer.q_norm, &layer.k_norm) {
                rms_norm_heads(q, qn, s.eps);
                rms_norm_heads(&mut rest[..s.kv_dim], kn, s.eps);
            }
            let (cos_t, sin_t) = (
                &cos[t * half..(t + 1) * half],
                &sin[t * half..(t + 1) * half],
            );
            rope(
                &mut row[..s.q_dim + s.kv_dim],
                s.head_dim,
                cos_t,
                sin_t,
                s.layout,
            );
        });
}

/// Stores each token's K and V (`qkv[t, q_dim ..]`) in its cache slot.
fn write_kv<T: Attend>(
    kv: &mut KvStore<T>,
    layer: usize,
    qkv: &[f32],
    places: &[TokenPlace<'_>],
    q_dim: usize,
    kv_dim: usize,
) {
    let qkv_dim = q_dim + 2 * kv_dim;
    for (row, place) in qkv.chunks_exact(qkv_dim).zip(places) {
        let (k, v) = row[q_dim..].split_at(kv_dim);
        kv.write(layer, place.block_table, place.pos, k, v);
    }
}

/// Applies `f` to matching row blocks of `input` (`[t, in_w]`) and `output` (`[t, out_w]`),
/// in parallel for large batches.
fn par_rows(
    input: &[f32],
    in_w: usize,
    output: &mut [f32],
    out_w: usize,
    f: impl Fn(&[f32], &mut [f32]) + Sync,
) {
    const ROWS: usize = 8;
    output
        .par_chunks_mut(ROWS * out_w)
        .zip(input.par_chunks(ROWS * in_w))
        .for_each(|(o, i)| f(i, o));
}
