//! `kpress advise --from-metrics` on the page of a real kpress in front of a real 4.1.1
//! broker: lz4 batches of known content (the apache log, 100 lines per batch) go
//! through kpress with `[shadow] sample = 1.0` while the rule keeps what producers
//! send. The advice read from that page must pick the candidate with the smallest
//! shadow output, project the saving from the page's own counters, print a rule
//! `kpress check-config` accepts, and agree with `kpress advise --dir` on the same
//! records batched alike.

use std::process::Command;
use std::time::{Duration, Instant};

use kpress_batch::builder::{BatchBuilder, Record};
use kpress_codec::Codec;
use kpress_tests::data::Dataset;
use kpress_tests::java_client::JavaClient;
use kpress_tests::kpress::{kpress_binary, KpressProxy, KpressSetup};
use kpress_tests::raw_produce::produce_raw;
use kpress_tests::workloads::metric_samples;
use kpress_tests::{kafka_version, KafkaCluster};
use serde_json::Value;

const CANDIDATES: [&str; 4] = ["zstd:3", "gzip:6", "lz4:9", "snappy"];
const RECORDS_PER_BATCH: usize = 100;
const BATCHES: usize = 20;
const TOPIC: &str = "advice.logs";

fn advise(args: &[&str]) -> Value {
    let out = Command::new(kpress_binary())
        .arg("advise")
        .args(args)
        .args(["--format", "json"])
        .output()
        .expect("run kpress advise");
    assert!(
        out.status.success(),
        "kpress advise {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("advise JSON")
}

fn check_config_accepts(block: &str) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("kpress.toml");
    std::fs::write(
        &path,
        format!("[listener]\nbind = \"127.0.0.1:19092\"\n[upstream]\nbootstrap_servers = [\"127.0.0.1:9092\"]\n{block}"),
    )
    .unwrap();
    let out = Command::new(kpress_binary())
        .arg("check-config")
        .arg(&path)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "check-config refused:\n{block}\n{}",
        String::from_utf8_lossy(&out.stdout)
    );
}

#[test]
fn advice_from_a_live_page_picks_the_smallest_trial_and_agrees_with_offline() {
    let cluster = KafkaCluster::start(kafka_version(), 1).expect("starting Kafka");
    JavaClient::new(kafka_version())
        .create_producer_codec_topics(&cluster.bootstrap(), &[TOPIC], 1)
        .unwrap();
    let specs: Vec<String> = CANDIDATES.iter().map(|c| format!("\"{c}\"")).collect();
    let rules = format!(
        "[[topics]]\nmatch = \"advice.*\"\ncompression.type = \"producer\"\n\
         [shadow]\ncandidates = [{}]\nsample = 1.0\nmax_cpu_fraction = 1.0\n",
        specs.join(", ")
    );
    let proxy = KpressProxy::start_with(KpressSetup::in_front_of(
        &cluster.node_addresses(),
        &cluster.node_ids(),
        &rules,
    ))
    .unwrap();

    let mut lines = Dataset::ApacheAccessLog.records();
    lines.truncate(BATCHES * RECORDS_PER_BATCH);
    let id = u16::try_from(cluster.node_ids()[0]).unwrap();
    let node = std::net::SocketAddr::from((
        [127, 0, 0, 1],
        proxy.node_port_base().expect("ports mode") + id,
    ));
    for (i, chunk) in lines.chunks(RECORDS_PER_BATCH).enumerate() {
        let records: Vec<Record> = chunk.iter().cloned().map(Record::value).collect();
        let batch = BatchBuilder::codec(Codec::Lz4).build(&records).unwrap();
        let answer = produce_raw(node, TOPIC, 0, &batch, Duration::from_secs(30))
            .unwrap_or_else(|e| panic!("batch {i}: {e:#}\n{}", proxy.log()));
        assert_eq!(answer.error_code, 0, "batch {i}");
    }
    // Trials run at the lowest priority: on a busy machine they wait for idle CPU.
    let deadline = Instant::now() + Duration::from_secs(180);
    let counter = |name: &str, labels: &[(&str, &str)]| proxy.counter(name, labels).unwrap();
    while counter("kpress_shadow_batches_total", &[("topic", TOPIC)]) < BATCHES as f64 {
        assert!(Instant::now() < deadline, "trials missing\n{}", proxy.log());
        std::thread::sleep(Duration::from_millis(200));
    }

    let page = proxy.scrape_metrics().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let page_file = dir.path().join("metrics.txt");
    std::fs::write(&page_file, &page).unwrap();
    let live = advise(&[
        "--from-metrics",
        page_file.to_str().unwrap(),
        "--goal",
        "size",
    ]);
    let topic = live["topics"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["topic"] == TOPIC)
        .unwrap_or_else(|| panic!("no advice for {TOPIC}: {live}"));

    // The smallest shadow output, from the page's counters themselves.
    let out_of = |candidate: &str| {
        counter(
            "kpress_shadow_bytes_out_total",
            &[("topic", TOPIC), ("candidate", candidate)],
        )
    };
    let smallest = CANDIDATES
        .iter()
        .min_by(|a, b| out_of(a).total_cmp(&out_of(b)))
        .unwrap();
    let choice = &topic["choice"];
    assert_eq!(choice["candidate"], *smallest, "{topic}");
    let bytes_in = counter("kpress_produce_bytes_in_total", &[("topic", TOPIC)]);
    let bytes_out = counter("kpress_produce_bytes_out_total", &[("topic", TOPIC)]);
    // compression.type = "producer": what went on is what came in.
    assert_eq!(bytes_in, bytes_out);
    let shadow_in = counter(
        "kpress_shadow_bytes_in_total",
        &[("topic", TOPIC), ("candidate", smallest)],
    );
    let projected = bytes_in * out_of(smallest) / shadow_in;
    let close = |a: f64, b: f64| (a - b).abs() <= 1e-6 * b.abs().max(1.0);
    assert!(
        close(choice["bytes_projected"].as_f64().unwrap(), projected),
        "{choice}"
    );
    assert!(
        close(choice["saving"].as_f64().unwrap(), bytes_out - projected),
        "{choice}"
    );
    let toml = live["toml"].as_str().expect("a rule");
    assert!(toml.contains(&format!("match = \"{TOPIC}\"")), "{toml}");
    check_config_accepts(toml);

    // Offline, the same records in the same 100-record batches rank alike.
    let dataset = tempfile::tempdir().unwrap();
    std::fs::write(dataset.path().join("lines.log"), lines.join(&b"\n"[..])).unwrap();
    let offline = advise(&[
        "--dir",
        dataset.path().to_str().unwrap(),
        "--batch-size",
        &RECORDS_PER_BATCH.to_string(),
        "--candidates",
        &CANDIDATES.join(","),
    ]);
    let by_size = |ranking: &Value| -> Vec<String> {
        ranking
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["candidate"].as_str().unwrap().to_owned())
            .collect()
    };
    assert_eq!(by_size(&offline["ranking"]), by_size(&topic["ranking"]));
    for (o, l) in offline["ranking"]
        .as_array()
        .unwrap()
        .iter()
        .zip(topic["ranking"].as_array().unwrap())
    {
        let (o, l) = (
            o["batch_bytes"].as_f64().unwrap(),
            l["batch_bytes"].as_f64().unwrap(),
        );
        assert!((o - l).abs() <= 0.01 * o, "offline {o} against live {l}");
    }
    eprintln!(
        "live choice {} projects {:.0} of {bytes_out:.0} bytes ({:.1}% saved)",
        choice["candidate"],
        projected,
        100.0 * (1.0 - projected / bytes_out)
    );
}

/// The gauge's candidate at 1 for `topic`, once the autopilot chose.
fn chosen(page: &str, topic: &str) -> Option<String> {
    metric_samples(page, "kpress_autopilot_choice")
        .into_iter()
        .find_map(|(labels, value)| {
            let label = |name: &str| labels.iter().find(|(k, _)| k == name).map(|(_, v)| v);
            (value == 1.0 && label("topic").is_some_and(|t| t == topic))
                .then(|| label("candidate").cloned())
                .flatten()
        })
}

#[test]
fn autopilot_choices_of_a_live_kpress_come_with_since_and_why() {
    const AUTO_TOPIC: &str = "auto.logs";
    let cluster = KafkaCluster::start(kafka_version(), 1).expect("starting Kafka");
    // No compression.type of its own: one set on the topic, producer included, pins it.
    JavaClient::new(kafka_version())
        .create_topic(&cluster.bootstrap(), AUTO_TOPIC, 1, &[])
        .unwrap();
    // Every batch tried, decisions every 200 ms, and no fleet: this kpress decides alone.
    let rules = "[[topics]]\nmatch = \"auto.*\"\ncompression.type = \"auto\"\n\
         auto.min_samples = 3\n\
         [shadow]\ncandidates = [\"lz4\"]\nsample = 1.0\nmax_cpu_fraction = 1.0\n\
         [autopilot]\nshare = false\nwindow_ms = 200\n";
    let proxy = KpressProxy::start_with(KpressSetup::in_front_of(
        &cluster.node_addresses(),
        &cluster.node_ids(),
        rules,
    ))
    .unwrap();
    let id = u16::try_from(cluster.node_ids()[0]).unwrap();
    let node = std::net::SocketAddr::from((
        [127, 0, 0, 1],
        proxy.node_port_base().expect("ports mode") + id,
    ));
    // Batches go on until the autopilot chose: until kpress has read the topic's
    // configuration (an auto topic pinned at topic level is left to topic mode), they
    // pass as sent and count for nothing.
    let mut lines = Dataset::ApacheAccessLog.records();
    lines.truncate(BATCHES * RECORDS_PER_BATCH);
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut chunks = lines.chunks(RECORDS_PER_BATCH).cycle();
    let choice = loop {
        if let Some(choice) = chosen(&proxy.scrape_metrics().unwrap(), AUTO_TOPIC) {
            break choice;
        }
        assert!(Instant::now() < deadline, "no choice\n{}", proxy.log());
        let chunk = chunks.next().unwrap();
        let records: Vec<Record> = chunk.iter().cloned().map(Record::value).collect();
        let batch = BatchBuilder::codec(Codec::Lz4).build(&records).unwrap();
        let answer = produce_raw(node, AUTO_TOPIC, 0, &batch, Duration::from_secs(30)).unwrap();
        assert_eq!(answer.error_code, 0);
        std::thread::sleep(Duration::from_millis(200));
    };

    let admin = proxy.admin_address().expect("an admin endpoint");
    let url = format!("http://{admin}/metrics");
    let report = advise(&["--from-metrics", &url]);
    let autopilot = &report["autopilot"];
    assert_eq!(autopilot["mode"], "alone", "{autopilot:#}");
    assert_eq!(autopilot["alone_because"], "[autopilot] share = false");
    let topic = autopilot["topics"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["topic"] == AUTO_TOPIC)
        .unwrap_or_else(|| panic!("{AUTO_TOPIC} missing: {autopilot:#}"));
    // Apache log lines shrink with every candidate: a codec, not as sent.
    assert_eq!(topic["choice"], choice.as_str(), "{topic:#}");
    assert_ne!(choice, "producer");
    assert!(topic["since"].as_str().unwrap().ends_with('Z'), "{topic:#}");
    let why = topic["why"].as_str().unwrap();
    assert!(why.contains(&choice), "{why}");
    assert_eq!(topic["adopted_from"], Value::Null);

    let text = Command::new(kpress_binary())
        .args(["advise", "--from-metrics", &url])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.contains("Autopilot (deciding alone: [autopilot] share = false): 1 auto topics."),
        "{text}"
    );
    assert!(
        text.contains(&format!("\"{AUTO_TOPIC}\": {choice} since ")),
        "{text}"
    );
}
