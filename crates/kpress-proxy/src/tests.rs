//! What in-crate tests share: a proxy's shared state and handlers without listeners
//! of its own, one connection served over in-memory streams (the broker side played
//! by the test, frame by frame), and the requests and batches the tests send.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use kpress_batch::builder::{BatchBuilder, Record};
use kpress_batch::{PolicyLookup, RewritePolicy};
use kpress_codec::Codec;
use tokio::io::{AsyncRead, AsyncReadExt, DuplexStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::connection::{serve, Relay};
use crate::error::ConnectionError;
use crate::handler::ConnectionContext;
use crate::listeners::Listeners;
use crate::settings::ProxySettings;
use crate::shared::{Shared, SharedConfig};
use crate::transport::UpstreamTarget;

/// The API the tests send when any request kpress forwards as read will do.
pub(crate) const HEARTBEAT: i16 = kafka_protocol::messages::ApiKey::Heartbeat as i16;

/// Settings for in-memory tests: 1 MiB frames, a connection may hold one.
pub(crate) fn settings(max_inflight_bytes: usize, node_port_base: u16) -> ProxySettings {
    let mut settings = ProxySettings::for_tests(
        SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 0),
        "kpress.test".into(),
        node_port_base,
        vec!["127.0.0.1:1".into()],
    );
    settings.limits.max_frame_bytes = 1 << 20;
    settings.limits.max_connection_inflight_bytes = 1 << 20;
    settings.limits.max_inflight_bytes = max_inflight_bytes;
    // Tests that hold the work slots decide themselves how long rewrites wait.
    settings.produce.max_rewrite_wait = Duration::from_secs(60);
    settings
}

/// A test's proxy: its shared state, as the tests inspect it, and its handlers.
pub(crate) type Proxy = Arc<Listeners>;

impl std::ops::Deref for Listeners {
    type Target = Shared;

    fn deref(&self) -> &Shared {
        &self.shared
    }
}

pub(crate) fn shared_from(policy: RewritePolicy, settings: ProxySettings) -> Proxy {
    shared_with_handlers(Arc::new(policy), settings, crate::Handlers::kpress())
}

pub(crate) fn shared_with_handlers(
    policies: Arc<dyn PolicyLookup>,
    settings: ProxySettings,
    handlers: crate::Handlers,
) -> Proxy {
    let (shared, control) = Shared::new(SharedConfig::for_tests(policies, settings)).unwrap();
    // The shutdown senders live for the whole test: dropping them means shutdown.
    std::mem::forget(control);
    Arc::new(Listeners {
        shared,
        handlers: Arc::new(handlers),
    })
}

pub(crate) fn shared_with(
    policy: RewritePolicy,
    max_inflight_bytes: usize,
    node_port_base: u16,
) -> Proxy {
    shared_from(policy, settings(max_inflight_bytes, node_port_base))
}

pub(crate) struct Harness {
    pub(crate) client: DuplexStream,
    pub(crate) broker: DuplexStream,
    pub(crate) shutdown: watch::Sender<bool>,
    pub(crate) task: JoinHandle<Result<(), ConnectionError>>,
}

pub(crate) fn start(proxy: Proxy) -> Harness {
    let (client, proxy_client_side) = tokio::io::duplex(1 << 16);
    let (proxy_broker_side, broker) = tokio::io::duplex(1 << 16);
    let (shutdown, shutdown_rx) = watch::channel(false);
    let conn = ConnectionContext::new(
        Arc::clone(&proxy.shared),
        proxy.clone(),
        SocketAddr::from(([127, 0, 0, 1], 5555)),
        UpstreamTarget::Bootstrap,
    );
    let task = tokio::spawn(async move {
        let relay = Relay {
            handlers: &proxy.handlers,
            limits: proxy.frame_limits(),
            idle_timeout: proxy.limits.idle_timeout,
            status: &proxy.lifecycle.status,
        };
        serve(
            proxy_client_side,
            proxy_broker_side,
            conn,
            relay,
            shutdown_rx,
        )
        .await
    });
    Harness {
        client,
        broker,
        shutdown,
        task,
    }
}

pub(crate) fn frame(body: &[u8]) -> Vec<u8> {
    let mut out = (body.len() as i32).to_be_bytes().to_vec();
    out.extend_from_slice(body);
    out
}

/// A request of `api_key` v`version` with header v1 and `body`.
pub(crate) fn request(api_key: i16, version: i16, correlation_id: i32, body: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(&api_key.to_be_bytes());
    out.extend_from_slice(&version.to_be_bytes());
    out.extend_from_slice(&correlation_id.to_be_bytes());
    out.extend_from_slice(&(-1i16).to_be_bytes()); // null client id
    out.extend_from_slice(body);
    frame(&out)
}

/// A Produce v7 request for topic `t` partition 0 holding `records`.
pub(crate) fn produce_v7(correlation_id: i32, acks: i16, records: &[u8]) -> Vec<u8> {
    produce(7, correlation_id, acks, records)
}

/// A Produce request (v3-v8: header v1, classic encoding) for topic `t`
/// partition 0 holding `records`.
pub(crate) fn produce(version: i16, correlation_id: i32, acks: i16, records: &[u8]) -> Vec<u8> {
    let mut body = Vec::new();
    body.extend_from_slice(&(-1i16).to_be_bytes()); // transactional_id
    body.extend_from_slice(&acks.to_be_bytes());
    body.extend_from_slice(&1000i32.to_be_bytes());
    body.extend_from_slice(&1i32.to_be_bytes()); // topics
    body.extend_from_slice(&1i16.to_be_bytes());
    body.push(b't');
    body.extend_from_slice(&1i32.to_be_bytes()); // partitions
    body.extend_from_slice(&0i32.to_be_bytes());
    body.extend_from_slice(&(records.len() as i32).to_be_bytes());
    body.extend_from_slice(records);
    request(0, version, correlation_id, &body)
}

pub(crate) fn gzip_batch() -> Vec<u8> {
    let records: Vec<Record> = (0..50)
        .map(|i| Record::value(format!("value {i} value value value value")))
        .collect();
    BatchBuilder::codec(Codec::Gzip).build(&records).unwrap()
}

/// A response frame with header v0.
pub(crate) fn response(correlation_id: i32, body: &[u8]) -> Vec<u8> {
    let mut out = correlation_id.to_be_bytes().to_vec();
    out.extend_from_slice(body);
    frame(&out)
}

/// A request a stand-in broker read: its header's first fields, and the frame after
/// its size.
pub(crate) struct ReadRequest {
    pub(crate) api_key: i16,
    pub(crate) version: i16,
    pub(crate) correlation_id: i32,
    pub(crate) frame: Vec<u8>,
}

/// The next request a stand-in broker reads from `stream`; `None` once the peer closed.
pub(crate) async fn read_request<S: AsyncRead + Unpin>(stream: &mut S) -> Option<ReadRequest> {
    let mut size = [0u8; 4];
    stream.read_exact(&mut size).await.ok()?;
    let mut frame = vec![0u8; i32::from_be_bytes(size) as usize];
    stream.read_exact(&mut frame).await.unwrap();
    Some(ReadRequest {
        api_key: i16::from_be_bytes([frame[0], frame[1]]),
        version: i16::from_be_bytes([frame[2], frame[3]]),
        correlation_id: i32::from_be_bytes([frame[4], frame[5], frame[6], frame[7]]),
        frame,
    })
}

pub(crate) async fn read_exact_frame(stream: &mut DuplexStream) -> Vec<u8> {
    let mut size = [0u8; 4];
    stream.read_exact(&mut size).await.unwrap();
    let mut body = vec![0u8; i32::from_be_bytes(size) as usize];
    stream.read_exact(&mut body).await.unwrap();
    let mut out = size.to_vec();
    out.extend_from_slice(&body);
    out
}

/// A Produce v13 request (header v2, flexible) for the topic with id `topic_id`,
/// partition 0 holding `records`.
pub(crate) fn produce_v13(correlation_id: i32, topic_id: [u8; 16], records: &[u8]) -> Vec<u8> {
    fn uvarint(out: &mut Vec<u8>, mut n: usize) {
        while n >= 0x80 {
            out.push((n as u8) | 0x80);
            n >>= 7;
        }
        out.push(n as u8);
    }
    let mut out = Vec::new();
    out.extend_from_slice(&0i16.to_be_bytes());
    out.extend_from_slice(&13i16.to_be_bytes());
    out.extend_from_slice(&correlation_id.to_be_bytes());
    out.extend_from_slice(&(-1i16).to_be_bytes()); // null client id
    out.push(0); // header tagged fields
    out.push(0); // null transactional_id
    out.extend_from_slice(&(-1i16).to_be_bytes()); // acks
    out.extend_from_slice(&1000i32.to_be_bytes());
    uvarint(&mut out, 2); // one topic
    out.extend_from_slice(&topic_id);
    uvarint(&mut out, 2); // one partition
    out.extend_from_slice(&0i32.to_be_bytes());
    uvarint(&mut out, records.len() + 1);
    out.extend_from_slice(records);
    out.extend_from_slice(&[0, 0, 0]); // partition, topic and request tagged fields
    frame(&out)
}

/// The codec of the one batch a forwarded Produce request holds: the only offset
/// where a whole batch with a valid CRC parses.
pub(crate) fn forwarded_codec(forwarded: &[u8]) -> Option<Codec> {
    (0..forwarded.len()).find_map(|at| {
        let batch = kpress_batch::RecordBatch::parse(&forwarded[at..]).ok()?;
        batch.crc_is_valid().then(|| batch.codec()).flatten()
    })
}

/// The next frame on `stream`, within 30 s: on real time, a test that fails fails
/// rather than hangs.
pub(crate) async fn next_frame(stream: &mut DuplexStream) -> Vec<u8> {
    tokio::time::timeout(Duration::from_secs(30), read_exact_frame(stream))
        .await
        .expect("a frame within 30 s")
}
