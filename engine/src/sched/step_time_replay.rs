//! The step-time model replayed on step times recorded from the CPU backend (SmolLM2-135M,
//! 2 cores) under `tests/tpot_target_cpu.rs`: a one-stream warm-up, then a 64-stream burst
//! under an 88.5 ms target.

use super::*;

const TARGET_S: f64 = 0.0885;

const CEILING: StepLimits = StepLimits {
    max_num_seqs: 64,
    max_batch_tokens: 2048,
};

/// The warm-up request: a 14-token prompt, then one token a step.
const WARM_UP: [(usize, usize, f64); 20] = [
    (1, 14, 0.0422),
    (1, 1, 0.0158),
    (1, 1, 0.0079),
    (1, 1, 0.0080),
    (1, 1, 0.0078),
    (1, 1, 0.0079),
    (1, 1, 0.0079),
    (1, 1, 0.0078),
    (1, 1, 0.0078),
    (1, 1, 0.0075),
    (1, 1, 0.0074),
    (1, 1, 0.0074),
    (1, 1, 0.0074),
    (1, 1, 0.0074),
    (1, 1, 0.0076),
    (1, 1, 0.0118),
    (1, 1, 0.0160),
    (1, 1, 0.0159),
    (1, 1, 0.0121),
    (1, 1, 0.0158),
];

/// The burst's steps `(sequences, tokens, seconds)`: the running set grows by about one
/// prompt (14 tokens) a step, then decode-only steps alternate with steps that carry one.
const BURST: [(usize, usize, f64); 55] = [
    (2, 27, 0.1040),
    (2, 3, 0.0100),
    (3, 17, 0.0457),
    (4, 17, 0.0696),
    (5, 18, 0.0665),
    (6, 19, 0.0546),
    (7, 20, 0.0643),
    (8, 21, 0.0692),
    (10, 24, 0.0640),
    (11, 26, 0.0740),
    (12, 27, 0.0760),
    (13, 28, 0.0782),
    (14, 29, 0.0834),
    (15, 30, 0.0865),
    (17, 31, 0.0933),
    (17, 30, 0.1130),
    (17, 17, 0.0686),
    (17, 17, 0.0545),
    (17, 17, 0.0646),
    (17, 17, 0.0453),
    (16, 16, 0.0475),
    (17, 31, 0.0886),
    (17, 32, 0.0829),
    (17, 32, 0.0933),
    (17, 32, 0.0960),
    (16, 23, 0.0857),
    (16, 30, 0.0875),
    (16, 30, 0.0840),
    (16, 30, 0.0766),
    (16, 30, 0.0918),
    (16, 30, 0.0976),
    (15, 15, 0.0554),
    (15, 29, 0.0915),
    (15, 29, 0.0876),
    (15, 29, 0.0977),
    (15, 30, 0.0977),
    (15, 26, 0.0972),
    (15, 15, 0.0611),
    (15, 15, 0.0492),
    (15, 15, 0.0543),
    (15, 15, 0.0537),
    (15, 29, 0.0994),
    (15, 29, 0.0935),
    (14, 14, 0.0608),
    (14, 28, 0.0837),
    (14, 28, 0.1073),
    (14, 28, 0.0951),
    (14, 28, 0.1035),
    (13, 13, 0.0541),
    (14, 28, 0.0610),
    (14, 29, 0.0769),
    (14, 25, 0.0815),
    (14, 28, 0.1112),
    (13, 13, 0.0400),
    (14, 28, 0.0880),
];

fn replay(model: &mut StepTimeModel, steps: &[(usize, usize, f64)]) {
    for &(s, t, seconds) in steps {
        model.observe(s, t, seconds);
    }
}

/// The mean time of the recorded burst steps of `sequences` holding `tokens`.
fn recorded_mean(sequences: usize, tokens: usize) -> f64 {
    let times: Vec<f64> = BURST
        .iter()
        .filter(|&&(s, t, _)| (s, t) == (sequences, tokens))
        .map(|&(_, _, seconds)| seconds)
        .collect();
    times.iter().sum::<f64>() / times.len() as f64
}

#[test]
fn after_a_one_stream_warm_up_a_burst_starts_with_the_warm_up_batch() {
    let mut model = StepTimeModel::default();
    replay(&mut model, &WARM_UP);
    // The largest batch measured is 1: growing a quarter past it allowed 2 (the gauge read 2
    // while idle and through the burst's first step), where 4 start unmeasured.
    let limits = model.limits(TARGET_S, 0, CEILING);
    assert_eq!(limits.max_num_seqs, WARM_UP_SEQS);
}

#[test]
fn the_fit_prices_a_prompt_token_as_the_machine_does() {
    // On this CPU a prompt token costs what a decoding sequence does (both are one row
    // through the weights): 15 decoders took 55 ms, with 14 prompt tokens 94 ms.
    let prompt_token_s = (recorded_mean(15, 29) - recorded_mean(15, 15)) / 14.0;
    let mut model = StepTimeModel::default();
    replay(&mut model, &WARM_UP);
    for (i, step) in BURST.iter().enumerate() {
        replay(&mut model, std::slice::from_ref(step));
        let [_, _, c] = model.coefficients().expect("warm");
        assert!(
            c < 1.4 * prompt_token_s,
            "step {i}: {c} s a prompt token, measured {prompt_token_s}"
        );
    }
    // Both kinds of step predicted within a fifth of what they took.
    for (s, t) in [(15, 15), (15, 29)] {
        let predicted = model.predict(s, t).expect("warm");
        let recorded = recorded_mean(s, t);
        assert!(
            (predicted / recorded - 1.0).abs() < 0.2,
            "{s}, {t}: {predicted} vs {recorded}"
        );
    }
    // And the limit planned on them (a prompt's chunk in most steps) stays where the steps held
    // the plan: 13 to 17 sequences, never cut towards one.
    let limit = model.limits(TARGET_S, 14, CEILING).max_num_seqs;
    assert!((12..=17).contains(&limit), "{limit}");
}
