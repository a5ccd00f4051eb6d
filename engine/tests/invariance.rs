//! Batching invariance on the path `serve` uses (the fast path): the same greedy continuation
//! however the prompt is chunked, whether the sequence runs alone or among 15 others at other
//! positions, and whatever the KV block size and block placement. Each test runs on the
//! Q4_1 test model and on its Q4_K_M requantisation (Q5_0, Q4_K, Q6_K and Q8_0 kernels).

mod common;

use common::{Seq, cases, kquant, run_greedy, strided_table};
use tokenscale_engine::backend::cpu::{CpuBackend, Precision};
use tokenscale_engine::quant::mix::FileType;

/// Which weights a test runs on.
#[derive(Clone, Copy)]
enum Weights {
    /// The test model as fetched.
    Q4_1,
    /// The test model requantised by the engine's quantiser.
    Requantised(FileType),
}

fn backend(w: Weights, num_blocks: usize, block_size: usize) -> CpuBackend {
    match w {
        Weights::Q4_1 => common::backend(Precision::Fast, num_blocks, block_size),
        Weights::Requantised(f) => kquant::backend(f, Precision::Fast, num_blocks, block_size),
    }
}

const K: Weights = Weights::Requantised(FileType::Q4_K_M);

const NEW_TOKENS: usize = 12;

/// The longest fixture prompt (a chat) and its greedy continuation run alone, in one call.
fn prompt() -> Vec<u32> {
    cases()
        .into_iter()
        .map(|c| c.prompt_ids)
        .max_by_key(|p| p.len())
        .expect("cases")
}

fn alone(w: Weights, chunk: usize, block_size: usize, stride: u32) -> Vec<u32> {
    let prompt = prompt();
    let blocks = (prompt.len() + NEW_TOKENS).div_ceil(block_size);
    let mut b = backend(w, blocks * stride as usize + 1, block_size);
    // Start at block 1 so block 0 (and with a stride, the blocks between) stay unused.
    let mut seqs = [Seq::new(&prompt, strided_table(1, stride, blocks))];
    run_greedy(&mut b, &mut seqs, chunk, NEW_TOKENS).remove(0)
}

fn prompt_chunking(w: Weights) {
    let whole = alone(w, usize::MAX, 16, 1);
    assert_eq!(alone(w, 1, 16, 1), whole, "token by token");
    assert_eq!(alone(w, 7, 16, 1), whole, "chunks of 7");
}

#[test]
fn prompt_chunking_does_not_change_the_continuation() {
    prompt_chunking(Weights::Q4_1);
}

#[test]
fn prompt_chunking_does_not_change_the_continuation_on_q4_k_m() {
    prompt_chunking(K);
}

#[test]
fn block_size_and_placement_do_not_change_the_continuation() {
    block_placement(Weights::Q4_1);
}

#[test]
fn block_size_and_placement_do_not_change_the_continuation_on_q4_k_m() {
    block_placement(K);
}

#[test]
fn a_sequence_decodes_the_same_alone_and_in_a_batch_of_16() {
    batch_of_16(Weights::Q4_1);
}

#[test]
fn a_sequence_decodes_the_same_alone_and_in_a_batch_of_16_on_q4_k_m() {
    batch_of_16(K);
}

fn block_placement(w: Weights) {
    let reference = alone(w, usize::MAX, 16, 1);
    for (block_size, stride) in [(1, 3), (16, 2), (32, 1)] {
        assert_eq!(
            alone(w, 5, block_size, stride),
            reference,
            "block size {block_size}, stride {stride}"
        );
    }
}

fn batch_of_16(w: Weights) {
    let target = prompt();
    let alone = alone(w, usize::MAX, 16, 1);
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
    let mut b = backend(w, blocks * prompts.len(), block_size);
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
        let mut single = backend(w, blocks, block_size);
        let mut one = [Seq::new(&prompts[s], strided_table(0, 1, blocks))];
        assert_eq!(
            run_greedy(&mut single, &mut one, 64, NEW_TOKENS)[0],
            out[s],
            "sequence {s}"
        );
    }
}
