//! A measurement, not a check (`--ignored --nocapture`, a release kpress: `KPRESS_BIN`
//! or `scripts/load.sh`): what `compression.type = "auto"` stores and costs against
//! fixed policies and against the best fixed codec in hindsight, topic by topic.
//!
//! Seven topics (tests/harness/workloads.rs, seeded): NGINX Plus JSON, Apache logs and
//! Influx metrics in large batches (256 KiB of values, sent lz4), small JSON events and
//! Apache logs in tiny batches (4 records, sent uncompressed), gzip'd blobs and random
//! bytes in large batches (sent uncompressed: nothing compresses them). Each topic's
//! batches are built once and sent, paced (`AUTOPILOT_SECONDS`), the same batches in
//! the same order on every route, through a release kpress into a 4.1.1 broker
//! (Produce v7, acks=all, a connection per topic). Routes, one after another, each with
//! topics of its own:
//!
//!  - `auto`: `[defaults] compression.type = "auto"` with `auto.max_cores` (the CPU
//!    budget), trials at kpress's `[shadow]` defaults (an undecided topic sampled at
//!    the exploration rate, a decided one at `[shadow] sample`) unless the knobs below
//!    set them, decisions every `[autopilot] window_ms`;
//!  - `zstd-3`, `lz4`, `gzip-6`, `snappy`: every topic in that codec (kpress's default
//!    rewrite, whether or not smaller);
//!  - `producer`: every batch as sent.
//!
//! Stored bytes are read from the broker's segments batch by batch. Since every route
//! stores the same batches at the same offsets, the best fixed codec in hindsight of a
//! topic is the smallest of the fixed routes' stored bytes (the four codecs and as
//! sent), and "after convergence" compares the batches the auto route stored from its
//! final choice on with the same batches on every fixed route. Reported per topic and in
//! total: stored bytes per route, auto over the best in hindsight (target: within 3%),
//! the auto route's choices, when each was taken (from the first record) and how many
//! changes led there (the `kpress_autopilot_choice` gauge, polled every 200 ms); per
//! route, kpress's CPU seconds (`/proc/<pid>/stat`; the auto route's trials apart, from
//! `kpress_shadow_cpu_seconds_total`), stored bytes and MB saved per CPU-second, over
//! the run and over the batches sent once every auto topic had its final choice; and
//! per topic what each candidate made of the auto route's trials (ratio, CPU per MB).
//!
//! Knobs:
//!
//!   AUTOPILOT_SECONDS=120       how long each route sends (paced)
//!   AUTOPILOT_LARGE_RATE=4      batches/s of each large-batch topic (256 KiB each)
//!   AUTOPILOT_TINY_RATE=100     batches/s of each tiny-batch topic
//!   AUTOPILOT_MAX_CORES=1       the auto route's `auto.max_cores`
//!   AUTOPILOT_SAMPLE            its `[shadow] sample` (unset: kpress's default)
//!   AUTOPILOT_TRIAL_CPU         its `[shadow] max_cpu_fraction` (unset: kpress's default)
//!   AUTOPILOT_MIN_SAMPLES       its `auto.min_samples` (unset: kpress's default)
//!   AUTOPILOT_WINDOW_MS=2000    its `[autopilot] window_ms`
//!   AUTOPILOT_REPORT=path.md    also write the report there
//!
//!   KPRESS_BIN=target/release/kpress cargo test -p kpress-tests --test autopilot_bench \
//!     -- --ignored --exact autopilot_bench --nocapture

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use kpress_batch::builder::BatchBuilder;
use kpress_codec::Codec;
use kpress_tests::java_client::JavaClient;
use kpress_tests::kpress::{KpressProxy, KpressSetup};
use kpress_tests::measure::{assert_release_kpress, env_number, kpress_pid, publish_report};
use kpress_tests::raw_produce::{connect_retrying, produce_raw_on};
use kpress_tests::workloads::{metric_samples, stored_batches, Kind, Shape, TopicLoad};
use kpress_tests::{kafka_version, proc_stat, KafkaCluster};

/// The gauge saying what each topic's autopilot chose (1 for the chosen candidate).
const CHOICE_GAUGE: &str = "kpress_autopilot_choice";
/// Large batches: 256 KiB of values.
const LARGE: Shape = Shape::Bytes(256 << 10);
/// How far over the best fixed codec in hindsight auto may store.
const TARGET: f64 = 0.03;

/// One topic of the workload: what it carries, in what batches, sent how.
#[derive(Debug, Clone)]
struct Topic {
    load: TopicLoad,
    sent: Codec,
    /// Batches a second.
    rate: f64,
    /// The wire batches, built once.
    batches: Vec<Vec<u8>>,
    /// Bytes of the record values.
    values: usize,
}

impl Topic {
    fn name(&self) -> String {
        self.load.topic("t").trim_start_matches("t.").to_string()
    }

    fn build(kind: Kind, shape: Shape, sent: Codec, rate: f64, seconds: f64) -> Topic {
        let load = TopicLoad::new(kind, shape, 2026);
        let count = (rate * seconds).ceil().max(1.0) as usize;
        let mut generator = kpress_tests::workloads::Generator::new(kind, load.seed);
        let mut values = 0;
        let batches = (0..count)
            .map(|_| {
                let records = shape.next_batch(&mut generator);
                values += records.iter().map(Vec::len).sum::<usize>();
                BatchBuilder::codec(sent).build_values(&records).unwrap()
            })
            .collect();
        Topic {
            load,
            sent,
            rate,
            batches,
            values,
        }
    }
}

/// How a route's kpress treats every topic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Route {
    Auto,
    Fixed(&'static str, &'static str),
}

const FIXED: [Route; 5] = [
    Route::Fixed(
        "zstd-3",
        "compression.type = \"zstd\"\ncompression.zstd.level = 3",
    ),
    Route::Fixed("lz4", "compression.type = \"lz4\""),
    Route::Fixed(
        "gzip-6",
        "compression.type = \"gzip\"\ncompression.gzip.level = 6",
    ),
    Route::Fixed("snappy", "compression.type = \"snappy\""),
    Route::Fixed("producer", "compression.type = \"producer\""),
];

impl Route {
    fn name(self) -> &'static str {
        match self {
            Route::Auto => "auto",
            Route::Fixed(name, _) => name,
        }
    }

    fn rules(self, settings: &AutoSettings) -> String {
        match self {
            Route::Auto => {
                let mut rules = format!(
                    "[defaults]\ncompression.type = \"auto\"\nauto.max_cores = {:?}\n",
                    settings.max_cores
                );
                if let Some(min) = settings.min_samples {
                    let _ = writeln!(rules, "auto.min_samples = {min}");
                }
                if settings.sample.is_some() || settings.trial_cpu.is_some() {
                    rules.push_str("\n[shadow]\n");
                }
                if let Some(sample) = settings.sample {
                    let _ = writeln!(rules, "sample = {sample:?}");
                }
                if let Some(fraction) = settings.trial_cpu {
                    let _ = writeln!(rules, "max_cpu_fraction = {fraction:?}");
                }
                let _ = write!(
                    rules,
                    "\n[autopilot]\ntopic = \"_kpress_autopilot.bench\"\nwindow_ms = {}\n",
                    settings.window_ms
                );
                rules
            }
            Route::Fixed(_, keys) => format!("[defaults]\n{keys}\n"),
        }
    }
}

#[derive(Debug, Clone, Copy)]
struct AutoSettings {
    max_cores: f64,
    /// `None`: kpress's default.
    sample: Option<f64>,
    trial_cpu: Option<f64>,
    min_samples: Option<u64>,
    window_ms: u64,
}

impl AutoSettings {
    /// The trial settings as the report states them.
    fn describe(&self) -> String {
        let or_default = |value: Option<String>, default: String| {
            value.unwrap_or_else(|| format!("{default} (default)"))
        };
        format!(
            "`[shadow] sample = {}` (undecided topics at `max(sample, {})`), \
             `max_cpu_fraction = {}`, `auto.min_samples = {}`",
            or_default(
                self.sample.map(|v| v.to_string()),
                kpress_config::SHADOW_SAMPLE_DEFAULT.to_string()
            ),
            kpress_config::AUTO_EXPLORE_SAMPLE,
            or_default(
                self.trial_cpu.map(|v| v.to_string()),
                kpress_config::SHADOW_MAX_CPU_FRACTION_DEFAULT.to_string()
            ),
            or_default(
                self.min_samples.map(|v| v.to_string()),
                kpress_config::AUTO_MIN_SAMPLES_DEFAULT.to_string()
            ),
        )
    }
}

fn env_float(name: &str, default: f64) -> f64 {
    match std::env::var(name) {
        Ok(text) => text
            .parse()
            .unwrap_or_else(|_| panic!("{name}={text:?} is not a number")),
        Err(_) => default,
    }
}

fn env_optional<T: std::str::FromStr>(name: &str) -> Option<T> {
    let text = std::env::var(name).ok()?;
    Some(
        text.parse()
            .unwrap_or_else(|_| panic!("{name}={text:?} is not a number")),
    )
}

/// The auto route's trials, read from its /metrics once its topics were sent.
#[derive(Debug, Default)]
struct TrialFigures {
    tried: f64,
    skipped: BTreeMap<String, f64>,
    /// `kpress_shadow_cpu_seconds_total`, summed: the candidates' compression.
    cpu_seconds: f64,
    /// Per (topic, candidate): bytes in, bytes out, CPU seconds; and per topic raw bytes.
    candidates: BTreeMap<(String, String), (f64, f64, f64)>,
    raw: BTreeMap<String, f64>,
}

/// What one route stored and cost.
#[derive(Debug, Default)]
struct RouteRun {
    /// Per topic: stored batch sizes by base offset.
    stored: BTreeMap<String, BTreeMap<i64, usize>>,
    /// Per topic: the base offset of each batch sent, in order, and when it was acked
    /// (seconds from the route's first record).
    acked: BTreeMap<String, Vec<(i64, f64)>>,
    cpu_seconds: f64,
    wall_seconds: f64,
    /// kpress's CPU seconds, polled: (seconds from the first record, CPU seconds since).
    cpu: Vec<(f64, f64)>,
    /// The auto route's trials.
    trials: Option<TrialFigures>,
    /// The auto route's gauge, polled: (seconds from the first record, topic → choice).
    choices: Vec<(f64, BTreeMap<String, String>)>,
}

impl RouteRun {
    fn total(&self, topic: &str) -> usize {
        self.stored.get(topic).map_or(0, |b| b.values().sum())
    }

    /// Stored bytes of `topic`'s batches at offsets `from` on.
    fn total_from(&self, topic: &str, from: i64) -> usize {
        self.stored
            .get(topic)
            .map_or(0, |b| b.range(from..).map(|(_, s)| s).sum())
    }

    /// kpress's CPU seconds from the first poll at or after `at` to the end of sending.
    fn cpu_from(&self, at: f64) -> Option<f64> {
        let (_, start) = self.cpu.iter().find(|(t, _)| *t >= at)?;
        Some(self.cpu_seconds - start)
    }
}

/// Every decided topic's choice, from kpress's gauge (topic → candidate label).
fn choices(proxy: &KpressProxy) -> BTreeMap<String, String> {
    let Ok(text) = proxy.scrape_metrics() else {
        return BTreeMap::new();
    };
    metric_samples(&text, CHOICE_GAUGE)
        .into_iter()
        .filter(|(_, value)| *value == 1.0)
        .filter_map(|(labels, _)| {
            let get = |name: &str| {
                labels
                    .iter()
                    .find(|(k, _)| k == name)
                    .map(|(_, v)| v.clone())
            };
            Some((get("topic")?, get("candidate")?))
        })
        .collect()
}

fn label(labels: &[(String, String)], name: &str) -> String {
    labels
        .iter()
        .find(|(k, _)| k == name)
        .map_or_else(String::new, |(_, v)| v.clone())
}

/// What `proxy`'s shadow trials did: batches tried, skipped by reason, their CPU, and
/// per topic and candidate what they made.
fn trials(proxy: &KpressProxy) -> TrialFigures {
    let text = proxy.scrape_metrics().unwrap_or_default();
    let mut figures = TrialFigures {
        tried: metric_samples(&text, "kpress_shadow_batches_total")
            .iter()
            .map(|(_, v)| v)
            .sum(),
        ..TrialFigures::default()
    };
    for (labels, value) in metric_samples(&text, "kpress_shadow_skipped_total") {
        *figures
            .skipped
            .entry(label(&labels, "reason"))
            .or_insert(0.0) += value;
    }
    for (labels, value) in metric_samples(&text, "kpress_shadow_raw_bytes_total") {
        *figures.raw.entry(label(&labels, "topic")).or_insert(0.0) += value;
    }
    for (index, metric) in [
        "kpress_shadow_bytes_in_total",
        "kpress_shadow_bytes_out_total",
        "kpress_shadow_cpu_seconds_total",
    ]
    .into_iter()
    .enumerate()
    {
        for (labels, value) in metric_samples(&text, metric) {
            let key = (label(&labels, "topic"), label(&labels, "candidate"));
            let entry = figures.candidates.entry(key).or_default();
            match index {
                0 => entry.0 += value,
                1 => entry.1 += value,
                _ => {
                    entry.2 += value;
                    figures.cpu_seconds += value;
                }
            }
        }
    }
    figures
}

fn node(proxy: &KpressProxy, cluster: &KafkaCluster) -> SocketAddr {
    proxy.node_address(cluster.node_ids()[0])
}

fn connect_node(to: SocketAddr) -> std::net::TcpStream {
    connect_retrying(to, Duration::from_secs(120)).unwrap_or_else(|e| panic!("{to}: {e:#}"))
}

/// Error codes a Produce may meet while a new partition's leadership settles:
/// UNKNOWN_TOPIC_OR_PARTITION, LEADER_NOT_AVAILABLE, NOT_LEADER_OR_FOLLOWER.
const SETTLING: [i16; 3] = [3, 5, 6];

/// Sends `batch` to partition 0 of `topic`, again while the partition's leadership
/// settles (up to 10 s); its base offset.
fn produce(stream: &mut std::net::TcpStream, topic: &str, batch: &[u8]) -> Result<i64, String> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let answer = produce_raw_on(stream, topic, 0, batch, Duration::from_secs(120))
            .map_err(|e| format!("{e:#}"))?;
        match answer.error_code {
            0 => return Ok(answer.base_offset),
            code if SETTLING.contains(&code) && Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(100));
            }
            code => return Err(format!("error code {code}")),
        }
    }
}

/// Runs `route`: its topics created, a kpress started, every topic's batches sent at
/// its rate, then what the broker stores read. Err: kpress refused the route's policy.
fn run_route(
    cluster: &KafkaCluster,
    route: Route,
    settings: &AutoSettings,
    topics: &[Topic],
) -> Result<RouteRun, String> {
    let names: Vec<String> = topics
        .iter()
        .map(|t| format!("{}.{}", route.name(), t.name()))
        .collect();
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    JavaClient::new(kafka_version())
        .create_topics(&cluster.bootstrap(), &refs, 1, 1, &[])
        .unwrap_or_else(|e| panic!("creating {refs:?}: {e:#}"));
    let setup = KpressSetup::in_front_of(
        &cluster.node_addresses(),
        &cluster.node_ids(),
        &route.rules(settings),
    )
    .measuring();
    let proxy = KpressProxy::start_with(setup).map_err(|e| format!("{e:#}"))?;
    let pid = kpress_pid(&proxy);
    let to = node(&proxy, cluster);
    let mut run = RouteRun::default();
    let done = AtomicBool::new(false);
    let cpu_before = proc_stat::cpu_seconds(pid).unwrap();
    let started = Instant::now();
    std::thread::scope(|scope| {
        let poller = scope.spawn(|| {
            let mut seen: Vec<(f64, BTreeMap<String, String>)> = Vec::new();
            let mut cpu = Vec::new();
            while !done.load(Ordering::Relaxed) {
                let at = started.elapsed().as_secs_f64();
                if let Ok(seconds) = proc_stat::cpu_seconds(pid) {
                    cpu.push((at, seconds - cpu_before));
                }
                if route == Route::Auto {
                    let now = choices(&proxy);
                    if seen.last().map(|(_, c)| c) != Some(&now) {
                        seen.push((at, now));
                    }
                }
                std::thread::sleep(Duration::from_millis(200));
            }
            (seen, cpu)
        });
        let senders: Vec<_> = topics
            .iter()
            .zip(&names)
            .map(|(topic, name)| {
                scope.spawn(move || {
                    let mut stream = connect_node(to);
                    let mut acked = Vec::with_capacity(topic.batches.len());
                    for (i, batch) in topic.batches.iter().enumerate() {
                        let due = started + Duration::from_secs_f64(i as f64 / topic.rate);
                        if let Some(wait) = due.checked_duration_since(Instant::now()) {
                            std::thread::sleep(wait);
                        }
                        let base_offset = produce(&mut stream, name, batch)
                            .unwrap_or_else(|e| panic!("batch {i} to {name}: {e}"));
                        acked.push((base_offset, started.elapsed().as_secs_f64()));
                    }
                    acked
                })
            })
            .collect();
        for (sender, name) in senders.into_iter().zip(&names) {
            let acked = sender.join().expect("a sender panicked");
            run.acked.insert(name.clone(), acked);
        }
        run.wall_seconds = started.elapsed().as_secs_f64();
        run.cpu_seconds = proc_stat::cpu_seconds(pid).unwrap() - cpu_before;
        // The choices a window or two after the last record.
        if route == Route::Auto {
            run.trials = Some(trials(&proxy));
            std::thread::sleep(Duration::from_millis(2 * settings.window_ms));
        }
        done.store(true, Ordering::Relaxed);
        (run.choices, run.cpu) = poller.join().expect("the poller panicked");
    });
    for name in &names {
        let stored = stored_batches(cluster, name).unwrap();
        run.stored.insert(
            name.clone(),
            stored.iter().map(|b| (b.base_offset, b.size)).collect(),
        );
    }
    drop(proxy);
    Ok(run)
}

/// The auto route's story of one topic: the final choice, when it was taken, and how
/// many times the choice changed (undecided to decided counts as one).
#[derive(Debug, Clone, Default)]
struct Convergence {
    final_choice: Option<String>,
    first_at: Option<f64>,
    final_at: Option<f64>,
    changes: usize,
}

fn convergence(polled: &[(f64, BTreeMap<String, String>)], topic: &str) -> Convergence {
    let mut story = Convergence::default();
    let mut last: Option<&String> = None;
    for (at, choices) in polled {
        let now = choices.get(topic);
        if now != last {
            if now.is_some() {
                story.changes += 1;
                story.first_at.get_or_insert(*at);
            }
            story.final_at = Some(*at);
            last = now;
        }
    }
    story.final_choice = last.cloned();
    story
}

fn mb(bytes: usize) -> f64 {
    bytes as f64 / 1e6
}

#[test]
#[ignore = "measurement: scripts/load.sh, or KPRESS_BIN=… cargo test -p kpress-tests --test autopilot_bench -- --ignored --nocapture"]
fn autopilot_bench() {
    assert_release_kpress(Some("scripts/load.sh"));
    let seconds = env_number("AUTOPILOT_SECONDS", 120) as f64;
    let large_rate = env_float("AUTOPILOT_LARGE_RATE", 4.0);
    let tiny_rate = env_float("AUTOPILOT_TINY_RATE", 100.0);
    let settings = AutoSettings {
        max_cores: env_float("AUTOPILOT_MAX_CORES", 1.0),
        sample: env_optional("AUTOPILOT_SAMPLE"),
        trial_cpu: env_optional("AUTOPILOT_TRIAL_CPU"),
        min_samples: env_optional("AUTOPILOT_MIN_SAMPLES"),
        window_ms: env_number("AUTOPILOT_WINDOW_MS", 2000),
    };
    let built = Instant::now();
    let topics = vec![
        Topic::build(Kind::Json, LARGE, Codec::Lz4, large_rate, seconds),
        Topic::build(Kind::Logs, LARGE, Codec::Lz4, large_rate, seconds),
        Topic::build(Kind::Metrics, LARGE, Codec::Lz4, large_rate, seconds),
        Topic::build(Kind::Events, Shape::TINY, Codec::None, tiny_rate, seconds),
        Topic::build(Kind::Logs, Shape::TINY, Codec::None, tiny_rate, seconds),
        Topic::build(Kind::Compressed, LARGE, Codec::None, large_rate, seconds),
        Topic::build(Kind::Random, LARGE, Codec::None, large_rate, seconds),
    ];
    eprintln!(
        "built {} batches of {} topics in {:.1} s",
        topics.iter().map(|t| t.batches.len()).sum::<usize>(),
        topics.len(),
        built.elapsed().as_secs_f64()
    );
    let cluster = KafkaCluster::start(kafka_version(), 1).expect("starting Kafka");
    let mut runs: Vec<(Route, RouteRun)> = Vec::new();
    let mut notes = Vec::new();
    for route in std::iter::once(Route::Auto).chain(FIXED) {
        eprintln!("route {}: {seconds} s", route.name());
        match run_route(&cluster, route, &settings, &topics) {
            Ok(run) => runs.push((route, run)),
            Err(refused) => {
                let first = refused.lines().find(|l| l.contains("rror")).unwrap_or("");
                notes.push(format!(
                    "Route `{}` left out: kpress refused its policy ({})",
                    route.name(),
                    first.trim()
                ));
            }
        }
    }
    let report = report(&topics, &runs, &settings, seconds, &notes);
    publish_report("AUTOPILOT_REPORT", &report);
}

fn report(
    topics: &[Topic],
    runs: &[(Route, RouteRun)],
    settings: &AutoSettings,
    seconds: f64,
    notes: &[String],
) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{seconds} s a route, paced; auto: `auto.max_cores = {}`, {}, `window_ms = {}`; \
         stored MB from the broker's segments.\n",
        settings.max_cores,
        settings.describe(),
        settings.window_ms
    );
    for note in notes {
        let _ = writeln!(out, "{note}\n");
    }
    if let Some(t) = runs.iter().find_map(|(_, r)| r.trials.as_ref()) {
        let _ = writeln!(
            out,
            "The auto route's trials: {} batches tried, skipped {:?}, {:.2} CPU s compressing \
             (`kpress_shadow_cpu_seconds_total`).\n",
            t.tried, t.skipped, t.cpu_seconds
        );
    }
    let fixed: Vec<&(Route, RouteRun)> = runs.iter().filter(|(r, _)| *r != Route::Auto).collect();
    let auto = runs.iter().find(|(r, _)| *r == Route::Auto).map(|(_, r)| r);
    let _ = write!(out, "| topic | sent | values MB |");
    for (route, _) in runs {
        let _ = write!(out, " {} |", route.name());
    }
    let _ = writeln!(
        out,
        " best in hindsight | auto / best | auto / best after convergence | auto's choice (changes, first, final s) |"
    );
    let _ = write!(out, "|---|---|---:|");
    for _ in runs {
        let _ = write!(out, "---:|");
    }
    let _ = writeln!(out, "---|---:|---:|---|");
    let mut totals = vec![0usize; runs.len()];
    let (mut best_total, mut best_after_total, mut auto_after_total) = (0usize, 0usize, 0usize);
    for topic in topics {
        let name = topic.name();
        let _ = write!(
            out,
            "| {name} | {} | {:.1} |",
            topic.sent.name(),
            mb(topic.values)
        );
        for (i, (route, run)) in runs.iter().enumerate() {
            let stored = run.total(&format!("{}.{name}", route.name()));
            totals[i] += stored;
            let _ = write!(out, " {:.2} |", mb(stored));
        }
        let best = fixed
            .iter()
            .map(|(route, run)| (run.total(&format!("{}.{name}", route.name())), route.name()))
            .min();
        let Some((best_bytes, best_route)) = best else {
            let _ = writeln!(out, " | | | |");
            continue;
        };
        best_total += best_bytes;
        let _ = write!(out, " {best_route} {:.2} |", mb(best_bytes));
        match auto {
            Some(auto) => {
                let auto_name = format!("auto.{name}");
                let story = convergence(&auto.choices, &auto_name);
                let auto_bytes = auto.total(&auto_name);
                // The first batch acknowledged after the final choice was seen.
                let from = story.final_at.and_then(|at| {
                    auto.acked
                        .get(&auto_name)?
                        .iter()
                        .find(|(_, acked)| *acked > at)
                        .map(|(offset, _)| *offset)
                });
                let after = from.map(|from| {
                    let auto_after = auto.total_from(&auto_name, from);
                    let best_after = fixed
                        .iter()
                        .map(|(route, run)| {
                            run.total_from(&format!("{}.{name}", route.name()), from)
                        })
                        .min()
                        .unwrap_or(0);
                    (auto_after, best_after)
                });
                let _ = write!(
                    out,
                    " {:+.1}% |",
                    (auto_bytes as f64 / best_bytes as f64 - 1.0) * 100.0
                );
                match after {
                    Some((a, b)) if b > 0 => {
                        auto_after_total += a;
                        best_after_total += b;
                        let _ = write!(out, " {:+.1}% |", (a as f64 / b as f64 - 1.0) * 100.0);
                    }
                    _ => {
                        let _ = write!(out, " no batch after it |");
                    }
                }
                let _ = writeln!(
                    out,
                    " {} ({}, {}, {}) |",
                    story.final_choice.as_deref().unwrap_or("undecided"),
                    story.changes,
                    story
                        .first_at
                        .map_or("-".to_string(), |s| format!("{s:.1}")),
                    story
                        .final_at
                        .map_or("-".to_string(), |s| format!("{s:.1}")),
                );
            }
            None => {
                let _ = writeln!(out, " | | |");
            }
        }
    }
    let _ = write!(
        out,
        "| **total** | | {:.1} |",
        mb(topics.iter().map(|t| t.values).sum())
    );
    for total in &totals {
        let _ = write!(out, " {:.2} |", mb(*total));
    }
    let _ = write!(out, " {:.2} |", mb(best_total));
    match runs.iter().position(|(r, _)| *r == Route::Auto) {
        Some(i) if best_total > 0 => {
            let _ = write!(
                out,
                " {:+.1}% |",
                (totals[i] as f64 / best_total as f64 - 1.0) * 100.0
            );
            if best_after_total > 0 {
                let _ = write!(
                    out,
                    " {:+.1}% |",
                    (auto_after_total as f64 / best_after_total as f64 - 1.0) * 100.0
                );
            } else {
                let _ = write!(out, " |");
            }
            let _ = writeln!(out, " |");
        }
        _ => {
            let _ = writeln!(out, " | | |");
        }
    }
    let _ = writeln!(
        out,
        "\nTarget: auto within {:.0}% of the best fixed codec in hindsight per topic once \
         converged (\"after convergence\": the batches from the first one acknowledged \
         after the final choice was seen, against the same batches on the fixed routes).\n",
        TARGET * 100.0
    );
    let _ = writeln!(
        out,
        "| route | kpress CPU s | of which trials (compressing) | the rest | wall s | cores | stored MB | stored MB per CPU-second | saved MB (vs as sent) per CPU-second |"
    );
    let _ = writeln!(out, "|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    let as_sent = runs
        .iter()
        .position(|(r, _)| r.name() == "producer")
        .map(|i| totals[i]);
    let per_cpu = |bytes: f64, cpu: f64| {
        if cpu > 0.0 {
            format!("{:.1}", bytes / 1e6 / cpu)
        } else {
            "-".to_string()
        }
    };
    for (i, (route, run)) in runs.iter().enumerate() {
        let saved = as_sent.map_or("-".to_string(), |sent| {
            per_cpu(sent as f64 - totals[i] as f64, run.cpu_seconds)
        });
        let trial_cpu = run.trials.as_ref().map_or(0.0, |t| t.cpu_seconds);
        let _ = writeln!(
            out,
            "| {} | {:.2} | {:.2} | {:.2} | {:.1} | {:.2} | {:.2} | {} | {saved} |",
            route.name(),
            run.cpu_seconds,
            trial_cpu,
            run.cpu_seconds - trial_cpu,
            run.wall_seconds,
            run.cpu_seconds / run.wall_seconds,
            mb(totals[i]),
            per_cpu(totals[i] as f64, run.cpu_seconds),
        );
    }
    if let Some(auto) = auto {
        steady(&mut out, topics, runs, auto);
        profile(&mut out, auto);
    }
    out
}

/// Every route over the batches sent once every auto topic had its final choice.
fn steady(out: &mut String, topics: &[Topic], runs: &[(Route, RouteRun)], auto: &RouteRun) {
    let stories: Vec<(String, Convergence)> = topics
        .iter()
        .map(|t| {
            let name = format!("auto.{}", t.name());
            let story = convergence(&auto.choices, &name);
            (t.name(), story)
        })
        .collect();
    let Some(settled) = stories
        .iter()
        .map(|(_, s)| s.final_at)
        .collect::<Option<Vec<f64>>>()
        .and_then(|ats| ats.into_iter().reduce(f64::max))
    else {
        let _ = writeln!(
            out,
            "\nNot every auto topic had a choice: no settled period."
        );
        return;
    };
    // Per topic, the first batch acknowledged on the auto route after `settled`; every
    // route stored the same batches at the same offsets.
    let from: BTreeMap<String, i64> = stories
        .iter()
        .filter_map(|(name, _)| {
            let acked = auto.acked.get(&format!("auto.{name}"))?;
            let (offset, _) = acked.iter().find(|(_, at)| *at > settled)?;
            Some((name.clone(), *offset))
        })
        .collect();
    let stored_after = |route: Route, run: &RouteRun| -> usize {
        from.iter()
            .map(|(name, offset)| run.total_from(&format!("{}.{name}", route.name()), *offset))
            .sum()
    };
    let as_sent = runs
        .iter()
        .find(|(r, _)| r.name() == "producer")
        .map(|(r, run)| stored_after(*r, run));
    let _ = writeln!(
        out,
        "\nSettled: from {settled:.1} s (every auto topic at its final choice) to the end of \
         sending, the same batches on every route:\n"
    );
    let _ = writeln!(
        out,
        "| route | kpress CPU s | stored MB | stored MB per CPU-second | saved MB (vs as sent) per CPU-second |"
    );
    let _ = writeln!(out, "|---|---:|---:|---:|---:|");
    for (route, run) in runs {
        let stored = stored_after(*route, run);
        let Some(cpu) = run.cpu_from(settled).filter(|c| *c > 0.0) else {
            let _ = writeln!(out, "| {} | - | {:.2} | - | - |", route.name(), mb(stored));
            continue;
        };
        let saved = as_sent.map_or("-".to_string(), |sent| {
            format!("{:.1}", (sent as f64 - stored as f64) / 1e6 / cpu)
        });
        let _ = writeln!(
            out,
            "| {} | {cpu:.2} | {:.2} | {:.1} | {saved} |",
            route.name(),
            mb(stored),
            mb(stored) / cpu,
        );
    }
}

/// Per topic, what each candidate made of the auto route's trials: ratio (bytes out over
/// bytes in as sent) and CPU ms per MB of records.
fn profile(out: &mut String, auto: &RouteRun) {
    let Some(trials) = &auto.trials else {
        return;
    };
    let _ = writeln!(
        out,
        "\nThe auto route's trials per topic: each candidate's bytes out / bytes in as sent, \
         and its compression CPU in ms per MB of records:\n"
    );
    let _ = writeln!(out, "| topic | candidate | out / in | CPU ms per MB |");
    let _ = writeln!(out, "|---|---|---:|---:|");
    for ((topic, candidate), (bytes_in, bytes_out, cpu)) in &trials.candidates {
        let raw = trials.raw.get(topic).copied().unwrap_or(0.0);
        if *bytes_in <= 0.0 || raw <= 0.0 {
            continue;
        }
        let _ = writeln!(
            out,
            "| {topic} | {candidate} | {:.3} | {:.2} |",
            bytes_out / bytes_in,
            cpu * 1e3 / (raw / 1e6)
        );
    }
}
