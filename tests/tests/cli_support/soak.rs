//! Streams read off the wire with nothing but std, an open-loop load of them, and replicas
//! killed under it: the failover suites' harness. Each stream's outcome is what a client
//! would judge: its status, its text, its usage, whether it ended with `[DONE]`, and any
//! error event in it.

use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

/// A request shape: completion or chat, its prompt and its length.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shape {
    pub chat: bool,
    pub prompt: String,
    pub max_tokens: u64,
}

impl Shape {
    /// `count` shapes from a seed: prompts of 4 to 60 words, 20 to 80 tokens, every third a chat.
    pub fn many(count: usize, seed: u64) -> Vec<Shape> {
        let mut x = seed | 1;
        let mut next = move |n: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % n
        };
        let words = [
            "river", "stone", "light", "quiet", "engine", "paper", "north", "garden",
        ];
        (0..count)
            .map(|i| {
                let len = 4 + next(57) as usize;
                let prompt: Vec<&str> = (0..len).map(|_| words[next(8) as usize]).collect();
                Shape {
                    chat: i % 3 == 2,
                    prompt: format!("{i}: {}", prompt.join(" ")),
                    max_tokens: 20 + next(61),
                }
            })
            .collect()
    }

    pub fn path(&self) -> &'static str {
        if self.chat {
            "/v1/chat/completions"
        } else {
            "/v1/completions"
        }
    }

    /// A streaming request asking for usage; `greedy` for a real model.
    pub fn body(&self, model: &str) -> String {
        let mut body = serde_json::json!({
            "model": model, "max_tokens": self.max_tokens, "temperature": 0,
            "stream": true, "stream_options": {"include_usage": true},
        });
        if self.chat {
            body["messages"] = serde_json::json!([{"role": "user", "content": self.prompt}]);
        } else {
            body["prompt"] = serde_json::json!(self.prompt);
        }
        body.to_string()
    }
}

/// One stream as its client got it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Outcome {
    pub status: u16,
    pub text: String,
    /// `(prompt_tokens, completion_tokens)` of the usage chunk.
    pub usage: Option<(u64, u64)>,
    pub done: bool,
    /// Error events, and anything that was not JSON.
    pub errors: Vec<String>,
    /// The `id`s the chunks carried (one, when the stream reads as one answer).
    pub ids: BTreeSet<String>,
    /// Which replica the response came from first.
    pub upstream: String,
}

impl Outcome {
    /// A complete, error-free answer.
    pub fn ok(&self) -> bool {
        self.status == 200 && self.done && self.errors.is_empty() && self.usage.is_some()
    }
}

/// Opens a stream: the request is sent and the connection returned for reading.
pub fn open(addr: SocketAddr, shape: &Shape, model: &str) -> std::io::Result<TcpStream> {
    let body = shape.body(model);
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(5))?;
    stream.set_read_timeout(Some(Duration::from_secs(120)))?;
    let request = format!(
        "POST {} HTTP/1.1\r\nhost: {addr}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        shape.path(),
        body.len()
    );
    stream.write_all(request.as_bytes())?;
    Ok(stream)
}

/// Reads from `stream` into `raw` until `enough(raw)` or the end.
pub fn read_until(stream: &mut TcpStream, raw: &mut Vec<u8>, enough: impl Fn(&[u8]) -> bool) {
    let mut buf = [0u8; 4096];
    while !enough(raw) {
        match stream.read(&mut buf) {
            Ok(0) | Err(_) => return,
            Ok(n) => raw.extend_from_slice(&buf[..n]),
        }
    }
}

/// Sends `shape` and reads its whole stream.
pub fn run_one(addr: SocketAddr, shape: &Shape, model: &str) -> Outcome {
    let mut raw = Vec::new();
    match open(addr, shape, model) {
        Ok(mut stream) => read_until(&mut stream, &mut raw, |_| false),
        Err(error) => {
            return Outcome {
                errors: vec![format!("connect: {error}")],
                ..Outcome::default()
            };
        }
    }
    parse(&raw)
}

/// The outcome of a whole raw HTTP/1.1 response carrying an SSE stream.
pub fn parse(raw: &[u8]) -> Outcome {
    let text = String::from_utf8_lossy(raw);
    let Some((head, rest)) = text.split_once("\r\n\r\n") else {
        return Outcome {
            errors: vec![format!("no response head: {text:?}")],
            ..Outcome::default()
        };
    };
    let mut outcome = Outcome {
        status: head
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or(0),
        ..Outcome::default()
    };
    for line in head.lines() {
        if let Some((name, value)) = line.split_once(':')
            && name.eq_ignore_ascii_case("x-tokenscale-upstream")
        {
            outcome.upstream = value.trim().to_string();
        }
    }
    let body = if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        tokenscale_e2e::http::dechunk(rest)
    } else {
        rest.to_string()
    };
    for event in body.split("\n\n").map(str::trim).filter(|e| !e.is_empty()) {
        let Some(data) = event.strip_prefix("data: ") else {
            outcome.errors.push(format!("not a data event: {event:?}"));
            continue;
        };
        if data == "[DONE]" {
            outcome.done = true;
            continue;
        }
        let Ok(chunk) = serde_json::from_str::<serde_json::Value>(data) else {
            outcome.errors.push(format!("not JSON: {data:?}"));
            continue;
        };
        if chunk.get("error").is_some() {
            outcome.errors.push(chunk["error"].to_string());
            continue;
        }
        if let Some(id) = chunk["id"].as_str() {
            outcome.ids.insert(format!("{id} {}", chunk["created"]));
        }
        for choice in chunk["choices"].as_array().into_iter().flatten() {
            let piece = choice["text"]
                .as_str()
                .or(choice["delta"]["content"].as_str())
                .unwrap_or("");
            outcome.text.push_str(piece);
        }
        let usage = &chunk["usage"];
        if let (Some(p), Some(c)) = (
            usage["prompt_tokens"].as_u64(),
            usage["completion_tokens"].as_u64(),
        ) {
            outcome.usage = Some((p, c));
        }
    }
    if outcome.status != 200 && outcome.errors.is_empty() {
        outcome.errors.push(body.chars().take(300).collect());
    }
    outcome
}

/// Sends `shapes` in turn, `rate` per second at even spacing (open loop: each on its own
/// thread, whatever the earlier ones do) for `duration`; returns `(shape index, outcome)`
/// for each, in sending order.
pub fn open_loop(
    addr: SocketAddr,
    model: &str,
    shapes: &[Shape],
    rate: f64,
    duration: Duration,
) -> Vec<(usize, Outcome)> {
    let start = Instant::now();
    let count = (duration.as_secs_f64() * rate) as usize;
    let mut threads = Vec::with_capacity(count);
    for i in 0..count {
        let at = start + Duration::from_secs_f64(i as f64 / rate);
        if let Some(wait) = at.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
        let index = i % shapes.len();
        let (shape, model) = (shapes[index].clone(), model.to_string());
        threads.push((
            index,
            std::thread::spawn(move || run_one(addr, &shape, &model)),
        ));
    }
    threads
        .into_iter()
        .map(|(index, thread)| {
            let outcome = thread.join().unwrap_or_else(|_| Outcome {
                errors: vec!["client thread panicked".into()],
                ..Outcome::default()
            });
            (index, outcome)
        })
        .collect()
}

/// A replica killed under load, and the tokens it had generated just before.
#[derive(Debug, Clone)]
pub struct Kill {
    pub pid: u32,
    pub at_s: f64,
    pub generated_before: f64,
}

/// The port an engine process was started on (`--port N` in its command line).
pub fn engine_port(pid: u32) -> Option<u16> {
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    let args: Vec<String> = cmdline
        .split(|&b| b == 0)
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect();
    let at = args.iter().position(|a| a == "--port")?;
    args.get(at + 1)?.parse().ok()
}

/// An engine's `vllm:generation_tokens_total` (0 when it does not answer).
pub fn generated(port: u16) -> f64 {
    let addr: SocketAddr = ([127, 0, 0, 1], port).into();
    super::get(addr, "/metrics")
        .ok()
        .and_then(|(_, text)| super::metric_sum(&text, "vllm:generation_tokens_total"))
        .unwrap_or(0.0)
}

/// Every `period` until `until` (the load's sending window: a kill after it would only hit
/// the last streams, and a stream hit twice outruns a one-continuation budget), SIGKILLs one
/// engine child of `parent`, chosen by `seed`; returns the kills.
pub fn killer(
    parent: u32,
    period: Duration,
    until: Duration,
    seed: u64,
) -> std::thread::JoinHandle<Vec<Kill>> {
    std::thread::spawn(move || {
        let start = Instant::now();
        let mut kills = Vec::new();
        let mut x = seed | 1;
        let mut next = start + period;
        while next < start + until {
            if let Some(wait) = next.checked_duration_since(Instant::now()) {
                std::thread::sleep(wait);
            }
            next += period;
            let engines: Vec<u32> = super::children_of(parent)
                .into_iter()
                .filter(|&pid| super::engine_alive(pid))
                .collect();
            if engines.is_empty() {
                continue;
            }
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let pid = engines[(x >> 33) as usize % engines.len()];
            let generated_before = engine_port(pid).map_or(0.0, generated);
            super::signal(pid, "-KILL");
            eprintln!(
                "soak: killed engine {pid} at {:.1}s (it had generated {generated_before} tokens)",
                start.elapsed().as_secs_f64()
            );
            kills.push(Kill {
                pid,
                at_s: start.elapsed().as_secs_f64(),
                generated_before,
            });
        }
        kills
    })
}
