//! `config.json` files as the real checkpoints ship them (abridged to the keys that matter).

#![allow(clippy::unwrap_used)]

use super::config::parse_config;
use crate::model::config::RopeLayout;
use crate::model::rope::RopeScaling;

const LLAMA_31_8B: &str = r#"{
  "architectures": ["LlamaForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
  "bos_token_id": 128000, "eos_token_id": [128001, 128008, 128009], "hidden_act": "silu",
  "hidden_size": 4096, "initializer_range": 0.02, "intermediate_size": 14336,
  "max_position_embeddings": 131072, "mlp_bias": false, "model_type": "llama",
  "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8,
  "pretraining_tp": 1, "rms_norm_eps": 1e-05,
  "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                   "original_max_position_embeddings": 8192, "rope_type": "llama3"},
  "rope_theta": 500000.0, "tie_word_embeddings": false, "torch_dtype": "bfloat16",
  "transformers_version": "4.43.0.dev0", "use_cache": true, "vocab_size": 128256}"#;

const QWEN3_8B: &str = r#"{
  "architectures": ["Qwen3ForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
  "bos_token_id": 151643, "eos_token_id": 151645, "head_dim": 128, "hidden_act": "silu",
  "hidden_size": 4096, "initializer_range": 0.02, "intermediate_size": 12288,
  "max_position_embeddings": 40960, "max_window_layers": 36, "model_type": "qwen3",
  "num_attention_heads": 32, "num_hidden_layers": 36, "num_key_value_heads": 8,
  "rms_norm_eps": 1e-06, "rope_scaling": null, "rope_theta": 1000000,
  "sliding_window": null, "tie_word_embeddings": false, "torch_dtype": "bfloat16",
  "use_cache": true, "use_sliding_window": false, "vocab_size": 151936}"#;

fn with(base: &str, key: &str, value: &str) -> String {
    let mut v: serde_json::Value = serde_json::from_str(base).unwrap();
    v[key] = serde_json::from_str(value).unwrap();
    v.to_string()
}

#[test]
fn llama_31_reads_with_its_llama3_rope_scaling() {
    let c = parse_config(LLAMA_31_8B, "config.json").unwrap();
    assert_eq!(c.architecture, "llama");
    assert_eq!((c.num_layers, c.hidden_size, c.ffn_size), (32, 4096, 14336));
    assert_eq!((c.num_heads, c.num_kv_heads, c.head_dim), (32, 8, 128));
    assert_eq!((c.vocab_size, c.context_length), (128_256, 131_072));
    assert_eq!(c.rope_layout, RopeLayout::HalfSplit);
    assert_eq!(
        c.rope_scaling,
        RopeScaling::Llama3 {
            factor: 8.0,
            low_freq_factor: 1.0,
            high_freq_factor: 4.0,
            original_context: 8192
        }
    );
    assert!(!c.tied_embeddings && !c.qkv_bias && !c.qk_norm);
}

#[test]
fn qwen3_has_its_own_head_size_and_qk_norm() {
    let c = parse_config(QWEN3_8B, "config.json").unwrap();
    assert_eq!(c.architecture, "qwen3");
    assert_eq!((c.head_dim, c.q_dim()), (128, 4096));
    assert!(c.qk_norm && !c.qkv_bias);
    assert_eq!(
        c.context_length, 40960,
        "no sliding window: use_sliding_window is false"
    );
    // Qwen3-0.6B: 16 heads of 128 on a width of 1024.
    let small = with(
        &with(QWEN3_8B, "hidden_size", "1024"),
        "num_attention_heads",
        "16",
    );
    let c = parse_config(&small, "config.json").unwrap();
    assert_eq!((c.hidden_size, c.q_dim()), (1024, 2048));
}

#[test]
fn qwen2_always_has_qkv_biases_and_yarn_extends_the_context() {
    let qwen2 = with(QWEN3_8B, "architectures", r#"["Qwen2ForCausalLM"]"#);
    let c = parse_config(&qwen2, "config.json").unwrap();
    assert!(c.qkv_bias && !c.qk_norm);
    let yarn = with(
        QWEN3_8B,
        "rope_scaling",
        r#"{"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}"#,
    );
    let c = parse_config(&yarn, "config.json").unwrap();
    assert_eq!(c.context_length, 131_072);
    match c.rope_scaling {
        RopeScaling::Yarn {
            factor,
            original_context,
            ..
        } => assert_eq!((factor, original_context), (4.0, 32768)),
        other => panic!("{other:?}"),
    }
}

#[test]
fn mistral_sliding_window_caps_the_context() {
    let mistral = with(
        &with(LLAMA_31_8B, "architectures", r#"["MistralForCausalLM"]"#),
        "sliding_window",
        "4096",
    );
    let mistral = with(&mistral, "rope_scaling", "null");
    let c = parse_config(&mistral, "config.json").unwrap();
    assert_eq!(
        (c.architecture.as_str(), c.context_length),
        ("mistral", 4096)
    );
}

#[test]
fn what_is_not_computed_is_refused_by_name() {
    let cases = [
        (
            with(LLAMA_31_8B, "architectures", r#"["MixtralForCausalLM"]"#),
            "MixtralForCausalLM is not supported",
        ),
        (
            with(LLAMA_31_8B, "num_local_experts", "8"),
            "mixture-of-experts",
        ),
        (with(QWEN3_8B, "num_experts", "128"), "mixture-of-experts"),
        (
            with(
                LLAMA_31_8B,
                "quantization_config",
                r#"{"quant_method": "awq"}"#,
            ),
            "(awq)",
        ),
        (with(LLAMA_31_8B, "hidden_act", r#""gelu""#), "hidden_act"),
        (with(LLAMA_31_8B, "mlp_bias", "true"), "mlp_bias"),
        (
            with(
                LLAMA_31_8B,
                "rope_scaling",
                r#"{"type": "dynamic", "factor": 2.0}"#,
            ),
            "\"dynamic\" is not supported",
        ),
        (
            with(
                LLAMA_31_8B,
                "rope_scaling",
                r#"{"rope_type": "llama3", "factor": 8.0}"#,
            ),
            "low_freq_factor is missing",
        ),
        (
            with(LLAMA_31_8B, "num_hidden_layers", "-1"),
            "num_hidden_layers must be",
        ),
        (
            with(LLAMA_31_8B, "num_key_value_heads", "5"),
            "not a multiple",
        ),
        (
            with(LLAMA_31_8B, "architectures", "null"),
            "architectures is missing",
        ),
        (
            with(LLAMA_31_8B, "attention_bias", "true"),
            "attention_bias is true: llama's attention then has a bias on o_proj",
        ),
        (
            with(QWEN3_8B, "attention_bias", "true"),
            "self_attn.o_proj.bias",
        ),
        (
            with(
                QWEN3_8B,
                "layer_types",
                r#"["full_attention", "chunked_attention"]"#,
            ),
            "layer_types has \"chunked_attention\"",
        ),
        (
            with(QWEN3_8B, "rope_parameters", r#"{"rope_theta": 5.0}"#),
            "rope_theta 1000000 and rope_parameters.rope_theta 5 disagree",
        ),
        (
            with(
                LLAMA_31_8B,
                "rope_parameters",
                r#"{"full_attention": {"rope_theta": 10000.0}}"#,
            ),
            "rope_parameters.full_attention",
        ),
        ("[1, 2]".to_string(), "not a JSON object"),
        ("{".to_string(), "not valid JSON"),
    ];
    for (text, want) in cases {
        let err = parse_config(&text, "config.json").unwrap_err().to_string();
        assert!(err.contains(want), "want {want:?} in {err}");
    }
}

/// `config` with `keys` taken out.
fn without(config: &str, keys: &[&str]) -> String {
    let mut v: serde_json::Value = serde_json::from_str(config).unwrap();
    for key in keys {
        v.as_object_mut().unwrap().remove(*key);
    }
    v.to_string()
}

#[test]
fn missing_keys_take_the_transformers_class_defaults_of_their_family() {
    // rope_theta: 10000 in LlamaConfig, MistralConfig, Qwen2Config and Qwen3Config alike.
    let bare_llama = without(
        LLAMA_31_8B,
        &["rope_theta", "rope_scaling", "num_key_value_heads"],
    );
    let c = parse_config(&bare_llama, "config.json").unwrap();
    assert_eq!((c.rope_base, c.num_kv_heads), (10_000.0, 32));
    let mistral = with(&bare_llama, "architectures", r#"["MistralForCausalLM"]"#);
    let c = parse_config(&mistral, "config.json").unwrap();
    assert_eq!((c.rope_base, c.num_kv_heads), (10_000.0, 8));
    let bare_qwen3 = without(QWEN3_8B, &["rope_theta", "num_key_value_heads", "head_dim"]);
    let c = parse_config(&bare_qwen3, "config.json").unwrap();
    assert_eq!(
        (c.rope_base, c.num_kv_heads, c.head_dim),
        (10_000.0, 32, 128)
    );
    // Qwen3-0.6B's width: Qwen3Config's head_dim of 128 is not 1024 / 16, and its 32 KV heads
    // do not fit 16 heads (transformers cannot build that model either).
    let small = with(
        &with(&bare_qwen3, "hidden_size", "1024"),
        "num_attention_heads",
        "16",
    );
    let err = parse_config(&small, "config.json").unwrap_err().to_string();
    assert!(err.contains("not a multiple of 32 KV heads"), "{err}");
    let c = parse_config(&with(&small, "num_key_value_heads", "8"), "config.json").unwrap();
    assert_eq!((c.num_kv_heads, c.head_dim, c.q_dim()), (8, 128, 2048));
    // Qwen2Config has no head_dim: hidden_size / heads; 32 KV heads.
    let qwen2 = with(&bare_qwen3, "architectures", r#"["Qwen2ForCausalLM"]"#);
    let c = parse_config(&qwen2, "config.json").unwrap();
    assert_eq!((c.num_kv_heads, c.head_dim), (32, 4096 / 32));
    let qwen2 = with(&qwen2, "num_attention_heads", "64");
    let c = parse_config(&qwen2, "config.json").unwrap();
    assert_eq!((c.num_kv_heads, c.head_dim), (32, 64));
}

#[test]
fn transformers_5_rope_parameters_carry_the_theta_and_the_scaling() {
    let v5 = with(
        &without(LLAMA_31_8B, &["rope_theta", "rope_scaling"]),
        "rope_parameters",
        r#"{"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0,
            "low_freq_factor": 1.0, "high_freq_factor": 4.0,
            "original_max_position_embeddings": 8192}"#,
    );
    assert_eq!(
        parse_config(&v5, "config.json").unwrap(),
        parse_config(LLAMA_31_8B, "config.json").unwrap()
    );
    let qwen3 = with(
        &without(QWEN3_8B, &["rope_theta"]),
        "rope_parameters",
        r#"{"rope_type": "default", "rope_theta": 1000000}"#,
    );
    let c = parse_config(&qwen3, "config.json").unwrap();
    assert_eq!(
        (c.rope_base, &c.rope_scaling),
        (1_000_000.0, &RopeScaling::None)
    );
}

#[test]
fn attention_biases_follow_transformers_per_family() {
    // Qwen2: q/k/v biases whatever attention_bias says; Mistral: none, whatever it says.
    let qwen2 = with(QWEN3_8B, "architectures", r#"["Qwen2ForCausalLM"]"#);
    let c = parse_config(&with(&qwen2, "attention_bias", "false"), "config.json").unwrap();
    assert!(c.qkv_bias);
    let mistral = with(
        &with(LLAMA_31_8B, "architectures", r#"["MistralForCausalLM"]"#),
        "attention_bias",
        "true",
    );
    let c = parse_config(&with(&mistral, "rope_scaling", "null"), "config.json").unwrap();
    assert!(!c.qkv_bias);
    // Llama has no sliding window in transformers: the key does not cap its context.
    let c = parse_config(&with(LLAMA_31_8B, "sliding_window", "4096"), "config.json").unwrap();
    assert_eq!(c.context_length, 131_072);
}
