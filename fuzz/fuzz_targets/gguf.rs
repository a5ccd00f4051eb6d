//! Fuzz target: the GGUF reader must turn any byte string into a file or a typed error.
#![no_main]

// The reader is self-contained (it depends on thiserror and memmap2 only), so it is compiled
// here from the engine's sources instead of building the whole engine with sanitizers.
#[allow(dead_code)]
#[path = "../../engine/src/gguf/mod.rs"]
mod gguf;

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(file) = gguf::GgufFile::parse(data) {
        // Everything reachable from a parsed file must be readable without a panic.
        let names: Vec<String> = file.tensors().iter().map(|t| t.name.clone()).collect();
        for name in names {
            let info = file.tensor(&name).map(|t| t.size_bytes);
            let data = file.tensor_data(&name).map(|d| d.len() as u64);
            assert_eq!(info, data.ok());
        }
        for (key, _) in file.metadata() {
            let _ = file.get_str(key);
            let _ = file.get_u32(key);
            let _ = file.get_f32(key);
            let _ = file.get_str_array(key);
            let _ = file.get_i32_array(key);
        }
    }
});
