//! Both parsers on outputs shaped like the families' own, pushed whole and in pieces of 1, 2
//! and 7 characters (the deltas must add up to the same split), and the template detection on
//! the shapes of the families' templates.

use super::*;

/// (reasoning, content, reasoning tokens) from deltas, pushing `text` in pieces of `step`
/// chars, each piece one token.
fn run(parser: ReasoningParser, text: &str, step: usize) -> (String, String, usize) {
    let mut s = ReasoningStreamer::new(parser);
    let chars: Vec<char> = text.chars().collect();
    let (mut reasoning, mut content) = (String::new(), String::new());
    let mut add = |out: ReasoningSplit| {
        reasoning.push_str(&out.reasoning);
        content.push_str(&out.content);
    };
    for piece in chars.chunks(step.max(1)) {
        s.count_token();
        add(s.push(&piece.iter().collect::<String>()));
    }
    add(s.finish());
    (reasoning, content, s.reasoning_tokens())
}

/// The split, checked to be the same whatever the chunking.
fn split(parser: ReasoningParser, text: &str) -> (String, String) {
    let (reasoning, content, _) = run(parser, text, usize::MAX);
    for step in [1, 2, 7] {
        let (r, c, _) = run(parser, text, step);
        assert_eq!(
            (r.as_str(), c.as_str()),
            (reasoning.as_str(), content.as_str()),
            "{parser:?} {text:?} in pieces of {step}"
        );
    }
    (reasoning, content)
}

fn pair(reasoning: &str, content: &str) -> (String, String) {
    (reasoning.to_string(), content.to_string())
}

/// Each case: (output, reasoning, content, what it shows).
fn check(parser: ReasoningParser, cases: &[(&str, &str, &str, &str)]) {
    for (text, reasoning, content, shows) in cases {
        assert_eq!(
            split(parser, text),
            pair(reasoning, content),
            "{parser:?}: {shows}"
        );
    }
}

const QWEN3: ReasoningParser = ReasoningParser::Qwen3;
const R1: ReasoningParser = ReasoningParser::DeepSeekR1;

#[test]
fn qwen3_splits_its_think_block_and_leaves_unmarked_output_as_content() {
    check(
        QWEN3,
        &[
            (
                "<think>\nThe user says hi.\n</think>\n\nHello!",
                "\nThe user says hi.\n",
                "\n\nHello!",
                "a think block",
            ),
            ("Hello!", "", "Hello!", "no markers"),
            (
                "<think>\n\n</think>\n\nHi",
                "\n\n",
                "\n\nHi",
                "an empty think block",
            ),
            ("<think></think>Hi", "", "Hi", "empty reasoning"),
            (
                "a </think> b",
                "",
                "a </think> b",
                "no opening: all content",
            ),
            ("<thin", "", "<thin", "a cut opening"),
            ("", "", "", "no output"),
        ],
    );
}

#[test]
fn r1_starts_inside_the_reasoning() {
    check(
        R1,
        &[
            (
                "Let me think.</think>\n\nThe answer is 4.",
                "Let me think.",
                "\n\nThe answer is 4.",
                "inside from the start",
            ),
            (
                "<think>\nWhy?</think>Yes",
                "\nWhy?",
                "Yes",
                "a leading <think> is dropped",
            ),
            (
                "no close at all",
                "no close at all",
                "",
                "without </think> all is reasoning",
            ),
            ("</think>answer", "", "answer", "empty reasoning"),
            ("x </thin", "x </thin", "", "a cut closing"),
            (
                "</think>a</think>b",
                "",
                "a</think>b",
                "only the first </think> closes",
            ),
        ],
    );
}

#[test]
fn markers_split_across_deltas_are_held_until_whole() {
    let mut s = ReasoningStreamer::new(R1);
    assert_eq!(s.push("why </th").reasoning, "why ");
    let out = s.push("ink>so");
    assert_eq!(pair(&out.reasoning, &out.content), pair("", "so"));
    let mut s = ReasoningStreamer::new(QWEN3);
    assert_eq!(
        s.push("<th"),
        ReasoningSplit::default(),
        "maybe <think>: held"
    );
    assert_eq!(s.push("ink>r").reasoning, "r");
}

#[test]
fn reasoning_tokens_are_those_inside_the_reasoning() {
    // One token per character: "<think>ab" and "</think>" hold 9 and 8 of them.
    assert_eq!(run(QWEN3, "<think>ab</think>cd", 1).2, 7 + 2 + 8);
    assert_eq!(run(QWEN3, "plain", 1).2, 0);
    assert_eq!(run(R1, "no close", 1).2, 8, "all of an unclosed R1 output");
    assert_eq!(run(R1, "ab</think>cd", 1).2, 2 + 8);
}

#[test]
fn detection_reads_the_template() {
    let qwen3 = "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}\
        {%- if enable_thinking is defined and enable_thinking is false %}\
        {{- '<think>\\n\\n</think>\\n\\n' }}{%- endif %}{%- endif %}\
        {% set c = m.content.split('</think>')[-1] %}";
    let r1 = "{% set c = m.content.split('</think>')[-1] %}\
        {% if add_generation_prompt and not ns.is_tool %}{{'<｜Assistant｜><think>\\n'}}{% endif %}";
    assert_eq!(ReasoningParser::detect(qwen3), Some(QWEN3));
    assert_eq!(ReasoningParser::detect(r1), Some(R1));
    assert_eq!(
        ReasoningParser::detect(crate::tokenizer::FALLBACK_CHATML),
        None
    );
    assert_eq!(ReasoningParser::from_name("none"), Ok(None));
    assert_eq!(ReasoningParser::from_name("deepseek_r1"), Ok(Some(R1)));
    let err = ReasoningParser::from_name("qwen").expect_err("no parser is called qwen");
    assert!(err.to_string().contains("unknown parser \"qwen\""), "{err}");
}
