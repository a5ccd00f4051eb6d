//! Load through the gateway and the replica counts it causes. Requests reach the gateway's
//! Service through the API server's service proxy, so the suite needs no port-forward, no
//! kubectl and no route into the cluster: only the kubeconfig.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use http::{Method, Request};
use kube::Client;
use kube::api::Api;
use kube::client::Body;
use serde_json::json;
use tokenscale_operator::crd::ModelDeployment;

use crate::plan::{MODEL, Plan};
use crate::wait::{SuiteError, poll_until};

/// The gateway Service's port (the chart's `gateway.service.port` default).
const GATEWAY_PORT: u16 = 80;

/// Path of the gateway's chat endpoint through the API server's service proxy.
pub fn chat_path(plan: &Plan) -> String {
    format!(
        "/api/v1/namespaces/{}/services/{}:{GATEWAY_PORT}/proxy/v1/chat/completions",
        plan.release_namespace,
        plan.gateway_service()
    )
}

/// One streaming chat completion of the simulated model, 64 tokens long.
pub fn chat_request(plan: &Plan) -> Result<Request<Body>, SuiteError> {
    let body = json!({
        "model": MODEL,
        "messages": [{"role": "user", "content": "Count slowly from one to one hundred."}],
        "max_tokens": 64,
        "stream": true
    });
    let bytes = serde_json::to_vec(&body).map_err(SuiteError::Json)?;
    Request::builder()
        .method(Method::POST)
        .uri(chat_path(plan))
        .header("content-type", "application/json")
        .body(Body::from(bytes))
        .map_err(|e| SuiteError::Io {
            what: "chat request".into(),
            source: std::io::Error::other(e),
        })
}

/// What the load did.
#[derive(Debug, Default)]
pub struct LoadReport {
    /// Streams that ended with `data: [DONE]`.
    pub completed: u64,
    /// Streams that failed (status, transport, or no `[DONE]`).
    pub failed: u64,
}

/// Concurrent streams running until [`Load::stop`].
pub struct Load {
    stop: Arc<AtomicBool>,
    completed: Arc<AtomicU64>,
    failed: Arc<AtomicU64>,
    workers: Vec<tokio::task::JoinHandle<()>>,
}

impl Load {
    /// Starts `streams` workers, each sending one streaming request after another.
    pub fn start(client: &Client, plan: &Plan, streams: usize) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let completed = Arc::new(AtomicU64::new(0));
        let failed = Arc::new(AtomicU64::new(0));
        let workers = (0..streams)
            .map(|_| {
                let (client, plan) = (client.clone(), plan.clone());
                let (stop, completed, failed) = (stop.clone(), completed.clone(), failed.clone());
                tokio::spawn(async move {
                    while !stop.load(Ordering::Relaxed) {
                        match one_stream(&client, &plan).await {
                            Ok(()) => completed.fetch_add(1, Ordering::Relaxed),
                            Err(error) => {
                                eprintln!("e2e_cluster: a stream failed: {error}");
                                // A failing gateway is not hammered: back off a little.
                                tokio::time::sleep(Duration::from_secs(1)).await;
                                failed.fetch_add(1, Ordering::Relaxed)
                            }
                        };
                    }
                })
            })
            .collect();
        Self {
            stop,
            completed,
            failed,
            workers,
        }
    }

    /// Asks every worker to stop after its current stream and waits for them.
    pub async fn stop(self) -> LoadReport {
        self.stop.store(true, Ordering::Relaxed);
        for worker in self.workers {
            let _ = worker.await;
        }
        LoadReport {
            completed: self.completed.load(Ordering::Relaxed),
            failed: self.failed.load(Ordering::Relaxed),
        }
    }
}

/// One stream, read to its end.
async fn one_stream(client: &Client, plan: &Plan) -> Result<(), String> {
    let request = chat_request(plan).map_err(|e| e.to_string())?;
    let response = client.send(request).await.map_err(|e| e.to_string())?;
    let status = response.status();
    let body = response
        .into_body()
        .collect_bytes()
        .await
        .map_err(|e| e.to_string())?;
    let text = String::from_utf8_lossy(&body);
    if !status.is_success() {
        return Err(format!(
            "{status}: {}",
            text.chars().take(300).collect::<String>()
        ));
    }
    if !text.contains("data: [DONE]") {
        return Err("the stream ended without data: [DONE]".into());
    }
    Ok(())
}

/// `(desired, ready)` replicas from the model's status.
pub async fn replicas(mds: &Api<ModelDeployment>) -> Result<(i32, i32), SuiteError> {
    let md = mds
        .get(MODEL)
        .await
        .map_err(|source| SuiteError::kube(format!("get ModelDeployment {MODEL}"), source))?;
    let status = md.status.unwrap_or_default();
    Ok((status.desired_replicas, status.ready_replicas))
}

/// Waits until the model's `(desired, ready)` satisfies `done`, printing each change.
pub async fn wait_for_replicas(
    client: &Client,
    plan: &Plan,
    what: &str,
    timeout: Duration,
    done: fn(i32, i32) -> bool,
) -> Result<(i32, i32), SuiteError> {
    let mds: Api<ModelDeployment> = Api::namespaced(client.clone(), &plan.model_namespace);
    let seen = Arc::new(std::sync::Mutex::new(None));
    poll_until(what, timeout, Duration::from_secs(3), || {
        let (mds, seen) = (mds.clone(), seen.clone());
        async move {
            let now = replicas(&mds).await?;
            let state = format!("desired {}, ready {}", now.0, now.1);
            let changed = seen.lock().map(|mut s| s.replace(now) != Some(now));
            if changed.unwrap_or(true) {
                eprintln!("e2e_cluster: {MODEL}: {state}");
            }
            Ok(if done(now.0, now.1) {
                Ok(now)
            } else {
                Err(state)
            })
        }
    })
    .await
}
