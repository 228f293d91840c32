//! Seeds the fuzz corpora (`fuzz/corpus/<target>/`) from real traffic: Java
//! kafka-clients 4.1 and 3.9, kcat and confluent-kafka produce in every codec (and
//! consume, with a group, and in a transaction) through `kpress run` in front of a
//! real 4.1 broker, with a recording relay (`harness/capture.rs`) in front of kpress.
//! It writes:
//!
//! - `request_frame/`: every request frame the clients sent, behind a policy byte and
//!   a request byte (the target's input format);
//! - `response_rewrite/`: every response kpress rewrites, as kpress relayed it and as
//!   the broker answers the same request directly, behind its API key and version;
//! - `batch_rewrite/`: every batch of the segments the broker wrote, behind a policy
//!   byte and a request byte;
//! - `codec_decode/`: each compressed batch's payload behind its codec's selector,
//!   and each uncompressed one's records for the round trip of every codec.
//!
//! Ignored in the normal run: `scripts/fuzz.sh --capture` runs it, then minimizes the
//! corpora with `cargo fuzz cmin`. Files are named by their content's SHA-256, so a
//! second capture adds only what is new.

use kpress_protocol::frame::response_header_len;
use kpress_protocol::{api_key, rewrites_response};
use kpress_tests::capture::{Direction, Frame, RecordedKpress};
use kpress_tests::data::{hex, write_records, Dataset};
use kpress_tests::java_client::{ConsumeOptions, JavaClient, ProduceOptions};
use kpress_tests::paths::workspace_root;
use kpress_tests::raw_batch::split_batches;
use kpress_tests::{confluent, kafka_old_version, kafka_version, kcat, Compression, KafkaCluster};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::time::Duration;

/// Records per producer run: enough for several batches, small enough that every
/// frame stays a small seed.
const RECORDS: usize = 200;
/// Seeds larger than this are not written: small inputs keep fuzzing fast and the
/// committed corpora small (`scripts/fuzz.sh` applies the same cap).
const MAX_SEED_BYTES: usize = 64 << 10;

/// Two topics get a codec policy, so the segments also hold batches kpress wrote;
/// every other batch is stored as its client sent it.
const RULES: &str = r#"
[defaults]
compression.type = "producer"

[[topics]]
match = "seed-java41-gzip"
compression.type = "zstd"

[[topics]]
match = "seed-ck-none"
compression.type = "lz4"
"#;

#[test]
#[ignore = "writes fuzz/corpus/; run by scripts/fuzz.sh --capture"]
fn capture_fuzz_seeds() {
    let cluster = KafkaCluster::start(kafka_version(), 1).expect("starting Kafka");
    let broker = cluster.node_addresses()[0];
    let kpress = RecordedKpress::start(&cluster, RULES).expect("starting kpress behind the relays");
    let bootstrap = kpress.bootstrap();

    let records: Vec<Vec<u8>> = Dataset::ApacheAccessLog
        .records()
        .into_iter()
        .take(RECORDS)
        .collect();
    let scratch = tempfile::tempdir().expect("temp dir");
    let file = write_records(&scratch.path().join("records.txt"), &records);

    let java = JavaClient::new(kafka_version());
    let java_old = JavaClient::new(kafka_old_version());
    let clients = ["java41", "java39", "kcat", "ck"];
    let mut topics: Vec<String> = clients
        .iter()
        .flat_map(|client| Compression::ALL.map(|c| format!("seed-{client}-{c}")))
        .collect();
    topics.push("seed-java41-txn".into());
    let topic_refs: Vec<&str> = topics.iter().map(String::as_str).collect();
    java.create_producer_codec_topics(&bootstrap, &topic_refs, 1)
        .expect("creating topics");

    for compression in Compression::ALL {
        let options = ProduceOptions {
            compression,
            batch_size: 16 << 10,
            ..ProduceOptions::default()
        };
        let topic = |client: &str| format!("seed-{client}-{compression}");
        java.produce_file(&bootstrap, &topic("java41"), &file, &options)
            .expect("Java 4.1 producing");
        java_old
            .produce_file(&bootstrap, &topic("java39"), &file, &options)
            .expect("Java 3.9 producing");
        kcat::produce_file(&bootstrap, &topic("kcat"), 0, compression, &file, &[])
            .expect("kcat producing");
        confluent::produce_file(&bootstrap, &topic("ck"), &file, &options)
            .expect("confluent-kafka producing");
    }
    let transactional = ProduceOptions {
        compression: Compression::Zstd,
        transaction: Some(("seed-txn".into(), true)),
        ..ProduceOptions::default()
    };
    java.produce_file(&bootstrap, "seed-java41-txn", &file, &transactional)
        .expect("Java transactional producing");

    let java_topics: Vec<&str> = topic_refs
        .iter()
        .copied()
        .filter(|t| t.starts_with("seed-java41"))
        .collect();
    let group = ConsumeOptions {
        group_id: Some("seed-group".into()),
        ..ConsumeOptions::default()
    };
    java.consume(
        &bootstrap,
        &java_topics,
        RECORDS * java_topics.len(),
        &group,
    )
    .expect("Java consuming");
    let ck_topics: Vec<&str> = topic_refs
        .iter()
        .copied()
        .filter(|t| t.starts_with("seed-ck"))
        .collect();
    confluent::consume(
        &bootstrap,
        &ck_topics,
        RECORDS * ck_topics.len(),
        &ConsumeOptions::default(),
    )
    .expect("confluent-kafka consuming");
    for compression in Compression::ALL {
        kcat::consume_partition(&bootstrap, &format!("seed-kcat-{compression}"), 0, &[])
            .expect("kcat consuming");
    }
    let frames = kpress.stop().frames();
    let corpus = workspace_root().join("fuzz/corpus");
    let mut written = BTreeMap::new();
    let mut count = |target: &str, n: usize| *written.entry(target.to_owned()).or_insert(0) += n;
    count("request_frame", write_request_seeds(&corpus, &frames));
    count(
        "response_rewrite",
        write_response_seeds(&corpus, &frames, broker),
    );
    for topic in &topics {
        for segment in cluster.segments(topic, 0).expect("segments") {
            let bytes = std::fs::read(&segment).expect("reading a segment");
            let batches = split_batches(&bytes).expect("splitting a segment");
            count("batch_rewrite", write_batch_seeds(&corpus, &batches));
            count("codec_decode", write_codec_seeds(&corpus, &batches));
        }
    }
    println!(
        "captured {} frames; seeds written: {written:?}",
        frames.len()
    );
    assert!(
        written.values().all(|&n| n > 0),
        "a corpus got no seeds: {written:?}"
    );
}

/// Writes `bytes` to `dir/<sha256>` (if not too large); returns 1 if it is new.
fn write_seed(dir: &Path, bytes: &[u8]) -> usize {
    if bytes.len() > MAX_SEED_BYTES {
        return 0;
    }
    std::fs::create_dir_all(dir).expect("creating a corpus directory");
    let path = dir.join(hex(&Sha256::digest(bytes)));
    if path.exists() {
        return 0;
    }
    std::fs::write(&path, bytes).expect("writing a seed");
    1
}

/// Every request frame, each Produce frame under the policies of the eight targets
/// (alternating the rewrite path), anything else under the producer policy.
fn write_request_seeds(corpus: &Path, frames: &[Frame]) -> usize {
    let dir = corpus.join("request_frame");
    let mut n = 0;
    for frame in frames.iter().filter(|f| f.direction == Direction::Request) {
        let policies: Vec<u8> = if frame.api_key == api_key::PRODUCE {
            (0..8).collect()
        } else {
            vec![0]
        };
        for policy in policies {
            let request = policy & 1;
            n += write_seed(&dir, &[&[policy, request][..], &frame.bytes].concat());
        }
    }
    n
}

/// Every response kpress rewrites, both as kpress relayed it and as the broker
/// answers the same request sent to it directly.
fn write_response_seeds(corpus: &Path, frames: &[Frame], broker: SocketAddr) -> usize {
    let dir = corpus.join("response_rewrite");
    let mut n = 0;
    let mut seed = |key: i16, version: i16, frame: &[u8]| {
        let payload = &frame[4..];
        let Ok(Some(header_len)) = response_header_len(key, version, payload) else {
            return;
        };
        let (Ok(key_byte), Ok(version_byte)) = (u8::try_from(key), u8::try_from(version)) else {
            return;
        };
        n += write_seed(
            &dir,
            &[&[key_byte, version_byte][..], &payload[header_len..]].concat(),
        );
    };
    for frame in frames {
        if !rewrites_response(frame.api_key, frame.api_version) {
            continue;
        }
        match frame.direction {
            Direction::Response => seed(frame.api_key, frame.api_version, &frame.bytes),
            // Fetch requests name sessions the broker has forgotten; it still answers.
            Direction::Request => {
                if let Some(response) = ask_broker(broker, &frame.bytes) {
                    seed(frame.api_key, frame.api_version, &response);
                }
            }
        }
    }
    n
}

/// Sends one request frame to the broker on a new connection; its response frame.
fn ask_broker(broker: SocketAddr, request: &[u8]) -> Option<Vec<u8>> {
    let mut stream = TcpStream::connect(broker).ok()?;
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .ok()?;
    stream.write_all(request).ok()?;
    let mut size = [0u8; 4];
    stream.read_exact(&mut size).ok()?;
    let mut frame = size.to_vec();
    frame.resize(4 + usize::try_from(i32::from_be_bytes(size)).ok()?, 0);
    stream.read_exact(&mut frame[4..]).ok()?;
    Some(frame)
}

/// The codec bits of a batch (attributes' low byte, bits 0-2).
fn codec_of(batch: &[u8]) -> u8 {
    batch[22] & 0x07
}

/// Each batch twice: into another codec (with the partition path and Produce v10),
/// and into its own codec with `always` and growth allowed (the `rewrite_each` path).
fn write_batch_seeds(corpus: &Path, batches: &[Vec<u8>]) -> usize {
    let dir = corpus.join("batch_rewrite");
    batches
        .iter()
        .map(|batch| {
            // Policy targets 1..=5 are none, gzip, snappy, lz4, zstd: codec id + 1.
            let codec = codec_of(batch);
            let other = (codec + 1) % 5 + 1;
            let same = (codec + 1) | 0x08 | 0x10;
            write_seed(&dir, &[&[other, 0x01 | (7 << 1)][..], batch].concat())
                + write_seed(&dir, &[&[same, 0x00][..], batch].concat())
        })
        .sum()
}

/// Each compressed batch's payload behind its codec's selector (64 MiB limit, the
/// default options); each uncompressed batch's records behind every codec's selector
/// (1 MiB limit), for the round trips.
fn write_codec_seeds(corpus: &Path, batches: &[Vec<u8>]) -> usize {
    const HEADER_LEN: usize = 61;
    const LIMIT_64_MIB: u8 = 7 << 3;
    const LIMIT_1_MIB: u8 = 5 << 3;
    let dir = corpus.join("codec_decode");
    let mut n = 0;
    for batch in batches {
        let payload = &batch[HEADER_LEN..];
        match codec_of(batch) {
            0 => {
                for codec in 0..5u8 {
                    n += write_seed(&dir, &[&[codec | LIMIT_1_MIB][..], payload].concat());
                }
            }
            codec => n += write_seed(&dir, &[&[codec | LIMIT_64_MIB][..], payload].concat()),
        }
    }
    n
}
