//! Loading figures of `tokenscale-engine serve`, for any models (a warm cache: local files or
//! checkpoint directories): the time from starting the process to the first generated token
//! (load, then one one-token completion), and the peak resident memory until then (the
//! kernel's high-water mark, `VmHWM`), against the bytes of the model's weights files. Models
//! are measured in turn, round after round, so a machine's drift hits them alike.
//!
//!     cargo build --release -p tokenscale-engine --bin tokenscale-engine --example load_bench
//!     target/release/examples/load_bench [--rounds 3] MODEL...
//!
//! A benchmark: it measures and prints, it asserts nothing.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn main() {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let mut rounds = 3;
    if let Some(i) = args.iter().position(|a| a == "--rounds") {
        rounds = args.get(i + 1).and_then(|r| r.parse().ok()).unwrap_or(3);
        args.drain(i..(i + 2).min(args.len()));
    }
    if args.is_empty() {
        eprintln!("usage: load_bench [--rounds N] MODEL...");
        std::process::exit(2);
    }
    let engine = std::env::current_exe()
        .ok()
        .and_then(|p| p.parent()?.parent().map(|d| d.join("tokenscale-engine")))
        .filter(|p| p.is_file())
        .unwrap_or_else(|| PathBuf::from("target/release/tokenscale-engine"));
    println!(
        "{:<48} {:>5} {:>10} {:>12} {:>12} {:>8}",
        "model", "round", "first_s", "peak_rss_MiB", "weights_MiB", "rss/w"
    );
    for round in 1..=rounds {
        for model in &args {
            match measure(&engine, model) {
                Ok((first_s, peak)) => {
                    let weights = weight_bytes(Path::new(model));
                    let mib = |b: u64| b as f64 / (1 << 20) as f64;
                    println!(
                        "{:<48} {round:>5} {first_s:>10.2} {:>12.1} {:>12.1} {:>8.2}",
                        short(model),
                        mib(peak),
                        mib(weights),
                        peak as f64 / weights.max(1) as f64
                    );
                }
                Err(e) => println!("{:<48} {round:>5} failed: {e}", short(model)),
            }
        }
    }
}

fn short(model: &str) -> String {
    let p = Path::new(model);
    p.file_name()
        .map_or_else(|| model.to_string(), |n| n.to_string_lossy().into_owned())
}

/// Bytes of the weights: the `.gguf` file, or the `.safetensors` files of a directory.
fn weight_bytes(path: &Path) -> u64 {
    if path.is_file() {
        return path.metadata().map_or(0, |m| m.len());
    }
    std::fs::read_dir(path)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.path().extension().is_some_and(|x| x == "safetensors"))
        .filter_map(|e| std::fs::metadata(e.path()).ok())
        .map(|m| m.len())
        .sum()
}

/// `(seconds from spawn to the first token, peak RSS bytes)` of one serve.
fn measure(engine: &Path, model: &str) -> Result<(f64, u64), String> {
    let start = Instant::now();
    let mut child = Command::new(engine)
        .args([
            "serve",
            "--backend",
            "cpu",
            "--port",
            "0",
            "--kv-cache-tokens",
            "2048",
            "--model",
            model,
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("starting {}: {e}", engine.display()))?;
    let pid = child.id();
    let stderr = child.stderr.take().ok_or("no stderr")?;
    let mut lines = BufReader::new(stderr).lines();
    let addr = lines
        .by_ref()
        .map_while(Result::ok)
        .find_map(|l| l.strip_prefix("listening on http://").map(str::to_string))
        .ok_or("the engine never listened")?;
    std::thread::spawn(move || lines.for_each(drop));
    let result = (|| {
        let deadline = Instant::now() + Duration::from_secs(300);
        while !request(&addr, "GET", "/health", "").is_ok_and(|r| r.starts_with("HTTP/1.1 200")) {
            if Instant::now() > deadline {
                return Err("not ready within 300 s".to_string());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let body = r#"{"prompt": "Hello", "max_tokens": 1, "temperature": 0}"#;
        let reply = request(&addr, "POST", "/v1/completions", body)?;
        if !reply.starts_with("HTTP/1.1 200") {
            return Err(format!(
                "completion failed: {}",
                reply.lines().next().unwrap_or("")
            ));
        }
        let first_s = start.elapsed().as_secs_f64();
        Ok((first_s, peak_rss(pid)?))
    })();
    let _ = child.kill();
    let _ = child.wait();
    result
}

/// One HTTP/1.1 exchange (the whole response as text).
fn request(addr: &str, method: &str, path: &str, body: &str) -> Result<String, String> {
    let mut s = TcpStream::connect(addr).map_err(|e| e.to_string())?;
    let text = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    s.write_all(text.as_bytes()).map_err(|e| e.to_string())?;
    let mut out = String::new();
    s.read_to_string(&mut out).map_err(|e| e.to_string())?;
    Ok(out)
}

/// The process's peak resident set (`VmHWM`), bytes.
fn peak_rss(pid: u32) -> Result<u64, String> {
    let status =
        std::fs::read_to_string(format!("/proc/{pid}/status")).map_err(|e| e.to_string())?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map(|kb| kb * 1024)
        .ok_or_else(|| "no VmHWM".to_string())
}
