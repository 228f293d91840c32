//! Produce requests (v3-v13): read `acks`, and rewrite each partition's
//! records without decoding the whole request.
//!
//! Requests come from clients, so they are hostile input. Rather than decode
//! the request into structs (whose decoders size vectors from wire counts),
//! this walks the body with a bounds-checked [`Reader`], notes where each
//! partition's records field sits, and splices in the rewritten records,
//! rewriting only their length prefix. Nothing else in a Produce request
//! carries a size, so the rest is copied byte for byte.

use std::ops::Range;
use std::sync::Arc;

use bytes::{BufMut, BytesMut};
use kpress_batch::{PolicyLookup, Recompressor, RewriteStats};

use crate::error::{self, malformed_request, ProtocolError, WireError};
use crate::frame::SIZE_PREFIX_LEN;
use crate::wire::{put_uvarint, LengthPrefix, Reader};

const API: &str = "Produce";
/// Produce v3 is the first with RecordBatch v2 only; v13 is kafka-protocol 0.18's newest.
pub const PRODUCE_MIN_VERSION: i16 = 3;
pub const PRODUCE_MAX_VERSION: i16 = 13;
/// Produce v9 is the first flexible version (compact strings, tagged fields).
const FIRST_FLEXIBLE: i16 = 9;
/// Produce v13 names topics by id (KIP-516).
const FIRST_TOPIC_ID: i16 = 13;

/// How a topic is named in a Produce request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TopicRef<'a> {
    /// v3-v12: the name as sent (kpress only rewrites names that are UTF-8).
    Name(&'a str),
    /// v13: a topic id.
    Id([u8; 16]),
}

/// Rewrites one partition's records field.
pub trait RecordsRewriter {
    /// Appends the new records of `topic` to `out` and returns `true`, or
    /// returns `false` to keep `records` (anything appended is then dropped).
    fn rewrite_records(&mut self, topic: &str, records: &[u8], out: &mut Vec<u8>) -> bool;
}

/// Outcome of [`rewrite_produce`].
#[derive(Debug, Default)]
pub struct ProduceRewrite {
    /// The whole new request frame (size prefix, header, body), ready to
    /// write, or `None` when no batch changed: forward the original bytes.
    pub frame: Option<BytesMut>,
    /// v13 topic ids kpress has no name for; their records went untouched.
    pub unknown_topic_ids: Vec<[u8; 16]>,
    /// What happened to every batch of the topics kpress could name.
    pub stats: RewriteStats,
}

impl ProduceRewrite {
    /// The new request payload (header + body, no size prefix), if any.
    pub fn payload(&self) -> Option<&[u8]> {
        frame_payload(&self.frame)
    }
}

/// Recompresses each partition's records with its topic's policy.
struct PolicyRewriter<'a> {
    policies: &'a dyn PolicyLookup,
    recompressor: &'a mut Recompressor,
    stats: RewriteStats,
}

impl RecordsRewriter for PolicyRewriter<'_> {
    fn rewrite_records(&mut self, topic: &str, records: &[u8], out: &mut Vec<u8>) -> bool {
        let policy = self.policies.policy_for(topic);
        let mut stats = RewriteStats::default();
        self.recompressor
            .rewrite_records(records, policy, out, &mut stats);
        self.stats.merge(&stats);
        stats.batches_rewritten > 0
    }
}

/// Recompresses the records of every partition of a Produce request (v3-v13)
/// with the policy `policies` names for its topic.
///
/// `payload` is the request header and body (no size prefix); `header_len`
/// is the request header's length. v13 topic ids are named by `topic_name`;
/// ids it does not know are listed in the result and their records left alone.
/// On error nothing was changed: forward the original bytes and let the
/// broker answer the client.
pub fn rewrite_produce(
    payload: &[u8],
    header_len: usize,
    api_version: i16,
    policies: &dyn PolicyLookup,
    topic_name: &dyn Fn(&[u8; 16]) -> Option<Arc<str>>,
    recompressor: &mut Recompressor,
) -> Result<ProduceRewrite, ProtocolError> {
    let mut rewriter = PolicyRewriter {
        policies,
        recompressor,
        stats: RewriteStats::default(),
    };
    let splice = rewrite_produce_with(payload, header_len, api_version, topic_name, &mut rewriter)?;
    Ok(ProduceRewrite {
        frame: splice.frame,
        unknown_topic_ids: splice.unknown_topic_ids,
        stats: rewriter.stats,
    })
}

/// Outcome of [`rewrite_produce_with`].
#[derive(Debug, Default)]
pub struct ProduceSplice {
    /// The whole new request frame (size prefix, header, body), ready to
    /// write, or `None` when nothing changed: forward the original bytes.
    pub frame: Option<BytesMut>,
    /// v13 topic ids kpress has no name for; their records went untouched.
    pub unknown_topic_ids: Vec<[u8; 16]>,
}

impl ProduceSplice {
    /// The new request payload (header + body, no size prefix), if any.
    pub fn payload(&self) -> Option<&[u8]> {
        frame_payload(&self.frame)
    }
}

fn frame_payload(frame: &Option<BytesMut>) -> Option<&[u8]> {
    frame.as_deref().map(|frame| &frame[SIZE_PREFIX_LEN..])
}

fn check_version(api_version: i16) -> Result<(), ProtocolError> {
    error::check_version(API, api_version, PRODUCE_MIN_VERSION, PRODUCE_MAX_VERSION)
}

fn string_prefix(flexible: bool) -> LengthPrefix {
    if flexible {
        LengthPrefix::Compact
    } else {
        LengthPrefix::Int16
    }
}

/// Reads `acks` from a Produce request body (after the request header).
/// Cheap: it sits right after `transactional_id`.
pub fn produce_acks(body: &[u8], api_version: i16) -> Result<i16, ProtocolError> {
    check_version(api_version)?;
    let flexible = api_version >= FIRST_FLEXIBLE;
    let mut reader = Reader::new(body);
    reader
        .length_prefixed(string_prefix(flexible))
        .and_then(|_| reader.i16())
        .map_err(malformed_request(API, api_version))
}

/// A records field to replace: `field` spans its length prefix and content in
/// the body; the new content is `scratch[new]`.
#[derive(Debug)]
struct Splice {
    field: Range<usize>,
    new: Range<usize>,
}

/// [`rewrite_produce`] with any [`RecordsRewriter`]: the request walk and
/// splice, without the policy lookup.
pub fn rewrite_produce_with(
    payload: &[u8],
    header_len: usize,
    api_version: i16,
    topic_name: &dyn Fn(&[u8; 16]) -> Option<Arc<str>>,
    rewriter: &mut dyn RecordsRewriter,
) -> Result<ProduceSplice, ProtocolError> {
    check_version(api_version)?;
    let malformed = malformed_request(API, api_version);
    if header_len > payload.len() {
        return Err(malformed(WireError::HeaderBeyondPayload {
            header_len,
            payload_len: payload.len(),
        }));
    }
    let body = &payload[header_len..];
    let mut splices = Vec::new();
    let mut scratch = Vec::new();
    let mut unknown_topic_ids = Vec::new();
    walk_produce_body(body, api_version, |topic, field, records| {
        let named: Arc<str>;
        let name: &str = match topic {
            TopicRef::Name(name) => name,
            TopicRef::Id(id) => match topic_name(&id) {
                Some(name) => {
                    named = name;
                    &named
                }
                None => {
                    if !unknown_topic_ids.contains(&id) {
                        unknown_topic_ids.push(id);
                    }
                    return;
                }
            },
        };
        let start = scratch.len();
        if rewriter.rewrite_records(name, records, &mut scratch) {
            splices.push(Splice {
                field,
                new: start..scratch.len(),
            });
        } else {
            scratch.truncate(start);
        }
    })
    .map_err(malformed)?;

    if splices.is_empty() {
        return Ok(ProduceSplice {
            frame: None,
            unknown_topic_ids,
        });
    }
    let flexible = api_version >= FIRST_FLEXIBLE;
    // The frame is built once, size prefix first (filled in at the end), so the
    // proxy writes it as it is.
    let mut out = BytesMut::with_capacity(SIZE_PREFIX_LEN + payload.len() + scratch.len());
    out.put_i32(0);
    out.extend_from_slice(&payload[..header_len]);
    let mut copied = 0;
    for splice in &splices {
        out.extend_from_slice(&body[copied..splice.field.start]);
        let new_records = &scratch[splice.new.clone()];
        // Kafka frames are i32-sized, so records longer than i32::MAX cannot be sent.
        let length = i32::try_from(new_records.len()).map_err(|_| ProtocolError::Encode {
            api: API,
            version: api_version,
            reason: format!("rewritten records of {} bytes", new_records.len()),
        })?;
        if flexible {
            put_uvarint(&mut out, length as u32 + 1);
        } else {
            out.put_i32(length);
        }
        out.extend_from_slice(new_records);
        copied = splice.field.end;
    }
    out.extend_from_slice(&body[copied..]);
    let payload_len = out.len() - SIZE_PREFIX_LEN;
    let size = i32::try_from(payload_len).map_err(|_| ProtocolError::Encode {
        api: API,
        version: api_version,
        reason: format!("rewritten request of {payload_len} bytes"),
    })?;
    out[..SIZE_PREFIX_LEN].copy_from_slice(&size.to_be_bytes());
    Ok(ProduceSplice {
        frame: Some(out),
        unknown_topic_ids,
    })
}

/// Walks a Produce body, calling `on_records(topic, field, records)` for each
/// partition with non-empty records; `field` is the byte range of the records
/// field (length prefix included) in `body`. v3-12 topic names that are not
/// UTF-8 are skipped (the broker rejects them). The whole body must parse,
/// trailing bytes included, before anything is rewritten.
fn walk_produce_body<'a>(
    body: &'a [u8],
    api_version: i16,
    mut on_records: impl FnMut(TopicRef<'a>, Range<usize>, &'a [u8]),
) -> Result<(), WireError> {
    let flexible = api_version >= FIRST_FLEXIBLE;
    let by_id = api_version >= FIRST_TOPIC_ID;
    let mut reader = Reader::new(body);
    reader.length_prefixed(string_prefix(flexible))?; // transactional_id
    reader.i16()?; // acks
    reader.i32()?; // timeout_ms
                   // Smallest topic: empty name or id, empty partition array, tagged fields.
    let min_topic = match (flexible, by_id) {
        (_, true) => 16 + 1 + 1,
        (true, false) => 1 + 1 + 1,
        (false, false) => 2 + 4,
    };
    let min_partition = if flexible { 4 + 1 + 1 } else { 4 + 4 };
    let topics = reader.required_count(flexible, min_topic, "topic_data")?;
    let mut found = Vec::new();
    for _ in 0..topics {
        let topic = if by_id {
            Some(TopicRef::Id(reader.uuid()?))
        } else {
            let at = reader.position();
            let name = reader
                .length_prefixed(string_prefix(flexible))?
                .ok_or(WireError::UnexpectedNull { at, field: "name" })?;
            std::str::from_utf8(name).ok().map(TopicRef::Name)
        };
        let partitions = reader.required_count(flexible, min_partition, "partition_data")?;
        for _ in 0..partitions {
            reader.i32()?; // index
            let start = reader.position();
            let prefix = if flexible {
                LengthPrefix::Compact
            } else {
                LengthPrefix::Int32
            };
            let records = reader.length_prefixed(prefix)?;
            let field = start..reader.position();
            if flexible {
                reader.skip_tagged_fields()?;
            }
            if let (Some(topic), Some(records)) = (topic, records) {
                if !records.is_empty() {
                    found.push((topic, field, records));
                }
            }
        }
        if flexible {
            reader.skip_tagged_fields()?;
        }
    }
    if flexible {
        reader.skip_tagged_fields()?;
    }
    reader.finish()?;
    // Only a body that parsed to its end gets rewritten.
    for (topic, field, records) in found {
        on_records(topic, field, records);
    }
    Ok(())
}
