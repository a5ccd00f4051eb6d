//! The device sampler's transcription against the host sampler: the same ids on given logits
//! over many seeds and parameter sets (ties, masks, penalties, bias included), and the
//! kernel's literals against the specification's constants.

use std::collections::BTreeMap;

use super::*;
use crate::grammar::TokenMask;
use crate::sampling::{Rng, Sampler, SamplingParams};

const KERNEL: &str = include_str!("kernels/sampling.cu");

/// `[vocab]` logits: smooth (few ties) or rounded to quarters (many exact ties).
fn logits(rng: &mut Rng, vocab: usize, tied: bool) -> Vec<f32> {
    (0..vocab)
        .map(|_| {
            // A sum of uniforms: roughly normal, scale 4, like a model's logits.
            let x = (0..4).map(|_| rng.next_f64()).sum::<f64>() * 4.0 - 8.0;
            let x = x as f32;
            if tied { (x * 4.0).round() / 4.0 } else { x }
        })
        .collect()
}

/// The parameter set of case `i`: every combination of the options cycles through.
fn params(i: usize, seed: u64) -> SamplingParams {
    let pick = |n: usize, d: usize| (i / d) % n;
    let mut logit_bias = BTreeMap::new();
    if pick(2, 72) == 1 {
        logit_bias.insert(3, 5.0);
        logit_bias.insert(17, -100.0);
        logit_bias.insert(40, 2.5);
    }
    let penalties = pick(2, 36) == 1;
    SamplingParams {
        temperature: [0.0, 0.7, 1.0, 1.6][pick(4, 1)],
        top_k: [0, 1, 7, 200][pick(4, 4)] as u32,
        top_p: [1.0, 0.9, 0.35][pick(3, 12)],
        min_p: [0.0, 0.05][pick(2, 144)],
        repetition_penalty: if penalties { 1.3 } else { 1.0 },
        presence_penalty: if penalties { 0.4 } else { 0.0 },
        frequency_penalty: if penalties { -0.3 } else { 0.0 },
        logit_bias,
        seed: Some(seed),
        ..SamplingParams::default()
    }
}

/// Runs `steps` tokens of one request through both samplers; returns (host, device) ids.
fn both(
    p: &SamplingParams,
    base: &[f32],
    mask: Option<&TokenMask>,
    steps: usize,
) -> Vec<(u32, i32)> {
    let prompt: Vec<u32> = (0..24).map(|i| (i * 37 % base.len()) as u32).collect();
    let mut host = Sampler::new(p, &prompt);
    let mut device = Sampler::new(p, &prompt);
    let mut out = Vec::new();
    for step in 0..steps {
        // Each step's logits differ a little, as a model's do.
        let row: Vec<f32> = base
            .iter()
            .enumerate()
            .map(|(i, &l)| l + ((i * 7 + step) % 5) as f32 * 0.125)
            .collect();
        let Ok(h) = host.sample_masked(&row, mask) else {
            out.push((u32::MAX, -2));
            continue;
        };
        let (settings, edits) = device.device_row(row.len());
        let mut d_row = row.clone();
        if let Some(mask) = mask {
            mask.apply(&mut d_row);
        }
        apply_edits(&mut d_row, &edits);
        let d = sample_row(&d_row, &settings);
        out.push((h.token_id, d));
        device.accept(d.max(0) as u32);
    }
    out
}

#[test]
fn the_device_procedure_draws_what_the_host_sampler_draws() {
    let mut rng = Rng::seeded(40);
    let (mut draws, mut mismatches) = (0, Vec::new());
    for case in 0..288 {
        let vocab = if case % 97 == 5 { 49_152 } else { 3_001 };
        let tied = case % 3 == 1;
        let base = logits(&mut rng, vocab, tied);
        let mask = (case % 5 == 2).then(|| {
            let allowed: Vec<u32> = (0..vocab as u32).filter(|i| i % 3 != 0).collect();
            TokenMask::allowing(vocab, &allowed)
        });
        let p = params(case, 1000 + case as u64);
        for (step, (h, d)) in both(&p, &base, mask.as_ref(), 3).into_iter().enumerate() {
            draws += 1;
            if h as i64 != i64::from(d) {
                mismatches.push(format!(
                    "case {case} step {step}: host {h}, device {d} ({p:?})"
                ));
            }
        }
    }
    assert_eq!(draws, 864);
    assert!(
        mismatches.is_empty(),
        "{} of {draws} differ:\n{}",
        mismatches.len(),
        mismatches.join("\n")
    );
}

#[test]
fn rows_without_a_finite_logit_are_refused_on_both_sides() {
    let p = SamplingParams {
        temperature: 0.8,
        seed: Some(1),
        ..SamplingParams::default()
    };
    let row = vec![f32::NEG_INFINITY; 64];
    let mut host = Sampler::new(&p, &[]);
    assert!(host.sample(&row).is_err());
    let (settings, _) = Sampler::new(&p, &[]).device_row(64);
    assert_eq!(sample_row(&row, &settings), -1);
    let greedy = RowSampling::default();
    assert_eq!(sample_row(&row, &greedy), -1);
}

#[test]
fn the_kernel_carries_the_specifications_constants_and_layouts() {
    for c in crate::sampling::EXP_POLY {
        assert!(
            KERNEL.contains(&format!("{c:e}f")),
            "sampling.cu lacks {c:e}f"
        );
    }
    let magic = crate::sampling::EXP_ROUND_MAGIC;
    assert!(KERNEL.contains(&format!("{magic:e}f")));
    assert!(KERNEL.contains(&format!("{:e}f", std::f32::consts::LOG2_E)));
    assert!(KERNEL.contains(&format!("#define SPEC_THREADS {THREADS}")));
    // The kernel's structs: `RowSampling` is f32, f32, u32, f32, f64; `Edit` u32 and 3 × f32.
    assert_eq!(std::mem::size_of::<RowSampling>(), 24);
    assert_eq!(std::mem::offset_of!(RowSampling, uniform), 16);
    assert_eq!(std::mem::size_of::<Edit>(), 16);
    assert!(KERNEL.contains("    double uniform;"));
}

#[test]
fn the_device_logprobs_are_the_host_samplers() {
    let mut rng = Rng::seeded(41);
    for case in 0..24 {
        let mut row = logits(&mut rng, 3_001, case % 2 == 1);
        if case % 3 == 0 {
            row[5] = f32::NEG_INFINITY;
            row[6] = f32::NAN;
        }
        let token = (case * 131 % 3_001) as u32;
        let n = [0u32, 1, 5, 20][case % 4];
        let host = crate::sampling::SampledToken::scored(&row, token, n);
        let (logprob, top) = row_logprobs(&row, token as i32, n as usize);
        assert!(
            (host.logprob.unwrap_or(0.0) - logprob).abs() < 1e-4,
            "case {case}"
        );
        let ids =
            |t: &[crate::sampling::TokenLogprob]| t.iter().map(|l| l.token_id).collect::<Vec<_>>();
        assert_eq!(ids(&host.top_logprobs), ids(&top), "case {case}");
        for (a, b) in host.top_logprobs.iter().zip(&top) {
            assert!(
                (a.logprob - b.logprob).abs() < 1e-4,
                "case {case}: {a:?} {b:?}"
            );
        }
    }
    assert!(KERNEL.contains(&format!(
        "#define MAX_TOP_LOGPROBS {}",
        crate::sampling::MAX_TOP_LOGPROBS
    )));
}
