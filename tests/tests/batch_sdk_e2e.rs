//! The Batch API under `tokenscale up` (the bundled SmolLM2 example, real weights), driven by
//! the official `openai` Python client (`scripts/batch_sdk_check.py`): a 201-line batch ends
//! `completed` with 200 answers in its output file and the one bad line in its error file,
//! kept under `$XDG_DATA_HOME`; a second `up` on the same data folder, the first killed with
//! SIGKILL, still lists the batch and serves its output file.

mod cli_support;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use cli_support::{Procs, binary, free_port, get, ready_replicas, scratch_dir, signal, wait_exit};
use serde_json::Value;

/// The served name of the bundled example's model.
const MODEL: &str = "smollm2-135m-instruct";
/// Lines in the script's batch: 200 good ones and one the engine refuses.
const GOOD_LINES: u64 = 200;
/// The script polls at most 300 s; this bounds the whole run.
const SCRIPT_TIMEOUT: Duration = Duration::from_secs(420);

/// `tokenscale up` with the bundled example, its batch state under `data` (as
/// `XDG_DATA_HOME`), on a free port; returns its pid and address once a replica is ready.
fn start_up(procs: &mut Procs, dir: &Path, data: &Path, name: &str) -> (u32, SocketAddr) {
    let addr: SocketAddr = ([127, 0, 0, 1], free_port()).into();
    let log = std::fs::File::create(dir.join(format!("{name}.log"))).expect("log file");
    let child = Command::new(binary("tokenscale"))
        .args(["up", "--listen", &addr.to_string()])
        .args(cli_support::admin_listen(addr))
        .arg("--log-dir")
        .arg(dir.join(format!("{name}-replicas")))
        .env("XDG_DATA_HOME", data)
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("up starts");
    let pid = child.id();
    procs.0.push(child);
    cli_support::wait_for(
        "a ready replica behind the gateway",
        Duration::from_secs(120),
        || ready_replicas(addr, MODEL) >= Some(1),
    );
    (pid, addr)
}

/// Runs the SDK script against `addr`; its output, or `None` (said as NOT RUN) without a
/// `python3` that has the `openai` package.
fn run_sdk_check(addr: SocketAddr, dir: &Path) -> Option<String> {
    let mut python = match tokenscale_e2e::tools::python_with("openai") {
        Ok(python) => python,
        Err(error) => {
            eprintln!("NOT RUN: {error}");
            return None;
        }
    };
    let script = tokenscale_e2e::tools::workspace_root().join("scripts/batch_sdk_check.py");
    let log_path = dir.join("batch_sdk_check.log");
    let log = std::fs::File::create(&log_path).expect("script log");
    let mut child = python
        .arg(script)
        .arg(format!("http://{addr}/v1"))
        .arg(MODEL)
        .stdout(log.try_clone().expect("log handle"))
        .stderr(log)
        .spawn()
        .expect("python3 starts");
    let status = wait_exit(&mut child, "batch_sdk_check.py", SCRIPT_TIMEOUT);
    let output = std::fs::read_to_string(&log_path).unwrap_or_default();
    assert!(
        status.success(),
        "batch_sdk_check.py failed ({status}):\n{output}"
    );
    Some(output)
}

/// Paths of the files under `dir`, at any depth.
fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut folders = vec![dir.to_path_buf()];
    while let Some(folder) = folders.pop() {
        for entry in std::fs::read_dir(&folder).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                folders.push(path);
            } else {
                found.push(path);
            }
        }
    }
    found
}

fn get_json(addr: SocketAddr, path: &str) -> Value {
    let (status, body) = get(addr, path).unwrap_or_else(|e| panic!("GET {path}: {e}"));
    assert_eq!(status, 200, "GET {path}: {body}");
    serde_json::from_str(&body).unwrap_or_else(|e| panic!("GET {path}: {e}: {body}"))
}

#[test]
fn the_openai_client_runs_a_batch_under_up_and_it_outlives_a_restart() {
    let dir = scratch_dir("batch-sdk-e2e");
    let data = dir.join("data");
    let mut procs = Procs::default();
    let (pid, addr) = start_up(&mut procs, &dir, &data, "up-1");
    let Some(output) = run_sdk_check(addr, &dir) else {
        return;
    };
    eprintln!("{output}");
    let summary: Value = output
        .lines()
        .find_map(|l| l.strip_prefix("batch sdk ok: "))
        .and_then(|json| serde_json::from_str(json).ok())
        .unwrap_or_else(|| panic!("no `batch sdk ok` summary in:\n{output}"));
    let batch_id = summary["batch_id"].as_str().expect("batch_id");
    let output_id = summary["output_file_id"].as_str().expect("output_file_id");

    // The state is in the user's data folder, here the scratch one.
    let state = data.join("tokenscale/batch");
    let kept = files_under(&state);
    assert!(
        kept.iter().any(|p| p.to_string_lossy().contains(batch_id)),
        "{batch_id} is not recorded under {}: {kept:?}",
        state.display()
    );

    // Killed outright: nothing gets to flush on the way out.
    signal(pid, "-KILL");
    let first = procs.0.last_mut().expect("the first up");
    wait_exit(first, "the killed up", Duration::from_secs(10));
    let (_, addr) = start_up(&mut procs, &dir, &data, "up-2");

    let list = get_json(addr, "/v1/batches?limit=100");
    let batch = list["data"]
        .as_array()
        .expect("data")
        .iter()
        .find(|b| b["id"] == batch_id)
        .unwrap_or_else(|| panic!("{batch_id} not listed after the restart: {list}"));
    assert_eq!(batch["status"], "completed", "{batch}");
    assert_eq!(batch["output_file_id"], output_id, "{batch}");
    let counts = &batch["request_counts"];
    assert_eq!(
        (&counts["total"], &counts["completed"], &counts["failed"]),
        (
            &Value::from(GOOD_LINES + 1),
            &Value::from(GOOD_LINES),
            &Value::from(1)
        ),
        "{batch}"
    );
    let (status, content) =
        get(addr, &format!("/v1/files/{output_id}/content")).expect("output content");
    assert_eq!(status, 200, "{content}");
    let answered = content
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).expect("a JSON line"))
        .filter(|l| l["response"]["status_code"] == 200)
        .count();
    assert_eq!(answered as u64, GOOD_LINES, "after the restart:\n{content}");
}
