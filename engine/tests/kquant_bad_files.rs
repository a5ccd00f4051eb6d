//! Bad K-quant files fail cleanly, naming the tensor: rows that are not whole super-blocks,
//! data cut inside a block, sizes that do not match the shape, and the types the engine
//! refuses (IQ, TQ, FP4) inside an otherwise valid model.

use tokenscale_engine::gguf::{GgmlType, GgufBuilder, GgufFile, Value};
use tokenscale_engine::quant::{QMatrix, dequantize};

fn file(name: &str, dims: &[u64], ty: GgmlType, data: Vec<u8>) -> Vec<u8> {
    GgufBuilder::new()
        .kv("general.architecture", Value::String("llama".into()))
        .tensor(name, dims, ty, data)
        .build()
}

const K_QUANTS: [GgmlType; 5] = [
    GgmlType::Q2K,
    GgmlType::Q3K,
    GgmlType::Q4K,
    GgmlType::Q5K,
    GgmlType::Q6K,
];

fn parse_err(bytes: &[u8]) -> String {
    match GgufFile::parse(bytes) {
        Ok(_) => panic!("a malformed file parsed"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn rows_that_are_not_whole_super_blocks_name_the_tensor() {
    for ty in K_QUANTS {
        // 576 = 2.25 super-blocks (SmolLM2's width).
        let msg = parse_err(&file("blk.0.attn_q.weight", &[576, 2], ty, vec![0; 1000]));
        assert!(
            msg.contains("blk.0.attn_q.weight") && msg.contains(&format!("not whole {ty} blocks")),
            "{ty}: {msg}"
        );
    }
}

#[test]
fn data_cut_inside_a_block_is_reported() {
    for ty in [
        GgmlType::Q4K,
        GgmlType::Q5K,
        GgmlType::Q6K,
        GgmlType::Q5_0,
        GgmlType::Q5_1,
    ] {
        let size = ty.bytes_for(512 * 4).expect("whole") as usize;
        let bytes = file("w", &[512, 4], ty, vec![0; size]);
        // Cut the file 1 byte and half a block short of the end.
        for short in [1, ty.block_bytes() / 2] {
            let msg = parse_err(&bytes[..bytes.len() - short]);
            assert!(
                msg.contains("tensor w") && msg.contains("runs past the end"),
                "{ty}: {msg}"
            );
        }
    }
}

#[test]
fn byte_counts_that_do_not_match_the_shape_are_errors() {
    for ty in K_QUANTS {
        let size = ty.block_bytes();
        for bytes in [size - 1, size + 1, 2 * size] {
            let mut out = vec![0f32; 256];
            let err = dequantize(ty, &vec![0; bytes], &mut out).expect_err("size mismatch");
            assert!(
                err.to_string().contains("does not hold 256 elements"),
                "{ty}: {err}"
            );
            let err = QMatrix::from_ggml(ty, &vec![0; bytes], 1, 256).expect_err("size mismatch");
            assert!(err.to_string().contains(&ty.to_string()), "{ty}: {err}");
        }
    }
}

#[test]
fn a_model_with_an_iq_tensor_is_refused_naming_type_and_tensor() {
    // The test model with blk.3.ffn_down.weight (rows of 1536 = 6 super-blocks) relabelled
    // IQ4_XS: still a valid GGUF file (the smaller tensor fits), refused at load.
    let path = tokenscale_engine::fetch::ensure_model("smollm2-135m").expect("test model");
    let mut bytes = std::fs::read(&path).expect("read model");
    let name = b"blk.3.ffn_down.weight";
    let at = bytes
        .windows(name.len())
        .position(|w| w == name)
        .expect("tensor info present");
    // name, then u32 n_dims (2), two u64 dims, then the u32 type.
    let type_at = at + name.len() + 4 + 16;
    assert_eq!(
        bytes[type_at..type_at + 4],
        3u32.to_le_bytes(),
        "blk.3.ffn_down is Q4_1"
    );
    bytes[type_at..type_at + 4].copy_from_slice(&23u32.to_le_bytes());
    let dir = tokenscale_scratch::scratch!("iq4xs");
    let bad = dir.join("iq4xs.gguf");
    std::fs::write(&bad, &bytes).expect("write");
    let result = tokenscale_engine::model::load(&bad);
    let msg = match result {
        Ok(_) => panic!("a model with an IQ4_XS tensor loaded"),
        Err(e) => e.to_string(),
    };
    assert!(
        msg.contains("blk.3.ffn_down.weight") && msg.contains("IQ4_XS is not supported"),
        "{msg}"
    );
}
