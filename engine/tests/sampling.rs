//! Sampling and stop conditions: every option of `SamplingParams`, checked through `Sampler`,
//! `finish_on_token` and `StopMatcher` on hand-made logits.

// In tests an unwrap is an assertion: a failure should stop the test loudly.
#![allow(clippy::unwrap_used)]

use tokenscale_engine::sampling::{
    FinishReason, Sampler, SamplingError, SamplingParams, StopMatcher, finish_on_token,
};

const VOCAB: usize = 8;

fn params(f: impl FnOnce(&mut SamplingParams)) -> SamplingParams {
    let mut p = SamplingParams {
        seed: Some(7),
        ..SamplingParams::default()
    };
    f(&mut p);
    p
}

/// Logits whose softmax is exactly `probs`.
fn logits_from_probs(probs: &[f32]) -> Vec<f32> {
    probs
        .iter()
        .map(|p| if *p > 0.0 { p.ln() } else { f32::NEG_INFINITY })
        .collect()
}

/// How often each token is drawn in `n` draws (the sampler's own history is not fed back:
/// each draw starts from a fresh sampler seeded differently, so penalties stay off).
fn histogram(p: &SamplingParams, logits: &[f32], n: usize) -> Vec<usize> {
    let mut counts = vec![0; logits.len()];
    let mut sampler = Sampler::new(p, &[]);
    for _ in 0..n {
        counts[sampler.sample(logits).unwrap().token_id as usize] += 1;
    }
    counts
}

#[test]
fn defaults_are_valid_and_each_out_of_range_field_names_itself() {
    assert_eq!(SamplingParams::default().validate(VOCAB), Ok(()));
    let cases: Vec<(&str, SamplingParams)> = vec![
        ("temperature", params(|p| p.temperature = -0.1)),
        ("temperature", params(|p| p.temperature = 2.5)),
        ("temperature", params(|p| p.temperature = f32::NAN)),
        ("top_p", params(|p| p.top_p = 0.0)),
        ("top_p", params(|p| p.top_p = 1.5)),
        ("min_p", params(|p| p.min_p = -0.5)),
        ("min_p", params(|p| p.min_p = 1.01)),
        ("repetition_penalty", params(|p| p.repetition_penalty = 0.0)),
        (
            "repetition_penalty",
            params(|p| p.repetition_penalty = f32::INFINITY),
        ),
        ("presence_penalty", params(|p| p.presence_penalty = 2.1)),
        ("frequency_penalty", params(|p| p.frequency_penalty = -3.0)),
        ("max_tokens", params(|p| p.max_tokens = Some(0))),
        ("logprobs", params(|p| p.logprobs = Some(21))),
        ("stop", params(|p| p.stop = vec![String::new()])),
        ("stop", params(|p| p.stop = vec!["x".into(); 17])),
        (
            "stop_token_ids",
            params(|p| p.stop_token_ids = vec![VOCAB as u32]),
        ),
    ];
    for (field, p) in cases {
        let err = p.validate(VOCAB).expect_err(field);
        assert_eq!(err.param(), Some(field), "{err}");
        assert!(
            err.to_string().contains(field),
            "message should name {field}: {err}"
        );
    }
}

#[test]
fn greedy_takes_the_argmax_and_the_lowest_id_on_a_tie() {
    let mut sampler = Sampler::new(&SamplingParams::greedy(), &[]);
    assert_eq!(sampler.sample(&[0.1, 3.0, -1.0, 2.0]).unwrap().token_id, 1);
    assert_eq!(
        sampler.sample(&[0.1, 3.0, 3.0, f32::NAN]).unwrap().token_id,
        1
    );
    assert_eq!(sampler.sample(&[f32::NAN, 0.0]).unwrap().token_id, 1);
}

#[test]
fn logits_without_any_finite_value_are_an_error_not_a_panic() {
    for p in [SamplingParams::greedy(), params(|_| {})] {
        let mut sampler = Sampler::new(&p, &[]);
        assert!(matches!(
            sampler.sample(&[]),
            Err(SamplingError::InvalidLogits(_))
        ));
        let err = sampler.sample(&[f32::NEG_INFINITY, f32::NAN]).unwrap_err();
        assert!(matches!(err, SamplingError::InvalidLogits(_)));
        assert_eq!(err.param(), None);
    }
}

#[test]
fn the_same_seed_gives_the_same_tokens_and_another_seed_differs() {
    let logits = vec![0.0; 64];
    let run = |seed| {
        let mut s = Sampler::new(&params(|p| p.seed = Some(seed)), &[]);
        (0..32)
            .map(|_| s.sample(&logits).unwrap().token_id)
            .collect::<Vec<_>>()
    };
    assert_eq!(run(42), run(42));
    assert_ne!(run(42), run(43));
    let unseeded = |_| {
        let mut s = Sampler::new(&SamplingParams::default(), &[]);
        let seed = s.seed();
        let ids: Vec<u32> = (0..32)
            .map(|_| s.sample(&logits).unwrap().token_id)
            .collect();
        (seed, ids)
    };
    let (a, b) = (unseeded(0), unseeded(1));
    assert_ne!(a.0, b.0, "unseeded samplers draw different seeds");
    let replay = run(a.0);
    assert_eq!(replay, a.1, "the reported seed replays an unseeded run");
}

#[test]
fn a_resumed_sampler_draws_what_the_uninterrupted_one_would_have() {
    // Logits that depend on the step, with penalties that depend on the output so far.
    let logits = |step: usize| -> Vec<f32> {
        (0..16)
            .map(|i| ((i * 7 + step * 3) % 11) as f32 * 0.3)
            .collect()
    };
    let prompt = [1, 2, 3];
    for p in [
        params(|p| p.temperature = 0.9),
        params(|p| {
            p.temperature = 1.2;
            p.presence_penalty = 0.8;
            p.frequency_penalty = 0.5;
            p.repetition_penalty = 1.3;
        }),
        params(|p| {
            p.temperature = 0.0;
            p.frequency_penalty = 1.5;
        }),
    ] {
        let mut whole = Sampler::new(&p, &prompt);
        let all: Vec<u32> = (0..40)
            .map(|step| whole.sample(&logits(step)).unwrap().token_id)
            .collect();
        for cut in [0, 1, 17, 39] {
            let mut resumed = Sampler::resume(&p, &prompt, &all[..cut]);
            let rest: Vec<u32> = (cut..40)
                .map(|step| resumed.sample(&logits(step)).unwrap().token_id)
                .collect();
            assert_eq!(rest, all[cut..], "cut at {cut} with {p:?}");
        }
    }
}

#[test]
fn draws_follow_the_temperature_scaled_softmax() {
    let probs = [0.5, 0.25, 0.125, 0.125];
    let logits = logits_from_probs(&probs);
    let n = 20_000;
    for t in [1.0f32, 0.5, 2.0] {
        let counts = histogram(&params(|p| p.temperature = t), &logits, n);
        let scaled: Vec<f32> = probs.iter().map(|p| p.powf(1.0 / t)).collect();
        let z: f32 = scaled.iter().sum();
        for (i, c) in counts.iter().enumerate() {
            let expected = scaled[i] / z;
            let observed = *c as f32 / n as f32;
            assert!(
                (observed - expected).abs() < 0.015,
                "T={t} token {i}: {observed} vs {expected}"
            );
        }
    }
}

#[test]
fn top_k_keeps_only_the_k_most_likely() {
    let logits = logits_from_probs(&[0.1, 0.3, 0.05, 0.25, 0.3]);
    let counts = histogram(&params(|p| p.top_k = 2), &logits, 2000);
    assert_eq!(counts[0] + counts[2] + counts[3], 0, "{counts:?}");
    assert!(
        counts[1] > 800 && counts[4] > 800,
        "both survivors are drawn: {counts:?}"
    );
}

#[test]
fn top_p_keeps_the_smallest_nucleus_reaching_p() {
    let logits = logits_from_probs(&[0.05, 0.5, 0.15, 0.3]);
    let counts = histogram(&params(|p| p.top_p = 0.7), &logits, 2000);
    assert_eq!(counts[0] + counts[2], 0, "{counts:?}");
    let counts = histogram(&params(|p| p.top_p = 0.9), &logits, 2000);
    assert_eq!(counts[0], 0, "{counts:?}");
    assert!(
        counts[2] > 0,
        "0.5 + 0.3 < 0.9 so the third token is in: {counts:?}"
    );
}

#[test]
fn top_p_over_a_large_flat_vocabulary_keeps_about_p_of_it() {
    // 4096 equal tokens: the nucleus for p = 0.5 is 2048 tokens, beyond the 64 and 1024 heads.
    let logits = vec![1.0; 4096];
    let mut sampler = Sampler::new(&params(|p| p.top_p = 0.5), &[]);
    let max_id = (0..4000)
        .map(|_| sampler.sample(&logits).unwrap().token_id)
        .max()
        .unwrap();
    assert!(max_id < 2049, "ties keep the lowest ids; drew {max_id}");
    assert!(
        max_id > 1500,
        "the whole nucleus is used; highest drawn {max_id}"
    );
}

#[test]
fn min_p_drops_tokens_below_a_fraction_of_the_best() {
    let logits = logits_from_probs(&[0.4, 0.3, 0.15, 0.1, 0.05]);
    let counts = histogram(&params(|p| p.min_p = 0.3), &logits, 2000);
    assert_eq!(
        counts[3] + counts[4],
        0,
        "p < 0.3 * 0.4 are dropped: {counts:?}"
    );
    assert!(counts[2] > 0, "0.15 >= 0.12 survives: {counts:?}");
}

#[test]
fn repetition_penalty_covers_the_prompt_and_both_logit_signs() {
    let p = params(|p| {
        p.temperature = 0.0;
        p.repetition_penalty = 2.0;
    });
    // Token 0 (2.0) is in the prompt: 2.0 / 2 = 1.0 < 1.5, so token 1 wins.
    assert_eq!(
        Sampler::new(&p, &[0])
            .sample(&[2.0, 1.5, 0.0])
            .unwrap()
            .token_id,
        1
    );
    assert_eq!(
        Sampler::new(&p, &[5])
            .sample(&[2.0, 1.5, 0.0])
            .unwrap()
            .token_id,
        0
    );
    // Negative logits are multiplied: -1 * 2 = -2 < -1.5.
    assert_eq!(
        Sampler::new(&p, &[0])
            .sample(&[-1.0, -1.5, -9.0])
            .unwrap()
            .token_id,
        1
    );
}

#[test]
fn presence_and_frequency_penalties_act_on_the_output_so_far() {
    let logits = [1.0, 0.8, 0.0];
    let presence = params(|p| {
        p.temperature = 0.0;
        p.presence_penalty = 0.5;
    });
    let mut s = Sampler::new(&presence, &[0]);
    let ids: Vec<u32> = (0..4)
        .map(|_| s.sample(&logits).unwrap().token_id)
        .collect();
    // 0 is drawn, then penalised once (0.5 < 0.8); then 1 is penalised too (0.3 < 0.5).
    assert_eq!(ids, vec![0, 1, 0, 0]);
    let frequency = params(|p| {
        p.temperature = 0.0;
        p.frequency_penalty = 0.15;
    });
    let mut s = Sampler::new(&frequency, &[]);
    let ids: Vec<u32> = (0..4)
        .map(|_| s.sample(&logits).unwrap().token_id)
        .collect();
    // 1.0, 0.85 vs 0.8 → 0 again; 0.7 < 0.8 → 1; then 0.7 vs 0.65 → 0.
    assert_eq!(ids, vec![0, 0, 1, 0]);
}

#[test]
fn logprobs_report_the_raw_distribution_and_the_top_n() {
    let probs = [0.1, 0.6, 0.2, 0.1];
    let logits: Vec<f32> = logits_from_probs(&probs).iter().map(|l| l + 3.0).collect();
    let p = params(|p| {
        p.temperature = 0.0;
        p.logprobs = Some(3);
        p.presence_penalty = 2.0;
    });
    let mut s = Sampler::new(&p, &[]);
    let first = s.sample(&logits).unwrap();
    assert_eq!(first.token_id, 1);
    assert!((first.logprob.unwrap() - 0.6f32.ln()).abs() < 1e-5);
    let top: Vec<u32> = first.top_logprobs.iter().map(|t| t.token_id).collect();
    assert_eq!(top, vec![1, 2, 0], "most likely first, lower id on a tie");
    assert!((first.top_logprobs[1].logprob - 0.2f32.ln()).abs() < 1e-5);
    // The penalty moves the choice to token 2, but the reported logprob stays the raw one.
    let second = s.sample(&logits).unwrap();
    assert_eq!(second.token_id, 2);
    assert!((second.logprob.unwrap() - 0.2f32.ln()).abs() < 1e-5);
    let none = Sampler::new(&SamplingParams::greedy(), &[])
        .sample(&logits)
        .unwrap();
    assert_eq!((none.logprob, none.top_logprobs.len()), (None, 0));
}

#[test]
fn token_stop_conditions() {
    let eos = [2u32];
    let p = params(|p| {
        p.stop_token_ids = vec![5];
        p.max_tokens = Some(3);
    });
    assert_eq!(finish_on_token(&p, 2, 1, &eos), Some(FinishReason::Eos));
    assert_eq!(
        finish_on_token(&p, 5, 1, &eos),
        Some(FinishReason::StopToken(5))
    );
    assert_eq!(finish_on_token(&p, 4, 2, &eos), None);
    assert_eq!(finish_on_token(&p, 4, 3, &eos), Some(FinishReason::Length));
    assert_eq!(FinishReason::Length.as_openai(), "length");
    assert_eq!(FinishReason::Eos.as_openai(), "stop");
    let ignore = params(|p| p.ignore_eos = true);
    assert_eq!(finish_on_token(&ignore, 2, 1, &eos), None);
}

/// Feeds `deltas` and returns (text released after each push, stop found).
fn feed(stops: &[&str], deltas: &[&str]) -> (Vec<String>, Option<String>, StopMatcher) {
    let stops: Vec<String> = stops.iter().map(|s| s.to_string()).collect();
    let mut m = StopMatcher::new(&stops);
    let mut out = Vec::new();
    let mut stopped = None;
    for d in deltas {
        let check = m.push(d);
        out.push(check.text);
        stopped = stopped.or(check.stopped);
    }
    (out, stopped, m)
}

#[test]
fn stop_strings_hold_back_possible_starts_and_cut_before_the_match() {
    let (out, stopped, _) = feed(&["\n\nUser:"], &["Hello", "\n", "\nUs", "er:", " more"]);
    assert_eq!(out, vec!["Hello", "", "", "", ""]);
    assert_eq!(stopped.as_deref(), Some("\n\nUser:"));

    // A partial match that diverges is released.
    let (out, stopped, mut m) = feed(&["END"], &["the E", "ND", "x"]);
    assert_eq!((out[0].as_str(), stopped.as_deref()), ("the ", Some("END")));
    assert_eq!(m.finish(), "");

    let (out, stopped, mut m) = feed(&["END"], &["the E", "nd"]);
    assert_eq!(out, vec!["the ", "End"]);
    assert_eq!(stopped, None);
    assert_eq!(m.finish(), "");

    // Held text comes out at the end of generation.
    let (out, _, mut m) = feed(&["###"], &["a#", "#"]);
    assert_eq!(out.concat(), "a");
    assert_eq!(m.held(), "##");
    assert_eq!(m.finish(), "##");
}

#[test]
fn stop_strings_earliest_match_wins_and_multibyte_text_is_safe() {
    let (out, stopped, _) = feed(&["世界", "好"], &["你好世界"]);
    assert_eq!((out[0].as_str(), stopped.as_deref()), ("你", Some("好")));
    let (out, stopped, _) = feed(&["🦀!"], &["a🦀", "b🦀", "!"]);
    assert_eq!(out, vec!["a", "🦀b", ""]);
    assert_eq!(stopped.as_deref(), Some("🦀!"));
    let (out, stopped, _) = feed(&[], &["no stops"]);
    assert_eq!((out[0].as_str(), stopped), ("no stops", None));
}

#[test]
fn draws_over_a_vocabulary_of_many_blocks_hit_every_block_in_proportion() {
    // 2000 tokens: token 1500 weighs as much as all the others together.
    let mut logits = vec![0.0f32; 2000];
    logits[1500] = 1999f32.ln();
    let counts = histogram(&params(|_| {}), &logits, 8000);
    let heavy = counts[1500] as f32 / 8000.0;
    assert!(
        (heavy - 0.5).abs() < 0.03,
        "token 1500 drawn {heavy} of the time"
    );
    let drawn: Vec<usize> = (0..2000).filter(|&i| i != 1500 && counts[i] > 0).collect();
    assert!(
        drawn.first() < Some(&50) && drawn.last() > Some(&1950),
        "light tokens from every block"
    );
}

#[test]
fn samplers_and_params_cross_threads() {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<Sampler>();
    send_sync::<SamplingParams>();
    send_sync::<StopMatcher>();
}
