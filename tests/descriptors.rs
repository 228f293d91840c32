//! kpress at its open-file limit, in front of a real broker, and what connections cost
//! it in memory and descriptors.
//!
//! `at_the_open_file_limit`: with 40 clients relayed (each past ApiVersions), the
//! running kpress's soft limit is lowered (`prlimit --pid`) to room for exactly those
//! 40 beside the descriptors it reserves for itself. New clients are then closed as
//! they are accepted while the 40 keep being answered, the admin endpoint serves
//! `/metrics` and a changed policy file is reloaded. With the limit lowered to kpress's
//! lowest free descriptor, `accept` itself fails: new clients are still refused at once
//! (a spare descriptor accepts and closes them) rather than left in the listen backlog.
//! Both are counted, the log says so at most once per 10 s, and once 30 of the 40
//! close, new clients are served again at the first limit.
//!
//! `connections_memory` (ignored, a measurement): kpress's RSS and descriptors with
//! 2,500 to 10,000 idle connections open (each past ApiVersions), then with
//! `CONNECTIONS_PRODUCERS` of them (default 100) producing for
//! `CONNECTIONS_PRODUCE_SECONDS` (default 20): hand-built Produce v7 requests of one
//! gzip batch of `CONNECTIONS_RECORDS` records (default 100 lines of
//! `datasets/apache_access.log`, ~20 KB before compression), 5 unanswered per
//! connection, recompressed to zstd-3. It prints a markdown report (and writes it to
//! `$CONNECTIONS_REPORT` if set). `CONNECTIONS_TOTAL` (default 10,000) connections need
//! an open-file limit of 2 per connection + 256 for kpress: a hard limit that low is
//! raised if this process may (root), else the test says how many fit.
//!
//! Run: `cargo build --release -p kpress` then
//! `KPRESS_BIN=target/release/kpress cargo test -p kpress-tests --test descriptors --
//! --ignored --nocapture connections_memory`.

use kpress_batch::builder::{BatchBuilder, Record};
use kpress_codec::Codec;
use kpress_tests::bare_requests::{
    api_versions, parse_api_versions, parse_produce_v7, produce_v7, read_frame,
};
use kpress_tests::data::Dataset;
use kpress_tests::java_client::JavaClient;
use kpress_tests::kpress::{KpressProxy, KpressSetup};
use kpress_tests::measure::{env_number, kpress_pid, publish_report, release_kpress, MIB};
use kpress_tests::{kafka_version, proc_status, KafkaCluster};
use std::collections::VecDeque;
use std::fmt::Write as _;
use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::process::Command;
use std::time::{Duration, Instant};

/// ApiVersions v3, as current clients send first.
const API_VERSIONS_VERSION: i16 = 3;

fn connect(addr: SocketAddr) -> TcpStream {
    let stream = TcpStream::connect_timeout(&addr, Duration::from_secs(5))
        .unwrap_or_else(|e| panic!("connecting to {addr}: {e}"));
    stream.set_nodelay(true).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    stream
}

/// One ApiVersions round trip on `stream`: the broker's answer, relayed.
fn api_versions_answered(stream: &mut TcpStream, correlation_id: i32) -> anyhow::Result<()> {
    stream.write_all(&api_versions(API_VERSIONS_VERSION, correlation_id))?;
    let answer = parse_api_versions(&read_frame(stream)?, API_VERSIONS_VERSION)?;
    anyhow::ensure!(
        answer.correlation_id == correlation_id && answer.error_code == 0,
        "{answer:?}"
    );
    Ok(())
}

/// A new client's fate: answered, or closed by kpress (and how long that took).
fn try_new_client(addr: SocketAddr) -> Result<TcpStream, Duration> {
    let started = Instant::now();
    let mut stream = connect(addr);
    match api_versions_answered(&mut stream, 1) {
        Ok(()) => Ok(stream),
        Err(_) => Err(started.elapsed()),
    }
}

fn open_descriptors(pid: u32) -> u64 {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .expect("kpress's descriptors")
        .count() as u64
}

/// Sets the soft open-file limit of the running process `pid` (the hard one stays).
fn set_soft_limit(pid: u32, soft: u64) {
    let status = Command::new("prlimit")
        .arg(format!("--pid={pid}"))
        .arg(format!("--nofile={soft}:"))
        .status()
        .expect("running prlimit");
    assert!(
        status.success(),
        "prlimit --pid {pid} --nofile={soft}: {status}"
    );
}

fn soft_limit(pid: u32) -> u64 {
    let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).unwrap();
    let line = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .unwrap_or_else(|| panic!("{limits}"));
    line.split_whitespace()
        .find_map(|w| w.parse().ok())
        .unwrap_or_else(|| panic!("{line}"))
}

/// The lowest descriptor number process `pid` has free: every one below is open.
fn lowest_free_descriptor(pid: u32) -> u64 {
    let open: std::collections::BTreeSet<u64> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .expect("kpress's descriptors")
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    (0..).find(|n| !open.contains(n)).unwrap()
}

/// The descriptors kpress reserves for itself, from its start line ("... needs N (2 per
/// connection + RESERVE)").
fn reserve_named_in(log: &str) -> u64 {
    let line = log
        .lines()
        .find(|l| l.contains("open-file limit: "))
        .unwrap_or_else(|| panic!("no open-file limit logged\n{log}"));
    line.rsplit_once("per connection + ")
        .and_then(|(_, rest)| rest.trim_end_matches(')').parse().ok())
        .unwrap_or_else(|| panic!("no reserve in {line}"))
}

fn wait_for(what: &str, proxy: &KpressProxy, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !done() {
        assert!(Instant::now() < deadline, "{what}\n{}", proxy.log());
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn at_the_open_file_limit() {
    let cluster = KafkaCluster::start(kafka_version(), 1).expect("starting Kafka");
    let proxy =
        KpressProxy::start_in_front_of(&cluster, "[defaults]\ncompression.type = \"zstd\"\n")
            .expect("starting kpress");
    let pid = kpress_pid(&proxy);
    let addr = proxy.listen();
    let metric = |name: &str, labels: &[(&str, &str)]| {
        proxy
            .counter(name, labels)
            .unwrap_or_else(|e| panic!("{name}: {e:#}\n{}", proxy.log()))
    };
    let mut relayed: Vec<TcpStream> = (0..40).map(|_| connect(addr)).collect();
    for (i, stream) in relayed.iter_mut().enumerate() {
        api_versions_answered(stream, i as i32).expect("ApiVersions through kpress");
    }
    wait_for("40 connections open", &proxy, || {
        metric("kpress_connections_open", &[]) == 40.0
    });
    let original = soft_limit(pid);

    // Room for exactly the 40 beside kpress's reserve, which its log names.
    let reserve = reserve_named_in(&proxy.log());
    let short = reserve + 2 * 40 + 1;
    assert!(open_descriptors(pid) < short);
    set_soft_limit(pid, short);
    let started = Instant::now();
    for _ in 0..10 {
        match try_new_client(addr) {
            Ok(_) => panic!("a client past the limit was served\n{}", proxy.log()),
            Err(took) => assert!(took < Duration::from_secs(5), "refused after {took:?}"),
        }
    }
    assert_eq!(
        metric(
            "kpress_connections_refused_total",
            &[("reason", "descriptors")]
        ),
        10.0,
        "{}",
        proxy.log()
    );
    for (i, stream) in relayed.iter_mut().enumerate() {
        api_versions_answered(stream, 100 + i as i32).expect("a relayed client, at the limit");
    }
    // The policy watcher opens the changed file from kpress's reserve.
    let config = proxy.config_file().unwrap();
    let reloads = || metric("kpress_policy_reloads_total", &[("result", "applied")]);
    let before = reloads();
    let mut text = std::fs::read_to_string(&config).unwrap();
    text.push_str("# changed at the open-file limit\n");
    std::fs::write(&config, text).unwrap();
    wait_for("the changed policy applied", &proxy, || reloads() > before);

    // Not one descriptor free below the limit: accept fails, and the spare refuses the
    // client at once.
    let failures_before = metric("kpress_accept_failures_total", &[("reason", "descriptors")]);
    // Once the admin connection that answered is closed too.
    let mut lowest_free = lowest_free_descriptor(pid);
    loop {
        std::thread::sleep(Duration::from_millis(500));
        let now = lowest_free_descriptor(pid);
        if now == lowest_free {
            break;
        }
        lowest_free = now;
    }
    set_soft_limit(pid, lowest_free);
    for _ in 0..5 {
        match try_new_client(addr) {
            Ok(_) => panic!(
                "a client was served with no descriptor free\n{}",
                proxy.log()
            ),
            Err(took) => assert!(took < Duration::from_secs(5), "refused after {took:?}"),
        }
    }
    set_soft_limit(pid, short);
    let failures = metric("kpress_accept_failures_total", &[("reason", "descriptors")]);
    assert!(
        failures >= failures_before + 5.0,
        "{failures} accept failures at a limit of {lowest_free}\n{}",
        proxy.log()
    );
    for (i, stream) in relayed.iter_mut().enumerate() {
        api_versions_answered(stream, 200 + i as i32).expect("a relayed client, past the limit");
    }

    // Closed connections give their descriptors back: new clients are served again.
    relayed.truncate(10);
    wait_for("30 connections closed", &proxy, || {
        metric("kpress_connections_open", &[]) <= 10.0
    });
    let mut served = Vec::new();
    for i in 0..5 {
        let mut stream = try_new_client(addr)
            .unwrap_or_else(|_| panic!("client {i} refused after 30 closed\n{}", proxy.log()));
        api_versions_answered(&mut stream, 2).expect("a new client, served again");
        served.push(stream);
    }
    for (i, stream) in relayed.iter_mut().enumerate() {
        api_versions_answered(stream, 300 + i as i32).expect("a relayed client, after");
    }

    let log = std::fs::read_to_string(proxy.log_file()).unwrap();
    let shortage_lines = log
        .lines()
        .filter(|l| l.contains("out of file descriptors"))
        .count();
    let allowed = 1 + started.elapsed().as_secs() as usize / 10;
    assert!(
        (1..=allowed).contains(&shortage_lines),
        "{shortage_lines} lines about descriptors in {:?}, at most {allowed}\n{log}",
        started.elapsed()
    );
    assert!(!log.contains("policy not reloaded"), "{log}");
    set_soft_limit(pid, original);
}

// --- The measurement ---

const TOPIC: &str = "connections";
const PARTITIONS: usize = 10;
/// Distinct requests per partition, replayed in turn.
const DISTINCT_REQUESTS: usize = 8;
const IN_FLIGHT: usize = 5;
/// Raises this process's soft open-file limit (its children, the broker and kpress,
/// inherit it) to what kpress needs for `connections`: 2 each and its reserve (256),
/// raising the hard limit too if it is lower, which takes root (`CAP_SYS_RESOURCE`).
fn raise_own_limit(connections: usize) {
    let need = 2 * connections as u64 + 256;
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one rlimit through a pointer to a live local.
    let read = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) };
    assert_eq!(read, 0, "{}", std::io::Error::last_os_error());
    let hard = limit.rlim_max;
    limit.rlim_cur = limit.rlim_cur.max(need.min(hard));
    limit.rlim_max = hard.max(need);
    // SAFETY: setrlimit reads one rlimit through a pointer to a live local.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &limit) } == 0 {
        return;
    }
    let err = std::io::Error::last_os_error();
    panic!(
        "{connections} connections need an open-file limit of {need}, above the hard limit \
         {hard}, which cannot be raised here ({err}): run as root, under `ulimit -Hn {need}`, \
         or with CONNECTIONS_TOTAL={}",
        (hard.saturating_sub(256)) / 2
    );
}

/// Size-prefixed Produce v7 frames for `partition`: one gzip batch of `records` records
/// each, taken in turn from `lines`.
fn produce_frames(lines: &[Vec<u8>], partition: usize, records: usize) -> Vec<Vec<u8>> {
    let mut next = partition * DISTINCT_REQUESTS * records;
    (0..DISTINCT_REQUESTS)
        .map(|correlation_id| {
            let batch: Vec<Record> = (0..records)
                .map(|_| {
                    next += 1;
                    Record::value(lines[next % lines.len()].clone())
                })
                .collect();
            let batch = BatchBuilder::codec(Codec::Gzip)
                .build(&batch)
                .expect("a gzip batch");
            produce_v7(
                correlation_id as i32,
                1,
                30_000,
                &[(TOPIC.as_bytes(), vec![(partition as i32, &batch[..])])],
            )
        })
        .collect()
}

/// Replays `frames` on `stream` until `until`, `IN_FLIGHT` unanswered; checks every
/// answer. Returns the requests answered.
fn produce(stream: &mut TcpStream, frames: &[Vec<u8>], until: Instant) -> anyhow::Result<u64> {
    let mut waiting = VecDeque::new();
    let mut answered = 0;
    let mut check = |stream: &mut TcpStream, waiting: &mut VecDeque<usize>| {
        let sent = waiting.pop_front().expect("an answer is owed");
        let (correlation_id, answers) = parse_produce_v7(&read_frame(stream)?)?;
        anyhow::ensure!(
            correlation_id == sent as i32 && answers.iter().all(|a| a.error_code == 0),
            "request {sent}: {correlation_id} {answers:?}"
        );
        answered += 1;
        anyhow::Ok(())
    };
    let mut i = 0;
    while Instant::now() < until {
        let which = i % frames.len();
        i += 1;
        stream.write_all(&frames[which])?;
        waiting.push_back(which);
        if waiting.len() >= IN_FLIGHT {
            check(stream, &mut waiting)?;
        }
    }
    while !waiting.is_empty() {
        check(stream, &mut waiting)?;
    }
    Ok(answered)
}

/// kpress's RSS (MiB) and descriptors, after the connections' tasks settled.
fn footprint(pid: u32) -> (f64, u64) {
    std::thread::sleep(Duration::from_secs(2));
    let memory = proc_status::memory(pid).expect("kpress's memory");
    (memory.rss as f64 / MIB, open_descriptors(pid))
}

#[test]
#[ignore = "a measurement of minutes; needs a release kpress in KPRESS_BIN and 20256 open files"]
fn connections_memory() {
    let connections = env_number("CONNECTIONS_TOTAL", 10_000) as usize;
    raise_own_limit(connections);
    let producers = env_number("CONNECTIONS_PRODUCERS", 100) as usize;
    let seconds = env_number("CONNECTIONS_PRODUCE_SECONDS", 20);
    let records = env_number("CONNECTIONS_RECORDS", 100) as usize;
    let cluster = KafkaCluster::start(kafka_version(), 1).expect("starting Kafka");
    JavaClient::new(kafka_version())
        .create_topic(
            &cluster.bootstrap(),
            TOPIC,
            PARTITIONS as u32,
            &["compression.type=producer", "retention.bytes=268435456"],
        )
        .unwrap_or_else(|e| panic!("creating {TOPIC}: {e:#}"));
    cluster
        .wait_for_leaders(TOPIC, PARTITIONS)
        .unwrap_or_else(|e| panic!("leaders of {TOPIC}: {e:#}"));
    // Idle connections stay open through the measurement.
    let rules = format!(
        "[defaults]\ncompression.type = \"producer\"\n\n[[topics]]\nmatch = \"{TOPIC}\"\n\
         compression.type = \"zstd\"\ncompression.zstd.level = 3\n\n\
         [limits]\nmax_connections = {connections}\nidle_timeout_ms = 3600000\n"
    );
    let proxy = KpressProxy::start_with(
        KpressSetup::in_front_of(&cluster.node_addresses(), &cluster.node_ids(), &rules)
            .measuring(),
    )
    .expect("starting kpress");
    let pid = kpress_pid(&proxy);
    let addr = proxy.listen();
    let lines = Dataset::ApacheAccessLog.records();
    let frames: Vec<Vec<Vec<u8>>> = (0..PARTITIONS)
        .map(|p| produce_frames(&lines, p, records))
        .collect();
    // Warm-up: one producer's requests through, so the rewrite path is loaded.
    {
        let mut stream = connect(addr);
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            match produce(
                &mut stream,
                &frames[0],
                Instant::now() + Duration::from_secs(2),
            ) {
                Ok(_) => break,
                Err(e) if Instant::now() > deadline => panic!("no Produce stored: {e:#}"),
                Err(_) => {
                    std::thread::sleep(Duration::from_millis(500));
                    stream = connect(addr);
                }
            }
        }
    }
    wait_for("the warm-up connection closed", &proxy, || {
        proxy.counter("kpress_connections_open", &[]).unwrap_or(1.0) == 0.0
    });

    let mut report = String::new();
    let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).unwrap();
    let limit_line = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .unwrap_or_default()
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    let release = if release_kpress() { "release" } else { "debug" };
    writeln!(
        report,
        "### Idle connections (each past ApiVersions v3), {release} kpress\n\n\
         kpress's {limit_line}\n\n\
         | connections | RSS MiB | KiB per connection (vs 0) | descriptors | per connection |\n\
         |---:|---:|---:|---:|---:|"
    )
    .unwrap();
    let (rss0, fds0) = footprint(pid);
    writeln!(report, "| 0 | {rss0:.1} | | {fds0} | |").unwrap();
    let mut idle: Vec<TcpStream> = Vec::with_capacity(connections);
    let checkpoints: Vec<usize> = (1..=4).map(|q| connections * q / 4).collect();
    let opening = Instant::now();
    for target in &checkpoints {
        while idle.len() < *target {
            let mut stream = connect(addr);
            api_versions_answered(&mut stream, idle.len() as i32)
                .unwrap_or_else(|e| panic!("connection {}: {e:#}\n{}", idle.len(), proxy.log()));
            idle.push(stream);
        }
        let (rss, fds) = footprint(pid);
        let n = *target as f64;
        writeln!(
            report,
            "| {target} | {rss:.1} | {:.1} | {fds} | {:.2} |",
            (rss - rss0) * 1024.0 / n,
            (fds - fds0) as f64 / n
        )
        .unwrap();
    }
    let open_seconds = opening.elapsed().as_secs_f64();
    assert_eq!(
        proxy.counter("kpress_connections_open", &[]).unwrap(),
        connections as f64
    );
    let (rss_idle, fds_idle) = footprint(pid);

    // Some of the idle connections become producers.
    std::fs::write(format!("/proc/{pid}/clear_refs"), "5").expect("resetting kpress's VmHWM");
    let until = Instant::now() + Duration::from_secs(seconds);
    let answered: u64 = std::thread::scope(|scope| {
        let workers: Vec<_> = idle[..producers]
            .iter_mut()
            .enumerate()
            .map(|(i, stream)| {
                let frames = &frames[i % PARTITIONS];
                scope.spawn(move || produce(stream, frames, until))
            })
            .collect();
        workers
            .into_iter()
            .map(|w| {
                w.join()
                    .unwrap()
                    .unwrap_or_else(|e| panic!("a producer: {e:#}"))
            })
            .sum()
    });
    let peak = proc_status::memory(pid).expect("kpress's memory").peak_rss as f64 / MIB;
    let (rss_after, fds_after) = footprint(pid);
    let rewritten = proxy
        .counter("kpress_batches_rewritten_total", &[])
        .unwrap();
    for (i, stream) in idle.iter_mut().enumerate().skip(producers).step_by(97) {
        api_versions_answered(stream, i as i32).expect("an idle connection, still served");
    }
    // Whether what the producers took stays with their connections.
    idle.drain(..producers);
    let still_open = (connections - producers) as f64;
    wait_for("the producers' connections closed", &proxy, || {
        proxy.counter("kpress_connections_open", &[]).unwrap_or(0.0) == still_open
    });
    let (rss_closed, fds_closed) = footprint(pid);
    let batch_bytes = frames[0][0].len();
    writeln!(
        report,
        "\nOpening them took {open_seconds:.1} s (one at a time).\n\n\
         ### {producers} of the {connections} producing\n\n\
         Each: Produce v7, one gzip batch of {records} records (~{:.1} KiB request), \
         {IN_FLIGHT} unanswered, recompressed to zstd-3, for {seconds} s: {answered} \
         requests answered ({:.0}/s in all), {rewritten} batches rewritten.\n\n\
         | | RSS MiB | KiB per producer (vs all idle) | descriptors |\n|---|---:|---:|---:|\n\
         | all idle | {rss_idle:.1} | | {fds_idle} |\n\
         | peak while producing | {peak:.1} | {:.1} | |\n\
         | after, all idle again | {rss_after:.1} | {:.1} | {fds_after} |\n\
         | the {producers} producers' connections closed | {rss_closed:.1} | {:.1} | {fds_closed} |",
        batch_bytes as f64 / 1024.0,
        answered as f64 / seconds as f64,
        (peak - rss_idle) * 1024.0 / producers as f64,
        (rss_after - rss_idle) * 1024.0 / producers as f64,
        (rss_closed - rss_idle) * 1024.0 / producers as f64,
    )
    .unwrap();
    publish_report("CONNECTIONS_REPORT", &report);
    assert!(rewritten > 0.0, "nothing rewritten\n{}", proxy.log());
    drop(idle);
}
