//! State every listener and connection shares, listener binding and accept loops, and
//! the count of open connections that graceful shutdown waits on.

use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use kpress_batch::PolicyLookup;
use kpress_protocol::frame::SIZE_PREFIX_LEN;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Semaphore};

use crate::budget::{Budget, ConnectionPool, Direction};
use crate::cluster::{node_port, Cluster};
use crate::connection::{self, ConnectionInfo};
use crate::error::{ConnectionError, ProxyError};
use crate::frame_io::FrameLimits;
use crate::metrics::{self, TopicLabels};
use crate::topic_ids::TopicIdResolver;
use crate::upstream;
use crate::ProxySettings;

/// Where a client connection's upstream goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum UpstreamTarget {
    /// Any bootstrap server (the bootstrap listener).
    Bootstrap,
    /// That broker node's real address (the node's listener).
    Node(i32),
}

impl UpstreamTarget {
    fn listener_label(self) -> &'static str {
        match self {
            UpstreamTarget::Bootstrap => "bootstrap",
            UpstreamTarget::Node(_) => "node",
        }
    }
}

impl fmt::Display for UpstreamTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            UpstreamTarget::Bootstrap => f.write_str("bootstrap"),
            UpstreamTarget::Node(id) => write!(f, "node {id}"),
        }
    }
}

/// Everything the proxy's tasks share.
pub(crate) struct Shared {
    pub(crate) policies: Arc<dyn PolicyLookup>,
    pub(crate) cluster: Cluster,
    pub(crate) budget: Budget,
    pub(crate) max_frame_bytes: usize,
    pub(crate) frame_timeout: Duration,
    /// A client connection with nothing to read and no response owed this long closes.
    pub(crate) idle_timeout: Duration,
    /// What one connection may hold of each budget pool.
    max_connection_inflight_bytes: usize,
    max_connections: usize,
    /// What all batches of one Produce request may decompress to together.
    pub(crate) max_request_decompressed_bytes: usize,
    /// One slot per CPU for Produce rewrites: they are CPU-bound, so more at once
    /// would only add blocking threads and the memory of their buffers.
    pub(crate) rewrite_slots: Arc<Semaphore>,
    pub(crate) topic_labels: TopicLabels,
    pub(crate) topic_ids: TopicIdResolver,
    bootstrap_servers: Vec<String>,
    listen_ip: IpAddr,
    /// Becomes true when shutdown begins: stop accepting, finish in-flight requests.
    shutdown: watch::Receiver<bool>,
    /// Becomes true when the shutdown grace is over: close whatever is left.
    abort: watch::Receiver<bool>,
    open_connections: watch::Sender<usize>,
}

impl fmt::Debug for Shared {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Shared")
            .field("cluster", &self.cluster)
            .field("budget", &self.budget)
            .field("max_frame_bytes", &self.max_frame_bytes)
            .field("bootstrap_servers", &self.bootstrap_servers)
            .field("listen_ip", &self.listen_ip)
            .finish_non_exhaustive()
    }
}

/// The senders that drive shutdown, kept by `run`.
#[derive(Debug)]
pub(crate) struct ShutdownControl {
    pub(crate) shutdown: watch::Sender<bool>,
    pub(crate) abort: watch::Sender<bool>,
    pub(crate) open_connections: watch::Receiver<usize>,
}

pub(crate) struct SharedConfig {
    pub(crate) policies: Arc<dyn PolicyLookup>,
    pub(crate) settings: ProxySettings,
}

/// How many Produce rewrites run at once: one per CPU.
pub(crate) fn rewrite_threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

impl Shared {
    pub(crate) fn new(config: SharedConfig) -> (Arc<Shared>, ShutdownControl) {
        let (shutdown_tx, shutdown_rx) = watch::channel(false);
        let (abort_tx, abort_rx) = watch::channel(false);
        let (open_tx, open_rx) = watch::channel(0);
        let settings = config.settings;
        let shared = Arc::new(Shared {
            policies: config.policies,
            cluster: Cluster::new(settings.advertised_host, settings.node_port_base),
            budget: Budget::new(settings.max_inflight_bytes),
            max_frame_bytes: settings.max_frame_bytes,
            frame_timeout: settings.frame_timeout,
            idle_timeout: settings.idle_timeout,
            max_connection_inflight_bytes: settings.max_connection_inflight_bytes,
            max_connections: settings.max_connections,
            max_request_decompressed_bytes: settings.max_request_decompressed_bytes,
            rewrite_slots: Arc::new(Semaphore::new(rewrite_threads())),
            topic_labels: TopicLabels::new(settings.max_topic_labels),
            topic_ids: TopicIdResolver::default(),
            bootstrap_servers: settings.bootstrap_servers,
            listen_ip: settings.bind.ip(),
            shutdown: shutdown_rx,
            abort: abort_rx,
            open_connections: open_tx,
        });
        let control = ShutdownControl {
            shutdown: shutdown_tx,
            abort: abort_tx,
            open_connections: open_rx,
        };
        (shared, control)
    }

    pub(crate) fn bootstrap_servers(&self) -> &[String] {
        &self.bootstrap_servers
    }

    /// How frames are read and written, in either direction.
    pub(crate) fn frame_limits(&self) -> FrameLimits {
        FrameLimits {
            max_frame_bytes: self.max_frame_bytes,
            frame_timeout: self.frame_timeout,
        }
    }

    /// A new connection's share of the `direction` pool (its frames' size prefixes
    /// on top of the configured bytes).
    pub(crate) fn connection_pool(&self, direction: Direction) -> ConnectionPool {
        ConnectionPool::new(
            self.budget.pool(direction),
            self.max_connection_inflight_bytes + SIZE_PREFIX_LEN,
        )
    }

    pub(crate) fn is_shutting_down(&self) -> bool {
        *self.shutdown.borrow()
    }

    /// Whether a rule or the brokers name `topic` (it may get a metric label).
    pub(crate) fn is_known_topic(&self, topic: &str) -> bool {
        self.policies.has_rule_for(topic) || self.cluster.is_named_topic(topic)
    }

    /// Opens the upstream connection for a client of `target`'s listener.
    pub(crate) async fn connect_upstream(
        &self,
        target: &UpstreamTarget,
    ) -> Result<TcpStream, ConnectionError> {
        match target {
            UpstreamTarget::Bootstrap => upstream::connect_any(&self.bootstrap_servers).await,
            UpstreamTarget::Node(id) => {
                let address = self
                    .cluster
                    .node_address(*id)
                    .ok_or(ConnectionError::UnknownNode(*id))?;
                upstream::connect_node(&address).await
            }
        }
    }

    /// Binds a listener for every node in `nodes` that has none yet and starts
    /// accepting on it. Synchronous, so a response can wait for it before it is relayed.
    pub(crate) fn ensure_node_listeners(self: &Arc<Self>, nodes: &[i32]) -> Result<(), ProxyError> {
        if nodes.is_empty() {
            return Ok(());
        }
        // Held across the binds: a response naming a node another connection is binding
        // waits here until the port is served.
        let mut listening = self.cluster.listeners();
        for &node_id in nodes {
            if listening.contains(&node_id) {
                continue;
            }
            let port = node_port(self.cluster.node_port_base(), node_id)?;
            let listener = bind(
                SocketAddr::new(self.listen_ip, port),
                &format!("broker node {node_id}"),
            )?;
            tracing::info!(
                node_id,
                addr = %listener.local_addr().map_or_else(|e| e.to_string(), |a| a.to_string()),
                "serving broker node"
            );
            listening.insert(node_id);
            self.spawn_accept_loop(listener, UpstreamTarget::Node(node_id));
        }
        Ok(())
    }

    /// Accepts connections on `listener` until shutdown begins.
    pub(crate) fn spawn_accept_loop(
        self: &Arc<Self>,
        listener: TcpListener,
        target: UpstreamTarget,
    ) {
        let shared = Arc::clone(self);
        tokio::spawn(async move {
            let mut shutdown = shared.shutdown.clone();
            loop {
                let accepted = tokio::select! {
                    _ = shutdown.wait_for(|stopping| *stopping) => break,
                    accepted = listener.accept() => accepted,
                };
                match accepted {
                    Ok((client, peer))
                        if *shared.open_connections.borrow() >= shared.max_connections =>
                    {
                        metrics::connection_refused("max_connections");
                        // Debug only: a flood of connections must not flood the log too.
                        tracing::debug!(
                            client = %peer,
                            max_connections = shared.max_connections,
                            "refusing a connection: [limits] max_connections are open"
                        );
                        drop(client);
                    }
                    Ok((client, peer)) => shared.spawn_connection(client, peer, target),
                    Err(err) => {
                        // Out of file descriptors and the like: back off, keep serving.
                        tracing::warn!(listener = %target, error = %err, "accept failed");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                }
            }
            tracing::debug!(listener = %target, "stopped accepting");
        });
    }

    fn spawn_connection(
        self: &Arc<Self>,
        client: TcpStream,
        peer: SocketAddr,
        target: UpstreamTarget,
    ) {
        let guard = OpenConnection::new(Arc::clone(self), target);
        tokio::spawn(async move {
            let shared = Arc::clone(&guard.shared);
            let info = ConnectionInfo {
                client: peer,
                upstream: target,
            };
            let mut abort = shared.abort.clone();
            let proxied = async {
                let _ = client.set_nodelay(true);
                let upstream = shared.connect_upstream(&target).await?;
                connection::serve(
                    client,
                    upstream,
                    Arc::clone(&shared),
                    info.clone(),
                    shared.shutdown.clone(),
                )
                .await
            };
            let result = tokio::select! {
                result = proxied => result,
                _ = abort.wait_for(|abort| *abort) => {
                    tracing::info!(client = %peer, upstream = %target, "closing connection: shutdown grace is over");
                    Ok(())
                }
            };
            match result {
                Ok(()) => tracing::debug!(client = %peer, upstream = %target, "connection closed"),
                Err(err) if err.is_routine_close() => tracing::debug!(
                    client = %peer,
                    upstream = %target,
                    error = %err,
                    "connection ended"
                ),
                Err(err) => {
                    if let Some(reason) = err.refused_frame_reason() {
                        metrics::frame_refused(reason);
                    }
                    tracing::warn!(
                        client = %peer,
                        upstream = %target,
                        fault = %err.fault(),
                        error = %err,
                        "closing connection"
                    );
                }
            }
            drop(guard);
        });
    }
}

/// Counts a connection as open (for metrics and graceful shutdown) while it lives.
struct OpenConnection {
    shared: Arc<Shared>,
}

impl OpenConnection {
    fn new(shared: Arc<Shared>, target: UpstreamTarget) -> OpenConnection {
        shared.open_connections.send_modify(|n| *n += 1);
        metrics::connection_opened(target.listener_label());
        OpenConnection { shared }
    }
}

impl Drop for OpenConnection {
    fn drop(&mut self) {
        self.shared.open_connections.send_modify(|n| *n -= 1);
        metrics::connection_closed();
    }
}

/// Binds a TCP listener now (not at the next await), so the port is served before any
/// client learns it.
pub(crate) fn bind(addr: SocketAddr, what: &str) -> Result<TcpListener, ProxyError> {
    let error = |source| ProxyError::Bind {
        listener: what.to_owned(),
        addr,
        source,
    };
    let listener = std::net::TcpListener::bind(addr).map_err(error)?;
    listener.set_nonblocking(true).map_err(error)?;
    TcpListener::from_std(listener).map_err(error)
}
