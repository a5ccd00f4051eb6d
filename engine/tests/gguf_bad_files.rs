//! Malformed GGUF files: each is a typed error whose message names the problem, never a panic.
//! Hand-made cases are built here; `fixtures/bad-gguf/` holds byte files (from fuzzing and by
//! hand) with the message fragment each must produce in `expected.txt`.

use tokenscale_engine::gguf::{GgmlType, GgufBuilder, GgufFile, Value, ValueType};

fn valid() -> GgufBuilder {
    GgufBuilder::new()
        .kv("general.architecture", Value::String("llama".into()))
        .kv(
            "tokens",
            Value::Array(ValueType::String, vec![Value::String("a".into())]),
        )
        .tensor("w", &[32, 2], GgmlType::Q4_1, vec![0; 40])
}

fn err(bytes: &[u8]) -> String {
    match GgufFile::parse(bytes) {
        Ok(_) => panic!("a malformed file parsed"),
        Err(e) => e.to_string(),
    }
}

/// Offset of the first occurrence of `needle` in `hay`.
fn find(hay: &[u8], needle: &[u8]) -> usize {
    hay.windows(needle.len())
        .position(|w| w == needle)
        .expect("pattern present")
}

#[test]
fn the_valid_base_file_parses() {
    let file = GgufFile::parse(&valid().build()).expect("valid file");
    assert_eq!(file.tensor_data("w").expect("tensor").len(), 40);
}

#[test]
fn truncated_anywhere() {
    let bytes = valid().build();
    for len in [0, 3, 7, 20, bytes.len() / 2, bytes.len() - 1] {
        let msg = err(&bytes[..len]);
        assert!(
            msg.contains("truncated") || msg.contains("runs past") || msg.contains("exceeds"),
            "{len}: {msg}"
        );
    }
}

#[test]
fn bad_magic_and_versions() {
    let mut bytes = valid().build();
    bytes[..4].copy_from_slice(b"GGML");
    assert!(err(&bytes).contains("not a GGUF file"));
    for version in [1u32, 4, u32::MAX] {
        let mut bytes = valid().build();
        bytes[4..8].copy_from_slice(&version.to_le_bytes());
        assert!(err(&bytes).contains(&format!("unsupported GGUF version {version}")));
    }
}

#[test]
fn unknown_value_type_names_the_key() {
    let mut bytes = valid().build();
    // The type tag follows the key "general.architecture".
    let at = find(&bytes, b"general.architecture") + "general.architecture".len();
    bytes[at..at + 4].copy_from_slice(&13u32.to_le_bytes());
    let msg = err(&bytes);
    assert!(
        msg.contains("general.architecture") && msg.contains("unknown value type 13"),
        "{msg}"
    );
}

#[test]
fn unknown_tensor_type_names_the_tensor() {
    let bytes = valid().build();
    let mut bad = bytes.clone();
    // Tensor info: name (u64 length 1, "w"), dim count (u32), two u64 dims, then the type.
    let at = find(&bytes, &[1, 0, 0, 0, 0, 0, 0, 0, b'w']) + 9 + 4 + 16;
    bad[at..at + 4].copy_from_slice(&99u32.to_le_bytes());
    let msg = err(&bad);
    assert!(msg.contains("tensor w") && msg.contains("type 99"), "{msg}");
}

#[test]
fn tensor_out_of_bounds_and_misaligned() {
    let bytes = valid().build();
    let mut bad = bytes.clone();
    bad.truncate(bytes.len() - 1);
    let msg = err(&bad);
    assert!(
        msg.contains("tensor w") && msg.contains("runs past the end"),
        "{msg}"
    );

    let mut bad = bytes.clone();
    // The offset is the u64 right after the tensor type (Q4_1 = 3) in the tensor info.
    let info = find(&bytes, &[1, 0, 0, 0, 0, 0, 0, 0, b'w']) + 9;
    let offset_at = info + 4 + 16 + 4;
    bad[offset_at..offset_at + 8].copy_from_slice(&u64::MAX.to_le_bytes());
    let msg = err(&bad);
    assert!(msg.contains("tensor w"), "{msg}");
    bad[offset_at..offset_at + 8].copy_from_slice(&4u64.to_le_bytes());
    assert!(err(&bad).contains("not a multiple of the alignment"));
}

#[test]
fn overflowing_counts_and_dims() {
    let bytes = valid().build();
    // metadata count
    let mut bad = bytes.clone();
    bad[16..24].copy_from_slice(&u64::MAX.to_le_bytes());
    assert!(err(&bad).contains("exceeds what the rest of the file can hold"));
    // tensor count
    let mut bad = bytes.clone();
    bad[8..16].copy_from_slice(&(1u64 << 60).to_le_bytes());
    assert!(err(&bad).contains("tensor count"));
    // array length: the u64 after the element type (string = 8) of "tokens"
    let mut bad = bytes.clone();
    let at = find(&bytes, b"tokens") + 6 + 4 + 4;
    bad[at..at + 8].copy_from_slice(&(u64::MAX / 2).to_le_bytes());
    let msg = err(&bad);
    assert!(msg.contains("tokens") && msg.contains("exceeds"), "{msg}");
    // dims whose product overflows
    let huge = GgufBuilder::new()
        .tensor("big", &[1 << 40, 1 << 40], GgmlType::F32, vec![])
        .build();
    let msg = err(&huge);
    assert!(
        msg.contains("tensor big") && msg.contains("overflows"),
        "{msg}"
    );
    // a row that is not whole blocks
    let ragged = GgufBuilder::new()
        .tensor("r", &[33], GgmlType::Q8_0, vec![0; 34])
        .build();
    assert!(err(&ragged).contains("not whole Q8_0 blocks"));
}

#[test]
fn nesting_duplicates_bools_and_alignment() {
    let mut deep = Value::Array(ValueType::U8, vec![]);
    for _ in 0..6 {
        deep = Value::Array(ValueType::Array, vec![deep]);
    }
    assert!(err(&GgufBuilder::new().kv("deep", deep).build()).contains("nested too deeply"));
    let dup = GgufBuilder::new()
        .kv("k", Value::U8(1))
        .kv("k", Value::U8(2))
        .build();
    assert!(err(&dup).contains("appears twice"));
    let mut bad_bool = GgufBuilder::new().kv("flag", Value::Bool(true)).build();
    let at = find(&bad_bool, b"flag") + 4 + 4; // key, then the u32 type tag, then the byte
    bad_bool[at] = 7;
    assert!(err(&bad_bool).contains("invalid bool"));
    let align = GgufBuilder::new()
        .kv("general.alignment", Value::U32(0))
        .build();
    assert!(err(&align).contains("general.alignment"));
    let mut utf8 = GgufBuilder::new()
        .kv("s", Value::String("ab".into()))
        .build();
    let at = find(&utf8, b"ab");
    utf8[at] = 0xff;
    assert!(err(&utf8).contains("not valid UTF-8"));
}

#[test]
fn fixture_files_are_rejected_with_their_message() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/bad-gguf");
    let expected = std::fs::read_to_string(dir.join("expected.txt")).expect("expected.txt");
    let mut checked = 0;
    for line in expected
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
    {
        let (name, fragment) = line.split_once(':').expect("`file: message fragment`");
        let msg = match GgufFile::open(dir.join(name.trim())) {
            Ok(_) => panic!("{name} parsed"),
            Err(e) => e.to_string(),
        };
        assert!(msg.contains(fragment.trim()), "{name}: {msg}");
        checked += 1;
    }
    assert!(checked > 0);
}
