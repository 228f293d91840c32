//! `compression.type = "topic"` (the default of `[defaults]`) against real brokers: kpress
//! with nothing but `[listener]` and `[upstream]` (and `[admin]`, to read its metrics)
//! stores what each topic's own configuration names, converting in front of the broker
//! so that the broker stores the batches as sent.
//!
//! - On a 4.1.1 and a 3.9.1 broker: topics configured zstd (levels 3 and 10), lz4, gzip
//!   (level 1), `producer` and `uncompressed`, and one inheriting a broker-wide default
//!   set by `kafka-configs --entity-type brokers --entity-default`. Java and kcat
//!   producers in every other codec: DumpLogSegments finds every batch in the topic's
//!   codec, kpress's counters say it rewrote each of them (by topic, and by
//!   `target_source`), the zstd-10 topic stores fewer bytes than the zstd-3 one for the
//!   same records, `/policy` and `kpress doctor` show each topic's target, level and
//!   source, and every record reads back byte for byte.
//! - `kafka-configs --alter` from lz4 to zstd under a running idempotent producer:
//!   kpress follows within its refresh interval, nothing is lost or duplicated.
//! - With a refresh interval of an hour, the same alter is followed at once after a
//!   policy reload.
//! - A topic kpress's principal may not describe (ACLs on a SASL broker) passes as sent,
//!   counted as denied, while the others are converted.
//! - kafka-clients 2.0.1 (Produce v3-v6) into a zstd topic passes as sent (no zstd below
//!   Produce v7), the broker converts as before, and an lz4 topic is converted by kpress.
//! - With `[shadow]` on and no rule, a topic created after kpress started gets its own
//!   `topic` label from its first request, not `_other`.
//!
//! `first_batches_of_new_topics` (ignored, a measurement) times, for topics created
//! after kpress started, how long kpress takes to learn each one's configuration after
//! its first Produce request, and that request's latency against later ones and against
//! the broker directly:
//!
//!   KPRESS_BIN=target/release/kpress FIRST_TOPICS=30 FIRST_REPORT=path.md \
//!     cargo test -p kpress-tests --test topic_mode -- --ignored --exact \
//!     first_batches_of_new_topics --nocapture

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use kpress_batch::builder::{BatchBuilder, Record};
use kpress_codec::Codec;
use kpress_tests::cluster::{BrokerListener, ClusterSecurity};
use kpress_tests::compression::Compression;
use kpress_tests::data::{diff_records, write_records, Dataset};
use kpress_tests::dump::DumpedSegment;
use kpress_tests::java;
use kpress_tests::java_client::{values_of, ConsumeOptions, JavaClient, ProduceOptions};
use kpress_tests::kpress::{KpressProxy, KpressSetup, UpstreamSaslKeys};
use kpress_tests::pre_zstd_client::{pre_zstd_clients_version, pre_zstd_java_client};
use kpress_tests::process::run_ok;
use kpress_tests::raw_produce::produce_raw;
use kpress_tests::steady_producer::{tally, Accounting, SteadyOptions, SteadyProducer};
use kpress_tests::tls::{SaslMechanism, SaslUser};
use kpress_tests::{kafka_old_version, kafka_version, kcat, KafkaCluster};

const REWRITTEN: &str = "kpress_batches_rewritten_total";
const PASSED: &str = "kpress_batches_passed_total";
const BY_SOURCE: &str = "kpress_batches_by_target_source_total";
const LOOKUPS: &str = "kpress_topic_config_lookups_total";
const REFRESHES: &str = "kpress_topic_config_refreshes_total";
/// The shortest refresh interval kpress takes, so that tests wait little for it.
const REFRESH_MS: u64 = 1000;
/// Records per producer run (a client in one codec into one topic).
const CHUNK: usize = 300;

/// kpress in front of `upstream` with no policy at all: topic mode is the default.
fn two_key_setup(upstream: &[SocketAddr], node_ids: &[u32]) -> KpressSetup {
    KpressSetup {
        upstream_keys: vec![format!("topic_config_refresh_ms = {REFRESH_MS}")],
        ..KpressSetup::in_front_of(upstream, node_ids, "")
    }
}

fn start(setup: KpressSetup) -> KpressProxy {
    KpressProxy::start_with(setup).unwrap_or_else(|e| panic!("starting kpress: {e:#}"))
}

fn counter(proxy: &KpressProxy, name: &str, labels: &[(&str, &str)]) -> f64 {
    proxy
        .counter(name, labels)
        .unwrap_or_else(|e| panic!("scraping {name}: {e:#}\n{}", proxy.log()))
}

/// Waits until `done` holds, polling; false after `timeout`.
/// The plain one-node 4.1.1 broker of the tests that need nothing of it but their own
/// topics (each names its own), shared by them; a watchdog stops it when the test
/// process exits. The codec matrix sets a broker-wide default and has a broker of its own.
fn shared_cluster() -> &'static KafkaCluster {
    static CLUSTER: OnceLock<KafkaCluster> = OnceLock::new();
    CLUSTER.get_or_init(|| KafkaCluster::start(kafka_version(), 1).expect("starting Kafka"))
}

fn wait_until(timeout: Duration, mut done: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if done() {
            return true;
        }
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Kafka's `kafka-configs` (`kafka.admin.ConfigCommand`) against `cluster`'s PLAINTEXT
/// listener with `args`.
fn kafka_configs(cluster: &KafkaCluster, args: &[&str]) {
    let mut cmd = java::client_command(cluster.version(), &[]);
    cmd.arg("kafka.admin.ConfigCommand")
        .args(["--bootstrap-server", &cluster.bootstrap()])
        .args(args);
    run_ok(&mut cmd, Duration::from_secs(120))
        .unwrap_or_else(|e| panic!("kafka-configs {args:?}: {e:#}"));
}

/// Creates `topic` (one partition) with `compression.type=compression`.
fn create_topic(java: &JavaClient, bootstrap: &str, topic: &str, compression: &str) {
    java.create_topic(
        bootstrap,
        topic,
        1,
        &[&format!("compression.type={compression}")],
    )
    .unwrap_or_else(|e| panic!("creating {topic}: {e:#}"));
}

/// `GET path` on kpress's admin endpoint (the `[admin] bind` of its config file).
fn admin_get(proxy: &KpressProxy, path: &str) -> String {
    let config = std::fs::read_to_string(proxy.config_file().expect("a config file"))
        .expect("kpress's config");
    let admin = config
        .split("[admin]")
        .nth(1)
        .and_then(|s| s.lines().find_map(|l| l.trim().strip_prefix("bind = ")))
        .map(|v| v.trim_matches('"').to_owned())
        .expect("an [admin] bind");
    let mut stream = TcpStream::connect(&admin).expect("connect to kpress's admin port");
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    write!(stream, "GET {path} HTTP/1.0\r\nHost: {admin}\r\n\r\n").expect("send");
    let mut response = String::new();
    stream.read_to_string(&mut response).expect("read");
    response
        .split_once("\r\n\r\n")
        .map(|(_, body)| body.to_owned())
        .unwrap_or_default()
}

/// Produces one small batch into `topic` through kpress so that it starts reading the
/// cluster's topic configs, and waits until one full read has been answered: the
/// batches that follow find every topic known.
fn warm_up(proxy: &KpressProxy, java: &JavaClient, topic: &str, properties: &[String]) {
    java.produce_records(
        &proxy.bootstrap(),
        topic,
        &["warm-up"],
        &ProduceOptions {
            properties: properties.to_vec(),
            ..ProduceOptions::default()
        },
    )
    .unwrap_or_else(|e| panic!("warm-up through kpress: {e:#}\n{}", proxy.log()));
    assert!(
        wait_until(Duration::from_secs(30), || counter(
            proxy,
            REFRESHES,
            &[("result", "ok")]
        ) >= 1.0),
        "kpress never read the cluster's topic configs\n{}",
        proxy.log()
    );
}

/// The topics of the codec matrix: name, `kafka-configs` settings of its own, the codec
/// stored (`None`: as the producer sent it) and the `target_source` kpress should find.
struct MatrixTopic {
    name: &'static str,
    configs: &'static [&'static str],
    stores: Option<Compression>,
    source: &'static str,
}

/// The broker-wide default the last topic inherits (no other topic names snappy).
const BROKER_DEFAULT: Compression = Compression::Snappy;

const MATRIX: [MatrixTopic; 7] = [
    MatrixTopic {
        name: "tm.zstd-3",
        configs: &["compression.type=zstd", "compression.zstd.level=3"],
        stores: Some(Compression::Zstd),
        source: "topic",
    },
    MatrixTopic {
        name: "tm.zstd-10",
        configs: &["compression.type=zstd", "compression.zstd.level=10"],
        stores: Some(Compression::Zstd),
        source: "topic",
    },
    MatrixTopic {
        name: "tm.lz4",
        configs: &["compression.type=lz4"],
        stores: Some(Compression::Lz4),
        source: "topic",
    },
    MatrixTopic {
        name: "tm.gzip-1",
        configs: &["compression.type=gzip", "compression.gzip.level=1"],
        stores: Some(Compression::Gzip),
        source: "topic",
    },
    MatrixTopic {
        name: "tm.producer",
        configs: &["compression.type=producer"],
        stores: None,
        source: "topic",
    },
    MatrixTopic {
        name: "tm.uncompressed",
        configs: &["compression.type=uncompressed"],
        stores: Some(Compression::None),
        source: "topic",
    },
    MatrixTopic {
        name: "tm.broker-default",
        configs: &[],
        stores: Some(BROKER_DEFAULT),
        source: "broker_default",
    },
];

/// The codecs producers send into `topic`: every codec but the one it stores.
fn sources_for(topic: &MatrixTopic) -> Vec<Compression> {
    Compression::ALL
        .into_iter()
        .filter(|c| Some(*c) != topic.stores)
        .collect()
}

/// The same body on each broker version: see the file's documentation.
fn topic_mode_stores_each_topics_codec(version: &str) {
    let cluster = KafkaCluster::start(version, 1).expect("starting Kafka");
    let java = JavaClient::new(version);
    let admin = cluster.bootstrap();
    // The broker-wide default first, then topics with their own settings (each topic's
    // own compression.type wins over it).
    kafka_configs(
        &cluster,
        &[
            "--entity-type",
            "brokers",
            "--entity-default",
            "--alter",
            "--add-config",
            &format!("compression.type={}", BROKER_DEFAULT.name()),
        ],
    );
    for topic in &MATRIX {
        java.create_topic(&admin, topic.name, 1, topic.configs)
            .unwrap_or_else(|e| panic!("creating {}: {e:#}", topic.name));
    }
    let warm = "tm.warm-up";
    create_topic(&java, &admin, warm, "producer");
    let proxy = start(two_key_setup(
        &cluster.node_addresses(),
        &cluster.node_ids(),
    ));
    warm_up(&proxy, &java, warm, &[]);
    let pending_before = counter(&proxy, PASSED, &[("reason", "topic_config_pending")]);

    let all = Dataset::ApacheAccessLog.records();
    let work = tempfile::tempdir().expect("temp dir");
    // Per topic, the records in the order they were produced, with the codec sent.
    let mut expected: BTreeMap<&str, Vec<(Compression, Vec<u8>)>> = BTreeMap::new();
    let mut failures = Vec::new();
    let bootstrap = proxy.bootstrap();
    // Java: one producer per codec into every topic that does not store that codec.
    for (i, codec) in Compression::ALL.into_iter().enumerate() {
        let chunk = &all[i * CHUNK..(i + 1) * CHUNK];
        let file = write_records(&work.path().join(format!("java-{codec}")), chunk);
        let topics: Vec<&str> = MATRIX
            .iter()
            .filter(|t| sources_for(t).contains(&codec))
            .map(|t| t.name)
            .collect();
        let options = ProduceOptions {
            compression: codec,
            batch_size: 16384,
            ..ProduceOptions::default()
        };
        match java.produce_file_to_topics(&bootstrap, &topics, &file, &options) {
            Ok(_) => {
                for topic in &topics {
                    let records = expected.entry(topic).or_default();
                    records.extend(chunk.iter().map(|r| (codec, r.clone())));
                }
            }
            Err(e) => failures.push(format!("Java {codec} into {topics:?}: {e:#}")),
        }
    }
    // kcat (librdkafka, Produce v7): each codec into each topic, other records.
    for (i, codec) in Compression::ALL.into_iter().enumerate() {
        let start = (5 + i) * CHUNK;
        let chunk = &all[start..start + CHUNK];
        let file = write_records(&work.path().join(format!("kcat-{codec}")), chunk);
        for topic in MATRIX.iter().filter(|t| sources_for(t).contains(&codec)) {
            match kcat::produce_file(&bootstrap, topic.name, 0, codec, &file, &[]) {
                Ok(()) => expected
                    .entry(topic.name)
                    .or_default()
                    .extend(chunk.iter().map(|r| (codec, r.clone()))),
                Err(e) => failures.push(format!("kcat {codec} into {}: {e:#}", topic.name)),
            }
        }
    }

    let names: Vec<&str> = MATRIX.iter().map(|t| t.name).collect();
    let dumps = cluster.dump_partition_0(&names).expect("DumpLogSegments");
    let mut stored_bytes = BTreeMap::new();
    for (topic, dump) in MATRIX.iter().zip(&dumps) {
        let records = expected.get(topic.name).cloned().unwrap_or_default();
        failures.extend(stored_problems(topic, dump, &records));
        stored_bytes.insert(topic.name, dump.batches.iter().map(|b| b.size).sum::<i64>());
        // Every batch into a topic that stores a codec was rewritten by kpress, so the
        // broker stored it as sent.
        let data_batches = dump.batches.iter().filter(|b| !b.is_control).count() as f64;
        let rewritten = counter(&proxy, REWRITTEN, &[("topic", topic.name)]);
        match topic.stores {
            Some(codec) => {
                let into = counter(
                    &proxy,
                    REWRITTEN,
                    &[("topic", topic.name), ("to", codec.name())],
                );
                if into != data_batches || rewritten != data_batches {
                    failures.push(format!(
                        "{}: kpress rewrote {rewritten} batches ({into} into {codec}), {data_batches} stored",
                        topic.name
                    ));
                }
            }
            None if rewritten != 0.0 => failures.push(format!(
                "{}: kpress rewrote {rewritten} batches of a producer topic",
                topic.name
            )),
            None => {}
        }
    }
    // KIP-390 levels are not in DumpLogSegments: the same records at zstd-10 take fewer
    // bytes than at zstd-3 only if kpress wrote each topic's own level.
    let (zstd3, zstd10) = (stored_bytes["tm.zstd-3"], stored_bytes["tm.zstd-10"]);
    if zstd10 >= zstd3 {
        failures.push(format!(
            "zstd-10 topic stores {zstd10} bytes, zstd-3 topic {zstd3}: the level was not followed"
        ));
    }
    let pending = counter(&proxy, PASSED, &[("reason", "topic_config_pending")]) - pending_before;
    if pending != 0.0 {
        failures.push(format!(
            "{pending} batches passed as pending after the topics were read"
        ));
    }
    for source in ["topic", "broker_default"] {
        if counter(&proxy, BY_SOURCE, &[("target_source", source)]) == 0.0 {
            failures.push(format!("no batch counted with target_source=\"{source}\""));
        }
    }
    if counter(&proxy, BY_SOURCE, &[("target_source", "rule")]) != 0.0 {
        failures.push("batches counted with target_source=\"rule\" without a rule".into());
    }
    // Read back through kpress with the broker's own version of the Java client.
    let total: usize = expected.values().map(Vec::len).sum();
    match java.consume(
        &bootstrap,
        &names,
        total,
        &ConsumeOptions {
            timeout: Duration::from_secs(120),
            ..ConsumeOptions::default()
        },
    ) {
        Ok(consumed) => {
            for topic in &names {
                let want: Vec<&[u8]> = expected
                    .get(topic)
                    .map(|r| r.iter().map(|(_, v)| v.as_slice()).collect())
                    .unwrap_or_default();
                if let Some(diff) = diff_records(&want, &values_of(&consumed, topic)) {
                    failures.push(format!("{topic}: Java consumer through kpress: {diff}"));
                }
            }
        }
        Err(e) => failures.push(format!("Java consumer through kpress: {e:#}")),
    }
    failures.extend(policy_problems(&proxy));
    failures.extend(doctor_problems(&proxy));
    eprintln!(
        "Kafka {version}: stored bytes {stored_bytes:?}; by target_source topic {} broker_default {}",
        counter(&proxy, BY_SOURCE, &[("target_source", "topic")]),
        counter(&proxy, BY_SOURCE, &[("target_source", "broker_default")])
    );
    assert!(
        failures.is_empty(),
        "Kafka {version}: {} problem(s):\n{}\n{}\n{}",
        failures.len(),
        failures.join("\n"),
        proxy.log(),
        cluster.describe_logs()
    );
}

/// `/policy`'s `learned_topics` entry for `topic`, if it lists one.
fn learned_topic(proxy: &KpressProxy, topic: &str) -> Option<serde_json::Value> {
    let policy: serde_json::Value = serde_json::from_str(&admin_get(proxy, "/policy")).ok()?;
    policy["learned_topics"]
        .as_array()?
        .iter()
        .find(|t| t["topic"] == topic)
        .cloned()
}

/// What `/policy` gets wrong of the matrix's topics: each is listed with the target,
/// level and source kpress learned (levels are seen nowhere else).
fn policy_problems(proxy: &KpressProxy) -> Vec<String> {
    let level = |name: &str| match name {
        "tm.zstd-3" => Some(3),
        "tm.zstd-10" => Some(10),
        "tm.gzip-1" => Some(1),
        // Kafka's default lz4 level.
        "tm.lz4" => Some(9),
        _ => None,
    };
    let mut problems = Vec::new();
    for topic in &MATRIX {
        let Some(learned) = learned_topic(proxy, topic.name) else {
            problems.push(format!("/policy lists no learned topic {}", topic.name));
            continue;
        };
        let target = topic.stores.map_or("producer", Compression::name);
        let wanted = serde_json::json!({
            "target": target,
            "level": level(topic.name),
            "target_source": topic.source,
        });
        let got = serde_json::json!({
            "target": learned["target"],
            "level": learned["level"],
            "target_source": learned["target_source"],
        });
        if got != wanted {
            problems.push(format!(
                "/policy: {} is {got}, want {wanted} ({learned})",
                topic.name
            ));
        }
    }
    problems
}

/// What `kpress doctor --format json` gets wrong of the matrix's topics: each has the
/// codec kpress writes and where it came from, and none draws a problem (kpress writes
/// the topic's own codec, so the broker keeps what kpress sends).
fn doctor_problems(proxy: &KpressProxy) -> Vec<String> {
    let mut cmd = std::process::Command::new(kpress_tests::kpress::kpress_binary());
    cmd.args(["doctor", "--format", "json", "--config"])
        .arg(proxy.config_file().expect("a config file"));
    let output = match cmd.output() {
        Ok(output) => output,
        Err(e) => return vec![format!("kpress doctor: {e}")],
    };
    let text = String::from_utf8_lossy(&output.stdout);
    let Ok(report) = serde_json::from_str::<serde_json::Value>(&text) else {
        return vec![format!("kpress doctor printed no JSON: {text}")];
    };
    let mut problems = Vec::new();
    if report["problems"] != 0 || !output.status.success() {
        problems.push(format!(
            "kpress doctor found problems ({}): {}",
            output.status, report["findings"]
        ));
    }
    for topic in &MATRIX {
        let found = report["topics"]
            .as_array()
            .and_then(|t| t.iter().find(|t| t["name"] == topic.name));
        let wanted = (
            topic.stores.map_or("producer", Compression::name),
            topic.source,
        );
        match found {
            Some(t) if t["policy_compression"] == wanted.0 && t["target_source"] == wanted.1 => {}
            other => problems.push(format!(
                "kpress doctor: {} is {other:?}, want {wanted:?}",
                topic.name
            )),
        }
    }
    problems
}

/// What is wrong with `topic`'s stored segment: DumpLogSegments' own findings, a batch
/// invalid or in another codec than the topic stores (a `producer` topic: the codec the
/// batch's records were sent in), records missing, extra or different.
fn stored_problems(
    topic: &MatrixTopic,
    dump: &DumpedSegment,
    records: &[(Compression, Vec<u8>)],
) -> Vec<String> {
    let mut problems: Vec<String> = dump
        .problems
        .iter()
        .map(|p| format!("{}: DumpLogSegments: {p}", topic.name))
        .collect();
    let mut index = 0;
    for batch in dump.batches.iter().filter(|b| !b.is_control) {
        let sent = records.get(index).map(|(c, _)| *c);
        index += batch.records.len();
        let want = topic.stores.or(sent);
        // librdkafka sends a batch of one record uncompressed whatever its codec.
        let single = batch.records.len() == 1 && batch.compresscodec == "none";
        let ok = want.is_some_and(|c| batch.compresscodec == c.dump_name())
            || (topic.stores.is_none() && single);
        if !batch.is_valid || !ok {
            problems.push(format!(
                "{}: batch at {} ({} records) stored as {}, valid {}; expected {}",
                topic.name,
                batch.base_offset,
                batch.count,
                batch.compresscodec,
                batch.is_valid,
                want.map_or("?", Compression::name)
            ));
        }
    }
    let want: Vec<&[u8]> = records.iter().map(|(_, v)| v.as_slice()).collect();
    if let Some(diff) = diff_records(&want, &dump.payloads()) {
        problems.push(format!("{}: stored records: {diff}", topic.name));
    }
    problems
}

#[test]
fn topic_mode_on_kafka_4_1() {
    topic_mode_stores_each_topics_codec(kafka_version());
}

#[test]
fn topic_mode_on_kafka_3_9() {
    topic_mode_stores_each_topics_codec(kafka_old_version());
}

/// An idempotent gzip producer runs into an lz4 topic through kpress; the topic is
/// altered to zstd. kpress rewrites into zstd within its refresh interval (plus the
/// time a batch takes), the stored batches are lz4 then zstd, and every acknowledged
/// record is read back exactly once.
#[test]
fn an_altered_topic_is_followed_under_a_running_producer() {
    let cluster = shared_cluster();
    let java = JavaClient::new(kafka_version());
    let topic = "tm.altered";
    create_topic(&java, &cluster.bootstrap(), topic, "lz4");
    let proxy = start(two_key_setup(
        &cluster.node_addresses(),
        &cluster.node_ids(),
    ));
    let lines = Dataset::ApacheAccessLog.path();
    let mut producer = SteadyProducer::start(
        &proxy.bootstrap(),
        topic,
        "altered",
        &SteadyOptions::new(Compression::Gzip, 2000, &lines),
    )
    .unwrap_or_else(|e| panic!("starting the producer: {e:#}"));
    let mut failures = Vec::new();
    let step = Duration::from_secs(60);
    producer
        .wait_acked(2000, step)
        .unwrap_or_else(|e| panic!("{e:#}\n{}", proxy.log()));
    let into = |codec: &str| counter(&proxy, REWRITTEN, &[("topic", topic), ("to", codec)]);
    if !wait_until(step, || into("lz4") > 0.0) {
        failures.push("kpress never rewrote into the topic's lz4".to_owned());
    }
    kafka_configs(
        cluster,
        &[
            "--entity-type",
            "topics",
            "--entity-name",
            topic,
            "--alter",
            "--add-config",
            "compression.type=zstd",
        ],
    );
    let altered = Instant::now();
    // The refresh interval, a batch's linger and a request's round trip: a second is a
    // generous margin on a busy machine.
    let bound = Duration::from_millis(REFRESH_MS) + Duration::from_secs(2);
    let followed = wait_until(Duration::from_secs(30), || into("zstd") > 0.0);
    let took = altered.elapsed();
    eprintln!("kpress rewrote into zstd {took:?} after kafka-configs returned");
    if !followed || took > bound {
        failures.push(format!(
            "kpress followed the alter after {took:?} (followed: {followed}), bound {bound:?}"
        ));
    }
    let lz4_at_switch = into("lz4");
    producer
        .wait_more_acked(4000, step)
        .unwrap_or_else(|e| panic!("{e:#}\n{}", proxy.log()));
    if into("lz4") > lz4_at_switch {
        failures.push(format!(
            "kpress kept rewriting into lz4 after it first wrote zstd ({lz4_at_switch} then {})",
            into("lz4")
        ));
    }
    let report = producer
        .finish(step)
        .unwrap_or_else(|e| panic!("{e:#}\n{}", proxy.log()));
    match tally(&proxy.bootstrap(), topic, "altered", &lines, step) {
        Ok(read) => {
            let accounting = Accounting::of(&report, &read);
            eprintln!("{accounting}");
            failures.extend(accounting.problems());
        }
        Err(e) => failures.push(format!("reading {topic} back: {e:#}")),
    }
    // Stored: lz4 until the alter, zstd after, never lz4 again.
    let dump = &cluster.dump_partition_0(&[topic]).expect("DumpLogSegments")[0];
    let codecs: Vec<&str> = dump
        .batches
        .iter()
        .filter(|b| !b.is_control)
        .map(|b| b.compresscodec.as_str())
        .collect();
    let first_zstd = codecs.iter().position(|c| *c == "zstd");
    let wrong = codecs
        .iter()
        .enumerate()
        .filter(|(i, c)| match first_zstd {
            Some(z) if *i >= z => **c != "zstd",
            _ => **c != "lz4",
        })
        .count();
    if first_zstd.is_none() || wrong != 0 || dump.batches.iter().any(|b| !b.is_valid) {
        failures.push(format!(
            "stored batches not lz4 then zstd: {wrong} out of place, first zstd at {first_zstd:?} of {}",
            codecs.len()
        ));
    }
    proxy.assert_no_failures(&failures, cluster);
}

/// kpress refreshing topic configs once an hour: after `kafka-configs --alter` from lz4
/// to zstd it keeps writing lz4 (the broker then converts, as without kpress) until its
/// policy file is replaced, and then writes zstd at once. Every record is stored.
#[test]
fn a_policy_reload_reads_topic_configs_at_once() {
    let cluster = shared_cluster();
    let java = JavaClient::new(kafka_version());
    let (topic, warm) = ("tm.reloaded", "tm.reload-warm-up");
    create_topic(&java, &cluster.bootstrap(), topic, "lz4");
    create_topic(&java, &cluster.bootstrap(), warm, "producer");
    let proxy = start(KpressSetup {
        upstream_keys: vec!["topic_config_refresh_ms = 3600000".to_owned()],
        ..KpressSetup::in_front_of(&cluster.node_addresses(), &cluster.node_ids(), "")
    });
    warm_up(&proxy, &java, warm, &[]);
    let all = Dataset::ApacheAccessLog.records();
    let work = tempfile::tempdir().expect("temp dir");
    let mut expected: Vec<Vec<u8>> = Vec::new();
    let mut part = 0;
    let mut produce = |expected: &mut Vec<Vec<u8>>| {
        let chunk = &all[part * CHUNK..(part + 1) * CHUNK];
        part += 1;
        let file = write_records(&work.path().join(format!("part-{part}")), chunk);
        kcat::produce_file(&proxy.bootstrap(), topic, 0, Compression::Gzip, &file, &[])
            .unwrap_or_else(|e| panic!("kcat through kpress: {e:#}\n{}", proxy.log()));
        expected.extend_from_slice(chunk);
    };
    let into = |codec: &str| counter(&proxy, REWRITTEN, &[("topic", topic), ("to", codec)]);
    let mut failures = Vec::new();
    produce(&mut expected);
    if into("lz4") == 0.0 {
        failures.push("kpress did not rewrite into the topic's lz4".to_owned());
    }
    kafka_configs(
        cluster,
        &[
            "--entity-type",
            "topics",
            "--entity-name",
            topic,
            "--alter",
            "--add-config",
            "compression.type=zstd",
        ],
    );
    produce(&mut expected);
    if into("zstd") != 0.0 {
        failures.push("kpress followed the alter before its refresh or a reload".to_owned());
    }
    let config = proxy.config_file().expect("a config file");
    let text = std::fs::read_to_string(&config).expect("kpress's config");
    let applied = || {
        counter(
            &proxy,
            "kpress_policy_reloads_total",
            &[("result", "applied")],
        )
    };
    let before = applied();
    // Replaced in one rename, as editors and config maps do.
    let staged = config.with_extension("staged");
    std::fs::write(&staged, format!("{text}\n# reloaded\n")).expect("write the policy");
    std::fs::rename(&staged, &config).expect("replace the policy");
    let reloaded = Instant::now();
    assert!(
        wait_until(Duration::from_secs(30), || applied() > before),
        "the policy was not reloaded\n{}",
        proxy.log()
    );
    let followed = wait_until(Duration::from_secs(30), || {
        produce(&mut expected);
        into("zstd") > 0.0
    });
    let took = reloaded.elapsed();
    eprintln!("kpress wrote zstd {took:?} after the policy file was replaced");
    if !followed || took > Duration::from_secs(5) {
        failures.push(format!(
            "kpress wrote zstd {took:?} after the reload (followed: {followed})"
        ));
    }
    let dump = &cluster.dump_partition_0(&[topic]).expect("DumpLogSegments")[0];
    // lz4 from kpress before the alter, zstd after (the broker's or kpress's).
    let codecs: Vec<&str> = dump
        .batches
        .iter()
        .map(|b| b.compresscodec.as_str())
        .collect();
    if codecs.first() != Some(&"lz4")
        || codecs
            .iter()
            .skip_while(|c| **c == "lz4")
            .any(|c| *c != "zstd")
        || dump.batches.iter().any(|b| !b.is_valid)
    {
        failures.push(format!("stored batches: {codecs:?}"));
    }
    if let Some(diff) = diff_records(&expected, &dump.payloads()) {
        failures.push(format!("stored records: {diff}"));
    }
    proxy.assert_no_failures(&failures, cluster);
}

/// kpress's own login and the clients' one on a broker with ACLs.
fn kpress_user() -> SaslUser {
    SaslUser::new(SaslMechanism::Plain, "kpress", "kpress-secret")
}

fn alice() -> SaslUser {
    SaslUser::new(SaslMechanism::Plain, "alice", "alice-secret")
}

/// Kafka's `kafka-acls --add` against `cluster`'s PLAINTEXT listener (whose ANONYMOUS
/// principal is a super user).
fn add_acl(cluster: &KafkaCluster, args: &[&str]) {
    // The tool moved from core to tools in 4.0.
    let class = if cluster.version().starts_with('3') {
        "kafka.admin.AclCommand"
    } else {
        "org.apache.kafka.tools.AclCommand"
    };
    let mut cmd = java::client_command(cluster.version(), &[]);
    cmd.arg(class)
        .args([
            "--bootstrap-server",
            &cluster.bootstrap(),
            "--add",
            "--force",
        ])
        .args(args);
    run_ok(&mut cmd, Duration::from_secs(120))
        .unwrap_or_else(|e| panic!("kafka-acls {args:?}: {e:#}"));
}

/// A SASL/PLAIN broker with the StandardAuthorizer: kpress's principal may describe
/// every topic but read the configs of `open.*` topics only. The batches of a zstd
/// topic it may not describe pass as sent (the broker converts them, as without
/// kpress), counted `topic_config_denied`; the `open.*` topics are converted by kpress.
#[test]
fn a_topic_kpress_may_not_describe_passes_as_sent() {
    let security = ClusterSecurity {
        listeners: vec![BrokerListener::SaslPlaintext],
        sasl_users: vec![kpress_user(), alice()],
    };
    let properties =
        "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer\n\
                      super.users=User:ANONYMOUS\n";
    let cluster = KafkaCluster::start_with_properties(kafka_version(), 1, &security, properties)
        .unwrap_or_else(|e| panic!("starting Kafka with ACLs: {e:#}"));
    let java = JavaClient::new(kafka_version());
    let (open_zstd, open_lz4, closed) = ("open.zstd", "open.lz4", "closed.zstd");
    create_topic(&java, &cluster.bootstrap(), open_zstd, "zstd");
    create_topic(&java, &cluster.bootstrap(), open_lz4, "lz4");
    create_topic(&java, &cluster.bootstrap(), closed, "zstd");
    add_acl(
        &cluster,
        &[
            "--allow-principal",
            "User:alice",
            "--operation",
            "Write",
            "--operation",
            "Describe",
            "--operation",
            "Read",
            "--topic",
            "*",
        ],
    );
    add_acl(
        &cluster,
        &[
            "--allow-principal",
            "User:alice",
            "--operation",
            "IdempotentWrite",
            "--cluster",
        ],
    );
    add_acl(
        &cluster,
        &[
            "--allow-principal",
            "User:kpress",
            "--operation",
            "Describe",
            "--topic",
            "*",
        ],
    );
    add_acl(
        &cluster,
        &[
            "--allow-principal",
            "User:kpress",
            "--operation",
            "DescribeConfigs",
            "--resource-pattern-type",
            "prefixed",
            "--topic",
            "open.",
        ],
    );
    let proxy = start(KpressSetup {
        upstream_sasl: Some(UpstreamSaslKeys::with_password_file(&kpress_user())),
        ..two_key_setup(&cluster.sasl_addresses(), &cluster.node_ids())
    });
    let sasl = vec![
        "security.protocol=SASL_PLAINTEXT".to_owned(),
        "sasl.mechanism=PLAIN".to_owned(),
        "sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required \
         username=\"alice\" password=\"alice-secret\";"
            .to_owned(),
    ];
    warm_up(&proxy, &java, open_lz4, &sasl);
    let denied_before = counter(&proxy, PASSED, &[("reason", "topic_config_denied")]);
    let expected: Vec<Vec<u8>> = Dataset::ApacheAccessLog.records()[..2000].to_vec();
    let work = tempfile::tempdir().expect("temp dir");
    let file = write_records(&work.path().join("records"), &expected);
    let topics = [open_zstd, closed];
    java.produce_file_to_topics(
        &proxy.bootstrap(),
        &topics,
        &file,
        &ProduceOptions {
            compression: Compression::Gzip,
            batch_size: 16384,
            properties: sasl.clone(),
            ..ProduceOptions::default()
        },
    )
    .unwrap_or_else(|e| panic!("Java with SASL through kpress: {e:#}\n{}", proxy.log()));

    let mut failures = Vec::new();
    let dumps = cluster.dump_partition_0(&topics).expect("DumpLogSegments");
    for (topic, dump) in topics.iter().zip(&dumps) {
        // Stored zstd either way: by kpress, or by the broker for the closed topic.
        failures.extend(dump.problems_storing(topic, Compression::Zstd, &expected));
    }
    let closed_batches = dumps[1].batches.len() as f64;
    let open_batches = dumps[0].batches.len() as f64;
    let denied = counter(&proxy, PASSED, &[("reason", "topic_config_denied")]) - denied_before;
    if denied != closed_batches {
        failures.push(format!(
            "{denied} batches passed as topic_config_denied, {closed_batches} stored in {closed}"
        ));
    }
    if counter(&proxy, REWRITTEN, &[("topic", closed)]) != 0.0 {
        failures.push(format!("kpress rewrote batches of {closed}"));
    }
    let open = counter(&proxy, REWRITTEN, &[("topic", open_zstd), ("to", "zstd")]);
    if open != open_batches {
        failures.push(format!(
            "kpress rewrote {open} batches of {open_zstd} into zstd, {open_batches} stored"
        ));
    }
    let state = learned_topic(&proxy, closed).map(|t| t["topic_config"]["state"].clone());
    if state != Some(serde_json::json!("denied")) {
        failures.push(format!(
            "/policy shows {closed}'s config as {state:?}, not denied"
        ));
    }
    if counter(&proxy, LOOKUPS, &[("result", "denied")]) < 1.0 {
        failures.push("no topic config lookup counted as denied".to_owned());
    }
    if counter(&proxy, BY_SOURCE, &[("target_source", "unresolved")]) < closed_batches {
        failures.push("the closed topic's batches are not counted as unresolved".to_owned());
    }
    match java.consume(
        &proxy.bootstrap(),
        &topics,
        expected.len() * 2,
        &ConsumeOptions {
            properties: sasl,
            ..ConsumeOptions::default()
        },
    ) {
        Ok(records) => {
            for topic in topics {
                if let Some(diff) = diff_records(&expected, &values_of(&records, topic)) {
                    failures.push(format!("{topic}: read back through kpress: {diff}"));
                }
            }
        }
        Err(e) => failures.push(format!("reading back through kpress: {e:#}")),
    }
    proxy.assert_no_failures(&failures, &cluster);
}

/// kafka-clients 2.0.1 produces with Produce v3-v6, where zstd is refused: into a zstd
/// topic kpress passes its batches as sent (counted `zstd_needs_produce_v7`) and the
/// broker converts them as it always did; into an lz4 topic kpress converts them. The
/// current client reads every record back (2.0.1 cannot fetch zstd).
#[test]
fn an_old_client_into_a_zstd_topic_is_converted_by_the_broker() {
    let cluster = shared_cluster();
    let current = JavaClient::new(kafka_version());
    let old = pre_zstd_java_client();
    let (zstd_topic, lz4_topic) = ("tm.old-zstd", "tm.old-lz4");
    create_topic(&current, &cluster.bootstrap(), zstd_topic, "zstd");
    create_topic(&current, &cluster.bootstrap(), lz4_topic, "lz4");
    let warm = "tm.old-warm-up";
    create_topic(&current, &cluster.bootstrap(), warm, "producer");
    let proxy = start(two_key_setup(
        &cluster.node_addresses(),
        &cluster.node_ids(),
    ));
    warm_up(&proxy, &current, warm, &[]);
    let v7_before = counter(&proxy, PASSED, &[("reason", "zstd_needs_produce_v7")]);
    let lz4_before = counter(&proxy, REWRITTEN, &[("topic", lz4_topic)]);
    let expected: Vec<Vec<u8>> = Dataset::ApacheAccessLog.records()[..3000].to_vec();
    let work = tempfile::tempdir().expect("temp dir");
    let file = write_records(&work.path().join("records"), &expected);
    let mut failures = Vec::new();
    let topics = [zstd_topic, lz4_topic];
    if let Err(e) = old.produce_file_to_topics(
        &proxy.bootstrap(),
        &topics,
        &file,
        &ProduceOptions {
            compression: Compression::Gzip,
            batch_size: 16384,
            ..ProduceOptions::default()
        },
    ) {
        failures.push(format!(
            "kafka-clients {} through kpress: {e:#}",
            pre_zstd_clients_version()
        ));
    }
    let dumps = cluster.dump_partition_0(&topics).expect("DumpLogSegments");
    failures.extend(dumps[0].problems_storing(zstd_topic, Compression::Zstd, &expected));
    failures.extend(dumps[1].problems_storing(lz4_topic, Compression::Lz4, &expected));
    let passed = counter(&proxy, PASSED, &[("reason", "zstd_needs_produce_v7")]) - v7_before;
    if passed != dumps[0].batches.len() as f64 {
        failures.push(format!(
            "{passed} batches passed as zstd_needs_produce_v7, {} stored in {zstd_topic}",
            dumps[0].batches.len()
        ));
    }
    if counter(&proxy, REWRITTEN, &[("topic", zstd_topic)]) != 0.0 {
        failures.push(format!("kpress rewrote batches of {zstd_topic}"));
    }
    let lz4 = counter(&proxy, REWRITTEN, &[("topic", lz4_topic), ("to", "lz4")]) - lz4_before;
    if lz4 != dumps[1].batches.len() as f64 {
        failures.push(format!(
            "kpress rewrote {lz4} batches into lz4, {} stored in {lz4_topic}",
            dumps[1].batches.len()
        ));
    }
    match current.read_back_problems(
        &proxy.bootstrap(),
        &topics,
        &expected,
        &ConsumeOptions::default(),
        "kafka-clients 4.1.1",
    ) {
        Ok(problems) => failures.extend(problems),
        Err(e) => failures.push(format!("reading back through kpress: {e:#}")),
    }
    proxy.assert_no_failures(&failures, cluster);
}

/// With `[shadow]` on and no rule at all, a topic created after kpress started and
/// produced into gets a `topic` label of its own in `kpress_produce_bytes_in_total`,
/// `kpress_batches_total` and the shadow trials within the refresh interval; deleted
/// and created again as lz4 it is rewritten into lz4; no client-invented name gets a
/// label.
#[test]
fn a_topic_created_after_kpress_started_is_labelled_by_name() {
    let cluster = shared_cluster();
    let java = JavaClient::new(kafka_version());
    let warm = "tm.labels-warm";
    create_topic(&java, &cluster.bootstrap(), warm, "producer");
    let proxy = start(KpressSetup {
        rules: "[shadow]\ncandidates = [\"zstd:3\"]\nsample = 1.0\nmax_cpu_fraction = 1.0\n"
            .to_owned(),
        ..two_key_setup(&cluster.node_addresses(), &cluster.node_ids())
    });
    warm_up(&proxy, &java, warm, &[]);
    let topic = "tm.created-later";
    create_topic(&java, &cluster.bootstrap(), topic, "zstd");
    let created = Instant::now();
    let records: Vec<Vec<u8>> = Dataset::ApacheAccessLog.records()[..500].to_vec();
    let work = tempfile::tempdir().expect("temp dir");
    let file = write_records(&work.path().join("records"), &records);
    let mut failures = Vec::new();
    let labelled = |name: &str| counter(&proxy, name, &[("topic", topic)]) > 0.0;
    let other = || {
        counter(
            &proxy,
            "kpress_produce_bytes_in_total",
            &[("topic", "_other")],
        )
    };
    let other_before = other();
    // Produce until the label shows. The producer's own Metadata request names the
    // topic, so the first run's bytes already carry it, before any refresh lists it.
    let mut rounds = 0;
    let seen = wait_until(Duration::from_secs(30), || {
        rounds += 1;
        kcat::produce_file(&proxy.bootstrap(), topic, 0, Compression::Gzip, &file, &[])
            .unwrap_or_else(|e| panic!("kcat through kpress: {e:#}\n{}", proxy.log()));
        labelled("kpress_produce_bytes_in_total")
    });
    let took = created.elapsed();
    eprintln!("{topic} labelled after {took:?} ({rounds} kcat runs)");
    if rounds != 1 || other() != other_before {
        failures.push(format!(
            "the first producer's bytes were not all labelled {topic}: {rounds} kcat runs, \
             _other grew by {} B",
            other() - other_before
        ));
    }
    let bound = Duration::from_millis(REFRESH_MS) + Duration::from_secs(5);
    if !seen || took > bound {
        failures.push(format!(
            "{topic} had no label of its own {took:?} after it was created (bound {bound:?})"
        ));
    }
    // Shadow trials run after the batch is forwarded: give them a moment.
    for name in ["kpress_batches_total", "kpress_shadow_batches_total"] {
        if !wait_until(Duration::from_secs(10), || labelled(name)) {
            failures.push(format!("{name} has no topic=\"{topic}\""));
        }
    }
    // Deleted and created again with another codec: kpress follows the new topic.
    let mut cmd = java::client_command(cluster.version(), &[]);
    cmd.arg("org.apache.kafka.tools.TopicCommand")
        .args(["--bootstrap-server", &cluster.bootstrap()])
        .args(["--delete", "--topic", topic]);
    run_ok(&mut cmd, Duration::from_secs(120))
        .unwrap_or_else(|e| panic!("deleting {topic}: {e:#}"));
    let recreate = Instant::now();
    let created_again = wait_until(Duration::from_secs(30), || {
        java.create_topic(&cluster.bootstrap(), topic, 1, &["compression.type=lz4"])
            .is_ok()
    });
    assert!(created_again, "{topic} could not be created again");
    let into_lz4 = || counter(&proxy, REWRITTEN, &[("topic", topic), ("to", "lz4")]);
    let followed = wait_until(Duration::from_secs(30), || {
        kcat::produce_file(&proxy.bootstrap(), topic, 0, Compression::Gzip, &file, &[])
            .unwrap_or_else(|e| panic!("kcat through kpress: {e:#}\n{}", proxy.log()));
        into_lz4() > 0.0
    });
    let took = recreate.elapsed();
    eprintln!("{topic} created again as lz4: kpress wrote lz4 after {took:?}");
    if !followed || took > bound + Duration::from_secs(5) {
        failures.push(format!(
            "{topic} created again as lz4: kpress wrote lz4 after {took:?} (followed: {followed})"
        ));
    }
    let stored = &cluster.dump_partition_0(&[topic]).expect("DumpLogSegments")[0];
    if stored
        .batches
        .iter()
        .any(|b| b.compresscodec != "lz4" || !b.is_valid)
    {
        failures.push(format!(
            "{topic} created again: a batch not stored as valid lz4"
        ));
    }

    // A name no broker has: a Produce v7 for it, straight to kpress's node port (a
    // client library would ask Metadata first and never send it). kpress looks it up,
    // the broker says it does not exist, and it gets no label.
    let invented = "tm.invented-by-a-client";
    let batch = BatchBuilder::codec(Codec::Gzip)
        .build(&[Record::value(b"invented".to_vec())])
        .expect("a gzip batch");
    let node = SocketAddr::from((
        [127, 0, 0, 1],
        proxy.node_port_base().expect("ports mode") + 1,
    ));
    let unknown_before = counter(&proxy, LOOKUPS, &[("result", "unknown_topic")]);
    match produce_raw(node, invented, 0, &batch, Duration::from_secs(10)) {
        // UNKNOWN_TOPIC_OR_PARTITION
        Ok(answer) if answer.error_code == 3 => {}
        other => failures.push(format!("Produce for {invented}: {other:?}")),
    }
    if !wait_until(Duration::from_secs(10), || {
        counter(&proxy, LOOKUPS, &[("result", "unknown_topic")]) > unknown_before
    }) {
        failures.push(format!("no lookup of {invented} counted as unknown_topic"));
    }
    std::thread::sleep(Duration::from_millis(2 * REFRESH_MS));
    let metrics = proxy.scrape_metrics().expect("metrics");
    if metrics.contains(invented) {
        failures.push(format!("{invented} got a label"));
    }
    assert!(
        failures.is_empty(),
        "{}\n{}\n{}",
        failures.join("\n"),
        metrics,
        proxy.log()
    );
}

/// Milliseconds since `since`.
fn ms_since(since: Instant) -> f64 {
    since.elapsed().as_secs_f64() * 1000.0
}

/// The median, 90th percentile and largest of `values`.
fn spread(mut values: Vec<f64>) -> (f64, f64, f64) {
    values.sort_by(f64::total_cmp);
    let at = |q: f64| values[((values.len() - 1) as f64 * q).round() as usize];
    (at(0.5), at(0.9), at(1.0))
}

#[test]
#[ignore = "a measurement: see the module documentation"]
fn first_batches_of_new_topics() {
    use kpress_tests::measure::{env_number, publish_report, release_kpress};
    use kpress_tests::raw_produce::{connect, produce_raw_on};

    let count = env_number("FIRST_TOPICS", 30) as usize;
    let timeout = Duration::from_secs(30);
    let cluster = KafkaCluster::start(kafka_version(), 1).expect("starting Kafka");
    let java = JavaClient::new(kafka_version());
    let warm = "tm.first.warm";
    create_topic(&java, &cluster.bootstrap(), warm, "zstd");
    // Refreshes only at the first demand, so each new topic is learned by a lookup.
    let proxy = start(
        KpressSetup {
            upstream_keys: vec!["topic_config_refresh_ms = 3600000".to_owned()],
            ..KpressSetup::in_front_of(&cluster.node_addresses(), &cluster.node_ids(), "")
        }
        .measuring(),
    );
    let node = SocketAddr::from((
        [127, 0, 0, 1],
        proxy.node_port_base().expect("ports mode") + 1,
    ));
    let records = Dataset::ApacheAccessLog.records();
    let batch = BatchBuilder::codec(Codec::Gzip)
        .build_values(&records[..20])
        .expect("a gzip batch");
    let mut via = connect(node, timeout).unwrap();
    let mut direct = connect(cluster.node_addresses()[0], timeout).unwrap();
    let produce = |stream: &mut TcpStream, topic: &str| {
        let started = Instant::now();
        let answer = produce_raw_on(stream, topic, 0, &batch, timeout)
            .unwrap_or_else(|e| panic!("Produce to {topic}: {e:#}"));
        assert_eq!(answer.error_code, 0, "Produce to {topic}");
        ms_since(started)
    };
    let known = |topic: &str| {
        learned_topic(&proxy, topic).is_some_and(|t| t["topic_config"]["state"] == "known")
    };
    // The first demand starts the full read; after it only lookups learn topics.
    produce(&mut via, warm);
    assert!(wait_until(timeout, || known(warm)), "{}", proxy.log());
    let names: Vec<String> = (0..count).map(|i| format!("tm.first.{i}")).collect();
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    java.create_topics(
        &cluster.bootstrap(),
        &names,
        1,
        1,
        &["compression.type=zstd"],
    )
    .unwrap();
    // Straight to the broker until it leads every new partition (a client would retry
    // NOT_LEADER_OR_FOLLOWER): kpress hears nothing of it.
    for topic in &names {
        let deadline = Instant::now() + timeout;
        while produce_raw_on(&mut direct, topic, 0, &batch, timeout)
            .map_or(true, |answer| answer.error_code != 0)
        {
            assert!(Instant::now() < deadline, "{topic} never led");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    let pending_before = counter(&proxy, PASSED, &[("reason", "topic_config_pending")]);
    let (mut learned, mut first, mut later, mut straight) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for topic in &names {
        let asked = Instant::now();
        first.push(produce(&mut via, topic));
        // /policy is read back to back: its own reads (a millisecond or two) bound
        // the resolution.
        while !known(topic) {
            assert!(asked.elapsed() < timeout, "{topic} never learned");
        }
        learned.push(ms_since(asked));
        for _ in 0..5 {
            later.push(produce(&mut via, topic));
            straight.push(produce(&mut direct, topic));
        }
    }
    let pending = counter(&proxy, PASSED, &[("reason", "topic_config_pending")]) - pending_before;
    let rewritten: f64 = names
        .iter()
        .map(|topic| counter(&proxy, REWRITTEN, &[("topic", topic), ("to", "zstd")]))
        .sum();
    let row = |what: &str, values: Vec<f64>| {
        let (p50, p90, max) = spread(values);
        format!("| {what} | {p50:.1} | {p90:.1} | {max:.1} |\n")
    };
    let mut report = format!(
        "{count} topics created (compression.type=zstd) after kpress started in topic mode \
         ({} build), one Kafka {} broker; per topic, one Produce v7 of a 20-record gzip \
         batch through kpress, then `/policy` read until the topic's config is known, then \
         5 more through kpress and 5 straight to the broker, alternating.\n\n\
         | ms | median | p90 | max |\n|---|---:|---:|---:|\n",
        if release_kpress() { "release" } else { "debug" },
        kafka_version(),
    );
    report.push_str(&row(
        "first Produce through kpress (topic not known)",
        first,
    ));
    report.push_str(&row("first Produce until its config is known", learned));
    report.push_str(&row("later Produce through kpress (converted)", later));
    report.push_str(&row(
        "Produce straight to the broker (it converts)",
        straight,
    ));
    report.push_str(&format!(
        "\nBatches passed as sent while pending: {pending} of {count} first requests; \
         later batches rewritten to zstd: {rewritten} of {}.\n",
        5 * count
    ));
    publish_report("FIRST_REPORT", &report);
    assert_eq!(pending, count as f64, "{}", proxy.log());
    assert_eq!(rewritten, (5 * count) as f64, "{}", proxy.log());
}
