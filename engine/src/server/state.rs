//! What every handler shares: the serving phase (loading, ready, draining), the loaded model
//! and engine, and the count of requests in flight that a drain waits for.

use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{SystemTime, UNIX_EPOCH};

use tokio::sync::Notify;

use super::ApiError;
use crate::grammar::LazyCompiler;
use crate::reasoning::ReasoningParser;
use crate::runtime::EngineHandle;
use crate::tokenizer::Tokenizer;
use crate::tools::ToolParser;

/// Where the server is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Phase {
    /// The model is loading: `/health` is 503, requests get 503.
    Loading = 0,
    /// Serving.
    Ready = 1,
    /// Shutting down: running requests finish, new ones get 503.
    Draining = 2,
    /// Loading failed: `/health` is 503 for good.
    Failed = 3,
    /// The engine loop stopped on a fatal error (a lost device): `/health` is 503 and the
    /// server exits non-zero once the failed requests are answered, so the pod restarts.
    /// Read from the engine itself, never stored, so it shows the instant the loop stops.
    Faulted = 4,
}

/// The model once loaded: its engine loop and its tokenizer.
#[derive(Debug, Clone)]
pub struct LoadedModel {
    pub engine: EngineHandle,
    pub tokenizer: Arc<Tokenizer>,
    /// Longest prompt plus completion, in tokens: the context, capped by the KV pool.
    pub max_model_len: usize,
    pub vocab_size: usize,
    /// The Hub commit an `hf://` source resolved to (shown on the model card).
    pub revision: Option<String>,
    /// Compiles structured-output and tool grammars (built on the first one).
    pub grammar: Arc<LazyCompiler>,
    /// The model family's tool-call syntax.
    pub tool_parser: ToolParser,
    /// The model family's reasoning syntax; `None`: no reasoning is split out.
    pub reasoning_parser: Option<ReasoningParser>,
    /// Whether the backend computes the logits of every prompt position (prompt logprobs,
    /// `echo` with `logprobs`): `Backend::computes_every_row`.
    pub scores_prompts: bool,
    /// The LoRA adapters served beside the model.
    pub loras: Arc<crate::lora::LoraRegistry>,
}

/// Shared server state (cheap to clone).
#[derive(Debug, Clone)]
pub struct AppState {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    served_model_name: String,
    max_body_bytes: usize,
    created_unix_s: u64,
    phase: AtomicU8,
    model: OnceLock<LoadedModel>,
    in_flight: AtomicUsize,
    idle: Notify,
}

impl AppState {
    /// A server in the `Loading` phase.
    pub fn new(served_model_name: String, max_body_bytes: usize) -> Self {
        let created_unix_s = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let inner = Inner {
            served_model_name,
            max_body_bytes,
            created_unix_s,
            phase: AtomicU8::new(Phase::Loading as u8),
            model: OnceLock::new(),
            in_flight: AtomicUsize::new(0),
            idle: Notify::new(),
        };
        Self {
            inner: Arc::new(inner),
        }
    }

    /// The name clients use in `model`.
    pub fn served_model_name(&self) -> &str {
        &self.inner.served_model_name
    }

    /// Largest accepted request body.
    pub fn max_body_bytes(&self) -> usize {
        self.inner.max_body_bytes
    }

    /// When the server started (Unix seconds).
    pub fn created_unix_s(&self) -> u64 {
        self.inner.created_unix_s
    }

    /// The current phase.
    pub fn phase(&self) -> Phase {
        if self.fault().is_some() {
            return Phase::Faulted;
        }
        match self.inner.phase.load(Ordering::Acquire) {
            0 => Phase::Loading,
            1 => Phase::Ready,
            2 => Phase::Draining,
            _ => Phase::Failed,
        }
    }

    /// Installs the loaded model and turns `Ready` (unless a drain began meanwhile).
    pub fn set_loaded(&self, model: LoadedModel) {
        let _ = self.inner.model.set(model);
        let _ = self.inner.phase.compare_exchange(
            Phase::Loading as u8,
            Phase::Ready as u8,
            Ordering::AcqRel,
            Ordering::Acquire,
        );
    }

    /// Marks loading as failed.
    pub fn set_failed(&self) {
        self.inner
            .phase
            .store(Phase::Failed as u8, Ordering::Release);
    }

    /// Why the engine loop stopped, if it stopped on a fatal error.
    pub fn fault(&self) -> Option<String> {
        self.model()?.engine.fault_now()
    }

    /// Starts draining: new requests get 503 from now on.
    pub fn start_draining(&self) {
        self.inner
            .phase
            .store(Phase::Draining as u8, Ordering::Release);
    }

    /// The model, when loaded (whatever the phase).
    pub fn model(&self) -> Option<&LoadedModel> {
        self.inner.model.get()
    }

    /// Admits a new request: the model and a guard that keeps a drain waiting until the
    /// request's response is complete. 503 unless `Ready`.
    pub fn admit(&self) -> Result<(&LoadedModel, InFlight), ApiError> {
        match self.phase() {
            Phase::Ready => {}
            Phase::Loading => return Err(ApiError::unavailable("the model is still loading")),
            Phase::Draining => return Err(ApiError::unavailable("the server is shutting down")),
            Phase::Failed => return Err(ApiError::unavailable("the model failed to load")),
            Phase::Faulted => {
                return Err(ApiError::unavailable(
                    "the engine stopped on a device error; the replica is restarting",
                ));
            }
        }
        let model = self
            .model()
            .ok_or_else(|| ApiError::unavailable("the model is still loading"))?;
        self.inner.in_flight.fetch_add(1, Ordering::AcqRel);
        Ok((model, InFlight(self.inner.clone())))
    }

    /// Requests whose responses are not complete yet.
    pub fn in_flight(&self) -> usize {
        self.inner.in_flight.load(Ordering::Acquire)
    }

    /// Resolves once no request is in flight.
    pub async fn wait_idle(&self) {
        loop {
            let notified = self.inner.idle.notified();
            if self.in_flight() == 0 {
                return;
            }
            notified.await;
        }
    }
}

/// Held for as long as a request's response is being produced (streams included).
#[derive(Debug)]
pub struct InFlight(Arc<Inner>);

impl Drop for InFlight {
    fn drop(&mut self) {
        if self.0.in_flight.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0.idle.notify_waiters();
        }
    }
}
