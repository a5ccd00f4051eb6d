//! The engine loop's shell: one thread owns the scheduler, the KV manager and the backend;
//! requests arrive and tokens leave through channels. Tokenisation, detokenisation and stop
//! strings stay outside, in the request handlers.

mod engine_loop;
mod lora_metrics;
pub mod metrics;
mod start_metrics;

use std::any::Any;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::time::Instant;

use tokio::sync::mpsc as tokio_mpsc;
use tokio::sync::watch;

use crate::backend::Backend;
use crate::grammar::Constraint;
use crate::kv::RequestId;
use crate::sampling::{FinishReason, SampledToken, SamplingParams};
use crate::sched::Priority;
pub use metrics::EngineMetrics;
pub use start_metrics::{StartClock, mark_process_start};

/// How the loop batches.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    /// Tokens (prefill plus decode) per forward step.
    pub max_batch_tokens: usize,
    /// Sequences per forward step.
    pub max_num_seqs: usize,
    /// Reuse cached KV blocks of shared prompt prefixes.
    pub enable_prefix_caching: bool,
    /// Longest prompt plus completion, in tokens (the model's context, at most).
    pub max_model_len: usize,
    /// Tokens that end generation unless `ignore_eos`.
    pub eos_token_ids: Vec<u32>,
    /// The time per output token each running sequence should hold (`serve --tpot-target`):
    /// the running set and each step's tokens are capped to what the measured step time
    /// allows (see `sched::StepTimeModel`); `None`, only the limits above.
    pub tpot_target: Option<std::time::Duration>,
    /// Speculative decoding (`serve --speculative`); off on a backend that cannot verify
    /// drafts.
    pub speculative: crate::spec::SpeculativeConfig,
}

/// One generation request, already tokenised.
#[derive(Debug, Clone)]
pub struct GenerateRequest {
    pub prompt_tokens: Vec<u32>,
    /// Sampling and token-level stopping; `max_tokens` should be set.
    pub params: SamplingParams,
    pub priority: Priority,
    pub cache_salt: Option<String>,
    /// When the request reached the server (latency metrics start here).
    pub arrival: Instant,
    /// The last `resumed_tokens` of `prompt_tokens` are the start of the answer, generated
    /// elsewhere (a continuation): `max_tokens`, the penalties, the seeded draws and the usage
    /// count them as output. 0 for a fresh request.
    pub resumed_tokens: usize,
    /// A grammar every sampled token must follow (structured outputs, enforced tool calls).
    pub constraint: Option<Constraint>,
    /// The LoRA adapter whose deltas this request's rows take (`None`: the base model).
    pub adapter: Option<Arc<crate::lora::LoraAdapter>>,
}

impl GenerateRequest {
    /// A fresh request for `prompt_tokens` with `params`: the default priority, no cache salt,
    /// arriving now, nothing resumed, no grammar, the base model.
    pub fn new(prompt_tokens: Vec<u32>, params: SamplingParams) -> Self {
        Self {
            prompt_tokens,
            params,
            priority: Priority::default(),
            cache_salt: None,
            arrival: Instant::now(),
            resumed_tokens: 0,
            constraint: None,
            adapter: None,
        }
    }
}

/// What the loop sends back for one request.
#[derive(Debug, Clone)]
pub enum TokenEvent {
    /// A generated token. `num_cached_tokens`: prompt tokens the prefix cache supplied.
    Token {
        token: SampledToken,
        num_cached_tokens: usize,
    },
    /// The logprobs of prompt tokens `1..` (the first has no position before it), sent once,
    /// before any token, when the request asked for them (`SamplingParams::prompt_logprobs`).
    PromptLogprobs(Vec<SampledToken>),
    /// Generation ended (the token that ended it, if any, was sent before unless it is EOS or
    /// a stop token, which are not part of the output).
    Finished {
        reason: FinishReason,
        usage: RequestUsage,
    },
    /// The engine could not run the request.
    Failed(String),
}

/// Token counts of a finished request.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RequestUsage {
    pub prompt_tokens: usize,
    pub completion_tokens: usize,
    pub cached_tokens: usize,
}

/// Messages into the loop.
#[derive(Debug)]
enum Command {
    Add {
        id: RequestId,
        // Boxed: a constrained request carries its grammar (over a kilobyte), and every
        // `Abort` would otherwise be as large.
        request: Box<GenerateRequest>,
        events: tokio_mpsc::UnboundedSender<TokenEvent>,
    },
    /// Stop a request: `completed` when its handler finished it (a stop string), false when
    /// the client went away.
    Abort { id: RequestId, completed: bool },
}

/// The engine loop is gone (it failed or shut down).
#[derive(Debug, Clone, thiserror::Error)]
#[error("the engine loop is not running")]
pub struct EngineStopped;

/// A cloneable handle to a running engine loop.
#[derive(Debug, Clone)]
pub struct EngineHandle {
    commands: mpsc::Sender<Command>,
    next_id: Arc<AtomicU64>,
    metrics: Arc<EngineMetrics>,
    /// Set once, when the loop stops on a fatal error.
    fault: watch::Receiver<Option<String>>,
}

impl EngineHandle {
    /// Starts the loop on its own thread, owning `backend`.
    pub fn spawn(
        backend: Box<dyn Backend>,
        config: EngineConfig,
        metrics: Arc<EngineMetrics>,
    ) -> std::io::Result<Self> {
        let (commands, inbox) = mpsc::channel();
        let (fault_tx, fault) = watch::channel(None);
        let mut state = engine_loop::EngineLoop::new(backend, config, metrics.clone(), inbox);
        std::thread::Builder::new()
            .name("engine-loop".into())
            .spawn(move || {
                let fatal = match catch_unwind(AssertUnwindSafe(|| state.run())) {
                    Ok(Ok(())) => return,
                    Ok(Err(fatal)) => fatal,
                    // A panic (a bug, or a driver symbol cudarc could not resolve) must not
                    // leave a replica answering `/health` with no loop behind it. Dropping the
                    // loop's state ends every request's stream.
                    Err(panic) => {
                        let reason = format!("the engine loop panicked: {}", panic_text(&*panic));
                        report_fault(&fault_tx, reason);
                        return;
                    }
                };
                // Published before the requests are failed: a client that sees its request
                // fail then finds `/health` failing too.
                report_fault(&fault_tx, fatal.to_string());
                state.fail_all(&fatal);
            })?;
        Ok(Self {
            commands,
            next_id: Arc::new(AtomicU64::new(1)),
            metrics,
            fault,
        })
    }

    /// Why the loop stopped, if it stopped on a fatal error (a lost device, a panic).
    pub fn fault_now(&self) -> Option<String> {
        self.fault.borrow().clone()
    }

    /// Resolves, with the reason, once the loop has stopped on a fatal error (a lost device,
    /// a panic). Never resolves while the loop runs, nor after it ended cleanly.
    pub async fn fault(&self) -> String {
        let mut fault = self.fault.clone();
        loop {
            if let Some(reason) = fault.borrow_and_update().clone() {
                return reason;
            }
            if fault.changed().await.is_err() {
                // Ended without a fault: nothing will ever be reported.
                std::future::pending::<()>().await;
            }
        }
    }

    /// Queues a request; its tokens arrive on the returned stream. Dropping the stream before
    /// it finished cancels the request (its blocks are freed at the next step).
    pub fn submit(&self, request: GenerateRequest) -> Result<RequestStream, EngineStopped> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (events, rx) = tokio_mpsc::unbounded_channel();
        self.commands
            .send(Command::Add {
                id,
                request: Box::new(request),
                events,
            })
            .map_err(|_| EngineStopped)?;
        Ok(RequestStream {
            id,
            rx,
            commands: self.commands.clone(),
            done: AtomicBool::new(false),
        })
    }

    /// The metrics the loop keeps.
    pub fn metrics(&self) -> &Arc<EngineMetrics> {
        &self.metrics
    }
}

/// The events of one request. Dropping it early cancels the request.
#[derive(Debug)]
pub struct RequestStream {
    id: RequestId,
    rx: tokio_mpsc::UnboundedReceiver<TokenEvent>,
    commands: mpsc::Sender<Command>,
    done: AtomicBool,
}

impl RequestStream {
    /// The engine's id of this request.
    pub fn id(&self) -> RequestId {
        self.id
    }

    /// The next event; `None` once the request finished or the loop is gone.
    pub async fn next(&mut self) -> Option<TokenEvent> {
        let event = self.rx.recv().await;
        self.note(&event);
        event
    }

    /// Blocking variant of [`next`](Self::next), for threads outside any async runtime.
    pub fn blocking_next(&mut self) -> Option<TokenEvent> {
        let event = self.rx.blocking_recv();
        self.note(&event);
        event
    }

    /// Ends the request early because its handler decided it is complete (a stop string
    /// matched): it counts as finished, not cancelled.
    pub fn complete(self) {
        if !self.done.swap(true, Ordering::Relaxed) {
            let _ = self.commands.send(Command::Abort {
                id: self.id,
                completed: true,
            });
        }
    }

    fn note(&self, event: &Option<TokenEvent>) {
        if matches!(
            event,
            None | Some(TokenEvent::Finished { .. } | TokenEvent::Failed(_))
        ) {
            self.done.store(true, Ordering::Relaxed);
        }
    }
}

impl Drop for RequestStream {
    fn drop(&mut self) {
        if !self.done.load(Ordering::Relaxed) {
            let _ = self.commands.send(Command::Abort {
                id: self.id,
                completed: false,
            });
        }
    }
}

fn report_fault(fault: &watch::Sender<Option<String>>, reason: String) {
    tracing::error!(%reason, "the engine loop stopped on a fatal error");
    let _ = fault.send(Some(reason));
}

/// The message a panic carried, when it is text.
fn panic_text(panic: &(dyn Any + Send)) -> &str {
    panic
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| panic.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("(no message)")
}
