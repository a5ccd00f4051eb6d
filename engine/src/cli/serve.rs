//! `tokenscale-engine serve`: runs the OpenAI-compatible server until SIGTERM or Ctrl-C (and
//! `--shutdown-delay` after it), then drains (health 503, new requests 503, running ones
//! finish within `--drain-timeout`).

use anyhow::Context;

use crate::backend::cuda::{BackendChoice, PrefillAttention};
use crate::server::{self, ServeConfig};

/// Arguments of `serve`.
#[derive(Debug, clap::Args)]
pub struct ServeArgs {
    /// `hf://ORG/REPO[@REVISION][/FILE]` (fetched into the Hugging Face cache), a `.gguf`
    /// file, a checkpoint directory (config.json + safetensors), or the test alias
    /// `smollm2-135m`.
    #[arg(long, default_value = "smollm2-135m")]
    pub model: String,
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1")]
    pub host: String,
    /// Port to listen on (0 picks a free one).
    #[arg(long, default_value_t = 8000)]
    pub port: u16,
    /// KV-cache capacity in tokens.
    #[arg(long, default_value_t = ServeConfig::default().kv_cache_tokens)]
    pub kv_cache_tokens: usize,
    /// Token slots per KV block.
    #[arg(long, default_value_t = ServeConfig::default().block_size)]
    pub block_size: usize,
    /// Tokens (prefill plus decode) per engine step.
    #[arg(long, default_value_t = ServeConfig::default().max_batch_tokens)]
    pub max_batch_tokens: usize,
    /// Sequences per engine step.
    #[arg(long, default_value_t = ServeConfig::default().max_num_seqs)]
    pub max_num_seqs: usize,
    /// Time per output token every running sequence should hold (e.g. `50ms`): the engine
    /// runs only as many sequences, and as long prefill chunks, as its measured step time
    /// allows within it; the rest wait (and count as waiting demand). Default: no target,
    /// only --max-num-seqs and --max-batch-tokens.
    #[arg(long, value_parser = tokenscale_common::duration::parse)]
    pub tpot_target: Option<std::time::Duration>,
    /// Seconds running requests may take to finish after SIGTERM.
    #[arg(long, default_value_t = ServeConfig::default().drain_timeout_s)]
    pub drain_timeout: f64,
    /// Seconds to keep serving as usual after SIGTERM before draining: the time the pod's
    /// removal from the Service takes to reach every client (what a pre-stop `sleep` did, in
    /// the binary, so it needs no shell or `sleep` in the image nor Kubernetes 1.30).
    #[arg(long, default_value_t = 0.0)]
    pub shutdown_delay: f64,
    /// Name clients use in `model` (default: the alias or the file's stem).
    #[arg(long)]
    pub served_model_name: Option<String>,
    /// Cap on prompt plus completion tokens (default: the model's context).
    #[arg(long)]
    pub max_model_len: Option<usize>,
    /// Largest accepted request body, in bytes.
    #[arg(long, default_value_t = ServeConfig::default().max_body_bytes)]
    pub max_body_bytes: usize,
    /// Turn the prefix cache off.
    #[arg(long)]
    pub no_prefix_caching: bool,
    /// Compute backend: `auto` (CUDA when a usable GPU is present, else the CPU), `cpu` (the
    /// reference forward pass), `cuda` (fails with the reason when CUDA is unusable), or `sim`
    /// (no weights: the performance model's step times and deterministic tokens; labelled as
    /// simulated).
    #[arg(long, default_value = "auto", value_parser = ["auto", "cpu", "cuda", "sim"])]
    pub backend: String,
    /// Fraction of GPU memory the CUDA backend may use (weights, activations, KV cache).
    #[arg(long, default_value_t = ServeConfig::default().gpu_memory_utilization)]
    pub gpu_memory_utilization: f64,
    /// Prefill attention kernel of the CUDA backend: `naive` (the reference) or `mma` (bf16
    /// tensor cores, 64 query rows per block; head dimensions 64 and 128, others run naive).
    #[arg(long, default_value_t = ServeConfig::default().prefill_attention)]
    pub prefill_attention: PrefillAttention,
    /// Seconds a connection may take to send a request's headers, idle keep-alive included.
    #[arg(long, default_value_t = ServeConfig::default().header_timeout_s)]
    pub header_timeout: f64,
    /// Seconds a request's body may take to arrive after its headers (408 after).
    #[arg(long, default_value_t = ServeConfig::default().body_timeout_s)]
    pub body_timeout: f64,
    /// Open connections at most; more wait in the listen backlog until one closes.
    #[arg(long, default_value_t = ServeConfig::default().max_connections)]
    pub max_connections: usize,
    /// Tool-call syntax of the model family: `hermes` (Qwen, Hermes, SmolLM), `llama3_json`
    /// or `mistral`; default: the one the chat template shows (hermes when it shows none).
    #[arg(long, value_parser = crate::tools::ToolParser::NAMES)]
    pub tool_call_parser: Option<String>,
    /// Reasoning syntax of the model family, split out of the answer into
    /// `reasoning_content`: `qwen3`, `deepseek_r1`, or `none` (off); default: from the chat
    /// template (none when it never mentions `</think>`).
    #[arg(long, value_parser = crate::reasoning::ReasoningParser::NAMES)]
    pub reasoning_parser: Option<String>,
    /// `--backend sim`: a bundled performance profile (`llama3-8b-h100`, the default;
    /// `smollm2-cpu`) or a profile file (YAML).
    #[arg(long)]
    pub sim_profile: Option<String>,
    /// Key the OpenAI routes require as `Authorization: Bearer <key>` (the gateway presents
    /// it); `/health` and `/metrics` stay open. Unset: no key.
    #[arg(long, env = "TOKENSCALE_ENGINE_API_KEY", hide_env_values = true)]
    pub api_key: Option<String>,
    /// Speculative decoding with n-gram (prompt-lookup) drafts, verified in one batched step:
    /// `auto` (drafts only where the measured step time says a verify step pays), `off`, or
    /// `ngram` (whenever the sequence repeats itself). The tokens are the same either way; a
    /// request sends `"speculative": false` to opt out. The sim backend refuses `ngram`.
    #[arg(long, default_value = "auto", value_parser = ["auto", "off", "ngram"])]
    pub speculative: String,
    /// Most draft tokens per verify step (vLLM's `num_speculative_tokens`).
    #[arg(long, default_value_t = crate::spec::SpeculativeConfig::default().num_speculative_tokens)]
    pub num_speculative_tokens: usize,
    /// Longest n-gram looked up in the sequence for a draft (vLLM's `prompt_lookup_max`).
    #[arg(long, default_value_t = crate::spec::SpeculativeConfig::default().prompt_lookup_max)]
    pub prompt_lookup_max: usize,
    /// Shortest n-gram looked up (vLLM's `prompt_lookup_min`).
    #[arg(long, default_value_t = crate::spec::SpeculativeConfig::default().prompt_lookup_min)]
    pub prompt_lookup_min: usize,
    /// A LoRA adapter served beside the model as NAME: SOURCE is a PEFT folder
    /// (`adapter_config.json` + `adapter_model.safetensors`) or `hf://ORG/REPO`. Repeatable.
    #[arg(long = "lora", value_name = "NAME=SOURCE")]
    pub lora: Vec<String>,
    /// LoRA adapters kept in memory at a time; the least recently used is evicted and read
    /// again from its source on its next request.
    #[arg(long, default_value_t = crate::lora::LoraConfig::default().max_loras)]
    pub max_loras: usize,
    /// Largest LoRA rank `r` accepted.
    #[arg(long, default_value_t = crate::lora::LoraConfig::default().max_lora_rank)]
    pub max_lora_rank: usize,
}

impl ServeArgs {
    /// The server configuration these flags describe.
    pub fn config(&self) -> anyhow::Result<ServeConfig> {
        anyhow::ensure!(self.block_size > 0, "--block-size must be at least 1");
        anyhow::ensure!(
            self.kv_cache_tokens >= self.block_size,
            "--kv-cache-tokens must hold at least one block"
        );
        anyhow::ensure!(
            self.drain_timeout.is_finite() && self.drain_timeout >= 0.0,
            "--drain-timeout must be ≥ 0 seconds"
        );
        anyhow::ensure!(
            self.shutdown_delay.is_finite() && (0.0..=3600.0).contains(&self.shutdown_delay),
            "--shutdown-delay must be 0 to 3600 seconds"
        );
        anyhow::ensure!(
            self.gpu_memory_utilization > 0.0 && self.gpu_memory_utilization <= 1.0,
            "--gpu-memory-utilization must be in (0, 1]"
        );
        for (flag, seconds) in [
            ("--header-timeout", self.header_timeout),
            ("--body-timeout", self.body_timeout),
        ] {
            anyhow::ensure!(
                seconds.is_finite() && seconds > 0.0 && seconds <= 86_400.0,
                "{flag} must be in (0, 86400] seconds"
            );
        }
        anyhow::ensure!(
            self.max_connections > 0,
            "--max-connections must be at least 1"
        );
        // Decided before anything is loaded or downloaded, so `--backend cuda` on a machine
        // without a usable GPU fails at once with one line saying why.
        let choice = match self.backend.as_str() {
            "cuda" => BackendChoice::Cuda,
            "auto" => BackendChoice::Auto,
            _ => BackendChoice::Cpu,
        };
        let speculative = crate::spec::SpeculativeConfig {
            mode: self.speculative.parse().map_err(anyhow::Error::msg)?,
            num_speculative_tokens: self.num_speculative_tokens,
            prompt_lookup_max: self.prompt_lookup_max,
            prompt_lookup_min: self.prompt_lookup_min,
        };
        speculative.validate().map_err(anyhow::Error::msg)?;
        let use_cuda = crate::backend::cuda::use_cuda(choice)
            .map_err(|reason| anyhow::anyhow!("--backend cuda: {reason}"))?;
        Ok(ServeConfig {
            model: self.model.clone(),
            host: self.host.clone(),
            port: self.port,
            kv_cache_tokens: self.kv_cache_tokens,
            block_size: self.block_size,
            max_batch_tokens: self.max_batch_tokens,
            max_num_seqs: self.max_num_seqs,
            tpot_target: self.tpot_target,
            drain_timeout_s: self.drain_timeout,
            served_model_name: self.served_model_name.clone(),
            max_body_bytes: self.max_body_bytes,
            enable_prefix_caching: !self.no_prefix_caching,
            max_model_len: self.max_model_len,
            use_cuda,
            gpu_memory_utilization: self.gpu_memory_utilization,
            prefill_attention: self.prefill_attention,
            api_key: self.api_key.clone(),
            header_timeout_s: self.header_timeout,
            body_timeout_s: self.body_timeout,
            max_connections: self.max_connections,
            tool_call_parser: self.tool_call_parser.clone(),
            reasoning_parser: self.reasoning_parser.clone(),
            speculative,
            lora: self.lora_config()?,
        })
    }
}

impl ServeArgs {
    /// `--lora NAME=SOURCE` (each), `--max-loras`, `--max-lora-rank`.
    fn lora_config(&self) -> anyhow::Result<crate::lora::LoraConfig> {
        anyhow::ensure!(self.max_loras > 0, "--max-loras must be at least 1");
        anyhow::ensure!(
            (1..=crate::lora::MAX_RANK).contains(&self.max_lora_rank),
            "--max-lora-rank must be 1 to {}",
            crate::lora::MAX_RANK
        );
        let mut adapters: Vec<(String, String)> = Vec::new();
        for spec in &self.lora {
            let (name, source) = spec
                .split_once('=')
                .filter(|(n, s)| !n.is_empty() && !s.is_empty())
                .ok_or_else(|| anyhow::anyhow!("--lora {spec:?}: expected NAME=SOURCE"))?;
            anyhow::ensure!(
                adapters.iter().all(|(n, _)| n != name),
                "--lora: the name {name:?} is given twice"
            );
            adapters.push((name.to_string(), source.to_string()));
        }
        Ok(crate::lora::LoraConfig {
            adapters,
            max_loras: self.max_loras,
            max_lora_rank: self.max_lora_rank,
        })
    }
}

/// Runs `serve`.
pub fn run(args: ServeArgs) -> anyhow::Result<()> {
    let config = args.config()?;
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr)
        .try_init();
    // Two workers: the HTTP side is light; the engine loop has its own thread.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting tokio")?;
    runtime.block_on(async move {
        let listener = tokio::net::TcpListener::bind((config.host.as_str(), config.port))
            .await
            .with_context(|| format!("cannot listen on {}:{}", config.host, config.port))?;
        // Printed so a parent process that passed --port 0 learns the port.
        eprintln!("listening on http://{}", listener.local_addr()?);
        let loader_config = config.clone();
        let delay = std::time::Duration::from_secs_f64(args.shutdown_delay);
        if args.backend == "sim" {
            let profile = crate::backend::sim::read_profile(args.sim_profile.as_deref())?;
            let loader = move || crate::backend::sim::load_sim(&loader_config, profile);
            server::serve_on(listener, config, loader, delayed(shutdown_signal(), delay)).await?;
            return anyhow::Ok(());
        }
        server::serve_on(
            listener,
            config,
            move || server::load_model(&loader_config),
            delayed(shutdown_signal(), delay),
        )
        .await?;
        anyhow::Ok(())
    })
}

/// Resolves `delay` after `signal`: the engine serves as usual meanwhile.
async fn delayed(signal: impl std::future::Future<Output = ()>, delay: std::time::Duration) {
    signal.await;
    if !delay.is_zero() {
        tracing::info!(
            delay_s = delay.as_secs_f64(),
            "shutdown signal: serving on before draining"
        );
        tokio::time::sleep(delay).await;
    }
}

/// Resolves on SIGTERM or Ctrl-C.
async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {},
        _ = term => {},
    }
}
