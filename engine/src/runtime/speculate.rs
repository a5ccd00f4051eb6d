//! The engine loop's speculative decoding: each decoding request's n-gram draft before a step,
//! and after it the verify step's rows sampled in order, the accepted draft kept and the rest
//! rolled back (see `crate::spec` for why this is exact). On a backend that samples where its
//! logits are (CUDA), each verify row is sampled there with the sampler state plain decoding
//! would have at that position, and acceptance is decided here from the ids.

use std::time::Instant;

use super::{EngineLoop, TokenEvent, covered_row};
use crate::backend::{DeviceRow, SampledStep};
use crate::sampling::{SampledToken, Sampler, SamplingError};
use crate::sched::{ScheduledSeq, SchedulerOutput};
use crate::spec::{SpeculativeMode, StepCost, accepted, lookup, verify};

/// Why a verify step stopped sampling early.
enum Stop {
    /// The request is gone (finished or disconnected): nothing to report.
    Gone,
    /// Sampling failed: the request fails with this.
    Failed(String),
}

impl EngineLoop {
    /// Sets the coming step's draft of every running request: a decoding request that may
    /// speculate gets the n-gram proposal at the length its acceptance and the step time
    /// suggest; every other request none.
    pub(super) fn propose_drafts(&mut self) {
        let config = self.speculative;
        if config.mode == SpeculativeMode::Off {
            return;
        }
        let running = self.scheduler.running().to_vec();
        let cost = self.step_cost(running.len());
        // `auto` drafts only where it pays, and while prompts wait it does not: a draft row
        // takes a prompt token's place in the step's token budget, and a step that carries a
        // prompt chunk is compute-bound, so the row costs what that token would have (not the
        // near-free row of a memory-bound decode step the cost model prices), while the prompt
        // token brings a user's first token closer. At 32 streams on 2 cores drafting through
        // the arrivals' prefill put TTFT p95 up by ~10% (7.0-7.2 s off, 7.8-8.3 s auto).
        let prompts_wait = config.mode == SpeculativeMode::Auto && self.scheduler.prefill_pending();
        let mut drafts = Vec::with_capacity(running.len());
        // The draft rows the backend's logits buffers hold in one step.
        let mut budget = self.backend.max_draft_tokens();
        for id in running {
            let (Some(request), Some(active)) =
                (self.scheduler.request(id), self.active.get_mut(&id))
            else {
                continue;
            };
            let Some(policy) = active.spec.as_mut() else {
                continue;
            };
            let decoding =
                request.num_uncomputed() == 1 && request.tokens.len() > request.num_prompt_tokens;
            // The verify step may give every draft token and one more: none past the limits.
            let left = active.sampler.params().max_tokens.map_or(usize::MAX, |m| {
                m.saturating_sub(active.num_generated) as usize
            });
            let room = self
                .config
                .max_model_len
                .saturating_sub(request.tokens.len() + 1);
            let max_k = config
                .num_speculative_tokens
                .min(left.saturating_sub(1))
                .min(room)
                .min(budget);
            if !decoding || max_k == 0 {
                drafts.push((id, Vec::new()));
                continue;
            }
            let (min_n, max_n) = (config.prompt_lookup_min, config.prompt_lookup_max);
            let Some(found) = lookup(&request.tokens, min_n, max_n, max_k) else {
                drafts.push((id, Vec::new()));
                continue;
            };
            let k = if prompts_wait {
                0
            } else {
                policy.length(found.n, config.mode, max_k, cost)
            };
            let first = found.tokens.first().map(|&token| (token, found.n));
            let mut proposal = found.tokens;
            proposal.truncate(k);
            match k {
                // Not drafted: scored against the coming token, so acceptance keeps learning.
                0 => policy.set_shadow(first),
                _ => policy.drafting(found.n),
            }
            budget = budget.saturating_sub(proposal.len());
            drafts.push((id, proposal));
        }
        for (id, draft) in drafts {
            self.scheduler.set_draft(id, draft);
        }
    }

    /// A plain step's time with `running` sequences and each draft row's, from the measured
    /// step-time model (`None` while it warms up) and the decode steps measured so far.
    fn step_cost(&self, running: usize) -> Option<StepCost> {
        let predict = |s, t| self.step_time.predict(s, t);
        StepCost::from_model(predict, running, &self.draft_cost)
    }

    /// Records a finished decode step's time (with or without drafts) for the draft row's cost.
    pub(super) fn observe_draft_cost(&mut self, out: &SchedulerOutput, elapsed_s: f64) {
        let decode_only = out.seqs.iter().all(|s| s.num_tokens == 1 + s.num_draft);
        if self.speculative.mode == SpeculativeMode::Auto && decode_only {
            let drafts = out.seqs.iter().map(|s| s.num_draft).sum();
            self.draft_cost.observe(out.seqs.len(), drafts, elapsed_s);
        }
    }

    /// The tokens each verify step of `out` runs: its decode token, then its draft (`None`
    /// for every other sequence, whose tokens are in the request).
    pub(super) fn drafted_tokens(&self, out: &SchedulerOutput) -> Vec<Option<Vec<u32>>> {
        let drafted = |seq: &ScheduledSeq| {
            let request = self.scheduler.request(seq.id)?;
            let known = seq.num_tokens - seq.num_draft;
            let mut tokens = request
                .tokens
                .get(seq.start_pos..seq.start_pos + known)?
                .to_vec();
            tokens.extend(request.draft.iter().take(seq.num_draft));
            Some(tokens)
        };
        out.seqs
            .iter()
            .map(|seq| (seq.num_draft > 0).then(|| drafted(seq)).flatten())
            .collect()
    }

    /// The rows a backend that samples on the device samples in a step holding drafts: each
    /// verify chunk's rows with [`verify_rows`], every other covered row as plain decoding
    /// gives it; `None` when the backend samples on the host or the step has no draft.
    pub(super) fn device_verify_rows(
        &mut self,
        out: &SchedulerOutput,
        drafted: &[Option<Vec<u32>>],
    ) -> Option<Vec<Vec<DeviceRow>>> {
        let prompt_logits = out.seqs.iter().any(|s| s.prompt_logits);
        if !self.backend.samples_on_device() || prompt_logits || drafted.iter().all(Option::is_none)
        {
            return None;
        }
        let vocab = self.vocab_size;
        let mut rows = Vec::with_capacity(out.seqs.len());
        for seq in &out.seqs {
            let draft: Vec<u32> = self
                .scheduler
                .request(seq.id)
                .map(|r| r.draft.iter().take(seq.num_draft).copied().collect())
                .unwrap_or_default();
            let Some(active) = self.active.get_mut(&seq.id) else {
                rows.push(Vec::new());
                continue;
            };
            rows.push(match seq.num_draft > 0 && !active.constrained {
                true => verify_rows(&active.sampler, &draft, vocab),
                false => covered_row(seq, active, vocab).into_iter().collect(),
            });
        }
        Some(rows)
    }

    /// Samples a verify step's rows in order with the request's own sampler (or takes the ids
    /// the backend sampled with the same state), delivering each token, while they choose the
    /// draft; then keeps the accepted draft positions, rolls back the rest, and records the
    /// acceptance.
    pub(super) fn verify_and_send(
        &mut self,
        index: usize,
        seq: &ScheduledSeq,
        step: &SampledStep,
        now: Instant,
    ) {
        let id = seq.id;
        let vocab = self.vocab_size;
        let rows: Vec<&[f32]> = step.output.rows_of(index, vocab).collect();
        let ids: Vec<i32> = step
            .sampled
            .iter()
            .filter(|s| s.0 == index)
            .map(|s| s.1)
            .collect();
        let mut logprobs = step.logprobs.iter().filter(|l| l.0 == index);
        let draft: Vec<u32> = self
            .scheduler
            .request(id)
            .map(|r| r.draft.iter().take(seq.num_draft).copied().collect())
            .unwrap_or_default();
        let on_device = ids.len() == seq.num_draft + 1;
        if !(on_device || rows.len() == seq.num_draft + 1) || draft.len() != seq.num_draft {
            let message = "the backend returned no logits for the speculative draft";
            self.finish(id, TokenEvent::Failed(message.into()));
            return;
        }
        let chosen = verify(&draft, |i| {
            let active = self.active.get_mut(&id).ok_or(Stop::Gone)?;
            let token = match on_device {
                true => {
                    let mut token = sampled_row(&mut active.sampler, ids[i], vocab)?;
                    if let Some((_, logprob, top)) = logprobs.next() {
                        token.logprob = Some(*logprob);
                        token.top_logprobs = top.clone();
                    }
                    token
                }
                false => active
                    .sampler
                    .sample(rows[i])
                    .map_err(|e| Stop::Failed(e.to_string()))?,
            };
            let token_id = token.token_id;
            Ok((token_id, !self.deliver(id, token, now)))
        });
        let chosen = match chosen {
            Ok(chosen) => chosen,
            Err(Stop::Gone) => return,
            Err(Stop::Failed(message)) => {
                self.finish(id, TokenEvent::Failed(message));
                return;
            }
        };
        let kept = accepted(&draft, &chosen);
        self.metrics.spec_decode.record(draft.len(), kept);
        if let Some(policy) = self.active.get_mut(&id).and_then(|a| a.spec.as_mut()) {
            policy.record(draft.len(), kept);
        }
        self.scheduler.settle_draft(id, kept, &mut self.kv);
    }
}

/// The device rows of a verify chunk: row `i` as plain decoding would sample it after the
/// draft's first `i` tokens were chosen: the penalties count them, and its uniform is the
/// `i`-th next draw of the request's generator. Works on a copy: the request's own sampler
/// advances only by the rows kept ([`sampled_row`]).
fn verify_rows(sampler: &Sampler, draft: &[u32], vocab: usize) -> Vec<DeviceRow> {
    let mut ahead = sampler.clone();
    let logprobs = sampler.params().logprobs;
    let mut rows = Vec::with_capacity(draft.len() + 1);
    for i in 0..=draft.len() {
        let (settings, edits) = ahead.device_row(vocab);
        rows.push(DeviceRow {
            settings,
            edits,
            logprobs,
        });
        if let Some(&token) = draft.get(i) {
            ahead.accept(token);
        }
    }
    rows
}

/// Records a row the device sampled as the request's next token, advancing its sampler
/// exactly as plain device sampling does (the row's draw, then the token's counts).
fn sampled_row(sampler: &mut Sampler, id: i32, vocab: usize) -> Result<SampledToken, Stop> {
    let _ = sampler.device_row(vocab);
    let id = u32::try_from(id)
        .map_err(|_| Stop::Failed(SamplingError::InvalidLogits("no finite logit").to_string()))?;
    Ok(sampler.accept(id))
}
