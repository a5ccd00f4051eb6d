//! Batch uploads under the pod's bounds (issue 36 item 2): a real gateway whose body budget
//! is 64 MiB takes 20 concurrent 100 MiB JSONL uploads, each written at ~1 MiB/s. Its RSS
//! (VmRSS sampled, VmHWM at the end) stays under 128 MiB; an upload the gateway cannot take
//! now is answered 503 with `retry-after`; every finished upload reads back byte-exact; and
//! a client killed halfway leaves no file record and nothing in the store.
//!
//! The figures are printed: `cargo test -p tokenscale-e2e --test upload_bounds_e2e --
//! --nocapture`. `TOKENSCALE_UPLOAD_E2E_MIB` sets the file size (default the 100).

mod cli_support;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use cli_support::{Procs, s3_env, scratch_dir, start_gateway_with_env, start_s3};
use tokenscale_e2e::http::{header, read_response_with_head};

const CLIENTS: usize = 20;
/// Bytes a second each client writes.
const RATE: u64 = 1 << 20;
/// Each line is this long, so byte `i` of a client's file is known without holding it.
const LINE: usize = 128;
/// What one write sends.
const WRITE: usize = 64 << 10;
const BOUNDARY: &str = "e2e0upload0boundary";
const BUDGET: u64 = 64 << 20;
const RSS_CAP_KIB: u64 = 128 << 10;

/// Client `client`'s file from `offset` (a multiple of `LINE`), `len` bytes of whole lines.
fn file_bytes(client: usize, offset: u64, len: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(len);
    let mut line = offset / LINE as u64;
    while out.len() < len {
        let head = format!(
            "{{\"custom_id\":\"c{client:02}-{line:09}\",\"method\":\"POST\",\"url\":\"/v1/chat/completions\",\"pad\":\""
        );
        let pad = LINE - head.len() - 3;
        out.extend_from_slice(head.as_bytes());
        out.extend(std::iter::repeat_n(b'x', pad));
        out.extend_from_slice(b"\"}\n");
        line += 1;
    }
    out
}

fn form_head() -> String {
    format!(
        "--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"purpose\"\r\n\r\nbatch\r\n\
         --{BOUNDARY}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"in.jsonl\"\r\n\
         Content-Type: application/octet-stream\r\n\r\n"
    )
}

/// What one upload came to.
#[derive(Debug)]
enum Outcome {
    Uploaded(String),
    Refused { status: u16, retry_after: bool },
    Killed,
}

/// Uploads client `client`'s file of `size` bytes at `RATE`; with `kill_at`, drops the
/// connection after that many file bytes.
fn upload(api: SocketAddr, client: usize, size: u64, kill_at: Option<u64>) -> Outcome {
    let head = form_head();
    let tail = format!("\r\n--{BOUNDARY}--\r\n");
    let length = head.len() as u64 + size + tail.len() as u64;
    let mut stream = TcpStream::connect(api).expect("connects");
    let request = format!(
        "POST /v1/files HTTP/1.1\r\nHost: {api}\r\nConnection: close\r\n\
         Content-Type: multipart/form-data; boundary={BOUNDARY}\r\nContent-Length: {length}\r\n\
         Expect: 100-continue\r\n\r\n"
    );
    stream.write_all(request.as_bytes()).expect("headers");
    // The gateway answers at once when it cannot take the upload; else `100 Continue`.
    let mut first = [0u8; 25];
    stream
        .read_exact(&mut first[..12])
        .expect("an answer to the headers");
    if !first.starts_with(b"HTTP/1.1 100") {
        let mut rest = Vec::new();
        let _ = stream.read_to_end(&mut rest);
        let text = String::from_utf8_lossy(&[&first[..12], &rest[..]].concat()).into_owned();
        let status = text[9..12].parse().unwrap_or(0);
        let retry_after = text.to_ascii_lowercase().contains("\r\nretry-after:");
        return Outcome::Refused {
            status,
            retry_after,
        };
    }
    let mut seen = Vec::new();
    while !seen.ends_with(b"\r\n\r\n") {
        let mut byte = [0u8];
        stream.read_exact(&mut byte).expect("the 100's end");
        seen.push(byte[0]);
    }
    stream.write_all(head.as_bytes()).expect("form head");
    let start = Instant::now();
    let mut sent = 0u64;
    while sent < size {
        if kill_at.is_some_and(|at| sent >= at) {
            drop(stream);
            return Outcome::Killed;
        }
        let len = WRITE.min((size - sent) as usize);
        if stream.write_all(&file_bytes(client, sent, len)).is_err() {
            break;
        }
        sent += len as u64;
        let due = start + Duration::from_secs_f64(sent as f64 / RATE as f64);
        std::thread::sleep(due.saturating_duration_since(Instant::now()));
    }
    let _ = stream.write_all(tail.as_bytes());
    // An upload cut mid-body may find the connection reset before its answer is read.
    let Ok((status, head, body)) = read_response_with_head(&mut stream) else {
        return Outcome::Refused {
            status: 0,
            retry_after: false,
        };
    };
    if status != 200 {
        let retry_after = header(&head, "retry-after").is_some();
        eprintln!("upload {client}: {status} {body}");
        return Outcome::Refused {
            status,
            retry_after,
        };
    }
    let value: serde_json::Value = serde_json::from_str(&body).expect("a file object");
    assert_eq!(value["bytes"], size, "{body}");
    Outcome::Uploaded(value["id"].as_str().expect("an id").to_string())
}

/// Reads `id`'s content back and compares it with client `client`'s file as it streams.
fn read_back(api: SocketAddr, id: &str, client: usize, size: u64) -> bool {
    let mut stream = TcpStream::connect(api).expect("connects");
    let request =
        format!("GET /v1/files/{id}/content HTTP/1.1\r\nHost: {api}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).expect("request");
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n\r\n") {
        let mut byte = [0u8];
        stream.read_exact(&mut byte).expect("the head");
        head.push(byte[0]);
    }
    assert!(
        head.starts_with(b"HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&head)
    );
    let mut offset = 0u64;
    let mut buf = vec![0u8; WRITE];
    loop {
        let want = WRITE.min((size - offset) as usize);
        if want == 0 {
            break;
        }
        if stream.read_exact(&mut buf[..want]).is_err() {
            return false;
        }
        if buf[..want] != file_bytes(client, offset, want)[..] {
            return false;
        }
        offset += want as u64;
    }
    // Nothing after the file.
    stream.read(&mut buf[..1]).is_ok_and(|n| n == 0)
}

/// `VmRSS` or `VmHWM` of `pid`, in KiB.
fn memory_kib(pid: u32, field: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with(field))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

fn stored_files(dir: &std::path::Path) -> Vec<String> {
    let mut names = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(folder) = stack.pop() {
        for entry in std::fs::read_dir(&folder).into_iter().flatten().flatten() {
            if entry.path().is_dir() {
                stack.push(entry.path());
            } else {
                names.push(entry.file_name().to_string_lossy().into_owned());
            }
        }
    }
    names.sort();
    names
}

/// Starts a gateway whose batch store is `dir/batch`, with `bounds` and `batch` settings
/// added and `env` in its environment; its address and pid.
fn gateway(
    procs: &mut Procs,
    dir: &std::path::Path,
    bounds: &str,
    batch: &str,
    env: &[(&str, String)],
) -> (SocketAddr, u32) {
    let config = format!(
        "models:\n  - name: m\n    upstreams: [\"http://127.0.0.1:9\"]\n\
         tenants:\n  - name: open\n    models: [\"*\"]\n\
         anonymous: open\n\
         max_body_bytes: 1048576\n\
         bounds: {{{bounds}}}\n\
         batch: {{dir: {:?}, {batch}}}\n",
        dir.join("batch").display().to_string(),
    );
    let api = start_gateway_with_env(procs, dir, &config, "warn", &[], env);
    (api, procs.0.last().expect("the gateway").id())
}

/// The ids of the files `GET /v1/files` lists, sorted.
fn listed_files(api: SocketAddr) -> Vec<String> {
    let (status, list) = cli_support::get(api, "/v1/files?limit=100").expect("list");
    assert_eq!(status, 200, "{list}");
    let listed: serde_json::Value = serde_json::from_str(&list).expect("json");
    let mut ids: Vec<String> = listed["data"]
        .as_array()
        .expect("data")
        .iter()
        .map(|f| f["id"].as_str().unwrap_or_default().to_string())
        .collect();
    ids.sort();
    ids
}

#[test]
fn concurrent_slow_uploads_stay_within_the_body_budget() {
    if !cfg!(target_os = "linux") {
        println!("NOT RUN: the gateway's RSS is read from /proc");
        return;
    }
    let mib: u64 = std::env::var("TOKENSCALE_UPLOAD_E2E_MIB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100);
    let size = (mib << 20) / LINE as u64 * LINE as u64;
    let dir = scratch_dir("upload-bounds");
    let batch_dir = dir.path().join("batch");
    let mut procs = Procs(Vec::new());
    let bounds = format!("max_buffered_body_bytes: {BUDGET}");
    let batch = format!("max_file_bytes: {}", size.max(200 << 20));
    let (api, pid) = gateway(&mut procs, dir.path(), &bounds, &batch, &[]);
    let idle_kib = memory_kib(pid, "VmRSS:").unwrap_or(0);

    let done = Arc::new(AtomicBool::new(false));
    let peak_rss = Arc::new(AtomicU64::new(0));
    let sampler = {
        let (done, peak) = (done.clone(), peak_rss.clone());
        std::thread::spawn(move || {
            while !done.load(Ordering::Relaxed) {
                if let Some(rss) = memory_kib(pid, "VmRSS:") {
                    peak.fetch_max(rss, Ordering::Relaxed);
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        })
    };
    let started = Instant::now();
    let clients: Vec<_> = (0..=CLIENTS)
        .map(|client| {
            // The extra client is killed halfway.
            let kill_at = (client == CLIENTS).then_some(size / 2);
            std::thread::spawn(move || (client, upload(api, client, size, kill_at)))
        })
        .collect();
    let outcomes: Vec<(usize, Outcome)> = clients
        .into_iter()
        .map(|c| c.join().expect("a client thread"))
        .collect();
    let upload_s = started.elapsed().as_secs_f64();
    let during_kib = peak_rss.load(Ordering::Relaxed);

    let mut uploaded = Vec::new();
    let mut refused = 0;
    for (client, outcome) in &outcomes {
        match outcome {
            Outcome::Uploaded(id) => {
                assert!(
                    read_back(api, id, *client, size),
                    "file {id} came back different"
                );
                uploaded.push(id.clone());
            }
            Outcome::Refused {
                status,
                retry_after,
            } => {
                assert_eq!((*status, *retry_after), (503, true), "client {client}");
                refused += 1;
            }
            Outcome::Killed => {}
        }
    }
    done.store(true, Ordering::Relaxed);
    sampler.join().expect("the sampler");
    let hwm_kib = memory_kib(pid, "VmHWM:").expect("VmHWM");
    println!(
        "uploads: {CLIENTS} x {mib} MiB at {} MiB/s, body budget {} MiB: {} finished byte-exact, \
         {refused} refused (503, retry-after), 1 killed halfway; uploads took {upload_s:.1} s; \
         gateway VmRSS idle {:.1} MiB, peak while uploading {:.1} MiB, VmHWM at the end {:.1} MiB",
        RATE >> 20,
        BUDGET >> 20,
        uploaded.len(),
        idle_kib as f64 / 1024.0,
        during_kib as f64 / 1024.0,
        hwm_kib as f64 / 1024.0
    );

    // The killed upload left no record and no object, staged or whole.
    uploaded.sort();
    assert_eq!(
        listed_files(api),
        uploaded,
        "the listed files are the finished ones"
    );
    assert_eq!(
        stored_files(&batch_dir.join("objects")),
        uploaded,
        "the store holds the finished files and nothing else"
    );
    assert!(!uploaded.is_empty(), "no upload finished");
    assert!(
        hwm_kib < RSS_CAP_KIB,
        "the gateway's RSS peaked at {hwm_kib} KiB"
    );
}

/// A budget with room for two uploads: a third waits 2 s and gets 503 with `retry-after`;
/// an upload under `upload_min_bytes_per_s` is cut at the end of its first 10 s; neither
/// leaves a file.
#[test]
fn a_spent_budget_refuses_and_a_slow_upload_is_cut() {
    let dir = scratch_dir("upload-refusals");
    let mut procs = Procs(Vec::new());
    // One local upload holds a 256 KiB part and 1 MiB of slack: two fit in 3 MiB.
    let bounds = "max_buffered_body_bytes: 3145728";
    let (api, _) = gateway(
        &mut procs,
        dir.path(),
        bounds,
        "upload_min_bytes_per_s: 2000000",
        &[],
    );
    let size = 4u64 << 20;
    let holders: Vec<_> = (0..2)
        .map(|client| std::thread::spawn(move || upload(api, client, size, None)))
        .collect();
    std::thread::sleep(Duration::from_millis(500));
    let asked = Instant::now();
    let third = upload(api, 2, size, None);
    let waited = asked.elapsed();
    let mut uploaded: Vec<String> = holders
        .into_iter()
        .map(|h| match h.join().expect("a client") {
            Outcome::Uploaded(id) => id,
            other => panic!("an upload within the budget: {other:?}"),
        })
        .collect();
    println!(
        "third upload: {third:?} after {:.1} s",
        waited.as_secs_f64()
    );
    assert!(
        matches!(
            third,
            Outcome::Refused {
                status: 503,
                retry_after: true
            }
        ),
        "{third:?}"
    );
    // 1 MiB/s against a floor of 2 MB/s: cut when its first window closes.
    let started = Instant::now();
    let slow = upload(api, 3, 30 << 20, None);
    let cut_after = started.elapsed();
    println!(
        "slow upload: {slow:?} after {:.1} s",
        cut_after.as_secs_f64()
    );
    assert!(
        matches!(
            slow,
            Outcome::Refused {
                status: 408 | 0,
                ..
            }
        ),
        "{slow:?}"
    );
    assert!(
        cut_after < Duration::from_secs(20),
        "cut after {cut_after:?}"
    );
    uploaded.sort();
    assert_eq!(listed_files(api), uploaded);
    let stored = stored_files(&dir.path().join("batch/objects"));
    assert_eq!(
        stored, uploaded,
        "the store holds the finished files and nothing else"
    );
}

/// On S3 (moto's server): a file of two parts (5 MiB, then the rest) reads back byte-exact,
/// and an upload cut after its first part leaves no object and no multipart upload.
#[test]
fn on_s3_a_cut_upload_leaves_no_object_and_no_parts() {
    if tokenscale_e2e::tools::python_with("moto.server").is_err() {
        println!("NOT RUN: moto is not installed (scripts/setup installs it)");
        return;
    }
    let dir = scratch_dir("upload-s3");
    let mut procs = Procs(Vec::new());
    let s3 = start_s3(&mut procs, dir.path(), "uploads");
    let bounds = format!("max_buffered_body_bytes: {BUDGET}");
    let objects = "objects: \"s3://uploads/up\"";
    let (api, _) = gateway(&mut procs, dir.path(), &bounds, objects, &s3_env(s3));
    let size = 7u64 << 20;
    let whole = std::thread::spawn(move || upload(api, 0, size, None));
    let cut = upload(api, 1, size, Some(6 << 20));
    assert!(matches!(cut, Outcome::Killed), "{cut:?}");
    let Outcome::Uploaded(id) = whole.join().expect("a client") else {
        panic!("the whole upload did not finish");
    };
    assert!(
        read_back(api, &id, 0, size),
        "file {id} came back different"
    );
    assert_eq!(listed_files(api), std::slice::from_ref(&id));
    let bucket = |query: &str| {
        let (status, body) = cli_support::exchange(
            s3,
            "GET",
            &format!("/uploads?{query}"),
            None,
            "",
            Duration::from_secs(10),
        )
        .expect("moto answers");
        assert_eq!(status, 200, "{body}");
        body
    };
    // The abort follows the cut at once; a moment for the gateway to see the reset.
    cli_support::wait_for("the cut upload aborted", Duration::from_secs(10), || {
        !bucket("uploads").contains("<UploadId>")
    });
    let keys = bucket("list-type=2");
    println!("bucket after the uploads: {keys}");
    assert_eq!(keys.matches("<Key>").count(), 1, "{keys}");
    assert!(
        keys.contains(&format!("<Key>up/files/{id}</Key>")),
        "{keys}"
    );
}
