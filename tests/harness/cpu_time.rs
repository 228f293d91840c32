//! CPU time at the kernel's resolution: a command run to its end with what it used
//! (`wait4`'s rusage, microseconds, every thread included: the one-core cost of a short
//! run, which `/proc/<pid>/stat`'s 10 ms ticks cannot time), and the calling thread's
//! own CPU clock.

use crate::process::spawn_captured;
use anyhow::bail;
use std::process::Command;
use std::time::{Duration, Instant};

/// What a finished command printed and the CPU it used.
#[derive(Debug, Clone)]
pub struct TimedRun {
    pub stdout: String,
    pub stderr: String,
    /// User + system CPU seconds of the process and all its threads.
    pub cpu_seconds: f64,
    pub wall: Duration,
}

/// Runs `cmd` to its end (it must exit 0) and returns its output and CPU time.
pub fn run_cpu_timed(cmd: &mut Command) -> anyhow::Result<TimedRun> {
    let what = format!("{cmd:?}");
    let started = Instant::now();
    let (child, output) = spawn_captured(cmd, &what)?;
    let text = |bytes: Vec<u8>| String::from_utf8_lossy(&bytes).into_owned();
    let stdout = text(output.stdout.join().unwrap_or_default());
    let stderr = text(output.stderr.join().unwrap_or_default());

    let pid = child.id() as libc::pid_t;
    let mut status: libc::c_int = 0;
    // SAFETY: an all-zero rusage is a valid value of this plain C struct.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `pid` is our own unreaped child (std has not waited on it), and `status`
    // and `usage` are valid for writes for the duration of the call.
    let reaped = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    if reaped != pid {
        bail!("wait4 on {what}: {}", std::io::Error::last_os_error());
    }
    // Dropping a Child neither waits nor kills, so the reaped pid is not touched again.
    drop(child);
    let wall = started.elapsed();
    if !libc::WIFEXITED(status) || libc::WEXITSTATUS(status) != 0 {
        bail!("{what} failed (wait status {status:#x})\n--- stderr ---\n{stderr}\n--- stdout ---\n{stdout}");
    }
    let seconds = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    Ok(TimedRun {
        stdout,
        stderr,
        cpu_seconds: seconds(usage.ru_utime) + seconds(usage.ru_stime),
        wall,
    })
}

/// CPU seconds the calling thread has used (`CLOCK_THREAD_CPUTIME_ID`).
pub fn thread_cpu_seconds() -> f64 {
    kpress_measure::thread_cpu_time().as_secs_f64()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_a_busy_child_and_reports_failure() {
        let run = run_cpu_timed(Command::new("sh").args([
            "-c",
            "i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done; echo done",
        ]))
        .unwrap();
        assert_eq!(run.stdout.trim(), "done");
        assert!(run.cpu_seconds > 0.0, "{run:?}");
        assert!(run_cpu_timed(Command::new("sh").args(["-c", "exit 3"])).is_err());
    }

    #[test]
    fn the_thread_clock_counts_work() {
        let started = thread_cpu_seconds();
        let mut x = 0u64;
        for i in 0..5_000_000u64 {
            x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(i));
        }
        assert!(thread_cpu_seconds() > started, "{x}");
    }
}
