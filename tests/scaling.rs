//! The "scaling with cores" measurement: how fast one busy producer connection
//! is recompressed on one core and on two, and how throughput and kpress's memory grow
//! with connections and with partitions per request. A release-build kpress
//! (`KPRESS_BIN`, see below) recompresses gzip→zstd-3 in front of a one-node 4.1.1
//! broker whose topic stores batches as sent.
//!
//! The load is hand-built Produce v7 requests (`bare_requests.rs`, acks=1) of records
//! from `datasets/apache_access.log`, gzip-compressed once up front and replayed, each
//! connection keeping `SCALING_IN_FLIGHT` requests (default 5, Kafka's
//! `max.in.flight.requests.per.connection`) unanswered. Replaying prebuilt requests
//! leaves kpress as the bottleneck: a Java producer would spend more CPU compressing
//! gzip than kpress spends recompressing it.
//!
//! - Cores: one connection, one partition per request; the same kpress process is
//!   confined (`taskset -a -p`) to CPU 0, then to CPUs 0-1, alternating over
//!   `SCALING_ROUNDS` rounds (default 3, every other round in reverse order). The
//!   broker and this test are not confined: they share the two cores with kpress.
//! - Connections: 1, 10 and 100 connections sending the same total of requests, one
//!   partition per request (each connection its own partition).
//! - Partitions: 1, 10 and 100 partitions per request, the same records per request.
//!
//! Connections and partitions each run on a fresh kpress (not confined), after a
//! warm-up, so each peak RSS is that setup's; `SCALING_CORES_ONLY=1` leaves them out.
//! Each run sends `SCALING_REQUESTS` requests (default 2000) of `SCALING_RECORDS`
//! records each (default 1024, ~240 KB of values before compression), recompressed to
//! zstd level `SCALING_ZSTD_LEVEL` (default 3). At level 3 kpress needs about as much
//! CPU as the broker appending what it sends, so on two shared cores the broker sets
//! the pace; a higher level makes kpress the bottleneck, which is what the cores
//! comparison needs. It reports, as markdown (printed, and written to
//! `$SCALING_REPORT` if set), medians per setup: records/s, MB/s of record values,
//! kpress's CPU seconds and cores busy (CPU seconds per wall second), the broker's CPU
//! seconds, and kpress's peak RSS during the run (`VmHWM`, reset before each run
//! through `/proc/<pid>/clear_refs`, which sets it to the RSS of the moment). Speed is
//! measured, never asserted; what is asserted is that every partition of every
//! request was acknowledged without error and that kpress rewrote batches and dropped
//! no rewrite.
//!
//! Run: `cargo build --release -p kpress` then
//! `KPRESS_BIN=target/release/kpress cargo test -p kpress-tests --test scaling -- --ignored --nocapture`.

use kpress_batch::builder::{BatchBuilder, Record};
use kpress_codec::Codec;
use kpress_tests::bare_requests::{parse_produce_v7, produce_v7, read_frame};
use kpress_tests::data::Dataset;
use kpress_tests::java_client::JavaClient;
use kpress_tests::kpress::{kpress_binary, KpressProxy};
use kpress_tests::measure::{
    alternating_rounds, assert_release_kpress, broker_pid, env_number, kpress_pid, median,
    publish_report, range, MIB,
};
use kpress_tests::{kafka_version, proc_stat, proc_status, KafkaCluster};
use std::collections::VecDeque;
use std::fmt::Write as _;
use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::process::Command;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

const TOPIC: &str = "scaling";
/// Partitions of the topic: enough for the most connections and partitions per request.
const PARTITIONS: usize = 100;
/// Distinct requests built per setup, replayed in turn.
const DISTINCT_REQUESTS: usize = 8;
/// Bytes in the MB of "MB/s": 10^6 bytes of record values.
const MB: f64 = 1e6;

fn rules(zstd_level: u64) -> String {
    format!(
        "[defaults]\ncompression.type = \"producer\"\n\n[[topics]]\nmatch = \"{TOPIC}\"\n\
         compression.type = \"zstd\"\ncompression.zstd.level = {zstd_level}\n"
    )
}

/// The requests one connection replays: size-prefixed Produce v7 frames, and the
/// records and value bytes each carries.
struct Requests {
    frames: Vec<Vec<u8>>,
    records_per_request: usize,
    value_bytes_per_request: Vec<usize>,
    partitions_per_request: usize,
}

impl Requests {
    /// [`DISTINCT_REQUESTS`] requests of `records` records each (taken in turn from
    /// `lines`, starting at `offset`), split evenly into one gzip batch per partition
    /// of `partitions` (indexes).
    fn build(lines: &[Vec<u8>], offset: usize, records: usize, partitions: &[i32]) -> Requests {
        let per_batch = records.div_ceil(partitions.len());
        let mut next = offset;
        let mut frames = Vec::new();
        let mut value_bytes_per_request = Vec::new();
        for correlation_id in 0..DISTINCT_REQUESTS {
            let mut batches = Vec::new();
            let mut value_bytes = 0;
            for _ in partitions {
                let batch: Vec<Record> = (0..per_batch)
                    .map(|_| {
                        let line = &lines[next % lines.len()];
                        next += 1;
                        value_bytes += line.len();
                        Record::value(line.clone())
                    })
                    .collect();
                batches.push(
                    BatchBuilder::codec(Codec::Gzip)
                        .build(&batch)
                        .expect("a gzip batch"),
                );
            }
            let topic_partitions: Vec<(i32, &[u8])> = partitions
                .iter()
                .zip(&batches)
                .map(|(p, b)| (*p, &b[..]))
                .collect();
            frames.push(produce_v7(
                correlation_id as i32,
                1,
                30_000,
                &[(TOPIC.as_bytes(), topic_partitions)],
            ));
            value_bytes_per_request.push(value_bytes);
        }
        Requests {
            frames,
            records_per_request: per_batch * partitions.len(),
            value_bytes_per_request,
            partitions_per_request: partitions.len(),
        }
    }
}

/// Sends `count` requests (replaying `requests` in turn) on one connection to `addr`,
/// keeping `in_flight` unanswered; checks every answer. Returns the value bytes sent.
fn drive(
    addr: SocketAddr,
    requests: &Requests,
    count: usize,
    in_flight: usize,
    start: &Barrier,
) -> anyhow::Result<usize> {
    let mut stream = TcpStream::connect(addr)?;
    stream.set_nodelay(true)?;
    stream.set_read_timeout(Some(Duration::from_secs(60)))?;
    start.wait();
    let mut waiting = VecDeque::new();
    let mut value_bytes = 0;
    let check = |stream: &mut TcpStream, waiting: &mut VecDeque<usize>| {
        let sent = waiting.pop_front().expect("an answer is owed");
        let body = read_frame(stream)?;
        let (correlation_id, answers) = parse_produce_v7(&body)?;
        anyhow::ensure!(
            correlation_id == sent as i32,
            "answer {correlation_id} for request {sent}"
        );
        anyhow::ensure!(
            answers.len() == requests.partitions_per_request
                && answers.iter().all(|a| a.error_code == 0),
            "request {sent} not stored: {answers:?}"
        );
        anyhow::Ok(())
    };
    for i in 0..count {
        let which = i % requests.frames.len();
        stream.write_all(&requests.frames[which])?;
        value_bytes += requests.value_bytes_per_request[which];
        waiting.push_back(which);
        if waiting.len() >= in_flight {
            check(&mut stream, &mut waiting)?;
        }
    }
    while !waiting.is_empty() {
        check(&mut stream, &mut waiting)?;
    }
    Ok(value_bytes)
}

/// The broker, kpress and the pids whose CPU time is measured.
struct Bench {
    cluster: KafkaCluster,
    broker_pid: u32,
    proxy: KpressProxy,
    kpress_pid: u32,
    lines: Vec<Vec<u8>>,
    in_flight: usize,
    zstd_level: u64,
    /// Batches rewritten and rewrites dropped by the kpress processes already stopped.
    stopped_counts: (f64, f64),
}

/// What one run measured.
#[derive(Debug, Clone)]
struct Sample {
    records: usize,
    value_bytes: usize,
    wall: Duration,
    kpress_cpu_seconds: f64,
    broker_cpu_seconds: f64,
    kpress_peak_rss: u64,
}

impl Sample {
    fn records_per_sec(&self) -> f64 {
        self.records as f64 / self.wall.as_secs_f64()
    }

    fn mb_per_sec(&self) -> f64 {
        self.value_bytes as f64 / MB / self.wall.as_secs_f64()
    }

    fn kpress_cores(&self) -> f64 {
        self.kpress_cpu_seconds / self.wall.as_secs_f64()
    }
}

impl Bench {
    fn start(in_flight: usize, zstd_level: u64) -> Bench {
        let cluster = KafkaCluster::start(kafka_version(), 1)
            .unwrap_or_else(|e| panic!("starting Kafka: {e:#}"));
        let broker_pid = broker_pid(&cluster);
        // Gigabytes are written: the broker may delete all but the last 1 GiB.
        JavaClient::new(kafka_version())
            .create_topic(
                &cluster.bootstrap(),
                TOPIC,
                PARTITIONS as u32,
                &[
                    "compression.type=producer",
                    "retention.bytes=268435456",
                    "segment.bytes=67108864",
                ],
            )
            .unwrap_or_else(|e| panic!("creating {TOPIC}: {e:#}"));
        cluster
            .wait_for_leaders(TOPIC, PARTITIONS)
            .unwrap_or_else(|e| panic!("leaders of {TOPIC}: {e:#}"));
        let (proxy, kpress_pid) = start_kpress(&cluster, zstd_level);
        Bench {
            cluster,
            broker_pid,
            proxy,
            kpress_pid,
            lines: Dataset::ApacheAccessLog.records(),
            in_flight,
            zstd_level,
            stopped_counts: (0.0, 0.0),
        }
    }

    /// Waits until a request to every partition through kpress is stored: leaders may
    /// be elected (what `wait_for_leaders` sees) before they take records.
    fn wait_until_every_partition_stores(&self) {
        let every: Vec<i32> = (0..PARTITIONS as i32).collect();
        let requests = Requests::build(&self.lines, 0, PARTITIONS, &every);
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let stored = drive(self.proxy.listen(), &requests, 1, 1, &Barrier::new(1));
            match stored {
                Ok(_) => return,
                Err(e) if Instant::now() > deadline => panic!("{TOPIC} never stored: {e:#}"),
                Err(_) => std::thread::sleep(Duration::from_millis(500)),
            }
        }
    }

    /// Batches rewritten and rewrites dropped by every kpress of this bench so far.
    fn counts(&self) -> (f64, f64) {
        let count = |name| self.proxy.counter(name, &[]).expect("kpress's metrics");
        (
            self.stopped_counts.0 + count("kpress_batches_rewritten_total"),
            self.stopped_counts.1 + count("kpress_rewrites_dropped_total"),
        )
    }

    /// A fresh kpress in place of the running one, so its peak RSS is of what follows.
    fn restart_kpress(&mut self) {
        self.stopped_counts = self.counts();
        let (proxy, pid) = start_kpress(&self.cluster, self.zstd_level);
        self.proxy = proxy;
        self.kpress_pid = pid;
    }

    /// Confines every kpress thread (and the threads they start later) to `cpus`.
    fn confine_kpress(&self, cpus: &str) {
        let status = Command::new("taskset")
            .args(["-a", "-p", "-c", cpus, &self.kpress_pid.to_string()])
            .stdout(std::process::Stdio::null())
            .status()
            .expect("running taskset");
        assert!(status.success(), "taskset -c {cpus} on kpress: {status}");
    }

    /// One run: `connections` connections, each sending `per_connection` requests of
    /// its own `requests`.
    fn run(&self, requests: &[Requests], per_connection: usize) -> Sample {
        // VmHWM starts again from the current RSS: the peak of this run alone.
        std::fs::write(format!("/proc/{}/clear_refs", self.kpress_pid), "5")
            .expect("resetting kpress's VmHWM");
        let addr = self.proxy.listen();
        let start = Arc::new(Barrier::new(requests.len() + 1));
        let kpress_before = proc_stat::cpu_seconds(self.kpress_pid).expect("kpress's CPU");
        let broker_before = proc_stat::cpu_seconds(self.broker_pid).expect("the broker's CPU");
        let (value_bytes, wall) = std::thread::scope(|scope| {
            let drivers: Vec<_> = requests
                .iter()
                .map(|r| {
                    let start = Arc::clone(&start);
                    let in_flight = self.in_flight;
                    scope.spawn(move || drive(addr, r, per_connection, in_flight, &start))
                })
                .collect();
            start.wait();
            let started = Instant::now();
            let value_bytes: usize = drivers
                .into_iter()
                .map(|d| {
                    d.join().expect("a driver thread").unwrap_or_else(|e| {
                        panic!(
                            "{e:#}\n{}\n{}",
                            self.proxy.log(),
                            self.cluster.describe_logs()
                        )
                    })
                })
                .sum();
            (value_bytes, started.elapsed())
        });
        let sample = Sample {
            records: requests
                .iter()
                .map(|r| r.records_per_request * per_connection)
                .sum(),
            value_bytes,
            wall,
            kpress_cpu_seconds: proc_stat::cpu_seconds(self.kpress_pid).expect("kpress's CPU")
                - kpress_before,
            broker_cpu_seconds: proc_stat::cpu_seconds(self.broker_pid).expect("the broker's CPU")
                - broker_before,
            kpress_peak_rss: proc_status::memory(self.kpress_pid)
                .expect("kpress's memory")
                .peak_rss,
        };
        eprintln!(
            "  {} connection(s) × {per_connection} requests of {} partition(s): {:.0} records/s, \
             {:.1} MB/s, kpress {:.2} CPU s ({:.2} cores), broker {:.2} CPU s, {:.2} s, \
             kpress peak RSS {:.1} MiB",
            requests.len(),
            requests[0].partitions_per_request,
            sample.records_per_sec(),
            sample.mb_per_sec(),
            sample.kpress_cpu_seconds,
            sample.kpress_cores(),
            sample.broker_cpu_seconds,
            wall.as_secs_f64(),
            sample.kpress_peak_rss as f64 / MIB,
        );
        sample
    }

    /// `connections` connections' requests, connection `c` on partition `c` when each
    /// request holds one partition, else on partitions `0..partitions`.
    fn requests(&self, connections: usize, partitions: usize, records: usize) -> Vec<Requests> {
        (0..connections)
            .map(|c| {
                let indexes: Vec<i32> = if partitions == 1 {
                    vec![(c % PARTITIONS) as i32]
                } else {
                    (0..partitions as i32).collect()
                };
                Requests::build(&self.lines, c * 7919, records, &indexes)
            })
            .collect()
    }
}

fn start_kpress(cluster: &KafkaCluster, zstd_level: u64) -> (KpressProxy, u32) {
    let proxy = KpressProxy::start_measuring_in_front_of(cluster, &rules(zstd_level))
        .unwrap_or_else(|e| panic!("starting kpress: {e:#}"));
    let pid = kpress_pid(&proxy);
    (proxy, pid)
}

/// The medians of one setup's runs.
struct Medians {
    label: String,
    runs: usize,
    records_per_sec: f64,
    records_per_sec_range: (f64, f64),
    mb_per_sec: f64,
    kpress_cpu_seconds: f64,
    kpress_cores: f64,
    broker_cpu_seconds: f64,
    kpress_peak_mib: f64,
}

impl Medians {
    fn of(label: &str, samples: &[Sample]) -> Medians {
        let of = |f: fn(&Sample) -> f64| median(samples.iter().map(f).collect());
        Medians {
            label: label.to_string(),
            runs: samples.len(),
            records_per_sec: of(Sample::records_per_sec),
            records_per_sec_range: range(samples.iter().map(Sample::records_per_sec)),
            mb_per_sec: of(Sample::mb_per_sec),
            kpress_cpu_seconds: of(|s| s.kpress_cpu_seconds),
            kpress_cores: of(Sample::kpress_cores),
            broker_cpu_seconds: of(|s| s.broker_cpu_seconds),
            kpress_peak_mib: of(|s| s.kpress_peak_rss as f64 / MIB),
        }
    }
}

fn table(text: &mut String, title: &str, rows: &[Medians]) {
    let _ = writeln!(text, "\n{title}\n");
    let _ = writeln!(
        text,
        "| setup | runs | records/s (slowest–fastest) | × first | MB/s | kpress CPU s | kpress cores busy | broker CPU s | kpress peak RSS MiB |"
    );
    let _ = writeln!(text, "|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    let base = rows.first().map_or(1.0, |b| b.records_per_sec);
    for m in rows {
        let _ = writeln!(
            text,
            "| {} | {} | {:.0} ({:.0}–{:.0}) | {:.2} | {:.1} | {:.2} | {:.2} | {:.2} | {:.1} |",
            m.label,
            m.runs,
            m.records_per_sec,
            m.records_per_sec_range.0,
            m.records_per_sec_range.1,
            m.records_per_sec / base,
            m.mb_per_sec,
            m.kpress_cpu_seconds,
            m.kpress_cores,
            m.broker_cpu_seconds,
            m.kpress_peak_mib,
        );
    }
}

#[test]
#[ignore = "a measurement of minutes; needs a release kpress in KPRESS_BIN"]
fn scaling() {
    assert_release_kpress(None);
    let rounds = env_number("SCALING_ROUNDS", 3).max(1) as usize;
    let count = env_number("SCALING_REQUESTS", 2000).max(1) as usize;
    let records = env_number("SCALING_RECORDS", 1024).max(1) as usize;
    let in_flight = env_number("SCALING_IN_FLIGHT", 5).max(1) as usize;
    let zstd_level = env_number("SCALING_ZSTD_LEVEL", 3);
    let cores_only = env_number("SCALING_CORES_ONLY", 0) != 0;
    let started = Instant::now();
    let mut bench = Bench::start(in_flight, zstd_level);
    eprintln!(
        "broker and kpress up in {:.1?}; kpress binary {}",
        started.elapsed(),
        kpress_binary().display()
    );
    bench.wait_until_every_partition_stores();
    let one = bench.requests(1, 1, records);

    eprintln!("warm-up (discarded):");
    bench.run(&one, (count / 4).max(1));

    eprintln!("cores: one connection, {rounds} rounds");
    let by_cpus = alternating_rounds(rounds as u64, 2, |index| {
        let cpus = ["0", "0,1"][index];
        bench.confine_kpress(cpus);
        eprintln!(" kpress on CPUs {cpus}:");
        bench.run(&one, count)
    });
    bench.confine_kpress("0,1");

    // The rest on a fresh kpress each (unconfined), so each peak RSS is its own.
    let setups: &[(usize, usize)] = if cores_only {
        &[]
    } else {
        &[(1, 1), (10, 1), (100, 1), (1, 10), (1, 100)]
    };
    let mut by_connections = Vec::new();
    let mut by_partitions = Vec::new();
    for &(connections, partitions) in setups {
        let requests = bench.requests(connections, partitions, records);
        bench.restart_kpress();
        eprintln!(" a fresh kpress:");
        // Warmed up as the measured one was.
        bench.run(&requests[..1], (count / 4).max(1));
        let sample = bench.run(&requests, count.div_ceil(connections));
        if partitions == 1 {
            by_connections.push(Medians::of(
                &format!("{connections} connection(s)"),
                std::slice::from_ref(&sample),
            ));
        }
        if connections == 1 {
            by_partitions.push(Medians::of(
                &format!("{partitions} partition(s) per request"),
                &[sample],
            ));
        }
    }

    // What was measured is recompression: batches were rewritten, none dropped.
    let (rewritten, dropped) = bench.counts();

    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut report = String::new();
    let _ = writeln!(
        report,
        "Hand-built Produce v7 requests (acks=1) of {records} records of \
         datasets/apache_access.log (~236 B) each, gzip, {in_flight} in flight per \
         connection, through a release kpress recompressing gzip→zstd-{zstd_level} into a \
         one-node Kafka {} broker; {count} requests a run; {cpus} CPUs shared by kpress, the \
         broker and the load.",
        kafka_version()
    );
    let one_core = Medians::of("one connection, kpress on CPU 0", &by_cpus[0]);
    let two_cores = Medians::of("one connection, kpress on CPUs 0-1", &by_cpus[1]);
    table(
        &mut report,
        &format!("Cores (medians of {rounds} alternating rounds):"),
        &[one_core, two_cores],
    );
    if !cores_only {
        table(
            &mut report,
            "Connections (one run each on a fresh kpress, the same total of requests, one \
             partition per request):",
            &by_connections,
        );
        table(
            &mut report,
            "Partitions per request (one run each on a fresh kpress, one connection, the same \
             records per request):",
            &by_partitions,
        );
    }
    let _ = writeln!(
        report,
        "\nkpress rewrote {rewritten} batches and dropped {dropped} rewrites."
    );
    publish_report("SCALING_REPORT", &report);
    assert!(rewritten > 0.0, "kpress rewrote no batch");
    assert_eq!(dropped, 0.0, "kpress dropped rewrites");
    eprintln!("scaling took {:.0?}", started.elapsed());
}
