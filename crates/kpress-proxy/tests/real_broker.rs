//! kpress in front of a real Apache Kafka broker with real librdkafka clients (kcat):
//! gzip batches produced through kpress are stored as zstd (the topic's policy), read
//! back intact through kpress, and no real broker address reaches the client.

mod support;

use std::net::SocketAddr;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

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
        let port = free_port();
        // Node N is served on base + N: pick a free port for the broker's node.
        let node_port_base = free_port() - broker.node_id as u16;
        let settings = ProxySettings {
            bind: SocketAddr::from(([127, 0, 0, 1], port)),
            advertised_host: "127.0.0.1".into(),
            node_port_base,
            bootstrap_servers: vec![broker.address()],
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
