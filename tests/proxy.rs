//! `kpress run` end to end with real brokers and real clients: producers send through
//! the proxy, the broker stores the policy's codec (read back by Kafka's own
//! DumpLogSegments, every batch valid), and consumers through the proxy read exactly
//! what was produced.
//!
//! Clients: Java kafka-clients 4.1.1 (Produce v13, topic ids) and 3.9.1 (Produce v11,
//! topic names), librdkafka 2.0 (kcat) and 2.16 (confluent-kafka). Brokers: Kafka 4.1.1
//! (one node, and three nodes with replicated partitions) and 3.9.1.

use kpress_tests::cluster::KafkaCluster;
use kpress_tests::compression::Compression;
use kpress_tests::data::{diff_records, split_lines, Dataset};
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
/// producer's (`allow_growth`, so every batch lands in it); `keep.*` asks for lz4 but
/// keeps a batch whose rewrite would not be smaller; everything else keeps the
/// producer's codec.
const RULES: &str = r#"
[defaults]
compression.type = "producer"

[[topics]]
match = "zstd.*"
compression.type = "zstd"
compression.zstd.level = 3
allow_growth = true

[[topics]]
match = "lz4.*"
compression.type = "lz4"
allow_growth = true

[[topics]]
match = "gzip.*"
compression.type = "gzip"
compression.gzip.level = 6
allow_growth = true

[[topics]]
match = "snappy.*"
compression.type = "snappy"
allow_growth = true

[[topics]]
match = "none.*"
compression.type = "none"

[[topics]]
match = "keep.*"
compression.type = "lz4"
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
        if batch.compresscodec != codec.dump_name() {
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
#[derive(Debug, Clone, Copy)]
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

    fn produce(
        self,
        bootstrap: &str,
        topic: &str,
        file: &Path,
        codec: Compression,
    ) -> anyhow::Result<()> {
        let options = ProduceOptions {
            compression: codec,
            ..ProduceOptions::default()
        };
        match self {
            Client::Java(version) => JavaClient::new(version)
                .produce_file(bootstrap, topic, file, &options)
                .map(drop),
            Client::Kcat => kcat::produce_file(bootstrap, topic, 0, codec, file, &[]),
            Client::ConfluentKafka => confluent::produce_file(
                bootstrap,
                topic,
                file,
                &ProduceOptions {
                    batch_size: 262_144,
                    ..options
                },
            )
            .map(drop),
        }
    }
}

/// Every client, each with its own codec, produces the apache log through kpress into
/// a topic per target codec; the broker stores the policy's codec and consumers
/// through kpress read every record back.
#[test]
fn every_client_through_kpress_stores_the_policy_codec() {
    let (cluster, proxy) = shared();
    let java = JavaClient::new(kafka_version());
    let clients = [
        (Client::Java(kafka_version()), Compression::Gzip),
        (Client::Java(kafka_old_version()), Compression::Lz4),
        (Client::Kcat, Compression::Snappy),
        (Client::ConfluentKafka, Compression::Zstd),
    ];
    let dataset = Dataset::ApacheAccessLog;
    let expected = dataset.records();
    let mut topics = Vec::new();
    for (client, source_codec) in clients {
        for target in Compression::ALL {
            topics.push((
                format!("{target}.{}-{source_codec}", client.name()),
                client,
                source_codec,
            ));
        }
    }
    // A topic no rule matches keeps the producer's codec.
    topics.push((
        "plain.java-gzip".to_string(),
        Client::Java(kafka_version()),
        Compression::Gzip,
    ));
    // zstd → lz4 is never smaller on this log: without allow_growth kpress keeps zstd.
    topics.push((
        "keep.ck-zstd".to_string(),
        Client::ConfluentKafka,
        Compression::Zstd,
    ));
    let names: Vec<&str> = topics.iter().map(|(t, _, _)| t.as_str()).collect();
    // Topics are created on the broker directly; producers and consumers only see kpress.
    java.create_topics(
        &cluster.bootstrap(),
        &names,
        1,
        1,
        &["compression.type=producer"],
    )
    .unwrap_or_else(|e| panic!("{e:#}"));

    let bootstrap = proxy.bootstrap();
    for (topic, client, codec) in &topics {
        client
            .produce(&bootstrap, topic, &dataset.path(), *codec)
            .unwrap_or_else(|e| panic!("{topic}: {e:#}\n{}", proxy.log()));
    }

    let mut failures = Vec::new();
    let segments: Vec<PathBuf> = names
        .iter()
        .map(|t| cluster.segments(t, 0).expect("segments")[0].clone())
        .collect();
    let segment_refs: Vec<&Path> = segments.iter().map(PathBuf::as_path).collect();
    let dumps = dump_log_segments(kafka_version(), &segment_refs).expect("DumpLogSegments");
    for ((topic, _, source_codec), dump) in topics.iter().zip(&dumps) {
        let codec = policy_codec(topic).unwrap_or(*source_codec);
        failures.extend(check_stored(topic, dump, codec, &expected));
    }

    let consumed = java
        .consume(
            &bootstrap,
            &names,
            expected.len() * names.len(),
            &ConsumeOptions {
                timeout: Duration::from_secs(180),
                ..ConsumeOptions::default()
            },
        )
        .unwrap_or_else(|e| panic!("{e:#}\n{}", proxy.log()));
    for topic in &names {
        let values: Vec<&[u8]> = consumed
            .iter()
            .filter(|r| r.topic == *topic)
            .map(|r| r.value.as_slice())
            .collect();
        if let Some(diff) = diff_records(&expected, &values) {
            failures.push(format!("{topic}: Java consumer through kpress: {diff}"));
        }
        match kcat::consume_partition(&bootstrap, topic, 0, &[]) {
            Ok(records) => {
                let values: Vec<&[u8]> = records.iter().map(|(_, v)| v.as_slice()).collect();
                if let Some(diff) = diff_records(&expected, &values) {
                    failures.push(format!("{topic}: kcat through kpress: {diff}"));
                }
            }
            Err(e) => failures.push(format!("{topic}: kcat through kpress: {e:#}")),
        }
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
    if rewritten < 1.0 {
        failures.push(format!(
            "no gzip->zstd rewrite counted for zstd.java411-gzip:\n{}",
            proxy.scrape_metrics().unwrap_or_default()
        ));
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
    java.create_topics(
        &cluster.bootstrap(),
        &topics,
        1,
        1,
        &["compression.type=producer"],
    )
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
    let consumed = java
        .consume(
            &bootstrap,
            &topics,
            expected.len() * 2,
            &ConsumeOptions::default(),
        )
        .unwrap_or_else(|e| panic!("{e:#}\n{}", proxy.log()));
    for topic in topics {
        let values: Vec<&[u8]> = consumed
            .iter()
            .filter(|r| r.topic == topic)
            .map(|r| r.value.as_slice())
            .collect();
        if let Some(diff) = diff_records(&expected, &values) {
            failures.push(format!("{topic}: Java consumer through kpress: {diff}"));
        }
    }
    let segments: Vec<PathBuf> = topics
        .iter()
        .map(|t| cluster.segments(t, 0).expect("segments")[0].clone())
        .collect();
    let refs: Vec<&Path> = segments.iter().map(PathBuf::as_path).collect();
    let dumps = dump_log_segments(kafka_version(), &refs).expect("DumpLogSegments");
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
    java.create_topics(
        &cluster.bootstrap(),
        &[source_topic, topic],
        1,
        1,
        &["compression.type=producer"],
    )
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
    java.create_topic(
        &cluster.bootstrap(),
        topic,
        1,
        &["compression.type=producer"],
    )
    .unwrap_or_else(|e| panic!("{e:#}"));
    let all = Dataset::ApacheAccessLog.records();
    let parts: Vec<Vec<Vec<u8>>> = all.chunks(1000).take(3).map(<[_]>::to_vec).collect();
    let work = tempfile::tempdir().expect("temp dir");
    let bootstrap = proxy.bootstrap();
    for (i, (part, commit)) in parts.iter().zip([true, false, true]).enumerate() {
        let file = work.path().join(format!("part-{i}.txt"));
        let mut text = part.join(&b'\n');
        text.push(b'\n');
        std::fs::write(&file, &text).expect("write records");
        assert_eq!(split_lines(&text).len(), part.len());
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
    java.create_topic(
        &cluster.bootstrap(),
        ck_topic,
        1,
        &["compression.type=producer"],
    )
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

    let segment = cluster.segments(topic, 0).expect("segments")[0].clone();
    let ck_segment = cluster.segments(ck_topic, 0).expect("segments")[0].clone();
    let dump =
        dump_log_segments(kafka_version(), &[&segment, &ck_segment]).expect("DumpLogSegments");
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
        let file = work.path().join(name);
        let mut text = records.join(&b'\n');
        text.push(b'\n');
        std::fs::write(&file, text).expect("write records");
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
    java.create_topics(
        &cluster.bootstrap(),
        &topics,
        1,
        1,
        &["compression.type=producer"],
    )
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
    let segments: Vec<PathBuf> = topics
        .iter()
        .map(|t| cluster.segments(t, 0).expect("segments")[0].clone())
        .collect();
    let refs: Vec<&Path> = segments.iter().map(PathBuf::as_path).collect();
    let dumps = dump_log_segments(version, &refs).expect("DumpLogSegments");
    for (topic, dump) in topics.iter().zip(&dumps) {
        let codec = policy_codec(topic).expect("a policy topic");
        failures.extend(check_stored(topic, dump, codec, &expected));
        match kcat::consume_partition(&proxy.bootstrap(), topic, 0, &[]) {
            Ok(records) => {
                let values: Vec<&[u8]> = records.iter().map(|(_, v)| v.as_slice()).collect();
                if let Some(diff) = diff_records(&expected, &values) {
                    failures.push(format!("{topic}: kcat through kpress: {diff}"));
                }
            }
            Err(e) => failures.push(format!("{topic}: kcat through kpress: {e:#}")),
        }
    }
    let consumed = java
        .consume(
            &proxy.bootstrap(),
            &topics,
            expected.len() * 2,
            &ConsumeOptions::default(),
        )
        .unwrap_or_else(|e| panic!("{e:#}\n{}", proxy.log()));
    for topic in topics {
        let values: Vec<&[u8]> = consumed
            .iter()
            .filter(|r| r.topic == topic)
            .map(|r| r.value.as_slice())
            .collect();
        if let Some(diff) = diff_records(&expected, &values) {
            failures.push(format!("{topic}: Java 3.9 consumer through kpress: {diff}"));
        }
    }
    fail_if_any(failures, || {
        format!("{}\n{}", proxy.log(), cluster.describe_logs())
    });
}
