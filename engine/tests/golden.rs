//! The engine against the golden vectors of a float64 reference forward of SmolLM2-135M:
//! the reference path must reproduce every greedy token and keep the top-5 logits within
//! 2e-2; the fast path may pick another token only where the reference's top-1/top-2 margin
//! is below the fast path's measured logit error.

mod common;

use common::{Case, assert_flips_within, assert_reproduces_golden, backend, cases, forced_logits};
use tokenscale_engine::backend::cpu::{CpuBackend, Precision};

const BLOCK_SIZE: usize = 16;

/// Per step, the logits of the whole vocabulary: `[steps][vocab]`.
type StepLogits = Vec<Vec<f32>>;

fn forced(backend: &mut CpuBackend, case: &Case) -> StepLogits {
    forced_logits(backend, case, BLOCK_SIZE)
}

#[test]
fn reference_path_matches_golden_tokens_and_logits() {
    let mut backend = backend(Precision::Reference, 8, BLOCK_SIZE);
    let cases = cases();
    let runs: Vec<StepLogits> = cases.iter().map(|c| forced(&mut backend, c)).collect();
    let worst = assert_reproduces_golden(&cases, &runs, "reference path");
    println!("reference path: max top-5 logit error vs float64 = {worst:.5}");
}

#[test]
fn fast_path_differs_only_within_its_measured_error() {
    let mut reference = backend(Precision::Reference, 8, BLOCK_SIZE);
    let mut fast = backend(Precision::Fast, 8, BLOCK_SIZE);
    let cases = cases();
    let runs: Vec<(StepLogits, StepLogits)> = cases
        .iter()
        .map(|c| (forced(&mut reference, c), forced(&mut fast, c)))
        .collect();

    // The fast path's error: the largest change of any logit against the reference path.
    let mut max_err = 0f32;
    for (r, f) in &runs {
        for (rr, fr) in r.iter().zip(f) {
            for (a, b) in rr.iter().zip(fr) {
                max_err = max_err.max((a - b).abs());
            }
        }
    }
    // And on the logits that matter: the reference's top 5 of each step.
    let mut top5_err = 0f32;
    for (case, (r, f)) in cases.iter().zip(&runs) {
        for ((rr, fr), top5) in r.iter().zip(f).zip(&case.top5) {
            for &(id, _) in top5 {
                top5_err = top5_err.max((rr[id as usize] - fr[id as usize]).abs());
            }
        }
    }
    let fast_runs: Vec<StepLogits> = runs.iter().map(|(_, f)| f.clone()).collect();
    let flips = assert_flips_within(&cases, &fast_runs, max_err, "fast path");
    println!(
        "fast path: max logit error vs reference = {max_err:.4} (top-5 logits: {top5_err:.4}); \
         tokens differing from the reference: {flips}"
    );
    assert!(max_err.is_finite());
}
