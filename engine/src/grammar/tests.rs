//! The grammar module on the sim backend's byte vocabulary (one token per byte, so a text's
//! tokens are its bytes): masks follow the grammar exactly, EOS only once the text is complete,
//! and what cannot be enforced is refused naming its field.

use std::sync::Arc;

use serde_json::json;

use super::*;
use crate::backend::sim::SimVocab;
use crate::tokenizer::Tokenizer;

const EOS: u32 = 258;

fn compiler() -> GrammarCompiler {
    let vocab = SimVocab::new();
    let tokenizer = Tokenizer::from_spec(&vocab.tokenizer_spec()).expect("sim tokenizer");
    GrammarCompiler::new(Arc::new(tokenizer), vocab.size()).expect("compiler")
}

/// Walks `text` byte by byte: each byte must be allowed; returns the mask after the last.
fn walk(constraint: &mut Constraint, text: &str) -> TokenMask {
    for b in text.bytes() {
        let mask = constraint.next_mask().expect("mask");
        assert!(
            mask.allows(u32::from(b)),
            "{:?} refused in {text:?}",
            b as char
        );
        assert!(!mask.allows(EOS), "EOS allowed before the end of {text:?}");
        constraint.record(u32::from(b));
    }
    constraint.next_mask().expect("last mask")
}

#[test]
fn a_json_schema_is_followed_with_the_engines_separators() {
    let schema = json!({"type": "object", "properties": {
        "name": {"type": "string"}, "role": {"enum": ["admin", "user"]},
        "tags": {"type": "array", "items": {"type": "integer"}}},
        "required": ["name", "role", "tags"], "additionalProperties": false});
    let c = compiler();
    let grammar = Grammar::JsonSchema {
        schema,
        param: "response_format".into(),
    };
    let mut constraint = c.compile(&grammar).expect("compiles");
    let end = walk(
        &mut constraint,
        r#"{"name": "Ada", "role": "admin", "tags": [1, 22]}"#,
    );
    assert!(end.allows(EOS));
    assert!(
        !end.allows(u32::from(b' ')),
        "no whitespace after the document"
    );

    // A value outside the enum is never allowed: after `"role": "a` only `admin` continues.
    let mut other = c.compile(&grammar).expect("compiles");
    let mask = walk(&mut other, r#"{"name": "x", "role": "a"#);
    assert!(mask.allows(u32::from(b'd')));
    assert!(!mask.allows(u32::from(b'x')));
}

#[test]
fn choices_and_regexes_allow_only_their_language() {
    let c = compiler();
    let choice = Grammar::Choice {
        choices: vec!["yes".into(), "no".into(), "say \"hi\"".into()],
        param: "guided_choice".into(),
    };
    let mut constraint = c.compile(&choice).expect("compiles");
    let first = constraint.next_mask().expect("mask");
    let allowed: Vec<u32> = (0..EOS).filter(|&t| first.allows(t)).collect();
    assert_eq!(
        allowed,
        vec![u32::from(b'n'), u32::from(b's'), u32::from(b'y')]
    );
    let mut quoted = c.compile(&choice).expect("compiles");
    assert!(walk(&mut quoted, "say \"hi\"").allows(EOS));

    let regex = Grammar::Regex {
        regex: r"[0-9]{3}-[a-z]+".into(),
        param: "guided_regex".into(),
    };
    let mut constraint = c.compile(&regex).expect("compiles");
    let mask = walk(&mut constraint, "123-");
    assert!(mask.allows(u32::from(b'a')) && !mask.allows(u32::from(b'A')));
    constraint.record(u32::from(b'a'));
    // `123-a` is already in the language: EOS and more letters, nothing else.
    let mask = constraint.next_mask().expect("mask");
    assert!(mask.allows(EOS) && mask.allows(u32::from(b'c')));
    assert!(!mask.allows(u32::from(b'1')));
}

#[test]
fn a_lark_grammar_and_a_copy_are_independent() {
    let c = compiler();
    let grammar = Grammar::Lark {
        grammar: "start: \"a\" b\nb: \"x\" | \"y\"\n".into(),
        param: "guided_grammar".into(),
    };
    let mut one = c.compile(&grammar).expect("compiles");
    let mut two = one.clone();
    assert!(walk(&mut one, "ax").allows(EOS));
    assert!(walk(&mut two, "ay").allows(EOS));
}

#[test]
fn what_cannot_be_enforced_is_refused_naming_the_field() {
    let c = compiler();
    let unique = Grammar::JsonSchema {
        schema: json!({"type": "array", "uniqueItems": true}),
        param: "guided_json".into(),
    };
    match c.compile(&unique) {
        Err(GrammarError::Unsupported { param, message }) => {
            assert_eq!(param, "guided_json");
            assert!(message.contains("uniqueItems"), "{message}");
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    for bad in [
        Grammar::Regex {
            regex: "(".into(),
            param: "guided_regex".into(),
        },
        Grammar::Lark {
            grammar: "start: undefined_rule".into(),
            param: "guided_grammar".into(),
        },
        Grammar::Choice {
            choices: vec![],
            param: "guided_choice".into(),
        },
        Grammar::JsonSchema {
            schema: json!("not a schema"),
            param: "response_format".into(),
        },
    ] {
        let param = bad.param().to_string();
        assert!(
            matches!(c.compile(&bad), Err(GrammarError::Unsupported { param: p, .. }) if p == param),
            "{bad:?}"
        );
    }
}

#[test]
fn masks_send_every_disallowed_logit_to_minus_infinity() {
    let mask = TokenMask::allowing(70, &[1, 33, 69]);
    let mut logits = vec![0.5f32; 72];
    mask.apply(&mut logits);
    let kept: Vec<usize> = (0..72).filter(|&i| logits[i].is_finite()).collect();
    assert_eq!(kept, vec![1, 33, 69]);
}

#[test]
fn the_worker_returns_each_constraint_with_its_mask() {
    let c = compiler();
    let grammar = Grammar::Choice {
        choices: vec!["ab".into()],
        param: "guided_choice".into(),
    };
    let worker = MaskWorker::spawn().expect("worker");
    let mut jobs = Vec::new();
    for id in 0..3 {
        let mut constraint = c.compile(&grammar).expect("compiles");
        if id == 1 {
            constraint.record(u32::from(b'a'));
        }
        jobs.push(MaskJob { id, constraint });
    }
    worker.submit(jobs).expect("submit");
    let results = worker.collect().expect("collect");
    let firsts: Vec<(u64, bool)> = results
        .iter()
        .map(|(job, mask)| {
            (
                job.id,
                mask.as_ref().is_ok_and(|m| m.allows(u32::from(b'a'))),
            )
        })
        .collect();
    assert_eq!(firsts, vec![(0, true), (1, false), (2, true)]);
}

#[test]
fn behind_a_reasoning_gate_the_grammar_starts_after_the_end_marker() {
    let bytes = |text: &str| text.bytes().map(u32::from).collect::<Vec<_>>();
    let grammar = Grammar::JsonSchema {
        schema: json!({"type": "object", "properties": {"a": {"type": "integer"}},
            "required": ["a"], "additionalProperties": false}),
        param: "response_format".into(),
    };
    let gate = ReasoningGate::new(bytes("<think>"), bytes("</think>"), None);
    let mut constraint = compiler()
        .compile(&grammar)
        .expect("compiles")
        .after_reasoning(gate);
    // The opening is forced, one token at a time.
    for b in "<think>".bytes() {
        let mask = constraint.next_mask().expect("mask");
        assert_eq!(
            mask,
            TokenMask::allowing(SimVocab::new().size(), &[u32::from(b)])
        );
        constraint.record(u32::from(b));
    }
    // Reasoning is free: letters the object grammar would refuse, and EOS, are allowed.
    for b in "no JSON </thi here</think>".bytes() {
        let mask = constraint.next_mask().expect("mask");
        assert!(mask.allows(u32::from(b'x')) && mask.allows(EOS));
        constraint.record(u32::from(b));
    }
    let mask = constraint.next_mask().expect("mask");
    assert!(mask.allows(u32::from(b'{')));
    assert!(!mask.allows(u32::from(b'x')), "the grammar applies now");
    assert!(walk(&mut constraint, r#"{"a": 42}"#).allows(EOS));
}
