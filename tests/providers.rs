//! KIP-1121's `compression.gzip.provider` end to end: one `kpress run` in
//! front of a real Kafka 4.1.1 broker, topics whose policies write gzip through each
//! provider (zlib, libdeflate, ISA-L, QATzip in its software backup, `auto`, and no
//! provider at all) at two levels, and topics whose policies write zstd with a provider
//! set, so that gzip *input* is read through each provider.
//!
//! Java kafka-clients 4.1.1 and kcat (librdkafka 2.0) produce through kpress (snappy and
//! none into the gzip topics, gzip into the zstd topics). Kafka's DumpLogSegments finds
//! every stored batch valid and in the policy's codec; each stored gzip payload is
//! exactly what its topic's provider writes at its level (so the proxy really used
//! it); the Java consumer (`GZIPInputStream`) and kcat read every record back through
//! kpress byte for byte; the metrics show the rewrites and the providers' status.

use kpress_codec::gzip_providers::ProviderKind;
use kpress_codec::options::{GZIP_LEVEL, GZIP_PROVIDER};
use kpress_codec::{Codec, CompressionOptions, Compressor, Decompressor};
use kpress_tests::cluster::KafkaCluster;
use kpress_tests::compression::Compression;
use kpress_tests::data::{diff_records, write_records, Dataset};
use kpress_tests::java_client::{ConsumeOptions, JavaClient, ProduceOptions};
use kpress_tests::kpress::KpressProxy;
use kpress_tests::raw_batch::{codec_id, split_batches};
use kpress_tests::{kafka_version, kcat};

/// A topic and the policy kpress gives it.
struct PolicyTopic {
    name: String,
    target: Compression,
    /// `None`: no `compression.gzip.provider` line (the default, zlib).
    provider: Option<&'static str>,
    /// `None`: no `compression.gzip.level` line (Kafka's default, 6).
    level: Option<u32>,
}

impl PolicyTopic {
    fn rule(&self) -> String {
        let mut rule = format!(
            "[[topics]]\nmatch = \"{}\"\ncompression.type = \"{}\"\n",
            self.name, self.target
        );
        if let Some(provider) = self.provider {
            rule.push_str(&format!("{GZIP_PROVIDER} = \"{provider}\"\n"));
        }
        if let Some(level) = self.level {
            rule.push_str(&format!("{GZIP_LEVEL} = {level}\n"));
        }
        rule
    }

    /// The options the policy compiles to, for writing the gzip kpress should have written.
    fn options(&self) -> CompressionOptions {
        let mut options = CompressionOptions::default();
        if let Some(provider) = self.provider {
            options.set(GZIP_PROVIDER, provider).unwrap();
        }
        if let Some(level) = self.level {
            options.set(GZIP_LEVEL, &level.to_string()).unwrap();
        }
        options
    }
}

fn policy_topics() -> Vec<PolicyTopic> {
    let mut topics = Vec::new();
    for provider in ["zlib", "libdeflate", "isal", "qat"] {
        for level in [1, 9] {
            topics.push(PolicyTopic {
                name: format!("gz.{provider}.{level}"),
                target: Compression::Gzip,
                provider: Some(provider),
                level: Some(level),
            });
        }
    }
    topics.push(PolicyTopic {
        name: "gz.auto.6".into(),
        target: Compression::Gzip,
        provider: Some("auto"),
        level: Some(6),
    });
    // No provider configured: gzip as kpress wrote it before providers existed.
    topics.push(PolicyTopic {
        name: "gz.default".into(),
        target: Compression::Gzip,
        provider: None,
        level: None,
    });
    for provider in [
        Some("zlib"),
        Some("libdeflate"),
        Some("isal"),
        Some("qat"),
        None,
    ] {
        topics.push(PolicyTopic {
            name: format!("zs.{}", provider.unwrap_or("default")),
            target: Compression::Zstd,
            provider,
            level: None,
        });
    }
    topics
}

/// The gzip payloads (records sections) of every gzip batch of `topic`-0's segments.
fn stored_gzip_payloads(cluster: &KafkaCluster, topic: &str) -> Vec<Vec<u8>> {
    let mut payloads = Vec::new();
    for segment in cluster.segments(topic, 0).expect("segments") {
        let bytes = std::fs::read(&segment).expect("segment");
        for batch in split_batches(&bytes).expect("batches") {
            if codec_id(&batch) == 1 {
                payloads.push(batch[61..].to_vec());
            }
        }
    }
    payloads
}

/// What `options`' provider writes for `plain` at `options`' level.
fn gzip_with(options: &CompressionOptions, plain: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    Compressor::new(Codec::Gzip, options)
        .compress(plain, &mut out)
        .expect("compress");
    out
}

#[test]
fn every_gzip_provider_through_kpress_in_front_of_a_real_broker() {
    let topics = policy_topics();
    let rules: String = topics.iter().map(PolicyTopic::rule).collect();
    let cluster = KafkaCluster::start(kafka_version(), 1).expect("starting Kafka");
    let proxy = KpressProxy::start_in_front_of(&cluster, &rules)
        .unwrap_or_else(|e| panic!("starting kpress: {e:#}"));
    let java = JavaClient::new(kafka_version());
    let names: Vec<&str> = topics.iter().map(|t| t.name.as_str()).collect();
    java.create_producer_codec_topics(&cluster.bootstrap(), &names, 1)
        .unwrap_or_else(|e| panic!("{e:#}"));

    let records: Vec<Vec<u8>> = Dataset::ApacheAccessLog.records()[..1500].to_vec();
    let work = tempfile::tempdir().expect("temp dir");
    let file = write_records(&work.path().join("apache-1500.log"), &records);
    let bootstrap = proxy.bootstrap();
    let gzip_topics: Vec<&str> = topics
        .iter()
        .filter(|t| t.target == Compression::Gzip)
        .map(|t| t.name.as_str())
        .collect();
    let zstd_topics: Vec<&str> = topics
        .iter()
        .filter(|t| t.target == Compression::Zstd)
        .map(|t| t.name.as_str())
        .collect();

    // Java first, then kcat, into every topic: each holds the file twice, in order.
    let java_with = |compression| ProduceOptions {
        compression,
        batch_size: 32768,
        ..ProduceOptions::default()
    };
    java.produce_file_to_topics(
        &bootstrap,
        &gzip_topics,
        &file,
        &java_with(Compression::Snappy),
    )
    .unwrap_or_else(|e| panic!("{e:#}\n{}", proxy.log()));
    java.produce_file_to_topics(
        &bootstrap,
        &zstd_topics,
        &file,
        &java_with(Compression::Gzip),
    )
    .unwrap_or_else(|e| panic!("{e:#}\n{}", proxy.log()));
    for topic in &topics {
        let codec = match topic.target {
            Compression::Gzip => Compression::None,
            _ => Compression::Gzip,
        };
        kcat::produce_file(&bootstrap, &topic.name, 0, codec, &file, &[])
            .unwrap_or_else(|e| panic!("{}: {e:#}\n{}", topic.name, proxy.log()));
    }
    let expected: Vec<Vec<u8>> = records.iter().chain(&records).cloned().collect();

    let mut failures = Vec::new();
    // Kafka's reading of what the broker stored.
    let dumps = cluster.dump_partition_0(&names).expect("DumpLogSegments");
    for (topic, dump) in topics.iter().zip(&dumps) {
        let name = &topic.name;
        if !dump.problems.is_empty() {
            failures.push(format!("{name}: DumpLogSegments: {:?}", dump.problems));
        }
        for batch in &dump.batches {
            if !batch.is_valid || batch.compresscodec != topic.target.dump_name() {
                failures.push(format!(
                    "{name}: batch at {}: compresscodec {} isvalid {} (policy {})",
                    batch.base_offset, batch.compresscodec, batch.is_valid, topic.target
                ));
            }
        }
        if let Some(diff) = diff_records(&expected, &dump.payloads()) {
            failures.push(format!("{name}: stored records: {diff}"));
        }
    }

    // Each stored gzip payload is byte for byte what the topic's provider writes at its
    // level: kpress used that provider (and nothing fell back to zlib).
    let mut distinct_from_zlib = Vec::new();
    for topic in topics.iter().filter(|t| t.target == Compression::Gzip) {
        let options = topic.options();
        let payloads = stored_gzip_payloads(&cluster, &topic.name);
        if payloads.len() < 2 {
            failures.push(format!("{}: {} gzip batches", topic.name, payloads.len()));
        }
        eprintln!(
            "{}: {} gzip batches, {} bytes of gzip",
            topic.name,
            payloads.len(),
            payloads.iter().map(Vec::len).sum::<usize>()
        );
        let mut zlib = options.clone();
        zlib.set(GZIP_PROVIDER, "zlib").unwrap();
        for (i, payload) in payloads.iter().enumerate() {
            let mut plain = Vec::new();
            Decompressor::new()
                .decompress(Codec::Gzip, payload, 64 << 20, &mut plain)
                .expect("stored gzip decompresses");
            if gzip_with(&options, &plain) != *payload {
                failures.push(format!(
                    "{}: gzip batch {i} is not what provider {} level {} writes",
                    topic.name,
                    options.gzip_provider(),
                    options.gzip_effective_level()
                ));
            }
            if i == 0 && gzip_with(&zlib, &plain) != *payload {
                distinct_from_zlib.push(topic.name.clone());
            }
        }
    }
    // libdeflate, ISA-L and QATzip (its software backup is the C zlib, whose level 1
    // differs from zlib-rs's) write other deflate streams than zlib-rs: the check above
    // tells providers apart. `auto` is libdeflate on this host (no QAT device).
    for name in [
        "gz.libdeflate.1",
        "gz.libdeflate.9",
        "gz.isal.1",
        "gz.isal.9",
        "gz.qat.1",
        "gz.auto.6",
    ] {
        if !distinct_from_zlib.iter().any(|n| n == name) {
            failures.push(format!(
                "{name}: its gzip equals zlib's: {distinct_from_zlib:?}"
            ));
        }
    }

    // Consumers through kpress: Java (GZIPInputStream for gzip) and librdkafka.
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
    for name in &names {
        if let Some(problem) = kcat::read_back_problem(&bootstrap, name, 0, &[], &expected) {
            failures.push(problem);
        }
    }

    // The metrics: every topic's rewrites, the providers' status, no fallbacks.
    let rewritten = |topic: &str, from: &str, to: &str| {
        proxy
            .counter(
                "kpress_batches_rewritten_total",
                &[("topic", topic), ("from", from), ("to", to)],
            )
            .expect("metrics")
    };
    for topic in &topics {
        let sources: &[&str] = match topic.target {
            Compression::Gzip => &["snappy", "none"],
            _ => &["gzip"],
        };
        for from in sources {
            if rewritten(&topic.name, from, topic.target.name()) < 1.0 {
                failures.push(format!(
                    "{}: no {from} -> {} rewrite counted",
                    topic.name, topic.target
                ));
            }
        }
    }
    let metric =
        |name: &str, labels: &[(&str, &str)]| proxy.counter(name, labels).expect("metrics");
    for kind in ProviderKind::ALL {
        let provider = kind.name();
        let available = metric("kpress_gzip_provider_available", &[("provider", provider)]);
        let hardware = metric("kpress_gzip_provider_hardware", &[("provider", provider)]);
        let fallbacks = metric(
            "kpress_gzip_provider_fallbacks_total",
            &[("provider", provider)],
        );
        // QATzip is here (scripts/setup.sh) but no QAT device: available, software.
        if (available, hardware, fallbacks) != (1.0, 0.0, 0.0) {
            failures.push(format!(
                "{provider}: available {available}, hardware {hardware}, fallbacks {fallbacks}"
            ));
        }
    }
    let scraped = proxy.scrape_metrics().expect("metrics");
    let qat_decompress_counter = scraped.lines().any(|l| {
        l.starts_with("kpress_gzip_provider_fallbacks_total{")
            && l.contains("provider=\"qat\"")
            && l.contains("operation=\"decompress\"")
    });
    if !qat_decompress_counter {
        failures.push(format!("no qat decompress fallback counter:\n{scraped}"));
    }
    let log = proxy.log();
    if !log.lines().any(|l| {
        l.contains("WARN")
            && l.contains("gzip provider qat: available, software")
            && l.contains("QZ_NO_HW")
    }) {
        failures.push("the log does not report QAT's QZ_NO_HW at start".into());
    }
    assert!(
        failures.is_empty(),
        "{} failure(s):\n{}\n{log}",
        failures.len(),
        failures.join("\n")
    );
}
