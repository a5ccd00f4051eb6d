//! Loading the model a server runs: resolve the source (fetching `hf://` ones), open the
//! checkpoint (GGUF file or safetensors directory), build the tokenizer and the backend, and
//! start the engine loop.

use std::sync::Arc;

use super::config::ServeConfig;
use super::state::LoadedModel;
use crate::backend::{Backend, SeqStep};
use crate::grammar::LazyCompiler;
use crate::lora::{LoraLimits, LoraRegistry};
use crate::model::Checkpoint;
use crate::reasoning::ReasoningParser;
use crate::runtime::{EngineConfig, EngineHandle, EngineMetrics, StartClock};
use crate::spec::SpeculativeMode;
use crate::tokenizer::Tokenizer;
use crate::tools::ToolParser;
use tokenscale_common::metrics::engine::{START_PHASE_FETCH, START_PHASE_LOAD, START_PHASE_WARMUP};

/// Why the model could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("model {model:?}: {message}")]
    Model { model: String, message: String },
    #[error("tokenizer: {0}")]
    Tokenizer(#[from] crate::tokenizer::Error),
    #[error(transparent)]
    Engine(#[from] crate::Error),
    #[error("starting the engine loop: {0}")]
    Spawn(#[from] std::io::Error),
    #[error("invalid configuration: {0}")]
    Config(String),
    #[error(transparent)]
    Lora(#[from] crate::lora::LoraError),
}

/// Loads `config.model` on its backend and starts its engine loop.
pub fn load_model(config: &ServeConfig) -> Result<LoadedModel, LoadError> {
    let mut clock = StartClock::from_process_start();
    let resolved = resolve_model(&config.model)?;
    clock.end(START_PHASE_FETCH);
    let checkpoint = Checkpoint::open(&resolved.path)?;
    tracing::info!(
        model = %config.model,
        path = %resolved.path.display(),
        format = checkpoint.format(),
        revision = resolved.revision.as_deref().unwrap_or("-"),
        "loading"
    );
    let tokenizer = checkpoint.tokenizer()?;
    let backend = build_backend(&checkpoint, config)?;
    clock.end(START_PHASE_LOAD);
    let mut loaded = start_warmed(backend, tokenizer, config, clock)?;
    loaded.engine.metrics().set_model_info(
        &config.model,
        checkpoint.format(),
        resolved.revision.as_deref(),
    );
    loaded.revision = resolved.revision;
    Ok(loaded)
}

/// Warms `backend` up, then starts the engine loop over it. `clock` (its fetch and load
/// phases ended) ends `warmup` here and goes to the engine's metrics, where `ready` ends once
/// the server serves.
pub fn start_warmed(
    mut backend: Box<dyn Backend>,
    tokenizer: Tokenizer,
    config: &ServeConfig,
    mut clock: StartClock,
) -> Result<LoadedModel, LoadError> {
    warm_up(backend.as_mut())?;
    clock.end(START_PHASE_WARMUP);
    let loaded = start_engine(backend, tokenizer, config)?;
    loaded.engine.metrics().start.begin(clock);
    Ok(loaded)
}

/// One forward pass of one token into the first KV block, before any request: the first
/// pass pays for starting threads, loading kernels and (CUDA) capturing a decode graph,
/// which would otherwise land on the first request's TTFT. The block is free: the prefill
/// that first takes it writes it again.
fn warm_up(backend: &mut dyn Backend) -> Result<(), LoadError> {
    if backend.num_kv_blocks() == 0 {
        return Ok(());
    }
    let step = SeqStep {
        tokens: &[0],
        start_pos: 0,
        block_table: &[0],
        want_logits: true,
    };
    backend.forward(&[step])?;
    Ok(())
}

/// Starts the engine loop over `backend` (any backend: tests pass their own).
pub fn start_engine(
    backend: Box<dyn Backend>,
    tokenizer: Tokenizer,
    config: &ServeConfig,
) -> Result<LoadedModel, LoadError> {
    if config.max_batch_tokens == 0 || config.max_num_seqs == 0 {
        return Err(LoadError::Config(
            "--max-batch-tokens and --max-num-seqs must be at least 1".into(),
        ));
    }
    let model_config = backend.model_config().clone();
    let pool_tokens = backend.num_kv_blocks() * backend.block_size();
    let max_model_len = config
        .max_model_len
        .unwrap_or(model_config.context_length)
        .min(model_config.context_length)
        .min(pool_tokens);
    if max_model_len < 2 {
        return Err(LoadError::Config(format!(
            "the KV cache holds {pool_tokens} tokens: too small to serve anything"
        )));
    }
    let tool_parser = match &config.tool_call_parser {
        Some(name) => ToolParser::from_name(name).map_err(|e| LoadError::Config(e.to_string()))?,
        None => ToolParser::detect(tokenizer.chat_template().source()),
    };
    let reasoning_parser = match &config.reasoning_parser {
        Some(name) => {
            ReasoningParser::from_name(name).map_err(|e| LoadError::Config(e.to_string()))?
        }
        None => ReasoningParser::detect(tokenizer.chat_template().source()),
    };
    let name = config.served_model_name();
    let metrics = Arc::new(EngineMetrics::new(
        &name,
        backend.name(),
        backend.name() == "sim",
        backend.block_size(),
        backend.num_kv_blocks(),
    ));
    let engine_config = EngineConfig {
        max_batch_tokens: config.max_batch_tokens,
        max_num_seqs: config.max_num_seqs,
        tpot_target: config.tpot_target,
        enable_prefix_caching: config.enable_prefix_caching,
        max_model_len,
        eos_token_ids: tokenizer.eos_token_ids().to_vec(),
        speculative: config.speculative,
    };
    if config.speculative.mode == SpeculativeMode::Ngram && !backend.verifies_drafts() {
        return Err(LoadError::Config(format!(
            "--speculative ngram: the {} backend does not verify speculative drafts; use auto or off",
            backend.name()
        )));
    }
    let scores_prompts = backend.computes_every_row();
    if backend.computes_lora() {
        metrics.lora.enable(config.lora.max_loras);
    }
    let loras = start_loras(backend.as_ref(), &name, config)?;
    let engine = EngineHandle::spawn(backend, engine_config, metrics)?;
    let tokenizer = Arc::new(tokenizer);
    tracing::info!(tool_call_parser = tool_parser.name(), "tool calls");
    tracing::info!(
        reasoning_parser = reasoning_parser.map_or("none", ReasoningParser::name),
        "reasoning"
    );
    // A model the grammar vocabulary cannot be built for still serves everything but
    // constrained requests, which get the reason.
    let grammar = Arc::new(LazyCompiler::new(
        tokenizer.clone(),
        model_config.vocab_size,
    ));
    Ok(LoadedModel {
        engine,
        vocab_size: model_config.vocab_size.min(tokenizer.vocab_size()),
        tokenizer,
        max_model_len,
        revision: None,
        grammar,
        tool_parser,
        reasoning_parser,
        scores_prompts,
        loras,
    })
}

/// The adapter registry, with every `--lora` loaded (a broken one fails the start).
fn start_loras(
    backend: &dyn Backend,
    name: &str,
    config: &ServeConfig,
) -> Result<Arc<LoraRegistry>, LoadError> {
    let c = &config.lora;
    let registry = LoraRegistry::new(
        backend.model_config().clone(),
        name.to_string(),
        LoraLimits {
            max_rank: c.max_lora_rank,
        },
        c.max_loras,
        (!backend.computes_lora()).then(|| backend.name()),
    );
    for (adapter, source) in &c.adapters {
        registry.load(adapter, source)?;
        tracing::info!(adapter, source, "LoRA adapter loaded");
    }
    Ok(Arc::new(registry))
}

/// A path as given; an alias or `hf://` source through the fetch module (downloaded on first
/// use).
fn resolve_model(model: &str) -> Result<crate::fetch::Resolved, LoadError> {
    crate::fetch::resolve(model).map_err(|e| LoadError::Model {
        model: model.to_string(),
        message: e.to_string(),
    })
}

/// The CUDA backend when `config.use_cuda`, else the CPU backend (its fast path) with the
/// configured KV pool.
fn build_backend(
    checkpoint: &Checkpoint,
    config: &ServeConfig,
) -> Result<Box<dyn Backend>, LoadError> {
    if config.use_cuda {
        return build_cuda_backend(checkpoint, config);
    }
    let model = checkpoint.load_model()?;
    let options = crate::backend::cpu::CpuOptions::default();
    let backend = crate::backend::cpu::CpuBackend::new(
        Arc::new(model),
        config.num_kv_blocks(),
        config.block_size,
        options,
    )?;
    Ok(Box::new(backend))
}

/// The CUDA backend: weights in bf16 on the device, KV cache sized from free device memory
/// (`--gpu-memory-utilization`), so `--kv-cache-tokens` does not apply.
fn build_cuda_backend(
    checkpoint: &Checkpoint,
    config: &ServeConfig,
) -> Result<Box<dyn Backend>, LoadError> {
    let options = crate::backend::cuda::CudaOptions {
        block_size: config.block_size,
        gpu_memory_utilization: config.gpu_memory_utilization,
        max_model_len: config.max_model_len,
        max_num_seqs: config.max_num_seqs,
        max_batch_tokens: config.max_batch_tokens,
        prefill_attention: config.prefill_attention,
        ..Default::default()
    };
    let backend =
        crate::backend::cuda::CudaBackend::new(checkpoint, options).map_err(crate::Error::from)?;
    Ok(Box::new(backend))
}
