//! Metadata (all versions kafka-protocol 0.18 knows, v0-v13): broker
//! addresses rewritten, topic ids reported; and kpress's own Metadata requests.

use bytes::{BufMut, BytesMut};
use kafka_protocol::messages::{
    metadata_request::MetadataRequestTopic, MetadataRequest, RequestHeader,
};
use kafka_protocol::protocol::{Encodable, HeaderVersion, StrBytes};
use uuid::Uuid;

use crate::error::{check_version, malformed_response, ProtocolError, WireError};
use crate::rewriting::{encode_failed, ResponseObserver};
use crate::wire::{put_uvarint, LengthPrefix, Reader};
use crate::{api, api_key};

const API: &str = "Metadata";
const METADATA_MIN_VERSION: i16 = api::parsed(api_key::METADATA).min;
pub(crate) const METADATA_MAX_VERSION: i16 = api::parsed(api_key::METADATA).max;
const FIRST_FLEXIBLE: i16 = api::first_flexible(api_key::METADATA);
/// Metadata v10 is the first to carry topic ids (in responses and requests).
const FIRST_TOPIC_ID: i16 = api::topic_ids_from(api_key::METADATA);

/// Metadata v13 is the first whose response has a top-level error code.
const FIRST_TOP_LEVEL_ERROR: i16 = 13;

/// Rewrites every broker's address and reports every named topic id.
///
/// Metadata responses can be large (every partition of every topic), so they
/// are not decoded: the body is walked once to check that all of it parses
/// (nothing is reported from a body that does not), then again to report and
/// splice. Only each broker's host and port change; every other byte is
/// copied as the broker sent it.
pub(crate) fn rewrite_metadata_response(
    api_version: i16,
    body: &[u8],
    observer: &mut dyn ResponseObserver,
) -> Result<Option<BytesMut>, ProtocolError> {
    check_version(API, api_version, METADATA_MIN_VERSION, METADATA_MAX_VERSION)?;
    let malformed = malformed_response(API, api_version);
    let brokers = walk_metadata_response(body, api_version, &mut CheckOnly).map_err(&malformed)?;
    // Room for kpress hosts a little longer than the brokers' own.
    let capacity = if brokers == 0 {
        0
    } else {
        body.len() + 32 * brokers
    };
    let mut splicer = Splicer {
        observer,
        version: api_version,
        out: BytesMut::with_capacity(capacity),
        copied: 0,
        body,
        error: None,
    };
    walk_metadata_response(body, api_version, &mut splicer).map_err(&malformed)?;
    if let Some(error) = splicer.error {
        return Err(error);
    }
    if brokers == 0 {
        return Ok(None);
    }
    let Splicer {
        mut out, copied, ..
    } = splicer;
    out.extend_from_slice(&body[copied..]);
    Ok(Some(out))
}

/// One broker entry of a Metadata response.
#[derive(Debug)]
struct Broker<'a> {
    node_id: i32,
    host: &'a str,
    port: i32,
    /// Where the host's length prefix starts in the body.
    host_start: usize,
    /// Where the fields after the port (rack, tagged fields) start.
    after_port: usize,
}

/// What the walk reports, in body order.
trait MetadataVisitor<'a> {
    fn broker(&mut self, broker: Broker<'a>);
    /// A topic with a name and a non-nil id (v10+).
    fn topic(&mut self, id: [u8; 16], name: &'a str);
    /// A topic the broker answered without error, under its name (any version).
    fn named(&mut self, name: &'a str);
}

/// The first walk: the parse is the check.
struct CheckOnly;

impl MetadataVisitor<'_> for CheckOnly {
    fn broker(&mut self, _: Broker<'_>) {}
    fn topic(&mut self, _: [u8; 16], _: &str) {}
    fn named(&mut self, _: &str) {}
}

/// The second walk: copies the body up to each broker's host, writes the
/// observer's address instead of host and port, and reports topics.
struct Splicer<'a, 'o> {
    observer: &'o mut dyn ResponseObserver,
    version: i16,
    out: BytesMut,
    /// Bytes of the body already copied to `out` or replaced.
    copied: usize,
    body: &'a [u8],
    /// An address that cannot be encoded (kpress's own, so a kpress fault).
    error: Option<ProtocolError>,
}

impl Splicer<'_, '_> {
    fn fail(&mut self, host: &str) {
        self.error.get_or_insert_with(|| ProtocolError::Encode {
            api: API,
            version: self.version,
            reason: format!("broker host of {} bytes", host.len()),
        });
    }
}

impl<'a> MetadataVisitor<'a> for Splicer<'a, '_> {
    fn broker(&mut self, broker: Broker<'a>) {
        let (host, port) = self
            .observer
            .broker(broker.node_id, broker.host, broker.port);
        self.out
            .extend_from_slice(&self.body[self.copied..broker.host_start]);
        if self.version >= FIRST_FLEXIBLE {
            // A compact string's length is a u32 varint (length + 1).
            match u32::try_from(host.len() + 1) {
                Ok(len) => put_uvarint(&mut self.out, len),
                Err(_) => self.fail(&host),
            }
        } else {
            match i16::try_from(host.len()) {
                Ok(len) => self.out.put_i16(len),
                Err(_) => self.fail(&host),
            }
        }
        self.out.extend_from_slice(host.as_bytes());
        self.out.put_i32(port);
        self.copied = broker.after_port;
    }

    fn topic(&mut self, id: [u8; 16], name: &'a str) {
        self.observer.topic(id, name);
    }

    fn named(&mut self, name: &'a str) {
        self.observer.named_topic(name);
    }
}

/// The walk as a guard before kafka-protocol decodes one of kpress's own answers.
pub(crate) fn guard_metadata_response(body: &[u8], v: i16) -> Result<(), WireError> {
    walk_metadata_response(body, v, &mut CheckOnly).map(|_| ())
}

fn utf8<'a>(bytes: &'a [u8], at: usize, field: &'static str) -> Result<&'a str, WireError> {
    std::str::from_utf8(bytes).map_err(|_| WireError::NotUtf8 { at, field })
}

/// Walks a Metadata response body, reporting brokers and named topic ids to
/// `visitor`; returns the number of brokers. Checks every count, length and
/// null kafka-protocol's decoder would, that hosts and topic names are UTF-8,
/// and that nothing trails the body.
fn walk_metadata_response<'a>(
    body: &'a [u8],
    v: i16,
    visitor: &mut impl MetadataVisitor<'a>,
) -> Result<usize, WireError> {
    let flex = v >= FIRST_FLEXIBLE;
    let string = if flex {
        LengthPrefix::Compact
    } else {
        LengthPrefix::Int16
    };
    let mut r = Reader::new(body);
    if v >= 3 {
        r.i32()?; // throttle_time_ms
    }
    let min_broker = if flex { 4 + 1 + 4 + 1 + 1 } else { 4 + 2 + 4 };
    let brokers = r.required_count(flex, min_broker, "brokers")?;
    for _ in 0..brokers {
        let node_id = r.i32()?;
        let host_start = r.position();
        let host = r
            .length_prefixed(string)?
            .ok_or(WireError::UnexpectedNull {
                at: host_start,
                field: "host",
            })?;
        let host = utf8(host, host_start, "host")?;
        let port = r.i32()?;
        let after_port = r.position();
        if v >= 1 {
            r.skip_string(flex)?; // rack
        }
        if flex {
            r.skip_tagged_fields()?;
        }
        visitor.broker(Broker {
            node_id,
            host,
            port,
            host_start,
            after_port,
        });
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
        let error_code = r.i16()?;
        let name_start = r.position();
        let name = r.length_prefixed(string)?;
        // Names are nullable from v12; kafka-protocol refuses a null before.
        if name.is_none() && v < 12 {
            return Err(WireError::UnexpectedNull {
                at: name_start,
                field: "name",
            });
        }
        let name = name
            .map(|name| utf8(name, name_start, "name"))
            .transpose()?;
        if let (0, Some(name)) = (error_code, name) {
            visitor.named(name);
        }
        if v >= FIRST_TOPIC_ID {
            let id = r.uuid()?;
            if let Some(name) = name {
                if id != [0; 16] {
                    visitor.topic(id, name);
                }
            }
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
    if v >= FIRST_TOP_LEVEL_ERROR {
        r.i16()?; // error_code
    }
    if flex {
        r.skip_tagged_fields()?;
    }
    r.finish()?;
    Ok(brokers)
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
        .with_request_api_key(api_key::METADATA)
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
