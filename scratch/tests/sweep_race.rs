//! The race that lost a live test's file (issue 42): one test writes into its scratch folder
//! and reads the file back while a sibling test in the same process, and another process,
//! make folders (and so sweep) under the same root, many times over.

use std::path::Path;
use std::process::{Command, Stdio};

use tokenscale_scratch::{Scratch, owner, scratch, sweep};

/// Write then read back a file in a fresh folder, as the random-block test does between
/// writing its GGUF and the Python reader opening it.
fn write_and_read(label: &str, round: usize) {
    let dir = scratch!(label);
    let file = dir.join("random-blocks.gguf");
    std::fs::write(&file, round.to_le_bytes()).expect("write");
    std::thread::yield_now();
    let back = std::fs::read(&file).unwrap_or_else(|e| panic!("round {round}: file lost: {e}"));
    assert_eq!(back, round.to_le_bytes());
}

#[test]
fn a_sweep_in_the_same_process_never_removes_a_live_folder() {
    let writer = std::thread::spawn(|| {
        for round in 0..400 {
            write_and_read("kquant-python", round);
        }
    });
    let sweeper = std::thread::spawn(|| {
        for _ in 0..400 {
            // What `common::kquant` does: a per-process folder kept for the statics, made
            // with a sweep each time.
            let kept = scratch!("kquant").keep();
            std::fs::remove_dir_all(kept).expect("own folder");
            sweep(Path::new(env!("CARGO_TARGET_TMPDIR")));
        }
    });
    writer.join().expect("no file was lost");
    sweeper.join().expect("sweeper");
}

#[test]
fn another_process_folder_is_kept_while_it_runs_and_swept_after() {
    let root = scratch!("root");
    let mut child = Command::new("sleep")
        .arg("30")
        .stdin(Stdio::null())
        .spawn()
        .expect("start sleep");
    let theirs = root.join(format!("ts-scratch.{}.0.kquant-python", child.id()));
    std::fs::create_dir_all(&theirs).expect("their folder");
    std::fs::write(theirs.join("f"), b"x").expect("their file");
    // Not scratch folders at all, whatever their names suggest: never touched.
    let foreign = root.join(format!("kquant-python-{}", child.id()));
    std::fs::create_dir_all(&foreign).expect("foreign folder");
    let dead_pid_name = root.join("kquant-4000000000");
    std::fs::create_dir_all(&dead_pid_name).expect("foreign folder");

    for round in 0..200 {
        let _ours = Scratch::new(root.path(), "kquant");
        assert!(
            theirs.join("f").is_file(),
            "round {round}: a running process's file was swept"
        );
    }
    child.kill().expect("kill sleep");
    child.wait().expect("reap sleep");
    let _ours = Scratch::new(root.path(), "kquant");
    assert!(!theirs.exists(), "an ended process's folder is swept");
    assert!(
        foreign.is_dir() && dead_pid_name.is_dir(),
        "folders without the marker are never swept"
    );
    let name = theirs.file_name().and_then(|n| n.to_str()).expect("utf-8");
    assert_eq!(owner(name), Some(child.id()));
}
