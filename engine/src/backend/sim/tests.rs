//! Unit tests of the sim backend: step classification, modelled time, deterministic tokens.

#![allow(clippy::unwrap_used)]

use super::*;

fn profile() -> PerfProfile {
    let yaml = tokenscale_common::perf_model::bundled_profile(DEFAULT_PROFILE)
        .unwrap()
        .replace("t0_s: 0.0065", "t0_s: 0.0001");
    PerfProfile::from_yaml(&yaml).unwrap()
}

#[test]
fn a_batch_splits_into_prefill_and_decode_work() {
    let prompt = [1u32; 10];
    let one = [5u32];
    let table = [0u32; 4];
    let batch = [
        SeqStep {
            tokens: &prompt,
            start_pos: 0,
            block_table: &table,
            want_logits: true,
        },
        SeqStep {
            tokens: &one,
            start_pos: 20,
            block_table: &table,
            want_logits: true,
        },
        SeqStep {
            tokens: &one,
            start_pos: 0,
            block_table: &table,
            want_logits: true,
        },
    ];
    let load = StepLoad::of(&batch);
    assert_eq!(
        load,
        StepLoad {
            prefill_tokens: 11,
            decode_seqs: 1,
            kv_tokens: 10 + 21 + 1
        }
    );
    let backend = SimBackend::new(profile(), 1024);
    let expected = backend.profile().step_time_s(11, 1, 32);
    assert!((backend.step_time_s(&batch) - expected).abs() < 1e-12);
}

#[test]
fn forward_emits_the_positional_token_only_where_asked() {
    let mut backend = SimBackend::new(profile(), 1024);
    let prompt = [104u32, 105];
    let table = [0u32];
    let batch = [
        SeqStep {
            tokens: &prompt,
            start_pos: 0,
            block_table: &table,
            want_logits: false,
        },
        SeqStep {
            tokens: &prompt,
            start_pos: 3,
            block_table: &table,
            want_logits: true,
        },
    ];
    let out = backend.forward(&batch).unwrap();
    let vocab = backend.model_config().vocab_size;
    assert_eq!(out.rows, vec![1]);
    let row = out.logits_of(1, vocab).unwrap();
    let argmax = row
        .iter()
        .enumerate()
        .max_by(|a, b| a.1.total_cmp(b.1))
        .unwrap()
        .0;
    assert_eq!(argmax as u32, token_at(5));
}

#[test]
fn tokens_are_letters_never_eos_and_vary() {
    let tokens: Vec<u32> = (0..1000).map(token_at).collect();
    assert!(tokens.iter().all(|t| (97..=122).contains(t)));
    let distinct: std::collections::HashSet<_> = tokens.iter().collect();
    assert!(distinct.len() >= 20, "{} distinct letters", distinct.len());
    assert_eq!(token_at(7), token_at(7));
}

#[test]
fn the_sim_tokenizer_round_trips_text_and_knows_its_eos() {
    let tokenizer =
        crate::tokenizer::Tokenizer::from_spec(&SimVocab::new().tokenizer_spec()).unwrap();
    let ids = tokenizer.encode("hello, world", false).unwrap();
    assert_eq!(ids.len(), "hello, world".len());
    assert_eq!(tokenizer.decode(&ids, true).unwrap(), "hello, world");
    assert!(tokenizer.eos_token_ids().contains(&258));
    assert_eq!(tokenizer.vocab_size(), SimVocab::new().size());
}

#[test]
fn profiles_are_read_by_bundled_name_or_path_and_a_bad_one_names_the_choices() {
    let missing = read_profile(Some("/nonexistent/profile.yaml")).unwrap_err();
    assert!(missing.to_string().contains("sim profile"), "{missing}");
    // The examples once passed a name that is neither: the message lists what would work.
    let unknown = read_profile(Some("h100-llama-8b")).unwrap_err().to_string();
    assert!(
        unknown.contains("llama3-8b-h100") && unknown.contains("smollm2-cpu"),
        "{unknown}"
    );
    assert_eq!(read_profile(None).unwrap().name, "llama3-8b-h100");
    assert_eq!(
        read_profile(Some("smollm2-cpu")).unwrap().name,
        "smollm2-cpu"
    );
}
