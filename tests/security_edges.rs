//! The edges of kpress's security, against `kpress run` in front of a real 4.1.1
//! broker: TLS files reloaded on change and on SIGHUP while a connection stays open, a
//! plaintext client on a TLS listener refused with a clear log line, kpress never
//! connecting anywhere a client names (SNI names, request strings), and
//! `rewrite_before_auth = false` leaving an unauthenticated client's batches alone.

use std::collections::HashSet;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use kpress_batch::builder::{BatchBuilder, Record};
use kpress_codec::Codec;
use kpress_tests::bare_requests::{api_versions, exchange, parse_produce_v7, produce_v7};
use kpress_tests::cluster::{BrokerListener, ClusterSecurity};
use kpress_tests::compression::Compression;
use kpress_tests::data::Dataset;
use kpress_tests::java_client::JavaClient;
use kpress_tests::kpress::{
    storing_rules, KpressProxy, KpressSetup, ListenerTlsKeys, SniListener, UpstreamSaslKeys,
};
use kpress_tests::proc_status::pid_with_argument;
use kpress_tests::secure_stream::{SecureStream, TlsOptions};
use kpress_tests::tls::{CertFiles, ClientSecurity, SaslMechanism, SaslUser, TestPki};
use kpress_tests::{kafka_version, KafkaCluster};

const TIMEOUT: Duration = Duration::from_secs(20);

fn alice() -> SaslUser {
    SaslUser::new(SaslMechanism::Plain, "alice", "alice-secret")
}

fn kpress_user() -> SaslUser {
    SaslUser::new(SaslMechanism::ScramSha512, "kpress", "kpress-secret")
}

/// One broker for the file: PLAINTEXT (kpress's upstream in most tests) and
/// SASL_PLAINTEXT with a PLAIN client and kpress's own SCRAM login.
fn cluster() -> &'static KafkaCluster {
    static CLUSTER: OnceLock<KafkaCluster> = OnceLock::new();
    CLUSTER.get_or_init(|| {
        let security = ClusterSecurity {
            listeners: vec![BrokerListener::SaslPlaintext],
            sasl_users: vec![alice(), kpress_user()],
        };
        KafkaCluster::start_with(kafka_version(), 1, &security)
            .unwrap_or_else(|e| panic!("starting Kafka: {e:#}"))
    })
}

/// A temp dir with a CA of its own, for kpress's listener certificates.
struct Certs {
    dir: tempfile::TempDir,
    pki: TestPki,
}

impl Certs {
    fn new(name: &str) -> Certs {
        let dir = tempfile::Builder::new()
            .prefix(&format!("kpress-{name}-"))
            .tempdir()
            .unwrap();
        let pki = TestPki::generate(&dir.path().join("ca")).unwrap();
        Certs { dir, pki }
    }

    fn server(&self, names: &[&str]) -> CertFiles {
        self.pki.server(names).unwrap()
    }

    fn trusting_clients(&self) -> ClientSecurity {
        ClientSecurity::ssl(self.pki.ca_cert())
    }
}

fn counter(proxy: &KpressProxy, name: &str, labels: &[(&str, &str)]) -> f64 {
    proxy
        .counter(name, labels)
        .unwrap_or_else(|e| panic!("scraping {name}: {e:#}\n{}", proxy.log()))
}

/// Polls `check` every 100 ms until it holds or `within` passes.
fn eventually(within: Duration, mut check: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + within;
    loop {
        if check() {
            return true;
        }
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Replaces `to` with `from`'s bytes in one rename, as secret stores do.
fn replace_file(from: &Path, to: &Path) {
    let staged = to.with_extension("staged");
    std::fs::copy(from, &staged).unwrap();
    std::fs::rename(&staged, to).unwrap();
}

/// kpress with a TLS listener serving the certificate at `cert`/`key`, in front of the
/// PLAINTEXT listener, storing `zstd.*` topics in zstd.
fn tls_kpress(cert: &Path, key: &Path) -> KpressProxy {
    let cluster = cluster();
    let mut setup = KpressSetup::in_front_of(
        &cluster.node_addresses(),
        &cluster.node_ids(),
        &storing_rules(&["zstd"]),
    );
    setup.listener_tls = Some(ListenerTlsKeys {
        cert: cert.to_owned(),
        key: key.to_owned(),
        client_ca: None,
        client_auth: None,
        min_version: None,
    });
    KpressProxy::start_with(setup).unwrap_or_else(|e| panic!("starting kpress: {e:#}"))
}

#[test]
fn tls_files_reload_on_change_and_on_sighup_without_dropping_connections() {
    let first = Certs::new("reload-first");
    let second = Certs::new("reload-second");
    let served = first.dir.path().join("served");
    std::fs::create_dir_all(&served).unwrap();
    let (cert, key) = (served.join("kpress.pem"), served.join("kpress.key"));
    let old = first.server(&["127.0.0.1"]);
    std::fs::copy(&old.chain, &cert).unwrap();
    std::fs::copy(&old.key, &key).unwrap();
    let proxy = tls_kpress(&cert, &key);
    let reloads = |result: &str| {
        counter(
            &proxy,
            "kpress_tls_reloads_total",
            &[("side", "listener"), ("result", result)],
        )
    };

    // A connection made before any reload: it must live through all of them.
    let mut open = SecureStream::connect(proxy.listen(), &first.trusting_clients(), TIMEOUT)
        .unwrap_or_else(|e| panic!("TLS to kpress: {e:#}\n{}", proxy.log()));
    open.api_versions(3).unwrap();

    // A key that does not load: refused, the certificate in force still serves.
    let broken = served.join("broken.key");
    std::fs::write(
        &broken,
        "-----BEGIN PRIVATE KEY-----\nbm90IGEga2V5\n-----END PRIVATE KEY-----\n",
    )
    .unwrap();
    replace_file(&broken, &key);
    assert!(
        eventually(TIMEOUT, || reloads("failed") >= 1.0),
        "a broken key was not reported\n{}",
        proxy.log()
    );
    assert!(proxy
        .log()
        .contains("TLS certificates not reloaded: keeping the ones in force"));
    SecureStream::connect(proxy.listen(), &first.trusting_clients(), TIMEOUT)
        .unwrap_or_else(|e| panic!("the old certificate no longer serves: {e:#}"))
        .api_versions(3)
        .unwrap();

    // A renewed certificate from another CA: new handshakes get it.
    let renewed = second.server(&["127.0.0.1"]);
    replace_file(&renewed.chain, &cert);
    replace_file(&renewed.key, &key);
    assert!(
        eventually(TIMEOUT, || SecureStream::connect(
            proxy.listen(),
            &second.trusting_clients(),
            TIMEOUT
        )
        .and_then(|mut s| s.api_versions(3).map(|_| ()))
        .is_ok()),
        "the renewed certificate is not served\n{}",
        proxy.log()
    );
    assert!(reloads("changed") >= 1.0);
    assert!(
        SecureStream::connect(proxy.listen(), &first.trusting_clients(), TIMEOUT)
            .and_then(|mut s| s.api_versions(3).map(|_| ()))
            .is_err(),
        "the old CA still verifies kpress"
    );

    // SIGHUP re-reads too (nothing changed now).
    let unchanged = reloads("unchanged");
    let pid = pid_with_argument(&proxy.config_file().unwrap()).unwrap();
    let status = std::process::Command::new("kill")
        .args(["-HUP", &pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    assert!(
        eventually(TIMEOUT, || reloads("unchanged") > unchanged),
        "SIGHUP did not re-read the files\n{}",
        proxy.log()
    );
    assert!(proxy.log().contains("SIGHUP: re-reading files"));

    // The first connection is still served.
    open.api_versions(3)
        .unwrap_or_else(|e| panic!("the open connection was dropped: {e:#}\n{}", proxy.log()));
}

#[test]
fn a_plaintext_client_on_a_tls_listener_is_refused_with_a_clear_log_line() {
    let certs = Certs::new("plaintext");
    let server = certs.server(&["127.0.0.1"]);
    let proxy = tls_kpress(&server.chain, &server.key);
    let mut plain = TcpStream::connect(proxy.listen()).unwrap();
    plain.set_read_timeout(Some(TIMEOUT)).unwrap();
    plain.write_all(&api_versions(3, 1)).unwrap();
    let mut rest = Vec::new();
    // Closed, without an answer: EOF or a reset.
    let read = plain.read_to_end(&mut rest);
    assert!(
        matches!(read, Ok(0)) || read.is_err(),
        "a plaintext client got {read:?} {rest:?}"
    );
    assert!(
        eventually(TIMEOUT, || proxy
            .log()
            .contains("client spoke plaintext to a TLS listener")),
        "{}",
        proxy.log()
    );
    assert_eq!(
        counter(
            &proxy,
            "kpress_tls_handshake_failures_total",
            &[("reason", "plaintext")]
        ),
        1.0
    );
    assert!(!proxy.log().contains("panicked"), "{}", proxy.log());
    // kpress serves TLS clients as before.
    SecureStream::connect(proxy.listen(), &certs.trusting_clients(), TIMEOUT)
        .unwrap()
        .api_versions(3)
        .unwrap();
}

/// A TCP listener that counts the connections it gets: kpress must never make one.
struct Canary {
    addr: SocketAddr,
    accepted: Arc<AtomicUsize>,
}

impl Canary {
    fn start() -> Canary {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let accepted = Arc::new(AtomicUsize::new(0));
        let counted = Arc::clone(&accepted);
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                counted.fetch_add(1, Ordering::SeqCst);
                drop(stream);
            }
        });
        Canary { addr, accepted }
    }
}

/// A request whose strings name `host:port`: client id and one string field.
fn naming(api_key: i16, version: i16, correlation_id: i32, target: &str, body: &[u8]) -> Vec<u8> {
    let mut frame = Vec::new();
    frame.extend_from_slice(&api_key.to_be_bytes());
    frame.extend_from_slice(&version.to_be_bytes());
    frame.extend_from_slice(&correlation_id.to_be_bytes());
    frame.extend_from_slice(&(target.len() as i16).to_be_bytes());
    frame.extend_from_slice(target.as_bytes());
    frame.extend_from_slice(body);
    let mut sized = (frame.len() as i32).to_be_bytes().to_vec();
    sized.extend_from_slice(&frame);
    sized
}

fn kafka_string(s: &str) -> Vec<u8> {
    let mut out = (s.len() as i16).to_be_bytes().to_vec();
    out.extend_from_slice(s.as_bytes());
    out
}

/// Every TCP connection `pid` has that it did not accept: (local, remote) ports.
fn outbound_connections(pid: u32) -> Vec<(u16, SocketAddr)> {
    let mut inodes = HashSet::new();
    for fd in std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .flatten()
    {
        if let Ok(target) = std::fs::read_link(fd.path()) {
            let target = target.to_string_lossy().to_string();
            if let Some(inode) = target
                .strip_prefix("socket:[")
                .and_then(|t| t.strip_suffix(']'))
            {
                inodes.insert(inode.to_owned());
            }
        }
    }
    let mut listening = HashSet::new();
    let mut connected = Vec::new();
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let text = std::fs::read_to_string(table).unwrap_or_default();
        for line in text.lines().skip(1) {
            let fields: Vec<&str> = line.split_whitespace().collect();
            if fields.len() < 10 || !inodes.contains(fields[9]) {
                continue;
            }
            let local = parse_proc_addr(fields[1]);
            let remote = parse_proc_addr(fields[2]);
            match fields[3] {
                "0A" => {
                    listening.insert(local.port());
                }
                // ESTABLISHED, SYN_SENT
                "01" | "02" => connected.push((local, remote)),
                _ => {}
            }
        }
    }
    connected
        .into_iter()
        .filter(|(local, _)| !listening.contains(&local.port()))
        .map(|(local, remote)| (local.port(), remote))
        .collect()
}

/// `0100007F:1F90` (hex IPv4, little-endian words) or the IPv6 form.
fn parse_proc_addr(text: &str) -> SocketAddr {
    let (ip, port) = text.split_once(':').unwrap();
    let port = u16::from_str_radix(port, 16).unwrap();
    let ip: std::net::IpAddr = if ip.len() == 8 {
        let n = u32::from_str_radix(ip, 16).unwrap();
        std::net::Ipv4Addr::from(n.swap_bytes()).into()
    } else {
        let mut bytes = [0u8; 16];
        for (i, word) in bytes.chunks_mut(4).enumerate() {
            let n = u32::from_str_radix(&ip[i * 8..i * 8 + 8], 16).unwrap();
            word.copy_from_slice(&n.swap_bytes().to_be_bytes());
        }
        std::net::Ipv6Addr::from(bytes).into()
    };
    SocketAddr::new(ip, port)
}

#[test]
fn no_sni_name_or_request_makes_kpress_connect_anywhere_else() {
    let cluster = cluster();
    let certs = Certs::new("relay");
    let server = certs.server(&["*.relay.test", "bootstrap.relay.test", "127.0.0.1"]);
    let canary = Canary::start();
    let mut setup = KpressSetup::in_front_of(
        &cluster.node_addresses(),
        &cluster.node_ids(),
        &storing_rules(&["zstd"]),
    );
    setup.sni = Some(SniListener {
        advertised_host_pattern: "broker-{node}.relay.test".into(),
        bootstrap_host: Some("bootstrap.relay.test".into()),
    });
    setup.listener_tls = Some(ListenerTlsKeys::serving(&server));
    let proxy = KpressProxy::start_with(setup).unwrap();
    let pid = pid_with_argument(&proxy.config_file().unwrap()).unwrap();

    let with_name = |name: &str| TlsOptions {
        server_name: Some(name.to_owned()),
        ..TlsOptions::default()
    };
    // Names of nothing kpress serves, of a node the brokers never named, of the canary
    // itself: each refused in the handshake, never connected anywhere.
    let canary_name = format!("canary-{}.relay.test", canary.addr.port());
    let refused = [
        "broker-99.relay.test",
        "broker-01.relay.test",
        "evil.relay.test",
        "localhost",
        canary_name.as_str(),
    ];
    for name in refused {
        let tried = SecureStream::connect_with(
            proxy.listen(),
            &certs.trusting_clients(),
            &with_name(name),
            TIMEOUT,
        )
        .and_then(|mut s| s.api_versions(3).map(|_| ()));
        assert!(tried.is_err(), "{name} was served\n{}", proxy.log());
    }
    assert!(
        eventually(TIMEOUT, || counter(
            &proxy,
            "kpress_tls_handshake_failures_total",
            &[("reason", "unknown_server_name")]
        ) >= refused.len() as f64),
        "{}",
        proxy.log()
    );
    assert!(proxy.log().contains("broker-99.relay.test"));

    // Requests whose strings name the canary, on the bootstrap and on a node.
    let target = canary.addr.to_string();
    let node = cluster.node_ids()[0];
    for name in [
        "bootstrap.relay.test".to_owned(),
        format!("broker-{node}.relay.test"),
    ] {
        let mut stream = SecureStream::connect_with(
            proxy.listen(),
            &certs.trusting_clients(),
            &with_name(&name),
            TIMEOUT,
        )
        .unwrap_or_else(|e| panic!("{name}: {e:#}\n{}", proxy.log()));
        // Metadata v1 for a topic named like the canary's address.
        let mut metadata = 1i32.to_be_bytes().to_vec();
        metadata.extend(kafka_string(&target));
        exchange(&mut stream, &naming(3, 1, 1, &target, &metadata)).unwrap();
        // FindCoordinator v1 for a group named so.
        let mut find = kafka_string(&target);
        find.push(0);
        exchange(&mut stream, &naming(10, 1, 2, &target, &find)).unwrap();
        // Garbage after a valid header: the broker closes the connection.
        let _ = exchange(&mut stream, &naming(18, 0, 3, &target, b"\xff\xff\xff"));
    }

    // Connections held open while kpress's sockets are looked at, so its upstream
    // connections are there to be checked.
    let held: Vec<SecureStream> = [
        "bootstrap.relay.test".to_owned(),
        format!("broker-{node}.relay.test"),
    ]
    .iter()
    .map(|name| {
        let mut stream = SecureStream::connect_with(
            proxy.listen(),
            &certs.trusting_clients(),
            &with_name(name),
            TIMEOUT,
        )
        .unwrap();
        stream.api_versions(3).unwrap();
        stream
    })
    .collect();
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(
        canary.accepted.load(Ordering::SeqCst),
        0,
        "kpress reached the canary"
    );
    let broker_ports: HashSet<u16> = cluster
        .node_addresses()
        .iter()
        .map(SocketAddr::port)
        .collect();
    let outbound = outbound_connections(pid);
    for (local, remote) in &outbound {
        assert!(
            broker_ports.contains(&remote.port()) && remote.ip().is_loopback(),
            "kpress has a connection from port {local} to {remote}, not a broker\n{}",
            proxy.log()
        );
    }
    assert!(
        outbound.len() >= held.len(),
        "the check saw {} upstream connections for {} clients",
        outbound.len(),
        held.len()
    );
}

/// A gzip batch of apache log lines.
fn gzip_batch() -> Vec<u8> {
    let records: Vec<Record> = Dataset::ApacheAccessLog
        .records()
        .into_iter()
        .take(50)
        .map(Record::value)
        .collect();
    BatchBuilder::codec(Codec::Gzip).build(&records).unwrap()
}

#[test]
fn an_unauthenticated_clients_batches_are_left_alone_with_rewrite_before_auth_off() {
    let cluster = cluster();
    let topic = "zstd.before-auth";
    JavaClient::new(kafka_version())
        .create_producer_codec_topics(&cluster.bootstrap(), &[topic], 1)
        .unwrap();
    let sasl = cluster.listener_addresses(BrokerListener::SaslPlaintext);
    let mut setup = KpressSetup::in_front_of(&sasl, &cluster.node_ids(), &storing_rules(&["zstd"]));
    // [upstream.sasl] makes rewrite_before_auth default to false.
    setup.upstream_sasl = Some(UpstreamSaslKeys::with_password_file(&kpress_user()));
    let proxy = KpressProxy::start_with(setup).unwrap();
    let batch = gzip_batch();
    let produce = |correlation_id| {
        produce_v7(
            correlation_id,
            -1,
            30_000,
            &[(topic.as_bytes(), vec![(0, &batch[..])])],
        )
    };

    // No SASL: the broker closes the connection; kpress spent nothing on the batch.
    let mut anonymous = TcpStream::connect(proxy.listen()).unwrap();
    anonymous.set_read_timeout(Some(TIMEOUT)).unwrap();
    assert!(
        exchange(&mut anonymous, &produce(1)).is_err(),
        "a SASL listener answered a Produce before authentication"
    );
    let not_rewritten = |proxy: &KpressProxy| {
        counter(
            proxy,
            "kpress_produce_requests_not_rewritten_total",
            &[("reason", "before_auth")],
        )
    };
    assert!(eventually(TIMEOUT, || not_rewritten(&proxy) == 1.0));
    assert_eq!(counter(&proxy, "kpress_batches_rewritten_total", &[]), 0.0);

    // Authenticated (PLAIN, through kpress): rewritten into zstd.
    let mut signed_in = SecureStream::connect(
        proxy.listen(),
        &ClientSecurity::sasl_plaintext(&alice()),
        TIMEOUT,
    )
    .unwrap_or_else(|e| panic!("SASL through kpress: {e:#}\n{}", proxy.log()));
    let answer = exchange(&mut signed_in, &produce(2)).unwrap();
    let (_, partitions) = parse_produce_v7(&answer).unwrap();
    assert!(
        partitions.iter().all(|p| p.error_code == 0),
        "{partitions:?}"
    );
    assert_eq!(not_rewritten(&proxy), 1.0);
    assert_eq!(
        counter(&proxy, "kpress_batches_rewritten_total", &[("to", "zstd")]),
        1.0
    );
    let dumps = cluster.dump_partition_0(&[topic]).unwrap();
    let records: Vec<Vec<u8>> = Dataset::ApacheAccessLog
        .records()
        .into_iter()
        .take(50)
        .collect();
    let problems = dumps[0].problems_storing(topic, Compression::Zstd, &records);
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    // kpress's own SCRAM login on its side connection worked.
    assert!(
        counter(
            &proxy,
            "kpress_side_authentications_total",
            &[("result", "ok")]
        ) >= 1.0,
        "{}",
        proxy.log()
    );
}
