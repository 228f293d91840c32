//! Hot policy reload against a real 4.1.1 broker: an idempotent `acks=all`
//! producer writes gzip through kpress while the policy file flips the topic between
//! lz4 and zstd several times. No produce request may fail, nothing may be lost or
//! duplicated, and every batch the broker stores is in the codec in force when kpress
//! rewrote it. A broken policy file in between is refused and changes nothing.

use std::path::Path;
use std::time::{Duration, Instant};

use kpress_tests::compression::Compression;
use kpress_tests::data::Dataset;
use kpress_tests::java_client::JavaClient;
use kpress_tests::kpress::{KpressProxy, KpressSetup};
use kpress_tests::steady_producer::{tally, Accounting, SteadyOptions, SteadyProducer};
use kpress_tests::{kafka_version, KafkaCluster};

const TOPIC: &str = "flip";

fn rules(codec: &str) -> String {
    format!("[[topics]]\nmatch = \"{TOPIC}\"\ncompression.type = \"{codec}\"\n")
}

/// Replaces the policy file in one rename, as editors and config maps do.
fn write_policy(path: &Path, text: &str) {
    let staged = path.with_extension("staged");
    std::fs::write(&staged, text).unwrap();
    std::fs::rename(&staged, path).unwrap();
}

fn reloads(proxy: &KpressProxy, result: &str) -> f64 {
    proxy
        .counter("kpress_policy_reloads_total", &[("result", result)])
        .unwrap_or_else(|e| panic!("scraping kpress: {e:#}"))
}

fn wait_for(what: &str, proxy: &KpressProxy, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !done() {
        assert!(Instant::now() < deadline, "{what}\n{}", proxy.log());
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// One policy change: records acknowledged before the file was written were stored
/// under the old codec; records handed to the producer after kpress applied it, under
/// the new one.
#[derive(Debug)]
struct Flip {
    acked_before: u64,
    sent_after: u64,
    codec: &'static str,
}

#[test]
fn the_policy_flips_between_lz4_and_zstd_under_load_without_a_failed_request() {
    let cluster = KafkaCluster::start(kafka_version(), 1).expect("starting Kafka");
    JavaClient::new(kafka_version())
        .create_producer_codec_topics(&cluster.bootstrap(), &[TOPIC], 1)
        .unwrap();
    let base = KpressSetup::in_front_of(&cluster.node_addresses(), &cluster.node_ids(), "");
    let first = "lz4";
    let proxy = KpressProxy::start_with(KpressSetup {
        rules: rules(first),
        ..base
    })
    .unwrap();
    let policy = proxy.config_file().expect("kpress's policy file");
    let text = std::fs::read_to_string(&policy).unwrap();
    let with_codec = |codec: &str| text.replace(&rules(first), &rules(codec));

    let lines = Dataset::ApacheAccessLog.path();
    let mut options = SteadyOptions::new(Compression::Gzip, 2000, &lines);
    options.linger_ms = 20;
    let mut producer = SteadyProducer::start(&proxy.bootstrap(), TOPIC, "flip", &options).unwrap();
    producer
        .wait_acked(2000, Duration::from_secs(60))
        .unwrap_or_else(|e| panic!("{e:#}\n{}", proxy.log()));

    let mut flips = Vec::new();
    for codec in ["zstd", "lz4", "zstd", "lz4"] {
        std::thread::sleep(Duration::from_secs(2));
        let applied = reloads(&proxy, "applied");
        let acked_before = producer.progress().acked;
        write_policy(&policy, &with_codec(codec));
        wait_for(
            &format!("the flip to {codec} was not applied"),
            &proxy,
            || reloads(&proxy, "applied") > applied,
        );
        // The producer reports progress periodically: a report made after the reload
        // counts every record sent before it.
        std::thread::sleep(Duration::from_millis(1500));
        let sent_after = producer.progress().sent;
        flips.push(Flip {
            acked_before,
            sent_after,
            codec,
        });
    }

    // A broken file: refused with check-config's message, the policy in force stays.
    let invalid = reloads(&proxy, "invalid");
    write_policy(&policy, &with_codec("brotli"));
    wait_for("a broken policy was not refused", &proxy, || {
        reloads(&proxy, "invalid") > invalid
    });
    assert!(proxy
        .log()
        .contains("policy not reloaded: keeping the policy in force"));
    assert!(proxy.log().contains("brotli"), "{}", proxy.log());
    let acked_at_invalid = producer.progress().acked;
    producer
        .wait_more_acked(2000, Duration::from_secs(60))
        .unwrap_or_else(|e| panic!("{e:#}\n{}", proxy.log()));

    let report = producer.finish(Duration::from_secs(60)).unwrap();
    assert_eq!(report.progress.failed, 0, "{}", report.stderr);
    let read_back = tally(
        &proxy.bootstrap(),
        TOPIC,
        "flip",
        &lines,
        Duration::from_secs(120),
    )
    .unwrap();
    let accounting = Accounting::of(&report, &read_back);
    let problems = accounting.problems();
    assert!(problems.is_empty(), "{accounting}\n{}", problems.join("\n"));

    // Every batch in the codec in force when it was rewritten; batches in flight
    // across a reload may be either.
    let dump = cluster.dump_partition_0(&[TOPIC]).unwrap().remove(0);
    assert!(dump.problems.is_empty(), "{:?}", dump.problems);
    let mut checked = vec![0usize; flips.len() + 1];
    let mut wrong = Vec::new();
    for batch in &dump.batches {
        let (first_offset, last_offset) = (batch.base_offset as u64, batch.last_offset as u64);
        let mut expected = None;
        if last_offset < flips[0].acked_before {
            expected = Some((0, first));
        }
        for (i, flip) in flips.iter().enumerate() {
            let phase_ends = flips
                .get(i + 1)
                .map_or(acked_at_invalid, |next| next.acked_before);
            if first_offset >= flip.sent_after && last_offset < phase_ends {
                expected = Some((i + 1, flip.codec));
            }
        }
        if let Some((phase, codec)) = expected {
            checked[phase] += 1;
            if batch.compresscodec != codec {
                wrong.push(format!(
                    "offsets {first_offset}..={last_offset} stored {} where {codec} was in force",
                    batch.compresscodec
                ));
            }
        } else if !["lz4", "zstd"].contains(&batch.compresscodec.as_str()) {
            wrong.push(format!(
                "offsets {first_offset}..={last_offset} stored {}: not rewritten",
                batch.compresscodec
            ));
        }
    }
    assert!(wrong.is_empty(), "{flips:?}\n{}", wrong.join("\n"));
    assert!(
        checked.iter().all(|&n| n > 0),
        "a policy phase had no batch to check: {checked:?} {flips:?}"
    );
    eprintln!("batches checked per policy phase: {checked:?} ({flips:?})");
}
