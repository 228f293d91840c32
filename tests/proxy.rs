//! `kpress run` end to end with real brokers and real clients: producers send through
//! the proxy, the broker stores the policy's codec (read back by Kafka's own
//! DumpLogSegments, every batch valid), and consumers through the proxy read exactly
//! what was produced.
//!
//! Clients: Java kafka-clients 4.1.1 (Produce v13, topic ids) and 3.9.1 (Produce v11,
//! topic names), librdkafka 2.0 (kcat) and 2.16 (confluent-kafka). Brokers: Kafka 4.1.1
//! (one node, and three nodes with replicated partitions) and 3.9.1. The plan:
//! every source codec × every policy codec and `producer` per client, acks 0/1/all,
//! idempotence, transactions, a consumer group, three brokers, an older broker.

use kpress_tests::cluster::KafkaCluster;
use kpress_tests::compression::Compression;
use kpress_tests::data::{diff_records, write_records, Dataset};
use kpress_tests::dump::{dump_log_segments, DumpedSegment};
use kpress_tests::java_client::{ConsumeOptions, JavaClient, ProduceOptions};
use kpress_tests::kpress::KpressProxy;
use kpress_tests::metadata::fetch_metadata;
use kpress_tests::raw_batch::{
    as_fresh_plain_batch, codec_id, crc_is_valid, fix_crc, flip_payload_byte, split_batches,
};
use kpress_tests::raw_produce::produce_raw;
use kpress_tests::{confluent, kafka_old_version, kafka_version, kcat};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;

/// Topics named `<codec>.<anything>` get that codec, even where it is larger than the
/// producer's (kpress stores the policy's codec, as Kafka's `compression.type` does);
/// `keep.*` asks for lz4 `only_if_smaller`, so it keeps a batch whose rewrite would not
/// be smaller; everything else keeps the producer's codec.
const RULES: &str = r#"
[defaults]
compression.type = "producer"

[[topics]]
match = "zstd.*"
compression.type = "zstd"
compression.zstd.level = 3

[[topics]]
match = "lz4.*"
compression.type = "lz4"

[[topics]]
match = "gzip.*"
compression.type = "gzip"
compression.gzip.level = 6

[[topics]]
match = "snappy.*"
compression.type = "snappy"

[[topics]]
match = "none.*"
compression.type = "none"

[[topics]]
match = "keep.*"
compression.type = "lz4"
only_if_smaller = true
"#;

/// The one-node 4.1.1 broker and the proxy in front of it, shared by this binary's
/// tests (watchdogs stop both when the test process exits).
fn shared() -> &'static (KafkaCluster, KpressProxy) {
    static SHARED: OnceLock<(KafkaCluster, KpressProxy)> = OnceLock::new();
    SHARED.get_or_init(|| {
        let cluster = KafkaCluster::start(kafka_version(), 1).expect("starting Kafka");
        let proxy = KpressProxy::start_in_front_of(&cluster, RULES)
            .unwrap_or_else(|e| panic!("starting kpress: {e:#}"));
        (cluster, proxy)
    })
}

/// The codec the rules give `topic`, if any.
fn policy_codec(topic: &str) -> Option<Compression> {
    Compression::from_name(topic.split('.').next()?)
}

/// Every `.log` segment of `topic`-`partition` on every node that hosts it.
fn replica_segments(cluster: &KafkaCluster, topic: &str, partition: u32) -> Vec<PathBuf> {
    let mut segments = Vec::new();
    for node in 0..cluster.node_ids().len() {
        let dir = cluster.partition_dir_on(node, topic, partition);
        if let Ok(entries) = std::fs::read_dir(&dir) {
            let mut logs: Vec<PathBuf> = entries
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|e| e == "log"))
                .collect();
            logs.sort();
            segments.extend(logs);
        }
    }
    segments
}

/// Checks what the broker stored for a partition: every batch valid, every data batch
/// in `codec`, and the data records equal to `expected`.
fn check_stored(
    name: &str,
    dump: &DumpedSegment,
    codec: Compression,
    expected: &[Vec<u8>],
) -> Vec<String> {
    let stored = StoredCodec {
        codec,
        lone_records_may_be_plain: false,
    };
    check_stored_as(name, dump, stored, expected)
}

/// [`check_stored`] with librdkafka's lone uncompressed records allowed where `stored` says.
fn check_stored_as(
    name: &str,
    dump: &DumpedSegment,
    stored: StoredCodec,
    expected: &[Vec<u8>],
) -> Vec<String> {
    let codec = stored.codec;
    let mut failures = Vec::new();
    if !dump.problems.is_empty() {
        failures.push(format!("{name}: DumpLogSegments: {:?}", dump.problems));
    }
    let mut records = Vec::new();
    for batch in &dump.batches {
        if !batch.is_valid {
            failures.push(format!(
                "{name}: batch at {} isvalid: false",
                batch.base_offset
            ));
        }
        if batch.is_control {
            continue;
        }
        let lone_plain = stored.lone_records_may_be_plain
            && batch.count == 1
            && batch.compresscodec == Compression::None.dump_name();
        if batch.compresscodec != codec.dump_name() && !lone_plain {
            failures.push(format!(
                "{name}: batch at {} stored as {}, policy says {codec}",
                batch.base_offset, batch.compresscodec
            ));
        }
        records.extend(batch.payloads().map(<[u8]>::to_vec));
    }
    if let Some(diff) = diff_records(expected, &records) {
        failures.push(format!("{name}: stored records: {diff}"));
    }
    failures
}

fn fail_if_any(failures: Vec<String>, context: impl FnOnce() -> String) {
    assert!(
        failures.is_empty(),
        "{} failure(s):\n{}\n{}",
        failures.len(),
        failures.join("\n"),
        context()
    );
}

/// A real producer of the matrix below.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Client {
    Java(&'static str),
    Kcat,
    ConfluentKafka,
}

impl Client {
    fn name(self) -> String {
        match self {
            Client::Java(version) => format!("java{}", version.replace('.', "")),
            Client::Kcat => "kcat".to_string(),
            Client::ConfluentKafka => "ck".to_string(),
        }
    }

    /// librdkafka sends a batch of one record uncompressed, whatever its codec.
    fn is_librdkafka(self) -> bool {
        matches!(self, Client::Kcat | Client::ConfluentKafka)
    }

    /// Produces `file`'s lines into each of `topics` with `codec`, in batches of a few
    /// KiB so every topic gets several multi-record batches.
    fn produce(
        self,
        bootstrap: &str,
        topics: &[&str],
        file: &Path,
        codec: Compression,
    ) -> anyhow::Result<()> {
        match self {
            Client::Java(version) => JavaClient::new(version)
                .produce_file_to_topics(
                    bootstrap,
                    topics,
                    file,
                    &ProduceOptions {
                        compression: codec,
                        // Java fills a batch by its estimated compressed size.
                        batch_size: 4096,
                        ..ProduceOptions::default()
                    },
                )
                .map(drop),
            Client::Kcat => topics.iter().try_for_each(|topic| {
                kcat::produce_file(bootstrap, topic, 0, codec, file, &["batch.size=32768"])
            }),
            Client::ConfluentKafka => confluent::produce_file_to_topics(
                bootstrap,
                topics,
                file,
                &ProduceOptions {
                    compression: codec,
                    batch_size: 32768,
                    ..ProduceOptions::default()
                },
            )
            .map(drop),
        }
    }
}

/// The codec every data batch of a topic must be stored in.
#[derive(Debug, Clone, Copy)]
struct StoredCodec {
    codec: Compression,
    /// The producer's codec is expected (policy `producer`, or the codecs match) and
    /// the producer is librdkafka, which sends lone records uncompressed.
    lone_records_may_be_plain: bool,
}

/// What the rules in [`RULES`] store for a batch `client` sent in `source`: the
/// policy's codec (stored whatever its size, so never the source's because the rewrite
/// is larger), or the source's where the policy is `producer` or the codecs match.
fn stored_codec(topic: &str, client: Client, source: Compression) -> StoredCodec {
    let codec = policy_codec(topic).unwrap_or(source);
    StoredCodec {
        codec,
        lone_records_may_be_plain: codec == source && client.is_librdkafka(),
    }
}

/// Five source codecs × (five policy codecs + `producer`) for each client: Java 4.1
/// (Produce v13, topic ids), kcat (librdkafka 2.0, v7) and confluent-kafka (librdkafka
/// 2.16, v10); Java 3.9 (v11, topic names) for one source codec. The broker stores
/// exactly the codec the policy semantics say, and consumers through kpress read back
/// every record byte for byte.
#[test]
fn every_client_and_codec_pair_through_kpress_stores_the_policy_codec() {
    let (cluster, proxy) = shared();
    let java = JavaClient::new(kafka_version());
    // A slice of the log keeps ~100 topics quick while giving several batches each.
    let expected: Vec<Vec<u8>> = Dataset::ApacheAccessLog.records()[..1500].to_vec();
    let work = tempfile::tempdir().expect("temp dir");
    let file = write_records(&work.path().join("apache-1500.log"), &expected);

    // (producer run: client, source codec, topics)
    let mut runs: Vec<(Client, Compression, Vec<String>)> = Vec::new();
    let targets = || {
        Compression::ALL
            .into_iter()
            .map(|c| c.name())
            .chain(["producer"])
    };
    for client in [
        Client::Java(kafka_version()),
        Client::Kcat,
        Client::ConfluentKafka,
    ] {
        for source in Compression::ALL {
            let topics = targets()
                .map(|t| format!("{t}.{}-{source}", client.name()))
                .collect();
            runs.push((client, source, topics));
        }
    }
    let old_java = Client::Java(kafka_old_version());
    runs.push((
        old_java,
        Compression::Lz4,
        targets()
            .map(|t| format!("{t}.{}-lz4", old_java.name()))
            .collect(),
    ));
    // zstd → lz4 is never smaller on this log: with only_if_smaller kpress keeps zstd
    // (keep.*), without it stores lz4 and counts the batch as grown (lz4.ck-zstd).
    runs.push((
        Client::ConfluentKafka,
        Compression::Zstd,
        vec!["keep.ck-zstd".to_string()],
    ));
    let topics: Vec<(&str, Client, Compression)> = runs
        .iter()
        .flat_map(|(client, source, topics)| {
            topics.iter().map(move |t| (t.as_str(), *client, *source))
        })
        .collect();
    let names: Vec<&str> = topics.iter().map(|(t, _, _)| *t).collect();
    // Topics are created on the broker directly; producers and consumers only see kpress.
    java.create_producer_codec_topics(&cluster.bootstrap(), &names, 1)
        .unwrap_or_else(|e| panic!("{e:#}"));

    let bootstrap = proxy.bootstrap();
    for (client, source, run_topics) in &runs {
        let run_topics: Vec<&str> = run_topics.iter().map(String::as_str).collect();
        client
            .produce(&bootstrap, &run_topics, &file, *source)
            .unwrap_or_else(|e| panic!("{run_topics:?}: {e:#}\n{}", proxy.log()));
    }

    let mut failures = Vec::new();
    let dumps = cluster.dump_partition_0(&names).expect("DumpLogSegments");
    for ((topic, client, source), dump) in topics.iter().zip(&dumps) {
        let data_batches = dump.batches.iter().filter(|b| !b.is_control).count();
        if data_batches < 3 {
            failures.push(format!(
                "{topic}: only {data_batches} batches, the test wants several"
            ));
        }
        failures.extend(check_stored_as(
            topic,
            dump,
            stored_codec(topic, *client, *source),
            &expected,
        ));
    }

    failures.extend(
        java.read_back_problems(
            &bootstrap,
            &names,
            &expected,
            &ConsumeOptions {
                timeout: Duration::from_secs(300),
                ..ConsumeOptions::default()
            },
            "Java consumer through kpress",
        )
        .unwrap_or_else(|e| panic!("{e:#}\n{}", proxy.log())),
    );
    for topic in &names {
        failures.extend(kcat::read_back_problem(
            &bootstrap,
            topic,
            0,
            &[],
            &expected,
        ));
    }

    // The proxy counted the rewrites it did, and the batches it kept as not smaller.
    let kept = dumps[names
        .iter()
        .position(|t| *t == "keep.ck-zstd")
        .expect("keep topic")]
    .batches
    .len() as f64;
    let not_smaller = proxy
        .counter("kpress_batches_passed_total", &[("reason", "not_smaller")])
        .unwrap_or_else(|e| panic!("{e:#}"));
    if not_smaller < kept {
        failures.push(format!(
            "{kept} batches of keep.ck-zstd kept, {not_smaller} counted as not_smaller"
        ));
    }
    // The same zstd → lz4 rewrites where the policy stores lz4: counted as rewritten
    // and as grown.
    let grown_labels = [("topic", "lz4.ck-zstd"), ("from", "zstd"), ("to", "lz4")];
    let grown = proxy
        .counter("kpress_batches_grown_total", &grown_labels)
        .unwrap_or_else(|e| panic!("{e:#}"));
    let rewritten_grown = proxy
        .counter("kpress_batches_rewritten_total", &grown_labels)
        .unwrap_or_else(|e| panic!("{e:#}"));
    if grown < 1.0 || grown > rewritten_grown {
        failures.push(format!(
            "lz4.ck-zstd: {grown} batches counted as grown, {rewritten_grown} as rewritten:\n{}",
            proxy.scrape_metrics().unwrap_or_default()
        ));
    }
    // The same batches have their own outcome in the per-topic count.
    let grown_outcome = proxy
        .counter(
            "kpress_batches_total",
            &[("topic", "lz4.ck-zstd"), ("outcome", "grown")],
        )
        .unwrap_or_else(|e| panic!("{e:#}"));
    if grown_outcome != grown {
        failures.push(format!(
            "lz4.ck-zstd: {grown} grown batches, {grown_outcome} with outcome=\"grown\""
        ));
    }
    let rewritten = proxy
        .counter(
            "kpress_batches_rewritten_total",
            &[
                ("topic", "zstd.java411-gzip"),
                ("from", "gzip"),
                ("to", "zstd"),
            ],
        )
        .unwrap_or_else(|e| panic!("{e:#}"));
    if rewritten < 3.0 {
        failures.push(format!(
            "{rewritten} gzip->zstd rewrites counted for zstd.java411-gzip:\n{}",
            proxy.scrape_metrics().unwrap_or_default()
        ));
    }
    fail_if_any(failures, || proxy.log());
}

/// The idempotent producer's numbering in a partition, as the broker stored it: one
/// producer id and epoch, sequences from 0 without gaps or overlaps.
fn check_sequences(name: &str, dump: &DumpedSegment) -> Vec<String> {
    let mut failures = Vec::new();
    let mut next_sequence = 0;
    let first = dump.batches.first();
    for batch in &dump.batches {
        if batch.producer_id < 0 || Some(batch.producer_id) != first.map(|b| b.producer_id) {
            failures.push(format!(
                "{name}: batch at {} has producer id {}",
                batch.base_offset, batch.producer_id
            ));
        }
        if Some(batch.producer_epoch) != first.map(|b| b.producer_epoch) {
            failures.push(format!(
                "{name}: batch at {} has producer epoch {}",
                batch.base_offset, batch.producer_epoch
            ));
        }
        if batch.base_sequence != next_sequence
            || batch.last_sequence - batch.base_sequence + 1 != batch.count
        {
            failures.push(format!(
                "{name}: batch at {} has sequences {}..={} for {} records, expected from {next_sequence}",
                batch.base_offset, batch.base_sequence, batch.last_sequence, batch.count
            ));
        }
        next_sequence = batch.last_sequence + 1;
    }
    failures
}

/// acks 1 and all (and 0 for librdkafka; Java's acks=0 is below) from Java and kcat,
/// and idempotent producers (Java and confluent-kafka) whose sequence numbers the
/// broker stores intact: every record once, in the policy codec.
#[test]
fn acks_and_idempotent_producers_through_kpress() {
    let (cluster, proxy) = shared();
    let java = JavaClient::new(kafka_version());
    let expected: Vec<Vec<u8>> = Dataset::ApacheAccessLog.records()[..2000].to_vec();
    let work = tempfile::tempdir().expect("temp dir");
    let file = write_records(&work.path().join("apache-2000.log"), &expected);
    let bootstrap = proxy.bootstrap();
    let java_acks = |acks: &str, idempotence: bool| ProduceOptions {
        compression: Compression::Gzip,
        acks: acks.to_string(),
        idempotence,
        batch_size: 4096,
        ..ProduceOptions::default()
    };
    // (topic, idempotent producer)
    let topics = [
        ("zstd.java-acks-1", false),
        ("zstd.java-acks-all", false),
        ("zstd.kcat-acks-0", false),
        ("zstd.kcat-acks-1", false),
        ("zstd.kcat-acks-all", false),
        ("lz4.java-idempotent", true),
        ("lz4.ck-idempotent", true),
    ];
    let names: Vec<&str> = topics.iter().map(|(t, _)| *t).collect();
    java.create_producer_codec_topics(&cluster.bootstrap(), &names, 1)
        .unwrap_or_else(|e| panic!("{e:#}"));
    let produced = [
        java.produce_file(&bootstrap, names[0], &file, &java_acks("1", false))
            .map(drop),
        java.produce_file(&bootstrap, names[1], &file, &java_acks("all", false))
            .map(drop),
        kcat::produce_file(
            &bootstrap,
            names[2],
            0,
            Compression::Snappy,
            &file,
            &["acks=0", "enable.idempotence=false", "batch.size=32768"],
        ),
        kcat::produce_file(
            &bootstrap,
            names[3],
            0,
            Compression::Snappy,
            &file,
            &["acks=1", "enable.idempotence=false", "batch.size=32768"],
        ),
        kcat::produce_file(
            &bootstrap,
            names[4],
            0,
            Compression::Snappy,
            &file,
            &["acks=all", "enable.idempotence=false", "batch.size=32768"],
        ),
        java.produce_file(&bootstrap, names[5], &file, &java_acks("all", true))
            .map(drop),
        confluent::produce_file(
            &bootstrap,
            names[6],
            &file,
            &ProduceOptions {
                compression: Compression::Zstd,
                idempotence: true,
                batch_size: 32768,
                ..ProduceOptions::default()
            },
        )
        .map(drop),
    ];
    for (topic, result) in names.iter().zip(produced) {
        result.unwrap_or_else(|e| panic!("{topic}: {e:#}\n{}", proxy.log()));
    }

    let mut failures = Vec::new();
    let dumps = cluster.dump_partition_0(&names).expect("DumpLogSegments");
    for ((topic, idempotent), dump) in topics.iter().zip(&dumps) {
        let codec = policy_codec(topic).expect("a policy topic");
        failures.extend(check_stored(topic, dump, codec, &expected));
        if *idempotent {
            failures.extend(check_sequences(topic, dump));
        } else if dump.batches.iter().any(|b| b.producer_id >= 0) {
            failures.push(format!("{topic}: a producer id without idempotence"));
        }
        if dump.batches.len() < 3 {
            failures.push(format!("{topic}: only {} batches", dump.batches.len()));
        }
    }
    failures.extend(
        java.read_back_problems(
            &bootstrap,
            &names,
            &expected,
            &ConsumeOptions::default(),
            "Java consumer through kpress",
        )
        .unwrap_or_else(|e| panic!("{e:#}\n{}", proxy.log())),
    );
    fail_if_any(failures, || proxy.log());
}

/// A Java consumer group through kpress (FindCoordinator, JoinGroup, SyncGroup,
/// OffsetCommit, OffsetFetch all relayed): it reads everything and commits; the same
/// group run again reads nothing; after more records it reads exactly those.
#[test]
fn consumer_group_offsets_through_kpress() {
    let (cluster, proxy) = shared();
    let java = JavaClient::new(kafka_version());
    let topic = "gzip.group";
    java.create_producer_codec_topics(&cluster.bootstrap(), &[topic], 3)
        .unwrap_or_else(|e| panic!("{e:#}"));
    let all = Dataset::ApacheAccessLog.records();
    let (first, second) = (all[..2000].to_vec(), all[2000..2500].to_vec());
    let work = tempfile::tempdir().expect("temp dir");
    let bootstrap = proxy.bootstrap();
    let produce = |name: &str, records: &[Vec<u8>]| {
        java.produce_file(
            &bootstrap,
            topic,
            &write_records(&work.path().join(name), records),
            &ProduceOptions {
                compression: Compression::Zstd,
                batch_size: 4096,
                properties: vec![
                    "partitioner.class=org.apache.kafka.clients.producer.RoundRobinPartitioner"
                        .to_string(),
                ],
                ..ProduceOptions::default()
            },
        )
        .unwrap_or_else(|e| panic!("{e:#}\n{}", proxy.log()));
    };
    let group = ConsumeOptions {
        group_id: Some("kpress-group".to_string()),
        ..ConsumeOptions::default()
    };
    let sorted_values = |records: &[kpress_tests::java_client::ConsumedRecord]| {
        let mut values: Vec<Vec<u8>> = records.iter().map(|r| r.value.clone()).collect();
        values.sort();
        values
    };
    let sorted = |records: &[Vec<u8>]| {
        let mut records = records.to_vec();
        records.sort();
        records
    };

    let mut failures = Vec::new();
    produce("first.log", &first);
    let read = java
        .consume(&bootstrap, &[topic], first.len(), &group)
        .unwrap_or_else(|e| panic!("first group run: {e:#}\n{}", proxy.log()));
    if let Some(diff) = diff_records(&sorted(&first), &sorted_values(&read)) {
        failures.push(format!("first group run (sorted): {diff}"));
    }
    let partitions: std::collections::BTreeSet<u32> = read.iter().map(|r| r.partition).collect();
    if partitions.len() != 3 {
        failures.push(format!(
            "records in partitions {partitions:?}, not all three"
        ));
    }
    match java.consume(&bootstrap, &[topic], 0, &group) {
        Ok(read) if read.is_empty() => {}
        Ok(read) => failures.push(format!(
            "the group read {} records again after committing",
            read.len()
        )),
        Err(e) => failures.push(format!("second group run: {e:#}")),
    }
    produce("second.log", &second);
    match java.consume(&bootstrap, &[topic], second.len(), &group) {
        Ok(read) => {
            if let Some(diff) = diff_records(&sorted(&second), &sorted_values(&read)) {
                failures.push(format!(
                    "third group run, only the new records (sorted): {diff}"
                ));
            }
        }
        Err(e) => failures.push(format!("third group run: {e:#}")),
    }
    let stored: Vec<Vec<u8>> = (0..3)
        .flat_map(|p| {
            let segment = cluster.segments(topic, p).expect("segments")[0].clone();
            let dump = dump_log_segments(kafka_version(), &[&segment]).expect("DumpLogSegments");
            let mut found = check_stored(
                &format!("{topic}-{p}"),
                &dump[0],
                Compression::Gzip,
                &dump[0].payloads(),
            );
            failures.append(&mut found);
            dump[0].payloads()
        })
        .collect();
    if let Some(diff) = diff_records(&sorted(&all[..2500]), &sorted(&stored)) {
        failures.push(format!("stored records (sorted): {diff}"));
    }
    fail_if_any(failures, || proxy.log());
}

/// acks=0 producers through kpress (no response comes back; the rewrite still lands),
/// and batches whose rewrite would exceed `max_batch_bytes` (Kafka's 1 MiB
/// `message.max.bytes`): those go to the broker untouched, in the producer's codec.
#[test]
fn acks_0_and_oversized_rewrites_through_kpress() {
    let (cluster, proxy) = shared();
    let java = JavaClient::new(kafka_version());
    let topics = ["zstd.acks0", "none.oversized"];
    java.create_producer_codec_topics(&cluster.bootstrap(), &topics, 1)
        .unwrap_or_else(|e| panic!("{e:#}"));
    let dataset = Dataset::ApacheAccessLog;
    let expected = dataset.records();
    let bootstrap = proxy.bootstrap();
    java.produce_file(
        &bootstrap,
        topics[0],
        &dataset.path(),
        &ProduceOptions {
            compression: Compression::Gzip,
            acks: "0".to_string(),
            idempotence: false,
            ..ProduceOptions::default()
        },
    )
    .unwrap_or_else(|e| panic!("{e:#}\n{}", proxy.log()));
    // Java sizes gzip batches by their estimated compressed size: with a 2 MB batch.size
    // and a long linger a batch holds over 1 MiB of records, too big uncompressed.
    java.produce_file(
        &bootstrap,
        topics[1],
        &dataset.path(),
        &ProduceOptions {
            compression: Compression::Gzip,
            batch_size: 2_000_000,
            linger_ms: 1000,
            ..ProduceOptions::default()
        },
    )
    .unwrap_or_else(|e| panic!("{e:#}\n{}", proxy.log()));

    let mut failures = Vec::new();
    failures.extend(
        java.read_back_problems(
            &bootstrap,
            &topics,
            &expected,
            &ConsumeOptions::default(),
            "Java consumer through kpress",
        )
        .unwrap_or_else(|e| panic!("{e:#}\n{}", proxy.log())),
    );
    let dumps = cluster.dump_partition_0(&topics).expect("DumpLogSegments");
    failures.extend(check_stored(
        topics[0],
        &dumps[0],
        Compression::Zstd,
        &expected,
    ));

    const MAX_BATCH_BYTES: usize = 1_048_588;
    let mut kept = 0;
    let mut stored = Vec::new();
    for batch in &dumps[1].batches {
        // A lower bound of the batch's size uncompressed: header, payloads, and at
        // least 7 bytes of framing per record.
        let payload: usize = batch.records.iter().map(|r| r.payload.len()).sum();
        let uncompressed_at_least = 61 + payload + 7 * batch.records.len();
        let fits = uncompressed_at_least <= MAX_BATCH_BYTES;
        match batch.compresscodec.as_str() {
            "none" if batch.size as usize <= MAX_BATCH_BYTES => {}
            "gzip" if !fits => kept += 1,
            other => failures.push(format!(
                "none.oversized: batch at {} ({} records, >= {uncompressed_at_least} bytes \
                 uncompressed) stored as {other}",
                batch.base_offset,
                batch.records.len()
            )),
        }
        if !batch.is_valid {
            failures.push(format!(
                "none.oversized: batch at {} invalid",
                batch.base_offset
            ));
        }
        stored.extend(batch.payloads().map(<[u8]>::to_vec));
    }
    if kept == 0 {
        failures.push(format!(
            "no batch of none.oversized was over the limit (the test did not exercise it): {:?}",
            dumps[1]
                .batches
                .iter()
                .map(|b| (b.count, b.size))
                .collect::<Vec<_>>()
        ));
    }
    if let Some(diff) = diff_records(&expected, &stored) {
        failures.push(format!("none.oversized: stored records: {diff}"));
    }
    let over_limit = proxy
        .counter(
            "kpress_batches_passed_total",
            &[("reason", "over_batch_limit")],
        )
        .unwrap_or_else(|e| panic!("{e:#}"));
    if over_limit < f64::from(kept) {
        failures.push(format!(
            "{kept} oversized batches kept, {over_limit} counted as over_batch_limit"
        ));
    }
    fail_if_any(failures, || proxy.log());
}

/// Damaged batches sent through kpress by a bare Produce request: a CRC mismatch and
/// a payload that does not decompress (with a correct CRC) are never rewritten into a
/// valid batch; the broker gives the error, nothing is stored, and kpress keeps serving.
#[test]
fn damaged_batches_are_never_laundered() {
    let (cluster, proxy) = shared();
    let java = JavaClient::new(kafka_version());
    let (source_topic, topic) = ("raw.source", "zstd.damaged");
    java.create_producer_codec_topics(&cluster.bootstrap(), &[source_topic, topic], 1)
        .unwrap_or_else(|e| panic!("{e:#}"));
    // A real gzip batch of the Java client, produced straight to the broker.
    java.produce_file(
        &cluster.bootstrap(),
        source_topic,
        &Dataset::ApacheAccessLog.path(),
        &ProduceOptions {
            compression: Compression::Gzip,
            ..ProduceOptions::default()
        },
    )
    .unwrap_or_else(|e| panic!("{e:#}"));
    let segment = cluster.segments(source_topic, 0).expect("segments")[0].clone();
    let batches = split_batches(&std::fs::read(&segment).expect("segment")).expect("batches");
    let valid = as_fresh_plain_batch(&batches[0]);
    assert_eq!(codec_id(&valid), 1, "a gzip batch");
    let source_dump = dump_log_segments(kafka_version(), &[&segment]).expect("DumpLogSegments");
    let first_records: Vec<Vec<u8>> = source_dump[0].batches[0]
        .payloads()
        .map(<[u8]>::to_vec)
        .collect();

    let addr = proxy.listen();
    let timeout = Duration::from_secs(30);
    let send = |records: &[u8]| produce_raw(addr, topic, 0, records, timeout);
    let mut failures = Vec::new();

    let first = send(&valid).unwrap_or_else(|e| panic!("{e:#}\n{}", proxy.log()));
    if first.error_code != 0 {
        failures.push(format!("the valid batch was refused: {first:?}"));
    }

    let mut bad_crc = valid.clone();
    flip_payload_byte(&mut bad_crc, 100);
    assert!(!crc_is_valid(&bad_crc));
    match send(&bad_crc) {
        Ok(r) if r.error_code != 0 => {}
        other => failures.push(format!("a batch with a bad CRC was not refused: {other:?}")),
    }

    let mut bad_payload = valid.clone();
    flip_payload_byte(&mut bad_payload, (valid.len() - 61) / 2);
    fix_crc(&mut bad_payload);
    let bad_payload_accepted = match send(&bad_payload) {
        Ok(r) => r.error_code == 0,
        Err(_) => false,
    };

    eprintln!("damaged payload with a correct CRC accepted by the broker: {bad_payload_accepted}");

    // A batch cut short of its length field: the proxy must survive it.
    let truncated = &valid[..valid.len() - 10];
    let _ = send(truncated);

    let last = send(&valid)
        .unwrap_or_else(|e| panic!("kpress after damaged input: {e:#}\n{}", proxy.log()));
    if last.error_code != 0 {
        failures.push(format!(
            "the valid batch after the damaged ones was refused: {last:?}"
        ));
    }

    let stored = cluster.segments(topic, 0).expect("segments")[0].clone();
    let dump = dump_log_segments(kafka_version(), &[&stored]).expect("DumpLogSegments");
    let zstd: Vec<_> = dump[0]
        .batches
        .iter()
        .filter(|b| b.compresscodec == "zstd")
        .collect();
    if zstd.len() != 2 {
        failures.push(format!(
            "expected the two valid batches stored as zstd, found {}",
            zstd.len()
        ));
    }
    for batch in &zstd {
        let records: Vec<&[u8]> = batch.payloads().collect();
        if let Some(diff) = diff_records(&first_records, &records) {
            failures.push(format!("a rewritten valid batch: {diff}"));
        }
    }
    for batch in &dump[0].batches {
        if !batch.is_valid {
            failures.push(format!("stored batch at {} invalid", batch.base_offset));
        }
    }
    let others: Vec<&str> = dump[0]
        .batches
        .iter()
        .filter(|b| b.compresscodec != "zstd")
        .map(|b| b.compresscodec.as_str())
        .collect();
    // If the broker took the damaged payload, kpress must have left it as it came.
    let expected_others: Vec<&str> = if bad_payload_accepted {
        vec!["gzip"]
    } else {
        vec![]
    };
    if others != expected_others {
        failures.push(format!(
            "stored non-zstd batches {others:?}, expected {expected_others:?} \
             (damaged payload accepted by the broker: {bad_payload_accepted})"
        ));
    }
    let crc_mismatch = proxy
        .counter("kpress_batches_passed_total", &[("reason", "crc_mismatch")])
        .unwrap_or_else(|e| panic!("{e:#}"));
    if crc_mismatch < 1.0 {
        failures.push("the bad-CRC batch was not counted as crc_mismatch".to_string());
    }
    fail_if_any(failures, || proxy.log());
}

/// Transactions through kpress (Java and librdkafka): committed and aborted
/// transactions, control batches untouched, read_committed consumers see only committed
/// records.
#[test]
fn transactions_through_kpress() {
    let (cluster, proxy) = shared();
    let java = JavaClient::new(kafka_version());
    let topic = "zstd.transactions";
    java.create_producer_codec_topics(&cluster.bootstrap(), &[topic], 1)
        .unwrap_or_else(|e| panic!("{e:#}"));
    let all = Dataset::ApacheAccessLog.records();
    let parts: Vec<Vec<Vec<u8>>> = all.chunks(1000).take(3).map(<[_]>::to_vec).collect();
    let work = tempfile::tempdir().expect("temp dir");
    let bootstrap = proxy.bootstrap();
    for (i, (part, commit)) in parts.iter().zip([true, false, true]).enumerate() {
        let file = write_records(&work.path().join(format!("part-{i}.txt")), part);
        java.produce_file(
            &bootstrap,
            topic,
            &file,
            &ProduceOptions {
                compression: Compression::Gzip,
                transaction: Some(("kpress-txn".to_string(), commit)),
                ..ProduceOptions::default()
            },
        )
        .unwrap_or_else(|e| panic!("{e:#}\n{}", proxy.log()));
    }
    let committed: Vec<Vec<u8>> = parts[0].iter().chain(&parts[2]).cloned().collect();
    let everything: Vec<Vec<u8>> = parts.concat();

    let mut failures = Vec::new();
    for (read_committed, expected) in [(true, &committed), (false, &everything)] {
        let consumed = java
            .consume(
                &bootstrap,
                &[topic],
                expected.len(),
                &ConsumeOptions {
                    read_committed,
                    ..ConsumeOptions::default()
                },
            )
            .unwrap_or_else(|e| panic!("{e:#}\n{}", proxy.log()));
        let values: Vec<&[u8]> = consumed.iter().map(|r| r.value.as_slice()).collect();
        if let Some(diff) = diff_records(expected, &values) {
            failures.push(format!("read_committed={read_committed}: {diff}"));
        }
    }
    // librdkafka's transactions through kpress too: one committed, one aborted.
    let ck_topic = "lz4.ck-transactions";
    java.create_producer_codec_topics(&cluster.bootstrap(), &[ck_topic], 1)
        .unwrap_or_else(|e| panic!("{e:#}"));
    for (i, commit) in [true, false].into_iter().enumerate() {
        let file = work.path().join(format!("part-{i}.txt"));
        confluent::produce_file(
            &bootstrap,
            ck_topic,
            &file,
            &ProduceOptions {
                compression: Compression::Zstd,
                transaction: Some(("kpress-ck-txn".to_string(), commit)),
                ..ProduceOptions::default()
            },
        )
        .unwrap_or_else(|e| panic!("{e:#}\n{}", proxy.log()));
    }
    match confluent::consume(
        &bootstrap,
        &[ck_topic],
        parts[0].len(),
        &ConsumeOptions {
            read_committed: true,
            ..ConsumeOptions::default()
        },
    ) {
        Ok(records) => {
            let values: Vec<&[u8]> = records.iter().map(|r| r.value.as_slice()).collect();
            if let Some(diff) = diff_records(&parts[0], &values) {
                failures.push(format!("{ck_topic}: read_committed through kpress: {diff}"));
            }
        }
        Err(e) => failures.push(format!("{ck_topic}: {e:#}")),
    }

    let dump = cluster
        .dump_partition_0(&[topic, ck_topic])
        .expect("DumpLogSegments");
    failures.extend(check_stored(
        topic,
        &dump[0],
        Compression::Zstd,
        &everything,
    ));
    let ck_everything: Vec<Vec<u8>> = parts[..2].concat();
    failures.extend(check_stored(
        ck_topic,
        &dump[1],
        Compression::Lz4,
        &ck_everything,
    ));
    let ck_controls = dump[1].batches.iter().filter(|b| b.is_control).count();
    if ck_controls != 2 {
        failures.push(format!(
            "{ck_topic}: expected 2 transaction markers, found {ck_controls}"
        ));
    }
    let controls = dump[0].batches.iter().filter(|b| b.is_control).count();
    if controls != 3 {
        failures.push(format!("expected 3 transaction markers, found {controls}"));
    }
    if !dump[0]
        .batches
        .iter()
        .all(|b| b.is_transactional || b.is_control)
    {
        failures.push("a data batch lost its transactional flag".to_string());
    }
    fail_if_any(failures, || proxy.log());
}

/// Three brokers with a replicated, three-partition topic behind kpress: producers and
/// consumers (a Java consumer group, so FindCoordinator goes through the proxy too)
/// reach every broker through it, and every replica holds the policy's codec; when a
/// partition leader stops, producing through kpress fails over to the new leader.
#[test]
fn three_brokers_behind_kpress() {
    let mut cluster = KafkaCluster::start(kafka_version(), 3).expect("starting 3 Kafka nodes");
    let proxy = KpressProxy::start_in_front_of(&cluster, RULES)
        .unwrap_or_else(|e| panic!("starting kpress: {e:#}"));
    let java = JavaClient::new(kafka_version());

    // Metadata through kpress names kpress's node ports, never the brokers' own.
    let through = fetch_metadata(proxy.listen(), Duration::from_secs(10))
        .unwrap_or_else(|e| panic!("Metadata through kpress: {e:#}\n{}", proxy.log()));
    let base = proxy.node_port_base().expect("node port base");
    let mut seen: Vec<(i32, String, u16)> = through
        .brokers
        .iter()
        .map(|b| (b.node_id, b.host.clone(), b.port))
        .collect();
    seen.sort();
    let wanted: Vec<(i32, String, u16)> = cluster
        .node_ids()
        .iter()
        .map(|&id| (id as i32, "127.0.0.1".to_string(), base + id as u16))
        .collect();
    assert_eq!(
        seen, wanted,
        "brokers as Metadata through kpress lists them"
    );

    let topic = "zstd.spread";
    java.create_topic_replicated(
        &cluster.bootstrap(),
        topic,
        3,
        3,
        &["compression.type=producer", "min.insync.replicas=2"],
    )
    .unwrap_or_else(|e| panic!("{e:#}\n{}", cluster.describe_logs()));
    // Kafka spreads the three partitions' leaders over the three brokers: producing to
    // every partition then means Produce requests through kpress to every broker.
    let metadata = cluster.metadata().expect("metadata");
    let mut leaders: Vec<i64> = metadata
        .topic(topic)
        .expect("the topic")
        .partitions
        .iter()
        .map(|p| i64::from(p.leader))
        .collect();
    leaders.sort_unstable();
    let node_ids: Vec<i64> = cluster.node_ids().into_iter().map(i64::from).collect();
    assert_eq!(leaders, node_ids, "partition leaders of {topic}");
    let dataset = Dataset::ApacheAccessLog;
    let expected = dataset.records();
    java.produce_file(
        &proxy.bootstrap(),
        topic,
        &dataset.path(),
        &ProduceOptions {
            compression: Compression::Gzip,
            // Small batches and a round-robin partitioner spread records over every
            // partition, so every broker gets Produce requests through kpress.
            batch_size: 16384,
            properties: vec![
                "partitioner.class=org.apache.kafka.clients.producer.RoundRobinPartitioner"
                    .to_string(),
            ],
            ..ProduceOptions::default()
        },
    )
    .unwrap_or_else(|e| panic!("{e:#}\n{}", proxy.log()));

    let mut failures = Vec::new();
    let consumed = java
        .consume(
            &proxy.bootstrap(),
            &[topic],
            expected.len(),
            &ConsumeOptions {
                group_id: Some("kpress-three-brokers".to_string()),
                timeout: Duration::from_secs(120),
                ..ConsumeOptions::default()
            },
        )
        .unwrap_or_else(|e| panic!("{e:#}\n{}", proxy.log()));
    let mut per_partition: BTreeMap<u32, Vec<Vec<u8>>> = BTreeMap::new();
    for record in &consumed {
        per_partition
            .entry(record.partition)
            .or_default()
            .push(record.value.clone());
    }
    if per_partition.len() != 3 {
        failures.push(format!(
            "records landed in partitions {:?}, not all three",
            per_partition.keys().collect::<Vec<_>>()
        ));
    }
    let mut all_consumed: Vec<Vec<u8>> = consumed.iter().map(|r| r.value.clone()).collect();
    let mut all_expected = expected.clone();
    all_consumed.sort();
    all_expected.sort();
    if let Some(diff) = diff_records(&all_expected, &all_consumed) {
        failures.push(format!(
            "Java consumer group through kpress (sorted): {diff}"
        ));
    }
    match confluent::consume(
        &proxy.bootstrap(),
        &[topic],
        expected.len(),
        &ConsumeOptions::default(),
    ) {
        Ok(records) => {
            let values: Vec<Vec<u8>> = records.into_iter().map(|r| r.value).collect();
            let java_order: Vec<Vec<u8>> = per_partition.values().flatten().cloned().collect();
            if let Some(diff) = diff_records(&java_order, &values) {
                failures.push(format!("confluent-kafka vs Java through kpress: {diff}"));
            }
        }
        Err(e) => failures.push(format!("confluent-kafka through kpress: {e:#}")),
    }

    // Every replica of every partition: valid, zstd, the records the consumer read.
    for (partition, records) in &per_partition {
        let replicas = replica_segments(&cluster, topic, *partition);
        if replicas.len() != 3 {
            failures.push(format!(
                "partition {partition}: {} replica segments, expected 3",
                replicas.len()
            ));
        }
        let refs: Vec<&Path> = replicas.iter().map(PathBuf::as_path).collect();
        // Followers may lag the leader's high watermark by a moment: retry briefly.
        let mut last = Vec::new();
        for _ in 0..20 {
            let dumps = dump_log_segments(kafka_version(), &refs).expect("DumpLogSegments");
            last = dumps
                .iter()
                .enumerate()
                .flat_map(|(i, d)| {
                    check_stored(
                        &format!("{topic}-{partition} replica {i}"),
                        d,
                        Compression::Zstd,
                        records,
                    )
                })
                .collect();
            if last.is_empty() {
                break;
            }
            std::thread::sleep(Duration::from_millis(500));
        }
        failures.extend(last);
    }
    fail_if_any(failures, || {
        format!("{}\n{}", proxy.log(), cluster.describe_logs())
    });

    // A broker goes away: the producer's requests to it through kpress fail, it learns
    // the new leader from Metadata through kpress, and carries on.
    let failover = "zstd.failover";
    java.create_topic_replicated(
        &cluster.bootstrap(),
        failover,
        1,
        3,
        &["compression.type=producer", "min.insync.replicas=2"],
    )
    .unwrap_or_else(|e| panic!("{e:#}"));
    let first: Vec<Vec<u8>> = expected[..5000].to_vec();
    let second: Vec<Vec<u8>> = expected[5000..].to_vec();
    let work = tempfile::tempdir().expect("temp dir");
    let produce_part = |name: &str, records: &[Vec<u8>]| {
        let file = write_records(&work.path().join(name), records);
        java.produce_file(
            &proxy.bootstrap(),
            failover,
            &file,
            &ProduceOptions {
                compression: Compression::Gzip,
                batch_size: 16384,
                ..ProduceOptions::default()
            },
        )
        .unwrap_or_else(|e| panic!("{e:#}\n{}", proxy.log()));
    };
    produce_part("first.txt", &first);
    let metadata = cluster.metadata().expect("metadata");
    let leader = metadata.topic(failover).expect("failover topic").partitions[0].leader;
    let leader_index = cluster
        .node_ids()
        .iter()
        .position(|id| i64::from(*id) == i64::from(leader))
        .expect("leader is a node");
    cluster
        .stop_node(leader_index)
        .expect("stopping the leader");
    produce_part("second.txt", &second);
    let mut failures = Vec::new();
    match confluent::consume(
        &proxy.bootstrap(),
        &[failover],
        expected.len(),
        &ConsumeOptions::default(),
    ) {
        Ok(records) => {
            let values: Vec<Vec<u8>> = records.into_iter().map(|r| r.value).collect();
            if let Some(diff) = diff_records(&expected, &values) {
                failures.push(format!("{failover}: after the leader stopped: {diff}"));
            }
        }
        Err(e) => failures.push(format!("{failover}: confluent-kafka through kpress: {e:#}")),
    }
    let replicas: Vec<PathBuf> = (0..cluster.node_ids().len())
        .filter(|i| *i != leader_index)
        .flat_map(|i| {
            let dir = cluster.partition_dir_on(i, failover, 0);
            std::fs::read_dir(dir)
                .into_iter()
                .flatten()
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|e| e == "log"))
        })
        .collect();
    let refs: Vec<&Path> = replicas.iter().map(PathBuf::as_path).collect();
    let mut last = Vec::new();
    for _ in 0..20 {
        let dumps = dump_log_segments(kafka_version(), &refs).expect("DumpLogSegments");
        last = dumps
            .iter()
            .flat_map(|d| {
                check_stored(
                    &format!("{failover} {}", d.path.display()),
                    d,
                    Compression::Zstd,
                    &expected,
                )
            })
            .collect();
        if last.is_empty() {
            break;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    failures.extend(last);
    fail_if_any(failures, || {
        format!("{}\n{}", proxy.log(), cluster.describe_logs())
    });
}

/// A Kafka 3.9.1 broker behind kpress, with the 3.9.1 Java client and kcat.
#[test]
fn kafka_3_9_broker_behind_kpress() {
    let version = kafka_old_version();
    let cluster = KafkaCluster::start(version, 1).expect("starting Kafka 3.9");
    let proxy = KpressProxy::start_in_front_of(&cluster, RULES)
        .unwrap_or_else(|e| panic!("starting kpress: {e:#}"));
    let java = JavaClient::new(version);
    let topics = ["zstd.old-java", "lz4.old-kcat"];
    java.create_producer_codec_topics(&cluster.bootstrap(), &topics, 1)
        .unwrap_or_else(|e| panic!("{e:#}"));
    let dataset = Dataset::NginxPlusStatus;
    let expected = dataset.records();
    java.produce_file(
        &proxy.bootstrap(),
        topics[0],
        &dataset.path(),
        &ProduceOptions {
            compression: Compression::Gzip,
            ..ProduceOptions::default()
        },
    )
    .unwrap_or_else(|e| panic!("{e:#}\n{}", proxy.log()));
    kcat::produce_file(
        &proxy.bootstrap(),
        topics[1],
        0,
        Compression::Zstd,
        &dataset.path(),
        &[],
    )
    .unwrap_or_else(|e| panic!("{e:#}\n{}", proxy.log()));

    let mut failures = Vec::new();
    let dumps = cluster.dump_partition_0(&topics).expect("DumpLogSegments");
    for (topic, dump) in topics.iter().zip(&dumps) {
        let codec = policy_codec(topic).expect("a policy topic");
        failures.extend(check_stored(topic, dump, codec, &expected));
        failures.extend(kcat::read_back_problem(
            &proxy.bootstrap(),
            topic,
            0,
            &[],
            &expected,
        ));
    }
    failures.extend(
        java.read_back_problems(
            &proxy.bootstrap(),
            &topics,
            &expected,
            &ConsumeOptions::default(),
            "Java 3.9 consumer through kpress",
        )
        .unwrap_or_else(|e| panic!("{e:#}\n{}", proxy.log())),
    );
    fail_if_any(failures, || {
        format!("{}\n{}", proxy.log(), cluster.describe_logs())
    });
}
