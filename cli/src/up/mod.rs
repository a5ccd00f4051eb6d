//! `tokenscale up`: the whole system on one machine from `ModelDeployment` manifests (and
//! `ModelRoute`s over them): the
//! gateway in-process, engine replicas as child processes, and the operator's autoscaling
//! policy acting on a local process pool. Ctrl-C drains and stops everything.

mod child;
mod control;
mod crash_loop;
mod manifest;
mod manifests;
mod pool;
mod probe;
mod program;
mod targets;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use tokenscale_common::engines::EnginePriority;
use tokenscale_common::hub_source::HubSource;
use tokenscale_crd::policy::policy_spec;
use tokenscale_crd::{Backend, EngineKind};
use tokenscale_gateway::routing::RouteSpec;
use tokenscale_scaling::autoscaler::PolicySpec;
use tokenscale_scaling::scale::ScaleTarget;

pub use control::status_line;
pub use manifest::{DEFAULT_MANIFEST, Manifest};
pub use manifests::Manifests;

/// Arguments of `tokenscale up`.
#[derive(Debug, Clone, clap::Args)]
pub struct UpArgs {
    /// `ModelDeployment` manifest (default: the bundled SmolLM2 example); several models and
    /// the `ModelRoute`s over them as documents of one file (`---` between them).
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
    let manifests = Manifests::load(args.file.as_deref())?;
    let mut plans = Vec::new();
    for manifest in &manifests.deployments {
        plans.push(ModelPlan::prepare(manifest, args).await?);
    }
    let log_dir = args.log_dir.clone().unwrap_or_else(|| {
        std::env::temp_dir().join(format!("tokenscale-up-{}", std::process::id()))
    });
    create_dir(&log_dir)?;

    let models: Vec<&str> = plans.iter().map(|p| p.model.as_str()).collect();
    let gateway_config = gateway_config(&models, &manifests.routes)?;
    let gateway =
        tokenscale_gateway::RunningGateway::start(&gateway_config, args.listen, args.admin_listen)
            .await
            .map_err(|source| UpError::Gateway {
                addr: args.listen,
                admin: args.admin_listen,
                source,
            })?;
    for plan in &plans {
        gateway.registry.declare_default(&plan.model);
        // The replicas run the flags rendered above: the gateway sends the class their way.
        let priority = EnginePriority::of_args(plan.kind, &plan.engine_args);
        gateway
            .registry
            .set_engine(&plan.model, plan.kind, priority);
    }
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
    let routes: Vec<&str> = manifests.routes.iter().map(|r| r.name.as_str()).collect();
    let serving = match (models.as_slice(), routes.is_empty()) {
        ([model], true) => format!("{model:?}"),
        _ => format!("models {models:?}, routes {routes:?}"),
    };
    eprintln!(
        "tokenscale up: gateway on http://{} serving {serving} (its /metrics on http://{}/metrics); replica logs in {}; Ctrl-C stops",
        gateway.addr,
        gateway.admin_addr,
        log_dir.display()
    );

    let several = plans.len() > 1;
    let mut runs = Vec::new();
    for plan in plans {
        // One model: its replicas' logs in the folder itself, as before; several: a folder each.
        let dir = if several {
            log_dir.join(plan.model.replace(
                |c: char| !c.is_ascii_alphanumeric() && c != '-' && c != '.',
                "_",
            ))
        } else {
            log_dir.clone()
        };
        create_dir(&dir)?;
        let pool = pool::ProcessPool::new(
            plan.model.clone(),
            plan.engine_bin,
            plan.engine_args,
            dir,
            gateway.registry.clone(),
            plan.drain_timeout,
        );
        runs.push((pool, plan.model, plan.spec));
    }
    let result = control_loop(&runs, format!("http://{}/metrics", gateway.admin_addr)).await;
    eprintln!("tokenscale up: draining and stopping every replica");
    for (pool, _, _) in &runs {
        pool.shutdown().await;
    }
    let _ = gateway.shutdown().await;
    result
}

fn create_dir(dir: &std::path::Path) -> Result<(), UpError> {
    std::fs::create_dir_all(dir).map_err(|source| UpError::LogDir {
        path: dir.display().to_string(),
        source,
    })
}

/// What one model's replicas run and how it scales, worked out before anything starts (a
/// manifest `up` cannot run is refused before the gateway binds its port).
struct ModelPlan {
    model: String,
    spec: PolicySpec,
    kind: EngineKind,
    engine_bin: PathBuf,
    engine_args: Vec<String>,
    drain_timeout: Duration,
}

impl ModelPlan {
    async fn prepare(manifest: &Manifest, args: &UpArgs) -> Result<Self, UpError> {
        let model = manifest.served_name();
        let spec = policy_spec(&manifest.spec);
        spec.validate()
            .map_err(|e| UpError::Manifest(format!("{model}: {e}")))?;
        let kind = manifest.spec.engine.kind;
        let (engine_bin, engine_args) = if kind == EngineKind::Tokenscale {
            let mut serve = vec!["serve".to_string()];
            serve.extend(engine_args(manifest, &model).await?);
            (engine_binary(args.engine_bin.as_ref())?, serve)
        } else {
            let program = program::other_engine(manifest)?;
            (program.bin, program.args)
        };
        Ok(Self {
            model,
            spec,
            kind,
            engine_bin,
            engine_args,
            drain_timeout: manifest.spec.engine.drain_timeout.get(),
        })
    }
}

/// Starts each model's minimum, then for each decides every period (its own), scrapes every
/// second and, every 250 ms, registers ready replicas and replaces failed ones, until a stop
/// signal.
async fn control_loop(
    runs: &[(pool::ProcessPool, String, PolicySpec)],
    metrics_url: String,
) -> Result<(), UpError> {
    let start = Instant::now();
    let mut models = Vec::new();
    for (pool, model, spec) in runs {
        pool.set_replicas(spec.min_replicas)
            .await
            .map_err(|e| UpError::Scale(e.to_string()))?;
        let controller = control::Controller::new(
            model.clone(),
            spec.clone(),
            metrics_url.clone(),
            pool.clone(),
        );
        // Each model decides on its own period, the first at once (as an interval's first tick).
        models.push((pool, controller, spec.period, start));
    }
    let mut refresh_tick = tokio::time::interval(Duration::from_millis(250));
    // Scrapes between decisions, so the windows shorter than a period are read at their width.
    let mut sample_tick = tokio::time::interval(Duration::from_secs(1));
    sample_tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let stop = stop_signal();
    tokio::pin!(stop);
    loop {
        tokio::select! {
            _ = &mut stop => return Ok(()),
            _ = refresh_tick.tick() => {
                for (pool, controller, period, due) in &mut models {
                    pool.refresh().await;
                    if Instant::now() >= *due {
                        *due += *period;
                        let line = controller.period(start.elapsed().as_secs_f64()).await;
                        eprintln!("{line}{}", pool.status_note().await);
                    }
                }
            }
            _ = sample_tick.tick() => {
                for (pool, controller, _, _) in &mut models {
                    if let Some(line) = controller.sample(start.elapsed().as_secs_f64()).await {
                        eprintln!("{line}{}", pool.status_note().await);
                    }
                }
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

/// A gateway for the models and routes, open to local clients with any key or none, as a
/// local server without keys is (tenant `local`, no limits; the official clients always send
/// a key).
fn gateway_config(
    models: &[&str],
    routes: &[RouteSpec],
) -> Result<tokenscale_gateway::config::Config, UpError> {
    // JSON strings are YAML strings: any served name is written safely.
    let quoted = |name: &str| serde_json::to_string(name).unwrap_or_default();
    let mut text = String::from("models:\n");
    for model in models {
        text.push_str(&format!("  - name: {}\n", quoted(model)));
    }
    if !routes.is_empty() {
        text.push_str("routes:\n");
    }
    for route in routes {
        let targets: Vec<String> = route
            .targets
            .iter()
            .map(|t| format!("{{model: {}, weight: {}}}", quoted(&t.model), t.weight))
            .collect();
        let fallback: Vec<String> = route.fallback.iter().map(|f| quoted(f)).collect();
        text.push_str(&format!(
            "  - name: {}\n    targets: [{}]\n    fallback: [{}]\n",
            quoted(&route.name),
            targets.join(", "),
            fallback.join(", ")
        ));
    }
    text.push_str(
        "tenants:\n  - name: local\n    models: [\"*\"]\nanonymous: local\nanonymous_any_key: true\n",
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
