//! What the binary's test files share.

// Each test file is its own crate and uses only some of these.
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Runs `kpress recompress --input INPUT --output OUTPUT ARGS...`.
pub(crate) fn recompress(input: &Path, output: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kpress"))
        .arg("recompress")
        .arg("--input")
        .arg(input)
        .arg("--output")
        .arg(output)
        .args(args)
        .output()
        .expect("running kpress")
}

/// Runs `kpress ARGS...` with `KPRESS_LOG` unset, so its log is the default.
pub(crate) fn kpress(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kpress"))
        .args(args)
        .env_remove("KPRESS_LOG")
        .output()
        .expect("run kpress")
}

pub(crate) fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// A loopback address nobody listens on: bound to find a free port, then closed.
pub(crate) fn free_addr() -> std::net::SocketAddr {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
}

/// Writes `contents` to `dir/name`; its path.
pub(crate) fn write(dir: &tempfile::TempDir, name: &str, contents: &str) -> String {
    let path = dir.path().join(name);
    std::fs::write(&path, contents).unwrap();
    path.to_str().unwrap().to_owned()
}

/// Writes `dir/kpress.toml`: kpress on a free port in front of a port nothing listens
/// on, `[limits] max_connections`, then `more` (TOML tables).
pub(crate) fn unreachable_policy(dir: &Path, max_connections: u64, more: &str) -> PathBuf {
    let (listen, nobody) = (free_addr(), free_addr());
    let path = dir.join("kpress.toml");
    std::fs::write(
        &path,
        format!(
            "[listener]\nbind = \"{listen}\"\nnode_port_base = {}\n\
             [upstream]\nbootstrap_servers = [\"{nobody}\"]\n\
             [limits]\nmax_connections = {max_connections}\n{more}",
            listen.port() + 100
        ),
    )
    .unwrap();
    path
}

/// Spawns `command` (a `kpress run`) with `KPRESS_LOG` and `RUST_LOG` unset, then
/// `env` set, and stderr piped: the child, and its stderr's lines as they come.
pub(crate) fn spawn_reading_stderr(
    command: &mut Command,
    env: &[(&str, &str)],
) -> (Child, mpsc::Receiver<String>) {
    command.env_remove("KPRESS_LOG").env_remove("RUST_LOG");
    for (name, value) in env {
        command.env(name, value);
    }
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting kpress");
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    (child, rx)
}

/// Lines until one for which `last` holds (included), or `timeout` passes.
pub(crate) fn lines_until(
    lines: &mpsc::Receiver<String>,
    timeout: Duration,
    last: impl Fn(&str) -> bool,
) -> Vec<String> {
    let deadline = Instant::now() + timeout;
    let mut seen = Vec::new();
    while let Some(left) = deadline.checked_duration_since(Instant::now()) {
        let Ok(line) = lines.recv_timeout(left) else {
            break;
        };
        let found = last(&line);
        seen.push(line);
        if found {
            break;
        }
    }
    seen
}
