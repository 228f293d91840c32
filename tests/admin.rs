//! `kpress run`'s admin endpoint (`[admin] bind`) against a real Kafka 4.1.1 broker:
//! `/healthz` while the process serves, `/readyz` refused before any broker answered
//! and given once one has (and kept while idle: kpress probes the broker itself), then
//! refused again once the broker is gone; `/metrics` with kpress's counters after a
//! Java producer's traffic; `/policy` following a policy file edited under it (hash,
//! load time and the rule's codec change); anything else 404. The harness's own
//! metrics scrape keeps working against the same server.

use kpress_tests::compression::Compression;
use kpress_tests::java_client::{JavaClient, ProduceOptions};
use kpress_tests::kpress::KpressProxy;
use kpress_tests::{kafka_version, KafkaCluster};
use sha2::{Digest, Sha256};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

/// Status code and body of `GET path` (HTTP/1.0: the server closes after answering).
fn get(admin: SocketAddr, path: &str) -> (u16, String) {
    let mut stream = TcpStream::connect_timeout(&admin, Duration::from_secs(5))
        .unwrap_or_else(|err| panic!("connecting to the admin endpoint {admin}: {err}"));
    stream
        .set_read_timeout(Some(Duration::from_secs(15)))
        .unwrap();
    write!(stream, "GET {path} HTTP/1.0\r\nHost: {admin}\r\n\r\n").unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    let (head, body) = response
        .split_once("\r\n\r\n")
        .unwrap_or_else(|| panic!("no HTTP response from {admin}{path}: {response:?}"));
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("no status in {head:?}"));
    (status, body.to_string())
}

/// Polls `GET path` until `done` holds for its answer, or panics after `timeout`.
fn wait_for(
    admin: SocketAddr,
    path: &str,
    timeout: Duration,
    done: impl Fn(u16, &str) -> bool,
) -> (u16, String) {
    let deadline = Instant::now() + timeout;
    loop {
        let (status, body) = get(admin, path);
        if done(status, &body) {
            return (status, body);
        }
        assert!(
            Instant::now() < deadline,
            "{path} still answers {status} {body:?} after {timeout:?}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The string value of `"key": "value"` in pretty-printed JSON (its first occurrence).
fn json_string<'a>(json: &'a str, key: &str) -> &'a str {
    let start = format!("\"{key}\": \"");
    let at = json
        .find(&start)
        .unwrap_or_else(|| panic!("no {key} in {json}"))
        + start.len();
    &json[at..at + json[at..].find('"').unwrap()]
}

fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn free_addr() -> SocketAddr {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
}

fn policy(
    listen: SocketAddr,
    node_port_base: u16,
    broker: SocketAddr,
    admin: SocketAddr,
    codec: &str,
) -> String {
    format!(
        "[listener]\nbind = \"{listen}\"\nnode_port_base = {node_port_base}\n\
         [upstream]\nbootstrap_servers = [\"{broker}\"]\n\
         [admin]\nbind = \"{admin}\"\nreadiness_window_secs = 2\n\
         [defaults]\ncompression.type = \"producer\"\n\
         [[topics]]\nmatch = \"adm.*\"\ncompression.type = \"{codec}\"\n"
    )
}

#[test]
fn the_admin_endpoint_reports_health_readiness_metrics_and_the_policy_in_force() {
    let mut cluster = KafkaCluster::start(kafka_version(), 1).expect("starting Kafka");
    let broker = cluster.node_addresses()[0];
    cluster.stop_node(0).expect("stopping the broker");

    let (listen, admin) = (free_addr(), free_addr());
    let node_port_base = kpress_tests::ports::free_port_range(1);
    let mut proxy = KpressProxy::start(
        &policy(listen, node_port_base, broker, admin, "lz4"),
        listen,
    )
    .expect("starting kpress");

    // Serving, but no broker has ever answered: alive, not ready.
    assert_eq!(get(admin, "/healthz"), (200, "ok\n".to_string()));
    let (status, reason) = get(admin, "/readyz");
    assert_eq!(status, 503, "{reason}\n{}", proxy.log());
    assert!(
        reason.starts_with("no broker answered in the last 2 s"),
        "{reason}"
    );
    assert_eq!(reason.lines().count(), 1, "{reason}");
    assert_eq!(get(admin, "/nope").0, 404);

    cluster.start_node(0).expect("starting the broker");
    wait_for(admin, "/readyz", Duration::from_secs(60), |status, _| {
        status == 200
    });
    // Idle past the window: kpress asks the broker itself and stays ready.
    std::thread::sleep(Duration::from_secs(4));
    assert_eq!(get(admin, "/readyz"), (200, "ready\n".to_string()));

    let client = JavaClient::new(kafka_version());
    let topic = "adm.events";
    client
        .create_topic(&cluster.bootstrap(), topic, 1, &[])
        .expect("creating the topic");
    let options = ProduceOptions {
        compression: Compression::Gzip,
        ..ProduceOptions::default()
    };
    client
        .produce_records(
            &proxy.listen().to_string(),
            topic,
            &["one", "two", "three"],
            &options,
        )
        .expect("producing through kpress");
    let (status, metrics) = get(admin, "/metrics");
    assert_eq!(status, 200);
    let rewritten: f64 = metrics
        .lines()
        .filter(|l| l.starts_with("kpress_batches_rewritten_total{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum();
    assert!(rewritten >= 1.0, "no rewritten batch counted:\n{metrics}");
    assert!(metrics.contains("kpress_connections_total"), "{metrics}");
    assert!(
        metrics.contains("kpress_policy_loaded_timestamp_seconds"),
        "{metrics}"
    );

    // The policy in force, then an edit of the file: hash, load time and codec follow.
    let file = proxy.config_file().expect("kpress's config file");
    let (status, before) = get(admin, "/policy");
    assert_eq!(status, 200);
    assert_eq!(
        json_string(&before, "sha256"),
        sha256_hex(&std::fs::read(&file).unwrap())
    );
    assert_eq!(json_string(&before, "file"), file.display().to_string());
    assert_eq!(json_string(&before, "match"), "adm.*");
    assert!(before.contains("\"compression.type\": \"lz4\""), "{before}");
    assert!(
        !before.contains("\"compression.type\": \"zstd\""),
        "{before}"
    );
    let loaded_before = json_string(&before, "loaded_at").to_string();
    assert!(
        loaded_before.ends_with('Z') && loaded_before.contains('T'),
        "{loaded_before}"
    );

    let edited = policy(listen, node_port_base, broker, admin, "zstd");
    std::fs::write(&file, &edited).unwrap();
    let edited_hash = sha256_hex(edited.as_bytes());
    let (_, after) = wait_for(admin, "/policy", Duration::from_secs(20), |_, body| {
        json_string(body, "sha256") == edited_hash
    });
    assert!(after.contains("\"compression.type\": \"zstd\""), "{after}");
    assert!(!after.contains("\"compression.type\": \"lz4\""), "{after}");
    assert_ne!(json_string(&after, "loaded_at"), loaded_before);

    // No broker: not ready once the last answer is older than the window.
    cluster.stop_node(0).expect("stopping the broker");
    let (_, reason) = wait_for(admin, "/readyz", Duration::from_secs(30), |status, _| {
        status == 503
    });
    assert!(
        reason.starts_with("no broker answered in the last 2 s"),
        "{reason}"
    );
    assert_eq!(get(admin, "/healthz").0, 200);

    // SIGTERM: the proxy and its admin endpoint stop, exit status 0.
    let exit = proxy.terminate(Duration::from_secs(20));
    assert!(
        exit.is_some_and(|status| status.success()),
        "{exit:?}\n{}",
        proxy.log()
    );
    assert!(TcpStream::connect_timeout(&admin, Duration::from_secs(1)).is_err());
}

/// The harness scrapes `[admin] bind` with a bare HTTP/1.0 request: the admin server
/// answers it.
#[test]
fn the_harness_metrics_scrape_reads_the_admin_endpoint() {
    let cluster = KafkaCluster::start(kafka_version(), 1).expect("starting Kafka");
    let proxy =
        KpressProxy::start_in_front_of(&cluster, "[defaults]\ncompression.type = \"zstd\"\n")
            .expect("starting kpress");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let text = proxy.scrape_metrics().expect("scraping kpress");
        if text.contains("kpress_policy_loaded_timestamp_seconds") {
            break;
        }
        assert!(Instant::now() < deadline, "no kpress metric:\n{text}");
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(
        proxy
            .counter("kpress_policy_loaded_timestamp_seconds", &[])
            .unwrap()
            > 0.0
    );
}
