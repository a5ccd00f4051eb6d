//! Scratch folders for tests: the one helper every test crate uses for files it writes.
//!
//! A folder is named `ts-scratch.<pid>.<seq>.<label>`: a fixed marker, the owning process,
//! a per-process sequence number and then the caller's label. The pid sits at a fixed place
//! behind the marker, so no label can make one folder's name read as another process's (the
//! bug this replaces: a sweep of `kquant-<pid>` read `kquant-python-<pid>` as the pid
//! `python-<pid>`, found no such process, and removed a live test's folder).
//!
//! Rules, so that no test removes what it did not create:
//! - a [`Scratch`] removes its own folder when dropped (a test's folder goes with the test),
//!   except while its thread panics: a failed test's files (logs, configs) stay for a look,
//!   their place printed, until a sweep after the process has ended;
//! - [`Scratch::keep`] hands the folder to the process (for statics, which are never
//!   dropped); it is removed by a later sweep once that process has ended;
//! - the sweep, run whenever a folder is made, removes only folders with the marker whose
//!   process no longer runs. Anything else under the root is never touched.

mod golden;

pub use golden::golden;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// What every scratch folder's name starts with.
const MARKER: &str = "ts-scratch.";

/// A folder that belongs to the test that made it; removed (with its contents) on drop,
/// unless the test is failing (then kept until its process has ended, and named on stderr).
/// Bind it to a variable that lives as long as its files are used: a temporary
/// (`scratch!("x").join("f")`) removes the folder at the end of its statement.
#[derive(Debug)]
#[must_use = "the folder is removed when this guard drops"]
pub struct Scratch {
    path: PathBuf,
}

/// A fresh scratch folder labelled `label` under cargo's temp dir for the calling test crate
/// (`CARGO_TARGET_TMPDIR`, which only integration tests have; unit tests use
/// [`Scratch::in_temp_dir`]).
#[macro_export]
macro_rules! scratch {
    ($label:expr) => {
        $crate::Scratch::new(env!("CARGO_TARGET_TMPDIR"), $label)
    };
}

impl Scratch {
    /// A new, empty folder under `root` (created if missing), unique to this call: two calls
    /// with the same label, in one process or in two, never share a folder. Folders that ended
    /// processes left under `root` are removed first.
    ///
    /// # Panics
    /// When the folder cannot be created: a test cannot go on without it.
    pub fn new(root: impl AsRef<Path>, label: &str) -> Scratch {
        static SEQ: AtomicU64 = AtomicU64::new(0);
        let root = root.as_ref();
        assert!(
            !label.contains(['/', '\\']) && !label.is_empty(),
            "a scratch label is one non-empty path component, not {label:?}"
        );
        sweep(root);
        let seq = SEQ.fetch_add(1, Ordering::Relaxed);
        let path = root.join(format!("{MARKER}{}.{seq}.{label}", std::process::id()));
        std::fs::create_dir_all(&path)
            .unwrap_or_else(|e| panic!("create scratch folder {}: {e}", path.display()));
        Scratch { path }
    }

    /// [`Scratch::new`] under the system's temp dir (for unit tests, which have no
    /// `CARGO_TARGET_TMPDIR`).
    pub fn in_temp_dir(label: &str) -> Scratch {
        Scratch::new(std::env::temp_dir(), label)
    }

    /// The folder.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Keeps the folder for the rest of the process (a static's, or one whose files outlive
    /// the test): not removed on drop, but by the first sweep after the process has ended.
    pub fn keep(self) -> PathBuf {
        let path = self.path.clone();
        std::mem::forget(self);
        path
    }
}

impl AsRef<Path> for Scratch {
    fn as_ref(&self) -> &Path {
        &self.path
    }
}

/// A scratch folder reads as its path (`dir.join(..)`, `&dir` where a `&Path` is wanted).
impl std::ops::Deref for Scratch {
    type Target = Path;

    fn deref(&self) -> &Path {
        &self.path
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!(
                "scratch folder of a failed test kept at {}",
                self.path.display()
            );
            return;
        }
        // Best effort: a file a child process still holds open must not fail the test.
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

/// The process that owns a folder named `name`, when `name` is a scratch folder's.
pub fn owner(name: &str) -> Option<u32> {
    let rest = name.strip_prefix(MARKER)?;
    let (pid, rest) = rest.split_once('.')?;
    let (seq, label) = rest.split_once('.')?;
    seq.parse::<u64>().ok()?;
    if label.is_empty() {
        return None;
    }
    pid.parse().ok()
}

/// Whether process `pid` still runs (Linux: it has a `/proc` entry; a zombie counts as
/// running, which only delays the sweep).
fn running(pid: u32) -> bool {
    Path::new("/proc").join(pid.to_string()).exists()
}

/// Removes the scratch folders under `root` whose process has ended; nothing else.
pub fn sweep(root: &Path) {
    let Ok(entries) = std::fs::read_dir(root) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name.to_str().and_then(owner) else {
            continue;
        };
        if pid != std::process::id() && !running(pid) {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

#[cfg(test)]
// In tests an unwrap is an assertion: a failure should stop the test loudly.
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_name_reads_back_its_owner_and_nothing_else_does() {
        let dir = Scratch::in_temp_dir("kquant-python-7");
        let name = dir.path().file_name().unwrap().to_str().unwrap().to_owned();
        assert_eq!(owner(&name), Some(std::process::id()));
        for other in [
            "kquant-123",
            "kquant-python-123",
            "ts-scratch.123",
            "ts-scratch.123.4",
            "ts-scratch.123.4.",
            "ts-scratch.python.4.x",
            "ts-scratch.123.x.y",
        ] {
            assert_eq!(owner(other), None, "{other}");
        }
        assert_eq!(owner("ts-scratch.123.4.a.b-5"), Some(123));
    }

    #[test]
    fn two_folders_with_one_label_are_two_and_each_goes_with_its_guard() {
        let a = Scratch::in_temp_dir("same");
        let b = Scratch::in_temp_dir("same");
        assert_ne!(a.path(), b.path());
        std::fs::write(a.join("f"), b"x").unwrap();
        let (pa, pb) = (a.path().to_owned(), b.path().to_owned());
        drop(a);
        assert!(!pa.exists());
        assert!(pb.is_dir());
        let kept = b.keep();
        assert!(kept.is_dir(), "a kept folder outlives its guard");
        std::fs::remove_dir_all(kept).unwrap();
    }

    #[test]
    fn a_failing_test_keeps_its_folder_for_a_look() {
        let failed = std::thread::spawn(|| {
            let dir = Scratch::in_temp_dir("failing");
            std::fs::write(dir.join("log"), b"why").unwrap();
            panic!("{}", dir.display());
        })
        .join()
        .expect_err("the thread panicked");
        let path = PathBuf::from(failed.downcast_ref::<String>().unwrap());
        assert_eq!(std::fs::read(path.join("log")).unwrap(), b"why");
        std::fs::remove_dir_all(path).unwrap();
    }
}
