//! Open-loop load at a fixed rate with as little CPU of its own as possible (wrk2's method).
//!
//! The machine is small and shared: the load generator, the upstream and the proxy under test
//! run on the same two cores, so every microsecond the generator spends per request is taken
//! from the proxy and shows up as its tail latency. The first version (hyper client tasks
//! taking send times from a shared channel) cost ~65 µs of CPU per request: at half the
//! gateway's saturation the machine was 91% busy and the proxies were preempted thousands of
//! times a second. Here one thread sleeps until each send time and writes the request's
//! ready-made bytes to an idle connection (one syscall, nobody woken), and one thread reads
//! every response on a single-threaded runtime, parsing just its framing.
//!
//! Each request counts from its scheduled time, so a request that waits for a free
//! connection (the server is behind) is charged that wait: no coordinated omission.

use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio::io::AsyncReadExt;

use crate::load::BODY;

/// One connection's state, shared by the pacer (writes) and its reader task.
struct Slot {
    /// A request was sent and its response is not yet complete.
    busy: AtomicBool,
    /// The connection failed; the pacer no longer uses it.
    dead: AtomicBool,
    /// When the request in flight was scheduled, in ns after the run's start.
    scheduled_ns: AtomicU64,
}

/// One answered request: when it was scheduled (after the run's start) and its latency.
#[derive(Debug, Clone, Copy)]
pub struct Sample {
    pub scheduled: Duration,
    pub latency: Duration,
}

/// Sends `rate_per_s` requests a second for `duration` over up to `connections` keep-alive
/// connections; returns the 200 responses in the order they were scheduled.
pub fn run(
    target: SocketAddr,
    connections: usize,
    rate_per_s: f64,
    duration: Duration,
) -> std::io::Result<Vec<Sample>> {
    let request = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nhost: {target}\r\ncontent-type: application/json\r\n\
         authorization: Bearer bench-key\r\ncontent-length: {}\r\n\r\n{BODY}",
        BODY.len()
    )
    .into_bytes();
    let mut writers = Vec::with_capacity(connections);
    let mut readers = Vec::with_capacity(connections);
    for _ in 0..connections {
        let mut stream = TcpStream::connect(target)?;
        stream.set_nodelay(true)?;
        warm_up(&mut stream, &request)?;
        writers.push(stream.try_clone()?);
        readers.push(stream);
    }
    let slots: Arc<[Slot]> = (0..connections)
        .map(|_| Slot {
            busy: AtomicBool::new(false),
            dead: AtomicBool::new(false),
            scheduled_ns: AtomicU64::new(0),
        })
        .collect();
    let start = Instant::now();
    let stop = Arc::new(AtomicBool::new(false));
    let reading = {
        let (slots, stop) = (slots.clone(), stop.clone());
        std::thread::spawn(move || read_all(readers, slots, start, stop))
    };
    let paced = pace(&mut writers, &slots, &request, start, rate_per_s, duration);
    // Let the last responses arrive (bounded: a server that stopped answering ends the run).
    let drain_until = Instant::now() + Duration::from_secs(10);
    while slots
        .iter()
        .any(|s| s.busy.load(Ordering::Acquire) && !s.dead.load(Ordering::Acquire))
        && Instant::now() < drain_until
    {
        std::thread::sleep(Duration::from_millis(1));
    }
    stop.store(true, Ordering::Release);
    for writer in &writers {
        let _ = writer.shutdown(std::net::Shutdown::Both);
    }
    let mut samples = reading
        .join()
        .map_err(|_| std::io::Error::other("reader thread panicked"))??;
    let sent = paced?;
    if samples.len() < sent {
        eprintln!(
            "{target}: {} of {sent} requests got no 200 response; their latencies are left out",
            sent - samples.len()
        );
    }
    samples.sort_by_key(|s| s.scheduled);
    Ok(samples)
}

/// One untimed exchange on a new connection, so that the clock starts with every connection
/// accepted and set up on both sides of the proxy: a burst of 64 connection setups is not the
/// steady state being measured (it cost the first 10 ms of each run up to 10 ms of latency).
fn warm_up(stream: &mut TcpStream, request: &[u8]) -> std::io::Result<()> {
    use std::io::Read;
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    stream.write_all(request)?;
    let mut buf = Vec::with_capacity(8192);
    let mut chunk = [0u8; 8192];
    loop {
        match response_len(&buf) {
            Framing::Complete { len, .. } if len == buf.len() => break,
            Framing::Partial => {}
            _ => return Err(std::io::Error::other("warm-up: unexpected response")),
        }
        match stream.read(&mut chunk)? {
            0 => return Err(std::io::ErrorKind::UnexpectedEof.into()),
            n => buf.extend_from_slice(&chunk[..n]),
        }
    }
    stream.set_read_timeout(None)
}

/// The pacer: at each send time, the request goes out on the next idle connection. Returns
/// how many were sent.
fn pace(
    writers: &mut [TcpStream],
    slots: &[Slot],
    request: &[u8],
    start: Instant,
    rate_per_s: f64,
    duration: Duration,
) -> std::io::Result<usize> {
    let interval = Duration::from_secs_f64(1.0 / rate_per_s);
    let mut next_conn = 0;
    let mut sent = 0;
    for k in 0u32.. {
        let offset = interval * k;
        if offset >= duration {
            break;
        }
        if let Some(wait) = (start + offset).checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
        // Round robin over idle connections; when all are busy, wait for one (the request's
        // clock is already running).
        let conn = loop {
            if let Some(free) = (0..slots.len())
                .map(|i| (next_conn + i) % slots.len())
                .find(|&i| {
                    !slots[i].busy.load(Ordering::Acquire) && !slots[i].dead.load(Ordering::Acquire)
                })
            {
                break free;
            }
            if slots.iter().all(|s| s.dead.load(Ordering::Acquire)) {
                return Err(std::io::Error::other("every connection failed"));
            }
            std::thread::sleep(Duration::from_micros(20));
        };
        next_conn = conn + 1;
        let slot = &slots[conn];
        slot.scheduled_ns
            .store(offset.as_nanos() as u64, Ordering::Relaxed);
        slot.busy.store(true, Ordering::Release);
        if write_all(&mut writers[conn], request).is_err() {
            slot.dead.store(true, Ordering::Release);
        }
        sent += 1;
    }
    Ok(sent)
}

/// `write_all` on a socket the reader side made non-blocking (the flag is shared by both
/// descriptors); a request is a few hundred bytes, so a full send buffer means a stuck peer.
fn write_all(stream: &mut TcpStream, mut bytes: &[u8]) -> std::io::Result<()> {
    let give_up = Instant::now() + Duration::from_secs(5);
    while !bytes.is_empty() {
        match stream.write(bytes) {
            Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
            Ok(n) => bytes = &bytes[n..],
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock && Instant::now() < give_up => {
                std::thread::sleep(Duration::from_micros(50));
            }
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Reads every connection's responses on one single-threaded runtime until `stop`.
fn read_all(
    streams: Vec<TcpStream>,
    slots: Arc<[Slot]>,
    start: Instant,
    stop: Arc<AtomicBool>,
) -> std::io::Result<Vec<Sample>> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()?;
    runtime.block_on(async move {
        let mut tasks = Vec::with_capacity(streams.len());
        for (index, stream) in streams.into_iter().enumerate() {
            stream.set_nonblocking(true)?;
            let stream = tokio::net::TcpStream::from_std(stream)?;
            let (slots, stop) = (slots.clone(), stop.clone());
            tasks.push(tokio::spawn(read_one(stream, index, slots, start, stop)));
        }
        let mut samples = Vec::new();
        for task in tasks {
            samples.extend(task.await.map_err(std::io::Error::other)?);
        }
        Ok(samples)
    })
}

/// One connection's responses: each complete one records its latency and frees the slot.
async fn read_one(
    mut stream: tokio::net::TcpStream,
    index: usize,
    slots: Arc<[Slot]>,
    start: Instant,
    stop: Arc<AtomicBool>,
) -> Vec<Sample> {
    let slot = &slots[index];
    let mut samples = Vec::new();
    let mut buf = Vec::with_capacity(8192);
    loop {
        match response_len(&buf) {
            Framing::Complete { len, ok } => {
                let scheduled = Duration::from_nanos(slot.scheduled_ns.load(Ordering::Relaxed));
                if ok {
                    let latency = start.elapsed().saturating_sub(scheduled);
                    samples.push(Sample { scheduled, latency });
                }
                buf.drain(..len);
                slot.busy.store(false, Ordering::Release);
                continue;
            }
            Framing::Invalid => break,
            Framing::Partial => {}
        }
        match stream.read_buf(&mut buf).await {
            Ok(n) if n > 0 => {}
            _ => break,
        }
    }
    if !stop.load(Ordering::Acquire) {
        slot.dead.store(true, Ordering::Release);
    }
    samples
}

enum Framing {
    /// A whole response of `len` bytes; `ok` when its status was 200.
    Complete {
        len: usize,
        ok: bool,
    },
    Partial,
    Invalid,
}

/// The framing of the HTTP/1.1 response at the start of `buf` (content-length or chunked).
fn response_len(buf: &[u8]) -> Framing {
    let Some(head_end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
        return Framing::Partial;
    };
    let head = &buf[..head_end];
    let ok = head.starts_with(b"HTTP/1.1 200 ");
    let body = head_end + 4;
    let mut content_length: Option<usize> = None;
    let mut chunked = false;
    for line in head.split(|&b| b == b'\n').skip(1) {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let Some(colon) = line.iter().position(|&b| b == b':') else {
            continue;
        };
        let (name, value) = (&line[..colon], line[colon + 1..].trim_ascii());
        if name.eq_ignore_ascii_case(b"content-length") {
            content_length = std::str::from_utf8(value).ok().and_then(|v| v.parse().ok());
        } else if name.eq_ignore_ascii_case(b"transfer-encoding") {
            chunked = value.eq_ignore_ascii_case(b"chunked");
        }
    }
    if chunked {
        return chunked_len(buf, body, ok);
    }
    match content_length {
        Some(length) if buf.len() >= body + length => Framing::Complete {
            len: body + length,
            ok,
        },
        Some(_) => Framing::Partial,
        None => Framing::Invalid,
    }
}

/// Where a chunked body starting at `at` ends, if it has ended.
fn chunked_len(buf: &[u8], mut at: usize, ok: bool) -> Framing {
    loop {
        let Some(line_end) = buf[at..].windows(2).position(|w| w == b"\r\n") else {
            return Framing::Partial;
        };
        let size_text = &buf[at..at + line_end];
        let size_text = size_text
            .split(|&b| b == b';')
            .next()
            .unwrap_or_default()
            .trim_ascii();
        let Some(size) = std::str::from_utf8(size_text)
            .ok()
            .and_then(|s| usize::from_str_radix(s, 16).ok())
        else {
            return Framing::Invalid;
        };
        at += line_end + 2;
        if size == 0 {
            // No trailers from these servers: the final CRLF follows.
            return if buf.len() >= at + 2 {
                Framing::Complete { len: at + 2, ok }
            } else {
                Framing::Partial
            };
        }
        if buf.len() < at + size + 2 {
            return Framing::Partial;
        }
        at += size + 2;
    }
}
