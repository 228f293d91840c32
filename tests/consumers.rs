//! Java kafka-clients 2.0.1, a consumer from before zstd (Fetch v4-v8), reading
//! zstd-compressed topics of real 4.1.1 and 3.9.1 brokers, straight from the broker and
//! through `kpress run`.
//!
//! Straight from the broker it cannot: both brokers send it the zstd batches, which it
//! cannot decompress (`Unknown compression type id: 4`). Through kpress its Fetch goes
//! to the broker at v10 and each zstd batch comes back in lz4 (`[consumers] codec`'s
//! default), with offsets, producer ids, sequences and records as stored: it reads every
//! record byte for byte, and with `read_committed` skips exactly the aborted records a
//! current client skips.
//!
//! A `[[clients]]` rule narrows what a consumer reads further: one that reads only gzip
//! gets lz4, snappy and zstd batches in gzip. Consumers of the same batches share one
//! re-encoding through the cache of re-encoded batches.

use kpress_tests::compression::Compression;
use kpress_tests::data::{diff_records, Dataset};
use kpress_tests::java_client::{values_of, ConsumeOptions, JavaClient, ProduceOptions};
use kpress_tests::kafkajs;
use kpress_tests::kpress::KpressProxy;
use kpress_tests::pre_zstd_client::{pre_zstd_clients_version, pre_zstd_java_client};
use kpress_tests::{kafka_old_version, kafka_version, KafkaCluster};
use std::sync::OnceLock;
use std::time::Duration;

/// kpress keeps every batch as the producer sent it: the topics hold what the Java
/// producer wrote (zstd), and only the Fetch side is under test.
const RULES: &str = "[defaults]\ncompression.type = \"producer\"\n";

/// The `[[clients]]` rules of the shared scene: each matches only the `client.id`s of
/// the one test that uses it, so the other consumers there see [`RULES`] alone.
const GZIP_ONLY_CLIENTS: &str = "\n[[clients]]\nmatch = \"gzip-only*\"\naccept = [\"gzip\"]\n";
const KAFKAJS_CLIENTS: &str = "\n[[clients]]\nmatch = \"kafkajs-*\"\naccept = [\"gzip\"]\n";

const REENCODED: &str = "kpress_fetch_batches_reencoded_total";
const UPGRADED: &str = "kpress_fetch_requests_upgraded_total";
const CUT: &str = "kpress_fetch_partitions_cut_total";
const CACHE_HITS: &str = "kpress_fetch_cache_hits_total";

/// How long the old consumer is given straight from the broker, where it cannot get
/// far: enough to fetch, not to wait out the whole read.
const DIRECT_TIMEOUT: Duration = Duration::from_secs(20);

fn zstd_producer() -> ProduceOptions {
    ProduceOptions {
        compression: Compression::Zstd,
        batch_size: 16384,
        ..ProduceOptions::default()
    }
}

/// A one-node cluster of `version` with kpress in front of it, the current Java client
/// and kafka-clients 2.0.1.
struct Scene {
    version: &'static str,
    cluster: KafkaCluster,
    proxy: KpressProxy,
    current: JavaClient,
    old: JavaClient,
    old_name: String,
}

impl Scene {
    fn start(version: &'static str, rules: &str) -> Scene {
        let cluster = KafkaCluster::start(version, 1).expect("starting Kafka");
        let proxy = KpressProxy::start_in_front_of(&cluster, rules)
            .unwrap_or_else(|e| panic!("starting kpress: {e:#}"));
        Scene {
            version,
            cluster,
            proxy,
            current: JavaClient::new(version),
            old: pre_zstd_java_client(),
            old_name: format!("kafka-clients {}", pre_zstd_clients_version()),
        }
    }

    /// Creates one-partition `compression.type=producer` topics.
    fn create_topics(&self, topics: &[&str]) {
        self.current
            .create_producer_codec_topics(&self.cluster.bootstrap(), topics, 1)
            .unwrap_or_else(|e| panic!("{e:#}"));
    }

    /// Produces `file`'s lines into `topic` with the current client.
    fn produce(&self, topic: &str, file: &std::path::Path, options: &ProduceOptions) {
        self.current
            .produce_file(&self.cluster.bootstrap(), topic, file, options)
            .unwrap_or_else(|e| {
                panic!(
                    "producing {} with kafka-clients {}: {e:#}",
                    options.compression.name(),
                    self.version
                )
            });
    }

    /// A one-partition topic holding `dataset` in zstd; returns its records.
    fn zstd_topic(&self, topic: &str, dataset: Dataset) -> Vec<Vec<u8>> {
        self.create_topics(&[topic]);
        self.produce(topic, &dataset.path(), &zstd_producer());
        dataset.records()
    }

    /// A counter of kpress's, read as a whole number (an empty sum reads -0.0).
    fn counter(&self, name: &str, labels: &[(&str, &str)]) -> u64 {
        self.proxy.counter(name, labels).expect("kpress metrics") as u64
    }

    /// Fails the test with `problems`, kpress's log and the brokers' logs.
    fn assert_none(&self, problems: &[String]) {
        assert!(
            problems.is_empty(),
            "{}\n{}\n{}",
            problems.join("\n"),
            self.proxy.log(),
            self.cluster.describe_logs()
        );
    }
}

/// One Kafka 4.1 scene under [`RULES`] and both `[[clients]]` rules, shared by the
/// tests whose topics are their own and whose counters they read by topic.
fn shared_scene() -> &'static Scene {
    static SCENE: OnceLock<Scene> = OnceLock::new();
    SCENE.get_or_init(|| {
        Scene::start(
            kafka_version(),
            &format!("{RULES}{GZIP_ONLY_CLIENTS}{KAFKAJS_CLIENTS}"),
        )
    })
}

/// Reports how the old consumer ended where it cannot read everything: a problem if
/// it read all `expected` records, else the client's own `failure` message when its
/// captured output still holds it.
fn note_old_consumer_failure(
    who: &str,
    result: anyhow::Result<Vec<kpress_tests::java_client::ConsumedRecord>>,
    expected: usize,
    failure: &str,
    problems: &mut Vec<String>,
) {
    match result {
        Ok(records) if records.len() == expected => problems.push(format!(
            "{who} read all {} records; expected it to fail with {failure:?}",
            records.len(),
        )),
        Ok(records) => eprintln!("{who} read {} of {expected} records", records.len()),
        Err(e) => {
            let text = format!("{e:#}");
            let shown = text
                .lines()
                .find(|line| line.contains(failure))
                .unwrap_or("(its message is past the captured output)");
            eprintln!("{who} fails: {}", shown.trim());
        }
    }
}

/// Produces the Apache log in zstd with the current client into a one-partition
/// `compression.type=producer` topic of a one-node `version` cluster, checks it is
/// stored in zstd, then reads it with kafka-clients 2.0.1 straight from the broker
/// (which must fail, `direct_failure` being the message expected, or read only part)
/// and through kpress (which must read every record). Returns the problems found.
fn old_consumer_reads_zstd(version: &'static str, direct_failure: &str) -> Vec<String> {
    let scene = Scene::start(version, RULES);
    let topic = "zstd-for-old-consumers";
    let expected = scene.zstd_topic(topic, Dataset::ApacheAccessLog);
    let old_name = &scene.old_name;
    let mut problems = Vec::new();
    let dumps = scene
        .cluster
        .dump_partition_0(&[topic])
        .expect("DumpLogSegments");
    let zstd_batches = dumps[0].batches.len();
    problems.extend(
        dumps[0]
            .problems
            .iter()
            .map(|p| format!("DumpLogSegments: {p}")),
    );
    if dumps[0]
        .batches
        .iter()
        .any(|b| b.compresscodec != Compression::Zstd.dump_name())
    {
        problems.push(format!(
            "{topic}: not every batch of partition 0 is stored in zstd"
        ));
    }

    // Straight from the broker: the old consumer cannot read what is stored.
    let direct = ConsumeOptions {
        timeout: DIRECT_TIMEOUT,
        ..ConsumeOptions::default()
    };
    note_old_consumer_failure(
        &format!("{old_name} straight from Kafka {version}"),
        scene.old.consume(
            &scene.cluster.bootstrap(),
            &[topic],
            expected.len(),
            &direct,
        ),
        expected.len(),
        direct_failure,
        &mut problems,
    );

    // Through kpress: every record, byte for byte.
    let through = ConsumeOptions {
        timeout: Duration::from_secs(120),
        ..ConsumeOptions::default()
    };
    match scene.old.read_back_problems(
        &scene.proxy.bootstrap(),
        &[topic],
        &expected,
        &through,
        old_name,
    ) {
        Ok(found) => problems.extend(found),
        Err(e) => problems.push(format!("{old_name} reading through kpress: {e:#}")),
    }
    let reencoded = scene.counter(
        REENCODED,
        &[("from", "zstd"), ("to", "lz4"), ("topic", topic)],
    );
    let upgraded = scene.counter(UPGRADED, &[]);
    let cut = scene.counter(CUT, &[]);
    eprintln!(
        "Kafka {version}: {zstd_batches} zstd batches in partition 0; through kpress \
         {upgraded} Fetch requests upgraded, {reencoded} batches re-encoded zstd -> lz4, \
         {cut} partitions cut"
    );
    if reencoded < zstd_batches as u64 {
        problems.push(format!(
            "{REENCODED}{{from=\"zstd\",to=\"lz4\"}} is {reencoded}; expected at least the \
             {zstd_batches} batches of partition 0"
        ));
    }
    if upgraded == 0 {
        problems.push(format!("{UPGRADED} is 0"));
    }
    if !problems.is_empty() {
        problems.push(format!(
            "{}\n{}",
            scene.proxy.log(),
            scene.cluster.describe_logs()
        ));
    }
    problems
}

/// Kafka 4.1 hands the old consumer zstd batches: it dies decompressing the first.
/// Through kpress it reads them all in lz4.
#[test]
fn old_consumer_reads_zstd_from_kafka_4_1_through_kpress() {
    let problems = old_consumer_reads_zstd(kafka_version(), "Unknown compression type id: 4");
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// Kafka 3.9 too sends the zstd batches to the old consumer's Fetch v8 (no
/// UNSUPPORTED_COMPRESSION_TYPE), and it dies on the first. Through kpress (Fetch v10
/// upstream) it reads them all in lz4.
#[test]
fn old_consumer_reads_zstd_from_kafka_3_9_through_kpress() {
    let problems = old_consumer_reads_zstd(kafka_old_version(), "Unknown compression type id: 4");
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// Committed, aborted and committed again, all in zstd transactions: the old consumer
/// with `read_committed` through kpress reads exactly what a current consumer reads
/// straight from the broker (the aborted records skipped by the broker's aborted
/// transactions list, which kpress keeps as it came).
#[test]
fn old_read_committed_consumer_skips_aborted_zstd_through_kpress() {
    let scene = shared_scene();
    let (version, current, old) = (scene.version, &scene.current, &scene.old);
    let (cluster, proxy) = (&scene.cluster, &scene.proxy);
    let topic = "zstd-transactions";
    scene.create_topics(&[topic]);
    let dataset = Dataset::NginxPlusStatus;
    let records = dataset.records();
    let in_transaction = |id: &str, commit: bool| ProduceOptions {
        transaction: Some((id.to_string(), commit)),
        ..zstd_producer()
    };
    for (id, commit) in [("first", true), ("aborted", false), ("second", true)] {
        scene.produce(topic, &dataset.path(), &in_transaction(id, commit));
    }
    let committed: Vec<Vec<u8>> = records.iter().chain(&records).cloned().collect();
    let options = ConsumeOptions {
        read_committed: true,
        timeout: Duration::from_secs(120),
        ..ConsumeOptions::default()
    };
    let direct = current
        .consume(&cluster.bootstrap(), &[topic], committed.len(), &options)
        .unwrap_or_else(|e| panic!("kafka-clients {version} read_committed: {e:#}"));
    let through = old
        .consume(&proxy.bootstrap(), &[topic], committed.len(), &options)
        .unwrap_or_else(|e| {
            panic!(
                "kafka-clients {} read_committed through kpress: {e:#}\n{}",
                pre_zstd_clients_version(),
                proxy.log()
            )
        });
    let mut problems = Vec::new();
    if let Some(diff) = diff_records(&committed, &values_of(&direct, topic)) {
        problems.push(format!(
            "kafka-clients {version} straight from the broker: {diff}"
        ));
    }
    if let Some(diff) = diff_records(&committed, &values_of(&through, topic)) {
        problems.push(format!("kafka-clients 2.0.1 through kpress: {diff}"));
    }
    let offsets = |records: &[kpress_tests::java_client::ConsumedRecord]| {
        records.iter().map(|r| r.offset).collect::<Vec<_>>()
    };
    if offsets(&direct) != offsets(&through) {
        problems.push("the two consumers read the records at different offsets".to_string());
    }
    let reencoded = proxy
        .counter(REENCODED, &[("from", "zstd"), ("topic", topic)])
        .expect("kpress metrics");
    eprintln!(
        "read_committed: {} records of 3 transactions (one aborted) at the same offsets; \
         {reencoded} batches re-encoded",
        through.len()
    );
    if reencoded == 0.0 {
        problems.push(format!("{REENCODED} is 0"));
    }
    scene.assert_none(&problems);
}

/// A consumer a `[[clients]]` rule says reads only gzip (by its `client.id`): through
/// kpress it reads lz4, snappy and zstd topics byte for byte, each of their batches
/// re-encoded into gzip.
#[test]
fn gzip_only_consumer_reads_every_codec_in_gzip_through_kpress() {
    let scene = shared_scene();
    let (cluster, proxy, old) = (&scene.cluster, &scene.proxy, &scene.old);
    let codecs = [Compression::Lz4, Compression::Snappy, Compression::Zstd];
    let topics: Vec<String> = codecs
        .iter()
        .map(|c| format!("stored-{}", c.name()))
        .collect();
    let topic_names: Vec<&str> = topics.iter().map(String::as_str).collect();
    scene.create_topics(&topic_names);
    let dataset = Dataset::ApacheAccessLog;
    let expected = dataset.records();
    // One producer per codec, at once: the test's time is mostly JVM start-up.
    std::thread::scope(|scope| {
        for (codec, topic) in codecs.iter().zip(&topic_names) {
            scope.spawn(move || {
                let options = ProduceOptions {
                    compression: *codec,
                    ..zstd_producer()
                };
                scene.produce(topic, &dataset.path(), &options);
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
    let options = ConsumeOptions {
        timeout: Duration::from_secs(120),
        properties: vec!["client.id=gzip-only-reader".to_string()],
        ..ConsumeOptions::default()
    };
    let reader = format!(
        "kafka-clients {} as gzip-only-reader",
        pre_zstd_clients_version()
    );
    match old.read_back_problems(
        &proxy.bootstrap(),
        &topic_names,
        &expected,
        &options,
        &reader,
    ) {
        Ok(found) => problems.extend(found),
        Err(e) => problems.push(format!("{reader} reading through kpress: {e:#}")),
    }
    for ((codec, topic), dump) in codecs.iter().zip(&topic_names).zip(&dumps) {
        let labels = [("from", codec.name()), ("to", "gzip"), ("topic", *topic)];
        let reencoded = scene.counter(REENCODED, &labels);
        eprintln!(
            "{topic}: {} {} batches stored; {reencoded} re-encoded {} -> gzip",
            dump.batches.len(),
            codec.name(),
            codec.name()
        );
        if reencoded < dump.batches.len() as u64 {
            problems.push(format!(
                "{REENCODED}{{from=\"{}\",to=\"gzip\",topic=\"{topic}\"}} is {reencoded}; \
                 expected at least the {} batches stored",
                codec.name(),
                dump.batches.len()
            ));
        }
    }
    let cut = scene.counter(CUT, &[]);
    if cut != 0 {
        eprintln!("{cut} partitions cut (fetched again)");
    }
    scene.assert_none(&problems);
}

/// Three old consumers of one zstd partition through kpress, at once: the batches one
/// had re-encoded are copied from the cache for the others, so kpress re-encodes far
/// fewer than three times the batches.
#[test]
fn consumers_of_the_same_zstd_batches_share_their_reencoding() {
    const CONSUMERS: usize = 3;
    let scene = Scene::start(kafka_version(), RULES);
    let (proxy, old, old_name) = (&scene.proxy, &scene.old, &scene.old_name);
    let topic = "zstd-shared";
    let expected = scene.zstd_topic(topic, Dataset::ApacheAccessLog);
    let dumps = scene
        .cluster
        .dump_partition_0(&[topic])
        .expect("DumpLogSegments");
    let batches = dumps[0].batches.len() as u64;
    let options = ConsumeOptions {
        timeout: Duration::from_secs(180),
        ..ConsumeOptions::default()
    };
    let results: Vec<anyhow::Result<Vec<String>>> = std::thread::scope(|scope| {
        let readers: Vec<_> = (0..CONSUMERS)
            .map(|i| {
                let (expected, options) = (&expected, &options);
                let name = format!("{old_name} #{i}");
                scope.spawn(move || {
                    old.read_back_problems(&proxy.bootstrap(), &[topic], expected, options, &name)
                })
            })
            .collect();
        readers
            .into_iter()
            .map(|r| r.join().expect("a reader thread"))
            .collect()
    });
    let mut problems = Vec::new();
    for (i, result) in results.into_iter().enumerate() {
        match result {
            Ok(found) => problems.extend(found),
            Err(e) => problems.push(format!("{old_name} #{i} reading through kpress: {e:#}")),
        }
    }
    let reencoded = scene.counter(REENCODED, &[("from", "zstd"), ("topic", topic)]);
    let hits = scene.counter(CACHE_HITS, &[]);
    eprintln!(
        "{CONSUMERS} consumers of {batches} zstd batches: {reencoded} re-encoded, \
         {hits} cache hits"
    );
    if hits == 0 {
        problems.push(format!("{CACHE_HITS} is 0"));
    }
    if reencoded >= CONSUMERS as u64 * batches {
        problems.push(format!(
            "{reencoded} batches re-encoded for {CONSUMERS} consumers of {batches}: the cache \
             saved none"
        ));
    }
    scene.assert_none(&problems);
}

/// A zstd batch the broker stores but kpress will not decompress: one record of
/// 900,000 repeated bytes, a few hundred bytes compressed, far over
/// `[limits] max_decompression_ratio` (1000 by default), followed by ordinary zstd
/// batches. Kafka 4.1 hands it to kafka-clients 2.0.1 as stored and the consumer fails
/// there; through kpress it gets the same batch as stored (never an empty partition
/// that would stall it at that offset), counted as passed, and kpress keeps serving:
/// a current consumer through kpress on a fresh connection reads every record.
#[test]
fn a_decompression_bomb_reaches_the_old_consumer_as_stored() {
    const PASSED: &str = "kpress_fetch_batches_passed_total";
    let scene = shared_scene();
    let (version, cluster, proxy) = (scene.version, &scene.cluster, &scene.proxy);
    let (current, old, old_name) = (&scene.current, &scene.old, &scene.old_name);
    let topic = "zstd-bomb";
    scene.create_topics(&[topic]);
    let scratch = tempfile::tempdir().expect("temp dir");
    let bomb_file = scratch.path().join("bomb.txt");
    let bomb = vec![b'a'; 900_000];
    std::fs::write(&bomb_file, [&bomb[..], b"\n"].concat()).expect("writing the bomb");
    scene.produce(topic, &bomb_file, &zstd_producer());
    let dataset = Dataset::ApacheAccessLog;
    scene.produce(topic, &dataset.path(), &zstd_producer());
    let expected: Vec<Vec<u8>> = std::iter::once(bomb.clone())
        .chain(dataset.records())
        .collect();
    let mut problems = Vec::new();
    let dumps = cluster.dump_partition_0(&[topic]).expect("DumpLogSegments");
    let first = &dumps[0].batches[0];
    if first.compresscodec != Compression::Zstd.dump_name() {
        problems.push(format!("the bomb is stored as {}", first.compresscodec));
    }
    eprintln!(
        "the bomb as stored: {} bytes in {}, {} record",
        first.size, first.compresscodec, first.count
    );

    // The old consumer straight from the broker and through kpress: it must fail on the
    // bomb both ways (it never reads past offset 0).
    let options = ConsumeOptions {
        timeout: DIRECT_TIMEOUT,
        ..ConsumeOptions::default()
    };
    for (path, bootstrap) in [
        ("straight from Kafka", cluster.bootstrap()),
        ("through kpress", proxy.bootstrap()),
    ] {
        match old.consume(&bootstrap, &[topic], expected.len(), &options) {
            Ok(records) if !records.is_empty() => problems.push(format!(
                "{old_name} {path} read {} records; expected it to fail on the bomb",
                records.len()
            )),
            Ok(_) => eprintln!("{old_name} {path} read nothing"),
            Err(e) => {
                let failure = format!("{e:#}");
                let shown = failure
                    .lines()
                    .find(|line| line.contains("Unknown compression type id: 4"))
                    .unwrap_or("(its message is past the captured output)");
                eprintln!("{old_name} {path} fails: {}", shown.trim());
            }
        }
    }
    let passed = scene.counter(PASSED, &[("topic", topic), ("reason", "decompress_ratio")]);
    let cut = scene.counter(CUT, &[("topic", topic)]);
    eprintln!("through kpress: {passed} bombs passed as stored, {cut} partitions cut");
    if passed == 0 {
        problems.push(format!("{PASSED}{{reason=\"decompress_ratio\"}} is 0"));
    }
    if cut > 0 {
        problems.push(format!(
            "{CUT} is {cut}; the bomb must not cut the partition"
        ));
    }

    // kpress still serves: a current consumer on a fresh connection reads everything.
    let through = ConsumeOptions {
        timeout: Duration::from_secs(120),
        ..ConsumeOptions::default()
    };
    let name = format!("kafka-clients {version}");
    match current.read_back_problems(&proxy.bootstrap(), &[topic], &expected, &through, &name) {
        Ok(found) => problems.extend(found),
        Err(e) => problems.push(format!("{name} reading through kpress: {e:#}")),
    }
    scene.assert_none(&problems);
}

/// KafkaJS with no codec plug-ins reads gzip only: straight from the broker it fails on
/// each lz4, snappy and zstd topic ("LZ4 compression not implemented", …). It sends
/// ApiVersions v0-v2 (no client software name) and Fetch v11, so a `[[clients]]` rule
/// matches it by `client.id`; through kpress under that rule it reads all three topics
/// byte for byte, every batch re-encoded to gzip.
#[test]
fn kafkajs_without_codec_plugins_reads_every_codec_through_kpress() {
    let scene = shared_scene();
    let (cluster, proxy) = (&scene.cluster, &scene.proxy);
    let reader = format!("KafkaJS {}", kafkajs::kafkajs_version());
    let codecs = [Compression::Lz4, Compression::Snappy, Compression::Zstd];
    let topics: Vec<String> = codecs
        .iter()
        .map(|c| format!("kafkajs-{}", c.name()))
        .collect();
    let topic_names: Vec<&str> = topics.iter().map(String::as_str).collect();
    scene.create_topics(&topic_names);
    let dataset = Dataset::ApacheAccessLog;
    let expected = dataset.records();
    std::thread::scope(|scope| {
        for (codec, topic) in codecs.iter().zip(&topic_names) {
            scope.spawn(move || {
                let options = ProduceOptions {
                    compression: *codec,
                    ..zstd_producer()
                };
                scene.produce(topic, &dataset.path(), &options);
            });
        }
    });
    let mut problems = Vec::new();
    let dumps = cluster
        .dump_partition_0(&topic_names)
        .expect("DumpLogSegments");
    for ((codec, topic), dump) in codecs.iter().zip(&topic_names).zip(&dumps) {
        if dump.batches.is_empty()
            || dump
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

    // Straight from the broker: KafkaJS crashes on the first batch of each topic.
    let direct = ConsumeOptions {
        timeout: DIRECT_TIMEOUT,
        properties: vec!["client.id=kafkajs-direct".to_string()],
        ..ConsumeOptions::default()
    };
    let direct_results: Vec<_> = std::thread::scope(|scope| {
        let runs: Vec<_> = topic_names
            .iter()
            .map(|topic| {
                let (direct, count) = (&direct, expected.len());
                scope.spawn(move || kafkajs::consume(&cluster.bootstrap(), &[topic], count, direct))
            })
            .collect();
        runs.into_iter()
            .map(|r| r.join().expect("a reader thread"))
            .collect()
    });
    for ((codec, topic), result) in codecs.iter().zip(&topic_names).zip(direct_results) {
        let failure = format!(
            "{} compression not implemented",
            match codec {
                Compression::Lz4 => "LZ4",
                Compression::Snappy => "Snappy",
                _ => "ZSTD",
            }
        );
        match result {
            Ok(records) => problems.push(format!(
                "{reader} read {} records of {topic} straight from the broker; expected it \
                 to fail with {failure:?}",
                records.len()
            )),
            Err(e) => {
                let text = format!("{e:#}");
                match text.lines().find(|line| line.contains(&failure)) {
                    Some(line) => eprintln!("{reader} on {topic} straight: {}", line.trim()),
                    None => problems.push(format!(
                        "{reader} on {topic} straight from the broker failed without \
                         {failure:?}: {text}"
                    )),
                }
            }
        }
    }

    // Through kpress, under the rule: every record of the three topics.
    let through = ConsumeOptions {
        timeout: Duration::from_secs(120),
        properties: vec!["client.id=kafkajs-gzip-reader".to_string()],
        ..ConsumeOptions::default()
    };
    match kafkajs::consume(
        &proxy.bootstrap(),
        &topic_names,
        expected.len() * topic_names.len(),
        &through,
    ) {
        Ok(consumed) => {
            for topic in &topic_names {
                if let Some(diff) = diff_records(&expected, &values_of(&consumed, topic)) {
                    problems.push(format!("{topic}: {reader} through kpress: {diff}"));
                }
            }
        }
        Err(e) => problems.push(format!("{reader} reading through kpress: {e:#}")),
    }
    for ((codec, topic), dump) in codecs.iter().zip(&topic_names).zip(&dumps) {
        let labels = [("from", codec.name()), ("to", "gzip"), ("topic", *topic)];
        let reencoded = scene.counter(REENCODED, &labels);
        eprintln!(
            "{topic}: {} {} batches stored; {reencoded} re-encoded {} -> gzip for {reader}",
            dump.batches.len(),
            codec.name(),
            codec.name()
        );
        if reencoded < dump.batches.len() as u64 {
            problems.push(format!(
                "{REENCODED}{{from=\"{}\",to=\"gzip\",topic=\"{topic}\"}} is {reencoded}; \
                 expected at least the {} batches stored",
                codec.name(),
                dump.batches.len()
            ));
        }
    }
    scene.assert_none(&problems);
}

/// `kpress doctor --admin` names the consumers kpress has seen that cannot read a
/// topic as stored: kafka-clients 2.0.1 (Fetch v8) reading a zstd topic through kpress
/// is listed on `/consumers` with that topic, and the doctor reports it as re-encoded
/// for (an info, not a problem).
#[test]
fn doctor_names_the_old_consumer_of_a_zstd_topic() {
    let scene = shared_scene();
    let (proxy, old, old_name) = (&scene.proxy, &scene.old, &scene.old_name);
    let topic = "zstd-seen-by-doctor";
    let expected = scene.zstd_topic(topic, Dataset::NginxPlusStatus);
    let client_id = "old-zstd-reader";
    let options = ConsumeOptions {
        timeout: Duration::from_secs(120),
        properties: vec![format!("client.id={client_id}")],
        ..ConsumeOptions::default()
    };
    let mut problems =
        match old.read_back_problems(&proxy.bootstrap(), &[topic], &expected, &options, old_name) {
            Ok(found) => found,
            Err(e) => vec![format!("{old_name} reading through kpress: {e:#}")],
        };
    let admin = proxy.admin_address().expect("kpress's admin endpoint");
    let (status, page) = proxy.http_get("/consumers").expect("GET /consumers");
    eprintln!("/consumers ({status}):\n{page}");
    let config = proxy.config_file().expect("kpress's policy file");
    let output = std::process::Command::new(kpress_tests::kpress::kpress_binary())
        .arg("doctor")
        .arg("--config")
        .arg(&config)
        .args(["--admin", &format!("http://{admin}"), "--format", "json"])
        .output()
        .expect("running kpress doctor");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let doc: serde_json::Value = serde_json::from_str(&stdout).unwrap_or_else(|e| {
        panic!(
            "doctor printed no JSON document ({e}):\n{stdout}\nstderr:\n{}",
            String::from_utf8_lossy(&output.stderr)
        )
    });
    let subject = format!("{client_id} / {topic}");
    let findings = doc["findings"].as_array().cloned().unwrap_or_default();
    let about: Vec<&serde_json::Value> = findings
        .iter()
        .filter(|f| f["subject"] == subject.as_str())
        .collect();
    match about.as_slice() {
        [finding] => {
            eprintln!("doctor: {}: {}", finding["severity"], finding["message"]);
            if finding["kind"] != "consumer_reencoded" || finding["severity"] != "info" {
                problems.push(format!("the doctor's finding is not an info: {finding}"));
            }
            let message = finding["message"].as_str().unwrap_or_default();
            if !message.contains("Fetch v8") || !message.contains("kpress re-encodes") {
                problems.push(format!(
                    "the finding lacks the version or what kpress does: {message}"
                ));
            }
        }
        _ => problems.push(format!(
            "expected one doctor finding about {subject}, got {about:?}; all: {findings:#?}"
        )),
    }
    scene.assert_none(&problems);
}
