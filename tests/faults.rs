//! Faults against real Kafka 4.1.1 brokers while idempotent `acks=all` Java producers
//! send through `kpress run`, which recompresses every batch (a zstd policy over lz4
//! and gzip producers). Each test breaks one thing mid-stream, waits until the
//! producer is acknowledged again, then reads the topic back through kpress and
//! accounts for every record by its content: nothing acknowledged is lost, nothing is
//! stored twice, nothing is damaged, and no send fails.
//!
//! - a broker killed (SIGKILL) mid-request and restarted (three nodes, replication 3);
//! - leadership moved to another node (reassignment + preferred leader election);
//! - the upstream unreachable when kpress starts, and again later;
//! - clients that disconnect mid-frame (other connections unaffected, the in-flight
//!   budget back to 0);
//! - SIGTERM under load: requests already read are answered, kpress exits 0, and the
//!   producer carries on through a restarted kpress.
//!
//! Every wait has a deadline; the file runs in about 3 minutes on 2 cores.

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{
    ApiKey, BrokerId, FetchRequest, FetchResponse, ProduceRequest, RequestHeader, ResponseHeader,
    TopicName,
};
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, StrBytes};
use kpress_batch::builder::{BatchBuilder, Record};
use kpress_codec::Codec;
use kpress_tests::compression::Compression;
use kpress_tests::data::Dataset;
use kpress_tests::java_client::JavaClient;
use kpress_tests::kpress::{storing_rules, KpressProxy};
use kpress_tests::node_faults::{kill_node, move_leader, partition_leader};
use kpress_tests::ports::{free_port, free_port_range};
use kpress_tests::proc_status;
use kpress_tests::steady_producer::{tally, Accounting, SteadyOptions, SteadyProducer};
use kpress_tests::{kafka_version, KafkaCluster};
use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::sync::{Mutex, MutexGuard, OnceLock, PoisonError};
use std::time::{Duration, Instant};

/// Every `zstd.*` topic's batches are rewritten into zstd, larger or not.
fn rules() -> String {
    storing_rules(&["zstd"])
}

/// How long a producer may take to be acknowledged again after a fault: a broker
/// restart, an election, the producer's retry backoff.
const RECOVERY: Duration = Duration::from_secs(90);
/// Records acknowledged before a fault, and again after it, before moving on.
const STEP: u64 = 2000;
/// How long a stopped producer gets to settle what it sent.
const FINISH: Duration = Duration::from_secs(130);
/// How long reading a topic back may take.
const READ_BACK: Duration = Duration::from_secs(90);

/// A shared cluster, one test at a time (tests stop and kill its nodes); every node is
/// running again when a test gets it, even if the previous holder panicked.
fn cluster_guard(
    cell: &'static OnceLock<Mutex<KafkaCluster>>,
    nodes: usize,
) -> MutexGuard<'static, KafkaCluster> {
    let mut cluster = cell
        .get_or_init(|| {
            Mutex::new(
                KafkaCluster::start(kafka_version(), nodes)
                    .unwrap_or_else(|e| panic!("starting {nodes} Kafka node(s): {e:#}")),
            )
        })
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    for index in 0..nodes {
        // A node killed and not reaped fails the first start (its exit is noticed);
        // the second one spawns it.
        if cluster.start_node(index).is_err() {
            cluster
                .start_node(index)
                .unwrap_or_else(|e| panic!("restarting node {index}: {e:#}"));
        }
    }
    cluster
}

/// Three nodes, for faults that leave a replicated partition writable.
fn three_nodes() -> MutexGuard<'static, KafkaCluster> {
    static CLUSTER: OnceLock<Mutex<KafkaCluster>> = OnceLock::new();
    cluster_guard(&CLUSTER, 3)
}

/// One node, for faults that take the whole upstream away or touch only kpress.
fn one_node() -> MutexGuard<'static, KafkaCluster> {
    static CLUSTER: OnceLock<Mutex<KafkaCluster>> = OnceLock::new();
    cluster_guard(&CLUSTER, 1)
}

/// The record bodies: the apache log's lines (compressible text).
fn lines() -> std::path::PathBuf {
    Dataset::ApacheAccessLog.path()
}

/// Creates `topic` (one partition, `replication` replicas, stored as sent).
fn create_topic(cluster: &KafkaCluster, topic: &str, replication: u16) {
    let min_insync = if replication >= 3 { "2" } else { "1" };
    JavaClient::new(kafka_version())
        .create_topic_replicated(
            &cluster.bootstrap(),
            topic,
            1,
            replication,
            &[
                "compression.type=producer",
                &format!("min.insync.replicas={min_insync}"),
            ],
        )
        .unwrap_or_else(|e| panic!("creating {topic}: {e:#}\n{}", cluster.describe_logs()));
}

/// Stops `producer`, reads `topic` back through `bootstrap` and accounts for every
/// record; panics with the problems, `context` and the logs.
fn settle_and_account(
    producer: SteadyProducer,
    bootstrap: &str,
    topic: &str,
    context: impl Fn() -> String,
) -> Accounting {
    let prefix = producer.prefix().to_string();
    let report = producer
        .finish(FINISH)
        .unwrap_or_else(|e| panic!("{e:#}\n{}", context()));
    let tally = tally(bootstrap, topic, &prefix, &lines(), READ_BACK)
        .unwrap_or_else(|e| panic!("{e:#}\n{}", context()));
    let accounting = Accounting::of(&report, &tally);
    eprintln!("{topic}: {accounting}");
    let problems = accounting.problems();
    assert!(
        problems.is_empty(),
        "{topic}: {accounting}\n{}\n--- producer stderr ---\n{}\n{}",
        problems.join("\n"),
        report.stderr,
        context()
    );
    accounting
}

/// Fails unless kpress rewrote batches of `topic` into zstd.
fn assert_rewritten(proxy: &KpressProxy, topic: &str) {
    let rewritten = proxy
        .counter(
            "kpress_batches_rewritten_total",
            &[("topic", topic), ("to", "zstd")],
        )
        .unwrap_or_else(|e| panic!("scraping kpress: {e:#}"));
    assert!(
        rewritten > 0.0,
        "kpress rewrote no batch of {topic} into zstd\n{}",
        proxy.log()
    );
}

/// An idempotent `acks=all` producer of sequenced dataset lines writing `codec`
/// batches into `topic` at `rate` records/s through `bootstrap`; `name` tags its files.
fn steady_producer(
    bootstrap: &str,
    topic: &str,
    name: &str,
    codec: Compression,
    rate: u32,
) -> SteadyProducer {
    SteadyProducer::start(
        bootstrap,
        topic,
        name,
        &SteadyOptions::new(codec, rate, &lines()),
    )
    .expect("starting the producer")
}

/// A broker killed with SIGKILL while it leads the partition a producer writes to:
/// requests through kpress to it are cut off mid-flight, the two other nodes elect a
/// new leader, the producer (through kpress) finds it and goes on; the killed node is
/// restarted and the producer is acknowledged again.
#[test]
fn broker_killed_mid_request_and_restarted() {
    let mut cluster = three_nodes();
    let topic = "zstd.fault-kill";
    create_topic(&cluster, topic, 3);
    let proxy = KpressProxy::start_in_front_of(&cluster, &rules())
        .unwrap_or_else(|e| panic!("starting kpress: {e:#}"));
    let mut producer = steady_producer(&proxy.bootstrap(), topic, "kill", Compression::Lz4, 3000);
    let context = |cluster: &KafkaCluster| format!("{}\n{}", proxy.log(), cluster.describe_logs());
    producer
        .wait_acked(STEP, RECOVERY)
        .unwrap_or_else(|e| panic!("{e:#}\n{}", context(&cluster)));

    let leader = partition_leader(&cluster, topic, 0, RECOVERY).expect("the leader");
    let index = cluster
        .node_ids()
        .iter()
        .position(|id| *id == leader)
        .expect("the leader is a node");
    let before = producer.progress();
    kill_node(&mut cluster, index).unwrap_or_else(|e| panic!("{e:#}"));
    eprintln!("{topic}: killed node {leader} (SIGKILL) at {before}");
    producer
        .wait_more_acked(STEP, RECOVERY)
        .unwrap_or_else(|e| panic!("after the kill: {e:#}\n{}", context(&cluster)));
    let new_leader = partition_leader(&cluster, topic, 0, RECOVERY).expect("a new leader");
    assert_ne!(new_leader, leader, "the killed node still leads {topic}");

    cluster
        .start_node(index)
        .unwrap_or_else(|e| panic!("restarting node {leader}: {e:#}"));
    eprintln!(
        "{topic}: node {leader} restarted at {}",
        producer.progress()
    );
    producer
        .wait_more_acked(STEP, RECOVERY)
        .unwrap_or_else(|e| panic!("after the restart: {e:#}\n{}", context(&cluster)));
    settle_and_account(producer, &proxy.bootstrap(), topic, || context(&cluster));
    assert_rewritten(&proxy, topic);
}

/// The partition's leadership moves to another node twice while a producer writes
/// through kpress: it is told NOT_LEADER_OR_FOLLOWER (through kpress), asks Metadata
/// (through kpress) and follows.
#[test]
fn leadership_moves_to_another_node() {
    let cluster = three_nodes();
    let topic = "zstd.fault-leader";
    create_topic(&cluster, topic, 3);
    let proxy = KpressProxy::start_in_front_of(&cluster, &rules())
        .unwrap_or_else(|e| panic!("starting kpress: {e:#}"));
    let mut producer =
        steady_producer(&proxy.bootstrap(), topic, "leader", Compression::Gzip, 3000);
    let context = || format!("{}\n{}", proxy.log(), cluster.describe_logs());
    producer
        .wait_acked(STEP, RECOVERY)
        .unwrap_or_else(|e| panic!("{e:#}\n{}", context()));
    for _ in 0..2 {
        let leader = partition_leader(&cluster, topic, 0, RECOVERY).expect("the leader");
        let to = cluster
            .node_ids()
            .into_iter()
            .find(|id| *id != leader)
            .expect("another node");
        move_leader(&cluster, topic, 0, to, Duration::from_secs(60))
            .unwrap_or_else(|e| panic!("{e:#}\n{}", context()));
        eprintln!(
            "{topic}: leadership moved from node {leader} to {to} at {}",
            producer.progress()
        );
        producer
            .wait_more_acked(STEP, RECOVERY)
            .unwrap_or_else(|e| panic!("after the move to {to}: {e:#}\n{}", context()));
    }
    settle_and_account(producer, &proxy.bootstrap(), topic, context);
    assert_rewritten(&proxy, topic);
}

/// kpress starts while its only broker is down: it listens anyway (clients are turned
/// away until the broker answers), and once the broker is up the producer, already
/// running, is acknowledged. Later the broker stops and starts again under the running
/// kpress, and the producer is acknowledged again.
#[test]
fn upstream_unreachable_at_start_and_again_later() {
    let mut cluster = one_node();
    let topic = "zstd.fault-unreachable";
    create_topic(&cluster, topic, 1);
    cluster.stop_node(0).expect("stopping the broker");
    let started = KpressProxy::start_in_front_of(&cluster, &rules());
    let proxy = match started {
        Ok(proxy) => proxy,
        Err(e) => {
            cluster.start_node(0).expect("restarting the broker");
            panic!("kpress run did not come up while its upstream was unreachable: {e:#}");
        }
    };
    let mut producer = steady_producer(
        &proxy.bootstrap(),
        topic,
        "unreachable",
        Compression::Lz4,
        2000,
    );
    std::thread::sleep(Duration::from_secs(3));
    let early = producer.progress();
    assert_eq!(
        early.acked, 0,
        "records acknowledged with the broker down: {early}"
    );
    cluster.start_node(0).expect("starting the broker");
    eprintln!("{topic}: broker started at {}", producer.progress());
    let context = |cluster: &KafkaCluster| format!("{}\n{}", proxy.log(), cluster.describe_logs());
    producer
        .wait_acked(STEP, RECOVERY)
        .unwrap_or_else(|e| panic!("once the broker is up: {e:#}\n{}", context(&cluster)));

    cluster.stop_node(0).expect("stopping the broker");
    eprintln!("{topic}: broker stopped at {}", producer.progress());
    std::thread::sleep(Duration::from_secs(2));
    cluster.start_node(0).expect("starting the broker again");
    eprintln!("{topic}: broker started again at {}", producer.progress());
    producer
        .wait_more_acked(STEP, RECOVERY)
        .unwrap_or_else(|e| panic!("after the broker came back: {e:#}\n{}", context(&cluster)));
    settle_and_account(producer, &proxy.bootstrap(), topic, || context(&cluster));
    assert_rewritten(&proxy, topic);
}

/// A size-prefixed Produce v7 request (acks=all) for `topic`-0 holding one
/// uncompressed batch of `records` apache log lines (about 240 bytes each).
fn produce_v7_frame(topic: &str, records: usize) -> Vec<u8> {
    let lines = Dataset::ApacheAccessLog.records();
    let records: Vec<Record> = lines
        .iter()
        .cycle()
        .take(records)
        .map(|l| Record::value(l.clone()))
        .collect();
    let batch = BatchBuilder::codec(Codec::None)
        .build(&records)
        .expect("building a batch");
    let request = ProduceRequest::default()
        .with_acks(-1)
        .with_timeout_ms(30_000)
        .with_topic_data(vec![TopicProduceData::default()
            .with_name(TopicName(StrBytes::from_string(topic.to_string())))
            .with_partition_data(vec![PartitionProduceData::default()
                .with_index(0)
                .with_records(Some(Bytes::from(batch)))])]);
    request_frame(ApiKey::Produce, 7, &request)
}

/// `request` at `version` behind a request header and its size.
fn request_frame<R: Encodable + HeaderVersion>(api: ApiKey, version: i16, request: &R) -> Vec<u8> {
    let header = RequestHeader::default()
        .with_request_api_key(api as i16)
        .with_request_api_version(version)
        .with_correlation_id(7)
        .with_client_id(Some(StrBytes::from_static_str("kpress-faults")));
    let mut payload = BytesMut::new();
    header
        .encode(&mut payload, R::header_version(version))
        .expect("encode the header");
    request
        .encode(&mut payload, version)
        .expect("encode the request");
    let mut frame = (payload.len() as i32).to_be_bytes().to_vec();
    frame.extend_from_slice(&payload);
    frame
}

/// Sends the first `cut` bytes of `frame` to `addr`, lingers `hold`, and closes.
fn send_part_and_close(addr: SocketAddr, frame: &[u8], cut: usize, hold: Duration) {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(5))
        .unwrap_or_else(|e| panic!("connecting to kpress at {addr}: {e}"));
    stream
        .set_write_timeout(Some(Duration::from_secs(10)))
        .expect("write timeout");
    stream
        .write_all(&frame[..cut])
        .unwrap_or_else(|e| panic!("sending {cut} bytes to kpress: {e}"));
    std::thread::sleep(hold);
    let _ = stream.shutdown(Shutdown::Both);
}

/// Polls `gauge` until it reads `want` (within `timeout`); returns the last value.
fn wait_for_gauge(proxy: &KpressProxy, gauge: &str, want: f64, timeout: Duration) -> f64 {
    let deadline = Instant::now() + timeout;
    loop {
        let value = proxy
            .counter(gauge, &[])
            .unwrap_or_else(|e| panic!("scraping kpress: {e:#}"));
        if value == want || Instant::now() > deadline {
            return value;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Raw TCP clients send part of a 4 MB Produce request (half the size prefix, the
/// prefix only, the header, half, all but one byte) to kpress's bootstrap and node
/// ports and close, while a producer writes through kpress: the producer is never
/// disturbed, kpress serves new connections, and once every client is gone its
/// in-flight budget and open-connection gauges are back to 0.
#[test]
fn client_disconnects_mid_frame() {
    let cluster = one_node();
    let topic = "zstd.fault-half-frame";
    create_topic(&cluster, topic, 1);
    let proxy = KpressProxy::start_in_front_of(&cluster, &rules())
        .unwrap_or_else(|e| panic!("starting kpress: {e:#}"));
    let context = || format!("{}\n{}", proxy.log(), cluster.describe_logs());
    let mut producer = steady_producer(
        &proxy.bootstrap(),
        topic,
        "half-frame",
        Compression::Gzip,
        2000,
    );
    producer
        .wait_acked(STEP, RECOVERY)
        .unwrap_or_else(|e| panic!("{e:#}\n{}", context()));

    let frame = produce_v7_frame(topic, 16_000);
    let node_port = proxy.node_port_base().expect("node ports") + 1;
    let targets = [
        proxy.listen(),
        SocketAddr::from(([127, 0, 0, 1], node_port)),
    ];
    let cuts = [2, 4, 40, frame.len() / 2, frame.len() - 1];
    let before = producer.progress();
    std::thread::scope(|scope| {
        for (i, cut) in cuts.iter().enumerate() {
            for addr in &targets {
                let frame = &frame;
                let hold = Duration::from_millis(300 * (i as u64 % 3));
                scope.spawn(move || send_part_and_close(*addr, frame, *cut, hold));
            }
        }
    });
    eprintln!(
        "{topic}: {} partial frames of a {}-byte Produce sent and closed at {before}",
        cuts.len() * targets.len(),
        frame.len()
    );
    producer
        .wait_more_acked(STEP, RECOVERY)
        .unwrap_or_else(|e| panic!("after the partial frames: {e:#}\n{}", context()));
    let accounting = settle_and_account(producer, &proxy.bootstrap(), topic, context);
    assert_rewritten(&proxy, topic);

    // The whole frame on a fresh connection is served as usual.
    let mut whole = TcpStream::connect(proxy.listen()).expect("connect to kpress");
    whole
        .set_read_timeout(Some(Duration::from_secs(30)))
        .expect("read timeout");
    whole.write_all(&frame).expect("send a whole Produce");
    let mut size = [0u8; 4];
    whole.read_exact(&mut size).unwrap_or_else(|e| {
        panic!(
            "no answer to a whole Produce after the partial ones: {e}\n{}",
            context()
        )
    });
    drop(whole);

    let inflight = wait_for_gauge(
        &proxy,
        "kpress_inflight_bytes",
        0.0,
        Duration::from_secs(15),
    );
    let open = wait_for_gauge(
        &proxy,
        "kpress_connections_open",
        0.0,
        Duration::from_secs(15),
    );
    assert!(
        inflight == 0.0 && open == 0.0,
        "with every client gone kpress still holds {inflight} in-flight bytes and {open} \
         open connections ({accounting})\n{}",
        context()
    );
}

/// A `kpress run` on ports chosen here, so it can be restarted on the same ones.
struct FixedPortsProxy {
    config: String,
    listen: SocketAddr,
}

impl FixedPortsProxy {
    fn new(cluster: &KafkaCluster) -> FixedPortsProxy {
        let listen = SocketAddr::from(([127, 0, 0, 1], free_port()));
        let node_port_base = free_port_range(cluster.node_ids().len() as u16);
        let upstream = cluster
            .node_addresses()
            .iter()
            .map(|a| format!("\"{a}\""))
            .collect::<Vec<_>>()
            .join(", ");
        let config = format!(
            "[listener]\nbind = \"{listen}\"\nadvertised_host = \"127.0.0.1\"\n\
             node_port_base = {node_port_base}\n\
             [upstream]\nbootstrap_servers = [{upstream}]\n{}\n",
            rules()
        );
        FixedPortsProxy { config, listen }
    }

    fn start(&self) -> KpressProxy {
        KpressProxy::start(&self.config, self.listen)
            .unwrap_or_else(|e| panic!("starting kpress: {e:#}"))
    }
}

/// A Fetch v12 for `topic`-0 from offset 0 that the broker holds for `wait` (it asks
/// for more bytes than the empty topic has).
fn long_poll_fetch_frame(topic: &str, wait: Duration) -> Vec<u8> {
    let request = FetchRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_max_wait_ms(wait.as_millis() as i32)
        .with_min_bytes(1 << 20)
        .with_max_bytes(1 << 20)
        .with_session_epoch(-1)
        .with_topics(vec![FetchTopic::default()
            .with_topic(TopicName(StrBytes::from_string(topic.to_string())))
            .with_partitions(vec![FetchPartition::default()
                .with_partition(0)
                .with_fetch_offset(0)
                .with_current_leader_epoch(-1)
                .with_log_start_offset(-1)
                .with_partition_max_bytes(1 << 20)])]);
    request_frame(ApiKey::Fetch, 12, &request)
}

/// SIGTERM while a producer sends 5000 records/s through kpress and a long-poll Fetch
/// waits at the broker: kpress answers the Fetch it had already forwarded, closes the
/// connections, and exits 0 without waiting out its grace; the producer, retrying,
/// carries on through kpress restarted on the same ports, and loses nothing.
#[test]
fn sigterm_under_load_drains_then_exits_0() {
    let cluster = one_node();
    let topic = "zstd.fault-sigterm";
    let idle = "fault-sigterm-idle";
    create_topic(&cluster, topic, 1);
    create_topic(&cluster, idle, 1);
    let ports = FixedPortsProxy::new(&cluster);
    let mut proxy = ports.start();
    let mut producer =
        steady_producer(&proxy.bootstrap(), topic, "sigterm", Compression::Lz4, 5000);
    producer
        .wait_acked(2 * STEP, RECOVERY)
        .unwrap_or_else(|e| panic!("{e:#}\n{}", proxy.log()));

    let hold = Duration::from_secs(4);
    let mut fetch = TcpStream::connect(proxy.listen()).expect("connect to kpress");
    fetch
        .set_read_timeout(Some(Duration::from_secs(30)))
        .expect("read timeout");
    fetch
        .write_all(&long_poll_fetch_frame(idle, hold))
        .expect("send the Fetch");
    let fetch_sent = Instant::now();
    // kpress has read and forwarded it long before the broker answers.
    std::thread::sleep(Duration::from_millis(500));
    let progress = producer.progress();
    let terminated = Instant::now();
    let answer = std::thread::spawn(move || {
        let mut size = [0u8; 4];
        fetch.read_exact(&mut size)?;
        let mut body = vec![0u8; i32::from_be_bytes(size) as usize];
        fetch.read_exact(&mut body)?;
        Ok::<_, std::io::Error>((Instant::now(), body))
    });
    let status = proxy.terminate(Duration::from_secs(30));
    let exited = terminated.elapsed();
    let log = proxy.log();
    eprintln!("{topic}: SIGTERM at {progress}; kpress exited ({status:?}) after {exited:?}");
    let mut problems = Vec::new();
    match status {
        Some(status) if status.success() => {}
        Some(status) => problems.push(format!("kpress exited with {status} on SIGTERM")),
        None => problems.push("kpress did not exit within 30 s of SIGTERM".to_string()),
    }
    if log.contains("shutdown grace over") {
        problems.push("kpress waited out its shutdown grace instead of draining".to_string());
    }
    match answer.join().expect("the Fetch reader") {
        Ok((at, body)) => {
            let mut body = Bytes::from(body);
            let header = ResponseHeader::decode(&mut body, FetchResponse::header_version(12));
            let response = FetchResponse::decode(&mut body, 12);
            match (header, response) {
                (Ok(header), Ok(response)) if header.correlation_id == 7 => {
                    let partition = &response.responses[0].partitions[0];
                    if response.error_code != 0 || partition.error_code != 0 {
                        problems.push(format!(
                            "the drained Fetch answered error {} / partition error {}",
                            response.error_code, partition.error_code
                        ));
                    }
                    if at < terminated || at.duration_since(fetch_sent) < hold / 2 {
                        problems.push(format!(
                            "the Fetch was answered {:?} after it was sent, before SIGTERM \
                             or long before the broker's wait: it was not in flight",
                            at.duration_since(fetch_sent)
                        ));
                    }
                }
                (header, response) => problems.push(format!(
                    "the drained Fetch's answer does not decode: {header:?} {:?}",
                    response.err()
                )),
            }
        }
        Err(e) => problems.push(format!("the Fetch in flight at SIGTERM got no answer: {e}")),
    }
    assert!(problems.is_empty(), "{}\n{log}", problems.join("\n"));

    let proxy = ports.start();
    eprintln!("{topic}: kpress restarted at {}", producer.progress());
    let context = || format!("{log}\n{}\n{}", proxy.log(), cluster.describe_logs());
    producer
        .wait_more_acked(2 * STEP, RECOVERY)
        .unwrap_or_else(|e| panic!("after kpress restarted: {e:#}\n{}", context()));
    settle_and_account(producer, &proxy.bootstrap(), topic, context);
    // Recompression was on throughout: every batch the broker stored is zstd.
    let dump = &cluster.dump_partition_0(&[topic]).expect("DumpLogSegments")[0];
    let not_zstd: Vec<String> = dump
        .batches
        .iter()
        .filter(|b| !b.is_control && b.compresscodec != Compression::Zstd.dump_name())
        .map(|b| format!("{}@{}", b.compresscodec, b.base_offset))
        .collect();
    assert!(
        not_zstd.is_empty() && dump.problems.is_empty(),
        "{topic}: batches not rewritten into zstd: {not_zstd:?}; {:?}",
        dump.problems
    );
}

/// `name` from the environment as a number, or `default`.
fn env_number(name: &str, default: u64) -> u64 {
    match std::env::var(name) {
        Ok(text) => text
            .parse()
            .unwrap_or_else(|_| panic!("{name}={text:?} is not a whole number")),
        Err(_) => default,
    }
}

/// kpress's threads now (`Threads:` of /proc/<pid>/status).
fn thread_count(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Threads:"))
                .and_then(|n| n.trim().parse().ok())
        })
        .unwrap_or(0)
}

const MIB: f64 = (1u64 << 20) as f64;

/// The CPUs kpress sees: its runtime workers and concurrent rewrites by default.
fn cpus() -> u64 {
    std::thread::available_parallelism().map_or(1, |n| n.get() as u64)
}

/// The soak that `scripts/soak.sh` runs (with a release `kpress` in `KPRESS_BIN`):
/// two idempotent `acks=all` producers (lz4 and gzip, `SOAK_RATE` records/s together,
/// default 10000) write through kpress into zstd-policy topics for `SOAK_SECONDS`
/// (default 540), then everything is read back through kpress. kpress's VmRSS is
/// sampled every 5 s. Fails if a record acknowledged is missing or doubled, anything
/// failed (sends, corrupt records, refused frames), or memory grows:
///
/// - flat: RSS at the end ≤ 1.25 × RSS after warm-up (a fifth of the run, at most
///   60 s) + 32 MiB;
/// - bounded: peak RSS (VmHWM) ≤ the README's "Peak memory" formula at the default
///   limits, with T = W = CPUs and the rules' one compressor (zstd level 3):
///   40 MiB + 256 MiB + W × 100 MiB + T × (64 MiB + 3 × 100 MiB + zstd's bound of
///   64 MiB + 0.3 MiB + 3.5 MiB).
#[test]
#[ignore = "a ~10 minute soak: scripts/soak.sh runs it"]
fn soak() {
    let seconds = env_number("SOAK_SECONDS", 540);
    let rate = env_number("SOAK_RATE", 10_000);
    let duration = Duration::from_secs(seconds);
    let cluster = KafkaCluster::start(kafka_version(), 1).expect("starting Kafka");
    let topics = [
        ("zstd.soak-lz4", Compression::Lz4),
        ("zstd.soak-gzip", Compression::Gzip),
    ];
    for (topic, _) in topics {
        create_topic(&cluster, topic, 1);
    }
    let proxy = KpressProxy::start_in_front_of(&cluster, &rules())
        .unwrap_or_else(|e| panic!("starting kpress: {e:#}"));
    let config = proxy
        .log_file()
        .parent()
        .expect("the proxy's dir")
        .join("kpress.toml");
    let pid = proc_status::pid_with_argument(&config).expect("kpress's pid");
    let start = proc_status::memory(pid).expect("kpress's memory");
    let context = || format!("{}\n{}", proxy.log(), cluster.describe_logs());

    let mut producers: Vec<(&str, SteadyProducer)> = topics
        .iter()
        .map(|(topic, codec)| {
            let mut options = SteadyOptions::new(*codec, (rate / 2) as u32, &lines());
            options.max_duration = duration + Duration::from_secs(120);
            let producer = SteadyProducer::start(&proxy.bootstrap(), topic, "soak", &options)
                .expect("starting a producer");
            (*topic, producer)
        })
        .collect();
    let began = Instant::now();
    let warm_up_at = (duration / 5).min(Duration::from_secs(60));
    let mut warm_up = None;
    let mut threads = thread_count(pid);
    let mut samples = Vec::new();
    while began.elapsed() < duration {
        std::thread::sleep(Duration::from_secs(5));
        let memory = proc_status::memory(pid)
            .unwrap_or_else(|e| panic!("kpress is gone: {e:#}\n{}", context()));
        threads = threads.max(thread_count(pid));
        samples.push((began.elapsed().as_secs(), memory.rss));
        if warm_up.is_none() && began.elapsed() >= warm_up_at {
            warm_up = Some(memory.rss);
        }
        for (topic, producer) in &producers {
            let progress = producer.progress();
            assert_eq!(
                progress.failed,
                0,
                "{topic}: {progress}\n{}\n{}",
                producer.stderr(),
                context()
            );
        }
    }
    let after_producing = proc_status::memory(pid).expect("kpress's memory");
    let mut accountings = Vec::new();
    for (topic, producer) in producers.drain(..) {
        let prefix = producer.prefix().to_string();
        let report = producer
            .finish(FINISH)
            .unwrap_or_else(|e| panic!("{e:#}\n{}", context()));
        let tally = tally(
            &proxy.bootstrap(),
            topic,
            &prefix,
            &lines(),
            Duration::from_secs(600),
        )
        .unwrap_or_else(|e| panic!("{e:#}\n{}", context()));
        accountings.push((topic, Accounting::of(&report, &tally)));
    }
    let end = proc_status::memory(pid).expect("kpress's memory");
    // Whole counts (a sum of no samples is -0.0).
    let count = |name: &str, labels: &[(&str, &str)]| {
        proxy
            .counter(name, labels)
            .expect("kpress metrics")
            .max(0.0) as u64
    };
    let refused = count("kpress_frames_refused_total", &[]);
    let rewritten = count("kpress_batches_rewritten_total", &[("to", "zstd")]);
    let passed = count("kpress_batches_passed_total", &[]);

    let warm_up = warm_up.unwrap_or(after_producing.rss);
    let cpus = cpus();
    let flat_bound = 1.25 * warm_up as f64 + 32.0 * MIB;
    // The one compressor its rules name: zstd level 3, 3.5 MiB of state at most.
    let peak_bound = proc_status::readme_peak_memory_bound(3.5) as f64;
    let sent: u64 = accountings.iter().map(|(_, a)| a.sent).sum();
    let read: u64 = accountings.iter().map(|(_, a)| a.read).sum();
    let mut problems: Vec<String> = accountings
        .iter()
        .flat_map(|(topic, a)| {
            a.problems()
                .into_iter()
                .map(move |p| format!("{topic}: {p}"))
        })
        .collect();
    let errors = accountings
        .iter()
        .map(|(_, a)| a.failed + a.corrupt + a.lost.len() as u64 + a.duplicated.len() as u64)
        .sum::<u64>()
        + refused;
    let mut report = format!(
        "soak: {seconds} s at {rate} records/s asked ({:.0} achieved), kpress {}\n",
        sent as f64 / seconds as f64,
        kpress_tests::kpress::kpress_binary().display()
    );
    for (topic, a) in &accountings {
        report.push_str(&format!("  {topic}: {a}\n"));
    }
    report.push_str(&format!(
        "  records sent {sent}, read back {read}, errors {errors} (failed sends, lost, \
         duplicated, corrupt, frames refused {refused})\n  batches rewritten to zstd \
         {rewritten}, passed through {passed}\n  kpress RSS: start {:.1} MiB, after warm-up \
         ({}s) {:.1} MiB, after producing {:.1} MiB, end {:.1} MiB, peak (VmHWM) {:.1} MiB; \
         threads at most {threads}\n  flat bound: end <= 1.25 x warm-up + 32 MiB = {:.1} MiB\n  \
         peak bound (README, default limits, {cpus} CPUs): {:.1} MiB\n  RSS samples (s, MiB): {}\n",
        start.rss as f64 / MIB,
        warm_up_at.as_secs(),
        warm_up as f64 / MIB,
        after_producing.rss as f64 / MIB,
        end.rss as f64 / MIB,
        end.peak_rss as f64 / MIB,
        flat_bound / MIB,
        peak_bound / MIB,
        samples
            .iter()
            .map(|(s, rss)| format!("{s}:{:.0}", *rss as f64 / MIB))
            .collect::<Vec<_>>()
            .join(" ")
    ));
    match std::env::var("SOAK_REPORT") {
        Ok(path) => {
            std::fs::write(&path, &report).unwrap_or_else(|e| panic!("writing {path}: {e}"))
        }
        Err(_) => eprintln!("{report}"),
    }
    if sent != read {
        problems.push(format!("{sent} records sent, {read} read back"));
    }
    if refused > 0 {
        problems.push(format!("kpress refused {refused} frames"));
    }
    if rewritten == 0 {
        problems.push("kpress rewrote no batch into zstd".to_string());
    }
    if end.rss as f64 > flat_bound {
        problems.push(format!(
            "RSS grew: {:.1} MiB at the end, bound {:.1} MiB",
            end.rss as f64 / MIB,
            flat_bound / MIB
        ));
    }
    if end.peak_rss as f64 > peak_bound {
        problems.push(format!(
            "peak RSS {:.1} MiB over the bound {:.1} MiB",
            end.peak_rss as f64 / MIB,
            peak_bound / MIB
        ));
    }
    assert!(problems.is_empty(), "{}\n{report}", problems.join("\n"));
}
