//! CreateTopics (v2-v4, the classic layouts Kafka 2.4 through 4.x all serve) for the
//! topics kpress creates itself: a request for one topic with its configs, and the
//! response, its counts checked against the bytes present before kafka-protocol sizes
//! anything from them.

use kafka_protocol::messages::create_topics_request::{CreatableTopic, CreatableTopicConfig};
use kafka_protocol::messages::{CreateTopicsRequest, CreateTopicsResponse, TopicName};
use kafka_protocol::protocol::StrBytes;

use crate::api;
use crate::error::WireError;
use crate::wire::Reader;

const API: &str = "CreateTopics";
/// v0-v1 are gone from Kafka 4.0 (KIP-896).
pub const CREATE_TOPICS_MIN_VERSION: i16 = 2;
/// v4 (Kafka 2.4+) takes -1 for the broker's default partitions and replication
/// factor (KIP-464); v5 is the first flexible one.
pub const CREATE_TOPICS_MAX_VERSION: i16 = 4;

/// A CreateTopics request for `topic` with `partitions`, `replication_factor` (-1: the
/// broker's default) and `configs`, waiting at most `timeout_ms` for the controller.
pub fn create_topic_request(
    topic: &str,
    partitions: i32,
    replication_factor: i16,
    configs: &[(&str, &str)],
    timeout_ms: i32,
) -> CreateTopicsRequest {
    let configs = configs
        .iter()
        .map(|(name, value)| {
            CreatableTopicConfig::default()
                .with_name(StrBytes::from_string((*name).to_owned()))
                .with_value(Some(StrBytes::from_string((*value).to_owned())))
        })
        .collect();
    CreateTopicsRequest::default()
        .with_topics(vec![CreatableTopic::default()
            .with_name(TopicName(StrBytes::from_string(topic.to_owned())))
            .with_num_partitions(partitions)
            .with_replication_factor(replication_factor)
            .with_configs(configs)])
        .with_timeout_ms(timeout_ms)
        .with_validate_only(false)
}

impl crate::typed::sealed::Guarded for CreateTopicsResponse {
    const API: &'static str = API;
    const VERSIONS: api::Versions = api::Versions {
        min: CREATE_TOPICS_MIN_VERSION,
        max: CREATE_TOPICS_MAX_VERSION,
    };

    fn guard(body: &[u8], version: i16) -> Result<(), WireError> {
        walk_create_topics_response(body, version)
    }
}

/// Bounds-checked walk of a classic CreateTopics response (v2-v4).
fn walk_create_topics_response(body: &[u8], _v: i16) -> Result<(), WireError> {
    let mut r = Reader::new(body);
    r.i32()?; // throttle_time_ms
              // name, error_code, error_message
    let topics = r.required_count(false, 2 + 2 + 2, "topics")?;
    for _ in 0..topics {
        r.skip_string(false)?; // name
        r.i16()?; // error_code
        r.skip_string(false)?; // error_message
    }
    r.finish()
}

#[cfg(test)]
mod tests {
    use bytes::{Bytes, BytesMut};
    use kafka_protocol::messages::create_topics_response::CreatableTopicResult;
    use kafka_protocol::messages::RequestHeader;
    use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion};

    use super::*;
    use crate::frame::SIZE_PREFIX_LEN;
    use crate::{api_key, decode_response, request_frame};

    fn encoded(version: i16) -> Vec<u8> {
        let response = CreateTopicsResponse::default()
            .with_throttle_time_ms(5)
            .with_topics(vec![
                CreatableTopicResult::default()
                    .with_name(TopicName(StrBytes::from_static_str("fleet"))),
                CreatableTopicResult::default()
                    .with_name(TopicName(StrBytes::from_static_str("taken")))
                    .with_error_code(36)
                    .with_error_message(Some(StrBytes::from_static_str("exists"))),
            ]);
        let mut out = BytesMut::new();
        response.encode(&mut out, version).unwrap();
        out.to_vec()
    }

    #[test]
    fn every_version_reads_back_and_cut_bodies_fail() {
        for version in CREATE_TOPICS_MIN_VERSION..=CREATE_TOPICS_MAX_VERSION {
            let body = encoded(version);
            let response: CreateTopicsResponse = decode_response(version, &body).unwrap();
            assert_eq!(response.topics.len(), 2);
            assert_eq!(response.topics[1].error_code, 36);
            assert_eq!(
                response.topics[1].error_message.as_deref(),
                Some("exists"),
                "v{version}"
            );
            for cut in 0..body.len() {
                assert!(
                    decode_response::<CreateTopicsResponse>(version, &body[..cut]).is_err(),
                    "v{version} cut at {cut}"
                );
            }
            let mut longer = body.clone();
            longer.push(0);
            assert!(decode_response::<CreateTopicsResponse>(version, &longer).is_err());
        }
    }

    #[test]
    fn a_hostile_count_fails_before_anything_is_sized() {
        let body = [0, 0, 0, 0, 0x7f, 0xff, 0xff, 0xff, 0, 0];
        assert!(decode_response::<CreateTopicsResponse>(4, &body).is_err());
    }

    #[test]
    fn the_request_names_the_topic_its_settings_and_configs() {
        let request = create_topic_request("fleet", 1, -1, &[("cleanup.policy", "compact")], 9000);
        for version in CREATE_TOPICS_MIN_VERSION..=CREATE_TOPICS_MAX_VERSION {
            let frame = request_frame(&request, version, -3, "kpress").unwrap();
            let mut payload = Bytes::copy_from_slice(&frame[SIZE_PREFIX_LEN..]);
            let header =
                RequestHeader::decode(&mut payload, CreateTopicsRequest::header_version(version))
                    .unwrap();
            assert_eq!(header.request_api_key, api_key::CREATE_TOPICS);
            let decoded = CreateTopicsRequest::decode(&mut payload, version).unwrap();
            assert!(payload.is_empty(), "v{version}: trailing bytes");
            assert_eq!(decoded, request);
        }
        assert!(request_frame(&request, 5, 1, "k").is_err());
        assert!(request_frame(&request, 1, 1, "k").is_err());
    }
}
