//! The GPU checks behind `tokenscale-engine cuda-check`: each kernel against a host reference
//! (`ops`, `attention`, `serve_sampling`), the whole model against golden tokens and the CPU
//! backend (`golden`), any checkpoint against the CPU reference backend (`parity`), decode
//! speed against the roofline (`speed`), and speculative decoding against plain decoding
//! (`speculative`, which also runs on the CPU backend). Only `reference` and the pure parts of `speed` run
//! without a GPU.

mod attention;
pub mod golden;
pub mod ops;
pub mod parity;
mod prefill;
pub mod reference;
mod serve_sampling;
pub mod speculative;
pub mod speed;
pub mod tiled;
