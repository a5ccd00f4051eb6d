//! Fuzz target: the GGUF reader must turn any byte string into a file or a typed error, and
//! every tensor of a parsed file must dequantise and repack (K-quant super-blocks included)
//! into values or a typed error, never a panic.
#![cfg_attr(fuzzing, no_main)]

#[macro_use]
#[path = "../replay.rs"]
mod replay;

// The reader and the block code are self-contained (thiserror, memmap2, half, rayon), so they
// are compiled here from the engine's sources instead of building the whole engine with
// sanitizers.
#[allow(dead_code, unused_imports)]
#[path = "../../engine/src/gguf/mod.rs"]
mod gguf;
#[allow(dead_code, unused_imports)]
#[path = "../../engine/src/quant/mod.rs"]
mod quant;

/// The property, for any input.
fn check(data: &[u8]) {
    if let Ok(file) = gguf::GgufFile::parse(data) {
        // Everything reachable from a parsed file must be readable without a panic.
        let names: Vec<String> = file.tensors().iter().map(|t| t.name.clone()).collect();
        for name in names {
            let info = file.tensor(&name).map(|t| t.size_bytes);
            let data = file.tensor_data(&name).map(|d| d.len() as u64);
            assert_eq!(info, data.ok());
            // Dequantise (bounded: the fuzzer's files are small, but a header may claim a
            // huge tensor that is all zero-sized blocks of nothing).
            let (Some(t), Ok(bytes)) = (file.tensor(&name), file.tensor_data(&name)) else {
                continue;
            };
            let elements = t.num_elements();
            if elements <= 1 << 16 {
                let mut out = vec![0f32; elements as usize];
                let _ = quant::dequantize(t.ggml_type, bytes, &mut out);
                if let Some((rows, cols)) = t.matrix_shape() {
                    let _ = quant::QMatrix::from_ggml(t.ggml_type, bytes, rows, cols);
                }
            }
        }
        for (key, _) in file.metadata() {
            let _ = file.get_str(key);
            let _ = file.get_u32(key);
            let _ = file.get_f32(key);
            let _ = file.get_str_array(key);
            let _ = file.get_i32_array(key);
        }
    }
}

fuzz_main!("gguf");
