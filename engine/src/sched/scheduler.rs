//! The iteration-level scheduler: each step, running requests first (one decode token each, or
//! their next prefill chunk), then waiting ones as chunked prefill within the token budget that
//! is left; preemption by recompute when the KV pool runs dry. Pure: no I/O, no clocks.

use std::collections::{HashMap, VecDeque};

use super::request::{Priority, SchedRequest};
use super::step_time::StepLimits;
use crate::kv::{CachedPrefix, KvCacheManager, RequestId};

/// Limits of one step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SchedulerConfig {
    /// Tokens (prefill plus decode) in one forward step.
    pub max_batch_tokens: usize,
    /// Sequences in one forward step (and in the running set).
    pub max_num_seqs: usize,
}

/// One sequence's share of a step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ScheduledSeq {
    pub id: RequestId,
    /// First position computed this step (the request's `num_computed_tokens`).
    pub start_pos: usize,
    /// Tokens computed this step: a prefill chunk or 1 for decode.
    pub num_tokens: usize,
    /// The chunk reaches the last known token, so its logits give the next token.
    pub want_logits: bool,
    /// Every token of this prompt chunk wants its logits (the request asked for prompt
    /// logprobs).
    pub prompt_logits: bool,
    /// Of `num_tokens`, the trailing draft tokens (a verify step: every row's logits are
    /// wanted, and only the accepted ones stay computed; see [`Scheduler::settle_draft`]).
    pub num_draft: usize,
}

/// What one call to [`Scheduler::schedule`] decided.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SchedulerOutput {
    /// The batch, in order.
    pub seqs: Vec<ScheduledSeq>,
    /// Requests preempted this step (blocks freed, back at the front of waiting).
    pub preempted: Vec<RequestId>,
    /// Requests scheduled for the first time this step (their queue time ends now).
    pub first_scheduled: Vec<RequestId>,
    /// Prompt tokens looked up in the prefix cache this step.
    pub prefix_query_tokens: u64,
    /// Of those, tokens found.
    pub prefix_hit_tokens: u64,
}

/// Running and waiting requests, and the policy that picks each step's batch.
#[derive(Debug)]
pub struct Scheduler {
    config: SchedulerConfig,
    requests: HashMap<RequestId, SchedRequest>,
    /// One FIFO per priority class, indexed by [`Priority::index`].
    waiting: [VecDeque<RequestId>; 2],
    /// Admission order.
    running: Vec<RequestId>,
    next_arrival_seq: u64,
    /// Tighter limits for the next steps (the TPOT target's operating point), within `config`.
    limits: Option<StepLimits>,
}

impl Scheduler {
    /// An empty scheduler.
    pub fn new(config: SchedulerConfig) -> Self {
        let config = SchedulerConfig {
            max_batch_tokens: config.max_batch_tokens.max(1),
            max_num_seqs: config.max_num_seqs.max(1),
        };
        Self {
            config,
            requests: HashMap::new(),
            waiting: Default::default(),
            running: Vec::new(),
            next_arrival_seq: 0,
            limits: None,
        }
    }

    /// Sets tighter limits for the coming steps (`None`: the configured ones). The running
    /// set is never cut to fit them: sequences already running finish, new ones wait.
    pub fn set_step_limits(&mut self, limits: Option<StepLimits>) {
        self.limits = limits;
    }

    /// The running set's size limit in force: the configured one or a tighter step limit.
    pub fn seat_limit(&self) -> usize {
        self.limits.map_or(self.config.max_num_seqs, |l| {
            l.max_num_seqs.clamp(1, self.config.max_num_seqs)
        })
    }

    fn token_budget(&self) -> usize {
        self.limits.map_or(self.config.max_batch_tokens, |l| {
            l.max_batch_tokens.clamp(1, self.config.max_batch_tokens)
        })
    }

    /// The limits this scheduler runs with.
    pub fn config(&self) -> SchedulerConfig {
        self.config
    }

    /// Queues a request at the back of its class.
    pub fn add(&mut self, mut request: SchedRequest) {
        request.arrival_seq = self.next_arrival_seq;
        self.next_arrival_seq += 1;
        self.waiting[request.priority.index()].push_back(request.id);
        self.requests.insert(request.id, request);
    }

    /// Removes a request wherever it is (finished or cancelled) and frees its blocks.
    pub fn remove(&mut self, id: RequestId, kv: &mut KvCacheManager) -> Option<SchedRequest> {
        let request = self.requests.remove(&id)?;
        self.running.retain(|&r| r != id);
        self.waiting[request.priority.index()].retain(|&r| r != id);
        kv.free(id);
        Some(request)
    }

    /// A request's state.
    pub fn request(&self, id: RequestId) -> Option<&SchedRequest> {
        self.requests.get(&id)
    }

    /// Appends a generated token to a request.
    pub fn append_token(&mut self, id: RequestId, token: u32) {
        if let Some(request) = self.requests.get_mut(&id) {
            request.tokens.push(token);
        }
    }

    /// Requests in the running set.
    pub fn num_running(&self) -> usize {
        self.running.len()
    }

    /// Requests waiting (new or preempted).
    pub fn num_waiting(&self) -> usize {
        self.waiting.iter().map(VecDeque::len).sum()
    }

    /// Prompt work the next step could run: a running request part way through its prompt
    /// (or recomputing after preemption), or a waiting one with a free seat.
    pub fn prefill_pending(&self) -> bool {
        let mid_prompt = self.running.iter().any(|id| {
            self.requests
                .get(id)
                .is_some_and(|r| r.num_uncomputed() > 1)
        });
        mid_prompt || (self.num_waiting() > 0 && self.running.len() < self.seat_limit())
    }

    /// No request at all.
    pub fn is_idle(&self) -> bool {
        self.requests.is_empty()
    }

    /// Ids of running requests, in admission order.
    pub fn running(&self) -> &[RequestId] {
        &self.running
    }

    /// Ids of waiting requests, interactive first, each class in queue order.
    pub fn waiting(&self) -> Vec<RequestId> {
        self.waiting.iter().flatten().copied().collect()
    }

    /// Picks the next step's batch and reserves its KV slots.
    pub fn schedule(&mut self, kv: &mut KvCacheManager) -> SchedulerOutput {
        let mut out = SchedulerOutput::default();
        let mut budget = self.token_budget();
        self.schedule_running(kv, &mut out, &mut budget);
        // A request preempted this step would be readmitted at once and thrash: wait a step.
        if out.preempted.is_empty() {
            self.schedule_waiting(kv, &mut out, &mut budget);
        }
        out
    }

    /// Records that the step in `out` ran: advances `num_computed_tokens` and registers the
    /// blocks that became full in the prefix cache.
    pub fn on_step_computed(&mut self, out: &SchedulerOutput, kv: &mut KvCacheManager) {
        for seq in &out.seqs {
            let Some(request) = self.requests.get_mut(&seq.id) else {
                continue;
            };
            // Draft positions count once accepted (`settle_draft`).
            request.num_computed_tokens = seq.start_pos + seq.num_tokens - seq.num_draft;
            let salt = request.cache_salt.as_deref();
            kv.cache_computed_blocks(seq.id, &request.tokens, request.num_computed_tokens, salt);
        }
    }

    /// Running requests, oldest admission first: each gets its remaining tokens within the
    /// budget. When its blocks cannot grow, the lowest-priority newest running request is
    /// preempted (possibly itself) until they can.
    fn schedule_running(
        &mut self,
        kv: &mut KvCacheManager,
        out: &mut SchedulerOutput,
        budget: &mut usize,
    ) {
        let mut i = 0;
        while i < self.running.len() && *budget > 0 {
            let id = self.running[i];
            let Some(request) = self.requests.get(&id) else {
                self.running.remove(i);
                continue;
            };
            let num_new = request.num_uncomputed().min(*budget);
            let target = request.num_computed_tokens + num_new;
            if num_new == 0 {
                i += 1;
                continue;
            }
            if self.schedule_with_draft(kv, out, budget, id) {
                i += 1;
                continue;
            }
            if kv
                .allocate_slots(id, target, &CachedPrefix::default())
                .is_some()
            {
                self.push_seq(out, id, num_new);
                *budget -= num_new;
                i += 1;
                continue;
            }
            let Some(victim) = self.victim_position(None) else {
                break;
            };
            self.preempt(victim, kv, out, budget);
            // A victim before `i` was scheduled already: the current request moved down.
            if victim < i {
                i -= 1;
            }
        }
    }

    /// Waiting requests, interactive class first, each in FIFO order, until the budget, the
    /// sequence cap or the KV pool says stop. An interactive request that does not fit
    /// preempts running batch work; batch work never preempts anything to get in.
    fn schedule_waiting(
        &mut self,
        kv: &mut KvCacheManager,
        out: &mut SchedulerOutput,
        budget: &mut usize,
    ) {
        for class in [Priority::Interactive, Priority::Batch] {
            // Batch work preempted for interactive work this step stays out this step.
            if class == Priority::Batch && !out.preempted.is_empty() {
                return;
            }
            while let Some(&id) = self.waiting[class.index()].front() {
                if *budget == 0 {
                    return;
                }
                let has_seat = self.running.len() < self.seat_limit();
                if has_seat && self.admit(id, kv, out, budget) {
                    continue;
                }
                let victim = (class == Priority::Interactive)
                    .then(|| self.victim_position(Some(Priority::Batch)));
                match victim.flatten() {
                    Some(position) => self.preempt(position, kv, out, budget),
                    None => return,
                }
            }
        }
    }

    /// Moves the head of a waiting queue to running with its first chunk, reusing its cached
    /// prefix. False (nothing changed) when its blocks do not fit.
    fn admit(
        &mut self,
        id: RequestId,
        kv: &mut KvCacheManager,
        out: &mut SchedulerOutput,
        budget: &mut usize,
    ) -> bool {
        let Some(request) = self.requests.get(&id) else {
            self.waiting.iter_mut().for_each(|q| q.retain(|&r| r != id));
            return true;
        };
        let prefix = if request.prompt_logits {
            CachedPrefix::default()
        } else {
            kv.find_cached_prefix(&request.tokens, request.cache_salt.as_deref())
        };
        let start = prefix.num_tokens;
        let num_new = (request.tokens.len() - start).min(*budget);
        if kv.allocate_slots(id, start + num_new, &prefix).is_none() {
            return false;
        }
        let Some(request) = self.requests.get_mut(&id) else {
            return false;
        };
        request.num_computed_tokens = start;
        if request.num_cached_tokens.is_none() {
            request.num_cached_tokens = Some(start);
            out.first_scheduled.push(id);
        }
        out.prefix_query_tokens += request.tokens.len() as u64;
        out.prefix_hit_tokens += start as u64;
        self.waiting[request.priority.index()].pop_front();
        self.running.push(id);
        self.push_seq(out, id, num_new);
        *budget -= num_new;
        true
    }

    /// Evicts the running request at `position`: frees its blocks, takes it out of this step's
    /// batch (refunding its budget) and requeues it at the front of its class to recompute.
    fn preempt(
        &mut self,
        position: usize,
        kv: &mut KvCacheManager,
        out: &mut SchedulerOutput,
        budget: &mut usize,
    ) {
        let id = self.running.remove(position);
        kv.free(id);
        if let Some(k) = out.seqs.iter().position(|s| s.id == id) {
            *budget += out.seqs.remove(k).num_tokens;
        }
        out.first_scheduled.retain(|&r| r != id);
        if let Some(request) = self.requests.get_mut(&id) {
            request.num_computed_tokens = 0;
            request.num_preemptions += 1;
            self.waiting[request.priority.index()].push_front(id);
        }
        out.preempted.push(id);
    }

    /// Position in `running` of the request to preempt: the lowest class, newest first;
    /// `only` restricts the choice to one class.
    fn victim_position(&self, only: Option<Priority>) -> Option<usize> {
        let requests = &self.requests;
        (0..self.running.len())
            .filter_map(|p| requests.get(&self.running[p]).map(|r| (p, r)))
            .filter(|(_, r)| only.is_none_or(|class| r.priority == class))
            .max_by_key(|(_, r)| r.victim_key())
            .map(|(p, _)| p)
    }

    /// A decoding request with a draft runs its token and as much of the draft as the budget
    /// and the pool allow. False (nothing changed) when it has no draft or no room for one.
    fn schedule_with_draft(
        &mut self,
        kv: &mut KvCacheManager,
        out: &mut SchedulerOutput,
        budget: &mut usize,
        id: RequestId,
    ) -> bool {
        let Some(request) = self.requests.get(&id) else {
            return false;
        };
        let num_draft = request.draft.len().min(budget.saturating_sub(1));
        if request.num_uncomputed() != 1 || num_draft == 0 {
            return false;
        }
        let target = request.num_computed_tokens + 1 + num_draft;
        if kv
            .allocate_slots(id, target, &CachedPrefix::default())
            .is_none()
        {
            return false;
        }
        self.push_seq(out, id, 1);
        if let Some(seq) = out.seqs.last_mut() {
            seq.num_tokens += num_draft;
            seq.num_draft = num_draft;
        }
        *budget -= 1 + num_draft;
        true
    }

    /// Sets the draft a decoding request runs next step (replacing any earlier one).
    pub fn set_draft(&mut self, id: RequestId, draft: Vec<u32>) {
        if let Some(request) = self.requests.get_mut(&id) {
            request.draft = draft;
        }
    }

    /// After a verify step of `id` whose chosen tokens were appended: its first `accepted`
    /// draft tokens are computed, the rejected positions' blocks go back to the pool, and
    /// the blocks that became full join the prefix cache.
    pub fn settle_draft(&mut self, id: RequestId, accepted: usize, kv: &mut KvCacheManager) {
        let Some(request) = self.requests.get_mut(&id) else {
            return;
        };
        request.draft.clear();
        // The last appended token (a correction or bonus) is not computed yet.
        let computed =
            (request.num_computed_tokens + accepted).min(request.tokens.len().saturating_sub(1));
        request.num_computed_tokens = computed;
        kv.truncate(id, computed);
        let salt = request.cache_salt.as_deref();
        kv.cache_computed_blocks(id, &request.tokens, computed, salt);
    }

    fn push_seq(&self, out: &mut SchedulerOutput, id: RequestId, num_tokens: usize) {
        let Some(request) = self.requests.get(&id) else {
            return;
        };
        let start_pos = request.num_computed_tokens;
        let want_logits = start_pos + num_tokens == request.tokens.len();
        out.seqs.push(ScheduledSeq {
            id,
            start_pos,
            num_tokens,
            want_logits,
            prompt_logits: request.prompt_logits && start_pos < request.num_prompt_tokens,
            num_draft: 0,
        });
    }
}

#[cfg(test)]
#[path = "tests.rs"]
mod tests;

#[cfg(test)]
#[path = "spec_tests.rs"]
mod spec_tests;
