//! Each family's parser on outputs recorded from the families' own documentation, streamed one
//! character at a time and whole (the deltas must add up to the same message), the grammars
//! of forced calls, and the template inputs for templates with and without tool support.

use std::sync::Arc;

use serde_json::{Value, json};
use tokenscale_common::openai::{ChatMessage, Tool, ToolChoice};

use super::assemble::assemble;
use super::*;
use crate::backend::sim::SimVocab;
use crate::grammar::{Grammar, GrammarCompiler};
use crate::tokenizer::Tokenizer;

/// Qwen2.5's function-calling guide, two parallel calls.
const HERMES: &str = "<tool_call>\n{\"name\": \"get_current_temperature\", \"arguments\": {\"location\": \"San Francisco, CA, USA\", \"unit\": \"celsius\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"get_temperature_date\", \"arguments\": {\"location\": \"San Francisco, CA, USA\", \"date\": \"2024-10-01\", \"unit\": \"celsius\"}}\n</tool_call>";
/// Meta's Llama 3.1 model card (JSON-based tool calling), and its python_tag form.
const LLAMA3: &str = "{\"name\": \"get_current_conditions\", \"parameters\": {\"location\": \"San Francisco, CA\", \"unit\": \"Fahrenheit\"}}";
const LLAMA3_TAGGED: &str = "<|python_tag|>{\"name\": \"a\", \"parameters\": {}}; {\"name\": \"b\", \"parameters\": {\"x\": 1}}";
/// Mistral's function-calling docs (v3 tokenizer), and the v11 `[ARGS]` form.
const MISTRAL: &str = "[TOOL_CALLS][{\"name\": \"retrieve_payment_status\", \"arguments\": {\"transaction_id\": \"T1001\"}}]";
const MISTRAL_V11: &str = "[TOOL_CALLS]get_current_weather[ARGS]{\"location\": \"Paris, France\", \"format\": \"celsius\"}";

/// (content, [(name, arguments)]) built from deltas, pushing `text` in pieces of `step` chars.
fn run(parser: ToolParser, text: &str, step: usize) -> (String, Vec<(String, String)>) {
    let mut s = ToolCallStreamer::new(parser, true);
    let chars: Vec<char> = text.chars().collect();
    let mut outs = Vec::new();
    for piece in chars.chunks(step) {
        outs.push(s.push(&piece.iter().collect::<String>()));
    }
    outs.push(s.finish());
    assemble(outs)
}

fn assert_streams_like_whole(parser: ToolParser, text: &str) -> (String, Vec<(String, String)>) {
    let whole = run(parser, text, usize::MAX);
    for step in [1, 2, 7] {
        assert_eq!(
            run(parser, text, step),
            whole,
            "{parser:?} in pieces of {step}"
        );
    }
    whole
}

#[test]
fn hermes_calls_from_qwens_guide_parse_and_stream() {
    let (content, calls) = assert_streams_like_whole(ToolParser::Hermes, HERMES);
    assert_eq!(content, "");
    assert_eq!(calls.len(), 2);
    assert_eq!(calls[0].0, "get_current_temperature");
    let args: Value = serde_json::from_str(&calls[1].1).unwrap_or_default();
    assert_eq!(args["date"], "2024-10-01");
    let with_text = format!("Let me check.\n{HERMES}");
    let (content, calls) = assert_streams_like_whole(ToolParser::Hermes, &with_text);
    assert_eq!((content.as_str(), calls.len()), ("Let me check.\n", 2));
    let (content, calls) =
        assert_streams_like_whole(ToolParser::Hermes, "No tool <tool is needed.");
    assert_eq!(
        (content.as_str(), calls.len()),
        ("No tool <tool is needed.", 0)
    );
}

#[test]
fn llama3_json_calls_parse_and_other_json_stays_content() {
    let (content, calls) = assert_streams_like_whole(ToolParser::Llama3Json, LLAMA3);
    assert_eq!(content, "");
    assert_eq!(calls[0].0, "get_current_conditions");
    assert_eq!(
        serde_json::from_str::<Value>(&calls[0].1).unwrap_or_default(),
        json!({"location": "San Francisco, CA", "unit": "Fahrenheit"})
    );
    let (_, calls) = assert_streams_like_whole(ToolParser::Llama3Json, LLAMA3_TAGGED);
    assert_eq!(
        calls,
        vec![("a".into(), "{}".into()), ("b".into(), "{\"x\": 1}".into())]
    );
    let answer = "{\"city\": \"Paris\"}";
    assert_eq!(
        assert_streams_like_whole(ToolParser::Llama3Json, answer),
        (answer.to_string(), vec![])
    );
    assert_eq!(
        assert_streams_like_whole(ToolParser::Llama3Json, "Paris."),
        ("Paris.".to_string(), vec![])
    );
}

#[test]
fn mistral_calls_in_both_formats_parse_and_stream() {
    let (_, calls) = assert_streams_like_whole(ToolParser::Mistral, MISTRAL);
    assert_eq!(
        calls,
        vec![(
            "retrieve_payment_status".into(),
            "{\"transaction_id\": \"T1001\"}".into()
        )]
    );
    let (_, calls) = assert_streams_like_whole(ToolParser::Mistral, MISTRAL_V11);
    assert_eq!(calls[0].0, "get_current_weather");
    assert_eq!(
        serde_json::from_str::<Value>(&calls[0].1).unwrap_or_default()["format"],
        "celsius"
    );
}

#[test]
fn one_call_only_when_parallel_calls_are_off() {
    let mut s = ToolCallStreamer::new(ToolParser::Hermes, false);
    let out = s.push(HERMES);
    let names: Vec<_> = out
        .tool_calls
        .iter()
        .filter_map(|d| d.function.as_ref().and_then(|f| f.name.clone()))
        .collect();
    assert_eq!(names, vec!["get_current_temperature"]);
    assert!(s.first_call_done());
}

/// Every prefix of each family's example, finished there (a cut by `max_tokens`): the calls
/// returned are the ones that completed, each with arguments that parse, and no call is ever
/// streamed before it is whole.
#[test]
fn a_cut_call_is_never_returned_and_whole_calls_are() {
    for (parser, text, calls) in [
        (ToolParser::Hermes, HERMES, 2),
        (ToolParser::Llama3Json, LLAMA3_TAGGED, 2),
        (ToolParser::Mistral, MISTRAL, 1),
        (ToolParser::Mistral, MISTRAL_V11, 1),
    ] {
        let ends: Vec<usize> = (0..=text.len())
            .filter(|&i| text.is_char_boundary(i))
            .collect();
        let mut seen = 0;
        for &end in &ends {
            let (_, got) = assert_streams_like_whole(parser, &text[..end]);
            for (name, arguments) in &got {
                let args = serde_json::from_str::<Value>(arguments);
                assert!(args.is_ok(), "{parser:?} cut at {end}: {name}({arguments})");
            }
            assert!(
                got.len() >= seen,
                "{parser:?} cut at {end}: a call was taken back"
            );
            seen = got.len();
        }
        assert_eq!(seen, calls, "{parser:?}: the whole text");
    }
    // Streaming: the first call's deltas wait until its object closes.
    let first_end = HERMES.find("}}").map_or(0, |i| i + 2);
    let mut s = ToolCallStreamer::new(ToolParser::Hermes, true);
    assert!(s.push(&HERMES[..first_end - 1]).tool_calls.is_empty());
    assert!(!s.has_calls());
    let out = s.push(&HERMES[first_end - 1..first_end]);
    assert_eq!(out.tool_calls.len(), 2, "{out:?}");
    assert!(s.has_calls());
    // Cut inside the second call: only the first is returned.
    let cut = &HERMES[..HERMES.len() - 30];
    let (content, got) = assert_streams_like_whole(ToolParser::Hermes, cut);
    assert_eq!((content.as_str(), got.len()), ("", 1));
    assert_eq!(got[0].0, "get_current_temperature");
}

#[test]
fn forced_choices_make_one_call_unless_parallel_calls_are_asked_for() {
    let t = tools();
    let named: ToolChoice =
        serde_json::from_value(json!({"type": "function", "function": {"name": "now"}}))
            .unwrap_or(ToolChoice::Mode(String::new()));
    let required = ToolChoice::Mode("required".into());
    let auto = ToolChoice::Mode("auto".into());
    let parallel = |choice: &ToolChoice, asked: Option<bool>| {
        ToolSet::from_request(Some(&t), Some(choice), asked)
            .ok()
            .flatten()
            .map(|s| s.parallel)
    };
    assert_eq!(parallel(&named, None), Some(false));
    assert_eq!(parallel(&required, None), Some(false));
    assert_eq!(parallel(&auto, None), Some(true));
    assert_eq!(parallel(&named, Some(true)), Some(true));
    assert_eq!(parallel(&required, Some(true)), Some(true));
    assert_eq!(parallel(&auto, Some(false)), Some(false));
}

#[test]
fn the_parser_comes_from_the_flag_or_the_template() {
    assert_eq!(
        ToolParser::detect("{{ '[TOOL_CALLS]' }}"),
        ToolParser::Mistral
    );
    assert_eq!(ToolParser::detect("<|python_tag|>"), ToolParser::Llama3Json);
    assert_eq!(ToolParser::detect("<tool_call>"), ToolParser::Hermes);
    assert_eq!(ToolParser::detect("plain chatml"), ToolParser::Hermes);
    assert!(ToolParser::from_name("pythonic").is_err());
    assert_eq!(
        ToolParser::from_name("llama3_json").ok(),
        Some(ToolParser::Llama3Json)
    );
}

fn tools() -> Vec<Tool> {
    serde_json::from_value(json!([
        {"type": "function", "function": {"name": "get_weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"},
                "unit": {"enum": ["c", "f"]}}, "required": ["city", "unit"]}}},
        {"type": "function", "function": {"name": "now"}}
    ]))
    .unwrap_or_default()
}

#[test]
fn tool_fields_are_checked_and_named() {
    let t = tools();
    let named: ToolChoice =
        serde_json::from_value(json!({"type": "function", "function": {"name": "nope"}}))
            .unwrap_or(ToolChoice::Mode(String::new()));
    let err = ToolSet::from_request(Some(&t), Some(&named), None).err();
    assert_eq!(
        err.map(|e| e.param).as_deref(),
        Some("tool_choice.function.name")
    );
    let required = ToolChoice::Mode("required".into());
    assert!(ToolSet::from_request(None, Some(&required), None).is_err());
    let mut dup = t.clone();
    dup.push(t[0].clone());
    let err = ToolSet::from_request(Some(&dup), None, None).err();
    assert_eq!(
        err.map(|e| e.param).as_deref(),
        Some("tools[2].function.name")
    );
    let set = ToolSet::from_request(Some(&t), None, Some(false))
        .ok()
        .flatten();
    assert!(set.is_some_and(|s| s.mode == ToolMode::Auto && !s.parallel));
}

/// Walks `text` byte by byte through `constraint` (the sim vocabulary: one token per byte).
fn accepts(compiler: &GrammarCompiler, lark: &str, text: &str) -> bool {
    let grammar = Grammar::Lark {
        grammar: format!("start: tool_calls\n{lark}"),
        param: "tools".into(),
    };
    let mut c = compiler
        .compile(&grammar)
        .expect("the call grammar compiles");
    for b in text.bytes() {
        match c.next_mask() {
            Ok(mask) if mask.allows(u32::from(b)) => c.record(u32::from(b)),
            _ => return false,
        }
    }
    c.next_mask().is_ok_and(|m| m.allows(258))
}

#[test]
fn forced_call_grammars_accept_exactly_valid_calls() {
    let vocab = SimVocab::new();
    let tok = Tokenizer::from_spec(&vocab.tokenizer_spec()).expect("sim tokenizer");
    let compiler = GrammarCompiler::new(Arc::new(tok), vocab.size()).expect("compiler");
    let t = tools();
    let set = ToolSet::from_request(Some(&t), Some(&ToolChoice::Mode("required".into())), None)
        .ok()
        .flatten()
        .expect("tools");
    let quote = |s: &str| serde_json::to_string(s).unwrap_or_default();
    let hermes = ToolParser::Hermes.grammar(&set.callable(), true, &quote);
    let call = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\", \"unit\": \"c\"}}\n</tool_call>";
    assert!(accepts(&compiler, &hermes, call));
    assert!(accepts(
        &compiler,
        &hermes,
        &format!("{call}\n<tool_call>\n{{\"name\": \"now\", \"arguments\": {{}}}}\n</tool_call>")
    ));
    assert!(!accepts(
        &compiler,
        &hermes,
        "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}\n</tool_call>"
    ));
    assert!(!accepts(&compiler, &hermes, "Sure!"));
    let one = ToolParser::Hermes.grammar(&set.callable(), false, &quote);
    assert!(!accepts(&compiler, &one, &format!("{call}\n{call}")));
    let llama = ToolParser::Llama3Json.grammar(&set.callable(), true, &quote);
    assert!(accepts(
        &compiler,
        &llama,
        "{\"name\": \"now\", \"parameters\": {}}; {\"name\": \"now\", \"parameters\": {}}"
    ));
    let mistral = ToolParser::Mistral.grammar(&set.callable(), true, &quote);
    assert!(accepts(
        &compiler,
        &mistral,
        "[TOOL_CALLS][{\"name\": \"now\", \"arguments\": {}}]"
    ));
}

#[test]
fn templates_without_tools_get_instructions_calls_and_responses_as_text() {
    let t = tools();
    let set = ToolSet::from_request(Some(&t), None, None).ok().flatten();
    let history: Vec<ChatMessage> = serde_json::from_value(json!([
        {"role": "user", "content": "Weather in Oslo?"},
        {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function",
            "function": {"name": "get_weather", "arguments": "{\"city\": \"Oslo\", \"unit\": \"c\"}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "-3 C"},
        {"role": "tool", "tool_call_id": "call_2", "content": "snow"}
    ]))
    .unwrap_or_default();
    let inputs =
        template_inputs(&history, set.as_ref(), false, ToolParser::Hermes).expect("inputs");
    assert_eq!(inputs.tools, None);
    let roles: Vec<&str> = inputs
        .messages
        .iter()
        .filter_map(|m| m["role"].as_str())
        .collect();
    assert_eq!(roles, ["system", "user", "assistant", "user"]);
    assert!(
        inputs.messages[0]["content"]
            .as_str()
            .unwrap_or("")
            .contains("\"get_weather\"")
    );
    assert_eq!(
        inputs.messages[2]["content"],
        "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\", \"unit\": \"c\"}}\n</tool_call>"
    );
    assert_eq!(
        inputs.messages[3]["content"],
        "<tool_response>\n-3 C\n</tool_response>\n<tool_response>\nsnow\n</tool_response>"
    );
    let native = template_inputs(&history, set.as_ref(), true, ToolParser::Hermes).expect("inputs");
    assert_eq!(
        native.messages[1]["tool_calls"][0]["function"]["arguments"]["city"],
        "Oslo"
    );
    assert_eq!(
        native.tools.map(|t| t[1]["function"]["name"].clone()),
        Some(json!("now"))
    );
    let image: Vec<ChatMessage> = serde_json::from_value(json!([{"role": "user", "content": [
        {"type": "text", "text": "what is this?"}, {"type": "image_url"}]}]))
    .unwrap_or_default();
    let err = template_inputs(&image, None, false, ToolParser::Hermes).err();
    assert_eq!(
        err.map(|e| e.param).as_deref(),
        Some("messages[0].content[1].type")
    );
}
