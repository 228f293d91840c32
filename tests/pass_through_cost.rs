//! What passing batches through costs kpress, for two kpress binaries side by side in
//! one run (an ignored test: a measurement, never a pass/fail on speed).
//!
//! `KPRESS_BIN` and `KPRESS_BASE_BIN` (release builds) each run in front of one
//! one-node Kafka with the policy `producer` (batches go on as sent), or with
//! `compression.type = COST_TARGET` when that is set (`zstd`: every lz4 batch is
//! recompressed, so the run measures the rewrite path). Each round, in
//! alternating order, Kafka's ProducerPerformance sends lz4 records of
//! datasets/apache_access.log through each (64 KiB batches, acks=1, linger.ms=5, at
//! `COST_RATE` records/s for `COST_SECONDS`), then a single-connection probe sends
//! `COST_PROBE` sequential Produce v7 requests of one 16 KiB lz4 batch (acks=1). For
//! each it reports kpress's CPU ms per MB of record values, and per Produce request its
//! CPU µs and context switches (all threads, voluntary and not, from /proc), and the
//! probe's p50/p99 round trip. Syscalls per request are counted by running the probe
//! once more under `strace -c -f` when `COST_STRACE=1`.
//!
//!   KPRESS_BIN=… KPRESS_BASE_BIN=… cargo test -p kpress-tests --test pass_through_cost \
//!     -- --ignored --nocapture

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use kpress_batch::builder::{BatchBuilder, Record};
use kpress_codec::Codec;
use kpress_tests::bare_requests::{produce_v7, read_frame};
use kpress_tests::data::Dataset;
use kpress_tests::java_client::JavaClient;
use kpress_tests::ports::{free_port, free_port_range, wait_for_port};
use kpress_tests::proc_stat::cpu_seconds;
use kpress_tests::producer_perf::{Payload, ProducerPerf};
use kpress_tests::{kafka_version, Compression, KafkaCluster};

const TOPIC: &str = "cost-pass-through";
const PROBE_BATCH_BYTES: usize = 16 * 1024;

fn env_number(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// A kpress process, killed on drop.
struct Kpress {
    label: String,
    child: Child,
    listen: SocketAddr,
    metrics: SocketAddr,
    _dir: tempfile::TempDir,
}

impl Drop for Kpress {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Kpress {
    fn start(label: &str, binary: &Path, cluster: &KafkaCluster, target: &str) -> Kpress {
        let dir = tempfile::tempdir().unwrap();
        let listen = SocketAddr::from(([127, 0, 0, 1], free_port()));
        let metrics = SocketAddr::from(([127, 0, 0, 1], free_port()));
        let servers: Vec<String> = cluster
            .node_addresses()
            .iter()
            .map(|a| format!("\"{a}\""))
            .collect();
        let config = format!(
            "[listener]\nbind = \"{listen}\"\nadvertised_host = \"127.0.0.1\"\n\
             node_port_base = {}\n[upstream]\nbootstrap_servers = [{}]\n\
             [admin]\nbind = \"{metrics}\"\n[defaults]\ncompression.type = \"{target}\"\n",
            free_port_range(4),
            servers.join(", ")
        );
        let config_path = dir.path().join("kpress.toml");
        std::fs::write(&config_path, config).unwrap();
        let log = std::fs::File::create(dir.path().join("kpress.log")).unwrap();
        let child = Command::new(binary)
            .arg("run")
            .arg("--config")
            .arg(&config_path)
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("starting {}: {e}", binary.display()));
        assert!(
            wait_for_port(listen, Duration::from_secs(30)),
            "{label} kpress listening"
        );
        Kpress {
            label: label.to_owned(),
            child,
            listen,
            metrics,
            _dir: dir,
        }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn bootstrap(&self) -> String {
        self.listen.to_string()
    }

    /// `kpress_requests_total{api="Produce"}`.
    fn produce_requests(&self) -> f64 {
        let mut stream = TcpStream::connect(self.metrics).unwrap();
        write!(
            stream,
            "GET /metrics HTTP/1.1\r\nHost: kpress\r\nConnection: close\r\n\r\n"
        )
        .unwrap();
        let mut text = String::new();
        stream.read_to_string(&mut text).unwrap();
        text.lines()
            .find_map(|l| l.strip_prefix("kpress_requests_total{api=\"Produce\"} "))
            .map_or(0.0, |v| v.trim().parse().unwrap())
    }

    /// Context switches of all its threads so far.
    fn context_switches(&self) -> u64 {
        let mut total = 0;
        for task in std::fs::read_dir(format!("/proc/{}/task", self.pid())).unwrap() {
            let Ok(status) = std::fs::read_to_string(task.unwrap().path().join("status")) else {
                continue;
            };
            total += status
                .lines()
                .filter(|l| l.contains("ctxt_switches"))
                .filter_map(|l| l.split_whitespace().last()?.parse::<u64>().ok())
                .sum::<u64>();
        }
        total
    }

    fn counters(&self) -> (f64, u64, f64) {
        (
            cpu_seconds(self.pid()).unwrap(),
            self.context_switches(),
            self.produce_requests(),
        )
    }
}

/// One measured stretch: CPU s, context switches, Produce requests, MB of values.
#[derive(Debug, Default, Clone, Copy)]
struct Cost {
    cpu_s: f64,
    switches: u64,
    requests: f64,
    value_mb: f64,
}

impl Cost {
    fn add(&mut self, other: Cost) {
        self.cpu_s += other.cpu_s;
        self.switches += other.switches;
        self.requests += other.requests;
        self.value_mb += other.value_mb;
    }

    fn ms_per_mb(&self) -> f64 {
        self.cpu_s * 1000.0 / self.value_mb
    }

    fn us_per_request(&self) -> f64 {
        self.cpu_s * 1e6 / self.requests
    }

    fn switches_per_request(&self) -> f64 {
        self.switches as f64 / self.requests
    }
}

fn measured(kpress: &Kpress, run: impl FnOnce() -> f64) -> Cost {
    let (cpu0, sw0, req0) = kpress.counters();
    let value_mb = run();
    let (cpu1, sw1, req1) = kpress.counters();
    Cost {
        cpu_s: cpu1 - cpu0,
        switches: sw1 - sw0,
        requests: req1 - req0,
        value_mb,
    }
}

/// The probe's batch: the dataset's records in one lz4 batch of about 16 KiB, and the
/// bytes of its values.
fn probe_batch() -> (Vec<u8>, u64) {
    let records: Vec<Record> = Dataset::ApacheAccessLog
        .records()
        .into_iter()
        .map(Record::value)
        .collect();
    let build = |n: usize| {
        BatchBuilder::codec(Codec::Lz4)
            .build(&records[..n])
            .unwrap()
    };
    let n = (1..=records.len())
        .step_by(10)
        .find(|n| build(*n).len() >= PROBE_BATCH_BYTES)
        .unwrap();
    let values = records[..n]
        .iter()
        .map(|r| r.value.as_ref().map_or(0, |v| v.len() as u64))
        .sum();
    (build(n), values)
}

/// `n` sequential Produce round trips on one connection; sorted µs.
fn probe(addr: SocketAddr, batch: &[u8], n: usize) -> Vec<f64> {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream.set_nodelay(true).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let mut micros = Vec::with_capacity(n);
    for i in 0..n {
        let frame = produce_v7(i as i32, 1, 30_000, &[(TOPIC.as_bytes(), vec![(0, batch)])]);
        let started = Instant::now();
        stream.write_all(&frame).unwrap();
        read_frame(&mut stream).unwrap();
        micros.push(started.elapsed().as_secs_f64() * 1e6);
    }
    micros.sort_by(f64::total_cmp);
    micros
}

fn quantile(sorted: &[f64], q: f64) -> f64 {
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// Syscalls per probe request under `strace -c -f`, and its summary table.
fn strace_probe(kpress: &Kpress, batch: &[u8], n: usize) -> (f64, String) {
    let out = tempfile::NamedTempFile::new().unwrap();
    let mut strace = Command::new("strace")
        .args(["-c", "-f", "-o"])
        .arg(out.path())
        .arg("-p")
        .arg(kpress.pid().to_string())
        .stderr(Stdio::null())
        .spawn()
        .expect("strace");
    std::thread::sleep(Duration::from_secs(1));
    probe(kpress.listen, batch, n);
    // SIGINT: strace detaches and writes its summary.
    interrupt(strace.id());
    strace.wait().unwrap();
    let table = std::fs::read_to_string(out.path()).unwrap();
    let total = table
        .lines()
        .find(|l| l.trim_end().ends_with("total"))
        .and_then(|l| l.split_whitespace().nth(3)?.parse::<f64>().ok())
        .unwrap_or(f64::NAN);
    (total / n as f64, table)
}

fn interrupt(pid: u32) {
    Command::new("kill")
        .args(["-INT", &pid.to_string()])
        .status()
        .unwrap();
}

fn binary(var: &str) -> PathBuf {
    PathBuf::from(std::env::var_os(var).unwrap_or_else(|| panic!("set {var}")))
}

#[test]
#[ignore = "a measurement: run with KPRESS_BIN and KPRESS_BASE_BIN set"]
fn pass_through_cost() {
    let rounds = env_number("COST_ROUNDS", 3);
    let seconds = env_number("COST_SECONDS", 15);
    let rate = env_number("COST_RATE", 40_000);
    let probe_n = env_number("COST_PROBE", 2000) as usize;
    let target = std::env::var("COST_TARGET").unwrap_or_else(|_| "producer".into());
    eprintln!("kpress policy: compression.type = {target:?}");
    let cluster = KafkaCluster::start(kafka_version(), 1).expect("starting Kafka");
    JavaClient::new(kafka_version())
        .create_topics(
            &cluster.bootstrap(),
            &[TOPIC],
            1,
            1,
            &["compression.type=producer"],
        )
        .unwrap();
    let kpresses = [
        Kpress::start("before", &binary("KPRESS_BASE_BIN"), &cluster, &target),
        Kpress::start("after", &binary("KPRESS_BIN"), &cluster, &target),
    ];
    let (batch, batch_values) = probe_batch();
    let perf = |kpress: &Kpress| {
        let mut perf = ProducerPerf::new(
            &kpress.bootstrap(),
            TOPIC,
            rate * seconds,
            Payload::LinesOf(Dataset::ApacheAccessLog.path()),
        );
        perf.throughput = Some(rate);
        perf.acks = "1".into();
        perf.linger_ms = 5;
        perf.batch_size = 64 * 1024;
        perf.compression = Compression::Lz4;
        perf
    };
    // Warm-up, unmeasured.
    for kpress in &kpresses {
        let mut warm = perf(kpress);
        warm.records = rate * 3;
        warm.run(kafka_version()).unwrap();
        probe(kpress.listen, &batch, probe_n / 10);
    }
    let mut load = [Cost::default(); 2];
    let mut load_ms_per_mb: [Vec<f64>; 2] = Default::default();
    let mut probe_cost = [Cost::default(); 2];
    let mut p50: [Vec<f64>; 2] = Default::default();
    let mut p99: [Vec<f64>; 2] = Default::default();
    for round in 0..rounds {
        let mut order = [0usize, 1];
        if round % 2 == 1 {
            order.reverse();
        }
        for i in order {
            let kpress = &kpresses[i];
            let cost = measured(kpress, || {
                let summary = perf(kpress).run(kafka_version()).unwrap();
                summary.mb_per_sec * 1_048_576.0 * summary.records as f64
                    / summary.records_per_sec
                    / 1e6
            });
            eprintln!(
                "round {round} {:<6} load: {:.3} ms/MB, {:.0} µs and {:.2} context switches per request ({} requests, {:.1} MB)",
                kpress.label,
                cost.ms_per_mb(),
                cost.us_per_request(),
                cost.switches_per_request(),
                cost.requests,
                cost.value_mb
            );
            load[i].add(cost);
            load_ms_per_mb[i].push(cost.ms_per_mb());
            let mut trips = Vec::new();
            let cost = measured(kpress, || {
                trips = probe(kpress.listen, &batch, probe_n);
                (batch_values * probe_n as u64) as f64 / 1e6
            });
            eprintln!(
                "round {round} {:<6} probe: p50 {:.0} µs p99 {:.0} µs, {:.0} µs and {:.2} context switches per request",
                kpress.label,
                quantile(&trips, 0.5),
                quantile(&trips, 0.99),
                cost.us_per_request(),
                cost.switches_per_request()
            );
            probe_cost[i].add(cost);
            p50[i].push(quantile(&trips, 0.5));
            p99[i].push(quantile(&trips, 0.99));
        }
    }
    let mut report = String::from("| | before | after | after/before |\n|---|---|---|---|\n");
    let mut row = |name: &str, before: f64, after: f64| {
        report.push_str(&format!(
            "| {name} | {before:.2} | {after:.2} | {:.2} |\n",
            after / before
        ));
    };
    let [mut b, mut a] = load_ms_per_mb.clone();
    row(
        "load: kpress CPU ms per MB (median of rounds)",
        median(&mut b),
        median(&mut a),
    );
    row(
        "load: CPU µs per Produce request",
        load[0].us_per_request(),
        load[1].us_per_request(),
    );
    row(
        "load: context switches per Produce request",
        load[0].switches_per_request(),
        load[1].switches_per_request(),
    );
    row(
        "probe: CPU µs per request",
        probe_cost[0].us_per_request(),
        probe_cost[1].us_per_request(),
    );
    row(
        "probe: context switches per request",
        probe_cost[0].switches_per_request(),
        probe_cost[1].switches_per_request(),
    );
    let [mut b, mut a] = p50.clone();
    row(
        "probe: p50 µs (median of rounds)",
        median(&mut b),
        median(&mut a),
    );
    let [mut b, mut a] = p99.clone();
    row(
        "probe: p99 µs (median of rounds)",
        median(&mut b),
        median(&mut a),
    );
    if std::env::var_os("COST_STRACE").is_some_and(|v| v == "1") {
        let before = strace_probe(&kpresses[0], &batch, probe_n);
        let after = strace_probe(&kpresses[1], &batch, probe_n);
        row(
            "probe: syscalls per request (strace -c -f)",
            before.0,
            after.0,
        );
        eprintln!("strace before:\n{}\nstrace after:\n{}", before.1, after.1);
    }
    println!(
        "\npass-through cost, {rounds} rounds of {seconds} s at {rate} records/s, probe {probe_n} requests\n\n{report}"
    );
}
