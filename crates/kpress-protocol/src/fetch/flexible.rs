//! Flexible Fetch responses (v12 on): walked, never decoded whole. A bounds-checked
//! walk notes where each partition's records field lies; writing the response back
//! copies every byte between those fields as read (tagged fields kpress does not know,
//! `NodeEndpoints`, diverging epochs, everything) and writes only the records fields a
//! caller replaced. The version never changes on this path: the client asked for it.

use std::ops::Range;

use bytes::{BufMut, Bytes, BytesMut};

use super::FetchTopic;
use crate::error::WireError;
use crate::wire::{put_uvarint, LengthPrefix, Reader};
use crate::{api, api_key};

/// The first Fetch version that names topics by id (KIP-516).
pub(super) const FIRST_TOPIC_ID: i16 = api::topic_ids_from(api_key::FETCH);

/// The least a partition takes: index, error, high watermark, last stable offset, log
/// start offset, null aborted transactions, preferred read replica, null records, no
/// tagged fields.
const MIN_PARTITION: usize = 4 + 2 + 8 + 8 + 8 + 1 + 4 + 1 + 1;
/// One aborted transaction: producer id, first offset, no tagged fields.
const MIN_ABORTED: usize = 8 + 8 + 1;

/// How the walk found a topic named: its name's place in the body, or its id.
#[derive(Debug, Clone)]
enum TopicAt {
    Name(Range<usize>),
    Id([u8; 16]),
}

/// One partition's records field, as found by the walk.
#[derive(Debug, Clone)]
struct RecordsAt {
    topic: usize,
    partition: i32,
    /// The whole field: its compact length, then its content.
    field: Range<usize>,
    /// The content, `None` for null records.
    content: Option<Range<usize>>,
}

/// What the walk found, in order.
enum Found {
    Topic(TopicAt),
    /// A partition's index, its whole records field, and its content (`None`: null).
    Records(i32, Range<usize>, Option<Range<usize>>),
}

/// Bounds-checked walk of a flexible Fetch response body (after the response header)
/// at `v`: calls `found` for each topic, then for each of its partitions' records. Every count is checked against the bytes that remain before
/// anything is sized from it.
fn walk(body: &[u8], v: i16, mut found: impl FnMut(Found)) -> Result<(), WireError> {
    let by_id = v >= FIRST_TOPIC_ID;
    let mut r = Reader::new(body);
    r.skip(4 + 2 + 4)?; // throttle_time_ms, error_code, session_id
    let min_topic = if by_id { 16 } else { 1 } + 1 + 1;
    let topics = r.required_count(true, min_topic, "responses")?;
    for _ in 0..topics {
        if by_id {
            found(Found::Topic(TopicAt::Id(r.uuid()?)));
        } else {
            let at = r.position();
            let name = r
                .length_prefixed(LengthPrefix::Compact)?
                .ok_or(WireError::UnexpectedNull { at, field: "topic" })?;
            std::str::from_utf8(name).map_err(|_| WireError::NotUtf8 { at, field: "topic" })?;
            let end = r.position();
            found(Found::Topic(TopicAt::Name(end - name.len()..end)));
        }
        let partitions = r.required_count(true, MIN_PARTITION, "partitions")?;
        for _ in 0..partitions {
            let partition = r.i32()?;
            r.skip(2 + 8 + 8 + 8)?; // error_code, high_watermark, last_stable_offset, log_start_offset
            if let Some(aborted) = r.count(true, MIN_ABORTED)? {
                for _ in 0..aborted {
                    r.skip(8 + 8)?; // producer_id, first_offset
                    r.skip_tagged_fields()?;
                }
            }
            r.skip(4)?; // preferred_read_replica
            let start = r.position();
            let content = r.length_prefixed(LengthPrefix::Compact)?;
            let end = r.position();
            let content = content.map(|c| end - c.len()..end);
            found(Found::Records(partition, start..end, content));
            // diverging_epoch, current_leader, snapshot_id and any other: kept as read.
            r.skip_tagged_fields()?;
        }
        r.skip_tagged_fields()?;
    }
    // node_endpoints (v16+) and any other: kept as read.
    r.skip_tagged_fields()?;
    r.finish()
}

/// Calls `visit(topic, partition, records)` for each partition of a flexible Fetch
/// response body, in order; null records are empty.
pub(super) fn visit_records<'a>(
    body: &'a [u8],
    v: i16,
    mut visit: impl FnMut(FetchTopic<'a>, i32, &'a [u8]),
) -> Result<(), WireError> {
    let mut topic = FetchTopic::Id([0; 16]);
    walk(body, v, |found| match found {
        Found::Topic(TopicAt::Id(id)) => topic = FetchTopic::Id(id),
        // Checked as UTF-8 by the walk.
        Found::Topic(TopicAt::Name(range)) => {
            topic = FetchTopic::Name(std::str::from_utf8(&body[range]).unwrap_or_default())
        }
        Found::Records(partition, _, content) => {
            let records = content.map_or(&[][..], |c| &body[c]);
            visit(topic, partition, records);
        }
    })
}

/// A flexible Fetch response walked for its records to be replaced: the body as read,
/// where each records field lies, and what each partition's records are now.
#[derive(Debug)]
pub(super) struct FlexibleResponse {
    body: Bytes,
    topics: Vec<TopicAt>,
    fields: Vec<RecordsAt>,
    /// Each partition's records now, in `fields`' order; they share `body` until
    /// replaced.
    records: Vec<Option<Bytes>>,
}

impl FlexibleResponse {
    pub(super) fn read(body: Bytes, v: i16) -> Result<FlexibleResponse, WireError> {
        let mut topics = Vec::new();
        let mut fields = Vec::new();
        walk(&body, v, |found| match found {
            Found::Topic(at) => topics.push(at),
            Found::Records(partition, field, content) => fields.push(RecordsAt {
                topic: topics.len() - 1,
                partition,
                field,
                content,
            }),
        })?;
        let records = fields
            .iter()
            .map(|f| f.content.clone().map(|c| body.slice(c)))
            .collect();
        Ok(FlexibleResponse {
            body,
            topics,
            fields,
            records,
        })
    }

    /// Calls `f(topic, partition, records)` for each partition, in order.
    pub(super) fn for_each_records(
        &mut self,
        mut f: impl FnMut(FetchTopic<'_>, i32, &mut Option<Bytes>),
    ) {
        for (field, records) in self.fields.iter().zip(&mut self.records) {
            let topic = match &self.topics[field.topic] {
                TopicAt::Id(id) => FetchTopic::Id(*id),
                TopicAt::Name(range) => FetchTopic::Name(
                    std::str::from_utf8(&self.body[range.clone()]).unwrap_or_default(),
                ),
            };
            f(topic, field.partition, records);
        }
    }

    /// Whether partition `at`'s records are still the bytes read.
    fn unchanged(&self, at: usize) -> bool {
        let field = &self.fields[at];
        match (&self.records[at], &field.content) {
            (None, None) => true,
            (Some(now), Some(read)) => {
                let read = &self.body[read.clone()];
                now.as_ptr() == read.as_ptr() && now.len() == read.len()
            }
            _ => false,
        }
    }

    /// The body's size once written.
    pub(super) fn size(&self) -> usize {
        let mut size = self.body.len();
        for at in 0..self.fields.len() {
            if self.unchanged(at) {
                continue;
            }
            size -= self.fields[at].field.len();
            size += records_field_len(self.records[at].as_deref());
        }
        size
    }

    /// Writes the body: every byte as read but the records fields replaced.
    pub(super) fn write(&self, out: &mut BytesMut) -> Result<(), String> {
        let mut copied = 0;
        for at in 0..self.fields.len() {
            if self.unchanged(at) {
                continue;
            }
            let field = &self.fields[at].field;
            out.put_slice(&self.body[copied..field.start]);
            match self.records[at].as_deref() {
                None => put_uvarint(out, 0),
                Some(records) => {
                    let len = u32::try_from(records.len())
                        .ok()
                        .filter(|len| *len < i32::MAX as u32)
                        .ok_or_else(|| format!("{} bytes of records", records.len()))?;
                    put_uvarint(out, len + 1);
                    out.put_slice(records);
                }
            }
            copied = field.end;
        }
        out.put_slice(&self.body[copied..]);
        Ok(())
    }
}

/// The bytes a compact records field of `records` takes.
fn records_field_len(records: Option<&[u8]>) -> usize {
    match records {
        None => 1,
        Some(records) => uvarint_len((records.len() as u32).saturating_add(1)) + records.len(),
    }
}

/// The bytes `value` takes as an unsigned varint.
fn uvarint_len(value: u32) -> usize {
    match value {
        0..=0x7f => 1,
        0x80..=0x3fff => 2,
        0x4000..=0x1f_ffff => 3,
        0x20_0000..=0xfff_ffff => 4,
        _ => 5,
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use kafka_protocol::messages::fetch_response::{
        AbortedTransaction, EpochEndOffset, FetchResponse, FetchableTopicResponse,
        LeaderIdAndEpoch, NodeEndpoint, PartitionData,
    };
    use kafka_protocol::messages::{BrokerId, ProducerId, TopicName};
    use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
    use uuid::Uuid;

    use super::super::{fetch_response_records, DecodedFetchResponse, FETCH_MAX_VERSION};
    use super::*;
    use crate::error::ProtocolError;

    const ID: [u8; 16] = [0x5a; 16];

    /// Tagged fields no version of Fetch defines, as a newer broker may send them.
    fn unknown(tag: i32) -> BTreeMap<i32, Bytes> {
        BTreeMap::from([(tag, Bytes::from_static(b"kept as sent"))])
    }

    /// A response at `v` with every kind of tagged field Fetch has, known and unknown.
    fn response(v: i16, records: &[Option<&'static [u8]>]) -> FetchResponse {
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
                        .with_first_offset(120)
                        .with_unknown_tagged_fields(unknown(7))]))
                    .with_preferred_read_replica(BrokerId(-1))
                    .with_diverging_epoch(
                        EpochEndOffset::default().with_epoch(4).with_end_offset(77),
                    )
                    .with_current_leader(
                        LeaderIdAndEpoch::default()
                            .with_leader_id(BrokerId(2))
                            .with_leader_epoch(5),
                    )
                    .with_records(records.map(Bytes::from_static))
                    .with_unknown_tagged_fields(unknown(90))
            })
            .collect();
        let topic = FetchableTopicResponse::default()
            .with_partitions(partitions)
            .with_unknown_tagged_fields(unknown(3));
        let topic = if v >= FIRST_TOPIC_ID {
            topic.with_topic_id(Uuid::from_bytes(ID))
        } else {
            topic.with_topic(TopicName(StrBytes::from_static_str("orders")))
        };
        let response = FetchResponse::default()
            .with_throttle_time_ms(12)
            .with_session_id(44)
            .with_responses(vec![topic])
            .with_unknown_tagged_fields(unknown(9));
        if v >= 16 {
            response.with_node_endpoints(vec![NodeEndpoint::default()
                .with_node_id(BrokerId(2))
                .with_host(StrBytes::from_static_str("broker-2.internal"))
                .with_port(9092)])
        } else {
            response
        }
    }

    fn encoded(v: i16, response: &FetchResponse) -> Bytes {
        let mut out = BytesMut::new();
        response.encode(&mut out, v).unwrap();
        out.freeze()
    }

    const FLEXIBLE: std::ops::RangeInclusive<i16> = 12..=FETCH_MAX_VERSION;

    #[test]
    fn untouched_responses_are_written_back_byte_for_byte() {
        for v in FLEXIBLE {
            let body = encoded(v, &response(v, &[Some(b"first"), None, Some(b"")]));
            let mut read = DecodedFetchResponse::decode(body.clone(), v).unwrap();
            read.for_each_records(|_, _, _| {});
            assert_eq!(read.encode(v).unwrap(), body, "v{v}");
            let frame = read.encode_frame(v, &[0, 0, 0, 7, 0]).unwrap();
            assert_eq!(frame[..4], ((frame.len() - 4) as i32).to_be_bytes());
            assert_eq!(frame[4..9], [0, 0, 0, 7, 0]);
            assert_eq!(frame[9..], body);
            // Only at the version read.
            assert!(matches!(
                read.encode(v - 1),
                Err(ProtocolError::Encode { .. })
            ));
        }
    }

    #[test]
    fn replaced_records_change_and_every_other_byte_stays() {
        for v in FLEXIBLE {
            let sent = response(v, &[Some(b"stored in zstd"), None, Some(b"kept")]);
            let body = encoded(v, &sent);
            let mut seen = Vec::new();
            fetch_response_records(&body, v, |topic, partition, records| {
                seen.push((topic, partition, records.to_vec()))
            })
            .unwrap();
            let topic = if v >= FIRST_TOPIC_ID {
                FetchTopic::Id(ID)
            } else {
                FetchTopic::Name("orders")
            };
            assert_eq!(
                seen,
                [
                    (topic, 0, b"stored in zstd".to_vec()),
                    (topic, 1, Vec::new()),
                    (topic, 2, b"kept".to_vec()),
                ],
                "v{v}"
            );
            let long = Bytes::from(vec![b'x'; 300]);
            let mut read = DecodedFetchResponse::decode(body.clone(), v).unwrap();
            read.for_each_records(|_, partition, records| match partition {
                0 => *records = Some(long.clone()),
                1 => *records = Some(Bytes::from_static(b"was null")),
                _ => {}
            });
            let out = read.encode(v).unwrap();
            let mut buf = &out[..];
            let back = FetchResponse::decode(&mut buf, v).unwrap();
            assert!(buf.is_empty());
            let mut expected = sent.clone();
            expected.responses[0].partitions[0].records = Some(long.clone());
            expected.responses[0].partitions[1].records = Some(Bytes::from_static(b"was null"));
            assert_eq!(back, expected, "v{v}");
            // Byte for byte: what precedes the first replaced field and follows the
            // last is as read.
            let mut fields = Vec::new();
            walk(&body, v, |found| {
                if let Found::Records(_, field, _) = found {
                    fields.push(field);
                }
            })
            .unwrap();
            let (first, last) = (fields[0].start, fields[1].end);
            assert_eq!(out[..first], body[..first], "v{v}");
            assert_eq!(out[out.len() - (body.len() - last)..], body[last..], "v{v}");
        }
    }

    #[test]
    fn tagged_fields_kafka_cannot_read_are_refused() {
        let v = 17;
        let body = encoded(v, &response(v, &[Some(b"abc")]));
        // The top-level tagged fields: unknown tag 9 and node_endpoints (tag 0), in that
        // order, which Kafka refuses (tags must ascend); kafka-protocol would reorder them.
        let mut swapped = body.to_vec();
        let mut top = Reader::new(&body);
        let tagged_at = {
            // The last topic ends where the top-level tagged fields start.
            let mut end = 0;
            walk(&body, v, |found| {
                if let Found::Records(_, field, _) = found {
                    end = field.end;
                }
            })
            .unwrap();
            top.skip(end).unwrap();
            top.skip_tagged_fields().unwrap(); // the partition's
            top.skip_tagged_fields().unwrap(); // the topic's
            top.position()
        };
        let mut fields = Vec::new();
        let mut r = Reader::new(&body[tagged_at..]);
        r.tagged_fields(|f| fields.push(f.start..f.content_start + f.content.len()))
            .unwrap();
        assert_eq!(fields.len(), 2);
        let (zero, nine) = (fields[0].clone(), fields[1].clone());
        let mut reordered = body[tagged_at..tagged_at + zero.start].to_vec();
        reordered.extend_from_slice(&body[tagged_at + nine.start..tagged_at + nine.end]);
        reordered.extend_from_slice(&body[tagged_at + zero.start..tagged_at + zero.end]);
        swapped.truncate(tagged_at);
        swapped.extend_from_slice(&reordered);
        assert_eq!(swapped.len(), body.len());
        assert!(matches!(
            DecodedFetchResponse::decode(Bytes::from(swapped), v),
            Err(ProtocolError::MalformedResponse {
                source: WireError::InvalidTaggedField { .. },
                ..
            })
        ));
    }

    fn malformed(body: Vec<u8>, v: i16) -> WireError {
        let body = Bytes::from(body);
        let walked = fetch_response_records(&body, v, |_, _, _| {}).unwrap_err();
        match DecodedFetchResponse::decode(body, v).unwrap_err() {
            ProtocolError::MalformedResponse { source, .. } => {
                assert!(
                    matches!(walked, ProtocolError::MalformedResponse { .. }),
                    "{walked}"
                );
                source
            }
            other => panic!("{other}"),
        }
    }

    /// `prefix`, then `value` as an unsigned varint, then `rest`.
    fn with_varint(prefix: &[u8], value: u32, rest: &[u8]) -> Vec<u8> {
        let mut out = prefix.to_vec();
        put_uvarint(&mut out, value);
        out.extend_from_slice(rest);
        out
    }

    #[test]
    fn hostile_counts_and_lengths_fail_before_anything_is_sized_from_them() {
        let head = [0u8; 10]; // throttle, error, session
        for v in [12, 13, 17] {
            // responses: u32::MAX - 1 topics in a few bytes.
            let err = malformed(with_varint(&head, u32::MAX, &[0; 8]), v);
            assert!(matches!(err, WireError::CountTooLarge { .. }), "{err}");
            // One topic, then partitions: a count far past the bytes left.
            let topic: Vec<u8> = if v >= FIRST_TOPIC_ID {
                ID.to_vec()
            } else {
                with_varint(&[], 7, b"orders")
            };
            let mut one = with_varint(&head, 2, &topic);
            let err = malformed(with_varint(&one, 1 << 28, &[0; 64]), v);
            assert!(matches!(err, WireError::CountTooLarge { .. }), "{err}");
            // One partition whose aborted transactions count is huge.
            one = with_varint(&one, 2, &[0; 4 + 2 + 8 + 8 + 8]);
            let err = malformed(with_varint(&one, 1 << 20, &[0; 40]), v);
            assert!(matches!(err, WireError::CountTooLarge { .. }), "{err}");
            // Null aborted transactions, then records longer than the body.
            let partition = with_varint(&one, 0, &[0xff; 4]);
            let err = malformed(with_varint(&partition, 1 << 30, &[0; 16]), v);
            assert!(matches!(err, WireError::Truncated { .. }), "{err}");
            // Null records, then a tagged-field count past what remains.
            let records = with_varint(&partition, 0, &[]);
            let err = malformed(with_varint(&records, 1 << 20, &[0; 8]), v);
            assert!(matches!(err, WireError::CountTooLarge { .. }), "{err}");
            // The same partition, well formed, then trailing bytes.
            let whole = [&records[..], &[0, 0, 0]].concat();
            assert!(DecodedFetchResponse::decode(Bytes::from(whole.clone()), v).is_ok());
            let err = malformed([&whole[..], &[1]].concat(), v);
            assert!(matches!(err, WireError::TrailingBytes { .. }), "{err}");
            // A cut body.
            let err = malformed(whole[..whole.len() - 1].to_vec(), v);
            assert!(matches!(err, WireError::Truncated { .. }), "{err}");
        }
        // A topic name that is no UTF-8 (v12 names topics).
        let bad_name = with_varint(&with_varint(&head, 2, &[]), 3, &[0xff, 0xfe]);
        let err = malformed(with_varint(&bad_name, 1, &[0, 0]), 12);
        assert!(matches!(err, WireError::NotUtf8 { .. }), "{err}");
    }
}
