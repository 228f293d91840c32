//! Attacks sent to `kpress run` (the real binary) in front of one real Kafka
//! 4.1.1 broker, each while a well-behaved producer writes through the same kpress.
//!
//! Every test asserts what kpress counted (a pass-through reason, a refused frame or
//! connection, a lookup, a locally answered request, the in-flight gauge back to 0),
//! that the well-behaved producer kept being acknowledged while the attack was under
//! way (a liveness bound, not a benchmark), and that kpress still runs and serves
//! afterwards. It also prints the CPU seconds the attack cost kpress (user + system,
//! from `/proc`), with a loose ceiling where an unguarded kpress would spend seconds.
//!
//! Attacks: 40k unknown Produce v13 topic ids in one request, and a burst of them;
//! snappy blocks declaring 64 MiB in 5 bytes (valid CRC); zstd batches inflating to
//! 60 MiB in 300 partitions, and 300 such batches in one partition; connections that
//! announce 100 MiB and send (almost) nothing, that never read their responses, or
//! that exceed `max_connections`; 5000 invented topic names against the metrics'
//! labels; ApiVersions v5 and v127; clients leaving mid-frame. (Old clients, Produce
//! v3-v6, are `old_clients.rs`'s.)
//!
//! One test at a time, each with its own kpress (limits differ), so CPU figures and
//! latencies are the attack's own.

use kpress_batch::builder::{seal, BatchBuilder, Record};
use kpress_batch::CRC_START;
use kpress_codec::Codec;
use kpress_tests::bare_requests::{
    api_versions, exchange, fetch_v4, invented_topic_ids, parse_api_versions, parse_produce_v7,
    produce_v13, produce_v7, read_frame, Partitions,
};
use kpress_tests::codec_bombs::snappy_block_declaring;
use kpress_tests::data::Dataset;
use kpress_tests::java_client::JavaClient;
use kpress_tests::kpress::{storing_rules, KpressProxy};
use kpress_tests::liveness_producer::LivenessProducer;
use kpress_tests::ports::wait_for_port;
use kpress_tests::proc_stat::{cpu_seconds, proc_stat};
use kpress_tests::proc_status::{memory, pid_with_argument, readme_peak_memory_bound};
use kpress_tests::{kafka_version, KafkaCluster};
use std::collections::BTreeSet;
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};
use std::time::{Duration, Instant};

/// `zstd.*` topics are rewritten into zstd and `gzip.*` into gzip, larger or not, so
/// every well-formed batch is rewritten and any pass-through has an attack's reason.
fn rules() -> String {
    storing_rules(&["zstd", "gzip"])
}

/// The well-behaved producer's topic. Attacks name topics nobody created, so the
/// broker answers them at once and kpress alone does the work.
const GOOD_TOPIC: &str = "zstd.well-behaved";

/// A topic holding ~3.4 MB, stored as sent (no rule names it), so a tiny Fetch
/// gets a large answer.
const LARGE_TOPIC: &str = "plain.large-answers";

/// How long the well-behaved producer may wait for acknowledgements while an attack
/// runs. Normally it waits milliseconds; a stalled pipeline waits as long as the
/// attacker likes (10 s with three slow connections, when reads were not bounded).
const LIVENESS: Duration = Duration::from_secs(20);

/// Acknowledgements the well-behaved producer must get while an attack is under way.
const ACKS_DURING_ATTACK: usize = 3;

/// How long a Produce answer or a counter may take to arrive.
const ANSWER: Duration = Duration::from_secs(120);

/// The broker all tests share, with [`GOOD_TOPIC`] and [`LARGE_TOPIC`] created.
fn cluster() -> &'static KafkaCluster {
    static CLUSTER: OnceLock<KafkaCluster> = OnceLock::new();
    CLUSTER.get_or_init(|| {
        let cluster = KafkaCluster::start(kafka_version(), 1).expect("starting Kafka");
        JavaClient::new(kafka_version())
            .create_producer_codec_topics(&cluster.bootstrap(), &[GOOD_TOPIC, LARGE_TOPIC], 1)
            .unwrap_or_else(|e| panic!("creating the topics: {e:#}"));
        cluster
    })
}

/// One test at a time: each attack's CPU and latency figures are its own.
fn one_at_a_time() -> MutexGuard<'static, ()> {
    static TURN: Mutex<()> = Mutex::new(());
    TURN.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A gzip batch of 20 apache log lines: what the well-behaved producer sends.
fn good_batch() -> Vec<u8> {
    let records: Vec<Record> = Dataset::ApacheAccessLog
        .records()
        .into_iter()
        .take(20)
        .map(Record::value)
        .collect();
    BatchBuilder::codec(Codec::Gzip)
        .build(&records)
        .expect("a gzip batch")
}

/// A batch of one record whose records field is `payload`, labelled `codec`, with a
/// valid length and CRC: only a decoder can tell that the payload lies.
fn batch_claiming(codec: Codec, payload: &[u8]) -> Vec<u8> {
    let mut batch = BatchBuilder::codec(Codec::None)
        .build_raw(payload, 1, 0)
        .expect("an uncompressed batch");
    // The codec is attribute bits 0-2, in the low byte of the big-endian attributes.
    batch[CRC_START + 1] = (batch[CRC_START + 1] & !0x07) | codec.id() as u8;
    seal(&mut batch);
    batch
}

/// An uncompressed batch of `records` apache log lines (about 240 bytes each).
fn apache_batch(records: usize) -> Vec<u8> {
    let lines = Dataset::ApacheAccessLog.records();
    let records: Vec<Record> = lines
        .iter()
        .cycle()
        .take(records)
        .map(|l| Record::value(l.clone()))
        .collect();
    BatchBuilder::codec(Codec::None)
        .build(&records)
        .expect("an uncompressed batch")
}

/// A zstd batch of one "record" that inflates to 60 MiB of zeros.
fn zstd_batch_of_60_mib() -> Vec<u8> {
    BatchBuilder::codec(Codec::Zstd)
        .build_raw(&vec![0u8; 60 << 20], 1, 0)
        .expect("a zstd batch")
}

/// A kpress in front of the shared broker with a well-behaved producer writing
/// through it; what every attack runs against.
struct Scene {
    proxy: KpressProxy,
    pid: u32,
    node: SocketAddr,
    producer: Option<LivenessProducer>,
    _turn: MutexGuard<'static, ()>,
}

impl Scene {
    /// kpress with [`rules`] and `limits` (a `[limits]` section or nothing), and the
    /// well-behaved producer acknowledged at least once through it.
    fn start(limits: &str) -> Scene {
        Scene::start_with(&rules(), limits)
    }

    /// [`start`](Self::start) with other `rules`.
    fn start_with(rules: &str, limits: &str) -> Scene {
        let turn = one_at_a_time();
        let cluster = cluster();
        let proxy = KpressProxy::start_in_front_of(cluster, &format!("{rules}\n{limits}"))
            .unwrap_or_else(|e| panic!("starting kpress: {e:#}"));
        let config = proxy
            .log_file()
            .parent()
            .expect("the proxy's dir")
            .join("kpress.toml");
        let pid = pid_with_argument(&config).unwrap_or_else(|e| panic!("kpress's pid: {e:#}"));
        let node_id = cluster.node_ids()[0];
        let node_port = proxy.node_port_base().expect("node ports") + node_id as u16;
        let node = SocketAddr::from(([127, 0, 0, 1], node_port));
        // The bootstrap listener accepts before the node listeners are bound (clients
        // learn node ports from Metadata, which waits for them); this producer does not
        // ask Metadata, so it waits for the port.
        assert!(
            wait_for_port(node, ANSWER),
            "kpress does not serve node {node_id} on {node}\n{}",
            proxy.log()
        );
        let started = Instant::now();
        let producer =
            LivenessProducer::start(node, GOOD_TOPIC, good_batch(), Duration::from_millis(100));
        producer
            .wait_acked_since(started, 1, ANSWER)
            .unwrap_or_else(|e| panic!("before any attack: {e:#}\n{}", proxy.log()));
        Scene {
            proxy,
            pid,
            node,
            producer: Some(producer),
            _turn: turn,
        }
    }

    fn producer(&self) -> &LivenessProducer {
        self.producer.as_ref().expect("the producer runs")
    }

    fn cpu(&self) -> f64 {
        cpu_seconds(self.pid).unwrap_or_else(|e| panic!("kpress's CPU time: {e:#}"))
    }

    /// A counter's (or gauge's) value: the sum of its samples carrying `labels`.
    fn counter(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.proxy
            .counter(name, labels)
            .unwrap_or_else(|e| panic!("scraping kpress: {e:#}\n{}", self.proxy.log()))
    }

    fn passed(&self, reason: &str) -> f64 {
        self.counter("kpress_batches_passed_total", &[("reason", reason)])
    }

    fn refused_frames(&self, reason: &str) -> f64 {
        self.counter("kpress_frames_refused_total", &[("reason", reason)])
    }

    /// Polls `name` until `accept` says yes, for at most `timeout`; the last value.
    fn wait_for(
        &self,
        name: &str,
        labels: &[(&str, &str)],
        timeout: Duration,
        accept: impl Fn(f64) -> bool,
    ) -> f64 {
        let deadline = Instant::now() + timeout;
        loop {
            let value = self.counter(name, labels);
            if accept(value) || Instant::now() > deadline {
                return value;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The well-behaved producer is acknowledged [`ACKS_DURING_ATTACK`] times after
    /// `since` within [`LIVENESS`]; call it while the attack is under way.
    fn assert_producer_alive_since(&self, since: Instant, attack: &str) {
        if let Err(err) = self
            .producer()
            .wait_acked_since(since, ACKS_DURING_ATTACK, LIVENESS)
        {
            panic!("{attack}: {err:#}\n{}", self.proxy.log());
        }
    }

    /// Stops the producer and checks that kpress outlived the attack: still running,
    /// serving a fresh connection, every in-flight byte released, the producer never
    /// failed nor waited [`LIVENESS`]. Prints the figures for the report.
    fn finish(mut self, attack: &str, cpu: f64) {
        let report = self.producer.take().expect("the producer runs").stop();
        eprintln!("hostile: {attack}: kpress CPU {cpu:.2} s; well-behaved producer {report}");
        let state = proc_stat(self.pid).unwrap_or_else(|e| panic!("kpress's state: {e:#}"));
        assert!(
            state.is_running(),
            "{attack}: kpress is no longer running ({state:?})\n{}",
            self.proxy.log()
        );
        let mut fresh = connect(self.proxy.listen());
        let answer = exchange(&mut fresh, &api_versions(3, 1))
            .and_then(|body| parse_api_versions(&body, 3))
            .unwrap_or_else(|e| {
                panic!("{attack}: a fresh connection: {e:#}\n{}", self.proxy.log())
            });
        assert_eq!(answer.error_code, 0, "{attack}: ApiVersions v3 afterwards");
        drop(fresh);
        // Its rules name zstd level 3 (3.5 MiB of state) and gzip level 6 (0.4 MiB).
        let bound = readme_peak_memory_bound(3.9);
        let peak = memory(self.pid)
            .unwrap_or_else(|e| panic!("kpress's memory: {e:#}"))
            .peak_rss;
        eprintln!(
            "hostile: {attack}: kpress peak RSS {:.1} MiB (README bound {:.1} MiB)",
            peak as f64 / (1u64 << 20) as f64,
            bound as f64 / (1u64 << 20) as f64
        );
        assert!(
            peak <= bound,
            "{attack}: kpress's peak RSS {peak} bytes is over the README's bound {bound}"
        );
        let inflight = self.wait_for("kpress_inflight_bytes", &[], ANSWER, |v| v == 0.0);
        assert_eq!(
            inflight,
            0.0,
            "{attack}: kpress holds in-flight bytes with every client gone\n{}",
            self.proxy.log()
        );
        assert!(
            report.failures.is_empty(),
            "{attack}: the well-behaved producer failed: {report}\n{}",
            self.proxy.log()
        );
        assert!(
            report.max_latency() < LIVENESS,
            "{attack}: the well-behaved producer waited {:?} for an answer\n{}",
            report.max_latency(),
            self.proxy.log()
        );
    }
}

fn connect(addr: SocketAddr) -> TcpStream {
    let stream = TcpStream::connect_timeout(&addr, Duration::from_secs(5))
        .unwrap_or_else(|e| panic!("connecting to {addr}: {e}"));
    stream.set_read_timeout(Some(ANSWER)).expect("read timeout");
    stream
        .set_write_timeout(Some(ANSWER))
        .expect("write timeout");
    stream
}

/// Sends `frames` pipelined on one connection to `addr` (from a second thread, so the
/// answers are read while requests are still being written) and returns the answers'
/// bodies in order.
fn pipeline(addr: SocketAddr, frames: Vec<Vec<u8>>) -> anyhow::Result<Vec<Vec<u8>>> {
    let mut stream = connect(addr);
    let mut writer = stream.try_clone()?;
    let n = frames.len();
    let sending = std::thread::spawn(move || -> std::io::Result<()> {
        for frame in &frames {
            writer.write_all(frame)?;
        }
        Ok(())
    });
    let answers = (0..n).map(|_| read_frame(&mut stream)).collect();
    sending.join().expect("the writer thread")?;
    answers
}

/// Sends each of `frames` on a connection of its own, all at once (one request per
/// connection, as a broker reads only one at a time per connection: piling more
/// onto one would test the broker's socket buffers, not kpress); the answers' bodies,
/// in order, once all have come.
fn burst(
    addr: SocketAddr,
    frames: Vec<Vec<u8>>,
) -> std::thread::JoinHandle<anyhow::Result<Vec<Vec<u8>>>> {
    std::thread::spawn(move || {
        let senders: Vec<_> = frames
            .into_iter()
            .map(|frame| std::thread::spawn(move || pipeline(addr, vec![frame])))
            .collect();
        let mut answers = Vec::new();
        for sender in senders {
            answers.extend(sender.join().expect("a sender thread")?);
        }
        Ok(answers)
    })
}

/// The correlation id an answer body starts with.
fn correlation_id(body: &[u8]) -> i32 {
    i32::from_be_bytes(body[..4].try_into().expect("4 bytes"))
}

/// A Produce v13 naming 40k random topic ids (~3.7 MB), then a
/// burst of 24 more with the same ids, each on a connection of its own. Every id is
/// counted unknown, the brokers are asked about them once (the ids of one request,
/// capped at 100, on a shared side connection; repeats wait 30 s), and the
/// well-behaved producer on another connection is acknowledged throughout. (Its
/// answers may take seconds here: the broker itself, sent the same burst directly,
/// keeps a producer of its own waiting up to ~9 s on 2 cores.)
#[test]
fn forty_thousand_unknown_topic_ids_are_looked_up_once_and_stall_nobody() {
    const IDS: usize = 40_000;
    const BURST: usize = 24;
    let scene = Scene::start("");
    let batch = BatchBuilder::codec(Codec::None)
        .build(&[Record::value("x")])
        .expect("a one-record batch");
    let ids = invented_topic_ids("hostile/unknown-ids", IDS);
    let request = |correlation_id: i32| {
        let topics: Vec<([u8; 16], Partitions<'_>)> =
            ids.iter().map(|id| (*id, vec![(0, &batch[..])])).collect();
        produce_v13(correlation_id, -1, 30_000, &topics)
    };
    let unknown_before = scene.counter("kpress_unknown_topic_ids_total", &[]);
    let lookups_before = scene.counter("kpress_topic_id_lookups_total", &[]);

    let single = request(1);
    let cpu_before = scene.cpu();
    let started = Instant::now();
    let answers = pipeline(scene.proxy.listen(), vec![single.clone()])
        .unwrap_or_else(|e| panic!("the 40k-id Produce: {e:#}\n{}", scene.proxy.log()));
    let single_wall = started.elapsed();
    let single_cpu = scene.cpu() - cpu_before;
    assert_eq!(correlation_id(&answers[0]), 1);

    let frames: Vec<Vec<u8>> = (0..BURST).map(|i| request(i as i32 + 10)).collect();
    let burst_cpu_before = scene.cpu();
    let burst_started = Instant::now();
    let sender = burst(scene.proxy.listen(), frames);
    let alive = scene
        .producer()
        .wait_acked_since(burst_started, ACKS_DURING_ATTACK, LIVENESS);
    let burst_answers = sender.join().expect("the burst thread");
    let burst_wall = burst_started.elapsed();
    let burst_cpu = scene.cpu() - burst_cpu_before;
    let requests = 1 + BURST;
    let unknown = scene.counter("kpress_unknown_topic_ids_total", &[]) - unknown_before;
    let lookups = scene.counter("kpress_topic_id_lookups_total", &[]) - lookups_before;
    eprintln!(
        "hostile: unknown ids: one {} B request: {single_wall:?}, CPU {single_cpu:.2} s; \
         burst of {BURST} at once: {burst_wall:?}, CPU {burst_cpu:.2} s; \
         {unknown} ids counted unknown, {lookups} lookups",
        single.len(),
    );
    let report = scene.producer().report();
    eprintln!("hostile: unknown ids: well-behaved producer so far {report}");

    if let Err(err) = alive {
        panic!(
            "during the burst of 40k-id Produce requests: {err:#}\n{}",
            scene.proxy.log()
        );
    }
    let burst_answers = burst_answers
        .unwrap_or_else(|e| panic!("a burst connection: {e:#}\n{}", scene.proxy.log()));
    assert_eq!(burst_answers.len(), BURST);
    assert_eq!(
        unknown,
        (requests * IDS) as f64,
        "every id of every request counted unknown\n{}",
        scene.proxy.log()
    );
    assert!(
        (1.0..=(requests / 4) as f64).contains(&lookups),
        "{lookups} topic id lookups for {requests} requests naming the same ids\n{}",
        scene.proxy.log()
    );
    // Linear work per id costs a debug kpress 3.5-6.2 s for these 25 requests on a
    // busy 2-core machine; a quadratic dedupe of the ids would add 0.4 s to each, 10 s
    // in all. The dedupe's bound itself is a unit test of kpress-protocol.
    assert!(
        single_cpu + burst_cpu < 10.0,
        "{requests} requests of {IDS} unknown ids cost kpress {:.2} s of CPU",
        single_cpu + burst_cpu
    );
    scene.finish("unknown topic ids", single_cpu + burst_cpu);
}

/// Sends `request` on a connection of its own while checking that the well-behaved
/// producer is acknowledged meanwhile; returns the answer body, its wall time and the
/// CPU seconds kpress spent. The figures are printed before anything is asserted.
fn attack_with_one_request(
    scene: &Scene,
    attack: &str,
    request: Vec<u8>,
) -> (Vec<u8>, Duration, f64) {
    let cpu_before = scene.cpu();
    let started = Instant::now();
    let addr = scene.proxy.listen();
    let sender = std::thread::spawn(move || {
        let answers = pipeline(addr, vec![request]);
        (answers, started.elapsed())
    });
    let alive = scene
        .producer()
        .wait_acked_since(started, ACKS_DURING_ATTACK, LIVENESS);
    let (answers, wall) = sender.join().expect("the sender thread");
    let cpu = scene.cpu() - cpu_before;
    eprintln!(
        "hostile: {attack}: {} after {wall:?}, kpress CPU {cpu:.2} s; well-behaved producer {}",
        if answers.is_ok() {
            "answered"
        } else {
            "failed"
        },
        scene.producer().report()
    );
    if let Err(err) = alive {
        panic!("{attack}: {err:#}\n{}", scene.proxy.log());
    }
    let answer = answers
        .unwrap_or_else(|e| panic!("{attack}: {e:#}\n{}", scene.proxy.log()))
        .remove(0);
    (answer, wall, cpu)
}

/// `partitions` partitions of `topic` holding `batch` each, in one Produce v7.
fn produce_to_partitions(topic: &str, partitions: i32, batch: &[u8]) -> Vec<u8> {
    let parts: Partitions<'_> = (0..partitions).map(|p| (p, batch)).collect();
    produce_v7(1, -1, 30_000, &[(topic.as_bytes(), parts)])
}

/// One ~150 KB Produce of 2000 partitions, each a batch with a valid CRC whose snappy
/// payload is a 5-byte raw block declaring 64 MiB (zero-filling them all would cost
/// 64 s of CPU). At the default limits the ratio cap (1000 × 5 bytes) refuses each
/// before any room is made: `decompress_ratio`.
#[test]
fn snappy_blocks_declaring_64_mib_in_5_bytes_stop_at_the_ratio_cap() {
    const PARTITIONS: i32 = 2000;
    let scene = Scene::start("");
    let batch = batch_claiming(Codec::Snappy, &snappy_block_declaring(64 << 20, 5));
    let request = produce_to_partitions("zstd.bombs.snappy", PARTITIONS, &batch);
    eprintln!(
        "hostile: snappy 5-byte bombs: request of {} B",
        request.len()
    );
    let ratio_before = scene.passed("decompress_ratio");
    let rewritten_before = scene.counter("kpress_batches_rewritten_total", &[("from", "snappy")]);
    let (answer, _, cpu) = attack_with_one_request(&scene, "snappy 5-byte bombs", request);
    let (_, answers) = parse_produce_v7(&answer).expect("a Produce v7 answer");
    assert_eq!(
        answers.len(),
        PARTITIONS as usize,
        "every partition answered"
    );
    let refused = scene.passed("decompress_ratio") - ratio_before;
    let rewritten =
        scene.counter("kpress_batches_rewritten_total", &[("from", "snappy")]) - rewritten_before;
    assert_eq!(refused, f64::from(PARTITIONS), "{}", scene.proxy.log());
    assert_eq!(rewritten, 0.0);
    assert!(cpu < 5.0, "2000 snappy bombs cost kpress {cpu:.2} s of CPU");
    scene.finish("snappy 5-byte bombs", cpu);
}

/// Limits that let a batch declare up to 32 MiB whatever its size: the ratio cap at
/// its maximum, so only the codec's own bound and the byte limits stand.
const RELAXED_RATIO: &str = "[limits]\nmax_decompression_ratio = 1000000\n\
                             max_decompressed_bytes = 33554432\n";

/// Snappy bombs past the ratio cap: 2000 snappy blocks of 100 bytes each declaring 32 MiB
/// (within `max_decompressed_bytes` and the ratio cap) are refused by snappy's own
/// bound (100 bytes decode to at most 2133) before any room is zeroed:
/// `decompress_failed`, at a small CPU cost.
#[test]
fn snappy_blocks_declaring_more_than_their_bytes_can_hold_fail_cheaply() {
    const PARTITIONS: i32 = 2000;
    let scene = Scene::start(RELAXED_RATIO);
    let batch = batch_claiming(Codec::Snappy, &snappy_block_declaring(32 << 20, 100));
    let request = produce_to_partitions("zstd.bombs.snappy-100", PARTITIONS, &batch);
    let failed_before = scene.passed("decompress_failed");
    let (_, _, cpu) = attack_with_one_request(&scene, "snappy 100-byte bombs", request);
    let failed = scene.passed("decompress_failed") - failed_before;
    assert_eq!(failed, f64::from(PARTITIONS), "{}", scene.proxy.log());
    assert!(cpu < 5.0, "2000 snappy bombs cost kpress {cpu:.2} s of CPU");
    scene.finish("snappy 100-byte bombs past the ratio cap", cpu);
}

/// One ~1 MB Produce of 300 partitions, each a zstd batch
/// inflating to 60 MiB (valid CRC), into a gzip-policy topic (8.7 s of CPU if decoded). At the
/// default limits each is refused by the ratio cap (1000 × its ~3 KB) until the
/// request's decompression budget (256 MiB) is spent, then by the budget; none is
/// rewritten.
#[test]
fn zstd_bombs_in_300_partitions_stop_at_the_ratio_cap_and_the_request_budget() {
    const PARTITIONS: i32 = 300;
    let scene = Scene::start("");
    let batch = zstd_batch_of_60_mib();
    let request = produce_to_partitions("gzip.bombs.zstd", PARTITIONS, &batch);
    eprintln!(
        "hostile: zstd 60 MiB bombs: batch of {} B, request of {} B",
        batch.len(),
        request.len()
    );
    let reasons = [
        "decompress_ratio",
        "request_decompress_budget",
        "decompress_limit",
    ];
    let before: Vec<f64> = reasons.iter().map(|r| scene.passed(r)).collect();
    let (_, _, cpu) = attack_with_one_request(&scene, "zstd bombs in 300 partitions", request);
    let counted: Vec<f64> = reasons
        .iter()
        .zip(&before)
        .map(|(r, b)| scene.passed(r) - b)
        .collect();
    eprintln!("hostile: zstd bombs in 300 partitions: {reasons:?} = {counted:?}");
    assert_eq!(
        counted.iter().sum::<f64>(),
        f64::from(PARTITIONS),
        "{reasons:?} = {counted:?}\n{}",
        scene.proxy.log()
    );
    assert!(counted[0] >= 1.0, "the ratio cap refused none: {counted:?}");
    // Each ratio refusal spends its bound (1000 × the batch) of the request's budget.
    if batch.len() * 1000 * PARTITIONS as usize > 256 << 20 {
        assert!(
            counted[1] >= 1.0,
            "the request budget refused none: {counted:?}"
        );
    }
    assert_eq!(
        scene.counter("kpress_batches_rewritten_total", &[("to", "gzip")]),
        0.0
    );
    assert!(cpu < 3.0, "300 zstd bombs cost kpress {cpu:.2} s of CPU");
    scene.finish("zstd bombs in 300 partitions", cpu);
}

/// zstd bombs past the ratio cap: the same 300 zstd bombs with the ratio cap at its
/// maximum and 32 MiB per batch: each is refused by `max_decompressed_bytes`
/// (`decompress_limit`), each refusal spending 32 MiB of the request's 256 MiB budget,
/// so from the ninth on by the budget (`request_decompress_budget`).
#[test]
fn zstd_bombs_past_the_ratio_cap_stop_at_the_batch_limit_and_the_request_budget() {
    const PARTITIONS: i32 = 300;
    let scene = Scene::start(RELAXED_RATIO);
    let batch = zstd_batch_of_60_mib();
    let request = produce_to_partitions("gzip.bombs.zstd-relaxed", PARTITIONS, &batch);
    let limit_before = scene.passed("decompress_limit");
    let budget_before = scene.passed("request_decompress_budget");
    let (_, _, cpu) = attack_with_one_request(&scene, "zstd bombs past the ratio cap", request);
    let limit = scene.passed("decompress_limit") - limit_before;
    let budget = scene.passed("request_decompress_budget") - budget_before;
    eprintln!("hostile: zstd bombs past the ratio cap: decompress_limit {limit}, request_decompress_budget {budget}");
    assert_eq!(
        limit + budget,
        f64::from(PARTITIONS),
        "{}",
        scene.proxy.log()
    );
    assert!(
        limit >= 1.0 && budget >= 1.0,
        "limit {limit}, budget {budget}"
    );
    assert!(cpu < 3.0, "300 zstd bombs cost kpress {cpu:.2} s of CPU");
    scene.finish("zstd bombs past the ratio cap", cpu);
}

/// The same 300 zstd bombs in ONE partition (8.5 s of CPU if decoded).
/// Produce v3+ allows one batch per partition, so the partition goes on whole, none of
/// it decoded: one `multiple_batches`, and no other reason counted.
#[test]
fn three_hundred_batches_in_one_partition_pass_whole_undecoded() {
    let scene = Scene::start("");
    let batch = zstd_batch_of_60_mib();
    let records = batch.repeat(300);
    let request = produce_v7(
        1,
        -1,
        30_000,
        &[(&b"gzip.bombs.one-partition"[..], vec![(0, &records[..])])],
    );
    let reasons = [
        "multiple_batches",
        "decompress_ratio",
        "request_decompress_budget",
        "decompress_limit",
    ];
    let before: Vec<f64> = reasons.iter().map(|r| scene.passed(r)).collect();
    let (_, _, cpu) = attack_with_one_request(&scene, "300 zstd bombs in one partition", request);
    let counted: Vec<f64> = reasons
        .iter()
        .zip(&before)
        .map(|(r, b)| scene.passed(r) - b)
        .collect();
    assert_eq!(
        counted,
        [1.0, 0.0, 0.0, 0.0],
        "{reasons:?}\n{}",
        scene.proxy.log()
    );
    assert!(
        cpu < 3.0,
        "300 zstd bombs in one partition cost {cpu:.2} s of CPU"
    );
    scene.finish("300 zstd bombs in one partition", cpu);
}

/// Connects to `addr` and announces a frame of `announced` bytes, then sends `first`
/// bytes of it.
fn announce_frame(addr: SocketAddr, announced: i32, first: usize) -> TcpStream {
    let mut stream = connect(addr);
    stream
        .write_all(&announced.to_be_bytes())
        .expect("announcing a frame");
    // A Produce header, then filler: what a slow client's large request begins with.
    let mut start = produce_v7(1, -1, 30_000, &[(&b"zstd.slow"[..], vec![])])[4..].to_vec();
    start.resize(first, 0);
    stream.write_all(&start).expect("sending the frame's start");
    stream
}

/// Writes a byte every `every` until `stop`, the connection fails, or `give_up` has
/// passed; returns how long the connection lasted.
fn trickle(
    mut stream: TcpStream,
    every: Duration,
    give_up: Duration,
    stop: Arc<AtomicBool>,
) -> Duration {
    let started = Instant::now();
    while !stop.load(Ordering::Relaxed) && started.elapsed() < give_up {
        if stream.write_all(&[0]).is_err() {
            break;
        }
        std::thread::sleep(every);
    }
    started.elapsed()
}

/// Whether the peer closed `stream` (end of stream or reset) within `within`.
fn closed_by_peer(stream: &mut TcpStream, within: Duration) -> bool {
    stream.set_read_timeout(Some(within)).expect("read timeout");
    let mut byte = [0u8; 1];
    match stream.read(&mut byte) {
        Ok(0) => true,
        Ok(_) => false,
        Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => false,
        Err(_) => true,
    }
}

/// Three connections announce 100 MiB frames: one sends nothing
/// more, one 1 MiB, one trickles a byte every 100 ms. kpress holds only what arrived
/// (not 300 MiB of a 128 MiB request pool), and the well-behaved producer is
/// acknowledged while all three stay open (not stalled for as long as they do).
#[test]
fn frames_announced_but_not_sent_hold_no_budget_and_stall_nobody() {
    let scene = Scene::start("");
    let announced = 100 << 20;
    let addr = scene.node;
    let started = Instant::now();
    let silent = announce_frame(addr, announced, 0);
    let partial = announce_frame(addr, announced, 1 << 20);
    let stop = Arc::new(AtomicBool::new(false));
    let trickling = std::thread::spawn({
        let stream = announce_frame(addr, announced, 100);
        let stop = Arc::clone(&stop);
        move || trickle(stream, Duration::from_millis(100), 2 * LIVENESS, stop)
    });
    let cpu_before = scene.cpu();
    std::thread::sleep(Duration::from_millis(500));
    let held = scene.counter("kpress_inflight_bytes", &[]);
    let alive = scene
        .producer()
        .wait_acked_since(started, ACKS_DURING_ATTACK, LIVENESS);
    let held_later = scene.counter("kpress_inflight_bytes", &[]);
    eprintln!(
        "hostile: 3 × 100 MiB announced, ~1 MiB sent: kpress holds {held} then {held_later} \
         in-flight bytes; well-behaved producer {}",
        scene.producer().report()
    );
    if let Err(err) = alive {
        panic!(
            "three connections announcing 100 MiB: {err:#}\n{}",
            scene.proxy.log()
        );
    }
    // What arrived (1 MiB and change) plus a 64 KiB chunk per frame and the producer's
    // requests; never the announced sizes.
    for bytes in [held, held_later] {
        assert!(
            bytes < (4 << 20) as f64,
            "kpress holds {bytes} in-flight bytes for three frames that sent ~1 MiB\n{}",
            scene.proxy.log()
        );
    }
    stop.store(true, Ordering::Relaxed);
    trickling.join().expect("the trickling thread");
    drop((silent, partial));
    let cpu = scene.cpu() - cpu_before;
    scene.finish("three connections announcing 100 MiB frames", cpu);
}

/// Read and write deadlines, with `frame_timeout_ms = 2000`: three connections
/// that announce 100 MiB and trickle a byte every 300 ms are closed about 2 s in
/// (`read_timeout`), and a client that sends Fetch requests for ~3.4 MB but never reads
/// an answer is closed once a write has waited 2 s (`write_timeout`).
#[test]
fn slow_frames_and_unread_responses_time_out() {
    let scene = Scene::start("[limits]\nframe_timeout_ms = 2000\n");
    let read_before = scene.refused_frames("read_timeout");
    let write_before = scene.refused_frames("write_timeout");
    let cpu_before = scene.cpu();
    let started = Instant::now();
    let stop = Arc::new(AtomicBool::new(false));
    let tricklers: Vec<_> = (0..3)
        .map(|_| {
            let stream = announce_frame(scene.node, 100 << 20, 100);
            let stop = Arc::clone(&stop);
            std::thread::spawn(move || {
                trickle(
                    stream,
                    Duration::from_millis(300),
                    Duration::from_secs(30),
                    stop,
                )
            })
        })
        .collect();
    scene.assert_producer_alive_since(started, "three trickling connections");
    let read_timeouts = scene.wait_for(
        "kpress_frames_refused_total",
        &[("reason", "read_timeout")],
        ANSWER,
        |v| v - read_before >= 3.0,
    ) - read_before;
    // Each trickler notices its connection gone at its next writes.
    let lasted: Vec<Duration> = tricklers
        .into_iter()
        .map(|t| t.join().expect("a trickling thread"))
        .collect();
    eprintln!(
        "hostile: trickling connections closed after {lasted:?}; read_timeout {read_timeouts}"
    );
    assert_eq!(read_timeouts, 3.0, "{}", scene.proxy.log());
    for lasted in &lasted {
        assert!(
            *lasted < Duration::from_secs(20),
            "a trickling connection lasted {lasted:?} with frame_timeout_ms = 2000"
        );
    }

    // A client that never reads: eight tiny Fetch requests, each answered with the
    // ~3.4 MB stored in LARGE_TOPIC (four batches under the broker's 1 MB limit), far
    // more than the socket buffers hold.
    let batch = apache_batch(3500);
    let mut broker = connect(cluster().node_addresses()[0]);
    for correlation_id in 0..4 {
        let request = produce_v7(
            correlation_id,
            -1,
            30_000,
            &[(LARGE_TOPIC.as_bytes(), vec![(0, &batch[..])])],
        );
        let stored = exchange(&mut broker, &request)
            .and_then(|body| parse_produce_v7(&body))
            .unwrap_or_else(|e| panic!("storing a batch in {LARGE_TOPIC}: {e:#}"));
        assert_eq!(
            stored.1[0].error_code, 0,
            "storing a batch in {LARGE_TOPIC}"
        );
    }
    drop(broker);
    let mut deaf = connect(scene.node);
    let fetches: Vec<u8> = (0..8)
        .flat_map(|i| fetch_v4(i, LARGE_TOPIC, 0, 0, 8 << 20))
        .collect();
    let deaf_started = Instant::now();
    deaf.write_all(&fetches)
        .expect("sending the Fetch requests");
    let write_timeouts = scene.wait_for(
        "kpress_frames_refused_total",
        &[("reason", "write_timeout")],
        ANSWER,
        |v| v - write_before >= 1.0,
    ) - write_before;
    let closed_after = deaf_started.elapsed();
    scene.assert_producer_alive_since(deaf_started, "a client that never reads its answers");
    drop(deaf);
    let cpu = scene.cpu() - cpu_before;
    eprintln!(
        "hostile: a client that never reads: write_timeout {write_timeouts} after {closed_after:?}"
    );
    assert!(write_timeouts >= 1.0, "{}", scene.proxy.log());
    scene.finish("slow frames and unread responses", cpu);
}

/// The connection cap, with `max_connections = 20`: with the
/// well-behaved producer connected, 30 more connections get 19 served and 11 closed
/// at once (`kpress_connections_refused_total{reason="max_connections"}`); the
/// producer goes on meanwhile, and once the 19 leave new connections are served again.
#[test]
fn connections_past_max_connections_are_refused_and_counted() {
    const CAP: usize = 20;
    const EXTRA: usize = 30;
    let scene = Scene::start(&format!("[limits]\nmax_connections = {CAP}\n"));
    let refused_label = [("reason", "max_connections")];
    let refused_before = scene.counter("kpress_connections_refused_total", &refused_label);
    let cpu_before = scene.cpu();
    let started = Instant::now();
    let mut extra: Vec<TcpStream> = (0..EXTRA).map(|_| connect(scene.proxy.listen())).collect();
    let refused = scene.wait_for(
        "kpress_connections_refused_total",
        &refused_label,
        ANSWER,
        |v| v - refused_before >= (EXTRA + 1 - CAP) as f64,
    ) - refused_before;
    let closed = extra
        .iter_mut()
        .filter_map(|s| closed_by_peer(s, Duration::from_millis(500)).then_some(()))
        .count();
    scene.assert_producer_alive_since(started, "kpress at max_connections");
    eprintln!(
        "hostile: {EXTRA} connections over a cap of {CAP}: {refused} refused, {closed} seen closed"
    );
    assert_eq!(refused, (EXTRA + 1 - CAP) as f64, "{}", scene.proxy.log());
    assert_eq!(closed, EXTRA + 1 - CAP);
    drop(extra);
    let open = scene.wait_for("kpress_connections_open", &[], ANSWER, |v| v == 1.0);
    assert_eq!(open, 1.0, "only the producer's connection is left open");
    let cpu = scene.cpu() - cpu_before;
    scene.finish("connections over max_connections", cpu);
}

/// [`rules`] with `[defaults]` rewriting into zstd too: topics no rule names are
/// rewritten (and counted) as well.
const LABEL_RULES: &str = r#"
[defaults]
compression.type = "zstd"

[[topics]]
match = "zstd.*"
compression.type = "zstd"
"#;

/// The topic label cap, with `max_topic_labels = 10`: Produce v7 requests name 5000
/// invented topics of 2000 characters, half matching the `zstd.*` rule (so labelled
/// until the cap) and half no rule (with `[defaults]` rewriting into zstd: `_other`).
/// The metrics then carry at most 10 topic label values plus `_other`, the
/// well-behaved producer's topic (labelled first) among them.
#[test]
fn invented_topics_never_grow_the_topic_labels_past_the_cap() {
    const TOPICS: usize = 5000;
    const PER_REQUEST: usize = 1000;
    const NAME_LEN: usize = 2000;
    // The burst's five 1000-partition requests queue for the work slots; a debug build on
    // busy cores can take longer than the default max_rewrite_wait_ms to rewrite one, and
    // a request past it would pass as sent, uncounted here.
    let scene = Scene::start_with(
        LABEL_RULES,
        "[limits]\nmax_topic_labels = 10\nmax_rewrite_wait_ms = 30000\n",
    );
    let names: Vec<Vec<u8>> = (0..TOPICS)
        .map(|i| {
            let prefix = if i % 2 == 0 {
                "zstd.invented"
            } else {
                "invented"
            };
            let mut name = format!("{prefix}-{i:05}-").into_bytes();
            name.resize(NAME_LEN, b'x');
            name
        })
        .collect();
    let batch = good_batch();
    let other_before = scene.counter("kpress_batches_rewritten_total", &[("topic", "_other")]);
    let cpu_before = scene.cpu();
    let started = Instant::now();
    let frames: Vec<Vec<u8>> = names
        .chunks(PER_REQUEST)
        .enumerate()
        .map(|(i, chunk)| {
            let topics: Vec<(&[u8], Partitions<'_>)> = chunk
                .iter()
                .map(|n| (&n[..], vec![(0, &batch[..])]))
                .collect();
            produce_v7(i as i32, -1, 30_000, &topics)
        })
        .collect();
    let sender = burst(scene.proxy.listen(), frames);
    scene.assert_producer_alive_since(started, "5000 invented topics");
    let answers = sender
        .join()
        .expect("the burst thread")
        .unwrap_or_else(|e| panic!("invented topics: {e:#}\n{}", scene.proxy.log()));
    let cpu = scene.cpu() - cpu_before;
    assert_eq!(answers.len(), TOPICS / PER_REQUEST);
    let text = scene
        .proxy
        .scrape_metrics()
        .unwrap_or_else(|e| panic!("scraping kpress: {e:#}"));
    let labels = topic_labels(&text);
    let other =
        scene.counter("kpress_batches_rewritten_total", &[("topic", "_other")]) - other_before;
    let shown: Vec<String> = labels
        .iter()
        .map(|l| l.chars().take(24).collect())
        .collect();
    eprintln!(
        "hostile: 5000 invented topics: {} topic label values ({shown:?}, cut to 24 \
         characters), {} B of metrics, {other} batches under _other",
        labels.len(),
        text.len()
    );
    assert!(
        labels.len() <= 11,
        "{} topic label values with max_topic_labels = 10: {shown:?}",
        labels.len()
    );
    assert!(labels.contains(GOOD_TOPIC), "{shown:?}");
    assert!(labels.contains("_other"), "{shown:?}");
    // Every invented topic's batch was rewritten; at most 9 got a label of their own.
    assert!(
        other >= (TOPICS - 9) as f64,
        "{other} rewritten batches counted under _other\n{}",
        scene.proxy.log()
    );
    // A topic label carries about 60 series (counters and the batch shape histograms'
    // buckets), each line repeating the name: 11 labels of 2000-character names make
    // about 0.8 MB, while 5000 unbounded labels would make hundreds of MB.
    assert!(text.len() < 2 << 20, "{} B of metrics", text.len());
    scene.finish("5000 invented topics", cpu);
}

/// The distinct values of the `topic` label on a Prometheus page.
fn topic_labels(text: &str) -> BTreeSet<String> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let start = l.find("topic=\"")? + "topic=\"".len();
            let len = l[start..].find('"')?;
            Some(l[start..start + len].to_owned())
        })
        .collect()
}

/// ApiVersions v5 and v127 (newer than kpress parses, and than the
/// broker knows) are answered by kpress itself byte for byte as the broker answers
/// them: UNSUPPORTED_VERSION with a v0 body offering ApiVersions 0-4, so a client
/// retries lower. The connection stays open, and ApiVersions v3 on it then works.
#[test]
fn api_versions_above_v4_is_answered_unsupported_and_the_connection_lives() {
    let scene = Scene::start("");
    let broker = cluster().node_addresses()[0];
    let label = [("api", "ApiVersions")];
    let answered_before = scene.counter("kpress_requests_answered_locally_total", &label);
    let cpu_before = scene.cpu();
    let started = Instant::now();
    let mut client = connect(scene.proxy.listen());
    for (correlation_id, version) in [(1, 5i16), (2, 127)] {
        let request = api_versions(version, correlation_id);
        let from_kpress = exchange(&mut client, &request).unwrap_or_else(|e| {
            panic!(
                "ApiVersions v{version} through kpress: {e:#}\n{}",
                scene.proxy.log()
            )
        });
        let from_broker = exchange(&mut connect(broker), &request)
            .unwrap_or_else(|e| panic!("ApiVersions v{version} to the broker: {e:#}"));
        let answer = parse_api_versions(&from_kpress, 0).expect("a v0 ApiVersions body");
        eprintln!("hostile: ApiVersions v{version}: kpress answered {answer:?}");
        assert_eq!(answer.correlation_id, correlation_id);
        assert_eq!(answer.error_code, 35, "UNSUPPORTED_VERSION");
        assert_eq!(answer.apis, [(18, 0, 4)]);
        assert_eq!(
            from_kpress, from_broker,
            "ApiVersions v{version}: kpress's answer is not the broker's"
        );
    }
    let retry = exchange(&mut client, &api_versions(3, 3))
        .and_then(|body| parse_api_versions(&body, 3))
        .unwrap_or_else(|e| {
            panic!(
                "ApiVersions v3 on the same connection: {e:#}\n{}",
                scene.proxy.log()
            )
        });
    assert_eq!((retry.correlation_id, retry.error_code), (3, 0));
    assert!(
        retry.apis.iter().any(|(key, _, _)| *key == 0),
        "no Produce in {retry:?}"
    );
    scene.assert_producer_alive_since(started, "ApiVersions v5 and v127");
    drop(client);
    let answered =
        scene.counter("kpress_requests_answered_locally_total", &label) - answered_before;
    assert_eq!(answered, 2.0, "{}", scene.proxy.log());
    let cpu = scene.cpu() - cpu_before;
    scene.finish("ApiVersions v5 and v127", cpu);
}

/// Clients that leave mid-frame (2 bytes into the size, after the size, inside the
/// header, half-way, all but one byte of a ~4 MB Produce) on the bootstrap and the
/// node port, while the well-behaved producer writes: nothing is refused (leaving is
/// routine), `kpress_inflight_bytes` returns to 0 and only the producer's connection
/// stays open.
#[test]
fn clients_leaving_mid_frame_leave_no_inflight_bytes() {
    let scene = Scene::start("");
    let batch = apache_batch(16_000);
    let frame = produce_v7(
        1,
        -1,
        30_000,
        &[(GOOD_TOPIC.as_bytes(), vec![(0, &batch[..])])],
    );
    let refused_before = scene.counter("kpress_frames_refused_total", &[]);
    let cpu_before = scene.cpu();
    let started = Instant::now();
    let cuts = [2, 4, 40, frame.len() / 2, frame.len() - 1];
    std::thread::scope(|scope| {
        for cut in cuts {
            for addr in [scene.proxy.listen(), scene.node] {
                let frame = &frame;
                scope.spawn(move || {
                    let mut stream = connect(addr);
                    stream
                        .write_all(&frame[..cut])
                        .expect("sending part of a frame");
                    std::thread::sleep(Duration::from_millis(200));
                });
            }
        }
    });
    scene.assert_producer_alive_since(started, "clients leaving mid-frame");
    let open = scene.wait_for("kpress_connections_open", &[], ANSWER, |v| v == 1.0);
    let refused = scene.counter("kpress_frames_refused_total", &[]) - refused_before;
    let cpu = scene.cpu() - cpu_before;
    eprintln!(
        "hostile: {} clients left mid-frame: {open} connections open after, {refused} frames refused",
        cuts.len() * 2
    );
    assert_eq!(open, 1.0, "only the producer's connection is left open");
    assert_eq!(refused, 0.0, "leaving mid-frame is routine");
    scene.finish("clients leaving mid-frame", cpu);
}
