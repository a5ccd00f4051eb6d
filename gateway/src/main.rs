//! `tokenscale-gateway`: serves the OpenAI API in front of engine replicas.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::Parser;
use tokenscale_gateway::config::{Config, Discovery};
use tokenscale_gateway::reload::watch_tenants;
use tokenscale_gateway::server::{Workers, serve_admin};
use tokenscale_gateway::{Gateway, discovery};

// A request allocates ~60 small objects (header values, boxed layer futures, extensions)
// and frees them on another path. glibc's malloc and free were ~8% of the gateway's CPU at
// saturation; with mimalloc the gateway's user CPU per request fell ~14% (proxy_bench).
#[global_allocator]
static ALLOC: Malloc = Malloc;

/// mimalloc, asked for plain `malloc` whenever that already gives the alignment a layout
/// needs (as std's own `System` allocator does): `mimalloc::MiMalloc` always calls the
/// aligned entry points, whose checks and fallback (taken by every allocation over 1 KiB,
/// such as a boxed layer future) cost more than the allocation itself.
struct Malloc;

/// What `mi_malloc` guarantees: 16 bytes (`MI_MAX_ALIGN_SIZE`), and no more than the size.
fn plain(layout: std::alloc::Layout) -> bool {
    layout.align() <= 16 && layout.align() <= layout.size()
}

// SAFETY: every pointer comes from mimalloc and goes back to it; `mi_free` takes any of its
// pointers, aligned or not; a plain allocation is used only when `plain` says its alignment
// suffices, and a reallocation keeps the layout's alignment, as `plain` checks for both sizes.
unsafe impl std::alloc::GlobalAlloc for Malloc {
    unsafe fn alloc(&self, layout: std::alloc::Layout) -> *mut u8 {
        if plain(layout) {
            // SAFETY: as above.
            unsafe { libmimalloc_sys::mi_malloc(layout.size()).cast() }
        } else {
            // SAFETY: as above.
            unsafe { mimalloc::MiMalloc.alloc(layout) }
        }
    }

    unsafe fn alloc_zeroed(&self, layout: std::alloc::Layout) -> *mut u8 {
        if plain(layout) {
            // SAFETY: as above.
            unsafe { libmimalloc_sys::mi_zalloc(layout.size()).cast() }
        } else {
            // SAFETY: as above.
            unsafe { mimalloc::MiMalloc.alloc_zeroed(layout) }
        }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, _layout: std::alloc::Layout) {
        // SAFETY: as above.
        unsafe { libmimalloc_sys::mi_free(ptr.cast()) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: std::alloc::Layout, new_size: usize) -> *mut u8 {
        let grown = std::alloc::Layout::from_size_align(new_size, layout.align());
        if plain(layout) && grown.is_ok_and(plain) {
            // SAFETY: as above.
            unsafe { libmimalloc_sys::mi_realloc(ptr.cast(), new_size).cast() }
        } else {
            // SAFETY: as above.
            unsafe { mimalloc::MiMalloc.realloc(ptr, layout, new_size) }
        }
    }
}

/// The admin listener's port when `--admin-listen` is not given (Prometheus exporters' habit
/// of a 9xxx port; the chart names it in `gateway.adminPort`).
const DEFAULT_ADMIN_PORT: u16 = 9090;

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
    /// Address of the admin listener: `/metrics` (every model's and tenant's figures) and
    /// `/health`, kept off the API port. Default: port 9090 on `--listen`'s host.
    #[arg(long, env = "TOKENSCALE_GATEWAY_ADMIN_LISTEN")]
    admin_listen: Option<SocketAddr>,
    /// The gateway's YAML configuration (models, tenants, limits).
    #[arg(long, env = "TOKENSCALE_GATEWAY_CONFIG")]
    config: PathBuf,
    /// Seconds to let in-flight requests (streams) finish on SIGTERM/SIGINT.
    #[arg(long, env = "TOKENSCALE_GATEWAY_DRAIN_TIMEOUT_S", default_value_t = 60)]
    drain_timeout_s: u64,
    /// Seconds to keep serving as usual after SIGTERM/SIGINT before draining: the time the
    /// pod's removal from its Service takes to reach every client (a pre-stop `sleep` in the
    /// binary: no `sleep` needed in the image, nor Kubernetes 1.30).
    #[arg(long, env = "TOKENSCALE_GATEWAY_SHUTDOWN_DELAY_S", default_value_t = 0)]
    shutdown_delay_s: u64,
    /// Request-serving threads, each with its own runtime (default: one per CPU).
    #[arg(long, env = "TOKENSCALE_GATEWAY_WORKERS")]
    workers: Option<usize>,
    /// Log as JSON lines instead of text.
    #[arg(long, env = "TOKENSCALE_GATEWAY_LOG_JSON")]
    log_json: bool,
    /// Check the configuration and exit.
    #[arg(long)]
    check_config: bool,
}

fn main() -> anyhow::Result<()> {
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
    // Probes, discovery, reloads and signals run here; requests on the workers' runtimes.
    let control = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("gateway-control")
        .enable_all()
        .build()?;
    let _in_control = control.enter();
    let gateway = Gateway::new(&config)?;
    gateway.start_membership();
    gateway.start_batches();
    let tenants_path = config.tenants_path(&args.config);
    control.spawn(watch_tenants(
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
        let health = gateway.discovery_health().clone();
        health.set_starting();
        control.spawn(discovery::kubernetes::run_forever(
            registry, kubernetes, health,
        ));
    }
    let listener = std::net::TcpListener::bind(args.listen)
        .with_context(|| format!("cannot listen on {}", args.listen))?;
    let admin_listen = args
        .admin_listen
        .unwrap_or_else(|| SocketAddr::new(args.listen.ip(), DEFAULT_ADMIN_PORT));
    let admin = std::net::TcpListener::bind(admin_listen).with_context(|| {
        format!("cannot listen on {admin_listen} for /metrics (set --admin-listen)")
    })?;
    admin.set_nonblocking(true)?;
    // On the control runtime: a scrape keeps answering while the workers are saturated.
    control.spawn(serve_admin(
        tokio::net::TcpListener::from_std(admin)?,
        gateway.clone(),
        std::future::pending(),
    ));
    let count = args
        .workers
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let workers = Workers::start(
        listener,
        &gateway,
        count,
        Duration::from_secs(args.drain_timeout_s),
    )?;
    tracing::info!(listen = %args.listen, admin = %admin_listen, workers = count, "gateway listening");
    control.block_on(async {
        shutdown_signal().await;
        if args.shutdown_delay_s > 0 {
            tracing::info!(
                delay_s = args.shutdown_delay_s,
                "shutdown signal: serving on before draining"
            );
            tokio::time::sleep(Duration::from_secs(args.shutdown_delay_s)).await;
        }
    });
    workers.shutdown()?;
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
