//! Test support: a minimal OpenAI-speaking upstream with controllable delay, failure and
//! usage; an HTTP client; and a gateway started on loopback from YAML.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full, StreamBody, combinators::BoxBody};
use hyper::body::{Frame, Incoming};
use hyper_util::client::legacy::{Client, connect::HttpConnector};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokenscale_gateway::RunningGateway;
use tokenscale_gateway::config::Config;
use tokio::task::JoinHandle;

/// Knobs and counters of a mock replica.
#[derive(Debug, Default)]
pub struct MockState {
    /// Delay before the response headers, in milliseconds.
    pub delay_ms: AtomicU64,
    /// Delay between streamed tokens, in milliseconds.
    pub token_delay_ms: AtomicU64,
    /// Delay before a stream's first token, after a chat stream's role chunk (which real
    /// engines send before prefill), in milliseconds.
    pub prefill_delay_ms: AtomicU64,
    /// Completion tokens per response (default 4 when 0).
    pub tokens: AtomicU64,
    /// Prompt tokens reported as served from the prefix cache.
    pub cached_tokens: AtomicU64,
    /// `vllm:num_requests_waiting` reported on /metrics.
    pub waiting: AtomicU64,
    /// `/health` answers 503 when set.
    pub unhealthy: AtomicBool,
    /// Completion requests received.
    pub requests: AtomicU64,
    /// The last completion request body.
    pub last_body: Mutex<Option<serde_json::Value>>,
    /// Stream events end in `\r\n\r\n` instead of `\n\n` (both are valid SSE).
    pub crlf: AtomicBool,
    /// Completion requests being answered now, and the most at once so far.
    pub in_flight: AtomicU64,
    pub peak_in_flight: AtomicU64,
    /// Behave like an engine other than tokenscale's: never report token ids.
    pub no_token_ids: AtomicBool,
    /// After this many streamed tokens of each response, go silent (the connection stays
    /// open, as with a hung process); 0 = never.
    pub hang_after: AtomicU64,
    /// Every completion request body received, in order.
    pub bodies: Mutex<Vec<serde_json::Value>>,
    /// Responses started (for distinct response ids).
    pub responses: AtomicU64,
    /// Answer every completion request with this `(status, content type, body)`, as a given
    /// engine answered it (see `engines.rs`), instead of the mock's own model.
    pub canned: Mutex<Option<(u16, &'static str, String)>>,
    /// Extra delay per streamed token for each stream being sent at the time, in
    /// microseconds: an engine whose TPOT grows with its concurrency (0 = fixed TPOT).
    pub token_delay_per_stream_us: AtomicU64,
    /// The streams being sent (shared with them).
    pub streams: Arc<StreamLoad>,
    /// More lines for /metrics (e.g. `vllm:lora_requests_info`).
    pub extra_metrics: Mutex<String>,
}

/// Streams a mock replica is sending, and the per-token delays it applied.
#[derive(Debug, Default)]
pub struct StreamLoad {
    pub now: AtomicU64,
    pub peak: AtomicU64,
    /// Every streamed token's delay as applied, in microseconds (the fake's own TPOT).
    pub delays_us: Mutex<Vec<u64>>,
}

/// Counts one stream in [`StreamLoad::now`] while it lives.
struct Streaming(Arc<StreamLoad>);

impl Streaming {
    fn start(load: Arc<StreamLoad>) -> Self {
        let now = load.now.fetch_add(1, Ordering::SeqCst) + 1;
        load.peak.fetch_max(now, Ordering::SeqCst);
        Self(load)
    }
}

impl Drop for Streaming {
    fn drop(&mut self) {
        self.0.now.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A mock replica listening on loopback.
pub struct MockReplica {
    pub addr: SocketAddr,
    pub url: String,
    pub state: Arc<MockState>,
    tasks: Arc<Mutex<Vec<JoinHandle<()>>>>,
}

impl MockReplica {
    pub async fn start() -> Self {
        Self::start_on("127.0.0.1:0".parse().expect("addr"), Arc::default()).await
    }

    /// Starts on `addr` with `state` (to bring a killed replica back on its port).
    pub async fn start_on(addr: SocketAddr, state: Arc<MockState>) -> Self {
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .expect("bind mock");
        let addr = listener.local_addr().expect("local addr");
        let tasks: Arc<Mutex<Vec<JoinHandle<()>>>> = Arc::default();
        let (accept_state, accept_tasks) = (state.clone(), tasks.clone());
        let accept = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                let state = accept_state.clone();
                let service = hyper::service::service_fn(move |req| respond(req, state.clone()));
                let conn = tokio::spawn(async move {
                    let builder =
                        hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
                    let _ = builder
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
                accept_tasks.lock().expect("tasks").push(conn);
            }
        });
        tasks.lock().expect("tasks").push(accept);
        Self {
            addr,
            url: format!("http://{addr}"),
            state,
            tasks,
        }
    }

    /// Kills the replica: stops accepting and drops every open connection mid-response.
    pub fn kill(&self) {
        for task in self.tasks.lock().expect("tasks").drain(..) {
            task.abort();
        }
    }

    pub fn requests(&self) -> u64 {
        self.state.requests.load(Ordering::SeqCst)
    }
}

impl Drop for MockReplica {
    fn drop(&mut self) {
        self.kill();
    }
}

type MockBody = BoxBody<Bytes, Infallible>;

fn full(text: String) -> MockBody {
    Full::new(Bytes::from(text)).boxed()
}

async fn respond(
    request: Request<Incoming>,
    state: Arc<MockState>,
) -> Result<Response<MockBody>, Infallible> {
    let path = request.uri().path().to_string();
    match path.as_str() {
        "/health" => {
            let status = if state.unhealthy.load(Ordering::SeqCst) {
                StatusCode::SERVICE_UNAVAILABLE
            } else {
                StatusCode::OK
            };
            Ok(Response::builder()
                .status(status)
                .body(full("ok".into()))
                .expect("response"))
        }
        "/metrics" => {
            let text = format!(
                "vllm:num_requests_waiting{{model_name=\"m\"}} {}\nvllm:kv_cache_usage_perc{{model_name=\"m\"}} 0.1\n",
                state.waiting.load(Ordering::SeqCst)
            );
            let extra = state.extra_metrics.lock().expect("metrics").clone();
            Ok(Response::new(full(text + &extra)))
        }
        "/v1/completions" | "/v1/chat/completions" => {
            let token_ids = request.headers().contains_key("x-tokenscale-token-ids")
                && !state.no_token_ids.load(Ordering::SeqCst);
            let body = request
                .into_body()
                .collect()
                .await
                .map(|b| b.to_bytes())
                .unwrap_or_default();
            let json: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
            state.requests.fetch_add(1, Ordering::SeqCst);
            *state.last_body.lock().expect("body") = Some(json.clone());
            state.bodies.lock().expect("bodies").push(json.clone());
            let now = state.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
            state.peak_in_flight.fetch_max(now, Ordering::SeqCst);
            tokio::time::sleep(Duration::from_millis(state.delay_ms.load(Ordering::SeqCst))).await;
            state.in_flight.fetch_sub(1, Ordering::SeqCst);
            if let Some((status, content_type, body)) = state.canned.lock().expect("canned").clone()
            {
                return Ok(Response::builder()
                    .status(status)
                    .header("content-type", content_type)
                    .body(full(body))
                    .expect("response"));
            }
            Ok(completion(
                &json,
                path == "/v1/chat/completions",
                token_ids,
                &state,
            ))
        }
        _ => Ok(Response::builder()
            .status(404)
            .body(full("{}".into()))
            .expect("response")),
    }
}

fn prompt_chars(json: &serde_json::Value) -> u64 {
    if let Some(text) = json["prompt"].as_str() {
        return text.chars().count() as u64;
    }
    json["messages"].as_array().map_or(0, |messages| {
        messages
            .iter()
            .map(|m| {
                let role = m["role"].as_str().unwrap_or("").chars().count();
                let content = m["content"].as_str().unwrap_or("").chars().count();
                (role + content + 2) as u64
            })
            .sum()
    })
}

/// Where an answer continues: after the ids of a `tokenscale_resume` (exact), or after the
/// `tokN ` words that end the prompt or the assistant message to continue (textual).
fn continues_at(json: &serde_json::Value) -> (usize, bool) {
    if let Some(ids) = json["tokenscale_resume"]["token_ids"].as_array() {
        return (ids.len(), true);
    }
    let text = match json["messages"].as_array().and_then(|m| m.last()) {
        Some(last) if last["role"] == "assistant" => last["content"].as_str().unwrap_or(""),
        Some(_) => "",
        None => json["prompt"].as_str().unwrap_or(""),
    };
    let words: Vec<&str> = text.split(' ').collect();
    let count = words
        .iter()
        .rev()
        .skip(1)
        .take_while(|w| w.starts_with("tok"))
        .count();
    (count, false)
}

/// The mock's model: token `i` of every answer is `tok{i} ` (id `i`), `tokens` of them.
fn completion(
    json: &serde_json::Value,
    chat: bool,
    token_ids: bool,
    state: &MockState,
) -> Response<MockBody> {
    let tokens = match state.tokens.load(Ordering::SeqCst) {
        0 => 4,
        n => n,
    };
    let (start, exact) = continues_at(json);
    let start = (start as u64).min(tokens);
    let chars = prompt_chars(json);
    // An exact continuation's prompt is the original; a textual one's includes the moved text.
    let prompt_tokens = chars.div_ceil(4);
    let completion_tokens = if exact { tokens } else { tokens - start };
    let cached = state
        .cached_tokens
        .load(Ordering::SeqCst)
        .min(prompt_tokens);
    let usage = serde_json::json!({
        "prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "prompt_tokens_details": {"cached_tokens": cached}
    });
    let id = format!("mock-{}", state.responses.fetch_add(1, Ordering::SeqCst));
    let words: Vec<(u64, String)> = (start..tokens).map(|i| (i, format!("tok{i} "))).collect();
    if json["stream"].as_bool() != Some(true) {
        let text: String = words.iter().map(|(_, w)| w.as_str()).collect();
        let choice = if chat {
            serde_json::json!({"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "length"})
        } else {
            serde_json::json!({"index": 0, "text": text, "finish_reason": "length"})
        };
        let body = serde_json::json!({"id": id, "object": "completion", "choices": [choice], "usage": usage});
        let response = Response::builder().header("content-type", "application/json");
        if state.hang_after.load(Ordering::SeqCst) == 0 {
            return response.body(full(body.to_string())).expect("response");
        }
        // Hung mid-body: half of it, then silence.
        let text = body.to_string();
        let (head, _) = text.split_at(text.len() / 2);
        let head = Bytes::from(head.to_string());
        let stream = futures::stream::once(async move { Ok::<_, Infallible>(Frame::data(head)) })
            .chain(futures::stream::once(async {
                tokio::time::sleep(Duration::from_secs(3600)).await;
                Ok::<_, Infallible>(Frame::data(Bytes::new()))
            }));
        return response
            .body(BodyExt::boxed(StreamBody::new(stream)))
            .expect("response");
    }
    let end = if state.crlf.load(Ordering::SeqCst) {
        "\r\n\r\n"
    } else {
        "\n\n"
    };
    let chunk = |choice: serde_json::Value, ids: Option<Vec<u64>>| {
        let mut chunk = serde_json::json!({"id": id, "created": 1, "choices": [choice]});
        if let (true, Some(ids)) = (token_ids, ids) {
            chunk["tokenscale_token_ids"] = serde_json::json!(ids);
        }
        format!("data: {chunk}{end}")
    };
    let mut events: Vec<String> = Vec::new();
    if chat && !exact {
        events.push(chunk(
            serde_json::json!({"index": 0, "delta": {"role": "assistant", "content": ""}}),
            None,
        ));
    }
    // Real engines send the role chunk at once and the first token after prefill.
    let first_token = events.len();
    let prefill = Duration::from_millis(state.prefill_delay_ms.load(Ordering::SeqCst));
    events.extend(words.iter().map(|(i, w)| {
        let choice = if chat {
            serde_json::json!({"index": 0, "delta": {"content": w}})
        } else {
            serde_json::json!({"index": 0, "text": w})
        };
        chunk(choice, Some(vec![*i]))
    }));
    let last = if chat {
        serde_json::json!({"index": 0, "delta": {}, "finish_reason": "length"})
    } else {
        serde_json::json!({"index": 0, "text": "", "finish_reason": "length"})
    };
    events.push(chunk(last, Some(Vec::new())));
    if json["stream_options"]["include_usage"].as_bool() == Some(true) {
        events.push(format!(
            "data: {}{end}",
            serde_json::json!({"id": id, "created": 1, "choices": [], "usage": usage})
        ));
    }
    events.push(format!("data: [DONE]{end}"));
    let delay = Duration::from_millis(state.token_delay_ms.load(Ordering::SeqCst));
    let per_stream_us = state.token_delay_per_stream_us.load(Ordering::SeqCst);
    let hang_after = state.hang_after.load(Ordering::SeqCst) as usize;
    let streaming = Streaming::start(state.streams.clone());
    let stream = futures::stream::iter(events.into_iter().enumerate()).then(move |(n, event)| {
        let load = streaming.0.clone();
        async move {
            if hang_after > 0 && n >= hang_after {
                tokio::time::sleep(Duration::from_secs(3600)).await;
            }
            if n == first_token {
                tokio::time::sleep(prefill).await;
            }
            let extra = Duration::from_micros(per_stream_us * load.now.load(Ordering::SeqCst));
            if per_stream_us > 0 {
                let applied = (delay + extra).as_micros() as u64;
                load.delays_us.lock().expect("delays").push(applied);
            }
            tokio::time::sleep(delay + extra).await;
            Ok::<_, Infallible>(Frame::data(Bytes::from(event)))
        }
    });
    Response::builder()
        .header("content-type", "text/event-stream")
        .body(BodyExt::boxed(StreamBody::new(stream)))
        .expect("response")
}

/// A reply read whole.
#[derive(Debug)]
pub struct Reply {
    pub status: StatusCode,
    pub headers: http::HeaderMap,
    pub body: String,
}

impl Reply {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// `x-ratelimit-remaining-{bucket}` (`requests`, `tokens`, `output-tokens`) as a number.
    pub fn remaining(&self, bucket: &str) -> u64 {
        let name = format!("x-ratelimit-remaining-{bucket}");
        let value = self.header(&name).unwrap_or_else(|| panic!("no {name}"));
        value
            .parse()
            .unwrap_or_else(|e| panic!("{name}: {value:?} ({e})"))
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.body))
    }

    pub fn upstream(&self) -> String {
        self.header("x-tokenscale-upstream")
            .unwrap_or_default()
            .to_string()
    }
}

/// A plain HTTP/1.1 client.
#[derive(Clone)]
pub struct TestClient {
    client: Client<HttpConnector, Full<Bytes>>,
    pub addr: SocketAddr,
    /// The gateway's admin listener (`/metrics`), when this client knows it.
    pub admin: Option<SocketAddr>,
}

impl TestClient {
    pub fn new(addr: SocketAddr) -> Self {
        Self {
            client: Client::builder(TokioExecutor::new()).build_http(),
            addr,
            admin: None,
        }
    }

    /// The same client, reading `/metrics` from the admin listener at `admin`.
    pub fn with_admin(mut self, admin: SocketAddr) -> Self {
        self.admin = Some(admin);
        self
    }

    /// The gateway's `/metrics` text, from its admin listener (the API port has none).
    pub async fn metrics(&self) -> String {
        let admin = self
            .admin
            .expect("this client knows the gateway's admin address");
        let admin = Self {
            addr: admin,
            ..self.clone()
        };
        let reply = admin.send("GET", "/metrics", &[], "").await;
        assert_eq!(
            reply.status, 200,
            "/metrics on the admin port: {}",
            reply.body
        );
        reply.body
    }

    /// Sends a request and returns the response with its body unread.
    pub async fn open(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: impl Into<Bytes>,
    ) -> Response<Incoming> {
        let mut builder = Request::builder()
            .method(method)
            .uri(format!("http://{}{path}", self.addr));
        for (name, value) in headers {
            builder = builder.header(*name, *value);
        }
        let request = builder.body(Full::new(body.into())).expect("request");
        tokio::time::timeout(Duration::from_secs(20), self.client.request(request))
            .await
            .expect("response within 20 s")
            .expect("response")
    }

    pub async fn send(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: impl Into<Bytes>,
    ) -> Reply {
        let response = self.open(method, path, headers, body).await;
        read(response).await
    }

    /// POSTs JSON with a bearer key.
    pub async fn post(&self, path: &str, key: Option<&str>, body: &serde_json::Value) -> Reply {
        let auth = key.map(|k| format!("Bearer {k}"));
        let mut headers = vec![("content-type", "application/json")];
        if let Some(auth) = &auth {
            headers.push(("authorization", auth.as_str()));
        }
        self.send("POST", path, &headers, body.to_string()).await
    }
}

/// Reads a whole response (bounded).
pub async fn read(response: Response<Incoming>) -> Reply {
    let (parts, body) = response.into_parts();
    let bytes = tokio::time::timeout(Duration::from_secs(20), body.collect())
        .await
        .expect("body within 20 s")
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    Reply {
        status: parts.status,
        headers: parts.headers,
        body: String::from_utf8_lossy(&bytes).into_owned(),
    }
}

/// Starts a gateway on an ephemeral loopback port from YAML.
pub async fn gateway(yaml: &str) -> (RunningGateway, TestClient) {
    let config = Config::from_yaml(yaml).unwrap_or_else(|e| panic!("test config: {e}\n{yaml}"));
    let loopback = "127.0.0.1:0".parse().expect("addr");
    let running = RunningGateway::start(&config, loopback, loopback)
        .await
        .expect("gateway starts");
    let client = TestClient::new(running.addr).with_admin(running.admin_addr);
    (running, client)
}

/// YAML for one model `m` over `upstreams`, a tenant `team-a` with key `key-a` and `limits`.
pub fn config(upstreams: &[&MockReplica], limits: &str, extra: &str) -> String {
    let urls: Vec<String> = upstreams.iter().map(|u| format!("\"{}\"", u.url)).collect();
    format!(
        "models:\n  - name: m\n    upstreams: [{}]\n    replica_concurrency: 8\n{extra}tenants:\n  - name: team-a\n    keys: [\"{}\"]\n    limits: {limits}\nhealth: {{interval_ms: 50, stale_after_ms: 1000, timeout_ms: 500}}\n",
        urls.join(", "),
        tokenscale_gateway::auth::hash_key("key-a"),
    )
}

/// Waits (bounded) until `model` has `ready` ready replicas.
pub async fn wait_ready(running: &RunningGateway, model: &str, ready: usize) {
    for _ in 0..200 {
        let pool = running
            .registry
            .router()
            .model(model)
            .expect("model declared");
        let now = pool
            .snapshot()
            .replicas
            .iter()
            .filter(|r| r.state() == tokenscale_gateway::routing::ReplicaState::Ready)
            .count();
        if now >= ready {
            return;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("model {model} never had {ready} ready replicas");
}

pub fn completion_body(prompt: &str, max_tokens: u64) -> serde_json::Value {
    serde_json::json!({"model": "m", "prompt": prompt, "max_tokens": max_tokens})
}

/// The JSON payloads of a stream's `data:` events, `[DONE]` left out.
pub fn events(text: &str) -> Vec<serde_json::Value> {
    text.split("\n\n")
        .filter_map(|e| e.strip_prefix("data: "))
        .filter(|e| *e != "[DONE]")
        .map(|e| serde_json::from_str(e).expect("event JSON"))
        .collect()
}

/// The value of `name{model_name="m"}` on the gateway's `/metrics` ("absent" when missing).
pub async fn metric(client: &TestClient, name: &str) -> String {
    series(client, &format!("{name}{{model_name=\"m\"}}")).await
}

/// The value of the series written exactly `series` on `/metrics` ("absent" when missing).
pub async fn series(client: &TestClient, series: &str) -> String {
    let text = client.metrics().await;
    text.lines()
        .find(|l| l.starts_with(&format!("{series} ")))
        .and_then(|l| l.rsplit(' ').next())
        .unwrap_or("absent")
        .to_string()
}

/// The series counting answers whose usage came from `source` (`engine` or `gateway`).
pub fn usage_source(source: &str) -> String {
    format!("tokenscale_gateway_usage_source_total{{model_name=\"m\",source=\"{source}\"}}")
}
