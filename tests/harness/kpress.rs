//! The built `kpress` binary: `kpress recompress` runs with their printed summary, and
//! `kpress run` proxies started with a temporary config and killed on drop.

use crate::cluster::KafkaCluster;
use crate::compression::Compression;
use crate::paths;
use crate::ports::{free_port_range, wait_for_port};
use crate::process::{record_pid, run_ok, ChildGuard, Watchdog};
use crate::tls::{CertFiles, SaslUser};
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
    /// Of the rewritten, those larger than the original.
    pub batches_grown: u64,
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
            batches_grown: 0,
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
                "batches grown" => summary.batches_grown = number()?,
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
    /// `--only-if-smaller`: keep a batch whose rewrite would not be smaller.
    pub only_if_smaller: bool,
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
    let finished = run_ok(
        &mut recompress_command(input, output, target, options),
        Duration::from_secs(600),
    )?;
    RecompressSummary::parse(&finished.stdout_text())
}

/// The `kpress recompress` command [`recompress_to`] runs, for callers that run it
/// their own way (timing its CPU, say).
pub fn recompress_command(
    input: &Path,
    output: &Path,
    target: &str,
    options: &RecompressOptions,
) -> Command {
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
    if options.only_if_smaller {
        cmd.arg("--only-if-smaller");
    }
    cmd
}

/// Policy rules under which each `<codec>.*` topic stores `<codec>` whether or not it
/// is smaller (kpress's default), and every other topic keeps the producer's codec: a
/// batch left in its source codec can then only be one kpress chose not to rewrite.
pub fn storing_rules(codecs: &[&str]) -> String {
    let mut rules = String::from("[defaults]\ncompression.type = \"producer\"\n");
    for codec in codecs {
        rules.push_str(&format!(
            "\n[[topics]]\nmatch = \"{codec}.*\"\ncompression.type = \"{codec}\"\n"
        ));
    }
    rules
}

/// What [`KpressProxy::start_with`] starts: the upstream, how clients reach the
/// nodes, TLS and SASL settings, and the policy rules. `Default` is ports mode with
/// nothing set; [`KpressSetup::in_front_of`] fills the upstream and rules.
#[derive(Debug, Clone, Default)]
pub struct KpressSetup {
    /// `[upstream] bootstrap_servers` (`host:port`).
    pub upstream: Vec<String>,
    /// The brokers' node ids: in ports mode node N is served on `node_port_base + N`.
    pub node_ids: Vec<u32>,
    /// Ports mode's `advertised_host` (default `127.0.0.1`).
    pub advertised_host: Option<String>,
    /// Single-port SNI mode instead of ports mode.
    pub sni: Option<SniListener>,
    /// More `[listener]` lines, e.g. `rewrite_before_auth = false`.
    pub listener_keys: Vec<String>,
    /// `[listener.tls]`: TLS from clients.
    pub listener_tls: Option<ListenerTlsKeys>,
    /// More `[upstream]` lines.
    pub upstream_keys: Vec<String>,
    /// `[upstream.tls]`: TLS to the brokers.
    pub upstream_tls: Option<UpstreamTlsKeys>,
    /// `[upstream.sasl]`: kpress's own credentials for its side connections.
    pub upstream_sasl: Option<UpstreamSaslKeys>,
    /// The policy: `[defaults]` and `[[topics]]` sections, optionally `[limits]`.
    pub rules: String,
    /// Leave `[limits] max_rewrite_wait_ms` as the rules have it: measurements time
    /// what an operator gets, and may run builds that predate the key. Otherwise the
    /// rules wait for rewrites (see [`patient_rewrites`]).
    pub measuring: bool,
}

impl KpressSetup {
    /// Ports mode in front of the brokers' `upstream` listener addresses, nodes
    /// `node_ids`, with `rules`.
    pub fn in_front_of(upstream: &[SocketAddr], node_ids: &[u32], rules: &str) -> KpressSetup {
        KpressSetup {
            upstream: upstream.iter().map(SocketAddr::to_string).collect(),
            node_ids: node_ids.to_vec(),
            rules: rules.to_string(),
            ..KpressSetup::default()
        }
    }

    /// This setup for a measurement (see [`measuring`](Self::measuring)).
    pub fn measuring(self) -> KpressSetup {
        KpressSetup {
            measuring: true,
            ..self
        }
    }

    /// The config file's text and kpress's extra environment; a password file goes
    /// into `dir`. `node_port_base` is ports mode's (None in SNI mode).
    fn render(
        &self,
        listen: SocketAddr,
        node_port_base: Option<u16>,
        metrics: SocketAddr,
        dir: &Path,
    ) -> anyhow::Result<(String, Vec<(String, String)>)> {
        let mut config = format!("[listener]\nbind = \"{listen}\"\n");
        match (&self.sni, node_port_base) {
            (None, Some(base)) => {
                let host = self.advertised_host.as_deref().unwrap_or("127.0.0.1");
                config.push_str(&format!(
                    "advertised_host = {}\nnode_port_base = {base}\n",
                    toml_string(host)
                ));
            }
            (Some(sni), None) => {
                config.push_str(&format!(
                    "mode = \"sni\"\nadvertised_host_pattern = {}\n",
                    toml_string(&sni.advertised_host_pattern)
                ));
                if let Some(host) = &sni.bootstrap_host {
                    config.push_str(&format!("bootstrap_host = {}\n", toml_string(host)));
                }
            }
            _ => bail!("a node port base is for ports mode alone"),
        }
        push_lines(&mut config, &self.listener_keys);
        if let Some(tls) = &self.listener_tls {
            config.push_str(&tls.table());
        }
        let servers: Vec<String> = self.upstream.iter().map(|s| toml_string(s)).collect();
        config.push_str(&format!(
            "[upstream]\nbootstrap_servers = [{}]\n",
            servers.join(", ")
        ));
        push_lines(&mut config, &self.upstream_keys);
        if let Some(tls) = &self.upstream_tls {
            config.push_str(&tls.table());
        }
        let mut env = Vec::new();
        if let Some(sasl) = &self.upstream_sasl {
            config.push_str(&format!(
                "[upstream.sasl]\nmechanism = \"{}\"\nusername = {}\n",
                sasl.user.mechanism.name(),
                toml_string(&sasl.user.name)
            ));
            match &sasl.password_env {
                Some(var) => {
                    config.push_str(&format!("password_env = {}\n", toml_string(var)));
                    env.push((var.clone(), sasl.user.password.clone()));
                }
                None => {
                    let file = dir.join("upstream-sasl-password");
                    std::fs::write(&file, &sasl.user.password)?;
                    config.push_str(&format!("password_file = {}\n", toml_path(&file)));
                }
            }
        }
        config.push_str(&format!(
            "[admin]\nbind = \"{metrics}\"\n{}\n",
            if self.measuring {
                self.rules.clone()
            } else {
                patient_rewrites(&self.rules)
            }
        ));
        Ok((config, env))
    }
}

/// `rules` with `[limits] max_rewrite_wait_ms = 30000` unless they set it. Tests of
/// rewrites expect every batch rewritten, and a debug kpress beside other tests on two
/// cores can keep a request waiting past the default (500 ms), which sends it on as it
/// came. Tests of overload set their own.
fn patient_rewrites(rules: &str) -> String {
    const WAIT: &str = "max_rewrite_wait_ms = 30000\n";
    if rules.contains("max_rewrite_wait_ms") {
        rules.to_string()
    } else if rules.contains("[limits]\n") {
        rules.replacen("[limits]\n", &format!("[limits]\n{WAIT}"), 1)
    } else {
        format!("{rules}\n[limits]\n{WAIT}")
    }
}

/// `[listener] mode = "sni"`: every node on the bootstrap port, told apart by SNI.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SniListener {
    /// `advertised_host_pattern`, e.g. `broker-{node}.kafka.test`.
    pub advertised_host_pattern: String,
    /// `bootstrap_host`, e.g. `bootstrap.kafka.test`; clients then bootstrap from it.
    pub bootstrap_host: Option<String>,
}

/// The keys of `[listener.tls]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListenerTlsKeys {
    /// `cert`: the certificate chain (PEM).
    pub cert: PathBuf,
    /// `key`: its private key (PEM).
    pub key: PathBuf,
    /// `client_ca`: clients must present a certificate it issued.
    pub client_ca: Option<PathBuf>,
    /// `client_auth`: `"required"` or `"requested"`.
    pub client_auth: Option<String>,
    /// `min_version`: `"1.2"` or `"1.3"`.
    pub min_version: Option<String>,
}

impl ListenerTlsKeys {
    /// Serving `cert` (chain and key), no client certificates asked for.
    pub fn serving(cert: &CertFiles) -> ListenerTlsKeys {
        ListenerTlsKeys {
            cert: cert.chain.clone(),
            key: cert.key.clone(),
            client_ca: None,
            client_auth: None,
            min_version: None,
        }
    }

    /// These keys, requiring client certificates issued by `client_ca`.
    pub fn requiring_clients_of(mut self, client_ca: &Path) -> ListenerTlsKeys {
        self.client_ca = Some(client_ca.to_path_buf());
        self.client_auth = Some("required".to_string());
        self
    }

    fn table(&self) -> String {
        let mut table = format!(
            "[listener.tls]\ncert = {}\nkey = {}\n",
            toml_path(&self.cert),
            toml_path(&self.key)
        );
        if let Some(ca) = &self.client_ca {
            table.push_str(&format!("client_ca = {}\n", toml_path(ca)));
        }
        if let Some(auth) = &self.client_auth {
            table.push_str(&format!("client_auth = {}\n", toml_string(auth)));
        }
        if let Some(version) = &self.min_version {
            table.push_str(&format!("min_version = {}\n", toml_string(version)));
        }
        table
    }
}

/// The keys of `[upstream.tls]`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UpstreamTlsKeys {
    /// `ca`: the brokers' CA (PEM); the system roots without it.
    pub ca: Option<PathBuf>,
    /// `cert` and `key`: kpress's client certificate, for brokers that require one.
    pub cert: Option<CertFiles>,
    /// `server_name`: the name checked in the brokers' certificates.
    pub server_name: Option<String>,
    /// `verify`.
    pub verify: Option<bool>,
}

impl UpstreamTlsKeys {
    /// Trusting `ca`, no client certificate.
    pub fn trusting(ca: &Path) -> UpstreamTlsKeys {
        UpstreamTlsKeys {
            ca: Some(ca.to_path_buf()),
            ..UpstreamTlsKeys::default()
        }
    }

    /// These keys, presenting `cert` to the brokers.
    pub fn presenting(mut self, cert: &CertFiles) -> UpstreamTlsKeys {
        self.cert = Some(cert.clone());
        self
    }

    fn table(&self) -> String {
        let mut table = String::from("[upstream.tls]\n");
        if let Some(ca) = &self.ca {
            table.push_str(&format!("ca = {}\n", toml_path(ca)));
        }
        if let Some(cert) = &self.cert {
            table.push_str(&format!(
                "cert = {}\nkey = {}\n",
                toml_path(&cert.chain),
                toml_path(&cert.key)
            ));
        }
        if let Some(name) = &self.server_name {
            table.push_str(&format!("server_name = {}\n", toml_string(name)));
        }
        if let Some(verify) = self.verify {
            table.push_str(&format!("verify = {verify}\n"));
        }
        table
    }
}

/// `[upstream.sasl]`: `user`'s mechanism and name; the password in a file written
/// beside kpress's config (`password_file`), or in kpress's environment variable
/// `password_env`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpstreamSaslKeys {
    pub user: SaslUser,
    pub password_env: Option<String>,
}

impl UpstreamSaslKeys {
    /// `user` with its password in a file.
    pub fn with_password_file(user: &SaslUser) -> UpstreamSaslKeys {
        UpstreamSaslKeys {
            user: user.clone(),
            password_env: None,
        }
    }
}

/// `text` as a TOML basic string.
fn toml_string(text: &str) -> String {
    let mut quoted = String::from("\"");
    for c in text.chars() {
        match c {
            '"' => quoted.push_str("\\\""),
            '\\' => quoted.push_str("\\\\"),
            c if c.is_control() => quoted.push_str(&format!("\\u{:04X}", u32::from(c))),
            c => quoted.push(c),
        }
    }
    quoted.push('"');
    quoted
}

fn toml_path(path: &Path) -> String {
    toml_string(&path.to_string_lossy())
}

fn push_lines(config: &mut String, lines: &[String]) {
    for line in lines {
        config.push_str(line);
        config.push('\n');
    }
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
    /// SNI mode's `bootstrap_host`, the name clients bootstrap from.
    bootstrap_host: Option<String>,
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

    /// [`start_in_front_of`](Self::start_in_front_of) for a measurement
    /// ([`KpressSetup::measuring`]).
    pub fn start_measuring_in_front_of(
        cluster: &KafkaCluster,
        rules: &str,
    ) -> anyhow::Result<KpressProxy> {
        KpressProxy::start_with(
            KpressSetup::in_front_of(&cluster.node_addresses(), &cluster.node_ids(), rules)
                .measuring(),
        )
    }

    /// [`start_in_front_of`](Self::start_in_front_of) with the brokers' `upstream`
    /// listener addresses given (e.g. their SASL listeners), for nodes `node_ids`.
    pub fn start_in_front_of_listeners(
        upstream: &[SocketAddr],
        node_ids: &[u32],
        rules: &str,
    ) -> anyhow::Result<KpressProxy> {
        KpressProxy::start_with(KpressSetup::in_front_of(upstream, node_ids, rules))
    }

    /// Starts kpress as `setup` describes, on free loopback ports (listener, node
    /// ports in ports mode, Prometheus endpoint), and waits until its listener accepts
    /// TCP connections (a TLS listener does too).
    pub fn start_with(setup: KpressSetup) -> anyhow::Result<KpressProxy> {
        KpressProxy::start_binary_with(kpress_binary(), setup)
    }

    /// [`start_with`](Self::start_with) running `binary` instead of the harness's
    /// kpress, for a measurement of two builds side by side.
    pub fn start_binary_with(binary: &Path, setup: KpressSetup) -> anyhow::Result<KpressProxy> {
        let dir = tempfile::Builder::new().prefix("kpress-proxy-").tempdir()?;
        // Held until every port is chosen, so none is handed out twice.
        let held = [
            std::net::TcpListener::bind("127.0.0.1:0")?,
            std::net::TcpListener::bind("127.0.0.1:0")?,
        ];
        let (listen, metrics) = (held[0].local_addr()?, held[1].local_addr()?);
        let node_port_base = match setup.sni {
            None => {
                let highest = setup.node_ids.iter().copied().max().unwrap_or(1);
                Some(free_port_range(u16::try_from(highest)?))
            }
            Some(_) => None,
        };
        drop(held);
        let (config, env) = setup.render(listen, node_port_base, metrics, dir.path())?;
        let mut proxy = KpressProxy::launch(binary, dir, &config, listen, &env)?;
        proxy.metrics = Some(metrics);
        proxy.node_port_base = node_port_base;
        proxy.bootstrap_host = setup.sni.and_then(|sni| sni.bootstrap_host);
        Ok(proxy)
    }

    /// Starts another kpress as `setup` describes on `other`'s listener and node ports,
    /// with an admin endpoint of its own (both need `reuse_port = true` in their
    /// `listener_keys`). Waits until its own `/readyz` answers 200, since the shared
    /// ports accept whether or not this process serves them yet.
    pub fn start_beside(setup: KpressSetup, other: &KpressProxy) -> anyhow::Result<KpressProxy> {
        let dir = tempfile::Builder::new().prefix("kpress-proxy-").tempdir()?;
        let metrics = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?;
        let (config, env) =
            setup.render(other.listen, other.node_port_base, metrics, dir.path())?;
        let mut proxy = KpressProxy::launch(kpress_binary(), dir, &config, other.listen, &env)?;
        proxy.metrics = Some(metrics);
        proxy.node_port_base = other.node_port_base;
        proxy.bootstrap_host = setup.sni.and_then(|sni| sni.bootstrap_host);
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(status) = proxy.process.try_wait() {
                bail!("kpress run exited at startup ({status})\n{}", proxy.log());
            }
            if proxy
                .http_get("/readyz")
                .is_ok_and(|(status, _)| status == 200)
            {
                return Ok(proxy);
            }
            if std::time::Instant::now() > deadline {
                bail!(
                    "kpress run beside {} was not ready within 30 s\n{}",
                    other.listen,
                    proxy.log()
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The admin endpoint's address (`[admin] bind`), if this proxy has one.
    pub fn admin_address(&self) -> Option<SocketAddr> {
        self.metrics
    }

    /// Status code and body of `GET path` on the proxy's admin endpoint (`/policy`,
    /// `/readyz`, `/metrics`).
    pub fn http_get(&self, path: &str) -> anyhow::Result<(u16, String)> {
        let addr = self.metrics.context("this proxy has no admin endpoint")?;
        let mut stream = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(5))?;
        stream.set_read_timeout(Some(Duration::from_secs(10)))?;
        write!(stream, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n")?;
        let mut response = String::new();
        stream.read_to_string(&mut response)?;
        let (head, body) = response
            .split_once("\r\n\r\n")
            .with_context(|| format!("no HTTP response from {addr}{path}"))?;
        let status = head
            .split(' ')
            .nth(1)
            .and_then(|code| code.parse().ok())
            .with_context(|| format!("no status in {head:?}"))?;
        Ok((status, body.to_string()))
    }

    /// The Prometheus text the proxy's metrics endpoint serves.
    pub fn scrape_metrics(&self) -> anyhow::Result<String> {
        Ok(self.http_get("/metrics")?.1)
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
        KpressProxy::launch(kpress_binary(), dir, config, listen, &[])
    }

    /// [`start`](Self::start) in `dir`, with `env` added to kpress's environment.
    fn launch(
        binary: &Path,
        dir: tempfile::TempDir,
        config: &str,
        listen: SocketAddr,
        env: &[(String, String)],
    ) -> anyhow::Result<KpressProxy> {
        let config_path = dir.path().join("kpress.toml");
        std::fs::write(&config_path, config)?;
        let log_file = dir.path().join("kpress.log");
        let log = std::fs::File::create(&log_file)?;
        let pid_dir = dir.path().join("pids");
        std::fs::create_dir_all(&pid_dir)?;
        let watchdog = Watchdog::start(&pid_dir, Some(dir.path()))?;
        let mut cmd = Command::new(binary);
        cmd.arg("run")
            .arg("--config")
            .arg(&config_path)
            // No terminal: plain log lines in the file.
            .env("NO_COLOR", "1")
            .envs(env.iter().map(|(k, v)| (k, v)))
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
            bootstrap_host: None,
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

    /// The config file kpress runs with.
    pub fn config_file(&self) -> Option<PathBuf> {
        self.dir.as_ref().map(|d| d.path().join("kpress.toml"))
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

    /// Where kpress serves broker node `node_id` in ports mode (`base + node_id`).
    pub fn node_address(&self, node_id: u32) -> SocketAddr {
        let base = self.node_port_base.expect("ports mode");
        let id = u16::try_from(node_id).expect("a node id within a port's range");
        SocketAddr::from(([127, 0, 0, 1], base + id))
    }

    /// The bootstrap string for clients going through the proxy: the listener's
    /// address, or in SNI mode with a `bootstrap_host` that name and the port.
    pub fn bootstrap(&self) -> String {
        match &self.bootstrap_host {
            Some(host) => format!("{host}:{}", self.listen.port()),
            None => self.listen.to_string(),
        }
    }

    /// Panics listing `failures`, with kpress's log and `cluster`'s, unless there are
    /// none.
    #[track_caller]
    pub fn assert_no_failures(&self, failures: &[String], cluster: &KafkaCluster) {
        assert!(
            failures.is_empty(),
            "{}\n{}\n{}",
            failures.join("\n"),
            self.log(),
            cluster.describe_logs()
        );
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
                    batches rewritten: 3\nbatches grown: 1\n\
                    batches passed through: 2\n  not_smaller: 1\n  same_codec: 1\n\
                    bytes in: 100\nbytes out: 80\nratio: 0.8000\nelapsed: 0.001 s\n";
        let summary = RecompressSummary::parse(text).unwrap();
        assert_eq!((summary.batches_rewritten, summary.batches_grown), (3, 1));
        assert_eq!(summary.batches_passed, 2);
        assert_eq!(summary.passed("not_smaller"), 1);
        assert_eq!(summary.passed("crc_mismatch"), 0);
        assert_eq!((summary.bytes_in, summary.bytes_out), (100, 80));
        assert!(RecompressSummary::parse("nothing").is_err());
    }

    #[test]
    fn renders_every_table_of_a_setup() {
        let dir = tempfile::tempdir().unwrap();
        let cert = CertFiles {
            chain: "/pki/k.pem".into(),
            key: "/pki/k.key".into(),
            keystore: "/pki/k.keystore.pem".into(),
            ca: "/pki/ca.pem".into(),
        };
        let user = SaslUser::new(crate::tls::SaslMechanism::ScramSha512, "kpress", "pw\"1");
        let addr = |port| SocketAddr::from(([127, 0, 0, 1], port));
        let setup = KpressSetup {
            sni: Some(SniListener {
                advertised_host_pattern: "broker-{node}.kafka.test".to_string(),
                bootstrap_host: Some("bootstrap.kafka.test".to_string()),
            }),
            listener_keys: vec!["rewrite_before_auth = false".to_string()],
            listener_tls: Some(
                ListenerTlsKeys::serving(&cert).requiring_clients_of(Path::new("/pki/ca.pem")),
            ),
            upstream_tls: Some(
                UpstreamTlsKeys::trusting(Path::new("/pki/ca.pem")).presenting(&cert),
            ),
            upstream_sasl: Some(UpstreamSaslKeys::with_password_file(&user)),
            ..KpressSetup::in_front_of(
                &[addr(9093)],
                &[1, 2, 3],
                "[defaults]\ncompression.type = \"zstd\"",
            )
        };
        let (config, env) = setup
            .render(addr(9092), None, addr(9100), dir.path())
            .unwrap();
        let password_file = dir.path().join("upstream-sasl-password");
        let expected = format!(
            "[listener]\nbind = \"127.0.0.1:9092\"\nmode = \"sni\"\n\
             advertised_host_pattern = \"broker-{{node}}.kafka.test\"\n\
             bootstrap_host = \"bootstrap.kafka.test\"\nrewrite_before_auth = false\n\
             [listener.tls]\ncert = \"/pki/k.pem\"\nkey = \"/pki/k.key\"\n\
             client_ca = \"/pki/ca.pem\"\nclient_auth = \"required\"\n\
             [upstream]\nbootstrap_servers = [\"127.0.0.1:9093\"]\n\
             [upstream.tls]\nca = \"/pki/ca.pem\"\ncert = \"/pki/k.pem\"\nkey = \"/pki/k.key\"\n\
             [upstream.sasl]\nmechanism = \"SCRAM-SHA-512\"\nusername = \"kpress\"\n\
             password_file = \"{}\"\n\
             [admin]\nbind = \"127.0.0.1:9100\"\n[defaults]\ncompression.type = \"zstd\"\n\
             [limits]\nmax_rewrite_wait_ms = 30000\n\n",
            password_file.display()
        );
        assert_eq!(config, expected);
        assert!(env.is_empty());
        assert_eq!(std::fs::read_to_string(password_file).unwrap(), "pw\"1");
        assert_eq!(toml_string("a\"b\\c\n"), "\"a\\\"b\\\\c\\u000A\"");

        let ports = KpressSetup {
            upstream_sasl: Some(UpstreamSaslKeys {
                user,
                password_env: Some("KPRESS_SASL_PASSWORD".to_string()),
            }),
            ..KpressSetup::in_front_of(&[addr(9093)], &[1], "")
        };
        let (config, env) = ports
            .render(addr(9092), Some(19100), addr(9100), dir.path())
            .unwrap();
        assert!(config.contains("advertised_host = \"127.0.0.1\"\nnode_port_base = 19100\n"));
        assert!(config.contains("password_env = \"KPRESS_SASL_PASSWORD\"\n"));
        assert_eq!(
            env,
            [("KPRESS_SASL_PASSWORD".to_string(), "pw\"1".to_string())]
        );
    }

    #[test]
    fn rules_wait_for_rewrites_unless_they_say_otherwise() {
        let wait = "max_rewrite_wait_ms = 30000\n";
        assert_eq!(
            patient_rewrites("[[topics]]\nmatch = \"*\"\n"),
            format!("[[topics]]\nmatch = \"*\"\n\n[limits]\n{wait}")
        );
        assert_eq!(
            patient_rewrites("[limits]\nmax_topic_labels = 10\n"),
            format!("[limits]\n{wait}max_topic_labels = 10\n")
        );
        let own = "[limits]\nmax_rewrite_wait_ms = 100\n";
        assert_eq!(patient_rewrites(own), own);
        for rules in [
            "",
            "[limits]\nmax_batch_bytes = 1\n[[topics]]\nmatch = \"*\"\n",
        ] {
            let patient = patient_rewrites(rules);
            assert_eq!(patient.matches("[limits]").count(), 1, "{patient}");
            assert_eq!(patient.matches(wait).count(), 1, "{patient}");
        }
    }
}
