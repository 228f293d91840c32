//! Child processes for tests: run-to-completion with a timeout and captured output,
//! long-running children killed on drop, graceful stop by SIGTERM, and a watchdog that
//! cleans up after a test process that exits without dropping its handles.

use anyhow::{bail, Context};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// What a finished command printed.
#[derive(Debug)]
pub struct Finished {
    pub status: ExitStatus,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
}

impl Finished {
    pub fn stdout_text(&self) -> String {
        String::from_utf8_lossy(&self.stdout).into_owned()
    }

    pub fn stderr_text(&self) -> String {
        String::from_utf8_lossy(&self.stderr).into_owned()
    }
}

fn describe(cmd: &Command) -> String {
    let mut text = cmd.get_program().to_string_lossy().into_owned();
    for arg in cmd.get_args() {
        text.push(' ');
        let arg = arg.to_string_lossy();
        // Long arguments (classpaths, file lists) cut short, on a char boundary.
        text.extend(arg.chars().take(200));
        if arg.chars().count() > 200 {
            text.push('…');
        }
    }
    text
}

fn tail(bytes: &[u8], max: usize) -> String {
    let start = bytes.len().saturating_sub(max);
    String::from_utf8_lossy(&bytes[start..]).into_owned()
}

/// Runs `cmd` to completion (stdin closed, output captured), killing it after `timeout`.
/// Does not judge the exit status; see [`run_ok`].
pub fn run(cmd: &mut Command, timeout: Duration) -> anyhow::Result<Finished> {
    let what = describe(cmd);
    let (mut child, output) = spawn_captured(cmd, &what)?;
    let deadline = Instant::now() + timeout;
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            let stderr = output.stderr.join().unwrap_or_default();
            bail!(
                "timed out after {timeout:?}: {what}\n--- stderr (tail) ---\n{}",
                tail(&stderr, 4000)
            );
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    Ok(Finished {
        status,
        stdout: output.stdout.join().unwrap_or_default(),
        stderr: output.stderr.join().unwrap_or_default(),
    })
}

/// A child's stdout and stderr, each read to its end on a thread, so a chatty child
/// never blocks on a full pipe.
pub(crate) struct OutputReaders {
    pub stdout: JoinHandle<Vec<u8>>,
    pub stderr: JoinHandle<Vec<u8>>,
}

/// Spawns `cmd` (described as `what`) with stdin closed and its output read by
/// [`OutputReaders`].
pub(crate) fn spawn_captured(
    cmd: &mut Command,
    what: &str,
) -> anyhow::Result<(Child, OutputReaders)> {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("spawning {what}"))?;
    let read_to_end = |mut pipe: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            let _ = pipe.read_to_end(&mut buf);
            buf
        })
    };
    let stdout = read_to_end(Box::new(child.stdout.take().expect("piped stdout")));
    let stderr = read_to_end(Box::new(child.stderr.take().expect("piped stderr")));
    Ok((child, OutputReaders { stdout, stderr }))
}

/// Runs `cmd` like [`run`] and fails, with its stderr and stdout tails, unless it exits 0.
pub fn run_ok(cmd: &mut Command, timeout: Duration) -> anyhow::Result<Finished> {
    let what = describe(cmd);
    let finished = run(cmd, timeout)?;
    if !finished.status.success() {
        bail!(
            "{what}\nexited with {}\n--- stderr (tail) ---\n{}\n--- stdout (tail) ---\n{}",
            finished.status,
            tail(&finished.stderr, 6000),
            tail(&finished.stdout, 2000)
        );
    }
    Ok(finished)
}

/// A long-running child, killed (SIGKILL) and reaped when dropped.
#[derive(Debug)]
pub struct ChildGuard {
    child: Option<Child>,
    what: String,
}

impl ChildGuard {
    pub fn spawn(cmd: &mut Command) -> anyhow::Result<ChildGuard> {
        let what = describe(cmd);
        let child = cmd.spawn().with_context(|| format!("spawning {what}"))?;
        Ok(ChildGuard {
            child: Some(child),
            what,
        })
    }

    pub fn id(&self) -> u32 {
        self.child.as_ref().map(Child::id).unwrap_or(0)
    }

    /// `Some(status)` once the child has exited.
    pub fn try_wait(&mut self) -> Option<ExitStatus> {
        self.child
            .as_mut()
            .and_then(|c| c.try_wait().ok().flatten())
    }

    /// Asks the child to stop (SIGTERM) and waits up to `timeout`, then kills it.
    /// Returns its exit status if it stopped on its own (None: killed, or already reaped).
    pub fn terminate(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let child = self.child.as_mut()?;
        if let Some(status) = child.try_wait().ok().flatten() {
            self.child = None;
            return Some(status);
        }
        let _ = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status();
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if let Some(status) = child.try_wait().ok().flatten() {
                self.child = None;
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        eprintln!(
            "{} did not stop within {timeout:?} of SIGTERM; killing it",
            self.what
        );
        self.kill();
        None
    }

    /// Kills (SIGKILL) and reaps the child.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A shell process that waits for this test process to exit and then kills every pid
/// listed in the files of `pid_dir` and, unless `KPRESS_KEEP_LOGS` is set, removes
/// `remove_dir`. It covers handles kept in a `static`, which Rust never drops.
#[derive(Debug)]
pub struct Watchdog {
    guard: ChildGuard,
}

impl Watchdog {
    pub fn start(pid_dir: &Path, remove_dir: Option<&Path>) -> anyhow::Result<Watchdog> {
        let keep = std::env::var_os("KPRESS_KEEP_LOGS").is_some();
        let remove = match remove_dir {
            Some(dir) if !keep => format!("rm -rf '{}'", dir.display()),
            _ => "true".to_string(),
        };
        let script = format!(
            "while kill -0 {parent} 2>/dev/null; do sleep 1; done; \
             for f in '{pids}'/*; do [ -f \"$f\" ] && kill -9 $(cat \"$f\") 2>/dev/null; done; {remove}",
            parent = std::process::id(),
            pids = pid_dir.display(),
        );
        let guard = ChildGuard::spawn(
            Command::new("sh")
                .arg("-c")
                .arg(script)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null()),
        )?;
        Ok(Watchdog { guard })
    }

    /// Stops the watchdog without letting it act (the owner cleans up itself).
    pub fn disarm(&mut self) {
        self.guard.kill();
    }
}

/// Records `pid` under `name` in a watchdog's pid directory.
pub fn record_pid(pid_dir: &Path, name: &str, pid: u32) -> std::io::Result<PathBuf> {
    let path = pid_dir.join(name);
    std::fs::write(&path, pid.to_string())?;
    Ok(path)
}
