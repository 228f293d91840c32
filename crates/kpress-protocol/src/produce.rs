//! Produce requests (v3-v13): read `acks`, and rewrite each partition's
//! records without decoding the whole request.
//!
//! Requests come from clients, so they are hostile input. Rather than decode
//! the request into structs (whose decoders size vectors from wire counts),
//! this walks the body with a bounds-checked [`Reader`], notes where each
//! partition's records field sits, and splices in the rewritten records,
//! rewriting only their length prefix. Nothing else in a Produce request
//! carries a size, so the rest is copied byte for byte.

use std::collections::HashSet;
use std::ops::Range;
use std::sync::Arc;

use bytes::{BufMut, BytesMut};

use crate::error::{self, malformed_request, ProtocolError, WireError};
use crate::frame::SIZE_PREFIX_LEN;
use crate::wire::{put_uvarint, LengthPrefix, Reader};
use crate::{api, api_key};

const API: &str = "Produce";
/// Produce v3 is the first with RecordBatch v2 only; v13 is kafka-protocol 0.18's newest.
pub const PRODUCE_MIN_VERSION: i16 = api::parsed(api_key::PRODUCE).min;
pub const PRODUCE_MAX_VERSION: i16 = api::parsed(api_key::PRODUCE).max;
/// Produce v9 is the first flexible version (compact strings, tagged fields).
const FIRST_FLEXIBLE: i16 = api::first_flexible(api_key::PRODUCE);
/// Produce v13 names topics by id (KIP-516).
const FIRST_TOPIC_ID: i16 = api::topic_ids_from(api_key::PRODUCE);
/// Produce v7 is the first whose batches brokers accept zstd-compressed (KIP-110).
const FIRST_ZSTD: i16 = api::zstd_from(api_key::PRODUCE);

/// Whether a Produce request of `api_version` may carry zstd-compressed batches: brokers
/// refuse them before v7 (KIP-110), so kpress writes none there.
pub const fn produce_allows_zstd(api_version: i16) -> bool {
    api_version >= FIRST_ZSTD
}

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

/// The most distinct unknown v13 topic ids one Produce request reports in
/// [`ProduceSplice::unknown_topic_ids`]: how many ids kpress names with one
/// Metadata lookup. It also bounds the memory of the request's dedupe, which
/// a hostile request could otherwise grow with thousands of random ids.
pub const MAX_UNKNOWN_TOPIC_IDS: usize = 100;

/// Outcome of [`rewrite_produce_with`].
#[derive(Debug, Default)]
pub struct ProduceSplice {
    /// The whole new request frame (size prefix, header, body), ready to
    /// write, or `None` when nothing changed: forward the original bytes.
    /// Its length is the frame's on the wire, for the caller's frame limit.
    pub frame: Option<BytesMut>,
    /// v13 topic ids kpress has no name for, each once, in request order, at
    /// most [`MAX_UNKNOWN_TOPIC_IDS`]; their records went untouched.
    pub unknown_topic_ids: Vec<[u8; 16]>,
    /// Unknown ids left out of `unknown_topic_ids` because it was full
    /// (their records went untouched too), counted per topic entry. Clients
    /// name each topic once per request, so for them this is the number of
    /// distinct ids left out; a request repeating such an id counts each
    /// repeat, since telling repeats apart would take memory that grows with
    /// the request.
    pub unknown_topic_ids_omitted: usize,
}

impl ProduceSplice {
    /// The new request payload (header + body, no size prefix), if any.
    pub fn payload(&self) -> Option<&[u8]> {
        self.frame.as_deref().map(|frame| &frame[SIZE_PREFIX_LEN..])
    }
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

/// Rewrites the records of every partition of a Produce request (v3-v13)
/// with `rewriter` (kpress-proxy's recompresses them with each topic's
/// policy) and splices the new records in.
///
/// `payload` is the request header and body (no size prefix); `header_len`
/// is the request header's length. v13 topic ids are named by `topic_name`;
/// ids it does not know are listed in the result and their records left
/// alone. On error nothing was changed: forward the original bytes and let
/// the broker answer the client.
///
/// The body is walked twice: once to check that all of it parses (nothing is
/// rewritten in a body that does not), then to rewrite. Only rewritten
/// partitions are remembered (where their new records go), so a request of
/// many small partitions costs no memory beyond itself and the new records.
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
    walk_produce_body(body, api_version, &mut CheckOnly).map_err(&malformed)?;
    let mut splicer = Splicer {
        topic_name,
        rewriter,
        topic: CurrentTopic::Skip,
        unknown: UnknownTopicIds::default(),
        splices: Vec::new(),
        scratch: Vec::new(),
    };
    walk_produce_body(body, api_version, &mut splicer).map_err(&malformed)?;
    let Splicer {
        unknown,
        splices,
        scratch,
        ..
    } = splicer;
    let frame = if splices.is_empty() {
        None
    } else {
        Some(splice_frame(
            payload,
            header_len,
            api_version,
            &splices,
            &scratch,
        )?)
    };
    Ok(ProduceSplice {
        frame,
        unknown_topic_ids: unknown.listed,
        unknown_topic_ids_omitted: unknown.omitted,
    })
}

/// The new request frame: the header, then the body with each splice's
/// records field replaced.
fn splice_frame(
    payload: &[u8],
    header_len: usize,
    api_version: i16,
    splices: &[Splice],
    scratch: &[u8],
) -> Result<BytesMut, ProtocolError> {
    let body = &payload[header_len..];
    let flexible = api_version >= FIRST_FLEXIBLE;
    // The frame is built once, size prefix first (filled in at the end), so the
    // proxy writes it as it is.
    let mut out = BytesMut::with_capacity(SIZE_PREFIX_LEN + payload.len() + scratch.len());
    out.put_i32(0);
    out.extend_from_slice(&payload[..header_len]);
    let mut copied = 0;
    for splice in splices {
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
    Ok(out)
}

/// Unknown v13 topic ids, deduplicated in linear time, at most
/// [`MAX_UNKNOWN_TOPIC_IDS`] of them.
#[derive(Debug, Default)]
struct UnknownTopicIds {
    listed: Vec<[u8; 16]>,
    seen: HashSet<[u8; 16]>,
    omitted: usize,
}

impl UnknownTopicIds {
    fn note(&mut self, id: [u8; 16]) {
        if self.seen.contains(&id) {
            return;
        }
        if self.listed.len() < MAX_UNKNOWN_TOPIC_IDS {
            self.seen.insert(id);
            self.listed.push(id);
        } else {
            self.omitted += 1;
        }
    }
}

/// What the walk reports, in request order.
trait ProduceVisitor<'a> {
    /// A topic entry starts; `None` for a v3-v12 name that is not UTF-8 (the
    /// broker rejects it; kpress leaves its records alone).
    fn topic(&mut self, topic: Option<TopicRef<'a>>);
    /// A partition of the current topic with non-empty records; `field` is the
    /// byte range of its records field (length prefix included) in the body.
    fn records(&mut self, field: Range<usize>, records: &'a [u8]);
}

/// The first walk: the parse is the check.
struct CheckOnly;

impl ProduceVisitor<'_> for CheckOnly {
    fn topic(&mut self, _: Option<TopicRef<'_>>) {}
    fn records(&mut self, _: Range<usize>, _: &[u8]) {}
}

/// The topic whose partitions the walk is in.
enum CurrentTopic<'a> {
    /// Records left alone: a name that is not UTF-8, or an unknown id.
    Skip,
    /// A v13 id not looked up yet: topics without records are never looked up.
    Id([u8; 16]),
    /// A v3-v12 name, as sent.
    Name(&'a str),
    /// A v13 id's name.
    Named(Arc<str>),
}

/// The second walk: rewrites each partition's records into `scratch`.
struct Splicer<'a, 'r> {
    topic_name: &'r dyn Fn(&[u8; 16]) -> Option<Arc<str>>,
    rewriter: &'r mut dyn RecordsRewriter,
    topic: CurrentTopic<'a>,
    unknown: UnknownTopicIds,
    splices: Vec<Splice>,
    scratch: Vec<u8>,
}

impl<'a> ProduceVisitor<'a> for Splicer<'a, '_> {
    fn topic(&mut self, topic: Option<TopicRef<'a>>) {
        self.topic = match topic {
            None => CurrentTopic::Skip,
            Some(TopicRef::Name(name)) => CurrentTopic::Name(name),
            Some(TopicRef::Id(id)) => CurrentTopic::Id(id),
        };
    }

    fn records(&mut self, field: Range<usize>, records: &'a [u8]) {
        if let CurrentTopic::Id(id) = self.topic {
            self.topic = match (self.topic_name)(&id) {
                Some(name) => CurrentTopic::Named(name),
                None => {
                    self.unknown.note(id);
                    CurrentTopic::Skip
                }
            };
        }
        let name: &str = match &self.topic {
            CurrentTopic::Skip | CurrentTopic::Id(_) => return,
            CurrentTopic::Name(name) => name,
            CurrentTopic::Named(name) => name,
        };
        let start = self.scratch.len();
        if self
            .rewriter
            .rewrite_records(name, records, &mut self.scratch)
        {
            self.splices.push(Splice {
                field,
                new: start..self.scratch.len(),
            });
        } else {
            self.scratch.truncate(start);
        }
    }
}

/// Walks a Produce body, reporting each topic entry and each partition with
/// non-empty records to `visitor`. The whole body must parse, trailing bytes
/// included; a caller that must not act on a body that fails walks it first
/// with [`CheckOnly`].
fn walk_produce_body<'a>(
    body: &'a [u8],
    api_version: i16,
    visitor: &mut impl ProduceVisitor<'a>,
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
        visitor.topic(topic);
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
            if let Some(records) = records.filter(|records| !records.is_empty()) {
                visitor.records(field, records);
            }
        }
        if flexible {
            reader.skip_tagged_fields()?;
        }
    }
    if flexible {
        reader.skip_tagged_fields()?;
    }
    reader.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A request naming tens of thousands of unknown ids must cost O(1) per id: the
    /// set behind the dedupe stops growing at the cap, and later ids are only counted.
    #[test]
    fn unknown_ids_past_the_cap_are_counted_without_growing_the_dedupe() {
        let mut unknown = UnknownTopicIds::default();
        let id = |i: u32| {
            let mut id = [0u8; 16];
            id[..4].copy_from_slice(&i.to_be_bytes());
            id
        };
        for round in 0..2 {
            for i in 0..40_000 {
                unknown.note(id(i));
            }
            assert_eq!(unknown.listed.len(), MAX_UNKNOWN_TOPIC_IDS, "round {round}");
            assert_eq!(unknown.seen.len(), MAX_UNKNOWN_TOPIC_IDS, "round {round}");
        }
        // A listed id noted again is neither listed twice nor counted as omitted.
        assert_eq!(unknown.omitted, 2 * (40_000 - MAX_UNKNOWN_TOPIC_IDS));
        let distinct: HashSet<_> = unknown.listed.iter().collect();
        assert_eq!(distinct.len(), MAX_UNKNOWN_TOPIC_IDS);
    }
}
