//! Batching invariance on the path `serve` uses (the fast path): the same greedy continuation
//! however the prompt is chunked, whether the sequence runs alone or among 15 others at other
//! positions, and whatever the KV block size and block placement.

mod common;

use common::{Seq, backend, cases, run_greedy, strided_table};
use tokenscale_engine::backend::cpu::Precision;

const NEW_TOKENS: usize = 12;

/// The longest fixture prompt (a chat) and its greedy continuation run alone, in one call.
fn prompt() -> Vec<u32> {
    cases()
        .into_iter()
        .map(|c| c.prompt_ids)
        .max_by_key(|p| p.len())
        .expect("cases")
}

fn alone(chunk: usize, block_size: usize, stride: u32) -> Vec<u32> {
    let prompt = prompt();
    let blocks = (prompt.len() + NEW_TOKENS).div_ceil(block_size);
    let mut b = backend(Precision::Fast, blocks * stride as usize + 1, block_size);
    // Start at block 1 so block 0 (and with a stride, the blocks between) stay unused.
    let mut seqs = [Seq::new(&prompt, strided_table(1, stride, blocks))];
    run_greedy(&mut b, &mut seqs, chunk, NEW_TOKENS).remove(0)
}

#[test]
fn prompt_chunking_does_not_change_the_continuation() {
    let whole = alone(usize::MAX, 16, 1);
    assert_eq!(alone(1, 16, 1), whole, "token by token");
    assert_eq!(alone(7, 16, 1), whole, "chunks of 7");
}

#[test]
fn block_size_and_placement_do_not_change_the_continuation() {
    let reference = alone(usize::MAX, 16, 1);
    for (block_size, stride) in [(1, 3), (16, 2), (32, 1)] {
        assert_eq!(
            alone(5, block_size, stride),
            reference,
            "block size {block_size}, stride {stride}"
        );
    }
}

#[test]
fn a_sequence_decodes_the_same_alone_and_in_a_batch_of_16() {
    let target = prompt();
    let alone = alone(usize::MAX, 16, 1);
    // 15 other sequences: the other fixture prompts and shifted copies of them, so lengths
    // and positions differ and prefill chunks run next to decode steps.
    let mut prompts: Vec<Vec<u32>> = vec![target.clone()];
    let others: Vec<Vec<u32>> = cases().into_iter().map(|c| c.prompt_ids).collect();
    for i in 0..15 {
        let base = &others[i % others.len()];
        let cut = (i / others.len()) % base.len().max(1);
        prompts.push(base[cut..].to_vec());
    }
    let block_size = 16;
    let blocks =
        (prompts.iter().map(Vec::len).max().unwrap_or(0) + NEW_TOKENS).div_ceil(block_size);
    let n = prompts.len() as u32;
    let mut b = backend(Precision::Fast, blocks * prompts.len(), block_size);
    // Interleaved tables: sequence s owns blocks s, s + 16, s + 32, …
    let mut seqs: Vec<Seq> = prompts
        .iter()
        .enumerate()
        .map(|(s, p)| Seq::new(p, strided_table(s as u32, n, blocks)))
        .collect();
    let out = run_greedy(&mut b, &mut seqs, 6, NEW_TOKENS);
    assert_eq!(out[0], alone, "the target sequence inside the batch");
    // Each other sequence matches its own run alone as well (checked for two of them).
    for s in [3usize, 11] {
        let mut single = backend(Precision::Fast, blocks, block_size);
        let mut one = [Seq::new(&prompts[s], strided_table(0, 1, blocks))];
        assert_eq!(
            run_greedy(&mut single, &mut one, 64, NEW_TOKENS)[0],
            out[s],
            "sequence {s}"
        );
    }
}
