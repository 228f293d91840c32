//! Errors of the proxy: [`ProxyError`] stops `run`; [`ConnectionError`] closes one
//! connection and says whose fault that was.

use std::fmt;
use std::io;
use std::net::SocketAddr;

use kpress_protocol::frame::FrameError;
use kpress_protocol::ProtocolError;

use crate::budget::OverBudget;
use crate::frame_io::{ReadFrameError, WriteFrameError};

/// Why the proxy could not start or keep serving.
#[derive(Debug, thiserror::Error)]
pub enum ProxyError {
    /// The settings cannot work (e.g. no bootstrap server).
    #[error("invalid proxy settings: {0}")]
    InvalidSettings(String),
    /// Node `node_id` would be served on `node_port_base + node_id`, past port 65535.
    #[error("broker node {node_id} would be served on port {node_port_base} + {node_id}, past 65535: lower node_port_base")]
    NodePortOverflow { node_id: i32, node_port_base: u16 },
    /// A listener could not be bound.
    #[error("cannot listen for {listener} on {addr}: {source}")]
    Bind {
        listener: String,
        addr: SocketAddr,
        #[source]
        source: io::Error,
    },
    /// No bootstrap server answered kpress's Metadata request.
    #[error("no bootstrap server answered kpress's Metadata request: {attempts}")]
    Bootstrap { attempts: String },
    /// TLS files named by the policy could not be loaded.
    #[error("{0}")]
    Tls(#[from] crate::tls::TlsError),
}

/// Who caused a connection to close: decides what an operator looks at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fault {
    /// The client sent something Kafka would refuse too, or went away.
    Client,
    /// The broker sent something unreadable, or went away.
    Broker,
    /// kpress itself: a limit it sets, a port it cannot bind, a bug.
    Proxy,
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Fault::Client => "client",
            Fault::Broker => "broker",
            Fault::Proxy => "kpress",
        })
    }
}

/// Why one proxied connection was closed early.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ConnectionError {
    #[error("client connection failed: {0}")]
    ClientIo(#[source] io::Error),
    #[error("broker connection failed: {0}")]
    BrokerIo(#[source] io::Error),
    #[error("cannot connect to broker {addr}: {source}")]
    Connect {
        addr: String,
        #[source]
        source: io::Error,
    },
    #[error("client sent an invalid frame: {0}")]
    ClientFrame(#[source] FrameError),
    #[error("broker sent an invalid frame: {0}")]
    BrokerFrame(#[source] FrameError),
    #[error("client closed the connection inside a frame ({0})")]
    ClientEndedMidFrame(String),
    #[error("client too slow {}: {detail}", if *writing { "reading its responses" } else { "sending a frame" })]
    ClientTimedOut { writing: bool, detail: String },
    #[error("client idle for {0:?} with no response owed ([limits] idle_timeout_ms)")]
    ClientIdle(std::time::Duration),
    #[error("broker too slow {}: {detail}", if *writing { "reading requests" } else { "sending a frame" })]
    BrokerTimedOut { writing: bool, detail: String },
    #[error("broker closed the connection inside a frame ({0})")]
    BrokerEndedMidFrame(String),
    #[error("{0}")]
    OverBudget(#[source] OverBudget),
    #[error(
        "broker closed the connection with a response to correlation id {correlation_id} pending"
    )]
    BrokerClosed { correlation_id: i32 },
    #[error("broker closed the connection while no response was owed")]
    BrokerClosedIdle,
    #[error("broker sent bytes while no response was owed")]
    BrokerUnsolicited,
    #[error("broker answered correlation id {received} where {expected} was next")]
    CorrelationMismatch { expected: i32, received: i32 },
    #[error("client uses SaslHandshake v0 (raw SASL tokens, clients before Kafka 1.0), which kpress does not relay; SaslHandshake v1 works")]
    LegacySaslHandshake,
    #[error("client sent a Produce request kpress cannot read acks from: {0}")]
    ProduceAcks(#[source] ProtocolError),
    #[error(
        "cannot rewrite broker addresses in a response, closing rather than leaking them: {0}"
    )]
    Response(#[source] ProtocolError),
    #[error("{0}")]
    Listener(#[source] ProxyError),
    #[error("Produce rewrite task failed (a kpress bug: please report it with this log): {0}")]
    RewriteTask(String),
    #[error("rewritten response of {0} bytes does not fit Kafka's int32 frame size")]
    ResponseTooLarge(usize),
    #[error("kpress has no address for broker node {0}")]
    UnknownNode(i32),
    #[error("TLS handshake with the client failed: {0}")]
    TlsHandshake(#[source] io::Error),
    #[error("client spoke plaintext to a TLS listener: set the client's security.protocol to SSL or SASL_SSL")]
    PlaintextOnTls,
    #[error("client asked for TLS server name {0:?}, which is neither the bootstrap's name nor a broker node's: refused with a TLS alert")]
    UnknownServerName(String),
    #[error("kpress's own SASL authentication ([upstream.sasl]) failed: {0}")]
    SideAuthentication(String),
    #[error("kpress cannot build its own request to the cluster: {0}")]
    SideRequest(#[source] ProtocolError),
    #[error("the broker's answer to kpress's own request does not parse: {0}")]
    SideResponse(#[source] ProtocolError),
}

impl ConnectionError {
    pub(crate) fn fault(&self) -> Fault {
        use ConnectionError::*;
        match self {
            ClientIo(_)
            | ClientFrame(_)
            | ClientEndedMidFrame(_)
            | ClientTimedOut { .. }
            | ClientIdle(_)
            | ProduceAcks(_)
            | LegacySaslHandshake
            | TlsHandshake(_)
            | PlaintextOnTls
            | UnknownServerName(_) => Fault::Client,
            BrokerIo(_)
            | Connect { .. }
            | BrokerFrame(_)
            | BrokerEndedMidFrame(_)
            | BrokerTimedOut { .. }
            | BrokerClosed { .. }
            | BrokerClosedIdle
            | BrokerUnsolicited
            | CorrelationMismatch { .. }
            | SideResponse(_) => Fault::Broker,
            SideRequest(_) => Fault::Proxy,
            // Credentials or mechanism the brokers refuse: the policy's to fix.
            SideAuthentication(_) => Fault::Proxy,
            Response(err) => match err.fault() {
                kpress_protocol::Fault::Client => Fault::Client,
                kpress_protocol::Fault::Broker => Fault::Broker,
                kpress_protocol::Fault::Proxy => Fault::Proxy,
            },
            OverBudget(_) | Listener(_) | RewriteTask(_) | ResponseTooLarge(_) | UnknownNode(_) => {
                Fault::Proxy
            }
        }
    }

    /// A routine end: a client leaving mid-conversation (closing with responses owed,
    /// resetting) or a broker closing an idle connection. No warning.
    pub(crate) fn is_routine_close(&self) -> bool {
        match self {
            ConnectionError::ClientIo(err) => matches!(
                err.kind(),
                io::ErrorKind::BrokenPipe
                    | io::ErrorKind::ConnectionReset
                    | io::ErrorKind::ConnectionAborted
                    | io::ErrorKind::UnexpectedEof
            ),
            ConnectionError::ClientEndedMidFrame(_) => true,
            // As a broker closes connections idle past connections.max.idle.ms.
            ConnectionError::ClientIdle(_) => true,
            // Brokers close idle connections (connections.max.idle.ms); the client
            // reconnects as it would to the broker itself.
            ConnectionError::BrokerClosedIdle => true,
            _ => false,
        }
    }

    /// The `reason` label of the frames-refused metric, for errors that refuse a frame.
    pub(crate) fn refused_frame_reason(&self) -> Option<&'static str> {
        match self {
            ConnectionError::ClientFrame(FrameError::TooLarge { .. })
            | ConnectionError::BrokerFrame(FrameError::TooLarge { .. }) => Some("too_large"),
            ConnectionError::ClientFrame(_) | ConnectionError::BrokerFrame(_) => Some("malformed"),
            ConnectionError::OverBudget(_) => Some("over_budget"),
            ConnectionError::ClientTimedOut { writing, .. }
            | ConnectionError::BrokerTimedOut { writing, .. } => Some(if *writing {
                "write_timeout"
            } else {
                "read_timeout"
            }),
            _ => None,
        }
    }

    pub(crate) fn from_client_read(err: ReadFrameError) -> ConnectionError {
        match err {
            ReadFrameError::Io(e) => ConnectionError::ClientIo(e),
            ReadFrameError::Frame(e) => ConnectionError::ClientFrame(e),
            ReadFrameError::OverBudget(e) => ConnectionError::OverBudget(e),
            e @ ReadFrameError::EndedMidFrame { .. } => {
                ConnectionError::ClientEndedMidFrame(e.to_string())
            }
            e @ ReadFrameError::TimedOut { .. } => ConnectionError::ClientTimedOut {
                writing: false,
                detail: e.to_string(),
            },
            ReadFrameError::Idle(idle) => ConnectionError::ClientIdle(idle),
        }
    }

    pub(crate) fn from_broker_read(err: ReadFrameError) -> ConnectionError {
        match err {
            ReadFrameError::Io(e) => ConnectionError::BrokerIo(e),
            ReadFrameError::Frame(e) => ConnectionError::BrokerFrame(e),
            ReadFrameError::OverBudget(e) => ConnectionError::OverBudget(e),
            e @ ReadFrameError::EndedMidFrame { .. } => {
                ConnectionError::BrokerEndedMidFrame(e.to_string())
            }
            e @ (ReadFrameError::TimedOut { .. } | ReadFrameError::Idle(_)) => {
                ConnectionError::BrokerTimedOut {
                    writing: false,
                    detail: e.to_string(),
                }
            }
        }
    }

    pub(crate) fn client_write(err: WriteFrameError) -> ConnectionError {
        match err {
            WriteFrameError::Io(e) => ConnectionError::ClientIo(e),
            e @ WriteFrameError::TimedOut { .. } => ConnectionError::ClientTimedOut {
                writing: true,
                detail: e.to_string(),
            },
        }
    }

    pub(crate) fn broker_write(err: WriteFrameError) -> ConnectionError {
        match err {
            WriteFrameError::Io(e) => ConnectionError::BrokerIo(e),
            e @ WriteFrameError::TimedOut { .. } => ConnectionError::BrokerTimedOut {
                writing: true,
                detail: e.to_string(),
            },
        }
    }
}
