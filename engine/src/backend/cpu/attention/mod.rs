//! Causal grouped-query attention over the paged KV cache, one token at a time (so a token's
//! result never depends on what else is in the batch): the f32 reference ([`reference`]) and
//! the fast path over f16 keys and values ([`fast`], with its AVX2 kernel in `avx2` and
//! that kernel's value pass on 512-bit vectors in `avx512`).

#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(target_arch = "x86_64")]
mod avx512;
mod fast;
mod reference;

use rayon::prelude::*;

use super::kv_store::{F16Bits, KvElem, KvStore};

/// Where each token of the flattened batch sits.
#[derive(Debug, Clone, Copy)]
pub(super) struct TokenPlace<'a> {
    /// Position in its sequence.
    pub pos: usize,
    /// Its sequence's block table.
    pub block_table: &'a [u32],
}

/// Shape of the attention heads.
#[derive(Debug, Clone, Copy)]
pub(super) struct Heads {
    pub num_heads: usize,
    pub num_kv_heads: usize,
    pub head_dim: usize,
}

impl Heads {
    /// Query heads per KV head.
    fn group(&self) -> usize {
        self.num_heads / self.num_kv_heads
    }
}

/// One token of the batch, one KV head of it: that head's group of query heads
/// (`[group, head_dim]`), and where the token sits.
#[derive(Clone, Copy)]
pub(super) struct Token<'a> {
    q: &'a [f32],
    kv_head: usize,
    place: TokenPlace<'a>,
}

/// Per-thread buffers reused across tokens.
#[derive(Default)]
pub(super) struct Scratch {
    /// `[group, ctx]`: a KV head group's scores, then its softmax weights.
    scores: Vec<f32>,
    /// One head's keys or values of one block, widened to f32 (fast path).
    block: Vec<f32>,
}

impl Scratch {
    /// `scores` and `block` at these lengths, holding whatever earlier tokens left there.
    fn buffers(&mut self, scores: usize, block: usize) -> (&mut [f32], &mut [f32]) {
        if self.scores.len() < scores {
            self.scores.resize(scores, 0.0);
        }
        if self.block.len() < block {
            self.block.resize(block, 0.0);
        }
        (&mut self.scores[..scores], &mut self.block[..block])
    }
}

/// How a KV element type attends: f32 runs the reference, f16 the fast path.
pub(super) trait Attend: KvElem {
    /// Per batch: anything to decide once (the fast path detects the CPU's kernels).
    type Plan: Copy + Send + Sync;
    fn plan(heads: Heads) -> Self::Plan;
    /// `out_g` (`[group, head_dim]`) = attention of `token`'s query heads of its KV head over
    /// layer `layer` of `kv`.
    fn attend(
        plan: Self::Plan,
        token: Token<'_>,
        kv: &KvStore<Self>,
        layer: usize,
        heads: Heads,
        scratch: &mut Scratch,
        out_g: &mut [f32],
    );
}

impl Attend for f32 {
    type Plan = ();
    fn plan(_: Heads) {}
    fn attend(
        (): (),
        token: Token<'_>,
        kv: &KvStore<f32>,
        layer: usize,
        heads: Heads,
        scratch: &mut Scratch,
        out_g: &mut [f32],
    ) {
        reference::attend(token, kv, layer, heads, scratch, out_g);
    }
}

impl Attend for F16Bits {
    type Plan = fast::Plan;
    fn plan(heads: Heads) -> fast::Plan {
        fast::Plan::detect(heads)
    }
    fn attend(
        plan: fast::Plan,
        token: Token<'_>,
        kv: &KvStore<F16Bits>,
        layer: usize,
        heads: Heads,
        scratch: &mut Scratch,
        out_g: &mut [f32],
    ) {
        fast::attend(plan, token, kv, layer, heads, scratch, out_g);
    }
}

/// `out[t]` = attention of token `t`'s query heads over keys/values at positions `0..=pos` of
/// its sequence (read through its block table from layer `layer` of `kv`), tokens in parallel.
/// `qkv` is `[tokens, q_dim + 2 * kv_dim]` (only the Q part is read); `out` is `[tokens, q_dim]`.
pub(super) fn attention<T: Attend>(
    qkv: &[f32],
    kv: &KvStore<T>,
    layer: usize,
    places: &[TokenPlace<'_>],
    heads: Heads,
    out: &mut [f32],
) {
    let q_dim = heads.num_heads * heads.head_dim;
    let qkv_dim = q_dim + 2 * heads.num_kv_heads * heads.head_dim;
    let plan = T::plan(heads);
    // One task per token and KV head: a lone decoding sequence still keeps every thread busy.
    let group_dim = heads.group() * heads.head_dim;
    out.par_chunks_mut(group_dim).enumerate().for_each_init(
        Scratch::default,
        |scratch, (i, out_g)| {
            let (t, g) = (i / heads.num_kv_heads, i % heads.num_kv_heads);
            let token = Token {
                q: &qkv[t * qkv_dim + g * group_dim..][..group_dim],
                kv_head: g,
                place: places[t],
            };
            T::attend(plan, token, kv, layer, heads, scratch, out_g);
        },
    );
}

/// The blocks of a context of `ctx` positions: `(index in the table, block id, positions used)`.
fn blocks<'a>(
    table: &'a [u32],
    block_size: usize,
    ctx: usize,
) -> impl Iterator<Item = (usize, u32, usize)> + 'a {
    table
        .iter()
        .take(ctx.div_ceil(block_size))
        .enumerate()
        .map(move |(i, &b)| (i, b, (ctx - i * block_size).min(block_size)))
}

#[cfg(test)]
mod tests;
