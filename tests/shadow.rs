//! Shadow trials against a real 4.1.1 broker: batches of known content (the
//! apache log, 100 lines per batch, framed by kpress-batch's builder as `kpress bench`
//! frames its sections) go through kpress with `[shadow] sample = 1.0` and four
//! candidates. The shadow figures must match an offline trial of the same records
//! sections (`kpress bench`), what the broker stores must be what it stores without `[shadow]`, a reload
//! that removes `[shadow]` must stop the trials, and the smallest CPU budget must skip
//! (and count) sampled batches.
//!
//! Tolerances: every candidate's whole-batch bytes (61-byte header + compressed
//! records) must be within 1% of the offline figure. They are in fact equal: the
//! records sections are byte for byte the ones the offline trial compresses (same
//! framing, offset and timestamp deltas 0, 1, 2, …; the header's timestamps and ids are
//! outside the compressed part), and the codecs are deterministic. CPU per MB may
//! differ by up to a factor of 10 either way: it is a time on a shared, noisy machine.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use kpress_batch::builder::{BatchBuilder, Record};
use kpress_codec::Codec;
use kpress_tests::compression::Compression;
use kpress_tests::data::Dataset;
use kpress_tests::java_client::JavaClient;
use kpress_tests::kpress::{KpressProxy, KpressSetup};
use kpress_tests::process::run_ok;
use kpress_tests::raw_produce::produce_raw;
use kpress_tests::{kafka_version, KafkaCluster};

const CANDIDATES: [&str; 4] = ["zstd:3", "gzip:6:libdeflate", "lz4:9", "snappy"];
const RECORDS_PER_BATCH: usize = 100;
const BATCHES: usize = 20;

fn shared_cluster() -> &'static KafkaCluster {
    static CLUSTER: OnceLock<KafkaCluster> = OnceLock::new();
    CLUSTER.get_or_init(|| KafkaCluster::start(kafka_version(), 1).expect("starting Kafka"))
}

/// The first `batches × per_batch` lines of the apache log.
fn lines(batches: usize, per_batch: usize) -> Vec<Vec<u8>> {
    let mut all = Dataset::ApacheAccessLog.records();
    assert!(all.len() >= batches * per_batch, "{} lines", all.len());
    all.truncate(batches * per_batch);
    all
}

/// lz4 batches of `per_batch` lines each, as a producer would send them.
fn lz4_batches(lines: &[Vec<u8>], per_batch: usize) -> Vec<Vec<u8>> {
    lines
        .chunks(per_batch)
        .map(|chunk| {
            let records: Vec<Record> = chunk.iter().cloned().map(Record::value).collect();
            BatchBuilder::codec(Codec::Lz4).build(&records).unwrap()
        })
        .collect()
}

fn rules(shadow: &str) -> String {
    format!("[[topics]]\nmatch = \"trial.*\"\ncompression.type = \"zstd\"\n{shadow}")
}

fn shadow_section(sample: f64, max_cpu_fraction: f64, candidates: &[&str]) -> String {
    let specs: Vec<String> = candidates.iter().map(|c| format!("\"{c}\"")).collect();
    format!(
        "[shadow]\ncandidates = [{}]\nsample = {sample:?}\nmax_cpu_fraction = {max_cpu_fraction:?}\n",
        specs.join(", ")
    )
}

fn node(proxy: &KpressProxy, cluster: &KafkaCluster) -> SocketAddr {
    let id = u16::try_from(cluster.node_ids()[0]).unwrap();
    SocketAddr::from((
        [127, 0, 0, 1],
        proxy.node_port_base().expect("ports mode") + id,
    ))
}

fn send(proxy: &KpressProxy, cluster: &KafkaCluster, topic: &str, batches: &[Vec<u8>]) {
    let node = node(proxy, cluster);
    for (i, batch) in batches.iter().enumerate() {
        let answer = produce_raw(node, topic, 0, batch, Duration::from_secs(30))
            .unwrap_or_else(|e| panic!("batch {i} to {topic}: {e:#}\n{}", proxy.log()));
        assert_eq!(answer.error_code, 0, "batch {i} to {topic}");
    }
}

fn metric(proxy: &KpressProxy, name: &str, labels: &[(&str, &str)]) -> f64 {
    proxy
        .counter(name, labels)
        .unwrap_or_else(|e| panic!("scraping kpress: {e:#}"))
}

fn wait_for(what: &str, proxy: &KpressProxy, mut done: impl FnMut() -> bool) {
    // Trials run at the lowest priority: on a busy machine they wait for idle CPU.
    let deadline = Instant::now() + Duration::from_secs(180);
    while !done() {
        assert!(Instant::now() < deadline, "{what}\n{}", proxy.log());
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Replaces the policy file in one rename, as editors and config maps do.
fn write_policy(path: &Path, text: &str) {
    let staged = path.with_extension("staged");
    std::fs::write(&staged, text).unwrap();
    std::fs::rename(&staged, path).unwrap();
}

/// One candidate's offline figures over the same records sections.
#[derive(Debug)]
struct Offline {
    candidate: String,
    raw_bytes: f64,
    batch_bytes: f64,
    compress_seconds: f64,
}

/// `kpress bench --format json` over a directory holding the lines, every batch once
/// (`--batch-count` is their number).
fn offline(lines: &[Vec<u8>], per_batch: usize, dir: &Path) -> Vec<Offline> {
    let file = dir.join("lines.log");
    std::fs::write(&file, lines.join(&b"\n"[..])).unwrap();
    let mut bench = std::process::Command::new(kpress_tests::kpress::kpress_binary());
    bench
        .arg("bench")
        .arg("--dir")
        .arg(dir)
        .args(["--batch-size", &per_batch.to_string()])
        .args([
            "--batch-count",
            &lines.len().div_ceil(per_batch).to_string(),
        ])
        .args(["--format", "json"]);
    for candidate in CANDIDATES {
        bench.args(["--candidate", candidate]);
    }
    let out = run_ok(&mut bench, Duration::from_secs(300))
        .unwrap_or_else(|e| panic!("kpress bench: {e:#}"));
    let json: serde_json::Value = serde_json::from_str(&out.stdout_text())
        .unwrap_or_else(|e| panic!("kpress bench JSON: {e}"));
    let results = json["results"].as_array().expect("results");
    results
        .iter()
        .map(|r| Offline {
            candidate: r["candidate"].as_str().unwrap().to_owned(),
            raw_bytes: r["raw_bytes"].as_f64().unwrap(),
            batch_bytes: r["batch_bytes"].as_f64().unwrap(),
            compress_seconds: r["compress_seconds"].as_f64().unwrap(),
        })
        .collect()
}

#[test]
fn shadow_figures_match_an_offline_bench_and_what_is_stored_does_not_change() {
    let cluster = shared_cluster();
    let (on, off) = ("trial.shadow-on", "trial.shadow-off");
    JavaClient::new(kafka_version())
        .create_producer_codec_topics(&cluster.bootstrap(), &[on, off], 1)
        .unwrap();
    let base = KpressSetup::in_front_of(&cluster.node_addresses(), &cluster.node_ids(), "");
    let shadow = shadow_section(1.0, 1.0, &CANDIDATES);
    let proxy = KpressProxy::start_with(KpressSetup {
        rules: rules(&shadow),
        ..base
    })
    .unwrap();
    let lines = lines(BATCHES, RECORDS_PER_BATCH);
    let batches = lz4_batches(&lines, RECORDS_PER_BATCH);
    send(&proxy, cluster, on, &batches);
    let topic = [("topic", on)];
    wait_for("not every batch was tried", &proxy, || {
        metric(&proxy, "kpress_shadow_batches_total", &topic) >= BATCHES as f64
    });
    assert_eq!(
        metric(&proxy, "kpress_shadow_batches_total", &topic),
        BATCHES as f64
    );
    assert_eq!(metric(&proxy, "kpress_shadow_skipped_total", &[]), 0.0);

    let sent: usize = batches.iter().map(Vec::len).sum();
    let raw = metric(&proxy, "kpress_shadow_raw_bytes_total", &topic);
    let dir = tempfile::tempdir().unwrap();
    let offline = offline(&lines, RECORDS_PER_BATCH, dir.path());
    let mut report = Vec::new();
    for candidate in CANDIDATES {
        let labels = [("topic", on), ("candidate", candidate)];
        let bytes_in = metric(&proxy, "kpress_shadow_bytes_in_total", &labels);
        let bytes_out = metric(&proxy, "kpress_shadow_bytes_out_total", &labels);
        let cpu = metric(&proxy, "kpress_shadow_cpu_seconds_total", &labels);
        let bench = offline
            .iter()
            .find(|o| o.candidate == candidate)
            .unwrap_or_else(|| panic!("no offline figure for {candidate}: {offline:?}"));
        assert_eq!(bytes_in, sent as f64, "{candidate}: bytes in");
        assert_eq!(raw, bench.raw_bytes, "raw records bytes");
        let size_error = (bytes_out - bench.batch_bytes).abs() / bench.batch_bytes;
        assert!(
            size_error <= 0.01,
            "{candidate}: shadow {bytes_out} bytes, offline {}",
            bench.batch_bytes
        );
        let (live_ms_per_mb, bench_ms_per_mb) = (
            cpu * 1e9 / raw,
            bench.compress_seconds * 1e9 / bench.raw_bytes,
        );
        assert!(
            cpu > 0.0 && (0.1..=10.0).contains(&(live_ms_per_mb / bench_ms_per_mb)),
            "{candidate}: shadow {live_ms_per_mb:.3} CPU ms/MB, offline {bench_ms_per_mb:.3}"
        );
        report.push(format!(
            "{candidate}: out/in {:.4} (offline {:.4}), {live_ms_per_mb:.2} CPU ms/MB (offline {bench_ms_per_mb:.2})",
            bytes_out / bytes_in,
            bench.batch_bytes / sent as f64,
        ));
    }
    eprintln!("{}", report.join("\n"));

    // A reload without [shadow] stops the trials; the same batches are stored alike.
    let policy = proxy.config_file().expect("kpress's policy file");
    let text = std::fs::read_to_string(&policy).unwrap();
    let applied = metric(
        &proxy,
        "kpress_policy_reloads_total",
        &[("result", "applied")],
    );
    write_policy(&policy, &text.replace(&shadow, ""));
    wait_for("the reload was not applied", &proxy, || {
        metric(
            &proxy,
            "kpress_policy_reloads_total",
            &[("result", "applied")],
        ) > applied
    });
    send(&proxy, cluster, off, &batches);
    // Give trials that should not run the time to show up.
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(
        metric(&proxy, "kpress_shadow_batches_total", &[]),
        BATCHES as f64,
        "trials ran after [shadow] was removed"
    );
    assert_eq!(metric(&proxy, "kpress_shadow_skipped_total", &[]), 0.0);

    let dumps = cluster.dump_partition_0(&[on, off]).unwrap();
    let mut problems = Vec::new();
    for (topic, dump) in [on, off].iter().zip(&dumps) {
        problems.extend(dump.problems_storing(topic, Compression::Zstd, &lines));
    }
    let shape = |i: usize| -> Vec<(String, i64, i64)> {
        dumps[i]
            .batches
            .iter()
            .map(|b| (b.compresscodec.clone(), b.count, b.size))
            .collect()
    };
    if shape(0) != shape(1) {
        problems.push(format!(
            "stored with [shadow]: {:?}\nwithout: {:?}",
            shape(0),
            shape(1)
        ));
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn the_smallest_cpu_budget_skips_sampled_batches_and_counts_them() {
    const SENT: usize = 10;
    const PER_BATCH: usize = 1000;
    let cluster = shared_cluster();
    let topic = "trial.tiny-budget";
    JavaClient::new(kafka_version())
        .create_producer_codec_topics(&cluster.bootstrap(), &[topic], 1)
        .unwrap();
    let base = KpressSetup::in_front_of(&cluster.node_addresses(), &cluster.node_ids(), "");
    let proxy = KpressProxy::start_with(KpressSetup {
        rules: rules(&shadow_section(
            1.0,
            0.001,
            &["gzip:9", "zstd:19", "lz4:17", "gzip:6"],
        )),
        ..base
    })
    .unwrap();
    let lines = lines(SENT, PER_BATCH);
    let batches = lz4_batches(&lines, PER_BATCH);
    // The budget starts full: the first batch is tried and empties it.
    send(&proxy, cluster, topic, &batches[..1]);
    wait_for("the first batch was not tried", &proxy, || {
        metric(&proxy, "kpress_shadow_batches_total", &[]) >= 1.0
    });
    send(&proxy, cluster, topic, &batches[1..]);
    // Every sampled batch is either tried or skipped with a reason.
    let accounted = || {
        metric(&proxy, "kpress_shadow_batches_total", &[])
            + metric(&proxy, "kpress_shadow_skipped_total", &[])
    };
    wait_for("not every sampled batch was accounted for", &proxy, || {
        accounted() >= SENT as f64
    });
    assert_eq!(accounted(), SENT as f64);
    let tried = metric(&proxy, "kpress_shadow_batches_total", &[]);
    let over_budget = metric(
        &proxy,
        "kpress_shadow_skipped_total",
        &[("reason", "cpu_budget")],
    );
    // 0.001 of the CPUs holds a few milliseconds at most and refills as slowly; a trial
    // of 1000 lines with gzip-9 and zstd-19 takes more, so the batches sent right after
    // it find the budget empty.
    assert!(tried >= 1.0, "{tried} tried\n{}", proxy.log());
    assert!(over_budget >= 1.0, "{over_budget} skipped over budget");
    // What the broker stores is untouched by it.
    let dump = cluster.dump_partition_0(&[topic]).unwrap().remove(0);
    let problems = dump.problems_storing(topic, Compression::Zstd, &lines);
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// The kpress process serving `proxy` (found by its policy file on its command line).
fn kpress_pid(proxy: &KpressProxy) -> u32 {
    let config = proxy.config_file().expect("kpress's policy file");
    let config = config.to_string_lossy().into_owned();
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .find(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|cmdline| String::from_utf8_lossy(&cmdline).contains(&config))
        })
        .expect("the kpress process")
}

/// User + system CPU seconds of `pid`'s threads named `kpress-shadow-*` (alive now).
fn shadow_thread_cpu(pid: u32) -> f64 {
    let ticks = 100.0; // sysconf(_SC_CLK_TCK) on Linux
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return 0.0;
    };
    tasks
        .filter_map(Result::ok)
        .filter(|task| {
            std::fs::read_to_string(task.path().join("comm"))
                .is_ok_and(|comm| comm.starts_with("kpress-shadow"))
        })
        .filter_map(|task| {
            let stat = std::fs::read_to_string(task.path().join("stat")).ok()?;
            let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
            // After the command: state is field 3, utime 14, stime 15.
            let utime: f64 = fields.get(11)?.parse().ok()?;
            let stime: f64 = fields.get(12)?.parse().ok()?;
            Some((utime + stime) / ticks)
        })
        .sum()
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// A measurement, not a check (`--ignored --nocapture`; `KPRESS_BIN` may name a release
/// build): Kafka's ProducerPerformance (apache log lines, lz4, 256 KiB batches) through
/// kpress rewriting into zstd, rounds alternating between no `[shadow]` and `[shadow]`
/// at `sample = 0.01` with four candidates, by policy reload; then one round at `sample =
/// 1.0` to see the trial threads' CPU held to `max_cpu_fraction`. Medians of the rounds:
/// records/s, kpress CPU seconds, trial threads' CPU seconds.
#[test]
#[ignore = "measurement: cargo test -p kpress-tests --test shadow -- --ignored --nocapture"]
fn shadow_trials_cost_measured() {
    use kpress_tests::producer_perf::{Payload, ProducerPerf};
    const ROUNDS: usize = 5;
    const RECORDS: u64 = 400_000;
    let cluster = shared_cluster();
    let topic = "trial.perf";
    JavaClient::new(kafka_version())
        .create_producer_codec_topics(&cluster.bootstrap(), &[topic], 1)
        .unwrap();
    let base =
        KpressSetup::in_front_of(&cluster.node_addresses(), &cluster.node_ids(), "").measuring();
    let proxy = KpressProxy::start_with(KpressSetup {
        rules: rules(""),
        ..base
    })
    .unwrap();
    let pid = kpress_pid(&proxy);
    let policy = proxy.config_file().unwrap();
    let plain = std::fs::read_to_string(&policy).unwrap();
    let mut in_force = plain.clone();
    let mut apply = |shadow: &str| {
        let text = format!("{plain}{shadow}");
        if text == in_force {
            return;
        }
        let applied =
            |p: &KpressProxy| metric(p, "kpress_policy_reloads_total", &[("result", "applied")]);
        let before = applied(&proxy);
        write_policy(&policy, &text);
        wait_for("reload", &proxy, || applied(&proxy) > before);
        in_force = text;
    };
    let perf = ProducerPerf::new(
        &proxy.bootstrap(),
        topic,
        RECORDS,
        Payload::LinesOf(Dataset::ApacheAccessLog.path()),
    );
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
    let mut runs: [Vec<(f64, f64, f64)>; 2] = [Vec::new(), Vec::new()];
    let sampled = shadow_section(
        0.01,
        0.05,
        &["zstd:3", "zstd:9", "gzip:6:libdeflate", "lz4:9"],
    );
    for round in 0..2 * ROUNDS {
        let on = round % 2 == 1;
        apply(if on { &sampled } else { "" });
        let cpu_before = kpress_tests::proc_stat::cpu_seconds(pid).unwrap();
        let summary = perf.run(kafka_version()).unwrap();
        let kpress_cpu = kpress_tests::proc_stat::cpu_seconds(pid).unwrap() - cpu_before;
        let shadow_cpu = shadow_thread_cpu(pid);
        eprintln!(
            "round {round} shadow {}: {:.0} records/s, kpress {kpress_cpu:.2} CPU s, trial threads {shadow_cpu:.2} CPU s",
            if on { "on" } else { "off" },
            summary.records_per_sec
        );
        runs[usize::from(on)].push((summary.records_per_sec, kpress_cpu, shadow_cpu));
    }
    for (name, rows) in ["off", "on (sample 0.01, 4 candidates)"].iter().zip(&runs) {
        eprintln!(
            "shadow {name}: median {:.0} records/s, kpress {:.2} CPU s per {RECORDS} records, trial threads {:.3} CPU s",
            median(rows.iter().map(|r| r.0).collect()),
            median(rows.iter().map(|r| r.1).collect()),
            median(rows.iter().map(|r| r.2).collect()),
        );
    }
    // Every batch sampled: the budget is what holds the trials back.
    apply(&shadow_section(
        1.0,
        0.05,
        &["zstd:3", "zstd:9", "gzip:6:libdeflate", "lz4:9"],
    ));
    let started = Instant::now();
    let cpu_before = kpress_tests::proc_stat::cpu_seconds(pid).unwrap();
    let tried_before = metric(&proxy, "kpress_shadow_batches_total", &[]);
    let summary = perf.run(kafka_version()).unwrap();
    let kpress_cpu = kpress_tests::proc_stat::cpu_seconds(pid).unwrap() - cpu_before;
    let wall = started.elapsed().as_secs_f64();
    let shadow_cpu = shadow_thread_cpu(pid);
    eprintln!(
        "sample 1.0, max_cpu_fraction 0.05 on {cpus} CPUs: {:.0} records/s, kpress {kpress_cpu:.2} CPU s, \
         trial threads {shadow_cpu:.2} CPU s in {wall:.1} s = {:.3} of the CPUs; batches tried {}, \
         skipped cpu_budget {}, queue_full {}",
        summary.records_per_sec,
        shadow_cpu / wall / cpus,
        metric(&proxy, "kpress_shadow_batches_total", &[]) - tried_before,
        metric(&proxy, "kpress_shadow_skipped_total", &[("reason", "cpu_budget")]),
        metric(&proxy, "kpress_shadow_skipped_total", &[("reason", "queue_full")]),
    );
}
