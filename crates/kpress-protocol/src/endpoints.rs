//! KIP-951 `NodeEndpoints` in Produce (v10+) and Fetch (v16+) responses: the
//! top-level tagged field (tag 0) that tells clients where a partition's new
//! leader lives. Its addresses are rewritten like Metadata's.
//!
//! Fetch responses carry the consumed records, so the response is never
//! decoded whole: a bounds-checked walk finds the top-level tagged fields;
//! without tag 0 (the usual case) the body is relayed untouched. With it,
//! only that field is decoded (kafka-protocol), rewritten and spliced back.

use std::ops::Range;

use bytes::BytesMut;
use kafka_protocol::messages::{
    fetch_response, produce_response, share_acknowledge_response, share_fetch_response,
};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};

use crate::error::{check_version, malformed_response, ProtocolError, WireError};
use crate::rewriting::{encode_failed, replace_address, ResponseObserver};
use crate::wire::{put_uvarint, Reader, TaggedField};
use crate::{api, api_key};

const NODE_ENDPOINTS_TAG: u32 = 0;
/// node_id, empty host, port, null rack, no tagged fields.
const MIN_ENDPOINT: usize = 4 + 1 + 4 + 1 + 1;

/// The fields kpress rewrites, common to Produce's and Fetch's `NodeEndpoint`.
trait NodeEndpoint: Decodable + Encodable {
    fn address(&mut self) -> (i32, &mut StrBytes, &mut i32);
}

impl NodeEndpoint for produce_response::NodeEndpoint {
    fn address(&mut self) -> (i32, &mut StrBytes, &mut i32) {
        (self.node_id.0, &mut self.host, &mut self.port)
    }
}

impl NodeEndpoint for fetch_response::NodeEndpoint {
    fn address(&mut self) -> (i32, &mut StrBytes, &mut i32) {
        (self.node_id.0, &mut self.host, &mut self.port)
    }
}

impl NodeEndpoint for share_fetch_response::NodeEndpoint {
    fn address(&mut self) -> (i32, &mut StrBytes, &mut i32) {
        (self.node_id.0, &mut self.host, &mut self.port)
    }
}

impl NodeEndpoint for share_acknowledge_response::NodeEndpoint {
    fn address(&mut self) -> (i32, &mut StrBytes, &mut i32) {
        (self.node_id.0, &mut self.host, &mut self.port)
    }
}

/// Where a response keeps its `NodeEndpoints` compact array.
#[derive(Debug)]
enum Location<'a> {
    /// Produce and Fetch: a top-level tagged field.
    Tagged(TaggedField<'a>),
    /// ShareFetch and ShareAcknowledge: a regular field at `range` of the body.
    Field(Range<usize>),
}

/// A response kind that may carry `NodeEndpoints`.
struct Kind {
    api: &'static str,
    versions: api::Versions,
    first_with_endpoints: i16,
    find: FindEndpoints,
    rewrite: RewriteEndpoints,
}

/// Locates the `NodeEndpoints` array in a response body.
type FindEndpoints = for<'a> fn(&'a [u8], i16) -> Result<Option<Location<'a>>, WireError>;
/// Rewrites a `NodeEndpoints` array: (api, version, array, observer) to the new array.
type RewriteEndpoints = fn(
    &'static str,
    i16,
    &[u8],
    &mut dyn ResponseObserver,
) -> Result<Option<Vec<u8>>, ProtocolError>;

fn kind(api_key: i16) -> Option<Kind> {
    Some(match api_key {
        api_key::PRODUCE => Kind {
            api: "Produce",
            versions: api::parsed(api_key::PRODUCE),
            first_with_endpoints: api::node_addresses_from(api_key::PRODUCE),
            find: find_produce_node_endpoints,
            rewrite: rewrite_endpoints::<produce_response::NodeEndpoint>,
        },
        api_key::FETCH => Kind {
            api: "Fetch",
            versions: api::parsed(api_key::FETCH),
            first_with_endpoints: api::node_addresses_from(api_key::FETCH),
            find: find_fetch_node_endpoints,
            rewrite: rewrite_endpoints::<fetch_response::NodeEndpoint>,
        },
        api_key::SHARE_FETCH => Kind {
            api: "ShareFetch",
            versions: api::parsed(api_key::SHARE_FETCH),
            first_with_endpoints: api::node_addresses_from(api_key::SHARE_FETCH),
            find: find_share_fetch_node_endpoints,
            rewrite: rewrite_endpoints::<share_fetch_response::NodeEndpoint>,
        },
        api_key::SHARE_ACKNOWLEDGE => Kind {
            api: "ShareAcknowledge",
            versions: api::parsed(api_key::SHARE_ACKNOWLEDGE),
            first_with_endpoints: api::node_addresses_from(api_key::SHARE_ACKNOWLEDGE),
            find: find_share_acknowledge_node_endpoints,
            rewrite: rewrite_endpoints::<share_acknowledge_response::NodeEndpoint>,
        },
        _ => return None,
    })
}

pub(crate) fn rewrite_node_endpoints(
    api_key: i16,
    api_version: i16,
    body: &[u8],
    observer: &mut dyn ResponseObserver,
) -> Result<Option<BytesMut>, ProtocolError> {
    let Some(kind) = kind(api_key) else {
        return Ok(None);
    };
    check_version(kind.api, api_version, kind.versions.min, kind.versions.max)?;
    if api_version < kind.first_with_endpoints {
        return Ok(None);
    }
    let location =
        (kind.find)(body, api_version).map_err(malformed_response(kind.api, api_version))?;
    let (replace, array) = match &location {
        None => return Ok(None),
        Some(Location::Tagged(field)) => (
            field.start..field.content_start + field.content.len(),
            field.content,
        ),
        Some(Location::Field(range)) => (range.clone(), &body[range.clone()]),
    };
    let Some(new_array) = (kind.rewrite)(kind.api, api_version, array, observer)? else {
        return Ok(None);
    };
    let mut out = BytesMut::with_capacity(body.len() + new_array.len());
    out.extend_from_slice(&body[..replace.start]);
    if let Some(Location::Tagged(_)) = location {
        let size = u32::try_from(new_array.len()).map_err(encode_failed(kind.api, api_version))?;
        put_uvarint(&mut out, NODE_ENDPOINTS_TAG);
        put_uvarint(&mut out, size);
    }
    out.extend_from_slice(&new_array);
    out.extend_from_slice(&body[replace.end..]);
    Ok(Some(out))
}

/// Decodes, rewrites and re-encodes a `NodeEndpoints` compact array.
fn rewrite_endpoints<E: NodeEndpoint>(
    api: &'static str,
    version: i16,
    content: &[u8],
    observer: &mut dyn ResponseObserver,
) -> Result<Option<Vec<u8>>, ProtocolError> {
    let malformed = malformed_response(api, version);
    let mut reader = Reader::new(content);
    let count = reader
        .required_count(true, MIN_ENDPOINT, "node_endpoints")
        .map_err(&malformed)?;
    if count == 0 {
        return Ok(None);
    }
    // The bounds-checked walk first: kafka-protocol would take tagged fields Kafka
    // cannot read (tags over i32::MAX) and drop them when re-encoding.
    let mut walk = Reader::new(&content[reader.position()..]);
    for _ in 0..count {
        walk.i32().map_err(&malformed)?; // node_id
        walk.skip_string(true).map_err(&malformed)?; // host
        walk.i32().map_err(&malformed)?; // port
        walk.skip_string(true).map_err(&malformed)?; // rack, nullable
        walk.skip_tagged_fields().map_err(&malformed)?;
    }
    walk.finish().map_err(&malformed)?;
    let mut buf = &content[reader.position()..];
    let mut endpoints = Vec::with_capacity(count);
    for _ in 0..count {
        let endpoint = E::decode(&mut buf, version)
            .map_err(|e| malformed(WireError::Decode(e.to_string())))?;
        endpoints.push(endpoint);
    }
    if !buf.is_empty() {
        return Err(malformed(WireError::TrailingBytes {
            trailing: buf.len(),
        }));
    }
    let mut out = Vec::with_capacity(content.len() + 16 * count);
    put_uvarint(&mut out, count as u32 + 1);
    for endpoint in &mut endpoints {
        let (node_id, host, port) = endpoint.address();
        replace_address(observer, node_id, host, port);
        endpoint
            .encode(&mut out, version)
            .map_err(encode_failed(api, version))?;
    }
    Ok(Some(out))
}

/// Finds the top-level `NodeEndpoints` tagged field of a Produce v10+ response.
fn find_produce_node_endpoints(body: &[u8], v: i16) -> Result<Option<Location<'_>>, WireError> {
    let mut r = Reader::new(body);
    let by_id = v >= api::topic_ids_from(api_key::PRODUCE);
    let min_topic = if by_id { 16 + 1 + 1 } else { 1 + 1 + 1 };
    let topics = r.required_count(true, min_topic, "responses")?;
    for _ in 0..topics {
        if by_id {
            r.uuid()?;
        } else {
            r.skip_string(true)?;
        }
        let min_partition = 4 + 2 + 8 + 8 + 8 + 1 + 1 + 1;
        let partitions = r.required_count(true, min_partition, "partition_responses")?;
        for _ in 0..partitions {
            r.skip(4 + 2 + 8 + 8 + 8)?; // index, error, base offset, append time, log start
            let record_errors = r.required_count(true, 4 + 1 + 1, "record_errors")?;
            for _ in 0..record_errors {
                r.i32()?; // batch_index
                r.skip_string(true)?; // batch_index_error_message
                r.skip_tagged_fields()?;
            }
            r.skip_string(true)?; // error_message
            r.skip_tagged_fields()?;
        }
        r.skip_tagged_fields()?;
    }
    r.i32()?; // throttle_time_ms
    top_level_node_endpoints(r)
}

/// Finds the top-level `NodeEndpoints` tagged field of a Fetch v16+ response,
/// skipping records by their length.
fn find_fetch_node_endpoints(body: &[u8], _v: i16) -> Result<Option<Location<'_>>, WireError> {
    let mut r = Reader::new(body);
    r.skip(4 + 2 + 4)?; // throttle_time_ms, error_code, session_id
    let topics = r.required_count(true, 16 + 1 + 1, "responses")?;
    for _ in 0..topics {
        r.uuid()?; // topic_id
        let min_partition = 4 + 2 + 8 + 8 + 8 + 1 + 4 + 1 + 1;
        let partitions = r.required_count(true, min_partition, "partitions")?;
        for _ in 0..partitions {
            r.skip(4 + 2 + 8 + 8 + 8)?; // index, error, high watermark, LSO, log start
            if let Some(aborted) = r.count(true, 8 + 8 + 1)? {
                for _ in 0..aborted {
                    r.skip(8 + 8)?; // producer_id, first_offset
                    r.skip_tagged_fields()?;
                }
            }
            r.i32()?; // preferred_read_replica
            r.length_prefixed(crate::wire::LengthPrefix::Compact)?; // records
            r.skip_tagged_fields()?;
        }
        r.skip_tagged_fields()?;
    }
    top_level_node_endpoints(r)
}

/// Finds the `NodeEndpoints` array of a ShareFetch v1 response.
fn find_share_fetch_node_endpoints(
    body: &[u8],
    _v: i16,
) -> Result<Option<Location<'_>>, WireError> {
    let mut r = Reader::new(body);
    r.skip(4 + 2)?; // throttle_time_ms, error_code
    r.skip_string(true)?; // error_message
    r.i32()?; // acquisition_lock_timeout_ms
    let topics = r.required_count(true, 16 + 1 + 1, "responses")?;
    for _ in 0..topics {
        r.uuid()?; // topic_id
        let min_partition = 4 + 2 + 1 + 2 + 1 + (4 + 4 + 1) + 1 + 1 + 1;
        let partitions = r.required_count(true, min_partition, "partitions")?;
        for _ in 0..partitions {
            r.skip(4 + 2)?; // partition_index, error_code
            r.skip_string(true)?; // error_message
            r.i16()?; // acknowledge_error_code
            r.skip_string(true)?; // acknowledge_error_message
            r.skip(4 + 4)?; // current_leader: leader_id, leader_epoch
            r.skip_tagged_fields()?;
            r.length_prefixed(crate::wire::LengthPrefix::Compact)?; // records
            let acquired = r.required_count(true, 8 + 8 + 2 + 1, "acquired_records")?;
            for _ in 0..acquired {
                r.skip(8 + 8 + 2)?; // first_offset, last_offset, delivery_count
                r.skip_tagged_fields()?;
            }
            r.skip_tagged_fields()?;
        }
        r.skip_tagged_fields()?;
    }
    node_endpoints_field(r)
}

/// Finds the `NodeEndpoints` array of a ShareAcknowledge v1 response.
fn find_share_acknowledge_node_endpoints(
    body: &[u8],
    _v: i16,
) -> Result<Option<Location<'_>>, WireError> {
    let mut r = Reader::new(body);
    r.skip(4 + 2)?; // throttle_time_ms, error_code
    r.skip_string(true)?; // error_message
    let topics = r.required_count(true, 16 + 1 + 1, "responses")?;
    for _ in 0..topics {
        r.uuid()?; // topic_id
        let min_partition = 4 + 2 + 1 + (4 + 4 + 1) + 1;
        let partitions = r.required_count(true, min_partition, "partitions")?;
        for _ in 0..partitions {
            r.skip(4 + 2)?; // partition_index, error_code
            r.skip_string(true)?; // error_message
            r.skip(4 + 4)?; // current_leader: leader_id, leader_epoch
            r.skip_tagged_fields()?;
            r.skip_tagged_fields()?;
        }
        r.skip_tagged_fields()?;
    }
    node_endpoints_field(r)
}

/// The regular `NodeEndpoints` field that ends a Share* response, then its
/// tagged fields. An empty array needs no rewrite.
fn node_endpoints_field(mut r: Reader<'_>) -> Result<Option<Location<'_>>, WireError> {
    let start = r.position();
    let endpoints = r.required_count(true, MIN_ENDPOINT, "node_endpoints")?;
    for _ in 0..endpoints {
        r.i32()?; // node_id
        r.skip_string(true)?; // host
        r.i32()?; // port
        r.skip_string(true)?; // rack
        r.skip_tagged_fields()?;
    }
    let end = r.position();
    r.skip_tagged_fields()?;
    r.finish()?;
    Ok((endpoints > 0).then_some(Location::Field(start..end)))
}

/// The top-level tagged `NodeEndpoints` of a Produce or Fetch response.
fn top_level_node_endpoints(mut r: Reader<'_>) -> Result<Option<Location<'_>>, WireError> {
    let mut found = None;
    r.tagged_fields(|field| {
        if field.tag == NODE_ENDPOINTS_TAG {
            found = Some(Location::Tagged(field));
        }
    })?;
    r.finish()?;
    Ok(found)
}
