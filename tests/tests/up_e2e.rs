//! `tokenscale up` with a `sim`-backend manifest, driven by `tokenscale bench` through its
//! gateway: a 1× → 4× → 1× ramp makes the replicas rise to ≥ 3 and fall back, the settled
//! p95 TTFT meets the SLO, every request ends 200, and no engine outlives `up` (stopped by
//! SIGTERM, or killed with SIGKILL).

mod cli_support;

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cli_support::soak;
use cli_support::{
    Procs, binary, children_of, engine_alive, scratch_dir, signal, wait_exit, wait_for,
};

const MODEL: &str = "sim-e2e";
/// One replica: ~600 output tokens/s at a full batch, ~500 within the SLO below.
const PROFILE: &str = cli_support::SIM_PROFILE;
const SLO_TTFT_S: f64 = 0.5;
/// Output tokens per request; at 8 requests/s one replica's worth (~400 tokens/s).
const OUTPUT_TOKENS: &str = "50";
const BASE_RATE: f64 = 8.0;

fn manifest(profile: &Path) -> String {
    cli_support::sim_manifest(MODEL, profile, 1, 6)
}

/// Starts `up` on a free port; returns its pid and the gateway address once a replica is
/// ready behind it.
fn start_up(procs: &mut Procs, dir: &Path) -> (u32, std::net::SocketAddr) {
    let up = start_up_logged(procs, dir);
    (up.pid, up.addr)
}

/// The same, keeping the path of `up`'s log (its status lines).
fn start_up_logged(procs: &mut Procs, dir: &Path) -> cli_support::Up {
    let profile = dir.join("profile.yaml");
    std::fs::write(&profile, PROFILE).expect("profile written");
    cli_support::start_up(procs, dir, &manifest(&profile), MODEL, 1)
}

/// The `ttft p95 …ms/` figures of the status lines `up` wrote to its log after byte `from`.
fn status_ttft_s(log: &Path, from: usize) -> Vec<f64> {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    text.get(from..)
        .unwrap_or("")
        .lines()
        .filter_map(|line| {
            let rest = line.split("ttft p95 ").nth(1)?;
            let ms = rest.split("ms/").next()?;
            ms.trim().parse::<f64>().ok().map(|ms| ms / 1e3)
        })
        .collect()
}

fn log_len(log: &Path) -> usize {
    std::fs::metadata(log).map_or(0, |m| m.len() as usize)
}

fn ready_replicas(addr: std::net::SocketAddr) -> Option<u32> {
    cli_support::ready_replicas(addr, MODEL)
}

/// `up` in a fresh scratch folder `name` over the sim manifest of `(min, max)` replicas with
/// `from` replaced by `to` (asserted replaced), once `ready` replicas serve.
fn start_edited(
    procs: &mut Procs,
    name: &str,
    (min, max, ready): (u32, u32, u32),
    (from, to): (&str, &str),
) -> (tokenscale_scratch::Scratch, cli_support::Up) {
    let dir = scratch_dir(name);
    let profile = dir.join("profile.yaml");
    std::fs::write(&profile, PROFILE).expect("profile written");
    let manifest = cli_support::sim_manifest(MODEL, &profile, min, max).replace(from, to);
    assert!(manifest.contains(to), "{manifest}");
    let up = cli_support::start_up(procs, &dir, &manifest, MODEL, ready);
    (dir, up)
}

/// Runs one open-loop bench point through the gateway and returns its report's point.
fn bench(
    addr: std::net::SocketAddr,
    dir: &Path,
    name: &str,
    rate: f64,
    duration_s: u32,
) -> serde_json::Value {
    let out = dir.join(format!("{name}.json"));
    let mut child: Child = Command::new(binary("tokenscale"))
        .args([
            "bench",
            "--url",
            &format!("http://{addr}"),
            "--model",
            MODEL,
        ])
        .args([
            "--rate",
            &rate.to_string(),
            "--duration",
            &format!("{duration_s}s"),
        ])
        .args([
            "--input-tokens",
            "32",
            "--output-tokens",
            OUTPUT_TOKENS,
            "--seed",
            "1",
        ])
        .arg("--out")
        .arg(&out)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("bench starts");
    let status = wait_exit(
        &mut child,
        "tokenscale bench",
        Duration::from_secs(u64::from(duration_s) + 120),
    );
    assert!(status.success(), "bench {name} failed: {status}");
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&out).expect("report")).expect("JSON");
    report["points"][0].clone()
}

/// Every failure is a documented refusal (429 limits, 503 no capacity); here there are none.
fn assert_all_ok(point: &serde_json::Value) {
    let errors = point["errors"].as_object().expect("errors");
    assert!(errors.is_empty(), "requests failed: {point}");
    assert!(point["requests_ok"].as_u64() > Some(0), "{point}");
}

#[test]
fn a_load_ramp_scales_the_replicas_up_and_back_down_within_the_slo() {
    let dir = scratch_dir("up-e2e");
    let mut procs = Procs::default();
    let up = start_up_logged(&mut procs, &dir);
    let (up_pid, addr) = (up.pid, up.addr);

    // Watch the ready replicas through the gateway while the ramp runs.
    let seen = Arc::new(Mutex::new(Vec::<u32>::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let watcher = {
        let (seen, stop) = (seen.clone(), stop.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                if let Some(n) = ready_replicas(addr) {
                    seen.lock().expect("lock").push(n);
                }
                std::thread::sleep(Duration::from_millis(250));
            }
        })
    };
    let base = bench(addr, &dir, "base", BASE_RATE, 10);
    let peak = bench(addr, &dir, "peak", 4.0 * BASE_RATE, 30);
    let engines_at_peak = children_of(up_pid);
    let max_at_peak = seen
        .lock()
        .expect("lock")
        .iter()
        .copied()
        .max()
        .unwrap_or(0);
    // The status lines of the settled run's last 20 s: their 6 s window holds only its
    // traffic (the peak has left it), so they must tell what its clients felt.
    let settled = std::thread::scope(|scope| {
        let log = &up.log;
        let marks = scope.spawn(move || {
            std::thread::sleep(Duration::from_secs(10));
            log_len(log)
        });
        let point = bench(addr, &dir, "settled", BASE_RATE, 30);
        (point, marks.join().expect("log mark"))
    });
    let (settled, settled_from) = settled;
    let mut status_ttft = status_ttft_s(&up.log, settled_from);
    wait_for(
        "the replicas to fall back to ≤ 2",
        Duration::from_secs(60),
        || ready_replicas(addr).is_some_and(|n| n <= 2),
    );
    stop.store(true, Ordering::Relaxed);
    watcher.join().expect("watcher");

    for point in [&base, &peak, &settled] {
        assert_all_ok(point);
    }
    assert!(
        max_at_peak >= 3,
        "replicas seen: {:?}",
        seen.lock().expect("lock")
    );
    assert!(
        engines_at_peak.len() >= 3,
        "engine children at the peak: {engines_at_peak:?}"
    );
    let ttft_p95 = settled["ttft_s"]["p95"].as_f64().expect("ttft p95");
    assert!(
        ttft_p95 <= SLO_TTFT_S,
        "settled p95 TTFT {ttft_p95} s above the SLO"
    );
    // What `up` reports is what users feel: the median of its status lines' p95 TTFT over
    // the settled run is within 25% of the clients' own p95.
    assert!(!status_ttft.is_empty(), "no status lines in {:?}", up.log);
    status_ttft.sort_by(f64::total_cmp);
    let reported = status_ttft[status_ttft.len() / 2];
    println!(
        "settled TTFT p95: clients {ttft_p95:.4} s, up's status line (median of {}) {reported:.4} s",
        status_ttft.len()
    );
    assert!(
        (reported - ttft_p95).abs() <= 0.25 * ttft_p95,
        "up reports p95 TTFT {reported} s, its clients measured {ttft_p95} s: {status_ttft:?}"
    );

    // SIGTERM: up drains, stops every engine, and exits.
    let engines = children_of(up_pid);
    assert!(!engines.is_empty());
    signal(up_pid, "-TERM");
    let status = wait_exit(
        &mut procs.0[0],
        "tokenscale up after SIGTERM",
        Duration::from_secs(60),
    );
    assert!(status.success(), "up exited with {status}");
    for pid in engines.iter().chain(&engines_at_peak) {
        assert!(!engine_alive(*pid), "engine {pid} outlived up");
    }
}

#[test]
fn engines_die_with_up_even_when_it_is_killed() {
    let dir = scratch_dir("up-kill");
    let mut procs = Procs::default();
    let (up_pid, _addr) = start_up(&mut procs, &dir);
    let engines = children_of(up_pid);
    assert!(!engines.is_empty(), "up has engine children");
    signal(up_pid, "-KILL");
    let _ = wait_exit(
        &mut procs.0[0],
        "tokenscale up after SIGKILL",
        Duration::from_secs(10),
    );
    wait_for(
        "the engines to die with up",
        Duration::from_secs(10),
        || engines.iter().all(|pid| !engine_alive(*pid)),
    );
}

#[test]
fn with_min_and_max_three_every_killed_replica_is_replaced_and_requests_keep_succeeding() {
    let dir = scratch_dir("up-replace");
    let profile = dir.join("profile.yaml");
    std::fs::write(&profile, PROFILE).expect("profile written");
    let manifest = manifest(&profile).replace("{min: 1, max: 6}", "{min: 3, max: 3}");
    let mut procs = Procs::default();
    let up = cli_support::start_up(&mut procs, &dir, &manifest, MODEL, 3);
    let first: Vec<u32> = children_of(up.pid);
    assert_eq!(first.len(), 3, "{first:?}");
    // Streams the whole time the replicas die one after another.
    let stop = Arc::new(AtomicBool::new(false));
    let load = {
        let (stop, addr) = (stop.clone(), up.addr);
        std::thread::spawn(move || {
            let shapes = soak::Shape::many(12, 5);
            let mut outcomes = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                let batch = soak::open_loop(addr, MODEL, &shapes, 6.0, Duration::from_secs(2));
                outcomes.extend(batch);
            }
            outcomes
        })
    };
    for pid in &first {
        signal(*pid, "-KILL");
        wait_for(
            "the killed replica to be replaced and three to be ready again",
            Duration::from_secs(30),
            || {
                let now = children_of(up.pid);
                !now.contains(pid) && now.len() == 3 && ready_replicas(up.addr) == Some(3)
            },
        );
    }
    stop.store(true, Ordering::Relaxed);
    let outcomes = load.join().expect("load");
    let failed: Vec<_> = outcomes.iter().filter(|(_, o)| !o.ok()).collect();
    assert!(!outcomes.is_empty());
    assert!(
        failed.is_empty(),
        "{} of {} requests failed: {:?}",
        failed.len(),
        outcomes.len(),
        failed.first()
    );
    let now = children_of(up.pid);
    assert!(
        now.iter().all(|pid| !first.contains(pid)),
        "all three were replaced: {first:?} -> {now:?}"
    );
    let log = std::fs::read_to_string(&up.log).expect("up's log");
    let reports = log
        .lines()
        .filter(|l| l.starts_with("tokenscale up: replica-") && l.contains(" was killed "))
        .count();
    assert_eq!(reports, 3, "{log}");
    assert!(
        !log.contains("crash loop"),
        "replicas killed while serving are no crash loop: {log}"
    );
}

/// With `replicas.min: 0`, `up` starts no replica. The first request waits in the gateway;
/// the next one-second sample sees it and starts a replica at once, and the request is
/// answered. The period is two minutes here: a request left for the next period would outlast
/// its hold (the configured cold start of 60 s plus the TTFT SLO) and fail.
#[test]
fn a_first_request_at_zero_replicas_starts_a_replica_at_once_and_is_answered() {
    let mut procs = Procs::default();
    let (_dir, up) = start_edited(
        &mut procs,
        "up-zero",
        (0, 2, 0),
        ("period: 1s", "period: 120s"),
    );
    assert_eq!(
        ready_replicas(up.addr).unwrap_or(0),
        0,
        "no replica before a request"
    );
    let body = serde_json::json!({"model": MODEL, "prompt": "hello", "max_tokens": 8});
    let (status, text) = cli_support::post(
        up.addr,
        "/v1/completions",
        &body.to_string(),
        Duration::from_secs(100),
    )
    .expect("the gateway answers");
    let log = std::fs::read_to_string(&up.log).unwrap_or_default();
    assert_eq!(status, 200, "{text}\n{log}");
    assert!(
        log.lines().any(|l| l.contains("ScaleFromZero") && l.contains("requests waiting at zero replicas")),
        "the status line of the decision the sample made: {log}"
    );
}

#[test]
fn a_replica_that_exits_at_start_is_reported_within_two_seconds_and_backed_off() {
    let dir = scratch_dir("up-crash");
    let manifest = manifest(&dir.join("no-such-profile.yaml"));
    std::fs::write(dir.join("md.yaml"), &manifest).expect("manifest written");
    let addr: std::net::SocketAddr = ([127, 0, 0, 1], cli_support::free_port()).into();
    let log = dir.join("up.log");
    let mut procs = Procs::default();
    procs.0.push(
        Command::new(binary("tokenscale"))
            .args(["up", "--listen", &addr.to_string(), "-f"])
            .arg(dir.join("md.yaml"))
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).expect("log"))
            .spawn()
            .expect("up starts"),
    );
    let read = || std::fs::read_to_string(&log).unwrap_or_default();
    wait_for(
        "up to start its first replica",
        Duration::from_secs(30),
        || read().contains("replica-1 starting"),
    );
    let started = Instant::now();
    wait_for("up to report the failure", Duration::from_secs(2), || {
        read().contains("replica-1 exited with exit status: 1")
    });
    eprintln!(
        "reported {:.2}s after the start",
        started.elapsed().as_secs_f64()
    );
    let text = read();
    assert!(
        text.contains("no-such-profile.yaml"),
        "the engine's own words are shown: {text}"
    );
    assert!(
        text.contains("replica-1.log"),
        "the log path is shown: {text}"
    );
    // It keeps failing: the restarts back off, and the status line says why.
    wait_for("the crash-loop backoff", Duration::from_secs(15), || {
        read().contains("failures in a row, next start in")
    });
    wait_for(
        "a status line naming the failure",
        Duration::from_secs(15),
        || {
            read().lines().any(|l| {
                l.contains("replicas 0/1")
                    && l.contains("last failure: replica-")
                    && l.contains("exited")
            })
        },
    );
}

/// A TPOT target the profile's full batch of 16 cannot meet (20 ms; a step is 10 ms plus 1 ms
/// a sequence): the engine caps its own batch and exports the cap, and `up`, loaded past it,
/// shows the cap with its one replica at it and the capacity read there, below the hint of
/// 500 tokens/s (issue 38 item 1: the knee).
#[test]
fn a_replica_held_at_its_tpot_cap_shows_the_cap_and_the_capacity_read_at_it() {
    let mut procs = Procs::default();
    let (dir, up) = start_edited(
        &mut procs,
        "up-knee",
        (1, 1, 1),
        ("tpotP95: 50ms", "tpotP95: 20ms"),
    );
    let from = log_len(&up.log);
    // 20 requests/s of 50 tokens: 1,000 tokens/s, twice what the capped replica gives.
    bench(up.addr, &dir, "past-the-cap", 20.0, 15);
    let log = std::fs::read_to_string(&up.log).unwrap_or_default();
    let at_cap: Vec<&str> = log[from.min(log.len())..]
        .lines()
        .filter(|l| l.contains(" at cap)"))
        .collect();
    let number_after = |line: &str, key: &str| -> Option<f64> {
        let rest = &line[line.find(key)? + key.len()..];
        rest.split(|c: char| !c.is_ascii_digit())
            .next()?
            .parse()
            .ok()
    };
    let last = at_cap
        .iter()
        .rev()
        .find(|l| l.contains("(1/1 at cap)"))
        .unwrap_or_else(|| panic!("no status line with the replica at its cap: {log}"));
    let cap = number_after(last, "cap engine ").expect("the cap");
    let capacity = number_after(last, "capacity ").expect("the capacity");
    println!("status line at the cap: {last}");
    assert!(
        (1.0..16.0).contains(&cap),
        "the TPOT target caps below 16: {last}"
    );
    assert!(
        capacity < 500.0,
        "capacity read at the cap, below the hint: {last}"
    );
}
