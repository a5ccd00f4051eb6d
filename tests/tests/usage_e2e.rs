//! `tokenscale usage` against a real gateway over a simulated engine after a mixed load: two
//! tenants with the same limits, one sending long prompts for a few tokens (input-heavy), one
//! short prompts for long answers (output-heavy). The report names `input_tokens` as the
//! first's binding limit and `output_tokens` as the second's; a tenant's key reads only its
//! own rows; the gateway logs one `tokenscale::usage` line per request (issue 37 item 2).

mod cli_support;

use std::net::SocketAddr;
use std::process::Command;
use std::time::Duration;

use cli_support::{Procs, binary, exchange, scratch_dir, start_gateway, start_sim_engine};

/// The engine's served name.
const MODEL: &str = "usage-sim";
/// The input-heavy tenant's key.
const KEY_READER: &str = "key-reader";
/// The output-heavy tenant's key.
const KEY_WRITER: &str = "key-writer";
/// Both tenants' limits: the shape of the load alone decides which binds.
const LIMITS: &str =
    "{requests_per_minute: 1000, input_tokens_per_minute: 6000, output_tokens_per_minute: 3000}";
/// The input-heavy load: prompts of ~1,200 tokens (the sim tokenizer: one a byte), 4 out.
const READER_REQUESTS: usize = 8;
/// The output-heavy load: 300 tokens out each, all at once: 10 fit in the output bucket.
const WRITER_REQUESTS: usize = 14;

/// A chat request; `tag` leads the prompt so no two share a cached prefix.
fn chat(tag: &str, filler: usize, max_tokens: u32) -> String {
    let content = format!("{tag} {}", "lorem ipsum ".repeat(filler));
    serde_json::json!({
        "model": MODEL,
        "messages": [{"role": "user", "content": content}],
        "max_tokens": max_tokens,
    })
    .to_string()
}

/// Statuses of `bodies` sent with `key`, each on its own thread when `parallel`.
fn send_all(api: SocketAddr, key: &'static str, bodies: Vec<String>, parallel: bool) -> Vec<u16> {
    let send = move |body: String| {
        let wait = Duration::from_secs(60);
        exchange(api, "POST", "/v1/chat/completions", Some(key), &body, wait)
            .map_or(0, |(status, _)| status)
    };
    if !parallel {
        return bodies.into_iter().map(send).collect();
    }
    let threads: Vec<_> = bodies
        .into_iter()
        .map(|body| std::thread::spawn(move || send(body)))
        .collect();
    threads.into_iter().map(|t| t.join().unwrap_or(0)).collect()
}

/// `tokenscale usage --url URL [--key KEY] [args]`: its stdout, after checking it succeeded.
fn usage(url: &str, key: Option<&str>, args: &[&str]) -> String {
    let mut command = Command::new(binary("tokenscale"));
    command.args(["usage", "--url", url]).args(args);
    if let Some(key) = key {
        command.args(["--key", key]);
    }
    let output = command.output().expect("tokenscale usage runs");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "tokenscale usage {args:?} failed: {}\n{stdout}",
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}

/// The row of `tenant` in a `--json` report.
fn row<'a>(report: &'a serde_json::Value, tenant: &str) -> &'a serde_json::Value {
    let rows = report["data"].as_array().expect("a list of rows");
    rows.iter()
        .find(|r| r["tenant"] == tenant && r["model"] == MODEL)
        .unwrap_or_else(|| panic!("no row of {tenant} on {MODEL}: {report}"))
}

#[test]
fn usage_names_input_tokens_for_long_prompts_and_output_tokens_for_long_answers() {
    let dir = scratch_dir("usage");
    let mut procs = Procs::default();
    let profile = dir.join("profile.yaml");
    std::fs::write(&profile, cli_support::SIM_PROFILE).expect("profile");
    let engine = start_sim_engine(&mut procs, &profile.display().to_string(), MODEL);
    let hash = tokenscale_gateway::auth::hash_key;
    let config = format!(
        "models:\n  - name: {MODEL}\n    upstreams: [\"http://{engine}\"]\n\
         tenants:\n  - name: reader\n    keys: [\"{}\"]\n    limits: {LIMITS}\n\
         \x20 - name: writer\n    keys: [\"{}\"]\n    limits: {LIMITS}\n\
         health: {{interval_ms: 200, stale_after_ms: 2000, timeout_ms: 500}}\n",
        hash(KEY_READER),
        hash(KEY_WRITER),
    );
    let log_level = "warn,tokenscale::usage=info";
    let api = start_gateway(&mut procs, &dir, &config, log_level, &[MODEL]);
    let admin = cli_support::admin_address(api).expect("the gateway's admin listener");

    // The mixed load: both tenants at once.
    let reader_bodies = (0..READER_REQUESTS)
        .map(|i| chat(&format!("r{i}"), 100, 4))
        .collect();
    let writer_bodies = (0..WRITER_REQUESTS)
        .map(|i| chat(&format!("w{i}"), 1, 300))
        .collect();
    let reader = std::thread::spawn(move || send_all(api, KEY_READER, reader_bodies, false));
    let writer = send_all(api, KEY_WRITER, writer_bodies, true);
    let reader = reader.join().expect("the reader's load");
    for (who, statuses) in [("reader", &reader), ("writer", &writer)] {
        assert!(
            statuses.iter().all(|s| [200, 429].contains(s)) && statuses.contains(&200),
            "{who}: {statuses:?}"
        );
    }
    let refused = |statuses: &[u16]| statuses.iter().filter(|s| **s == 429).count() as u64;

    // Every tenant, from the admin listener.
    let admin_url = format!("http://{admin}");
    let report: serde_json::Value =
        serde_json::from_str(&usage(&admin_url, None, &["--json"])).expect("--json is JSON");
    let (reads, writes) = (row(&report, "reader"), row(&report, "writer"));
    assert_eq!(reads["binding"], "input_tokens", "input-heavy: {reads}");
    assert_eq!(writes["binding"], "output_tokens", "output-heavy: {writes}");
    for (tenant, statuses, kind) in [
        (reads, &reader, "input_tokens"),
        (writes, &writer, "output_tokens"),
    ] {
        let minute = &tenant["minute"];
        let passed = statuses.iter().filter(|s| **s == 200).count() as u64;
        assert_eq!(minute["requests"]["used"], passed, "{tenant}");
        assert_eq!(minute["requests"]["limit"], 1000);
        assert_eq!(
            minute[kind]["limit"],
            if kind == "input_tokens" { 6000 } else { 3000 }
        );
        assert_eq!(minute["rate_limited"][kind], refused(statuses), "{tenant}");
        assert_eq!(tenant["hour"]["requests"]["limit"], 60_000);
    }
    let long_prompts = reads["minute"]["input_tokens"]["used"]
        .as_u64()
        .unwrap_or(0);
    assert!(
        long_prompts >= 1_000 * (READER_REQUESTS as u64 - refused(&reader)),
        "{reads}"
    );
    assert_eq!(
        writes["minute"]["output_tokens"]["used"],
        300 * (WRITER_REQUESTS as u64 - refused(&writer))
    );

    // The table: a line per tenant and window, the binding limit last.
    let table = usage(&admin_url, None, &[]);
    println!("reader {reader:?}\nwriter {writer:?}\n{table}");
    let lines: Vec<&str> = table.lines().collect();
    assert!(
        lines[0].starts_with("TENANT") && lines[0].ends_with("BINDING"),
        "{table}"
    );
    for (tenant, binding) in [("reader", "input_tokens"), ("writer", "output_tokens")] {
        let minute = lines
            .iter()
            .find(|l| l.starts_with(tenant) && l.contains(" 1m "))
            .unwrap_or_else(|| panic!("no 1m line of {tenant}:\n{table}"));
        assert!(minute.ends_with(binding), "{minute}");
        assert!(minute.contains("/1000 ("), "use beside its limit: {minute}");
    }

    // A tenant's key on the API port: its own row only.
    let own: serde_json::Value = serde_json::from_str(&usage(
        &format!("http://{api}"),
        Some(KEY_WRITER),
        &["--json"],
    ))
    .expect("--json is JSON");
    let tenants: Vec<&str> = own["data"]
        .as_array()
        .map(|rows| rows.iter().filter_map(|r| r["tenant"].as_str()).collect())
        .unwrap_or_default();
    assert_eq!(tenants, ["writer"], "{own}");

    // One `tokenscale::usage` log line per request, refused ones included.
    let log = std::fs::read_to_string(dir.join("gateway.log")).expect("the gateway's log");
    let lines: Vec<serde_json::Value> = log
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|l| l["target"] == "tokenscale::usage")
        .collect();
    assert_eq!(lines.len(), READER_REQUESTS + WRITER_REQUESTS, "{log}");
    let served = lines
        .iter()
        .find(|l| l["fields"]["tenant"] == "writer" && l["fields"]["status"] == 200)
        .unwrap_or_else(|| panic!("no line of a writer's answer: {log}"));
    let fields = &served["fields"];
    assert_eq!(fields["output_tokens"], 300, "{served}");
    assert_eq!(fields["replica"], format!("http://{engine}"), "{served}");
    assert!(
        fields["total_ms"].as_u64().is_some() && fields["model"] == MODEL,
        "{served}"
    );
}
