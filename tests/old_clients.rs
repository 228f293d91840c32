//! Java kafka-clients 2.0.1, which predates zstd and produces with Produce v3-v6 only,
//! through `kpress run` in front of a real Kafka 4.1.1 broker.
//!
//! A broker refuses zstd in Produce below v7 (UNSUPPORTED_COMPRESSION_TYPE), so for such
//! a request kpress must leave a zstd-policy batch as the producer sent it, counted
//! `kpress_batches_passed_total{reason="zstd_needs_produce_v7"}`, and every record must
//! still be accepted. Old clients still get the rewrites a broker accepts from them:
//! gzip, lz4 (and snappy) targets.

use kpress_tests::compression::Compression;
use kpress_tests::data::Dataset;
use kpress_tests::java_client::{ConsumeOptions, JavaClient, ProduceOptions};
use kpress_tests::kpress::{storing_rules, KpressProxy};
use kpress_tests::pre_zstd_client::{pre_zstd_clients_version, pre_zstd_java_client};
use kpress_tests::{kafka_version, KafkaCluster};
use std::sync::{Mutex, MutexGuard, OnceLock, PoisonError};
use std::time::Duration;

/// Topics named `<codec>.<anything>` get that codec, even where it is larger than the
/// producer's batch (kpress's default), so a batch left in its source codec can only be
/// one kpress chose not to rewrite.
fn rules() -> String {
    storing_rules(&["zstd", "gzip", "lz4"])
}

const PASSED: &str = "kpress_batches_passed_total";
const REWRITTEN: &str = "kpress_batches_rewritten_total";
const ZSTD_NEEDS_V7: &str = "zstd_needs_produce_v7";

/// The one-node 4.1.1 broker and the proxy in front of it, shared by this binary's
/// tests (watchdogs stop both when the test process exits).
fn shared() -> &'static (KafkaCluster, KpressProxy) {
    static SHARED: OnceLock<(KafkaCluster, KpressProxy)> = OnceLock::new();
    SHARED.get_or_init(|| {
        let cluster = KafkaCluster::start(kafka_version(), 1).expect("starting Kafka");
        let proxy = KpressProxy::start_in_front_of(&cluster, &rules())
            .unwrap_or_else(|e| panic!("starting kpress: {e:#}"));
        (cluster, proxy)
    })
}

/// One test at a time: each reads the proxy's counters before and after its own
/// traffic.
fn serial() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The old client's producer settings: idempotent, acks=all, small batches so each
/// topic gets many Produce requests.
fn old_producer(compression: Compression) -> ProduceOptions {
    ProduceOptions {
        compression,
        batch_size: 16384,
        ..ProduceOptions::default()
    }
}

/// Produces the apache log with the old client into each `(topic, codec)` through
/// kpress, then checks the stored codec (`stored(codec)`, from DumpLogSegments) and
/// reads every topic back through kpress with the old and the current client.
/// Returns the number of batches stored and the problems found.
fn produce_store_and_read_back(
    pairs: &[(&str, Compression)],
    stored: impl Fn(&str, Compression) -> Compression,
) -> (usize, Vec<String>) {
    let (cluster, proxy) = shared();
    let old = pre_zstd_java_client();
    let current = JavaClient::new(kafka_version());
    let topics: Vec<&str> = pairs.iter().map(|(t, _)| *t).collect();
    current
        .create_producer_codec_topics(&cluster.bootstrap(), &topics, 1)
        .unwrap_or_else(|e| panic!("{e:#}"));
    let dataset = Dataset::ApacheAccessLog;
    let expected = dataset.records();
    let mut problems = Vec::new();
    for (topic, codec) in pairs {
        if let Err(e) = old.produce_file(
            &proxy.bootstrap(),
            topic,
            &dataset.path(),
            &old_producer(*codec),
        ) {
            problems.push(format!(
                "{topic}: kafka-clients {} producing {codec} through kpress: {e:#}",
                pre_zstd_clients_version()
            ));
        }
    }
    if !problems.is_empty() {
        // Nothing stored to check, or only part of it.
        return (0, problems);
    }
    let dumps = cluster.dump_partition_0(&topics).expect("DumpLogSegments");
    let mut batches = 0;
    for ((topic, codec), dump) in pairs.iter().zip(&dumps) {
        batches += dump.batches.len();
        problems.extend(dump.problems_storing(topic, stored(topic, *codec), &expected));
    }
    let options = ConsumeOptions {
        timeout: Duration::from_secs(120),
        ..ConsumeOptions::default()
    };
    for (client, name) in [
        (&old, "kafka-clients 2.0.1"),
        (&current, "kafka-clients 4.1.1"),
    ] {
        match client.read_back_problems(&proxy.bootstrap(), &topics, &expected, &options, name) {
            Ok(found) => problems.extend(found),
            Err(e) => problems.push(format!("{name} reading back through kpress: {e:#}")),
        }
    }
    (batches, problems)
}

fn passed_for_zstd_v7(proxy: &KpressProxy) -> f64 {
    proxy
        .counter(PASSED, &[("reason", ZSTD_NEEDS_V7)])
        .expect("kpress metrics")
}

/// kafka-clients 2.0.1 produces lz4, gzip, snappy and uncompressed batches into topics
/// whose policy is zstd. Every record is accepted, the broker stores every batch in
/// the producer's own codec (kpress passed it through: zstd is not allowed below
/// Produce v7), the pass-throughs are counted as `zstd_needs_produce_v7`, and both the
/// old and the current client read every record back byte for byte through kpress.
#[test]
fn old_client_into_zstd_policy_topics_keeps_its_codec() {
    let _serial = serial();
    let (cluster, proxy) = shared();
    let before = passed_for_zstd_v7(proxy);
    let pairs = [
        ("zstd.old-lz4", Compression::Lz4),
        ("zstd.old-gzip", Compression::Gzip),
        ("zstd.old-snappy", Compression::Snappy),
        ("zstd.old-none", Compression::None),
    ];
    let (batches, mut problems) = produce_store_and_read_back(&pairs, |_, source| source);
    let passed = passed_for_zstd_v7(proxy) - before;
    eprintln!("{ZSTD_NEEDS_V7}: {passed} batches passed through; {batches} batches stored");
    if passed < batches as f64 || passed == 0.0 {
        problems.push(format!(
            "{PASSED}{{reason=\"{ZSTD_NEEDS_V7}\"}} rose by {passed}, expected at least \
             the {batches} batches stored"
        ));
    }
    assert!(
        problems.is_empty(),
        "{} problem(s):\n{}\n{}\n{}",
        problems.len(),
        problems.join("\n"),
        proxy.log(),
        cluster.describe_logs()
    );
}

/// The same client into gzip- and lz4-policy topics: kpress rewrites every batch (the
/// broker accepts those codecs in any Produce version), so the broker stores the
/// policy's codec, and nothing counts as `zstd_needs_produce_v7`.
#[test]
fn old_client_into_gzip_and_lz4_policy_topics_is_recompressed() {
    let _serial = serial();
    let (cluster, proxy) = shared();
    let rewritten = |to: &str| {
        proxy
            .counter(REWRITTEN, &[("to", to)])
            .expect("kpress metrics")
    };
    let before = (rewritten("gzip"), rewritten("lz4"));
    let pairs = [
        ("gzip.old-lz4", Compression::Lz4),
        ("gzip.old-snappy", Compression::Snappy),
        ("lz4.old-gzip", Compression::Gzip),
        ("lz4.old-none", Compression::None),
    ];
    let policy = |topic: &str| {
        Compression::from_name(topic.split('.').next().expect("a policy prefix"))
            .expect("a codec prefix")
    };
    let zstd_before = passed_for_zstd_v7(proxy);
    let (batches, mut problems) = produce_store_and_read_back(&pairs, |topic, _| policy(topic));
    let after = (rewritten("gzip"), rewritten("lz4"));
    let rewrites = (after.0 - before.0) + (after.1 - before.1);
    eprintln!(
        "rewritten to gzip {}, to lz4 {}; {batches} batches stored",
        after.0 - before.0,
        after.1 - before.1
    );
    if after.0 <= before.0 || after.1 <= before.1 || rewrites < batches as f64 {
        problems.push(format!(
            "{REWRITTEN} rose by {} (to gzip) and {} (to lz4); expected at least the {batches} \
             batches stored, some of each",
            after.0 - before.0,
            after.1 - before.1
        ));
    }
    let zstd_passed = passed_for_zstd_v7(proxy) - zstd_before;
    if zstd_passed != 0.0 {
        problems.push(format!(
            "{PASSED}{{reason=\"{ZSTD_NEEDS_V7}\"}} rose by {zstd_passed} without a zstd topic"
        ));
    }
    assert!(
        problems.is_empty(),
        "{} problem(s):\n{}\n{}\n{}",
        problems.len(),
        problems.join("\n"),
        proxy.log(),
        cluster.describe_logs()
    );
}
