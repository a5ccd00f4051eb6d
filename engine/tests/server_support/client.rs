//! A small HTTP client for the server tests (hyper, bounded by timeouts).

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Request, Response};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde_json::Value;

/// Longest any single test request may take.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(120);

/// A complete response.
#[derive(Debug, Clone)]
pub struct Reply {
    pub status: u16,
    pub body: String,
}

impl Reply {
    /// The body as JSON (panics with the body if it is not).
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.body))
    }
}

fn client() -> Client<HttpConnector, Full<Bytes>> {
    Client::builder(TokioExecutor::new()).build_http()
}

/// Sends a request and returns the response head with its streaming body.
pub async fn send(
    addr: SocketAddr,
    method: &str,
    path: &str,
    body: Bytes,
    headers: &[(&str, &str)],
) -> Result<Response<Incoming>, String> {
    let mut builder = Request::builder()
        .method(method)
        .uri(format!("http://{addr}{path}"));
    for (k, v) in headers {
        builder = builder.header(*k, *v);
    }
    let request = builder.body(Full::new(body)).map_err(|e| e.to_string())?;
    tokio::time::timeout(REQUEST_TIMEOUT, client().request(request))
        .await
        .map_err(|_| format!("{method} {path} timed out"))?
        .map_err(|e| e.to_string())
}

async fn complete(response: Response<Incoming>) -> Result<Reply, String> {
    let status = response.status().as_u16();
    let body = tokio::time::timeout(REQUEST_TIMEOUT, response.into_body().collect())
        .await
        .map_err(|_| "reading the body timed out".to_string())?
        .map_err(|e| e.to_string())?
        .to_bytes();
    Ok(Reply {
        status,
        body: String::from_utf8_lossy(&body).into_owned(),
    })
}

/// `GET path`.
pub async fn get(addr: SocketAddr, path: &str) -> Result<Reply, String> {
    complete(send(addr, "GET", path, Bytes::new(), &[]).await?).await
}

/// `POST path` with raw bytes.
pub async fn post_raw(
    addr: SocketAddr,
    path: &str,
    body: impl Into<Bytes>,
    headers: &[(&str, &str)],
) -> Reply {
    let response = send(addr, "POST", path, body.into(), headers)
        .await
        .unwrap_or_else(|e| panic!("POST {path}: {e}"));
    complete(response)
        .await
        .unwrap_or_else(|e| panic!("POST {path}: {e}"))
}

/// `POST path` with a JSON body.
pub async fn post_json(addr: SocketAddr, path: &str, body: &Value) -> Reply {
    post_raw(
        addr,
        path,
        body.to_string(),
        &[("content-type", "application/json")],
    )
    .await
}

/// `POST path` for a stream: the status and every `data:` payload (JSON, or the string
/// `[DONE]`), in order.
pub async fn post_stream(addr: SocketAddr, path: &str, body: &Value) -> (u16, Vec<Value>) {
    let reply = post_json(addr, path, body).await;
    if reply.status != 200 {
        return (reply.status, vec![reply.json()]);
    }
    let events = reply
        .body
        .split("\n\n")
        .filter_map(|event| event.strip_prefix("data: "))
        .map(|data| {
            if data == "[DONE]" {
                Value::String(data.into())
            } else {
                serde_json::from_str(data).unwrap_or(Value::Null)
            }
        })
        .collect();
    (reply.status, events)
}

/// Reads the next body frame of a streaming response (bounded).
pub async fn next_frame(body: &mut Incoming) -> Option<Bytes> {
    let frame = tokio::time::timeout(REQUEST_TIMEOUT, body.frame())
        .await
        .ok()??
        .ok()?;
    frame.into_data().ok()
}
