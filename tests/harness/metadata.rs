//! A minimal Kafka Metadata (v8) client over a plain TCP socket: the harness's
//! readiness probe ("does the broker answer metadata, with every broker registered?")
//! without starting a JVM.

use anyhow::{ensure, Context};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use crate::wire_reader::Reader;

/// One broker as Metadata lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrokerInfo {
    pub node_id: i32,
    pub host: String,
    pub port: u16,
}

/// One partition as Metadata lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionInfo {
    pub error_code: i16,
    pub partition: i32,
    pub leader: i32,
    pub leader_epoch: i32,
    /// The replicas, the preferred leader first.
    pub replicas: Vec<i32>,
    /// The in-sync replicas.
    pub isr: Vec<i32>,
}

/// One topic as Metadata lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicInfo {
    pub error_code: i16,
    pub name: String,
    pub partitions: Vec<PartitionInfo>,
}

/// A Metadata response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterMetadata {
    pub brokers: Vec<BrokerInfo>,
    pub controller_id: i32,
    pub topics: Vec<TopicInfo>,
}

impl ClusterMetadata {
    /// The topic named `name`, if Metadata listed it without error.
    pub fn topic(&self, name: &str) -> Option<&TopicInfo> {
        self.topics
            .iter()
            .find(|t| t.name == name && t.error_code == 0)
    }
}

const METADATA_API_KEY: i16 = 3;
const METADATA_VERSION: i16 = 8;

/// Asks the broker at `addr` for metadata of all topics (Metadata v8).
pub fn fetch_metadata(addr: SocketAddr, timeout: Duration) -> anyhow::Result<ClusterMetadata> {
    let mut stream = TcpStream::connect_timeout(&addr, timeout)
        .with_context(|| format!("connecting to {addr}"))?;
    stream.set_read_timeout(Some(timeout))?;
    stream.set_write_timeout(Some(timeout))?;

    let client_id = b"kpress-tests";
    let mut body = Vec::new();
    body.extend_from_slice(&METADATA_API_KEY.to_be_bytes());
    body.extend_from_slice(&METADATA_VERSION.to_be_bytes());
    body.extend_from_slice(&1i32.to_be_bytes()); // correlation id
    body.extend_from_slice(&(client_id.len() as i16).to_be_bytes());
    body.extend_from_slice(client_id);
    body.extend_from_slice(&(-1i32).to_be_bytes()); // topics: null = all
    body.extend_from_slice(&[0, 0, 0]); // no auto-create, no authorized operations
    let mut request = (body.len() as i32).to_be_bytes().to_vec();
    request.extend_from_slice(&body);
    stream.write_all(&request)?;

    let mut size = [0u8; 4];
    stream.read_exact(&mut size)?;
    let size = i32::from_be_bytes(size);
    ensure!(
        (4..64 << 20).contains(&size),
        "implausible Metadata response size {size}"
    );
    let mut response = vec![0u8; size as usize];
    stream.read_exact(&mut response)?;
    parse_response(&response)
}

/// Skips a classic array of int32s (replica lists).
fn skip_int32_array(r: &mut Reader<'_>) -> anyhow::Result<()> {
    let n = r.count()?;
    r.take(4 * n)?;
    Ok(())
}

/// Reads a classic array of int32s (replica lists), its bytes taken before anything
/// is allocated for it.
fn int32_array(r: &mut Reader<'_>) -> anyhow::Result<Vec<i32>> {
    let n = r.count()?;
    let bytes = r.take(4 * n)?;
    Ok(bytes
        .chunks_exact(4)
        .map(|b| i32::from_be_bytes([b[0], b[1], b[2], b[3]]))
        .collect())
}

fn parse_response(bytes: &[u8]) -> anyhow::Result<ClusterMetadata> {
    let mut r = Reader::new(bytes);
    let _correlation_id = r.i32()?;
    let _throttle_ms = r.i32()?;
    let mut brokers = Vec::new();
    for _ in 0..r.count()? {
        let node_id = r.i32()?;
        let host = r.string()?;
        let port = r.i32()?;
        let _rack = r.nullable_string()?;
        brokers.push(BrokerInfo {
            node_id,
            host,
            port: u16::try_from(port).context("broker port out of range")?,
        });
    }
    let _cluster_id = r.nullable_string()?;
    let controller_id = r.i32()?;
    let mut topics = Vec::new();
    for _ in 0..r.count()? {
        let error_code = r.i16()?;
        let name = r.string()?;
        let _internal = r.i8()?;
        let mut partitions = Vec::new();
        for _ in 0..r.count()? {
            let error_code = r.i16()?;
            let partition = r.i32()?;
            let leader = r.i32()?;
            let leader_epoch = r.i32()?;
            let replicas = int32_array(&mut r)?;
            let isr = int32_array(&mut r)?;
            skip_int32_array(&mut r)?; // offline replicas
            partitions.push(PartitionInfo {
                error_code,
                partition,
                leader,
                leader_epoch,
                replicas,
                isr,
            });
        }
        let _authorized_operations = r.i32()?;
        topics.push(TopicInfo {
            error_code,
            name,
            partitions,
        });
    }
    Ok(ClusterMetadata {
        brokers,
        controller_id,
        topics,
    })
}
