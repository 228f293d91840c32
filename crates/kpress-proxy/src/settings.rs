//! What the proxy is built with, by concern: where it listens, how it reaches the
//! brokers (kpress's own login included), the limits of every connection, and how
//! Produce requests are rewritten. Built once from the policy file.

use std::fmt;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use kpress_config::{Config, NodeRouting};
use kpress_protocol::sasl::Mechanism as SaslMechanism;

use crate::tls;

/// kpress's own SASL credentials (`[upstream.sasl]`), for its side connections only.
#[derive(Clone)]
pub struct SaslLogin {
    pub mechanism: SaslMechanism,
    /// PLAIN and SCRAM; empty for OAUTHBEARER.
    pub username: String,
    /// PLAIN and SCRAM; empty for OAUTHBEARER.
    pub password: String,
    /// OAUTHBEARER: where tokens come from (`None` for PLAIN and SCRAM).
    pub bearer: Option<Arc<kpress_auth::BearerTokens>>,
}

impl SaslLogin {
    /// An OAUTHBEARER login with tokens from `tokens`.
    pub fn bearer(tokens: kpress_auth::BearerTokens) -> Self {
        SaslLogin {
            mechanism: SaslMechanism::OAuthBearer,
            username: String::new(),
            password: String::new(),
            bearer: Some(Arc::new(tokens)),
        }
    }
}

impl fmt::Debug for SaslLogin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SaslLogin")
            .field("mechanism", &self.mechanism)
            .field("username", &self.username)
            .field("password", &"<redacted>")
            .field("bearer", &self.bearer)
            .finish()
    }
}

/// What the proxy is built with, one struct per concern, each built once from the
/// policy file ([`ProxySettings::from_config`]).
#[derive(Debug, Clone)]
pub struct ProxySettings {
    pub listener: ListenerSettings,
    pub upstream: UpstreamSettings,
    pub limits: LimitSettings,
    pub produce: ProduceSettings,
    /// How long in-flight requests may take to finish once shutdown begins.
    pub shutdown_grace: Duration,
}

/// How clients reach kpress.
#[derive(Debug, Clone)]
pub struct ListenerSettings {
    /// The bootstrap listener; node listeners use its IP with their own ports.
    pub bind: SocketAddr,
    /// The addresses clients are given for broker nodes, and how their connections are
    /// told apart. With ports, node N is served on `node_port_base + N` (an error past
    /// 65535), so a node's kpress address never changes across restarts.
    pub routing: NodeRouting,
    /// TLS from clients (required for SNI routing).
    pub tls: Option<tls::ListenerTlsSettings>,
    /// Every listener sets `SO_REUSEPORT`, so several kpress processes (of the same
    /// user) serve the same ports: Linux spreads new connections across them, and a
    /// new process can take over before the old one stops.
    pub reuse_port: bool,
}

/// How kpress reaches the brokers.
#[derive(Debug, Clone)]
pub struct UpstreamSettings {
    /// `host:port` of the brokers kpress bootstraps from, tried in order.
    pub bootstrap_servers: Vec<String>,
    /// TLS to brokers.
    pub tls: Option<tls::UpstreamTlsSettings>,
    /// kpress's own SASL login for its side connections (Metadata, topic-id lookups,
    /// topic configs).
    pub login: Option<SaslLogin>,
}

/// What every connection works within.
#[derive(Debug, Clone, Copy)]
pub struct LimitSettings {
    /// Largest frame accepted in either direction; a larger one closes its connection.
    pub max_frame_bytes: usize,
    /// One budget for the bytes of all frames in flight on all connections, half for
    /// requests and half for responses: a frame larger than its half is refused, so
    /// this should be at least twice `max_frame_bytes`.
    pub max_inflight_bytes: usize,
    /// What one connection may hold of each half of that budget (at least
    /// `max_frame_bytes`).
    pub max_connection_inflight_bytes: usize,
    /// Client connections open at once; more are closed as they are accepted.
    pub max_connections: usize,
    /// Time for a whole frame once its first byte arrived, and for a whole write.
    pub frame_timeout: Duration,
    /// A client connection with nothing to read and no response owed this long closes
    /// (Kafka's `connections.max.idle.ms`).
    pub idle_timeout: Duration,
    /// Distinct topic label values in metrics.
    pub max_topic_labels: usize,
}

/// How Produce requests are rewritten.
#[derive(Debug, Clone, Copy)]
pub struct ProduceSettings {
    /// Whether a client connection's batches are rewritten before it authenticated with
    /// SASL; `false` leaves them untouched until then.
    pub rewrite_before_auth: bool,
    /// What all batches of one Produce request may decompress to together.
    pub max_request_decompressed_bytes: usize,
    /// How long a Produce request's rewrite may wait for a work slot; past it the
    /// request goes to the broker as sent (its batches counted `overloaded_passed`).
    pub max_rewrite_wait: Duration,
}

impl ProxySettings {
    /// The settings `config` gives, with kpress's own `login` (its secrets read by the
    /// caller) and the `shutdown_grace` of the command line.
    pub fn from_config(
        config: &Config,
        login: Option<SaslLogin>,
        shutdown_grace: Duration,
    ) -> ProxySettings {
        let limits = &config.limits;
        let millis = |ms: usize| Duration::from_millis(ms as u64);
        ProxySettings {
            listener: ListenerSettings {
                bind: config.listener.bind,
                routing: config.listener.routing.clone(),
                tls: config.listener.tls.clone(),
                reuse_port: config.listener.reuse_port,
            },
            upstream: UpstreamSettings {
                bootstrap_servers: config.upstream.bootstrap_servers.clone(),
                tls: config.upstream.tls.clone(),
                login,
            },
            limits: LimitSettings {
                max_frame_bytes: limits.max_frame_bytes,
                max_inflight_bytes: limits.max_inflight_bytes,
                max_connection_inflight_bytes: limits.max_connection_inflight_bytes,
                max_connections: limits.max_connections,
                frame_timeout: millis(limits.frame_timeout_ms),
                idle_timeout: millis(limits.idle_timeout_ms),
                max_topic_labels: limits.max_topic_labels,
            },
            produce: ProduceSettings {
                rewrite_before_auth: config.listener.rewrite_before_auth,
                max_request_decompressed_bytes: limits.max_request_decompressed_bytes,
                max_rewrite_wait: millis(limits.max_rewrite_wait_ms),
            },
            shutdown_grace,
        }
    }

    /// Settings for tests: the binary takes every value from the policy file
    /// (kpress-config holds the defaults), so these are only plausible ones.
    #[cfg(test)]
    pub(crate) fn for_tests(
        bind: SocketAddr,
        advertised_host: String,
        node_port_base: u16,
        bootstrap_servers: Vec<String>,
    ) -> ProxySettings {
        // Kafka's socket.request.max.bytes.
        const MAX_FRAME_BYTES: usize = 100 << 20;
        ProxySettings {
            listener: ListenerSettings {
                bind,
                routing: NodeRouting::Ports {
                    advertised_host,
                    node_port_base,
                },
                tls: None,
                reuse_port: false,
            },
            upstream: UpstreamSettings {
                bootstrap_servers,
                tls: None,
                login: None,
            },
            limits: LimitSettings {
                max_frame_bytes: MAX_FRAME_BYTES,
                max_inflight_bytes: 256 << 20,
                max_connection_inflight_bytes: MAX_FRAME_BYTES,
                max_connections: 10_000,
                frame_timeout: Duration::from_secs(30),
                idle_timeout: Duration::from_secs(600),
                max_topic_labels: 1000,
            },
            produce: ProduceSettings {
                rewrite_before_auth: true,
                max_request_decompressed_bytes: 256 << 20,
                max_rewrite_wait: Duration::from_millis(500),
            },
            shutdown_grace: Duration::from_secs(30),
        }
    }
}
