//! Starting one engine replica as a child process that dies with `tokenscale up`, even when
//! `up` itself is killed (Linux: `PR_SET_PDEATHSIG`).

use std::path::Path;
use std::process::Stdio;

use tokio::process::{Child, Command};

/// Spawns `engine serve ARGS` on `port`, its output discarded (the gateway and `/metrics`
/// say how it does).
pub fn spawn_engine(engine_bin: &Path, args: &[String], port: u16) -> std::io::Result<Child> {
    let mut command = Command::new(engine_bin);
    command
        .arg("serve")
        .args(["--host", "127.0.0.1", "--port", &port.to_string()])
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
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

/// Sends SIGTERM (the engine drains and exits); `false` if the process is gone.
pub fn terminate(child: &Child) -> bool {
    let Some(pid) = child.id() else { return false };
    let Ok(pid) = i32::try_from(pid) else {
        return false;
    };
    // SAFETY: kill(2) with a pid of our own child and a valid signal number.
    unsafe { libc::kill(pid, libc::SIGTERM) == 0 }
}
