//! Running the proxy: learning the brokers, serving the listeners, and shutting down
//! gracefully.

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use kpress_config::NodeRouting;
use tokio::sync::watch;

use crate::cluster::AddressObserver;
use crate::error::{self, ProxyError};
use crate::handler::Handlers;
use crate::listeners::{self, ensure_node_listeners};
use crate::policy::PolicySnapshot;
use crate::settings::ProxySettings;
use crate::shared::{Shared, SharedConfig};
use crate::side::DISCOVERY_METADATA_VERSIONS;
use crate::status::ProxyStatus;
use crate::topic_configs::TopicConfigCache;
use crate::transport::ListenerRole;

/// What drives a running proxy from outside.
pub struct Controls<F> {
    /// Completes when kpress should stop: then it stops accepting, lets in-flight
    /// requests finish for up to `settings.shutdown_grace`, and closes what is left.
    pub shutdown: F,
    /// Each change re-reads the TLS files (a file that does not load leaves the one in
    /// force).
    pub reload_tls: watch::Receiver<u64>,
    /// The policy in force; a new snapshot serves the next Produce request,
    /// compressors for settings its rules no longer use are dropped, and trials it no
    /// longer holds end once their queue is empty.
    pub policies: watch::Receiver<PolicySnapshot>,
    /// Filled in as the proxy serves, for health probes.
    pub status: Arc<ProxyStatus>,
    /// The cluster's topics and their own compression configs, which the proxy keeps
    /// filled on its side channel (`compression.type = "topic"` reads them through the
    /// policy, `/policy` shows them); refreshed on the cache's interval.
    pub topic_configs: Arc<TopicConfigCache>,
}

impl<F> fmt::Debug for Controls<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Controls")
            .field("status", &self.status)
            .finish_non_exhaustive()
    }
}

/// Runs the proxy until `controls.shutdown` completes.
///
/// Fails at start if a TLS file does not load, a listener cannot be bound, or a node's
/// port would pass 65535. Brokers unreachable at start are waited for. A broker that
/// accepts connections but not kpress's own Metadata request (one that wants SASL
/// first, and kpress has no `[upstream.sasl]`) is served anyway, its nodes learned
/// from the responses clients get.
pub async fn run<F>(settings: ProxySettings, controls: Controls<F>) -> Result<(), ProxyError>
where
    F: Future<Output = ()> + Send,
{
    run_with(settings, controls, Handlers::kpress()).await
}

/// [`run`] with `handlers` in place of kpress's own ([`Handlers::kpress`], to which
/// handlers for more APIs may be registered).
pub async fn run_with<F>(
    settings: ProxySettings,
    controls: Controls<F>,
    handlers: Handlers,
) -> Result<(), ProxyError>
where
    F: Future<Output = ()> + Send,
{
    let Controls {
        shutdown,
        reload_tls: mut reload,
        policies,
        status,
        topic_configs,
    } = controls;
    validate(&settings)?;
    let (shared, control) = Shared::new(SharedConfig {
        policies,
        status: Arc::clone(&status),
        topic_configs,
        settings: settings.clone(),
    })?;
    let handlers = Arc::new(handlers);
    if matches!(&settings.upstream.tls, Some(tls) if !tls.verify) {
        tracing::warn!(
            "[upstream.tls] verify = false: brokers' certificates are not checked, so anyone \
             on the path can pose as a broker"
        );
    }

    let listener = &settings.listener;
    let bootstrap = listeners::bind(listener.bind, "bootstrap", listener.reuse_port)?;
    match discover(&shared).await {
        Ok(nodes) => ensure_node_listeners(&shared, &handlers, &nodes)?,
        // Brokers down while kpress starts (a restart of both, say) is routine: serve
        // the bootstrap listener, whose connections go to whichever server answers,
        // and keep asking until a broker names its nodes.
        Err(ProxyError::Bootstrap { attempts }) => {
            tracing::warn!(
                %attempts,
                "no bootstrap server reachable; serving anyway and retrying: check [upstream] bootstrap_servers if this persists"
            );
            tokio::spawn(rediscover(Arc::clone(&shared), Arc::clone(&handlers)));
        }
        Err(err) => return Err(err),
    }
    let role = match listener.routing {
        NodeRouting::Ports { .. } => ListenerRole::Bootstrap,
        NodeRouting::Sni { .. } => ListenerRole::Sni,
    };
    tracing::info!(
        addr = %bootstrap.local_addr().map_or(listener.bind, |a| a),
        bootstrap_servers = ?settings.upstream.bootstrap_servers,
        tls = listener.tls.is_some(),
        routing = role.label(),
        reuse_port = listener.reuse_port,
        "kpress bootstrap listener ready"
    );
    listeners::spawn_accept_loop(&shared, &handlers, bootstrap, role);
    shared.start_topic_configs();
    status.set_listening(true);

    {
        let shared = Arc::clone(&shared);
        tokio::spawn(async move {
            while reload.changed().await.is_ok() {
                shared.reload_tls();
            }
        });
    }

    shutdown.await;
    let mut open = control.open_connections.clone();
    tracing::info!(
        open_connections = *open.borrow(),
        grace = ?settings.shutdown_grace,
        "shutting down: no new connections, finishing in-flight requests"
    );
    // Every accept loop drops its listener as it sees this, so the ports close now,
    // not at exit: with reuse_port, the kernel then sends new connections to the
    // other processes instead of queueing them here for nobody to accept.
    let _ = control.shutdown.send(true);
    status.set_listening(false);
    let drained = tokio::time::timeout(settings.shutdown_grace, open.wait_for(|n| *n == 0))
        .await
        .is_ok();
    if !drained {
        let still_open = *open.borrow();
        tracing::warn!(
            open_connections = still_open,
            "shutdown grace over; closing the remaining connections"
        );
        let _ = control.abort.send(true);
        // Closing is immediate once told; this only waits for the tasks to notice.
        let _ = tokio::time::timeout(Duration::from_secs(5), open.wait_for(|n| *n == 0))
            .await
            .is_ok();
    }
    tracing::info!("kpress stopped");
    Ok(())
}

fn validate(settings: &ProxySettings) -> Result<(), ProxyError> {
    let limits = &settings.limits;
    if settings.upstream.bootstrap_servers.is_empty() {
        return Err(ProxyError::InvalidSettings(
            "bootstrap_servers is empty".into(),
        ));
    }
    match &settings.listener.routing {
        NodeRouting::Ports {
            advertised_host, ..
        } if advertised_host.is_empty() => {
            return Err(ProxyError::InvalidSettings(
                "advertised_host is empty".into(),
            ));
        }
        NodeRouting::Sni { .. } if settings.listener.tls.is_none() => {
            return Err(ProxyError::InvalidSettings(
                "SNI routing needs [listener.tls]: SNI names exist only in TLS".into(),
            ));
        }
        NodeRouting::Sni { .. } => {}
        NodeRouting::Ports { .. } => {}
    }
    if limits.max_frame_bytes > i32::MAX as usize {
        return Err(ProxyError::InvalidSettings(format!(
            "max_frame_bytes {} exceeds Kafka's int32 frame size",
            limits.max_frame_bytes
        )));
    }
    if limits.max_inflight_bytes / 2 < limits.max_frame_bytes.min(1024 * 1024) {
        return Err(ProxyError::InvalidSettings(format!(
            "max_inflight_bytes {} leaves less than 1 MiB (or max_frame_bytes) per direction",
            limits.max_inflight_bytes
        )));
    }
    Ok(())
}

/// Retries [`discover`] with backoff (1 s doubling to 30 s) until a broker answers,
/// then binds the node listeners it named; stops once shutdown begins.
async fn rediscover(shared: Arc<Shared>, handlers: Arc<Handlers>) {
    let mut wait = Duration::from_secs(1);
    loop {
        tokio::time::sleep(wait).await;
        if shared.is_shutting_down() {
            return;
        }
        match discover(&shared).await {
            Ok(nodes) => {
                if let Err(err) = ensure_node_listeners(&shared, &handlers, &nodes) {
                    // Retried by the next Metadata response a client gets through kpress.
                    tracing::error!(
                        error = %err,
                        "cannot serve the broker nodes: check [listener] bind and node_port_base \
                         (node N listens on node_port_base + N, and the port must be free)"
                    );
                }
                return;
            }
            Err(err) => {
                tracing::warn!(error = %err, retry_in = ?wait, "bootstrap servers still unreachable")
            }
        }
        wait = (wait * 2).min(Duration::from_secs(30));
    }
}

/// Learns the broker nodes (and topic ids) from the first bootstrap server that
/// answers a Metadata request; returns the nodes to serve.
async fn discover(shared: &Arc<Shared>) -> Result<Vec<i32>, ProxyError> {
    let mut attempts = Vec::new();
    let mut reached_any = false;
    for server in shared.bootstrap_servers() {
        for version in DISCOVERY_METADATA_VERSIONS {
            let mut observer = AddressObserver::new(&shared.cluster);
            let asked = async {
                let mut stream = shared.side.connect(server).await?;
                shared
                    .side
                    .metadata(&mut stream, version, &[], &mut observer)
                    .await
            };
            match asked.await {
                Ok(()) => {
                    if let Some(problem) = observer.problems.into_iter().next() {
                        return Err(problem);
                    }
                    tracing::info!(
                        %server,
                        metadata_version = version,
                        nodes = ?observer.nodes_without_listener,
                        "learned the broker nodes"
                    );
                    return Ok(observer.nodes_without_listener);
                }
                // Refused outright: no older version will do better.
                Err(err @ error::ConnectionError::Connect { .. }) => {
                    tracing::warn!(%server, error = %err, "bootstrap server unreachable");
                    attempts.push(format!("{server}: {err}"));
                    break;
                }
                Err(err) => {
                    reached_any = true;
                    tracing::debug!(
                        %server,
                        metadata_version = version,
                        fault = %err.fault(),
                        error = %err,
                        "bootstrap server did not answer kpress's Metadata request"
                    );
                    attempts.push(format!("{server} (Metadata v{version}): {err}"));
                }
            }
        }
    }
    if reached_any {
        // A broker that takes connections but not kpress's Metadata request most likely
        // wants SASL first (and kpress has no [upstream.sasl], or it was refused). Serve
        // anyway: the nodes are learned from the Metadata responses relayed to clients.
        tracing::warn!(
            attempts = %attempts.join("; "),
            "no bootstrap server answered kpress's own Metadata request; serving the \
             bootstrap listener and learning broker nodes from client traffic"
        );
        return Ok(Vec::new());
    }
    Err(ProxyError::Bootstrap {
        attempts: attempts.join("; "),
    })
}

#[cfg(test)]
mod tests {
    //! `run`'s start and shutdown against a stand-in broker that answers kpress's
    //! Metadata request and then never answers anything (tests/proxy.rs runs a real
    //! broker).

    use super::*;
    use bytes::BytesMut;
    use kafka_protocol::messages::metadata_response::{MetadataResponse, MetadataResponseBroker};
    use kafka_protocol::messages::BrokerId;
    use kafka_protocol::protocol::{Encodable, StrBytes};
    use kpress_batch::RewritePolicy;
    use std::net::SocketAddr;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::{TcpListener, TcpStream};
    use tokio::sync::mpsc;

    const HEARTBEAT: i16 = kafka_protocol::messages::ApiKey::Heartbeat as i16;

    async fn read_request(stream: &mut TcpStream) -> Option<Vec<u8>> {
        let mut size = [0u8; 4];
        stream.read_exact(&mut size).await.ok()?;
        let mut body = vec![0u8; i32::from_be_bytes(size) as usize];
        stream.read_exact(&mut body).await.ok()?;
        Some(body)
    }

    /// Answers each Metadata request naming itself node 0; holds every other request
    /// forever. Reports each request's API key on `received`, if anyone listens.
    async fn silent_broker(listener: TcpListener, received: mpsc::UnboundedSender<i16>) {
        let port = listener.local_addr().unwrap().port();
        loop {
            let (mut stream, _) = listener.accept().await.unwrap();
            let received = received.clone();
            tokio::spawn(async move {
                while let Some(request) = read_request(&mut stream).await {
                    let api_key = i16::from_be_bytes([request[0], request[1]]);
                    let version = i16::from_be_bytes([request[2], request[3]]);
                    let _ = received.send(api_key);
                    if api_key != kpress_protocol::api_key::METADATA {
                        continue;
                    }
                    let mut body = BytesMut::new();
                    MetadataResponse::default()
                        .with_brokers(vec![MetadataResponseBroker::default()
                            .with_node_id(BrokerId(0))
                            .with_host(StrBytes::from_static_str("127.0.0.1"))
                            .with_port(i32::from(port))])
                        .encode(&mut body, version)
                        .unwrap();
                    let mut response = request[4..8].to_vec();
                    if version >= 9 {
                        response.push(0);
                    }
                    response.extend_from_slice(&body);
                    let mut frame = (response.len() as i32).to_be_bytes().to_vec();
                    frame.extend_from_slice(&response);
                    stream.write_all(&frame).await.unwrap();
                }
            });
        }
    }

    fn controls<F>(shutdown: F) -> Controls<F> {
        let policy = PolicySnapshot::rules_only(Arc::new(RewritePolicy::default()));
        Controls {
            shutdown,
            reload_tls: watch::channel(0).1,
            policies: watch::channel(policy).1,
            status: Arc::default(),
            topic_configs: Arc::new(TopicConfigCache::new(Duration::from_secs(30))),
        }
    }

    fn free_port() -> u16 {
        std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn shutdown_waits_out_the_grace_then_closes_what_is_left() {
        let broker = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let broker_addr = broker.local_addr().unwrap();
        let (received, mut broker_received) = mpsc::unbounded_channel();
        tokio::spawn(silent_broker(broker, received));
        let bind = SocketAddr::from(([127, 0, 0, 1], free_port()));
        let node_port_base = free_port();
        let mut settings = ProxySettings {
            shutdown_grace: Duration::from_secs(2),
            ..ProxySettings::for_tests(
                bind,
                "127.0.0.1".into(),
                node_port_base,
                vec![broker_addr.to_string()],
            )
        };
        settings.limits.max_frame_bytes = 1 << 20;
        settings.limits.max_inflight_bytes = 4 << 20;
        settings.limits.max_connection_inflight_bytes = 1 << 20;
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let proxy = tokio::spawn(run(
            settings,
            controls(async {
                let _ = stopped.await;
            }),
        ));
        let mut client = loop {
            if let Ok(stream) = TcpStream::connect(("127.0.0.1", node_port_base)).await {
                break stream;
            }
            assert!(!proxy.is_finished(), "kpress stopped: {:?}", proxy.await);
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        // A Heartbeat v3 the broker never answers: in flight at shutdown.
        let mut request = HEARTBEAT.to_be_bytes().to_vec();
        // Version 3, correlation id 1, null client id.
        request.extend_from_slice(&[0, 3, 0, 0, 0, 1, 0xff, 0xff]);
        request.extend_from_slice(b"body");
        let mut frame = (request.len() as i32).to_be_bytes().to_vec();
        frame.extend_from_slice(&request);
        client.write_all(&frame).await.unwrap();
        let forwarded = async {
            while let Some(api_key) = broker_received.recv().await {
                if api_key == HEARTBEAT {
                    return;
                }
            }
            panic!("the broker stand-in stopped");
        };
        tokio::time::timeout(Duration::from_secs(10), forwarded)
            .await
            .expect("the Heartbeat reached the broker");

        let started = std::time::Instant::now();
        stop.send(()).unwrap();
        // The ports close as shutdown begins, while the held request still has its
        // grace: a listener left open would queue connections nobody accepts.
        let closed = async {
            while TcpStream::connect(bind).await.is_ok()
                || TcpStream::connect(("127.0.0.1", node_port_base))
                    .await
                    .is_ok()
            {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        };
        tokio::time::timeout(Duration::from_secs(10), closed)
            .await
            .expect("listeners closed once shutdown began");
        assert!(!proxy.is_finished(), "closed only when run returned");
        tokio::time::timeout(Duration::from_secs(10), proxy)
            .await
            .expect("run returns after the grace")
            .unwrap()
            .unwrap();
        assert!(
            started.elapsed() >= Duration::from_secs(2),
            "did not wait for the grace"
        );
        // The listeners are gone and the held connection was closed.
        assert!(TcpStream::connect(bind).await.is_err());
        let mut rest = Vec::new();
        let closed =
            tokio::time::timeout(Duration::from_secs(5), client.read_to_end(&mut rest)).await;
        assert!(
            matches!(closed, Ok(Ok(0)) | Ok(Err(_))),
            "client not closed"
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn brokers_unreachable_at_start_are_waited_for() {
        let bind = SocketAddr::from(([127, 0, 0, 1], free_port()));
        let broker_port = free_port();
        let node_port_base = free_port();
        let settings = ProxySettings {
            shutdown_grace: Duration::from_millis(100),
            ..ProxySettings::for_tests(
                bind,
                "127.0.0.1".into(),
                node_port_base,
                vec![format!("127.0.0.1:{broker_port}")],
            )
        };
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let proxy = tokio::spawn(run(
            settings,
            controls(async {
                let _ = stopped.await;
            }),
        ));
        // kpress serves its bootstrap port although no broker answers yet.
        let served = async {
            while TcpStream::connect(bind).await.is_err() {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        };
        tokio::time::timeout(Duration::from_secs(5), served)
            .await
            .expect("bootstrap listener bound without a broker");
        assert!(!proxy.is_finished());
        // The broker comes up: its node gets a listener once kpress asks again.
        let broker = TcpListener::bind(("127.0.0.1", broker_port)).await.unwrap();
        tokio::spawn(silent_broker(broker, mpsc::unbounded_channel().0));
        let node_served = async {
            while TcpStream::connect(("127.0.0.1", node_port_base))
                .await
                .is_err()
            {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        };
        tokio::time::timeout(Duration::from_secs(10), node_served)
            .await
            .expect("node listener bound once the broker answered");
        stop.send(()).unwrap();
        tokio::time::timeout(Duration::from_secs(5), proxy)
            .await
            .unwrap()
            .unwrap()
            .unwrap();
    }

    #[tokio::test]
    async fn listeners_share_a_port_only_with_reuse_port() {
        let addr = SocketAddr::from(([127, 0, 0, 1], free_port()));
        let in_use = |result: Result<TcpListener, ProxyError>| match result {
            Err(ProxyError::Bind { source, .. }) => source.kind() == std::io::ErrorKind::AddrInUse,
            other => panic!("bound a port already served: {other:?}"),
        };
        let first = listeners::bind(addr, "bootstrap", true).unwrap();
        let second = listeners::bind(addr, "bootstrap", true).unwrap();
        assert!(in_use(listeners::bind(addr, "bootstrap", false)));
        // The first process stops: every new connection reaches the other.
        drop(first);
        for _ in 0..16 {
            let _client = TcpStream::connect(addr).await.unwrap();
            tokio::time::timeout(Duration::from_secs(5), second.accept())
                .await
                .expect("a connection stranded on the closed listener")
                .unwrap();
        }
        // A port served without reuse_port cannot be joined.
        let alone = SocketAddr::from(([127, 0, 0, 1], free_port()));
        let _only = listeners::bind(alone, "broker node 1", false).unwrap();
        assert!(in_use(listeners::bind(alone, "broker node 1", true)));
    }

    #[test]
    fn settings_that_cannot_work_are_refused() {
        let mut base = ProxySettings::for_tests(
            SocketAddr::from(([127, 0, 0, 1], 0)),
            "h".into(),
            20000,
            vec!["b:9092".into()],
        );
        base.limits.max_inflight_bytes = 2 * (100 << 20);
        assert!(validate(&base).is_ok());
        let mut no_servers = base.clone();
        no_servers.upstream.bootstrap_servers.clear();
        assert!(validate(&no_servers).is_err());
        let mut tiny_budget = base.clone();
        tiny_budget.limits.max_inflight_bytes = 1000;
        assert!(validate(&tiny_budget).is_err());
    }
}
