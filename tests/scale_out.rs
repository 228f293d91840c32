//! Scale-out and a zero-downtime restart with `[listener] reuse_port = true` in front of
//! a real Kafka 4.1.1 broker: two `kpress run` processes serve the same bootstrap and
//! node ports (the kernel spreads connections across them) while an idempotent
//! `acks=all` Java producer writes gzip batches that kpress rewrites into zstd. The
//! process carrying the producer's Produce traffic gets SIGTERM midway; the producer
//! carries on through the other. Then a third process starts on the same ports (the
//! restart) and the second gets SIGTERM; the producer carries on through the third.
//! The topic read back accounts for every record (nothing acknowledged lost, nothing
//! stored twice, no send failed) and every batch the broker stored is zstd. ~1 min.

use kpress_tests::bare_requests::{api_versions, exchange, parse_api_versions};
use kpress_tests::compression::Compression;
use kpress_tests::data::Dataset;
use kpress_tests::java_client::JavaClient;
use kpress_tests::kpress::{storing_rules, KpressProxy, KpressSetup};
use kpress_tests::steady_producer::{tally, Accounting, SteadyOptions, SteadyProducer};
use kpress_tests::{kafka_version, KafkaCluster};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

/// How long the producer may take to be acknowledged again once the process it wrote
/// through stopped (its reconnect and retry backoff).
const RECOVERY: Duration = Duration::from_secs(90);
/// Records acknowledged before each stop, and again after it.
const STEP: u64 = 2000;
/// How long the stopped producer gets to settle what it sent.
const FINISH: Duration = Duration::from_secs(130);
/// How long reading the topic back may take.
const READ_BACK: Duration = Duration::from_secs(90);
/// Raw connections made to each shared port: all of them on one process of two would
/// happen once in 2^(n-1) runs.
const PROBES: usize = 24;

/// Every `zstd.*` topic stores zstd; the rest as produced. Every listener shares its
/// port with the other kpress processes.
fn setup(cluster: &KafkaCluster) -> KpressSetup {
    KpressSetup {
        listener_keys: vec!["reuse_port = true".to_string()],
        ..KpressSetup::in_front_of(
            &cluster.node_addresses(),
            &cluster.node_ids(),
            &storing_rules(&["zstd"]),
        )
    }
}

/// Client connections a process has accepted, on any listener.
fn connections(proxy: &KpressProxy) -> f64 {
    proxy
        .counter("kpress_connections_total", &[])
        .unwrap_or_else(|e| panic!("scraping kpress: {e:#}\n{}", proxy.log()))
}

/// Batches of `topic` a process has rewritten into zstd.
fn rewritten(proxy: &KpressProxy, topic: &str) -> f64 {
    proxy
        .counter(
            "kpress_batches_rewritten_total",
            &[("topic", topic), ("to", "zstd")],
        )
        .unwrap_or_else(|e| panic!("scraping kpress: {e:#}\n{}", proxy.log()))
}

/// `PROBES` connections to `addr`, each answered an ApiVersions request.
fn probe(addr: SocketAddr) {
    for n in 0..PROBES {
        let mut stream = TcpStream::connect(addr).unwrap_or_else(|e| panic!("{addr}: {e}"));
        stream
            .set_read_timeout(Some(Duration::from_secs(15)))
            .unwrap();
        let correlation_id = i32::try_from(n).unwrap();
        let answer = exchange(&mut stream, &api_versions(0, correlation_id))
            .and_then(|body| parse_api_versions(&body, 0))
            .unwrap_or_else(|e| panic!("ApiVersions through {addr}: {e:#}"));
        assert_eq!(
            (answer.correlation_id, answer.error_code),
            (correlation_id, 0)
        );
    }
}

/// Which of `proxies` carries the producer's Produce traffic to `topic` now: the
/// first whose rewrite count grows.
fn carrying(proxies: &[&KpressProxy], topic: &str) -> usize {
    let before: Vec<f64> = proxies.iter().map(|p| rewritten(p, topic)).collect();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        std::thread::sleep(Duration::from_millis(500));
        for (index, proxy) in proxies.iter().enumerate() {
            if rewritten(proxy, topic) > before[index] {
                return index;
            }
        }
        assert!(
            Instant::now() < deadline,
            "no kpress process rewrote a batch of {topic} within 30 s"
        );
    }
}

/// SIGTERM: the process must drain and exit 0 without waiting out its grace.
fn stop(mut proxy: KpressProxy, which: &str) -> String {
    let status = proxy.terminate(Duration::from_secs(30));
    let log = proxy.log();
    assert!(
        status.is_some_and(|s| s.success()),
        "the {which} kpress did not exit 0 within 30 s of SIGTERM: {status:?}\n{log}"
    );
    assert!(
        !log.contains("shutdown grace over"),
        "the {which} kpress waited out its grace instead of draining\n{log}"
    );
    log
}

#[test]
fn processes_sharing_the_ports_take_over_from_a_stopped_one() {
    let cluster = KafkaCluster::start(kafka_version(), 1)
        .unwrap_or_else(|e| panic!("starting a Kafka node: {e:#}"));
    let topic = "zstd.scale-out";
    JavaClient::new(kafka_version())
        .create_topic_replicated(
            &cluster.bootstrap(),
            topic,
            1,
            1,
            &["compression.type=producer"],
        )
        .unwrap_or_else(|e| panic!("creating {topic}: {e:#}\n{}", cluster.describe_logs()));

    let first = KpressProxy::start_with(setup(&cluster))
        .unwrap_or_else(|e| panic!("starting kpress: {e:#}"));
    let second = KpressProxy::start_beside(setup(&cluster), &first)
        .unwrap_or_else(|e| panic!("starting a second kpress on the same ports: {e:#}"));
    let node_port =
        first.node_port_base().expect("ports mode") + u16::try_from(cluster.node_ids()[0]).unwrap();
    let node = SocketAddr::from(([127, 0, 0, 1], node_port));
    // Both ports are shared: the kernel hands connections to both processes.
    for addr in [first.listen(), node] {
        let before = [connections(&first), connections(&second)];
        probe(addr);
        let gained = [
            connections(&first) - before[0],
            connections(&second) - before[1],
        ];
        eprintln!("{addr}: {PROBES} connections, {gained:?} per process");
        assert!(
            gained.iter().all(|n| *n > 0.0) && gained.iter().sum::<f64>() >= PROBES as f64,
            "{PROBES} connections to {addr} reached the processes {gained:?}\n{}\n{}",
            first.log(),
            second.log()
        );
    }

    let mut producer = SteadyProducer::start(
        &first.bootstrap(),
        topic,
        "scale",
        &SteadyOptions::new(Compression::Gzip, 3000, &Dataset::ApacheAccessLog.path()),
    )
    .expect("starting the producer");
    producer
        .wait_acked(STEP, RECOVERY)
        .unwrap_or_else(|e| panic!("{e:#}\n{}\n{}", first.log(), second.log()));

    // Stop the process the producer writes through, so it has to move.
    let (busy, survivor) = match carrying(&[&first, &second], topic) {
        0 => (first, second),
        _ => (second, first),
    };
    let at = producer.progress();
    let busy_log = stop(busy, "busy");
    eprintln!("{topic}: SIGTERM to the busy process at {at}");
    producer
        .wait_more_acked(STEP, RECOVERY)
        .unwrap_or_else(|e| {
            panic!(
                "after one process stopped: {e:#}\n{busy_log}\n{}",
                survivor.log()
            )
        });

    // The restart: a new process joins the ports, then the survivor stops.
    let restarted = KpressProxy::start_beside(setup(&cluster), &survivor)
        .unwrap_or_else(|e| panic!("starting the new kpress on the same ports: {e:#}"));
    let at = producer.progress();
    let survivor_log = stop(survivor, "surviving");
    eprintln!("{topic}: SIGTERM to the surviving process at {at}");
    let context = || {
        format!(
            "{busy_log}\n{survivor_log}\n{}\n{}",
            restarted.log(),
            cluster.describe_logs()
        )
    };
    producer
        .wait_more_acked(STEP, RECOVERY)
        .unwrap_or_else(|e| panic!("after the restart: {e:#}\n{}", context()));
    assert!(
        rewritten(&restarted, topic) > 0.0,
        "the producer was acknowledged, but not through the restarted kpress\n{}",
        context()
    );

    let report = producer
        .finish(FINISH)
        .unwrap_or_else(|e| panic!("{e:#}\n{}", context()));
    let read = tally(
        &restarted.bootstrap(),
        topic,
        "scale",
        &Dataset::ApacheAccessLog.path(),
        READ_BACK,
    )
    .unwrap_or_else(|e| panic!("{e:#}\n{}", context()));
    let accounting = Accounting::of(&report, &read);
    eprintln!("{topic}: {accounting}");
    let problems = accounting.problems();
    assert!(
        problems.is_empty(),
        "{topic}: {accounting}\n{}\n--- producer stderr ---\n{}\n{}",
        problems.join("\n"),
        report.stderr,
        context()
    );
    let dump = &cluster.dump_partition_0(&[topic]).expect("DumpLogSegments")[0];
    let not_zstd: Vec<String> = dump
        .batches
        .iter()
        .filter(|b| !b.is_control && b.compresscodec != Compression::Zstd.dump_name())
        .map(|b| format!("{}@{}", b.compresscodec, b.base_offset))
        .collect();
    assert!(
        !dump.batches.is_empty() && not_zstd.is_empty() && dump.problems.is_empty(),
        "{topic}: batches not rewritten into zstd: {not_zstd:?}; {:?}",
        dump.problems
    );
}
