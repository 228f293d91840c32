//! Real Apache Kafka clusters for tests: KRaft nodes that are each broker and
//! controller (n nodes form an n-voter quorum), on free loopback ports, with their own
//! temporary log dirs and log files, killed when the handle drops. Besides PLAINTEXT,
//! nodes can listen for SASL_PLAINTEXT, SSL, SSL with client certificates required,
//! and SASL_SSL clients (PLAIN and SCRAM users), with certificates of a per-cluster
//! [`TestPki`].

use crate::class_sharing::{self, ArchiveDump, JvmKind};
use crate::dump::{dump_log_segments, DumpedSegment};
use crate::java;
use crate::metadata::{fetch_metadata, ClusterMetadata};
use crate::process::{record_pid, run_ok, ChildGuard, Watchdog};
use crate::tls::{SaslMechanism, SaslUser, TestPki};
use anyhow::{bail, Context};
use sha2::{Digest, Sha256};
use std::fmt::Write as _;
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

const READY_TIMEOUT: Duration = Duration::from_secs(90);
const STOP_TIMEOUT: Duration = Duration::from_secs(60);
/// The heap and collector of every node's JVM.
const BROKER_OPTIONS: [&str; 3] = ["-Xms256m", "-Xmx1g", "-XX:+UseG1GC"];

/// A client listener a node can have beside PLAINTEXT (which every node keeps for the
/// harness's own requests and between brokers).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum BrokerListener {
    /// SASL over plain TCP, with [`ClusterSecurity::sasl_users`].
    SaslPlaintext,
    /// TLS, no client certificate asked for.
    Ssl,
    /// TLS requiring a client certificate the cluster's CA issued
    /// (`ssl.client.auth=required`); the listener is named `MTLS`, its protocol is SSL.
    Mtls,
    /// SASL over TLS (no client certificate), with [`ClusterSecurity::sasl_users`].
    SaslSsl,
}

impl BrokerListener {
    /// The Kafka listener name (`listeners`, `listener.name.<lowercase>.` settings).
    pub fn name(self) -> &'static str {
        match self {
            BrokerListener::SaslPlaintext => "SASL_PLAINTEXT",
            BrokerListener::Ssl => "SSL",
            BrokerListener::Mtls => "MTLS",
            BrokerListener::SaslSsl => "SASL_SSL",
        }
    }

    /// The listener's security protocol (`listener.security.protocol.map`).
    pub fn protocol(self) -> &'static str {
        match self {
            BrokerListener::SaslPlaintext => "SASL_PLAINTEXT",
            BrokerListener::Ssl | BrokerListener::Mtls => "SSL",
            BrokerListener::SaslSsl => "SASL_SSL",
        }
    }

    fn is_tls(self) -> bool {
        self.protocol().ends_with("SSL")
    }

    fn is_sasl(self) -> bool {
        self.protocol().starts_with("SASL")
    }
}

/// The client listeners of every node beyond PLAINTEXT, and the SASL users they know.
/// TLS listeners serve a certificate of the cluster's [`TestPki`] naming `localhost`
/// and `127.0.0.1` (clients verify hostnames as by default) and trust its CA.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClusterSecurity {
    /// The extra listeners, each on a port of its own on every node.
    pub listeners: Vec<BrokerListener>,
    /// The users of every SASL listener: PLAIN users in the listener's JAAS config,
    /// SCRAM users written into the metadata when the storage is formatted
    /// (`StorageTool format --add-scram`). A listener enables exactly the mechanisms
    /// these users have.
    pub sasl_users: Vec<SaslUser>,
}

impl ClusterSecurity {
    /// Every listener kind at once (one broker start serves every kind of test), with
    /// `sasl_users`.
    pub fn all_listeners(sasl_users: &[SaslUser]) -> ClusterSecurity {
        ClusterSecurity {
            listeners: vec![
                BrokerListener::SaslPlaintext,
                BrokerListener::Ssl,
                BrokerListener::Mtls,
                BrokerListener::SaslSsl,
            ],
            sasl_users: sasl_users.to_vec(),
        }
    }

    /// The mechanisms of the users, each once, in the order first named.
    fn mechanisms(&self) -> Vec<SaslMechanism> {
        let mut mechanisms = Vec::new();
        for user in &self.sasl_users {
            if !mechanisms.contains(&user.mechanism) {
                mechanisms.push(user.mechanism);
            }
        }
        mechanisms
    }

    /// StorageTool's `--add-scram` arguments for the SCRAM users.
    fn add_scram_args(&self) -> Vec<String> {
        self.sasl_users
            .iter()
            .filter(|u| u.mechanism != SaslMechanism::Plain)
            .flat_map(|u| {
                [
                    "--add-scram".to_string(),
                    format!(
                        "{}=[name={},password={}]",
                        u.mechanism.name(),
                        u.name,
                        u.password
                    ),
                ]
            })
            .collect()
    }

    /// Broker settings of the extra listeners: PEM key and trust stores for TLS,
    /// client authentication on `MTLS`, mechanisms and JAAS logins for SASL.
    fn broker_settings(&self, keystore: &Path, truststore: &Path) -> String {
        let mut text = String::new();
        if self.listeners.iter().any(|l| l.is_tls()) {
            let _ = write!(
                text,
                "ssl.keystore.type=PEM\n\
                 ssl.keystore.location={}\n\
                 ssl.truststore.type=PEM\n\
                 ssl.truststore.location={}\n",
                keystore.display(),
                truststore.display()
            );
        }
        if self.listeners.contains(&BrokerListener::Mtls) {
            let _ = writeln!(text, "listener.name.mtls.ssl.client.auth=required");
        }
        let mechanisms = self.mechanisms();
        let sasl_listeners: Vec<BrokerListener> = self
            .listeners
            .iter()
            .copied()
            .filter(|l| l.is_sasl())
            .collect();
        if sasl_listeners.is_empty() {
            return text;
        }
        let names: Vec<&str> = mechanisms.iter().map(|m| m.name()).collect();
        let _ = writeln!(text, "sasl.enabled.mechanisms={}", names.join(","));
        for listener in sasl_listeners {
            let prefix = format!("listener.name.{}", listener.name().to_ascii_lowercase());
            for mechanism in &mechanisms {
                // PLAIN checks passwords against its JAAS options; SCRAM against the
                // credentials in the cluster metadata.
                let accounts: String = match mechanism {
                    SaslMechanism::Plain => self
                        .sasl_users
                        .iter()
                        .filter(|u| u.mechanism == SaslMechanism::Plain)
                        .map(|u| format!(" user_{}=\"{}\"", u.name, u.password))
                        .collect(),
                    _ => String::new(),
                };
                let _ = writeln!(
                    text,
                    "{prefix}.{}.sasl.jaas.config={} required{accounts};",
                    mechanism.name().to_ascii_lowercase(),
                    mechanism.java_login_module()
                );
            }
        }
        text
    }
}

#[derive(Debug)]
struct Node {
    id: u32,
    port: u16,
    /// The ports of the extra listeners.
    listener_ports: Vec<(BrokerListener, u16)>,
    config: PathBuf,
    data_dir: PathBuf,
    log_file: PathBuf,
    stdout_file: PathBuf,
    process: Option<ChildGuard>,
}

impl Node {
    fn addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.port))
    }

    fn listener_addr(&self, listener: BrokerListener) -> Option<SocketAddr> {
        self.listener_ports
            .iter()
            .find(|(l, _)| *l == listener)
            .map(|(_, port)| SocketAddr::from(([127, 0, 0, 1], *port)))
    }
}

/// A running Kafka cluster of `n` combined broker+controller KRaft nodes.
#[derive(Debug)]
pub struct KafkaCluster {
    version: String,
    dir: Option<tempfile::TempDir>,
    nodes: Vec<Node>,
    pid_dir: PathBuf,
    watchdog: Watchdog,
    security: ClusterSecurity,
    pki: TestPki,
}

/// A Kafka cluster id: 16 bytes in unpadded URL-safe base64, as `StorageTool random-uuid`
/// prints (derived here from the time and pid, which is unique enough for a test).
fn new_cluster_id() -> String {
    // A leading '-' would read as an option to StorageTool's argument parser.
    (0u32..)
        .map(cluster_id_candidate)
        .find(|id| !id.starts_with('-'))
        .expect("some candidate does not start with '-'")
}

fn cluster_id_candidate(attempt: u32) -> String {
    let seed = format!(
        "{:?}{}{:?}{attempt}",
        std::time::SystemTime::now(),
        std::process::id(),
        std::thread::current().id()
    );
    let digest = Sha256::digest(seed.as_bytes());
    let mut bytes = [0u8; 16];
    bytes.copy_from_slice(&digest[..16]);
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut out = String::new();
    let mut bits = 0u32;
    let mut nbits = 0;
    for b in bytes {
        bits = (bits << 8) | u32::from(b);
        nbits += 8;
        while nbits >= 6 {
            nbits -= 6;
            out.push(ALPHABET[((bits >> nbits) & 63) as usize] as char);
        }
    }
    if nbits > 0 {
        out.push(ALPHABET[((bits << (6 - nbits)) & 63) as usize] as char);
    }
    out
}

/// `n` loopback ports that were free a moment ago, all different: each stays bound
/// until every one is taken, so the system cannot hand the same port out twice (it
/// does, right after a release, on some kernels).
fn distinct_free_ports(n: usize) -> anyhow::Result<Vec<u16>> {
    let listeners = (0..n)
        .map(|_| TcpListener::bind("127.0.0.1:0"))
        .collect::<Result<Vec<_>, _>>()
        .context("binding free loopback ports")?;
    listeners
        .iter()
        .map(|l| Ok(l.local_addr()?.port()))
        .collect()
}

impl KafkaCluster {
    /// Formats and starts `n_brokers` nodes of Kafka `version` and waits until every
    /// node answers Metadata listing all of them.
    pub fn start(version: &str, n_brokers: usize) -> anyhow::Result<KafkaCluster> {
        KafkaCluster::start_with_sasl_plain(version, n_brokers, &[])
    }

    /// [`start`](Self::start), and when `users` (name, password) is not empty each node
    /// also listens for SASL_PLAINTEXT clients (mechanism PLAIN, those users); the
    /// PLAINTEXT listener stays for the harness and between brokers.
    pub fn start_with_sasl_plain(
        version: &str,
        n_brokers: usize,
        users: &[(&str, &str)],
    ) -> anyhow::Result<KafkaCluster> {
        let security = if users.is_empty() {
            ClusterSecurity::default()
        } else {
            ClusterSecurity {
                listeners: vec![BrokerListener::SaslPlaintext],
                sasl_users: users
                    .iter()
                    .map(|(name, password)| SaslUser::new(SaslMechanism::Plain, name, password))
                    .collect(),
            }
        };
        KafkaCluster::start_with(version, n_brokers, &security)
    }

    /// [`start`](Self::start) with the extra client listeners and SASL users of
    /// `security` on every node; the PLAINTEXT listener stays for the harness (topics,
    /// readiness) and between brokers. The cluster's [`TestPki`] (see
    /// [`pki`](Self::pki)) issues the brokers' certificates.
    pub fn start_with(
        version: &str,
        n_brokers: usize,
        security: &ClusterSecurity,
    ) -> anyhow::Result<KafkaCluster> {
        KafkaCluster::start_with_properties(version, n_brokers, security, "")
    }

    /// [`start_with`](Self::start_with), with `extra_properties` (lines of
    /// `server.properties`) after the harness's own: a key given again there wins, as
    /// Java's `Properties` keeps the last.
    pub fn start_with_properties(
        version: &str,
        n_brokers: usize,
        security: &ClusterSecurity,
        extra_properties: &str,
    ) -> anyhow::Result<KafkaCluster> {
        assert!(n_brokers >= 1, "a cluster needs at least one node");
        assert!(
            !security.listeners.iter().any(|l| l.is_sasl()) || !security.sasl_users.is_empty(),
            "a SASL listener needs users"
        );
        // The JAAS options and StorageTool's `[name=..,password=..]` have no escapes.
        for user in &security.sasl_users {
            for text in [&user.name, &user.password] {
                if text.is_empty() || text.contains([',', ']', '=', '"', ' ', '\\']) {
                    bail!("SASL user name or password {text:?}: keep to letters, digits, '-' and the like");
                }
            }
        }
        let dir = tempfile::Builder::new()
            .prefix(&format!("kpress-kafka-{version}-"))
            .tempdir()
            .context("creating the cluster's temp dir")?;
        let pid_dir = dir.path().join("pids");
        std::fs::create_dir_all(&pid_dir)?;
        let watchdog = Watchdog::start(&pid_dir, Some(dir.path()))?;
        let pki = TestPki::generate(&dir.path().join("pki"))?;

        // Per node: PLAINTEXT, CONTROLLER, then one per extra listener.
        let per_node = 2 + security.listeners.len();
        let mut free = distinct_free_ports(n_brokers * per_node)?.into_iter();
        let mut next_port = move || free.next().expect("enough ports were taken");
        let ports: Vec<(u16, u16)> = (0..n_brokers).map(|_| (next_port(), next_port())).collect();
        let voters = ports
            .iter()
            .enumerate()
            .map(|(i, (_, cport))| format!("{}@127.0.0.1:{cport}", i + 1))
            .collect::<Vec<_>>()
            .join(",");
        let mut protocol_map = vec!["PLAINTEXT:PLAINTEXT".to_string()];
        protocol_map.extend(
            security
                .listeners
                .iter()
                .map(|l| format!("{}:{}", l.name(), l.protocol())),
        );
        protocol_map.push("CONTROLLER:PLAINTEXT".to_string());
        let protocol_map = protocol_map.join(",");
        let internal_rf = n_brokers.min(3);
        let mut nodes = Vec::new();
        for (i, (port, cport)) in ports.iter().enumerate() {
            let id = i as u32 + 1;
            let node_dir = dir.path().join(format!("node-{id}"));
            let data_dir = node_dir.join("data");
            std::fs::create_dir_all(&data_dir)?;
            let log_file = node_dir.join("server.log");
            let config = node_dir.join("server.properties");
            let listener_ports: Vec<(BrokerListener, u16)> = security
                .listeners
                .iter()
                .map(|l| (*l, next_port()))
                .collect();
            let client_listeners: String = std::iter::once(format!("PLAINTEXT://127.0.0.1:{port}"))
                .chain(
                    listener_ports
                        .iter()
                        .map(|(l, p)| format!("{}://127.0.0.1:{p}", l.name())),
                )
                .collect::<Vec<_>>()
                .join(",");
            let certificate = pki.server(&["localhost", "127.0.0.1"])?;
            let security_settings = security.broker_settings(&certificate.keystore, pki.ca_cert());
            // Test batches carry fixed timestamps years old. Time-based rolling would
            // start a new segment at the next append (tests read the first), and time
            // retention would delete a segment a test is about to read.
            let properties = format!(
                "process.roles=broker,controller\n\
                 node.id={id}\n\
                 controller.quorum.voters={voters}\n\
                 listeners={client_listeners},CONTROLLER://127.0.0.1:{cport}\n\
                 advertised.listeners={client_listeners}\n\
                 controller.listener.names=CONTROLLER\n\
                 inter.broker.listener.name=PLAINTEXT\n\
                 listener.security.protocol.map={protocol_map}\n\
                 {security_settings}\
                 log.dirs={data}\n\
                 num.partitions=1\n\
                 auto.create.topics.enable=false\n\
                 offsets.topic.replication.factor={internal_rf}\n\
                 offsets.topic.num.partitions=3\n\
                 transaction.state.log.replication.factor={internal_rf}\n\
                 transaction.state.log.num.partitions=3\n\
                 transaction.state.log.min.isr=1\n\
                 group.initial.rebalance.delay.ms=0\n\
                 log.retention.ms=-1\n\
                 log.roll.ms=9223372036854775807\n\
                 {extra_properties}\n",
                data = data_dir.display()
            );
            std::fs::write(&config, properties)?;
            std::fs::write(
                node_dir.join("log4j2.properties"),
                java::log4j2_file_config(&log_file, "INFO"),
            )?;
            std::fs::write(
                node_dir.join("log4j.properties"),
                java::log4j1_file_config(&log_file, "INFO"),
            )?;
            nodes.push(Node {
                id,
                port: *port,
                listener_ports,
                config,
                data_dir,
                log_file,
                stdout_file: node_dir.join("stdout.log"),
                process: None,
            });
        }

        let mut cluster = KafkaCluster {
            version: version.to_string(),
            dir: Some(dir),
            nodes,
            pid_dir,
            watchdog,
            security: security.clone(),
            pki,
        };
        cluster.format()?;
        if n_brokers == 1 {
            // A lone node can get ready by itself.
            cluster.make_broker_archive(0);
        }
        for i in 0..n_brokers {
            cluster.spawn_node(i)?;
        }
        cluster.wait_ready()?;
        Ok(cluster)
    }

    fn format(&self) -> anyhow::Result<()> {
        let cluster_id = new_cluster_id();
        // Formatting is a JVM per node: run them side by side.
        // The first node's JVM makes the tools' class archive if there is none yet.
        let mut dump = ArchiveDump::claim(&self.version, JvmKind::Tool, &java::CLIENT_OPTIONS, &[]);
        let handles: Vec<_> = self
            .nodes
            .iter()
            .enumerate()
            .map(|(index, node)| {
                let mut cmd = match dump.as_ref().filter(|_| index == 0) {
                    Some(dump) => java::tool_command_dumping(&self.version, dump),
                    None => java::client_command(&self.version, &[]),
                };
                cmd.args(["kafka.tools.StorageTool", "format"])
                    .arg(format!("--cluster-id={cluster_id}"))
                    .arg("--config")
                    .arg(&node.config)
                    .args(self.security.add_scram_args());
                std::thread::spawn(move || run_ok(&mut cmd, Duration::from_secs(120)))
            })
            .collect();
        for (index, handle) in handles.into_iter().enumerate() {
            let formatted = handle
                .join()
                .map_err(|_| anyhow::anyhow!("format thread panicked"))?;
            if index == 0 {
                if let Some(dump) = dump.take() {
                    dump.finish(formatted.is_ok());
                }
            }
            formatted.context("formatting a KRaft node's storage")?;
        }
        Ok(())
    }

    fn spawn_node(&mut self, index: usize) -> anyhow::Result<()> {
        let sharing =
            class_sharing::use_archive(&self.version, JvmKind::Broker, &BROKER_OPTIONS, &[]);
        self.spawn_node_sharing(index, &sharing)
    }

    /// Makes the brokers' class archive if there is none yet: node `index` starts with
    /// `-XX:ArchiveClassesAtExit`, serves until ready and stops cleanly (a JVM dumps its
    /// archive only at a clean exit). Once a Kafka version, JDK and jar set; if it fails,
    /// the node starts as usual next (and reports why, if it cannot start).
    fn make_broker_archive(&mut self, index: usize) {
        let Some(dump) = ArchiveDump::claim(&self.version, JvmKind::Broker, &BROKER_OPTIONS, &[])
        else {
            return;
        };
        if self.spawn_node_sharing(index, &dump.args()).is_err() {
            return;
        }
        let ready = self.wait_ready().is_ok();
        let stopped = self.nodes[index]
            .process
            .take()
            .and_then(|mut process| process.terminate(STOP_TIMEOUT));
        if ready && stopped.is_some() {
            dump.finish(true);
        } else {
            // Not again at every cluster start: each attempt costs a broker's start.
            dump.give_up();
        }
    }

    fn spawn_node_sharing(&mut self, index: usize, sharing: &[String]) -> anyhow::Result<()> {
        let node = &mut self.nodes[index];
        let node_dir = node.config.parent().expect("node dir").to_path_buf();
        let stdout = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&node.stdout_file)?;
        let mut cmd = java::base_command(&self.version, &[]);
        cmd.args(BROKER_OPTIONS)
            .args(sharing)
            .arg(format!(
                "-Dlog4j2.configurationFile={}",
                node_dir.join("log4j2.properties").display()
            ))
            .arg(format!(
                "-Dlog4j.configuration=file:{}",
                node_dir.join("log4j.properties").display()
            ))
            .arg(format!("-Dkafka.logs.dir={}", node_dir.display()))
            .arg(format!(
                "-Djava.io.tmpdir={}",
                java::jvm_tmp_dir().display()
            ))
            .arg("kafka.Kafka")
            .arg(&node.config)
            .stdin(Stdio::null())
            .stdout(stdout.try_clone()?)
            .stderr(stdout);
        let guard = ChildGuard::spawn(&mut cmd)?;
        record_pid(&self.pid_dir, &format!("node-{}", node.id), guard.id())?;
        node.process = Some(guard);
        Ok(())
    }

    /// Waits until every running node answers Metadata listing every running node.
    fn wait_ready(&mut self) -> anyhow::Result<()> {
        let deadline = Instant::now() + READY_TIMEOUT;
        let running: Vec<u32> = self
            .nodes
            .iter()
            .filter(|n| n.process.is_some())
            .map(|n| n.id)
            .collect();
        for index in 0..self.nodes.len() {
            if self.nodes[index].process.is_none() {
                continue;
            }
            loop {
                let node = &mut self.nodes[index];
                if let Some(status) = node.process.as_mut().and_then(ChildGuard::try_wait) {
                    node.process = None;
                    let id = node.id;
                    bail!(
                        "Kafka node {id} exited during startup ({status})\n{}{}",
                        self.describe_logs(),
                        class_sharing::off_hint()
                    );
                }
                let addr = node.addr();
                if let Ok(metadata) = fetch_metadata(addr, Duration::from_secs(2)) {
                    let mut listed: Vec<u32> =
                        metadata.brokers.iter().map(|b| b.node_id as u32).collect();
                    listed.sort_unstable();
                    if running.iter().all(|id| listed.contains(id)) {
                        break;
                    }
                }
                if Instant::now() > deadline {
                    bail!(
                        "Kafka cluster not ready after {READY_TIMEOUT:?}\n{}",
                        self.describe_logs()
                    );
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        }
        Ok(())
    }

    /// The Kafka version the nodes run.
    pub fn version(&self) -> &str {
        &self.version
    }

    /// `host:port,...` of every node, for a client's bootstrap.servers.
    pub fn bootstrap(&self) -> String {
        self.nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// The node ids (1..=n), by node index.
    pub fn node_ids(&self) -> Vec<u32> {
        self.nodes.iter().map(|n| n.id).collect()
    }

    /// Every node's client (PLAINTEXT) address, by node index.
    pub fn node_addresses(&self) -> Vec<SocketAddr> {
        self.nodes.iter().map(Node::addr).collect()
    }

    /// Kafka's DumpLogSegments of the first segment of each topic's partition 0 (the
    /// only one a test's few MB fill), in `topics` order.
    pub fn dump_partition_0(&self, topics: &[&str]) -> anyhow::Result<Vec<DumpedSegment>> {
        let mut segments = Vec::new();
        for topic in topics {
            let first = self.segments(topic, 0)?.into_iter().next();
            segments.push(first.with_context(|| format!("no segment of {topic}-0"))?);
        }
        let refs: Vec<&Path> = segments.iter().map(PathBuf::as_path).collect();
        dump_log_segments(&self.version, &refs)
    }

    /// Every node's address on `listener`, by node index (empty if the cluster was
    /// started without it).
    pub fn listener_addresses(&self, listener: BrokerListener) -> Vec<SocketAddr> {
        self.nodes
            .iter()
            .filter_map(|n| n.listener_addr(listener))
            .collect()
    }

    /// `host:port,...` of every node's `listener`, for a client's bootstrap.servers.
    pub fn listener_bootstrap(&self, listener: BrokerListener) -> String {
        self.listener_addresses(listener)
            .iter()
            .map(SocketAddr::to_string)
            .collect::<Vec<_>>()
            .join(",")
    }

    /// Every node's SASL_PLAINTEXT address, by node index (empty without it).
    pub fn sasl_addresses(&self) -> Vec<SocketAddr> {
        self.listener_addresses(BrokerListener::SaslPlaintext)
    }

    /// Every node's SSL address (no client certificate), by node index.
    pub fn ssl_addresses(&self) -> Vec<SocketAddr> {
        self.listener_addresses(BrokerListener::Ssl)
    }

    /// Every node's `MTLS` address (SSL requiring a client certificate), by node index.
    pub fn mtls_addresses(&self) -> Vec<SocketAddr> {
        self.listener_addresses(BrokerListener::Mtls)
    }

    /// Every node's SASL_SSL address, by node index.
    pub fn sasl_ssl_addresses(&self) -> Vec<SocketAddr> {
        self.listener_addresses(BrokerListener::SaslSsl)
    }

    /// The PKI whose CA issued the brokers' certificates: clients trust
    /// [`TestPki::ca_cert`], and certificates it issues are accepted on `MTLS`.
    pub fn pki(&self) -> &TestPki {
        &self.pki
    }

    /// The SASL users the cluster was started with.
    pub fn sasl_users(&self) -> &[SaslUser] {
        &self.security.sasl_users
    }

    /// Metadata for all topics as some running node answers it.
    pub fn metadata(&self) -> anyhow::Result<ClusterMetadata> {
        let mut last_error = None;
        for node in self.nodes.iter().filter(|n| n.process.is_some()) {
            match fetch_metadata(node.addr(), Duration::from_secs(5)) {
                Ok(metadata) => return Ok(metadata),
                Err(err) => last_error = Some(err),
            }
        }
        Err(last_error.unwrap_or_else(|| anyhow::anyhow!("no running node")))
    }

    /// Waits until `topic` has `partitions` partitions, each with a leader.
    pub fn wait_for_leaders(&self, topic: &str, partitions: usize) -> anyhow::Result<()> {
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            if let Ok(metadata) = self.metadata() {
                if let Some(t) = metadata.topic(topic) {
                    if t.partitions.len() == partitions
                        && t.partitions
                            .iter()
                            .all(|p| p.leader >= 0 && p.error_code == 0)
                    {
                        return Ok(());
                    }
                }
            }
            if Instant::now() > deadline {
                bail!("topic {topic} has no leader for every partition after {READY_TIMEOUT:?}");
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The log dir (`data/`) of node `index`.
    pub fn data_dir(&self, index: usize) -> &Path {
        &self.nodes[index].data_dir
    }

    /// The directory of `topic`-`partition` on node `index` (which need not host it).
    pub fn partition_dir_on(&self, index: usize, topic: &str, partition: u32) -> PathBuf {
        self.nodes[index]
            .data_dir
            .join(format!("{topic}-{partition}"))
    }

    /// The directory of `topic`-`partition` on the first node that hosts it.
    pub fn partition_dir(&self, topic: &str, partition: u32) -> anyhow::Result<PathBuf> {
        (0..self.nodes.len())
            .map(|i| self.partition_dir_on(i, topic, partition))
            .find(|dir| dir.is_dir())
            .with_context(|| format!("no node hosts {topic}-{partition}"))
    }

    /// The `.log` segment files of `topic`-`partition` (first hosting node), by base offset.
    pub fn segments(&self, topic: &str, partition: u32) -> anyhow::Result<Vec<PathBuf>> {
        let dir = self.partition_dir(topic, partition)?;
        let mut segments: Vec<PathBuf> = std::fs::read_dir(&dir)?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|e| e == "log"))
            .collect();
        segments.sort();
        Ok(segments)
    }

    /// A directory for a test's own files that lives and goes with the cluster (also
    /// when the cluster is kept in a `static` and cleaned up by the watchdog).
    pub fn scratch_dir(&self) -> PathBuf {
        let root = self.nodes[0]
            .config
            .parent()
            .and_then(Path::parent)
            .expect("cluster dir");
        let dir = root.join("scratch");
        std::fs::create_dir_all(&dir).expect("create the cluster's scratch dir");
        dir
    }

    /// Where node `index` writes its log.
    pub fn log_file(&self, index: usize) -> &Path {
        &self.nodes[index].log_file
    }

    /// Stops node `index` cleanly (SIGTERM, waits for a clean shutdown).
    pub fn stop_node(&mut self, index: usize) -> anyhow::Result<()> {
        let node = &mut self.nodes[index];
        if let Some(mut process) = node.process.take() {
            if process.terminate(STOP_TIMEOUT).is_none() {
                bail!("Kafka node {} did not shut down cleanly", node.id);
            }
        }
        Ok(())
    }

    /// Starts node `index` again (after [`stop_node`](Self::stop_node)) and waits until
    /// the running nodes are ready.
    pub fn start_node(&mut self, index: usize) -> anyhow::Result<()> {
        if self.nodes[index].process.is_none() {
            self.spawn_node(index)?;
        }
        self.wait_ready()
    }

    /// Paths of every node's log files and the last lines of each, for failure messages.
    pub fn describe_logs(&self) -> String {
        let mut text = String::new();
        for node in &self.nodes {
            for file in [&node.log_file, &node.stdout_file] {
                let _ = writeln!(text, "--- Kafka node {} log: {}", node.id, file.display());
                if let Ok(content) = std::fs::read_to_string(file) {
                    let lines: Vec<&str> = content.lines().collect();
                    for line in &lines[lines.len().saturating_sub(15)..] {
                        let _ = writeln!(text, "    {line}");
                    }
                }
            }
        }
        text
    }
}

impl Drop for KafkaCluster {
    fn drop(&mut self) {
        for node in &mut self.nodes {
            if let Some(mut process) = node.process.take() {
                process.kill();
            }
        }
        self.watchdog.disarm();
        let keep = std::thread::panicking() || std::env::var_os("KPRESS_KEEP_LOGS").is_some();
        if let Some(dir) = self.dir.take() {
            if keep {
                let path = dir.keep();
                eprintln!("Kafka cluster files kept in {}", path.display());
                for node in &self.nodes {
                    eprintln!("  node {} log: {}", node.id, node.log_file.display());
                }
            }
        }
    }
}
