//! One streamed completion over hyper: send, time the first content chunk and the end,
//! read the token counts from the final `usage` chunk. Failures become an error kind.

use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

use super::stats::Sample;

/// A pooled HTTP/1 client.
pub type HttpClient = Client<HttpConnector, Full<Bytes>>;

/// A client that keeps enough idle connections for the highest concurrency.
pub fn http_client() -> HttpClient {
    let mut connector = HttpConnector::new();
    connector.set_nodelay(true);
    Client::builder(TokioExecutor::new())
        .pool_max_idle_per_host(1024)
        .build(connector)
}

/// What the request asks for.
#[derive(Debug, Clone)]
pub struct RequestShape {
    /// `http://host:port` without a trailing slash.
    pub base_url: String,
    pub model: String,
    pub prompt: String,
    /// Leads every prompt of this run, so no request shares a cached prefix with a request
    /// of an earlier run against the same server (that would measure the prefix cache).
    pub run_tag: String,
    pub max_tokens: u64,
    /// Whole-request limit.
    pub timeout: Duration,
}

impl RequestShape {
    /// The JSON body: a streaming completion that ignores EOS and reports usage.
    pub fn body(&self) -> Bytes {
        let body = serde_json::json!({
            "model": self.model,
            "prompt": self.prompt,
            "max_tokens": self.max_tokens,
            "ignore_eos": true,
            "temperature": 0.0,
            "stream": true,
            "stream_options": {"include_usage": true},
        });
        Bytes::from(body.to_string())
    }
}

/// Sends one request; `Err(kind)` names why it failed (`connect`, `status_503`, `stream`,
/// `timeout`, `empty`).
pub async fn send(
    client: &HttpClient,
    shape: &RequestShape,
    body: Bytes,
) -> Result<Sample, String> {
    // A keep-alive connection the server closed while it sat in the pool fails before any
    // response: one retry on a fresh connection, as HTTP clients do (some servers, llama.cpp's
    // among them, close connections the pool still holds).
    for attempt in 0..2 {
        let start = Instant::now();
        let result =
            tokio::time::timeout(shape.timeout, exchange(client, shape, body.clone(), start));
        match result.await {
            Ok(Err(kind)) if kind == "connect" && attempt == 0 => continue,
            Ok(result) => return result,
            Err(_) => return Err("timeout".into()),
        }
    }
    Err("connect".into())
}

async fn exchange(
    client: &HttpClient,
    shape: &RequestShape,
    body: Bytes,
    start: Instant,
) -> Result<Sample, String> {
    let request = http::Request::post(format!("{}/v1/completions", shape.base_url))
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(Full::new(body))
        .map_err(|_| "request".to_string())?;
    let response = client
        .request(request)
        .await
        .map_err(|_| "connect".to_string())?;
    if response.status() != http::StatusCode::OK {
        return Err(format!("status_{}", response.status().as_u16()));
    }
    let mut body = response.into_body();
    let mut stream = SseScan::default();
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|_| "stream".to_string())?;
        if let Some(data) = frame.data_ref() {
            stream.push(data, start.elapsed().as_secs_f64());
        }
    }
    stream.finish(start.elapsed().as_secs_f64())
}

/// Incremental scan of an SSE body: first content time, content chunks, final usage.
#[derive(Debug, Default)]
pub struct SseScan {
    pending: Vec<u8>,
    first_content_s: Option<f64>,
    content_chunks: u64,
    usage: Option<(u64, u64)>,
    done: bool,
    error: bool,
}

impl SseScan {
    /// Feeds bytes received `t_s` seconds after the send.
    pub fn push(&mut self, bytes: &[u8], t_s: f64) {
        self.pending.extend_from_slice(bytes);
        while let Some(end) = self.pending.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = self.pending.drain(..=end).collect();
            self.line(&line, t_s);
        }
    }

    fn line(&mut self, line: &[u8], t_s: f64) {
        let Some(data) = line.strip_prefix(b"data:") else {
            return;
        };
        let data = data.trim_ascii();
        if data == b"[DONE]" {
            self.done = true;
            return;
        }
        let Ok(chunk) = serde_json::from_slice::<serde_json::Value>(data) else {
            self.error = true;
            return;
        };
        if chunk.get("error").is_some() {
            self.error = true;
        }
        let text = &chunk["choices"][0]["text"];
        let delta = &chunk["choices"][0]["delta"]["content"];
        let has_content = [text, delta]
            .iter()
            .any(|v| v.as_str().is_some_and(|s| !s.is_empty()));
        if has_content {
            self.content_chunks += 1;
            self.first_content_s.get_or_insert(t_s);
        }
        let usage = &chunk["usage"];
        if let (Some(prompt), Some(completion)) = (
            usage["prompt_tokens"].as_u64(),
            usage["completion_tokens"].as_u64(),
        ) {
            self.usage = Some((prompt, completion));
        }
    }

    /// The sample, once the body ended at `end_s`.
    pub fn finish(self, end_s: f64) -> Result<Sample, String> {
        if self.error || !self.done {
            return Err("stream".into());
        }
        let Some(ttft_s) = self.first_content_s else {
            return Err("empty".into());
        };
        let (input_tokens, output_tokens) = self.usage.unwrap_or((0, self.content_chunks));
        Ok(Sample {
            ttft_s,
            e2e_s: end_s,
            output_tokens,
            input_tokens,
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_stream_split_anywhere_gives_the_same_sample() {
        let body = "data: {\"choices\":[{\"text\":\"\"}]}\n\ndata: {\"choices\":[{\"text\":\"a\"}]}\n\ndata: {\"choices\":[{\"text\":\"b\"}]}\n\ndata: {\"choices\":[],\"usage\":{\"prompt_tokens\":7,\"completion_tokens\":2}}\n\ndata: [DONE]\n\n";
        for split in [1, 10, 40, body.len() - 1] {
            let mut scan = SseScan::default();
            scan.push(&body.as_bytes()[..split], 0.1);
            scan.push(&body.as_bytes()[split..], 0.2);
            let sample = scan.finish(0.3).unwrap();
            assert_eq!((sample.input_tokens, sample.output_tokens), (7, 2));
            assert!(sample.ttft_s == 0.1 || sample.ttft_s == 0.2);
            assert_eq!(sample.e2e_s, 0.3);
        }
    }

    #[test]
    fn a_truncated_or_failed_stream_is_a_stream_error() {
        let mut scan = SseScan::default();
        scan.push(b"data: {\"choices\":[{\"text\":\"a\"}]}\n\n", 0.1);
        assert_eq!(scan.finish(0.2), Err("stream".into()));
        let mut scan = SseScan::default();
        scan.push(
            b"data: {\"error\":{\"message\":\"x\"}}\n\ndata: [DONE]\n\n",
            0.1,
        );
        assert_eq!(scan.finish(0.2), Err("stream".into()));
    }

    #[test]
    fn without_usage_the_content_chunks_are_counted() {
        let mut scan = SseScan::default();
        scan.push(b"data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\ndata: {\"choices\":[{\"delta\":{\"content\":\"b\"}}]}\n\ndata: [DONE]\n\n", 0.1);
        assert_eq!(scan.finish(0.5).unwrap().output_tokens, 2);
    }
}
