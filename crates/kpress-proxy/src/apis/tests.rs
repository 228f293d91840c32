//! kpress's handlers other than Produce on a connection served over in-memory
//! streams: broker addresses, the ApiVersions answer, the SaslHandshake v0 refusal.

use std::sync::Arc;

use bytes::BytesMut;
use kpress_batch::RewritePolicy;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::error::{ConnectionError, Fault};
use crate::tests::*;

// Broker addresses in responses.

#[tokio::test]
async fn metadata_addresses_are_rewritten_and_node_listener_bound_first() {
    use kafka_protocol::messages::metadata_response::{MetadataResponse, MetadataResponseBroker};
    use kafka_protocol::messages::BrokerId;
    use kafka_protocol::protocol::{Encodable, StrBytes};

    let node_port_base = {
        let probe = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        probe.local_addr().unwrap().port() - 5
    };
    let shared = shared_with(RewritePolicy::default(), 1 << 22, node_port_base);
    let mut h = start(Arc::clone(&shared));
    // Metadata v12, header v2: tagged fields after the null client id.
    let mut req = Vec::new();
    req.extend_from_slice(&3i16.to_be_bytes());
    req.extend_from_slice(&12i16.to_be_bytes());
    req.extend_from_slice(&41i32.to_be_bytes());
    req.extend_from_slice(&(-1i16).to_be_bytes());
    req.extend_from_slice(&[0, 0, 0, 0, 0]);
    h.client.write_all(&frame(&req)).await.unwrap();
    read_exact_frame(&mut h.broker).await;

    let mut body = BytesMut::new();
    MetadataResponse::default()
        .with_brokers(vec![MetadataResponseBroker::default()
            .with_node_id(BrokerId(5))
            .with_host(StrBytes::from_static_str("10.1.2.3"))
            .with_port(9092)])
        .encode(&mut body, 12)
        .unwrap();
    let mut resp = 41i32.to_be_bytes().to_vec();
    resp.push(0); // response header v1: no tagged fields
    resp.extend_from_slice(&body);
    h.broker.write_all(&frame(&resp)).await.unwrap();

    let relayed = read_exact_frame(&mut h.client).await;
    let text = String::from_utf8_lossy(&relayed);
    assert!(!text.contains("10.1.2.3"), "real address leaked");
    assert!(text.contains("kpress.test"));
    let port = i32::from(node_port_base) + 5;
    assert!(
        relayed.windows(4).any(|w| w == port.to_be_bytes()),
        "node port missing"
    );
    // The node's listener exists before the client could use the address.
    assert!(tokio::net::TcpStream::connect(("127.0.0.1", port as u16))
        .await
        .is_ok());
    assert_eq!(
        shared.cluster.node_address(5).map(|a| a.to_string()),
        Some("10.1.2.3:9092".to_owned())
    );
}

// ApiVersions.

#[tokio::test]
async fn api_versions_newer_than_kpress_parses_is_answered_unsupported_in_order() {
    let mut h = start(shared_with(RewritePolicy::default(), 1 << 22, 30000));
    let heartbeat = request(HEARTBEAT, 3, 1, b"before");
    h.client.write_all(&heartbeat).await.unwrap();
    // ApiVersions v5, header v2: client id "c" (compact: none here, classic
    // string in header v2), no tagged fields.
    let mut api_versions = Vec::new();
    api_versions.extend_from_slice(&18i16.to_be_bytes());
    api_versions.extend_from_slice(&5i16.to_be_bytes());
    api_versions.extend_from_slice(&2i32.to_be_bytes());
    api_versions.extend_from_slice(&(-1i16).to_be_bytes());
    api_versions.push(0);
    api_versions.extend_from_slice(&[0, 0, 0]);
    h.client.write_all(&frame(&api_versions)).await.unwrap();
    // Only the heartbeat reaches the broker.
    assert_eq!(read_exact_frame(&mut h.broker).await, heartbeat);
    h.broker.write_all(&response(1, b"hb")).await.unwrap();
    assert_eq!(read_exact_frame(&mut h.client).await, response(1, b"hb"));
    let answer = read_exact_frame(&mut h.client).await;
    // Correlation id 2, UNSUPPORTED_VERSION (35), one entry: ApiVersions 0..=4.
    assert_eq!(
        answer,
        [
            &[0, 0, 0, 16][..],
            &2i32.to_be_bytes(),
            &35i16.to_be_bytes(),
            &1i32.to_be_bytes(),
            &18i16.to_be_bytes(),
            &0i16.to_be_bytes(),
            &4i16.to_be_bytes()
        ]
        .concat()
    );
    // The connection stays open for the client's retry.
    drop(h.client);
    h.task.await.unwrap().unwrap();
    let mut rest = Vec::new();
    h.broker.read_to_end(&mut rest).await.unwrap();
    assert!(rest.is_empty());
}

/// Records what a handler sees of who the client is, on each request.
#[derive(Debug, Default)]
struct WhoIsIt(std::sync::Mutex<Vec<(Option<String>, Option<String>)>>);

impl crate::handler::ApiHandler for Arc<WhoIsIt> {
    fn on_request(
        &self,
        conn: &Arc<crate::handler::ConnectionContext>,
        request: &mut crate::handler::RequestContext,
        frame: crate::handler::Frame,
    ) -> Result<crate::handler::RequestStep, crate::handler::HandlerError> {
        self.0.lock().unwrap().push((
            conn.client_software().map(|software| software.to_string()),
            request.client_id().map(str::to_owned),
        ));
        Ok(crate::handler::RequestStep::Forward(
            crate::handler::Message::original(frame),
        ))
    }
}

/// A request frame with header v1 (or v2 when `flexible`) naming `client_id`.
fn request_from(
    client_id: &str,
    api_key: i16,
    version: i16,
    correlation_id: i32,
    flexible: bool,
    body: &[u8],
) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(&api_key.to_be_bytes());
    out.extend_from_slice(&version.to_be_bytes());
    out.extend_from_slice(&correlation_id.to_be_bytes());
    out.extend_from_slice(&(client_id.len() as i16).to_be_bytes());
    out.extend_from_slice(client_id.as_bytes());
    if flexible {
        out.push(0); // no tagged fields
    }
    out.extend_from_slice(body);
    frame(&out)
}

#[tokio::test]
async fn handlers_see_the_software_api_versions_named_and_each_client_id() {
    let who = Arc::new(WhoIsIt::default());
    let handlers = crate::Handlers::kpress().register(HEARTBEAT, Arc::clone(&who));
    let mut h = start(shared_with_handlers(
        Arc::new(RewritePolicy::default()),
        settings(1 << 22, 30000),
        handlers,
    ));
    let before = request_from("app-1", HEARTBEAT, 3, 1, false, b"");
    h.client.write_all(&before).await.unwrap();
    assert_eq!(read_exact_frame(&mut h.broker).await, before);
    // ApiVersions v3: client_software_name "librdkafka", client_software_version
    // "2.6.1" (compact strings), no tagged fields.
    let mut body = vec![11];
    body.extend_from_slice(b"librdkafka");
    body.push(6);
    body.extend_from_slice(b"2.6.1");
    body.push(0);
    let api_versions = request_from("app-1", 18, 3, 2, true, &body);
    h.client.write_all(&api_versions).await.unwrap();
    assert_eq!(read_exact_frame(&mut h.broker).await, api_versions);
    let after = request_from("app-2", HEARTBEAT, 3, 3, false, b"");
    h.client.write_all(&after).await.unwrap();
    assert_eq!(read_exact_frame(&mut h.broker).await, after);
    // Software that Kafka would refuse is not kept: the last good one stays.
    let mut bad = vec![4];
    bad.extend_from_slice(b"a b");
    bad.extend_from_slice(&[2, b'1', 0]);
    let refused = request_from("app-2", 18, 3, 4, true, &bad);
    h.client.write_all(&refused).await.unwrap();
    assert_eq!(read_exact_frame(&mut h.broker).await, refused);
    let last = request(HEARTBEAT, 3, 5, b"");
    h.client.write_all(&last).await.unwrap();
    assert_eq!(read_exact_frame(&mut h.broker).await, last);

    let software = Some("librdkafka/2.6.1".to_owned());
    assert_eq!(
        *who.0.lock().unwrap(),
        [
            (None, Some("app-1".to_owned())),
            (software.clone(), Some("app-2".to_owned())),
            (software, None),
        ]
    );
}

// SaslHandshake.

#[tokio::test]
async fn legacy_sasl_handshake_v0_is_refused_clearly() {
    let mut h = start(shared_with(RewritePolicy::default(), 1 << 22, 30000));
    h.client
        .write_all(&request(17, 0, 1, &[0, 5, b'P', b'L', b'A', b'I', b'N']))
        .await
        .unwrap();
    let err = h.task.await.unwrap().unwrap_err();
    assert!(matches!(err, ConnectionError::LegacySaslHandshake));
    assert_eq!(err.fault(), Fault::Client);
}
