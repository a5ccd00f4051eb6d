//! The tokenizer against the real SmolLM2 vocabulary (golden prompt ids, chat template,
//! incremental detokenisation) and against small hand-made vocabularies (pre-tokenizers,
//! errors). The model is fetched by `ensure_model` when it is not cached.

// In tests an unwrap is an assertion: a failure should stop the test loudly.
#![allow(clippy::unwrap_used)]

use std::sync::OnceLock;

use tokenscale_engine::gguf::GgufFile;
use tokenscale_engine::tokenizer::{
    ChatMessage, EncodeOptions, Error, IncrementalDecoder, TokenType, Tokenizer, TokenizerSpec,
};

const FIXTURE: &str = include_str!("fixtures/smollm2-135m-instruct-q4_1.json");

fn smollm() -> &'static Tokenizer {
    static TOKENIZER: OnceLock<Tokenizer> = OnceLock::new();
    TOKENIZER.get_or_init(|| {
        let path = tokenscale_engine::fetch::ensure_model("smollm2-135m").expect("model available");
        let file = GgufFile::open(&path).expect("model file parses");
        Tokenizer::from_gguf(&file).expect("tokenizer builds")
    })
}

fn fixture_cases() -> Vec<serde_json::Value> {
    let fixture: serde_json::Value = serde_json::from_str(FIXTURE).expect("fixture is JSON");
    fixture["cases"].as_array().expect("cases").clone()
}

fn ids(value: &serde_json::Value) -> Vec<u32> {
    value
        .as_array()
        .expect("id list")
        .iter()
        .map(|v| v.as_u64().expect("id") as u32)
        .collect()
}

#[test]
fn golden_prompt_ids_of_every_fixture_case() {
    let tokenizer = smollm();
    let cases = fixture_cases();
    assert_eq!(cases.len(), 5);
    for case in &cases {
        let expected = ids(&case["prompt_ids"]);
        let got = match &case["prompt"] {
            serde_json::Value::String(text) => tokenizer.encode(text, true).unwrap(),
            prompt => {
                let messages: Vec<ChatMessage> =
                    serde_json::from_value(prompt["messages"].clone()).unwrap();
                let text = tokenizer.apply_chat_template(&messages, true).unwrap();
                assert_eq!(text, case["text"].as_str().unwrap(), "rendered chat");
                tokenizer.encode_chat(&messages, true).unwrap()
            }
        };
        assert_eq!(got, expected, "prompt {}", case["prompt"]);
        assert_eq!(
            tokenizer.decode(&got, false).unwrap(),
            case["text"].as_str().unwrap()
        );
    }
}

#[test]
fn golden_greedy_text_decodes_from_the_greedy_ids() {
    for case in fixture_cases() {
        let text = smollm().decode(&ids(&case["greedy_ids"]), false).unwrap();
        assert_eq!(text, case["greedy_text"].as_str().unwrap());
    }
}

#[test]
fn smollm_metadata_special_tokens() {
    let t = smollm();
    assert_eq!(t.vocab_size(), 49152);
    assert!(!t.adds_bos(), "SmolLM2 says add_bos_token = false");
    assert_eq!(t.bos_token_id(), Some(1));
    assert!(t.eos_token_ids().contains(&2), "<|im_end|> is EOS");
    assert!(
        t.eos_token_ids().contains(&0),
        "<|endoftext|> ends generation too"
    );
    assert!(t.is_special(1) && !t.is_special(504));
    assert!(!t.chat_template().is_fallback());
}

#[test]
fn control_tokens_parse_unless_asked_not_to() {
    let t = smollm();
    let parsed = t.encode("<|im_start|>user", false).unwrap();
    assert_eq!(parsed[0], 1);
    let literal = t
        .encode_with(
            "<|im_start|>user",
            EncodeOptions {
                add_bos: false,
                parse_special: false,
            },
        )
        .unwrap();
    assert!(!literal.contains(&1) && literal.len() > 2, "{literal:?}");
    assert_eq!(t.decode(&literal, true).unwrap(), "<|im_start|>user");
    assert_eq!(
        t.decode(&parsed, true).unwrap(),
        "user",
        "skip_special drops control tokens"
    );
    let with_bos = t
        .encode_with(
            "hi",
            EncodeOptions {
                add_bos: true,
                parse_special: true,
            },
        )
        .unwrap();
    assert_eq!(with_bos[0], 1);
}

#[test]
fn text_round_trips_through_encode_and_decode() {
    let t = smollm();
    for text in [
        "Hello, world!",
        "  leading spaces\n\ttabs",
        "12345 + 678 = 13023",
        "日本語のテキスト 🦀🚀 café",
        "",
    ] {
        let ids = t.encode(text, false).unwrap();
        assert_eq!(t.decode(&ids, false).unwrap(), text);
    }
    let digits = t.encode("2024", false).unwrap();
    assert_eq!(digits.len(), 4, "smollm splits every digit: {digits:?}");
}

#[test]
fn incremental_decoding_never_splits_a_character() {
    let t = smollm();
    let text = "Crab 🦀, 東京タワー, naïve — done";
    let ids = t.encode(text, false).unwrap();
    let mut decoder = IncrementalDecoder::new(true);
    let mut deltas = Vec::new();
    let mut held_once = false;
    for &id in &ids {
        deltas.push(decoder.push(t, id).unwrap());
        held_once |= decoder.has_pending();
    }
    deltas.push(decoder.finish());
    assert!(
        held_once,
        "some character spans tokens in this text: {ids:?}"
    );
    assert_eq!(deltas.concat(), text);
    // A 4-byte emoji split over tokens comes out whole in a single delta.
    assert!(deltas.iter().any(|d| d.contains('🦀')));
    let crab = t.encode("🦀", false).unwrap();
    assert!(
        crab.len() > 1,
        "the crab spans several byte-level tokens: {crab:?}"
    );
    let mut decoder = IncrementalDecoder::new(false);
    assert_eq!(decoder.push(t, crab[0]).unwrap(), "");
    let rest: String = crab[1..]
        .iter()
        .map(|&id| decoder.push(t, id).unwrap())
        .collect();
    assert_eq!(rest, "🦀");
}

#[test]
fn incremental_decoding_of_specials_unknown_ids_and_broken_bytes() {
    let t = smollm();
    let mut keep = IncrementalDecoder::new(false);
    let mut skip = IncrementalDecoder::new(true);
    assert_eq!(keep.push(t, 2).unwrap(), "<|im_end|>");
    assert_eq!(skip.push(t, 2).unwrap(), "");
    assert!(matches!(
        keep.push(t, 49152),
        Err(Error::UnknownTokenId { id: 49152, .. })
    ));
    // The first byte of the crab, then plain text: the orphan byte cannot complete → U+FFFD.
    let crab = t.encode("🦀", false).unwrap();
    let space_a = t.encode(" a", false).unwrap();
    assert_eq!(keep.push(t, crab[0]).unwrap(), "");
    assert_eq!(keep.push(t, space_a[0]).unwrap(), "\u{FFFD} a");
    assert_eq!(keep.push(t, crab[0]).unwrap(), "");
    assert_eq!(
        keep.finish(),
        "\u{FFFD}",
        "unfinished bytes are flushed at the end"
    );
}

/// A byte-level vocabulary: the 256 byte characters, then `extra` merged tokens.
fn tiny_spec(pre: &str, merges: &[(&str, &str)]) -> TokenizerSpec {
    let mut tokens: Vec<String> = byte_alphabet();
    for (a, b) in merges {
        tokens.push(format!("{a}{b}"));
    }
    tokens.push("<|eot|>".into());
    let mut token_types = vec![TokenType::Normal; tokens.len()];
    *token_types.last_mut().unwrap() = TokenType::Control;
    TokenizerSpec {
        model: "gpt2".into(),
        pre: Some(pre.into()),
        merges: merges.iter().map(|(a, b)| format!("{a} {b}")).collect(),
        eos_token_id: Some(tokens.len() as u32 - 1),
        tokens,
        token_types,
        ..TokenizerSpec::default()
    }
}

fn byte_alphabet() -> Vec<String> {
    // Same construction as GPT-2's bytes_to_unicode.
    let printable =
        |b: u32| (33..=126).contains(&b) || (161..=172).contains(&b) || (174..=255).contains(&b);
    let mut shifted = 0;
    (0..256u32)
        .map(|b| {
            let c = if printable(b) {
                b
            } else {
                shifted += 1;
                255 + shifted
            };
            char::from_u32(c).unwrap().to_string()
        })
        .collect()
}

fn pieces(t: &Tokenizer, text: &str) -> Vec<String> {
    t.encode(text, false)
        .unwrap()
        .iter()
        .map(|&id| t.decode(&[id], false).unwrap())
        .collect()
}

#[test]
fn pre_tokenizers_split_digits_as_their_models_do() {
    let merges = [("1", "2"), ("12", "3"), ("h", "i"), ("Ġ", "hi")];
    let default = Tokenizer::from_spec(&tiny_spec("default", &merges)).unwrap();
    let smollm = Tokenizer::from_spec(&tiny_spec("smollm", &merges)).unwrap();
    let llama3 = Tokenizer::from_spec(&tiny_spec("llama-bpe", &merges)).unwrap();
    assert_eq!(pieces(&default, "1234 hi"), ["123", "4", " hi"]);
    assert_eq!(pieces(&smollm, "1234 hi"), ["1", "2", "3", "4", " hi"]);
    // Llama 3 groups digits by three and keeps the space apart from letters' preceding space.
    assert_eq!(pieces(&llama3, "1234 hi"), ["123", "4", " hi"]);
    assert_eq!(pieces(&llama3, "12312"), ["123", "12"]);
    assert!(
        !llama3.adds_bos(),
        "no BOS token in this vocabulary, so none is added"
    );
    let eot = smollm.vocab_size() as u32 - 1;
    assert_eq!(
        smollm.encode("hi<|eot|>", false).unwrap().last(),
        Some(&eot)
    );
    assert_eq!(smollm.eos_token_ids(), [eot]);
}

#[test]
fn unsupported_or_broken_vocabularies_are_clear_errors() {
    let mut spec = tiny_spec("smollm", &[]);
    spec.model = "bert".into();
    let err = Tokenizer::from_spec(&spec).unwrap_err();
    assert!(
        matches!(err, Error::UnsupportedModel { .. }) && err.to_string().contains("\"bert\""),
        "{err}"
    );
    let err = Tokenizer::from_spec(&tiny_spec("klingon", &[])).unwrap_err();
    assert!(
        err.to_string().contains("\"klingon\"") && err.to_string().contains("smollm"),
        "{err}"
    );
    let mut spec = tiny_spec("smollm", &[("x", "y")]);
    spec.merges.push("nospace".into());
    assert!(matches!(
        Tokenizer::from_spec(&spec),
        Err(Error::InvalidVocab(_))
    ));
    let mut spec = tiny_spec("smollm", &[]);
    spec.merges.push("q zz".into());
    let err = Tokenizer::from_spec(&spec).unwrap_err();
    assert!(
        err.to_string().contains("zz"),
        "a merge outside the vocabulary is named: {err}"
    );
    let mut spec = tiny_spec("smollm", &[]);
    spec.bos_token_id = Some(100_000);
    assert!(
        Tokenizer::from_spec(&spec)
            .unwrap_err()
            .to_string()
            .contains("bos_token_id")
    );
    let mut spec = tiny_spec("smollm", &[]);
    spec.token_types.pop();
    assert!(matches!(
        Tokenizer::from_spec(&spec),
        Err(Error::InvalidVocab(_))
    ));
}

#[test]
fn chat_templates_fallback_errors_and_raise_exception() {
    let mut spec = tiny_spec("smollm", &[]);
    let messages = [ChatMessage::new("user", "hi")];
    let chatml = Tokenizer::from_spec(&spec).unwrap();
    assert!(chatml.chat_template().is_fallback());
    assert_eq!(
        chatml.apply_chat_template(&messages, true).unwrap(),
        "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    );
    assert_eq!(
        chatml.apply_chat_template(&messages, false).unwrap(),
        "<|im_start|>user\nhi<|im_end|>\n"
    );

    spec.chat_template =
        Some("{% for m in messages %}{{ m.content.upper() }}{{ eos_token }}{% endfor %}".into());
    let upper = Tokenizer::from_spec(&spec).unwrap();
    assert_eq!(
        upper.apply_chat_template(&messages, true).unwrap(),
        "HI<|eot|>",
        "pycompat methods work"
    );

    spec.chat_template = Some(
        "{% if messages[0].role != 'system' %}{{ raise_exception('system first') }}{% endif %}"
            .into(),
    );
    let strict = Tokenizer::from_spec(&spec).unwrap();
    let err = strict.apply_chat_template(&messages, true).unwrap_err();
    assert!(
        matches!(err, Error::ChatTemplate(_)) && err.to_string().contains("system first"),
        "{err}"
    );

    spec.chat_template = Some("{% for m in messages %}{{ m.content }".into());
    let broken = Tokenizer::from_spec(&spec).expect("a broken template does not stop completions");
    assert!(broken.chat_template().compile_error().is_some());
    let err = broken.apply_chat_template(&messages, true).unwrap_err();
    assert!(err.to_string().starts_with("chat template:"), "{err}");
}

fn gguf_with(spec: &TokenizerSpec, skip_key: &str) -> GgufFile {
    use tokenscale_engine::gguf::{GgufBuilder, Value, ValueType};
    let strings = |items: &[String]| {
        Value::Array(
            ValueType::String,
            items.iter().map(|s| Value::String(s.clone())).collect(),
        )
    };
    let types = spec
        .token_types
        .iter()
        .map(|t| Value::I32(if *t == TokenType::Control { 3 } else { 1 }))
        .collect();
    let entries = [
        ("tokenizer.ggml.model", Value::String(spec.model.clone())),
        (
            "tokenizer.ggml.pre",
            Value::String(spec.pre.clone().unwrap()),
        ),
        ("tokenizer.ggml.tokens", strings(&spec.tokens)),
        (
            "tokenizer.ggml.token_type",
            Value::Array(ValueType::I32, types),
        ),
        ("tokenizer.ggml.merges", strings(&spec.merges)),
        (
            "tokenizer.ggml.eos_token_id",
            Value::U32(spec.eos_token_id.unwrap()),
        ),
        ("tokenizer.ggml.add_bos_token", Value::Bool(false)),
        (
            "tokenizer.chat_template",
            Value::String("{{ messages[0].content }}".into()),
        ),
    ];
    let builder = entries
        .into_iter()
        .filter(|(k, _)| *k != skip_key)
        .fold(GgufBuilder::new(), |b, (k, v)| b.kv(k, v));
    GgufFile::from_vec(builder.build()).unwrap()
}

#[test]
fn from_gguf_reads_the_tokenizer_keys_and_names_a_missing_one() {
    let spec = tiny_spec("smollm", &[("h", "i")]);
    let tokenizer = Tokenizer::from_gguf(&gguf_with(&spec, "")).unwrap();
    assert_eq!(pieces(&tokenizer, "hi12"), ["hi", "1", "2"]);
    assert_eq!(
        tokenizer
            .apply_chat_template(&[ChatMessage::new("user", "x")], true)
            .unwrap(),
        "x"
    );
    assert_eq!(
        TokenizerSpec::from_gguf(&gguf_with(&spec, "")).unwrap(),
        spec_as_read(spec.clone())
    );
    let err = Tokenizer::from_gguf(&gguf_with(&spec, "tokenizer.ggml.model")).unwrap_err();
    assert!(err.to_string().contains("tokenizer.ggml.model"), "{err}");
    let err = Tokenizer::from_gguf(&gguf_with(&spec, "tokenizer.ggml.tokens")).unwrap_err();
    assert!(err.to_string().contains("tokenizer.ggml.tokens"), "{err}");
}

/// `tiny_spec` plus what `gguf_with` writes on top of it.
fn spec_as_read(mut spec: TokenizerSpec) -> TokenizerSpec {
    spec.add_bos = Some(false);
    spec.chat_template = Some("{{ messages[0].content }}".into());
    spec
}

/// A SentencePiece vocabulary: `<unk> <s> </s>`, 256 byte tokens, then scored pieces.
fn spm_spec() -> TokenizerSpec {
    let mut tokens: Vec<String> = vec!["<unk>".into(), "<s>".into(), "</s>".into()];
    let mut token_types = vec![TokenType::Unknown, TokenType::Control, TokenType::Control];
    tokens.extend((0..=255u8).map(|b| format!("<0x{b:02X}>")));
    token_types.extend([TokenType::Byte; 256]);
    let pieces = [
        ("▁", -1.0),
        ("h", -2.0),
        ("e", -2.0),
        ("l", -2.0),
        ("o", -2.0),
        ("ll", -3.0),
        ("he", -4.0),
    ];
    let pieces = pieces.into_iter().chain([
        ("llo", -5.0),
        ("hello", -6.0),
        ("▁hello", -7.0),
        ("▁w", -8.0),
    ]);
    let mut scores = vec![0.0; tokens.len()];
    for (piece, score) in pieces {
        tokens.push(piece.into());
        token_types.push(TokenType::Normal);
        scores.push(score);
    }
    TokenizerSpec {
        model: "llama".into(),
        tokens,
        token_types,
        scores,
        bos_token_id: Some(1),
        eos_token_id: Some(2),
        ..TokenizerSpec::default()
    }
}

#[test]
fn sentencepiece_merges_by_score_with_byte_fallback() {
    let spec = spm_spec();
    let t = Tokenizer::from_spec(&spec).unwrap();
    let id = |piece: &str| spec.tokens.iter().position(|t| t == piece).unwrap() as u32;
    let byte = |b: u8| 3 + u32::from(b);
    assert!(
        t.adds_bos(),
        "llama adds BOS unless the file says otherwise"
    );
    assert_eq!(t.encode("hello", true).unwrap(), [1, id("▁hello")]);
    // 'i' is not a piece: it falls back to its byte; "▁h" is not a piece either.
    assert_eq!(
        t.encode("hi", false).unwrap(),
        [id("▁"), id("h"), byte(b'i')]
    );
    assert_eq!(
        t.encode("hello hello", false).unwrap(),
        [id("▁hello"), id("▁hello")]
    );
    assert_eq!(t.encode("<s>hello", false).unwrap(), [1, id("▁hello")]);
    let crab = t.encode("🦀", false).unwrap();
    assert_eq!(
        crab,
        [id("▁"), byte(0xF0), byte(0x9F), byte(0xA6), byte(0x80)]
    );
    for text in ["hello hello", "hi 🦀 wow", "  two spaces"] {
        assert_eq!(
            t.decode(&t.encode(text, true).unwrap(), true).unwrap(),
            text,
            "decode drops the prefix space"
        );
    }
    // A continuation keeps its leading space; the crab's bytes are held until complete.
    let mut decoder = IncrementalDecoder::new(true);
    let deltas: Vec<String> = crab.iter().map(|&i| decoder.push(&t, i).unwrap()).collect();
    assert_eq!(deltas, [" ", "", "", "", "🦀"]);
    let mut no_scores = spec.clone();
    no_scores.scores.clear();
    let err = Tokenizer::from_spec(&no_scores).unwrap_err();
    assert!(err.to_string().contains("tokenizer.ggml.scores"), "{err}");
}

#[test]
fn a_tokenizer_is_shared_across_threads() {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<Tokenizer>();
    send_sync::<IncrementalDecoder>();
}
