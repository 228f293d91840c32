//! The transport seam: how a client connection is accepted and how kpress connects to a
//! broker, each plain TCP or TLS as the policy says. Everything above this module sees
//! a [`Stream`] and never asks which.

use std::fmt;
use std::io;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio_rustls::LazyConfigAcceptor;

use crate::cluster::Cluster;
use crate::error::ConnectionError;
use crate::routing::{SniRoute, SniRouting};
use crate::tls::{ClientTls, ServerTls};

/// Where a client connection's upstream goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum UpstreamTarget {
    /// Any bootstrap server (the bootstrap listener).
    Bootstrap,
    /// That broker node's real address (the node's listener).
    Node(i32),
}

impl fmt::Display for UpstreamTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            UpstreamTarget::Bootstrap => f.write_str("bootstrap"),
            UpstreamTarget::Node(id) => write!(f, "node {id}"),
        }
    }
}

/// A byte stream to a client or broker, plain or TLS.
pub(crate) trait Io: AsyncRead + AsyncWrite + Send + Unpin + 'static {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin + 'static> Io for T {}

pub(crate) type Stream = Box<dyn Io>;

/// How long kpress waits for a TCP connection to a broker, TLS handshake included.
pub(crate) const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// The first byte of every TLS handshake record; a Kafka frame starts with its size,
/// whose first byte is 0 for any frame under 16 MiB.
const TLS_HANDSHAKE_RECORD: u8 = 0x16;

/// Which listener accepted a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ListenerRole {
    /// The bootstrap port in port-per-node mode.
    Bootstrap,
    /// A node's own port.
    Node(i32),
    /// The one port of SNI mode: the name decides.
    Sni,
}

impl ListenerRole {
    pub(crate) fn label(self) -> &'static str {
        match self {
            ListenerRole::Bootstrap => "bootstrap",
            ListenerRole::Node(_) => "node",
            ListenerRole::Sni => "sni",
        }
    }
}

/// How kpress's listeners take client connections.
#[derive(Debug)]
pub(crate) struct Acceptor {
    tls: Option<Arc<ServerTls>>,
    sni: Option<SniRouting>,
}

impl Acceptor {
    pub(crate) fn new(tls: Option<Arc<ServerTls>>, sni: Option<SniRouting>) -> Acceptor {
        debug_assert!(sni.is_none() || tls.is_some(), "SNI needs TLS");
        Acceptor { tls, sni }
    }

    pub(crate) fn is_tls(&self) -> bool {
        self.tls.is_some()
    }

    /// Completes the client's TLS handshake, if the listener speaks TLS, within
    /// `deadline`, and decides where the connection goes. Nothing is connected upstream
    /// before this succeeds.
    pub(crate) async fn accept(
        &self,
        tcp: TcpStream,
        role: ListenerRole,
        cluster: &Cluster,
        deadline: Duration,
    ) -> Result<(Stream, UpstreamTarget), ConnectionError> {
        let Some(tls) = &self.tls else {
            let target = match role {
                ListenerRole::Node(id) => UpstreamTarget::Node(id),
                ListenerRole::Bootstrap | ListenerRole::Sni => UpstreamTarget::Bootstrap,
            };
            return Ok((Box::new(tcp), target));
        };
        let handshake = async {
            refuse_plaintext(&tcp).await?;
            let start = LazyConfigAcceptor::new(rustls::server::Acceptor::default(), tcp)
                .await
                .map_err(ConnectionError::TlsHandshake)?;
            let target = match (&self.sni, role) {
                (Some(sni), _) => {
                    let name = start.client_hello().server_name().map(str::to_owned);
                    match route(sni, name.as_deref(), cluster) {
                        Some(target) => target,
                        None => {
                            // The alert is the refusal; the handshake cannot succeed.
                            let _ = start.into_stream(tls.refusing()).await;
                            return Err(ConnectionError::UnknownServerName(
                                name.unwrap_or_default(),
                            ));
                        }
                    }
                }
                (None, ListenerRole::Node(id)) => UpstreamTarget::Node(id),
                (None, _) => UpstreamTarget::Bootstrap,
            };
            let stream = start
                .into_stream(tls.config())
                .await
                .map_err(ConnectionError::TlsHandshake)?;
            Ok((Box::new(stream) as Stream, target))
        };
        tokio::time::timeout(deadline, handshake)
            .await
            .map_err(|_| {
                ConnectionError::TlsHandshake(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("no TLS handshake within {deadline:?} ([limits] frame_timeout_ms)"),
                ))
            })?
    }
}

/// Where an SNI name leads, if anywhere: a node only if the brokers named it, so no
/// name can make kpress connect to a host the brokers did not advertise.
fn route(sni: &SniRouting, name: Option<&str>, cluster: &Cluster) -> Option<UpstreamTarget> {
    match sni.route(name) {
        SniRoute::Bootstrap => Some(UpstreamTarget::Bootstrap),
        SniRoute::Node(id) if cluster.node_address(id).is_some() => Some(UpstreamTarget::Node(id)),
        SniRoute::Node(_) | SniRoute::Unknown => None,
    }
}

/// A client that speaks plaintext Kafka to a TLS listener gets a clear error instead of
/// a TLS parse failure.
async fn refuse_plaintext(tcp: &TcpStream) -> Result<(), ConnectionError> {
    let mut first = [0u8; 1];
    let n = tcp
        .peek(&mut first)
        .await
        .map_err(ConnectionError::ClientIo)?;
    if n == 0 {
        return Err(ConnectionError::ClientIo(
            io::ErrorKind::UnexpectedEof.into(),
        ));
    }
    if first[0] != TLS_HANDSHAKE_RECORD {
        return Err(ConnectionError::PlaintextOnTls);
    }
    Ok(())
}

/// How kpress opens connections to brokers.
#[derive(Debug, Clone)]
pub(crate) struct Connector {
    tls: Option<Arc<ClientTls>>,
}

impl Connector {
    pub(crate) fn new(tls: Option<Arc<ClientTls>>) -> Connector {
        Connector { tls }
    }

    /// Connects to `address` (`host:port`) within [`CONNECT_TIMEOUT`], TLS handshake
    /// included.
    pub(crate) async fn connect(&self, address: &str) -> Result<Stream, ConnectionError> {
        let error = |source| ConnectionError::Connect {
            addr: address.to_owned(),
            source,
        };
        let connecting = async {
            let tcp = TcpStream::connect(address).await?;
            // Kafka frames are written whole; waiting to coalesce them only adds latency.
            tcp.set_nodelay(true)?;
            match &self.tls {
                None => Ok(Box::new(tcp) as Stream),
                Some(tls) => {
                    let stream = tls.connect(host_of(address), tcp).await?;
                    Ok(Box::new(stream) as Stream)
                }
            }
        };
        match tokio::time::timeout(CONNECT_TIMEOUT, connecting).await {
            Ok(result) => result.map_err(error),
            Err(_) => Err(error(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("no connection within {CONNECT_TIMEOUT:?}"),
            ))),
        }
    }
}

/// Connects to the first of `servers` that accepts.
pub(crate) async fn connect_any(
    connector: &Connector,
    servers: &[String],
) -> Result<Stream, ConnectionError> {
    first_of(servers, |server| connector.connect(server)).await
}

/// The first of `servers` that `attempt` connects to; the last error if none.
pub(crate) async fn first_of<'s, F, Fut, T>(
    servers: &'s [String],
    mut attempt: F,
) -> Result<T, ConnectionError>
where
    F: FnMut(&'s str) -> Fut,
    Fut: std::future::Future<Output = Result<T, ConnectionError>>,
{
    let mut last = None;
    for server in servers {
        match attempt(server).await {
            Ok(stream) => return Ok(stream),
            Err(err) => {
                tracing::debug!(%server, error = %err, "bootstrap server not reached");
                last = Some(err);
            }
        }
    }
    Err(last.unwrap_or_else(|| ConnectionError::Connect {
        addr: String::from("(no bootstrap servers)"),
        source: io::Error::new(io::ErrorKind::NotFound, "empty bootstrap list"),
    }))
}

/// The host of `host:port` or `[v6]:port`.
fn host_of(address: &str) -> &str {
    let host = address.rsplit_once(':').map_or(address, |(host, _)| host);
    host.strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_are_taken_from_addresses() {
        assert_eq!(host_of("broker-1.example.com:9093"), "broker-1.example.com");
        assert_eq!(host_of("10.0.0.1:9092"), "10.0.0.1");
        assert_eq!(host_of("[::1]:9092"), "::1");
    }
}
