//! kpress's own conversations with brokers: opening upstream connections, and the
//! Metadata requests that learn the brokers at start and name Produce v13 topic ids.

use std::sync::atomic::{AtomicI32, Ordering};
use std::time::Duration;

use kpress_protocol::frame::{response_correlation_id, response_header_len, SIZE_PREFIX_LEN};
use kpress_protocol::{api_key, metadata_request, rewrite_response, ResponseObserver};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;

use crate::budget::{ConnectionPool, Pool};
use crate::cluster::BrokerAddress;
use crate::error::ConnectionError;
use crate::frame_io::{read_frame, write_frame, FrameLimits};

/// Metadata v12: the first that names topics by id with a null name (KIP-516), served
/// by Kafka 3.1 and later. Produce v13 (topic ids) needs Kafka 4.1, so naming ids
/// always has it.
pub(crate) const METADATA_VERSION: i16 = 12;

/// Versions tried in turn to learn the brokers at start: v12, then v9 (Kafka 2.4+),
/// then v1 (Kafka 0.10+). A broker closes the connection on a version it lacks.
pub(crate) const DISCOVERY_METADATA_VERSIONS: [i16; 3] = [METADATA_VERSION, 9, 1];

/// How long kpress waits for a TCP connection to a broker.
pub(crate) const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// How long kpress waits for the answer to one of its own Metadata requests.
pub(crate) const METADATA_TIMEOUT: Duration = Duration::from_secs(15);

/// Correlation ids of kpress's own requests, each on a connection of its own; negative
/// so they stand out in broker logs next to client ids, which start at 0.
static NEXT_CORRELATION_ID: AtomicI32 = AtomicI32::new(i32::MIN);

/// Connects to `host:port` within [`CONNECT_TIMEOUT`].
pub(crate) async fn connect(address: &str) -> Result<TcpStream, ConnectionError> {
    let connected = tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(address)).await;
    let stream = match connected {
        Ok(Ok(stream)) => stream,
        Ok(Err(source)) => {
            return Err(ConnectionError::Connect {
                addr: address.to_owned(),
                source,
            })
        }
        Err(_) => {
            return Err(ConnectionError::Connect {
                addr: address.to_owned(),
                source: std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!("no connection within {CONNECT_TIMEOUT:?}"),
                ),
            })
        }
    };
    // Kafka frames are written whole; waiting to coalesce them only adds latency.
    stream
        .set_nodelay(true)
        .map_err(|source| ConnectionError::Connect {
            addr: address.to_owned(),
            source,
        })?;
    Ok(stream)
}

/// Connects to the first of `servers` that accepts.
pub(crate) async fn connect_any(servers: &[String]) -> Result<TcpStream, ConnectionError> {
    let mut last = None;
    for server in servers {
        match connect(server).await {
            Ok(stream) => return Ok(stream),
            Err(err) => {
                tracing::debug!(%server, error = %err, "bootstrap server refused");
                last = Some(err);
            }
        }
    }
    Err(last.unwrap_or_else(|| ConnectionError::Connect {
        addr: String::from("(no bootstrap servers)"),
        source: std::io::Error::new(std::io::ErrorKind::NotFound, "empty bootstrap list"),
    }))
}

/// Connects to a broker node's real address.
pub(crate) async fn connect_node(address: &BrokerAddress) -> Result<TcpStream, ConnectionError> {
    connect(&address.to_string()).await
}

/// Sends a Metadata request (version `version`) for `topic_ids` (all topics when
/// empty) on `stream` and feeds the response to `observer`, which records node
/// addresses and topic names.
pub(crate) async fn fetch_metadata<S: AsyncRead + AsyncWrite + Unpin>(
    stream: &mut S,
    version: i16,
    topic_ids: &[[u8; 16]],
    limits: FrameLimits,
    pool: &Pool,
    observer: &mut (dyn ResponseObserver + Send),
) -> Result<(), ConnectionError> {
    let correlation_id = NEXT_CORRELATION_ID.fetch_add(1, Ordering::Relaxed);
    let request = metadata_request(version, correlation_id, topic_ids).map_err(|err| {
        ConnectionError::RewriteTask(format!("cannot encode kpress's Metadata request: {err}"))
    })?;
    let share = ConnectionPool::new(pool, limits.max_frame_bytes + SIZE_PREFIX_LEN);
    let exchange = async {
        write_frame(stream, &request, limits.frame_timeout)
            .await
            .map_err(ConnectionError::broker_write)?;
        read_frame(stream, limits, &share, None)
            .await
            .map_err(ConnectionError::from_broker_read)?
            .ok_or(ConnectionError::BrokerClosed { correlation_id })
    };
    let frame = tokio::time::timeout(METADATA_TIMEOUT, exchange)
        .await
        .map_err(|_| {
            ConnectionError::BrokerIo(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!("no Metadata response within {METADATA_TIMEOUT:?}"),
            ))
        })??;
    let body = frame.body();
    let received = response_correlation_id(body).map_err(ConnectionError::BrokerFrame)?;
    if received != correlation_id {
        return Err(ConnectionError::CorrelationMismatch {
            expected: correlation_id,
            received,
        });
    }
    let header_len = response_header_len(api_key::METADATA, version, body)
        .map_err(ConnectionError::BrokerFrame)?
        .unwrap_or(4);
    rewrite_response(api_key::METADATA, version, &body[header_len..], observer)
        .map_err(ConnectionError::Response)?;
    Ok(())
}
