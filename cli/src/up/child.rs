//! Starting one engine replica as a child process that dies with `tokenscale up`, even when
//! `up` itself is killed (Linux: `PR_SET_PDEATHSIG`), its output in a log file of its own.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::Path;
use std::process::Stdio;

use tokio::process::{Child, Command};

/// Spawns `engine ARGS --host 127.0.0.1 --port PORT`, its stdout and stderr appended to `log`.
pub fn spawn_engine(
    engine_bin: &Path,
    args: &[String],
    port: u16,
    log: &Path,
) -> std::io::Result<Child> {
    let out = File::options().create(true).append(true).open(log)?;
    let err = out.try_clone()?;
    let mut command = Command::new(engine_bin);
    // The listen flags last: every engine's parser takes them after its own arguments.
    command
        .args(args)
        .args(["--host", "127.0.0.1", "--port", &port.to_string()])
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .kill_on_drop(true);
    #[cfg(target_os = "linux")]
    {
        // SAFETY: the closure runs in the forked child before exec and only calls prctl and
        // getppid, both async-signal-safe; it touches no memory shared with the parent.
        unsafe {
            command.pre_exec(|| {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                // The parent may have died between fork and prctl: then no signal would come.
                if libc::getppid() == 1 {
                    return Err(std::io::Error::other("parent exited during spawn"));
                }
                Ok(())
            });
        }
    }
    command.spawn()
}

/// A free port on 127.0.0.1 right now (the engine binds it a moment later).
pub fn free_port() -> std::io::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// Sends `signal` to the child; `false` if the process is gone.
pub fn signal(child: &Child, signal: libc::c_int) -> bool {
    let Some(pid) = child.id() else { return false };
    let Ok(pid) = i32::try_from(pid) else {
        return false;
    };
    // SAFETY: kill(2) with a pid of our own child (not yet reaped) and a valid signal number.
    unsafe { libc::kill(pid, signal) == 0 }
}

/// Sends SIGTERM (the engine drains and exits); `false` if the process is gone.
pub fn terminate(child: &Child) -> bool {
    signal(child, libc::SIGTERM)
}

/// The last `lines` non-empty lines of the file at `path` (at most its last 16 KiB read),
/// each cut to 240 characters: what a replica said before it died.
pub fn tail(path: &Path, lines: usize) -> Vec<String> {
    const WINDOW: u64 = 16 * 1024;
    let read = || -> std::io::Result<String> {
        let mut file = File::open(path)?;
        let size = file.metadata()?.len();
        file.seek(SeekFrom::Start(size.saturating_sub(WINDOW)))?;
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes)?;
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    };
    let text = read().unwrap_or_default();
    let mut last: Vec<String> = text
        .lines()
        .map(|l| strip_ansi(l.trim_end()))
        .filter(|l| !l.trim().is_empty())
        .rev()
        .take(lines)
        .map(|l| l.chars().take(240).collect())
        .collect();
    last.reverse();
    last
}

/// `line` without terminal colour codes (the engine's log colours them on a terminal).
fn strip_ansi(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            // CSI: ESC [ parameters final-byte.
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn the_tail_is_the_last_non_empty_lines_without_colours() {
        let dir = tokenscale_scratch::Scratch::in_temp_dir("tail");
        let path = dir.join("r.log");
        std::fs::write(&path, "one\ntwo\n\n\u{1b}[31mError\u{1b}[0m: three\n").unwrap();
        assert_eq!(tail(&path, 2), ["two", "Error: three"]);
        assert_eq!(tail(&dir.join("missing.log"), 3), Vec::<String>::new());
    }
}
