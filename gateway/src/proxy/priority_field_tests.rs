//! Tests of the `priority` member rewrite: exact bytes on the cases that matter, and over
//! generated bodies, JSON equal to the client's with `priority` set and nothing else changed.

use serde_json::{Map, Value};
use tokenscale_common::engines::PriorityOrder;

use super::*;

fn set(body: &str, value: i64) -> String {
    with_priority(body.as_bytes(), value).map_or(body.to_string(), |b| {
        String::from_utf8(b.to_vec()).expect("utf-8")
    })
}

#[test]
fn the_member_is_inserted_or_its_value_replaced_and_the_rest_keeps_its_bytes() {
    assert_eq!(
        set(r#" {"model":"m","x":8.888888888888889e86}"#, 100),
        r#" {"priority":100,"model":"m","x":8.888888888888889e86}"#
    );
    assert_eq!(
        set(r#"{"model":"m", "priority" : "batch" ,"n":1}"#, 0),
        r#"{"model":"m", "priority" : 0 ,"n":1}"#
    );
    // The last of duplicates is the one engines read.
    assert_eq!(
        set(r#"{"priority":5,"priority":null}"#, 100),
        r#"{"priority":5,"priority":100}"#
    );
    assert_eq!(set(" { } ", 0), r#" {"priority":0 } "#);
    // Nested members are not the request's.
    assert_eq!(
        set(r#"{"m":{"priority":1}}"#, 0),
        r#"{"priority":0,"m":{"priority":1}}"#
    );
}

#[test]
fn a_body_already_so_or_unreadable_is_left_alone() {
    assert_eq!(with_priority(br#"{"priority":0}"#, 0), None);
    assert_eq!(with_priority(br#"{"pri\u006frity":1}"#, 0), None);
    assert_eq!(with_priority(b"[1]", 0), None);
}

#[test]
fn only_an_engine_that_takes_the_field_gets_it() {
    let body = Bytes::from_static(br#"{"model":"m","prompt":"x"}"#);
    let vllm = (
        EngineKind::Vllm,
        EnginePriority::Field {
            order: PriorityOrder::LowerFirst,
            preempts: true,
        },
    );
    let path = "/v1/completions";
    let batch = engine_priority_body(&body, path, Priority::Batch, vllm, None);
    assert_eq!(
        batch.as_deref(),
        Some(&br#"{"priority":100,"model":"m","prompt":"x"}"#[..])
    );
    let interactive = engine_priority_body(&body, path, Priority::Interactive, vllm, None);
    assert!(interactive.is_some_and(|b| b.starts_with(br#"{"priority":0,"#)));
    // A replica whose metrics name another engine, a path that generates nothing, and an
    // engine in arrival order (an FCFS vLLM refuses a non-zero priority) get the body as is.
    let scraped = Some(EngineKind::Tokenscale);
    assert_eq!(
        engine_priority_body(&body, path, Priority::Batch, vllm, scraped),
        None
    );
    assert_eq!(
        engine_priority_body(&body, "/v1/models", Priority::Batch, vllm, None),
        None
    );
    let fcfs = (EngineKind::Vllm, EnginePriority::PacingOnly);
    assert_eq!(
        engine_priority_body(&body, path, Priority::Batch, fcfs, None),
        None
    );
    let ours = (EngineKind::Tokenscale, EnginePriority::Header);
    assert_eq!(
        engine_priority_body(&body, path, Priority::Batch, ours, None),
        None
    );
    // A class name in the body is the gateway's word: an engine in arrival order does not
    // get it (it would refuse a string), ours reads it, and an integer stays the client's.
    let named = Bytes::from_static(br#"{"model":"m","priority":"batch","prompt":"x"}"#);
    let stripped = engine_priority_body(&named, path, Priority::Batch, fcfs, None);
    assert_eq!(
        stripped.as_deref(),
        Some(&br#"{"model":"m","prompt":"x"}"#[..])
    );
    assert_eq!(
        engine_priority_body(&named, path, Priority::Batch, ours, None),
        None
    );
    let integer = Bytes::from_static(br#"{"model":"m","priority":0}"#);
    assert_eq!(
        engine_priority_body(&integer, path, Priority::Batch, fcfs, None),
        None
    );
}

/// A small deterministic generator (xorshift), so the property runs in every `cargo test`.
struct Gen(u64);

impl Gen {
    fn next(&mut self, below: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % below
    }

    fn space(&mut self) -> &'static str {
        [" ", "", "\n  ", "\t"][self.next(4) as usize]
    }

    fn value(&mut self, depth: u32) -> String {
        let pick = if depth > 2 {
            self.next(5)
        } else {
            self.next(7)
        };
        match pick {
            0 => "null".into(),
            1 => [
                "1e300",
                "-0.0",
                "8.888888888888889e86",
                "12345678901234567890",
            ][self.next(4) as usize]
                .into(),
            2 => format!("{}", self.next(1000)),
            3 => [r#""a,}""#, r#""\"priority\":1""#, r#""é\u00e9""#][self.next(3) as usize].into(),
            4 => "true".into(),
            5 => {
                let items: Vec<String> = (0..self.next(3)).map(|_| self.value(depth + 1)).collect();
                format!("[{}]", items.join(","))
            }
            _ => self.object(depth + 1),
        }
    }

    fn object(&mut self, depth: u32) -> String {
        let keys = ["model", "priority", "prompt", "n", "x"];
        let members: Vec<String> = (0..self.next(5))
            .map(|_| {
                let key = keys[self.next(keys.len() as u64) as usize];
                let (a, b) = (self.space(), self.space());
                format!("{a}\"{key}\"{b}:{}{}", self.space(), self.value(depth))
            })
            .collect();
        format!("{}{{{}{}}}", self.space(), members.join(","), self.space())
    }
}

#[test]
fn over_generated_bodies_only_priority_changes() {
    let mut generator = Gen(0x9e37_79b9_7f4a_7c15);
    for _ in 0..5000 {
        let body = generator.object(0);
        let value = [0, 100][generator.next(2) as usize];
        let out = set(&body, value);
        let Ok(Value::Object(mut expected)) = serde_json::from_str::<Value>(&body) else {
            panic!("generated body is not an object: {body}");
        };
        expected.insert("priority".into(), Value::from(value));
        let got: Map<String, Value> =
            serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {body} -> {out}"));
        assert_eq!(got, expected, "{body} -> {out}");
    }
}
