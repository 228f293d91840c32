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
use kpress_batch::{Recompressor, RewritePolicy};
use kpress_codec::{Codec, CompressionOptions};
use kpress_protocol::{api_key, produce_acks, rewrite_produce, rewrite_response, ResponseObserver};
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

fn rewrite_any_produce(body: &[u8], version: i16) {
    let policy = RewritePolicy::to_codec(Codec::Lz4, CompressionOptions::default());
    let _ = produce_acks(body, version);
    let _ = rewrite_produce(
        body,
        0,
        version,
        &policy,
        &name_all,
        &mut Recompressor::new(),
    );
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
}
