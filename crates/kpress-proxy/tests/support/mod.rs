//! A one-node Apache Kafka (KRaft) broker for this crate's tests, from the jars
//! `scripts/setup.sh` caches under `.cache/kafka/<version>/libs`, on free loopback
//! ports with its own temporary directory; killed when dropped.

#![allow(dead_code)]

use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

pub(crate) const KAFKA_VERSION: &str = "4.1.1";
/// The older broker the project supports (log4j 1 through reload4j).
pub(crate) const KAFKA_OLD_VERSION: &str = "3.9.1";

/// The workspace root (two levels above this crate).
pub(crate) fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .expect("crate sits at crates/kpress-proxy")
        .to_path_buf()
}

pub(crate) fn kafka_libs() -> PathBuf {
    kafka_libs_of(KAFKA_VERSION)
}

pub(crate) fn kafka_libs_of(version: &str) -> PathBuf {
    workspace_root()
        .join(".cache/kafka")
        .join(version)
        .join("libs")
}

/// A port nobody listens on right now.
pub(crate) fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("bind an ephemeral port")
}

/// A directory under the system temp dir, removed on drop.
pub(crate) struct TempDir(PathBuf);

impl TempDir {
    pub(crate) fn new(prefix: &str) -> TempDir {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default();
        let dir = std::env::temp_dir().join(format!("{prefix}-{}-{nanos}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("create temp dir");
        TempDir(dir)
    }

    pub(crate) fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A running one-node broker.
pub(crate) struct Broker {
    pub(crate) version: &'static str,
    pub(crate) node_id: i32,
    pub(crate) port: u16,
    pub(crate) data_dir: PathBuf,
    child: Child,
    pub(crate) dir: TempDir,
}

/// A KRaft cluster id: 16 bytes in URL-safe base64 without padding.
fn cluster_id() -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let seed = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default()
        ^ u128::from(std::process::id()) << 64;
    let bytes = seed.to_be_bytes();
    let mut out = String::new();
    let (mut bits, mut nbits) = (0u32, 0);
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

pub(crate) fn java(main_class: &str) -> Command {
    java_of(KAFKA_VERSION, main_class)
}

pub(crate) fn java_of(version: &str, main_class: &str) -> Command {
    let mut cmd = Command::new("java");
    cmd.arg("-Xmx512m")
        .arg("-cp")
        .arg(format!("{}/*", kafka_libs_of(version).display()))
        .arg(main_class);
    cmd
}

impl Broker {
    /// Formats and starts a one-node cluster; returns once its port accepts connections.
    pub(crate) fn start() -> Broker {
        Broker::start_cluster(1).pop().expect("one broker")
    }

    /// Formats and starts `n` nodes (broker and controller each, node ids 1..=n, one
    /// quorum); returns once every broker port accepts connections.
    pub(crate) fn start_cluster(n: usize) -> Vec<Broker> {
        Broker::start_cluster_with(KAFKA_VERSION, n, false)
    }

    /// A one-node broker of another Kafka version.
    pub(crate) fn start_version(version: &'static str) -> Broker {
        Broker::start_cluster_with(version, 1, false)
            .pop()
            .expect("one broker")
    }

    /// A one-node broker whose client listener wants SASL/PLAIN: users `alice`
    /// (password `alice-secret`) and `admin` (the broker itself).
    pub(crate) fn start_sasl_plain() -> Broker {
        Broker::start_cluster_with(KAFKA_VERSION, 1, true)
            .pop()
            .expect("one broker")
    }

    fn start_cluster_with(version: &'static str, n: usize, sasl_plain: bool) -> Vec<Broker> {
        assert!(
            kafka_libs_of(version).is_dir(),
            "Kafka jars missing at {}: run scripts/setup.sh",
            kafka_libs_of(version).display()
        );
        let ports: Vec<(u16, u16)> = (0..n).map(|_| (free_port(), free_port())).collect();
        let voters = ports
            .iter()
            .enumerate()
            .map(|(i, (_, controller_port))| format!("{}@127.0.0.1:{controller_port}", i + 1))
            .collect::<Vec<_>>()
            .join(",");
        let internal_rf = n.min(3);
        let cluster_id = cluster_id();
        let mut brokers = Vec::new();
        for (i, &(port, controller_port)) in ports.iter().enumerate() {
            let node_id = i as i32 + 1;
            let dir = TempDir::new(&format!("kpress-proxy-kafka-{node_id}"));
            let data_dir = dir.path().join("data");
            let log_file = dir.path().join("server.log");
            let properties = dir.path().join("server.properties");
            let (listener, sasl) = if sasl_plain {
                (
                    "SASL_PLAINTEXT",
                    "sasl.enabled.mechanisms=PLAIN\n\
                     sasl.mechanism.inter.broker.protocol=PLAIN\n\
                     listener.name.sasl_plaintext.plain.sasl.jaas.config=\
                     org.apache.kafka.common.security.plain.PlainLoginModule required \
                     username=\"admin\" password=\"admin-secret\" \
                     user_admin=\"admin-secret\" user_alice=\"alice-secret\";\n",
                )
            } else {
                ("PLAINTEXT", "")
            };
            std::fs::write(
                &properties,
                format!(
                    "process.roles=broker,controller\n\
                     node.id={node_id}\n\
                     controller.quorum.voters={voters}\n\
                     listeners={listener}://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port}\n\
                     advertised.listeners={listener}://127.0.0.1:{port}\n\
                     controller.listener.names=CONTROLLER\n\
                     inter.broker.listener.name={listener}\n\
                     listener.security.protocol.map={listener}:{listener},CONTROLLER:PLAINTEXT\n\
                     {sasl}\
                     log.dirs={}\n\
                     num.partitions={n}\n\
                     auto.create.topics.enable=true\n\
                     offsets.topic.replication.factor={internal_rf}\n\
                     offsets.topic.num.partitions=1\n\
                     transaction.state.log.replication.factor={internal_rf}\n\
                     transaction.state.log.min.isr=1\n\
                     group.initial.rebalance.delay.ms=0\n",
                    data_dir.display()
                ),
            )
            .expect("write server.properties");
            // Kafka 4 logs through log4j 2, Kafka 3 through log4j 1 (reload4j).
            let log4j = if version.starts_with("3.") {
                let file = dir.path().join("log4j.properties");
                std::fs::write(
                    &file,
                    format!(
                        "log4j.rootLogger=INFO, file\n\
                         log4j.appender.file=org.apache.log4j.FileAppender\n\
                         log4j.appender.file.File={}\n\
                         log4j.appender.file.layout=org.apache.log4j.PatternLayout\n\
                         log4j.appender.file.layout.ConversionPattern=[%d] %p %m (%c)%n\n",
                        log_file.display()
                    ),
                )
                .expect("write log4j.properties");
                format!("-Dlog4j.configuration=file:{}", file.display())
            } else {
                let file = dir.path().join("log4j2.properties");
                std::fs::write(
                    &file,
                    format!(
                        "appender.file.type=File\nappender.file.name=file\nappender.file.fileName={}\n\
                         appender.file.layout.type=PatternLayout\nappender.file.layout.pattern=[%d] %p %m (%c)%n\n\
                         rootLogger.level=INFO\nrootLogger.appenderRef.file.ref=file\n",
                        log_file.display()
                    ),
                )
                .expect("write log4j2.properties");
                format!("-Dlog4j2.configurationFile={}", file.display())
            };
            let format = java_of(version, "kafka.tools.StorageTool")
                .args(["format", "-t", &cluster_id, "-c"])
                .arg(&properties)
                .output()
                .expect("run StorageTool");
            assert!(
                format.status.success(),
                "StorageTool format failed: {}",
                String::from_utf8_lossy(&format.stderr)
            );
            let child = java_with_log4j(version, &log4j, "kafka.Kafka")
                .arg(&properties)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("start kafka.Kafka");
            brokers.push(Broker {
                version,
                node_id,
                port,
                data_dir,
                child,
                dir,
            });
        }
        let deadline = Instant::now() + Duration::from_secs(120);
        for broker in &brokers {
            while TcpStream::connect(("127.0.0.1", broker.port)).is_err() {
                assert!(
                    Instant::now() < deadline,
                    "broker {} did not listen within 120 s; log: {}",
                    broker.node_id,
                    broker.log()
                );
                std::thread::sleep(Duration::from_millis(200));
            }
        }
        brokers
    }

    /// Partitions of `topic` this broker holds.
    pub(crate) fn partitions_of(&self, topic: &str) -> Vec<u32> {
        let prefix = format!("{topic}-");
        let mut found: Vec<u32> = std::fs::read_dir(&self.data_dir)
            .map(|dir| {
                dir.filter_map(|e| e.ok()?.file_name().into_string().ok())
                    .filter_map(|name| name.strip_prefix(&prefix)?.parse().ok())
                    .collect()
            })
            .unwrap_or_default();
        found.sort();
        found
    }

    pub(crate) fn address(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    pub(crate) fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("server.log")).unwrap_or_default()
    }

    /// Kafka's DumpLogSegments (`--deep-iteration`) over every segment of a partition.
    pub(crate) fn dump_partition(&self, topic: &str, partition: u32) -> String {
        let dir = self.data_dir.join(format!("{topic}-{partition}"));
        let mut segments: Vec<PathBuf> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("read {}: {e}", dir.display()))
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "log"))
            .collect();
        segments.sort();
        let mut cmd = java_of(self.version, "kafka.tools.DumpLogSegments");
        cmd.args(["--deep-iteration", "--files"]).arg(
            segments
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(","),
        );
        let out = run(cmd);
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

fn java_with_log4j(version: &str, log_config: &str, main_class: &str) -> Command {
    let mut cmd = Command::new("java");
    cmd.arg("-Xmx768m")
        .arg(log_config)
        .arg("-cp")
        .arg(format!("{}/*", kafka_libs_of(version).display()))
        .arg(main_class);
    cmd
}

impl Drop for Broker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs a command to completion, panicking with its output if it fails.
pub(crate) fn run(mut cmd: Command) -> Output {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("spawn {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed ({}):\nstdout: {}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Runs a command with `input` on stdin.
pub(crate) fn run_with_stdin(mut cmd: Command, input: &[u8]) -> Output {
    use std::io::Write;
    cmd.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap_or_else(|e| panic!("spawn {cmd:?}: {e}"));
    child
        .stdin
        .take()
        .expect("piped stdin")
        .write_all(input)
        .expect("write stdin");
    let out = child.wait_with_output().expect("wait");
    assert!(
        out.status.success(),
        "{cmd:?} failed ({}):\nstdout: {}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}
