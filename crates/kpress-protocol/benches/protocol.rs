//! What the protocol layer costs on top of recompression: walking and
//! splicing Produce requests (and listing v13 topic ids kpress cannot name),
//! scanning Fetch responses for NodeEndpoints,
//! rewriting Metadata. Records are opaque bytes here (no codec work).

use std::hint::black_box;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use kafka_protocol::messages::fetch_response::{FetchableTopicResponse, PartitionData};
use kafka_protocol::messages::metadata_response::{
    MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
};
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{
    BrokerId, FetchResponse, MetadataResponse, ProduceRequest, TopicName,
};
use kafka_protocol::protocol::{Encodable, StrBytes};
use kpress_protocol::{
    api_key, rewrite_produce_with, rewrite_response, RecordsRewriter, ResponseObserver,
    MAX_UNKNOWN_TOPIC_IDS,
};
use uuid::Uuid;

const PARTITIONS: i32 = 64;
const RECORDS_PER_PARTITION: usize = 16 * 1024; // 1 MiB per request or response

struct Keep;
impl RecordsRewriter for Keep {
    fn rewrite_records(&mut self, _: &str, _: &[u8], _: &mut Vec<u8>) -> bool {
        false
    }
}

/// Replaces each records field by its first half: a splice of every partition.
struct Halve;
impl RecordsRewriter for Halve {
    fn rewrite_records(&mut self, _: &str, records: &[u8], out: &mut Vec<u8>) -> bool {
        out.extend_from_slice(&records[..records.len() / 2]);
        true
    }
}

struct Proxy;
impl ResponseObserver for Proxy {
    fn broker(&mut self, node_id: i32, _: &str, _: i32) -> (String, i32) {
        ("kpress.example.com".to_owned(), 19_000 + node_id)
    }
    fn topic(&mut self, _: [u8; 16], _: &str) {}
}

fn produce_body(version: i16) -> Vec<u8> {
    let records = Bytes::from(vec![0x5a; RECORDS_PER_PARTITION]);
    let topics = (0..4)
        .map(|t| {
            TopicProduceData::default()
                .with_name(TopicName(StrBytes::from_string(format!("topic-{t}"))))
                .with_partition_data(
                    (0..PARTITIONS / 4)
                        .map(|p| {
                            PartitionProduceData::default()
                                .with_index(p)
                                .with_records(Some(records.clone()))
                        })
                        .collect(),
                )
        })
        .collect();
    let mut body = BytesMut::new();
    ProduceRequest::default()
        .with_acks(-1)
        .with_topic_data(topics)
        .encode(&mut body, version)
        .unwrap();
    body.to_vec()
}

/// A Produce v13 request naming `count` distinct topic ids, each with one
/// small partition: the shape of a request full of ids kpress cannot name.
fn unknown_ids_body(count: u32) -> Vec<u8> {
    let records = Bytes::from(vec![0x5a; 64]);
    let topics = (0..count)
        .map(|t| {
            let mut id = [0x5a; 16];
            id[..4].copy_from_slice(&t.to_be_bytes());
            TopicProduceData::default()
                .with_topic_id(Uuid::from_bytes(id))
                .with_partition_data(vec![PartitionProduceData::default()
                    .with_index(0)
                    .with_records(Some(records.clone()))])
        })
        .collect();
    let mut body = BytesMut::new();
    ProduceRequest::default()
        .with_acks(-1)
        .with_topic_data(topics)
        .encode(&mut body, 13)
        .unwrap();
    body.to_vec()
}

fn fetch_body() -> Vec<u8> {
    let records = Bytes::from(vec![0x5a; RECORDS_PER_PARTITION]);
    let topics = (0..4)
        .map(|t| {
            FetchableTopicResponse::default()
                .with_topic_id(Uuid::from_bytes([t; 16]))
                .with_partitions(
                    (0..PARTITIONS / 4)
                        .map(|p| {
                            PartitionData::default()
                                .with_partition_index(p)
                                .with_records(Some(records.clone()))
                        })
                        .collect(),
                )
        })
        .collect();
    let mut body = BytesMut::new();
    FetchResponse::default()
        .with_responses(topics)
        .encode(&mut body, 17)
        .unwrap();
    body.to_vec()
}

fn metadata_body() -> Vec<u8> {
    let brokers = (0..3)
        .map(|n| {
            MetadataResponseBroker::default()
                .with_node_id(BrokerId(n))
                .with_host(StrBytes::from_string(format!("broker-{n}.internal")))
                .with_port(9092)
        })
        .collect();
    let topics = (0..100)
        .map(|t| {
            MetadataResponseTopic::default()
                .with_name(Some(TopicName(StrBytes::from_string(format!("topic-{t}")))))
                .with_topic_id(Uuid::from_bytes([t; 16]))
                .with_partitions(
                    (0..10)
                        .map(|p| {
                            MetadataResponsePartition::default()
                                .with_partition_index(p)
                                .with_leader_id(BrokerId(p % 3))
                                .with_replica_nodes(vec![BrokerId(0), BrokerId(1), BrokerId(2)])
                                .with_isr_nodes(vec![BrokerId(0), BrokerId(1), BrokerId(2)])
                        })
                        .collect(),
                )
        })
        .collect();
    let mut body = BytesMut::new();
    MetadataResponse::default()
        .with_brokers(brokers)
        .with_topics(topics)
        .encode(&mut body, 12)
        .unwrap();
    body.to_vec()
}

fn produce(c: &mut Criterion) {
    let names = |_: &[u8; 16]| Some(Arc::<str>::from("t"));
    let mut group = c.benchmark_group("produce_request");
    for version in [8i16, 9] {
        let body = produce_body(version);
        group.throughput(Throughput::Bytes(body.len() as u64));
        group.bench_function(format!("walk_unchanged_v{version}"), |b| {
            b.iter(|| {
                rewrite_produce_with(black_box(&body), 0, version, &names, &mut Keep).unwrap()
            })
        });
        group.bench_function(format!("splice_every_partition_v{version}"), |b| {
            b.iter(|| {
                rewrite_produce_with(black_box(&body), 0, version, &names, &mut Halve).unwrap()
            })
        });
    }
    // Time per id stays flat as the count grows: the dedupe is linear and
    // bounded by MAX_UNKNOWN_TOPIC_IDS.
    let unknown = |_: &[u8; 16]| None;
    for count in [1_000u32, 10_000, 40_000] {
        let body = unknown_ids_body(count);
        group.throughput(Throughput::Elements(u64::from(count)));
        group.bench_function(format!("v13_{count}_unknown_topic_ids"), |b| {
            b.iter(|| {
                let splice =
                    rewrite_produce_with(black_box(&body), 0, 13, &unknown, &mut Keep).unwrap();
                assert_eq!(splice.unknown_topic_ids.len(), MAX_UNKNOWN_TOPIC_IDS);
                splice
            })
        });
    }
    group.finish();
}

fn responses(c: &mut Criterion) {
    let mut group = c.benchmark_group("responses");
    let fetch = fetch_body();
    group.throughput(Throughput::Bytes(fetch.len() as u64));
    group.bench_function("fetch_v17_scan_no_endpoints", |b| {
        b.iter(|| rewrite_response(api_key::FETCH, 17, black_box(&fetch), &mut Proxy).unwrap())
    });
    let metadata = metadata_body();
    group.throughput(Throughput::Bytes(metadata.len() as u64));
    group.bench_function("metadata_v12_100_topics", |b| {
        b.iter(|| {
            rewrite_response(api_key::METADATA, 12, black_box(&metadata), &mut Proxy).unwrap()
        })
    });
    group.finish();
}

criterion_group!(benches, produce, responses);
criterion_main!(benches);
