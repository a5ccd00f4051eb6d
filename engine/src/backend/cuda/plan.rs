//! A forward step's host-side plan (pure): the flat per-token and per-sequence arrays the
//! kernels read, validated against the cache and model limits, and padding to a graph bucket.

use super::geometry::{DecodeSplit, decode_split};
use crate::backend::SeqStep;

/// Limits a step is checked against.
#[derive(Debug, Clone, Copy)]
pub struct PlanLimits {
    pub block_size: usize,
    pub num_blocks: usize,
    pub vocab_size: usize,
    /// Width of the block-table matrix: `ceil(max_model_len / block_size)`.
    pub max_blocks_per_seq: usize,
    /// Most tokens in one step (activation buffers are sized for this).
    pub max_tokens: usize,
    /// Most sequences in one step.
    pub max_seqs: usize,
    /// Most logits rows in one step: a row per sequence, and the draft rows of verify steps.
    pub max_logit_rows: usize,
}

/// What the kernels of one step read.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StepPlan {
    /// `[tokens]`: the new tokens of every sequence, sequence after sequence.
    pub token_ids: Vec<u32>,
    /// `[tokens]`: absolute position of each token.
    pub positions: Vec<i32>,
    /// `[tokens]`: cache slot (`block * block_size + offset`) of each token; −1 for padding.
    pub slots: Vec<i32>,
    /// `[seqs, max_blocks_per_seq]`: block tables, zero-padded.
    pub block_tables: Vec<i32>,
    /// `[seqs]`: tokens in cache after this step (0 for padding).
    pub context_lens: Vec<i32>,
    /// Per sequence: (first token row, start position, new tokens).
    pub seq_rows: Vec<(usize, usize, usize)>,
    /// Token row of each wanted logits row: a sequence's last token, or every token of a
    /// sequence that asks for every row (a speculative verify chunk), in token order.
    pub logit_rows: Vec<i32>,
    /// Batch index of each of those rows.
    pub logit_seqs: Vec<usize>,
    /// Every sequence runs exactly one token (the decode kernel and graphs apply).
    pub decode_only: bool,
    /// The leading sequences that run one token each: a mixed step puts them first, so their
    /// token rows are their sequence rows and the decode kernel runs them.
    pub decode_rows: usize,
    /// Longest context in the step.
    pub max_context: usize,
}

impl StepPlan {
    /// Tokens in the step (padding included).
    pub fn num_tokens(&self) -> usize {
        self.token_ids.len()
    }

    /// Sequences in the step (padding included).
    pub fn num_seqs(&self) -> usize {
        self.context_lens.len()
    }
}

/// Builds and validates the plan of `batch`: the sequences that run one token first (in batch
/// order), then the others; `logit_seqs` names batch indices, errors too.
pub fn plan_step(batch: &[SeqStep<'_>], limits: &PlanLimits) -> Result<StepPlan, String> {
    plan_step_rows(batch, &[], limits)
}

/// Like [`plan_step`], with a logits row for every token of each sequence whose
/// `every_row[i]` is set (a speculative verify chunk: the decode token and the draft, each
/// row attending causally to the rows before it), in token order; `every_row` may be empty.
pub fn plan_step_rows(
    batch: &[SeqStep<'_>],
    every_row: &[bool],
    limits: &PlanLimits,
) -> Result<StepPlan, String> {
    if batch.is_empty() {
        return Err("empty batch".into());
    }
    if batch.len() > limits.max_seqs {
        return Err(format!(
            "{} sequences exceed the step limit of {}",
            batch.len(),
            limits.max_seqs
        ));
    }
    let total: usize = batch.iter().map(|s| s.tokens.len()).sum();
    if total > limits.max_tokens {
        return Err(format!(
            "{total} tokens exceed the step limit of {}",
            limits.max_tokens
        ));
    }
    let mut plan = StepPlan {
        decode_only: true,
        ..StepPlan::default()
    };
    plan.block_tables = vec![0; batch.len() * limits.max_blocks_per_seq];
    let singles = (0..batch.len()).filter(|&i| batch[i].tokens.len() == 1);
    let others = (0..batch.len()).filter(|&i| batch[i].tokens.len() != 1);
    for (row, i) in singles.chain(others).enumerate() {
        let seq = &batch[i];
        let n = seq.tokens.len();
        if n == 0 {
            return Err(format!("sequence {i} has no tokens"));
        }
        let context = seq.start_pos + n;
        let needed = context.div_ceil(limits.block_size);
        if seq.block_table.len() < needed {
            return Err(format!(
                "sequence {i}: {} blocks cannot hold {context} tokens",
                seq.block_table.len()
            ));
        }
        if needed > limits.max_blocks_per_seq {
            return Err(format!(
                "sequence {i}: {context} tokens exceed the model length"
            ));
        }
        if let Some(&b) = seq.block_table[..needed]
            .iter()
            .find(|&&b| b as usize >= limits.num_blocks)
        {
            return Err(format!(
                "sequence {i}: block {b} is outside the cache of {}",
                limits.num_blocks
            ));
        }
        if let Some(&t) = seq
            .tokens
            .iter()
            .find(|&&t| t as usize >= limits.vocab_size)
        {
            return Err(format!(
                "sequence {i}: token {t} is outside the vocabulary of {}",
                limits.vocab_size
            ));
        }
        let row0 = plan.token_ids.len();
        for (k, &token) in seq.tokens.iter().enumerate() {
            let pos = seq.start_pos + k;
            let block = seq.block_table[pos / limits.block_size] as usize;
            plan.token_ids.push(token);
            plan.positions.push(pos as i32);
            plan.slots
                .push((block * limits.block_size + pos % limits.block_size) as i32);
        }
        let table = &mut plan.block_tables[row * limits.max_blocks_per_seq..][..needed];
        for (dst, &b) in table.iter_mut().zip(seq.block_table) {
            *dst = b as i32;
        }
        plan.context_lens.push(context as i32);
        plan.seq_rows.push((row0, seq.start_pos, n));
        let first_wanted = match every_row.get(i) {
            Some(true) => row0,
            _ if seq.want_logits => row0 + n - 1,
            _ => row0 + n,
        };
        for row in first_wanted..row0 + n {
            plan.logit_rows.push(row as i32);
            plan.logit_seqs.push(i);
        }
        plan.decode_only &= n == 1;
        plan.decode_rows += usize::from(n == 1);
        plan.max_context = plan.max_context.max(context);
    }
    if plan.logit_rows.len() > limits.max_logit_rows {
        return Err(format!(
            "{} logits rows exceed the step limit of {}",
            plan.logit_rows.len(),
            limits.max_logit_rows
        ));
    }
    Ok(plan)
}

/// How a step that is not a decode graph runs its leading one-token sequences through the
/// decode kernel: `(sequences, split)`, or `None` when it has none or their split would not
/// fit the `split_rows` the partial-result buffers hold (the prefill kernel takes them then).
pub fn mixed_decode(
    plan: &StepPlan,
    num_kv_heads: usize,
    sm_count: usize,
    split_rows: usize,
) -> Option<(usize, DecodeSplit)> {
    let seqs = plan.decode_rows;
    let context = plan.context_lens.get(..seqs)?.iter().copied().max()?;
    let split = decode_split(seqs, num_kv_heads, context.max(1) as usize, sm_count);
    (seqs * split.splits <= split_rows).then_some((seqs, split))
}

/// Pads a decode-only plan to `bucket` sequences for a captured graph: padding rows run token
/// 0 at position 0, write no KV (slot −1) and attend to nothing (context 0). Every row's
/// logits are computed in a graph, so `logit_rows` becomes `0..bucket`.
pub fn pad_decode(plan: &mut StepPlan, bucket: usize, max_blocks_per_seq: usize) {
    let real = plan.num_seqs();
    for _ in real..bucket {
        plan.token_ids.push(0);
        plan.positions.push(0);
        plan.slots.push(-1);
        plan.context_lens.push(0);
    }
    plan.block_tables.resize(bucket * max_blocks_per_seq, 0);
    plan.logit_rows = (0..bucket as i32).collect();
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    const LIMITS: PlanLimits = PlanLimits {
        block_size: 4,
        num_blocks: 10,
        vocab_size: 100,
        max_blocks_per_seq: 3,
        max_tokens: 16,
        max_seqs: 4,
        max_logit_rows: 6,
    };

    fn step<'a>(tokens: &'a [u32], start_pos: usize, table: &'a [u32], want: bool) -> SeqStep<'a> {
        SeqStep {
            tokens,
            start_pos,
            block_table: table,
            want_logits: want,
        }
    }

    #[test]
    fn a_mixed_batch_maps_every_token_to_its_slot() {
        let batch = [
            step(&[5, 6, 7], 3, &[7, 2], false),
            step(&[9], 8, &[1, 4, 3], true),
        ];
        let plan = plan_step(&batch, &LIMITS).unwrap();
        // The decode row (batch entry 1) goes first, then the prefill chunk.
        assert_eq!(plan.token_ids, [9, 5, 6, 7]);
        assert_eq!(plan.positions, [8, 3, 4, 5]);
        // pos 8 → block 3 slot 0; pos 3 → block 7 slot 3; pos 4, 5 → block 2 slots 0, 1.
        assert_eq!(plan.slots, [12, 31, 8, 9]);
        assert_eq!(plan.block_tables, [1, 4, 3, 7, 2, 0]);
        assert_eq!(plan.context_lens, [9, 6]);
        assert_eq!(plan.seq_rows, [(0, 8, 1), (1, 3, 3)]);
        assert_eq!(
            (plan.logit_rows.as_slice(), plan.logit_seqs.as_slice()),
            (&[0][..], &[1][..])
        );
        assert!(!plan.decode_only);
        assert_eq!(plan.decode_rows, 1);
        assert_eq!(plan.max_context, 9);
    }

    #[test]
    fn a_mixed_step_puts_its_decode_rows_first_and_keeps_batch_indices() {
        let batch = [
            step(&[1, 2], 0, &[0], true),
            step(&[3], 4, &[1, 2], true),
            step(&[4, 5, 6], 0, &[3], false),
            step(&[7], 2, &[4], true),
        ];
        let plan = plan_step(&batch, &LIMITS).unwrap();
        assert_eq!(plan.decode_rows, 2);
        // Decode rows are sequence rows 0 and 1 and token rows 0 and 1.
        assert_eq!(&plan.seq_rows[..2], [(0, 4, 1), (1, 2, 1)]);
        assert_eq!(plan.token_ids, [3, 7, 1, 2, 4, 5, 6]);
        assert_eq!(plan.context_lens, [5, 3, 2, 3]);
        assert_eq!(&plan.block_tables[..6], [1, 2, 0, 4, 0, 0]);
        // Logits of batch entries 1, 3 and 0, at their token rows.
        assert_eq!(plan.logit_rows, [0, 1, 3]);
        assert_eq!(plan.logit_seqs, [1, 3, 0]);
    }

    #[test]
    fn mixed_steps_split_their_decode_rows_within_the_buffers() {
        let batch = [
            step(&[1, 2, 3], 0, &[0], true),
            step(&[4], 8, &[1, 2, 3], true),
        ];
        let plan = plan_step(&batch, &LIMITS).unwrap();
        let (seqs, split) = mixed_decode(&plan, 2, 132, 1 << 20).unwrap();
        assert_eq!(seqs, 1);
        assert!(split.splits * split.partition_tokens >= 9);
        // Too little room for the split: the prefill kernel takes the row.
        assert_eq!(mixed_decode(&plan, 2, 132, 0), None);
        // No decode rows: nothing to split.
        let prefill = plan_step(&[step(&[1, 2], 0, &[0], true)], &LIMITS).unwrap();
        assert_eq!(mixed_decode(&prefill, 2, 132, 1 << 20), None);
    }

    #[test]
    fn decode_plans_pad_to_their_bucket() {
        let batch = [step(&[1], 0, &[0], true), step(&[2], 5, &[3, 4], true)];
        let mut plan = plan_step(&batch, &LIMITS).unwrap();
        assert!(plan.decode_only);
        pad_decode(&mut plan, 4, LIMITS.max_blocks_per_seq);
        assert_eq!(plan.num_seqs(), 4);
        assert_eq!(plan.slots, [0, 17, -1, -1]);
        assert_eq!(plan.context_lens, [1, 6, 0, 0]);
        assert_eq!(plan.block_tables.len(), 12);
        assert_eq!(plan.logit_rows, [0, 1, 2, 3]);
        assert_eq!(plan.logit_seqs, [0, 1]);
    }

    #[test]
    fn a_verify_chunk_wants_every_row_in_token_order_and_runs_with_the_prefill_kernel() {
        let batch = [
            step(&[3], 4, &[1, 2], true),
            step(&[7, 60, 61], 5, &[4, 5], true),
            step(&[8], 2, &[6], true),
        ];
        let plan = plan_step_rows(&batch, &[false, true, false], &LIMITS).unwrap();
        // One-token sequences lead; the verify chunk's three rows follow at positions 5..8,
        // each its own logits row, so row i sees the chunk's rows up to i (context 8).
        assert_eq!(plan.token_ids, [3, 8, 7, 60, 61]);
        assert_eq!(plan.positions, [4, 2, 5, 6, 7]);
        assert_eq!(plan.logit_rows, [0, 1, 2, 3, 4]);
        assert_eq!(plan.logit_seqs, [0, 2, 1, 1, 1]);
        assert_eq!(plan.seq_rows[2], (2, 5, 3));
        assert!(!plan.decode_only);
        assert_eq!(plan.decode_rows, 2);
        // More rows than the logits buffer holds is a named error, not an overrun.
        let long = [step(&[1; 7], 0, &[0, 1], true)];
        let err = plan_step_rows(&long, &[true], &LIMITS).unwrap_err();
        assert!(err.contains("logits rows"), "{err}");
        // Without the flag the same chunk wants its last row only.
        assert_eq!(plan_step(&long, &LIMITS).unwrap().logit_rows, [6]);
    }

    #[test]
    fn inconsistent_steps_are_named_errors() {
        let cases: [(&[SeqStep<'_>], &str); 7] = [
            (&[], "empty"),
            (&[step(&[], 0, &[0], true)], "no tokens"),
            (&[step(&[1, 2], 3, &[0], true)], "cannot hold"),
            (&[step(&[1], 0, &[10], true)], "outside the cache"),
            (&[step(&[100], 0, &[0], true)], "vocabulary"),
            (&[step(&[1], 12, &[0, 1, 2, 3], true)], "model length"),
            (&[step(&[1; 17], 0, &[0, 1, 2, 3, 4], true)], "step limit"),
        ];
        for (batch, want) in cases {
            let err = plan_step(batch, &LIMITS).unwrap_err();
            assert!(err.contains(want), "{err} lacks {want}");
        }
    }
}
