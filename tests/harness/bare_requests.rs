//! Bare Kafka requests of any shape a hostile client might send, built byte by byte:
//! Produce v7 (topics by name) and v13 (topics by id) with many topics and partitions
//! in one request, ApiVersions at any version (also ones no broker knows), a Fetch
//! with large answers, and the frames and answers read back on the same connection.
//!
//! Unlike `raw_produce.rs` (one partition, one connection per request), these build
//! whole frames and leave the connection to the caller, so a test can pipeline them,
//! keep a connection open across requests, or never read the answers at all.

use crate::wire_reader::Reader;
use anyhow::{ensure, Context};
use sha2::{Digest, Sha256};
use std::io::{Read, Write};

const PRODUCE: i16 = 0;
const FETCH: i16 = 1;
const API_VERSIONS: i16 = 18;
/// The first ApiVersions version with a flexible (compact, tagged) request.
const API_VERSIONS_FIRST_FLEXIBLE: i16 = 3;
const CLIENT_ID: &[u8] = b"kpress-tests-bare";
/// Largest response [`read_frame`] accepts (a Produce answer naming 40k topics is ~2 MB).
const MAX_RESPONSE_BYTES: usize = 64 << 20;

/// Partitions of one topic in a Produce request: index and records field.
pub type Partitions<'a> = Vec<(i32, &'a [u8])>;

/// A size-prefixed Produce v7 request (request header v1, classic encoding) for
/// `topics`, each named by its bytes (any length up to 32767, valid Kafka name or not).
pub fn produce_v7(
    correlation_id: i32,
    acks: i16,
    timeout_ms: i32,
    topics: &[(&[u8], Partitions<'_>)],
) -> Vec<u8> {
    let mut body = header_v1(PRODUCE, 7, correlation_id);
    body.extend_from_slice(&(-1i16).to_be_bytes()); // transactional id: null
    body.extend_from_slice(&acks.to_be_bytes());
    body.extend_from_slice(&timeout_ms.to_be_bytes());
    put_len_i32(&mut body, topics.len());
    for (name, partitions) in topics {
        let len = i16::try_from(name.len()).expect("a topic name fits an int16 length");
        body.extend_from_slice(&len.to_be_bytes());
        body.extend_from_slice(name);
        put_len_i32(&mut body, partitions.len());
        for (index, records) in partitions {
            body.extend_from_slice(&index.to_be_bytes());
            put_len_i32(&mut body, records.len());
            body.extend_from_slice(records);
        }
    }
    framed(body)
}

/// A size-prefixed Produce v13 request (request header v2, compact encoding) for
/// `topics`, each named only by its 16-byte topic id, as Kafka 4.1 clients send.
pub fn produce_v13(
    correlation_id: i32,
    acks: i16,
    timeout_ms: i32,
    topics: &[([u8; 16], Partitions<'_>)],
) -> Vec<u8> {
    let mut body = header_v1(PRODUCE, 13, correlation_id);
    body.push(0); // header tagged fields
    body.push(0); // transactional id: null (compact)
    body.extend_from_slice(&acks.to_be_bytes());
    body.extend_from_slice(&timeout_ms.to_be_bytes());
    put_uvarint(&mut body, topics.len() + 1);
    for (id, partitions) in topics {
        body.extend_from_slice(id);
        put_uvarint(&mut body, partitions.len() + 1);
        for (index, records) in partitions {
            body.extend_from_slice(&index.to_be_bytes());
            put_uvarint(&mut body, records.len() + 1);
            body.extend_from_slice(records);
            body.push(0); // partition tagged fields
        }
        body.push(0); // topic tagged fields
    }
    body.push(0); // request tagged fields
    framed(body)
}

/// A size-prefixed Fetch v4 request (request header v1, classic encoding, the oldest
/// version Kafka 4 serves) of `topic`-`partition` from `offset`, answered at once
/// (no wait) with up to `max_bytes`: a way to ask for large answers with tiny requests.
pub fn fetch_v4(
    correlation_id: i32,
    topic: &str,
    partition: i32,
    offset: i64,
    max_bytes: i32,
) -> Vec<u8> {
    let mut body = header_v1(FETCH, 4, correlation_id);
    body.extend_from_slice(&(-1i32).to_be_bytes()); // replica id: a consumer
    body.extend_from_slice(&0i32.to_be_bytes()); // max wait ms
    body.extend_from_slice(&1i32.to_be_bytes()); // min bytes
    body.extend_from_slice(&max_bytes.to_be_bytes());
    body.push(0); // isolation level: read uncommitted
    put_len_i32(&mut body, 1);
    let len = i16::try_from(topic.len()).expect("a topic name fits an int16 length");
    body.extend_from_slice(&len.to_be_bytes());
    body.extend_from_slice(topic.as_bytes());
    put_len_i32(&mut body, 1);
    body.extend_from_slice(&partition.to_be_bytes());
    body.extend_from_slice(&offset.to_be_bytes());
    body.extend_from_slice(&max_bytes.to_be_bytes()); // partition max bytes
    framed(body)
}

/// `n` distinct topic ids no broker has, derived from `seed` (the same seed gives the
/// same ids, so a test can replay one request's ids).
pub fn invented_topic_ids(seed: &str, n: usize) -> Vec<[u8; 16]> {
    (0..n)
        .map(|i| {
            let digest = Sha256::digest(format!("{seed}/{i}").as_bytes());
            let mut id = [0u8; 16];
            id.copy_from_slice(&digest[..16]);
            id
        })
        .collect()
}

/// A size-prefixed ApiVersions request at `version`. Versions from 3 on (including
/// ones no broker supports, such as 5 or 127) get header v2 and v3's body (client
/// software name and version, compact strings); older ones header v1 and no body.
pub fn api_versions(version: i16, correlation_id: i32) -> Vec<u8> {
    let mut body = header_v1(API_VERSIONS, version, correlation_id);
    if version >= API_VERSIONS_FIRST_FLEXIBLE {
        body.push(0); // header tagged fields
        for text in [&b"kpress-tests"[..], b"1"] {
            put_uvarint(&mut body, text.len() + 1);
            body.extend_from_slice(text);
        }
        body.push(0); // request tagged fields
    }
    framed(body)
}

/// What an ApiVersions response said: its error code and the version range of each
/// API key it listed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiVersionsAnswer {
    pub correlation_id: i32,
    pub error_code: i16,
    /// (api key, min version, max version).
    pub apis: Vec<(i16, i16, i16)>,
}

/// Parses an ApiVersions response body (header v0, as for every ApiVersions version)
/// in the layout of `version`: classic arrays below v3, compact from v3 on. A broker
/// answering a version it does not support uses the v0 layout.
pub fn parse_api_versions(body: &[u8], version: i16) -> anyhow::Result<ApiVersionsAnswer> {
    let mut reader = Reader::new(body);
    let correlation_id = reader.i32()?;
    let error_code = reader.i16()?;
    let flexible = version >= API_VERSIONS_FIRST_FLEXIBLE;
    let count = if flexible {
        reader.uvarint()?.checked_sub(1).context("null api_keys")?
    } else {
        usize::try_from(reader.i32()?).context("negative api_keys count")?
    };
    let mut apis = Vec::with_capacity(count.min(1024));
    for _ in 0..count {
        apis.push((reader.i16()?, reader.i16()?, reader.i16()?));
        if flexible {
            reader.skip_tagged_fields()?;
        }
    }
    Ok(ApiVersionsAnswer {
        correlation_id,
        error_code,
        apis,
    })
}

/// One partition's answer in a Produce v7 response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionAnswer {
    pub topic: Vec<u8>,
    pub partition: i32,
    pub error_code: i16,
    pub base_offset: i64,
}

/// Parses a Produce v7 response body (header v0): every partition's answer.
pub fn parse_produce_v7(body: &[u8]) -> anyhow::Result<(i32, Vec<PartitionAnswer>)> {
    let mut reader = Reader::new(body);
    let correlation_id = reader.i32()?;
    let mut answers = Vec::new();
    for _ in 0..reader.count()? {
        let len = usize::try_from(reader.i16()?).context("null topic name")?;
        let topic = reader.take(len)?.to_vec();
        for _ in 0..reader.count()? {
            let partition = reader.i32()?;
            let error_code = reader.i16()?;
            let base_offset = reader.i64()?;
            reader.take(16)?; // log append time, log start offset
            answers.push(PartitionAnswer {
                topic: topic.clone(),
                partition,
                error_code,
                base_offset,
            });
        }
    }
    reader.i32()?; // throttle time
    ensure!(reader.is_empty(), "bytes after the Produce v7 response");
    Ok((correlation_id, answers))
}

/// Reads one size-prefixed frame from `stream` (TCP, or TLS over it) and returns its
/// body (from the correlation id on). The caller sets the stream's read timeout.
pub fn read_frame(stream: &mut impl Read) -> anyhow::Result<Vec<u8>> {
    let mut size = [0u8; 4];
    stream
        .read_exact(&mut size)
        .context("reading a response size (the connection closed?)")?;
    let size = i32::from_be_bytes(size);
    let size = usize::try_from(size)
        .ok()
        .filter(|s| (4..=MAX_RESPONSE_BYTES).contains(s))
        .with_context(|| format!("implausible response size {size}"))?;
    let mut body = vec![0u8; size];
    stream.read_exact(&mut body).context("reading a response")?;
    Ok(body)
}

/// Sends `frame` on `stream` and reads the next frame back (its body).
pub fn exchange(stream: &mut (impl Read + Write), frame: &[u8]) -> anyhow::Result<Vec<u8>> {
    stream.write_all(frame).context("sending a request")?;
    read_frame(stream)
}

/// A request header v1 (api key, version, correlation id, client id) as the start of
/// a body; flexible requests add their header tagged fields after it.
fn header_v1(api_key: i16, version: i16, correlation_id: i32) -> Vec<u8> {
    let mut header = Vec::new();
    header.extend_from_slice(&api_key.to_be_bytes());
    header.extend_from_slice(&version.to_be_bytes());
    header.extend_from_slice(&correlation_id.to_be_bytes());
    header.extend_from_slice(&(CLIENT_ID.len() as i16).to_be_bytes());
    header.extend_from_slice(CLIENT_ID);
    header
}

fn framed(body: Vec<u8>) -> Vec<u8> {
    let size = i32::try_from(body.len()).expect("a request fits an int32 size");
    let mut frame = Vec::with_capacity(4 + body.len());
    frame.extend_from_slice(&size.to_be_bytes());
    frame.extend_from_slice(&body);
    frame
}

fn put_len_i32(out: &mut Vec<u8>, len: usize) {
    let len = i32::try_from(len).expect("a length fits an int32");
    out.extend_from_slice(&len.to_be_bytes());
}

fn put_uvarint(out: &mut Vec<u8>, v: usize) {
    let mut v = u32::try_from(v).expect("a compact length fits a uint32");
    while v >= 0x80 {
        out.push(v as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn produce_requests_frame_every_topic_and_partition() {
        let records = [1u8, 2, 3];
        let v7 = produce_v7(9, -1, 1000, &[(b"t", vec![(0, &records[..]), (1, &[])])]);
        assert_eq!(
            i32::from_be_bytes(v7[..4].try_into().unwrap()) as usize,
            v7.len() - 4
        );
        // size, key 0, version 7, correlation 9, client id, null txn id, acks, timeout.
        assert_eq!(&v7[4..8], &[0, 0, 0, 7]);
        assert_eq!(&v7[8..12], &9i32.to_be_bytes());
        assert!(
            v7.ends_with(&[0, 0, 0, 1, 0, 0, 0, 0]),
            "partition 1, empty"
        );
        let ids = invented_topic_ids("seed", 3);
        assert_eq!(ids, invented_topic_ids("seed", 3));
        assert!(ids[0] != ids[1] && ids[1] != ids[2]);
        let v13 = produce_v13(5, 1, 1000, &[(ids[0], vec![(0, &records[..])])]);
        // ... topics [1]: id, partitions [1]: index 0, records (3 bytes), tags ×3.
        let mut tail = ids[0].to_vec();
        tail.extend_from_slice(&[2, 0, 0, 0, 0, 4, 1, 2, 3, 0, 0, 0]);
        assert!(v13.ends_with(&tail));
        let fetch = fetch_v4(2, "t", 3, 5, 1 << 20);
        assert_eq!(&fetch[4..8], &[0, 1, 0, 4]);
        assert!(fetch.ends_with(&[0, 0, 0, 3, 0, 0, 0, 0, 0, 0, 0, 5, 0, 16, 0, 0]));
    }

    #[test]
    fn parses_api_versions_in_both_layouts() {
        let mut v0 = 7i32.to_be_bytes().to_vec();
        v0.extend_from_slice(&35i16.to_be_bytes());
        v0.extend_from_slice(&1i32.to_be_bytes());
        v0.extend_from_slice(&[0, 18, 0, 0, 0, 4]);
        let answer = parse_api_versions(&v0, 0).unwrap();
        assert_eq!(answer.error_code, 35);
        assert_eq!(answer.apis, vec![(18, 0, 4)]);
        let mut v3 = 8i32.to_be_bytes().to_vec();
        v3.extend_from_slice(&[0, 0, 2, 0, 0, 0, 3, 0, 13, 0]);
        let answer = parse_api_versions(&v3, 3).unwrap();
        assert_eq!((answer.correlation_id, answer.apis), (8, vec![(0, 3, 13)]));
    }

    #[test]
    fn parses_every_partition_of_a_produce_v7_answer() {
        let mut body = 3i32.to_be_bytes().to_vec();
        body.extend_from_slice(&1i32.to_be_bytes());
        body.extend_from_slice(&[0, 1, b't']);
        body.extend_from_slice(&2i32.to_be_bytes());
        for (index, error) in [(0i32, 0i16), (1, 3)] {
            body.extend_from_slice(&index.to_be_bytes());
            body.extend_from_slice(&error.to_be_bytes());
            body.extend_from_slice(&[0; 24]);
        }
        body.extend_from_slice(&0i32.to_be_bytes());
        let (correlation_id, answers) = parse_produce_v7(&body).unwrap();
        assert_eq!(correlation_id, 3);
        assert_eq!(answers.len(), 2);
        assert_eq!((answers[1].partition, answers[1].error_code), (1, 3));
        assert!(parse_produce_v7(&body[..body.len() - 1]).is_err());
    }
}
