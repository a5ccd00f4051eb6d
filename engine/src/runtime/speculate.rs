//! The engine loop's speculative decoding: each decoding request's n-gram draft before a step,
//! and after it the verify step's rows sampled in order, the accepted draft kept and the rest
//! rolled back (see `crate::spec` for why this is exact).

use std::time::Instant;

use super::{EngineLoop, TokenEvent};
use crate::backend::StepOutput;
use crate::sched::{ScheduledSeq, SchedulerOutput};
use crate::spec::{SpeculativeMode, StepCost, accepted, propose, verify};

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
        let mut drafts = Vec::with_capacity(running.len());
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
                .min(room);
            if !decoding || max_k == 0 {
                drafts.push((id, Vec::new()));
                continue;
            }
            let k = policy.length(config.mode, max_k, cost);
            let (min_n, max_n) = (config.prompt_lookup_min, config.prompt_lookup_max);
            let mut proposal = propose(&request.tokens, min_n, max_n, k.max(1));
            if k == 0 {
                // Not drafted: scored against the coming token, so acceptance keeps learning.
                policy.set_shadow(proposal.first().copied());
                proposal.clear();
            }
            drafts.push((id, proposal));
        }
        for (id, draft) in drafts {
            self.scheduler.set_draft(id, draft);
        }
    }

    /// A plain step's time with `running` sequences and each extra token's, from the
    /// measured step-time model (`None` while it warms up).
    fn step_cost(&self, running: usize) -> Option<StepCost> {
        let n = running.max(1);
        let step_s = self.step_time.predict(n, n)?;
        let per_token_s = self.step_time.predict(n, n + 1)? - step_s;
        Some(StepCost {
            step_s,
            per_token_s,
            running: n,
        })
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

    /// Samples a verify step's rows in order with the request's own sampler, delivering each
    /// token, while they choose the draft; then keeps the accepted draft positions, rolls back
    /// the rest, and records the acceptance.
    pub(super) fn verify_and_send(
        &mut self,
        index: usize,
        seq: &ScheduledSeq,
        output: &StepOutput,
        now: Instant,
    ) {
        let id = seq.id;
        let rows: Vec<&[f32]> = output.rows_of(index, self.vocab_size).collect();
        let draft: Vec<u32> = self
            .scheduler
            .request(id)
            .map(|r| r.draft.iter().take(seq.num_draft).copied().collect())
            .unwrap_or_default();
        if rows.len() != seq.num_draft + 1 || draft.len() != seq.num_draft {
            let message = "the backend returned no logits for the speculative draft";
            self.finish(id, TokenEvent::Failed(message.into()));
            return;
        }
        let chosen = verify(&draft, |i| {
            let active = self.active.get_mut(&id).ok_or(Stop::Gone)?;
            let token = active
                .sampler
                .sample(rows[i])
                .map_err(|e| Stop::Failed(e.to_string()))?;
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
