//! Serving with a backend that samples where its logits are (as the CUDA backend does): the
//! engine hands each covered row the shared specification's settings and edits and gets ids
//! back, and the answers are token for token those of host sampling on the same logits,
//! seeds, penalties and bias included, and the logprobs a request asks for are the host's
//! (within rounding: the device sums in another order). The stand-in backend samples with the Rust
//! transcription of the CUDA kernel (`backend::cuda::sample_model`).

mod device_support;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use device_support::{sample_here, spawn, tokens_of};
use tokenscale_engine::backend::sim::{SimBackend, read_profile};
use tokenscale_engine::backend::{Backend, DeviceRow, SampledStep, SeqStep, StepOutput};
use tokenscale_engine::model::ModelConfig;
use tokenscale_engine::runtime::{EngineHandle, GenerateRequest, RequestStream};
use tokenscale_engine::sampling::{SampledToken, SamplingParams};

/// The sim profile's model shape with spread logits (a hash of the position, the last token
/// and the id), so draws depend on every sampling option; samples covered rows itself when
/// `here` is set. It keeps no cache: the logits need none.
struct Spread {
    config: ModelConfig,
    here: bool,
    sampled_here: Arc<AtomicUsize>,
}

fn logit(pos: usize, last: u32, id: usize) -> f32 {
    let mut h = (pos as u64) << 40 ^ u64::from(last) << 20 ^ id as u64;
    h = (h ^ (h >> 31)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    h ^= h >> 29;
    // Mostly in [-4, 0), a few tokens far ahead, some exact ties.
    let x = (h % 64) as f32 / 16.0 - 4.0;
    if h.is_multiple_of(97) { x + 6.0 } else { x }
}

impl Backend for Spread {
    fn name(&self) -> &'static str {
        "spread"
    }
    fn model_config(&self) -> &ModelConfig {
        &self.config
    }
    fn block_size(&self) -> usize {
        16
    }
    fn num_kv_blocks(&self) -> usize {
        1024
    }
    fn forward(&mut self, batch: &[SeqStep<'_>]) -> tokenscale_engine::Result<StepOutput> {
        let vocab = self.config.vocab_size;
        let mut out = StepOutput::default();
        for (index, seq) in batch.iter().enumerate().filter(|(_, s)| s.want_logits) {
            let pos = seq.start_pos + seq.tokens.len();
            let last = seq.tokens.last().copied().unwrap_or(0);
            out.logits.extend((0..vocab).map(|id| logit(pos, last, id)));
            out.rows.push(index);
        }
        Ok(out)
    }
    fn samples_on_device(&self) -> bool {
        self.here
    }
    fn forward_sampled(
        &mut self,
        batch: &[SeqStep<'_>],
        rows: &[Option<DeviceRow>],
    ) -> tokenscale_engine::Result<SampledStep> {
        let vocab = self.config.vocab_size;
        let all = self.forward(batch)?;
        let mut step = SampledStep::default();
        for (row, &index) in all.logits.chunks_exact(vocab).zip(&all.rows) {
            match rows.get(index).and_then(Option::as_ref) {
                Some(device) => {
                    sample_here(row, index, device, &mut step);
                    self.sampled_here.fetch_add(1, Ordering::Relaxed);
                }
                None => {
                    step.output.logits.extend_from_slice(row);
                    step.output.rows.push(index);
                }
            }
        }
        Ok(step)
    }
}

fn engine(here: bool) -> (EngineHandle, Arc<AtomicUsize>) {
    let profile = read_profile(None).expect("the default sim profile");
    let sampled_here = Arc::new(AtomicUsize::new(0));
    let backend = Spread {
        config: SimBackend::new(profile, 4096).model_config().clone(),
        here,
        sampled_here: sampled_here.clone(),
    };
    let handle = spawn(Box::new(backend), Default::default());
    (handle, sampled_here)
}

/// The requests: greedy, plain, top-k, top-p, min-p, penalties with bias, logprobs.
fn requests() -> Vec<SamplingParams> {
    let base = |seed| SamplingParams {
        max_tokens: Some(24),
        ignore_eos: true,
        seed: Some(seed),
        ..SamplingParams::default()
    };
    let mut bias = BTreeMap::new();
    bias.insert(7, 3.0);
    bias.insert(9, -100.0);
    vec![
        SamplingParams {
            temperature: 0.0,
            ..base(1)
        },
        base(2),
        SamplingParams {
            temperature: 0.7,
            top_k: 5,
            ..base(3)
        },
        SamplingParams {
            top_p: 0.6,
            ..base(4)
        },
        SamplingParams {
            temperature: 1.3,
            min_p: 0.1,
            top_k: 40,
            top_p: 0.9,
            ..base(5)
        },
        SamplingParams {
            repetition_penalty: 1.4,
            presence_penalty: 0.5,
            frequency_penalty: 0.3,
            logit_bias: bias,
            ..base(6)
        },
        SamplingParams {
            logprobs: Some(2),
            ..base(7)
        },
    ]
}

/// Every request's tokens.
async fn answers(engine: &EngineHandle) -> Vec<Vec<SampledToken>> {
    let streams: Vec<RequestStream> = requests()
        .into_iter()
        .enumerate()
        .map(|(i, p)| {
            let prompt = (0..5 + i as u32).map(|t| 30 + t * 3).collect();
            engine
                .submit(GenerateRequest::new(prompt, p))
                .expect("submit")
        })
        .collect();
    let mut out = Vec::new();
    for stream in streams {
        out.push(tokens_of(stream).await);
    }
    out
}

#[tokio::test]
async fn device_sampled_answers_are_the_host_sampled_ones() {
    let (host, host_count) = engine(false);
    let on_host = answers(&host).await;
    let (device, device_count) = engine(true);
    let on_device = answers(&device).await;

    assert_eq!(host_count.load(Ordering::Relaxed), 0);
    // Every request (24 tokens each) was sampled by the backend, the logprobs one too.
    assert_eq!(device_count.load(Ordering::Relaxed), 7 * 24);
    let ids = |tokens: &[SampledToken]| tokens.iter().map(|t| t.token_id).collect::<Vec<_>>();
    for (i, (h, d)) in on_host.iter().zip(&on_device).enumerate() {
        assert_eq!(h.len(), 24, "request {i}");
        assert_eq!(ids(h), ids(d), "request {i} differs");
        for (h, d) in h.iter().zip(d) {
            assert_eq!(h.logprob.is_some(), i == 6);
            assert_eq!(h.logprob.is_some(), d.logprob.is_some());
            let close = |a: f32, b: f32| (a - b).abs() < 1e-4;
            assert!(
                close(h.logprob.unwrap_or(0.0), d.logprob.unwrap_or(0.0)),
                "{h:?} {d:?}"
            );
            let top = |t: &SampledToken| {
                t.top_logprobs
                    .iter()
                    .map(|l| l.token_id)
                    .collect::<Vec<_>>()
            };
            assert_eq!(top(h), top(d));
            for (a, b) in h.top_logprobs.iter().zip(&d.top_logprobs) {
                assert!(close(a.logprob, b.logprob), "{a:?} {b:?}");
            }
        }
    }
    // The draws are not all the argmax: sampling options mattered.
    assert_ne!(ids(&on_host[0]), ids(&on_host[1]));
}
