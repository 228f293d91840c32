//! Fuzz-style properties: no input, random or a damaged real message, makes
//! kpress-protocol panic (or allocate from a hostile count).

use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::metadata_response::{MetadataResponseBroker, MetadataResponseTopic};
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{
    fetch_response, BrokerId, FetchResponse, MetadataResponse, ProduceRequest, TopicName,
};
use kafka_protocol::protocol::{Encodable, StrBytes};
use kpress_batch::builder::{BatchBuilder, Record};
use kpress_batch::{Recompressor, RewritePolicy, RewriteStats};
use kpress_codec::{Codec, CompressionOptions};
use kpress_protocol::{
    api_key, produce_acks, rewrite_produce_with, rewrite_response, RecordsRewriter,
    ResponseObserver,
};
use proptest::prelude::*;
use uuid::Uuid;

struct Proxy;

impl ResponseObserver for Proxy {
    fn broker(&mut self, node_id: i32, _host: &str, _port: i32) -> (String, i32) {
        ("kpress".to_owned(), node_id)
    }
    fn topic(&mut self, _id: [u8; 16], _name: &str) {}
}

fn name_all(_: &[u8; 16]) -> Option<Arc<str>> {
    Some(Arc::from("t"))
}

/// A real-shaped Produce body at `version` with two compressible batches.
fn produce_body(version: i16) -> Vec<u8> {
    let records: Vec<Record> = (0..5)
        .map(|i| Record::value(format!("value {i} ").repeat(20)))
        .collect();
    let batch = Bytes::from(BatchBuilder::codec(Codec::Gzip).build(&records).unwrap());
    let mut topic = TopicProduceData::default().with_partition_data(vec![
        PartitionProduceData::default()
            .with_index(0)
            .with_records(Some(batch.clone())),
        PartitionProduceData::default()
            .with_index(1)
            .with_records(Some(batch)),
    ]);
    if version >= 13 {
        topic.topic_id = Uuid::from_bytes([5; 16]);
    } else {
        topic.name = TopicName(StrBytes::from_static_str("t"));
    }
    let mut body = BytesMut::new();
    ProduceRequest::default()
        .with_acks(-1)
        .with_topic_data(vec![topic])
        .encode(&mut body, version)
        .unwrap();
    body.to_vec()
}

fn metadata_body(version: i16) -> Vec<u8> {
    let mut topic =
        MetadataResponseTopic::default().with_name(Some(TopicName(StrBytes::from_static_str("t"))));
    if version >= 10 {
        topic.topic_id = Uuid::from_bytes([5; 16]);
    }
    let response = MetadataResponse::default()
        .with_brokers(vec![MetadataResponseBroker::default()
            .with_node_id(BrokerId(1))
            .with_host(StrBytes::from_static_str("b1"))
            .with_port(9092)])
        .with_topics(vec![topic]);
    let mut body = BytesMut::new();
    response.encode(&mut body, version).unwrap();
    body.to_vec()
}

fn fetch_body(version: i16) -> Vec<u8> {
    let mut response =
        FetchResponse::default().with_node_endpoints(vec![fetch_response::NodeEndpoint::default()
            .with_node_id(BrokerId(2))
            .with_host(StrBytes::from_static_str("b2"))
            .with_port(9092)]);
    response.responses = vec![fetch_response::FetchableTopicResponse::default()
        .with_topic_id(Uuid::from_bytes([5; 16]))
        .with_partitions(vec![fetch_response::PartitionData::default()
            .with_records(Some(Bytes::from_static(&[1; 64])))])];
    let mut body = BytesMut::new();
    response.encode(&mut body, version).unwrap();
    body.to_vec()
}

fn encoded<T: Encodable>(message: T, version: i16) -> Vec<u8> {
    let mut body = BytesMut::new();
    message.encode(&mut body, version).unwrap();
    body.to_vec()
}

/// A real-shaped body of every other response kind kpress rewrites.
fn other_response_body(kind: usize, version: i16) -> (i16, i16, Vec<u8>) {
    use kafka_protocol::messages::api_versions_response::{ApiVersion, SupportedFeatureKey};
    use kafka_protocol::messages::describe_cluster_response::DescribeClusterBroker;
    use kafka_protocol::messages::find_coordinator_response::Coordinator;
    use kafka_protocol::messages::{
        produce_response, share_fetch_response, ApiVersionsResponse, DescribeClusterResponse,
        FindCoordinatorResponse, ProduceResponse, ShareFetchResponse,
    };
    let host = || StrBytes::from_static_str("b1");
    match kind {
        0 => {
            let version = version.min(6);
            let response = if version < 4 {
                FindCoordinatorResponse::default()
                    .with_node_id(BrokerId(1))
                    .with_host(host())
                    .with_port(9092)
            } else {
                FindCoordinatorResponse::default().with_coordinators(vec![Coordinator::default()
                    .with_key(StrBytes::from_static_str("g"))
                    .with_node_id(BrokerId(1))
                    .with_host(host())
                    .with_port(9092)])
            };
            (
                api_key::FIND_COORDINATOR,
                version,
                encoded(response, version),
            )
        }
        1 => {
            let version = version.min(2);
            let response = DescribeClusterResponse::default().with_brokers(vec![
                DescribeClusterBroker::default()
                    .with_broker_id(BrokerId(1))
                    .with_host(host())
                    .with_port(9092),
            ]);
            (
                api_key::DESCRIBE_CLUSTER,
                version,
                encoded(response, version),
            )
        }
        2 => {
            let version = version.min(4);
            let mut response = ApiVersionsResponse::default().with_api_keys(vec![
                ApiVersion::default()
                    .with_api_key(0)
                    .with_min_version(3)
                    .with_max_version(20),
                ApiVersion::default()
                    .with_api_key(1)
                    .with_min_version(4)
                    .with_max_version(20),
            ]);
            if version >= 3 {
                response.supported_features = vec![SupportedFeatureKey::default()
                    .with_name(StrBytes::from_static_str("metadata.version"))
                    .with_min_version(1)
                    .with_max_version(20)];
            }
            (api_key::API_VERSIONS, version, encoded(response, version))
        }
        3 => {
            let version = 10 + version % 4;
            let mut topic = produce_response::TopicProduceResponse::default()
                .with_partition_responses(vec![
                    produce_response::PartitionProduceResponse::default(),
                ]);
            if version < 13 {
                topic.name = TopicName(StrBytes::from_static_str("t"));
            }
            let response = ProduceResponse::default()
                .with_responses(vec![topic])
                .with_node_endpoints(vec![produce_response::NodeEndpoint::default()
                    .with_node_id(BrokerId(1))
                    .with_host(host())
                    .with_port(9092)]);
            (api_key::PRODUCE, version, encoded(response, version))
        }
        _ => {
            let response = ShareFetchResponse::default()
                .with_responses(vec![
                    share_fetch_response::ShareFetchableTopicResponse::default()
                        .with_partitions(vec![share_fetch_response::PartitionData::default()
                            .with_records(Some(Bytes::from_static(&[7; 32])))]),
                ])
                .with_node_endpoints(vec![share_fetch_response::NodeEndpoint::default()
                    .with_node_id(BrokerId(1))
                    .with_host(host())
                    .with_port(9092)]);
            (api_key::SHARE_FETCH, 1, encoded(response, 1))
        }
    }
}

/// Applies random damage: overwrite bytes, truncate, insert.
fn damage(
    mut body: Vec<u8>,
    edits: &[(usize, u8)],
    cut: Option<usize>,
    insert: Option<(usize, Vec<u8>)>,
) -> Vec<u8> {
    if body.is_empty() {
        return body;
    }
    for &(at, byte) in edits {
        let len = body.len();
        body[at % len] = byte;
    }
    if let Some((at, bytes)) = insert {
        let at = at % (body.len() + 1);
        body.splice(at..at, bytes);
    }
    if let Some(cut) = cut {
        body.truncate(cut % (body.len() + 1));
    }
    body
}

/// Recompresses every partition to lz4: the walk, the splice and the batch
/// rewrite all see the damaged bytes.
struct ToLz4(Recompressor);

impl RecordsRewriter for ToLz4 {
    fn rewrite_records(&mut self, _: &str, records: &[u8], out: &mut Vec<u8>) -> bool {
        let policy = RewritePolicy::to_codec(Codec::Lz4, CompressionOptions::default());
        let mut stats = RewriteStats::default();
        self.0.rewrite_records(records, &policy, out, &mut stats);
        stats.batches_rewritten > 0
    }
}

fn rewrite_any_produce(body: &[u8], version: i16) {
    let _ = produce_acks(body, version);
    let _ = rewrite_produce_with(body, 0, version, &name_all, &mut ToLz4(Recompressor::new()));
}

/// Every (api key, version) kpress looks at, plus out-of-range versions.
fn response_kinds() -> impl Strategy<Value = (i16, i16)> {
    prop_oneof![
        (Just(api_key::METADATA), -1i16..15),
        (Just(api_key::FIND_COORDINATOR), -1i16..8),
        (Just(api_key::DESCRIBE_CLUSTER), -1i16..4),
        (Just(api_key::API_VERSIONS), -1i16..6),
        (Just(api_key::PRODUCE), 0i16..15),
        (Just(api_key::FETCH), 0i16..20),
        (Just(api_key::SHARE_FETCH), 0i16..3),
        (Just(api_key::SHARE_ACKNOWLEDGE), 0i16..3),
    ]
}

fn edits() -> impl Strategy<Value = Vec<(usize, u8)>> {
    prop::collection::vec((any::<usize>(), any::<u8>()), 0..4)
}

fn insert() -> impl Strategy<Value = Option<(usize, Vec<u8>)>> {
    prop::option::of((any::<usize>(), prop::collection::vec(any::<u8>(), 1..8)))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn random_produce_bodies_never_panic(body in prop::collection::vec(any::<u8>(), 0..256), version in 0i16..16) {
        rewrite_any_produce(&body, version);
    }

    #[test]
    fn damaged_produce_requests_never_panic(
        version in 3i16..=13,
        edits in edits(),
        cut in prop::option::of(any::<usize>()),
        insert in insert(),
    ) {
        let body = damage(produce_body(version), &edits, cut, insert);
        rewrite_any_produce(&body, version);
    }

    #[test]
    fn random_responses_never_panic(kind in response_kinds(), body in prop::collection::vec(any::<u8>(), 0..256)) {
        let _ = rewrite_response(kind.0, kind.1, &body, &mut Proxy);
    }

    #[test]
    fn damaged_responses_never_panic(
        version in 0i16..=13,
        fetch_version in 16i16..=18,
        edits in edits(),
        cut in prop::option::of(any::<usize>()),
        insert in insert(),
    ) {
        let metadata = damage(metadata_body(version), &edits, cut, insert.clone());
        let _ = rewrite_response(api_key::METADATA, version, &metadata, &mut Proxy);
        let fetch = damage(fetch_body(fetch_version), &edits, cut, insert);
        let _ = rewrite_response(api_key::FETCH, fetch_version, &fetch, &mut Proxy);
    }

    #[test]
    fn other_damaged_responses_never_panic(
        kind in 0usize..5,
        version in 0i16..=13,
        edits in edits(),
        cut in prop::option::of(any::<usize>()),
        insert in insert(),
    ) {
        let (api, version, body) = other_response_body(kind, version);
        let body = damage(body, &edits, cut, insert);
        let _ = rewrite_response(api, version, &body, &mut Proxy);
    }
}

/// Found by the `response_rewrite` fuzz target: an ApiVersions v3 body whose known
/// tag 3 (a bool) declares more than one byte. kafka-protocol would read one byte and
/// take the rest as further tagged fields, sizing a vector from them; the guard
/// refuses the body first.
#[test]
fn api_versions_tags_declaring_the_wrong_size_are_refused() {
    let body = [
        0x4f, 0xcf, 0x01, 0xf7, 0xff, 0xff, 0xff, 0x02, 0x03, 0x08, 0x02, 0x02, 0xa3, 0x10, 0xff,
        0xe4, 0xff, 0xff, 0x33, 0x0b, 0xff, 0x05, 0xff, 0x23, 0xff, 0x10, 0x00, 0x00, 0x00, 0xb0,
        0x02,
    ];
    let refused = rewrite_response(18, 3, &body, &mut Proxy);
    assert!(refused.is_err(), "{refused:?}");
    // Well-sized tags 1 (int64) and 3 (bool) still pass: error 0, no apis,
    // throttle 0, two tags.
    let mut good = vec![0, 0, 1, 0, 0, 0, 0, 2];
    good.extend_from_slice(&[1, 8, 0, 0, 0, 0, 0, 0, 0, 7]);
    good.extend_from_slice(&[3, 1, 1]);
    assert!(rewrite_response(18, 3, &good, &mut Proxy).is_ok());
    let mut short = vec![0, 0, 1, 0, 0, 0, 0, 1];
    short.extend_from_slice(&[1, 2, 0, 7]);
    assert!(rewrite_response(18, 3, &short, &mut Proxy).is_err());
}

/// Found by the `response_rewrite` fuzz target: tags over `i32::MAX` (Kafka reads
/// tags as int32) were accepted, then re-encoded into bodies kpress could not read
/// back. Such tags, sizes over `i32::MAX` and tags out of ascending order are refused.
#[test]
fn tagged_fields_kafka_cannot_read_are_refused() {
    // FindCoordinator v3 (flexible): throttle, error, null message, node, host, port,
    // then the top-level tagged fields.
    let mut body = vec![0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 2, b'h', 0, 0, 0x23, 0x84];
    let valid_tail = [1, 5, 1, 0];
    let mut good = body.clone();
    good.extend_from_slice(&valid_tail);
    assert!(rewrite_response(10, 3, &good, &mut Proxy).is_ok());
    // One tagged field, tag 2^31 (uvarint 80 80 80 80 08), size 0.
    body.extend_from_slice(&[1, 0x80, 0x80, 0x80, 0x80, 0x08, 0]);
    assert!(rewrite_response(10, 3, &body, &mut Proxy).is_err());
    // Two fields out of order (tag 5 then tag 1).
    let mut unordered = good[..good.len() - valid_tail.len()].to_vec();
    unordered.extend_from_slice(&[2, 5, 0, 1, 0]);
    assert!(rewrite_response(10, 3, &unordered, &mut Proxy).is_err());
}
