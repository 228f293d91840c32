//! The built `kpress` binary: `kpress recompress` runs with their printed summary, and
//! `kpress run` proxies started with a temporary config and killed on drop.

use crate::cluster::KafkaCluster;
use crate::compression::Compression;
use crate::paths;
use crate::ports::{free_port, free_port_range, wait_for_port};
use crate::process::{record_pid, run_ok, ChildGuard, Watchdog};
use anyhow::{bail, Context};
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

/// The `kpress` binary of this workspace: `$KPRESS_BIN` if set, else built once per
/// test process with `cargo build -p kpress` into the profile this test was built in.
pub fn kpress_binary() -> &'static Path {
    static BINARY: OnceLock<PathBuf> = OnceLock::new();
    BINARY.get_or_init(|| {
        if let Some(bin) = std::env::var_os("KPRESS_BIN") {
            return PathBuf::from(bin);
        }
        let profile_dir = paths::profile_dir();
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let mut cmd = Command::new(cargo);
        cmd.current_dir(paths::workspace_root())
            .args(["build", "--quiet", "-p", "kpress", "--bin", "kpress"]);
        if profile_dir.file_name().is_some_and(|n| n == "release") {
            cmd.arg("--release");
        }
        if let Err(err) = run_ok(&mut cmd, Duration::from_secs(1800)) {
            panic!("building kpress failed: {err:#}");
        }
        let binary = profile_dir.join("kpress");
        assert!(binary.exists(), "no kpress binary at {}", binary.display());
        binary
    })
}

/// What `kpress recompress` printed.
#[derive(Debug, Clone)]
pub struct RecompressSummary {
    pub text: String,
    pub batches_rewritten: u64,
    pub batches_passed: u64,
    /// Pass-throughs by reason (`not_smaller`, `same_codec`, …).
    pub passed_by_reason: BTreeMap<String, u64>,
    pub bytes_in: u64,
    pub bytes_out: u64,
}

impl RecompressSummary {
    /// How many batches passed through for `reason` (0 if not listed).
    pub fn passed(&self, reason: &str) -> u64 {
        self.passed_by_reason.get(reason).copied().unwrap_or(0)
    }

    fn parse(text: &str) -> anyhow::Result<RecompressSummary> {
        let mut summary = RecompressSummary {
            text: text.to_string(),
            batches_rewritten: 0,
            batches_passed: 0,
            passed_by_reason: BTreeMap::new(),
            bytes_in: 0,
            bytes_out: 0,
        };
        let mut seen = 0;
        for line in text.lines() {
            let Some((key, value)) = line.split_once(':') else {
                continue;
            };
            let value = value.trim();
            let number = || -> anyhow::Result<u64> {
                value
                    .parse()
                    .with_context(|| format!("kpress summary: bad number in {line:?}"))
            };
            if let Some(reason) = key.strip_prefix("  ") {
                summary
                    .passed_by_reason
                    .insert(reason.trim().to_string(), number()?);
                continue;
            }
            match key {
                "batches rewritten" => (summary.batches_rewritten, seen) = (number()?, seen + 1),
                "batches passed through" => (summary.batches_passed, seen) = (number()?, seen + 1),
                "bytes in" => (summary.bytes_in, seen) = (number()?, seen + 1),
                "bytes out" => (summary.bytes_out, seen) = (number()?, seen + 1),
                _ => {}
            }
        }
        if seen < 4 {
            bail!("kpress recompress printed no full summary:\n{text}");
        }
        Ok(summary)
    }
}

/// Options of one `kpress recompress` run beyond input, output and codec.
#[derive(Debug, Clone, Default)]
pub struct RecompressOptions {
    /// `--property k=v` codec options.
    pub properties: Vec<String>,
    /// `--recompress always` instead of the default `codec-differs`.
    pub always: bool,
    pub allow_growth: bool,
}

/// Runs `kpress recompress` on `input` into `output` with target `compression`.
pub fn recompress(
    input: &Path,
    output: &Path,
    compression: Compression,
    options: &RecompressOptions,
) -> anyhow::Result<RecompressSummary> {
    recompress_to(input, output, compression.name(), options)
}

/// [`recompress`] with a target by name (also `producer`).
pub fn recompress_to(
    input: &Path,
    output: &Path,
    target: &str,
    options: &RecompressOptions,
) -> anyhow::Result<RecompressSummary> {
    let mut cmd = Command::new(kpress_binary());
    cmd.arg("recompress")
        .arg("--input")
        .arg(input)
        .arg("--output")
        .arg(output)
        .args(["--compression", target]);
    for property in &options.properties {
        cmd.args(["--property", property]);
    }
    if options.always {
        cmd.args(["--recompress", "always"]);
    }
    if options.allow_growth {
        cmd.arg("--allow-growth");
    }
    let finished = run_ok(&mut cmd, Duration::from_secs(600))?;
    RecompressSummary::parse(&finished.stdout_text())
}

/// Policy rules under which each `<codec>.*` topic stores `<codec>` whether or not it
/// is smaller (`allow_growth`), and every other topic keeps the producer's codec: a
/// batch left in its source codec can then only be one kpress chose not to rewrite.
pub fn storing_rules(codecs: &[&str]) -> String {
    let mut rules = String::from("[defaults]\ncompression.type = \"producer\"\n");
    for codec in codecs {
        rules.push_str(&format!(
            "\n[[topics]]\nmatch = \"{codec}.*\"\ncompression.type = \"{codec}\"\nallow_growth = true\n"
        ));
    }
    rules
}

/// A running `kpress run` proxy, killed on drop; its config and log live in a temp dir.
#[derive(Debug)]
pub struct KpressProxy {
    process: ChildGuard,
    watchdog: Watchdog,
    dir: Option<tempfile::TempDir>,
    listen: SocketAddr,
    metrics: Option<SocketAddr>,
    node_port_base: Option<u16>,
    log_file: PathBuf,
}

impl KpressProxy {
    /// Starts kpress in front of `cluster` on free loopback ports (listener, one port
    /// per broker node, Prometheus endpoint) with the policy `rules` (TOML: `[defaults]`
    /// and `[[topics]]` sections, optionally `[limits]`).
    pub fn start_in_front_of(cluster: &KafkaCluster, rules: &str) -> anyhow::Result<KpressProxy> {
        KpressProxy::start_in_front_of_listeners(
            &cluster.node_addresses(),
            &cluster.node_ids(),
            rules,
        )
    }

    /// [`start_in_front_of`](Self::start_in_front_of) with the brokers' `upstream`
    /// listener addresses given (e.g. their SASL listeners), for nodes `node_ids`.
    pub fn start_in_front_of_listeners(
        upstream: &[SocketAddr],
        node_ids: &[u32],
        rules: &str,
    ) -> anyhow::Result<KpressProxy> {
        let listen = SocketAddr::from(([127, 0, 0, 1], free_port()));
        let metrics = SocketAddr::from(([127, 0, 0, 1], free_port()));
        let highest = node_ids.iter().copied().max().unwrap_or(1);
        let node_port_base = free_port_range(u16::try_from(highest)?);
        let upstream = upstream
            .iter()
            .map(|a| format!("\"{a}\""))
            .collect::<Vec<_>>()
            .join(", ");
        let config = format!(
            "[listener]\n\
             bind = \"{listen}\"\n\
             advertised_host = \"127.0.0.1\"\n\
             node_port_base = {node_port_base}\n\
             [upstream]\n\
             bootstrap_servers = [{upstream}]\n\
             [metrics]\n\
             bind = \"{metrics}\"\n\
             {rules}\n"
        );
        let mut proxy = KpressProxy::start(&config, listen)?;
        proxy.metrics = Some(metrics);
        proxy.node_port_base = Some(node_port_base);
        Ok(proxy)
    }

    /// The Prometheus text the proxy's metrics endpoint serves.
    pub fn scrape_metrics(&self) -> anyhow::Result<String> {
        let addr = self.metrics.context("this proxy has no metrics endpoint")?;
        let mut stream = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(5))?;
        stream.set_read_timeout(Some(Duration::from_secs(10)))?;
        write!(stream, "GET /metrics HTTP/1.0\r\nHost: {addr}\r\n\r\n")?;
        let mut response = String::new();
        stream.read_to_string(&mut response)?;
        let body = response
            .split_once("\r\n\r\n")
            .map(|(_, body)| body.to_string())
            .context("no HTTP body from the metrics endpoint")?;
        Ok(body)
    }

    /// The sum of a counter's samples whose labels contain every `label="value"` given.
    pub fn counter(&self, name: &str, labels: &[(&str, &str)]) -> anyhow::Result<f64> {
        let text = self.scrape_metrics()?;
        Ok(text
            .lines()
            .filter(|l| {
                l.strip_prefix(name)
                    .is_some_and(|rest| rest.starts_with('{') || rest.starts_with(' '))
            })
            .filter(|l| {
                labels
                    .iter()
                    .all(|(k, v)| l.contains(&format!("{k}=\"{v}\"")))
            })
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum())
    }

    /// Writes `config` (TOML) to a temp file, starts `kpress run --config FILE` and waits
    /// until `listen` (which the config must name) accepts connections.
    pub fn start(config: &str, listen: SocketAddr) -> anyhow::Result<KpressProxy> {
        let dir = tempfile::Builder::new().prefix("kpress-proxy-").tempdir()?;
        let config_path = dir.path().join("kpress.toml");
        std::fs::write(&config_path, config)?;
        let log_file = dir.path().join("kpress.log");
        let log = std::fs::File::create(&log_file)?;
        let pid_dir = dir.path().join("pids");
        std::fs::create_dir_all(&pid_dir)?;
        let watchdog = Watchdog::start(&pid_dir, Some(dir.path()))?;
        let mut cmd = Command::new(kpress_binary());
        cmd.arg("run")
            .arg("--config")
            .arg(&config_path)
            // No terminal: plain log lines in the file.
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log);
        let process = ChildGuard::spawn(&mut cmd)?;
        record_pid(&pid_dir, "kpress", process.id())?;
        let mut proxy = KpressProxy {
            process,
            watchdog,
            dir: Some(dir),
            listen,
            metrics: None,
            node_port_base: None,
            log_file,
        };
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(status) = proxy.process.try_wait() {
                bail!("kpress run exited at startup ({status})\n{}", proxy.log());
            }
            if wait_for_port(listen, Duration::from_millis(200)) {
                break;
            }
            if std::time::Instant::now() > deadline {
                bail!(
                    "kpress run did not listen on {listen} within 30 s\n{}",
                    proxy.log()
                );
            }
        }
        Ok(proxy)
    }

    /// The address clients connect to.
    pub fn listen(&self) -> SocketAddr {
        self.listen
    }

    /// The port base of [`start_in_front_of`](Self::start_in_front_of): broker node N
    /// is served on `base + N`.
    pub fn node_port_base(&self) -> Option<u16> {
        self.node_port_base
    }

    /// The bootstrap string for clients going through the proxy.
    pub fn bootstrap(&self) -> String {
        self.listen.to_string()
    }

    /// The proxy's log so far.
    pub fn log(&self) -> String {
        format!(
            "--- kpress log {} ---\n{}",
            self.log_file.display(),
            std::fs::read_to_string(&self.log_file).unwrap_or_default()
        )
    }

    /// Where the proxy logs.
    pub fn log_file(&self) -> &Path {
        &self.log_file
    }

    /// Stops the proxy with SIGTERM; returns its exit status if it exited within `timeout`.
    pub fn terminate(&mut self, timeout: Duration) -> Option<std::process::ExitStatus> {
        self.process.terminate(timeout)
    }
}

impl Drop for KpressProxy {
    fn drop(&mut self) {
        self.process.kill();
        self.watchdog.disarm();
        if std::thread::panicking() || std::env::var_os("KPRESS_KEEP_LOGS").is_some() {
            if let Some(dir) = self.dir.take() {
                let path = dir.keep();
                eprintln!("kpress proxy files kept in {}", path.display());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_recompress_summary() {
        let text = "in -> out (target zstd, recompress codec-differs)\n\
                    batches rewritten: 3\n\
                    batches passed through: 2\n  not_smaller: 1\n  same_codec: 1\n\
                    bytes in: 100\nbytes out: 80\nratio: 0.8000\nelapsed: 0.001 s\n";
        let summary = RecompressSummary::parse(text).unwrap();
        assert_eq!(summary.batches_rewritten, 3);
        assert_eq!(summary.batches_passed, 2);
        assert_eq!(summary.passed("not_smaller"), 1);
        assert_eq!(summary.passed("crc_mismatch"), 0);
        assert_eq!((summary.bytes_in, summary.bytes_out), (100, 80));
        assert!(RecompressSummary::parse("nothing").is_err());
    }
}
