//! `kpress bench --segment` on log segments a real 4.1.1 broker wrote for real clients
//! (Java kafka-clients and librdkafka through kcat): every batch found as Kafka's own
//! DumpLogSegments finds it (count, codec, records), the stored size to the byte, the
//! records measured again with each candidate, and a damaged batch reported by its
//! offset and skipped. Sizes and counts are asserted, never timings.

use kpress_tests::cluster::KafkaCluster;
use kpress_tests::compression::Compression;
use kpress_tests::data::Dataset;
use kpress_tests::dump::{dump_log_segment, DumpedBatch};
use kpress_tests::java_client::{JavaClient, ProduceOptions};
use kpress_tests::kpress::kpress_binary;
use kpress_tests::{kafka_version, kcat};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The real client that produced a segment.
#[derive(Debug, Clone, Copy)]
enum Producer {
    Java,
    Kcat,
}

/// Produces `dataset` with `producer` in `codec` into a `compression.type=producer` topic
/// (so the broker stores the client's own batches) and copies its one segment out.
fn produce_segment(
    cluster: &KafkaCluster,
    producer: Producer,
    dataset: Dataset,
    codec: Compression,
) -> PathBuf {
    let bootstrap = cluster.bootstrap();
    let java = JavaClient::new(cluster.version());
    let name = format!(
        "bench-{producer:?}-{}-{}",
        dataset.short_name(),
        codec.name()
    )
    .to_lowercase();
    java.create_topic(&bootstrap, &name, 1, &["compression.type=producer"])
        .unwrap_or_else(|e| panic!("{e:#}\n{}", cluster.describe_logs()));
    let options = ProduceOptions {
        compression: codec,
        partition: Some(0),
        ..ProduceOptions::default()
    };
    match producer {
        Producer::Java => java
            .produce_file(&bootstrap, &name, &dataset.path(), &options)
            .map(drop),
        Producer::Kcat => kcat::produce_file(&bootstrap, &name, 0, codec, &dataset.path(), &[]),
    }
    .unwrap_or_else(|e| panic!("{e:#}\n{}", cluster.describe_logs()));
    let segments = cluster.segments(&name, 0).expect("segments");
    assert_eq!(segments.len(), 1, "{name}: {segments:?}");
    // DumpLogSegments reads the base offset from the file name: one directory each.
    let dir = cluster.scratch_dir().join(&name);
    std::fs::create_dir_all(&dir).expect("segment dir");
    let copy = dir.join("00000000000000000000.log");
    std::fs::copy(&segments[0], &copy).expect("copy segment");
    copy
}

fn bench_segment(segment: &Path, candidates: &[&str]) -> (Value, String) {
    let mut cmd = Command::new(kpress_binary());
    cmd.arg("bench")
        .arg("--segment")
        .arg(segment)
        .args(["--format", "json", "--passes", "1"]);
    for candidate in candidates {
        cmd.args(["--candidate", candidate]);
    }
    let out = cmd.output().expect("run kpress bench");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "kpress bench failed: {stderr}");
    (
        serde_json::from_slice(&out.stdout).expect("one JSON document"),
        stderr,
    )
}

fn result<'a>(doc: &'a Value, candidate: &str) -> &'a Value {
    doc["results"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["candidate"] == candidate)
        .unwrap_or_else(|| panic!("no {candidate} in {doc:#}"))
}

/// What DumpLogSegments says of `batches`, for comparing with `stored`.
fn check_stored_as_kafka_reads_it(
    what: &str,
    stored: &Value,
    dumped: &[DumpedBatch],
    segment_bytes: u64,
    codec: Compression,
) {
    assert_eq!(stored["batches"], dumped.len() as u64, "{what}: {stored:#}");
    let records: i64 = dumped.iter().map(|b| b.count).sum();
    assert_eq!(stored["records"], records, "{what}");
    let bytes: i64 = dumped.iter().map(|b| b.size).sum();
    assert_eq!(stored["batch_bytes"], bytes, "{what}");
    assert_eq!(stored["batch_bytes"], segment_bytes, "{what}");
    assert_eq!(
        stored["codecs"].as_array().unwrap().len(),
        1,
        "{what}: {stored:#}"
    );
    assert_eq!(stored["codecs"][0]["codec"], codec.name(), "{what}");
    assert!(
        stored["damaged"].as_array().unwrap().is_empty(),
        "{what}: {stored:#}"
    );
}

#[test]
fn real_client_segments_are_measured_as_stored_and_as_each_candidate_would_write_them() {
    let cluster = KafkaCluster::start(kafka_version(), 1).expect("starting Kafka");
    let cases = [
        (
            Producer::Java,
            Dataset::ApacheAccessLog,
            Compression::Snappy,
        ),
        (Producer::Kcat, Dataset::NginxPlusStatus, Compression::Zstd),
        (Producer::Kcat, Dataset::ApacheAccessLog, Compression::Gzip),
    ];
    for (producer, dataset, codec) in cases {
        let what = format!("{producer:?} {} {}", dataset.short_name(), codec.name());
        let segment = produce_segment(&cluster, producer, dataset, codec);
        let dumped = dump_log_segment(cluster.version(), &segment).expect("DumpLogSegments");
        let segment_bytes = std::fs::metadata(&segment).unwrap().len();
        let (doc, _) = bench_segment(&segment, &["zstd:3", "lz4:9", "none"]);
        let stored = &doc["stored"];
        check_stored_as_kafka_reads_it(&what, stored, &dumped, segment_bytes, codec);
        assert_eq!(stored["records"], dataset.records().len() as u64, "{what}");

        // Every candidate measured the same records: `none` writes them as they are.
        let none = result(&doc, "none");
        assert_eq!(none["raw_bytes"], stored["raw_bytes"], "{what}");
        assert_eq!(none["batches"], stored["batches"], "{what}");
        assert_eq!(
            none["batch_bytes"].as_u64().unwrap(),
            stored["raw_bytes"].as_u64().unwrap() + 61 * dumped.len() as u64,
            "{what}"
        );
        let zstd = result(&doc, "zstd:3");
        if codec == Compression::Zstd {
            // librdkafka writes zstd at zstd's default level, 3: what kpress's zstd:3
            // makes of the same batches is within 1% of what the client stored.
            let stored_bytes = stored["batch_bytes"].as_f64().unwrap();
            let ours = zstd["batch_bytes"].as_f64().unwrap();
            assert!(
                (ours / stored_bytes - 1.0).abs() < 0.01,
                "{what}: zstd:3 {ours} against {stored_bytes} stored"
            );
        }
        assert!(zstd["ratio"].as_f64().unwrap() < 0.5, "{what}: {zstd:#}");
    }

    // A Java lz4 segment with its second batch damaged in the middle.
    let segment = produce_segment(
        &cluster,
        Producer::Java,
        Dataset::NginxPlusStatus,
        Compression::Lz4,
    );
    let dumped = dump_log_segment(cluster.version(), &segment).expect("DumpLogSegments");
    assert!(dumped.len() >= 2, "{dumped:?}");
    let mut bytes = std::fs::read(&segment).unwrap();
    let victim = &dumped[1];
    let middle = (victim.position + victim.size / 2) as usize;
    bytes[middle] ^= 0x5a;
    let damaged_path = segment.with_file_name("damaged.log");
    std::fs::write(&damaged_path, &bytes).unwrap();
    let (doc, stderr) = bench_segment(&damaged_path, &["zstd:3"]);
    let stored = &doc["stored"];
    assert_eq!(stored["batches"], dumped.len() as u64 - 1, "{stored:#}");
    let damaged = stored["damaged"].as_array().unwrap();
    assert_eq!(damaged.len(), 1, "{stored:#}");
    assert_eq!(damaged[0]["base_offset"], victim.base_offset);
    assert_eq!(damaged[0]["position"], victim.position);
    assert!(
        damaged[0]["reason"]
            .as_str()
            .unwrap()
            .contains("CRC mismatch"),
        "{stored:#}"
    );
    assert!(
        stderr.contains(&format!("batch at offset {}", victim.base_offset)),
        "{stderr}"
    );
    let records: i64 = dumped.iter().map(|b| b.count).sum::<i64>() - victim.count;
    assert_eq!(result(&doc, "zstd:3")["records"], records);
}
