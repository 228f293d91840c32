//! State every listener and connection shares, listener binding and accept loops, and
//! the count of open connections that graceful shutdown waits on.

use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use kpress_batch::PolicyLookup;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Semaphore};

use crate::budget::Budget;
use crate::cluster::{node_port, Cluster};
use crate::connection::{self, ConnectionInfo};
use crate::error::{ConnectionError, ProxyError};
use crate::metrics;
use crate::upstream;

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
    /// One slot per CPU for Produce rewrites: they are CPU-bound, so more at once
    /// would only add blocking threads and the memory of their buffers.
    pub(crate) rewrite_slots: Arc<Semaphore>,
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
    pub(crate) advertised_host: String,
    pub(crate) node_port_base: u16,
    pub(crate) max_frame_bytes: usize,
    pub(crate) max_inflight_bytes: usize,
    pub(crate) bootstrap_servers: Vec<String>,
    pub(crate) listen_ip: IpAddr,
}

impl Shared {
    pub(crate) fn new(config: SharedConfig) -> (Arc<Shared>, ShutdownControl) {
        let (shutdown_tx, shutdown_rx) = watch::channel(false);
        let (abort_tx, abort_rx) = watch::channel(false);
        let (open_tx, open_rx) = watch::channel(0);
        let shared = Arc::new(Shared {
            policies: config.policies,
            cluster: Cluster::new(config.advertised_host, config.node_port_base),
            budget: Budget::new(config.max_inflight_bytes),
            max_frame_bytes: config.max_frame_bytes,
            rewrite_slots: Arc::new(Semaphore::new(
                std::thread::available_parallelism().map_or(1, |n| n.get()),
            )),
            bootstrap_servers: config.bootstrap_servers,
            listen_ip: config.listen_ip,
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
        for &node_id in nodes {
            if !self.cluster.claim_listener(node_id) {
                continue;
            }
            let bound = node_port(self.cluster.node_port_base(), node_id).and_then(|port| {
                bind(
                    SocketAddr::new(self.listen_ip, port),
                    &format!("broker node {node_id}"),
                )
            });
            match bound {
                Ok(listener) => {
                    tracing::info!(
                        node_id,
                        addr = %listener.local_addr().map_or_else(|e| e.to_string(), |a| a.to_string()),
                        "serving broker node"
                    );
                    self.spawn_accept_loop(listener, UpstreamTarget::Node(node_id));
                }
                Err(err) => {
                    self.cluster.release_listener(node_id);
                    return Err(err);
                }
            }
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
