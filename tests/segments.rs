//! The codec and batch core against real peers: log segments that a real
//! Kafka 4.1 broker wrote for real clients (Java kafka-clients, librdkafka through kcat
//! and confluent-kafka), in each of the five codecs, recompressed by `kpress recompress`
//! into each of the five codecs, and then
//!  (a) read by Kafka's own DumpLogSegments: every batch valid, in the target codec,
//!      with the produced records in order; and
//!  (b) read back through a real broker by real consumers: each output replaces the
//!      empty segment of a fresh topic on a stopped broker (indexes deleted so Kafka
//!      recovers the segment, checking every batch), the broker restarts, and the Java
//!      client and kcat consume every record, compared byte for byte.
//!
//! One producing broker serves the whole binary; each source is produced once.

use kpress_tests::cluster::KafkaCluster;
use kpress_tests::compression::Compression;
use kpress_tests::data::{diff_records, Dataset};
use kpress_tests::dump::{dump_log_segments, DumpedSegment};
use kpress_tests::java_client::{ConsumeOptions, JavaClient, ProduceOptions};
use kpress_tests::kpress::{recompress, RecompressOptions, RecompressSummary};
use kpress_tests::{confluent, kafka_old_version, kafka_version, kcat};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

/// The real client that produced a source segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Producer {
    Java,
    Kcat,
    ConfluentKafka,
}

impl Producer {
    fn name(self) -> &'static str {
        match self {
            Producer::Java => "java",
            Producer::Kcat => "kcat",
            Producer::ConfluentKafka => "ck",
        }
    }
}

/// A segment a real broker wrote for a real client, copied out of the broker.
#[derive(Debug)]
struct Source {
    name: String,
    codec: Compression,
    segment: PathBuf,
    records: Vec<Vec<u8>>,
}

/// The sources each client produces: the apache log in every codec, and the NGINX JSON
/// in two codecs per client that reads it.
fn sources_of(producer: Producer) -> Vec<(Dataset, Compression)> {
    let mut sources: Vec<(Dataset, Compression)> = Compression::ALL
        .into_iter()
        .map(|c| (Dataset::ApacheAccessLog, c))
        .collect();
    match producer {
        Producer::Java => {
            sources.push((Dataset::NginxPlusStatus, Compression::Gzip));
            sources.push((Dataset::NginxPlusStatus, Compression::Zstd));
        }
        Producer::Kcat => {
            sources.push((Dataset::NginxPlusStatus, Compression::Snappy));
            sources.push((Dataset::NginxPlusStatus, Compression::Lz4));
        }
        Producer::ConfluentKafka => {}
    }
    sources
}

/// The topic of the transactional source.
const TXN_TOPIC: &str = "java-txn-gzip";

/// The producing broker, shared by every test of this binary (a watchdog stops it when
/// the test process exits). Every source's topic is created with it, in one client JVM.
fn broker() -> &'static KafkaCluster {
    static BROKER: OnceLock<KafkaCluster> = OnceLock::new();
    BROKER.get_or_init(|| {
        let cluster =
            KafkaCluster::start(kafka_version(), 1).expect("starting the producing Kafka broker");
        let mut topics: Vec<String> = [Producer::Java, Producer::Kcat, Producer::ConfluentKafka]
            .into_iter()
            .flat_map(|p| {
                sources_of(p)
                    .into_iter()
                    .map(move |(dataset, codec)| source_topic(p, dataset, codec))
            })
            .collect();
        topics.push(TXN_TOPIC.to_string());
        let topics: Vec<&str> = topics.iter().map(String::as_str).collect();
        JavaClient::new(cluster.version())
            .create_producer_codec_topics(&cluster.bootstrap(), &topics, 1)
            .unwrap_or_else(|e| panic!("{e:#}\n{}", cluster.describe_logs()));
        cluster
    })
}

/// Which client produced which dataset in which codec.
type SourceKey = (Producer, Dataset, Compression);

/// The topic, and source name, of `dataset` produced by `producer` in `codec`.
fn source_topic(producer: Producer, dataset: Dataset, codec: Compression) -> String {
    format!(
        "{}-{}-{}",
        producer.name(),
        dataset.short_name(),
        codec.name()
    )
}

/// The source segment of `dataset` produced by `producer` in `codec`, produced on first
/// use and shared by every test of the binary. Different sources are produced side by
/// side (each into its own topic); a source asked for twice at once is produced once.
fn source(producer: Producer, dataset: Dataset, codec: Compression) -> Arc<Source> {
    type Cell = Arc<OnceLock<Arc<Source>>>;
    static SOURCES: Mutex<Vec<(SourceKey, Cell)>> = Mutex::new(Vec::new());
    let key = (producer, dataset, codec);
    let cell = {
        let mut sources = SOURCES.lock().unwrap_or_else(|e| e.into_inner());
        match sources.iter().find(|(k, _)| *k == key) {
            Some((_, cell)) => Arc::clone(cell),
            None => {
                let cell = Cell::default();
                sources.push((key, Arc::clone(&cell)));
                cell
            }
        }
    };
    Arc::clone(cell.get_or_init(|| Arc::new(produce_source(producer, dataset, codec))))
}

/// Produces `dataset` with `producer` in `codec` into its fresh `compression.type=producer`
/// topic (so the broker stores the client's own batches) and copies its one segment out.
fn produce_source(producer: Producer, dataset: Dataset, codec: Compression) -> Source {
    let cluster = broker();
    let bootstrap = cluster.bootstrap();
    let java = JavaClient::new(cluster.version());
    let name = source_topic(producer, dataset, codec);
    let file = dataset.path();
    let options = ProduceOptions {
        compression: codec,
        partition: Some(0),
        ..ProduceOptions::default()
    };
    let produced = match producer {
        Producer::Java => java
            .produce_file(&bootstrap, &name, &file, &options)
            .map(drop),
        Producer::Kcat => kcat::produce_file(&bootstrap, &name, 0, codec, &file, &[]),
        Producer::ConfluentKafka => confluent::produce_file(
            &bootstrap,
            &name,
            &file,
            &ProduceOptions {
                // librdkafka counts batch.size in uncompressed bytes: several batches
                // per segment, each well under the broker's 1 MiB limit even uncompressed.
                batch_size: 262_144,
                ..options
            },
        )
        .map(drop),
    };
    produced.unwrap_or_else(|e| panic!("{e:#}\n{}", cluster.describe_logs()));
    let segments = cluster.segments(&name, 0).expect("segments");
    assert_eq!(
        segments.len(),
        1,
        "{name}: expected one segment, found {segments:?}"
    );
    let segment = segment_path(&cluster.scratch_dir(), &name);
    std::fs::copy(&segments[0], &segment).expect("copy segment");
    Source {
        name,
        codec,
        segment,
        records: dataset.records(),
    }
}

/// `DIR/NAME/00000000000000000000.log`: DumpLogSegments reads the base offset from a
/// segment's file name, so every copy keeps the name in its own directory.
fn segment_path(dir: &Path, name: &str) -> PathBuf {
    let dir = dir.join(name);
    std::fs::create_dir_all(&dir).expect("segment dir");
    dir.join("00000000000000000000.log")
}

/// One `kpress recompress` output.
#[derive(Debug)]
struct Output {
    name: String,
    source: usize,
    target: Compression,
    /// `--recompress always`: same-codec batches are rewritten too.
    always: bool,
    path: PathBuf,
    summary: RecompressSummary,
}

/// Checks DumpLogSegments' reading of a source segment: what the client produced, in
/// the client's codec, in more than one batch (so batch boundaries get exercised).
fn check_source_dump(source: &Source, dump: &DumpedSegment) -> Vec<String> {
    let mut failures = Vec::new();
    if !dump.problems.is_empty() {
        failures.push(format!(
            "{}: DumpLogSegments: {:?}",
            source.name, dump.problems
        ));
    }
    for batch in &dump.batches {
        if !batch.is_valid || batch.compresscodec != source.codec.dump_name() {
            failures.push(format!(
                "{}: source batch at offset {} is {} isvalid={}",
                source.name, batch.base_offset, batch.compresscodec, batch.is_valid
            ));
        }
    }
    if dump.batches.len() < 2 {
        failures.push(format!(
            "{}: only {} batch(es) in the source",
            source.name,
            dump.batches.len()
        ));
    }
    if let Some(diff) = diff_records(&source.records, &dump.payloads()) {
        failures.push(format!("{}: source segment records: {diff}", source.name));
    }
    failures
}

/// Checks (a): every output batch valid and in the target codec, the same batches
/// (offsets, counts) as the source, and the produced records in order.
fn check_output_dump(
    output: &Output,
    source: &Source,
    source_dump: &DumpedSegment,
    dump: &DumpedSegment,
) -> Vec<String> {
    let mut failures = Vec::new();
    let name = &output.name;
    if !dump.problems.is_empty() {
        failures.push(format!("{name}: DumpLogSegments: {:?}", dump.problems));
    }
    for batch in &dump.batches {
        if !batch.is_valid {
            failures.push(format!(
                "{name}: batch at offset {} isvalid: false",
                batch.base_offset
            ));
        }
        if batch.compresscodec != output.target.dump_name() {
            failures.push(format!(
                "{name}: batch at offset {} is {}, not {}",
                batch.base_offset, batch.compresscodec, output.target
            ));
        }
    }
    // A rewrite changes only the codec, length and CRC: offsets, counts, leader epoch,
    // producer fields and flags stay the source's.
    let shape = |d: &DumpedSegment| -> Vec<(i64, i64, i64, i64, i64, bool, bool)> {
        d.batches
            .iter()
            .map(|b| {
                (
                    b.base_offset,
                    b.last_offset,
                    b.count,
                    b.partition_leader_epoch,
                    b.producer_id,
                    b.is_transactional,
                    b.is_control,
                )
            })
            .collect()
    };
    if shape(dump) != shape(source_dump) {
        failures.push(format!(
            "{name}: batches (base, last, count, leader epoch, producer id, transactional, \
             control) differ from the source's: {:?} vs {:?}",
            shape(dump),
            shape(source_dump)
        ));
    }
    if let Some(diff) = diff_records(&source.records, &dump.payloads()) {
        failures.push(format!("{name}: {diff}"));
    }
    let batches = source_dump.batches.len() as u64;
    let s = &output.summary;
    if s.batches_rewritten + s.batches_passed != batches {
        failures.push(format!(
            "{name}: summary counts {} rewritten + {} passed, the source has {batches} batches",
            s.batches_rewritten, s.batches_passed
        ));
    }
    // Storing the target whatever its size, only same-codec batches may pass through.
    if s.batches_passed != s.passed("same_codec") {
        failures.push(format!("{name}: unexpected pass-throughs:\n{}", s.text));
    }
    if output.always {
        if s.batches_rewritten != batches {
            failures.push(format!(
                "{name}: --recompress always rewrote {} of {batches} batches",
                s.batches_rewritten
            ));
        }
    } else if (output.target == source.codec) != (s.batches_rewritten == 0) {
        failures.push(format!(
            "{name}: {} batches rewritten from {} to {}",
            s.batches_rewritten, source.codec, output.target
        ));
    }
    failures
}

/// (b): each output becomes the only segment of a fresh topic on a stopped broker,
/// which restarts (recovering and checking the segment); the Java client and kcat read
/// every record back.
/// Starts a reading broker whose fresh topics `topics[i]` hold `segments[i]` as their
/// only segment: the topics are created, the broker stopped, each empty segment
/// replaced, and the broker restarted (it recovers each swapped segment).
fn broker_serving_segments(topics: &[String], segments: &[&Path]) -> KafkaCluster {
    let mut reader = KafkaCluster::start(kafka_version(), 1).expect("starting the reading broker");
    let java = JavaClient::new(reader.version());
    let topic_refs: Vec<&str> = topics.iter().map(String::as_str).collect();
    java.create_topics(
        &reader.bootstrap(),
        &topic_refs,
        1,
        1,
        &["compression.type=producer"],
    )
    .unwrap_or_else(|e| panic!("{e:#}\n{}", reader.describe_logs()));
    // The batches keep the producing broker's partitionLeaderEpoch (0, its first). The
    // fresh topic also starts at epoch 0 and the restart only raises it, so the epoch
    // cache Kafka rebuilds from the batches while recovering stays monotonic and the
    // leader-epoch-checkpoint can stay as the broker wrote it.
    reader.stop_node(0).expect("stopping the reading broker");
    for (topic, source) in topics.iter().zip(segments) {
        let dir = reader.partition_dir_on(0, topic, 0);
        let segment = dir.join("00000000000000000000.log");
        assert_eq!(std::fs::metadata(&segment).expect("empty segment").len(), 0);
        std::fs::copy(source, &segment).expect("swap in the recompressed segment");
        // Without its indexes Kafka recovers the segment on load: it validates every
        // batch and rebuilds the offset, time and aborted-transaction indexes from it.
        for index in [
            "00000000000000000000.index",
            "00000000000000000000.timeindex",
            "00000000000000000000.txnindex",
        ] {
            let _ = std::fs::remove_file(dir.join(index));
        }
    }
    reader.start_node(0).unwrap_or_else(|e| panic!("{e:#}"));
    for topic in topics {
        reader
            .wait_for_leaders(topic, 1)
            .expect("leaders after restart");
    }
    reader
}

fn read_back_through_broker(outputs: &[Output], sources: &[Arc<Source>]) -> Vec<String> {
    let mut failures = Vec::new();
    let topics: Vec<String> = outputs.iter().map(|o| format!("rb-{}", o.name)).collect();
    let topic_refs: Vec<&str> = topics.iter().map(String::as_str).collect();
    let paths: Vec<&Path> = outputs.iter().map(|o| o.path.as_path()).collect();
    let reader = broker_serving_segments(&topics, &paths);
    let bootstrap = reader.bootstrap();
    let java = JavaClient::new(reader.version());

    let expected_total: usize = outputs
        .iter()
        .map(|o| sources[o.source].records.len())
        .sum();
    let consumed = java
        .consume(
            &bootstrap,
            &topic_refs,
            expected_total,
            &ConsumeOptions {
                timeout: Duration::from_secs(180),
                ..ConsumeOptions::default()
            },
        )
        .unwrap_or_else(|e| panic!("{e:#}\n{}", reader.describe_logs()));
    for (topic, output) in topics.iter().zip(outputs) {
        let expected = &sources[output.source].records;
        let mine: Vec<&[u8]> = consumed
            .iter()
            .filter(|r| &r.topic == topic)
            .map(|r| r.value.as_slice())
            .collect();
        let offsets_in_order = consumed
            .iter()
            .filter(|r| &r.topic == topic)
            .enumerate()
            .all(|(i, r)| r.offset == i as i64);
        if let Some(diff) = diff_records(expected, &mine) {
            failures.push(format!(
                "{}: Java consumer through the broker: {diff}",
                output.name
            ));
        } else if !offsets_in_order {
            failures.push(format!(
                "{}: Java consumer saw offsets out of order",
                output.name
            ));
        }
        match kcat::consume_partition(&bootstrap, topic, 0, &[]) {
            Ok(records) => {
                let values: Vec<&[u8]> = records.iter().map(|(_, v)| v.as_slice()).collect();
                if let Some(diff) = diff_records(expected, &values) {
                    failures.push(format!("{}: kcat through the broker: {diff}", output.name));
                }
            }
            Err(e) => failures.push(format!("{}: kcat: {e:#}", output.name)),
        }
    }
    if !failures.is_empty() {
        failures.push(reader.describe_logs());
    }
    failures
}

/// The whole check for one producing client: produce `sources`, recompress each to
/// every codec, check (a) with DumpLogSegments and (b) through a real broker.
fn recompress_every_pair(producer: Producer, sources: &[(Dataset, Compression)]) {
    let sources: Vec<Arc<Source>> = sources
        .iter()
        .map(|&(dataset, codec)| source(producer, dataset, codec))
        .collect();
    let work = tempfile::Builder::new()
        .prefix(&format!("kpress-recompressed-{}-", producer.name()))
        .tempdir()
        .expect("temp dir");
    let mut outputs = Vec::new();
    let mut failures = Vec::new();
    for (index, source) in sources.iter().enumerate() {
        for target in Compression::ALL {
            let name = format!("{}-to-{}", source.name, target.name());
            let path = segment_path(work.path(), &name);
            match recompress(
                &source.segment,
                &path,
                target,
                &RecompressOptions::default(),
            ) {
                Ok(summary) => outputs.push(Output {
                    name,
                    source: index,
                    target,
                    always: false,
                    path,
                    summary,
                }),
                Err(e) => failures.push(format!("{name}: kpress recompress failed: {e:#}")),
            }
        }
    }

    check_outputs(&sources, outputs, failures);
}

/// Checks recompressed `outputs` of `sources` with DumpLogSegments of both Kafka
/// versions (a), then through a real broker (b); panics listing every failure.
fn check_outputs(sources: &[Arc<Source>], outputs: Vec<Output>, mut failures: Vec<String>) {
    let mut files: Vec<&Path> = sources.iter().map(|s| s.segment.as_path()).collect();
    files.extend(outputs.iter().map(|o| o.path.as_path()));
    // Kafka 4.1 and 3.9 read the outputs alike.
    for version in [kafka_version(), kafka_old_version()] {
        let dumps = dump_log_segments(version, &files).expect("DumpLogSegments");
        let (source_dumps, output_dumps) = dumps.split_at(sources.len());
        if version == kafka_version() {
            for (source, dump) in sources.iter().zip(source_dumps) {
                failures.extend(check_source_dump(source, dump));
            }
        }
        for (output, dump) in outputs.iter().zip(output_dumps) {
            failures.extend(
                check_output_dump(
                    output,
                    &sources[output.source],
                    &source_dumps[output.source],
                    dump,
                )
                .into_iter()
                .map(|f| format!("{f} (DumpLogSegments {version})")),
            );
        }
    }
    // Only outputs Kafka itself found sound go on to the broker (a broken one would
    // be truncated on recovery and hide the others' results).
    let sound: Vec<Output> = outputs
        .into_iter()
        .filter(|o| {
            !failures
                .iter()
                .any(|f| f.starts_with(&format!("{}:", o.name)))
        })
        .collect();
    if !sound.is_empty() {
        failures.extend(read_back_through_broker(&sound, sources));
    }
    for output in &sound {
        let s = &output.summary;
        eprintln!(
            "{}: {} -> {} bytes ({:.3}), {} rewritten, {} passed",
            output.name,
            s.bytes_in,
            s.bytes_out,
            s.bytes_out as f64 / s.bytes_in.max(1) as f64,
            s.batches_rewritten,
            s.batches_passed
        );
    }
    assert!(
        failures.is_empty(),
        "{} failure(s):\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn java_client_segments_recompress_to_every_codec() {
    recompress_every_pair(Producer::Java, &sources_of(Producer::Java));
}

#[test]
fn kcat_segments_recompress_to_every_codec() {
    recompress_every_pair(Producer::Kcat, &sources_of(Producer::Kcat));
}

#[test]
fn confluent_kafka_segments_recompress_to_every_codec() {
    recompress_every_pair(
        Producer::ConfluentKafka,
        &sources_of(Producer::ConfluentKafka),
    );
}

/// With --only-if-smaller, a rewrite that would not be smaller keeps the original batch
/// and is counted as `not_smaller`: zstd → snappy grows every batch of the NGINX JSON,
/// so the output is the input byte for byte and every batch is counted. (Target `none`
/// is exempt by design: asking for uncompressed output accepts its growth.) Without
/// it, every batch is stored in snappy and counted as grown.
#[test]
fn not_smaller_rewrites_pass_through_and_are_counted() {
    let source = source(Producer::Java, Dataset::NginxPlusStatus, Compression::Zstd);
    let work = tempfile::tempdir().expect("temp dir");
    let only_if_smaller = RecompressOptions {
        only_if_smaller: true,
        ..RecompressOptions::default()
    };
    let to_snappy = segment_path(work.path(), "to-snappy");
    let summary = recompress(
        &source.segment,
        &to_snappy,
        Compression::Snappy,
        &only_if_smaller,
    )
    .expect("kpress recompress");
    let to_none = segment_path(work.path(), "to-none");
    let none_summary = recompress(
        &source.segment,
        &to_none,
        Compression::None,
        &only_if_smaller,
    )
    .expect("kpress recompress");
    let grown_snappy = segment_path(work.path(), "to-snappy-grown");
    let grown = recompress(
        &source.segment,
        &grown_snappy,
        Compression::Snappy,
        &RecompressOptions::default(),
    )
    .expect("kpress recompress");
    let dumps = dump_log_segments(kafka_version(), &[&source.segment, &to_snappy, &to_none])
        .expect("DumpLogSegments");
    let batches = dumps[0].batches.len() as u64;
    assert!(batches >= 2, "{}: {batches} batch(es)", source.name);

    assert_eq!(summary.batches_rewritten, 0, "{}", summary.text);
    assert_eq!(summary.batches_grown, 0, "{}", summary.text);
    assert_eq!(summary.passed("not_smaller"), batches, "{}", summary.text);
    assert_eq!(grown.batches_rewritten, batches, "{}", grown.text);
    assert_eq!(grown.batches_grown, batches, "{}", grown.text);
    assert!(grown.bytes_out > grown.bytes_in, "{}", grown.text);
    assert_eq!(summary.batches_passed, batches, "{}", summary.text);
    assert_eq!(
        std::fs::read(&to_snappy).expect("output"),
        std::fs::read(&source.segment).expect("input"),
        "passed-through batches must be the original bytes"
    );
    assert!(dumps[1].problems.is_empty(), "{:?}", dumps[1].problems);
    assert!(dumps[1]
        .batches
        .iter()
        .all(|b| b.is_valid && b.compresscodec == "zstd"));

    assert_eq!(
        none_summary.batches_rewritten, batches,
        "{}",
        none_summary.text
    );
    assert!(dumps[2].problems.is_empty(), "{:?}", dumps[2].problems);
    assert!(dumps[2]
        .batches
        .iter()
        .all(|b| b.is_valid && b.compresscodec == "none"));
    if let Some(diff) = diff_records(&source.records, &dumps[2].payloads()) {
        panic!("{}: to none: {diff}", source.name);
    }
}

/// kpress's codec options (levels, and KIP-780's gzip buffer, snappy block, lz4 block
/// and zstd window) with `--recompress always` write batches that Kafka 4.1 and 3.9,
/// the Java consumer and librdkafka all read.
#[test]
fn codec_options_stay_readable_by_kafka_and_librdkafka() {
    let sources = vec![
        source(Producer::Java, Dataset::ApacheAccessLog, Compression::Gzip),
        source(Producer::Java, Dataset::NginxPlusStatus, Compression::Zstd),
    ];
    let variants: [(Compression, &[&str]); 7] = [
        (Compression::Gzip, &["compression.gzip.level=1"]),
        (
            Compression::Gzip,
            &["compression.gzip.level=9", "compression.gzip.buffer=512"],
        ),
        (Compression::Snappy, &["compression.snappy.block=1024"]),
        (Compression::Lz4, &["compression.lz4.level=1"]),
        (
            Compression::Lz4,
            &["compression.lz4.level=17", "compression.lz4.block=7"],
        ),
        (Compression::Zstd, &["compression.zstd.level=-5"]),
        (
            Compression::Zstd,
            &["compression.zstd.level=19", "compression.zstd.window=22"],
        ),
    ];
    let work = tempfile::Builder::new()
        .prefix("kpress-options-")
        .tempdir()
        .expect("temp dir");
    let mut outputs = Vec::new();
    let mut failures = Vec::new();
    for (index, source) in sources.iter().enumerate() {
        for (variant, (target, properties)) in variants.iter().enumerate() {
            let name = format!("{}-to-{target}-options{variant}", source.name);
            let path = segment_path(work.path(), &name);
            let options = RecompressOptions {
                properties: properties.iter().map(|p| p.to_string()).collect(),
                always: true,
                only_if_smaller: false,
            };
            match recompress(&source.segment, &path, *target, &options) {
                Ok(summary) => outputs.push(Output {
                    name,
                    source: index,
                    target: *target,
                    always: true,
                    path,
                    summary,
                }),
                Err(e) => failures.push(format!(
                    "{name}: kpress recompress {properties:?} failed: {e:#}"
                )),
            }
        }
    }
    check_outputs(&sources, outputs, failures);
}

/// A segment with transactions (committed, aborted, committed; Java, gzip): kpress
/// rewrites the data batches and passes the transaction markers through untouched;
/// through a real broker, read_committed consumers see only the committed records.
#[test]
fn transactional_segments_keep_their_markers() {
    let cluster = broker();
    let java = JavaClient::new(cluster.version());
    let bootstrap = cluster.bootstrap();
    let name = TXN_TOPIC;
    let all = Dataset::ApacheAccessLog.records();
    let parts: Vec<Vec<Vec<u8>>> = all.chunks(2000).take(3).map(<[_]>::to_vec).collect();
    let work = tempfile::Builder::new()
        .prefix("kpress-txn-")
        .tempdir()
        .expect("temp dir");
    for (i, (part, commit)) in parts.iter().zip([true, false, true]).enumerate() {
        let file = work.path().join(format!("part-{i}.txt"));
        let mut text = part.join(&b'\n');
        text.push(b'\n');
        std::fs::write(&file, text).expect("write records");
        java.produce_file(
            &bootstrap,
            name,
            &file,
            &ProduceOptions {
                compression: Compression::Gzip,
                partition: Some(0),
                transaction: Some(("kpress-segments-txn".to_string(), commit)),
                ..ProduceOptions::default()
            },
        )
        .unwrap_or_else(|e| panic!("{e:#}\n{}", cluster.describe_logs()));
    }
    let source = segment_path(work.path(), name);
    std::fs::copy(&cluster.segments(name, 0).expect("segments")[0], &source).expect("copy");
    let committed: Vec<Vec<u8>> = parts[0].iter().chain(&parts[2]).cloned().collect();
    let everything: Vec<Vec<u8>> = parts.concat();

    let mut failures = Vec::new();
    let mut outputs = Vec::new();
    for target in [Compression::Zstd, Compression::None] {
        let output = segment_path(work.path(), &format!("{name}-to-{target}"));
        let summary = recompress(&source, &output, target, &RecompressOptions::default())
            .unwrap_or_else(|e| panic!("{e:#}"));
        if summary.passed("control_batch") != 3 {
            failures.push(format!(
                "to {target}: 3 markers expected to pass:\n{}",
                summary.text
            ));
        }
        outputs.push((target, output));
    }
    let mut files: Vec<&Path> = vec![&source];
    files.extend(outputs.iter().map(|(_, p)| p.as_path()));
    let dumps = dump_log_segments(kafka_version(), &files).expect("DumpLogSegments");
    let markers = |d: &DumpedSegment| -> Vec<(i64, u32)> {
        d.batches
            .iter()
            .filter(|b| b.is_control)
            .map(|b| (b.base_offset, b.crc))
            .collect()
    };
    if markers(&dumps[0]).len() != 3 {
        failures.push(format!(
            "source: {} markers, expected 3",
            markers(&dumps[0]).len()
        ));
    }
    for ((target, _), dump) in outputs.iter().zip(&dumps[1..]) {
        // Markers byte-identical (same CRC), data in the target codec, all valid.
        if markers(dump) != markers(&dumps[0]) {
            failures.push(format!("to {target}: markers changed"));
        }
        let mut records = Vec::new();
        for batch in &dump.batches {
            if !batch.is_valid {
                failures.push(format!(
                    "to {target}: batch at {} invalid",
                    batch.base_offset
                ));
            }
            if !batch.is_control {
                if batch.compresscodec != target.dump_name() || !batch.is_transactional {
                    failures.push(format!(
                        "to {target}: data batch at {} is {} (transactional: {})",
                        batch.base_offset, batch.compresscodec, batch.is_transactional
                    ));
                }
                records.extend(batch.payloads().map(<[u8]>::to_vec));
            }
        }
        if let Some(diff) = diff_records(&everything, &records) {
            failures.push(format!("to {target}: {diff}"));
        }
    }

    let topics: Vec<String> = outputs
        .iter()
        .map(|(target, _)| format!("rb-{name}-to-{target}"))
        .collect();
    let paths: Vec<&Path> = outputs.iter().map(|(_, p)| p.as_path()).collect();
    let reader = broker_serving_segments(&topics, &paths);
    let reader_java = JavaClient::new(reader.version());
    for topic in &topics {
        for (read_committed, expected) in [(true, &committed), (false, &everything)] {
            match reader_java.consume(
                &reader.bootstrap(),
                &[topic],
                expected.len(),
                &ConsumeOptions {
                    read_committed,
                    ..ConsumeOptions::default()
                },
            ) {
                Ok(records) => {
                    let values: Vec<&[u8]> = records.iter().map(|r| r.value.as_slice()).collect();
                    if let Some(diff) = diff_records(expected, &values) {
                        failures.push(format!("{topic} read_committed={read_committed}: {diff}"));
                    }
                }
                Err(e) => failures.push(format!("{topic} read_committed={read_committed}: {e:#}")),
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} failure(s):\n{}\n{}",
        failures.len(),
        failures.join("\n"),
        reader.describe_logs()
    );
}
