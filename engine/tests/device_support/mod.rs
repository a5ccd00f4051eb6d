//! What the tests of device sampling share (`device_sampling.rs`, `device_verify.rs`): a
//! stand-in backend's sampling of one row the way the CUDA backend samples it (the Rust
//! transcription of its kernels, `backend::cuda::sample_model`), an engine around such a
//! backend, and a request's tokens.

use std::sync::Arc;
use std::time::Duration;

use tokenscale_engine::backend::cuda::sample_model::{apply_edits, row_logprobs, sample_row};
use tokenscale_engine::backend::{Backend, DeviceRow, SampledStep};
use tokenscale_engine::runtime::{
    EngineConfig, EngineHandle, EngineMetrics, RequestStream, TokenEvent,
};
use tokenscale_engine::sampling::SampledToken;
use tokenscale_engine::spec::SpeculativeConfig;

/// Bounds every wait: a hang fails the test.
const LIMIT: Duration = Duration::from_secs(60);

/// Samples `row` (raw logits of batch entry `index`) by `device` into `step`, with the
/// logprobs it asks for.
pub fn sample_here(row: &[f32], index: usize, device: &DeviceRow, step: &mut SampledStep) {
    let mut edited = row.to_vec();
    apply_edits(&mut edited, &device.edits);
    let token = sample_row(&edited, &device.settings);
    step.sampled.push((index, token));
    if let Some(n) = device.logprobs {
        let (logprob, top) = row_logprobs(row, token, n as usize);
        step.logprobs.push((index, logprob, top));
    }
}

/// An engine around `backend` (8 sequences, 256 tokens a step, no prefix cache, no EOS).
pub fn spawn(backend: Box<dyn Backend>, speculative: SpeculativeConfig) -> EngineHandle {
    let metrics = Arc::new(EngineMetrics::new(
        "device-sampling",
        "sim",
        true,
        backend.block_size(),
        backend.num_kv_blocks(),
    ));
    let config = EngineConfig {
        max_batch_tokens: 256,
        max_num_seqs: 8,
        enable_prefix_caching: false,
        max_model_len: 4096,
        eos_token_ids: Vec::new(),
        tpot_target: None,
        speculative,
    };
    EngineHandle::spawn(backend, config, metrics).expect("spawn")
}

/// Every token of `stream` until it finishes.
pub async fn tokens_of(mut stream: RequestStream) -> Vec<SampledToken> {
    let mut tokens = Vec::new();
    loop {
        let event = tokio::time::timeout(LIMIT, stream.next())
            .await
            .expect("no hang");
        match event {
            Some(TokenEvent::Token { token, .. }) => tokens.push(token),
            Some(TokenEvent::Finished { .. }) => break,
            other => panic!("unexpected {other:?}"),
        }
    }
    tokens
}
