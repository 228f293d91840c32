//! kpress in front of a real Apache Kafka broker with real librdkafka clients (kcat):
//! gzip batches produced through kpress are stored as zstd (the topic's policy), read
//! back intact through kpress, and no real broker address reaches the client.

mod support;

use std::io::{Read, Write};
use std::net::SocketAddr;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use kpress_batch::builder::{BatchBuilder, Record};
use kpress_batch::RewritePolicy;
use kpress_codec::{Codec, CompressionOptions};
use kpress_proxy::{ProxySettings, DEFAULT_MAX_FRAME_BYTES};
use support::{free_port, run, run_with_stdin, Broker};
use tokio::sync::oneshot;

/// kpress started in this test's runtime; shut down through `stop`.
struct Kpress {
    port: u16,
    node_port_base: u16,
    stop: Option<oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<Result<(), kpress_proxy::ProxyError>>,
}

impl Kpress {
    async fn start(broker: &Broker, policy: RewritePolicy) -> Kpress {
        Kpress::start_for(std::slice::from_ref(broker), policy).await
    }

    /// kpress in front of `brokers` (node ids 1..=n).
    async fn start_for(brokers: &[Broker], policy: RewritePolicy) -> Kpress {
        // kpress's logs in the test output: KPRESS_LOG=kpress_proxy=debug.
        let _ = tracing_subscriber::fmt()
            .with_env_filter(
                tracing_subscriber::EnvFilter::try_from_env("KPRESS_LOG")
                    .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
            )
            .with_test_writer()
            .try_init();
        let port = free_port();
        let node_port_base = free_node_port_base(brokers.len());
        let settings = ProxySettings {
            bind: SocketAddr::from(([127, 0, 0, 1], port)),
            advertised_host: "127.0.0.1".into(),
            node_port_base,
            bootstrap_servers: brokers.iter().map(Broker::address).collect(),
            max_frame_bytes: DEFAULT_MAX_FRAME_BYTES,
            max_inflight_bytes: 4 * DEFAULT_MAX_FRAME_BYTES,
            shutdown_grace: Duration::from_secs(10),
        };
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(kpress_proxy::run(settings, Arc::new(policy), async move {
            let _ = stopped.await;
        }));
        // Serving once the bootstrap port accepts.
        for _ in 0..100 {
            if tokio::net::TcpStream::connect(("127.0.0.1", port))
                .await
                .is_ok()
            {
                break;
            }
            assert!(!task.is_finished(), "kpress stopped during start");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Kpress {
            port,
            node_port_base,
            stop: Some(stop),
            task,
        }
    }

    fn address(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let result = tokio::time::timeout(Duration::from_secs(30), &mut self.task)
            .await
            .expect("kpress stops within its grace")
            .expect("kpress task");
        result.expect("kpress ran without error");
    }
}

/// A base such that ports base+1..=base+n are all free now.
fn free_node_port_base(n: usize) -> u16 {
    for _ in 0..100 {
        let base = free_port() - 1;
        let free = (1..=n as u16).all(|id| {
            base.checked_add(id)
                .is_some_and(|p| std::net::TcpListener::bind(("127.0.0.1", p)).is_ok())
        });
        if free {
            return base;
        }
    }
    panic!("no run of {n} free ports found");
}

async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    tokio::task::spawn_blocking(f).await.expect("blocking task")
}

fn kcat(args: &[&str]) -> Command {
    let mut cmd = Command::new("kcat");
    cmd.args(args);
    cmd
}

fn messages(n: usize) -> Vec<String> {
    (0..n)
        .map(|i| format!("message {i:05} of the kpress smoke test, compressible text text text"))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kcat_gzip_through_kpress_is_stored_as_zstd() {
    let broker = blocking(Broker::start).await;
    let broker = Arc::new(broker);
    let kpress = Kpress::start(
        &broker,
        RewritePolicy::to_codec(Codec::Zstd, CompressionOptions::default()),
    )
    .await;
    let bootstrap = kpress.address();
    let topic = "smoke-zstd";
    let sent = messages(2000);

    // Produce gzip through kpress; linger so librdkafka builds many-record batches.
    let input = sent.join("\n") + "\n";
    let produce_bootstrap = bootstrap.clone();
    blocking(move || {
        run_with_stdin(
            kcat(&[
                "-P",
                "-b",
                &produce_bootstrap,
                "-t",
                topic,
                "-z",
                "gzip",
                "-X",
                "linger.ms=200",
                "-X",
                "batch.num.messages=500",
            ]),
            input.as_bytes(),
        )
    })
    .await;

    // Consume back through kpress.
    let consume_bootstrap = bootstrap.clone();
    let consumed = blocking(move || {
        run(kcat(&[
            "-C",
            "-b",
            &consume_bootstrap,
            "-t",
            topic,
            "-o",
            "beginning",
            "-e",
            "-q",
            "-c",
            "2000",
        ]))
    })
    .await;
    let received: Vec<String> = String::from_utf8_lossy(&consumed.stdout)
        .lines()
        .map(str::to_owned)
        .collect();
    assert_eq!(received, sent, "records read back through kpress differ");

    // A consumer group through kpress: FindCoordinator's answer must lead back to kpress.
    let group_bootstrap = bootstrap.clone();
    let grouped = blocking(move || {
        run(kcat(&[
            "-b",
            &group_bootstrap,
            "-G",
            "smoke-group",
            "-X",
            "auto.offset.reset=earliest",
            "-q",
            "-c",
            "2000",
            topic,
        ]))
    })
    .await;
    let grouped: Vec<String> = String::from_utf8_lossy(&grouped.stdout)
        .lines()
        .map(str::to_owned)
        .collect();
    assert_eq!(grouped, sent, "records read by a consumer group differ");

    // The broker stored zstd, not the producer's gzip.
    let dump_broker = Arc::clone(&broker);
    let dump = blocking(move || dump_broker.dump_partition(topic, 0)).await;
    let batches: Vec<&str> = dump
        .lines()
        .filter(|l| l.contains("compresscodec:"))
        .collect();
    eprintln!("stored batches:\n{}", batches.join("\n"));
    let records: usize = batches
        .iter()
        .filter_map(|l| {
            l.split("count: ")
                .nth(1)?
                .split_whitespace()
                .next()?
                .parse::<usize>()
                .ok()
        })
        .sum();
    assert_eq!(records, 2000, "DumpLogSegments:\n{dump}");
    assert!(
        batches.iter().any(|l| l.contains("compresscodec: zstd")),
        "no zstd batch stored:\n{dump}"
    );
    assert!(
        !batches.iter().any(|l| l.contains("compresscodec: gzip")),
        "a gzip batch reached the log:\n{dump}"
    );
    assert!(
        batches.iter().all(|l| l.contains("isvalid: true")),
        "invalid batch:\n{dump}"
    );

    // Metadata through kpress names kpress's node port, never the broker's.
    let list_bootstrap = bootstrap.clone();
    let listing = blocking(move || run(kcat(&["-L", "-b", &list_bootstrap]))).await;
    let listing = String::from_utf8_lossy(&listing.stdout).into_owned();
    let node_port = kpress.node_port_base + broker.node_id as u16;
    assert!(
        listing.contains(&format!("127.0.0.1:{node_port}")),
        "kpress's node address missing:\n{listing}"
    );
    assert!(
        !listing.contains(&format!(":{}", broker.port)),
        "the real broker address leaked:\n{listing}"
    );

    kpress.stop().await;
}

/// Topic ids from a Metadata request sent straight to the broker.
fn topic_ids_from_broker(broker: &Broker) -> Vec<([u8; 16], String)> {
    struct Names(Vec<([u8; 16], String)>);
    impl kpress_protocol::ResponseObserver for Names {
        fn broker(&mut self, _: i32, host: &str, port: i32) -> (String, i32) {
            (host.to_owned(), port)
        }
        fn topic(&mut self, id: [u8; 16], name: &str) {
            self.0.push((id, name.to_owned()));
        }
    }
    let mut stream = std::net::TcpStream::connect(broker.address()).expect("connect broker");
    let request = kpress_protocol::metadata_request(12, 1, &[]).expect("encode Metadata");
    stream.write_all(&request).expect("send Metadata");
    let body = read_frame(&mut stream);
    // Response header v1: correlation id, empty tagged fields.
    let mut names = Names(Vec::new());
    kpress_protocol::rewrite_response(3, 12, &body[5..], &mut names).expect("parse Metadata");
    names.0
}

fn read_frame(stream: &mut std::net::TcpStream) -> Vec<u8> {
    let mut size = [0u8; 4];
    stream.read_exact(&mut size).expect("read frame size");
    let mut body = vec![0u8; i32::from_be_bytes(size) as usize];
    stream.read_exact(&mut body).expect("read frame body");
    body
}

fn put_uvarint(out: &mut Vec<u8>, mut v: u32) {
    while v >= 0x80 {
        out.push(v as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// A Produce v13 request (topic by id, acks=-1) for one partition.
fn produce_v13(correlation_id: i32, topic_id: [u8; 16], records: &[u8]) -> Vec<u8> {
    let mut body = Vec::new();
    body.extend_from_slice(&0i16.to_be_bytes()); // api key Produce
    body.extend_from_slice(&13i16.to_be_bytes());
    body.extend_from_slice(&correlation_id.to_be_bytes());
    body.extend_from_slice(&4i16.to_be_bytes());
    body.extend_from_slice(b"test");
    body.push(0); // header tagged fields
    body.push(0); // transactional_id: null
    body.extend_from_slice(&(-1i16).to_be_bytes()); // acks
    body.extend_from_slice(&30_000i32.to_be_bytes()); // timeout_ms
    body.push(2); // one topic
    body.extend_from_slice(&topic_id);
    body.push(2); // one partition
    body.extend_from_slice(&0i32.to_be_bytes());
    put_uvarint(&mut body, records.len() as u32 + 1);
    body.extend_from_slice(records);
    body.push(0); // partition tagged fields
    body.push(0); // topic tagged fields
    body.push(0); // request tagged fields
    let mut frame = (body.len() as i32).to_be_bytes().to_vec();
    frame.extend_from_slice(&body);
    frame
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn produce_v13_topic_ids_through_kpress() {
    let broker = Arc::new(blocking(Broker::start).await);
    let kpress = Kpress::start(
        &broker,
        RewritePolicy::to_codec(Codec::Zstd, CompressionOptions::default()),
    )
    .await;

    // Java kafka-clients 4.1 sends Produce v13: kpress names the ids from the Metadata
    // responses it relays.
    let java_topic = "java-v13";
    let bootstrap = kpress.address();
    blocking(move || {
        let mut cmd = support::java("org.apache.kafka.tools.ProducerPerformance");
        cmd.args([
            "--topic",
            java_topic,
            "--num-records",
            "3000",
            "--record-size",
            "200",
            "--throughput",
            "-1",
            "--producer-props",
        ])
        .arg(format!("bootstrap.servers={bootstrap}"))
        .args([
            "compression.type=gzip",
            "linger.ms=50",
            "batch.size=65536",
            "acks=all",
        ]);
        run(cmd)
    })
    .await;
    let dump_broker = Arc::clone(&broker);
    let dump = blocking(move || dump_broker.dump_partition(java_topic, 0)).await;
    let batches: Vec<&str> = dump
        .lines()
        .filter(|l| l.contains("compresscodec:"))
        .collect();
    assert!(!batches.is_empty(), "nothing stored:\n{dump}");
    assert!(
        batches
            .iter()
            .all(|l| l.contains("compresscodec: zstd") && l.contains("isvalid: true")),
        "Java's gzip batches were not all stored as valid zstd:\n{dump}"
    );

    // Java's consumer in a group reads them back through kpress (FindCoordinator,
    // group protocol and Fetch all relayed).
    let consume_bootstrap = kpress.address();
    let consumed = blocking(move || {
        let mut cmd = support::java("org.apache.kafka.tools.consumer.ConsoleConsumer");
        cmd.args([
            "--bootstrap-server",
            &consume_bootstrap,
            "--topic",
            java_topic,
        ])
        .args([
            "--group",
            "java-group",
            "--from-beginning",
            "--max-messages",
            "3000",
        ])
        .args(["--timeout-ms", "60000"]);
        run(cmd)
    })
    .await;
    let lines = String::from_utf8_lossy(&consumed.stdout).lines().count();
    assert_eq!(lines, 3000, "Java consumer read {lines} of 3000 records");

    // A topic created behind kpress's back: its id is unknown to kpress until kpress
    // asks the broker itself.
    let hidden_topic = "created-behind-kpress";
    let direct = broker.address();
    blocking(move || {
        run_with_stdin(
            kcat(&["-P", "-b", &direct, "-t", hidden_topic]),
            b"first record, written directly\n",
        )
    })
    .await;
    let id_broker = Arc::clone(&broker);
    let ids = blocking(move || topic_ids_from_broker(&id_broker)).await;
    let topic_id = ids
        .iter()
        .find(|(_, name)| name == hidden_topic)
        .map(|(id, _)| *id)
        .expect("broker names the topic");
    let records: Vec<Record> = (0..200)
        .map(|i| Record::value(format!("record {i} sent by id, gzip, to be stored as zstd")))
        .collect();
    let batch = BatchBuilder::codec(Codec::Gzip)
        .build(&records)
        .expect("build gzip batch");
    let node_port = kpress.node_port_base + broker.node_id as u16;
    let response = blocking(move || {
        let mut stream =
            std::net::TcpStream::connect(("127.0.0.1", node_port)).expect("connect kpress node");
        stream
            .write_all(&produce_v13(77, topic_id, &batch))
            .expect("send Produce v13");
        read_frame(&mut stream)
    })
    .await;
    assert_eq!(&response[..4], &77i32.to_be_bytes(), "correlation id kept");
    let dump_broker = Arc::clone(&broker);
    let dump = blocking(move || dump_broker.dump_partition(hidden_topic, 0)).await;
    let batches: Vec<&str> = dump
        .lines()
        .filter(|l| l.contains("compresscodec:"))
        .collect();
    assert_eq!(batches.len(), 2, "{dump}");
    assert!(
        batches[1].contains("count: 200") && batches[1].contains("compresscodec: zstd"),
        "the batch sent by topic id was not stored as zstd:\n{dump}"
    );

    kpress.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_brokers_each_served_on_its_own_port() {
    let brokers = Arc::new(blocking(|| Broker::start_cluster(3)).await);
    // lz4 is not always smaller than snappy: allow growth so every batch changes codec.
    let policy = RewritePolicy {
        allow_growth: true,
        ..RewritePolicy::to_codec(Codec::Lz4, CompressionOptions::default())
    };
    let kpress = Kpress::start_for(&brokers, policy).await;
    let bootstrap = kpress.address();
    let topic = "spread";

    // Keyed records spread over 3 partitions, whose leaders are on different nodes:
    // librdkafka must reach each leader through kpress's port for that node.
    let sent: Vec<String> = (0..3000)
        .map(|i| format!("key{i}:value {i} with some repeated text text text"))
        .collect();
    let input = sent.join("\n") + "\n";
    let produce_bootstrap = bootstrap.clone();
    blocking(move || {
        run_with_stdin(
            kcat(&[
                "-P",
                "-b",
                &produce_bootstrap,
                "-t",
                topic,
                "-K",
                ":",
                "-z",
                "snappy",
                "-X",
                "linger.ms=100",
            ]),
            input.as_bytes(),
        )
    })
    .await;
    let consume_bootstrap = bootstrap.clone();
    let consumed = blocking(move || {
        run(kcat(&[
            "-C",
            "-b",
            &consume_bootstrap,
            "-t",
            topic,
            "-o",
            "beginning",
            "-e",
            "-q",
            "-K",
            ":",
            "-c",
            "3000",
        ]))
    })
    .await;
    let mut received: Vec<String> = String::from_utf8_lossy(&consumed.stdout)
        .lines()
        .map(str::to_owned)
        .collect();
    let mut expected = sent.clone();
    received.sort();
    expected.sort();
    assert_eq!(
        received, expected,
        "records read back through kpress differ"
    );

    // Every node holds a partition, stored as lz4 (the policy), not snappy.
    let dump_brokers = Arc::clone(&brokers);
    let dumps = blocking(move || {
        dump_brokers
            .iter()
            .map(|b| {
                let partitions = b.partitions_of(topic);
                let dumps: Vec<String> = partitions
                    .iter()
                    .map(|&p| b.dump_partition(topic, p))
                    .collect();
                (b.node_id, partitions, dumps.join("\n"))
            })
            .collect::<Vec<_>>()
    })
    .await;
    for (node_id, partitions, dump) in &dumps {
        assert!(!partitions.is_empty(), "node {node_id} leads no partition");
        let batches: Vec<&str> = dump
            .lines()
            .filter(|l| l.contains("compresscodec:"))
            .collect();
        assert!(!batches.is_empty(), "node {node_id} stored nothing");
        assert!(
            batches
                .iter()
                .all(|l| l.contains("compresscodec: lz4") && l.contains("isvalid: true")),
            "node {node_id}:\n{}",
            batches.join("\n")
        );
    }

    // The listing names kpress's three node ports and none of the brokers'.
    let listing = blocking(move || run(kcat(&["-L", "-b", &bootstrap]))).await;
    let listing = String::from_utf8_lossy(&listing.stdout).into_owned();
    for broker in brokers.iter() {
        let node_port = kpress.node_port_base + broker.node_id as u16;
        assert!(
            listing.contains(&format!(
                "broker {} at 127.0.0.1:{node_port}",
                broker.node_id
            )),
            "node {} missing:\n{listing}",
            broker.node_id
        );
        assert!(
            !listing.contains(&format!(":{}", broker.port)),
            "broker {} address leaked:\n{listing}",
            broker.node_id
        );
    }

    kpress.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sasl_plain_clients_authenticate_through_kpress() {
    // kpress has no credentials: its own Metadata request is refused, it serves anyway
    // and learns the node from the Metadata its authenticated clients receive.
    let broker = Arc::new(blocking(Broker::start_sasl_plain).await);
    let kpress = Kpress::start(
        &broker,
        RewritePolicy::to_codec(Codec::Zstd, CompressionOptions::default()),
    )
    .await;
    let bootstrap = kpress.address();
    let topic = "sasl-zstd";
    let sent = messages(1000);
    let sasl = [
        "-X",
        "security.protocol=SASL_PLAINTEXT",
        "-X",
        "sasl.mechanisms=PLAIN",
        "-X",
        "sasl.username=alice",
        "-X",
        "sasl.password=alice-secret",
    ];
    let input = sent.join("\n") + "\n";
    let produce_bootstrap = bootstrap.clone();
    blocking(move || {
        let mut cmd = kcat(&[
            "-P",
            "-b",
            &produce_bootstrap,
            "-t",
            topic,
            "-z",
            "gzip",
            "-X",
            "linger.ms=100",
        ]);
        cmd.args(sasl);
        run_with_stdin(cmd, input.as_bytes())
    })
    .await;
    let consume_bootstrap = bootstrap.clone();
    let consumed = blocking(move || {
        let mut cmd = kcat(&[
            "-C",
            "-b",
            &consume_bootstrap,
            "-t",
            topic,
            "-o",
            "beginning",
            "-e",
            "-q",
            "-c",
            "1000",
        ]);
        cmd.args(sasl);
        run(cmd)
    })
    .await;
    let received: Vec<String> = String::from_utf8_lossy(&consumed.stdout)
        .lines()
        .map(str::to_owned)
        .collect();
    assert_eq!(received, sent, "records read back through kpress differ");

    // A wrong password is refused by the broker, through kpress.
    let denied_bootstrap = bootstrap.clone();
    let denied = blocking(move || {
        kcat(&[
            "-L",
            "-b",
            &denied_bootstrap,
            "-X",
            "security.protocol=SASL_PLAINTEXT",
            "-X",
            "sasl.mechanisms=PLAIN",
            "-X",
            "sasl.username=alice",
            "-X",
            "sasl.password=wrong",
            "-m",
            "5",
        ])
        .output()
        .expect("run kcat")
    })
    .await;
    assert!(!denied.status.success(), "a wrong password was accepted");

    let dump_broker = Arc::clone(&broker);
    let dump = blocking(move || dump_broker.dump_partition(topic, 0)).await;
    let batches: Vec<&str> = dump
        .lines()
        .filter(|l| l.contains("compresscodec:"))
        .collect();
    assert!(!batches.is_empty(), "nothing stored:\n{dump}");
    assert!(
        batches
            .iter()
            .all(|l| l.contains("compresscodec: zstd") && l.contains("isvalid: true")),
        "{}",
        batches.join("\n")
    );
    kpress.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_3_9_broker_behind_kpress() {
    let broker = Arc::new(blocking(|| Broker::start_version(support::KAFKA_OLD_VERSION)).await);
    let kpress = Kpress::start(
        &broker,
        RewritePolicy::to_codec(Codec::Zstd, CompressionOptions::default()),
    )
    .await;
    let bootstrap = kpress.address();
    let topic = "old-broker";
    let sent = messages(1500);
    let input = sent.join("\n") + "\n";
    let produce_bootstrap = bootstrap.clone();
    blocking(move || {
        run_with_stdin(
            kcat(&[
                "-P",
                "-b",
                &produce_bootstrap,
                "-t",
                topic,
                "-z",
                "snappy",
                "-X",
                "linger.ms=100",
            ]),
            input.as_bytes(),
        )
    })
    .await;
    let consumed = blocking(move || {
        run(kcat(&[
            "-C",
            "-b",
            &bootstrap,
            "-t",
            topic,
            "-o",
            "beginning",
            "-e",
            "-q",
            "-c",
            "1500",
        ]))
    })
    .await;
    let received: Vec<String> = String::from_utf8_lossy(&consumed.stdout)
        .lines()
        .map(str::to_owned)
        .collect();
    assert_eq!(received, sent, "records read back through kpress differ");
    let dump_broker = Arc::clone(&broker);
    let dump = blocking(move || dump_broker.dump_partition(topic, 0)).await;
    let batches: Vec<&str> = dump
        .lines()
        .filter(|l| l.contains("compresscodec:"))
        .collect();
    assert!(!batches.is_empty(), "nothing stored:\n{dump}");
    assert!(
        batches
            .iter()
            .all(|l| l.contains("compresscodec: zstd") && l.contains("isvalid: true")),
        "{}",
        batches.join("\n")
    );
    kpress.stop().await;
}
