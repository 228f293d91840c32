//! kpress's own questions about one partition as kafka-protocol types: Metadata of
//! named topics (who leads each partition) and a Fetch of one partition from an
//! offset, in its classic layouts (v4-v11). Their answers are decoded only once the
//! walks the proxy relays them with have checked every count.

use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::{
    BrokerId, FetchRequest, FetchResponse, MetadataRequest, MetadataResponse, TopicName,
};
use kafka_protocol::protocol::StrBytes;

use crate::error::WireError;
use crate::fetch::{walk_fetch_response, FETCH_LAST_CLASSIC_VERSION, FETCH_MIN_VERSION};
use crate::metadata::guard_metadata_response;
use crate::{api, api_key};

/// A Metadata request for `topics` by name, which never creates them.
pub fn metadata_topics_request(topics: &[&str]) -> MetadataRequest {
    MetadataRequest::default()
        .with_topics(Some(
            topics
                .iter()
                .map(|topic| {
                    MetadataRequestTopic::default()
                        .with_name(Some(TopicName(StrBytes::from_string((*topic).to_owned()))))
                })
                .collect(),
        ))
        .with_allow_auto_topic_creation(false)
}

/// A Fetch request (outside any fetch session) of `topic`-`partition` from `offset`,
/// answered with at most `max_bytes` of records (more when the first batch alone is
/// larger, as Kafka does), after at most `max_wait_ms` when there is nothing new.
pub fn fetch_partition_request(
    topic: &str,
    partition: i32,
    offset: i64,
    max_bytes: i32,
    max_wait_ms: i32,
) -> FetchRequest {
    FetchRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_max_wait_ms(max_wait_ms)
        .with_min_bytes(1)
        .with_max_bytes(max_bytes)
        .with_isolation_level(0)
        .with_session_id(0)
        .with_session_epoch(-1)
        .with_topics(vec![FetchTopic::default()
            .with_topic(TopicName(StrBytes::from_string(topic.to_owned())))
            .with_partitions(vec![FetchPartition::default()
                .with_partition(partition)
                .with_current_leader_epoch(-1)
                .with_fetch_offset(offset)
                .with_log_start_offset(-1)
                .with_partition_max_bytes(max_bytes)])])
}

impl crate::typed::sealed::Guarded for MetadataResponse {
    const API: &'static str = "Metadata";
    const VERSIONS: api::Versions = api::parsed(api_key::METADATA);

    fn guard(body: &[u8], version: i16) -> Result<(), WireError> {
        guard_metadata_response(body, version)
    }
}

impl crate::typed::sealed::Guarded for FetchResponse {
    const API: &'static str = "Fetch";
    const VERSIONS: api::Versions = api::Versions {
        min: FETCH_MIN_VERSION,
        max: FETCH_LAST_CLASSIC_VERSION,
    };

    fn guard(body: &[u8], version: i16) -> Result<(), WireError> {
        walk_fetch_response(body, version, |_, _, _| {})
    }
}

#[cfg(test)]
mod tests {
    use bytes::{Bytes, BytesMut};
    use kafka_protocol::messages::fetch_response::{FetchableTopicResponse, PartitionData};
    use kafka_protocol::messages::metadata_response::{
        MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
    };
    use kafka_protocol::messages::RequestHeader;
    use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion};

    use super::*;
    use crate::frame::SIZE_PREFIX_LEN;
    use crate::{decode_response, request_frame};

    fn metadata(version: i16) -> Vec<u8> {
        let response = MetadataResponse::default()
            .with_brokers(vec![MetadataResponseBroker::default()
                .with_node_id(BrokerId(2))
                .with_host(StrBytes::from_static_str("b2"))
                .with_port(9092)])
            .with_topics(vec![MetadataResponseTopic::default()
                .with_name(Some(TopicName(StrBytes::from_static_str("fleet"))))
                .with_partitions(vec![MetadataResponsePartition::default()
                    .with_partition_index(0)
                    .with_leader_id(BrokerId(2))
                    .with_replica_nodes(vec![BrokerId(2), BrokerId(1)])])]);
        let mut out = BytesMut::new();
        response.encode(&mut out, version).unwrap();
        out.to_vec()
    }

    fn fetch(version: i16) -> Vec<u8> {
        let response =
            FetchResponse::default().with_responses(vec![FetchableTopicResponse::default()
                .with_topic(TopicName(StrBytes::from_static_str("fleet")))
                .with_partitions(vec![PartitionData::default()
                    .with_high_watermark(7)
                    .with_records(Some(Bytes::from_static(b"batches")))])]);
        let mut out = BytesMut::new();
        response.encode(&mut out, version).unwrap();
        out.to_vec()
    }

    #[test]
    fn answers_read_back_at_every_version_and_cut_ones_fail() {
        let versions = api::parsed(api_key::METADATA);
        for version in versions.min..=versions.max {
            let body = metadata(version);
            let response: MetadataResponse = decode_response(version, &body).unwrap();
            assert_eq!(response.topics[0].partitions[0].leader_id, BrokerId(2));
            for cut in 0..body.len() {
                assert!(decode_response::<MetadataResponse>(version, &body[..cut]).is_err());
            }
        }
        for version in FETCH_MIN_VERSION..=FETCH_LAST_CLASSIC_VERSION {
            let body = fetch(version);
            let response: FetchResponse = decode_response(version, &body).unwrap();
            let partition = &response.responses[0].partitions[0];
            assert_eq!(partition.high_watermark, 7);
            assert_eq!(partition.records.as_deref(), Some(&b"batches"[..]));
            for cut in 0..body.len() {
                assert!(decode_response::<FetchResponse>(version, &body[..cut]).is_err());
            }
        }
    }

    #[test]
    fn hostile_counts_fail_before_anything_is_sized() {
        // Metadata v1: a brokers count of i32::MAX.
        let body = [0x7f, 0xff, 0xff, 0xff, 0, 0, 0, 0];
        assert!(decode_response::<MetadataResponse>(1, &body).is_err());
        // Fetch v11: throttle, error, session, then a topics count of i32::MAX.
        let mut body = vec![0; 10];
        body.extend_from_slice(&[0x7f, 0xff, 0xff, 0xff]);
        assert!(decode_response::<FetchResponse>(11, &body).is_err());
    }

    proptest::proptest! {
        /// Whatever a broker sends, the guarded decoders of kpress's own answers fail
        /// or decode; they never panic and never size anything from a wild count.
        #[test]
        fn arbitrary_answers_never_panic(
            body in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..200),
            flips in proptest::collection::vec((0usize..400, proptest::prelude::any::<u8>()), 0..4),
            version in 0i16..14,
        ) {
            use kafka_protocol::messages::{CreateTopicsResponse, ProduceResponse};
            let _ = decode_response::<MetadataResponse>(version, &body);
            let _ = decode_response::<FetchResponse>(version, &body);
            let _ = decode_response::<ProduceResponse>(version, &body);
            let _ = decode_response::<CreateTopicsResponse>(version, &body);
            // Valid answers with a few bytes changed.
            for mut valid in [metadata(version.min(13)), fetch(version.clamp(4, 11))] {
                for (at, byte) in &flips {
                    let len = valid.len().max(1);
                    if let Some(b) = valid.get_mut(at % len) {
                        *b = *byte;
                    }
                }
                let _ = decode_response::<MetadataResponse>(version.min(13), &valid);
                let _ = decode_response::<FetchResponse>(version.clamp(4, 11), &valid);
            }
        }
    }

    #[test]
    fn the_requests_name_the_topic_partition_and_offset() {
        let request = fetch_partition_request("fleet", 0, 12, 1 << 20, 100);
        for version in FETCH_MIN_VERSION..=FETCH_LAST_CLASSIC_VERSION {
            let frame = request_frame(&request, version, -1, "kpress").unwrap();
            let mut payload = Bytes::copy_from_slice(&frame[SIZE_PREFIX_LEN..]);
            RequestHeader::decode(&mut payload, FetchRequest::header_version(version)).unwrap();
            let decoded = FetchRequest::decode(&mut payload, version).unwrap();
            assert!(payload.is_empty(), "v{version}: trailing bytes");
            let partition = &decoded.topics[0].partitions[0];
            assert_eq!((partition.partition, partition.fetch_offset), (0, 12));
        }
        let request = metadata_topics_request(&["fleet"]);
        let frame = request_frame(&request, 12, -1, "kpress").unwrap();
        let mut payload = Bytes::copy_from_slice(&frame[SIZE_PREFIX_LEN..]);
        RequestHeader::decode(&mut payload, MetadataRequest::header_version(12)).unwrap();
        let decoded = MetadataRequest::decode(&mut payload, 12).unwrap();
        assert!(!decoded.allow_auto_topic_creation);
        assert_eq!(
            decoded.topics.unwrap()[0].name.as_deref().map(|n| &**n),
            Some("fleet")
        );
    }
}
