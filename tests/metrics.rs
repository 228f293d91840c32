//! kpress's metrics against known traffic through it to a real Kafka 4.1.1 broker: three
//! raw Produce v7 requests of known gzip batches (a zstd topic, a topic kept as the
//! producer sent it, and a batch with a broken CRC), then a Java producer. The per-topic
//! bytes in and out, records, batch outcomes and histograms must equal what was sent and
//! what the broker stored (DumpLogSegments sizes); requests are counted by API. Every
//! metric the Grafana dashboard (deploy/grafana/kpress.json) queries must be in the
//! scrape, the autopilot's after one batch to an auto topic is decided. ~30 s.

use kpress_batch::builder::{BatchBuilder, Record};
use kpress_codec::Codec;
use kpress_tests::bare_requests::{exchange, parse_produce_v7, produce_v7, Partitions};
use kpress_tests::compression::Compression;
use kpress_tests::java_client::{JavaClient, ProduceOptions};
use kpress_tests::kpress::KpressProxy;
use kpress_tests::raw_batch::flip_payload_byte;
use kpress_tests::{kafka_version, KafkaCluster};
use std::collections::BTreeSet;
use std::net::TcpStream;
use std::time::{Duration, Instant};

const RULES: &str = "[defaults]\ncompression.type = \"producer\"\n\
    [[topics]]\nmatch = \"zstd.*\"\ncompression.type = \"zstd\"\n\
    [[topics]]\nmatch = \"keep.*\"\ncompression.type = \"producer\"\n\
    [[topics]]\nmatch = \"auto.*\"\ncompression.type = \"auto\"\nauto.min_samples = 1\n\
    [shadow]\nsample = 1.0\nmax_cpu_fraction = 1.0\ncandidates = [\"lz4\"]\n\
    [autopilot]\nshare = false\nwindow_ms = 200\n";

/// A gzip batch of `n` log-like records.
fn gzip_batch(n: usize, seed: usize) -> Vec<u8> {
    let records: Vec<Record> = (0..n)
        .map(|i| {
            Record::value(format!(
                "10.0.{seed}.{i} - - [24/Nov/2026:10:{i:02}:00 +0000] \"GET /api/v1/items/{i} HTTP/1.1\" 200 {}",
                i * 37
            ))
        })
        .collect();
    BatchBuilder::codec(Codec::Gzip).build(&records).unwrap()
}

/// Sum of the stored batch sizes of `topic`-0 (DumpLogSegments' `size`: the whole
/// batch, its 12-byte offset and length included, as sent on the wire).
fn stored(cluster: &KafkaCluster, topic: &str) -> (u64, usize) {
    let segments = cluster.dump_partition_0(&[topic]).expect("dumping the log");
    let batches: Vec<_> = segments
        .iter()
        .flat_map(|s| &s.batches)
        .filter(|b| !b.is_control)
        .collect();
    (batches.iter().map(|b| b.size as u64).sum(), batches.len())
}

/// Metric names a PromQL expression reads: `kpress_…` identifiers, a histogram's
/// `_bucket`, `_sum` and `_count` series mapped to the histogram.
fn queried_names(expr: &str, histograms: &BTreeSet<String>) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut rest = expr;
    while let Some(at) = rest.find("kpress_") {
        let tail = &rest[at..];
        let end = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(tail.len());
        let name = &tail[..end];
        let base = ["_bucket", "_sum", "_count"]
            .iter()
            .find_map(|suffix| {
                name.strip_suffix(suffix)
                    .filter(|base| histograms.contains(*base))
            })
            .unwrap_or(name);
        names.insert(base.to_string());
        rest = &tail[end..];
    }
    names
}

/// Every `expr` of the dashboard's panels.
fn dashboard_exprs() -> Vec<String> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../deploy/grafana/kpress.json");
    let text = std::fs::read_to_string(path).expect("reading the dashboard");
    let dashboard: serde_json::Value = serde_json::from_str(&text).expect("dashboard JSON");
    let mut exprs = Vec::new();
    for panel in dashboard["panels"].as_array().expect("panels") {
        for target in panel["targets"].as_array().expect("targets") {
            exprs.push(target["expr"].as_str().expect("expr").to_string());
        }
    }
    exprs
}

#[test]
fn metric_values_match_the_traffic_and_the_dashboard_queries_only_metrics_kpress_serves() {
    let cluster = KafkaCluster::start(kafka_version(), 1).expect("starting Kafka");
    let client = JavaClient::new(kafka_version());
    let topics = ["zstd.raw", "keep.raw", "zstd.bad", "zstd.java"];
    client
        .create_producer_codec_topics(&cluster.bootstrap(), &topics, 1)
        .expect("creating topics");
    // No compression.type of its own: one set on the topic, producer included, pins it.
    client
        .create_topic(&cluster.bootstrap(), "auto.raw", 1, &[])
        .expect("creating auto.raw");
    let proxy = KpressProxy::start_in_front_of(&cluster, RULES).expect("starting kpress");
    let metric = |name: &str, labels: &[(&str, &str)]| proxy.counter(name, labels).unwrap();

    // Three requests, each of one zstd.raw and one keep.raw batch; the first also
    // carries a zstd.bad batch whose CRC no longer matches.
    let mut sent = (0u64, 0u64, 0u64); // zstd.raw bytes, keep.raw bytes, records each
    let mut bad_len = 0;
    let mut stream = TcpStream::connect(proxy.listen()).expect("connecting to kpress");
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    for request in 0..3 {
        let n = 10 * (request + 1);
        let (zstd, keep) = (gzip_batch(n, request), gzip_batch(n, request + 10));
        let mut bad = gzip_batch(5, 99);
        flip_payload_byte(&mut bad, 3);
        sent.0 += zstd.len() as u64;
        sent.1 += keep.len() as u64;
        sent.2 += n as u64;
        let mut topics: Vec<(&[u8], Partitions<'_>)> = vec![
            (&b"zstd.raw"[..], vec![(0, &zstd[..])]),
            (&b"keep.raw"[..], vec![(0, &keep[..])]),
        ];
        if request == 0 {
            bad_len = bad.len() as u64;
            topics.push((&b"zstd.bad"[..], vec![(0, &bad[..])]));
        }
        let response = exchange(
            &mut stream,
            &produce_v7(request as i32, -1, 30_000, &topics),
        )
        .expect("a Produce answer");
        let (_, answers) = parse_produce_v7(&response).unwrap();
        for answer in answers {
            let topic = String::from_utf8_lossy(&answer.topic).into_owned();
            let expected = if topic == "zstd.bad" { 2 } else { 0 }; // CORRUPT_MESSAGE
            assert_eq!(answer.error_code, expected, "{topic}: {answer:?}");
        }
    }
    drop(stream);

    let (zstd_stored, zstd_batches) = stored(&cluster, "zstd.raw");
    let (keep_stored, _) = stored(&cluster, "keep.raw");
    assert_eq!(zstd_batches, 3);
    let raw = [("topic", "zstd.raw")];
    assert_eq!(metric("kpress_produce_bytes_in_total", &raw), sent.0 as f64);
    assert_eq!(
        metric("kpress_produce_bytes_out_total", &raw),
        zstd_stored as f64
    );
    assert!(zstd_stored < sent.0, "zstd saves on these records");
    assert_eq!(metric("kpress_produce_records_total", &raw), sent.2 as f64);
    assert_eq!(
        metric(
            "kpress_batches_total",
            &[("topic", "zstd.raw"), ("outcome", "rewritten")]
        ),
        3.0
    );
    assert_eq!(
        metric("kpress_batches_total", &raw),
        3.0,
        "no other outcome"
    );
    let keep = [("topic", "keep.raw")];
    assert_eq!(
        metric("kpress_produce_bytes_in_total", &keep),
        sent.1 as f64
    );
    assert_eq!(
        metric("kpress_produce_bytes_out_total", &keep),
        sent.1 as f64
    );
    assert_eq!(keep_stored, sent.1, "stored as sent");
    assert_eq!(metric("kpress_produce_records_total", &keep), sent.2 as f64);
    assert_eq!(
        metric(
            "kpress_batches_total",
            &[("topic", "keep.raw"), ("outcome", "policy_producer")]
        ),
        3.0
    );
    let bad = [("topic", "zstd.bad")];
    assert_eq!(
        metric(
            "kpress_batches_total",
            &[("topic", "zstd.bad"), ("outcome", "crc_mismatch")]
        ),
        1.0
    );
    assert_eq!(
        metric("kpress_produce_bytes_in_total", &bad),
        bad_len as f64
    );
    assert_eq!(
        metric("kpress_produce_bytes_out_total", &bad),
        bad_len as f64
    );

    // Histograms and cost.
    assert_eq!(metric("kpress_batch_bytes_count", &raw), 3.0);
    assert_eq!(metric("kpress_batch_bytes_sum", &raw), sent.0 as f64);
    assert_eq!(metric("kpress_batch_records_sum", &raw), sent.2 as f64);
    assert_eq!(
        metric(
            "kpress_rewrite_seconds_count",
            &[("from", "gzip"), ("to", "zstd")]
        ),
        3.0
    );
    assert!(metric("kpress_rewrite_cpu_seconds_total", &raw) > 0.0);
    // Requests: only this connection's three Produce requests so far.
    assert_eq!(metric("kpress_requests_total", &[("api", "Produce")]), 3.0);
    assert_eq!(metric("kpress_requests_total", &[]), 3.0);
    assert_eq!(
        metric(
            "kpress_upstream_latency_seconds_count",
            &[("api", "Produce")]
        ),
        3.0
    );
    assert_eq!(metric("kpress_produce_queue_seconds_count", &[]), 3.0);
    assert_eq!(metric("kpress_produce_rewrite_seconds_count", &[]), 3.0);
    // The older totals still count the same rewrites.
    assert_eq!(metric("kpress_batches_rewritten_total", &raw), 3.0);

    // A Java producer: its batches, whatever their number, add up to what is stored.
    let values: Vec<String> = (0..300)
        .map(|i| format!("java record {i} with a repeated payload payload payload"))
        .collect();
    let values: Vec<&str> = values.iter().map(String::as_str).collect();
    let options = ProduceOptions {
        compression: Compression::Gzip,
        ..ProduceOptions::default()
    };
    client
        .produce_records(&proxy.bootstrap(), "zstd.java", &values, &options)
        .expect("producing through kpress");
    let java = [("topic", "zstd.java")];
    let (java_stored, java_batches) = stored(&cluster, "zstd.java");
    assert_eq!(metric("kpress_produce_records_total", &java), 300.0);
    assert_eq!(
        metric("kpress_produce_bytes_out_total", &java),
        java_stored as f64
    );
    assert_eq!(
        metric(
            "kpress_batches_total",
            &[("topic", "zstd.java"), ("outcome", "rewritten")]
        ),
        java_batches as f64
    );
    for api in ["ApiVersions", "Metadata", "InitProducerId"] {
        assert!(
            metric("kpress_requests_total", &[("api", api)]) >= 1.0,
            "{api}"
        );
    }
    assert!(metric("kpress_requests_total", &[("api", "Produce")]) >= 4.0);

    // An auto topic: batches go on until the autopilot chose (every batch is tried;
    // until kpress has read the topic's configuration they pass as sent), so the
    // autopilot's gauges the dashboard reads are on the page too.
    let mut stream = TcpStream::connect(proxy.listen()).expect("connecting to kpress");
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let decided_by = Instant::now() + Duration::from_secs(60);
    for request in 10.. {
        if proxy
            .scrape_metrics()
            .unwrap()
            .contains("kpress_autopilot_choice{")
        {
            break;
        }
        assert!(Instant::now() < decided_by, "auto.raw was not decided");
        let auto = gzip_batch(50, request);
        let response = exchange(
            &mut stream,
            &produce_v7(
                request as i32,
                -1,
                30_000,
                &[(&b"auto.raw"[..], vec![(0, &auto[..])])],
            ),
        )
        .expect("a Produce answer");
        let (_, answers) = parse_produce_v7(&response).unwrap();
        assert!(answers.iter().all(|a| a.error_code == 0), "{answers:?}");
        std::thread::sleep(Duration::from_millis(200));
    }

    // Every metric the dashboard reads is served.
    let scrape = proxy.scrape_metrics().unwrap();
    let types: Vec<(String, String)> = scrape
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split_once(' '))
        .map(|(name, kind)| (name.to_string(), kind.to_string()))
        .collect();
    let histograms: BTreeSet<String> = types
        .iter()
        .filter(|(_, kind)| kind == "histogram")
        .map(|(name, _)| name.clone())
        .collect();
    for histogram in [
        "kpress_upstream_latency_seconds",
        "kpress_rewrite_seconds",
        "kpress_batch_bytes",
        "kpress_produce_queue_seconds",
    ] {
        assert!(
            histograms.contains(histogram),
            "{histogram} is not a histogram"
        );
    }
    let served: BTreeSet<String> = types.into_iter().map(|(name, _)| name).collect();
    let exprs = dashboard_exprs();
    assert!(exprs.len() >= 10, "{exprs:?}");
    let mut queried = BTreeSet::new();
    for expr in &exprs {
        queried.extend(queried_names(expr, &histograms));
    }
    let missing: Vec<_> = queried.difference(&served).collect();
    assert!(
        missing.is_empty(),
        "the dashboard queries {missing:?}, not served:\n{scrape}"
    );
    for name in [
        "kpress_produce_bytes_in_total",
        "kpress_rewrite_cpu_seconds_total",
        "kpress_batches_total",
        "kpress_upstream_latency_seconds",
    ] {
        assert!(queried.contains(name), "the dashboard graphs {name}");
    }
}

#[test]
fn dashboard_names_are_read_from_promql() {
    let histograms = BTreeSet::from(["kpress_x_seconds".to_string()]);
    let names = queried_names(
        "histogram_quantile(0.9, sum by (le) (rate(kpress_x_seconds_bucket[5m]))) / sum(rate(kpress_y_total{topic=~\"a\"}[1m])) + kpress_z_count",
        &histograms,
    );
    assert_eq!(
        names.into_iter().collect::<Vec<_>>(),
        ["kpress_x_seconds", "kpress_y_total", "kpress_z_count"]
    );
}
