//! Speculation's pure parts: drafts, lengths, and the verify loop's distribution (a toy
//! model through the real sampler, fixed seeds).

use std::collections::HashMap;

use super::policy::StepCost;
use super::*;
use crate::sampling::{Sampler, SamplingParams};

#[test]
fn the_latest_longest_match_gives_the_draft() {
    let tokens = [1, 2, 3, 9, 1, 2, 3, 7, 5, 1, 2, 3];
    // "1 2 3" last occurred before "7 5 1 2 3".
    assert_eq!(propose(&tokens, 1, 3, 3), vec![7, 5, 1]);
    assert_eq!(propose(&tokens, 1, 3, 1), vec![7]);
    // Nothing repeats: no draft.
    assert!(propose(&[1, 2, 3, 4], 1, 3, 4).is_empty());
    // The draft stops at the end of what is known.
    assert_eq!(propose(&[4, 5, 4], 1, 2, 5), vec![5, 4]);
}

#[test]
fn mode_names_parse_and_bad_settings_are_named() {
    assert_eq!("ngram".parse(), Ok(SpeculativeMode::Ngram));
    assert!("eagle".parse::<SpeculativeMode>().is_err());
    let bad = SpeculativeConfig {
        prompt_lookup_min: 5,
        ..SpeculativeConfig::default()
    };
    assert!(
        bad.validate()
            .is_err_and(|e| e.contains("--prompt-lookup-min"))
    );
    assert!(SpeculativeConfig::default().validate().is_ok());
}

#[test]
fn the_length_follows_acceptance_and_cost() {
    let cheap = StepCost {
        step_s: 0.020,
        per_token_s: 0.001,
        running: 1,
    };
    let mut good = DraftPolicy::default();
    good.record(4, 4);
    assert_eq!(good.length(SpeculativeMode::Auto, 4, Some(cheap)), 4);
    let mut bad = DraftPolicy::default();
    for _ in 0..10 {
        bad.record(4, 0);
    }
    assert!(bad.acceptance() < 0.1);
    // A token costing as much as a step never pays; auto stops drafting, ngram keeps one.
    let dear = StepCost {
        per_token_s: 0.020,
        ..cheap
    };
    assert_eq!(bad.length(SpeculativeMode::Auto, 4, Some(dear)), 0);
    assert_eq!(bad.length(SpeculativeMode::Ngram, 4, Some(dear)), 1);
    assert_eq!(good.length(SpeculativeMode::Off, 4, None), 0);
    // Shadow proposals that come true earn the drafts back.
    for _ in 0..20 {
        bad.set_shadow(Some(7));
        bad.on_token(7);
    }
    assert!(bad.length(SpeculativeMode::Auto, 4, Some(cheap)) > 0);
    assert!((expected_tokens(0.5, 2) - 1.75).abs() < 1e-12);
}

/// A toy model over six tokens: the next token's logits depend on the previous token.
fn toy_logits(prev: u32) -> Vec<f32> {
    (0..6u32)
        .map(|t| ((t * 7 + prev * 3) % 6) as f32 * 0.6 - (t as f32) * 0.1)
        .collect()
}

/// Three tokens after token 0, plainly or speculating a fixed two-token draft first.
fn generate(params: &SamplingParams, seed: u64, draft: Option<&[u32]>) -> Vec<u32> {
    let params = SamplingParams {
        seed: Some(seed),
        ..params.clone()
    };
    let mut sampler = Sampler::new(&params, &[0]);
    let mut out: Vec<u32> = Vec::new();
    if let Some(draft) = draft {
        // Row i runs after the draft's first i tokens, as the batched forward computes it.
        let row = |i: usize| toy_logits(if i == 0 { 0 } else { draft[i - 1] });
        let chosen = verify(draft, |i| {
            let token = sampler.sample(&row(i))?.token_id;
            Ok::<_, crate::sampling::SamplingError>((token, false))
        });
        out = chosen.unwrap_or_default();
    }
    while out.len() < 3 {
        let prev = out.last().copied().unwrap_or(0);
        match sampler.sample(&toy_logits(prev)) {
            Ok(t) => out.push(t.token_id),
            Err(_) => return Vec::new(),
        }
    }
    out.truncate(3);
    out
}

/// Two-sample chi-square over the categories both samples fill enough.
fn chi_square(a: &HashMap<Vec<u32>, f64>, b: &HashMap<Vec<u32>, f64>) -> (f64, usize) {
    let mut keys: Vec<&Vec<u32>> = a.keys().chain(b.keys()).collect();
    keys.sort();
    keys.dedup();
    let (mut stat, mut df, mut rest) = (0.0, 0usize, (0.0, 0.0));
    for key in keys {
        let (x, y) = (
            a.get(key).copied().unwrap_or(0.0),
            b.get(key).copied().unwrap_or(0.0),
        );
        if x + y < 20.0 {
            rest = (rest.0 + x, rest.1 + y);
            continue;
        }
        stat += (x - y).powi(2) / (x + y);
        df += 1;
    }
    if rest.0 + rest.1 > 0.0 {
        stat += (rest.0 - rest.1).powi(2) / (rest.0 + rest.1);
        df += 1;
    }
    (stat, df.saturating_sub(1))
}

#[test]
fn speculation_keeps_the_token_distribution_at_temperature_one() {
    let plain_params = SamplingParams::default();
    let filtered = SamplingParams {
        top_k: 4,
        top_p: 0.9,
        presence_penalty: 0.4,
        repetition_penalty: 1.2,
        logit_bias: [(2, 0.5)].into_iter().collect(),
        ..SamplingParams::default()
    };
    for params in [plain_params, filtered] {
        let (mut plain, mut spec) = (HashMap::new(), HashMap::new());
        const N: u64 = 20_000;
        for seed in 0..N {
            *plain.entry(generate(&params, seed, None)).or_insert(0.0) += 1.0;
            // Other seeds: two independent samples, one with a draft that is often wrong.
            *spec
                .entry(generate(&params, N + seed, Some(&[3, 1])))
                .or_insert(0.0) += 1.0;
            // The same seed gives the same tokens, drafted or not.
            assert_eq!(
                generate(&params, seed, Some(&[3, 1])),
                generate(&params, seed, None)
            );
        }
        let (stat, df) = chi_square(&plain, &spec);
        // The 0.1% critical value of chi-square is below 3·df + 20 for these df.
        assert!(df >= 10, "enough categories: {df}");
        assert!(
            stat < 3.0 * df as f64 + 20.0,
            "chi-square {stat} on {df} df"
        );
    }
}

#[test]
fn verify_stops_at_the_first_rejection_and_on_a_stop() {
    let draft = [5, 6, 7];
    let picks = [5, 6, 9, 4];
    let chosen: Result<Vec<u32>, ()> = verify(&draft, |i| Ok((picks[i], false)));
    assert_eq!(chosen, Ok(vec![5, 6, 9]));
    assert_eq!(accepted(&draft, &[5, 6, 9]), 2);
    let all: Result<Vec<u32>, ()> = verify(&draft, |i| Ok(([5, 6, 7, 8][i], false)));
    assert_eq!(all, Ok(vec![5, 6, 7, 8]));
    let stopped: Result<Vec<u32>, ()> = verify(&draft, |i| Ok((draft[i], i == 1)));
    assert_eq!(stopped, Ok(vec![5, 6]));
}
