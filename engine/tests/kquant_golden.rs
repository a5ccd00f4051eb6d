//! SmolLM2 requantised to Q4_K_M, Q5_K_M and Q6_K by the engine's quantiser, run on the fast
//! path against the golden vectors (a float64 forward of the Q4_1 original): a greedy token
//! may differ from the golden one only where the golden top-1/top-2 margin is below the
//! measured logit error, and that error is printed (and must stay below a bound that a
//! broken kernel or layout would exceed by far).

mod common;

use common::{argmax, cases, forced_logits, kquant};
use tokenscale_engine::backend::cpu::Precision;
use tokenscale_engine::quant::mix::FileType;

const BLOCK_SIZE: usize = 16;

fn margin_rule(ftype: FileType, bound: f64) {
    let mut backend = kquant::backend(ftype, Precision::Fast, 8, BLOCK_SIZE);
    let cases = cases();
    let runs: Vec<Vec<Vec<f32>>> = cases
        .iter()
        .map(|c| forced_logits(&mut backend, c, BLOCK_SIZE))
        .collect();
    // The error: the largest change of any of the golden top-5 logits.
    let mut err = 0f64;
    for (case, run) in cases.iter().zip(&runs) {
        for (row, top5) in run.iter().zip(&case.top5) {
            for &(id, want) in top5 {
                err = err.max((f64::from(row[id as usize]) - want).abs());
            }
        }
    }
    let (mut steps, mut flips) = (0, 0);
    for (c, (case, run)) in cases.iter().zip(&runs).enumerate() {
        for (step, (row, top5)) in run.iter().zip(&case.top5).enumerate() {
            steps += 1;
            if argmax(row) != case.greedy_ids[step] {
                flips += 1;
                let margin = top5[0].1 - top5[1].1;
                assert!(
                    margin < err,
                    "{ftype}: case {c} step {step} picked {} over {} at a golden margin of \
                     {margin:.4} > the measured error {err:.4}",
                    argmax(row),
                    case.greedy_ids[step]
                );
            }
        }
    }
    println!(
        "{ftype}: max top-5 logit error vs the golden float64 Q4_1 reference = {err:.4}; \
         greedy tokens differing: {flips} of {steps}"
    );
    assert!(err < bound, "{ftype}: logit error {err:.4} ≥ {bound}");
}

#[test]
fn q4_k_m_differs_only_below_its_measured_error() {
    margin_rule(FileType::Q4_K_M, 3.0);
}

#[test]
fn q5_k_m_differs_only_below_its_measured_error() {
    margin_rule(FileType::Q5_K_M, 3.0);
}

#[test]
fn q6_k_differs_only_below_its_measured_error() {
    margin_rule(FileType::Q6_K, 3.0);
}
