//! Speculative decoding on a backend that samples where its logits are (the CUDA path): each
//! verify chunk's rows are sampled by the backend with the sampler state plain decoding would
//! have at that position (the draft's earlier tokens counted by the penalties, the row's own
//! seeded draw), and the engine accepts from the ids alone. The answers are token for token
//! those of plain host-sampled decoding, for greedy, seeded, filtered and penalised requests,
//! and drafts were verified and accepted on the way. The stand-in backend samples with the
//! Rust transcription of the CUDA kernel (`backend::cuda::sample_model`).

mod device_support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use device_support::{sample_here, spawn, tokens_of};
use tokenscale_engine::backend::sim::{SimBackend, read_profile};
use tokenscale_engine::backend::{Backend, DeviceRow, SampledStep, SeqStep, StepOutput};
use tokenscale_engine::model::ModelConfig;
use tokenscale_engine::runtime::{EngineHandle, GenerateRequest};
use tokenscale_engine::sampling::{SampledToken, SamplingParams};
use tokenscale_engine::spec::{SpeculativeConfig, SpeculativeMode};

/// A small vocabulary, so a favoured successor keeps most of the mass at temperature 1 and
/// answers repeat (drafts find matches and are often, not always, accepted).
const VOCAB: usize = 64;

/// Logits that favour one successor of the last token (`7 t + 3 mod 64`: answers cycle) over a
/// hashed spread of the others; every row of a chunk is computed, and the rows the engine
/// hands over are sampled here when `on_device` is set.
struct Cycle {
    config: ModelConfig,
    on_device: bool,
    /// Rows sampled here that belonged to a verify chunk of more than one row.
    verify_rows: Arc<AtomicUsize>,
}

fn logit(pos: usize, last: u32, id: usize) -> f32 {
    if id == (last as usize * 7 + 3) % VOCAB {
        return 4.0;
    }
    let mut h = (pos as u64) << 32 ^ u64::from(last) << 16 ^ id as u64;
    h = (h ^ (h >> 29)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    h ^= h >> 32;
    (h % 32) as f32 / 8.0 - 4.0
}

impl Cycle {
    /// `(batch index, logits)` of each wanted row: every token of an entry with
    /// `every_row[i]`, else its last when it wants logits.
    fn rows(&self, batch: &[SeqStep<'_>], every_row: &[bool]) -> Vec<(usize, Vec<f32>)> {
        let mut rows = Vec::new();
        for (index, seq) in batch.iter().enumerate() {
            let n = seq.tokens.len();
            let first = match every_row.get(index) {
                Some(true) => 0,
                _ if seq.want_logits => n - 1,
                _ => n,
            };
            for j in first..n {
                let pos = seq.start_pos + j + 1;
                let row = (0..VOCAB).map(|id| logit(pos, seq.tokens[j], id)).collect();
                rows.push((index, row));
            }
        }
        rows
    }
}

impl Backend for Cycle {
    fn name(&self) -> &'static str {
        "cycle"
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
        self.forward_every_row(batch, &[])
    }
    fn computes_every_row(&self) -> bool {
        true
    }
    fn forward_every_row(
        &mut self,
        batch: &[SeqStep<'_>],
        every_row: &[bool],
    ) -> tokenscale_engine::Result<StepOutput> {
        let mut out = StepOutput::default();
        for (index, row) in self.rows(batch, every_row) {
            out.logits.extend(row);
            out.rows.push(index);
        }
        Ok(out)
    }
    fn samples_on_device(&self) -> bool {
        self.on_device
    }
    fn forward_sampled(
        &mut self,
        batch: &[SeqStep<'_>],
        rows: &[Option<DeviceRow>],
    ) -> tokenscale_engine::Result<SampledStep> {
        let rows: Vec<Vec<DeviceRow>> = rows.iter().map(|r| r.iter().cloned().collect()).collect();
        self.forward_sampled_rows(batch, &[], &rows)
    }
    fn forward_sampled_rows(
        &mut self,
        batch: &[SeqStep<'_>],
        every_row: &[bool],
        device: &[Vec<DeviceRow>],
    ) -> tokenscale_engine::Result<SampledStep> {
        let mut step = SampledStep::default();
        let mut seen = vec![0; batch.len()];
        for (index, row) in self.rows(batch, every_row) {
            let j = seen[index];
            seen[index] += 1;
            let Some(d) = device.get(index).and_then(|d| d.get(j)) else {
                step.output.logits.extend(row);
                step.output.rows.push(index);
                continue;
            };
            sample_here(&row, index, d, &mut step);
            if batch[index].tokens.len() > 1 {
                self.verify_rows.fetch_add(1, Ordering::Relaxed);
            }
        }
        Ok(step)
    }
}

fn engine(on_device: bool, mode: SpeculativeMode) -> (EngineHandle, Arc<AtomicUsize>) {
    let profile = read_profile(None).expect("the default sim profile");
    let mut config = SimBackend::new(profile, 4096).model_config().clone();
    config.vocab_size = VOCAB;
    let verify_rows = Arc::new(AtomicUsize::new(0));
    let backend = Cycle {
        config,
        on_device,
        verify_rows: verify_rows.clone(),
    };
    let speculative = SpeculativeConfig {
        mode,
        ..SpeculativeConfig::default()
    };
    let handle = spawn(Box::new(backend), speculative);
    (handle, verify_rows)
}

/// Greedy, seeded at temperature 1, filtered, penalised, and with logprobs.
fn requests() -> Vec<SamplingParams> {
    let base = |seed| SamplingParams {
        max_tokens: Some(40),
        ignore_eos: true,
        seed: Some(seed),
        ..SamplingParams::default()
    };
    vec![
        SamplingParams {
            temperature: 0.0,
            ..base(1)
        },
        base(2),
        SamplingParams {
            temperature: 0.8,
            top_k: 8,
            top_p: 0.9,
            ..base(3)
        },
        SamplingParams {
            repetition_penalty: 1.1,
            presence_penalty: 0.4,
            frequency_penalty: 0.2,
            ..base(4)
        },
        SamplingParams {
            logprobs: Some(2),
            ..base(5)
        },
    ]
}

async fn answers(engine: &EngineHandle) -> Vec<Vec<SampledToken>> {
    let mut out = Vec::new();
    for (i, params) in requests().into_iter().enumerate() {
        let prompt = (0..6 + i as u32)
            .map(|t| (t * 5 + 1) % VOCAB as u32)
            .collect();
        let stream = engine
            .submit(GenerateRequest::new(prompt, params))
            .expect("submit");
        out.push(tokens_of(stream).await);
    }
    out
}

#[tokio::test]
async fn device_sampled_verify_rows_give_the_plain_answers() {
    let (plain, _) = engine(false, SpeculativeMode::Off);
    let expected = answers(&plain).await;
    let (speculating, verify_rows) = engine(true, SpeculativeMode::Ngram);
    let got = answers(&speculating).await;

    let spec = &speculating.metrics().spec_decode;
    let (drafted, accepted) = (spec.num_draft_tokens.get(), spec.num_accepted_tokens.get());
    assert!(
        verify_rows.load(Ordering::Relaxed) > 0,
        "no verify row was sampled by the backend"
    );
    assert!(
        accepted > 0 && accepted < drafted,
        "drafts neither accepted nor rejected: {accepted} of {drafted}"
    );
    let ids = |tokens: &[SampledToken]| tokens.iter().map(|t| t.token_id).collect::<Vec<_>>();
    for (i, (e, g)) in expected.iter().zip(&got).enumerate() {
        assert_eq!(e.len(), 40, "request {i}");
        assert_eq!(ids(e), ids(g), "request {i} differs with speculation");
        for (e, g) in e.iter().zip(g) {
            let close = match (e.logprob, g.logprob) {
                (Some(a), Some(b)) => (a - b).abs() < 1e-4,
                (a, b) => a == b,
            };
            assert!(
                close,
                "request {i}: logprob {:?} vs {:?}",
                e.logprob, g.logprob
            );
            assert_eq!(e.top_logprobs.len(), g.top_logprobs.len(), "request {i}");
        }
    }
}
