//! A measurement of what TLS through kpress costs a producer, with Kafka's own
//! ProducerPerformance (`producer_perf.rs`) against a one-node 4.1.1 broker listening
//! for SSL and PLAINTEXT. A release-build kpress (`scripts/tls-overhead.sh`) relays
//! every batch untouched (`compression.type = "producer"`), once with `[listener.tls]`
//! and `[upstream.tls]` in front of the SSL listener and once in plain TCP in front of
//! the PLAINTEXT listener. Four routes, the same records and producer settings:
//!
//! - TLS direct: SSL straight to the broker;
//! - TLS via kpress: SSL to kpress, kpress SSL to the broker;
//! - plaintext direct and plaintext via kpress, which separate proxying from TLS.
//!
//! First a discarded warm-up run per route, then `TLS_OVERHEAD_ROUNDS` rounds
//! (default 3) of unthrottled runs of `TLS_OVERHEAD_RECORDS` records (default
//! 5,000,000) for throughput, then as many rounds at a fixed rate for latency: a
//! quarter of the slowest route's median throughput unless `TLS_OVERHEAD_LATENCY_RATE`
//! says (records/s), for `TLS_OVERHEAD_LATENCY_SECONDS` (default 15) each. Latency is
//! measured below saturation because an unthrottled producer's latency is the time
//! records wait in its full buffer (see `producer_perf.rs`). Each round runs
//! the routes in turn, every other round in reverse order, so drift on a shared
//! machine falls on every route alike. `TLS_OVERHEAD_PLAINTEXT=0` leaves out the
//! plaintext routes.
//!
//! It reports medians as a markdown table (printed, and written to
//! `$TLS_OVERHEAD_REPORT` if set): records/s and MB/s as ratios to the direct route
//! of the same security, p50/p99/average latency and what kpress adds to them, kpress's
//! CPU seconds per run (`/proc/<pid>/stat`) and its peak RSS (VmHWM). Speed is
//! measured, never asserted; what is asserted is that every record was acknowledged
//! and kpress passed batches as the producer sent them (`policy_producer`) and
//! rewrote none.

use kpress_tests::cluster::{BrokerListener, ClusterSecurity};
use kpress_tests::compression::Compression;
use kpress_tests::data::Dataset;
use kpress_tests::java_client::JavaClient;
use kpress_tests::kpress::{
    kpress_binary, KpressProxy, KpressSetup, ListenerTlsKeys, UpstreamTlsKeys,
};
use kpress_tests::measure::{
    alternating_rounds, assert_release_kpress, env_number, kpress_pid, median, peak_rss_mib,
    publish_report, range,
};
use kpress_tests::producer_perf::{Payload, PerfSummary, ProducerPerf};
use kpress_tests::tls::ClientSecurity;
use kpress_tests::{kafka_version, proc_stat, KafkaCluster};
use std::fmt::Write as _;
use std::time::Instant;

const TOPIC: &str = "tls-overhead";
/// Every batch relayed as the producer compressed it.
const PASS_THROUGH_RULES: &str = "[defaults]\ncompression.type = \"producer\"\n";

/// How the producer reaches the broker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Route {
    TlsDirect,
    TlsViaKpress,
    PlainDirect,
    PlainViaKpress,
}

impl Route {
    fn label(self) -> &'static str {
        match self {
            Route::TlsDirect => "TLS direct",
            Route::TlsViaKpress => "TLS via kpress",
            Route::PlainDirect => "plaintext direct",
            Route::PlainViaKpress => "plaintext via kpress",
        }
    }

    /// The route without kpress of the same security, which this one is compared to.
    fn direct(self) -> Route {
        match self {
            Route::TlsDirect | Route::TlsViaKpress => Route::TlsDirect,
            Route::PlainDirect | Route::PlainViaKpress => Route::PlainDirect,
        }
    }
}

/// The broker, both kpress proxies and how each route is configured.
struct Bench {
    cluster: KafkaCluster,
    tls_proxy: KpressProxy,
    plain_proxy: KpressProxy,
    client_tls: ClientSecurity,
    payload_file: std::path::PathBuf,
}

impl Bench {
    fn start() -> Bench {
        let security = ClusterSecurity {
            listeners: vec![BrokerListener::Ssl],
            sasl_users: Vec::new(),
        };
        let cluster = KafkaCluster::start_with(kafka_version(), 1, &security)
            .unwrap_or_else(|e| panic!("starting Kafka with an SSL listener: {e:#}"));
        // Gigabytes are written: the broker may delete all but the last 1 GiB.
        JavaClient::new(kafka_version())
            .create_topic(
                &cluster.bootstrap(),
                TOPIC,
                1,
                &[
                    "compression.type=producer",
                    "retention.bytes=1073741824",
                    "segment.bytes=268435456",
                ],
            )
            .unwrap_or_else(|e| panic!("creating {TOPIC}: {e:#}"));
        let pki = cluster.pki();
        let serving = pki
            .server(&["localhost", "127.0.0.1"])
            .expect("kpress's server certificate");
        let tls_proxy = KpressProxy::start_with(KpressSetup {
            listener_tls: Some(ListenerTlsKeys::serving(&serving)),
            upstream_tls: Some(UpstreamTlsKeys::trusting(pki.ca_cert())),
            ..KpressSetup::in_front_of(
                &cluster.ssl_addresses(),
                &cluster.node_ids(),
                PASS_THROUGH_RULES,
            )
            .measuring()
        })
        .unwrap_or_else(|e| panic!("starting kpress with TLS: {e:#}"));
        let plain_proxy = KpressProxy::start_measuring_in_front_of(&cluster, PASS_THROUGH_RULES)
            .unwrap_or_else(|e| panic!("starting kpress in plain TCP: {e:#}"));
        let client_tls = ClientSecurity::ssl(pki.ca_cert());
        Bench {
            cluster,
            tls_proxy,
            plain_proxy,
            client_tls,
            payload_file: Dataset::ApacheAccessLog.path(),
        }
    }

    fn proxy(&self, route: Route) -> Option<&KpressProxy> {
        match route {
            Route::TlsViaKpress => Some(&self.tls_proxy),
            Route::PlainViaKpress => Some(&self.plain_proxy),
            Route::TlsDirect | Route::PlainDirect => None,
        }
    }

    /// ProducerPerformance's settings for `route`: the same for every route but the
    /// bootstrap and the security properties.
    fn perf(&self, route: Route, records: u64, throughput: Option<u64>) -> ProducerPerf {
        let (bootstrap, properties) = match route {
            Route::TlsDirect => (
                self.cluster.listener_bootstrap(BrokerListener::Ssl),
                self.client_tls.java_properties(),
            ),
            Route::TlsViaKpress => (
                self.tls_proxy.bootstrap(),
                self.client_tls.java_properties(),
            ),
            Route::PlainDirect => (self.cluster.bootstrap(), Vec::new()),
            Route::PlainViaKpress => (self.plain_proxy.bootstrap(), Vec::new()),
        };
        let mut perf = ProducerPerf::new(
            &bootstrap,
            TOPIC,
            records,
            Payload::LinesOf(self.payload_file.clone()),
        );
        perf.throughput = throughput;
        perf.acks = "1".to_string();
        perf.linger_ms = 5;
        perf.batch_size = 256 * 1024;
        perf.compression = Compression::Lz4;
        perf.properties = properties;
        perf
    }

    /// One run on `route`, with the CPU seconds kpress spent meanwhile.
    fn run(&self, route: Route, records: u64, throughput: Option<u64>) -> Sample {
        let pid = self.proxy(route).map(kpress_pid);
        let cpu_before = pid.map(|pid| proc_stat::cpu_seconds(pid).expect("kpress's CPU time"));
        let summary = self
            .perf(route, records, throughput)
            .run(kafka_version())
            .unwrap_or_else(|e| panic!("{}: {e:#}\n{}", route.label(), self.logs(route)));
        let kpress_cpu_seconds = pid
            .zip(cpu_before)
            .map(|(pid, before)| proc_stat::cpu_seconds(pid).expect("kpress's CPU time") - before);
        eprintln!(
            "{:<21} {}{}",
            route.label(),
            summary.line,
            kpress_cpu_seconds.map_or(String::new(), |s| format!(" kpress {s:.2} CPU s"))
        );
        Sample {
            summary,
            kpress_cpu_seconds,
        }
    }

    fn logs(&self, route: Route) -> String {
        let proxy = self.proxy(route).map_or(String::new(), KpressProxy::log);
        format!("{proxy}\n{}", self.cluster.describe_logs())
    }
}

struct Sample {
    summary: PerfSummary,
    kpress_cpu_seconds: Option<f64>,
}

/// Runs `rounds` rounds of every route, every other round in reverse order.
fn rounds(
    bench: &Bench,
    routes: &[Route],
    rounds: u64,
    records: u64,
    throughput: Option<u64>,
) -> Vec<(Route, Vec<Sample>)> {
    let samples = alternating_rounds(rounds, routes.len(), |index| {
        bench.run(routes[index], records, throughput)
    });
    routes.iter().copied().zip(samples).collect()
}

/// The medians of one route's runs.
struct Medians {
    records_per_sec: f64,
    /// The slowest and fastest run's records/s.
    records_per_sec_range: (f64, f64),
    mb_per_sec: f64,
    p50_ms: f64,
    p99_ms: f64,
    avg_ms: f64,
    kpress_cpu_seconds: Option<f64>,
}

impl Medians {
    fn of(samples: &[Sample]) -> Medians {
        let of =
            |f: fn(&PerfSummary) -> f64| median(samples.iter().map(|s| f(&s.summary)).collect());
        let cpu: Vec<f64> = samples
            .iter()
            .filter_map(|s| s.kpress_cpu_seconds)
            .collect();
        Medians {
            records_per_sec: of(|s| s.records_per_sec),
            records_per_sec_range: range(samples.iter().map(|s| s.summary.records_per_sec)),
            mb_per_sec: of(|s| s.mb_per_sec),
            p50_ms: of(|s| s.p50_ms as f64),
            p99_ms: of(|s| s.p99_ms as f64),
            avg_ms: of(|s| s.avg_latency_ms),
            kpress_cpu_seconds: (!cpu.is_empty()).then(|| median(cpu)),
        }
    }
}

#[test]
#[ignore = "a measurement of several minutes; scripts/tls-overhead.sh runs it with a release kpress"]
fn tls_overhead() {
    assert_release_kpress(Some("scripts/tls-overhead.sh"));
    let n_rounds = env_number("TLS_OVERHEAD_ROUNDS", 3).max(1);
    let records = env_number("TLS_OVERHEAD_RECORDS", 5_000_000).max(1);
    let latency_seconds = env_number("TLS_OVERHEAD_LATENCY_SECONDS", 15).max(1);
    let with_plaintext = env_number("TLS_OVERHEAD_PLAINTEXT", 1) != 0;
    let routes: &[Route] = if with_plaintext {
        &[
            Route::TlsDirect,
            Route::TlsViaKpress,
            Route::PlainDirect,
            Route::PlainViaKpress,
        ]
    } else {
        &[Route::TlsDirect, Route::TlsViaKpress]
    };
    let started = Instant::now();
    let bench = Bench::start();
    eprintln!(
        "broker and both kpress up in {:.1?}; kpress binary {}",
        started.elapsed(),
        kpress_binary().display()
    );

    eprintln!("warm-up (discarded):");
    for route in routes {
        bench.run(*route, (records / 4).max(1), None);
    }
    eprintln!("throughput, {n_rounds} rounds of {records} records unthrottled:");
    let throughput = rounds(&bench, routes, n_rounds, records, None);
    let throughput_medians: Vec<(Route, Medians)> = throughput
        .iter()
        .map(|(route, samples)| (*route, Medians::of(samples)))
        .collect();
    let slowest = throughput_medians
        .iter()
        .map(|(_, m)| m.records_per_sec)
        .fold(f64::INFINITY, f64::min);
    let rate = env_number(
        "TLS_OVERHEAD_LATENCY_RATE",
        (slowest / 4.0 / 1000.0).floor() as u64 * 1000,
    )
    .max(1);
    let latency_records = rate * latency_seconds;
    eprintln!("latency, {n_rounds} rounds of {latency_records} records at {rate} records/s:");
    let latency = rounds(&bench, routes, n_rounds, latency_records, Some(rate));
    let latency_medians: Vec<(Route, Medians)> = latency
        .iter()
        .map(|(route, samples)| (*route, Medians::of(samples)))
        .collect();

    // What was measured is the relay: every batch passed as the producer sent it.
    for route in [Route::TlsViaKpress, Route::PlainViaKpress] {
        if let Some(proxy) = bench.proxy(route).filter(|_| routes.contains(&route)) {
            // Whole counts (a sum of no samples is -0.0).
            let count = |name: &str, labels: &[(&str, &str)]| {
                proxy.counter(name, labels).expect("kpress's metrics") as u64
            };
            let rewritten = count("kpress_batches_rewritten_total", &[]);
            let passed = count(
                "kpress_batches_passed_total",
                &[("reason", "policy_producer")],
            );
            eprintln!(
                "{}: {passed} batches passed (policy_producer), {rewritten} rewritten",
                route.label()
            );
            assert!(
                rewritten == 0 && passed > 0,
                "{}: a pass-through policy rewrote {rewritten} batches and passed {passed}",
                route.label()
            );
        }
    }

    let peak_mib = |proxy: &KpressProxy| peak_rss_mib(kpress_pid(proxy));
    let report = report(
        &throughput_medians,
        &latency_medians,
        &Settings {
            rounds: n_rounds,
            records,
            rate,
            latency_records,
            tls_peak_mib: peak_mib(&bench.tls_proxy),
            plain_peak_mib: with_plaintext.then(|| peak_mib(&bench.plain_proxy)),
        },
    );
    publish_report("TLS_OVERHEAD_REPORT", &report);
    eprintln!("tls_overhead took {:.0?}", started.elapsed());
}

fn find(medians: &[(Route, Medians)], route: Route) -> Option<&Medians> {
    medians.iter().find(|(r, _)| *r == route).map(|(_, m)| m)
}

struct Settings {
    rounds: u64,
    records: u64,
    rate: u64,
    latency_records: u64,
    tls_peak_mib: f64,
    plain_peak_mib: Option<f64>,
}

fn report(
    throughput: &[(Route, Medians)],
    latency: &[(Route, Medians)],
    settings: &Settings,
) -> String {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut text = String::new();
    let _ = writeln!(
        text,
        "ProducerPerformance (Kafka {}), {} records of datasets/apache_access.log (~236 B), \
         lz4, acks=1, linger.ms=5, batch.size=262144, one partition, one broker; {cpus} CPUs. \
         Medians of {} rounds; throughput unthrottled (records/s: median, slowest–fastest run; \
         MB/s: MiB of record values before compression), latency at {} records/s ({} records a run).\n",
        kafka_version(),
        settings.records,
        settings.rounds,
        settings.rate,
        settings.latency_records,
    );
    let _ = writeln!(
        text,
        "| route | records/s | × direct | MB/s | × direct | p50 / p99 / avg ms | added p50 / p99 / avg ms | kpress CPU s per throughput / latency run |"
    );
    let _ = writeln!(text, "|---|---:|---:|---:|---:|---:|---:|---:|");
    for (route, tput) in throughput {
        let direct = find(throughput, route.direct()).expect("the direct route was run");
        let lat = find(latency, *route).expect("every route has latency runs");
        let lat_direct = find(latency, route.direct()).expect("the direct route was run");
        let added = if route.direct() == *route {
            "".to_string()
        } else {
            format!(
                "{:+.0} / {:+.0} / {:+.2}",
                lat.p50_ms - lat_direct.p50_ms,
                lat.p99_ms - lat_direct.p99_ms,
                lat.avg_ms - lat_direct.avg_ms
            )
        };
        let cpu = match (tput.kpress_cpu_seconds, lat.kpress_cpu_seconds) {
            (Some(t), Some(l)) => format!("{t:.2} / {l:.2}"),
            _ => String::new(),
        };
        let _ = writeln!(
            text,
            "| {} | {:.0} ({:.0}–{:.0}) | {:.3} | {:.1} | {:.3} | {:.0} / {:.0} / {:.2} | {added} | {cpu} |",
            route.label(),
            tput.records_per_sec,
            tput.records_per_sec_range.0,
            tput.records_per_sec_range.1,
            tput.records_per_sec / direct.records_per_sec,
            tput.mb_per_sec,
            tput.mb_per_sec / direct.mb_per_sec,
            lat.p50_ms,
            lat.p99_ms,
            lat.avg_ms,
        );
    }
    let _ = write!(
        text,
        "\nkpress peak RSS (VmHWM): {:.1} MiB with TLS",
        settings.tls_peak_mib
    );
    if let Some(plain) = settings.plain_peak_mib {
        let _ = write!(text, ", {plain:.1} MiB in plain TCP");
    }
    text.push('\n');
    text
}
