//! A bare Kafka Produce request (v7 by topic name, v13 by topic id) over a TCP socket
//! with a caller-given record batch: how a test sends bytes no real client would (a
//! corrupted batch, a topic id nobody asked Metadata about) and reads the broker's
//! per-partition answer.

use anyhow::{ensure, Context};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

/// The broker's answer for the one partition of a [`produce_raw`] request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PartitionResponse {
    pub error_code: i16,
    pub base_offset: i64,
}

const PRODUCE_API_KEY: i16 = 0;
const PRODUCE_VERSION: i16 = 7;
const PRODUCE_BY_ID_VERSION: i16 = 13;
const CLIENT_ID: &[u8] = b"kpress-tests-raw";

/// Sends one Produce v7 request (acks=-1) carrying `records` for `topic`-`partition`
/// to `addr` and returns the partition's error code and base offset.
pub fn produce_raw(
    addr: SocketAddr,
    topic: &str,
    partition: i32,
    records: &[u8],
    timeout: Duration,
) -> anyhow::Result<PartitionResponse> {
    produce_raw_on(
        &mut connect(addr, timeout)?,
        topic,
        partition,
        records,
        timeout,
    )
}

/// [`produce_raw`] on a connection the caller opened and keeps.
pub fn produce_raw_on(
    stream: &mut (impl Read + Write),
    topic: &str,
    partition: i32,
    records: &[u8],
    timeout: Duration,
) -> anyhow::Result<PartitionResponse> {
    let mut body = request_header(PRODUCE_VERSION, 7);
    body.extend_from_slice(&(-1i16).to_be_bytes()); // transactional id: null
    body.extend_from_slice(&(-1i16).to_be_bytes()); // acks: all
    body.extend_from_slice(&(timeout.as_millis() as i32).to_be_bytes());
    body.extend_from_slice(&1i32.to_be_bytes()); // one topic
    body.extend_from_slice(&(topic.len() as i16).to_be_bytes());
    body.extend_from_slice(topic.as_bytes());
    body.extend_from_slice(&1i32.to_be_bytes()); // one partition
    body.extend_from_slice(&partition.to_be_bytes());
    body.extend_from_slice(&(records.len() as i32).to_be_bytes());
    body.extend_from_slice(records);
    let response = exchange_on(stream, &body)?;
    ensure!(
        response.get(..4) == Some(&7i32.to_be_bytes()[..]),
        "correlation id changed"
    );
    // correlation id, topics[1]: name, partitions[1]: index, error, base offset, …
    let mut pos = 4;
    let mut take = |n: usize| -> anyhow::Result<&[u8]> {
        let slice = response
            .get(pos..pos + n)
            .context("truncated Produce response")?;
        pos += n;
        Ok(slice)
    };
    let topics = i32::from_be_bytes(take(4)?.try_into()?);
    ensure!(topics == 1, "{topics} topics in the Produce response");
    let name_len = i16::from_be_bytes(take(2)?.try_into()?);
    take(name_len.max(0) as usize)?;
    let partitions = i32::from_be_bytes(take(4)?.try_into()?);
    ensure!(
        partitions == 1,
        "{partitions} partitions in the Produce response"
    );
    let _index = i32::from_be_bytes(take(4)?.try_into()?);
    let error_code = i16::from_be_bytes(take(2)?.try_into()?);
    let base_offset = i64::from_be_bytes(take(8)?.try_into()?);
    Ok(PartitionResponse {
        error_code,
        base_offset,
    })
}

/// Sends one Produce v13 request (acks=-1; the topic named only by its 16-byte id, as
/// Kafka 4.1 clients do) carrying `records` for `topic_id`-`partition` to `addr`.
pub fn produce_raw_by_id(
    addr: SocketAddr,
    topic_id: [u8; 16],
    partition: i32,
    records: &[u8],
    timeout: Duration,
) -> anyhow::Result<PartitionResponse> {
    let mut stream = connect(addr, timeout)?;
    produce_by_id_on(&mut stream, topic_id, partition, records, timeout)
}

/// [`produce_raw_by_id`] on a connection the caller opened (e.g. TLS, authenticated
/// with SASL) and keeps; the caller sets its read timeout.
pub fn produce_by_id_on(
    stream: &mut (impl Read + Write),
    topic_id: [u8; 16],
    partition: i32,
    records: &[u8],
    timeout: Duration,
) -> anyhow::Result<PartitionResponse> {
    let mut body = request_header(PRODUCE_BY_ID_VERSION, 13);
    body.push(0); // header tagged fields
    body.push(0); // transactional id: null (compact)
    body.extend_from_slice(&(-1i16).to_be_bytes()); // acks: all
    body.extend_from_slice(&(timeout.as_millis() as i32).to_be_bytes());
    body.push(2); // compact array: one topic
    body.extend_from_slice(&topic_id);
    body.push(2); // compact array: one partition
    body.extend_from_slice(&partition.to_be_bytes());
    put_uvarint(&mut body, u32::try_from(records.len() + 1)?); // compact records
    body.extend_from_slice(records);
    body.extend_from_slice(&[0, 0, 0]); // partition, topic, request tagged fields
    let response = exchange_on(stream, &body)?;
    // correlation id, header tags, topics[1]: id, partitions[1]: index, error, base offset
    ensure!(
        response.get(..4) == Some(&13i32.to_be_bytes()[..]),
        "correlation id changed"
    );
    let fixed = response
        .get(4..4 + 1 + 1 + 16 + 1 + 4 + 2 + 8)
        .context("truncated Produce v13 response")?;
    ensure!(fixed[0] == 0, "response header tagged fields");
    ensure!(fixed[1] == 2, "not one topic in the Produce v13 response");
    ensure!(
        fixed[2..18] == topic_id,
        "another topic id in the Produce v13 response"
    );
    ensure!(
        fixed[18] == 2,
        "not one partition in the Produce v13 response"
    );
    Ok(PartitionResponse {
        error_code: i16::from_be_bytes(fixed[23..25].try_into()?),
        base_offset: i64::from_be_bytes(fixed[25..33].try_into()?),
    })
}

/// A Produce request header up to the client id (flexible versions add a tag buffer).
fn request_header(version: i16, correlation_id: i32) -> Vec<u8> {
    let mut header = Vec::new();
    header.extend_from_slice(&PRODUCE_API_KEY.to_be_bytes());
    header.extend_from_slice(&version.to_be_bytes());
    header.extend_from_slice(&correlation_id.to_be_bytes());
    header.extend_from_slice(&(CLIENT_ID.len() as i16).to_be_bytes());
    header.extend_from_slice(CLIENT_ID);
    header
}

fn put_uvarint(out: &mut Vec<u8>, mut v: u32) {
    while v >= 0x80 {
        out.push(v as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// A TCP connection to `addr` with `timeout` for reads and writes.
/// [`connect`], with refusals tried again for 10 s: kpress binds a node port once it
/// has learned the broker nodes, shortly after its bootstrap listener.
pub fn connect_retrying(to: SocketAddr, timeout: Duration) -> anyhow::Result<TcpStream> {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        match connect(to, timeout) {
            Ok(stream) => return Ok(stream),
            Err(e) if std::time::Instant::now() > deadline => return Err(e),
            Err(_) => std::thread::sleep(Duration::from_millis(100)),
        }
    }
}

pub fn connect(addr: SocketAddr, timeout: Duration) -> anyhow::Result<TcpStream> {
    let stream = TcpStream::connect_timeout(&addr, timeout)
        .with_context(|| format!("connecting to {addr}"))?;
    stream.set_read_timeout(Some(timeout))?;
    stream.set_write_timeout(Some(timeout))?;
    Ok(stream)
}

/// Sends one request `body` framed by its size on `stream` and returns the response
/// body (from the correlation id on).
fn exchange_on(stream: &mut (impl Read + Write), body: &[u8]) -> anyhow::Result<Vec<u8>> {
    let mut request = (body.len() as i32).to_be_bytes().to_vec();
    request.extend_from_slice(body);
    stream.write_all(&request)?;

    let mut size = [0u8; 4];
    stream
        .read_exact(&mut size)
        .context("reading the Produce response (the connection closed?)")?;
    let size = i32::from_be_bytes(size);
    ensure!(
        (4..1 << 20).contains(&size),
        "implausible response size {size}"
    );
    let mut response = vec![0u8; size as usize];
    stream.read_exact(&mut response)?;
    Ok(response)
}
