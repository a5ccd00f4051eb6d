//! Unit tests of the GGUF reader: round trips through the builder, and every error path.

#![allow(clippy::unwrap_used)] // tests: a failed unwrap is a failed test

use super::*;

fn sample() -> GgufBuilder {
    GgufBuilder::new()
        .kv("general.architecture", Value::String("llama".into()))
        .kv("llama.block_count", Value::U32(2))
        .kv("llama.rope.freq_base", Value::F32(10000.0))
        .kv("flag", Value::Bool(true))
        .kv("big", Value::U64(1 << 40))
        .kv("neg", Value::I64(-5))
        .kv("small", Value::I8(-3))
        .kv("f64", Value::F64(0.25))
        .kv(
            "tokens",
            Value::Array(
                ValueType::String,
                vec![Value::String("a".into()), Value::String("bé".into())],
            ),
        )
        .kv(
            "types",
            Value::Array(ValueType::I32, vec![Value::I32(1), Value::I32(3)]),
        )
        .kv(
            "nested",
            Value::Array(
                ValueType::Array,
                vec![Value::Array(
                    ValueType::U8,
                    vec![Value::U8(1), Value::U8(2)],
                )],
            ),
        )
        .tensor("w", &[4, 2], GgmlType::F32, (0..32).collect())
        .tensor("b", &[32], GgmlType::Q8_0, vec![7; 34])
}

#[test]
fn round_trip_metadata_and_tensors() {
    let file = GgufFile::parse(&sample().build()).unwrap();
    assert_eq!(file.version(), 3);
    assert_eq!(file.get_str("general.architecture").unwrap(), "llama");
    assert_eq!(file.get_u32("llama.block_count").unwrap(), 2);
    assert_eq!(file.get_f32("llama.rope.freq_base").unwrap(), 10000.0);
    assert!(file.get_bool("flag").unwrap());
    assert_eq!(file.get_u64("big").unwrap(), 1 << 40);
    assert_eq!(file.get_f32("f64").unwrap(), 0.25);
    assert_eq!(file.get_str_array("tokens").unwrap(), vec!["a", "bé"]);
    assert_eq!(file.get_i32_array("types").unwrap(), vec![1, 3]);
    let nested = file.get_array("nested").unwrap();
    assert_eq!(nested[0].as_array().unwrap(), &[Value::U8(1), Value::U8(2)]);
    assert_eq!(file.get("small"), Some(&Value::I8(-3)));

    let w = file.tensor("w").unwrap();
    assert_eq!(w.matrix_shape(), Some((2, 4)));
    assert_eq!(w.ggml_type, GgmlType::F32);
    assert_eq!(
        file.tensor_data("w").unwrap(),
        (0..32).collect::<Vec<u8>>().as_slice()
    );
    assert_eq!(file.tensor_data("b").unwrap(), &[7; 34][..]);
    assert_eq!(file.tensors().len(), 2);
}

#[test]
fn typed_getters_name_the_key() {
    let file = GgufFile::parse(&sample().build()).unwrap();
    let err = file.get_u32("neg").unwrap_err().to_string();
    assert!(err.contains("neg") && err.contains("u32"), "{err}");
    let err = file.get_str("nope").unwrap_err().to_string();
    assert!(err.contains("nope"), "{err}");
    let err = file.get_i32_array("tokens").unwrap_err().to_string();
    assert!(err.contains("tokens"), "{err}");
    assert!(matches!(
        file.tensor_data("x"),
        Err(Error::MissingTensor { .. })
    ));
}

#[test]
fn every_truncation_is_an_error() {
    let bytes = sample().build();
    for len in 0..bytes.len() {
        assert!(
            GgufFile::parse(&bytes[..len]).is_err(),
            "prefix of {len} bytes parsed"
        );
    }
}

#[test]
fn bad_magic_and_version() {
    let mut bytes = sample().build();
    bytes[0] = b'X';
    assert!(matches!(
        GgufFile::parse(&bytes),
        Err(Error::BadMagic { .. })
    ));
    let mut bytes = sample().build();
    bytes[4] = 1;
    assert!(matches!(
        GgufFile::parse(&bytes),
        Err(Error::UnsupportedVersion { version: 1 })
    ));
}

#[test]
fn alignment_is_honoured() {
    let bytes = GgufBuilder::new()
        .kv("general.alignment", Value::U32(64))
        .tensor("a", &[3], GgmlType::F32, vec![1; 12])
        .tensor("b", &[1], GgmlType::F32, vec![2; 4])
        .build();
    let file = GgufFile::parse(&bytes).unwrap();
    assert_eq!(file.alignment(), 64);
    assert_eq!(file.tensor("b").unwrap().offset, 64);
    assert_eq!(file.tensor_data("b").unwrap(), &[2; 4]);
    let bad = GgufBuilder::new()
        .kv("general.alignment", Value::U32(3))
        .build();
    assert!(matches!(
        GgufFile::parse(&bad),
        Err(Error::BadAlignment { .. })
    ));
}
