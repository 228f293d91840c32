//! The bounds-checked walks (guards before kafka-protocol's decoders, and the
//! Metadata splice) must accept every valid message: a walk that rejects one
//! would make kpress relay a response with the broker's real addresses. Random valid Metadata and
//! Produce shapes at every version, encoded by kafka-protocol.

use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::metadata_response::{
    MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
};
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{BrokerId, MetadataResponse, ProduceRequest, TopicName};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use kpress_protocol::{
    api_key, rewrite_produce_with, rewrite_response, RecordsRewriter, ResponseObserver,
};
use proptest::prelude::*;
use uuid::Uuid;

struct Proxy;

impl ResponseObserver for Proxy {
    fn broker(&mut self, node_id: i32, _: &str, _: i32) -> (String, i32) {
        ("kpress".to_owned(), 30_000 + node_id)
    }
    fn topic(&mut self, _: [u8; 16], _: &str) {}
}

fn text() -> impl Strategy<Value = String> {
    "[a-z0-9.-]{0,12}"
}

#[derive(Debug, Clone)]
struct Partition {
    replicas: Vec<i32>,
    isr: Vec<i32>,
    offline: Vec<i32>,
    leader_epoch: i32,
}

fn partition() -> impl Strategy<Value = Partition> {
    (
        prop::collection::vec(0i32..5, 0..4),
        prop::collection::vec(0i32..5, 0..4),
        prop::collection::vec(0i32..5, 0..3),
        any::<i32>(),
    )
        .prop_map(|(replicas, isr, offline, leader_epoch)| Partition {
            replicas,
            isr,
            offline,
            leader_epoch,
        })
}

#[derive(Debug, Clone)]
struct Topic {
    name: Option<String>,
    id: [u8; 16],
    partitions: Vec<Partition>,
    operations: i32,
}

fn topic() -> impl Strategy<Value = Topic> {
    (
        prop::option::of(text()),
        any::<[u8; 16]>(),
        prop::collection::vec(partition(), 0..4),
        any::<i32>(),
    )
        .prop_map(|(name, id, partitions, operations)| Topic {
            name,
            id,
            partitions,
            operations,
        })
}

fn metadata(
    version: i16,
    brokers: &[(i32, String, i32, Option<String>)],
    topics: &[Topic],
    cluster_id: &Option<String>,
) -> MetadataResponse {
    let ids = |nodes: &[i32]| nodes.iter().map(|&n| BrokerId(n)).collect::<Vec<_>>();
    let mut response = MetadataResponse::default();
    response.brokers = brokers
        .iter()
        .map(|(node, host, port, rack)| {
            let mut broker = MetadataResponseBroker::default()
                .with_node_id(BrokerId(*node))
                .with_host(StrBytes::from_string(host.clone()))
                .with_port(*port);
            if version >= 1 {
                broker.rack = rack.clone().map(StrBytes::from_string);
            }
            broker
        })
        .collect();
    if version >= 2 {
        response.cluster_id = cluster_id.clone().map(StrBytes::from_string);
    }
    if version >= 1 {
        response.controller_id = BrokerId(1);
    }
    if version >= 3 {
        response.throttle_time_ms = 9;
    }
    if (8..=10).contains(&version) {
        response.cluster_authorized_operations = 77;
    }
    if version >= 13 {
        response.error_code = 0;
    }
    response.topics = topics
        .iter()
        .map(|t| {
            let name = match (&t.name, version >= 12) {
                (None, true) => None,
                (name, _) => Some(TopicName(StrBytes::from_string(
                    name.clone().unwrap_or_default(),
                ))),
            };
            let mut topic = MetadataResponseTopic::default().with_name(name);
            if version >= 10 {
                topic.topic_id = Uuid::from_bytes(t.id);
            }
            if version >= 1 {
                topic.is_internal = t.operations % 2 == 0;
            }
            if version >= 8 {
                topic.topic_authorized_operations = t.operations;
            }
            topic.partitions = t
                .partitions
                .iter()
                .enumerate()
                .map(|(i, p)| {
                    let mut partition = MetadataResponsePartition::default()
                        .with_partition_index(i as i32)
                        .with_leader_id(BrokerId(1))
                        .with_replica_nodes(ids(&p.replicas))
                        .with_isr_nodes(ids(&p.isr));
                    if version >= 5 {
                        partition.offline_replicas = ids(&p.offline);
                    }
                    if version >= 7 {
                        partition.leader_epoch = p.leader_epoch;
                    }
                    partition
                })
                .collect();
            topic
        })
        .collect();
    response
}

struct Keep;

impl RecordsRewriter for Keep {
    fn rewrite_records(&mut self, _: &str, records: &[u8], out: &mut Vec<u8>) -> bool {
        out.extend_from_slice(records);
        out.push(0);
        true
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(500))]

    #[test]
    fn every_valid_metadata_response_is_rewritten(
        version in 0i16..=13,
        brokers in prop::collection::vec((0i32..5, text(), any::<i32>(), prop::option::of(text())), 0..4),
        topics in prop::collection::vec(topic(), 0..4),
        cluster_id in prop::option::of(text()),
    ) {
        let original = metadata(version, &brokers, &topics, &cluster_id);
        let mut body = BytesMut::new();
        original.encode(&mut body, version).unwrap();
        let result = rewrite_response(api_key::METADATA, version, &body, &mut Proxy).unwrap();
        if brokers.is_empty() {
            prop_assert!(result.is_none());
        } else {
            let spliced = result.unwrap().to_vec();
            let rewritten = MetadataResponse::decode(&mut Bytes::from(spliced.clone()), version).unwrap();
            let mut expected = original.clone();
            for broker in &mut expected.brokers {
                broker.host = StrBytes::from_static_str("kpress");
                broker.port = 30_000 + broker.node_id.0;
            }
            // The same bytes kafka-protocol would encode for the rewritten response.
            let mut reencoded = BytesMut::new();
            expected.encode(&mut reencoded, version).unwrap();
            prop_assert_eq!(&spliced[..], &reencoded[..]);
            prop_assert_eq!(rewritten, expected);
        }
    }

    #[test]
    fn every_valid_produce_request_is_walked(
        version in 3i16..=13,
        transactional_id in prop::option::of(text()),
        topics in prop::collection::vec(
            (text(), any::<[u8; 16]>(), prop::collection::vec((any::<i32>(), prop::option::of(prop::collection::vec(any::<u8>(), 0..300))), 0..4)),
            0..4,
        ),
    ) {
        let mut request = ProduceRequest::default().with_acks(1);
        request.transactional_id = transactional_id.map(|t| StrBytes::from_string(t).into());
        request.topic_data = topics
            .iter()
            .map(|(name, id, partitions)| {
                let mut topic = TopicProduceData::default().with_partition_data(
                    partitions
                        .iter()
                        .map(|(index, records)| {
                            PartitionProduceData::default()
                                .with_index(*index)
                                .with_records(records.clone().map(Bytes::from))
                        })
                        .collect(),
                );
                if version >= 13 {
                    topic.topic_id = Uuid::from_bytes(*id);
                } else {
                    topic.name = TopicName(StrBytes::from_string(name.clone()));
                }
                topic
            })
            .collect();
        let mut body = BytesMut::new();
        request.encode(&mut body, version).unwrap();
        let names = |_: &[u8; 16]| Some(Arc::<str>::from("t"));
        let result = rewrite_produce_with(&body, 0, version, &names, &mut Keep).unwrap();
        let any_records = request
            .topic_data
            .iter()
            .flat_map(|t| &t.partition_data)
            .any(|p| p.records.as_ref().is_some_and(|r| !r.is_empty()));
        prop_assert_eq!(result.frame.is_some(), any_records);
        if let Some(payload) = result.payload() {
            let rewritten = ProduceRequest::decode(&mut Bytes::from(payload.to_vec()), version).unwrap();
            let mut expected = request.clone();
            for partition in expected.topic_data.iter_mut().flat_map(|t| &mut t.partition_data) {
                if let Some(records) = partition.records.as_ref().filter(|r| !r.is_empty()) {
                    let mut grown = records.to_vec();
                    grown.push(0);
                    partition.records = Some(Bytes::from(grown));
                }
            }
            prop_assert_eq!(rewritten, expected);
        }
    }
}

mod node_endpoints {
    use super::*;
    use kafka_protocol::messages::fetch_response::{
        self, AbortedTransaction, FetchableTopicResponse, PartitionData,
    };
    use kafka_protocol::messages::produce_response::{
        self, BatchIndexAndErrorMessage, PartitionProduceResponse, TopicProduceResponse,
    };
    use kafka_protocol::messages::{FetchResponse, ProduceResponse};

    fn endpoints() -> impl Strategy<Value = Vec<(i32, String, i32, Option<String>)>> {
        prop::collection::vec(
            (0i32..5, text(), any::<i32>(), prop::option::of(text())),
            0..3,
        )
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(300))]

        #[test]
        fn every_valid_fetch_response_is_rewritten(
            version in 16i16..=18,
            partitions in prop::collection::vec(
                (any::<i16>(), prop::option::of(prop::collection::vec((any::<i64>(), any::<i64>()), 0..3)), prop::option::of(prop::collection::vec(any::<u8>(), 0..200)), any::<bool>()),
                0..4,
            ),
            endpoints in endpoints(),
        ) {
            let mut response = FetchResponse::default().with_session_id(5);
            response.responses = vec![FetchableTopicResponse::default()
                .with_topic_id(Uuid::from_bytes([1; 16]))
                .with_partitions(
                    partitions
                        .iter()
                        .enumerate()
                        .map(|(i, (error, aborted, records, leader))| {
                            let mut partition = PartitionData::default()
                                .with_partition_index(i as i32)
                                .with_error_code(*error)
                                .with_aborted_transactions(aborted.as_ref().map(|list| {
                                    list.iter()
                                        .map(|(producer, offset)| {
                                            AbortedTransaction::default()
                                                .with_producer_id((*producer).into())
                                                .with_first_offset(*offset)
                                        })
                                        .collect()
                                }))
                                .with_records(records.clone().map(Bytes::from));
                            if *leader {
                                partition.current_leader = fetch_response::LeaderIdAndEpoch::default()
                                    .with_leader_id(BrokerId(2))
                                    .with_leader_epoch(3);
                            }
                            partition
                        })
                        .collect(),
                )];
            response.node_endpoints = endpoints
                .iter()
                .map(|(node, host, port, rack)| {
                    fetch_response::NodeEndpoint::default()
                        .with_node_id(BrokerId(*node))
                        .with_host(StrBytes::from_string(host.clone()))
                        .with_port(*port)
                        .with_rack(rack.clone().map(StrBytes::from_string))
                })
                .collect();
            let mut body = BytesMut::new();
            response.encode(&mut body, version).unwrap();
            let result = rewrite_response(api_key::FETCH, version, &body, &mut Proxy).unwrap();
            prop_assert_eq!(result.is_some(), !endpoints.is_empty());
            if let Some(new) = result {
                let rewritten = FetchResponse::decode(&mut Bytes::from(new.to_vec()), version).unwrap();
                let mut expected = response.clone();
                for endpoint in &mut expected.node_endpoints {
                    endpoint.host = StrBytes::from_static_str("kpress");
                    endpoint.port = 30_000 + endpoint.node_id.0;
                }
                prop_assert_eq!(rewritten, expected);
            }
        }

        #[test]
        fn every_valid_produce_response_is_rewritten(
            version in 10i16..=13,
            partitions in prop::collection::vec(
                (any::<i16>(), prop::collection::vec((any::<i32>(), prop::option::of(text())), 0..3), prop::option::of(text()), any::<bool>()),
                0..4,
            ),
            endpoints in endpoints(),
        ) {
            let mut topic = TopicProduceResponse::default().with_partition_responses(
                partitions
                    .iter()
                    .enumerate()
                    .map(|(i, (error, record_errors, message, leader))| {
                        let mut partition = PartitionProduceResponse::default()
                            .with_index(i as i32)
                            .with_error_code(*error)
                            .with_record_errors(
                                record_errors
                                    .iter()
                                    .map(|(index, message)| {
                                        BatchIndexAndErrorMessage::default()
                                            .with_batch_index(*index)
                                            .with_batch_index_error_message(message.clone().map(StrBytes::from_string))
                                    })
                                    .collect(),
                            )
                            .with_error_message(message.clone().map(StrBytes::from_string));
                        if *leader {
                            partition.current_leader = produce_response::LeaderIdAndEpoch::default()
                                .with_leader_id(BrokerId(1))
                                .with_leader_epoch(2);
                        }
                        partition
                    })
                    .collect(),
            );
            if version >= 13 {
                topic.topic_id = Uuid::from_bytes([4; 16]);
            } else {
                topic.name = TopicName(StrBytes::from_static_str("orders"));
            }
            let mut response = ProduceResponse::default().with_responses(vec![topic]);
            response.node_endpoints = endpoints
                .iter()
                .map(|(node, host, port, rack)| {
                    produce_response::NodeEndpoint::default()
                        .with_node_id(BrokerId(*node))
                        .with_host(StrBytes::from_string(host.clone()))
                        .with_port(*port)
                        .with_rack(rack.clone().map(StrBytes::from_string))
                })
                .collect();
            let mut body = BytesMut::new();
            response.encode(&mut body, version).unwrap();
            let result = rewrite_response(api_key::PRODUCE, version, &body, &mut Proxy).unwrap();
            prop_assert_eq!(result.is_some(), !endpoints.is_empty());
            if let Some(new) = result {
                let rewritten = ProduceResponse::decode(&mut Bytes::from(new.to_vec()), version).unwrap();
                let mut expected = response.clone();
                for endpoint in &mut expected.node_endpoints {
                    endpoint.host = StrBytes::from_static_str("kpress");
                    endpoint.port = 30_000 + endpoint.node_id.0;
                }
                prop_assert_eq!(rewritten, expected);
            }
        }
    }
}
