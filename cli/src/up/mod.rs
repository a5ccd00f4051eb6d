//! `tokenscale up`: the whole system on one machine from a `ModelDeployment` manifest: the
//! gateway in-process, engine replicas as child processes, and the operator's autoscaling
//! policy acting on a local process pool. Ctrl-C drains and stops everything.

mod child;
mod control;
mod crash_loop;
mod manifest;
mod pool;
mod probe;
mod program;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use tokenscale_common::engines::EnginePriority;
use tokenscale_common::hub_source::HubSource;
use tokenscale_operator::controller::scaling::policy_spec;
use tokenscale_operator::crd::{Backend, EngineKind};
use tokenscale_operator::scale::ScaleTarget;

pub use control::status_line;
pub use manifest::{DEFAULT_MANIFEST, Manifest};

/// Arguments of `tokenscale up`.
#[derive(Debug, Clone, clap::Args)]
pub struct UpArgs {
    /// `ModelDeployment` manifest (default: the bundled SmolLM2 example).
    #[arg(short = 'f', long = "file")]
    pub file: Option<PathBuf>,
    /// Where the gateway listens.
    #[arg(long, default_value = "127.0.0.1:8080")]
    pub listen: SocketAddr,
    /// Where the gateway serves `/metrics` (every model's and tenant's figures) and `/health`,
    /// kept off the API port; `up` scrapes it. Default: a free loopback port, printed at start.
    #[arg(long, default_value = "127.0.0.1:0")]
    pub admin_listen: SocketAddr,
    /// The `tokenscale-engine` binary (default: beside `tokenscale`).
    #[arg(long)]
    pub engine_bin: Option<PathBuf>,
    /// Where each replica's output goes (`replica-N.log`); default: a new folder in the
    /// system's temporary directory, printed at start.
    #[arg(long)]
    pub log_dir: Option<PathBuf>,
}

/// Why `up` could not run.
#[derive(Debug, thiserror::Error)]
pub enum UpError {
    /// The manifest is missing, malformed or asks for what `up` cannot run.
    #[error("manifest: {0}")]
    Manifest(String),
    /// The engine binary is not where it was looked for.
    #[error("engine binary {0} not found (build it, or pass --engine-bin)")]
    EngineBinary(String),
    /// The model could not be fetched.
    #[error("fetching the model: {0}")]
    Fetch(String),
    /// The gateway could not start.
    #[error("starting the gateway on {addr} (admin {admin}): {source}")]
    Gateway {
        addr: SocketAddr,
        admin: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    /// The replicas could not be started.
    #[error("scaling: {0}")]
    Scale(String),
    /// The replicas' log folder could not be made.
    #[error("replica log folder {path}: {source}")]
    LogDir {
        path: String,
        #[source]
        source: std::io::Error,
    },
    /// The async runtime did not start.
    #[error("starting the runtime: {0}")]
    Runtime(#[source] std::io::Error),
}

/// Runs `up` until Ctrl-C or SIGTERM.
pub fn run_command(args: &UpArgs) -> Result<(), UpError> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(UpError::Runtime)?;
    runtime.block_on(run(args))
}

async fn run(args: &UpArgs) -> Result<(), UpError> {
    let manifest = Manifest::load(args.file.as_deref())?;
    let model = manifest.served_name();
    let spec = policy_spec(&manifest.spec);
    spec.validate()
        .map_err(|e| UpError::Manifest(e.to_string()))?;
    let (engine_bin, engine_args) = if manifest.spec.engine.kind == EngineKind::Tokenscale {
        let mut serve = vec!["serve".to_string()];
        serve.extend(engine_args(&manifest, &model).await?);
        (engine_binary(args.engine_bin.as_ref())?, serve)
    } else {
        let program = program::other_engine(&manifest)?;
        (program.bin, program.args)
    };
    let log_dir = args.log_dir.clone().unwrap_or_else(|| {
        std::env::temp_dir().join(format!("tokenscale-up-{}", std::process::id()))
    });
    std::fs::create_dir_all(&log_dir).map_err(|source| UpError::LogDir {
        path: log_dir.display().to_string(),
        source,
    })?;

    let gateway_config = gateway_config(&model)?;
    let gateway =
        tokenscale_gateway::RunningGateway::start(&gateway_config, args.listen, args.admin_listen)
            .await
            .map_err(|source| UpError::Gateway {
                addr: args.listen,
                admin: args.admin_listen,
                source,
            })?;
    gateway.registry.declare_default(&model);
    // The replicas run the flags rendered above: the gateway sends the class their way.
    let kind = manifest.spec.engine.kind;
    let priority = EnginePriority::of_args(kind, &engine_args);
    gateway.registry.set_engine(&model, kind, priority);
    match gateway.gateway.batches() {
        Some(batches) => eprintln!(
            "tokenscale up: Batch API (/v1/files, /v1/batches) keeps its jobs in {}",
            batches.describe
        ),
        None => eprintln!(
            "tokenscale up: {}",
            gateway
                .gateway
                .batches_off()
                .unwrap_or("the Batch API is off")
        ),
    }
    eprintln!(
        "tokenscale up: gateway on http://{} serving {model:?} (its /metrics on http://{}/metrics); replica logs in {}; Ctrl-C stops",
        gateway.addr,
        gateway.admin_addr,
        log_dir.display()
    );

    let drain_timeout = manifest.spec.engine.drain_timeout.get();
    let pool = pool::ProcessPool::new(
        model.clone(),
        engine_bin,
        engine_args,
        log_dir,
        gateway.registry.clone(),
        drain_timeout,
    );
    let result = control_loop(
        &pool,
        model,
        spec,
        format!("http://{}/metrics", gateway.admin_addr),
    )
    .await;
    eprintln!("tokenscale up: draining and stopping every replica");
    pool.shutdown().await;
    let _ = gateway.shutdown().await;
    result
}

/// Starts the minimum, then decides every period, scrapes every second and, every 250 ms,
/// registers ready replicas and replaces failed ones, until a stop signal.
async fn control_loop(
    pool: &pool::ProcessPool,
    model: String,
    spec: tokenscale_operator::autoscaler::PolicySpec,
    metrics_url: String,
) -> Result<(), UpError> {
    pool.set_replicas(spec.min_replicas)
        .await
        .map_err(|e| UpError::Scale(e.to_string()))?;
    let period = spec.period;
    let mut controller = control::Controller::new(model, spec, metrics_url, pool.clone());
    let start = Instant::now();
    let mut decide_tick = tokio::time::interval(period);
    let mut refresh_tick = tokio::time::interval(Duration::from_millis(250));
    // Scrapes between decisions, so the windows shorter than a period are read at their width.
    let mut sample_tick = tokio::time::interval(Duration::from_secs(1));
    sample_tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let stop = stop_signal();
    tokio::pin!(stop);
    loop {
        tokio::select! {
            _ = &mut stop => return Ok(()),
            _ = refresh_tick.tick() => pool.refresh().await,
            _ = sample_tick.tick() => {
                if let Some(line) = controller.sample(start.elapsed().as_secs_f64()).await {
                    eprintln!("{line}{}", pool.status_note().await);
                }
            }
            _ = decide_tick.tick() => {
                let line = controller.period(start.elapsed().as_secs_f64()).await;
                eprintln!("{line}{}", pool.status_note().await);
            }
        }
    }
}

/// `tokenscale-engine` beside this executable, unless given.
fn engine_binary(given: Option<&PathBuf>) -> Result<PathBuf, UpError> {
    let path = match given {
        Some(p) => p.clone(),
        None => std::env::current_exe()
            .ok()
            .and_then(|exe| exe.parent().map(|dir| dir.join("tokenscale-engine")))
            .unwrap_or_else(|| PathBuf::from("tokenscale-engine")),
    };
    if path.is_file() {
        Ok(path)
    } else {
        Err(UpError::EngineBinary(path.display().to_string()))
    }
}

/// The `serve` flags every replica gets; fetches the model first (cpu), so replicas start fast.
async fn engine_args(manifest: &Manifest, model: &str) -> Result<Vec<String>, UpError> {
    let engine = &manifest.spec.engine;
    let mut args = vec!["--served-model-name".to_string(), model.to_string()];
    args.extend([
        "--drain-timeout".to_string(),
        engine.drain_timeout.get().as_secs_f64().to_string(),
        // Each replica holds the SLO's time per output token itself, as the operator's do.
        "--tpot-target".to_string(),
        format!("{}ms", manifest.spec.slo.tpot_p95.get().as_secs_f64() * 1e3),
    ]);
    if engine.backend == Backend::Sim {
        args.extend([
            "--backend".into(),
            "sim".into(),
            "--model".into(),
            model.to_string(),
        ]);
    } else if let Some(source) = manifest.engine_model()? {
        let wanted = source.clone();
        let resolved =
            tokio::task::spawn_blocking(move || tokenscale_engine::fetch::resolve(&source))
                .await
                .map_err(|e| UpError::Fetch(e.to_string()))?
                .map_err(|e| UpError::Fetch(e.to_string()))?;
        // An `hf://` source goes to the engines pinned to the commit fetched here: every
        // replica serves the same weights, from the cache, and reports that commit.
        let model = match (HubSource::parse(&wanted), resolved.revision) {
            (Some(Ok(mut hub)), Some(commit)) => {
                hub.revision = Some(commit);
                hub.to_string()
            }
            _ => resolved.path.display().to_string(),
        };
        args.extend(["--model".into(), model]);
        if let Some(n) = engine.max_num_seqs {
            args.extend(["--max-num-seqs".into(), n.to_string()]);
        }
        if let Some(n) = engine.max_batch_tokens {
            args.extend(["--max-batch-tokens".into(), n.to_string()]);
        }
    }
    args.extend(engine.args.iter().cloned());
    Ok(args)
}

/// A gateway for one model, open to local clients with any key or none, as a local server
/// without keys is (tenant `local`, no limits; the official clients always send a key).
fn gateway_config(model: &str) -> Result<tokenscale_gateway::config::Config, UpError> {
    let name = serde_json::to_string(model).unwrap_or_default();
    let text = format!(
        "models:\n  - name: {name}\ntenants:\n  - name: local\n    models: [\"*\"]\nanonymous: local\nanonymous_any_key: true\n"
    );
    tokenscale_gateway::config::Config::from_yaml(&text)
        .map_err(|e| UpError::Manifest(format!("gateway configuration: {e}")))
}

/// Resolves on Ctrl-C or SIGTERM.
async fn stop_signal() {
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {},
        _ = term => {},
    }
}
