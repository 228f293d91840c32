//! The load harness: what kpress costs and saves a producer, measured with
//! Kafka's own ProducerPerformance (`producer_perf.rs`, records from
//! `datasets/apache_access.log`) against a one-node 4.1.1 broker, a release-build kpress
//! (`scripts/load.sh`) and six routes, each compared to the direct route with the same
//! producer settings:
//!
//! - direct, lz4, and through kpress passing batches through (`compression.type =
//!   "producer"`) and recompressing lz4→gzip-6 with the fastest gzip provider of this
//!   host (isal or libdeflate, timed first by the CPU `kpress recompress` spends on an lz4
//!   segment);
//! - direct, gzip, and through kpress recompressing gzip→zstd-3 into a topic that
//!   stores as sent, and directly into a `compression.type=zstd` topic
//!   (`compression.zstd.level=3`), where the broker's LogValidator recompresses: who
//!   pays for the same conversion, the broker or kpress.
//!
//! First a discarded warm-up run per route, then `LOAD_ROUNDS` rounds (default 3) of
//! unthrottled runs of `LOAD_RECORDS` records (default 2,000,000) for throughput and
//! CPU, then as many rounds at a fixed rate for latency (a quarter of the slowest
//! route's median throughput unless `LOAD_LATENCY_RATE` says, records/s, for
//! `LOAD_LATENCY_SECONDS`, default 10), below saturation because an unthrottled
//! producer's latency is the time records wait in its full buffer. Each round runs the
//! routes in turn, every other round in reverse order. Then a sequential
//! single-connection probe times `LOAD_PROBE_ROUND_TRIPS` (default 2000) ApiVersions
//! and Produce v13 round trips (one ~16 KiB lz4 batch each) straight to the broker and
//! through the pass-through kpress, in alternating rounds too.
//!
//! A second measurement, `topic_mode_offload` (`-- --ignored --exact topic_mode_offload`,
//! its report to `$TOPIC_MODE_REPORT`), asks the same question of topic mode: gzip
//! producers into `compression.type=zstd` topics directly (the broker recompresses) and
//! through a kpress configured with nothing but `[listener]` and `[upstream]` (it reads
//! the topic's codec and level and converts in front of the broker), beside gzip into a
//! `producer` topic and zstd sent straight into a zstd topic (what storing zstd as sent
//! costs the broker), in alternating rounds.
//!
//! It reports medians as markdown (printed, and written to `$LOAD_REPORT` if set):
//! records/s and MB/s and latency as ratios to direct, kpress's and the broker's CPU
//! ms per MB of record values (`/proc/<pid>/stat` over each run; MB = 10^6 bytes of
//! values sent), kpress's peak RSS (VmHWM), the probe's added p50/p99, and the targets
//! beside the figures. Speed is measured, never asserted. What is asserted, after the
//! report is written: every record acknowledged and stored, every stored batch valid
//! and in the route's codec (DumpLogSegments, `batch_headers.rs`), the pass-through
//! kpress rewrote nothing and the recompressing ones rewrote.

use kpress_batch::builder::{BatchBuilder, Record};
use kpress_codec::Codec;
use kpress_tests::bare_requests::{api_versions, exchange, parse_api_versions};
use kpress_tests::batch_headers::{stored_batches, StoredBatches};
use kpress_tests::compression::Compression;
use kpress_tests::cpu_time::run_cpu_timed;
use kpress_tests::data::Dataset;
use kpress_tests::java_client::JavaClient;
use kpress_tests::kpress::{kpress_binary, recompress_command, KpressProxy, RecompressOptions};
use kpress_tests::measure::{
    alternating_rounds, assert_release_kpress, broker_pid, env_number, kpress_pid, median,
    peak_rss_mib, publish_report, range, round_order, MIB,
};
use kpress_tests::producer_perf::{Payload, PerfSummary, ProducerPerf};
use kpress_tests::raw_produce::produce_by_id_on;
use kpress_tests::{kafka_version, proc_stat, proc_status, KafkaCluster};
use std::fmt::Write as _;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Bytes in the MB of "CPU ms per MB" and "MB/s": 10^6 bytes of record values.
const MB: f64 = 1e6;
/// Every batch relayed as the producer compressed it.
const PASS_THROUGH_RULES: &str = "[defaults]\ncompression.type = \"producer\"\n";
/// The probe's topic, behind the pass-through kpress.
const PROBE_TOPIC: &str = "load-probe";
/// The probe's Produce batch: about this many bytes of lz4.
const PROBE_BATCH_BYTES: usize = 16 * 1024;
/// Kafka's gzip level (`compression.gzip.level`'s default), which lz4→gzip writes.
const GZIP_LEVEL: u32 = 6;
/// The gzip providers raced for lz4→gzip (zlib, kpress's default, as the reference).
const GZIP_PROVIDERS: [&str; 3] = ["zlib", "libdeflate", "isal"];
const IO_TIMEOUT: Duration = Duration::from_secs(30);

/// How the producer's records reach the broker, and what the broker stores.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Route {
    DirectLz4,
    PassThrough,
    Lz4ToGzip,
    DirectGzip,
    GzipToZstd,
    BrokerZstd,
}

const ROUTES: [Route; 6] = [
    Route::DirectLz4,
    Route::PassThrough,
    Route::Lz4ToGzip,
    Route::DirectGzip,
    Route::GzipToZstd,
    Route::BrokerZstd,
];

impl Route {
    fn label(self) -> &'static str {
        match self {
            Route::DirectLz4 => "direct, lz4",
            Route::PassThrough => "kpress pass-through, lz4",
            Route::Lz4ToGzip => "kpress lz4→gzip-6",
            Route::DirectGzip => "direct, gzip",
            Route::GzipToZstd => "kpress gzip→zstd-3",
            Route::BrokerZstd => "direct, gzip into a zstd-3 topic",
        }
    }

    /// Each route writes its own topic, so what it stored can be checked alone.
    fn topic(self) -> &'static str {
        match self {
            Route::DirectLz4 => "load-direct-lz4",
            Route::PassThrough => "load-pass-through",
            Route::Lz4ToGzip => "load-lz4-gzip",
            Route::DirectGzip => "load-direct-gzip",
            Route::GzipToZstd => "load-gzip-zstd",
            Route::BrokerZstd => "load-broker-zstd",
        }
    }

    fn producer_codec(self) -> Compression {
        match self {
            Route::DirectLz4 | Route::PassThrough | Route::Lz4ToGzip => Compression::Lz4,
            Route::DirectGzip | Route::GzipToZstd | Route::BrokerZstd => Compression::Gzip,
        }
    }

    /// The codec every stored batch of the route must be in.
    fn stored_codec(self) -> Compression {
        match self {
            Route::DirectLz4 | Route::PassThrough => Compression::Lz4,
            Route::Lz4ToGzip | Route::DirectGzip => Compression::Gzip,
            Route::GzipToZstd | Route::BrokerZstd => Compression::Zstd,
        }
    }

    /// The direct route with the same producer settings, which this one is compared to.
    fn direct(self) -> Route {
        match self.producer_codec() {
            Compression::Gzip => Route::DirectGzip,
            _ => Route::DirectLz4,
        }
    }

    fn proxy(self) -> Option<ProxyRole> {
        match self {
            Route::PassThrough => Some(ProxyRole::PassThrough),
            Route::Lz4ToGzip => Some(ProxyRole::Lz4ToGzip),
            Route::GzipToZstd => Some(ProxyRole::GzipToZstd),
            Route::DirectLz4 | Route::DirectGzip | Route::BrokerZstd => None,
        }
    }
}

/// One kpress process per recompressing route, so each has its own peak RSS.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ProxyRole {
    PassThrough,
    Lz4ToGzip,
    GzipToZstd,
}

impl ProxyRole {
    fn rules(self, gzip_provider: &str) -> String {
        match self {
            ProxyRole::PassThrough => PASS_THROUGH_RULES.to_string(),
            ProxyRole::Lz4ToGzip => format!(
                "{PASS_THROUGH_RULES}\n[[topics]]\nmatch = \"{}\"\ncompression.type = \"gzip\"\n\
                 compression.gzip.level = {GZIP_LEVEL}\ncompression.gzip.provider = \"{gzip_provider}\"\n",
                Route::Lz4ToGzip.topic()
            ),
            ProxyRole::GzipToZstd => format!(
                "{PASS_THROUGH_RULES}\n[[topics]]\nmatch = \"{}\"\ncompression.type = \"zstd\"\n\
                 compression.zstd.level = 3\n",
                Route::GzipToZstd.topic()
            ),
        }
    }
}

/// A running kpress and its pid.
struct Proxy {
    role: ProxyRole,
    proxy: KpressProxy,
    pid: u32,
}

/// The broker, its pid, the three kpress proxies and the records' file.
struct Bench {
    cluster: KafkaCluster,
    broker_pid: u32,
    proxies: Vec<Proxy>,
    payload_file: PathBuf,
}

impl Bench {
    fn start(gzip_provider: &str) -> Bench {
        let cluster = KafkaCluster::start(kafka_version(), 1)
            .unwrap_or_else(|e| panic!("starting Kafka: {e:#}"));
        let broker_pid = broker_pid(&cluster);
        let java = JavaClient::new(kafka_version());
        let mut as_sent: Vec<&str> = ROUTES
            .iter()
            .filter(|r| **r != Route::BrokerZstd)
            .map(|r| r.topic())
            .collect();
        as_sent.push(PROBE_TOPIC);
        java.create_topics(
            &cluster.bootstrap(),
            &as_sent,
            1,
            1,
            &["compression.type=producer"],
        )
        .unwrap_or_else(|e| panic!("creating {as_sent:?}: {e:#}"));
        java.create_topic(
            &cluster.bootstrap(),
            Route::BrokerZstd.topic(),
            1,
            &["compression.type=zstd", "compression.zstd.level=3"],
        )
        .unwrap_or_else(|e| panic!("creating {}: {e:#}", Route::BrokerZstd.topic()));
        let proxies = [
            ProxyRole::PassThrough,
            ProxyRole::Lz4ToGzip,
            ProxyRole::GzipToZstd,
        ]
        .into_iter()
        .map(|role| {
            let proxy =
                KpressProxy::start_measuring_in_front_of(&cluster, &role.rules(gzip_provider))
                    .unwrap_or_else(|e| panic!("starting kpress ({role:?}): {e:#}"));
            let pid = kpress_pid(&proxy);
            Proxy { role, proxy, pid }
        })
        .collect();
        Bench {
            cluster,
            broker_pid,
            proxies,
            payload_file: Dataset::ApacheAccessLog.path(),
        }
    }

    fn proxy(&self, role: ProxyRole) -> &Proxy {
        self.proxies
            .iter()
            .find(|p| p.role == role)
            .expect("every role has a proxy")
    }

    /// ProducerPerformance's settings for `route`: the same for every route but the
    /// bootstrap, the topic and the producer's codec.
    fn perf(&self, route: Route, records: u64, throughput: Option<u64>) -> ProducerPerf {
        let bootstrap = match route.proxy() {
            Some(role) => self.proxy(role).proxy.bootstrap(),
            None => self.cluster.bootstrap(),
        };
        let mut perf = ProducerPerf::new(
            &bootstrap,
            route.topic(),
            records,
            Payload::LinesOf(self.payload_file.clone()),
        );
        perf.throughput = throughput;
        perf.acks = "1".to_string();
        perf.linger_ms = 5;
        perf.batch_size = 256 * 1024;
        perf.compression = route.producer_codec();
        perf
    }

    /// One run on `route`, with the CPU seconds kpress and the broker spent meanwhile.
    fn run(&self, route: Route, records: u64, throughput: Option<u64>) -> Sample {
        let kpress_pid = route.proxy().map(|role| self.proxy(role).pid);
        let cpu = |pid: u32| proc_stat::cpu_seconds(pid).expect("a process's CPU time");
        let kpress_before = kpress_pid.map(cpu);
        let broker_before = cpu(self.broker_pid);
        let summary = self
            .perf(route, records, throughput)
            .run(kafka_version())
            .unwrap_or_else(|e| panic!("{}: {e:#}\n{}", route.label(), self.logs(route)));
        let broker_cpu_seconds = cpu(self.broker_pid) - broker_before;
        let kpress_cpu_seconds = kpress_pid
            .zip(kpress_before)
            .map(|(pid, before)| cpu(pid) - before);
        let sample = Sample {
            summary,
            kpress_cpu_seconds,
            broker_cpu_seconds,
        };
        eprintln!(
            "{:<32} {} broker {:.2} CPU s{}",
            route.label(),
            sample.summary.line,
            broker_cpu_seconds,
            kpress_cpu_seconds.map_or(String::new(), |s| format!(", kpress {s:.2} CPU s"))
        );
        sample
    }

    fn logs(&self, route: Route) -> String {
        let proxy = route
            .proxy()
            .map_or(String::new(), |role| self.proxy(role).proxy.log());
        format!("{proxy}\n{}", self.cluster.describe_logs())
    }

    /// kpress's peak RSS in MiB.
    fn peak_mib(&self, role: ProxyRole) -> f64 {
        peak_rss_mib(self.proxy(role).pid)
    }
}

/// What a route's runs sent: records acknowledged and MB of their values.
#[derive(Debug, Clone, Copy, Default)]
struct Sent {
    records: u64,
    value_mb: f64,
}

struct Sample {
    summary: PerfSummary,
    kpress_cpu_seconds: Option<f64>,
    broker_cpu_seconds: f64,
}

impl Sample {
    /// MB (10^6 bytes) of record values the run sent: ProducerPerformance divides the
    /// bytes it sent by its elapsed time, as it does the records, and its "MB/sec" is MiB.
    fn value_mb(&self) -> f64 {
        let s = &self.summary;
        s.mb_per_sec * MIB * s.records as f64 / s.records_per_sec / MB
    }

    fn kpress_ms_per_mb(&self) -> Option<f64> {
        self.kpress_cpu_seconds
            .map(|s| s * 1000.0 / self.value_mb())
    }

    fn broker_ms_per_mb(&self) -> f64 {
        self.broker_cpu_seconds * 1000.0 / self.value_mb()
    }
}

/// Runs `rounds` rounds of every route, every other round in reverse order.
fn rounds(bench: &Bench, rounds: u64, records: u64, throughput: Option<u64>) -> Vec<Vec<Sample>> {
    alternating_rounds(rounds, ROUTES.len(), |index| {
        bench.run(ROUTES[index], records, throughput)
    })
}

/// The medians of one route's runs.
struct Medians {
    records_per_sec: f64,
    /// The slowest and fastest run's records/s.
    records_per_sec_range: (f64, f64),
    /// MB (10^6 bytes) of record values per second.
    mb_per_sec: f64,
    p50_ms: f64,
    p99_ms: f64,
    p999_ms: f64,
    kpress_ms_per_mb: Option<f64>,
    broker_ms_per_mb: f64,
    /// Each round's kpress and broker CPU ms per MB, in round order.
    kpress_runs: Vec<f64>,
    broker_runs: Vec<f64>,
}

impl Medians {
    fn of(samples: &[Sample]) -> Medians {
        let of =
            |f: fn(&PerfSummary) -> f64| median(samples.iter().map(|s| f(&s.summary)).collect());
        let kpress: Vec<f64> = samples
            .iter()
            .filter_map(Sample::kpress_ms_per_mb)
            .collect();
        Medians {
            records_per_sec: of(|s| s.records_per_sec),
            records_per_sec_range: range(samples.iter().map(|s| s.summary.records_per_sec)),
            mb_per_sec: of(|s| s.mb_per_sec * MIB / MB),
            p50_ms: of(|s| s.p50_ms as f64),
            p99_ms: of(|s| s.p99_ms as f64),
            p999_ms: of(|s| s.p999_ms as f64),
            kpress_ms_per_mb: (!kpress.is_empty()).then(|| median(kpress.clone())),
            broker_ms_per_mb: median(samples.iter().map(Sample::broker_ms_per_mb).collect()),
            kpress_runs: kpress,
            broker_runs: samples.iter().map(Sample::broker_ms_per_mb).collect(),
        }
    }
}

/// One provider's lz4→gzip-6 rewrite of the same segment by `kpress recompress`.
struct ProviderTiming {
    provider: &'static str,
    /// Median MB of record values per CPU second (process start and file I/O included,
    /// alike for every provider).
    mb_per_sec: Option<f64>,
    /// Bytes of gzip written.
    bytes_out: u64,
    /// Why it could not run (not available on this host).
    error: Option<String>,
}

/// An lz4 segment of the apache log, repeated `copies` times in batches of
/// `records_per_batch`, written as `dir/00000000000000000000.log`; returns the path
/// and the bytes of record values.
fn write_lz4_segment(dir: &Path, copies: usize, records_per_batch: usize) -> (PathBuf, u64) {
    let lines = Dataset::ApacheAccessLog.records();
    let records: Vec<Record> = (0..copies)
        .flat_map(|_| lines.iter().map(|l| Record::value(l.clone())))
        .collect();
    let value_bytes = (lines.iter().map(Vec::len).sum::<usize>() * copies) as u64;
    let mut segment = Vec::new();
    for (index, chunk) in records.chunks(records_per_batch).enumerate() {
        let builder = BatchBuilder {
            base_offset: (index * records_per_batch) as i64,
            ..BatchBuilder::codec(Codec::Lz4)
        };
        segment.extend(builder.build(chunk).expect("an lz4 batch"));
    }
    let path = dir.join("00000000000000000000.log");
    std::fs::write(&path, &segment).expect("writing the lz4 segment");
    (path, value_bytes)
}

/// Times each gzip provider rewriting an lz4 segment to gzip level 6 with the kpress
/// binary under test, by the CPU time `kpress recompress` used (all its threads, so a
/// rate per core, and far less disturbed by a busy machine than wall time), in `rounds`
/// alternating rounds.
fn time_gzip_providers(rounds: u64) -> Vec<ProviderTiming> {
    let dir = tempfile::Builder::new()
        .prefix("kpress-load-providers-")
        .tempdir()
        .expect("a temp dir");
    // About 47 MB of values in ~236 KB batches (a 256 KiB producer batch's records).
    let (input, value_bytes) = write_lz4_segment(dir.path(), 20, 1000);
    let output = dir.path().join("out.log");
    let mut timings: Vec<(ProviderTiming, Vec<f64>)> = GZIP_PROVIDERS
        .iter()
        .map(|provider| {
            (
                ProviderTiming {
                    provider,
                    mb_per_sec: None,
                    bytes_out: 0,
                    error: None,
                },
                Vec::new(),
            )
        })
        .collect();
    for round in 0..rounds {
        for index in round_order(round, timings.len()) {
            let (timing, speeds) = &mut timings[index];
            if timing.error.is_some() {
                continue;
            }
            let options = RecompressOptions {
                properties: vec![
                    format!("compression.gzip.level={GZIP_LEVEL}"),
                    format!("compression.gzip.provider={}", timing.provider),
                ],
                ..RecompressOptions::default()
            };
            match run_cpu_timed(&mut recompress_command(&input, &output, "gzip", &options)) {
                Ok(run) => {
                    speeds.push(value_bytes as f64 / MB / run.cpu_seconds.max(1e-6));
                    timing.bytes_out = std::fs::metadata(&output).map_or(0, |m| m.len());
                }
                Err(e) => timing.error = Some(format!("{e:#}")),
            }
        }
    }
    timings
        .into_iter()
        .map(|(mut timing, speeds)| {
            timing.mb_per_sec = (!speeds.is_empty()).then(|| median(speeds));
            eprintln!(
                "gzip provider {}: {}",
                timing.provider,
                match (&timing.error, timing.mb_per_sec) {
                    (Some(e), _) => format!("unavailable: {e}"),
                    (None, Some(s)) =>
                        format!("{s:.1} MB per CPU s, {} bytes out", timing.bytes_out),
                    (None, None) => "not run".to_string(),
                }
            );
            timing
        })
        .collect()
}

/// The fastest of isal and libdeflate that ran (zlib if neither did).
fn fastest_provider(timings: &[ProviderTiming]) -> &'static str {
    timings
        .iter()
        .filter(|t| t.provider != "zlib")
        .filter_map(|t| Some((t.provider, t.mb_per_sec?)))
        .max_by(|a, b| a.1.total_cmp(&b.1))
        .map_or("zlib", |(provider, _)| provider)
}

/// Topic `name`'s id, from a Metadata v12 answer of the broker at `broker`.
fn topic_id(broker: SocketAddr, name: &str) -> [u8; 16] {
    struct Ids(Vec<([u8; 16], String)>);
    impl kpress_protocol::ResponseObserver for Ids {
        fn broker(&mut self, _: i32, host: &str, port: i32) -> (String, i32) {
            (host.to_owned(), port)
        }
        fn topic(&mut self, id: [u8; 16], name: &str) {
            self.0.push((id, name.to_owned()));
        }
    }
    let mut stream = TcpStream::connect(broker).expect("connect to the broker");
    stream
        .set_read_timeout(Some(IO_TIMEOUT))
        .expect("read timeout");
    let request = kpress_protocol::metadata_request(12, 1, &[]).expect("encode Metadata");
    stream.write_all(&request).expect("send Metadata");
    let mut size = [0u8; 4];
    stream.read_exact(&mut size).expect("response size");
    let mut body = vec![0u8; i32::from_be_bytes(size) as usize];
    stream.read_exact(&mut body).expect("response body");
    let mut ids = Ids(Vec::new());
    // Response header v1: the correlation id and an empty tag buffer.
    kpress_protocol::rewrite_response(3, 12, &body[5..], &mut ids).expect("parse Metadata");
    ids.0
        .into_iter()
        .find(|(_, n)| n == name)
        .map(|(id, _)| id)
        .unwrap_or_else(|| panic!("the broker names no topic {name}"))
}

/// An lz4 batch of apache log lines of about [`PROBE_BATCH_BYTES`], its record count
/// and the bytes of its record values.
fn probe_batch() -> (Vec<u8>, usize, u64) {
    let records: Vec<Record> = Dataset::ApacheAccessLog
        .records()
        .into_iter()
        .map(Record::value)
        .collect();
    let build = |n: usize| {
        BatchBuilder::codec(Codec::Lz4)
            .build(&records[..n])
            .expect("an lz4 batch")
    };
    let n = (1..=records.len())
        .step_by(10)
        .find(|n| build(*n).len() >= PROBE_BATCH_BYTES)
        .expect("the dataset fills a 16 KiB batch");
    let value_bytes = records[..n]
        .iter()
        .map(|r| r.value.as_ref().map_or(0, |v| v.len() as u64))
        .sum();
    (build(n), n, value_bytes)
}

/// One probe run's round trips, in µs, sorted.
struct ProbeRun {
    api_versions_us: Vec<f64>,
    produce_us: Vec<f64>,
}

/// `n` sequential ApiVersions v3 round trips, then `n` Produce v13 round trips of
/// `batch` (acks=all), on one connection to `addr`, after a tenth as many unmeasured.
fn probe(addr: SocketAddr, topic_id: [u8; 16], batch: &[u8], n: usize) -> anyhow::Result<ProbeRun> {
    let mut stream = TcpStream::connect_timeout(&addr, IO_TIMEOUT)?;
    stream.set_nodelay(true)?;
    stream.set_read_timeout(Some(IO_TIMEOUT))?;
    stream.set_write_timeout(Some(IO_TIMEOUT))?;
    let frame = api_versions(3, 1);
    let mut time = |n: usize,
                    exchange_one: &mut dyn FnMut(&mut TcpStream) -> anyhow::Result<()>|
     -> anyhow::Result<Vec<f64>> {
        for _ in 0..n / 10 {
            exchange_one(&mut stream)?;
        }
        let mut micros = Vec::with_capacity(n);
        for _ in 0..n {
            let started = Instant::now();
            exchange_one(&mut stream)?;
            micros.push(started.elapsed().as_secs_f64() * 1e6);
        }
        micros.sort_by(f64::total_cmp);
        Ok(micros)
    };
    let api_versions_us = time(n, &mut |stream| {
        let answer = parse_api_versions(&exchange(stream, &frame)?, 3)?;
        anyhow::ensure!(
            answer.error_code == 0,
            "ApiVersions error {}",
            answer.error_code
        );
        Ok(())
    })?;
    let produce_us = time(n, &mut |stream| {
        let answer = produce_by_id_on(stream, topic_id, 0, batch, IO_TIMEOUT)?;
        anyhow::ensure!(
            answer.error_code == 0,
            "Produce error {}",
            answer.error_code
        );
        Ok(())
    })?;
    Ok(ProbeRun {
        api_versions_us,
        produce_us,
    })
}

/// The nearest-rank `q` quantile of sorted `values`.
fn quantile(sorted: &[f64], q: f64) -> f64 {
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

/// Medians over the probe's rounds of each round's p50 and p99, in µs.
#[derive(Debug, Clone, Copy)]
struct ProbeMedians {
    api_versions: (f64, f64),
    produce: (f64, f64),
}

impl ProbeMedians {
    fn of(runs: &[ProbeRun]) -> ProbeMedians {
        let of = |f: fn(&ProbeRun) -> &Vec<f64>, q: f64| {
            median(runs.iter().map(|r| quantile(f(r), q)).collect())
        };
        ProbeMedians {
            api_versions: (
                of(|r| &r.api_versions_us, 0.50),
                of(|r| &r.api_versions_us, 0.99),
            ),
            produce: (of(|r| &r.produce_us, 0.50), of(|r| &r.produce_us, 0.99)),
        }
    }
}

#[test]
#[ignore = "a measurement of about 10 minutes; scripts/load.sh runs it with a release kpress"]
fn load() {
    assert_release_kpress(Some("scripts/load.sh"));
    let n_rounds = env_number("LOAD_ROUNDS", 3).max(1);
    let records = env_number("LOAD_RECORDS", 2_000_000).max(1);
    let latency_seconds = env_number("LOAD_LATENCY_SECONDS", 10).max(1);
    let round_trips = env_number("LOAD_PROBE_ROUND_TRIPS", 2000).max(1) as usize;
    let started = Instant::now();

    // A few seconds of CPU: at least 3 rounds whatever LOAD_ROUNDS says.
    let provider_rounds = n_rounds.max(3);
    eprintln!(
        "gzip providers, lz4→gzip-{GZIP_LEVEL} with kpress recompress, {provider_rounds} rounds:"
    );
    let providers = time_gzip_providers(provider_rounds);
    let gzip_provider = fastest_provider(&providers);
    eprintln!("lz4→gzip uses {gzip_provider}");

    let bench = Bench::start(gzip_provider);
    eprintln!(
        "broker and three kpress up in {:.1?}; kpress binary {}",
        started.elapsed(),
        kpress_binary().display()
    );
    let mut sent = [Sent::default(); ROUTES.len()];
    let mut count = |samples: &[Vec<Sample>]| {
        for (index, runs) in samples.iter().enumerate() {
            for run in runs {
                sent[index].records += run.summary.records;
                sent[index].value_mb += run.value_mb();
            }
        }
    };

    eprintln!("warm-up (discarded):");
    let warm_up = rounds(&bench, 1, (records / 4).max(1), None);
    count(&warm_up);
    eprintln!("throughput, {n_rounds} rounds of {records} records unthrottled:");
    let throughput = rounds(&bench, n_rounds, records, None);
    count(&throughput);
    let throughput: Vec<Medians> = throughput.iter().map(|s| Medians::of(s)).collect();
    let slowest = throughput
        .iter()
        .map(|m| m.records_per_sec)
        .fold(f64::INFINITY, f64::min);
    let rate = env_number(
        "LOAD_LATENCY_RATE",
        ((slowest / 4.0 / 1000.0).floor() as u64 * 1000).max(1000),
    )
    .max(1);
    let latency_records = rate * latency_seconds;
    eprintln!("latency, {n_rounds} rounds of {latency_records} records at {rate} records/s:");
    let latency = rounds(&bench, n_rounds, latency_records, Some(rate));
    count(&latency);
    let latency: Vec<Medians> = latency.iter().map(|s| Medians::of(s)).collect();

    eprintln!("probe, {n_rounds} rounds of {round_trips} ApiVersions and Produce round trips:");
    let broker = bench.cluster.node_addresses()[0];
    let pass = &bench.proxy(ProxyRole::PassThrough).proxy;
    let via_kpress = SocketAddr::from((
        [127, 0, 0, 1],
        pass.node_port_base().expect("ports mode") + 1,
    ));
    let probe_topic_id = topic_id(broker, PROBE_TOPIC);
    let (batch, batch_records, batch_value_bytes) = probe_batch();
    let probe_runs = alternating_rounds(n_rounds, 2, |index| {
        let addr = [broker, via_kpress][index];
        probe(addr, probe_topic_id, &batch, round_trips)
            .unwrap_or_else(|e| panic!("probe of {addr}: {e:#}\n{}", pass.log()))
    });
    let probe_direct = ProbeMedians::of(&probe_runs[0]);
    let probe_kpress = ProbeMedians::of(&probe_runs[1]);
    // Every round trip of each route, the unmeasured ones too, stored one batch.
    let probe_batches = (2 * n_rounds as usize * (round_trips + round_trips / 10)) as u64;
    let probe_sent = Sent {
        records: probe_batches * batch_records as u64,
        value_mb: (probe_batches * batch_value_bytes) as f64 / MB,
    };

    let (checks, failures) = check_stored(&bench, &sent, probe_sent);
    let peaks: Vec<(ProxyRole, f64)> = bench
        .proxies
        .iter()
        .map(|p| (p.role, bench.peak_mib(p.role)))
        .collect();
    let report = report(&Report {
        rounds: n_rounds,
        records,
        rate,
        latency_records,
        round_trips,
        probe_batch_bytes: batch.len(),
        throughput: &throughput,
        latency: &latency,
        probe_direct,
        probe_kpress,
        peaks: &peaks,
        providers: &providers,
        gzip_provider,
        checks: &checks,
        failures: &failures,
    });
    publish_report("LOAD_REPORT", &report);
    eprintln!("load took {:.0?}", started.elapsed());
    assert!(
        failures.is_empty(),
        "load: {} failed checks:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// What each route's topic stores against what was acknowledged, and kpress's
/// counters: lines for the report, and the failures among them.
fn check_stored(bench: &Bench, sent: &[Sent], probe_sent: Sent) -> (Vec<String>, Vec<String>) {
    let mut topics: Vec<&str> = ROUTES.iter().map(|r| r.topic()).collect();
    topics.push(PROBE_TOPIC);
    let stored = stored_batches(&bench.cluster, &topics)
        .unwrap_or_else(|e| panic!("DumpLogSegments: {e:#}"));
    let mut checks = Vec::new();
    let mut failures = Vec::new();
    let expected = ROUTES
        .iter()
        .zip(sent)
        .map(|(route, sent)| (route.topic(), route.stored_codec(), *sent))
        .chain([(PROBE_TOPIC, Compression::Lz4, probe_sent)]);
    for ((topic, codec, sent), stored) in expected.zip(&stored) {
        checks.push(format!(
            "`{topic}`: {} records acknowledged, {} stored in {} batches ({}), {} invalid; \
             {:.1} MB stored of {:.1} MB of values ({:.3})",
            sent.records,
            stored.records,
            stored.batches_by_codec.values().sum::<u64>(),
            stored.codecs(),
            stored.invalid_batches,
            stored.bytes as f64 / MB,
            sent.value_mb,
            stored.bytes as f64 / MB / sent.value_mb
        ));
        failures.extend(stored_problems(topic, codec, sent.records, stored));
    }
    for proxy in &bench.proxies {
        let count = |name: &str, labels: &[(&str, &str)]| {
            proxy.proxy.counter(name, labels).expect("kpress's metrics") as u64
        };
        let rewritten = count("kpress_batches_rewritten_total", &[]);
        let grown = count("kpress_batches_grown_total", &[]);
        let passed = count("kpress_batches_passed_total", &[]);
        let policy_producer = count(
            "kpress_batches_passed_total",
            &[("reason", "policy_producer")],
        );
        checks.push(format!(
            "kpress {:?}: {rewritten} batches rewritten ({grown} of them larger), {passed} passed \
             ({policy_producer} policy_producer)",
            proxy.role
        ));
        let wrong = match proxy.role {
            ProxyRole::PassThrough => rewritten != 0 || policy_producer == 0,
            ProxyRole::Lz4ToGzip | ProxyRole::GzipToZstd => rewritten == 0 || passed != 0,
        };
        if wrong {
            failures.push(format!(
                "kpress {:?}: {rewritten} rewritten, {passed} passed",
                proxy.role
            ));
        }
    }
    (checks, failures)
}

fn stored_problems(
    topic: &str,
    codec: Compression,
    acked: u64,
    stored: &StoredBatches,
) -> Vec<String> {
    let mut problems: Vec<String> = stored
        .problems
        .iter()
        .map(|p| format!("{topic}: DumpLogSegments: {p}"))
        .collect();
    if stored.records != acked {
        problems.push(format!(
            "{topic}: {} records stored, {acked} acknowledged",
            stored.records
        ));
    }
    let other = stored.batches_not_in(codec.dump_name());
    if other != 0 || stored.invalid_batches != 0 {
        problems.push(format!(
            "{topic}: expected every batch valid and in {codec}: {} ({} invalid)",
            stored.codecs(),
            stored.invalid_batches
        ));
    }
    problems
}

struct Report<'a> {
    rounds: u64,
    records: u64,
    rate: u64,
    latency_records: u64,
    round_trips: usize,
    probe_batch_bytes: usize,
    throughput: &'a [Medians],
    latency: &'a [Medians],
    probe_direct: ProbeMedians,
    probe_kpress: ProbeMedians,
    peaks: &'a [(ProxyRole, f64)],
    providers: &'a [ProviderTiming],
    gzip_provider: &'static str,
    checks: &'a [String],
    failures: &'a [String],
}

fn index_of(route: Route) -> usize {
    ROUTES
        .iter()
        .position(|r| *r == route)
        .expect("every route is run")
}

/// `measured / direct` to 2 decimals, or "–" when direct is 0 (a whole-ms percentile).
fn ratio(measured: f64, direct: f64) -> String {
    if direct > 0.0 {
        format!("{:.2}", measured / direct)
    } else {
        "–".to_string()
    }
}

/// "4.20 (3.90, 4.20, 5.10)": a median and the values it is the median of.
fn with_runs(median: f64, runs: &[f64]) -> String {
    let runs: Vec<String> = runs.iter().map(|v| format!("{v:.2}")).collect();
    format!("{median:.2} ({})", runs.join(", "))
}

fn met(ok: bool) -> &'static str {
    if ok {
        "met"
    } else {
        "**missed**"
    }
}

fn report(r: &Report<'_>) -> String {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let tput = |route: Route| &r.throughput[index_of(route)];
    let lat = |route: Route| &r.latency[index_of(route)];
    let peak = |role: ProxyRole| {
        r.peaks
            .iter()
            .find(|(p, _)| *p == role)
            .map_or(0.0, |(_, mib)| *mib)
    };
    let mut text = String::new();
    let _ = writeln!(
        text,
        "ProducerPerformance (Kafka {}), {} records a throughput run of datasets/apache_access.log \
         (~236 B a record), acks=1, linger.ms=5, batch.size=262144, one partition, one broker; \
         {cpus} CPUs; kpress {}. Medians of {} rounds, the routes in turn (every other round \
         reversed). MB = 10^6 bytes of record values before compression. Latency at {} records/s \
         ({} records a run; ProducerPerformance's percentiles, whole ms). CPU from \
         /proc/<pid>/stat over the unthrottled runs.\n",
        kafka_version(),
        r.records,
        kpress_binary().display(),
        r.rounds,
        r.rate,
        r.latency_records,
    );
    let _ = writeln!(
        text,
        "| route | records/s (slowest–fastest) | × direct | MB/s | × direct | p50 / p99 / p99.9 ms | × direct | kpress CPU ms/MB | broker CPU ms/MB | kpress peak RSS MiB |"
    );
    let _ = writeln!(text, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for route in ROUTES {
        let (t, l) = (tput(route), lat(route));
        let (td, ld) = (tput(route.direct()), lat(route.direct()));
        let latency_ratio = if route.direct() == route {
            String::new()
        } else {
            format!(
                "{} / {} / {}",
                ratio(l.p50_ms, ld.p50_ms),
                ratio(l.p99_ms, ld.p99_ms),
                ratio(l.p999_ms, ld.p999_ms)
            )
        };
        let _ = writeln!(
            text,
            "| {} | {:.0} ({:.0}–{:.0}) | {:.2} | {:.1} | {:.2} | {:.0} / {:.0} / {:.0} | {latency_ratio} | {} | {:.2} | {} |",
            route.label(),
            t.records_per_sec,
            t.records_per_sec_range.0,
            t.records_per_sec_range.1,
            t.records_per_sec / td.records_per_sec,
            t.mb_per_sec,
            t.mb_per_sec / td.mb_per_sec,
            l.p50_ms,
            l.p99_ms,
            l.p999_ms,
            t.kpress_ms_per_mb.map_or(String::new(), |v| format!("{v:.2}")),
            t.broker_ms_per_mb,
            route.proxy().map_or(String::new(), |role| format!("{:.1}", peak(role))),
        );
    }

    let (d, k) = (r.probe_direct, r.probe_kpress);
    let _ = writeln!(
        text,
        "\nSequential single-connection probe: {} round trips a round after {} unmeasured, \
         straight to the broker and through the pass-through kpress (its node port), \
         ApiVersions v3 and Produce v13 of one {}-byte lz4 batch (acks=all); medians of each \
         round's percentiles, µs.\n",
        r.round_trips,
        r.round_trips / 10,
        r.probe_batch_bytes
    );
    let _ = writeln!(
        text,
        "| request | direct p50 / p99 µs | via kpress p50 / p99 µs | added p50 / p99 µs |"
    );
    let _ = writeln!(text, "|---|---:|---:|---:|");
    for (name, direct, kpress) in [
        ("ApiVersions", d.api_versions, k.api_versions),
        ("Produce, 16 KiB lz4", d.produce, k.produce),
    ] {
        let _ = writeln!(
            text,
            "| {name} | {:.0} / {:.0} | {:.0} / {:.0} | {:+.0} / {:+.0} |",
            direct.0,
            direct.1,
            kpress.0,
            kpress.1,
            kpress.0 - direct.0,
            kpress.1 - direct.1
        );
    }

    let pass = tput(Route::PassThrough);
    let pass_ratio = pass.records_per_sec / tput(Route::DirectLz4).records_per_sec;
    let pass_cpu = pass.kpress_ms_per_mb.unwrap_or(f64::NAN);
    let pass_peak = peak(ProxyRole::PassThrough);
    let bound_mib = proc_status::readme_peak_memory_bound(0.0) as f64 / MIB;
    let _ = writeln!(text, "\n| pass-through | target | measured | |");
    let _ = writeln!(text, "|---|---:|---:|---|");
    let mut target_row = |what: &str, target: String, measured: String, ok: bool| {
        let _ = writeln!(text, "| {what} | {target} | {measured} | {} |", met(ok));
    };
    target_row(
        "throughput (records/s) × direct",
        "≥ 0.97".into(),
        format!("{pass_ratio:.2}"),
        pass_ratio >= 0.97,
    );
    for (name, direct, kpress) in [
        ("ApiVersions", d.api_versions, k.api_versions),
        ("Produce", d.produce, k.produce),
    ] {
        let (p50, p99) = (kpress.0 - direct.0, kpress.1 - direct.1);
        target_row(
            &format!("added p50, {name}"),
            "≤ +100 µs".into(),
            format!("{p50:+.0} µs"),
            p50 <= 100.0,
        );
        target_row(
            &format!("added p99, {name}"),
            "≤ +500 µs".into(),
            format!("{p99:+.0} µs"),
            p99 <= 500.0,
        );
    }
    target_row(
        "kpress CPU per MB",
        "≤ 2 ms".into(),
        format!("{pass_cpu:.2} ms"),
        pass_cpu <= 2.0,
    );
    target_row(
        "kpress peak RSS",
        format!("≤ {bound_mib:.0} MiB (README formula)"),
        format!("{pass_peak:.1} MiB"),
        pass_peak <= bound_mib,
    );

    let direct_gzip = tput(Route::DirectGzip);
    let broker_zstd = tput(Route::BrokerZstd);
    let via_kpress = tput(Route::GzipToZstd);
    // (a) − (b) of each round, whose runs shared the machine's conditions.
    let added_runs: Vec<f64> = broker_zstd
        .broker_runs
        .iter()
        .zip(&direct_gzip.broker_runs)
        .map(|(a, b)| a - b)
        .collect();
    let broker_added = median(added_runs.clone());
    let kpress_cost = via_kpress.kpress_ms_per_mb.unwrap_or(f64::NAN);
    let _ = writeln!(
        text,
        "\nWho pays for gzip→zstd-3 (the same producer gzip records; CPU ms per MB of values \
         over the unthrottled runs: median, and each round's):\n"
    );
    let _ = writeln!(text, "| run | broker CPU ms/MB | kpress CPU ms/MB |");
    let _ = writeln!(text, "|---|---:|---:|");
    let _ = writeln!(
        text,
        "| (b) gzip into a `compression.type=producer` topic (stored as sent) | {} | |",
        with_runs(direct_gzip.broker_ms_per_mb, &direct_gzip.broker_runs)
    );
    let _ = writeln!(
        text,
        "| (a) gzip into a `compression.type=zstd` topic (the broker recompresses) | {} | |",
        with_runs(broker_zstd.broker_ms_per_mb, &broker_zstd.broker_runs)
    );
    let _ = writeln!(
        text,
        "| broker CPU added by recompressing, (a) − (b) of each round | {} | |",
        with_runs(broker_added, &added_runs)
    );
    let _ = writeln!(
        text,
        "| (c) gzip through kpress gzip→zstd-3 into a producer topic | {} | {} |",
        with_runs(via_kpress.broker_ms_per_mb, &via_kpress.broker_runs),
        with_runs(kpress_cost, &via_kpress.kpress_runs)
    );
    // The broker validates what it stores by decompressing it: zstd from kpress costs it
    // less than gzip would, so kpress saves the broker more than (a) − (b).
    let saved_runs: Vec<f64> = broker_zstd
        .broker_runs
        .iter()
        .zip(&via_kpress.broker_runs)
        .map(|(a, c)| a - c)
        .collect();
    let _ = writeln!(
        text,
        "| broker CPU saved by kpress recompressing instead, (a) − (c) of each round | {} | |",
        with_runs(median(saved_runs.clone()), &saved_runs)
    );
    let _ = writeln!(
        text,
        "\nTarget: kpress's CPU per MB, proxying included, at most half of what the broker adds: \
         {kpress_cost:.2} against ½ × {broker_added:.2} = {:.2} ms/MB (kpress ÷ broker added = \
         {:.2}): {}. Reference figures for 88-byte records: broker +8.2, kpress 5.4 ms/MB.",
        broker_added / 2.0,
        kpress_cost / broker_added,
        met(kpress_cost <= broker_added / 2.0)
    );

    let _ = writeln!(
        text,
        "\ngzip provider for lz4→gzip-{GZIP_LEVEL}: `kpress recompress` of ~47 MB of the apache \
         log in lz4 batches of 1000 records, MB of values per CPU second of the process (all threads; \
         process start and file I/O included), medians of {} rounds:\n",
        r.rounds.max(3)
    );
    let _ = writeln!(text, "| provider | MB per CPU s | gzip bytes × zlib's |");
    let _ = writeln!(text, "|---|---:|---:|");
    let zlib_bytes = r
        .providers
        .iter()
        .find(|t| t.provider == "zlib" && t.error.is_none())
        .map(|t| t.bytes_out as f64);
    for timing in r.providers {
        match (&timing.error, timing.mb_per_sec) {
            (None, Some(speed)) => {
                let size = zlib_bytes.map_or(String::new(), |z| {
                    format!("{:.3}", timing.bytes_out as f64 / z)
                });
                let _ = writeln!(text, "| {} | {speed:.1} | {size} |", timing.provider);
            }
            _ => {
                let _ = writeln!(text, "| {} | unavailable | |", timing.provider);
            }
        }
    }
    let _ = writeln!(
        text,
        "\nlz4→gzip used `compression.gzip.provider = \"{}\"` (the faster of isal and libdeflate).",
        r.gzip_provider
    );

    let _ = writeln!(
        text,
        "\nChecks (DumpLogSegments batch headers, kpress's metrics):\n"
    );
    for check in r.checks {
        let _ = writeln!(text, "- {check}");
    }
    if r.failures.is_empty() {
        let _ = writeln!(text, "\nEvery check passed.");
    } else {
        let _ = writeln!(text, "\n**{} checks failed:**\n", r.failures.len());
        for failure in r.failures {
            let _ = writeln!(text, "- {failure}");
        }
    }
    text
}

/// The routes of `topic_mode_offload`, each into its own topic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TopicModeRoute {
    /// gzip into a `producer` topic: stored as sent.
    GzipAsSent,
    /// gzip straight into a zstd-3 topic: the broker recompresses.
    GzipIntoZstd,
    /// gzip through a two-key kpress (topic mode) into a zstd-3 topic.
    GzipThroughKpress,
    /// zstd straight into a zstd-3 topic: stored as sent.
    ZstdAsSent,
}

const TOPIC_MODE_ROUTES: [TopicModeRoute; 4] = [
    TopicModeRoute::GzipAsSent,
    TopicModeRoute::GzipIntoZstd,
    TopicModeRoute::GzipThroughKpress,
    TopicModeRoute::ZstdAsSent,
];

impl TopicModeRoute {
    fn label(self) -> &'static str {
        match self {
            TopicModeRoute::GzipAsSent => "(b) gzip into a `producer` topic (stored as sent)",
            TopicModeRoute::GzipIntoZstd => {
                "(a) gzip into a `compression.type=zstd` topic (the broker recompresses)"
            }
            TopicModeRoute::GzipThroughKpress => {
                "(c) gzip through kpress in topic mode into the same kind of zstd topic"
            }
            TopicModeRoute::ZstdAsSent => {
                "(e) zstd-3 sent straight into a zstd topic (stored as sent)"
            }
        }
    }

    fn topic(self) -> &'static str {
        match self {
            TopicModeRoute::GzipAsSent => "tm-load-gzip-as-sent",
            TopicModeRoute::GzipIntoZstd => "tm-load-broker-zstd",
            TopicModeRoute::GzipThroughKpress => "tm-load-kpress-zstd",
            TopicModeRoute::ZstdAsSent => "tm-load-zstd-as-sent",
        }
    }

    fn topic_configs(self) -> &'static [&'static str] {
        match self {
            TopicModeRoute::GzipAsSent => &["compression.type=producer"],
            _ => &["compression.type=zstd", "compression.zstd.level=3"],
        }
    }

    fn producer_codec(self) -> Compression {
        match self {
            TopicModeRoute::ZstdAsSent => Compression::Zstd,
            _ => Compression::Gzip,
        }
    }

    fn stored_codec(self) -> Compression {
        match self {
            TopicModeRoute::GzipAsSent => Compression::Gzip,
            _ => Compression::Zstd,
        }
    }
}

/// Broker CPU per MB of gzip producers into a zstd topic, directly and through a kpress
/// in topic mode; see the file's documentation.
#[test]
#[ignore = "a measurement of a few minutes; run it with a release kpress (KPRESS_BIN)"]
fn topic_mode_offload() {
    assert_release_kpress(None);
    let n_rounds = env_number("LOAD_ROUNDS", 3).max(1);
    let records = env_number("LOAD_RECORDS", 1_000_000).max(1);
    let started = Instant::now();
    let cluster =
        KafkaCluster::start(kafka_version(), 1).unwrap_or_else(|e| panic!("starting Kafka: {e:#}"));
    let broker_pid = broker_pid(&cluster);
    let java = JavaClient::new(kafka_version());
    for route in TOPIC_MODE_ROUTES {
        java.create_topic(
            &cluster.bootstrap(),
            route.topic(),
            1,
            route.topic_configs(),
        )
        .unwrap_or_else(|e| panic!("creating {}: {e:#}", route.topic()));
    }
    // Nothing but where to listen and where the brokers are (and the admin port the
    // counters are read from): `[defaults] compression.type = "topic"` is the default.
    let proxy = KpressProxy::start_measuring_in_front_of(&cluster, "")
        .unwrap_or_else(|e| panic!("starting kpress: {e:#}"));
    let kpress_pid = kpress_pid(&proxy);
    let payload = Dataset::ApacheAccessLog.path();
    let run = |route: TopicModeRoute, records: u64| {
        let through_kpress = route == TopicModeRoute::GzipThroughKpress;
        let bootstrap = if through_kpress {
            proxy.bootstrap()
        } else {
            cluster.bootstrap()
        };
        let mut perf = ProducerPerf::new(
            &bootstrap,
            route.topic(),
            records,
            Payload::LinesOf(payload.clone()),
        );
        perf.acks = "1".to_string();
        perf.linger_ms = 5;
        perf.batch_size = 256 * 1024;
        perf.compression = route.producer_codec();
        let cpu = |pid: u32| proc_stat::cpu_seconds(pid).expect("a process's CPU time");
        let (kpress_before, broker_before) = (cpu(kpress_pid), cpu(broker_pid));
        let summary = perf
            .run(kafka_version())
            .unwrap_or_else(|e| panic!("{}: {e:#}\n{}", route.label(), proxy.log()));
        let sample = Sample {
            summary,
            kpress_cpu_seconds: through_kpress.then(|| cpu(kpress_pid) - kpress_before),
            broker_cpu_seconds: cpu(broker_pid) - broker_before,
        };
        eprintln!(
            "{:<75} {} broker {:.2} CPU s{}",
            route.label(),
            sample.summary.line,
            sample.broker_cpu_seconds,
            sample
                .kpress_cpu_seconds
                .map_or(String::new(), |s| format!(", kpress {s:.2} CPU s"))
        );
        sample
    };
    let mut sent = [Sent::default(); TOPIC_MODE_ROUTES.len()];
    let mut count = |samples: &[Vec<Sample>]| {
        for (index, runs) in samples.iter().enumerate() {
            for run in runs {
                sent[index].records += run.summary.records;
                sent[index].value_mb += run.value_mb();
            }
        }
    };
    eprintln!("warm-up (discarded; kpress learns the topics' configs):");
    let warm_up = alternating_rounds(1, TOPIC_MODE_ROUTES.len(), |i| {
        run(TOPIC_MODE_ROUTES[i], (records / 4).max(1))
    });
    count(&warm_up);
    let counter = |name: &str, labels: &[(&str, &str)]| {
        proxy.counter(name, labels).expect("kpress's metrics")
    };
    let pending_after_warm_up = counter(
        "kpress_batches_passed_total",
        &[("reason", "topic_config_pending")],
    );
    eprintln!("{n_rounds} rounds of {records} records unthrottled:");
    let measured = alternating_rounds(n_rounds, TOPIC_MODE_ROUTES.len(), |i| {
        run(TOPIC_MODE_ROUTES[i], records)
    });
    count(&measured);
    let medians: Vec<Medians> = measured.iter().map(|s| Medians::of(s)).collect();

    let topics: Vec<&str> = TOPIC_MODE_ROUTES.iter().map(|r| r.topic()).collect();
    let stored = stored_batches(&cluster, &topics).unwrap_or_else(|e| panic!("{e:#}"));
    let mut checks = Vec::new();
    let mut failures = Vec::new();
    for ((route, sent), stored) in TOPIC_MODE_ROUTES.iter().zip(&sent).zip(&stored) {
        checks.push(format!(
            "`{}`: {} records acknowledged, {} stored in {} batches ({}), {} invalid",
            route.topic(),
            sent.records,
            stored.records,
            stored.batches_by_codec.values().sum::<u64>(),
            stored.codecs(),
            stored.invalid_batches
        ));
        failures.extend(stored_problems(
            route.topic(),
            route.stored_codec(),
            sent.records,
            stored,
        ));
    }
    let rewritten = counter(
        "kpress_batches_rewritten_total",
        &[
            ("topic", TopicModeRoute::GzipThroughKpress.topic()),
            ("to", "zstd"),
        ],
    );
    // Passed batches by reason: only those of the warm-up's first requests (the topic's
    // config still pending) and those that found no work slot in time on a saturated
    // machine (`overloaded_passed`) are expected.
    let metrics = proxy.scrape_metrics().expect("kpress's metrics");
    let passed: Vec<(String, f64)> = metrics
        .lines()
        .filter_map(|l| l.strip_prefix("kpress_batches_passed_total{reason=\""))
        .filter_map(|l| {
            let (reason, rest) = l.split_once('"')?;
            Some((reason.to_owned(), rest.rsplit(' ').next()?.parse().ok()?))
        })
        .filter(|(_, n)| *n > 0.0)
        .collect();
    let pending = counter(
        "kpress_batches_passed_total",
        &[("reason", "topic_config_pending")],
    );
    let by_topic = counter(
        "kpress_batches_by_target_source_total",
        &[("target_source", "topic")],
    );
    checks.push(format!(
        "kpress: {rewritten} batches rewritten into zstd, passed as sent {passed:?} \
         ({pending} while the topic's config was pending, {pending_after_warm_up} of them by the \
         end of the warm-up), {by_topic} batches counted with target_source=\"topic\""
    ));
    let unexpected: Vec<&(String, f64)> = passed
        .iter()
        .filter(|(reason, _)| reason != "topic_config_pending" && reason != "overloaded_passed")
        .collect();
    if rewritten == 0.0 || pending != pending_after_warm_up || !unexpected.is_empty() {
        failures.push(format!(
            "kpress: {rewritten} rewritten, passed {passed:?} ({pending} pending, \
             {pending_after_warm_up} after the warm-up)"
        ));
    }

    let of = |route: TopicModeRoute| {
        &medians[TOPIC_MODE_ROUTES
            .iter()
            .position(|r| *r == route)
            .expect("every route runs")]
    };
    let mut text = String::new();
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let _ = writeln!(
        text,
        "ProducerPerformance (Kafka {}), {records} records a run of datasets/apache_access.log \
         (~236 B a record), acks=1, linger.ms=5, batch.size=262144, one partition, one broker; \
         {cpus} CPUs; kpress {} with no policy (topic mode). Medians of {n_rounds} rounds, the \
         routes in turn (every other round reversed), after one discarded warm-up round. MB = \
         10^6 bytes of record values before compression; CPU from /proc/<pid>/stat.\n",
        kafka_version(),
        kpress_binary().display(),
    );
    let _ = writeln!(
        text,
        "| route | records/s | broker CPU ms/MB: median (each round) | kpress CPU ms/MB |"
    );
    let _ = writeln!(text, "|---|---:|---:|---:|");
    for route in TOPIC_MODE_ROUTES {
        let m = of(route);
        let _ = writeln!(
            text,
            "| {} | {:.0} | {} | {} |",
            route.label(),
            m.records_per_sec,
            with_runs(m.broker_ms_per_mb, &m.broker_runs),
            m.kpress_ms_per_mb
                .map_or(String::new(), |v| with_runs(v, &m.kpress_runs)),
        );
    }
    let per_round = |x: TopicModeRoute, y: TopicModeRoute| -> Vec<f64> {
        of(x)
            .broker_runs
            .iter()
            .zip(&of(y).broker_runs)
            .map(|(a, b)| a - b)
            .collect()
    };
    let saved = per_round(
        TopicModeRoute::GzipIntoZstd,
        TopicModeRoute::GzipThroughKpress,
    );
    let above_as_sent = per_round(
        TopicModeRoute::GzipThroughKpress,
        TopicModeRoute::ZstdAsSent,
    );
    let _ = writeln!(
        text,
        "\n| per round | broker CPU ms/MB |\n|---|---:|\n\
         | saved by kpress converting instead, (a) − (c) | {} |\n\
         | the broker through kpress above storing zstd as sent, (c) − (e) | {} |",
        with_runs(median(saved.clone()), &saved),
        with_runs(median(above_as_sent.clone()), &above_as_sent)
    );
    let _ = writeln!(
        text,
        "\nChecks (DumpLogSegments batch headers, kpress's metrics):\n"
    );
    for check in &checks {
        let _ = writeln!(text, "- {check}");
    }
    if failures.is_empty() {
        let _ = writeln!(text, "\nEvery check passed.");
    } else {
        let _ = writeln!(text, "\n**{} checks failed:**\n", failures.len());
        for failure in &failures {
            let _ = writeln!(text, "- {failure}");
        }
    }
    publish_report("TOPIC_MODE_REPORT", &text);
    eprintln!("topic_mode_offload took {:.0?}", started.elapsed());
    assert!(
        failures.is_empty(),
        "topic_mode_offload: {} failed checks:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
