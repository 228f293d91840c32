//! Broker responses built with kafka-protocol, rewritten by kpress-protocol,
//! decoded back with kafka-protocol: every version of every response kind
//! kpress rewrites.

use std::collections::HashMap;

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::api_versions_response::ApiVersion;
use kafka_protocol::messages::describe_cluster_response::DescribeClusterBroker;
use kafka_protocol::messages::fetch_response::{
    AbortedTransaction, FetchableTopicResponse, PartitionData,
};
use kafka_protocol::messages::find_coordinator_response::Coordinator;
use kafka_protocol::messages::metadata_response::{
    MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
};
use kafka_protocol::messages::produce_response::{PartitionProduceResponse, TopicProduceResponse};
use kafka_protocol::messages::{
    fetch_response, produce_response, ApiVersionsResponse, BrokerId, DescribeClusterResponse,
    FetchResponse, FindCoordinatorResponse, MetadataRequest, MetadataResponse, ProduceResponse,
    RequestHeader, TopicName,
};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use kpress_protocol::{
    api_key, metadata_request, rewrite_response, rewrites_response, Fault, ProtocolError,
    ResponseObserver, WireError, PARSED_MAX_VERSIONS,
};
use uuid::Uuid;

/// Maps node N to kpress.local:19000+N and records what it saw.
#[derive(Default)]
struct Proxy {
    brokers: Vec<(i32, String, i32)>,
    topics: HashMap<[u8; 16], String>,
    named: Vec<String>,
    produce_cap: Option<i16>,
}

impl ResponseObserver for Proxy {
    fn broker(&mut self, node_id: i32, host: &str, port: i32) -> (String, i32) {
        self.brokers.push((node_id, host.to_owned(), port));
        ("kpress.local".to_owned(), 19_000 + node_id)
    }

    fn topic(&mut self, id: [u8; 16], name: &str) {
        self.topics.insert(id, name.to_owned());
    }

    fn named_topic(&mut self, name: &str) {
        self.named.push(name.to_owned());
    }

    fn max_version(&mut self, api_key: i16, capped_max: i16) -> i16 {
        match (api_key, self.produce_cap) {
            (api_key::PRODUCE, Some(cap)) => cap,
            _ => capped_max,
        }
    }
}

fn s(value: &str) -> StrBytes {
    StrBytes::from_string(value.to_owned())
}

fn encode<T: Encodable>(message: &T, version: i16) -> Vec<u8> {
    let mut buf = BytesMut::new();
    message.encode(&mut buf, version).unwrap();
    buf.to_vec()
}

fn decode<T: Decodable>(body: &[u8], version: i16) -> T {
    let mut buf = Bytes::copy_from_slice(body);
    let message = T::decode(&mut buf, version).unwrap();
    assert!(buf.is_empty(), "trailing bytes");
    message
}

fn rewrite(api: i16, version: i16, body: &[u8], proxy: &mut Proxy) -> Option<Vec<u8>> {
    assert!(rewrites_response(api, version));
    rewrite_response(api, version, body, proxy)
        .unwrap()
        .map(|b| b.to_vec())
}

/// `original` encoded at `version`, rewritten (it must need a rewrite) and decoded.
fn rewrite_decoded<T: Encodable + Decodable>(
    api: i16,
    version: i16,
    original: &T,
    proxy: &mut Proxy,
) -> T {
    let body = rewrite(api, version, &encode(original, version), proxy)
        .unwrap_or_else(|| panic!("api {api} v{version}: nothing to rewrite"));
    decode(&body, version)
}

const TOPIC_ID: [u8; 16] = [3; 16];

fn metadata(version: i16) -> MetadataResponse {
    let brokers = (1..=3)
        .map(|n| {
            let mut broker = MetadataResponseBroker::default()
                .with_node_id(BrokerId(n))
                .with_host(s(&format!("broker-{n}.internal")))
                .with_port(9092);
            if version >= 1 {
                broker.rack = Some(s("rack-a"));
            }
            broker
        })
        .collect();
    let mut topic = MetadataResponseTopic::default()
        .with_name(Some(TopicName(s("orders"))))
        .with_partitions(vec![MetadataResponsePartition::default()
            .with_partition_index(0)
            .with_leader_id(BrokerId(2))
            .with_replica_nodes(vec![BrokerId(1), BrokerId(2), BrokerId(3)])
            .with_isr_nodes(vec![BrokerId(2)])]);
    if version >= 10 {
        topic.topic_id = Uuid::from_bytes(TOPIC_ID);
    }
    let mut response = MetadataResponse::default()
        .with_brokers(brokers)
        .with_topics(vec![topic]);
    if version >= 1 {
        response.controller_id = BrokerId(1);
    }
    if version >= 2 {
        response.cluster_id = Some(s("cluster-1"));
    }
    response
}

#[test]
fn metadata_addresses_are_rewritten_at_every_version() {
    for version in 0..=13 {
        let original = metadata(version);
        let mut proxy = Proxy::default();
        let rewritten = rewrite_decoded(api_key::METADATA, version, &original, &mut proxy);
        let mut expected = original.clone();
        for broker in &mut expected.brokers {
            broker.host = s("kpress.local");
            broker.port = 19_000 + broker.node_id.0;
        }
        assert_eq!(rewritten, expected, "v{version}");
        assert_eq!(proxy.brokers[1], (2, "broker-2.internal".to_owned(), 9092));
        let expected_topics = if version >= 10 {
            HashMap::from([(TOPIC_ID, "orders".to_owned())])
        } else {
            HashMap::new()
        };
        assert_eq!(proxy.topics, expected_topics, "v{version}");
    }
}

/// Clients before Metadata v10 see no topic ids: the names the broker answered without
/// error are reported all the same, and a name it refused is not.
#[test]
fn metadata_reports_the_topics_answered_without_error_at_every_version() {
    for version in 0..=13 {
        let mut response = metadata(version);
        let refused = MetadataResponseTopic::default()
            .with_error_code(3)
            .with_name(Some(TopicName(s("invented"))));
        response.topics.push(refused);
        let mut proxy = Proxy::default();
        rewrite_decoded(api_key::METADATA, version, &response, &mut proxy);
        assert_eq!(proxy.named, vec!["orders".to_owned()], "v{version}");
    }
}

#[test]
fn metadata_without_brokers_is_relayed_but_still_reports_topics() {
    let response = metadata(12).with_brokers(vec![]);
    let mut proxy = Proxy::default();
    assert_eq!(
        rewrite(api_key::METADATA, 12, &encode(&response, 12), &mut proxy),
        None
    );
    assert_eq!(proxy.topics.len(), 1);
}

/// A Metadata response with every field kpress must copy through: several
/// brokers (null rack, a host long enough for a two-byte compact length),
/// unknown tagged fields at each level, topics with and without names and ids.
fn metadata_every_field(version: i16) -> MetadataResponse {
    let mut response = metadata(version);
    let mut long_host = MetadataResponseBroker::default()
        .with_node_id(BrokerId(7))
        .with_host(s(&"long-host.".repeat(20)))
        .with_port(19_092);
    if version >= 1 {
        long_host.rack = None;
    }
    response.brokers.push(long_host);
    let mut unnamed = MetadataResponseTopic::default()
        .with_error_code(3)
        .with_partitions(vec![MetadataResponsePartition::default()
            .with_partition_index(4)
            .with_leader_id(BrokerId(-1))]);
    unnamed.name = (version < 12).then(|| TopicName(s("unknown-topic")));
    response.topics.push(unnamed);
    if version >= 9 {
        response.brokers[0]
            .unknown_tagged_fields
            .insert(5, Bytes::from_static(b"broker tag"));
        response.topics[0]
            .unknown_tagged_fields
            .insert(9, Bytes::from_static(b"topic tag"));
        response
            .unknown_tagged_fields
            .insert(3, Bytes::from_static(b"top tag"));
    }
    response
}

/// What kpress produced before the splice: decode, replace, encode.
fn decoded_and_reencoded(body: &[u8], version: i16) -> Vec<u8> {
    let mut response: MetadataResponse = decode(body, version);
    for broker in &mut response.brokers {
        broker.host = s("kpress.local");
        broker.port = 19_000 + broker.node_id.0;
    }
    encode(&response, version)
}

#[test]
fn metadata_splice_equals_decode_and_reencode_at_every_version() {
    for version in 0..=13 {
        for original in [metadata(version), metadata_every_field(version)] {
            let body = encode(&original, version);
            let mut proxy = Proxy::default();
            let spliced =
                rewrite(api_key::METADATA, version, &body, &mut proxy).expect("brokers to rewrite");
            assert_eq!(spliced, decoded_and_reencoded(&body, version), "v{version}");
            assert_eq!(proxy.brokers.len(), original.brokers.len());
        }
    }
}

#[test]
fn metadata_splice_copies_everything_else_byte_for_byte() {
    for version in [2, 8, 9, 12, 13] {
        let flexible = version >= 9;
        let mut body = encode(&metadata(version), version);
        // kafka-protocol would re-encode an `is_internal` of 2 as 1.
        let name_prefix = if flexible { 1 } else { 2 };
        let name = body.windows(6).position(|w| w == b"orders").unwrap();
        let id_len = if version >= 10 { 16 } else { 0 };
        let is_internal = name + 6 + id_len;
        assert_eq!(body[is_internal], 0);
        body[is_internal] = 2;
        // Everything from cluster_id on follows the brokers array.
        let cluster_id = body.windows(9).position(|w| w == b"cluster-1").unwrap();
        let after_brokers = cluster_id - name_prefix;
        let spliced = rewrite(api_key::METADATA, version, &body, &mut Proxy::default()).unwrap();
        assert!(
            spliced.ends_with(&body[after_brokers..]),
            "v{version}: bytes after the brokers changed"
        );
        let before_brokers = if version >= 3 { 4 } else { 0 } + if flexible { 1 } else { 4 };
        assert_eq!(spliced[..before_brokers], body[..before_brokers]);
    }
}

#[test]
fn metadata_host_or_topic_name_not_utf8_is_a_broker_error() {
    for version in [0, 9, 12] {
        let mut body = encode(&metadata(version), version);
        let host = body
            .windows(b"broker-1".len())
            .position(|w| w == b"broker-1")
            .unwrap();
        body[host] = 0xff;
        assert!(matches!(
            broker_error(api_key::METADATA, version, &body),
            WireError::NotUtf8 { field: "host", .. }
        ));
        let mut body = encode(&metadata(version), version);
        let name = body.windows(6).position(|w| w == b"orders").unwrap();
        body[name] = 0xc0;
        assert!(matches!(
            broker_error(api_key::METADATA, version, &body),
            WireError::NotUtf8 { field: "name", .. }
        ));
    }
}

#[test]
fn find_coordinator_single_form_v0_to_v3() {
    for version in 0..=3 {
        let mut original = FindCoordinatorResponse::default()
            .with_node_id(BrokerId(2))
            .with_host(s("broker-2.internal"))
            .with_port(9092);
        if version >= 1 {
            original.throttle_time_ms = 5;
            original.error_message = Some(s("none"));
        }
        let mut proxy = Proxy::default();
        let rewritten = rewrite_decoded(api_key::FIND_COORDINATOR, version, &original, &mut proxy);
        let expected = original.with_host(s("kpress.local")).with_port(19_002);
        assert_eq!(rewritten, expected, "v{version}");
    }
}

#[test]
fn find_coordinator_not_found_is_relayed() {
    for version in [0, 3] {
        let original = FindCoordinatorResponse::default()
            .with_error_code(15)
            .with_node_id(BrokerId(-1))
            .with_host(s(""))
            .with_port(-1);
        let mut proxy = Proxy::default();
        assert_eq!(
            rewrite(
                api_key::FIND_COORDINATOR,
                version,
                &encode(&original, version),
                &mut proxy
            ),
            None
        );
        assert!(proxy.brokers.is_empty());
    }
}

#[test]
fn find_coordinator_list_form_v4_to_v6() {
    for version in 4..=6 {
        let original = FindCoordinatorResponse::default().with_coordinators(vec![
            Coordinator::default()
                .with_key(s("group-a"))
                .with_node_id(BrokerId(1))
                .with_host(s("broker-1.internal"))
                .with_port(9092),
            Coordinator::default()
                .with_key(s("group-b"))
                .with_node_id(BrokerId(-1))
                .with_host(s(""))
                .with_port(-1)
                .with_error_code(15)
                .with_error_message(Some(s("not available"))),
            Coordinator::default()
                .with_key(s("group-c"))
                .with_node_id(BrokerId(3))
                .with_host(s("broker-3.internal"))
                .with_port(9093),
        ]);
        let mut proxy = Proxy::default();
        let rewritten = rewrite_decoded(api_key::FIND_COORDINATOR, version, &original, &mut proxy);
        let mut expected = original.clone();
        expected.coordinators[0].host = s("kpress.local");
        expected.coordinators[0].port = 19_001;
        expected.coordinators[2].host = s("kpress.local");
        expected.coordinators[2].port = 19_003;
        assert_eq!(rewritten, expected, "v{version}");
        assert_eq!(proxy.brokers.len(), 2);
    }
}

#[test]
fn describe_cluster_v0_to_v2() {
    for version in 0..=2 {
        let mut original = DescribeClusterResponse::default()
            .with_cluster_id(s("cluster-1"))
            .with_controller_id(BrokerId(1))
            .with_brokers(vec![
                DescribeClusterBroker::default()
                    .with_broker_id(BrokerId(1))
                    .with_host(s("broker-1.internal"))
                    .with_port(9092)
                    .with_rack(Some(s("rack-a"))),
                DescribeClusterBroker::default()
                    .with_broker_id(BrokerId(2))
                    .with_host(s("broker-2.internal"))
                    .with_port(9092),
            ]);
        if version >= 1 {
            original.endpoint_type = 1;
        }
        let mut proxy = Proxy::default();
        let rewritten = rewrite_decoded(api_key::DESCRIBE_CLUSTER, version, &original, &mut proxy);
        let mut expected = original.clone();
        for broker in &mut expected.brokers {
            broker.host = s("kpress.local");
            broker.port = 19_000 + broker.broker_id.0;
        }
        assert_eq!(rewritten, expected, "v{version}");
    }
}

fn produce_response(version: i16, endpoints: bool) -> ProduceResponse {
    let mut topic = TopicProduceResponse::default().with_partition_responses(vec![
        PartitionProduceResponse::default()
            .with_index(0)
            .with_error_code(6)
            .with_base_offset(-1)
            .with_error_message(Some(s("not leader")))
            .with_current_leader(
                produce_response::LeaderIdAndEpoch::default()
                    .with_leader_id(BrokerId(3))
                    .with_leader_epoch(7),
            ),
        PartitionProduceResponse::default()
            .with_index(1)
            .with_base_offset(100),
    ]);
    if version >= 13 {
        topic.topic_id = Uuid::from_bytes(TOPIC_ID);
    } else {
        topic.name = TopicName(s("orders"));
    }
    let mut response = ProduceResponse::default()
        .with_responses(vec![topic])
        .with_throttle_time_ms(3);
    if endpoints {
        response.node_endpoints = vec![produce_response::NodeEndpoint::default()
            .with_node_id(BrokerId(3))
            .with_host(s("broker-3.internal"))
            .with_port(9092)
            .with_rack(Some(s("rack-c")))];
    }
    response
}

#[test]
fn produce_responses_before_v10_are_not_looked_at() {
    for version in 3..=9 {
        assert!(!rewrites_response(api_key::PRODUCE, version));
        let body = encode(&produce_response(version, false), version);
        assert_eq!(
            rewrite_response(api_key::PRODUCE, version, &body, &mut Proxy::default()),
            Ok(None)
        );
    }
}

#[test]
fn produce_node_endpoints_v10_to_v13() {
    for version in 10..=13 {
        let plain = encode(&produce_response(version, false), version);
        assert_eq!(
            rewrite(api_key::PRODUCE, version, &plain, &mut Proxy::default()),
            None
        );

        let original = produce_response(version, true);
        let mut proxy = Proxy::default();
        let rewritten = rewrite_decoded(api_key::PRODUCE, version, &original, &mut proxy);
        let mut expected = original.clone();
        expected.node_endpoints[0].host = s("kpress.local");
        expected.node_endpoints[0].port = 19_003;
        assert_eq!(rewritten, expected, "v{version}");
        assert_eq!(
            proxy.brokers,
            vec![(3, "broker-3.internal".to_owned(), 9092)]
        );
    }
}

fn fetch_response(version: i16, endpoints: bool, records: &Bytes) -> FetchResponse {
    let partitions = vec![
        PartitionData::default()
            .with_partition_index(0)
            .with_high_watermark(10)
            .with_aborted_transactions(Some(vec![AbortedTransaction::default()
                .with_producer_id(5.into())
                .with_first_offset(2)]))
            .with_records(Some(records.clone())),
        PartitionData::default()
            .with_partition_index(1)
            .with_error_code(6)
            .with_current_leader(
                fetch_response::LeaderIdAndEpoch::default()
                    .with_leader_id(BrokerId(2))
                    .with_leader_epoch(4),
            ),
    ];
    let mut topic = FetchableTopicResponse::default().with_partitions(partitions);
    if version >= 13 {
        topic.topic_id = Uuid::from_bytes(TOPIC_ID);
    } else {
        topic.topic = TopicName(s("orders"));
    }
    let mut response = FetchResponse::default().with_responses(vec![topic]);
    if version >= 7 {
        response.session_id = 77;
    }
    if endpoints {
        response.node_endpoints = vec![
            fetch_response::NodeEndpoint::default()
                .with_node_id(BrokerId(2))
                .with_host(s("broker-2.internal"))
                .with_port(9092),
            fetch_response::NodeEndpoint::default()
                .with_node_id(BrokerId(1))
                .with_host(s("broker-1.internal"))
                .with_port(9094)
                .with_rack(Some(s("rack-a"))),
        ];
    }
    response
}

#[test]
fn fetch_responses_before_v16_are_not_looked_at() {
    let records = Bytes::from(vec![0xab; 1000]);
    for version in 4..=15 {
        assert!(!rewrites_response(api_key::FETCH, version));
        let body = encode(&fetch_response(version, false, &records), version);
        assert_eq!(
            rewrite_response(api_key::FETCH, version, &body, &mut Proxy::default()),
            Ok(None)
        );
    }
}

#[test]
fn fetch_node_endpoints_v16_to_v18_keep_records_intact() {
    let records = Bytes::from((0..100_000u32).map(|i| i as u8).collect::<Vec<u8>>());
    for version in 16..=18 {
        let plain = encode(&fetch_response(version, false, &records), version);
        assert_eq!(
            rewrite(api_key::FETCH, version, &plain, &mut Proxy::default()),
            None
        );

        let original = fetch_response(version, true, &records);
        let mut proxy = Proxy::default();
        let rewritten = rewrite_decoded(api_key::FETCH, version, &original, &mut proxy);
        let mut expected = original.clone();
        expected.node_endpoints[0].host = s("kpress.local");
        expected.node_endpoints[0].port = 19_002;
        expected.node_endpoints[1].host = s("kpress.local");
        expected.node_endpoints[1].port = 19_001;
        assert_eq!(rewritten, expected, "v{version}");
    }
}

fn api_versions(version: i16, keys: &[(i16, i16, i16)]) -> ApiVersionsResponse {
    let mut response = ApiVersionsResponse::default().with_api_keys(
        keys.iter()
            .map(|&(key, min, max)| {
                ApiVersion::default()
                    .with_api_key(key)
                    .with_min_version(min)
                    .with_max_version(max)
            })
            .collect(),
    );
    if version >= 1 {
        response.throttle_time_ms = 1;
    }
    response
}

/// What a Kafka 4.1 broker advertises for the APIs kpress parses, plus two it does not.
const BROKER_41: [(i16, i16, i16); 8] = [
    (0, 3, 13), // Produce
    (1, 4, 17), // Fetch
    (3, 0, 13), // Metadata
    (10, 0, 6), // FindCoordinator
    (18, 0, 4), // ApiVersions
    (60, 0, 2), // DescribeCluster
    (19, 2, 7), // CreateTopics
    (68, 0, 1), // ConsumerGroupHeartbeat
];

#[test]
fn api_versions_within_kpress_support_are_relayed() {
    for version in 0..=4 {
        let body = encode(&api_versions(version, &BROKER_41), version);
        assert_eq!(
            rewrite(api_key::API_VERSIONS, version, &body, &mut Proxy::default()),
            None
        );
    }
}

#[test]
fn api_versions_above_kpress_support_are_capped_but_min_kept() {
    let future: Vec<(i16, i16, i16)> = BROKER_41
        .iter()
        .map(|&(key, min, max)| (key, min, max + 5))
        .collect();
    for version in 0..=4 {
        let body = encode(&api_versions(version, &future), version);
        let rewritten: ApiVersionsResponse = decode(
            &rewrite(api_key::API_VERSIONS, version, &body, &mut Proxy::default()).unwrap(),
            version,
        );
        for (api, &(key, min, max)) in rewritten.api_keys.iter().zip(&future) {
            assert_eq!(api.api_key, key);
            assert_eq!(api.min_version, min, "min of {key} kept");
            let expected = PARSED_MAX_VERSIONS
                .iter()
                .find(|(k, _)| *k == key)
                .map_or(max, |(_, cap)| *cap);
            assert_eq!(api.max_version, expected, "max of {key} at v{version}");
        }
    }
}

#[test]
fn api_versions_observer_can_cap_produce_at_v12() {
    let body = encode(&api_versions(3, &BROKER_41), 3);
    let mut proxy = Proxy {
        produce_cap: Some(12),
        ..Proxy::default()
    };
    let rewritten: ApiVersionsResponse = decode(
        &rewrite(api_key::API_VERSIONS, 3, &body, &mut proxy).unwrap(),
        3,
    );
    assert_eq!(
        (
            rewritten.api_keys[0].min_version,
            rewritten.api_keys[0].max_version
        ),
        (3, 12)
    );
    // A cap below the broker's min never empties the range.
    let mut proxy = Proxy {
        produce_cap: Some(1),
        ..Proxy::default()
    };
    let rewritten: ApiVersionsResponse = decode(
        &rewrite(api_key::API_VERSIONS, 3, &body, &mut proxy).unwrap(),
        3,
    );
    assert_eq!(
        (
            rewritten.api_keys[0].min_version,
            rewritten.api_keys[0].max_version
        ),
        (3, 3)
    );
}

#[test]
fn api_versions_unsupported_version_answer_is_read_as_v0() {
    // The broker refused ApiVersions v5 and answered in the v0 format.
    let future: Vec<(i16, i16, i16)> = BROKER_41
        .iter()
        .map(|&(k, min, max)| (k, min, max + 1))
        .collect();
    let refusal = api_versions(0, &future).with_error_code(35);
    for requested in [3, 4, 5, 9] {
        let body = encode(&refusal, 0);
        let rewritten: ApiVersionsResponse = decode(
            &rewrite(
                api_key::API_VERSIONS,
                requested,
                &body,
                &mut Proxy::default(),
            )
            .unwrap(),
            0,
        );
        assert_eq!(rewritten.error_code, 35);
        assert_eq!(rewritten.api_keys[0].max_version, 13);
    }
}

#[test]
fn api_versions_features_survive() {
    use kafka_protocol::messages::api_versions_response::{
        FinalizedFeatureKey, SupportedFeatureKey,
    };
    let mut original = api_versions(3, &[(0, 3, 20)]);
    original.supported_features = vec![SupportedFeatureKey::default()
        .with_name(s("metadata.version"))
        .with_min_version(1)
        .with_max_version(27)];
    original.finalized_features_epoch = 9;
    original.finalized_features = vec![FinalizedFeatureKey::default()
        .with_name(s("metadata.version"))
        .with_min_version_level(27)
        .with_max_version_level(27)];
    let body = encode(&original, 3);
    let rewritten: ApiVersionsResponse = decode(
        &rewrite(api_key::API_VERSIONS, 3, &body, &mut Proxy::default()).unwrap(),
        3,
    );
    let mut expected = original.clone();
    expected.api_keys[0].max_version = 13;
    assert_eq!(rewritten, expected);
}

fn broker_error(api: i16, version: i16, body: &[u8]) -> WireError {
    match rewrite_response(api, version, body, &mut Proxy::default()) {
        Err(err) => {
            assert_eq!(err.fault(), Fault::Broker, "{err}");
            match err {
                ProtocolError::MalformedResponse { source, .. } => source,
                other => panic!("unexpected {other:?}"),
            }
        }
        Ok(body) => panic!("expected an error, got {body:?}"),
    }
}

#[test]
fn hostile_counts_in_responses_fail_before_decoding() {
    // Metadata v1: 2^31 - 1 brokers.
    let mut body = Vec::new();
    body.extend_from_slice(&i32::MAX.to_be_bytes());
    body.extend_from_slice(&[0; 32]);
    assert!(matches!(
        broker_error(api_key::METADATA, 1, &body),
        WireError::CountTooLarge { .. }
    ));
    // Metadata v12: compact count 2^32 - 2 brokers.
    let mut body = 0i32.to_be_bytes().to_vec();
    body.extend_from_slice(&[0xff, 0xff, 0xff, 0xff, 0x0f]);
    assert!(matches!(
        broker_error(api_key::METADATA, 12, &body),
        WireError::CountTooLarge { .. }
    ));
    // DescribeCluster: a valid prefix, then 2^32 - 2 brokers.
    let mut body = Vec::new();
    body.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 1]);
    body.extend_from_slice(&[0xff, 0xff, 0xff, 0xff, 0x0f]);
    assert!(matches!(
        broker_error(api_key::DESCRIBE_CLUSTER, 0, &body),
        WireError::CountTooLarge { .. }
    ));
    // ApiVersions v3: a supported_features tag claiming 2^31 entries.
    let mut body = vec![0, 0, 1, 0, 0, 0, 0, 1];
    body.extend_from_slice(&[0, 6, 0xff, 0xff, 0xff, 0xff, 0x07, 0]);
    assert!(matches!(
        broker_error(api_key::API_VERSIONS, 3, &body),
        WireError::CountTooLarge { .. }
    ));
    // Fetch v16: node endpoints claiming 2^31 entries.
    let mut body = encode(&fetch_response(16, false, &Bytes::from_static(b"rec")), 16);
    let last = body.len() - 1;
    body.truncate(last); // drop the empty tagged-field section
    body.extend_from_slice(&[1, 0, 6, 0xff, 0xff, 0xff, 0xff, 0x07, 0]);
    assert!(matches!(
        broker_error(api_key::FETCH, 16, &body),
        WireError::CountTooLarge { .. }
    ));
}

#[test]
fn truncated_responses_are_broker_errors() {
    let cases: Vec<(i16, i16, Vec<u8>)> = vec![
        (api_key::METADATA, 12, encode(&metadata(12), 12)),
        (api_key::METADATA, 0, encode(&metadata(0), 0)),
        (
            api_key::DESCRIBE_CLUSTER,
            2,
            encode(&DescribeClusterResponse::default(), 2),
        ),
        (
            api_key::FETCH,
            17,
            encode(&fetch_response(17, true, &Bytes::from_static(b"xyz")), 17),
        ),
        (
            api_key::PRODUCE,
            11,
            encode(&produce_response(11, true), 11),
        ),
        (
            api_key::API_VERSIONS,
            3,
            encode(&api_versions(3, &BROKER_41), 3),
        ),
    ];
    for (api, version, body) in cases {
        for cut in 0..body.len() {
            broker_error(api, version, &body[..cut]);
        }
    }
}

#[test]
fn metadata_requests_decode_at_every_version() {
    let ids = [[1u8; 16], [2u8; 16]];
    for version in 0..=13 {
        for topic_ids in [&ids[..], &[]] {
            let frame = metadata_request(version, 99, topic_ids).unwrap();
            let size = i32::from_be_bytes(frame[..4].try_into().unwrap()) as usize;
            assert_eq!(size, frame.len() - 4);
            let mut buf = Bytes::copy_from_slice(&frame[4..]);
            let header = RequestHeader::decode(
                &mut buf,
                <MetadataRequest as kafka_protocol::protocol::HeaderVersion>::header_version(
                    version,
                ),
            )
            .unwrap();
            assert_eq!(
                (header.request_api_key, header.request_api_version),
                (3, version)
            );
            assert_eq!(header.correlation_id, 99);
            let request = MetadataRequest::decode(&mut buf, version).unwrap();
            assert!(buf.is_empty());
            match (version, topic_ids.is_empty()) {
                (0, _) => assert_eq!(request.topics, Some(vec![])),
                (10.., false) => {
                    let asked: Vec<[u8; 16]> = request
                        .topics
                        .unwrap()
                        .iter()
                        .map(|t| *t.topic_id.as_bytes())
                        .collect();
                    assert_eq!(asked, ids);
                }
                _ => assert_eq!(request.topics, None, "v{version}: all topics"),
            }
            if version >= 4 {
                assert!(!request.allow_auto_topic_creation);
            }
        }
    }
    assert!(metadata_request(14, 1, &[]).is_err());
}

#[test]
fn share_fetch_and_acknowledge_node_endpoints_v1() {
    use kafka_protocol::messages::share_acknowledge_response::{
        self as ack, ShareAcknowledgeTopicResponse,
    };
    use kafka_protocol::messages::share_fetch_response::{
        self as share, AcquiredRecords, ShareFetchableTopicResponse,
    };
    use kafka_protocol::messages::{ShareAcknowledgeResponse, ShareFetchResponse};

    let records = Bytes::from(vec![0x42; 5000]);
    let fetch = |endpoints: bool| {
        let mut response = ShareFetchResponse::default()
            .with_acquisition_lock_timeout_ms(30_000)
            .with_responses(vec![ShareFetchableTopicResponse::default()
                .with_topic_id(Uuid::from_bytes(TOPIC_ID))
                .with_partitions(vec![
                    share::PartitionData::default()
                        .with_partition_index(0)
                        .with_records(Some(records.clone()))
                        .with_acquired_records(vec![AcquiredRecords::default()
                            .with_first_offset(0)
                            .with_last_offset(9)
                            .with_delivery_count(1)]),
                    share::PartitionData::default()
                        .with_partition_index(1)
                        .with_error_code(6)
                        .with_error_message(Some(s("not leader"))),
                ])]);
        if endpoints {
            response.node_endpoints = vec![share::NodeEndpoint::default()
                .with_node_id(BrokerId(2))
                .with_host(s("broker-2.internal"))
                .with_port(9092)
                .with_rack(Some(s("rack-b")))];
        }
        response
    };
    assert!(rewrites_response(api_key::SHARE_FETCH, 1));
    assert_eq!(
        rewrite(
            api_key::SHARE_FETCH,
            1,
            &encode(&fetch(false), 1),
            &mut Proxy::default()
        ),
        None
    );
    let original = fetch(true);
    let body = rewrite(
        api_key::SHARE_FETCH,
        1,
        &encode(&original, 1),
        &mut Proxy::default(),
    )
    .unwrap();
    let rewritten: ShareFetchResponse = decode(&body, 1);
    let mut expected = original.clone();
    expected.node_endpoints[0].host = s("kpress.local");
    expected.node_endpoints[0].port = 19_002;
    assert_eq!(rewritten, expected);

    let acknowledge = ShareAcknowledgeResponse::default()
        .with_responses(vec![ShareAcknowledgeTopicResponse::default()
            .with_topic_id(Uuid::from_bytes(TOPIC_ID))
            .with_partitions(vec![ack::PartitionData::default()
                .with_partition_index(0)
                .with_error_code(6)])])
        .with_node_endpoints(vec![
            ack::NodeEndpoint::default()
                .with_node_id(BrokerId(1))
                .with_host(s("broker-1.internal"))
                .with_port(9092),
            ack::NodeEndpoint::default()
                .with_node_id(BrokerId(3))
                .with_host(s("broker-3.internal"))
                .with_port(9092),
        ]);
    let body = rewrite(
        api_key::SHARE_ACKNOWLEDGE,
        1,
        &encode(&acknowledge, 1),
        &mut Proxy::default(),
    )
    .unwrap();
    let rewritten: ShareAcknowledgeResponse = decode(&body, 1);
    let mut expected = acknowledge.clone();
    for endpoint in &mut expected.node_endpoints {
        endpoint.host = s("kpress.local");
        endpoint.port = 19_000 + endpoint.node_id.0;
    }
    assert_eq!(rewritten, expected);

    // Only v1 is parsed (and advertised).
    assert!(matches!(
        rewrite_response(api_key::SHARE_FETCH, 0, &[], &mut Proxy::default()),
        Err(ProtocolError::UnsupportedVersion { .. })
    ));
}
