//! Captures real clients' Produce requests for `benches/produce_request.rs`: Java
//! kafka-clients 4.1 and kcat (librdkafka) write each dataset in each codec through
//! `kpress run` (every batch passed through) with a recording relay
//! (`harness/capture.rs`) in front of kpress, and the first Produce requests of each
//! run are written to `benches/captured/<client>-<codec>-<dataset>.bin`: request
//! frames back to back, each with its size prefix, exactly as the client sent them.
//!
//! Ignored in the normal run; `cargo test -p kpress-tests --test capture_requests --
//! --ignored` captures again (the files are committed).

use kpress_protocol::api_key;
use kpress_tests::capture::{Direction, RecordedKpress};
use kpress_tests::data::{write_records, Dataset};
use kpress_tests::java_client::{JavaClient, ProduceOptions};
use kpress_tests::paths::workspace_root;
use kpress_tests::{kafka_version, kcat, Compression, KafkaCluster};

/// Requests kept per run, and the bytes they may add up to (at least one is kept):
/// enough for a steady per-request figure, small enough to commit.
const MAX_REQUESTS: usize = 8;
const MAX_RUN_BYTES: usize = 200 << 10;

#[test]
#[ignore = "writes benches/captured/; needs Kafka, Java and kcat"]
fn capture_produce_requests() {
    let cluster = KafkaCluster::start(kafka_version(), 1).expect("starting Kafka");
    let kpress = RecordedKpress::start(&cluster, "[defaults]\ncompression.type = \"producer\"")
        .expect("starting kpress behind the relays");
    let recording = kpress.recording.clone();
    let bootstrap = kpress.bootstrap();

    let java = JavaClient::new(kafka_version());
    let scratch = tempfile::tempdir().expect("temp dir");
    let out_dir = workspace_root().join("benches/captured");
    std::fs::create_dir_all(&out_dir).expect("creating benches/captured");
    let runs = [
        ("java", Compression::Gzip),
        ("java", Compression::Lz4),
        ("java", Compression::None),
        ("java", Compression::Zstd),
        ("kcat", Compression::Gzip),
        ("kcat", Compression::Lz4),
        ("kcat", Compression::None),
    ];
    let mut written = Vec::new();
    for dataset in [Dataset::ApacheAccessLog, Dataset::NginxPlusStatus] {
        let file = write_records(
            &scratch.path().join(dataset.file_name()),
            &dataset.records(),
        );
        let short = match dataset {
            Dataset::ApacheAccessLog => "apache",
            Dataset::NginxPlusStatus => "nginx",
        };
        for (client, compression) in runs {
            let topic = format!("capture-{client}-{compression}-{short}");
            java.create_producer_codec_topics(&bootstrap, &[topic.as_str()], 1)
                .expect("creating a topic");
            let seen = recording.frames().len();
            match client {
                // Kafka's default batch.size (16 KiB) and a short linger.
                "java" => {
                    let options = ProduceOptions {
                        compression,
                        batch_size: 16 << 10,
                        linger_ms: 5,
                        ..ProduceOptions::default()
                    };
                    java.produce_file(&bootstrap, &topic, &file, &options)
                        .expect("Java producing");
                }
                // librdkafka's batches capped at 256 KiB, to keep the files small.
                _ => kcat::produce_file(
                    &bootstrap,
                    &topic,
                    0,
                    compression,
                    &file,
                    &["batch.size=262144"],
                )
                .expect("kcat producing"),
            }
            let mut kept = Vec::new();
            let mut requests = 0;
            for frame in recording.frames().into_iter().skip(seen) {
                if frame.direction != Direction::Request || frame.api_key != api_key::PRODUCE {
                    continue;
                }
                if requests == MAX_REQUESTS
                    || (requests > 0 && kept.len() + frame.bytes.len() > MAX_RUN_BYTES)
                {
                    break;
                }
                kept.extend_from_slice(&frame.bytes);
                requests += 1;
            }
            assert!(requests > 0, "{topic}: no Produce request recorded");
            let path = out_dir.join(format!("{client}-{compression}-{short}.bin"));
            std::fs::write(&path, &kept).expect("writing captured requests");
            written.push(format!(
                "{} ({requests} requests, {} bytes)",
                path.display(),
                kept.len()
            ));
        }
    }
    drop(kpress);
    println!("captured:\n{}", written.join("\n"));
}
