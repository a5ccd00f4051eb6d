//! What the benchmark reads from `/proc`: CPU time of processes and of cores, and memory.

use std::time::Duration;

use crate::Result;

/// Clock ticks per second of /proc's CPU times.
pub fn ticks_per_s() -> f64 {
    100.0
}

/// utime + stime of `pids`, in clock ticks.
pub fn cpu_ticks(pids: &[u32]) -> u64 {
    pids.iter()
        .filter_map(|pid| std::fs::read_to_string(format!("/proc/{pid}/stat")).ok())
        .filter_map(|stat| {
            // Fields after the `(comm)`: state is field 3; utime and stime are 14 and 15.
            let rest = stat.rsplit_once(')')?.1;
            let fields: Vec<&str> = rest.split_whitespace().collect();
            Some(fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?)
        })
        .sum()
}

/// Busy and total CPU time of the whole machine or of one core, from `/proc/stat`: the load
/// generator, the upstream and the proxy share a small machine, so a latency figure means
/// little without how busy the cores were.
pub struct CoreTicks {
    line: String,
    busy: u64,
    total: u64,
}

impl CoreTicks {
    /// The whole machine (`None`) or core `cpu`, now.
    pub fn now(cpu: Option<usize>) -> Self {
        let line = cpu.map_or_else(|| "cpu ".to_string(), |c| format!("cpu{c} "));
        Self::read(line)
    }

    fn read(line: String) -> Self {
        let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
        let ticks: Vec<u64> = stat
            .lines()
            .find(|l| l.starts_with(&line))
            .unwrap_or_default()
            .split_whitespace()
            .skip(1)
            .filter_map(|t| t.parse().ok())
            .collect();
        // user nice system idle iowait irq softirq steal ...: idle and iowait are not busy.
        let total: u64 = ticks.iter().take(8).sum();
        let idle = ticks.get(3).copied().unwrap_or(0) + ticks.get(4).copied().unwrap_or(0);
        Self {
            line,
            busy: total - idle,
            total,
        }
    }

    /// The fraction of the time since `self` that was busy.
    pub fn busy_since(&self) -> f64 {
        let now = Self::read(self.line.clone());
        (now.busy - self.busy) as f64 / (now.total - self.total).max(1) as f64
    }
}

/// `pid` and its direct children (nginx's master and workers).
pub fn with_children(pid: u32) -> Vec<u32> {
    std::thread::sleep(Duration::from_millis(300));
    let mut pids = vec![pid];
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(child) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{child}/stat")) else {
            continue;
        };
        let ppid = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1)?.parse::<u32>().ok());
        if ppid == Some(pid) {
            pids.push(child);
        }
    }
    pids
}

/// Resident set size of a process, from /proc, in KiB.
pub fn rss_kib(pid: u32) -> Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let line = status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .ok_or("no VmRSS")?;
    Ok(line
        .split_whitespace()
        .nth(1)
        .ok_or("VmRSS value")?
        .parse()?)
}
