//! The LoRA deltas of a CPU step: each token row adds its own adapter's `B (A x) · scale` to
//! the base layer's output, in f32 beside the (possibly quantised) base matmul.

use rayon::prelude::*;

use crate::backend::SeqStep;
use crate::lora::{Fused, LoraAdapter};

/// The adapter of every token of a step (empty when no entry has one: the base pays nothing).
pub(super) struct Lora<'a> {
    per_token: Vec<Option<&'a LoraAdapter>>,
}

impl<'a> Lora<'a> {
    /// Spreads each batch entry's adapter over its tokens.
    pub fn per_token(batch: &[SeqStep<'_>], adapters: &[Option<&'a LoraAdapter>]) -> Self {
        if adapters.iter().all(Option::is_none) {
            return Self {
                per_token: Vec::new(),
            };
        }
        let per_token = batch
            .iter()
            .enumerate()
            .flat_map(|(i, s)| {
                let a = adapters.get(i).copied().flatten();
                std::iter::repeat_n(a, s.tokens.len())
            })
            .collect();
        Self { per_token }
    }

    /// Adds the deltas of block `layer`'s `fused` layer: `x` `[t, in]` its input, `out`
    /// `[t, out]` its output.
    pub fn add(&self, layer: usize, fused: Fused, x: &[f32], out: &mut [f32]) {
        let t = self.per_token.len();
        if t == 0
            || !self
                .per_token
                .iter()
                .flatten()
                .any(|a| a.touches(layer, fused))
        {
            return;
        }
        let (in_w, out_w) = (x.len() / t, out.len() / t);
        out.par_chunks_mut(out_w)
            .zip(x.par_chunks(in_w))
            .zip(&self.per_token)
            .for_each(|((o, x), a)| {
                if let Some(a) = a {
                    a.add_row(layer, fused, x, o);
                }
            });
    }
}
