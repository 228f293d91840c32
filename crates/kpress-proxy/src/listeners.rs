//! Listener lifecycle: binding the bootstrap and node listeners, accepting until
//! shutdown, and each client connection's task from accept (TLS handshake included) to
//! close, counted for metrics and for graceful shutdown.

use std::net::SocketAddr;
use std::sync::Arc;

use socket2::{Domain, Protocol, Socket, Type};
use tokio::net::{TcpListener, TcpStream};

use crate::cluster::{node_port, NodeListeners};
use crate::connection::{self, Relay};
use crate::descriptors::{self, AcceptFailures};
use crate::error::{ConnectionError, ProxyError};
use crate::handler::{ConnectionContext, Handlers};
use crate::metrics;
use crate::shared::Shared;
use crate::transport::ListenerRole;
use kpress_config::NodeRouting;

/// The listeners of one proxy: its shared state and the handlers its connections are
/// served with. Connections' handlers reach it as [`NodeListeners`].
#[derive(Debug)]
pub(crate) struct Listeners {
    pub(crate) shared: Arc<Shared>,
    pub(crate) handlers: Arc<Handlers>,
}

impl NodeListeners for Listeners {
    fn ensure(&self, nodes: &[i32]) -> Result<(), ProxyError> {
        ensure_node_listeners(&self.shared, &self.handlers, nodes)
    }
}

/// Binds a listener for every node in `nodes` that has none yet and starts accepting
/// on it. Synchronous, so a response can wait for it before it is relayed. In SNI mode
/// every node is served on the bootstrap port: nothing to bind.
pub(crate) fn ensure_node_listeners(
    shared: &Arc<Shared>,
    handlers: &Arc<Handlers>,
    nodes: &[i32],
) -> Result<(), ProxyError> {
    let NodeRouting::Ports { node_port_base, .. } = shared.cluster.routing() else {
        return Ok(());
    };
    if nodes.is_empty() {
        return Ok(());
    }
    // Held across the binds: a response naming a node another connection is binding
    // waits here until the port is served.
    let mut listening = shared.cluster.listeners();
    for &node_id in nodes {
        if listening.contains(&node_id) {
            continue;
        }
        let port = node_port(*node_port_base, node_id)?;
        let listener = bind(
            SocketAddr::new(shared.transport.listen_ip, port),
            &format!("broker node {node_id}"),
            shared.transport.reuse_port,
        )?;
        tracing::info!(
            node_id,
            addr = %listener.local_addr().map_or_else(|e| e.to_string(), |a| a.to_string()),
            tls = shared.transport.acceptor.is_tls(),
            "serving broker node"
        );
        listening.insert(node_id);
        spawn_accept_loop(shared, handlers, listener, ListenerRole::Node(node_id));
    }
    Ok(())
}

/// Accepts connections on `listener` until shutdown begins.
pub(crate) fn spawn_accept_loop(
    shared: &Arc<Shared>,
    handlers: &Arc<Handlers>,
    listener: TcpListener,
    role: ListenerRole,
) {
    let shared = Arc::clone(shared);
    descriptors::keep_spare();
    // One per loop, handed to each of its connections' contexts.
    let listeners = Arc::new(Listeners {
        shared: Arc::clone(&shared),
        handlers: Arc::clone(handlers),
    });
    tokio::spawn(async move {
        let mut shutdown = shared.lifecycle.shutdown.clone();
        let mut failures = AcceptFailures::default();
        loop {
            let accepted = tokio::select! {
                _ = shutdown.wait_for(|stopping| *stopping) => break,
                accepted = listener.accept() => accepted,
            };
            match accepted {
                Ok((client, peer))
                    if *shared.lifecycle.open_connections.borrow()
                        >= shared.limits.max_connections =>
                {
                    metrics::connection_refused("max_connections");
                    // Debug only: a flood of connections must not flood the log too.
                    tracing::debug!(
                        client = %peer,
                        max_connections = shared.limits.max_connections,
                        "refusing a connection: [limits] max_connections are open"
                    );
                    drop(client);
                }
                Ok((client, _))
                    if descriptors::too_few_left(
                        &client,
                        *shared.lifecycle.open_connections.borrow(),
                    ) =>
                {
                    descriptors::refused_for_descriptors();
                    drop(client);
                }
                Ok((client, peer)) => {
                    failures.succeeded();
                    spawn_connection(&listeners, client, peer, role);
                }
                Err(err) => {
                    // Open connections keep being served meanwhile.
                    let pause = failures.failed(&listener, role.label(), &err);
                    if !pause.is_zero() {
                        tokio::select! {
                            _ = shutdown.wait_for(|stopping| *stopping) => break,
                            () = tokio::time::sleep(pause) => {}
                        }
                    }
                }
            }
        }
        tracing::debug!(listener = role.label(), "stopped accepting");
    });
}

fn spawn_connection(
    listeners: &Arc<Listeners>,
    client: TcpStream,
    peer: SocketAddr,
    role: ListenerRole,
) {
    let guard = OpenConnection::new(Arc::clone(&listeners.shared), role);
    let listeners = Arc::clone(listeners);
    // One line per lifecycle event at info: accepted here, closed (with why) below.
    tracing::info!(client = %peer, listener = role.label(), "connection accepted");
    tokio::spawn(async move {
        let shared = Arc::clone(&guard.shared);
        let mut abort = shared.lifecycle.abort.clone();
        let proxied = async {
            let _ = client.set_nodelay(true);
            // The handshake is bounded like a frame: a client that opens a connection
            // and says nothing holds only its socket, and not for long.
            let (client, target) = shared
                .transport
                .acceptor
                .accept(client, role, &shared.cluster, shared.limits.frame_timeout)
                .await?;
            let upstream = shared.connect_upstream(&target).await?;
            let conn = ConnectionContext::new(Arc::clone(&shared), listeners.clone(), peer, target);
            let relay = Relay {
                handlers: &listeners.handlers,
                limits: shared.frame_limits(),
                idle_timeout: shared.limits.idle_timeout,
                status: &shared.lifecycle.status,
            };
            connection::serve(
                client,
                upstream,
                conn,
                relay,
                shared.lifecycle.shutdown.clone(),
            )
            .await
        };
        let result = tokio::select! {
            result = proxied => result,
            _ = abort.wait_for(|abort| *abort) => {
                tracing::info!(client = %peer, listener = role.label(), "closing connection: shutdown grace is over");
                Ok(())
            }
        };
        match result {
            Ok(()) => tracing::info!(
                client = %peer,
                listener = role.label(),
                reason = "client closed or shutdown",
                "connection closed"
            ),
            Err(err) if err.is_routine_close() => tracing::info!(
                client = %peer,
                listener = role.label(),
                reason = %err,
                "connection closed"
            ),
            Err(err) => {
                if let Some(reason) = err.refused_frame_reason() {
                    metrics::frame_refused(reason);
                }
                if let Some(reason) = handshake_failure(&err) {
                    metrics::tls_handshake_failed(reason);
                }
                tracing::warn!(
                    client = %peer,
                    listener = role.label(),
                    fault = %err.fault(),
                    error = %err,
                    "closing connection"
                );
            }
        }
        drop(guard);
    });
}

/// The `reason` label of a failed client TLS handshake.
fn handshake_failure(err: &ConnectionError) -> Option<&'static str> {
    match err {
        ConnectionError::PlaintextOnTls => Some("plaintext"),
        ConnectionError::UnknownServerName(_) => Some("unknown_server_name"),
        ConnectionError::TlsHandshake(e) if e.kind() == std::io::ErrorKind::TimedOut => {
            Some("timeout")
        }
        ConnectionError::TlsHandshake(_) => Some("handshake"),
        _ => None,
    }
}

/// Counts a connection as open (for metrics and graceful shutdown) while it lives.
struct OpenConnection {
    shared: Arc<Shared>,
}

impl OpenConnection {
    fn new(shared: Arc<Shared>, role: ListenerRole) -> OpenConnection {
        shared.lifecycle.open_connections.send_modify(|n| *n += 1);
        metrics::connection_opened(role.label());
        OpenConnection { shared }
    }
}

impl Drop for OpenConnection {
    fn drop(&mut self) {
        self.shared
            .lifecycle
            .open_connections
            .send_modify(|n| *n -= 1);
        metrics::connection_closed();
    }
}

/// Connections the kernel queues on a listener until kpress accepts them (what tokio's
/// own bind asks for).
const LISTEN_BACKLOG: i32 = 1024;

/// Binds a TCP listener now (not at the next await), so the port is served before any
/// client learns it. With `reuse_port`, other kpress processes of the same user may
/// listen on the same address (`SO_REUSEPORT`; Linux spreads new connections across
/// them).
pub(crate) fn bind(
    addr: SocketAddr,
    what: &str,
    reuse_port: bool,
) -> Result<TcpListener, ProxyError> {
    let error = |source| ProxyError::Bind {
        listener: what.to_owned(),
        addr,
        source,
    };
    let socket =
        Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP)).map_err(error)?;
    // As std's bind does on Unix: a restarted kpress binds while the previous one's
    // connections linger in TIME_WAIT. On Windows it would let others take the port.
    #[cfg(unix)]
    socket.set_reuse_address(true).map_err(error)?;
    if reuse_port {
        set_reuse_port(&socket).map_err(error)?;
    }
    socket.bind(&addr.into()).map_err(error)?;
    socket.listen(LISTEN_BACKLOG).map_err(error)?;
    socket.set_nonblocking(true).map_err(error)?;
    TcpListener::from_std(socket.into()).map_err(error)
}

#[cfg(all(
    unix,
    not(any(
        target_os = "solaris",
        target_os = "illumos",
        target_os = "cygwin",
        target_os = "nuttx"
    ))
))]
fn set_reuse_port(socket: &Socket) -> std::io::Result<()> {
    socket.set_reuse_port(true)
}

#[cfg(not(all(
    unix,
    not(any(
        target_os = "solaris",
        target_os = "illumos",
        target_os = "cygwin",
        target_os = "nuttx"
    ))
)))]
fn set_reuse_port(_: &Socket) -> std::io::Result<()> {
    Err(std::io::Error::new(
        std::io::ErrorKind::Unsupported,
        "[listener] reuse_port needs SO_REUSEPORT, which this platform does not have",
    ))
}
