//! Replicas that die or hang under load lose no request: `tokenscale up` over simulated and
//! real SmolLM2 replicas with one SIGKILLed every 20 s (up replaces it; the gateway continues
//! every interrupted stream on another replica), and a replica SIGSTOPped mid-stream behind
//! the gateway (its idle timeout fires, the stream continues elsewhere). Every answer must
//! equal an uninterrupted run's, token for token, with the same usage.

mod cli_support;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use cli_support::soak::{self, Kill, Outcome, Shape};
use cli_support::{
    Procs, Up, binary, metric_sum, scratch_dir, sim_manifest, start_engine, start_up,
};

/// One simulated replica: ~600 output tokens/s at a full batch.
const PROFILE: &str = cli_support::SIM_PROFILE;

/// A soak's knobs; the defaults are CI's (about 2 minutes). `TOKENSCALE_SOAK_*` variables
/// change them, e.g. to replay the run (3 min at 20/s, a kill every 30 s, min 1).
struct Knobs {
    seconds: u64,
    rate: f64,
    kill_every_s: u64,
    min: u32,
    max: u32,
}

impl Knobs {
    fn from_env() -> Self {
        let var = |name: &str, default: f64| {
            std::env::var(format!("TOKENSCALE_SOAK_{name}"))
                .ok()
                .and_then(|v| v.parse::<f64>().ok())
                .unwrap_or(default)
        };
        Self {
            seconds: var("SECONDS", 100.0) as u64,
            rate: var("RATE", 18.0),
            kill_every_s: var("KILL_EVERY", 20.0) as u64,
            min: var("MIN", 3.0) as u32,
            max: var("MAX", 3.0) as u32,
        }
    }
}

/// What the gateway counted: `(generation tokens, retries, interruptions by continuation and
/// result)`.
fn gateway_counts(addr: SocketAddr) -> (f64, f64, BTreeMap<String, f64>) {
    let (_, text) = cli_support::gateway_metrics(addr).expect("gateway metrics");
    let generated = metric_sum(&text, "tokenscale_gateway_generation_tokens_total").unwrap_or(0.0);
    let retries = metric_sum(&text, "tokenscale_gateway_retries_total").unwrap_or(0.0);
    let mut interruptions = BTreeMap::new();
    for line in text
        .lines()
        .filter(|l| l.starts_with("tokenscale_gateway_stream_interruptions_total{"))
    {
        let label = |name: &str| {
            line.split(&format!("{name}=\""))
                .nth(1)
                .and_then(|r| r.split('"').next())
                .unwrap_or("")
                .to_string()
        };
        let value: f64 = line
            .rsplit(' ')
            .next()
            .and_then(|v| v.parse().ok())
            .unwrap_or(0.0);
        *interruptions
            .entry(format!("{}/{}", label("continuation"), label("result")))
            .or_default() += value;
    }
    (generated, retries, interruptions)
}

/// The uninterrupted answers: each shape sent once to a replica nobody disturbs.
fn reference(addr: SocketAddr, model: &str, shapes: &[Shape]) -> Vec<Outcome> {
    shapes
        .iter()
        .map(|shape| {
            let outcome = soak::run_one(addr, shape, model);
            assert!(outcome.ok(), "reference run failed: {outcome:?}");
            outcome
        })
        .collect()
}

/// Checks every outcome against its reference; prints the soak's figures first.
fn judge(
    label: &str,
    outcomes: &[(usize, Outcome)],
    references: &[Outcome],
    kills: &[Kill],
    gateway: (f64, f64, BTreeMap<String, f64>),
) {
    let failed: Vec<&(usize, Outcome)> = outcomes.iter().filter(|(_, o)| !o.ok()).collect();
    let wrong: Vec<&(usize, Outcome)> = outcomes
        .iter()
        .filter(|(i, o)| {
            o.ok() && (o.text != references[*i].text || o.usage != references[*i].usage)
        })
        .collect();
    let client_tokens: u64 = outcomes
        .iter()
        .filter_map(|(_, o)| o.usage)
        .map(|u| u.1)
        .sum();
    let reference_tokens: u64 = outcomes
        .iter()
        .map(|(i, _)| references[*i].usage.map_or(0, |u| u.1))
        .sum();
    let (gateway_tokens, retries, interruptions) = gateway;
    let resumed: f64 = interruptions
        .iter()
        .filter(|(k, _)| k.ends_with("/resumed"))
        .map(|(_, v)| v)
        .sum();
    eprintln!(
        "{label}: {} requests, {} failed ({:.2}%), {} answers differing from the uninterrupted run; \
         {} replicas killed; stream interruptions {interruptions:?} ({resumed} resumed); {retries} retries; \
         completion tokens: clients {client_tokens}, uninterrupted {reference_tokens}, gateway counter {gateway_tokens}",
        outcomes.len(),
        failed.len(),
        100.0 * failed.len() as f64 / outcomes.len().max(1) as f64,
        wrong.len(),
        kills.len(),
    );
    let mut kinds: BTreeMap<String, usize> = BTreeMap::new();
    for (_, o) in &failed {
        let kind = match (o.status, o.errors.is_empty()) {
            (200, false) => "an error event mid-stream".to_string(),
            (200, true) => "a stream cut without [DONE]".to_string(),
            (0, _) => "no response".to_string(),
            (status, _) => format!("status {status}"),
        };
        *kinds.entry(kind).or_default() += 1;
    }
    eprintln!("{label}: failures by kind: {kinds:?}");
    for (i, o) in failed.iter().take(5) {
        eprintln!(
            "  failed (shape {i}): status {} done {} errors {:?}",
            o.status, o.done, o.errors
        );
    }
    assert!(
        failed.is_empty(),
        "{label}: {} requests failed",
        failed.len()
    );
    for (i, o) in &wrong {
        assert_eq!(
            o.text, references[*i].text,
            "{label}: shape {i}'s text differs"
        );
        assert_eq!(
            o.usage, references[*i].usage,
            "{label}: shape {i}'s usage differs"
        );
    }
    for (i, o) in outcomes {
        assert_eq!(
            o.ids.len(),
            1,
            "{label}: shape {i} came with several ids: {:?}",
            o.ids
        );
    }
    assert_eq!(
        client_tokens, reference_tokens,
        "{label}: tokens lost or counted twice"
    );
    assert_eq!(
        gateway_tokens as u64, client_tokens,
        "{label}: the gateway's counter"
    );
    assert!(!kills.is_empty(), "{label}: no replica was killed");
    assert_eq!(
        interruptions
            .iter()
            .filter(|(k, _)| k.ends_with("/failed"))
            .map(|(_, v)| v)
            .sum::<f64>(),
        0.0,
        "{label}: {interruptions:?}"
    );
}

/// Open-loop load through `up` while one of its replicas is SIGKILLed every `kill_every`.
struct Soak {
    label: &'static str,
    model: &'static str,
    shapes: Vec<Shape>,
    rate: f64,
    load: Duration,
    kill_every: Duration,
}

impl Soak {
    /// Runs the load and the kills, then judges every answer against the same requests sent to
    /// a replica nobody disturbs (`tokenscale-engine serve ENGINE_ARGS`).
    fn judge_against(&self, procs: &mut Procs, up: &Up, engine_args: &[&str]) {
        let killer = soak::killer(up.pid, self.kill_every, self.load, 3);
        let started = Instant::now();
        let outcomes = soak::open_loop(up.addr, self.model, &self.shapes, self.rate, self.load);
        let kills = killer.join().expect("killer");
        // The engines' own count: what the killed ones had generated just before, plus the
        // survivors'. Above what clients got by the tokens a killed replica generated but never
        // sent (its continuation generated them again); below, when the autoscaler retired some.
        let survivors: f64 = cli_support::children_of(up.pid)
            .into_iter()
            .filter_map(soak::engine_port)
            .map(soak::generated)
            .sum();
        let killed: f64 = kills.iter().map(|k| k.generated_before).sum();
        eprintln!(
            "{}: load of {:.0}s done in {:.0}s; the engines generated {} tokens ({killed} by the killed ones before their kill)",
            self.label,
            self.load.as_secs_f64(),
            started.elapsed().as_secs_f64(),
            survivors + killed
        );
        let engine = start_engine(procs, engine_args, Duration::from_secs(120));
        let references = reference(engine, self.model, &self.shapes);
        judge(
            self.label,
            &outcomes,
            &references,
            &kills,
            gateway_counts(up.addr),
        );
    }
}

#[test]
fn replicas_killed_under_load_lose_no_request_and_no_token() {
    let knobs = Knobs::from_env();
    let model = "soak";
    let dir = scratch_dir("soak");
    let profile = dir.join("profile.yaml");
    std::fs::write(&profile, PROFILE).expect("profile written");
    let mut procs = Procs::default();
    let up = start_up(
        &mut procs,
        &dir,
        &sim_manifest(model, &profile, knobs.min, knobs.max),
        model,
        knobs.min.max(1),
    );
    let run = Soak {
        label: "sim soak",
        model,
        shapes: Shape::many(48, 7),
        rate: knobs.rate,
        load: Duration::from_secs(knobs.seconds),
        kill_every: Duration::from_secs(knobs.kill_every_s),
    };
    let profile = profile.display().to_string();
    let args = [
        "--backend",
        "sim",
        "--sim-profile",
        &profile,
        "--served-model-name",
        model,
    ];
    run.judge_against(&mut procs, &up, &args);
}

#[test]
fn smollm2_replicas_killed_mid_stream_splice_greedy_answers_exactly() {
    let model = "smollm2-soak";
    let dir = scratch_dir("soak-smollm2");
    let manifest = format!(
        "apiVersion: tokenscale.dev/v1alpha1
kind: ModelDeployment
metadata:
  name: {model}
spec:
  model: {{source: smollm2-135m, servedName: {model}}}
  engine:
    backend: cpu
    maxNumSeqs: 8
    drainTimeout: 10s
  replicas: {{min: 2, max: 2}}
  slo: {{ttftP95: 5s, tpotP95: 1s}}
"
    );
    let mut procs = Procs::default();
    let up = start_up(&mut procs, &dir, &manifest, model, 2);
    // Two kills, 10 s apart: more than a stream lasts, so none is hit twice.
    let run = Soak {
        label: "smollm2 soak",
        model,
        shapes: Shape::many(8, 11)
            .into_iter()
            .map(|s| Shape {
                max_tokens: 24 + s.max_tokens % 16,
                ..s
            })
            .collect(),
        rate: 1.0,
        load: Duration::from_secs(24),
        kill_every: Duration::from_secs(10),
    };
    run.judge_against(
        &mut procs,
        &up,
        &["--model", "smollm2-135m", "--served-model-name", model],
    );
}

#[test]
fn a_replica_stopped_mid_stream_times_out_and_the_stream_continues_elsewhere() {
    let model = "hang";
    let dir = scratch_dir("sigstop");
    // Slow replicas (50 ms a step): a 60-token stream lasts about 3 s.
    let profile = dir.join("profile.yaml");
    std::fs::write(&profile, PROFILE.replace("t0_s: 0.01", "t0_s: 0.05")).expect("profile");
    let mut procs = Procs::default();
    let args = [
        "--backend",
        "sim",
        "--sim-profile",
        &profile.display().to_string(),
        "--served-model-name",
        model,
    ];
    let engines = [
        start_engine(&mut procs, &args, Duration::from_secs(30)),
        start_engine(&mut procs, &args, Duration::from_secs(30)),
    ];
    let shape = Shape {
        chat: false,
        prompt: "hold on".into(),
        max_tokens: 60,
    };
    let reference = soak::run_one(engines[1], &shape, model);
    assert!(reference.ok(), "{reference:?}");

    let config = dir.join("gateway.yaml");
    std::fs::write(
        &config,
        format!(
            "models:\n  - name: {model}\n    upstreams: [\"http://{}\", \"http://{}\"]\n    scrape_metrics: false\ntenants:\n  - name: local\nanonymous: local\nupstream: {{stream_idle_timeout_ms: 1000}}\nhealth: {{interval_ms: 200, stale_after_ms: 1000, timeout_ms: 500}}\n",
            engines[0], engines[1]
        ),
    )
    .expect("config");
    let port = cli_support::free_port();
    let gateway = std::process::Command::new(binary("tokenscale-gateway"))
        .args(["--config"])
        .arg(&config)
        .args(["--listen", &format!("127.0.0.1:{port}")])
        .args(cli_support::admin_listen(([127, 0, 0, 1], port).into()))
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(dir.join("gateway.log")).expect("log"))
        .spawn()
        .expect("gateway starts");
    procs.0.push(gateway);
    let addr: SocketAddr = ([127, 0, 0, 1], port).into();
    cli_support::wait_for("both replicas ready", Duration::from_secs(30), || {
        cli_support::gateway_metrics(addr).is_ok_and(|(_, t)| {
            t.lines().any(|l| {
                l.starts_with("tokenscale_gateway_replicas{")
                    && l.contains("\"ready\"")
                    && l.ends_with(" 2")
            })
        })
    });

    // Read a few chunks, then freeze the replica serving them.
    let mut stream = soak::open(addr, &shape, model).expect("stream opens");
    let mut raw = Vec::new();
    soak::read_until(&mut stream, &mut raw, |r| {
        String::from_utf8_lossy(r).matches("data: ").count() >= 10
    });
    let upstream = soak::parse(&raw).upstream;
    let frozen_port: u16 = upstream
        .rsplit(':')
        .next()
        .and_then(|p| p.parse().ok())
        .expect("upstream port");
    let frozen = cli_support::children_of(std::process::id())
        .into_iter()
        .find(|&pid| soak::engine_port(pid) == Some(frozen_port))
        .expect("the serving engine is a child of this test");
    cli_support::signal(frozen, "-STOP");
    let stopped_at = Instant::now();
    soak::read_until(&mut stream, &mut raw, |_| false);
    let gap = stopped_at.elapsed();
    cli_support::signal(frozen, "-CONT");
    let outcome = soak::parse(&raw);
    assert!(outcome.ok(), "{outcome:?}");
    assert_eq!(
        outcome.text, reference.text,
        "the spliced answer equals the uninterrupted one"
    );
    assert_eq!(outcome.usage, reference.usage);
    assert_eq!(outcome.ids.len(), 1, "{:?}", outcome.ids);
    let (_, _, interruptions) = gateway_counts(addr);
    assert_eq!(
        interruptions.get("exact/resumed"),
        Some(&1.0),
        "{interruptions:?}"
    );
    eprintln!(
        "sigstop: the stream went on elsewhere; it ended {:.1}s after the stop",
        gap.as_secs_f64()
    );
    assert!(
        gap >= Duration::from_millis(1000),
        "the idle timeout is 1 s; the rest came after {gap:?}"
    );
}
