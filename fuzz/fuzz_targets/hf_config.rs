//! Fuzz target: a checkpoint's `config.json` (any text) into the engine's model description.
//! The reader may refuse, never panic; what it accepts must be a shape the forward can run
//! (validated), with RoPE frequencies that are finite and positive.
#![cfg_attr(fuzzing, no_main)]

#[macro_use]
#[path = "../replay.rs"]
mod replay;

// The engine's model description, compiled from its sources, arranged as the engine's
// `model` module (with a stand-in for the one GGUF helper the reader uses and for the
// engine's error type).
// What the reader does not use is unused here.
#[allow(dead_code)]
#[path = "../../engine/src/model/config.rs"]
mod config;
#[path = "../../engine/src/model/hf/config.rs"]
mod hf_config;
#[allow(dead_code)]
#[path = "../../engine/src/model/rope.rs"]
mod rope;

mod model {
    pub(crate) use crate::{config, rope};
    pub mod gguf {
        pub(crate) fn cap_to_window(context_length: usize, window: usize) -> usize {
            context_length.min(window)
        }
    }
    pub mod hf {
        pub(crate) use crate::hf_config as config;
    }
}

#[derive(Debug)]
pub enum Error {
    Model(String),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The property, for any input.
fn check(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(config) = model::hf::config::parse_config(text, "config.json") else {
        return;
    };
    assert!(
        config.validate().is_ok(),
        "accepted an invalid shape: {config:?}"
    );
    let freqs = config.rope_inv_freqs();
    assert_eq!(freqs.len(), config.head_dim / 2);
    assert!(
        freqs.iter().all(|f| f.is_finite() && *f > 0.0),
        "RoPE frequencies {freqs:?} of {config:?}"
    );
}

fuzz_main!("hf_config");
