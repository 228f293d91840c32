//! `kpress run` end to end: a real one-node Apache Kafka (KRaft, the jars
//! `scripts/setup.sh kafka` caches), a real librdkafka client (kcat), the Prometheus
//! endpoint from `[metrics]`, and a graceful stop on SIGTERM.

use std::fs::File;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A child process killed (and reaped) on drop, so a failing test leaves nothing behind.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn kafka_libs() -> PathBuf {
    let versions = std::fs::read_to_string(workspace_root().join("scripts/versions.sh")).unwrap();
    let version = versions
        .lines()
        .find_map(|l| l.strip_prefix("KAFKA_VERSION="))
        .expect("KAFKA_VERSION in scripts/versions.sh");
    let libs = workspace_root()
        .join(".cache/kafka")
        .join(version)
        .join("libs");
    assert!(
        libs.is_dir(),
        "no Kafka jars at {}: run scripts/setup.sh kafka",
        libs.display()
    );
    libs
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn wait_for_port(port: u16, child: &mut Child, what: &str, log: &Path) {
    let deadline = Instant::now() + Duration::from_secs(90);
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    while TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_err() {
        if let Some(status) = child.try_wait().unwrap() {
            panic!(
                "{what} exited ({status}) before listening on {port}:\n{}",
                std::fs::read_to_string(log).unwrap_or_default()
            );
        }
        assert!(Instant::now() < deadline, "{what} did not listen on {port}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn start_broker(dir: &Path) -> (Running, u16) {
    let libs = kafka_libs();
    let (port, controller) = (free_port(), free_port());
    let props = dir.join("server.properties");
    std::fs::write(
        &props,
        format!(
            "process.roles=broker,controller\nnode.id=1\n\
             controller.quorum.voters=1@127.0.0.1:{controller}\n\
             listeners=PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller}\n\
             advertised.listeners=PLAINTEXT://127.0.0.1:{port}\n\
             controller.listener.names=CONTROLLER\ninter.broker.listener.name=PLAINTEXT\n\
             listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT\n\
             log.dirs={}\nnum.partitions=1\noffsets.topic.replication.factor=1\n\
             transaction.state.log.replication.factor=1\ntransaction.state.log.min.isr=1\n",
            dir.join("data").display()
        ),
    )
    .unwrap();
    let log = dir.join("server.log");
    let log4j = dir.join("log4j2.properties");
    std::fs::write(
        &log4j,
        format!(
            "rootLogger.level=INFO\nrootLogger.appenderRef.file.ref=file\n\
             appender.file.type=File\nappender.file.name=file\nappender.file.fileName={}\n\
             appender.file.layout.type=PatternLayout\nappender.file.layout.pattern=%d %p %m%n\n",
            log.display()
        ),
    )
    .unwrap();
    let java = |args: &[&str]| {
        let mut cmd = Command::new("java");
        cmd.arg("-Xmx512m")
            .arg(format!("-Dlog4j2.configurationFile={}", log4j.display()))
            .arg("-cp")
            .arg(format!("{}/*", libs.display()))
            .args(args);
        cmd
    };
    let out = java(&["kafka.tools.StorageTool", "random-uuid"])
        .output()
        .expect("java");
    let cluster_id = String::from_utf8(out.stdout).unwrap().trim().to_owned();
    let status = java(&[
        "kafka.tools.StorageTool",
        "format",
        "-t",
        &cluster_id,
        "-c",
        props.to_str().unwrap(),
    ])
    .stdout(Stdio::null())
    .status()
    .unwrap();
    assert!(status.success(), "formatting the broker's storage failed");
    let mut broker = java(&["kafka.Kafka", props.to_str().unwrap()])
        .stdout(Stdio::null())
        .stderr(File::create(dir.join("broker.stderr")).unwrap())
        .spawn()
        .expect("start Kafka");
    wait_for_port(port, &mut broker, "Kafka", &log);
    (Running(broker), port)
}

fn http_get(addr: SocketAddr, path: &str) -> String {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    response
}

fn kcat(args: &[&str], stdin: &[u8]) -> Vec<u8> {
    let mut child = Command::new("kcat")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("kcat (scripts/setup.sh installs it)");
    child.stdin.take().unwrap().write_all(stdin).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "kcat {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

#[test]
fn run_serves_the_policy_exports_metrics_and_stops_on_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let (_broker, broker_port) = start_broker(dir.path());

    let listen = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let metrics = SocketAddr::from(([127, 0, 0, 1], free_port()));
    // Node 1 is served on node_port_base + 1: a port that was just free.
    let node_port_base = free_port() - 1;
    let config = dir.path().join("kpress.toml");
    std::fs::write(
        &config,
        format!(
            r#"[listener]
bind = "{listen}"
node_port_base = {node_port_base}
[upstream]
bootstrap_servers = ["127.0.0.1:{broker_port}"]
[metrics]
bind = "{metrics}"
[[topics]]
match = "logs.*"
compression.type = "zstd"
compression.zstd.level = 3
"#
        ),
    )
    .unwrap();
    let kpress_log = dir.path().join("kpress.log");
    let mut kpress = Running(
        Command::new(env!("CARGO_BIN_EXE_kpress"))
            .args(["--log", "info", "run", "--config"])
            .arg(&config)
            .args(["--shutdown-grace", "5"])
            .stdout(Stdio::null())
            .stderr(File::create(&kpress_log).unwrap())
            .spawn()
            .unwrap(),
    );
    wait_for_port(listen.port(), &mut kpress.0, "kpress", &kpress_log);

    let records: Vec<String> = (0..2000)
        .map(|i| format!("{i} GET /index.html HTTP/1.1 200 {}", i * 7))
        .collect();
    let input = records.join("\n") + "\n";
    let bootstrap = listen.to_string();
    kcat(
        &[
            "-P",
            "-b",
            &bootstrap,
            "-t",
            "logs.e2e",
            "-z",
            "gzip",
            "-X",
            "linger.ms=50",
        ],
        input.as_bytes(),
    );
    let consumed = kcat(
        &[
            "-C",
            "-b",
            &bootstrap,
            "-t",
            "logs.e2e",
            "-o",
            "beginning",
            "-e",
            "-q",
        ],
        b"",
    );
    assert_eq!(
        String::from_utf8(consumed).unwrap(),
        input,
        "records through kpress"
    );

    // What the broker stored: every batch in the policy's codec.
    let segment = dir.path().join("data/logs.e2e-0/00000000000000000000.log");
    let dump = Command::new("java")
        .arg("-cp")
        .arg(format!("{}/*", kafka_libs().display()))
        .args(["kafka.tools.DumpLogSegments", "--files"])
        .arg(&segment)
        .output()
        .unwrap();
    let dump = String::from_utf8_lossy(&dump.stdout);
    let codecs: Vec<&str> = dump
        .lines()
        .filter_map(|l| l.split("compresscodec: ").nth(1)?.split_whitespace().next())
        .collect();
    assert!(
        !codecs.is_empty(),
        "no batches in {}:\n{dump}",
        segment.display()
    );
    assert!(codecs.iter().all(|c| *c == "zstd"), "{codecs:?}");

    let scrape = http_get(metrics, "/metrics");
    assert!(scrape.starts_with("HTTP/1.1 200"), "{scrape}");
    let rewritten: u64 = scrape
        .lines()
        .find(|l| {
            l.starts_with("kpress_batches_rewritten_total{")
                && l.contains("topic=\"logs.e2e\"")
                && l.contains("from=\"gzip\"")
                && l.contains("to=\"zstd\"")
        })
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
        .unwrap_or_else(|| panic!("no gzip->zstd rewrite counted:\n{scrape}"));
    assert!(rewritten >= 1);

    let status = Command::new("kill")
        .args(["-TERM", &kpress.0.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let deadline = Instant::now() + Duration::from_secs(20);
    let exit = loop {
        if let Some(exit) = kpress.0.try_wait().unwrap() {
            break exit;
        }
        assert!(Instant::now() < deadline, "kpress did not stop on SIGTERM");
        std::thread::sleep(Duration::from_millis(100));
    };
    let log = std::fs::read_to_string(&kpress_log).unwrap();
    assert!(exit.success(), "kpress exit {exit}:\n{log}");
    assert!(log.contains("SIGTERM: shutting down"), "{log}");
    assert!(
        !log.contains("\u{1b}["),
        "no terminal colours in a log file"
    );
}
