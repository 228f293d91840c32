//! A current Java consumer (kafka-clients of the broker's version: 4.1.1 fetches at
//! v18, flexible, topics by id) that a `[[clients]]` rule says reads only gzip,
//! through `kpress run` in front of a real 4.1 broker: it reads lz4 and zstd topics
//! byte for byte, and kpress's metrics show each stored batch re-encoded into gzip
//! (what the Java client cannot show: it reads every codec). kpress names the topics
//! in its metrics from the ids in the Fetch answers, by what Metadata told it. A
//! consumer no rule matches reads the same topics with nothing re-encoded. Recording
//! relays in front of kpress show the Fetch versions the client sent.

use kpress_tests::capture::{CaptureRelay, Direction, Recording};
use kpress_tests::compression::Compression;
use kpress_tests::data::Dataset;
use kpress_tests::java_client::{ConsumeOptions, JavaClient, ProduceOptions};
use kpress_tests::kpress::{KpressProxy, KpressSetup};
use kpress_tests::{kafka_version, KafkaCluster};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

/// kpress keeps every batch as the producer sent it: only the Fetch side is under
/// test. Clients called `gzip-only*` read gzip (and uncompressed batches) only.
const RULES: &str = "[defaults]\ncompression.type = \"producer\"\n\n\
                     [[clients]]\nmatch = \"gzip-only*\"\naccept = [\"gzip\"]\n";

const REENCODED: &str = "kpress_fetch_batches_reencoded_total";
const RESPONSES: &str = "kpress_fetch_responses_reencoded_total";
const NOT_REENCODED: &str = "kpress_fetch_requests_not_reencoded_total";
const UPGRADED: &str = "kpress_fetch_requests_upgraded_total";
const CUT: &str = "kpress_fetch_partitions_cut_total";

/// The first Fetch version with tagged fields: what current clients send.
const FIRST_FLEXIBLE_FETCH: i16 = 12;
const FETCH: i16 = 1;

/// kpress listens on 127.0.0.1 and advertises 127.0.0.2, where recording relays listen
/// on the same ports: every connection the client makes goes through them.
const ADVERTISED: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 2);

/// `kpress run` with [`RULES`] in front of the one-node `cluster`, behind recording
/// relays on its bootstrap and node ports; the relays' bootstrap address.
fn recorded_kpress(
    cluster: &KafkaCluster,
    recording: &Arc<Recording>,
) -> (KpressProxy, Vec<CaptureRelay>, String) {
    let node_ids = cluster.node_ids();
    let setup = KpressSetup {
        advertised_host: Some(ADVERTISED.to_string()),
        ..KpressSetup::in_front_of(&cluster.node_addresses(), &node_ids, RULES)
    };
    let proxy = KpressProxy::start_with(setup).unwrap_or_else(|e| panic!("starting kpress: {e:#}"));
    let node_port_base = proxy.node_port_base().expect("ports mode");
    let relays: Vec<CaptureRelay> = [proxy.listen().port(), node_port_base + node_ids[0] as u16]
        .into_iter()
        .map(|port| {
            let front = SocketAddr::new(IpAddr::V4(ADVERTISED), port);
            let back = SocketAddr::from(([127, 0, 0, 1], port));
            CaptureRelay::start(front, back, Arc::clone(recording)).expect("a relay")
        })
        .collect();
    let bootstrap = relays[0].listen().to_string();
    (proxy, relays, bootstrap)
}

/// A counter of kpress's, read as a whole number (an empty sum reads -0.0).
fn counter(proxy: &KpressProxy, name: &str, labels: &[(&str, &str)]) -> u64 {
    proxy.counter(name, labels).expect("kpress metrics") as u64
}

#[test]
fn a_gzip_only_java_4_1_consumer_reads_lz4_and_zstd_in_gzip_through_kpress() {
    let version = kafka_version();
    let cluster = KafkaCluster::start(version, 1).expect("starting Kafka");
    let recording = Recording::new();
    let (proxy, _relays, bootstrap) = recorded_kpress(&cluster, &recording);
    let client = JavaClient::new(version);
    let codecs = [Compression::Lz4, Compression::Zstd];
    let topics: Vec<String> = codecs
        .iter()
        .map(|c| format!("flexible-{}", c.name()))
        .collect();
    let topic_names: Vec<&str> = topics.iter().map(String::as_str).collect();
    client
        .create_producer_codec_topics(&cluster.bootstrap(), &topic_names, 1)
        .unwrap_or_else(|e| panic!("{e:#}"));
    let dataset = Dataset::ApacheAccessLog;
    let expected = dataset.records();
    // One producer per codec, at once: the test's time is mostly JVM start-up.
    std::thread::scope(|scope| {
        for (codec, topic) in codecs.iter().zip(&topic_names) {
            let (client, cluster, dataset) = (&client, &cluster, &dataset);
            scope.spawn(move || {
                let options = ProduceOptions {
                    compression: *codec,
                    batch_size: 16384,
                    ..ProduceOptions::default()
                };
                client
                    .produce_file(&cluster.bootstrap(), topic, &dataset.path(), &options)
                    .unwrap_or_else(|e| panic!("producing {}: {e:#}", codec.name()));
            });
        }
    });
    let mut problems = Vec::new();
    let dumps = cluster
        .dump_partition_0(&topic_names)
        .expect("DumpLogSegments");
    for ((codec, topic), dump) in codecs.iter().zip(&topic_names).zip(&dumps) {
        problems.extend(
            dump.problems
                .iter()
                .map(|p| format!("DumpLogSegments: {p}")),
        );
        if dump
            .batches
            .iter()
            .any(|b| b.compresscodec != codec.dump_name())
        {
            problems.push(format!(
                "{topic}: not every batch is stored in {}",
                codec.name()
            ));
        }
    }

    let consume = |client_id: &str| ConsumeOptions {
        timeout: Duration::from_secs(120),
        properties: vec![format!("client.id={client_id}")],
        ..ConsumeOptions::default()
    };
    let reader = format!("kafka-clients {version} as gzip-only-reader");
    match client.read_back_problems(
        &bootstrap,
        &topic_names,
        &expected,
        &consume("gzip-only-reader"),
        &reader,
    ) {
        Ok(found) => problems.extend(found),
        Err(e) => problems.push(format!("{reader} reading through kpress: {e:#}")),
    }
    let fetch_versions: std::collections::BTreeSet<i16> = recording
        .frames()
        .iter()
        .filter(|f| f.direction == Direction::Request && f.api_key == FETCH)
        .map(|f| f.api_version)
        .collect();
    eprintln!("kafka-clients {version} sent Fetch at versions {fetch_versions:?}");
    if fetch_versions.is_empty() || fetch_versions.iter().any(|v| *v < FIRST_FLEXIBLE_FETCH) {
        problems.push(format!(
            "Fetch versions sent: {fetch_versions:?}; expected only flexible ones (v12+)"
        ));
    }
    let mut reencoded_total = 0;
    for ((codec, topic), dump) in codecs.iter().zip(&topic_names).zip(&dumps) {
        let labels = [("from", codec.name()), ("to", "gzip"), ("topic", *topic)];
        let reencoded = counter(&proxy, REENCODED, &labels);
        reencoded_total += reencoded;
        eprintln!(
            "{topic}: {} {} batches stored; {reencoded} re-encoded {} -> gzip",
            dump.batches.len(),
            codec.name(),
            codec.name()
        );
        // Labelled by name: kpress named the topic ids of the Fetch answers.
        if reencoded < dump.batches.len() as u64 {
            problems.push(format!(
                "{REENCODED}{{from=\"{}\",to=\"gzip\",topic=\"{topic}\"}} is {reencoded}; \
                 expected at least the {} batches stored",
                codec.name(),
                dump.batches.len()
            ));
        }
    }
    let not_reencoded = counter(&proxy, NOT_REENCODED, &[("reason", "version")]);
    if not_reencoded != 0 {
        problems.push(format!(
            "{NOT_REENCODED}{{reason=\"version\"}} is {not_reencoded}: a Fetch version was \
             relayed without re-encoding"
        ));
    }
    let upgraded = counter(&proxy, UPGRADED, &[]);
    if upgraded != 0 {
        problems.push(format!(
            "{UPGRADED} is {upgraded}: a current client's Fetch needs no upgrade"
        ));
    }
    let cut = counter(&proxy, CUT, &[]);
    if cut != 0 {
        eprintln!("{cut} partitions cut (fetched again)");
    }

    // No rule matches this one: it reads what is stored, nothing re-encoded for it.
    let responses = counter(&proxy, RESPONSES, &[]);
    let reader = format!("kafka-clients {version} as any-reader");
    match client.read_back_problems(
        &bootstrap,
        &topic_names,
        &expected,
        &consume("any-reader"),
        &reader,
    ) {
        Ok(found) => problems.extend(found),
        Err(e) => problems.push(format!("{reader} reading through kpress: {e:#}")),
    }
    let after = counter(&proxy, RESPONSES, &[]);
    eprintln!(
        "{reencoded_total} batches re-encoded in {responses} responses for gzip-only-reader; \
         {} responses re-encoded for any-reader",
        after - responses
    );
    if after != responses {
        problems.push(format!(
            "{RESPONSES} rose by {} while a client no rule matches read",
            after - responses
        ));
    }
    assert!(
        problems.is_empty(),
        "{}\n{}\n{}",
        problems.join("\n"),
        proxy.log(),
        cluster.describe_logs()
    );
}
