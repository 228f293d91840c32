//! A fleet of `kpress run` processes on one host, all started from ONE policy file
//! that shares the Kafka ports (`[listener] reuse_port = true`), as an operator runs
//! kpress: processes stopped with SIGTERM and started again on the same ports. The file
//! has no `[admin]` unless a test's rules add one: one admin port has one holder, and a
//! process waiting for it stops after 120 s (processes that run side by side for longer
//! each need a file of their own naming their own admin port).

use crate::cluster::KafkaCluster;
use crate::kpress::kpress_binary;
use crate::ports::{free_port, free_port_range};
use crate::process::{record_pid, ChildGuard, Watchdog};
use anyhow::{bail, ensure};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// What a process logs once its bootstrap listener (and, with brokers reachable, every
/// node's listener) is bound.
const LISTENING: &str = "kpress bootstrap listener ready";

/// The policy file every process of the fleet runs with, and the addresses it names.
#[derive(Debug, Clone)]
pub struct FleetPolicy {
    pub path: PathBuf,
    /// The shared bootstrap address.
    pub listen: SocketAddr,
    /// `[listener] node_port_base`.
    pub node_port_base: u16,
}

impl FleetPolicy {
    /// Writes `dir/kpress.toml`: ports mode in front of every node of `cluster` on
    /// shared ports, and `rules` (`[defaults]`, `[[topics]]`, `[limits]`, `[admin]` …).
    pub fn write(dir: &Path, cluster: &KafkaCluster, rules: &str) -> anyhow::Result<FleetPolicy> {
        let listen = SocketAddr::from(([127, 0, 0, 1], free_port()));
        let highest = cluster.node_ids().into_iter().max().unwrap_or(1);
        let node_port_base = free_port_range(u16::try_from(highest)?);
        let servers: Vec<String> = cluster
            .node_addresses()
            .iter()
            .map(|a| format!("\"{a}\""))
            .collect();
        let text = format!(
            "[listener]\nbind = \"{listen}\"\nadvertised_host = \"127.0.0.1\"\n\
             node_port_base = {node_port_base}\nreuse_port = true\n\
             [upstream]\nbootstrap_servers = [{}]\n{rules}\n",
            servers.join(", ")
        );
        let path = dir.join("kpress.toml");
        std::fs::write(&path, text)?;
        Ok(FleetPolicy {
            path,
            listen,
            node_port_base,
        })
    }

    /// The bootstrap string for clients.
    pub fn bootstrap(&self) -> String {
        self.listen.to_string()
    }

    /// The shared port of node `id`.
    pub fn node(&self, id: u32) -> anyhow::Result<SocketAddr> {
        let port = self.node_port_base + u16::try_from(id)?;
        Ok(SocketAddr::from(([127, 0, 0, 1], port)))
    }
}

/// One `kpress run --config POLICY` of the fleet, killed on drop; its log in a
/// directory of its own.
#[derive(Debug)]
pub struct FleetMember {
    name: String,
    process: ChildGuard,
    watchdog: Watchdog,
    dir: Option<tempfile::TempDir>,
    log_file: PathBuf,
}

impl FleetMember {
    /// Starts a process named `name` (for logs) with `policy` and waits until its
    /// listeners are bound (the shared ports accept whether or not this process serves
    /// them yet, so its log says when).
    pub fn start(name: &str, policy: &FleetPolicy) -> anyhow::Result<FleetMember> {
        let dir = tempfile::Builder::new().prefix("kpress-fleet-").tempdir()?;
        let log_file = dir.path().join("kpress.log");
        let log = std::fs::File::create(&log_file)?;
        let pid_dir = dir.path().join("pids");
        std::fs::create_dir_all(&pid_dir)?;
        let watchdog = Watchdog::start(&pid_dir, Some(dir.path()))?;
        let process = ChildGuard::spawn(
            Command::new(kpress_binary())
                .arg("run")
                .arg("--config")
                .arg(&policy.path)
                .env("KPRESS_LOG", "info")
                .env("NO_COLOR", "1")
                .stdin(Stdio::null())
                .stdout(log.try_clone()?)
                .stderr(log),
        )?;
        record_pid(&pid_dir, "kpress", process.id())?;
        let mut member = FleetMember {
            name: name.to_string(),
            process,
            watchdog,
            dir: Some(dir),
            log_file,
        };
        member.wait_for_log(LISTENING, Duration::from_secs(30))?;
        Ok(member)
    }

    /// The name it was started with.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Its log so far, headed by its name and path.
    pub fn log(&self) -> String {
        format!(
            "--- {} kpress log {} ---\n{}",
            self.name,
            self.log_file.display(),
            std::fs::read_to_string(&self.log_file).unwrap_or_default()
        )
    }

    /// Waits until the log says `line`; fails if the process exits first.
    pub fn wait_for_log(&mut self, line: &str, timeout: Duration) -> anyhow::Result<()> {
        let deadline = Instant::now() + timeout;
        while !self.log().contains(line) {
            if let Some(status) = self.process.try_wait() {
                bail!("the {} kpress exited ({status})\n{}", self.name, self.log());
            }
            ensure!(
                Instant::now() < deadline,
                "the {} kpress did not log {line:?} within {timeout:?}\n{}",
                self.name,
                self.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(())
    }

    /// Fails if the process has exited.
    pub fn check_running(&mut self) -> anyhow::Result<()> {
        match self.process.try_wait() {
            Some(status) => bail!("the {} kpress exited ({status})\n{}", self.name, self.log()),
            None => Ok(()),
        }
    }

    /// Client connections it has accepted, on any listener (one log line each).
    pub fn accepted(&self) -> usize {
        self.log().matches("connection accepted").count()
    }

    /// SIGTERM: the process must drain and exit 0 within `timeout` without waiting
    /// out its shutdown grace. Returns its log.
    pub fn stop(mut self, timeout: Duration) -> anyhow::Result<String> {
        let status = self.process.terminate(timeout);
        let log = self.log();
        ensure!(
            status.is_some_and(|s| s.success()),
            "the {} kpress did not exit 0 within {timeout:?} of SIGTERM: {status:?}\n{log}",
            self.name
        );
        ensure!(
            !log.contains("shutdown grace over"),
            "the {} kpress waited out its grace instead of draining\n{log}",
            self.name
        );
        Ok(log)
    }
}

impl Drop for FleetMember {
    fn drop(&mut self) {
        self.process.kill();
        self.watchdog.disarm();
        if std::thread::panicking() || std::env::var_os("KPRESS_KEEP_LOGS").is_some() {
            if let Some(dir) = self.dir.take() {
                eprintln!(
                    "{} kpress files kept in {}",
                    self.name,
                    dir.keep().display()
                );
            }
        }
    }
}
