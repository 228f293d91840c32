//! Produce requests built with kafka-protocol (as real clients shape them),
//! rewritten by kpress-protocol, decoded back with kafka-protocol.

use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{ApiKey, ProduceRequest, RequestHeader, TopicName};
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, StrBytes};
use kpress_batch::builder::{BatchBuilder, Record};
use kpress_batch::{PassReason, Recompressor, RecordBatch, RewritePolicy, RewriteStats};
use kpress_codec::{Codec, CompressionOptions};
use kpress_protocol::{
    produce_acks, rewrite_produce_with, Fault, ProduceSplice, ProtocolError, RecordsRewriter,
    WireError, MAX_UNKNOWN_TOPIC_IDS,
};
use uuid::Uuid;

const ORDERS_ID: [u8; 16] = [7; 16];
const CLICKS_ID: [u8; 16] = [9; 16];

fn topic_name(id: &[u8; 16]) -> Option<Arc<str>> {
    match *id {
        ORDERS_ID => Some(Arc::from("orders")),
        CLICKS_ID => Some(Arc::from("clicks")),
        _ => None,
    }
}

fn batch(codec: Codec, values: &[&str]) -> Vec<u8> {
    let records: Vec<Record> = values.iter().map(|v| Record::value(v.repeat(40))).collect();
    BatchBuilder::codec(codec).build(&records).unwrap()
}

fn topic(
    version: i16,
    name: &str,
    id: [u8; 16],
    partitions: Vec<(i32, Option<Vec<u8>>)>,
) -> TopicProduceData {
    let mut topic = TopicProduceData::default().with_partition_data(
        partitions
            .into_iter()
            .map(|(index, records)| {
                PartitionProduceData::default()
                    .with_index(index)
                    .with_records(records.map(Bytes::from))
            })
            .collect(),
    );
    if version >= 13 {
        topic.topic_id = Uuid::from_bytes(id);
    } else {
        topic.name = TopicName(StrBytes::from_string(name.to_owned()));
    }
    topic
}

/// A Produce request as a client sends it: header + body, no size prefix.
fn produce_payload(version: i16, acks: i16, topics: Vec<TopicProduceData>) -> (Vec<u8>, usize) {
    let header = RequestHeader::default()
        .with_request_api_key(ApiKey::Produce as i16)
        .with_request_api_version(version)
        .with_correlation_id(42)
        .with_client_id(Some(StrBytes::from_static_str("producer-1")));
    let request = ProduceRequest::default()
        .with_transactional_id(None)
        .with_acks(acks)
        .with_timeout_ms(30_000)
        .with_topic_data(topics);
    let mut buf = BytesMut::new();
    header
        .encode(&mut buf, ProduceRequest::header_version(version))
        .unwrap();
    let header_len = buf.len();
    request.encode(&mut buf, version).unwrap();
    (buf.to_vec(), header_len)
}

fn decode_body(payload: &[u8], header_len: usize, version: i16) -> ProduceRequest {
    let mut body = &payload[header_len..];
    let request = ProduceRequest::decode(&mut body, version).unwrap();
    assert!(body.is_empty(), "trailing bytes after the rewritten body");
    request
}

/// Appends a recognisable transformation of the records (for topics named
/// `orders`) so each splice can be checked.
struct Marker;

impl RecordsRewriter for Marker {
    fn rewrite_records(&mut self, topic: &str, records: &[u8], out: &mut Vec<u8>) -> bool {
        if topic != "orders" {
            out.extend_from_slice(b"appended and then dropped");
            return false;
        }
        out.extend_from_slice(b"<");
        out.extend_from_slice(records);
        // Long enough to change a compact length's varint size.
        out.extend_from_slice(&[b'>'; 200]);
        true
    }
}

fn marked(records: &[u8]) -> Vec<u8> {
    let mut out = b"<".to_vec();
    out.extend_from_slice(records);
    out.extend_from_slice(&[b'>'; 200]);
    out
}

/// Recompresses every partition with one policy, as kpress-proxy does with
/// each topic's, and counts what happened to the batches.
struct Recompress {
    policy: RewritePolicy,
    recompressor: Recompressor,
    stats: RewriteStats,
}

impl RecordsRewriter for Recompress {
    fn rewrite_records(&mut self, _topic: &str, records: &[u8], out: &mut Vec<u8>) -> bool {
        let mut stats = RewriteStats::default();
        self.recompressor
            .rewrite_records(records, &self.policy, out, &mut stats);
        self.stats.merge(&stats);
        stats.batches_rewritten > 0
    }
}

fn recompress(
    payload: &[u8],
    header_len: usize,
    version: i16,
    policy: RewritePolicy,
) -> (ProduceSplice, RewriteStats) {
    let mut rewriter = Recompress {
        policy,
        recompressor: Recompressor::new(),
        stats: RewriteStats::default(),
    };
    let splice =
        rewrite_produce_with(payload, header_len, version, &topic_name, &mut rewriter).unwrap();
    (splice, rewriter.stats)
}

#[test]
fn acks_is_read_at_every_version() {
    for version in 3..=13 {
        for acks in [-1, 0, 1] {
            let (payload, header_len) = produce_payload(version, acks, vec![]);
            assert_eq!(
                produce_acks(&payload[header_len..], version),
                Ok(acks),
                "v{version}"
            );
        }
    }
}

#[test]
fn acks_after_a_transactional_id() {
    for version in [3, 8, 9, 13] {
        let header_len = 0;
        let mut request = ProduceRequest::default().with_acks(-1);
        request.transactional_id = Some(StrBytes::from_static_str("txn-1").into());
        let mut body = BytesMut::new();
        request.encode(&mut body, version).unwrap();
        assert_eq!(produce_acks(&body[header_len..], version), Ok(-1));
    }
}

#[test]
fn splices_each_partition_at_every_version() {
    let a = batch(Codec::None, &["a", "b"]);
    let b = batch(Codec::Gzip, &["c"]);
    let c = batch(Codec::Snappy, &["d", "e", "f"]);
    for version in 3..=13 {
        let topics = vec![
            topic(
                version,
                "orders",
                ORDERS_ID,
                vec![(0, Some(a.clone())), (1, None), (2, Some(b.clone()))],
            ),
            topic(version, "clicks", CLICKS_ID, vec![(0, Some(c.clone()))]),
            topic(version, "orders", ORDERS_ID, vec![(5, Some(c.clone()))]),
        ];
        let (payload, header_len) = produce_payload(version, 1, topics);
        let result =
            rewrite_produce_with(&payload, header_len, version, &topic_name, &mut Marker).unwrap();
        assert!(result.unknown_topic_ids.is_empty());
        let new_payload = result.payload().expect("orders changed");
        let frame = result.frame.as_deref().expect("orders changed");
        assert_eq!(
            frame[..4],
            (new_payload.len() as i32).to_be_bytes(),
            "size prefix counts the payload"
        );
        assert_eq!(
            new_payload[..header_len],
            payload[..header_len],
            "header untouched"
        );

        let before = decode_body(&payload, header_len, version);
        let after = decode_body(new_payload, header_len, version);
        let mut expected = before.clone();
        for topic in [0, 2] {
            for partition in &mut expected.topic_data[topic].partition_data {
                partition.records = partition.records.as_ref().map(|r| Bytes::from(marked(r)));
            }
        }
        assert_eq!(after, expected, "v{version}");
    }
}

#[test]
fn nothing_to_rewrite_forwards_the_original() {
    for version in [3, 8, 9, 12, 13] {
        let topics = vec![topic(
            version,
            "clicks",
            CLICKS_ID,
            vec![(0, Some(batch(Codec::Lz4, &["x"])))],
        )];
        let (payload, header_len) = produce_payload(version, 1, topics);
        let result =
            rewrite_produce_with(&payload, header_len, version, &topic_name, &mut Marker).unwrap();
        assert!(result.payload().is_none());
    }
}

#[test]
fn v13_unknown_topic_ids_are_listed_and_left_alone() {
    let unknown = [1u8; 16];
    let records = batch(Codec::None, &["a"]);
    let topics = vec![
        topic(
            13,
            "",
            unknown,
            vec![(0, Some(records.clone())), (1, Some(records.clone()))],
        ),
        topic(13, "", ORDERS_ID, vec![(0, Some(records.clone()))]),
        topic(13, "", unknown, vec![(2, Some(records.clone()))]),
    ];
    let (payload, header_len) = produce_payload(13, -1, topics);
    let result = rewrite_produce_with(&payload, header_len, 13, &topic_name, &mut Marker).unwrap();
    assert_eq!(result.unknown_topic_ids, vec![unknown]);
    let after = decode_body(result.payload().unwrap(), header_len, 13);
    assert_eq!(
        after.topic_data[0].partition_data[0].records.as_deref(),
        Some(&records[..])
    );
    assert_eq!(
        after.topic_data[2].partition_data[0].records.as_deref(),
        Some(&records[..])
    );
    assert_eq!(
        after.topic_data[1].partition_data[0].records.as_deref(),
        Some(&marked(&records)[..])
    );
}

#[test]
fn recompressed_batches_are_spliced_at_every_version() {
    let policy = RewritePolicy::to_codec(Codec::Zstd, CompressionOptions::default());
    let gzip = batch(Codec::Gzip, &["hello kafka ", "recompress me ", "again "]);
    for version in [3, 7, 8, 9, 12, 13] {
        let topics = vec![topic(
            version,
            "orders",
            ORDERS_ID,
            vec![(0, Some(gzip.clone()))],
        )];
        let (payload, header_len) = produce_payload(version, -1, topics);
        let (result, stats) = recompress(&payload, header_len, version, policy.clone());
        assert_eq!(stats.batches_rewritten, 1, "v{version}");
        let after = decode_body(result.payload().unwrap(), header_len, version);
        let records = after.topic_data[0].partition_data[0]
            .records
            .clone()
            .unwrap();
        let rewritten = RecordBatch::parse(&records).unwrap();
        assert_eq!(rewritten.codec(), Some(Codec::Zstd));
        assert!(rewritten.crc_is_valid());
        assert_eq!(rewritten.records_count(), 3);
        assert_eq!(rewritten.bytes().len(), records.len());
    }
}

#[test]
fn producer_policy_forwards_the_original_and_counts_the_batches() {
    let policy = RewritePolicy::default(); // target: producer
    let topics = vec![topic(
        9,
        "orders",
        ORDERS_ID,
        vec![(0, Some(batch(Codec::Gzip, &["a"])))],
    )];
    let (payload, header_len) = produce_payload(9, 1, topics);
    let (result, stats) = recompress(&payload, header_len, 9, policy);
    assert!(result.payload().is_none());
    assert_eq!(stats.passed_for(PassReason::PolicyProducer), 1);
}

#[test]
fn corrupt_batches_are_forwarded_untouched() {
    let policy = RewritePolicy::to_codec(Codec::Zstd, CompressionOptions::default());
    let mut corrupt = batch(Codec::Gzip, &["a", "b"]);
    let last = corrupt.len() - 1;
    corrupt[last] ^= 0xff; // CRC no longer matches
    let topics = vec![topic(9, "orders", ORDERS_ID, vec![(0, Some(corrupt))])];
    let (payload, header_len) = produce_payload(9, 1, topics);
    let (result, stats) = recompress(&payload, header_len, 9, policy);
    assert!(result.payload().is_none());
    assert_eq!(stats.passed_for(PassReason::CrcMismatch), 1);
}

#[test]
fn unsupported_versions_are_refused() {
    for version in [0, 2, 14] {
        let err = rewrite_produce_with(&[0; 64], 0, version, &topic_name, &mut Marker).unwrap_err();
        assert!(
            matches!(err, ProtocolError::UnsupportedVersion { .. }),
            "v{version}"
        );
        assert!(produce_acks(&[0; 64], version).is_err());
    }
}

fn client_error(payload: &[u8], header_len: usize, version: i16) -> WireError {
    match rewrite_produce_with(payload, header_len, version, &topic_name, &mut Marker) {
        Err(err @ ProtocolError::MalformedRequest { .. }) => {
            assert_eq!(err.fault(), Fault::Client);
            match err {
                ProtocolError::MalformedRequest { source, .. } => source,
                _ => unreachable!(),
            }
        }
        other => panic!("expected a client error, got {other:?}"),
    }
}

/// Body prefix: null transactional id, acks, timeout.
fn body_prefix(flexible: bool) -> Vec<u8> {
    let mut body = if flexible { vec![0] } else { vec![0xff, 0xff] };
    body.extend_from_slice(&1i16.to_be_bytes());
    body.extend_from_slice(&30_000i32.to_be_bytes());
    body
}

#[test]
fn hostile_topic_count_fails_without_allocating() {
    // 2^31 - 1 topics (classic) and 2^32 - 2 topics (compact) in a tiny body.
    let mut classic = body_prefix(false);
    classic.extend_from_slice(&i32::MAX.to_be_bytes());
    assert!(
        matches!(client_error(&classic, 0, 8), WireError::CountTooLarge { count, .. } if count == i32::MAX as u64)
    );
    let mut compact = body_prefix(true);
    compact.extend_from_slice(&[0xff, 0xff, 0xff, 0xff, 0x0f]);
    assert!(matches!(
        client_error(&compact, 0, 9),
        WireError::CountTooLarge { .. }
    ));
    let mut negative = body_prefix(false);
    negative.extend_from_slice(&(-5i32).to_be_bytes());
    assert!(matches!(
        client_error(&negative, 0, 3),
        WireError::NegativeLength { .. }
    ));
}

#[test]
fn hostile_partition_count_and_records_length_fail() {
    // One topic "t" claiming 2^31 - 1 partitions.
    let mut partitions = body_prefix(false);
    partitions.extend_from_slice(&1i32.to_be_bytes());
    partitions.extend_from_slice(&1i16.to_be_bytes());
    partitions.push(b't');
    partitions.extend_from_slice(&i32::MAX.to_be_bytes());
    assert!(matches!(
        client_error(&partitions, 0, 8),
        WireError::CountTooLarge { .. }
    ));

    // One partition whose records claim 2^31 - 1 bytes.
    let mut records = body_prefix(false);
    records.extend_from_slice(&1i32.to_be_bytes());
    records.extend_from_slice(&1i16.to_be_bytes());
    records.push(b't');
    records.extend_from_slice(&1i32.to_be_bytes());
    records.extend_from_slice(&0i32.to_be_bytes());
    records.extend_from_slice(&i32::MAX.to_be_bytes());
    records.extend_from_slice(&[0; 16]);
    assert!(
        matches!(client_error(&records, 0, 8), WireError::Truncated { needed, .. } if needed == i32::MAX as usize)
    );

    // v13: one topic id claiming 2^32 - 2 partitions (compact count).
    let mut by_id = body_prefix(true);
    by_id.push(2); // one topic
    by_id.extend_from_slice(&ORDERS_ID);
    by_id.extend_from_slice(&[0xff, 0xff, 0xff, 0xff, 0x0f]);
    assert!(matches!(
        client_error(&by_id, 0, 13),
        WireError::CountTooLarge { .. }
    ));
}

#[test]
fn truncation_and_trailing_bytes_are_client_errors() {
    let topics = vec![topic(
        9,
        "orders",
        ORDERS_ID,
        vec![(0, Some(batch(Codec::None, &["a"])))],
    )];
    let (payload, header_len) = produce_payload(9, 1, topics);
    for cut in header_len..payload.len() {
        client_error(&payload[..cut], header_len, 9);
    }
    let mut trailing = payload.clone();
    trailing.push(0);
    assert_eq!(
        client_error(&trailing, header_len, 9),
        WireError::TrailingBytes { trailing: 1 }
    );
    assert!(matches!(
        client_error(&payload, payload.len() + 1, 9),
        WireError::HeaderBeyondPayload { .. }
    ));
}

/// Deterministic, well-spread topic ids (splitmix64), none of them known.
fn random_ids(count: usize) -> Vec<[u8; 16]> {
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    };
    (0..count)
        .map(|_| {
            let mut id = [0u8; 16];
            id[..8].copy_from_slice(&next().to_be_bytes());
            id[8..].copy_from_slice(&next().to_be_bytes());
            assert!(topic_name(&id).is_none());
            id
        })
        .collect()
}

/// A v13 request with one topic entry per id, each with two partitions of records.
fn v13_request(ids: &[[u8; 16]]) -> (Vec<u8>, usize) {
    let records = batch(Codec::None, &["a"]);
    let topics = ids
        .iter()
        .map(|id| {
            topic(
                13,
                "",
                *id,
                vec![(0, Some(records.clone())), (1, Some(records.clone()))],
            )
        })
        .collect();
    produce_payload(13, 1, topics)
}

#[test]
fn v13_unknown_topic_ids_are_capped_and_the_rest_counted() {
    let ids = random_ids(5_000);
    let (payload, header_len) = v13_request(&ids);
    let result = rewrite_produce_with(&payload, header_len, 13, &topic_name, &mut Marker).unwrap();
    assert_eq!(result.unknown_topic_ids.len(), MAX_UNKNOWN_TOPIC_IDS);
    assert_eq!(result.unknown_topic_ids, ids[..MAX_UNKNOWN_TOPIC_IDS]);
    assert_eq!(
        result.unknown_topic_ids_omitted,
        ids.len() - MAX_UNKNOWN_TOPIC_IDS
    );
    assert!(result.frame.is_none(), "no topic could be named");
}

#[test]
fn v13_repeated_unknown_topic_ids_are_listed_once() {
    let few = random_ids(3);
    let repeated: Vec<[u8; 16]> = few.iter().copied().cycle().take(3_000).collect();
    let (payload, header_len) = v13_request(&repeated);
    let result = rewrite_produce_with(&payload, header_len, 13, &topic_name, &mut Marker).unwrap();
    assert_eq!(result.unknown_topic_ids, few);
    assert_eq!(result.unknown_topic_ids_omitted, 0);

    // Ids already listed are not counted again once the list is full.
    let mut ids = random_ids(MAX_UNKNOWN_TOPIC_IDS + 7);
    ids.extend_from_within(..MAX_UNKNOWN_TOPIC_IDS);
    let (payload, header_len) = v13_request(&ids);
    let result = rewrite_produce_with(&payload, header_len, 13, &topic_name, &mut Marker).unwrap();
    assert_eq!(result.unknown_topic_ids.len(), MAX_UNKNOWN_TOPIC_IDS);
    assert_eq!(result.unknown_topic_ids, ids[..MAX_UNKNOWN_TOPIC_IDS]);
    assert_eq!(result.unknown_topic_ids_omitted, 7);
}
