//! `compression.type = "auto"` against a real 4.1.1 broker: topics of JSON, logs and
//! random bytes (tests/harness/workloads.rs, seeded) are produced through kpress batch
//! by batch (Produce v7, the batches built here, so the records of every stored batch
//! are known). The autopilot must choose a codec for each compressible topic and leave
//! the random one as sent; once it has chosen, what the broker stores must be in the
//! chosen codec and within 3% of the smallest of zstd-3, lz4, gzip-6 and snappy of the
//! same records, and kafka-clients 2.0.1 (no zstd) reading through kpress must get every
//! record, the batches stored in zstd re-encoded for it. Two kpress processes sharing
//! the fleet topic must agree on every topic's choice, one restarted must have the
//! choices before any new trial, and a topic whose data turns from JSON to random must
//! follow within 40 s without flapping. Where kpress's principal may not use the fleet
//! topic (ACLs, StandardAuthorizer), each process decides alone and says so.
//!
//! Trials sample every batch (`[shadow] sample = 1`) and decisions are taken every
//! second (`[autopilot] window_ms = 1000`) with `auto.min_samples = 5`, so a topic is
//! decided within seconds. Each test names its own fleet topic.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::SocketAddr;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use kpress_batch::builder::BatchBuilder;
use kpress_codec::{Candidate, Codec};
use kpress_tests::cluster::{BrokerListener, ClusterSecurity};
use kpress_tests::data::diff_records;
use kpress_tests::java;
use kpress_tests::java_client::{ConsumeOptions, JavaClient};
use kpress_tests::kpress::{KpressProxy, KpressSetup, UpstreamSaslKeys};
use kpress_tests::pre_zstd_client::{pre_zstd_clients_version, pre_zstd_java_client};
use kpress_tests::process::run_ok;
use kpress_tests::raw_produce::{connect_retrying, produce_raw_on};
use kpress_tests::secure_stream::SecureStream;
use kpress_tests::tls::{ClientSecurity, SaslMechanism, SaslUser};
use kpress_tests::workloads::{
    codec_name, metric_samples, stored_batches, Generator, Kind, Shape, StoredBatch,
};
use kpress_tests::{kafka_version, KafkaCluster};

/// `auto.candidates`' default list: the codecs a choice is compared with.
const CANDIDATES: [&str; 4] = ["zstd:3", "lz4", "gzip:6", "snappy"];
const WINDOW_MS: u64 = 1000;
const MIN_SAMPLES: u64 = 5;
/// How long a choice must hold to count as converged.
const HOLD: Duration = Duration::from_secs(3);
/// How long a topic may take to converge on a busy 2-core machine (a debug kpress
/// trying four codecs on every batch at the lowest priority).
const CONVERGE_WITHIN: Duration = Duration::from_secs(60);
/// Batches of each topic sent once the choices hold, whose stored bytes are compared.
const AFTER_BATCHES: usize = 20;
/// How far over the smallest candidate a converged topic's stored bytes may be.
const TOLERANCE: f64 = 0.03;
/// A round of batches (one a topic) at most this often: a paced producer, so the
/// trials (one low-priority thread of a debug kpress) keep up with every batch and each
/// window carries about as many samples as the next.
const ROUND: Duration = Duration::from_millis(50);
/// The gauge saying what each topic's autopilot chose (1 for the chosen candidate).
const CHOICE_GAUGE: &str = "kpress_autopilot_choice";
/// Candidate labels of the gauge that mean "left as sent".
const AS_SENT_LABELS: [&str; 3] = ["producer", "as_sent", "none"];
/// Batches kpress re-encoded in Fetch responses for a consumer that cannot read them.
const REENCODED: &str = "kpress_fetch_batches_reencoded_total";

fn shared_cluster() -> &'static KafkaCluster {
    static CLUSTER: OnceLock<KafkaCluster> = OnceLock::new();
    CLUSTER.get_or_init(|| KafkaCluster::start(kafka_version(), 1).expect("starting Kafka"))
}

/// Topics without a topic-level `compression.type` (one set there pins a topic).
fn create_topics(cluster: &KafkaCluster, topics: &[&str]) {
    JavaClient::new(kafka_version())
        .create_topics(&cluster.bootstrap(), topics, 1, 1, &[])
        .unwrap_or_else(|e| panic!("creating {topics:?}: {e:#}"));
}

/// `[defaults] compression.type = "auto"` with every trial sampled and one-second
/// decisions, sharing `fleet_topic`. `[shadow]` names the same candidates as auto's
/// default list, so the trials are auto's own.
fn auto_rules(fleet_topic: &str) -> String {
    let candidates: Vec<String> = CANDIDATES.iter().map(|c| format!("\"{c}\"")).collect();
    format!(
        "[defaults]\ncompression.type = \"auto\"\nauto.min_samples = {MIN_SAMPLES}\n\n\
         [shadow]\nsample = 1.0\nmax_cpu_fraction = 1.0\ncandidates = [{}]\n\n\
         [autopilot]\ntopic = \"{fleet_topic}\"\nwindow_ms = {WINDOW_MS}\n",
        candidates.join(", ")
    )
}

fn start(cluster: &KafkaCluster, rules: &str) -> KpressProxy {
    let setup = KpressSetup::in_front_of(&cluster.node_addresses(), &cluster.node_ids(), rules);
    KpressProxy::start_with(setup).unwrap_or_else(|e| panic!("starting kpress: {e:#}"))
}

fn node(proxy: &KpressProxy, cluster: &KafkaCluster) -> SocketAddr {
    proxy.node_address(cluster.node_ids()[0])
}

fn connect_node(to: SocketAddr) -> std::net::TcpStream {
    connect_retrying(to, Duration::from_secs(120)).unwrap_or_else(|e| panic!("{to}: {e:#}"))
}

/// What a topic's autopilot chose.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Choice {
    AsSent,
    Candidate(String),
}

impl Choice {
    /// The codec its batches are stored in, for a producer sending `sent`.
    fn stored_codec(&self, sent: Codec) -> String {
        match self {
            Choice::AsSent => sent.name().to_string(),
            Choice::Candidate(label) => label
                .parse::<Candidate>()
                .unwrap_or_else(|e| panic!("a choice that is no candidate: {e}"))
                .codec()
                .name()
                .to_string(),
        }
    }
}

/// Every decided topic's choice, from kpress's gauge.
fn choices(proxy: &KpressProxy) -> BTreeMap<String, Choice> {
    let text = proxy
        .scrape_metrics()
        .unwrap_or_else(|e| panic!("scraping kpress: {e:#}"));
    let mut chosen = BTreeMap::new();
    for (labels, value) in metric_samples(&text, CHOICE_GAUGE) {
        if value != 1.0 {
            continue;
        }
        let label = |name: &str| {
            labels
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.clone())
        };
        let (Some(topic), Some(candidate)) = (label("topic"), label("candidate")) else {
            continue;
        };
        let choice = if AS_SENT_LABELS.contains(&candidate.as_str()) {
            Choice::AsSent
        } else {
            Choice::Candidate(candidate)
        };
        chosen.insert(topic, choice);
    }
    chosen
}

/// What `/policy` says of `topic`'s autopilot choice (its candidates' figures and why).
fn policy_of(proxy: &KpressProxy, topic: &str) -> String {
    let Ok((_, body)) = proxy.http_get("/policy") else {
        return "no /policy".to_string();
    };
    let Ok(json) = serde_json::from_str::<serde_json::Value>(&body) else {
        return body;
    };
    json["autopilot"]["topics"]
        .as_array()
        .and_then(|topics| topics.iter().find(|t| t["topic"] == topic))
        .map_or_else(|| format!("{:#}", json["autopilot"]), |t| format!("{t:#}"))
}

fn counter(proxy: &KpressProxy, name: &str, labels: &[(&str, &str)]) -> f64 {
    proxy
        .counter(name, labels)
        .unwrap_or_else(|e| panic!("scraping kpress: {e:#}"))
}

/// One batch as sent: its records, where the broker put it and its bytes.
#[derive(Debug)]
struct Sent {
    records: Vec<Vec<u8>>,
    base_offset: i64,
}

/// A client's connection to kpress: plain TCP, or SASL on it.
trait Connection: Read + Write + std::fmt::Debug {}

impl<T: Read + Write + std::fmt::Debug> Connection for T {}

/// A topic's producer: a generator, a batch shape and the codec it sends, on a
/// connection of its own to a kpress node port.
#[derive(Debug)]
struct Feed {
    topic: String,
    generator: Generator,
    shape: Shape,
    codec: Codec,
    stream: Box<dyn Connection>,
    sent: Vec<Sent>,
}

impl Feed {
    fn new(topic: &str, kind: Kind, shape: Shape, codec: Codec, to: SocketAddr) -> Feed {
        let stream = connect_node(to);
        Feed::on(topic, kind, shape, codec, Box::new(stream))
    }

    fn on(
        topic: &str,
        kind: Kind,
        shape: Shape,
        codec: Codec,
        stream: Box<dyn Connection>,
    ) -> Feed {
        Feed {
            topic: topic.to_string(),
            generator: Generator::new(kind, 42),
            shape,
            codec,
            stream,
            sent: Vec::new(),
        }
    }

    fn send_one(&mut self) {
        let records = self.shape.next_batch(&mut self.generator);
        let batch = BatchBuilder::codec(self.codec)
            .build_values(&records)
            .unwrap();
        // A new partition's leadership may still be settling: UNKNOWN_TOPIC_OR_PARTITION,
        // LEADER_NOT_AVAILABLE, NOT_LEADER_OR_FOLLOWER are tried again for 10 s.
        let deadline = Instant::now() + Duration::from_secs(10);
        let answer = loop {
            let answer = produce_raw_on(
                &mut self.stream,
                &self.topic,
                0,
                &batch,
                Duration::from_secs(60),
            )
            .unwrap_or_else(|e| panic!("a batch to {}: {e:#}", self.topic));
            if ![3, 5, 6].contains(&answer.error_code) || Instant::now() > deadline {
                break answer;
            }
            std::thread::sleep(Duration::from_millis(100));
        };
        assert_eq!(answer.error_code, 0, "a batch to {}", self.topic);
        self.sent.push(Sent {
            records,
            base_offset: answer.base_offset,
        });
    }
}

/// Every change of a topic's choice seen, in order (None: undecided).
#[derive(Debug, Default)]
struct History {
    seen: BTreeMap<String, Vec<(Instant, Option<Choice>)>>,
}

impl History {
    /// Records `now`'s choices of `topics`; whether any changed.
    fn observe(&mut self, topics: &[&str], now: &BTreeMap<String, Choice>) -> bool {
        let mut changed = false;
        for topic in topics {
            let choice = now.get(*topic).cloned();
            let seen = self.seen.entry(topic.to_string()).or_default();
            if seen.last().map(|(_, c)| c) != Some(&choice) {
                seen.push((Instant::now(), choice));
                changed = true;
            }
        }
        changed
    }

    /// The decided choices of `topic` in the order they were taken.
    fn decided(&self, topic: &str) -> Vec<Choice> {
        self.seen
            .get(topic)
            .into_iter()
            .flatten()
            .filter_map(|(_, c)| c.clone())
            .collect()
    }
}

/// Rounds no more often than every [`ROUND`].
#[derive(Debug)]
struct Pace {
    next: Instant,
}

impl Pace {
    fn new() -> Pace {
        Pace {
            next: Instant::now(),
        }
    }

    fn wait(&mut self) {
        if let Some(early) = self.next.checked_duration_since(Instant::now()) {
            std::thread::sleep(early);
        }
        self.next = self.next.max(Instant::now() - ROUND) + ROUND;
    }
}

/// Sends a batch of every feed in turn until every topic is decided and no choice has
/// changed for [`HOLD`]; panics after [`CONVERGE_WITHIN`]. Returns the choices (as the
/// proxies agree on them: each proxy is asked, and all must say the same).
fn until_converged(
    proxies: &[&KpressProxy],
    feeds: &mut [Feed],
    history: &mut History,
) -> BTreeMap<String, Choice> {
    let topics: Vec<String> = feeds.iter().map(|f| f.topic.clone()).collect();
    let topics: Vec<&str> = topics.iter().map(String::as_str).collect();
    let started = Instant::now();
    let mut stable_since = Instant::now();
    let mut pace = Pace::new();
    loop {
        pace.wait();
        for feed in feeds.iter_mut() {
            feed.send_one();
        }
        let seen: Vec<BTreeMap<String, Choice>> = proxies
            .iter()
            .map(|p| {
                let mut c = choices(p);
                c.retain(|t, _| topics.contains(&t.as_str()));
                c
            })
            .collect();
        if history.observe(&topics, &seen[0]) || seen.iter().any(|s| *s != seen[0]) {
            stable_since = Instant::now();
        }
        if seen[0].len() == topics.len() && stable_since.elapsed() >= HOLD {
            return seen[0].clone();
        }
        if started.elapsed() > CONVERGE_WITHIN {
            let logs: Vec<String> = proxies.iter().map(|p| p.log()).collect();
            panic!(
                "no converged choice for every topic within {CONVERGE_WITHIN:?}: {seen:#?}\n\
                 history {history:#?}\n{}",
                logs.join("\n")
            );
        }
    }
}

/// The bytes of `records` in one batch of `candidate`.
fn batch_bytes(candidate: &str, records: &[Vec<u8>]) -> usize {
    let candidate: Candidate = candidate.parse().unwrap();
    BatchBuilder {
        codec: candidate.codec(),
        options: candidate.options().clone(),
        ..BatchBuilder::default()
    }
    .build_values(records)
    .unwrap()
    .len()
}

/// What was stored of `feed`'s batches from its `from`th on, against what each
/// candidate makes of the same records; failures for a batch not in `choice`'s codec
/// or stored bytes over the smallest candidate by more than [`TOLERANCE`].
fn check_stored(
    cluster: &KafkaCluster,
    feed: &Feed,
    from: usize,
    choice: &Choice,
    report: &mut Vec<String>,
) -> Vec<String> {
    let mut failures = Vec::new();
    let stored: BTreeMap<i64, StoredBatch> = stored_batches(cluster, &feed.topic)
        .unwrap()
        .into_iter()
        .map(|b| (b.base_offset, b))
        .collect();
    let codec = choice.stored_codec(feed.codec);
    let mut stored_bytes = 0;
    let mut as_sent = 0;
    let mut by_candidate = vec![0usize; CANDIDATES.len()];
    for sent in &feed.sent[from..] {
        let Some(batch) = stored.get(&sent.base_offset) else {
            failures.push(format!(
                "{}: no stored batch at {}",
                feed.topic, sent.base_offset
            ));
            continue;
        };
        if codec_name(batch.codec) != codec || !batch.crc_valid {
            failures.push(format!(
                "{}: batch at {} stored as {} (CRC valid {}), chosen {choice:?}",
                feed.topic,
                sent.base_offset,
                codec_name(batch.codec),
                batch.crc_valid
            ));
        }
        stored_bytes += batch.size;
        as_sent += batch_bytes(feed.codec.name(), &sent.records);
        for (i, candidate) in CANDIDATES.iter().enumerate() {
            by_candidate[i] += batch_bytes(candidate, &sent.records);
        }
    }
    let smallest = by_candidate.iter().copied().min().unwrap().min(as_sent);
    let over = stored_bytes as f64 / smallest as f64 - 1.0;
    let figures: Vec<String> = CANDIDATES
        .iter()
        .zip(&by_candidate)
        .map(|(c, b)| format!("{c} {b}"))
        .collect();
    report.push(format!(
        "{}: chose {choice:?}; stored {stored_bytes} B in {} batches, smallest {smallest} \
         ({over:+.2}%); as sent ({}) {as_sent}, {}",
        feed.topic,
        feed.sent.len() - from,
        feed.codec.name(),
        figures.join(", "),
        over = over * 100.0,
    ));
    if over > TOLERANCE {
        failures.push(format!(
            "{}: stored {stored_bytes} B, {:.2}% over the smallest candidate ({smallest} B)",
            feed.topic,
            over * 100.0
        ));
    }
    failures
}

#[test]
fn each_topic_converges_and_is_stored_in_the_smallest_codec() {
    let cluster = shared_cluster();
    let (json, logs, random) = ("a.json", "a.logs", "a.random");
    create_topics(cluster, &[json, logs, random]);
    let proxy = start(cluster, &auto_rules("_kpress_autopilot.a"));
    let to = node(&proxy, cluster);
    let mut feeds = [
        Feed::new(json, Kind::Json, Shape::Bytes(64 << 10), Codec::Lz4, to),
        Feed::new(logs, Kind::Logs, Shape::Bytes(64 << 10), Codec::Lz4, to),
        // Sent uncompressed: every candidate makes it larger.
        Feed::new(
            random,
            Kind::Random,
            Shape::Bytes(64 << 10),
            Codec::None,
            to,
        ),
    ];
    let mut history = History::default();
    let chosen = until_converged(&[&proxy], &mut feeds, &mut history);
    let mut failures = Vec::new();
    for topic in [json, logs] {
        if !matches!(chosen[topic], Choice::Candidate(_)) {
            failures.push(format!("{topic}: left as sent"));
        }
    }
    if chosen[random] != Choice::AsSent {
        failures.push(format!("{random}: chose {:?}", chosen[random]));
    }
    let from: Vec<usize> = feeds.iter().map(|f| f.sent.len()).collect();
    for _ in 0..AFTER_BATCHES {
        for feed in feeds.iter_mut() {
            feed.send_one();
        }
    }
    let after = choices(&proxy);
    for feed in &feeds {
        if after.get(&feed.topic) != chosen.get(&feed.topic) {
            failures.push(format!(
                "{}: the choice moved from {:?} to {:?} after converging",
                feed.topic,
                chosen.get(&feed.topic),
                after.get(&feed.topic)
            ));
        }
    }
    let mut report = Vec::new();
    for (feed, from) in feeds.iter().zip(from) {
        failures.extend(check_stored(
            cluster,
            feed,
            from,
            &chosen[&feed.topic],
            &mut report,
        ));
    }
    eprintln!("{}", report.join("\n"));
    // Kafka's own reading of the text topics: every batch valid, every record there.
    let dumps = cluster.dump_partition_0(&[json, logs]).unwrap();
    for (feed, dump) in feeds.iter().zip(&dumps) {
        failures.extend(dump.problems.iter().map(|p| format!("{}: {p}", feed.topic)));
        if let Some(bad) = dump.batches.iter().find(|b| !b.is_valid) {
            failures.push(format!("{}: invalid batch {bad:?}", feed.topic));
        }
        let expected: Vec<Vec<u8>> = feed.sent.iter().flat_map(|s| s.records.clone()).collect();
        if let Some(diff) = diff_records(&expected, &dump.payloads()) {
            failures.push(format!("{}: stored records: {diff}", feed.topic));
        }
    }
    failures.extend(old_consumer_reads_through_kpress(
        &proxy,
        cluster,
        &feeds[0],
        &chosen[json],
    ));
    proxy.assert_no_failures(&failures, cluster);
}

/// The autopilot's safety for consumers that cannot read its choice: kafka-clients
/// 2.0.1 (Fetch v8, no zstd) bootstrapping through kpress reads every record of
/// `feed`'s topic byte for byte, and where the choice is zstd each batch stored in zstd
/// is counted re-encoded for it. (tests/consumers.rs shows it failing straight from the
/// broker.)
fn old_consumer_reads_through_kpress(
    proxy: &KpressProxy,
    cluster: &KafkaCluster,
    feed: &Feed,
    choice: &Choice,
) -> Vec<String> {
    let reader = format!("kafka-clients {}", pre_zstd_clients_version());
    let expected: Vec<&[u8]> = feed
        .sent
        .iter()
        .flat_map(|s| s.records.iter().map(Vec::as_slice))
        .collect();
    let options = ConsumeOptions {
        timeout: Duration::from_secs(120),
        ..ConsumeOptions::default()
    };
    let started = Instant::now();
    let mut failures = match pre_zstd_java_client().read_back_problems(
        &proxy.bootstrap(),
        &[&feed.topic],
        &expected,
        &options,
        &reader,
    ) {
        Ok(found) => found,
        Err(e) => vec![format!("{}: {reader} through kpress: {e:#}", feed.topic)],
    };
    let read_in = started.elapsed();
    let zstd_batches = stored_batches(cluster, &feed.topic)
        .unwrap()
        .iter()
        .filter(|b| codec_name(b.codec) == "zstd")
        .count();
    let reencoded = counter(
        proxy,
        REENCODED,
        &[("from", "zstd"), ("topic", &feed.topic)],
    );
    eprintln!(
        "{}: {reader} read {} records through kpress in {:.1} s; {zstd_batches} batches \
         stored in zstd, {reencoded} re-encoded from zstd",
        feed.topic,
        expected.len(),
        read_in.as_secs_f64()
    );
    if choice.stored_codec(feed.codec) != "zstd" {
        eprintln!(
            "{}: chose {choice:?}, not zstd: no re-encoding to check this run",
            feed.topic
        );
    } else if zstd_batches == 0 || reencoded < zstd_batches as f64 {
        failures.push(format!(
            "{}: {REENCODED}{{from=\"zstd\"}} is {reencoded}; expected at least the \
             {zstd_batches} batches stored in zstd",
            feed.topic
        ));
    }
    failures
}

#[test]
fn two_processes_agree_and_a_restarted_one_resumes_the_choices() {
    let cluster = shared_cluster();
    let (json, logs) = ("b.json", "b.logs");
    create_topics(cluster, &[json, logs]);
    let rules = auto_rules("_kpress_autopilot.b");
    let first = start(cluster, &rules);
    let mut second = start(cluster, &rules);
    // Each topic's traffic goes through one process only: the other learns it from the
    // fleet topic.
    let mut feeds = [
        Feed::new(
            json,
            Kind::Json,
            Shape::Bytes(64 << 10),
            Codec::Lz4,
            node(&first, cluster),
        ),
        Feed::new(
            logs,
            Kind::Logs,
            Shape::Bytes(64 << 10),
            Codec::Lz4,
            node(&second, cluster),
        ),
    ];
    let mut history = History::default();
    let chosen = until_converged(&[&first, &second], &mut feeds, &mut history);
    eprintln!("both processes chose {chosen:?}");

    assert!(second.terminate(Duration::from_secs(30)).is_some());
    drop(second);
    let restarted = start(cluster, &rules);
    let started = Instant::now();
    let deadline = started + Duration::from_secs(20);
    let resumed = loop {
        let now = choices(&restarted);
        let trials = counter(&restarted, "kpress_shadow_batches_total", &[]);
        let ours: BTreeMap<String, Choice> = now
            .into_iter()
            .filter(|(t, _)| t == json || t == logs)
            .collect();
        if ours.len() == 2 {
            assert_eq!(
                trials,
                0.0,
                "the restarted process ran trials before it had the choices\n{}",
                restarted.log()
            );
            break ours;
        }
        assert!(
            Instant::now() < deadline,
            "the restarted process had no choices within 20 s: {ours:?}\n{}",
            restarted.log()
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    eprintln!(
        "the restarted process had {resumed:?} {:.1} s after it started",
        started.elapsed().as_secs_f64()
    );
    assert_eq!(resumed, chosen, "{}", restarted.log());
    assert_eq!(choices(&first).get(json), chosen.get(json));
    // Its first batches are stored in the choice at once: no cold start.
    let logs_feed = &mut feeds[1];
    logs_feed.stream = Box::new(connect_node(node(&restarted, cluster)));
    let from = logs_feed.sent.len();
    for _ in 0..3 {
        logs_feed.send_one();
    }
    let mut report = Vec::new();
    let failures = check_stored(cluster, logs_feed, from, &chosen[logs], &mut report);
    eprintln!("{}", report.join("\n"));
    restarted.assert_no_failures(&failures, cluster);
}

#[test]
fn a_topic_turning_random_is_followed_without_flapping() {
    /// How long after the data turns the choice must follow: the figures halve every 5
    /// windows and as sent wins once the old data is down to about 2% of the weight,
    /// 27 windows (docs/autopilot.md), 27 s at `window_ms = 1000`; through a debug
    /// kpress on the 2-core machine it took 21 s. With room for a busy machine.
    const FOLLOW_WITHIN: Duration = Duration::from_secs(40);
    let cluster = shared_cluster();
    let topic = "c.turns";
    create_topics(cluster, &[topic]);
    let proxy = start(cluster, &auto_rules("_kpress_autopilot.c"));
    let mut feeds = [Feed::new(
        topic,
        Kind::Json,
        Shape::Bytes(64 << 10),
        Codec::None,
        node(&proxy, cluster),
    )];
    let mut history = History::default();
    let before = until_converged(&[&proxy], &mut feeds, &mut history);
    assert!(
        matches!(before[topic], Choice::Candidate(_)),
        "JSON left as sent: {before:?}"
    );
    feeds[0].generator = Generator::new(Kind::Random, 42);
    let turned = Instant::now();
    let topics = [topic];
    let mut pace = Pace::new();
    let followed = loop {
        pace.wait();
        feeds[0].send_one();
        let now = choices(&proxy);
        history.observe(&topics, &now);
        if now.get(topic) == Some(&Choice::AsSent) {
            break turned.elapsed();
        }
        assert!(
            turned.elapsed() < FOLLOW_WITHIN,
            "the choice did not follow random data within {FOLLOW_WITHIN:?}: {now:?}\n\
             {history:?}\n/policy: {}\n{}",
            policy_of(&proxy, topic),
            proxy.log()
        );
    };
    // And it stays.
    let settled = Instant::now();
    while settled.elapsed() < HOLD * 2 {
        pace.wait();
        feeds[0].send_one();
        history.observe(&topics, &choices(&proxy));
    }
    let decided = history.decided(topic);
    // Every change kpress made, also any between two polls of the gauge.
    let changes = counter(
        &proxy,
        "kpress_autopilot_changes_total",
        &[("topic", topic)],
    );
    eprintln!(
        "{topic}: followed random data in {:.1} s; choices in order {decided:?}, \
         {changes} changes counted",
        followed.as_secs_f64()
    );
    assert_eq!(
        changes,
        decided.len() as f64,
        "changes the gauge did not show: {decided:?}\n{}",
        proxy.log()
    );
    let mut distinct = decided.clone();
    distinct.sort();
    distinct.dedup();
    assert!(
        decided.len() <= 3 && distinct.len() == decided.len(),
        "{topic} flapped: {decided:?}\n{}",
        proxy.log()
    );
    assert_eq!(decided.last(), Some(&Choice::AsSent), "{history:?}");
}

/// Kafka's `kafka-acls --add` against `cluster`'s PLAINTEXT listener (whose ANONYMOUS
/// principal is a super user).
fn add_acl(cluster: &KafkaCluster, args: &[&str]) {
    let mut cmd = java::client_command(cluster.version(), &[]);
    cmd.arg("org.apache.kafka.tools.AclCommand")
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

/// A SASL/PLAIN broker with the StandardAuthorizer where kpress's principal may
/// describe the `d.*` topics and their configs but has no ACL for the fleet topic (nor
/// to create topics): each of two processes decides its own topic's codec alone, the
/// other's topic stays undecided there, and each says so in its log, its
/// `kpress_autopilot_shared` gauge (0) and `/policy` (mode `alone`).
#[test]
fn without_acls_for_the_fleet_topic_each_process_decides_alone() {
    let kpress = SaslUser::new(SaslMechanism::Plain, "kpress", "kpress-secret");
    let alice = SaslUser::new(SaslMechanism::Plain, "alice", "alice-secret");
    let security = ClusterSecurity {
        listeners: vec![BrokerListener::SaslPlaintext],
        sasl_users: vec![kpress.clone(), alice.clone()],
    };
    let properties =
        "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer\n\
         super.users=User:ANONYMOUS\n";
    let cluster = KafkaCluster::start_with_properties(kafka_version(), 1, &security, properties)
        .unwrap_or_else(|e| panic!("starting Kafka with ACLs: {e:#}"));
    let (json, logs) = ("d.json", "d.logs");
    create_topics(&cluster, &[json, logs]);
    for (principal, operations, pattern) in [
        (
            "User:alice",
            &["Write", "Describe"][..],
            &["--topic", "*"][..],
        ),
        (
            "User:kpress",
            &["Describe", "DescribeConfigs"][..],
            &["--resource-pattern-type", "prefixed", "--topic", "d."][..],
        ),
    ] {
        let mut args = vec!["--allow-principal", principal];
        for operation in operations {
            args.extend(["--operation", operation]);
        }
        args.extend(pattern);
        add_acl(&cluster, &args);
    }
    let fleet_topic = "_kpress_autopilot.d";
    let setup = KpressSetup {
        upstream_sasl: Some(UpstreamSaslKeys::with_password_file(&kpress)),
        ..KpressSetup::in_front_of(
            &cluster.sasl_addresses(),
            &cluster.node_ids(),
            &auto_rules(fleet_topic),
        )
    };
    let first = KpressProxy::start_with(setup.clone()).unwrap();
    let second = KpressProxy::start_with(setup).unwrap();
    let client = ClientSecurity {
        tls: None,
        sasl: Some(alice),
    };
    let stream = |proxy: &KpressProxy| -> Box<dyn Connection> {
        // The node port is bound once kpress has learned the nodes.
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            match SecureStream::connect(node(proxy, &cluster), &client, Duration::from_secs(60)) {
                Ok(stream) => return Box::new(stream),
                Err(e) if Instant::now() > deadline => {
                    panic!("SASL through kpress: {e:#}\n{}", proxy.log())
                }
                Err(_) => std::thread::sleep(Duration::from_millis(100)),
            }
        }
    };
    let shape = Shape::Bytes(64 << 10);
    let mut json_feed = [Feed::on(
        json,
        Kind::Json,
        shape,
        Codec::Lz4,
        stream(&first),
    )];
    let mut logs_feed = [Feed::on(
        logs,
        Kind::Logs,
        shape,
        Codec::Lz4,
        stream(&second),
    )];
    let mut history = History::default();
    let first_chose = until_converged(&[&first], &mut json_feed, &mut history);
    let second_chose = until_converged(&[&second], &mut logs_feed, &mut history);
    let mut failures = Vec::new();
    for (proxy, chose, own, other) in [
        (&first, &first_chose, json, logs),
        (&second, &second_chose, logs, json),
    ] {
        if !matches!(chose.get(own), Some(Choice::Candidate(_))) {
            failures.push(format!("{own}: {chose:?}"));
        }
        if let Some(choice) = choices(proxy).get(other) {
            failures.push(format!(
                "a process that decides alone has {other}'s choice {choice:?}, \
                 though its traffic went through the other"
            ));
        }
        if counter(proxy, "kpress_autopilot_shared", &[]) != 0.0 {
            failures.push("kpress_autopilot_shared is not 0".to_string());
        }
        let mode = proxy
            .http_get("/policy")
            .ok()
            .and_then(|(_, body)| serde_json::from_str::<serde_json::Value>(&body).ok())
            .map(|json| json["autopilot"]["mode"].clone());
        if mode != Some(serde_json::json!("alone")) {
            failures.push(format!("/policy shows the autopilot's mode as {mode:?}"));
        }
        let log = proxy.log();
        let said = log.lines().any(|line| {
            let line = line.to_lowercase();
            line.contains(fleet_topic) && (line.contains("alone") || line.contains("denied"))
        });
        if !said {
            failures.push(format!(
                "no log line says the process decides alone (denied {fleet_topic}):\n{log}"
            ));
        }
    }
    first.assert_no_failures(&failures, &cluster);
}
