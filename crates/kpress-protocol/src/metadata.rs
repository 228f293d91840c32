//! Metadata (all versions kafka-protocol 0.18 knows, v0-v13): broker
//! addresses rewritten, topic ids reported; and kpress's own Metadata requests.

use bytes::{BufMut, BytesMut};
use kafka_protocol::messages::{
    metadata_request::MetadataRequestTopic, ApiKey, MetadataRequest, MetadataResponse,
    RequestHeader,
};
use kafka_protocol::protocol::{Encodable, HeaderVersion, StrBytes};
use uuid::Uuid;

use crate::error::{check_version, ProtocolError, WireError};
use crate::response::{encode, encode_failed, guarded_decode, replace_address, ResponseObserver};
use crate::wire::Reader;

const API: &str = "Metadata";
pub(crate) const METADATA_MIN_VERSION: i16 = 0;
pub(crate) const METADATA_MAX_VERSION: i16 = 13;
const FIRST_FLEXIBLE: i16 = 9;
/// Metadata v10 is the first to carry topic ids (in responses and requests).
const FIRST_TOPIC_ID: i16 = 10;

pub(crate) fn rewrite_metadata_response(
    api_version: i16,
    body: &[u8],
    observer: &mut dyn ResponseObserver,
) -> Result<Option<BytesMut>, ProtocolError> {
    check_version(API, api_version, METADATA_MIN_VERSION, METADATA_MAX_VERSION)?;
    let mut response: MetadataResponse =
        guarded_decode(API, api_version, body, walk_metadata_response)?;
    for topic in &response.topics {
        if let Some(name) = &topic.name {
            if !topic.topic_id.is_nil() {
                observer.topic(*topic.topic_id.as_bytes(), name.as_str());
            }
        }
    }
    if response.brokers.is_empty() {
        return Ok(None);
    }
    for broker in &mut response.brokers {
        replace_address(
            observer,
            broker.node_id.0,
            &mut broker.host,
            &mut broker.port,
        );
    }
    encode(API, api_version, &response).map(Some)
}

/// Bounds-checked walk of a Metadata response body: the guard before decoding.
fn walk_metadata_response(body: &[u8], v: i16) -> Result<(), WireError> {
    let flex = v >= FIRST_FLEXIBLE;
    let mut r = Reader::new(body);
    if v >= 3 {
        r.i32()?; // throttle_time_ms
    }
    let min_broker = if flex { 4 + 1 + 4 + 1 + 1 } else { 4 + 2 + 4 };
    let brokers = r.required_count(flex, min_broker, "brokers")?;
    for _ in 0..brokers {
        r.i32()?; // node_id
        r.skip_string(flex)?; // host
        r.i32()?; // port
        if v >= 1 {
            r.skip_string(flex)?; // rack
        }
        if flex {
            r.skip_tagged_fields()?;
        }
    }
    if v >= 2 {
        r.skip_string(flex)?; // cluster_id
    }
    if v >= 1 {
        r.i32()?; // controller_id
    }
    let min_topic = if flex { 2 + 1 + 1 + 1 } else { 2 + 2 + 4 };
    let topics = r.required_count(flex, min_topic, "topics")?;
    for _ in 0..topics {
        r.i16()?; // error_code
        r.skip_string(flex)?; // name
        if v >= FIRST_TOPIC_ID {
            r.uuid()?;
        }
        if v >= 1 {
            r.skip(1)?; // is_internal
        }
        let min_partition = if flex {
            2 + 4 + 4 + 1 + 1 + 1
        } else {
            2 + 4 + 4 + 4 + 4
        };
        let partitions = r.required_count(flex, min_partition, "partitions")?;
        for _ in 0..partitions {
            r.i16()?; // error_code
            r.i32()?; // partition_index
            r.i32()?; // leader_id
            if v >= 7 {
                r.i32()?; // leader_epoch
            }
            let node_lists = if v >= 5 { 3 } else { 2 }; // replicas, isr, offline
            for _ in 0..node_lists {
                let nodes = r.required_count(flex, 4, "replica list")?;
                r.skip(nodes * 4)?;
            }
            if flex {
                r.skip_tagged_fields()?;
            }
        }
        if v >= 8 {
            r.i32()?; // topic_authorized_operations
        }
        if flex {
            r.skip_tagged_fields()?;
        }
    }
    if (8..=10).contains(&v) {
        r.i32()?; // cluster_authorized_operations
    }
    if v >= 13 {
        r.i16()?; // error_code
    }
    if flex {
        r.skip_tagged_fields()?;
    }
    r.finish()
}

/// A complete Metadata request frame (4-byte size prefix, request header,
/// body) for kpress's own calls: learning the brokers at start and naming
/// Produce v13 topic ids. With no `topic_ids` it asks for every topic; ids
/// need Metadata v10+ (with an older version, every topic is asked for).
pub fn metadata_request(
    api_version: i16,
    correlation_id: i32,
    topic_ids: &[[u8; 16]],
) -> Result<BytesMut, ProtocolError> {
    check_version(API, api_version, METADATA_MIN_VERSION, METADATA_MAX_VERSION)?;
    let version = api_version;
    let topics = if topic_ids.is_empty() || version < FIRST_TOPIC_ID {
        // v0 reads an empty list as "all topics"; v1+ reads null so.
        (version == 0).then(Vec::new)
    } else {
        Some(
            topic_ids
                .iter()
                .map(|id| {
                    MetadataRequestTopic::default()
                        .with_topic_id(Uuid::from_bytes(*id))
                        .with_name(None)
                })
                .collect(),
        )
    };
    let mut request = MetadataRequest::default().with_topics(topics);
    if version >= 4 {
        // Learning about topics must never create them.
        request.allow_auto_topic_creation = false;
    }
    let header = RequestHeader::default()
        .with_request_api_key(ApiKey::Metadata as i16)
        .with_request_api_version(version)
        .with_correlation_id(correlation_id)
        .with_client_id(Some(StrBytes::from_static_str("kpress")));
    let mut frame = BytesMut::new();
    frame.put_i32(0); // size, fixed up below
    let encode_error = encode_failed(API, version);
    header
        .encode(&mut frame, MetadataRequest::header_version(version))
        .map_err(&encode_error)?;
    request.encode(&mut frame, version).map_err(encode_error)?;
    let size = frame.len() - 4;
    frame[..4].copy_from_slice(&(size as i32).to_be_bytes());
    Ok(frame)
}
