//! Dequantisation against PyPI `gguf` (`gguf.quants.dequantize`, installed by scripts/setup
//! into `.cache/tools/python`), bit for bit: on random blocks of every supported type (any
//! bytes, with finite f16 scales) and on every tensor of SmolLM2 as the engine's quantiser
//! writes it in two mixes.

mod common;

use std::collections::HashMap;
use std::path::Path;
use std::process::Command;

use half::f16;
use sha2::{Digest, Sha256};
use tokenscale_engine::gguf::{GgmlType, GgufBuilder, GgufFile, Value};
use tokenscale_engine::quant::dequantize;
use tokenscale_engine::quant::mix::FileType;

/// One tensor as PyPI `gguf` dequantised it.
struct PyTensor {
    ty: String,
    elements: usize,
    sha256: String,
    head: Vec<f64>,
}

/// Runs scripts/gguf_dequant_check.py on `file`.
fn python_dequantise(file: &Path) -> HashMap<String, PyTensor> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let site = root.join(".cache/tools/python");
    assert!(
        site.join("gguf").exists() && site.join("numpy").exists(),
        "PyPI gguf and numpy are missing from {} (run scripts/setup)",
        site.display()
    );
    let out = Command::new("python3")
        .arg(root.join("scripts/gguf_dequant_check.py"))
        .arg(file)
        .env("PYTHONPATH", &site)
        .output()
        .expect("python3 runs");
    assert!(
        out.status.success(),
        "gguf_dequant_check.py failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|line| {
            let v: serde_json::Value = serde_json::from_str(line).expect("JSON line");
            let head = v["head"].as_array().expect("head").iter();
            let t = PyTensor {
                ty: v["type"].as_str().expect("type").to_string(),
                elements: v["elements"].as_u64().expect("elements") as usize,
                sha256: v["sha256"].as_str().expect("sha256").to_string(),
                head: head.map(|x| x.as_f64().expect("value")).collect(),
            };
            (v["name"].as_str().expect("name").to_string(), t)
        })
        .collect()
}

/// Dequantises every tensor of `path` with the engine and compares it with PyPI `gguf`'s;
/// returns how many tensors of each type were compared.
fn compare_file(path: &Path) -> HashMap<String, usize> {
    let python = python_dequantise(path);
    let file = GgufFile::open(path).expect("file opens");
    let mut counts = HashMap::new();
    for info in file.tensors() {
        let py = python
            .get(&info.name)
            .unwrap_or_else(|| panic!("{}: not in gguf's output", info.name));
        assert_eq!(py.ty, info.ggml_type.to_string(), "{}: type", info.name);
        let mut values = vec![0f32; info.num_elements() as usize];
        assert_eq!(py.elements, values.len(), "{}: elements", info.name);
        dequantize(
            info.ggml_type,
            file.tensor_data(&info.name).expect("data"),
            &mut values,
        )
        .unwrap_or_else(|e| panic!("{}: {e}", info.name));
        let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        let ours = format!("{:x}", Sha256::digest(&bytes));
        assert_eq!(
            ours,
            py.sha256,
            "{} ({}): dequantised values differ from gguf's; first values ours {:?} gguf {:?}",
            info.name,
            info.ggml_type,
            &values[..4.min(values.len())],
            py.head
        );
        *counts.entry(info.ggml_type.to_string()).or_insert(0) += 1;
    }
    counts
}

/// Byte ranges of each block's f16 fields, per type: the rest of a block is any bytes.
fn half_fields(ty: GgmlType) -> &'static [usize] {
    match ty {
        GgmlType::Q4_0 | GgmlType::Q5_0 | GgmlType::Q8_0 => &[0],
        GgmlType::Q4_1 | GgmlType::Q5_1 | GgmlType::Q4K | GgmlType::Q5K => &[0, 2],
        GgmlType::Q2K => &[80, 82],
        GgmlType::Q3K => &[108],
        GgmlType::Q6K => &[208],
        _ => &[],
    }
}

#[test]
fn random_blocks_of_every_type_dequantise_as_gguf_does() {
    let mut seed = 0x9E37_79B9_7F4A_7C15u64;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let types = tokenscale_engine::quant::BLOCK_TYPES;
    let mut builder = GgufBuilder::new().kv("general.architecture", Value::String("llama".into()));
    let (cols, rows) = (1024u64, 16u64);
    for ty in types {
        let size = ty.bytes_for(cols * rows).expect("whole blocks") as usize;
        let mut bytes: Vec<u8> = (0..size).map(|_| next() as u8).collect();
        for block in bytes.chunks_exact_mut(ty.block_bytes()) {
            for &at in half_fields(ty) {
                // Finite scales of either sign over a wide range, and some zeros.
                let r = next();
                let v = if r % 17 == 0 {
                    0.0
                } else {
                    let mantissa = (r >> 8) as u32 as f32 / u32::MAX as f32 * 2.0 - 1.0;
                    mantissa * 2f32.powi((r % 24) as i32 - 16)
                };
                block[at..at + 2].copy_from_slice(&f16::from_f32(v).to_le_bytes());
            }
        }
        builder = builder.tensor(&format!("random.{ty}"), &[cols, rows], ty, bytes);
    }
    let dir = tokenscale_scratch::scratch!("kquant-python");
    let path = dir.join("random-blocks.gguf");
    std::fs::write(&path, builder.build()).expect("write");
    let counts = compare_file(&path);
    assert_eq!(counts.len(), types.len(), "{counts:?}");
    println!(
        "random blocks: {} types bit-exact with gguf.quants.dequantize",
        counts.len()
    );
}

#[test]
fn every_tensor_of_requantised_smollm2_dequantises_as_gguf_does() {
    // Q4_K_M holds Q4_K, Q6_K, Q5_0, Q8_0; Q2_K holds Q3_K and Q4_0 (the random blocks cover
    // every type; two real files keep the test's cost down).
    for ftype in [FileType::Q4_K_M, FileType::Q2_K] {
        let path = common::kquant::path(ftype);
        let counts = compare_file(&path);
        let mut summary: Vec<String> = counts.iter().map(|(t, n)| format!("{n} {t}")).collect();
        summary.sort();
        println!(
            "{ftype}: every tensor bit-exact with gguf ({})",
            summary.join(", ")
        );
        // The mixes put real K-quants on the rows that hold whole 256-blocks (ffn_down).
        let want = match ftype {
            FileType::Q4_K_M => ["Q4_K", "Q6_K", "Q5_0"],
            _ => ["Q3_K", "Q4_0", "Q8_0"],
        };
        for t in want {
            assert!(
                counts.contains_key(t),
                "{ftype}: no {t} tensor in {summary:?}"
            );
        }
    }
}
