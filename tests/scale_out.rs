//! Scale-out and a zero-downtime restart with `[listener] reuse_port = true` in front of
//! a real Kafka 4.1.1 broker, every process run with ONE policy file, `[admin]`
//! included, as an operator restarting kpress on one host would. Two `kpress run`
//! processes serve the same bootstrap and node ports (the kernel spreads connections
//! across them, which each process's log counts); the admin port has one holder at a
//! time: the first process, while the second waits for it. An idempotent `acks=all`
//! Java producer writes gzip batches that kpress rewrites into zstd. The process
//! carrying the producer's Produce traffic gets SIGTERM midway; the producer carries on
//! through the other (which takes the admin port over if the stopped one held it).
//! Then a third process starts with the same file (the restart), waits for the admin
//! port, and the surviving one gets SIGTERM; the producer carries on through the third,
//! which takes the admin port. Throughout, `/readyz` and `/metrics` answer 200 on the
//! admin port from whichever process holds it, with no gap longer than [`ADMIN_GAP`].
//! The topic read back accounts for every record (nothing acknowledged lost, nothing
//! stored twice, no send failed) and every batch the broker stored is zstd. Under a
//! minute.

use kpress_tests::bare_requests::{api_versions, exchange, parse_api_versions};
use kpress_tests::compression::Compression;
use kpress_tests::data::Dataset;
use kpress_tests::java_client::JavaClient;
use kpress_tests::kpress::storing_rules;
use kpress_tests::kpress_fleet::{FleetMember, FleetPolicy};
use kpress_tests::ports::free_port;
use kpress_tests::steady_producer::{tally, Accounting, SteadyOptions, SteadyProducer};
use kpress_tests::{kafka_version, KafkaCluster};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How long the producer may take to be acknowledged again once the process it wrote
/// through stopped (its reconnect and retry backoff).
const RECOVERY: Duration = Duration::from_secs(90);
/// Records acknowledged before each stop, and again after it.
const STEP: u64 = 2000;
/// How long the stopped producer gets to settle what it sent.
const FINISH: Duration = Duration::from_secs(130);
/// How long reading the topic back may take.
const READ_BACK: Duration = Duration::from_secs(90);
/// Raw connections made to each shared port: all of them on one process of two would
/// happen once in 2^(n-1) runs.
const PROBES: usize = 24;
/// The longest the admin port may go without a 200 answer to `/readyz` or `/metrics`
/// while it passes from a stopped process to the one waiting for it (which tries
/// every 50 ms).
const ADMIN_GAP: Duration = Duration::from_secs(1);
/// What the admin endpoint logs once it serves its port.
const ADMIN_BOUND: &str = "admin endpoint on http://";
/// What it logs when it finds the port held and waits for it.
const ADMIN_WAITING: &str = "is in use (by the kpress this one replaces?)";

/// Shared ports, one admin port, and every `zstd.*` topic stored as zstd: the policy
/// and the admin address.
fn write_policy(dir: &Path, cluster: &KafkaCluster) -> (FleetPolicy, SocketAddr) {
    let admin = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let rules = format!("[admin]\nbind = \"{admin}\"\n{}", storing_rules(&["zstd"]));
    (FleetPolicy::write(dir, cluster, &rules).unwrap(), admin)
}

/// A process of the fleet started with `policy`, its listeners bound.
fn start(name: &str, policy: &FleetPolicy) -> FleetMember {
    FleetMember::start(name, policy).unwrap_or_else(|e| panic!("starting {name}: {e:#}"))
}

/// Waits until `kpress` logs `line`.
fn wait_for_log(kpress: &mut FleetMember, line: &str, timeout: Duration) {
    kpress
        .wait_for_log(line, timeout)
        .unwrap_or_else(|e| panic!("{e:#}"));
}

fn holds_admin(kpress: &FleetMember) -> bool {
    kpress.log().contains(ADMIN_BOUND)
}

/// SIGTERM: the process must drain and exit 0 without waiting out its grace.
fn stop(kpress: FleetMember) -> String {
    kpress
        .stop(Duration::from_secs(30))
        .unwrap_or_else(|e| panic!("{e:#}"))
}

/// Status code and body of `GET path` on the admin endpoint (HTTP/1.0: the server
/// closes after answering).
fn get(admin: SocketAddr, path: &str) -> anyhow::Result<(u16, String)> {
    let mut stream = TcpStream::connect_timeout(&admin, Duration::from_secs(1))?;
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    write!(stream, "GET {path} HTTP/1.0\r\nHost: {admin}\r\n\r\n")?;
    let mut response = String::new();
    stream.read_to_string(&mut response)?;
    let (head, body) = response
        .split_once("\r\n\r\n")
        .ok_or_else(|| anyhow::anyhow!("no HTTP response from {admin}{path}: {response:?}"))?;
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .ok_or_else(|| anyhow::anyhow!("no status in {head:?}"))?;
    Ok((status, body.to_string()))
}

/// Batches of `topic` rewritten into zstd by the process holding the admin port.
fn rewritten(admin: SocketAddr, topic: &str) -> f64 {
    let (status, text) =
        get(admin, "/metrics").unwrap_or_else(|e| panic!("scraping {admin}: {e:#}"));
    assert_eq!(status, 200, "{text}");
    text.lines()
        .filter(|l| l.starts_with("kpress_batches_rewritten_total{"))
        .filter(|l| l.contains(&format!("topic=\"{topic}\"")) && l.contains("to=\"zstd\""))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// `PROBES` connections to `addr`, each answered an ApiVersions request.
fn probe(addr: SocketAddr) {
    for n in 0..PROBES {
        let mut stream = TcpStream::connect(addr).unwrap_or_else(|e| panic!("{addr}: {e}"));
        stream
            .set_read_timeout(Some(Duration::from_secs(15)))
            .unwrap();
        let correlation_id = i32::try_from(n).unwrap();
        let answer = exchange(&mut stream, &api_versions(0, correlation_id))
            .and_then(|body| parse_api_versions(&body, 0))
            .unwrap_or_else(|e| panic!("ApiVersions through {addr}: {e:#}"));
        assert_eq!(
            (answer.correlation_id, answer.error_code),
            (correlation_id, 0)
        );
    }
}

/// Whether the process holding the admin port carries the producer's Produce traffic
/// to `topic`: its rewrite count grows. If it stays put while the producer is
/// acknowledged thousands of records, the other process carries it.
fn holder_carries(admin: SocketAddr, producer: &SteadyProducer, topic: &str) -> bool {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (rewrites, acked) = (rewritten(admin, topic), producer.progress().acked);
        std::thread::sleep(Duration::from_secs(3));
        if rewritten(admin, topic) > rewrites {
            return true;
        }
        if producer.progress().acked >= acked + STEP {
            return false;
        }
        assert!(
            Instant::now() < deadline,
            "the producer made no progress on {topic} within 30 s"
        );
    }
}

/// What one poll of the admin port got: when, and each path's status (None: no answer).
type Poll = (Instant, Option<u16>, Option<u16>);

/// Polls `/readyz` and `/metrics` on the admin port every 50 ms until stopped.
struct AdminWatch {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<Vec<Poll>>,
}

impl AdminWatch {
    fn start(admin: SocketAddr) -> AdminWatch {
        let stop = Arc::new(AtomicBool::new(false));
        let stopping = Arc::clone(&stop);
        let thread = std::thread::spawn(move || {
            let mut polls = Vec::new();
            while !stopping.load(Ordering::Relaxed) {
                let status = |path| get(admin, path).ok().map(|(status, _)| status);
                polls.push((Instant::now(), status("/readyz"), status("/metrics")));
                std::thread::sleep(Duration::from_millis(50));
            }
            polls
        });
        AdminWatch { stop, thread }
    }

    /// The longest time between two 200 answers to `/readyz`, the same for `/metrics`,
    /// how many polls there were, and those that missed.
    fn finish(self) -> (Duration, Duration, usize, Vec<String>) {
        self.stop.store(true, Ordering::Relaxed);
        let polls = self.thread.join().unwrap();
        let gap = |answer: fn(&Poll) -> Option<u16>| {
            let mut last_ok = polls.first().map(|p| p.0);
            let mut longest = Duration::ZERO;
            for poll in &polls {
                if let Some(ok) = last_ok {
                    longest = longest.max(poll.0 - ok);
                }
                if answer(poll) == Some(200) {
                    last_ok = Some(poll.0);
                }
            }
            longest
        };
        let misses = polls
            .iter()
            .filter(|p| p.1 != Some(200) || p.2 != Some(200))
            .map(|p| {
                let at = (p.0 - polls[0].0).as_secs_f64();
                format!("+{at:.3} s: /readyz {:?} /metrics {:?}", p.1, p.2)
            })
            .collect();
        (gap(|p| p.1), gap(|p| p.2), polls.len(), misses)
    }
}

#[test]
fn processes_sharing_one_policy_file_take_over_the_ports_and_the_admin_port() {
    let cluster = KafkaCluster::start(kafka_version(), 1)
        .unwrap_or_else(|e| panic!("starting a Kafka node: {e:#}"));
    let topic = "zstd.scale-out";
    JavaClient::new(kafka_version())
        .create_topic_replicated(
            &cluster.bootstrap(),
            topic,
            1,
            1,
            &["compression.type=producer"],
        )
        .unwrap_or_else(|e| panic!("creating {topic}: {e:#}\n{}", cluster.describe_logs()));
    let policy_dir = tempfile::tempdir().unwrap();
    let (policy, admin) = write_policy(policy_dir.path(), &cluster);
    let listen = policy.listen;
    let node = policy.node(cluster.node_ids()[0]).unwrap();

    // The first process takes the admin port; the second, same file, waits for it.
    let mut first = start("first", &policy);
    wait_for_log(&mut first, ADMIN_BOUND, Duration::from_secs(10));
    let mut second = start("second", &policy);
    wait_for_log(&mut second, ADMIN_WAITING, Duration::from_secs(10));
    assert!(!holds_admin(&second), "{}", second.log());
    let deadline = Instant::now() + Duration::from_secs(30);
    while !get(admin, "/readyz").is_ok_and(|(status, _)| status == 200) {
        assert!(
            Instant::now() < deadline,
            "/readyz on {admin} did not answer 200 within 30 s\n{}",
            first.log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let watch = AdminWatch::start(admin);

    // Both ports are shared: the kernel hands connections to both processes.
    for addr in [listen, node] {
        let before = [first.accepted(), second.accepted()];
        probe(addr);
        let gained = [first.accepted() - before[0], second.accepted() - before[1]];
        eprintln!("{addr}: {PROBES} connections, {gained:?} per process");
        assert!(
            gained.iter().all(|n| *n > 0) && gained.iter().sum::<usize>() >= PROBES,
            "{PROBES} connections to {addr} reached the processes {gained:?}\n{}\n{}",
            first.log(),
            second.log()
        );
    }

    let mut producer = SteadyProducer::start(
        &listen.to_string(),
        topic,
        "scale",
        &SteadyOptions::new(Compression::Gzip, 3000, &Dataset::ApacheAccessLog.path()),
    )
    .expect("starting the producer");
    producer
        .wait_acked(STEP, RECOVERY)
        .unwrap_or_else(|e| panic!("{e:#}\n{}\n{}", first.log(), second.log()));

    // Stop the process the producer writes through, so it has to move. If that is the
    // first, the second takes the admin port over; if not, the second stops while
    // still waiting for it.
    let (busy, mut survivor) = match holder_carries(admin, &producer, topic) {
        true => (first, second),
        false => (second, first),
    };
    let busy_held_admin = holds_admin(&busy);
    let at = producer.progress();
    let busy_log = stop(busy);
    eprintln!(
        "{topic}: SIGTERM to the busy process ({}) at {at}",
        if busy_held_admin {
            "it held the admin port"
        } else {
            "it waited for the admin port"
        }
    );
    if busy_held_admin {
        wait_for_log(&mut survivor, ADMIN_BOUND, Duration::from_secs(5));
    } else {
        assert!(
            busy_log.contains("admin endpoint: stopped waiting for"),
            "{busy_log}"
        );
    }
    producer
        .wait_more_acked(STEP, RECOVERY)
        .unwrap_or_else(|e| {
            panic!(
                "after one process stopped: {e:#}\n{busy_log}\n{}",
                survivor.log()
            )
        });

    // The restart: a new process with the same file joins the ports and waits for the
    // admin port, then the survivor stops and the new one takes the admin port.
    let mut restarted = start("restarted", &policy);
    wait_for_log(&mut restarted, ADMIN_WAITING, Duration::from_secs(10));
    let at = producer.progress();
    let survivor_log = stop(survivor);
    eprintln!("{topic}: SIGTERM to the surviving process at {at}");
    wait_for_log(&mut restarted, ADMIN_BOUND, Duration::from_secs(5));
    let context = || {
        format!(
            "{busy_log}\n{survivor_log}\n{}\n{}",
            restarted.log(),
            cluster.describe_logs()
        )
    };
    producer
        .wait_more_acked(STEP, RECOVERY)
        .unwrap_or_else(|e| panic!("after the restart: {e:#}\n{}", context()));
    // Only the restarted process is left to answer on the admin port.
    assert!(
        rewritten(admin, topic) > 0.0,
        "the producer was acknowledged, but not through the restarted kpress\n{}",
        context()
    );
    let (status, body) = get(admin, "/readyz").unwrap();
    assert_eq!((status, body.as_str()), (200, "ready\n"), "{}", context());
    let (readyz_gap, metrics_gap, polls, misses) = watch.finish();
    eprintln!(
        "admin port {admin}: {polls} polls, longest without a 200: /readyz {readyz_gap:?}, \
         /metrics {metrics_gap:?}; misses: {misses:?}"
    );
    assert!(
        readyz_gap <= ADMIN_GAP && metrics_gap <= ADMIN_GAP,
        "the admin port went unanswered too long: /readyz {readyz_gap:?}, /metrics \
         {metrics_gap:?} (at most {ADMIN_GAP:?}); misses: {misses:#?}\n{}",
        context()
    );

    let report = producer
        .finish(FINISH)
        .unwrap_or_else(|e| panic!("{e:#}\n{}", context()));
    let read = tally(
        &listen.to_string(),
        topic,
        "scale",
        &Dataset::ApacheAccessLog.path(),
        READ_BACK,
    )
    .unwrap_or_else(|e| panic!("{e:#}\n{}", context()));
    let accounting = Accounting::of(&report, &read);
    eprintln!("{topic}: {accounting}");
    let problems = accounting.problems();
    assert!(
        problems.is_empty(),
        "{topic}: {accounting}\n{}\n--- producer stderr ---\n{}\n{}",
        problems.join("\n"),
        report.stderr,
        context()
    );
    let dump = &cluster.dump_partition_0(&[topic]).expect("DumpLogSegments")[0];
    let not_zstd: Vec<String> = dump
        .batches
        .iter()
        .filter(|b| !b.is_control && b.compresscodec != Compression::Zstd.dump_name())
        .map(|b| format!("{}@{}", b.compresscodec, b.base_offset))
        .collect();
    assert!(
        !dump.batches.is_empty() && not_zstd.is_empty() && dump.problems.is_empty(),
        "{topic}: batches not rewritten into zstd: {not_zstd:?}; {:?}",
        dump.problems
    );
}
