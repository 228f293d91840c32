//! A noisy neighbour against a real 4.1 broker: kcat producers flood `heavy.*` topics
//! (zstd level 19) with large gzip batches while a light producer writes `light.*`
//! (lz4) through the same kpress.
//!
//! `heavy_flood_sheds_compression_not_producers` (a debug kpress, about a minute)
//! asserts outcomes, never speed, with a short `[limits] max_rewrite_wait_ms` and
//! `[overload] adaptive = true` so that a debug build really is overloaded: every
//! record of the idempotent `acks=all` light producer is acknowledged and read back
//! exactly once; every stored batch is valid and every heavy record read back as
//! sent; each heavy batch is counted rewritten, `overloaded_fallback` or
//! `overloaded_passed`, those counts add up to the batches stored, and each outcome's
//! count equals the stored batches in its codec (zstd, the rule's fallback lz4, gzip as
//! sent); the effective zstd level (gauge and `/policy`) of the heavy rule whose
//! requests wait (at least one: which depends on how the slots fall) steps down during
//! the flood, never below `min_level`, one log line a step, and every heavy rule is
//! back at 19 once a trickle of records after the flood lets them judge windows calm.
//!
//! `noisy_neighbour` (ignored, a measurement for `scripts/load.sh`) times the light
//! producer, Kafka's ProducerPerformance (gzip, 300 records/s, acks=1) into `light.*`,
//! alone and while two kcat producers flood `heavy.*` with gzip, on three routes side
//! by side in alternating rounds of one run: a release kpress (`KPRESS_BIN`, "after"),
//! another build (`KPRESS_BASE_BIN`, "before", left out when unset), and straight to
//! the broker into topics configured `compression.type=lz4` and `zstd` with
//! `compression.zstd.level=19`, where the broker recompresses (the anchor). It reports
//! p50/p99/max of each, kpress's and the broker's CPU during the flood (from
//! `/proc/<pid>/stat`), kpress's threads and the time they waited runnable for a CPU
//! (schedstat: what the machine's other work took), the load average, the heavy topics'
//! stored bytes and what kpress shed of them, and the target: under the flood, p50 at
//! most 2× alone and p99 at most 2× alone + 50 ms.
//! Knobs:
//!
//!   NOISY_SECONDS=20        length of each light run, alone and under the flood
//!   NOISY_ROUNDS=2          rounds; each runs every route, every other round reversed
//!   NOISY_RATE=300          the light producer's records/s
//!   NOISY_ADAPTIVE=1        the "after" policy steps zstd-19 down to 3 under load
//!                           (`[overload] adaptive`); 0 leaves it at 19 as "before" does
//!   NOISY_REPORT=path.md    also write the report there
//!
//!   KPRESS_BIN=target/release/kpress KPRESS_BASE_BIN=/path/kpress-before \
//!     cargo test -p kpress-tests --test noisy_neighbour -- --ignored --exact \
//!     noisy_neighbour --nocapture

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use kpress_tests::batch_headers::{stored_batches, StoredBatches};
use kpress_tests::data::{diff_records, Dataset};
use kpress_tests::java_client::JavaClient;
use kpress_tests::kcat;
use kpress_tests::kpress::{kpress_binary, KpressProxy, KpressSetup};
use kpress_tests::measure::{
    broker_pid, env_number, kpress_pid, median, publish_report, release_kpress,
};
use kpress_tests::producer_perf::{Payload, PerfSummary, ProducerPerf};
use kpress_tests::steady_producer::{tally, Accounting, SteadyOptions, SteadyProducer};
use kpress_tests::{kafka_version, proc_stat, Compression, KafkaCluster};

/// The gauge of a rule's level in force, labelled `rule` (its match pattern) and
/// `codec`.
const LEVEL_GAUGE: &str = "kpress_overload_level";
/// The per-topic batch counter, labelled `topic` and `outcome`.
const BATCHES: &str = "kpress_batches_total";
/// Records per topic kpress read, labelled `topic`.
const RECORDS: &str = "kpress_produce_records_total";
/// librdkafka's batches up to its 1 MB default `batch.size`: a zstd-19 rewrite each
/// takes hundreds of milliseconds even in a release build.
const FLOOD_SETTINGS: [&str; 2] = ["batch.size=1000000", "linger.ms=200"];
/// The measurement's flood file: the dataset this many times.
const FLOOD_REPEATS: usize = 4;

/// kcat producers' loops, each producing a file's lines into one topic again and
/// again until stopped.
struct Flood {
    stop: Arc<AtomicBool>,
    producers: Vec<JoinHandle<anyhow::Result<u64>>>,
}

impl Flood {
    fn start(bootstrap: &str, topics: &[&str], file: &Path) -> Flood {
        let stop = Arc::new(AtomicBool::new(false));
        let producers = topics
            .iter()
            .map(|topic| {
                let (bootstrap, topic, stop, file) = (
                    bootstrap.to_string(),
                    topic.to_string(),
                    stop.clone(),
                    file.to_path_buf(),
                );
                std::thread::spawn(move || {
                    let mut runs = 0;
                    while !stop.load(Ordering::Relaxed) {
                        kcat::produce_file(
                            &bootstrap,
                            &topic,
                            0,
                            Compression::Gzip,
                            &file,
                            &FLOOD_SETTINGS,
                        )?;
                        runs += 1;
                    }
                    Ok(runs)
                })
            })
            .collect();
        Flood { stop, producers }
    }

    /// Asks the producers to stop after the runs under way; whether they all have.
    fn stop(&self) -> bool {
        self.stop.store(true, Ordering::Relaxed);
        self.producers.iter().all(JoinHandle::is_finished)
    }

    /// Stops after the runs under way; the number of whole runs of each producer.
    fn finish(self) -> Vec<u64> {
        self.stop.store(true, Ordering::Relaxed);
        self.producers
            .into_iter()
            .map(|p| {
                p.join()
                    .expect("a flood thread")
                    .unwrap_or_else(|e| panic!("flooding: {e:#}"))
            })
            .collect()
    }
}

/// A kcat producer fed one record at a time on its stdin.
struct Trickle {
    child: Child,
    stdin: Option<ChildStdin>,
    topic: String,
    sent: u64,
}

impl Trickle {
    fn start(bootstrap: &str, topic: &str) -> Trickle {
        let mut child = Command::new("kcat")
            .args(["-P", "-b", bootstrap, "-t", topic, "-p", "0", "-z", "gzip"])
            .args([
                "-X",
                "linger.ms=10",
                "-X",
                "acks=all",
                "-X",
                "enable.idempotence=true",
            ])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("starting kcat: {e}"));
        Trickle {
            stdin: child.stdin.take(),
            child,
            topic: topic.to_string(),
            sent: 0,
        }
    }

    fn send(&mut self, record: &[u8]) {
        let stdin = self.stdin.as_mut().expect("kcat's stdin");
        stdin
            .write_all(record)
            .and_then(|()| stdin.write_all(b"\n"))
            .and_then(|()| stdin.flush())
            .unwrap_or_else(|e| panic!("writing to kcat on {}: {e}", self.topic));
        self.sent += 1;
    }

    /// Closes kcat's stdin and waits until it has delivered everything and exited;
    /// the records sent.
    fn finish(mut self) -> anyhow::Result<u64> {
        drop(self.stdin.take());
        let deadline = Instant::now() + Duration::from_secs(60);
        let status = loop {
            if let Some(status) = self.child.try_wait()? {
                break status;
            }
            anyhow::ensure!(
                Instant::now() < deadline,
                "kcat on {} did not exit within 60 s of its input's end",
                self.topic
            );
            std::thread::sleep(Duration::from_millis(50));
        };
        let mut stderr = String::new();
        if let Some(mut pipe) = self.child.stderr.take() {
            pipe.read_to_string(&mut stderr)?;
        }
        anyhow::ensure!(
            status.success(),
            "kcat on {} exited {status}: {stderr}",
            self.topic
        );
        Ok(self.sent)
    }
}

impl Drop for Trickle {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The level changes kpress logged for `rule`, (from, to) in order, from its lines
/// "overload: level zstd of rule RULE now TO (was FROM)".
fn level_steps(log: &str, rule: &str) -> Vec<(i64, i64)> {
    let marker = format!(" of rule {rule} now ");
    log.lines()
        .filter(|l| l.contains("overload: level "))
        .filter_map(|l| {
            let rest = &l[l.find(&marker)? + marker.len()..];
            let (to, rest) = rest.split_once(" (was ")?;
            let from = rest.split(')').next()?;
            Some((from.trim().parse().ok()?, to.trim().parse().ok()?))
        })
        .collect()
}

/// The sum of the samples of `name` whose labels include `key="value"` of `only`, by
/// their value of `label`.
fn by_label(
    metrics: &str,
    name: &str,
    (key, value): (&str, &str),
    label: &str,
) -> BTreeMap<String, f64> {
    let wanted = format!("{key}=\"{value}\"");
    let mut values = BTreeMap::new();
    for line in metrics.lines() {
        let Some(rest) = line.strip_prefix(name) else {
            continue;
        };
        let Some(labels) = rest.strip_prefix('{') else {
            continue;
        };
        let Some((labels, value)) = labels.split_once("} ") else {
            continue;
        };
        if !labels.split(',').any(|l| l == wanted) {
            continue;
        }
        let key = labels
            .split(',')
            .find_map(|l| l.strip_prefix(&format!("{label}=\"")))
            .map_or(String::new(), |v| v.trim_end_matches('"').to_string());
        if let Ok(v) = value.trim().parse::<f64>() {
            *values.entry(key).or_default() += v;
        }
    }
    values
}

/// The level in force of each rule matching one of `patterns`, from the gauge and from
/// `/policy` (`effective_level`): one scrape and one `/policy` read for all of them.
fn effective_levels(proxy: &KpressProxy, patterns: &[&str]) -> Vec<(Option<f64>, Option<f64>)> {
    let metrics = proxy.scrape_metrics().ok();
    let policy: Option<serde_json::Value> = proxy
        .http_get("/policy")
        .ok()
        .and_then(|(_, body)| serde_json::from_str(&body).ok());
    patterns
        .iter()
        .map(|pattern| {
            let gauge = metrics.as_ref().and_then(|metrics| {
                by_label(metrics, LEVEL_GAUGE, ("rule", pattern), "rule")
                    .into_values()
                    .next()
            });
            let level = policy.as_ref().and_then(|json| {
                json["topics"]
                    .as_array()?
                    .iter()
                    .find(|rule| rule["match"] == *pattern)?["effective_level"]
                    .as_f64()
            });
            (gauge, level)
        })
        .collect()
}

/// The lowest level each rule showed in the gauge and in `/policy` over the samples
/// taken, and any sample outside `min_level..=level`.
struct LevelSamples {
    lowest: Vec<(f64, f64)>,
    out_of_range: Vec<String>,
}

impl LevelSamples {
    fn new(rules: usize) -> LevelSamples {
        LevelSamples {
            lowest: vec![(f64::INFINITY, f64::INFINITY); rules],
            out_of_range: Vec::new(),
        }
    }

    fn add(&mut self, rules: &[&str], levels: &[(Option<f64>, Option<f64>)]) {
        for ((rule, (gauge, policy)), lowest) in rules.iter().zip(levels).zip(&mut self.lowest) {
            for (source, level) in [("gauge", gauge), ("/policy", policy)] {
                if level.is_some_and(|l| !(3.0..=19.0).contains(&l)) {
                    self.out_of_range
                        .push(format!("rule {rule}'s {source} showed level {level:?}"));
                }
            }
            lowest.0 = lowest.0.min(gauge.unwrap_or(f64::INFINITY));
            lowest.1 = lowest.1.min(policy.unwrap_or(f64::INFINITY));
        }
    }
}

/// The test's policy: zstd-19 for `heavy.*`, stepping down to 3 under load, heavy.a
/// falling back to lz4 past the deadline; lz4 for `light.*`. A deadline and windows
/// short enough that a debug build's zstd-19 misses them.
const TEST_POLICY: &str = "\
[limits]
max_rewrite_wait_ms = 100

[overload]
adaptive = true
target_wait_ms = 20
window_ms = 200

[defaults]
compression.type = \"producer\"

[[topics]]
match = \"heavy.a\"
compression.type = \"zstd\"
compression.zstd.level = 19
overload.min_level = 3
overload.compression.type = \"lz4\"

[[topics]]
match = \"heavy.*\"
compression.type = \"zstd\"
compression.zstd.level = 19
overload.min_level = 3

[[topics]]
match = \"light.*\"
compression.type = \"lz4\"
";

/// What a topic's batches became, by kpress's count, against the codecs the broker
/// stores: each outcome's batches are in one codec.
fn outcome_problems(
    topic: &str,
    outcomes: &BTreeMap<String, f64>,
    stored: &StoredBatches,
    rule: &str,
    fallback: Option<&str>,
    sent_as: &str,
) -> Vec<String> {
    let count = |o: &str| outcomes.get(o).copied().unwrap_or(0.0) as u64;
    let mut problems = Vec::new();
    let known = [
        "rewritten",
        "grown",
        "overloaded_fallback",
        "overloaded_passed",
    ];
    for (outcome, n) in outcomes {
        if !known.contains(&outcome.as_str()) && *n > 0.0 {
            problems.push(format!("{topic}: {n} batches counted {outcome}"));
        }
    }
    let counted: u64 = outcomes.values().map(|n| *n as u64).sum();
    let stored_total: u64 = stored.batches_by_codec.values().sum();
    if counted != stored_total {
        problems.push(format!(
            "{topic}: kpress counted {counted} batches ({outcomes:?}), the broker stores \
             {stored_total} ({})",
            stored.codecs()
        ));
    }
    let mut expected: BTreeMap<&str, u64> = BTreeMap::new();
    *expected.entry(rule).or_default() += count("rewritten") + count("grown");
    *expected.entry(fallback.unwrap_or(sent_as)).or_default() += count("overloaded_fallback");
    *expected.entry(sent_as).or_default() += count("overloaded_passed");
    expected.retain(|_, n| *n > 0);
    let found: BTreeMap<&str, u64> = stored
        .batches_by_codec
        .iter()
        .map(|(c, n)| (c.as_str(), *n))
        .collect();
    if expected != found {
        problems.push(format!(
            "{topic}: outcomes {outcomes:?} mean batches {expected:?}, the broker stores {found:?}"
        ));
    }
    if stored.invalid_batches > 0 || !stored.problems.is_empty() {
        problems.push(format!(
            "{topic}: {} invalid batches; DumpLogSegments: {:?}",
            stored.invalid_batches, stored.problems
        ));
    }
    problems
}

#[test]
fn heavy_flood_sheds_compression_not_producers() {
    let started = Instant::now();
    let (light, heavy) = ("light.orders", ["heavy.a", "heavy.b"]);
    let cluster = KafkaCluster::start(kafka_version(), 1).expect("starting Kafka");
    JavaClient::new(kafka_version())
        .create_producer_codec_topics(&cluster.bootstrap(), &[light, heavy[0], heavy[1]], 1)
        .unwrap();
    let proxy = KpressProxy::start_with(KpressSetup::in_front_of(
        &cluster.node_addresses(),
        &cluster.node_ids(),
        TEST_POLICY,
    ))
    .unwrap();
    let fail = |what: String| -> ! { panic!("{what}\n{}", proxy.log()) };

    let lines = Dataset::ApacheAccessLog.path();
    let mut options = SteadyOptions::new(Compression::Gzip, 100, &lines);
    options.max_duration = Duration::from_secs(120);
    let mut producer = SteadyProducer::start(&proxy.bootstrap(), light, "light", &options).unwrap();
    producer
        .wait_acked(100, Duration::from_secs(60))
        .unwrap_or_else(|e| fail(format!("{e:#}")));
    // The heavy rules (heavy.a's own, heavy.b's `heavy.*`), at their own level.
    let rules = ["heavy.a", "heavy.*"];
    let mut problems = Vec::new();
    for (rule, (gauge, policy)) in rules.iter().zip(effective_levels(&proxy, &rules)) {
        // The gauge may appear with a rule's first window of work.
        if gauge.is_some_and(|l| l != 19.0) || policy != Some(19.0) {
            problems.push(format!(
                "rule {rule}'s level before the flood: gauge {gauge:?}, /policy {policy:?}"
            ));
        }
    }

    // The flood, as many producers a topic as kpress has work slots (one per CPU), at
    // least two: a connection's requests are rewritten in turn, so more connections
    // than slots make requests wait past the deadline, on any machine. From here until
    // the levels are back, the levels each heavy rule shows in the gauge and in /policy
    // are sampled (also while the flood's last runs finish: a rule may step down then).
    let per_topic = std::thread::available_parallelism().map_or(2, |n| n.get().max(2));
    let flood_topics: Vec<&str> = heavy
        .iter()
        .flat_map(|topic| std::iter::repeat_n(*topic, per_topic))
        .collect();
    let flood = Flood::start(
        &proxy.bootstrap(),
        &flood_topics,
        &Dataset::ApacheAccessLog.path(),
    );
    let flood_ends = Instant::now() + Duration::from_secs(15);
    let mut samples = LevelSamples::new(rules.len());
    while Instant::now() < flood_ends || !flood.stop() {
        samples.add(&rules, &effective_levels(&proxy, &rules));
        std::thread::sleep(Duration::from_millis(200));
    }
    let runs: Vec<u64> = flood
        .finish()
        .chunks(per_topic)
        .map(|c| c.iter().sum())
        .collect();
    eprintln!(
        "flood: {runs:?} runs of the dataset; lowest levels so far (gauge, /policy) {:?}",
        samples.lowest
    );

    // Pressure gone, each rule steps back up to its own level. A rule judges windows by
    // the rewrites in them, so a record every 50 ms keeps coming to each heavy topic.
    let records = Dataset::ApacheAccessLog.records();
    let mut trickles: Vec<Trickle> = heavy
        .iter()
        .map(|topic| Trickle::start(&proxy.bootstrap(), topic))
        .collect();
    let deadline = Instant::now() + Duration::from_secs(40);
    let mut last_poll = Instant::now();
    loop {
        for trickle in &mut trickles {
            let record = &records[trickle.sent as usize % records.len()];
            trickle.send(record);
        }
        std::thread::sleep(Duration::from_millis(50));
        if last_poll.elapsed() < Duration::from_millis(250) {
            continue;
        }
        last_poll = Instant::now();
        let levels = effective_levels(&proxy, &rules);
        samples.add(&rules, &levels);
        if levels.iter().all(|l| *l == (Some(19.0), Some(19.0))) {
            break;
        }
        if Instant::now() > deadline {
            problems.push(format!(
                "the rules {rules:?}' levels 40 s after the flood (gauge, /policy): \
                 {levels:?}, not back at 19"
            ));
            break;
        }
    }
    let trickled: Vec<u64> = trickles
        .into_iter()
        .map(|t| t.finish().unwrap_or_else(|e| fail(format!("{e:#}"))))
        .collect();
    eprintln!(
        "after the flood: {trickled:?} records trickled until the levels were back; lowest \
         levels (gauge, /policy) {:?}",
        samples.lowest
    );
    // Which rule feels the pressure depends on how the slots fall: a lane whose two
    // connections hold both slots never waits while the other lane misses every
    // deadline. At least one heavy rule steps down. One log line a step: a rule that
    // stepped went within 3..19 and back to 19, and the gauge and /policy both showed
    // it lowered (a notch holds for at least 3 windows, longer than a sample takes); a
    // rule that logged no change showed 19 throughout.
    problems.append(&mut samples.out_of_range);
    let mut lowered = 0;
    for (rule, (gauge, policy)) in rules.iter().zip(&samples.lowest) {
        let steps = level_steps(&proxy.log(), rule);
        let lowest = steps.iter().map(|(_, to)| *to).min();
        let last = steps.last().map(|(_, to)| *to);
        let ok = if steps.is_empty() {
            *policy == 19.0 && (*gauge == 19.0 || gauge.is_infinite())
        } else {
            lowered += 1;
            steps.len() >= 2
                && lowest.is_some_and(|l| (3..19).contains(&l))
                && last == Some(19)
                && *gauge < 19.0
                && *policy < 19.0
        };
        if !ok {
            problems.push(format!(
                "rule {rule}: level changes in the log (from, to) {steps:?}; lowest level \
                 seen {gauge} (gauge), {policy} (/policy)"
            ));
        }
    }
    if lowered == 0 {
        problems.push("no heavy rule stepped down during the flood".to_string());
    }

    // The light producer: every record acknowledged, read back exactly once.
    producer
        .wait_more_acked(100, Duration::from_secs(30))
        .unwrap_or_else(|e| fail(format!("{e:#}")));
    let report = producer.finish(Duration::from_secs(60)).unwrap();
    let read_back = tally(
        &cluster.bootstrap(),
        light,
        "light",
        &lines,
        Duration::from_secs(60),
    )
    .unwrap();
    let accounting = Accounting::of(&report, &read_back);
    eprintln!("light producer: {accounting}");
    problems.extend(
        accounting
            .problems()
            .into_iter()
            .map(|p| format!("{light}: {p}")),
    );

    // The heavy topics: every record read back as sent (producers' records interleave,
    // so compared sorted).
    for ((topic, runs), trickled) in heavy.iter().zip(&runs).zip(&trickled) {
        let mut expected: Vec<&[u8]> = (0..*runs)
            .flat_map(|_| records.iter().map(Vec::as_slice))
            .chain(
                records
                    .iter()
                    .cycle()
                    .take(*trickled as usize)
                    .map(Vec::as_slice),
            )
            .collect();
        expected.sort_unstable();
        match kcat::consume_partition(&cluster.bootstrap(), topic, 0, &[]) {
            Ok(read) => {
                let mut read: Vec<&[u8]> = read.iter().map(|(_, v)| v.as_slice()).collect();
                read.sort_unstable();
                problems.extend(
                    diff_records(&expected, &read).map(|d| format!("{topic} read back: {d}")),
                );
            }
            Err(e) => problems.push(format!("{topic}: kcat: {e:#}")),
        }
    }

    // Every stored batch valid, and each counted outcome in its codec.
    let metrics = proxy.scrape_metrics().unwrap();
    let stored = stored_batches(&cluster, &[light, heavy[0], heavy[1]]).unwrap();
    let mut overloaded = 0.0;
    for ((topic, stored), (fallback, sent)) in
        [light, heavy[0], heavy[1]].iter().zip(&stored).zip([
            (None, report.progress.acked),
            (Some("lz4"), runs[0] * records.len() as u64 + trickled[0]),
            (None, runs[1] * records.len() as u64 + trickled[1]),
        ])
    {
        let outcomes = by_label(&metrics, BATCHES, ("topic", topic), "outcome");
        eprintln!("{topic}: {outcomes:?}; stored {}", stored.codecs());
        let rule = if topic.starts_with("heavy.") {
            "zstd"
        } else {
            "lz4"
        };
        problems.extend(outcome_problems(
            topic, &outcomes, stored, rule, fallback, "gzip",
        ));
        if stored.records != sent {
            problems.push(format!(
                "{topic}: {sent} records sent, {} stored",
                stored.records
            ));
        }
        let counted = by_label(&metrics, RECORDS, ("topic", topic), "topic")
            .into_values()
            .sum::<f64>() as u64;
        if counted != sent {
            problems.push(format!(
                "{topic}: {sent} records sent, kpress counted {counted}"
            ));
        }
        if topic.starts_with("heavy.") {
            overloaded += ["overloaded_fallback", "overloaded_passed"]
                .iter()
                .filter_map(|o| outcomes.get(*o))
                .sum::<f64>();
        }
    }
    if overloaded == 0.0 {
        problems.push("no heavy batch missed the deadline: the flood overloaded nothing".into());
    }
    assert!(
        problems.is_empty(),
        "{}\n{}",
        problems.join("\n"),
        proxy.log()
    );
    eprintln!("noisy neighbour test took {:.0?}", started.elapsed());
}

/// `capped.*` may spend a ten-thousandth of kpress's rewrite CPU a minute-long window
/// (12 ms with two slots), then falls back to lz4; `free.*` has no cap. The harness
/// lets requests wait for a slot, so no deadline sends anything to the fallback.
const SHARE_POLICY: &str = "\
[overload]
window_ms = 60000

[defaults]
compression.type = \"producer\"

[[topics]]
match = \"capped.*\"
compression.type = \"zstd\"
compression.zstd.level = 19
overload.max_cpu_share = 0.0001
overload.compression.type = \"lz4\"

[[topics]]
match = \"free.*\"
compression.type = \"zstd\"
compression.zstd.level = 19
";

/// A rule past its `overload.max_cpu_share` of the window: its next requests go to its
/// fallback without waiting for a slot, counted `overloaded_fallback` and in
/// `kpress_overload_cpu_share_requests_total`, every batch stored in the codec its
/// outcome says and every record read back as sent; an uncapped rule's batches are all
/// rewritten.
#[test]
fn a_rule_past_its_cpu_share_takes_its_fallback() {
    let (capped, free) = ("capped.a", "free.a");
    let cluster = KafkaCluster::start(kafka_version(), 1).expect("starting Kafka");
    JavaClient::new(kafka_version())
        .create_producer_codec_topics(&cluster.bootstrap(), &[capped, free], 1)
        .unwrap();
    let proxy = KpressProxy::start_with(KpressSetup::in_front_of(
        &cluster.node_addresses(),
        &cluster.node_ids(),
        SHARE_POLICY,
    ))
    .unwrap();
    let file = Dataset::ApacheAccessLog.path();
    let produce = |topic: &str| {
        kcat::produce_file(
            &proxy.bootstrap(),
            topic,
            0,
            Compression::Gzip,
            &file,
            &FLOOD_SETTINGS,
        )
        .unwrap_or_else(|e| panic!("producing into {topic}: {e:#}\n{}", proxy.log()))
    };
    let fallbacks = || {
        let metrics = proxy.scrape_metrics().unwrap();
        by_label(&metrics, BATCHES, ("topic", capped), "outcome")
            .get("overloaded_fallback")
            .copied()
            .unwrap_or(0.0)
    };
    // The first run's requests may all have passed the check before any rewrite was
    // charged; a later run's find the share spent (a run after the window's end starts
    // again).
    let mut runs = 0;
    while runs < 4 && (runs < 2 || fallbacks() == 0.0) {
        produce(capped);
        runs += 1;
    }
    produce(free);

    let records = Dataset::ApacheAccessLog.records();
    let metrics = proxy.scrape_metrics().unwrap();
    let stored = stored_batches(&cluster, &[capped, free]).unwrap();
    let mut problems = Vec::new();
    for ((topic, stored), (fallback, sent)) in [capped, free].iter().zip(&stored).zip([
        (Some("lz4"), runs * records.len() as u64),
        (None, records.len() as u64),
    ]) {
        let outcomes = by_label(&metrics, BATCHES, ("topic", topic), "outcome");
        eprintln!("{topic}: {outcomes:?}; stored {}", stored.codecs());
        problems.extend(outcome_problems(
            topic, &outcomes, stored, "zstd", fallback, "gzip",
        ));
        let count = |o: &str| outcomes.get(o).copied().unwrap_or(0.0);
        let rewritten = count("rewritten") + count("grown");
        let shed = count("overloaded_fallback") + count("overloaded_passed");
        match fallback {
            Some(_) if rewritten == 0.0 || count("overloaded_fallback") == 0.0 => {
                problems.push(format!(
                    "{topic}: {outcomes:?} after {runs} runs; expected batches rewritten, then \
                     batches at the fallback"
                ))
            }
            None if shed > 0.0 => {
                problems.push(format!("{topic}: uncapped, yet {outcomes:?}"));
            }
            _ => {}
        }
        if stored.records != sent {
            problems.push(format!(
                "{topic}: {sent} records sent, {} stored",
                stored.records
            ));
        }
        match kcat::consume_partition(&cluster.bootstrap(), topic, 0, &[]) {
            Ok(read) => {
                let mut expected: Vec<&[u8]> = records
                    .iter()
                    .cycle()
                    .take(sent as usize)
                    .map(Vec::as_slice)
                    .collect();
                let mut read: Vec<&[u8]> = read.iter().map(|(_, v)| v.as_slice()).collect();
                expected.sort_unstable();
                read.sort_unstable();
                problems.extend(
                    diff_records(&expected, &read).map(|d| format!("{topic} read back: {d}")),
                );
            }
            Err(e) => problems.push(format!("{topic}: kcat: {e:#}")),
        }
    }
    let sent_by_share = proxy
        .counter("kpress_overload_cpu_share_requests_total", &[])
        .unwrap_or_else(|e| panic!("{e:#}"));
    if sent_by_share < 1.0 {
        problems.push(format!(
            "kpress_overload_cpu_share_requests_total is {sent_by_share}"
        ));
    }
    assert!(
        problems.is_empty(),
        "{}\n{}",
        problems.join("\n"),
        proxy.log()
    );
}

// ---- The measurement ----

/// Where the light producer's records go, and what stores them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Route {
    /// `KPRESS_BIN`.
    After,
    /// `KPRESS_BASE_BIN`.
    Before,
    /// Straight to the broker, topics configured lz4 and zstd-19.
    Broker,
}

impl Route {
    fn label(self) -> &'static str {
        match self {
            Route::After => "kpress (after)",
            Route::Before => "kpress base (before)",
            Route::Broker => "broker recompressing (anchor)",
        }
    }

    fn light_topic(self) -> &'static str {
        match self {
            Route::After => "light.after",
            Route::Before => "light.before",
            Route::Broker => "light.broker",
        }
    }

    fn heavy_topic(self) -> &'static str {
        match self {
            Route::After => "heavy.after",
            Route::Before => "heavy.before",
            Route::Broker => "heavy.broker",
        }
    }
}

/// The measurement's policy: the same two rules for both builds; the "after" build
/// may step zstd-19 down to 3 under load.
fn measured_policy(adaptive: bool) -> String {
    let (overload, min_level) = if adaptive {
        (
            "[overload]\nadaptive = true\n\n",
            "overload.min_level = 3\n",
        )
    } else {
        ("", "")
    };
    format!(
        "{overload}[defaults]\ncompression.type = \"producer\"\n\n\
         [[topics]]\nmatch = \"heavy.*\"\ncompression.type = \"zstd\"\n\
         compression.zstd.level = 19\n{min_level}\n\
         [[topics]]\nmatch = \"light.*\"\ncompression.type = \"lz4\"\n"
    )
}

/// One light run's percentiles and, under the flood, what the processes spent.
struct Sample {
    summary: PerfSummary,
    /// kpress's CPU seconds per second of the run (None: the broker route).
    kpress_cores: Option<f64>,
    kpress_threads: Option<u64>,
    /// Seconds kpress's threads waited runnable for a CPU, per second of the run.
    kpress_runnable_waiting: Option<f64>,
    broker_cores: f64,
    /// The machine's 1-minute load average at the end of the run.
    load: f64,
}

struct Bench {
    cluster: KafkaCluster,
    broker_pid: u32,
    proxies: Vec<(Route, KpressProxy, u32)>,
    seconds: u64,
    rate: u64,
    /// Whole flood runs of `flood_file` into each route's heavy topic.
    flood_runs: BTreeMap<&'static str, u64>,
    /// The dataset four times over (~9.5 MB, ~10 batches a run), so that a kcat run keeps
    /// its pipeline of requests full for seconds between restarts.
    flood_file: PathBuf,
    _dir: tempfile::TempDir,
}

impl Bench {
    fn bootstrap(&self, route: Route) -> String {
        self.proxy(route)
            .map_or_else(|| self.cluster.bootstrap(), |(p, _)| p.bootstrap())
    }

    fn proxy(&self, route: Route) -> Option<(&KpressProxy, u32)> {
        self.proxies
            .iter()
            .find(|(r, _, _)| *r == route)
            .map(|(_, p, pid)| (p, *pid))
    }

    fn light(&self, route: Route, seconds: u64) -> PerfSummary {
        let mut perf = ProducerPerf::new(
            &self.bootstrap(route),
            route.light_topic(),
            self.rate * seconds,
            Payload::LinesOf(Dataset::ApacheAccessLog.path()),
        );
        perf.throughput = Some(self.rate);
        perf.acks = "1".into();
        perf.compression = Compression::Gzip;
        perf.run(kafka_version())
            .unwrap_or_else(|e| panic!("{}: {e:#}", route.label()))
    }

    fn alone(&self, route: Route) -> Sample {
        let summary = self.light(route, self.seconds);
        eprintln!("{:<30} alone  {}", route.label(), summary.line);
        Sample {
            summary,
            kpress_cores: None,
            kpress_threads: None,
            kpress_runnable_waiting: None,
            broker_cores: 0.0,
            load: load_average(),
        }
    }

    fn flooded(&mut self, route: Route) -> Sample {
        let topic = route.heavy_topic();
        let flood = Flood::start(&self.bootstrap(route), &[topic, topic], &self.flood_file);
        // The flood's first batches are queued before the light producer starts.
        std::thread::sleep(Duration::from_secs(3));
        let pid = self.proxy(route).map(|(_, pid)| pid);
        let cpu = |pid: u32| proc_stat::cpu_seconds(pid).expect("a process's CPU time");
        let (kpress0, broker0, t0) = (pid.map(cpu), cpu(self.broker_pid), Instant::now());
        let waited0 = pid.map(runnable_waiting);
        let summary = self.light(route, self.seconds);
        let wall = t0.elapsed().as_secs_f64();
        let kpress_cores = pid.zip(kpress0).map(|(p, c)| (cpu(p) - c) / wall);
        let broker_cores = (cpu(self.broker_pid) - broker0) / wall;
        let kpress_threads = pid.map(threads);
        let kpress_runnable_waiting = pid
            .zip(waited0)
            .map(|(p, w)| (runnable_waiting(p) - w) / wall);
        let load = load_average();
        let runs: u64 = flood.finish().iter().sum();
        *self.flood_runs.entry(topic).or_default() += runs;
        eprintln!(
            "{:<30} flood  {} kpress {} cores ({} s/s runnable waiting), broker \
             {broker_cores:.2} cores, load {load:.1}, {runs} flood runs",
            route.label(),
            summary.line,
            kpress_cores.map_or("-".into(), |c| format!("{c:.2}")),
            kpress_runnable_waiting.map_or("-".into(), |c| format!("{c:.2}"))
        );
        if let Some(pid) = pid {
            wait_idle(pid);
        }
        wait_idle(self.broker_pid);
        Sample {
            summary,
            kpress_cores,
            kpress_threads,
            kpress_runnable_waiting,
            broker_cores,
            load,
        }
    }
}

/// Threads of process `pid` now.
/// Seconds the threads of process `pid` alive now have waited runnable for a CPU
/// (`/proc/<pid>/task/*/schedstat`'s second field): time the other work on the machine
/// took from kpress.
fn runnable_waiting(pid: u32) -> f64 {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return 0.0;
    };
    tasks
        .filter_map(|task| std::fs::read_to_string(task.ok()?.path().join("schedstat")).ok())
        .filter_map(|line| line.split_whitespace().nth(1)?.parse::<f64>().ok())
        .sum::<f64>()
        / 1e9
}

/// The 1-minute load average.
fn load_average() -> f64 {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|l| l.split_whitespace().next()?.parse().ok())
        .unwrap_or(f64::NAN)
}

fn threads(pid: u32) -> u64 {
    std::fs::read_dir(format!("/proc/{pid}/task")).map_or(0, |d| d.count() as u64)
}

/// Waits (at most 60 s) until `pid` spends under a tenth of a core over a second: the
/// work a flood queued is done before the next run.
fn wait_idle(pid: u32) {
    let deadline = Instant::now() + Duration::from_secs(60);
    let cpu = || proc_stat::cpu_seconds(pid).unwrap_or(0.0);
    while Instant::now() < deadline {
        let before = cpu();
        std::thread::sleep(Duration::from_secs(1));
        if cpu() - before < 0.1 {
            return;
        }
    }
}

fn binary(var: &str) -> Option<PathBuf> {
    std::env::var_os(var).map(PathBuf::from)
}

#[test]
#[ignore = "a measurement: scripts/load.sh runs it with a release kpress"]
fn noisy_neighbour() {
    let started = Instant::now();
    let seconds = env_number("NOISY_SECONDS", 20);
    let rounds = env_number("NOISY_ROUNDS", 2);
    let rate = env_number("NOISY_RATE", 300);
    let adaptive = env_number("NOISY_ADAPTIVE", 1) != 0;
    if !release_kpress() {
        eprintln!("warning: kpress is a debug build; set KPRESS_BIN to a release build");
    }
    let base = binary("KPRESS_BASE_BIN");
    let mut routes = vec![Route::After];
    if base.is_some() {
        routes.push(Route::Before);
    }
    routes.push(Route::Broker);

    let cluster = KafkaCluster::start(kafka_version(), 1).expect("starting Kafka");
    let java = JavaClient::new(kafka_version());
    let producer_topics: Vec<&str> = [Route::After, Route::Before]
        .iter()
        .flat_map(|r| [r.light_topic(), r.heavy_topic()])
        .collect();
    java.create_producer_codec_topics(&cluster.bootstrap(), &producer_topics, 1)
        .unwrap();
    java.create_topic(
        &cluster.bootstrap(),
        Route::Broker.light_topic(),
        1,
        &["compression.type=lz4"],
    )
    .unwrap();
    java.create_topic(
        &cluster.bootstrap(),
        Route::Broker.heavy_topic(),
        1,
        &["compression.type=zstd", "compression.zstd.level=19"],
    )
    .unwrap();
    let setup = |policy: String| {
        KpressSetup::in_front_of(&cluster.node_addresses(), &cluster.node_ids(), &policy)
            .measuring()
    };
    let mut proxies = Vec::new();
    let after = KpressProxy::start_with(setup(measured_policy(adaptive))).unwrap();
    let pid = kpress_pid(&after);
    proxies.push((Route::After, after, pid));
    if let Some(base) = &base {
        let before = KpressProxy::start_binary_with(base, setup(measured_policy(false))).unwrap();
        let pid = kpress_pid(&before);
        proxies.push((Route::Before, before, pid));
    }
    let dir = tempfile::tempdir().unwrap();
    let flood_file = dir.path().join("flood.log");
    let dataset = std::fs::read(Dataset::ApacheAccessLog.path()).unwrap();
    std::fs::write(&flood_file, dataset.repeat(FLOOD_REPEATS)).unwrap();
    let mut bench = Bench {
        broker_pid: broker_pid(&cluster),
        cluster,
        proxies,
        seconds,
        rate,
        flood_runs: BTreeMap::new(),
        flood_file,
        _dir: dir,
    };

    // Warm-up, unmeasured: the JVMs' and kpress's first connections and rewrites.
    for route in &routes {
        bench.light(*route, 5);
    }
    let mut alone: Vec<Vec<Sample>> = routes.iter().map(|_| Vec::new()).collect();
    let mut flooded: Vec<Vec<Sample>> = routes.iter().map(|_| Vec::new()).collect();
    for round in 0..rounds {
        let mut order: Vec<usize> = (0..routes.len()).collect();
        if round % 2 == 1 {
            order.reverse();
        }
        for i in order {
            alone[i].push(bench.alone(routes[i]));
            flooded[i].push(bench.flooded(routes[i]));
        }
    }

    let heavy: Vec<&str> = routes.iter().map(|r| r.heavy_topic()).collect();
    // What kpress did with the heavy batches, and how its level moved.
    let shed: Vec<(Route, String)> = bench
        .proxies
        .iter()
        .map(|(route, proxy, _)| {
            let metrics = proxy.scrape_metrics().unwrap_or_default();
            let outcomes = by_label(&metrics, BATCHES, ("topic", route.heavy_topic()), "outcome");
            let outcomes: Vec<String> = outcomes
                .iter()
                .map(|(outcome, n)| format!("{n:.0} {outcome}"))
                .collect();
            let steps = level_steps(&proxy.log(), "heavy.*");
            let lowest = steps.iter().map(|(_, to)| *to).min();
            (
                *route,
                format!(
                    "{}; {} level changes of `heavy.*`, lowest {}",
                    outcomes.join(", "),
                    steps.len(),
                    lowest.map_or("19 (never stepped down)".into(), |l| l.to_string())
                ),
            )
        })
        .collect();
    let stored = stored_batches(&bench.cluster, &heavy).unwrap();
    let dataset_bytes = std::fs::metadata(&bench.flood_file).unwrap().len();
    let report = report(&Report {
        routes: &routes,
        alone: &alone,
        flooded: &flooded,
        stored: &stored,
        flood_runs: &bench.flood_runs,
        dataset_bytes,
        seconds,
        rounds,
        rate,
        adaptive,
        base: base.as_deref(),
        shed: &shed,
    });
    publish_report("NOISY_REPORT", &report);
    eprintln!("noisy_neighbour took {:.0?}", started.elapsed());
    let invalid: Vec<String> = heavy
        .iter()
        .zip(&stored)
        .filter(|(_, s)| s.invalid_batches > 0 || !s.problems.is_empty())
        .map(|(t, s)| format!("{t}: {} invalid, {:?}", s.invalid_batches, s.problems))
        .collect();
    assert!(invalid.is_empty(), "{}", invalid.join("\n"));
}

struct Report<'a> {
    routes: &'a [Route],
    alone: &'a [Vec<Sample>],
    flooded: &'a [Vec<Sample>],
    stored: &'a [StoredBatches],
    flood_runs: &'a BTreeMap<&'static str, u64>,
    dataset_bytes: u64,
    seconds: u64,
    rounds: u64,
    rate: u64,
    adaptive: bool,
    base: Option<&'a Path>,
    /// Per kpress route: the heavy topic's batches by outcome and its level changes.
    shed: &'a [(Route, String)],
}

/// Medians of p50, p99 and max over the samples.
fn percentiles(samples: &[Sample]) -> (f64, f64, f64) {
    let of = |f: fn(&PerfSummary) -> f64| median(samples.iter().map(|s| f(&s.summary)).collect());
    (
        of(|s| s.p50_ms as f64),
        of(|s| s.p99_ms as f64),
        of(|s| s.max_latency_ms),
    )
}

fn report(r: &Report<'_>) -> String {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut text = String::new();
    let _ = writeln!(
        text,
        "Noisy neighbour: ProducerPerformance (Kafka {}) into `light.*` (lz4), gzip, {} records/s \
         of datasets/apache_access.log, acks=1, linger.ms=5, for {} s alone, then {} s while two \
         kcat producers (librdkafka, gzip, batch.size=1000000, linger.ms=200, acks=all) flood \
         `heavy.*` (zstd level 19) with the dataset {FLOOD_REPEATS} times over, again and again; one 4.1 broker, {cpus} CPUs. \
         Medians of {} rounds, the routes side by side in turn (every other round reversed). \
         kpress (after): {}{}; kpress base (before): {}. CPU from /proc/<pid>/stat over the \
         light run under the flood; runnable waiting: the seconds per second kpress's \
         threads waited for a CPU (/proc/<pid>/task/*/schedstat), the machine's share of the \
         latency.\n",
        kafka_version(),
        r.rate,
        r.seconds,
        r.seconds,
        r.rounds,
        kpress_binary().display(),
        if r.adaptive {
            ", `[overload] adaptive = true`, `overload.min_level = 3`"
        } else {
            ""
        },
        r.base
            .map_or("not measured (KPRESS_BASE_BIN unset)".into(), |p| {
                p.display().to_string()
            }),
    );
    let _ = writeln!(
        text,
        "| route | alone p50 / p99 / max ms | under flood p50 / p99 / max ms | p50 × alone | p99 × alone | kpress CPU cores (threads) | kpress runnable waiting s/s | broker CPU cores | load average, alone / flood | target |"
    );
    let _ = writeln!(text, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|");
    let mut verdicts = Vec::new();
    for (i, route) in r.routes.iter().enumerate() {
        let (a50, a99, amax) = percentiles(&r.alone[i]);
        let (f50, f99, fmax) = percentiles(&r.flooded[i]);
        let cores: Vec<f64> = r.flooded[i].iter().filter_map(|s| s.kpress_cores).collect();
        let threads: Vec<f64> = r.flooded[i]
            .iter()
            .filter_map(|s| s.kpress_threads.map(|t| t as f64))
            .collect();
        let kpress = if cores.is_empty() {
            String::new()
        } else {
            format!("{:.2} ({:.0})", median(cores), median(threads))
        };
        let broker = median(r.flooded[i].iter().map(|s| s.broker_cores).collect());
        let waiting: Vec<f64> = r.flooded[i]
            .iter()
            .filter_map(|s| s.kpress_runnable_waiting)
            .collect();
        let waiting = if waiting.is_empty() {
            String::new()
        } else {
            format!("{:.2}", median(waiting))
        };
        let load = |samples: &[Sample]| median(samples.iter().map(|s| s.load).collect());
        let loads = format!("{:.1} / {:.1}", load(&r.alone[i]), load(&r.flooded[i]));
        let met = f50 <= 2.0 * a50 && f99 <= 2.0 * a99 + 50.0;
        verdicts.push(format!(
            "{}: p50 {f50:.0} ≤ 2 × {a50:.0} = {:.0} ms and p99 {f99:.0} ≤ 2 × {a99:.0} + 50 = {:.0} ms: {}",
            route.label(),
            2.0 * a50,
            2.0 * a99 + 50.0,
            if met { "met" } else { "**missed**" }
        ));
        let ratio = |f: f64, a: f64| {
            if a > 0.0 {
                format!("{:.1}", f / a)
            } else {
                "–".into()
            }
        };
        let _ = writeln!(
            text,
            "| {} | {a50:.0} / {a99:.0} / {amax:.0} | {f50:.0} / {f99:.0} / {fmax:.0} | {} | {} | {kpress} | {waiting} | {broker:.2} | {loads} | {} |",
            route.label(),
            ratio(f50, a50),
            ratio(f99, a99),
            if met { "met" } else { "**missed**" }
        );
    }
    let _ = writeln!(
        text,
        "\nTarget, under the flood: light p50 ≤ 2 × its p50 alone, p99 ≤ 2 × its p99 alone + 50 ms.\n"
    );
    for verdict in verdicts {
        let _ = writeln!(text, "- {verdict}");
    }
    let _ = writeln!(
        text,
        "\nThe heavy topics after every round (values: the flood file's bytes, the dataset \
         {FLOOD_REPEATS} times with newlines, per flood run; a stopped flood finishes the \
         run under way):\n"
    );
    let _ = writeln!(
        text,
        "| route | flood runs | MB of values | MB stored | stored ÷ values | batches by codec |"
    );
    let _ = writeln!(text, "|---|---:|---:|---:|---:|---|");
    for (route, stored) in r.routes.iter().zip(r.stored) {
        let runs = r.flood_runs.get(route.heavy_topic()).copied().unwrap_or(0);
        let values = (runs * r.dataset_bytes) as f64 / 1e6;
        let _ = writeln!(
            text,
            "| {} | {runs} | {values:.1} | {:.1} | {:.3} | {} |",
            route.label(),
            stored.bytes as f64 / 1e6,
            stored.bytes as f64 / 1e6 / values,
            stored.codecs()
        );
    }
    let _ = writeln!(
        text,
        "\nkpress's heavy batches by outcome (kpress_batches_total) and its level changes \
         (log lines), over the whole run:\n"
    );
    for (route, line) in r.shed {
        let _ = writeln!(text, "- {}: {line}", route.label());
    }
    text
}

#[test]
fn level_steps_reads_the_log_lines_of_one_rule() {
    let log = "2026-11-25T23:14:22Z INFO kpress::policy_reload: overload: level zstd of rule heavy.* now 16 (was 19) rule=heavy.*\n\
               2026-11-25T23:14:23Z INFO kpress::policy_reload: overload: level zstd of rule heavy.a now 16 (was 19)\n\
               2026-11-25T23:14:24Z INFO kpress::policy_reload: overload: level zstd of rule heavy.* now 19 (was 16)\n";
    assert_eq!(level_steps(log, "heavy.*"), [(19, 16), (16, 19)]);
    assert_eq!(level_steps(log, "heavy.a"), [(19, 16)]);
    assert!(level_steps(log, "light.*").is_empty());
}
