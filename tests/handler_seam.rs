//! The handler seam against a real broker: a handler for an API kpress leaves alone
//! (ListOffsets) is registered on the proxy from outside the crate. It counts the
//! requests and tags each response in a metric by the error code the broker answered,
//! while the bytes reach the client as the broker sent them.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use kafka_protocol::messages::list_offsets_request::{
    ListOffsetsPartition, ListOffsetsRequest, ListOffsetsTopic,
};
use kafka_protocol::messages::{
    ApiKey, BrokerId, ListOffsetsResponse, RequestHeader as KafkaRequestHeader, TopicName,
};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use kpress_protocol::frame::response_header_len;
use kpress_proxy::handler::{
    ApiHandler, ConnectionContext, Frame, HandlerError, Message, RequestContext, RequestStep,
    ResponseStep,
};
use kpress_proxy::{
    Controls, Handlers, LimitSettings, ListenerSettings, NodeRouting, PolicySnapshot,
    ProduceSettings, ProxySettings, TopicConfigCache, UpstreamSettings,
};
use kpress_tests::java_client::JavaClient;
use kpress_tests::ports::{free_port, free_port_range, wait_for_port};
use kpress_tests::{kafka_version, KafkaCluster};

const LIST_OFFSETS: i16 = ApiKey::ListOffsets as i16;
const VERSION: i16 = 1;

/// Counts ListOffsets requests; tags each response by its first partition's error.
#[derive(Debug, Default)]
struct ListOffsetsTally {
    requests: AtomicU64,
}

impl ApiHandler for ListOffsetsTally {
    fn on_request(
        &self,
        _conn: &Arc<ConnectionContext>,
        request: &mut RequestContext,
        frame: Frame,
    ) -> Result<RequestStep, HandlerError> {
        self.requests.fetch_add(1, Ordering::Relaxed);
        // Kept for the response step: the request's version, as the seam carries it.
        request.keep(request.api_version());
        Ok(RequestStep::Forward(Message::original(frame)))
    }

    fn on_response(
        &self,
        _conn: &Arc<ConnectionContext>,
        request: &mut RequestContext,
        frame: Frame,
    ) -> Result<ResponseStep, HandlerError> {
        let version = *request.kept::<i16>().expect("kept by the request step");
        let body = frame.body();
        let error = response_header_len(LIST_OFFSETS, version, body)
            .ok()
            .flatten()
            .and_then(|at| ListOffsetsResponse::decode(&mut &body[at..], version).ok())
            .and_then(|r| Some(r.topics.first()?.partitions.first()?.error_code))
            .map_or("unparsed".to_owned(), |code| match code {
                0 => "none".to_owned(),
                code => code.to_string(),
            });
        metrics::counter!("seam_list_offsets_responses_total", "error" => error).increment(1);
        Ok(ResponseStep::Relay(Message::original(frame)))
    }
}

fn list_offsets(correlation_id: i32, topic: &str) -> Vec<u8> {
    let mut out = BytesMut::new();
    KafkaRequestHeader::default()
        .with_request_api_key(LIST_OFFSETS)
        .with_request_api_version(VERSION)
        .with_correlation_id(correlation_id)
        .with_client_id(Some(StrBytes::from_static_str("seam-test")))
        .encode(&mut out, 1)
        .unwrap();
    ListOffsetsRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_topics(vec![ListOffsetsTopic::default()
            .with_name(TopicName(StrBytes::from_string(topic.to_owned())))
            .with_partitions(vec![ListOffsetsPartition::default()
                .with_partition_index(0)
                .with_timestamp(-1)])])
        .encode(&mut out, VERSION)
        .unwrap();
    let mut frame = (out.len() as i32).to_be_bytes().to_vec();
    frame.extend_from_slice(&out);
    frame
}

fn read_frame(stream: &mut TcpStream) -> Vec<u8> {
    let mut size = [0u8; 4];
    stream.read_exact(&mut size).unwrap();
    let mut body = vec![0u8; i32::from_be_bytes(size) as usize];
    stream.read_exact(&mut body).unwrap();
    body
}

fn settings(bind: SocketAddr, bootstrap: String) -> ProxySettings {
    ProxySettings {
        listener: ListenerSettings {
            bind,
            routing: NodeRouting::Ports {
                advertised_host: "127.0.0.1".into(),
                node_port_base: free_port_range(4),
            },
            tls: None,
            reuse_port: false,
        },
        upstream: UpstreamSettings {
            bootstrap_servers: vec![bootstrap],
            tls: None,
            login: None,
        },
        limits: LimitSettings {
            max_frame_bytes: 100 << 20,
            max_inflight_bytes: 256 << 20,
            max_connection_inflight_bytes: 100 << 20,
            max_connections: 100,
            frame_timeout: Duration::from_secs(30),
            idle_timeout: Duration::from_secs(600),
            max_topic_labels: 100,
        },
        produce: ProduceSettings {
            rewrite_before_auth: true,
            max_request_decompressed_bytes: 256 << 20,
            max_rewrite_wait: Duration::from_millis(500),
        },
        shutdown_grace: Duration::from_secs(1),
    }
}

#[test]
fn a_handler_registered_from_outside_counts_list_offsets_and_tags_responses() {
    let metrics = metrics_exporter_prometheus::PrometheusBuilder::new()
        .install_recorder()
        .expect("the test's metrics recorder");
    let cluster = KafkaCluster::start(kafka_version(), 1).expect("starting Kafka");
    JavaClient::new(kafka_version())
        .create_topic(&cluster.bootstrap(), "seam-offsets", 1, &[])
        .expect("topic created");

    let tally = Arc::new(ListOffsetsTally::default());
    let handlers = Handlers::kpress().register(LIST_OFFSETS, SharedTally(Arc::clone(&tally)));
    let bind = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let rules: Arc<dyn kpress_batch::PolicyLookup> =
        Arc::new(kpress_batch::RewritePolicy::default());
    let controls = Controls {
        shutdown: async {
            let _ = stopped.await;
        },
        reload_tls: tokio::sync::watch::channel(0).1,
        policies: tokio::sync::watch::channel(PolicySnapshot::rules_only(rules)).1,
        status: Arc::default(),
        topic_configs: Arc::new(TopicConfigCache::new(Duration::from_secs(30))),
    };
    let proxy = runtime.spawn(kpress_proxy::run_with(
        settings(bind, cluster.bootstrap()),
        controls,
        handlers,
    ));
    assert!(wait_for_port(bind, Duration::from_secs(30)), "kpress up");

    let mut client = TcpStream::connect(bind).unwrap();
    client
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    // Pipelined: a topic that exists and one that does not.
    client.write_all(&list_offsets(7, "seam-offsets")).unwrap();
    client.write_all(&list_offsets(8, "seam-missing")).unwrap();
    let known = read_frame(&mut client);
    let missing = read_frame(&mut client);
    assert_eq!(known[..4], 7i32.to_be_bytes());
    assert_eq!(missing[..4], 8i32.to_be_bytes());
    let answer = |frame: &[u8]| {
        ListOffsetsResponse::decode(&mut &frame[4..], VERSION)
            .expect("relayed as the broker sent it")
    };
    let partition = |r: ListOffsetsResponse| r.topics[0].partitions[0].clone();
    assert_eq!(partition(answer(&known)).error_code, 0);
    assert_eq!(partition(answer(&known)).offset, 0, "an empty partition");
    assert_eq!(
        partition(answer(&missing)).error_code,
        3,
        "UNKNOWN_TOPIC_OR_PARTITION"
    );

    assert_eq!(tally.requests.load(Ordering::Relaxed), 2);
    let rendered = metrics.render();
    for series in [
        "seam_list_offsets_responses_total{error=\"none\"} 1",
        "seam_list_offsets_responses_total{error=\"3\"} 1",
    ] {
        assert!(
            rendered.contains(series),
            "{series} missing from:\n{rendered}"
        );
    }
    // kpress's own handlers still run beside it: its request counter saw both.
    assert!(
        rendered.contains("kpress_requests_total{api=\"ListOffsets\"} 2"),
        "{rendered}"
    );

    drop(client);
    stop.send(()).unwrap();
    runtime
        .block_on(async { tokio::time::timeout(Duration::from_secs(10), proxy).await })
        .expect("kpress stopped")
        .unwrap()
        .unwrap();
}

/// The registered handler, sharing its tally with the test.
#[derive(Debug)]
struct SharedTally(Arc<ListOffsetsTally>);

impl ApiHandler for SharedTally {
    fn on_request(
        &self,
        conn: &Arc<ConnectionContext>,
        request: &mut RequestContext,
        frame: Frame,
    ) -> Result<RequestStep, HandlerError> {
        self.0.on_request(conn, request, frame)
    }

    fn on_response(
        &self,
        conn: &Arc<ConnectionContext>,
        request: &mut RequestContext,
        frame: Frame,
    ) -> Result<ResponseStep, HandlerError> {
        self.0.on_response(conn, request, frame)
    }
}
