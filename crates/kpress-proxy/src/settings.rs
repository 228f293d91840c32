//! What the proxy is built with: where it listens, where the brokers are, kpress's own
//! login to them, and its limits.

use std::fmt;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use kpress_config::NodeRouting;
use kpress_protocol::sasl::Mechanism as SaslMechanism;

use crate::tls;
use crate::topic_configs::TopicConfigCache;

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

/// How the proxy listens, where the brokers are, and its limits.
#[derive(Debug, Clone)]
pub struct ProxySettings {
    /// The bootstrap listener; node listeners use its IP with their own ports.
    pub bind: SocketAddr,
    /// The addresses clients are given for broker nodes, and how their connections are
    /// told apart. With ports, node N is served on `node_port_base + N` (an error past
    /// 65535), so a node's kpress address never changes across restarts.
    pub routing: NodeRouting,
    /// TLS from clients (required for SNI routing).
    pub listener_tls: Option<tls::ListenerTlsSettings>,
    /// TLS to brokers.
    pub upstream_tls: Option<tls::UpstreamTlsSettings>,
    /// kpress's own SASL login for its side connections (Metadata, topic-id lookups).
    pub upstream_sasl: Option<SaslLogin>,
    /// Whether a client connection's batches are rewritten before it authenticated with
    /// SASL; `false` leaves them untouched until then.
    pub rewrite_before_auth: bool,
    /// Every listener sets `SO_REUSEPORT`, so several kpress processes (of the same
    /// user) serve the same ports: Linux spreads new connections across them, and a
    /// new process can take over before the old one stops.
    pub reuse_port: bool,
    /// `host:port` of the brokers kpress bootstraps from, tried in order.
    pub bootstrap_servers: Vec<String>,
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
    /// What all batches of one Produce request may decompress to together.
    pub max_request_decompressed_bytes: usize,
    /// Distinct topic label values in metrics.
    pub max_topic_labels: usize,
    /// How long a Produce request's rewrite may wait for a work slot; past it the
    /// request goes to the broker as sent (its batches counted `overloaded_passed`).
    pub max_rewrite_wait: Duration,
    /// How long in-flight requests may take to finish once shutdown begins.
    pub shutdown_grace: Duration,
    /// The cluster's topics and their own compression configs, which the proxy keeps
    /// filled on its side connection (`compression.type = "topic"` reads them through
    /// the policy, `/policy` shows them); refreshed on the cache's interval.
    pub topic_configs: Arc<TopicConfigCache>,
}

impl ProxySettings {
    /// Settings for in-crate tests: the binary takes every value from the policy
    /// file (kpress-config holds the defaults), so these are only plausible ones.
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
            bind,
            routing: NodeRouting::Ports {
                advertised_host,
                node_port_base,
            },
            listener_tls: None,
            upstream_tls: None,
            upstream_sasl: None,
            rewrite_before_auth: true,
            reuse_port: false,
            bootstrap_servers,
            max_frame_bytes: MAX_FRAME_BYTES,
            max_inflight_bytes: 256 << 20,
            max_connection_inflight_bytes: MAX_FRAME_BYTES,
            max_connections: 10_000,
            frame_timeout: Duration::from_secs(30),
            idle_timeout: Duration::from_secs(600),
            max_request_decompressed_bytes: 256 << 20,
            max_topic_labels: 1000,
            max_rewrite_wait: Duration::from_millis(500),
            shutdown_grace: Duration::from_secs(30),
            topic_configs: Arc::new(TopicConfigCache::new(Duration::from_secs(30))),
        }
    }
}
