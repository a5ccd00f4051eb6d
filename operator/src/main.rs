//! `tokenscale-operator`: watches ModelDeployments and keeps their engine replicas matched to
//! demand within the latency SLO. Flags are read by the Helm chart: keep them stable.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, bail};
use clap::Parser;
use kube::Client;
use tokenscale_common::served_name::ServedNames;
use tokenscale_operator::clock;
use tokenscale_operator::controller::{self, Context, Settings, WatchScope};
use tokenscale_operator::leader::LeaderElector;
use tokenscale_operator::metrics_source::{
    GatewayTargets, MetricsSource, PrometheusSource, ScrapeSource,
};
use tokenscale_operator::telemetry::{self, Metrics};

/// The tokenscale Kubernetes operator.
#[derive(Debug, Parser)]
#[command(name = "tokenscale-operator", version, about)]
struct Args {
    /// Address of the operator's own `/metrics` and `/health`.
    #[arg(
        long,
        env = "TOKENSCALE_METRICS_LISTEN",
        default_value = "0.0.0.0:8080"
    )]
    metrics_listen: SocketAddr,
    /// Elect one leader through a Lease (run two replicas safely).
    #[arg(long, overrides_with = "no_leader_election", default_value_t = true)]
    leader_election: bool,
    /// Act without a Lease (a single replica, or local runs).
    #[arg(long)]
    no_leader_election: bool,
    /// Namespace of the leader Lease (defaults to the pod's namespace, `POD_NAMESPACE`).
    #[arg(long, env = "POD_NAMESPACE", default_value = "default")]
    lease_namespace: String,
    /// Name of the leader Lease.
    #[arg(long, default_value = "tokenscale-operator")]
    lease_name: String,
    /// Namespaces to watch, comma-separated; all namespaces when empty.
    #[arg(long, value_delimiter = ',')]
    watch_namespaces: Vec<String>,
    /// Served names a namespace may claim, as NAMESPACE=NAME[,NAME...] (globs; `*=NAME` for
    /// any namespace), repeatable: a ModelDeployment claiming a name its namespace is not
    /// given is refused (a `Conflict` condition and an Event). Unset: first come, first
    /// served, with a warning at start. The gateway's `kubernetes.served_names` takes the
    /// same list.
    #[arg(long = "served-names")]
    served_names: Vec<String>,
    /// GPUs all ModelDeployments together may use; no limit when unset.
    #[arg(long)]
    gpu_budget: Option<u64>,
    /// Read metrics from this Prometheus server instead of scraping.
    #[arg(long)]
    prometheus_url: Option<String>,
    /// The gateway's Service as NAMESPACE/NAME, scraped through its EndpointSlices.
    #[arg(long)]
    gateway_service: Option<String>,
    /// Port of the gateway's `/metrics`: its admin listener (`--admin-listen`; the API port
    /// has no `/metrics`).
    #[arg(long, default_value_t = 9090)]
    gateway_metrics_port: i32,
    /// Fixed gateway `/metrics` URLs (repeatable), instead of `--gateway-service`.
    #[arg(long)]
    gateway_metrics_url: Vec<String>,
    /// JSON list of NetworkPolicyPeer objects allowed to reach engine pods (the gateway, the
    /// operator, scrapers); set, every ModelDeployment gets a NetworkPolicy admitting only
    /// them. The chart sets it (networkPolicy.enabled, on by default).
    #[arg(long, env = "TOKENSCALE_ENGINE_INGRESS_FROM")]
    engine_ingress_from: Option<String>,
    /// How often the leader scrapes every model between decisions (the windows' samples),
    /// e.g. `1s`, `500ms`; `0s` samples only at decisions. Scraping only: with
    /// `--prometheus-url` the windows are Prometheus's.
    #[arg(long, default_value = "1s", value_parser = parse_duration)]
    sample_every: Duration,
    /// Run once instead of operating (no subcommand: operate).
    #[command(subcommand)]
    command: Option<Command>,
}

/// The `--served-names` list; open (first come, first served) with a warning when empty.
fn served_names(flags: &[String]) -> anyhow::Result<ServedNames> {
    let mut names = ServedNames::default();
    for flag in flags {
        names
            .add_flag(flag)
            .map_err(|e| anyhow::anyhow!("--served-names {e}"))?;
    }
    if names.is_open() {
        tracing::warn!(
            "no --served-names list: any namespace may claim any served name, first come, first served"
        );
    }
    Ok(names)
}

/// A duration flag written as manifests write them ("1s", "500ms").
fn parse_duration(text: &str) -> Result<Duration, String> {
    text.parse::<tokenscale_operator::crd::Duration>()
        .map(|d| d.get())
        .map_err(|e| e.to_string())
}

/// One-shot commands.
#[derive(Debug, clap::Subcommand)]
enum Command {
    /// Print the objects the operator would apply for each ModelDeployment in a file (its
    /// engine Deployment, Service and PodDisruptionBudget) as YAML, without a cluster.
    Render {
        /// The manifest (`-` reads standard input).
        #[arg(short = 'f', long)]
        file: std::path::PathBuf,
        /// Namespace of documents that name none.
        #[arg(short = 'n', long, default_value = "default")]
        namespace: String,
    },
}

/// `render -f FILE`: prints the children or says, on stderr, why it cannot.
fn render(file: &std::path::Path, namespace: &str) -> anyhow::Result<()> {
    let text = if file.as_os_str() == "-" {
        std::io::read_to_string(std::io::stdin()).context("reading standard input")?
    } else {
        std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?
    };
    let yaml = tokenscale_operator::render::render(&text, namespace)
        .with_context(|| format!("{}", file.display()))?;
    print!("{yaml}");
    Ok(())
}

/// The metrics source the flags ask for, and a scrape source once more as itself, for its
/// queue watch (a Prometheus server is too slow to wake a model within a second).
struct Sources {
    metrics: Arc<dyn MetricsSource>,
    scrape: Option<Arc<ScrapeSource>>,
}

fn metrics_source(args: &Args, client: &Client) -> anyhow::Result<Sources> {
    if let Some(url) = &args.prometheus_url {
        let metrics = Arc::new(PrometheusSource {
            base_url: url.clone(),
        });
        return Ok(Sources {
            metrics,
            scrape: None,
        });
    }
    let gateway = match (&args.gateway_service, args.gateway_metrics_url.is_empty()) {
        (Some(_), false) => bail!("pass --gateway-service or --gateway-metrics-url, not both"),
        (Some(service), true) => {
            let (namespace, name) = service.split_once('/').with_context(|| {
                format!("--gateway-service {service:?}: expected NAMESPACE/NAME")
            })?;
            GatewayTargets::Service {
                namespace: namespace.into(),
                name: name.into(),
                port: args.gateway_metrics_port,
            }
        }
        (None, false) => GatewayTargets::Urls(args.gateway_metrics_url.clone()),
        (None, true) => GatewayTargets::None,
    };
    let source = Arc::new(ScrapeSource {
        client: client.clone(),
        gateway,
        endpoints: Default::default(),
        scrapes: Default::default(),
    });
    Ok(Sources {
        metrics: source.clone(),
        scrape: Some(source),
    })
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    if let Some(Command::Render { file, namespace }) = &args.command {
        return render(file, namespace);
    }
    telemetry::init_logging();
    let client = Client::try_default()
        .await
        .context("connecting to the Kubernetes API")?;
    // Fail early, and clearly, when the CRD is missing or RBAC does not reach a namespace;
    // only the watched namespaces are listed, so namespaced Roles suffice.
    let scope = WatchScope::from_flag(&args.watch_namespaces);
    controller::check_access(&client, &scope)
        .await
        .context("start-up check failed (kubectl apply -f crds/ installs the CRD)")?;
    let metrics = Arc::new(Metrics::default());
    let server = tokio::spawn(telemetry::server::serve(
        args.metrics_listen,
        metrics.clone(),
    ));
    let Sources {
        metrics: source,
        scrape,
    } = metrics_source(&args, &client)?;
    let ctx = Arc::new(Context::new(
        client.clone(),
        metrics.clone(),
        source,
        Settings {
            served_names: served_names(&args.served_names)?,
            gpu_budget: args.gpu_budget,
            engine_ingress_from: args
                .engine_ingress_from
                .as_deref()
                .map(serde_json::from_str)
                .transpose()
                .context(
                    "--engine-ingress-from must be a JSON list of NetworkPolicyPeer objects",
                )?,
        },
    ));
    let controllers = async {
        // Started with the controllers, so only the leader polls the gateway's queues.
        let queue_watch = scrape.map(|s| tokio::spawn(clock::wake::watch_queues(s, ctx.clone())));
        let clock = tokio::spawn(clock::ticker::run(ctx.clone(), args.sample_every));
        let runs = scope
            .controllers()
            .into_iter()
            .map(|ns| controller::run(ctx.clone(), ns));
        futures::future::join_all(runs).await;
        if let Some(watch) = queue_watch {
            watch.abort();
        }
        clock.abort();
    };
    if args.no_leader_election || !args.leader_election {
        tracing::info!("leader election off");
        controllers.await;
    } else {
        let identity = std::env::var("POD_NAME")
            .unwrap_or_else(|_| format!("tokenscale-operator-{}", std::process::id()));
        let elector = LeaderElector::new(
            client,
            &args.lease_namespace,
            &args.lease_name,
            &identity,
            Duration::from_secs(15),
        );
        tracing::info!(%identity, lease = %args.lease_name, "waiting for leadership");
        elector.acquire(Duration::from_secs(2)).await;
        metrics.leader.set(1);
        tracing::info!(%identity, "leading");
        tokio::select! {
            () = controllers => {
                // Shut down: hand the Lease over now rather than after a term.
                elector.release().await;
                metrics.leader.set(0);
            }
            () = elector.hold() => {
                metrics.leader.set(0);
                // Another replica may act now: stop at once; the Deployment restarts us.
                bail!("lost the leader lease; exiting so only one replica acts");
            }
        }
    }
    server.abort();
    Ok(())
}
