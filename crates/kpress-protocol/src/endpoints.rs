//! KIP-951 `NodeEndpoints` in Produce (v10+) and Fetch (v16+) responses: the
//! top-level tagged field (tag 0) that tells clients where a partition's new
//! leader lives. Its addresses are rewritten like Metadata's.
//!
//! Fetch responses carry the consumed records, so the response is never
//! decoded whole: a bounds-checked walk finds the top-level tagged fields;
//! without tag 0 (the usual case) the body is relayed untouched. With it,
//! only that field is decoded (kafka-protocol), rewritten and spliced back.

use bytes::BytesMut;
use kafka_protocol::messages::{fetch_response, produce_response};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};

use crate::error::{ProtocolError, WireError};
use crate::response::{api_key, check_version, encode_failed, malformed, ResponseObserver};
use crate::wire::{put_uvarint, Reader, TaggedField};

pub(crate) const PRODUCE_FIRST_NODE_ENDPOINTS: i16 = 10;
pub(crate) const FETCH_FIRST_NODE_ENDPOINTS: i16 = 16;
pub(crate) const FETCH_MAX_VERSION: i16 = 18;
const NODE_ENDPOINTS_TAG: u32 = 0;

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

pub(crate) fn rewrite_node_endpoints(
    api_key: i16,
    api_version: i16,
    body: &[u8],
    observer: &mut dyn ResponseObserver,
) -> Result<Option<BytesMut>, ProtocolError> {
    let (api, field) = if api_key == api_key::PRODUCE {
        check_version(
            "Produce",
            api_version,
            crate::produce::PRODUCE_MIN_VERSION,
            crate::produce::PRODUCE_MAX_VERSION,
        )?;
        if api_version < PRODUCE_FIRST_NODE_ENDPOINTS {
            return Ok(None);
        }
        ("Produce", find_produce_node_endpoints(body, api_version))
    } else {
        check_version("Fetch", api_version, 4, FETCH_MAX_VERSION)?;
        if api_version < FETCH_FIRST_NODE_ENDPOINTS {
            return Ok(None);
        }
        ("Fetch", find_fetch_node_endpoints(body, api_version))
    };
    let Some(field) = field.map_err(malformed(api, api_version))? else {
        return Ok(None);
    };
    let content = if api_key == api_key::PRODUCE {
        rewrite_endpoints::<produce_response::NodeEndpoint>(
            api,
            api_version,
            field.content,
            observer,
        )?
    } else {
        rewrite_endpoints::<fetch_response::NodeEndpoint>(
            api,
            api_version,
            field.content,
            observer,
        )?
    };
    let Some(content) = content else {
        return Ok(None);
    };
    let content_end = field.content_start + field.content.len();
    let size = u32::try_from(content.len()).map_err(encode_failed(api, api_version))?;
    let mut out = BytesMut::with_capacity(body.len() + content.len());
    out.extend_from_slice(&body[..field.start]);
    put_uvarint(&mut out, NODE_ENDPOINTS_TAG);
    put_uvarint(&mut out, size);
    out.extend_from_slice(&content);
    out.extend_from_slice(&body[content_end..]);
    Ok(Some(out))
}

/// Decodes, rewrites and re-encodes a `NodeEndpoints` compact array.
fn rewrite_endpoints<E: NodeEndpoint>(
    api: &'static str,
    version: i16,
    content: &[u8],
    observer: &mut dyn ResponseObserver,
) -> Result<Option<Vec<u8>>, ProtocolError> {
    let malformed = malformed(api, version);
    let mut reader = Reader::new(content);
    let min_endpoint = 4 + 1 + 4 + 1 + 1;
    let count = reader
        .required_count(true, min_endpoint, "node_endpoints")
        .map_err(&malformed)?;
    if count == 0 {
        return Ok(None);
    }
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
        let (new_host, new_port) = observer.broker(node_id, host.as_str(), *port);
        *host = StrBytes::from_string(new_host);
        *port = new_port;
        endpoint
            .encode(&mut out, version)
            .map_err(encode_failed(api, version))?;
    }
    Ok(Some(out))
}

/// Finds the top-level `NodeEndpoints` tagged field of a Produce v10+ response.
fn find_produce_node_endpoints(body: &[u8], v: i16) -> Result<Option<TaggedField<'_>>, WireError> {
    let mut r = Reader::new(body);
    let min_topic = if v >= 13 { 16 + 1 + 1 } else { 1 + 1 + 1 };
    let topics = r.required_count(true, min_topic, "responses")?;
    for _ in 0..topics {
        if v >= 13 {
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
fn find_fetch_node_endpoints(body: &[u8], _v: i16) -> Result<Option<TaggedField<'_>>, WireError> {
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

fn top_level_node_endpoints(mut r: Reader<'_>) -> Result<Option<TaggedField<'_>>, WireError> {
    let mut found = None;
    r.tagged_fields(|field| {
        if field.tag == NODE_ENDPOINTS_TAG {
            found = Some(field);
        }
    })?;
    r.finish()?;
    Ok(found)
}
