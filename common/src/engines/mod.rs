//! The engines tokenscale can drive (its own, vLLM, SGLang, llama.cpp) and one metric adapter
//! per engine: each turns that engine's `/metrics` samples into one [`EngineReading`], so the
//! scaler, the gateway's picker and the status never branch on the kind.

mod dialect;
mod kind;
pub mod llamacpp;
mod reading;
pub mod sglang;
pub mod tokenscale;
pub mod vllm;

pub use dialect::{Dialect, SampleRef};
pub use kind::{EngineKind, EngineKindError};
pub use reading::{Absent, EngineReading, Signal};

/// The reading of one replica's samples, through the adapter of `kind`.
pub fn read<'a>(
    kind: EngineKind,
    samples: impl IntoIterator<Item = SampleRef<'a>>,
) -> EngineReading {
    kind.dialect().read(samples)
}

#[cfg(test)]
mod tests;
