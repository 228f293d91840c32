//! kpress-protocol against real Apache Kafka brokers (4.1.1 and 3.9.1, started by the
//! harness): the responses a real broker sends are rewritten and decoded back, and
//! Produce requests rewritten by kpress (v3 to the broker's newest) are accepted by the
//! broker, which stores the recompressed batches (read back with Fetch).
//!
//! Every version of every API kpress parses that the broker serves is tried.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{
    ApiKey, ApiVersionsRequest, ApiVersionsResponse, CreateTopicsRequest, CreateTopicsResponse,
    DescribeClusterRequest, DescribeClusterResponse, FetchRequest, FetchResponse,
    FindCoordinatorRequest, FindCoordinatorResponse, MetadataRequest, MetadataResponse,
    ProduceRequest, ProduceResponse, RequestHeader, ResponseHeader, TopicName,
};
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, StrBytes};
use kpress_batch::builder::{BatchBuilder, Record};
use kpress_batch::{Recompressor, RecordBatch, RewritePolicy, RewriteStats};
use kpress_codec::{Codec, CompressionOptions};
use kpress_protocol::{
    answer_unsupported_api_versions, api_key, api_versions_body_version, metadata_request,
    rewrite_produce_with, rewrite_response, RecordsRewriter, ResponseObserver, PARSED_MAX_VERSIONS,
};
use uuid::Uuid;

use kpress_tests::{kafka_old_version, kafka_version, KafkaCluster};

const TOPIC: &str = "kpress-protocol";

/// A connection to a broker with a read timeout, so a missing answer fails the test.
fn connect(addr: SocketAddr) -> TcpStream {
    let conn = TcpStream::connect(addr).expect("connect to the broker");
    conn.set_read_timeout(Some(Duration::from_secs(30)))
        .expect("read timeout");
    conn
}

/// A request payload encoded at `version` whose header claims `header_says`
/// (they differ only to send a version the broker does not know).
fn request_frame<R: Encodable + HeaderVersion>(
    api: ApiKey,
    version: i16,
    header_says: i16,
    request: &R,
) -> Vec<u8> {
    let header = RequestHeader::default()
        .with_request_api_key(api as i16)
        .with_request_api_version(header_says)
        .with_correlation_id(7)
        .with_client_id(Some(StrBytes::from_static_str("kpress-protocol-test")));
    let mut payload = BytesMut::new();
    header
        .encode(&mut payload, R::header_version(version))
        .unwrap();
    request.encode(&mut payload, version).unwrap();
    payload.to_vec()
}

/// Sends a size-prefixed payload, returns the response payload (header + body).
fn exchange(conn: &mut TcpStream, payload: &[u8]) -> Vec<u8> {
    conn.write_all(&(payload.len() as i32).to_be_bytes())
        .unwrap();
    conn.write_all(payload).unwrap();
    let mut size = [0u8; 4];
    conn.read_exact(&mut size).unwrap();
    let mut response = vec![0u8; i32::from_be_bytes(size) as usize];
    conn.read_exact(&mut response).unwrap();
    response
}

/// The response body after its header, for a response of `R` at `version`.
fn response_body<R: HeaderVersion>(response: &[u8], version: i16) -> Vec<u8> {
    let mut buf = Bytes::copy_from_slice(response);
    let header = ResponseHeader::decode(&mut buf, R::header_version(version)).unwrap();
    assert_eq!(header.correlation_id, 7);
    buf.to_vec()
}

fn raw_call<Req: Encodable + HeaderVersion, Resp: HeaderVersion>(
    conn: &mut TcpStream,
    api: ApiKey,
    version: i16,
    request: &Req,
) -> Vec<u8> {
    let response = exchange(conn, &request_frame(api, version, version, request));
    response_body::<Resp>(&response, version)
}

fn call<Req: Encodable + HeaderVersion, Resp: Decodable + HeaderVersion>(
    conn: &mut TcpStream,
    api: ApiKey,
    version: i16,
    request: &Req,
) -> Resp {
    let body = raw_call::<Req, Resp>(conn, api, version, request);
    Resp::decode(&mut Bytes::from(body), version).unwrap()
}

/// Maps node N to kpress.test:29000+N.
#[derive(Default)]
struct Proxy {
    brokers: Vec<(i32, String, i32)>,
    topics: Vec<([u8; 16], String)>,
}

impl ResponseObserver for Proxy {
    fn broker(&mut self, node_id: i32, host: &str, port: i32) -> (String, i32) {
        self.brokers.push((node_id, host.to_owned(), port));
        ("kpress.test".to_owned(), 29_000 + node_id)
    }

    fn topic(&mut self, id: [u8; 16], name: &str) {
        self.topics.push((id, name.to_owned()));
    }
}

/// The broker's version range for `api`, from a real ApiVersions exchange.
struct Versions(ApiVersionsResponse);

impl Versions {
    /// Versions both the broker and kpress (and kafka-protocol) handle.
    fn range(&self, api: ApiKey) -> std::ops::RangeInclusive<i16> {
        let entry = self
            .0
            .api_keys
            .iter()
            .find(|k| k.api_key == api as i16)
            .unwrap();
        let kpress_min = match api {
            ApiKey::Produce => 3,
            ApiKey::Fetch => 4,
            _ => 0,
        };
        entry.min_version.max(kpress_min)..=entry.max_version
    }
}

fn check_api_versions(conn: &mut TcpStream) -> Versions {
    let request = ApiVersionsRequest::default()
        .with_client_software_name(StrBytes::from_static_str("kpress-test"))
        .with_client_software_version(StrBytes::from_static_str("1"));
    let mut latest = None;
    for version in 0..=4 {
        let body = raw_call::<_, ApiVersionsResponse>(conn, ApiKey::ApiVersions, version, &request);
        let relayed =
            match rewrite_response(api_key::API_VERSIONS, version, &body, &mut Proxy::default())
                .unwrap()
            {
                Some(new) => new.to_vec(),
                None => body.clone(),
            };
        let response = ApiVersionsResponse::decode(&mut Bytes::from(relayed), version).unwrap();
        assert_eq!(response.error_code, 0);
        for (key, cap) in PARSED_MAX_VERSIONS {
            if let Some(api) = response.api_keys.iter().find(|k| k.api_key == key) {
                assert!(
                    api.max_version <= cap,
                    "v{version}: API {key} max {} above {cap}",
                    api.max_version
                );
            }
        }
        latest = Some(response);
    }
    // ApiVersions v5 (unknown to the broker): it answers UNSUPPORTED_VERSION in
    // the v0 format, with response header v0.
    let response = exchange(conn, &request_frame(ApiKey::ApiVersions, 3, 5, &request));
    // kpress answers such a request itself, with the broker's very bytes.
    let kpress = answer_unsupported_api_versions(api_key::API_VERSIONS, 5, 7).unwrap();
    assert_eq!(kpress[4..], response[..]);
    let body = &response[4..];
    assert_eq!(api_versions_body_version(5, body), 0);
    let relayed = rewrite_response(api_key::API_VERSIONS, 5, body, &mut Proxy::default())
        .unwrap()
        .map_or_else(|| body.to_vec(), |b| b.to_vec());
    let refusal = ApiVersionsResponse::decode(&mut Bytes::from(relayed), 0).unwrap();
    assert_eq!(refusal.error_code, 35);
    assert!(!refusal.api_keys.is_empty());
    Versions(latest.unwrap())
}

fn create_topic(conn: &mut TcpStream) {
    let request = CreateTopicsRequest::default()
        .with_timeout_ms(30_000)
        .with_topics(vec![CreatableTopic::default()
            .with_name(TopicName(StrBytes::from_static_str(TOPIC)))
            .with_num_partitions(1)
            .with_replication_factor(1)]);
    let response: CreateTopicsResponse = call(conn, ApiKey::CreateTopics, 5, &request);
    assert_eq!(
        response.topics[0].error_code, 0,
        "{:?}",
        response.topics[0].error_message
    );
}

/// Rewrites real Metadata responses at every version; returns the topic id.
fn check_metadata(conn: &mut TcpStream, broker_port: u16, versions: &Versions) -> [u8; 16] {
    let mut topic_id = None;
    for version in versions.range(ApiKey::Metadata) {
        let mut request = MetadataRequest::default();
        // v0 asks for every topic with an empty list, later versions with null.
        request.topics = (version == 0).then(Vec::new);
        if version >= 4 {
            request.allow_auto_topic_creation = false;
        }
        let body = raw_call::<_, MetadataResponse>(conn, ApiKey::Metadata, version, &request);
        let mut proxy = Proxy::default();
        let new = rewrite_response(api_key::METADATA, version, &body, &mut proxy)
            .unwrap()
            .expect("brokers rewritten");
        let original = MetadataResponse::decode(&mut Bytes::from(body), version).unwrap();
        let rewritten = MetadataResponse::decode(&mut Bytes::from(new.to_vec()), version).unwrap();
        assert_eq!(
            proxy.brokers,
            vec![(1, "127.0.0.1".to_owned(), i32::from(broker_port))]
        );
        assert_eq!(rewritten.brokers[0].host.as_str(), "kpress.test");
        assert_eq!(rewritten.brokers[0].port, 29_001);
        let mut expected = original.clone();
        expected.brokers[0].host = StrBytes::from_static_str("kpress.test");
        expected.brokers[0].port = 29_001;
        assert_eq!(
            rewritten, expected,
            "Metadata v{version}: only the address changes"
        );
        if version >= 10 {
            let (id, name) = proxy
                .topics
                .iter()
                .find(|(_, name)| name == TOPIC)
                .expect("topic id reported")
                .clone();
            assert_eq!(name, TOPIC);
            topic_id = Some(id);
        }
    }
    // kpress's own request for ids, answered by the real broker.
    let id = topic_id.expect("broker serves Metadata v10+");
    let frame = metadata_request(12, 7, &[id]).unwrap();
    let response = exchange(conn, &frame[4..]);
    let body = response_body::<MetadataResponse>(&response, 12);
    let mut proxy = Proxy::default();
    rewrite_response(api_key::METADATA, 12, &body, &mut proxy).unwrap();
    assert_eq!(proxy.topics, vec![(id, TOPIC.to_owned())]);
    id
}

fn check_find_coordinator(conn: &mut TcpStream, broker_port: u16, versions: &Versions) {
    for version in versions.range(ApiKey::FindCoordinator) {
        let mut request = FindCoordinatorRequest::default();
        if version < 4 {
            request.key = StrBytes::from_static_str("group-1");
        } else {
            request.coordinator_keys = vec![StrBytes::from_static_str("group-1")];
        }
        // The offsets topic is created on first use: retry until it has a leader.
        let deadline = Instant::now() + Duration::from_secs(60);
        let body = loop {
            let body = raw_call::<_, FindCoordinatorResponse>(
                conn,
                ApiKey::FindCoordinator,
                version,
                &request,
            );
            let response =
                FindCoordinatorResponse::decode(&mut Bytes::from(body.clone()), version).unwrap();
            let error = if version < 4 {
                response.error_code
            } else {
                response.coordinators[0].error_code
            };
            if error == 0 {
                break body;
            }
            assert!(Instant::now() < deadline, "no coordinator: error {error}");
            std::thread::sleep(Duration::from_millis(300));
        };
        let mut proxy = Proxy::default();
        let new = rewrite_response(api_key::FIND_COORDINATOR, version, &body, &mut proxy)
            .unwrap()
            .expect("coordinator rewritten");
        assert_eq!(
            proxy.brokers,
            vec![(1, "127.0.0.1".to_owned(), i32::from(broker_port))]
        );
        let rewritten =
            FindCoordinatorResponse::decode(&mut Bytes::from(new.to_vec()), version).unwrap();
        let (host, port) = if version < 4 {
            (rewritten.host.as_str().to_owned(), rewritten.port)
        } else {
            (
                rewritten.coordinators[0].host.as_str().to_owned(),
                rewritten.coordinators[0].port,
            )
        };
        assert_eq!(
            (host.as_str(), port),
            ("kpress.test", 29_001),
            "FindCoordinator v{version}"
        );
    }
}

fn check_describe_cluster(conn: &mut TcpStream, versions: &Versions) {
    for version in versions.range(ApiKey::DescribeCluster) {
        let mut request = DescribeClusterRequest::default();
        if version >= 1 {
            request.endpoint_type = 1;
        }
        let body = raw_call::<_, DescribeClusterResponse>(
            conn,
            ApiKey::DescribeCluster,
            version,
            &request,
        );
        let new = rewrite_response(
            api_key::DESCRIBE_CLUSTER,
            version,
            &body,
            &mut Proxy::default(),
        )
        .unwrap()
        .expect("brokers rewritten");
        let rewritten =
            DescribeClusterResponse::decode(&mut Bytes::from(new.to_vec()), version).unwrap();
        assert_eq!(rewritten.error_code, 0);
        assert_eq!(rewritten.brokers[0].host.as_str(), "kpress.test");
        assert_eq!(rewritten.brokers[0].port, 29_001);
    }
}

/// Recompresses every partition with `policy`, counting the batches rewritten.
struct Recompress<'a> {
    policy: &'a RewritePolicy,
    recompressor: &'a mut Recompressor,
    rewritten: u64,
}

impl RecordsRewriter for Recompress<'_> {
    fn rewrite_records(&mut self, _topic: &str, records: &[u8], out: &mut Vec<u8>) -> bool {
        let mut stats = RewriteStats::default();
        self.recompressor
            .rewrite_records(records, self.policy, out, &mut stats);
        self.rewritten += stats.batches_rewritten;
        stats.batches_rewritten > 0
    }
}

/// Produce at every version with a gzip batch kpress recompresses; returns
/// the codec each offset's batch was written in, in offset order.
fn check_produce(conn: &mut TcpStream, topic_id: [u8; 16], versions: &Versions) -> Vec<Codec> {
    let mut stored = Vec::new();
    let names = |id: &[u8; 16]| (*id == topic_id).then(|| Arc::<str>::from(TOPIC));
    let mut recompressor = Recompressor::new();
    for version in versions.range(ApiKey::Produce) {
        // zstd needs Produce v7+; older versions get lz4.
        let target = if version >= 7 {
            Codec::Zstd
        } else {
            Codec::Lz4
        };
        // gzip to lz4 may not shrink, and is stored all the same: the point here is
        // what the broker accepts.
        let policy = RewritePolicy::to_codec(target, CompressionOptions::default());
        let records: Vec<Record> = (0..20)
            .map(|i| {
                Record::value(
                    format!(
                        "{{\"version\":{version},\"record\":{i},\"text\":\"kpress recompresses\"}}"
                    )
                    .repeat(5),
                )
            })
            .collect();
        let batch = BatchBuilder::codec(Codec::Gzip).build(&records).unwrap();
        let mut topic =
            TopicProduceData::default().with_partition_data(vec![PartitionProduceData::default()
                .with_index(0)
                .with_records(Some(Bytes::from(batch)))]);
        if version >= 13 {
            topic.topic_id = Uuid::from_bytes(topic_id);
        } else {
            topic.name = TopicName(StrBytes::from_static_str(TOPIC));
        }
        let request = ProduceRequest::default()
            .with_acks(-1)
            .with_timeout_ms(30_000)
            .with_topic_data(vec![topic]);
        let payload = request_frame(ApiKey::Produce, version, version, &request);
        let header_len = payload.len() - request.compute_size(version).unwrap();
        let mut rewriter = Recompress {
            policy: &policy,
            recompressor: &mut recompressor,
            rewritten: 0,
        };
        let rewrite =
            rewrite_produce_with(&payload, header_len, version, &names, &mut rewriter).unwrap();
        assert!(rewrite.unknown_topic_ids.is_empty());
        assert_eq!(rewriter.rewritten, 1, "Produce v{version}");
        let response = exchange(conn, rewrite.payload().expect("rewritten"));
        let body = response_body::<ProduceResponse>(&response, version);
        if version >= 10 {
            assert_eq!(
                rewrite_response(api_key::PRODUCE, version, &body, &mut Proxy::default()),
                Ok(None)
            );
        }
        let response = ProduceResponse::decode(&mut Bytes::from(body), version).unwrap();
        let partition = &response.responses[0].partition_responses[0];
        assert_eq!(
            partition.error_code, 0,
            "Produce v{version}: {:?}",
            partition.error_message
        );
        assert_eq!(partition.base_offset, 20 * stored.len() as i64);
        stored.push(target);
    }
    stored
}

/// Fetches everything back at every Fetch version and checks the stored batches.
fn check_fetch(conn: &mut TcpStream, topic_id: [u8; 16], stored: &[Codec], versions: &Versions) {
    for version in versions.range(ApiKey::Fetch) {
        let mut topic = FetchTopic::default().with_partitions(vec![FetchPartition::default()
            .with_partition(0)
            .with_fetch_offset(0)
            .with_partition_max_bytes(10 << 20)]);
        if version >= 13 {
            topic.topic_id = Uuid::from_bytes(topic_id);
        } else {
            topic.topic = TopicName(StrBytes::from_static_str(TOPIC));
        }
        let request = FetchRequest::default()
            .with_max_wait_ms(100)
            .with_min_bytes(1)
            .with_topics(vec![topic]);
        let body = raw_call::<_, FetchResponse>(conn, ApiKey::Fetch, version, &request);
        if version >= 16 {
            assert_eq!(
                rewrite_response(api_key::FETCH, version, &body, &mut Proxy::default()),
                Ok(None)
            );
        }
        let response = FetchResponse::decode(&mut Bytes::from(body), version).unwrap();
        let partition = &response.responses[0].partitions[0];
        assert_eq!(partition.error_code, 0, "Fetch v{version}");
        let records = partition.records.clone().unwrap();
        let codecs: Vec<Codec> = kpress_batch::batches(&records)
            .map(|batch| {
                let batch: RecordBatch<'_> = batch.unwrap();
                assert!(batch.crc_is_valid());
                assert_eq!(batch.records_count(), 20);
                batch.codec().unwrap()
            })
            .collect();
        assert_eq!(
            codecs, stored,
            "Fetch v{version}: the broker kept kpress's codecs"
        );
    }
}

fn round_trip(kafka_version: &str) {
    let cluster = KafkaCluster::start(kafka_version, 1).expect("starting Kafka");
    let broker = cluster.node_addresses()[0];
    let mut conn = connect(broker);
    let versions = check_api_versions(&mut conn);
    create_topic(&mut conn);
    let topic_id = check_metadata(&mut conn, broker.port(), &versions);
    check_find_coordinator(&mut conn, broker.port(), &versions);
    check_describe_cluster(&mut conn, &versions);
    let stored = check_produce(&mut conn, topic_id, &versions);
    assert!(
        stored.len() >= 9,
        "Kafka {kafka_version} serves Produce v3 and up"
    );
    check_fetch(&mut conn, topic_id, &stored, &versions);
}

#[test]
fn kafka_4_1_round_trip() {
    round_trip(kafka_version());
}

#[test]
fn kafka_3_9_round_trip() {
    round_trip(kafka_old_version());
}

/// KIP-951 NodeEndpoints from a real broker: a two-node cluster where the
/// partition lives on node 1 only, and Produce v10+ / Fetch v16+ go to node 2,
/// which answers NOT_LEADER_OR_FOLLOWER with node 1's real address.
#[test]
fn kafka_4_1_node_endpoints_from_a_broker_that_is_not_the_leader() {
    use kafka_protocol::messages::create_topics_request::CreatableReplicaAssignment;
    use kafka_protocol::messages::BrokerId;

    const NOT_LEADER_OR_FOLLOWER: i16 = 6;
    let cluster = KafkaCluster::start(kafka_version(), 2).expect("starting 2 Kafka nodes");
    let (leader, other) = (cluster.node_addresses()[0], cluster.node_addresses()[1]);
    let mut conn = connect(leader);
    let versions = check_api_versions(&mut conn);
    let request = CreateTopicsRequest::default()
        .with_timeout_ms(30_000)
        .with_topics(vec![CreatableTopic::default()
            .with_name(TopicName(StrBytes::from_static_str(TOPIC)))
            .with_num_partitions(-1)
            .with_replication_factor(-1)
            .with_assignments(vec![CreatableReplicaAssignment::default()
                .with_partition_index(0)
                .with_broker_ids(vec![BrokerId(1)])])]);
    let created: CreateTopicsResponse = call(&mut conn, ApiKey::CreateTopics, 5, &request);
    assert_eq!(
        created.topics[0].error_code, 0,
        "{:?}",
        created.topics[0].error_message
    );

    // Wait until node 2 knows the topic and its leader.
    let mut wrong = connect(other);
    let deadline = Instant::now() + Duration::from_secs(60);
    let topic_id = loop {
        let mut request = MetadataRequest::default();
        request.topics = None;
        let response: MetadataResponse = call(&mut wrong, ApiKey::Metadata, 12, &request);
        let known = response.topics.iter().find(|t| {
            t.name.as_ref().is_some_and(|n| n.as_str() == TOPIC)
                && t.partitions.first().is_some_and(|p| p.leader_id.0 == 1)
        });
        if let Some(topic) = known {
            break *topic.topic_id.as_bytes();
        }
        assert!(Instant::now() < deadline, "node 2 never learned the topic");
        std::thread::sleep(Duration::from_millis(200));
    };
    let leader_address = (1, "127.0.0.1".to_owned(), i32::from(leader.port()));

    let produce_versions = versions.range(ApiKey::Produce);
    for version in 10.max(*produce_versions.start())..=*produce_versions.end() {
        let batch = BatchBuilder::codec(Codec::None)
            .build(&[Record::value("misdirected")])
            .unwrap();
        let mut topic =
            TopicProduceData::default().with_partition_data(vec![PartitionProduceData::default()
                .with_index(0)
                .with_records(Some(Bytes::from(batch)))]);
        if version >= 13 {
            topic.topic_id = Uuid::from_bytes(topic_id);
        } else {
            topic.name = TopicName(StrBytes::from_static_str(TOPIC));
        }
        let request = ProduceRequest::default()
            .with_acks(1)
            .with_timeout_ms(10_000)
            .with_topic_data(vec![topic]);
        let body = raw_call::<_, ProduceResponse>(&mut wrong, ApiKey::Produce, version, &request);
        let mut proxy = Proxy::default();
        let new = rewrite_response(api_key::PRODUCE, version, &body, &mut proxy)
            .unwrap()
            .expect("NodeEndpoints rewritten");
        assert_eq!(
            proxy.brokers,
            vec![leader_address.clone()],
            "Produce v{version}"
        );
        let original = ProduceResponse::decode(&mut Bytes::from(body), version).unwrap();
        let partition = &original.responses[0].partition_responses[0];
        assert_eq!(partition.error_code, NOT_LEADER_OR_FOLLOWER);
        assert_eq!(partition.current_leader.leader_id.0, 1);
        let rewritten = ProduceResponse::decode(&mut Bytes::from(new.to_vec()), version).unwrap();
        let mut expected = original.clone();
        expected.node_endpoints[0].host = StrBytes::from_static_str("kpress.test");
        expected.node_endpoints[0].port = 29_001;
        assert_eq!(rewritten, expected, "Produce v{version}");
    }

    let fetch_versions = versions.range(ApiKey::Fetch);
    for version in 16.max(*fetch_versions.start())..=*fetch_versions.end() {
        let request = FetchRequest::default()
            .with_max_wait_ms(100)
            .with_min_bytes(1)
            .with_topics(vec![FetchTopic::default()
                .with_topic_id(Uuid::from_bytes(topic_id))
                .with_partitions(vec![FetchPartition::default()
                    .with_partition(0)
                    .with_fetch_offset(0)
                    .with_partition_max_bytes(1 << 20)])]);
        let body = raw_call::<_, FetchResponse>(&mut wrong, ApiKey::Fetch, version, &request);
        let mut proxy = Proxy::default();
        let new = rewrite_response(api_key::FETCH, version, &body, &mut proxy)
            .unwrap()
            .expect("NodeEndpoints rewritten");
        assert_eq!(
            proxy.brokers,
            vec![leader_address.clone()],
            "Fetch v{version}"
        );
        let original = FetchResponse::decode(&mut Bytes::from(body), version).unwrap();
        assert_eq!(
            original.responses[0].partitions[0].error_code,
            NOT_LEADER_OR_FOLLOWER
        );
        let rewritten = FetchResponse::decode(&mut Bytes::from(new.to_vec()), version).unwrap();
        let mut expected = original.clone();
        expected.node_endpoints[0].host = StrBytes::from_static_str("kpress.test");
        expected.node_endpoints[0].port = 29_001;
        assert_eq!(rewritten, expected, "Fetch v{version}");
    }
}
