//! What reading through kpress costs a consumer, against reading straight from the
//! broker, side by side in one run (an ignored test: a measurement, never a pass/fail
//! on speed). `scripts/load.sh` runs it with a release kpress.
//!
//! One one-node Kafka (the harness's version) holds `CONSUMER_RECORDS` records (default
//! 1,500,000) of datasets/apache_access.log in one partition, written by Kafka's
//! ProducerPerformance as lz4 batches of about 1 MiB (`batch.size=1048576`,
//! `linger.ms=1000`, long enough to fill them) into a `compression.type=producer` topic.
//! A release kpress with the policy `producer` stands in front of it; it relays Fetch as
//! the broker answers it.
//! Each round, Kafka's ConsumerPerformance (a new group each run, from the earliest
//! offset, its default 1 MiB fetch size) reads every record once straight from the
//! broker and once through kpress, in turn, every other round in reverse order, after
//! one discarded warm-up run each way; `CONSUMER_ROUNDS` rounds (default 5).
//!
//! Reported (markdown, printed and written to `$CONSUMERS_REPORT` if set): medians of
//! ConsumerPerformance's MB/s (its MB: 2^20 bytes of record keys and values, as it
//! prints them; `fetch.MB.sec` leaves out the group join, `MB.sec` includes it), the
//! per-round ratio through kpress over direct, kpress's CPU ms (`/proc/<pid>/stat`)
//! per MB fetched, both per 10^6 bytes of record values and per 10^6 bytes of batches
//! as stored and sent, the consumer's and the broker's CPU, and the load other
//! processes put on the machine during each run (`/proc/stat`'s busy time less the
//! consumer's, the broker's and kpress's). Asserted: every run read every record.

use std::fmt::Write as _;
use std::process::Command;
use std::time::Instant;

use kpress_tests::batch_headers::stored_batches;
use kpress_tests::cpu_time::run_cpu_timed;
use kpress_tests::data::Dataset;
use kpress_tests::java;
use kpress_tests::java_client::JavaClient;
use kpress_tests::kpress::{kpress_binary, KpressProxy};
use kpress_tests::measure::{
    alternating_rounds, assert_release_kpress, broker_pid, env_number, kpress_pid, median,
    publish_report, range,
};
use kpress_tests::producer_perf::{Payload, ProducerPerf};
use kpress_tests::{kafka_version, proc_stat, Compression, KafkaCluster};

const TOPIC: &str = "consumers-lz4";
/// The producer's `batch.size`: lz4 batches of about 1 MiB as stored.
const BATCH_BYTES: u32 = 1024 * 1024;
/// Every batch relayed as the producer compressed it.
const PASS_THROUGH_RULES: &str = "[defaults]\ncompression.type = \"producer\"\n";
/// 10^6 bytes: the MB of "CPU ms per MB".
const MB: f64 = 1e6;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Route {
    Direct,
    ThroughKpress,
}

const ROUTES: [Route; 2] = [Route::Direct, Route::ThroughKpress];

impl Route {
    fn label(self) -> &'static str {
        match self {
            Route::Direct => "direct",
            Route::ThroughKpress => "through kpress",
        }
    }
}

/// ConsumerPerformance's result line: `start.time, end.time, data.consumed.in.MB,
/// MB.sec, data.consumed.in.nMsg, nMsg.sec, rebalance.time.ms, fetch.time.ms,
/// fetch.MB.sec, fetch.nMsg.sec`.
#[derive(Debug, Clone, PartialEq)]
struct ConsumerSummary {
    mib: f64,
    mib_per_sec: f64,
    records: u64,
    rebalance_ms: f64,
    fetch_mib_per_sec: f64,
}

impl ConsumerSummary {
    fn parse(line: &str) -> Option<ConsumerSummary> {
        let fields: Vec<&str> = line.trim().split(", ").collect();
        let [_, _, mib, mib_per_sec, records, _, rebalance_ms, _, fetch_mib_per_sec, _] =
            fields.as_slice()
        else {
            return None;
        };
        Some(ConsumerSummary {
            mib: mib.parse().ok()?,
            mib_per_sec: mib_per_sec.parse().ok()?,
            records: records.parse().ok()?,
            rebalance_ms: rebalance_ms.parse().ok()?,
            fetch_mib_per_sec: fetch_mib_per_sec.parse().ok()?,
        })
    }
}

/// One consumer run and what each process spent on it.
#[derive(Debug, Clone)]
struct Sample {
    summary: ConsumerSummary,
    consumer_cpu_seconds: f64,
    broker_cpu_seconds: f64,
    kpress_cpu_seconds: Option<f64>,
    /// Cores other processes kept busy on average during the run.
    other_cores: f64,
}

/// Busy and total jiffies of all CPUs so far (`/proc/stat`'s `cpu` line).
fn machine_jiffies() -> (u64, u64) {
    let stat = std::fs::read_to_string("/proc/stat").expect("reading /proc/stat");
    let line = stat.lines().next().expect("a cpu line");
    let values: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|v| v.parse().ok())
        .collect();
    // user nice system idle iowait irq softirq steal (guest time is inside user).
    let total: u64 = values.iter().take(8).sum();
    let idle = values.get(3).copied().unwrap_or(0) + values.get(4).copied().unwrap_or(0);
    (total - idle, total)
}

fn consumer_command(bootstrap: &str, records: u64, group: &str) -> Command {
    let mut cmd = java::client_command(kafka_version(), &[]);
    // A load tool earns the optimizing compiler (a later flag overrides the earlier one).
    cmd.arg("-XX:TieredStopAtLevel=4")
        .args(["-Duser.language=en", "-Duser.country=US"])
        .arg("org.apache.kafka.tools.ConsumerPerformance")
        .args(["--bootstrap-server", bootstrap])
        .args(["--topic", TOPIC])
        .args(["--messages", &records.to_string()])
        .args(["--group", group])
        .args(["--timeout", "30000"])
        .arg("--hide-header");
    cmd
}

fn cores_online() -> f64 {
    std::thread::available_parallelism().map_or(1.0, |n| n.get() as f64)
}

/// Reads every record once straight from the broker and once through kpress,
/// alternating; see the file's documentation.
#[test]
#[ignore = "a measurement of about 3 minutes; scripts/load.sh runs it with a release kpress"]
fn consumers_through_kpress() {
    assert_release_kpress(None);
    let n_rounds = env_number("CONSUMER_ROUNDS", 5).max(1);
    let records = env_number("CONSUMER_RECORDS", 1_500_000).max(1);
    let started = Instant::now();
    let load_before = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let cluster =
        KafkaCluster::start(kafka_version(), 1).unwrap_or_else(|e| panic!("starting Kafka: {e:#}"));
    let broker_pid = broker_pid(&cluster);
    // Started early: the broker and kpress settle while the records are written.
    let proxy = KpressProxy::start_measuring_in_front_of(&cluster, PASS_THROUGH_RULES)
        .unwrap_or_else(|e| panic!("starting kpress: {e:#}"));
    let kpress_pid = kpress_pid(&proxy);
    JavaClient::new(kafka_version())
        .create_topic(
            &cluster.bootstrap(),
            TOPIC,
            1,
            &["compression.type=producer", "max.message.bytes=8388608"],
        )
        .unwrap_or_else(|e| panic!("creating {TOPIC}: {e:#}"));

    let mut perf = ProducerPerf::new(
        &cluster.bootstrap(),
        TOPIC,
        records,
        Payload::LinesOf(Dataset::ApacheAccessLog.path()),
    );
    perf.compression = Compression::Lz4;
    perf.batch_size = BATCH_BYTES;
    perf.linger_ms = 1000;
    perf.properties = vec!["max.request.size=8388608".to_string()];
    let produced = perf
        .run(kafka_version())
        .unwrap_or_else(|e| panic!("writing the records: {e:#}"));
    eprintln!("written: {}", produced.line);
    let stored = stored_batches(&cluster, &[TOPIC])
        .unwrap_or_else(|e| panic!("{e:#}"))
        .remove(0);
    let stored_batches_n: u64 = stored.batches_by_codec.values().sum();
    assert_eq!(stored.records, records, "every record stored: {stored:?}");
    // ProducerPerformance's values are the dataset's lines; their bytes per record.
    let lines = Dataset::ApacheAccessLog.records();
    let value_bytes_per_record =
        lines.iter().map(|l| l.len() as f64).sum::<f64>() / lines.len() as f64;

    let mut group_serial = 0u32;
    let mut run = |route: Route| -> Sample {
        group_serial += 1;
        let bootstrap = match route {
            Route::Direct => cluster.bootstrap(),
            Route::ThroughKpress => proxy.bootstrap(),
        };
        let group = format!("consumers-cost-{group_serial}");
        let cpu = |pid: u32| proc_stat::cpu_seconds(pid).expect("a process's CPU time");
        let (kpress_before, broker_before, machine_before) =
            (cpu(kpress_pid), cpu(broker_pid), machine_jiffies());
        let wall = Instant::now();
        let timed = run_cpu_timed(&mut consumer_command(&bootstrap, records, &group))
            .unwrap_or_else(|e| panic!("ConsumerPerformance {}: {e:#}", route.label()));
        let wall = wall.elapsed().as_secs_f64();
        let (kpress_cpu, broker_cpu) = (
            cpu(kpress_pid) - kpress_before,
            cpu(broker_pid) - broker_before,
        );
        let machine_after = machine_jiffies();
        let busy_seconds = (machine_after.0 - machine_before.0) as f64 / 100.0;
        let summary = timed
            .stdout
            .lines()
            .find_map(ConsumerSummary::parse)
            .unwrap_or_else(|| {
                panic!(
                    "no ConsumerPerformance result line {}:\n{}\n{}",
                    route.label(),
                    timed.stdout,
                    timed.stderr
                )
            });
        assert_eq!(
            summary.records,
            records,
            "{}: every record read\n{}",
            route.label(),
            timed.stderr
        );
        let ours = timed.cpu_seconds + broker_cpu + kpress_cpu;
        let sample = Sample {
            consumer_cpu_seconds: timed.cpu_seconds,
            broker_cpu_seconds: broker_cpu,
            kpress_cpu_seconds: (route == Route::ThroughKpress).then_some(kpress_cpu),
            other_cores: ((busy_seconds - ours) / wall).max(0.0),
            summary,
        };
        eprintln!(
            "{:<15} fetch {:.1} MB/s, {:.1} MB/s with the join ({:.0} ms), consumer {:.2} CPU s, \
             broker {:.2}, kpress {:.2}, others {:.2} cores",
            route.label(),
            sample.summary.fetch_mib_per_sec,
            sample.summary.mib_per_sec,
            sample.summary.rebalance_ms,
            sample.consumer_cpu_seconds,
            sample.broker_cpu_seconds,
            kpress_cpu,
            sample.other_cores
        );
        sample
    };
    eprintln!("warm-up (discarded):");
    let _ = alternating_rounds(1, ROUTES.len(), |i| run(ROUTES[i]));
    eprintln!("{n_rounds} rounds of {records} records:");
    let samples = alternating_rounds(n_rounds, ROUTES.len(), |i| run(ROUTES[i]));
    let load_after = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();

    let [direct, through] = [&samples[0], &samples[1]];
    let values = |s: &[Sample], f: &dyn Fn(&Sample) -> f64| s.iter().map(f).collect::<Vec<f64>>();
    let fetch = |s: &Sample| s.summary.fetch_mib_per_sec;
    let whole = |s: &Sample| s.summary.mib_per_sec;
    let ratios = |f: &dyn Fn(&Sample) -> f64| -> Vec<f64> {
        direct
            .iter()
            .zip(through.iter())
            .map(|(d, t)| f(t) / f(d))
            .collect()
    };
    let value_mb = records as f64 * value_bytes_per_record / MB;
    let wire_mb = stored.bytes as f64 / MB;
    let kpress_ms: Vec<f64> = through
        .iter()
        .map(|s| s.kpress_cpu_seconds.unwrap_or(0.0) * 1e3)
        .collect();
    let per = |mb: f64| kpress_ms.iter().map(|ms| ms / mb).collect::<Vec<f64>>();
    let runs = |v: &[f64], digits: usize| {
        v.iter()
            .map(|x| format!("{x:.digits$}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let med = |v: &[f64]| median(v.to_vec());

    let mut text = String::new();
    let _ = writeln!(
        text,
        "ConsumerPerformance (Kafka {}) reading {records} records of datasets/apache_access.log \
         ({:.0} B values, {:.1} MB of values) from one partition, stored as {stored_batches_n} \
         lz4 batches ({:.1} MB as stored, {:.0} KiB a batch; ProducerPerformance with \
         batch.size={BATCH_BYTES}, linger.ms=1000), one broker; a new group a run, fetch size \
         1 MiB; kpress {} with the policy `producer` (Fetch relayed as answered). {:.0} CPUs. \
         Medians of {n_rounds} rounds (each: direct and through kpress in turn, every other \
         round reversed) after a discarded warm-up; the ratio is taken per round. MB/s are \
         ConsumerPerformance's (2^20 bytes of records per second); CPU from /proc/<pid>/stat \
         and wait4.\n",
        kafka_version(),
        value_bytes_per_record,
        value_mb,
        wire_mb,
        stored.bytes as f64 / stored_batches_n.max(1) as f64 / 1024.0,
        kpress_binary().display(),
        cores_online(),
    );
    let _ = writeln!(
        text,
        "| | direct | through kpress | ratio (per round) |\n|---|---:|---:|---:|"
    );
    for (name, f) in [
        (
            "fetch MB/s (fetch.MB.sec, after the group join)",
            &fetch as &dyn Fn(&Sample) -> f64,
        ),
        ("MB/s with the group join (MB.sec)", &whole),
    ] {
        let (d, t) = (values(direct, f), values(through, f));
        let r = ratios(f);
        let _ = writeln!(
            text,
            "| {name} | {:.1} ({}) | {:.1} ({}) | {:.3} ({}); of the medians {:.3} |",
            med(&d),
            runs(&d, 1),
            med(&t),
            runs(&t, 1),
            med(&r),
            runs(&r, 3),
            med(&t) / med(&d)
        );
    }
    let consumer = |s: &Sample| s.consumer_cpu_seconds * 1e3 / value_mb;
    let broker = |s: &Sample| s.broker_cpu_seconds * 1e3 / value_mb;
    let others = |s: &Sample| s.other_cores;
    for (name, f, digits) in [
        (
            "consumer CPU ms per MB of values",
            &consumer as &dyn Fn(&Sample) -> f64,
            2,
        ),
        ("broker CPU ms per MB of values", &broker, 2),
        ("other processes' load, cores busy", &others, 2),
    ] {
        let (d, t) = (values(direct, f), values(through, f));
        let _ = writeln!(
            text,
            "| {name} | {:.digits$} ({}) | {:.digits$} ({}) | |",
            med(&d),
            runs(&d, digits),
            med(&t),
            runs(&t, digits),
        );
    }
    let (per_value, per_wire) = (per(value_mb), per(wire_mb));
    let _ = writeln!(
        text,
        "| kpress CPU ms per MB of values fetched | | {:.3} ({}) | |\n\
         | kpress CPU ms per MB of batches fetched (as stored and sent) | | {:.3} ({}) | |",
        med(&per_value),
        runs(&per_value, 3),
        med(&per_wire),
        runs(&per_wire, 3),
    );
    let (lo, hi) = range(values(through, &fetch));
    let _ =
        writeln!(
        text,
        "\nThrough kpress, fetch MB/s ranged {lo:.1}-{hi:.1}. Load average before: {}; after: {}. \
         /proc/stat counts whole ticks (10 ms): kpress's CPU a run is {} s.\n",
        load_before.split_whitespace().take(3).collect::<Vec<_>>().join(" "),
        load_after.split_whitespace().take(3).collect::<Vec<_>>().join(" "),
        runs(&kpress_ms.iter().map(|ms| ms / 1e3).collect::<Vec<_>>(), 2),
    );
    publish_report("CONSUMERS_REPORT", &text);
    eprintln!("consumers_through_kpress took {:.0?}", started.elapsed());
}

#[test]
fn parses_consumer_performance_results() {
    let line = "2026-11-28 08:10:00:123, 2026-11-28 08:10:03:456, 354.6011, 106.3900, 1500000, \
                450045.0045, 412, 2921, 121.3972, 513522.7662";
    let parsed = ConsumerSummary::parse(line).unwrap();
    assert_eq!(parsed.records, 1_500_000);
    assert!((parsed.mib - 354.6011).abs() < 1e-9);
    assert!((parsed.mib_per_sec - 106.39).abs() < 1e-9);
    assert!((parsed.rebalance_ms - 412.0).abs() < 1e-9);
    assert!((parsed.fetch_mib_per_sec - 121.3972).abs() < 1e-9);
    assert!(ConsumerSummary::parse("start.time, end.time").is_none());
}
