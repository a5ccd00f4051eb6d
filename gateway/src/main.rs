//! `tokenscale-gateway`: serves the OpenAI API in front of engine replicas.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::Parser;
use tokenscale_gateway::config::{Config, Discovery, watch_tenants};
use tokenscale_gateway::{Gateway, discovery, serve};

/// The tokenscale gateway.
#[derive(Debug, Parser)]
#[command(version, about)]
struct Args {
    /// Address to listen on.
    #[arg(
        long,
        env = "TOKENSCALE_GATEWAY_LISTEN",
        default_value = "127.0.0.1:8080"
    )]
    listen: SocketAddr,
    /// The gateway's YAML configuration (models, tenants, limits).
    #[arg(long, env = "TOKENSCALE_GATEWAY_CONFIG")]
    config: PathBuf,
    /// Seconds to let in-flight requests (streams) finish on SIGTERM/SIGINT.
    #[arg(long, env = "TOKENSCALE_GATEWAY_DRAIN_TIMEOUT_S", default_value_t = 60)]
    drain_timeout_s: u64,
    /// Log as JSON lines instead of text.
    #[arg(long, env = "TOKENSCALE_GATEWAY_LOG_JSON")]
    log_json: bool,
    /// Check the configuration and exit.
    #[arg(long)]
    check_config: bool,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let filter =
        tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into());
    if args.log_json {
        tracing_subscriber::fmt()
            .json()
            .with_env_filter(filter)
            .init();
    } else {
        tracing_subscriber::fmt().with_env_filter(filter).init();
    }
    let config = Config::load(&args.config)?;
    if args.check_config {
        println!(
            "{}: ok ({} models, {} tenants)",
            args.config.display(),
            config.models.len(),
            config.tenants.len()
        );
        return Ok(());
    }
    let gateway = Gateway::new(&config)?;
    let tenants_path = config.tenants_path(&args.config);
    tokio::spawn(watch_tenants(
        tenants_path,
        config.tenants_file.is_some(),
        Duration::from_millis(config.reload_interval_ms),
        gateway.tenants().clone(),
    ));
    let wants_kubernetes = config
        .models
        .iter()
        .any(|m| m.discovery == Discovery::Kubernetes);
    if let Some(kubernetes) = config
        .kubernetes
        .clone()
        .filter(|_| wants_kubernetes || config.kubernetes.is_some())
    {
        let registry = gateway.registry().clone();
        tokio::spawn(async move {
            if let Err(error) = discovery::kubernetes::run(registry, kubernetes).await {
                tracing::error!(%error, "kubernetes discovery stopped");
            }
        });
    }
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("cannot listen on {}", args.listen))?;
    tracing::info!(listen = %args.listen, "gateway listening");
    serve(
        listener,
        gateway,
        shutdown_signal(),
        Duration::from_secs(args.drain_timeout_s),
    )
    .await?;
    Ok(())
}

/// Resolves on SIGTERM or SIGINT.
async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(term) => term,
                Err(_) => return ctrl_c.await.unwrap_or(()),
            };
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = ctrl_c.await;
}
