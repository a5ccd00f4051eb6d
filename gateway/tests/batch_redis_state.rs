//! The batch state in Redis keeps the state contract across pods: two `RedisState`s on one
//! real `redis-server` (started here on a free loopback port) stand for two gateway pods.

#![allow(clippy::unwrap_used)] // every store call must succeed here: its error is the failure

#[allow(dead_code)]
#[path = "it/processes.rs"]
mod processes;
#[allow(dead_code)]
#[path = "it/support.rs"]
mod support;

use std::time::Duration;

use tokenscale_gateway::batch::state::{RedisState, State};
use tokenscale_gateway::batch::types::{
    BatchRecord, BatchStatus, FileMeta, LineResult, NewBatch, Progress, Purpose,
};
use tokenscale_gateway::batch::validate::Endpoint;
use tokenscale_gateway::config::Config;
use tokenscale_gateway::store::RedisClient;

const LEASE: Duration = Duration::from_secs(60);

/// Whether `redis-server` can run here; says why not otherwise.
fn redis_installed() -> bool {
    let found = std::process::Command::new("redis-server")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !found {
        eprintln!("NOT RUN: redis-server is not installed (scripts/setup installs it)");
    }
    found
}

/// A pod's store: its own client (own connection) on the shared Redis, keys under `prefix`.
fn pod(redis: &processes::Redis, prefix: &str) -> State {
    let yaml = format!(
        "limits: {{store: redis, redis_url: \"{}\", key_prefix: {prefix}, timeout_ms: 2000}}",
        redis.url()
    );
    let config = Config::from_yaml(&yaml).expect("limits config");
    let client = RedisClient::new(&config.limits).expect("redis client");
    State::Redis(RedisState::new(client))
}

fn result(ok: bool, completion_tokens: u64) -> LineResult {
    LineResult {
        ok,
        line: format!("{{\"ok\":{ok}}}"),
        prompt_tokens: 3,
        cached_tokens: 1,
        completion_tokens,
    }
}

fn batch(id: &str, tenant: &str, created_at: u64) -> BatchRecord {
    let new = NewBatch {
        tenant: tenant.into(),
        endpoint: Endpoint::ChatCompletions,
        input_file_id: "file-in".into(),
        completion_window: "24h".into(),
        window_s: 86_400,
        metadata: None,
    };
    BatchRecord::new(id.into(), new, created_at)
}

/// Puts batch `id` in progress (lines are recorded only while their batch runs).
async fn running(state: &State, id: &str) {
    let mut record = batch(id, "t", 1);
    record.status = BatchStatus::InProgress;
    state.put_batch(&record).await.unwrap();
}

fn file(id: &str, tenant: &str, created_at: u64) -> FileMeta {
    FileMeta {
        id: id.into(),
        tenant: tenant.into(),
        bytes: 10,
        created_at,
        filename: format!("{id}.jsonl"),
        purpose: Purpose::Batch,
    }
}

#[tokio::test]
async fn claims_are_exclusive_between_pods_and_answers_count_once() {
    if !redis_installed() {
        return;
    }
    let redis = processes::Redis::start(None).await;
    let (a, b) = (pod(&redis, "claims"), pod(&redis, "claims"));
    running(&a, "b1").await;

    // Two pods claiming at once never get the same line, and together get all of them.
    let (mine, theirs) = tokio::join!(
        a.claim("b1", 40, 25, "pod-a", LEASE),
        b.claim("b1", 40, 25, "pod-b", LEASE)
    );
    let (mine, theirs) = (mine.unwrap(), theirs.unwrap());
    let mut all: Vec<u32> = mine.iter().chain(&theirs).copied().collect();
    all.sort_unstable();
    assert_eq!(all, (0..40).collect::<Vec<_>>(), "{mine:?} {theirs:?}");
    assert!(
        a.claim("b1", 40, 5, "pod-a", LEASE)
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(b.leased("b1").await.unwrap(), 40);

    // A line given back is claimed again first; released lines that were not leased are not.
    a.release("b1", &[7, 3]).await.unwrap();
    b.release("b1", &[3]).await.unwrap();
    assert_eq!(b.claim("b1", 40, 5, "pod-b", LEASE).await.unwrap(), [3, 7]);

    // The first answer wins, on either pod; progress counts it once.
    assert!(a.record("b1", 3, &result(true, 5)).await.unwrap());
    assert!(
        !b.record("b1", 3, &result(false, 9)).await.unwrap(),
        "first wins"
    );
    assert!(b.record("b1", 4, &result(false, 2)).await.unwrap());
    assert_eq!(
        a.progress("b1").await.unwrap(),
        Progress {
            completed: 1,
            failed: 1,
            prompt_tokens: 6,
            cached_tokens: 2,
            completion_tokens: 7,
        }
    );
    assert_eq!(
        a.leased("b1").await.unwrap(),
        38,
        "answered lines hold no lease"
    );
    // An answered line is not handed out again even when given back.
    a.release("b1", &[3]).await.unwrap();
    assert!(
        b.claim("b1", 40, 5, "pod-b", LEASE)
            .await
            .unwrap()
            .is_empty()
    );

    let mut results = b.results("b1").await.unwrap();
    results.sort_by_key(|(i, _)| *i);
    assert_eq!(results, [(3, result(true, 5)), (4, result(false, 2))]);

    // Once the files are written the work goes; the record of answers with it.
    a.forget_work("b1").await.unwrap();
    assert!(b.results("b1").await.unwrap().is_empty());
    assert_eq!(b.progress("b1").await.unwrap(), Progress::default());
    assert_eq!(b.leased("b1").await.unwrap(), 0);
}

#[tokio::test]
async fn a_dead_pods_expired_leases_are_taken_over_and_renewed_ones_are_not() {
    if !redis_installed() {
        return;
    }
    let redis = processes::Redis::start(None).await;
    let (a, b) = (pod(&redis, "leases"), pod(&redis, "leases"));
    running(&a, "b2").await;
    let short = Duration::from_millis(300);
    assert_eq!(a.claim("b2", 4, 2, "pod-a", short).await.unwrap(), [0, 1]);
    assert_eq!(b.claim("b2", 4, 1, "pod-b", short).await.unwrap(), [2]);
    // Pod b keeps running line 2; pod a dies holding 0 and 1.
    tokio::time::sleep(Duration::from_millis(150)).await;
    b.renew("b2", "pod-b", &[2], LEASE).await.unwrap();
    tokio::time::sleep(Duration::from_millis(250)).await;
    assert_eq!(
        b.leased("b2").await.unwrap(),
        1,
        "only the renewed lease lives"
    );
    assert_eq!(
        b.claim("b2", 4, 10, "pod-b", LEASE).await.unwrap(),
        [0, 1, 3]
    );
    // Renewing a line that has no lease (answered meanwhile) does not lease it again.
    assert!(b.record("b2", 0, &result(true, 1)).await.unwrap());
    a.renew("b2", "pod-a", &[0], LEASE).await.unwrap();
    assert_eq!(b.leased("b2").await.unwrap(), 3);
}

#[tokio::test]
async fn records_are_compare_and_set_and_leave_active_when_terminal() {
    if !redis_installed() {
        return;
    }
    let redis = processes::Redis::start(None).await;
    let (a, b) = (pod(&redis, "records"), pod(&redis, "records"));
    a.put_batch(&batch("batch-old", "t1", 10)).await.unwrap();
    a.put_batch(&batch("batch-new", "t1", 20)).await.unwrap();
    b.put_batch(&batch("batch-other", "t2", 15)).await.unwrap();

    let active: Vec<String> = b
        .active()
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.id)
        .collect();
    assert_eq!(
        active,
        ["batch-old", "batch-other", "batch-new"],
        "oldest first"
    );
    let listed: Vec<String> = b
        .batches("t1")
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.id)
        .collect();
    assert_eq!(
        listed,
        ["batch-new", "batch-old"],
        "the tenant's, newest first"
    );

    // Both pods read version 0 and try to move it on: exactly one wins.
    let mut first = a.batch("batch-old").await.unwrap().expect("stored");
    let mut second = first.clone();
    first.version = 1;
    first.status = BatchStatus::InProgress;
    second.version = 1;
    second.status = BatchStatus::Failed;
    let (x, y) = tokio::join!(a.replace_batch(&first), b.replace_batch(&second));
    assert!(x.unwrap() ^ y.unwrap(), "one compare-and-set wins");
    assert!(!a.replace_batch(&first).await.unwrap(), "stale version");
    let mut skipped = a.batch("batch-new").await.unwrap().expect("stored");
    skipped.version = 2;
    assert!(
        !a.replace_batch(&skipped).await.unwrap(),
        "a version skipped"
    );
    let mut absent = batch("batch-none", "t1", 1);
    absent.version = 1;
    assert!(!a.replace_batch(&absent).await.unwrap(), "no record");
    assert!(a.batch("batch-none").await.unwrap().is_none());

    // A terminal status takes it out of `active`, not out of its tenant's listing.
    let mut done = b.batch("batch-new").await.unwrap().expect("stored");
    done.version += 1;
    done.status = BatchStatus::Completed;
    assert!(b.replace_batch(&done).await.unwrap());
    let active: Vec<String> = a
        .active()
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.id)
        .collect();
    assert!(!active.contains(&"batch-new".to_string()), "{active:?}");
    assert_eq!(a.batches("t1").await.unwrap()[0], done);
}

#[tokio::test]
async fn files_are_listed_per_tenant_newest_first_and_deleted() {
    if !redis_installed() {
        return;
    }
    let redis = processes::Redis::start(None).await;
    let (a, b) = (pod(&redis, "files"), pod(&redis, "files"));
    a.put_file(&file("file-1", "t1", 100)).await.unwrap();
    b.put_file(&file("file-2", "t1", 200)).await.unwrap();
    a.put_file(&file("file-3", "t2", 300)).await.unwrap();
    let ids = |files: Vec<FileMeta>| files.into_iter().map(|f| f.id).collect::<Vec<_>>();
    assert_eq!(ids(b.files("t1").await.unwrap()), ["file-2", "file-1"]);
    assert_eq!(ids(b.files("t2").await.unwrap()), ["file-3"]);
    assert_eq!(
        a.file("file-2").await.unwrap(),
        Some(file("file-2", "t1", 200))
    );
    // An id from a URL with braces is only a missing file.
    assert_eq!(a.file("}{x").await.unwrap(), None);

    b.delete_file("file-2").await.unwrap();
    b.delete_file("file-2").await.unwrap();
    assert_eq!(a.file("file-2").await.unwrap(), None);
    assert_eq!(ids(a.files("t1").await.unwrap()), ["file-1"]);
    // Another prefix is another store.
    assert!(
        pod(&redis, "elsewhere")
            .files("t1")
            .await
            .unwrap()
            .is_empty()
    );
}

#[tokio::test]
async fn a_stored_record_that_is_not_json_is_corrupt_not_a_panic() {
    if !redis_installed() {
        return;
    }
    let redis = processes::Redis::start(None).await;
    let state = pod(&redis, "corrupt");
    state.put_file(&file("file-x", "t", 1)).await.unwrap();
    // Overwrite the metadata with garbage, as a foreign writer might.
    let yaml = format!("limits: {{store: redis, redis_url: \"{}\"}}", redis.url());
    let client = RedisClient::new(&Config::from_yaml(&yaml).unwrap().limits).unwrap();
    let set = redis::Script::new("return redis.call('SET', KEYS[1], 'not json')");
    let _: () = client
        .run_script(&set, &["corrupt:batch:file:{file-x}".to_string()], &[])
        .await
        .unwrap();
    let error = state.file("file-x").await.unwrap_err();
    assert!(error.to_string().contains("corrupt"), "{error}");
}

#[tokio::test]
async fn results_of_a_big_batch_come_back_whole_across_pages() {
    if !redis_installed() {
        return;
    }
    let redis = processes::Redis::start(None).await;
    let state = pod(&redis, "big");
    running(&state, "b3").await;
    let lines = 1_200;
    let claimed = state
        .claim("b3", lines, lines, "pod-a", LEASE)
        .await
        .unwrap();
    assert_eq!(claimed.len(), lines as usize);
    for index in claimed {
        assert!(state.record("b3", index, &result(true, 1)).await.unwrap());
    }
    let mut indices: Vec<u32> = state
        .results("b3")
        .await
        .unwrap()
        .into_iter()
        .map(|(i, _)| i)
        .collect();
    indices.sort_unstable();
    assert_eq!(indices, (0..lines).collect::<Vec<_>>());
    assert_eq!(state.progress("b3").await.unwrap().completed, lines);
}

#[tokio::test]
async fn an_answer_after_its_batch_ended_is_not_recorded() {
    if !redis_installed() {
        return;
    }
    let redis = processes::Redis::start(None).await;
    let (a, b) = (pod(&redis, "late"), pod(&redis, "late"));
    assert!(
        !a.record("b4", 0, &result(true, 1)).await.unwrap(),
        "no such batch"
    );
    running(&a, "b4").await;
    assert_eq!(a.claim("b4", 2, 2, "pod-a", LEASE).await.unwrap(), [0, 1]);
    assert!(a.record("b4", 0, &result(true, 1)).await.unwrap());
    // Pod b expires the batch while pod a still runs line 1.
    let mut expired = b.batch("b4").await.unwrap().expect("stored");
    expired.version += 1;
    expired.status = BatchStatus::Finalizing;
    assert!(b.replace_batch(&expired).await.unwrap());
    assert!(
        !a.record("b4", 1, &result(true, 1)).await.unwrap(),
        "too late"
    );
    assert_eq!(b.progress("b4").await.unwrap().completed, 1);
    assert_eq!(b.results("b4").await.unwrap().len(), 1);
}
