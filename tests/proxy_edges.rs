//! `kpress run`'s less travelled paths against a real Kafka 4.1.1 broker: Produce v13
//! for a topic kpress has never seen named (it asks the broker for the id itself),
//! SASL/PLAIN clients authenticating through kpress (which has no credentials), and a
//! SIGTERM that stops kpress cleanly with exit status 0.

use kpress_batch::builder::BatchBuilder;
use kpress_codec::Codec;
use kpress_tests::compression::Compression;
use kpress_tests::data::{diff_records, write_records, Dataset};
use kpress_tests::java_client::{values_of, ConsumeOptions, JavaClient, ProduceOptions};
use kpress_tests::kpress::{storing_rules, KpressProxy};
use kpress_tests::raw_produce::produce_raw_by_id;
use kpress_tests::{kafka_version, kcat, KafkaCluster};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::OnceLock;
use std::time::Duration;

/// `zstd.*` topics store zstd even where it is larger than the producer's batch, so a
/// batch left in its source codec can only mean kpress did not rewrite it.
fn rules() -> String {
    storing_rules(&["zstd"])
}

/// The one-node broker of this binary's plain (no SASL) tests.
fn shared_cluster() -> &'static KafkaCluster {
    static CLUSTER: OnceLock<KafkaCluster> = OnceLock::new();
    CLUSTER.get_or_init(|| KafkaCluster::start(kafka_version(), 1).expect("starting Kafka"))
}

/// Topic ids by name, from a Metadata v12 request sent straight to the broker.
fn topic_ids(broker: SocketAddr) -> Vec<([u8; 16], String)> {
    struct Names(Vec<([u8; 16], String)>);
    impl kpress_protocol::ResponseObserver for Names {
        fn broker(&mut self, _: i32, host: &str, port: i32) -> (String, i32) {
            (host.to_owned(), port)
        }
        fn topic(&mut self, id: [u8; 16], name: &str) {
            self.0.push((id, name.to_owned()));
        }
    }
    let mut stream = TcpStream::connect(broker).expect("connect to the broker");
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .expect("read timeout");
    let request = kpress_protocol::metadata_request(12, 1, &[]).expect("encode Metadata");
    stream.write_all(&request).expect("send Metadata");
    let mut size = [0u8; 4];
    stream.read_exact(&mut size).expect("response size");
    let mut body = vec![0u8; i32::from_be_bytes(size) as usize];
    stream.read_exact(&mut body).expect("response body");
    let mut names = Names(Vec::new());
    // Response header v1: the correlation id and an empty tag buffer.
    kpress_protocol::rewrite_response(3, 12, &body[5..], &mut names).expect("parse Metadata");
    names.0
}

/// A hand-built Produce v13 (topics by id only) for a topic created on the broker
/// directly, sent to a kpress that has relayed no Metadata at all: kpress asks the
/// broker for the id's name itself and rewrites every batch into the policy's zstd.
///
/// The records are fixed and the policy stores zstd whatever its size (kpress's
/// default), because a small batch of random text is often no smaller in zstd-3 than in
/// gzip-6 (six records of 200 random letters: 39 of 40 draws, measured with zlib and
/// the zstd CLI), which an `only_if_smaller` policy correctly keeps as gzip
/// (`not_smaller`). So any batch left in gzip here is a
/// real failure (e.g. an id kpress could not name); a 6-record batch is sent on purpose.
#[test]
fn produce_v13_for_a_topic_created_behind_kpress() {
    let cluster = shared_cluster();
    let java = JavaClient::new(kafka_version());
    let topic = "zstd.created-behind-kpress";
    java.create_producer_codec_topics(&cluster.bootstrap(), &[topic], 1)
        .unwrap_or_else(|e| panic!("{e:#}"));
    let topic_id = topic_ids(cluster.node_addresses()[0])
        .into_iter()
        .find(|(_, name)| name == topic)
        .map(|(id, _)| id)
        .expect("the broker names the topic");
    // Started after the topic exists, and no client has asked it for Metadata.
    let proxy = KpressProxy::start_in_front_of(cluster, &rules())
        .unwrap_or_else(|e| panic!("starting kpress: {e:#}"));
    let node_port = proxy.node_port_base().expect("node port base") + 1;
    let node = SocketAddr::from(([127, 0, 0, 1], node_port));

    let all = Dataset::ApacheAccessLog.records();
    let mut expected = Vec::new();
    let mut failures = Vec::new();
    // Batches of 6 (the size that once stayed gzip), 50 and 400 records.
    for (start, len) in [(0, 6), (6, 50), (56, 400)] {
        let records = &all[start..start + len];
        let batch = BatchBuilder::codec(Codec::Gzip)
            .build_values(records)
            .expect("build a gzip batch");
        match produce_raw_by_id(node, topic_id, 0, &batch, Duration::from_secs(30)) {
            Ok(r) if r.error_code == 0 => expected.extend_from_slice(records),
            other => failures.push(format!("{len}-record batch by id: {other:?}")),
        }
    }
    let dump = cluster.dump_partition_0(&[topic]).expect("DumpLogSegments");
    failures.extend(dump[0].problems_storing(topic, Compression::Zstd, &expected));
    if dump[0].batches.len() != 3 {
        failures.push(format!("{} batches stored, 3 sent", dump[0].batches.len()));
    }
    let unresolved = proxy
        .counter("kpress_unknown_topic_ids_total", &[])
        .unwrap_or_else(|e| panic!("{e:#}"));
    if unresolved != 0.0 {
        failures.push(format!("{unresolved} topic ids left unresolved"));
    }
    // A Java 4.1 consumer through kpress reads them back.
    match java.consume(
        &proxy.bootstrap(),
        &[topic],
        expected.len(),
        &ConsumeOptions::default(),
    ) {
        Ok(records) => {
            let values: Vec<&[u8]> = records.iter().map(|r| r.value.as_slice()).collect();
            if let Some(diff) = diff_records(&expected, &values) {
                failures.push(format!("Java consumer through kpress: {diff}"));
            }
        }
        Err(e) => failures.push(format!("Java consumer through kpress: {e:#}")),
    }
    assert!(
        failures.is_empty(),
        "{}\n{}",
        failures.join("\n"),
        proxy.log()
    );
}

/// A broker whose client listener wants SASL/PLAIN before anything else: kpress has no
/// credentials (its own Metadata is refused), relays the clients' authentication, and
/// learns the brokers and topic ids from the Metadata its clients receive. kcat and
/// Java 4.1 (Produce v13) authenticate through it; the broker stores zstd; a wrong
/// password is refused.
#[test]
fn sasl_plain_clients_authenticate_through_kpress() {
    let cluster =
        KafkaCluster::start_with_sasl_plain(kafka_version(), 1, &[("alice", "alice-secret")])
            .expect("starting Kafka with SASL/PLAIN");
    let java = JavaClient::new(kafka_version());
    let topics = ["zstd.sasl-kcat", "zstd.sasl-java"];
    // Created over the PLAINTEXT listener; kpress only knows the SASL one.
    java.create_producer_codec_topics(&cluster.bootstrap(), &topics, 1)
        .unwrap_or_else(|e| panic!("{e:#}"));
    let proxy = KpressProxy::start_in_front_of_listeners(
        &cluster.sasl_addresses(),
        &cluster.node_ids(),
        &rules(),
    )
    .unwrap_or_else(|e| panic!("starting kpress: {e:#}"));
    let bootstrap = proxy.bootstrap();
    let expected: Vec<Vec<u8>> = Dataset::ApacheAccessLog.records()[..2000].to_vec();
    let work = tempfile::tempdir().expect("temp dir");
    let file = write_records(&work.path().join("apache-2000.log"), &expected);
    let kcat_sasl = |password: &'static str| {
        [
            "security.protocol=SASL_PLAINTEXT",
            "sasl.mechanisms=PLAIN",
            "sasl.username=alice",
            if password == "alice-secret" {
                "sasl.password=alice-secret"
            } else {
                "sasl.password=wrong"
            },
        ]
    };
    let java_sasl = vec![
        "security.protocol=SASL_PLAINTEXT".to_string(),
        "sasl.mechanism=PLAIN".to_string(),
        "sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required \
         username=\"alice\" password=\"alice-secret\";"
            .to_string(),
    ];

    let mut extra: Vec<&str> = kcat_sasl("alice-secret").to_vec();
    extra.push("batch.size=32768");
    kcat::produce_file(&bootstrap, topics[0], 0, Compression::Gzip, &file, &extra)
        .unwrap_or_else(|e| panic!("{e:#}\n{}", proxy.log()));
    java.produce_file(
        &bootstrap,
        topics[1],
        &file,
        &ProduceOptions {
            compression: Compression::Lz4,
            batch_size: 8192,
            properties: java_sasl.clone(),
            ..ProduceOptions::default()
        },
    )
    .unwrap_or_else(|e| panic!("{e:#}\n{}", proxy.log()));

    let mut failures = Vec::new();
    for (topic, dump) in topics
        .iter()
        .zip(cluster.dump_partition_0(&topics).expect("DumpLogSegments"))
    {
        failures.extend(dump.problems_storing(topic, Compression::Zstd, &expected));
        failures.extend(kcat::read_back_problem(
            &bootstrap,
            topic,
            0,
            &kcat_sasl("alice-secret"),
            &expected,
        ));
    }
    match java.consume(
        &bootstrap,
        &topics,
        expected.len() * 2,
        &ConsumeOptions {
            properties: java_sasl,
            ..ConsumeOptions::default()
        },
    ) {
        Ok(records) => {
            for topic in topics {
                let values = values_of(&records, topic);
                if let Some(diff) = diff_records(&expected, &values) {
                    failures.push(format!("{topic}: Java with SASL through kpress: {diff}"));
                }
            }
        }
        Err(e) => failures.push(format!("Java consumer with SASL through kpress: {e:#}")),
    }
    let mut wrong: Vec<&str> = kcat_sasl("wrong").to_vec();
    wrong.push("socket.timeout.ms=5000");
    if kcat::consume_partition(&bootstrap, topics[0], 0, &wrong).is_ok() {
        failures.push("a wrong password was accepted through kpress".to_string());
    }
    proxy.assert_no_failures(&failures, &cluster);
}

/// SIGTERM after real traffic: kpress logs why it stops, finishes, and exits 0; its log
/// file holds plain lines (no terminal colours). Nothing produced is lost.
#[test]
fn sigterm_stops_kpress_with_exit_status_0() {
    let cluster = shared_cluster();
    let java = JavaClient::new(kafka_version());
    let topic = "zstd.sigterm";
    java.create_producer_codec_topics(&cluster.bootstrap(), &[topic], 1)
        .unwrap_or_else(|e| panic!("{e:#}"));
    let mut proxy = KpressProxy::start_in_front_of(cluster, &rules())
        .unwrap_or_else(|e| panic!("starting kpress: {e:#}"));
    let dataset = Dataset::NginxPlusStatus;
    let expected = dataset.records();
    kcat::produce_file(
        &proxy.bootstrap(),
        topic,
        0,
        Compression::Snappy,
        &dataset.path(),
        &[],
    )
    .unwrap_or_else(|e| panic!("{e:#}\n{}", proxy.log()));
    let mut failures: Vec<String> =
        kcat::read_back_problem(&proxy.bootstrap(), topic, 0, &[], &expected)
            .into_iter()
            .collect();
    failures.extend(
        cluster.dump_partition_0(&[topic]).expect("DumpLogSegments")[0].problems_storing(
            topic,
            Compression::Zstd,
            &expected,
        ),
    );

    let status = proxy.terminate(Duration::from_secs(20));
    let log = proxy.log();
    match status {
        Some(status) if status.success() => {}
        Some(status) => failures.push(format!("kpress exited with {status} on SIGTERM")),
        None => failures.push("kpress did not stop within 20 s of SIGTERM".to_string()),
    }
    if !log.contains("SIGTERM: shutting down") {
        failures.push("no 'SIGTERM: shutting down' in the log".to_string());
    }
    if log.contains('\u{1b}') {
        failures.push("terminal escape codes in the log file".to_string());
    }
    assert!(failures.is_empty(), "{}\n{log}", failures.join("\n"));
}
