//! The HTTP server: routes the OpenAI paths into the stack, serves `/v1/models` and
//! `/health`, bounds client connections (`connection`), and shuts down gracefully, letting
//! in-flight streams finish. `/metrics` is on a listener of its own (`admin`).

mod admin;
mod clients;
mod connection;
mod section;
mod stall;
mod write_timeout;

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderValue, Method, Request, Response, header};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use tokio::net::{TcpListener, TcpStream};
use tower::ServiceExt;

use crate::Body;
use crate::admission::InFlightCounts;
use crate::auth::{TenantDirectory, authenticate};
use crate::batch::Batches;
use crate::batch::runner::Runner;
use crate::body::Guarded;
use crate::config::{Config, Discovery, Http2Config};
use crate::discovery::{DiscoveryHealth, Registry, RegistryError};
use crate::error::{GatewayError, full_body};
use crate::limits::Limiter;
use crate::metrics::Metrics;
use crate::proxy::{FailoverSettings, Upstream, UpstreamClient, UpstreamSettings};
use crate::request::ParseSettings;
use crate::routing::Router;
use crate::stack::{self, BatchStack, Stack, StackParts};
use crate::vocab::GatewayShare;
pub use admin::serve_admin;
use clients::ClientBounds;
use connection::{Activity, ConnectionLimit};
pub use section::validate_section;
use stall::Stall;
use write_timeout::WriteTimeout;

/// Why a gateway could not be built from its (validated) config.
#[derive(Debug, thiserror::Error)]
pub enum GatewayBuildError {
    /// A static upstream URL was refused.
    #[error(transparent)]
    Registry(#[from] RegistryError),
    /// The limits store cannot be set up from its settings.
    #[error("limits store: {0}")]
    Store(#[from] crate::store::StoreError),
    /// The Batch API's stores cannot be opened.
    #[error(transparent)]
    Batch(#[from] crate::batch::BatchSetupError),
    /// The engine key cannot be read.
    #[error("upstream.engine_api_key_env names `{variable}`, but {reason}")]
    EngineKey {
        /// The environment variable.
        variable: String,
        /// What is wrong with it.
        reason: &'static str,
    },
}

/// Everything one gateway process serves.
#[derive(Clone)]
pub struct Gateway {
    stack: Stack,
    router: Arc<Router>,
    metrics: Arc<Metrics>,
    tenants: Arc<TenantDirectory>,
    limiter: Arc<Limiter>,
    in_flight: Arc<InFlightCounts>,
    registry: Registry,
    shutting_down: Arc<AtomicBool>,
    discovery_health: Arc<DiscoveryHealth>,
    connections: Arc<ConnectionLimit>,
    /// Each client address's connections and requests in flight.
    clients: Arc<ClientBounds>,
    /// The Batch API and the path its lines take, or why it is off.
    batches: Result<(Arc<Batches>, BatchStack), Arc<str>>,
    header_timeout: Duration,
    idle_timeout: Duration,
    write_timeout: Duration,
    http2: Http2Config,
}

impl Gateway {
    /// Builds the gateway from a validated config; static upstreams are registered (their
    /// probes start on the current tokio runtime).
    pub fn new(config: &Config) -> Result<Self, GatewayBuildError> {
        let share = Arc::new(GatewayShare::default());
        let router = Arc::new(Router::new(share.clone()));
        let metrics = Arc::new(Metrics::default());
        let limiter = Arc::new(Limiter::new(&config.limits, share.clone())?);
        let in_flight = Arc::new(InFlightCounts::new(config.bounds.max_in_flight, share));
        // One budget for every body the pod holds: requests' and uploads' parts.
        let body_budget = crate::request::body_budget(config.bounds.max_buffered_body_bytes);
        let anonymous = config.anonymous.as_ref().map(|a| a.value.as_str());
        let any_key = config.anonymous_any_key.as_ref().is_some_and(|a| a.value);
        let tenants =
            Arc::new(TenantDirectory::new(&config.tenants, anonymous).with_any_key(any_key));
        let client = UpstreamClient::new(Duration::from_millis(config.upstream.connect_timeout_ms));
        let registry = Registry::new(router.clone(), client.clone(), config);
        for model in &config.models {
            registry.declare(model);
            if model.discovery == Discovery::Static {
                for url in &model.upstreams {
                    registry.add(&model.name.value, &url.value)?;
                }
            }
        }
        router.set_routes(config.route_specs());
        let upstream_settings = UpstreamSettings {
            response_timeout: Duration::from_millis(config.upstream.response_timeout_ms),
            stream_idle_timeout: Duration::from_millis(config.upstream.stream_idle_timeout_ms),
            max_response_bytes: 64 << 20,
            engine_authorization: engine_authorization(config)?,
            chars_per_token: config.tokens.chars_per_token,
        };
        let parts = StackParts {
            tenants: tenants.clone(),
            router: router.clone(),
            limiter: limiter.clone(),
            in_flight: in_flight.clone(),
            metrics: metrics.clone(),
            parse: ParseSettings {
                max_body_bytes: config.max_body_bytes,
                max_buffered_body_bytes: config.bounds.max_buffered_body_bytes,
                body_budget: body_budget.clone(),
                tokens: config.tokens.clone(),
                queue: config.queue.clone(),
            },
            failover: FailoverSettings {
                max_attempts: config.upstream.max_attempts,
                max_resumptions: config.upstream.max_resumptions,
            },
            upstream: Upstream::new(client, metrics.clone(), upstream_settings),
        };
        let batches = if config.batch.enabled {
            let bounds = crate::batch::upload::UploadBounds {
                body_budget,
                in_flight: in_flight.clone(),
            };
            match Batches::open(config, limiter.redis(), bounds) {
                Ok(batches) => Ok((batches, stack::build_batch(parts.clone()))),
                // Nothing configured and the default folder cannot be made (a read-only
                // container): serve everything else; the Batch API answers why it is off.
                Err(error) if config.batch.is_default_local() => {
                    tracing::warn!(%error, "the Batch API is off: set batch.dir to a writable folder");
                    Err(Arc::from(format!("the Batch API is off: {error}")))
                }
                Err(error) => return Err(error.into()),
            }
        } else {
            Err(Arc::from("the Batch API is off (batch.enabled: false)"))
        };
        let stack = stack::build(parts);
        Ok(Self {
            stack,
            router,
            metrics,
            tenants,
            limiter,
            in_flight,
            registry,
            shutting_down: Arc::default(),
            discovery_health: Arc::default(),
            connections: Arc::new(ConnectionLimit::new(config.bounds.max_connections)),
            clients: Arc::new(ClientBounds::new(&config.bounds, &config.trusted_proxies)),
            batches,
            header_timeout: Duration::from_millis(config.client_header_timeout_ms),
            idle_timeout: Duration::from_millis(config.client_idle_timeout_ms),
            write_timeout: Duration::from_millis(config.stream_write_timeout_ms),
            http2: config.http2.clone(),
        })
    }

    /// The limiter (its Redis client also carries the pods' membership).
    pub fn limiter(&self) -> &Arc<Limiter> {
        &self.limiter
    }

    /// With shared limits, starts announcing this pod in Redis on the current runtime, so the
    /// pods split replica concurrency, tenants' in-flight caps and (while Redis is down)
    /// quotas between them; with memory limits, does nothing (one pod takes all).
    pub fn start_membership(&self) {
        let Some(client) = self.limiter.redis().cloned() else {
            return;
        };
        let router = self.router.clone();
        let share = router.share().clone();
        tokio::spawn(crate::store::membership::run(
            client,
            crate::store::membership::pod_id(),
            share,
            move |_, _| router.shares_changed(),
        ));
    }

    /// Starts running batches on the current runtime (with `batch.enabled`).
    pub fn start_batches(&self) {
        if let Ok((batches, stack)) = &self.batches {
            let runner = Runner::new(
                batches.clone(),
                stack.clone(),
                self.router.clone(),
                self.tenants.clone(),
                self.metrics.clone(),
            );
            tokio::spawn(runner.run());
        }
    }

    /// Why the Batch API is off, when it is.
    pub fn batches_off(&self) -> Option<&str> {
        self.batches.as_ref().err().map(|why| &**why)
    }

    /// The Batch API, when enabled.
    pub fn batches(&self) -> Option<&Arc<Batches>> {
        self.batches.as_ref().ok().map(|(batches, _)| batches)
    }

    /// Kubernetes discovery's health, which `/health` reports.
    pub fn discovery_health(&self) -> &Arc<DiscoveryHealth> {
        &self.discovery_health
    }

    /// The replica registry handle (for `tokenscale up` and discovery).
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// The tenants (swapped by the reload task).
    pub fn tenants(&self) -> &Arc<TenantDirectory> {
        &self.tenants
    }

    /// The metrics.
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    /// Answers one request.
    pub async fn handle(&self, request: Request<Incoming>) -> Response<Body> {
        let path = request.uri().path();
        match (request.method(), path) {
            (&Method::POST, "/v1/chat/completions" | "/v1/completions") => {
                if self.shutting_down.load(Ordering::Relaxed) {
                    return GatewayError::ShuttingDown.into_response();
                }
                match self.stack.clone().oneshot(request).await {
                    Ok(response) => response,
                    Err(never) => match never {},
                }
            }
            (_, path) if crate::batch::api::is_batch_path(path) => match &self.batches {
                // Boxed: the Batch API's future is large, and every request's future (this
                // function's) would otherwise be as large, and moved, on every request.
                Ok((batches, _)) => Box::pin(batches.handle(request, &self.tenants)).await,
                Err(why) => {
                    GatewayError::PathNotFound(format!("{} {path}: {why}", request.method()))
                        .into_response()
                }
            },
            (&Method::GET, "/v1/models") => match authenticate(&request, &self.tenants) {
                Ok(tenant) => self.models(&tenant.models),
                Err(error) => error.into_response(),
            },
            // A tenant's own rows only; the admin listener lists every tenant's.
            (&Method::GET, "/v1/usage") => match authenticate(&request, &self.tenants) {
                Ok(tenant) => self.usage(Some(&tenant.name)),
                Err(error) => error.into_response(),
            },
            // `/metrics` names every model and tenant: it is served on the admin listener
            // only (`admin`), and here answers as any unknown path does.
            (&Method::GET, "/health") => self.health(),
            _ => GatewayError::PathNotFound(format!("{} {path}", request.method())).into_response(),
        }
    }

    /// `/health`: 200 `ok`; 503 while shutting down or while discovery has not listed the
    /// cluster. Served on both listeners (probes reach the API port, scrapers the admin one).
    fn health(&self) -> Response<Body> {
        if self.shutting_down.load(Ordering::Relaxed) {
            GatewayError::ShuttingDown.into_response()
        } else if let Some(problem) = self.discovery_health.problem() {
            let mut response = text_response(problem.into(), "text/plain");
            *response.status_mut() = http::StatusCode::SERVICE_UNAVAILABLE;
            response
        } else {
            text_response("ok".into(), "text/plain")
        }
    }

    /// `/metrics`: the Prometheus text of every model, tenant, bound and batch family.
    fn metrics_text(&self) -> Response<Body> {
        let mut text = self.metrics.render(&self.router);
        crate::metrics::render_bounds(
            &mut text,
            &self.limiter,
            self.router.share(),
            self.connections.open_now(),
            self.connections.refused(),
            self.in_flight.in_flight(),
        );
        if let Ok((batches, _)) = &self.batches {
            batches.metrics.render(&mut text);
        }
        text_response(text, "text/plain; version=0.0.4; charset=utf-8")
    }

    /// `GET /v1/usage`: the usage report of `only` that tenant, or of every tenant.
    fn usage(&self, only: Option<&str>) -> Response<Body> {
        let rows = self.metrics.tenants.windowed(only);
        let list = crate::usage::list(rows, |name| {
            self.tenants.by_name(name).and_then(|tenant| tenant.limits)
        });
        // Strings, integers and finite floats: serializing cannot fail.
        let body = serde_json::to_string(&list).unwrap_or_default();
        text_response(body, "application/json")
    }

    /// The models `access` allows, as `GET /v1/models` lists them: each model, its LoRA
    /// adapters after it with `parent` and `root` naming it (as vLLM lists them; an adapter
    /// is listed when its name or its parent is allowed), then the routes.
    fn models(&self, access: &crate::auth::ModelAccess) -> Response<Body> {
        let entry = |id: &str| serde_json::json!({"id": id, "object": "model", "created": 0, "owned_by": "tokenscale"});
        let mut data = Vec::new();
        for pool in self.router.pools() {
            let parent_allowed = access.allows(&pool.name);
            if parent_allowed {
                data.push(entry(&pool.name));
            }
            for adapter in pool.adapters() {
                if parent_allowed || access.allows(&adapter) {
                    let mut listed = entry(&adapter);
                    listed["parent"] = pool.name.clone().into();
                    listed["root"] = pool.name.clone().into();
                    data.push(listed);
                }
            }
        }
        let routes = self.router.route_names().into_iter();
        data.extend(
            routes
                .filter(|name| access.allows(name))
                .map(|name| entry(&name)),
        );
        let body = serde_json::json!({"object": "list", "data": data}).to_string();
        text_response(body, "application/json")
    }
}

/// `Bearer <key>` from the environment variable `upstream.engine_api_key_env` names.
fn engine_authorization(config: &Config) -> Result<Option<HeaderValue>, GatewayBuildError> {
    let Some(variable) = &config.upstream.engine_api_key_env else {
        return Ok(None);
    };
    let key = std::env::var(variable).map_err(|_| GatewayBuildError::EngineKey {
        variable: variable.clone(),
        reason: "it is not set",
    })?;
    let mut value = HeaderValue::from_str(&format!("Bearer {}", key.trim())).map_err(|_| {
        GatewayBuildError::EngineKey {
            variable: variable.clone(),
            reason: "it holds characters a header cannot carry",
        }
    })?;
    value.set_sensitive(true);
    Ok(Some(value))
}

fn text_response(text: String, content_type: &'static str) -> Response<Body> {
    let mut response = Response::new(full_body(Bytes::from(text)));
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    response
}

/// Serves `gateway` on `listener` until `shutdown` resolves; then stops accepting, answers
/// `/health` with 503, and waits up to `drain` for open requests (streams included).
pub async fn serve(
    listener: TcpListener,
    gateway: Gateway,
    shutdown: impl Future<Output = ()>,
    drain: Duration,
) -> std::io::Result<()> {
    serve_connections(Connections::Listener(listener), gateway, shutdown, drain).await
}

/// Where a serving loop's connections come from.
enum Connections {
    /// Accepted by the loop itself.
    Listener(TcpListener),
    /// Accepted by [`Workers`]' acceptor and handed to this loop's thread.
    Handed(tokio::sync::mpsc::UnboundedReceiver<std::net::TcpStream>),
}

impl Connections {
    /// The next connection and its peer; `None` when no more will come.
    async fn next(&mut self) -> Option<std::io::Result<(TcpStream, SocketAddr)>> {
        match self {
            Self::Listener(listener) => Some(listener.accept().await),
            Self::Handed(handed) => {
                let stream = handed.recv().await?;
                Some(TcpStream::from_std(stream).and_then(|stream| {
                    let peer = stream.peer_addr()?;
                    Ok((stream, peer))
                }))
            }
        }
    }
}

async fn serve_connections(
    mut connections: Connections,
    gateway: Gateway,
    shutdown: impl Future<Output = ()>,
    drain: Duration,
) -> std::io::Result<()> {
    let builder = connection_builder(&gateway);
    // Shared, not cloned per request: a `Gateway` clone copies the whole layer stack.
    let gateway = Arc::new(gateway);
    // Tells this loop's connections to finish their open requests and close.
    let (stop, stopped) = tokio::sync::watch::channel(false);
    tokio::pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            accepted = connections.next() => match accepted {
                Some(Ok(pair)) => pair,
                None => break,
                Some(Err(error)) => {
                    // Out of file descriptors and the like: back off instead of spinning.
                    tracing::warn!(%error, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        // Its client's cap first: a flood from one address is refused without touching the
        // pod's count, which every other client needs.
        let client_slot = match gateway.clients.connect(peer.ip()) {
            Ok(slot) => slot,
            Err(refusal) => {
                tokio::spawn(connection::refuse_client(stream, refusal.message()));
                continue;
            }
        };
        let Some(slot) = gateway.connections.open() else {
            tokio::spawn(connection::refuse(stream));
            continue;
        };
        let _ = stream.set_nodelay(true);
        let activity = Arc::new(Activity::default());
        let stall = Arc::new(Stall::default());
        let service = {
            let (gateway, activity, stall) = (gateway.clone(), activity.clone(), stall.clone());
            hyper::service::service_fn(move |request: Request<Incoming>| {
                let watched = (stall.clone(), activity.request());
                serve_request(gateway.clone(), peer, watched, request)
            })
        };
        let stream = WriteTimeout::new(stream, gateway.write_timeout);
        let connection = builder
            .serve_connection(TokioIo::new(stream), service)
            .into_owned();
        let (idle, mut stopped) = (gateway.idle_timeout, stopped.clone());
        let write_timeout = gateway.write_timeout;
        tokio::spawn(async move {
            let _slots = (slot, client_slot);
            tokio::pin!(connection);
            let mut closing = false;
            loop {
                tokio::select! {
                    result = connection.as_mut() => {
                        if let Err(error) = result {
                            tracing::debug!(%peer, %error, "connection ended with an error");
                        }
                        break;
                    }
                    // A client that stopped taking a stream (HTTP/2 flow control; see `stall`):
                    // dropping the connection drops its responses, cancelling their calls.
                    () = stall.stalled_for(write_timeout) => {
                        tracing::debug!(%peer, "a client read nothing for stream_write_timeout_ms: cut");
                        break;
                    }
                    () = activity.idle_for(idle), if !closing => {
                        connection.as_mut().graceful_shutdown();
                        closing = true;
                    }
                    _ = stopped.wait_for(|stop| *stop), if !closing => {
                        connection.as_mut().graceful_shutdown();
                        closing = true;
                    }
                }
            }
        });
    }
    gateway.shutting_down.store(true, Ordering::Relaxed);
    drop(connections);
    tracing::info!("shutting down: draining open requests");
    let _ = stop.send(true);
    if tokio::time::timeout(drain, gateway.connections.all_closed())
        .await
        .is_err()
    {
        tracing::warn!(
            drain_s = drain.as_secs(),
            "drain timeout: closing remaining connections"
        );
    }
    Ok(())
}

/// Answers one request of a connection from `peer`, counted in flight for its client until
/// its response body ends (or is dropped: the client went away or was cut).
async fn serve_request(
    gateway: Arc<Gateway>,
    peer: SocketAddr,
    (stall, open): (Arc<Stall>, connection::RequestOpen),
    request: Request<Incoming>,
) -> Result<Response<Body>, Infallible> {
    let client = gateway.clients.client_of(peer.ip(), request.headers());
    let client_slot = match gateway.clients.request(client) {
        Ok(slot) => slot,
        Err(refusal) => return Ok(clients::refused(refusal).map(|b| Guarded::wrap(b, open))),
    };
    let response = gateway.handle(request).await;
    // The audit line of a refused credential, with the client's address.
    if let Some(refused) = &response.body().report().refused {
        refused.log(peer);
    }
    Ok(response.map(|body| Guarded::wrap(stall.watch(body), (open, client_slot))))
}

/// The client connection settings: HTTP/1.1 and HTTP/2 (h2c, or behind a TLS terminator).
fn connection_builder(gateway: &Gateway) -> auto::Builder<TokioExecutor> {
    let mut builder = auto::Builder::new(TokioExecutor::new());
    // Head and body copied into one buffer and sent with one `write`, not gathered by
    // `writev`: OpenAI responses and SSE events are small, and the copy costs less than the
    // queued-buffer bookkeeping (with the same on the upstream side: −3% CPU per request,
    // +2% requests/s, alternating proxy_bench runs in both orders).
    // A client that sends its headers slowly, or leaves a keep-alive connection idle, would
    // hold the connection (and its buffers) forever; hyper closes it after the timeout.
    builder
        .http1()
        .writev(false)
        .timer(TokioTimer::new())
        .header_read_timeout(gateway.header_timeout);
    // HTTP/2 has no header timeout in hyper: streams per connection and header lists are
    // capped here, dead peers found by pings, idle connections closed by the serving loop.
    let http2 = &gateway.http2;
    builder
        .http2()
        .timer(TokioTimer::new())
        .max_concurrent_streams(http2.max_concurrent_streams)
        .max_header_list_size(http2.max_header_list_bytes)
        .keep_alive_interval(Duration::from_millis(http2.keep_alive_interval_ms))
        .keep_alive_timeout(Duration::from_millis(http2.keep_alive_timeout_ms));
    builder
}

/// Request-serving threads, each running its own single-threaded runtime, so a
/// connection, its requests and their upstream calls stay on one thread from accept to last
/// byte, as in nginx's worker processes. A multi-threaded scheduler instead hands each
/// request between threads (client socket, upstream connection task, back), and every
/// hand-off that wakes a parked thread adds to the tail latency. One acceptor deals
/// connections out in turn: left to race for a shared listener, one thread can take a
/// burst of connections alone and queue their requests while the others idle.
pub struct Workers {
    stop: tokio::sync::watch::Sender<bool>,
    threads: Vec<std::thread::JoinHandle<std::io::Result<()>>>,
}

impl Workers {
    /// Starts `count` threads serving `gateway` on `listener` (see [`serve`]), and the
    /// acceptor.
    pub fn start(
        listener: std::net::TcpListener,
        gateway: &Gateway,
        count: usize,
        drain: Duration,
    ) -> std::io::Result<Self> {
        listener.set_nonblocking(true)?;
        let (stop, stopped) = tokio::sync::watch::channel(false);
        let mut threads = Vec::with_capacity(count + 1);
        let mut handoffs = Vec::with_capacity(count);
        for index in 0..count.max(1) {
            let (handoff, handed) = tokio::sync::mpsc::unbounded_channel();
            handoffs.push(handoff);
            let gateway = gateway.clone();
            let stopped = stopped.clone();
            threads.push(on_own_runtime(
                format!("gateway-worker-{index}"),
                async move {
                    tokio::spawn(keep_timer_wheel_armed());
                    let shutdown = stop_requested(stopped);
                    serve_connections(Connections::Handed(handed), gateway, shutdown, drain).await
                },
            )?);
        }
        threads.push(on_own_runtime("gateway-acceptor".into(), async move {
            let listener = TcpListener::from_std(listener)?;
            let shutdown = stop_requested(stopped);
            tokio::pin!(shutdown);
            for next in (0..handoffs.len()).cycle() {
                let stream = tokio::select! {
                    accepted = listener.accept() => match accepted {
                        Ok((stream, _)) => stream,
                        Err(error) => {
                            // Out of file descriptors and the like: back off, don't spin.
                            tracing::warn!(%error, "accept failed");
                            tokio::time::sleep(Duration::from_millis(50)).await;
                            continue;
                        }
                    },
                    () = &mut shutdown => break,
                };
                // A worker gone (it failed to start) loses the connection, closing it.
                match stream.into_std() {
                    Ok(stream) => drop(handoffs[next].send(stream)),
                    Err(error) => tracing::warn!(%error, "could not hand a connection over"),
                }
            }
            Ok(())
        })?);
        Ok(Self { stop, threads })
    }

    /// Stops accepting, lets every thread drain, and waits for them.
    pub fn shutdown(self) -> std::io::Result<()> {
        let _ = self.stop.send(true);
        for thread in self.threads {
            thread
                .join()
                .map_err(|_| std::io::Error::other("a gateway thread panicked"))??;
        }
        Ok(())
    }
}

/// Keeps the worker runtime's timer wheel from running empty. Registering a timer due
/// before every other one makes tokio wake its I/O driver (an eventfd write, then one more
/// turn through `epoll_wait`) in case the thread is asleep there; on a worker, which
/// registers its timers while running, that wake is wasted. With the wheel empty between
/// requests, every request's upstream timeout paid it: one syscall and one `epoll_wait` per
/// request more than nginx (perf stat: 1.0 `write` and 2.8 `epoll_wait` per request, nginx
/// 0 and 2.0; with this task 0 and 2.0). A tick every second is due before the request
/// path's timeouts (≥ 2 s), so they no longer wake anything; a shorter one (a client's
/// deadline) still does, as it must. The CPU saved is small (~1-2 µs of ~40 per request,
/// near the noise of alternating saturation runs), the syscalls saved are certain.
async fn keep_timer_wheel_armed() {
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    loop {
        tick.tick().await;
    }
}

/// Runs `task` to completion on a new thread with its own single-threaded runtime.
fn on_own_runtime(
    name: String,
    task: impl Future<Output = std::io::Result<()>> + Send + 'static,
) -> std::io::Result<std::thread::JoinHandle<std::io::Result<()>>> {
    std::thread::Builder::new().name(name).spawn(move || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?
            .block_on(task)
    })
}

/// Resolves once [`Workers::shutdown`] is called.
async fn stop_requested(mut stopped: tokio::sync::watch::Receiver<bool>) {
    let _ = stopped.wait_for(|stop| *stop).await;
}

/// A gateway running in the background (tests, `tokenscale up`).
pub struct RunningGateway {
    /// Where it serves the API.
    pub addr: SocketAddr,
    /// Where it serves `/metrics` and `/health` (the admin listener).
    pub admin_addr: SocketAddr,
    /// Its replica registry.
    pub registry: Registry,
    /// The gateway itself.
    pub gateway: Gateway,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<std::io::Result<()>>,
}

impl RunningGateway {
    /// Starts a gateway for `config`, its API on `listen` and its admin routes on
    /// `admin_listen` (port 0 picks a free one).
    pub async fn start(
        config: &Config,
        listen: SocketAddr,
        admin_listen: SocketAddr,
    ) -> std::io::Result<Self> {
        let gateway = Gateway::new(config).map_err(std::io::Error::other)?;
        let listener = TcpListener::bind(listen).await?;
        let addr = listener.local_addr()?;
        let admin = TcpListener::bind(admin_listen).await?;
        let admin_addr = admin.local_addr()?;
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let (admin_stop, admin_stopped) = tokio::sync::watch::channel(false);
        let shutdown = async move {
            let _ = stopped.await;
            let _ = admin_stop.send(true);
        };
        gateway.start_membership();
        gateway.start_batches();
        tokio::spawn(serve_admin(
            admin,
            gateway.clone(),
            stop_requested(admin_stopped),
        ));
        let task = tokio::spawn(serve(
            listener,
            gateway.clone(),
            shutdown,
            Duration::from_secs(30),
        ));
        Ok(Self {
            addr,
            admin_addr,
            registry: gateway.registry().clone(),
            gateway,
            stop: Some(stop),
            task,
        })
    }

    /// Stops accepting, drains open requests, and waits for the server to end.
    pub async fn shutdown(mut self) -> std::io::Result<()> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        self.task.await.map_err(std::io::Error::other)?
    }
}
