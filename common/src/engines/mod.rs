//! The engines tokenscale can drive (its own, vLLM, SGLang, llama.cpp) and one metric adapter
//! per engine: each turns that engine's `/metrics` samples into one [`EngineReading`], so the
//! scaler, the gateway's picker and the status never branch on the kind.

mod dialect;
mod kind;
pub mod llamacpp;
mod priority;
mod reading;
pub mod sglang;
pub mod tokenscale;
pub mod vllm;

pub use dialect::{Dialect, SampleRef};
pub use kind::{EngineKind, EngineKindError};
pub use priority::{
    EnginePriority, PriorityOrder, PriorityRender, SGLANG_PRIORITY_SINCE, image_version,
    render_flags,
};
pub use reading::{Absent, EngineReading, Signal};

/// The reading of one replica's `/metrics` text through the adapter of the engine that text
/// comes from (told by its metric names); `None` when it is no engine's (metrics turned off,
/// a wrong port). The scaler, the gateway's picker and `up` all read engines this way.
pub fn read_text(text: &str) -> Option<EngineReading> {
    read_samples(&crate::prom_text::parse(text).samples).map(|(_, reading)| reading)
}

/// [`read_text`] on samples already parsed, with the engine they come from, for a caller that
/// reads more of the same text (the gateway's picker also reads its LoRA adapters).
pub fn read_samples(samples: &[crate::prom_text::Sample]) -> Option<(EngineKind, EngineReading)> {
    let refs = || {
        samples.iter().map(|s| SampleRef {
            name: &s.name,
            labels: &s.labels,
            value: s.value,
        })
    };
    let kind = EngineKind::detect(refs())?;
    Some((kind, read(kind, refs())))
}

/// The reading of one replica's samples, through the adapter of `kind`.
pub fn read<'a>(
    kind: EngineKind,
    samples: impl IntoIterator<Item = SampleRef<'a>>,
) -> EngineReading {
    kind.dialect().read(samples)
}

#[cfg(test)]
mod tests;
