//! Fetch at another version than the client's: a v4-v11 request (non-flexible) sent
//! on at a later non-flexible version with Kafka's defaults for the fields it lacks,
//! and the answer's envelope read (each partition's records as a slice, no copy) and
//! written back at the client's version. Flexible answers (v12 on, [`flexible`]) are
//! walked instead and written back at their own version, every byte but the records
//! replaced as read. Records are never parsed here.
//!
//! Requests come from clients and responses from brokers: both are walked with every
//! count checked against the bytes present before kafka-protocol sizes anything.

mod flexible;

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::{FetchRequest, FetchResponse};
use kafka_protocol::protocol::{Decodable, Encodable};

use crate::error::WireError;
use crate::error::{check_version, malformed_request, malformed_response, ProtocolError};
use crate::frame::SIZE_PREFIX_LEN;
use crate::rewriting::encode_failed;
use crate::wire::{LengthPrefix, Reader};
use crate::{api, api_key};
use flexible::FlexibleResponse;

const API: &str = "Fetch";
/// The lowest Fetch version kpress parses (Kafka 4.0 removed v0-v3, KIP-896).
pub const FETCH_MIN_VERSION: i16 = api::parsed(api_key::FETCH).min;
/// The highest Fetch version kpress parses (and caps clients to).
pub const FETCH_MAX_VERSION: i16 = api::parsed(api_key::FETCH).max;
/// The first Fetch version with tagged fields: its responses are walked, not decoded,
/// and written back at the version they were read at.
pub const FETCH_FIRST_FLEXIBLE_VERSION: i16 = api::first_flexible(api_key::FETCH);
/// The last Fetch version without tagged fields: requests and responses are re-encoded
/// only between non-flexible versions, whose headers are alike (request header v1,
/// response header v0).
pub const FETCH_LAST_CLASSIC_VERSION: i16 = FETCH_FIRST_FLEXIBLE_VERSION - 1;
/// The first Fetch version with fetch sessions (KIP-227): from it to v10 responses are
/// laid out alike, so an answer at v10 is also one at v7-v9.
pub const FETCH_FIRST_SESSION_VERSION: i16 = 7;
/// The first Fetch version that names topics by id, not by name (KIP-516).
pub const FETCH_FIRST_TOPIC_ID_VERSION: i16 = flexible::FIRST_TOPIC_ID;

/// How a Fetch response names a topic: by name up to v12, by id from v13.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FetchTopic<'a> {
    Name(&'a str),
    Id([u8; 16]),
}

/// The request frame (size prefix, header, body) of `body` (a Fetch request's frame
/// body: header of `header_len` bytes, then the message) re-encoded from its
/// `api_version` at `to`: fields `api_version` lacks get Kafka's defaults
/// (`log_start_offset` -1, `current_leader_epoch` -1, session 0 at epoch -1, that is
/// a full fetch outside any session, no forgotten topics); every field it has goes
/// on unchanged. Only the header's version changes.
pub fn upgrade_fetch_request(
    body: &[u8],
    header_len: usize,
    api_version: i16,
    to: i16,
) -> Result<BytesMut, ProtocolError> {
    check_classic(api_version)?;
    check_version(API, to, api_version, FETCH_LAST_CLASSIC_VERSION)?;
    let malformed = malformed_request(API, api_version);
    let message = body.get(header_len..).ok_or_else(|| {
        malformed(WireError::HeaderBeyondPayload {
            header_len,
            payload_len: body.len(),
        })
    })?;
    walk_fetch_request(message, api_version).map_err(&malformed)?;
    let mut buf = message;
    let request = FetchRequest::decode(&mut buf, api_version)
        .map_err(|e| malformed(WireError::Decode(e.to_string())))?;
    let size = request.compute_size(to).map_err(encode_failed(API, to))?;
    let frame_len = header_len + size;
    let prefix = frame_prefix(to, frame_len)?;
    let mut out = BytesMut::with_capacity(SIZE_PREFIX_LEN + frame_len);
    out.put_i32(prefix);
    out.put_slice(&body[..2]); // api_key
    out.put_i16(to);
    out.put_slice(&body[4..header_len]); // correlation_id, client_id
    request
        .encode(&mut out, to)
        .map_err(encode_failed(API, to))?;
    Ok(out)
}

/// Fails unless `api_version` is a Fetch version kpress re-encodes (non-flexible).
fn check_classic(api_version: i16) -> Result<(), ProtocolError> {
    check_version(
        API,
        api_version,
        FETCH_MIN_VERSION,
        FETCH_LAST_CLASSIC_VERSION,
    )
}

/// The size prefix of a `frame_len`-byte frame at `version`.
fn frame_prefix(version: i16, frame_len: usize) -> Result<i32, ProtocolError> {
    i32::try_from(frame_len).map_err(|_| ProtocolError::Encode {
        api: API,
        version,
        reason: format!("{frame_len} bytes do not fit a frame"),
    })
}

/// Bounds-checked walk of a non-flexible Fetch request: the guard before decoding.
fn walk_fetch_request(body: &[u8], v: i16) -> Result<(), WireError> {
    let mut r = Reader::new(body);
    r.skip(4 + 4 + 4 + 4 + 1)?; // replica_id, max_wait_ms, min_bytes, max_bytes, isolation_level
    if v >= 7 {
        r.skip(4 + 4)?; // session_id, session_epoch
    }
    let partition_len = 4 + if v >= 9 { 4 } else { 0 } + 8 + if v >= 5 { 8 } else { 0 } + 4;
    let topics = r.required_count(false, 2 + 4, "topics")?;
    for _ in 0..topics {
        r.skip_string(false)?;
        let partitions = r.required_count(false, partition_len, "partitions")?;
        r.skip(partitions * partition_len)?;
    }
    if v >= 7 {
        let forgotten = r.required_count(false, 2 + 4, "forgotten_topics_data")?;
        for _ in 0..forgotten {
            r.skip_string(false)?;
            let partitions = r.required_count(false, 4, "partitions")?;
            r.skip(partitions * 4)?;
        }
    }
    if v >= 11 {
        r.skip_string(false)?; // rack_id
    }
    r.finish()
}

/// Fails unless `api_version` is a Fetch version kpress parses.
fn check_parsed(api_version: i16) -> Result<(), ProtocolError> {
    check_version(API, api_version, FETCH_MIN_VERSION, FETCH_MAX_VERSION)
}

fn is_flexible(api_version: i16) -> bool {
    api_version >= FETCH_FIRST_FLEXIBLE_VERSION
}

/// Calls `visit(topic, partition, records)` for each partition of a Fetch response
/// body (after the response header) at any version kpress parses, in order; null
/// records are empty.
pub fn fetch_response_records<'a>(
    body: &'a [u8],
    api_version: i16,
    mut visit: impl FnMut(FetchTopic<'a>, i32, &'a [u8]),
) -> Result<(), ProtocolError> {
    check_parsed(api_version)?;
    if is_flexible(api_version) {
        flexible::visit_records(body, api_version, visit)
    } else {
        walk_fetch_response(body, api_version, |topic, partition, records| {
            visit(FetchTopic::Name(topic), partition, records)
        })
    }
    .map_err(malformed_response(API, api_version))
}

/// Bounds-checked walk of a non-flexible Fetch response, visiting every partition's
/// records: the guard before decoding, and the survey of what a response holds.
pub(crate) fn walk_fetch_response<'a>(
    body: &'a [u8],
    v: i16,
    mut visit: impl FnMut(&'a str, i32, &'a [u8]),
) -> Result<(), WireError> {
    let mut r = Reader::new(body);
    r.skip(4)?; // throttle_time_ms
    if v >= 7 {
        r.skip(2 + 4)?; // error_code, session_id
    }
    let partition_min =
        4 + 2 + 8 + 8 + if v >= 5 { 8 } else { 0 } + 4 + if v >= 11 { 4 } else { 0 } + 4;
    let topics = r.required_count(false, 2 + 4, "responses")?;
    for _ in 0..topics {
        let at = r.position();
        let name = r
            .length_prefixed(LengthPrefix::Int16)?
            .ok_or(WireError::UnexpectedNull { at, field: "topic" })?;
        let topic =
            std::str::from_utf8(name).map_err(|_| WireError::NotUtf8 { at, field: "topic" })?;
        let partitions = r.required_count(false, partition_min, "partitions")?;
        for _ in 0..partitions {
            let partition = r.i32()?;
            r.skip(2 + 8 + 8)?; // error_code, high_watermark, last_stable_offset
            if v >= 5 {
                r.skip(8)?; // log_start_offset
            }
            // aborted_transactions: nullable, 16 bytes each.
            if let Some(aborted) = r.count(false, 16)? {
                r.skip(aborted * 16)?;
            }
            if v >= 11 {
                r.skip(4)?; // preferred_read_replica
            }
            let records = r.length_prefixed(LengthPrefix::Int32)?.unwrap_or_default();
            visit(topic, partition, records);
        }
    }
    r.finish()
}

/// A Fetch response read for its records to be replaced. Non-flexible ones are
/// decoded (each partition's records share the bytes they were decoded from) and may
/// be written at another non-flexible version; flexible ones are walked and written at
/// their own version, every byte but the replaced records as read.
#[derive(Debug)]
pub struct DecodedFetchResponse {
    read_at: i16,
    response: Decoded,
}

#[derive(Debug)]
enum Decoded {
    Classic(FetchResponse),
    Flexible(FlexibleResponse),
}

impl DecodedFetchResponse {
    /// Reads `body` (after the response header) of a response at `api_version`.
    pub fn decode(body: Bytes, api_version: i16) -> Result<Self, ProtocolError> {
        check_parsed(api_version)?;
        let malformed = malformed_response(API, api_version);
        let response = if is_flexible(api_version) {
            Decoded::Flexible(FlexibleResponse::read(body, api_version).map_err(&malformed)?)
        } else {
            walk_fetch_response(&body, api_version, |_, _, _| {}).map_err(&malformed)?;
            let mut buf = body;
            Decoded::Classic(
                FetchResponse::decode(&mut buf, api_version)
                    .map_err(|e| malformed(WireError::Decode(e.to_string())))?,
            )
        };
        Ok(DecodedFetchResponse {
            read_at: api_version,
            response,
        })
    }

    /// Calls `f(topic, partition, records)` for each partition, in order; `records`
    /// may be replaced (`None` is null records, which Kafka reads as empty).
    pub fn for_each_records(&mut self, mut f: impl FnMut(FetchTopic<'_>, i32, &mut Option<Bytes>)) {
        match &mut self.response {
            Decoded::Classic(response) => {
                for topic in &mut response.responses {
                    for partition in &mut topic.partitions {
                        f(
                            FetchTopic::Name(&topic.topic),
                            partition.partition_index,
                            &mut partition.records,
                        );
                    }
                }
            }
            Decoded::Flexible(response) => response.for_each_records(f),
        }
    }

    /// The whole response frame at `api_version`: size prefix, `header` (the response
    /// header, as read), then the body, written once. A flexible response is written
    /// only at the version it was read at.
    pub fn encode_frame(&self, api_version: i16, header: &[u8]) -> Result<BytesMut, ProtocolError> {
        self.encode_after(api_version, |size| {
            let frame_len = header.len() + size;
            let mut out = BytesMut::with_capacity(SIZE_PREFIX_LEN + frame_len);
            out.put_i32(frame_prefix(api_version, frame_len)?);
            out.put_slice(header);
            Ok(out)
        })
    }

    /// The body at `api_version`: for a non-flexible response fields it lacks are left
    /// out (a session id kpress asked for none of is 0); a flexible one only at the
    /// version it was read at.
    pub fn encode(&self, api_version: i16) -> Result<BytesMut, ProtocolError> {
        self.encode_after(api_version, |size| Ok(BytesMut::with_capacity(size)))
    }

    /// The body at `api_version` written after what `head(body_size)` returns, the
    /// buffer sized for both.
    fn encode_after(
        &self,
        api_version: i16,
        head: impl FnOnce(usize) -> Result<BytesMut, ProtocolError>,
    ) -> Result<BytesMut, ProtocolError> {
        match &self.response {
            Decoded::Classic(response) => {
                check_classic(api_version)?;
                let size = response
                    .compute_size(api_version)
                    .map_err(encode_failed(API, api_version))?;
                let mut out = head(size)?;
                response
                    .encode(&mut out, api_version)
                    .map_err(encode_failed(API, api_version))?;
                Ok(out)
            }
            Decoded::Flexible(response) => {
                if api_version != self.read_at {
                    return Err(ProtocolError::Encode {
                        api: API,
                        version: api_version,
                        reason: format!(
                            "a flexible Fetch response read at v{} is written at that version only",
                            self.read_at
                        ),
                    });
                }
                let mut out = head(response.size())?;
                response
                    .write(&mut out)
                    .map_err(|reason| ProtocolError::Encode {
                        api: API,
                        version: api_version,
                        reason,
                    })?;
                Ok(out)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic, ForgottenTopic};
    use kafka_protocol::messages::fetch_response::{
        AbortedTransaction, FetchableTopicResponse, PartitionData,
    };
    use kafka_protocol::messages::{BrokerId, ProducerId, TopicName};
    use kafka_protocol::protocol::StrBytes;

    fn name(s: &str) -> TopicName {
        TopicName(StrBytes::from_string(s.to_owned()))
    }

    /// A request as a client at `version` sends it: only fields of that version set.
    fn request(version: i16) -> FetchRequest {
        let partition = |index: i32| {
            let p = FetchPartition::default()
                .with_partition(index)
                .with_fetch_offset(1000 + i64::from(index))
                .with_partition_max_bytes(1 << 20);
            let p = if version >= 5 {
                p.with_log_start_offset(7)
            } else {
                p
            };
            if version >= 9 {
                p.with_current_leader_epoch(3)
            } else {
                p
            }
        };
        let r = FetchRequest::default()
            .with_replica_id(BrokerId(-1))
            .with_max_wait_ms(500)
            .with_min_bytes(1)
            .with_max_bytes(52428800)
            .with_isolation_level(1)
            .with_topics(vec![
                FetchTopic::default()
                    .with_topic(name("orders"))
                    .with_partitions(vec![partition(0), partition(2)]),
                FetchTopic::default()
                    .with_topic(name("audit"))
                    .with_partitions(vec![partition(1)]),
            ]);
        if version >= 7 {
            r.with_session_id(42)
                .with_session_epoch(5)
                .with_forgotten_topics_data(vec![ForgottenTopic::default()
                    .with_topic(name("gone"))
                    .with_partitions(vec![4, 5])])
        } else {
            r
        }
    }

    /// The request's frame body: header v1 (api key, version, correlation id, client
    /// id), then the message.
    fn request_body(version: i16, message: &FetchRequest) -> (Vec<u8>, usize) {
        let mut body = Vec::new();
        body.extend_from_slice(&api_key::FETCH.to_be_bytes());
        body.extend_from_slice(&version.to_be_bytes());
        body.extend_from_slice(&77i32.to_be_bytes());
        body.extend_from_slice(&9i16.to_be_bytes());
        body.extend_from_slice(b"consumer1");
        let header_len = body.len();
        let mut out = BytesMut::new();
        message.encode(&mut out, version).unwrap();
        body.extend_from_slice(&out);
        (body, header_len)
    }

    #[test]
    fn v4_to_v9_requests_go_on_at_v10_with_kafkas_defaults_for_what_they_lack() {
        for version in 4..=9 {
            let sent = request(version);
            let (body, header_len) = request_body(version, &sent);
            let frame = upgrade_fetch_request(&body, header_len, version, 10).unwrap();
            let size = i32::from_be_bytes(frame[..4].try_into().unwrap());
            assert_eq!(size as usize, frame.len() - 4, "v{version}");
            let header = &frame[4..4 + header_len];
            assert_eq!(header[..2], body[..2]);
            assert_eq!(i16::from_be_bytes([header[2], header[3]]), 10);
            assert_eq!(
                header[4..],
                body[4..header_len],
                "correlation id, client id"
            );
            let mut rest = &frame[4 + header_len..];
            let upgraded = FetchRequest::decode(&mut rest, 10).unwrap();
            assert!(rest.is_empty());
            // Every field the client sent is as sent; the rest are Kafka's defaults.
            assert_eq!(upgraded, sent, "v{version}");
            let p = &upgraded.topics[0].partitions[0];
            if version < 9 {
                assert_eq!(p.current_leader_epoch, -1);
            }
            if version < 5 {
                assert_eq!(p.log_start_offset, -1);
            }
            if version < 7 {
                assert_eq!((upgraded.session_id, upgraded.session_epoch), (0, -1));
                assert!(upgraded.forgotten_topics_data.is_empty());
            } else {
                assert_eq!((upgraded.session_id, upgraded.session_epoch), (42, 5));
            }
            assert_eq!(upgraded.isolation_level, 1);
            assert_eq!(upgraded.max_bytes, 52428800);
        }
    }

    #[test]
    fn v10_is_v9_on_the_wire() {
        let (v9, _) = request_body(9, &request(9));
        let (mut v10, _) = request_body(10, &request(9));
        v10[3] = 9;
        assert_eq!(v9, v10);
        let response = response_with(7, &[Some(Bytes::from_static(b"batch bytes"))]);
        for version in 7..=9 {
            assert_eq!(
                response.encode(10).unwrap(),
                response.encode(version).unwrap(),
                "v{version}"
            );
        }
    }

    #[test]
    fn hostile_request_counts_fail_before_anything_is_sized_from_them() {
        // Fixed fields, then a topics count of i32::MAX.
        let mut message = vec![0u8; 17 + 8];
        message.extend_from_slice(&i32::MAX.to_be_bytes());
        let mut body = vec![0, 1, 0, 8, 0, 0, 0, 1, 0xff, 0xff];
        let header_len = body.len();
        body.extend_from_slice(&message);
        let err = upgrade_fetch_request(&body, header_len, 8, 10).unwrap_err();
        assert!(
            matches!(
                err,
                ProtocolError::MalformedRequest {
                    source: WireError::CountTooLarge { .. },
                    ..
                }
            ),
            "{err}"
        );
        // Trailing bytes and a cut body are refused too.
        let (mut body, header_len) = request_body(8, &request(8));
        body.push(0);
        assert!(upgrade_fetch_request(&body, header_len, 8, 10).is_err());
        body.truncate(body.len() - 3);
        assert!(upgrade_fetch_request(&body, header_len, 8, 10).is_err());
        assert!(upgrade_fetch_request(&body, header_len, 12, 13).is_err());
    }

    fn response_with(session_id: i32, records: &[Option<Bytes>]) -> DecodedFetchResponse {
        let partitions = records
            .iter()
            .enumerate()
            .map(|(i, records)| {
                PartitionData::default()
                    .with_partition_index(i as i32)
                    .with_high_watermark(500)
                    .with_last_stable_offset(400)
                    .with_log_start_offset(3)
                    .with_aborted_transactions(Some(vec![AbortedTransaction::default()
                        .with_producer_id(ProducerId(9))
                        .with_first_offset(120)]))
                    .with_records(records.clone())
            })
            .collect();
        DecodedFetchResponse {
            read_at: 10,
            response: Decoded::Classic(
                FetchResponse::default()
                    .with_throttle_time_ms(12)
                    .with_session_id(session_id)
                    .with_responses(vec![FetchableTopicResponse::default()
                        .with_topic(name("orders"))
                        .with_partitions(partitions)]),
            ),
        }
    }

    #[test]
    fn responses_are_read_at_v10_and_written_at_the_clients_version() {
        let records = [
            Some(Bytes::from_static(b"first partition")),
            None,
            Some(Bytes::from_static(b"third")),
        ];
        let body = response_with(0, &records).encode(10).unwrap().freeze();
        let mut seen = Vec::new();
        fetch_response_records(&body, 10, |topic, partition, records| {
            let super::FetchTopic::Name(topic) = topic else {
                panic!("v10 names topics")
            };
            seen.push((topic.to_owned(), partition, records.to_vec()))
        })
        .unwrap();
        assert_eq!(
            seen,
            [
                ("orders".to_owned(), 0, b"first partition".to_vec()),
                ("orders".to_owned(), 1, Vec::new()),
                ("orders".to_owned(), 2, b"third".to_vec()),
            ]
        );
        let mut decoded = DecodedFetchResponse::decode(body.clone(), 10).unwrap();
        decoded.for_each_records(|_, partition, records| {
            if partition == 2 {
                *records = Some(Bytes::from_static(b"replaced"));
            }
        });
        let frame = decoded.encode_frame(6, &[0, 0, 0, 9]).unwrap();
        assert_eq!(frame[..4], ((frame.len() - 4) as i32).to_be_bytes());
        assert_eq!(frame[4..8], [0, 0, 0, 9]);
        assert_eq!(frame[8..], decoded.encode(6).unwrap());
        for version in 4..=9 {
            let out = decoded.encode(version).unwrap();
            let mut buf = &out[..];
            let back = FetchResponse::decode(&mut buf, version).unwrap();
            assert!(buf.is_empty());
            let p = &back.responses[0].partitions;
            assert_eq!(p[0].records.as_deref(), Some(&b"first partition"[..]));
            assert_eq!(p[2].records.as_deref(), Some(&b"replaced"[..]));
            assert_eq!(p[1].high_watermark, 500);
            assert_eq!(p[1].last_stable_offset, 400);
            assert_eq!(
                p[0].aborted_transactions.as_ref().unwrap()[0].first_offset,
                120
            );
            assert_eq!(p[0].log_start_offset, if version >= 5 { 3 } else { -1 });
            assert_eq!(back.throttle_time_ms, 12);
        }
    }

    #[test]
    fn hostile_response_counts_fail_before_anything_is_sized_from_them() {
        // throttle, error_code, session_id, then responses: i32::MAX.
        let mut body = vec![0u8; 10];
        body.extend_from_slice(&i32::MAX.to_be_bytes());
        let err = DecodedFetchResponse::decode(Bytes::from(body.clone()), 10).unwrap_err();
        assert!(
            matches!(
                err,
                ProtocolError::MalformedResponse {
                    source: WireError::CountTooLarge { .. },
                    ..
                }
            ),
            "{err}"
        );
        assert!(fetch_response_records(&body, 10, |_, _, _| {}).is_err());
        // A records length past the end.
        let good = response_with(0, &[Some(Bytes::from_static(b"abc"))])
            .encode(10)
            .unwrap();
        let mut cut = good.to_vec();
        cut.truncate(cut.len() - 1);
        assert!(DecodedFetchResponse::decode(Bytes::from(cut), 10).is_err());
        assert!(DecodedFetchResponse::decode(good.freeze(), FETCH_MAX_VERSION + 1).is_err());
    }
}
