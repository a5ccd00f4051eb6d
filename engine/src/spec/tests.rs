//! Speculation's pure parts: drafts, lengths, and the verify loop's distribution (a toy
//! model through the real sampler, fixed seeds).

use std::collections::HashMap;

use super::policy::{self, StepCost};
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
    // A match that runs into the end is a loop: the draft goes on with its period.
    assert_eq!(propose(&[4, 5, 4], 1, 2, 5), vec![5, 4, 5, 4, 5]);
    assert_eq!(propose(&[8, 1, 2, 3, 1, 2], 2, 2, 4), vec![3, 1, 2, 3]);
    assert_eq!(propose(&[7, 7], 1, 1, 3), vec![7, 7, 7]);
}

#[test]
fn the_longest_match_wins_over_a_later_shorter_one() {
    // "1 2 3 4 5" occurred at the start; a later "4 5" alone is a shorter match.
    let tokens = [1, 2, 3, 4, 5, 6, 7, 9, 4, 5, 8, 0, 1, 2, 3, 4, 5];
    let found = |n, tokens| Some(Lookup { n, tokens });
    assert_eq!(lookup(&tokens, 2, 8, 3), found(5, vec![6, 7, 9]));
    // Capped at `max_n`, the latest of the equally long matches.
    assert_eq!(lookup(&tokens, 2, 2, 3), found(2, vec![8, 0, 1]));
    // Below `min_n` none counts; `max_n` below `min_n` finds nothing.
    assert_eq!(lookup(&tokens, 6, 8, 3), None);
    assert_eq!(lookup(&tokens, 3, 2, 3), None);
    assert_eq!(lookup(&[5], 1, 4, 3), None);
}

#[test]
fn mode_names_parse_and_bad_settings_are_named() {
    assert_eq!("ngram".parse(), Ok(SpeculativeMode::Ngram));
    assert!("eagle".parse::<SpeculativeMode>().is_err());
    let bad = SpeculativeConfig {
        prompt_lookup_min: 5,
        prompt_lookup_max: 4,
        ..SpeculativeConfig::default()
    };
    assert!(
        bad.validate()
            .is_err_and(|e| e.contains("--prompt-lookup-min"))
    );
    assert!(SpeculativeConfig::default().validate().is_ok());
}

/// One stream's step of `step_s` and `per_token_s` a draft row, no length measured apart.
fn one_stream(step_s: f64, per_token_s: f64) -> StepCost {
    StepCost {
        step_s,
        per_token_s,
        running: 1,
        extra_s: [None; policy::MEASURED_ROWS],
        plain_measured: false,
    }
}

#[test]
fn the_length_follows_acceptance_and_cost() {
    let cheap = one_stream(0.020, 0.001);
    let mut good = DraftPolicy::default();
    good.drafting(4);
    good.record(4, 4);
    assert_eq!(good.length(4, SpeculativeMode::Auto, 4, Some(cheap)), 4);
    let mut bad = DraftPolicy::default();
    bad.drafting(4);
    for _ in 0..10 {
        bad.record(4, 0);
    }
    assert!(bad.acceptance(4) < 0.1);
    // A token costing as much as a step never pays; auto stops drafting, ngram keeps one.
    let dear = StepCost {
        per_token_s: 0.020,
        ..cheap
    };
    assert_eq!(bad.length(4, SpeculativeMode::Auto, 4, Some(dear)), 0);
    assert_eq!(bad.length(4, SpeculativeMode::Ngram, 4, Some(dear)), 1);
    assert_eq!(good.length(4, SpeculativeMode::Off, 4, None), 0);
    // Shadow proposals that come true earn the drafts back.
    for _ in 0..20 {
        bad.set_shadow(Some((7, 4)));
        bad.on_token(7);
    }
    assert!(bad.length(4, SpeculativeMode::Auto, 4, Some(cheap)) > 0);
    assert!((expected_tokens(0.5, 2) - 1.75).abs() < 1e-12);
}

#[test]
fn acceptance_is_learnt_per_match_length() {
    let cost = one_stream(0.007, 0.001);
    let mut policy = DraftPolicy::default();
    // Drafts from 1-token matches miss (free text), those from 4-token matches are kept (a
    // loop): auto stops drafting after the short matches only.
    for _ in 0..12 {
        policy.drafting(1);
        policy.record(1, 0);
        policy.drafting(4);
        policy.record(3, 3);
    }
    assert!(policy.acceptance(1) < 0.1 && policy.acceptance(4) > 0.9);
    assert_eq!(policy.length(1, SpeculativeMode::Auto, 3, Some(cost)), 0);
    assert_eq!(policy.length(4, SpeculativeMode::Auto, 3, Some(cost)), 3);
    // Shadow proposals are scored at their own match length.
    for _ in 0..12 {
        policy.set_shadow(Some((9, 1)));
        policy.on_token(9);
    }
    assert!(policy.acceptance(1) > 0.9);
}

#[test]
#[allow(clippy::unwrap_used)]
fn a_measured_step_cost_by_draft_length_sets_the_length() {
    // One stream measured 7 ms plain, 1 ms more per draft row up to 3 and 7.3 ms more with 4
    // (the CPU kernels' tiles change at 5 rows): with drafts always kept, 3 rows give 4
    // tokens in 10 ms, 4 rows 5 in 14.3 ms.
    let mut measured = DraftCost::default();
    for _ in 0..10 {
        measured.observe(1, 0, 0.007);
    }
    // A length's first measurement is averaged in from the rows' average: each settles.
    for _ in 0..30 {
        for (rows, seconds) in [(1, 0.008), (2, 0.009), (3, 0.010), (4, 0.0143)] {
            measured.observe(1, rows, seconds);
        }
    }
    let predict = |_: usize, _: usize| Some(0.007);
    let mut cliff_only = DraftCost::default();
    cliff_only.observe(1, 0, 0.007);
    cliff_only.observe(1, 4, 0.0143);
    let cost = StepCost::from_model(predict, 1, &cliff_only).unwrap();
    // Only the dear 4-row step measured: 3 rows look as dear per row, and are tried.
    assert_eq!(
        policy_always_kept().length(4, SpeculativeMode::Auto, 4, Some(cost)),
        3
    );
    let cost = StepCost::from_model(predict, 1, &measured).unwrap();
    assert!((cost.extra(4) - 0.0073).abs() < 1e-6, "{cost:?}");
    let policy = policy_always_kept();
    assert_eq!(policy.length(4, SpeculativeMode::Auto, 4, Some(cost)), 3);
    // A step held up by the machine (90 ms) moves a length's price by at most 30%.
    let mut disturbed = measured.clone();
    disturbed.observe(1, 3, 0.090);
    let extra = StepCost::from_model(predict, 1, &disturbed)
        .unwrap()
        .extra(3);
    assert!(extra <= 0.003 * 1.3 + 1e-9, "{extra}");
    // Where 4 rows cost 1 ms each too, the longest draft gives the most.
    let mut linear = measured.clone();
    for _ in 0..20 {
        linear.observe(1, 4, 0.011);
    }
    let cost = StepCost::from_model(predict, 1, &linear).unwrap();
    assert_eq!(policy.length(4, SpeculativeMode::Auto, 4, Some(cost)), 4);
}

/// A sequence whose drafts from 4-token matches were always kept.
fn policy_always_kept() -> DraftPolicy {
    let mut policy = DraftPolicy::default();
    policy.drafting(4);
    policy.record(20, 20);
    policy
}

/// A toy model over six tokens: the next token's logits depend on the previous token.
#[test]
#[allow(clippy::unwrap_used)]
fn a_draft_row_is_priced_as_one_more_decoding_sequence() {
    use crate::sched::StepTimeModel;
    // A CPU-like machine: 8 ms a step, 2 ms per sequence (its attention, output-head row and
    // sampling), 0.2 ms per token; fitted from decode steps and a few prefill chunks.
    let time = |s: usize, t: usize| 0.008 + 0.002 * s as f64 + 0.000_2 * t as f64;
    let mut model = StepTimeModel::default();
    for (s, t) in [
        (16, 16),
        (16, 16),
        (1, 64),
        (16, 16),
        (2, 130),
        (16, 16),
        (16, 16),
    ]
    .into_iter()
    .cycle()
    .take(60)
    {
        model.observe(s, t, time(s, t));
    }
    let cost =
        |n| StepCost::from_model(|s, t| model.predict(s, t), n, &DraftCost::default()).unwrap();
    let wide = cost(16);
    assert!((wide.per_token_s - 0.0022).abs() < 1e-4, "{wide:?}");
    // At 16 streams a step is 43.2 ms and a draft row costs the batch 16 × 2.2 ms: a
    // sequence whose drafts are kept 73% of the time saves 32 ms a token but costs 35 ms,
    // so `auto` does not draft; alone, 10.2 ms a step against 2.2 ms a row, 3 rows give
    // the most tokens per second (2.66 in 16.8 ms; 4 rows: 2.95 in 19 ms).
    let policy = DraftPolicy::default();
    let mut seasoned = policy.clone();
    seasoned.drafting(4);
    seasoned.record(10, 7);
    assert!((0.6..0.8).contains(&seasoned.acceptance(4)));
    assert_eq!(seasoned.length(4, SpeculativeMode::Auto, 4, Some(wide)), 0);
    assert_eq!(
        seasoned.length(4, SpeculativeMode::Auto, 4, Some(cost(1))),
        3
    );
}

#[test]
#[allow(clippy::unwrap_used)]
fn the_measured_draft_cost_prices_drafts_per_batch_size() {
    // A fit that has gone flat (a steady batch: drafts look free, and a plain step of 16 looks
    // like 60 ms); the decode steps measured 49 ms plain and 3.5 ms more per draft row at 16,
    // 15 ms and 0.5 ms a row alone.
    let predict = |s: usize, _t: usize| Some(if s == 1 { 0.015 } else { 0.060 });
    let mut measured = DraftCost::default();
    measured.observe(16, 4, 0.063); // no plain step of 16 measured yet: nothing learnt
    assert_eq!(measured.per_row(16), None);
    for _ in 0..20 {
        measured.observe(16, 0, 0.049);
        measured.observe(1, 0, 0.015);
    }
    measured.observe(16, 4, 0.063);
    measured.observe(16, 2, 0.056);
    measured.observe(1, 4, 0.017);
    let wide = StepCost::from_model(predict, 16, &measured).unwrap();
    assert!((wide.step_s - 0.049).abs() < 1e-9, "{wide:?}");
    assert!((wide.per_token_s - 0.0035).abs() < 1e-9, "{wide:?}");
    let alone = StepCost::from_model(predict, 1, &measured).unwrap();
    assert!((alone.per_token_s - 0.0005).abs() < 1e-9, "{alone:?}");
    // Drafts always kept: at 16 streams 16 × 3.5 ms per row outweighs the 49 ms step a kept
    // token saves; alone, 0.5 ms against 15 ms, the longest draft pays.
    let mut policy = DraftPolicy::default();
    policy.drafting(4);
    policy.record(20, 20);
    assert!(policy.acceptance(4) > 0.99);
    assert_eq!(policy.length(4, SpeculativeMode::Auto, 4, Some(wide)), 0);
    // Alone only 4 rows were measured: the shorter lengths are tried once each, the longest
    // first, before the longest draft is kept to.
    assert_eq!(policy.length(4, SpeculativeMode::Auto, 4, Some(alone)), 3);
    for rows in 1..=3 {
        measured.observe(1, rows, 0.015 + 0.0005 * rows as f64);
    }
    let alone = StepCost::from_model(predict, 1, &measured).unwrap();
    assert_eq!(policy.length(4, SpeculativeMode::Auto, 4, Some(alone)), 4);
    // Unmeasured, the fit prices both (its flat slope: the row looks free).
    let unmeasured = StepCost::from_model(predict, 64, &measured).unwrap();
    assert_eq!((unmeasured.step_s, unmeasured.per_token_s), (0.060, 0.0));
}

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
