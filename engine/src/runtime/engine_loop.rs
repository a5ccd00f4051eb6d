//! The engine loop itself: drain commands, schedule a step, run the forward, sample, send
//! tokens, repeat. It runs on a dedicated OS thread because the forward is CPU-bound (or waits
//! on a device) and must never block an async reactor.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::mpsc::{Receiver, RecvTimeoutError, TryRecvError};
use std::time::{Duration, Instant};

use tokio::sync::mpsc::UnboundedSender;

use super::{Command, EngineConfig, EngineMetrics, GenerateRequest, RequestUsage, TokenEvent};
use crate::backend::{Backend, DeviceRow, SampledStep, SeqStep, StepOutput};
use crate::grammar::{Constraint, GrammarError, MaskJob, MaskWorker, TokenMask};
use crate::kv::{KvCacheManager, RequestId};
use crate::lora::LoraAdapter;
use crate::sampling::{
    FinishReason, SampledToken, Sampler, SamplingError, TokenLogprob, finish_on_token,
};
use crate::sched::{
    SchedRequest, ScheduledSeq, Scheduler, SchedulerConfig, SchedulerOutput, StepLimits,
    StepTimeModel,
};
use crate::spec::{DraftCost, DraftPolicy, SpeculativeConfig, SpeculativeMode};

#[path = "speculate.rs"]
mod speculate;

/// A request the loop is serving: its sampler, its grammar, its event channel and its timings.
struct Active {
    sampler: Sampler,
    /// `None` while lent to the mask worker during a step.
    constraint: Option<Constraint>,
    /// Whether the request follows a grammar (so it never samples without a mask).
    constrained: bool,
    events: UnboundedSender<TokenEvent>,
    arrival: Instant,
    last_token_at: Option<Instant>,
    /// Output tokens of the answer so far, those of a resumed start included.
    num_generated: u32,
    /// Prompt tokens that are a resumed answer's start (counted as output in the usage).
    resumed: usize,
    /// The prompt logprobs gathered so far (entry `p` scores prompt token `p + 1`), while the
    /// request asked for them and they have not been sent.
    prompt_logprobs: Option<Vec<SampledToken>>,
    /// Its acceptance so far, while it may speculate (`None`: never, e.g. a grammar).
    spec: Option<DraftPolicy>,
    /// The LoRA adapter of its rows (`None`: the base model).
    adapter: Option<Arc<LoraAdapter>>,
}

/// Everything the loop owns.
pub(super) struct EngineLoop {
    backend: Box<dyn Backend>,
    config: EngineConfig,
    metrics: Arc<EngineMetrics>,
    inbox: Receiver<Command>,
    scheduler: Scheduler,
    kv: KvCacheManager,
    active: HashMap<RequestId, Active>,
    vocab_size: usize,
    /// Computes grammar masks beside the forward pass (started with the first constraint).
    masks: Option<MaskWorker>,
    /// Measured step times, for the TPOT target's limits.
    step_time: StepTimeModel,
    /// Speculative decoding as this backend allows it.
    speculative: SpeculativeConfig,
    /// What a draft row has measured to cost, per batch size.
    draft_cost: DraftCost,
    /// Last events of requests that ended this step, held until the gauges show them gone.
    ended: Vec<(UnboundedSender<TokenEvent>, TokenEvent)>,
}

impl EngineLoop {
    pub(super) fn new(
        backend: Box<dyn Backend>,
        config: EngineConfig,
        metrics: Arc<EngineMetrics>,
        inbox: Receiver<Command>,
    ) -> Self {
        let kv = KvCacheManager::new(
            backend.num_kv_blocks(),
            backend.block_size(),
            config.enable_prefix_caching,
        );
        let scheduler = Scheduler::new(SchedulerConfig {
            max_batch_tokens: config.max_batch_tokens,
            max_num_seqs: config.max_num_seqs,
        });
        let vocab_size = backend.model_config().vocab_size;
        metrics.max_num_seqs.set(scheduler.seat_limit() as f64);
        let speculative = if backend.verifies_drafts() {
            config.speculative
        } else {
            SpeculativeConfig::off()
        };
        metrics
            .spec_decode
            .enable(speculative.mode != SpeculativeMode::Off);
        Self {
            backend,
            config,
            metrics,
            inbox,
            scheduler,
            kv,
            active: HashMap::new(),
            vocab_size,
            masks: None,
            step_time: StepTimeModel::default(),
            speculative,
            draft_cost: DraftCost::default(),
            ended: Vec::new(),
        }
    }

    /// Runs until every handle is dropped and no request is left (`Ok`), or until a fatal
    /// backend error (`Err`: the step's requests have been failed, the rest are still held
    /// for [`fail_all`](Self::fail_all)).
    pub(super) fn run(&mut self) -> crate::Result<()> {
        loop {
            if !self.drain_commands() {
                return Ok(());
            }
            self.apply_tpot_target();
            self.propose_drafts();
            let out = self.scheduler.schedule(&mut self.kv);
            self.record_schedule(&out);
            // Blocks are taken at scheduling time: show them before any token of this step leaves.
            self.publish_gauges();
            if out.seqs.is_empty() {
                // Nothing fits right now (a preemption this step): wait briefly for news.
                self.wait_for_command(Duration::from_millis(2));
            } else {
                self.step(&out)?;
            }
            self.publish_and_send_ended();
        }
    }

    /// Fails every request the loop holds (running, waiting, or still in the inbox) with
    /// `fatal`, so none waits for a loop that has stopped.
    pub(super) fn fail_all(&mut self, fatal: &crate::Error) {
        while let Ok(command) = self.inbox.try_recv() {
            if let Command::Add { events, .. } = command {
                let _ = events.send(TokenEvent::Failed(format!("engine stopped: {fatal}")));
            }
        }
        let ids: Vec<RequestId> = self.active.keys().copied().collect();
        for id in ids {
            self.finish(id, TokenEvent::Failed(format!("engine stopped: {fatal}")));
        }
        self.publish_and_send_ended();
    }

    /// Applies queued commands; blocks while idle. False when the loop should exit.
    fn drain_commands(&mut self) -> bool {
        loop {
            let command = if self.scheduler.is_idle() {
                match self.inbox.recv() {
                    Ok(command) => command,
                    Err(_) => return false,
                }
            } else {
                match self.inbox.try_recv() {
                    Ok(command) => command,
                    Err(TryRecvError::Empty | TryRecvError::Disconnected) => return true,
                }
            };
            self.apply(command);
        }
    }

    fn wait_for_command(&mut self, timeout: Duration) {
        match self.inbox.recv_timeout(timeout) {
            Ok(command) => self.apply(command),
            Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected) => {}
        }
    }

    fn apply(&mut self, command: Command) {
        match command {
            Command::Add {
                id,
                request,
                events,
            } => self.add(id, *request, events),
            Command::Abort { id, completed } => {
                let active = self.active.remove(&id);
                if let Some(active) = active.filter(|_| completed) {
                    self.metrics
                        .e2e_request_latency_s
                        .observe(active.arrival.elapsed().as_secs_f64());
                }
                self.scheduler.remove(id, &mut self.kv);
            }
        }
        // The loop may go back to sleep right after this: the gauges must show it now.
        self.publish_gauges();
    }

    fn add(
        &mut self,
        id: RequestId,
        request: GenerateRequest,
        events: UnboundedSender<TokenEvent>,
    ) {
        let GenerateRequest {
            prompt_tokens,
            params,
            priority,
            cache_salt,
            arrival,
            resumed_tokens,
            constraint,
            adapter,
        } = request;
        let max_len = self
            .config
            .max_model_len
            .min(self.kv.pool().num_blocks() * self.kv.block_size());
        // `max_tokens` counts the whole answer, a resumed start included.
        let to_generate = (params.max_tokens.unwrap_or(1) as usize).saturating_sub(resumed_tokens);
        let wanted = prompt_tokens.len() + to_generate.max(1);
        if prompt_tokens.len() <= resumed_tokens || wanted > max_len {
            // The server checks this first; the loop must still never admit a request that
            // could not fit even alone (it would wait forever).
            let message = format!(
                "prompt plus max_tokens is {wanted} tokens; this engine holds at most {max_len}"
            );
            let _ = events.send(TokenEvent::Failed(message));
            return;
        }
        if params.prompt_logprobs.is_some() && !self.backend.computes_every_row() {
            let message = format!(
                "the {} backend does not compute prompt logprobs (echo with logprobs, prompt_logprobs) yet",
                self.backend.name()
            );
            let _ = events.send(TokenEvent::Failed(message));
            return;
        }
        if adapter.is_some() && !self.backend.computes_lora() {
            let message = format!(
                "LoRA adapters are not supported by the {} backend",
                self.backend.name()
            );
            let _ = events.send(TokenEvent::Failed(message));
            return;
        }
        if constraint.is_some() && self.masks.is_none() {
            match MaskWorker::spawn() {
                Ok(worker) => self.masks = Some(worker),
                Err(err) => {
                    let message = format!("cannot start the grammar mask worker: {err}");
                    let _ = events.send(TokenEvent::Failed(message));
                    return;
                }
            }
        }
        let (prompt, output) = prompt_tokens.split_at(prompt_tokens.len() - resumed_tokens);
        let sampler = Sampler::resume(&params, prompt, output);
        let constrained = constraint.is_some();
        let mut request = SchedRequest::new(id, prompt_tokens, priority, cache_salt);
        request.prompt_logits = params.prompt_logprobs.is_some();
        self.scheduler.add(request);
        self.active.insert(
            id,
            Active {
                sampler,
                constrained: constraint.is_some(),
                constraint,
                events,
                arrival,
                last_token_at: None,
                num_generated: resumed_tokens as u32,
                resumed: resumed_tokens,
                prompt_logprobs: params.prompt_logprobs.map(|_| Vec::new()),
                // A grammar's mask covers one position per step: no drafts.
                spec: (self.speculative.mode != SpeculativeMode::Off
                    && params.speculative
                    && !constrained)
                    .then(DraftPolicy::default),
                adapter,
            },
        );
    }

    /// One forward step over `out.seqs`, then sampling and delivery. The grammar masks of the
    /// constrained sequences that sample this step are computed meanwhile on the mask worker.
    /// A backend error fails this step's requests; a fatal one is returned to stop the loop
    /// (the caller fails them, after reporting the fault).
    fn step(&mut self, out: &SchedulerOutput) -> crate::Result<()> {
        let started = Instant::now();
        let lent = self.lend_constraints(out);
        let drafted = self.drafted_tokens(out);
        // A verify step on a backend that samples its rows: every row of a draft sampled there.
        let verify = self.device_verify_rows(out, &drafted);
        let device = match verify {
            Some(_) => None,
            None => self.device_rows(out, &drafted),
        };
        let result = {
            let mut batch = Vec::with_capacity(out.seqs.len());
            let mut every_row = Vec::with_capacity(out.seqs.len());
            let mut adapters = Vec::with_capacity(out.seqs.len());
            for (seq, drafted) in out.seqs.iter().zip(&drafted) {
                let Some(request) = self.scheduler.request(seq.id) else {
                    continue;
                };
                // A verify step runs the decode token and the draft, which is not in `tokens`.
                let tokens = match drafted {
                    Some(tokens) => tokens.as_slice(),
                    None => &request.tokens[seq.start_pos..seq.start_pos + seq.num_tokens],
                };
                batch.push(SeqStep {
                    tokens,
                    start_pos: seq.start_pos,
                    block_table: self.kv.block_table(seq.id),
                    want_logits: seq.want_logits,
                });
                every_row.push(seq.prompt_logits || seq.num_draft > 0);
                adapters.push(self.active.get(&seq.id).and_then(|a| a.adapter.as_deref()));
            }
            // Only a step that holds a prompt-logprobs chunk or a draft pays for the extra rows.
            let every_row: &[bool] = match every_row.contains(&true) {
                true => &every_row,
                false => &[],
            };
            match (&verify, &device) {
                (Some(rows), _) => self.backend.forward_sampled_rows(&batch, every_row, rows),
                (None, Some(rows)) => self.backend.forward_sampled(&batch, rows),
                (None, None) => {
                    self.backend
                        .forward_lora(&batch, every_row, &adapters)
                        .map(|output| SampledStep {
                            output,
                            ..SampledStep::default()
                        })
                }
            }
        };
        let masks = self.take_back_constraints(lent);
        match result {
            Ok(step) => {
                self.scheduler.on_step_computed(out, &mut self.kv);
                self.gather_prompt_logprobs(out, &step.output);
                self.sample_and_send(out, &step, masks);
            }
            // A fatal error fails nothing here: the caller reports the fault first and then
            // fails every request (this step's too), so no client whose request failed can
            // still find `/health` answering 200.
            Err(err) if err.is_fatal() => return Err(err),
            Err(err) => {
                tracing::error!(error = %err, "forward step failed; failing its requests");
                for seq in &out.seqs {
                    self.finish(
                        seq.id,
                        TokenEvent::Failed(format!("engine step failed: {err}")),
                    );
                }
            }
        }
        // The whole step, sampling and delivery included: what each stream waits per token.
        let elapsed_s = started.elapsed().as_secs_f64();
        let tokens = out.seqs.iter().map(|s| s.num_tokens).sum();
        self.observe_draft_cost(out, elapsed_s);
        self.step_time.observe(out.seqs.len(), tokens, elapsed_s);
        self.metrics.step_duration_s.observe(elapsed_s);
        self.metrics.batch_size.observe(out.seqs.len() as f64);
        Ok(())
    }

    /// With a TPOT target, caps the coming step to what the measured step time allows; the
    /// cap is exported so the operator and the gateway see this replica's operating point.
    fn apply_tpot_target(&mut self) {
        let Some(target) = self.config.tpot_target else {
            return;
        };
        let config = self.scheduler.config();
        let ceiling = StepLimits {
            max_num_seqs: config.max_num_seqs,
            max_batch_tokens: config.max_batch_tokens,
        };
        let limits =
            self.step_time
                .limits(target.as_secs_f64(), self.scheduler.num_running(), ceiling);
        self.scheduler.set_step_limits(Some(limits));
        self.metrics
            .max_num_seqs
            .set(self.scheduler.seat_limit() as f64);
    }

    /// Hands the constraints of this step's sampling sequences to the mask worker; returns
    /// the ids lent (empty: no batch in flight).
    fn lend_constraints(&mut self, out: &SchedulerOutput) -> Vec<RequestId> {
        let Some(worker) = &self.masks else {
            return Vec::new();
        };
        let jobs: Vec<MaskJob> = out
            .seqs
            .iter()
            .filter(|s| s.want_logits)
            .filter_map(|s| {
                let constraint = self.active.get_mut(&s.id)?.constraint.take()?;
                Some(MaskJob {
                    id: s.id,
                    constraint,
                })
            })
            .collect();
        let ids: Vec<RequestId> = jobs.iter().map(|j| j.id).collect();
        // Only a batch that is collected after the forward may be sent: an empty one would
        // leave its answer in the channel for the next step to mistake for its own.
        if !jobs.is_empty() {
            // A send fails only if the worker died: collecting then fails these requests.
            let _ = worker.submit(jobs);
        }
        ids
    }

    /// Waits for the masks of the batch lent before the forward and gives each constraint
    /// back to its request.
    fn take_back_constraints(
        &mut self,
        lent: Vec<RequestId>,
    ) -> HashMap<RequestId, Result<TokenMask, GrammarError>> {
        let mut masks = HashMap::new();
        let Some(worker) = self.masks.as_ref().filter(|_| !lent.is_empty()) else {
            return masks;
        };
        match worker.collect() {
            Ok(results) => {
                for (job, mask) in results {
                    if let Some(active) = self.active.get_mut(&job.id) {
                        active.constraint = Some(job.constraint);
                    }
                    masks.insert(job.id, mask);
                }
            }
            Err(err) => {
                // The worker died with the constraints it held: their requests fail.
                masks.extend(lent.into_iter().map(|id| (id, Err(err.clone()))));
            }
        }
        masks
    }

    /// Scores the prompt tokens this step's prompt-logprobs chunks predict, and sends a
    /// request's prompt logprobs once they are complete (before its first token). A chunk
    /// computed again after a preemption adds nothing: only the next missing entry is taken.
    fn gather_prompt_logprobs(&mut self, out: &SchedulerOutput, output: &StepOutput) {
        for (index, seq) in out.seqs.iter().enumerate().filter(|(_, s)| s.prompt_logits) {
            let (Some(active), Some(request)) =
                (self.active.get_mut(&seq.id), self.scheduler.request(seq.id))
            else {
                continue;
            };
            let Some(gathered) = active.prompt_logprobs.as_mut() else {
                continue;
            };
            let n = active.sampler.params().prompt_logprobs.unwrap_or(0);
            let prompt = &request.tokens[..request.num_prompt_tokens];
            // The row of position `pos` scores the token at `pos + 1`.
            for (pos, row) in (seq.start_pos..).zip(output.rows_of(index, self.vocab_size)) {
                if pos == gathered.len() && pos + 1 < prompt.len() {
                    gathered.push(SampledToken::scored(row, prompt[pos + 1], n));
                }
            }
            if gathered.len() + 1 >= prompt.len() {
                let gathered = active.prompt_logprobs.take().unwrap_or_default();
                let _ = active.events.send(TokenEvent::PromptLogprobs(gathered));
            }
        }
    }

    /// The rows the backend samples itself this step (by index in `out.seqs`), when it can
    /// and nothing in the step needs every row's logits on the host (prompt logprobs, drafts,
    /// adapters); `None` otherwise. A row the device sampler does not cover (a grammar)
    /// stays with the host sampler. Building a row draws its uniform.
    fn device_rows(
        &mut self,
        out: &SchedulerOutput,
        drafted: &[Option<Vec<u32>>],
    ) -> Option<Vec<Option<DeviceRow>>> {
        let adapters = out
            .seqs
            .iter()
            .any(|s| self.active.get(&s.id).is_some_and(|a| a.adapter.is_some()));
        let every_row = out.seqs.iter().any(|s| s.prompt_logits || s.num_draft > 0);
        if !self.backend.samples_on_device()
            || adapters
            || every_row
            || drafted.iter().any(Option::is_some)
        {
            return None;
        }
        let vocab = self.vocab_size;
        Some(
            out.seqs
                .iter()
                .map(|seq| {
                    let active = self.active.get_mut(&seq.id)?;
                    covered_row(seq, active, vocab)
                })
                .collect(),
        )
    }

    /// Delivers a token the backend sampled (−1: its row had no finite logit), with its
    /// logprobs when the request asked.
    fn deliver_sampled(
        &mut self,
        id: RequestId,
        token: i32,
        logprobs: Option<&(usize, f32, Vec<TokenLogprob>)>,
        now: Instant,
    ) {
        let Some(active) = self.active.get_mut(&id) else {
            return;
        };
        let Ok(token_id) = u32::try_from(token) else {
            let err = SamplingError::InvalidLogits("no finite logit");
            self.finish(id, TokenEvent::Failed(err.to_string()));
            return;
        };
        let mut token = active.sampler.accept(token_id);
        if let Some((_, logprob, top)) = logprobs {
            token.logprob = Some(*logprob);
            token.top_logprobs = top.clone();
        }
        if let Some(spec) = &mut active.spec {
            spec.on_token(token_id);
        }
        self.deliver(id, token, now);
    }

    fn sample_and_send(
        &mut self,
        out: &SchedulerOutput,
        step: &SampledStep,
        mut masks: HashMap<RequestId, Result<TokenMask, GrammarError>>,
    ) {
        let now = Instant::now();
        let output = &step.output;
        let sampled: HashMap<usize, i32> = step.sampled.iter().copied().collect();
        for (index, seq) in out.seqs.iter().enumerate().filter(|(_, s)| s.want_logits) {
            if seq.num_draft > 0 {
                self.verify_and_send(index, seq, step, now);
                continue;
            }
            if let Some(&token) = sampled.get(&index) {
                let logprobs = step.logprobs.iter().find(|l| l.0 == index);
                self.deliver_sampled(seq.id, token, logprobs, now);
                continue;
            }
            let Some(logits) = output.logits_of(index, self.vocab_size) else {
                self.finish(
                    seq.id,
                    TokenEvent::Failed("the backend returned no logits".into()),
                );
                continue;
            };
            let Some(active) = self.active.get_mut(&seq.id) else {
                continue;
            };
            if active.sampler.params().max_tokens == Some(0) {
                // Only the prompt was to be scored: it ends here, with nothing generated.
                let cached = self
                    .scheduler
                    .request(seq.id)
                    .and_then(|r| r.num_cached_tokens);
                let prompt_tokens = self
                    .scheduler
                    .request(seq.id)
                    .map_or(0, |r| r.num_prompt_tokens);
                let usage = RequestUsage {
                    prompt_tokens,
                    completion_tokens: 0,
                    cached_tokens: cached.unwrap_or(0),
                };
                let reason = FinishReason::Length;
                self.finish(seq.id, TokenEvent::Finished { reason, usage });
                continue;
            }
            let mask = match masks.remove(&seq.id).transpose() {
                // A constrained request never samples without its mask.
                Ok(None) if active.constrained => {
                    let message = "internal error: no grammar mask for a constrained request";
                    self.finish(seq.id, TokenEvent::Failed(message.into()));
                    continue;
                }
                Ok(mask) => mask,
                Err(err) => {
                    self.finish(seq.id, TokenEvent::Failed(err.to_string()));
                    continue;
                }
            };
            let token = match active.sampler.sample_masked(logits, mask.as_ref()) {
                Ok(token) => token,
                Err(err) => {
                    self.finish(seq.id, TokenEvent::Failed(err.to_string()));
                    continue;
                }
            };
            if let Some(spec) = &mut active.spec {
                spec.on_token(token.token_id);
            }
            self.deliver(seq.id, token, now);
        }
    }

    /// Records a sampled token of `id`, sends it, and ends the request when it stops there.
    /// True while the request goes on.
    fn deliver(&mut self, id: RequestId, token: SampledToken, now: Instant) -> bool {
        let Some(active) = self.active.get_mut(&id) else {
            return false;
        };
        if let Some(constraint) = &mut active.constraint {
            constraint.record(token.token_id);
        }
        active.num_generated += 1;
        match active.last_token_at {
            None => self
                .metrics
                .time_to_first_token_s
                .observe((now - active.arrival).as_secs_f64()),
            Some(last) => self
                .metrics
                .inter_token_latency_s
                .observe((now - last).as_secs_f64()),
        }
        active.last_token_at = Some(now);
        self.metrics.generation_tokens.add(1);
        let token_id = token.token_id;
        let finish = finish_on_token(
            active.sampler.params(),
            token_id,
            active.num_generated,
            &self.config.eos_token_ids,
        );
        self.scheduler.append_token(id, token_id);
        let Some(request) = self.scheduler.request(id) else {
            return false;
        };
        let cached = request.num_cached_tokens.unwrap_or(0);
        let finish = finish.or_else(|| {
            (request.tokens.len() >= self.config.max_model_len).then_some(FinishReason::Length)
        });
        // EOS and stop tokens end the request without joining the output.
        let is_output = !matches!(finish, Some(FinishReason::Eos | FinishReason::StopToken(_)));
        if is_output
            && active
                .events
                .send(TokenEvent::Token {
                    token,
                    num_cached_tokens: cached,
                })
                .is_err()
        {
            // The receiver is gone: the client disconnected.
            self.scheduler.remove(id, &mut self.kv);
            self.active.remove(&id);
            return false;
        }
        let Some(reason) = finish else {
            return true;
        };
        // A resumed start is output, not prompt, of the answer this request completes.
        let prompt_tokens = request.num_prompt_tokens - active.resumed;
        let usage = RequestUsage {
            prompt_tokens,
            completion_tokens: active.num_generated as usize - usize::from(!is_output),
            cached_tokens: cached.min(prompt_tokens),
        };
        self.metrics
            .e2e_request_latency_s
            .observe((now - active.arrival).as_secs_f64());
        self.finish(id, TokenEvent::Finished { reason, usage });
        false
    }

    /// Forgets a request; its last event leaves with
    /// [`publish_and_send_ended`](Self::publish_and_send_ended).
    fn finish(&mut self, id: RequestId, event: TokenEvent) {
        if let Some(active) = self.active.remove(&id) {
            self.ended.push((active.events, event));
        }
        self.scheduler.remove(id, &mut self.kv);
    }

    /// Publishes the gauges, then sends the last events of the requests that ended: a client
    /// that reads `/metrics` the moment its answer ends sees it ended.
    fn publish_and_send_ended(&mut self) {
        self.publish_gauges();
        for (events, event) in self.ended.drain(..) {
            let _ = events.send(event);
        }
    }

    fn record_schedule(&mut self, out: &SchedulerOutput) {
        let m = &self.metrics;
        m.num_preemptions.add(out.preempted.len() as u64);
        m.prefix_cache_queries.add(out.prefix_query_tokens);
        m.prefix_cache_hits.add(out.prefix_hit_tokens);
        for id in &out.first_scheduled {
            if let (Some(active), Some(request)) =
                (self.active.get(id), self.scheduler.request(*id))
            {
                m.request_queue_time_s
                    .observe(active.arrival.elapsed().as_secs_f64());
                m.prompt_tokens.add(request.num_prompt_tokens as u64);
            }
        }
    }

    fn publish_gauges(&self) {
        self.metrics
            .num_requests_running
            .set(self.scheduler.num_running() as f64);
        self.metrics
            .num_requests_waiting
            .set(self.scheduler.num_waiting() as f64);
        self.metrics.kv_cache_usage_perc.set(self.kv.usage());
        let names = |ids: &mut dyn Iterator<Item = &RequestId>| {
            let mut names: Vec<&str> = ids
                .filter_map(|id| self.active.get(id)?.adapter.as_deref())
                .map(|a| a.name.as_str())
                .collect();
            names.sort_unstable();
            names.dedup();
            names
        };
        let running = names(&mut self.scheduler.running().iter());
        let waiting = names(&mut self.scheduler.waiting().iter());
        self.metrics.lora.set(&running, &waiting);
    }
}

/// The device row of `seq`'s wanted row when the device sampler covers it (no grammar, not a
/// prompt scored alone); building it draws the row's uniform from the request's generator.
fn covered_row(seq: &ScheduledSeq, active: &mut Active, vocab: usize) -> Option<DeviceRow> {
    let p = active.sampler.params();
    let covered = seq.want_logits && !active.constrained && p.max_tokens != Some(0);
    let logprobs = p.logprobs;
    covered.then(|| {
        let (settings, edits) = active.sampler.device_row(vocab);
        DeviceRow {
            settings,
            edits,
            logprobs,
        }
    })
}
