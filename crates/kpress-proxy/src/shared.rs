//! State every listener and connection shares, one struct per concern: the policy, what
//! kpress knows of the cluster and its own requests to it, the limits, the memory
//! budget, the work slots, the transport and the lifecycle (status, shutdown).
//! Listeners and their connections' lifecycle are `listeners.rs`'s; the handlers per
//! API are given to them, not kept here, and see this state only through their
//! connection's context.

use std::fmt;
use std::net::IpAddr;
use std::sync::Arc;

use kpress_protocol::frame::SIZE_PREFIX_LEN;
use tokio::sync::watch;

use crate::budget::{Budget, ConnectionPool, Direction};
use crate::cluster::Cluster;
use crate::error::{ConnectionError, ProxyError};
use crate::frame_io::FrameLimits;
use crate::metrics::{self, OTHER_TOPICS};
use crate::policy::PolicySnapshot;
use crate::routing::SniRouting;
use crate::scheduler::Scheduler;
use crate::settings::{LimitSettings, ProduceSettings, ProxySettings};
use crate::side::SideChannel;
use crate::status::ProxyStatus;
use crate::tls::{ClientTls, ServerTls};
use crate::topic_configs::{self, TopicConfigCache};
use crate::topic_ids::TopicIdResolver;
use crate::topic_labels::TopicLabels;
use crate::transport::{self, Acceptor, Connector, Stream, UpstreamTarget};

/// Everything the proxy's tasks share, by concern.
pub(crate) struct Shared {
    /// The policy in force and what it decides per connection.
    pub(crate) policy: PolicyState,
    /// What kpress knows of the cluster: nodes, their listeners, topic names.
    pub(crate) cluster: Arc<Cluster>,
    /// kpress's own connections to the cluster, for its own requests.
    pub(crate) side: Arc<SideChannel>,
    /// Names Produce v13 topic ids, asking on the side channel; handlers reach it
    /// through their connection context.
    pub(crate) topic_ids: TopicIdResolver,
    /// The cluster's topics and their own compression configs (topic mode, labels).
    pub(crate) topic_configs: Arc<TopicConfigCache>,
    /// What every connection works within.
    pub(crate) limits: LimitSettings,
    /// How Produce requests are rewritten.
    pub(crate) produce: ProduceSettings,
    /// The bytes of all frames in flight.
    pub(crate) budget: Budget,
    /// The global slots for CPU work off the async threads (one per CPU: the work is
    /// CPU-bound, so more at once would only add blocking threads and their buffers),
    /// shared fairly between topics and connections, and as many express slots for
    /// cheap work, so that it never waits for an expensive rewrite to end.
    pub(crate) work_slots: Scheduler,
    /// How clients are accepted and brokers reached.
    pub(crate) transport: Transport,
    pub(crate) lifecycle: Lifecycle,
}

/// The policy in force, and the settings that go with it.
pub(crate) struct PolicyState {
    /// The binary swaps in a new snapshot on reload.
    policies: watch::Receiver<PolicySnapshot>,
    pub(crate) topic_labels: TopicLabels,
}

impl PolicyState {
    /// The policy in force now: one snapshot serves a whole Produce request, its
    /// rewrite and its shadow sampling.
    pub(crate) fn snapshot(&self) -> PolicySnapshot {
        self.policies.borrow().clone()
    }

    /// A receiver of the snapshots to come (the topic config task refreshes on each).
    pub(crate) fn subscribe(&self) -> watch::Receiver<PolicySnapshot> {
        let mut receiver = self.policies.clone();
        receiver.mark_unchanged();
        receiver
    }

    /// Whether a rule names `topic` (the brokers may, too: see
    /// [`Shared::is_known_topic`]).
    fn has_rule_for(&self, topic: &str) -> bool {
        self.policies.borrow().rules.has_rule_for(topic)
    }
}

/// How client connections are taken and broker connections opened.
pub(crate) struct Transport {
    /// Plain or TLS, by port or by SNI name.
    pub(crate) acceptor: Acceptor,
    /// Plain or TLS.
    pub(crate) connector: Connector,
    listener_tls: Option<Arc<ServerTls>>,
    upstream_tls: Option<Arc<ClientTls>>,
    bootstrap_servers: Vec<String>,
    pub(crate) listen_ip: IpAddr,
    /// Node listeners share their ports with other kpress processes (`SO_REUSEPORT`).
    pub(crate) reuse_port: bool,
}

/// Health, shutdown and the count of open connections.
pub(crate) struct Lifecycle {
    pub(crate) status: Arc<ProxyStatus>,
    /// Becomes true when shutdown begins: stop accepting, finish in-flight requests.
    pub(crate) shutdown: watch::Receiver<bool>,
    /// Becomes true when the shutdown grace is over: close whatever is left.
    pub(crate) abort: watch::Receiver<bool>,
    pub(crate) open_connections: watch::Sender<usize>,
}

impl fmt::Debug for Shared {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Shared")
            .field("cluster", &self.cluster)
            .field("budget", &self.budget)
            .field("limits", &self.limits)
            .field("bootstrap_servers", &self.transport.bootstrap_servers)
            .field("listen_ip", &self.transport.listen_ip)
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
    pub(crate) policies: watch::Receiver<PolicySnapshot>,
    pub(crate) status: Arc<ProxyStatus>,
    pub(crate) topic_configs: Arc<TopicConfigCache>,
    pub(crate) settings: ProxySettings,
}

impl SharedConfig {
    /// Fixed rules (no shadow trials) and fresh status, for in-crate tests.
    #[cfg(test)]
    pub(crate) fn for_tests(
        rules: Arc<dyn kpress_batch::PolicyLookup>,
        settings: ProxySettings,
    ) -> SharedConfig {
        SharedConfig {
            policies: watch::channel(PolicySnapshot::rules_only(rules)).1,
            status: Arc::default(),
            topic_configs: Arc::new(TopicConfigCache::new(std::time::Duration::from_secs(30))),
            settings,
        }
    }
}

impl fmt::Debug for SharedConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SharedConfig")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

/// How much CPU work off the async threads runs at once: one per CPU.
pub(crate) fn work_threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

impl Shared {
    /// The shared state of a proxy; loads the TLS files the settings name.
    pub(crate) fn new(config: SharedConfig) -> Result<(Arc<Shared>, ShutdownControl), ProxyError> {
        let (shutdown_tx, shutdown_rx) = watch::channel(false);
        let (abort_tx, abort_rx) = watch::channel(false);
        let (open_tx, open_rx) = watch::channel(0);
        let ProxySettings {
            listener,
            upstream,
            limits,
            produce,
            shutdown_grace: _,
        } = config.settings;
        let listener_tls = listener.tls.map(ServerTls::load).transpose()?.map(Arc::new);
        let upstream_tls = ClientTls::load_shared(upstream.tls.clone())?;
        let sni = SniRouting::of(&listener.routing);
        let budget = Budget::new(limits.max_inflight_bytes);
        let connector = Connector::new(upstream_tls.clone());
        let cluster = Arc::new(Cluster::new(listener.routing));
        let side = Arc::new(SideChannel::new(
            &upstream,
            &limits,
            connector.clone(),
            budget.pool(Direction::Response).clone(),
            Arc::clone(&config.status),
        ));
        let shared = Arc::new(Shared {
            policy: PolicyState {
                policies: config.policies,
                topic_labels: TopicLabels::new(limits.max_topic_labels),
            },
            topic_ids: TopicIdResolver::new(Arc::clone(&cluster), Arc::clone(&side)),
            cluster,
            side,
            topic_configs: config.topic_configs,
            limits,
            produce,
            budget,
            work_slots: Scheduler::new(work_threads()),
            transport: Transport {
                acceptor: Acceptor::new(listener_tls.clone(), sni),
                connector,
                listener_tls,
                upstream_tls,
                bootstrap_servers: upstream.bootstrap_servers,
                listen_ip: listener.bind.ip(),
                reuse_port: listener.reuse_port,
            },
            lifecycle: Lifecycle {
                status: config.status,
                shutdown: shutdown_rx,
                abort: abort_rx,
                open_connections: open_tx,
            },
        });
        let control = ShutdownControl {
            shutdown: shutdown_tx,
            abort: abort_tx,
            open_connections: open_rx,
        };
        Ok((shared, control))
    }

    pub(crate) fn bootstrap_servers(&self) -> &[String] {
        &self.transport.bootstrap_servers
    }

    /// Starts the task that keeps the topic-config cache filled on the side channel;
    /// topics the cluster no longer has lose their names and metric labels.
    pub(crate) fn start_topic_configs(self: &Arc<Shared>) {
        let weak = Arc::downgrade(self);
        topic_configs::refresh::spawn(
            Arc::clone(&self.topic_configs),
            Arc::clone(&self.side),
            self.policy.subscribe(),
            self.lifecycle.shutdown.clone(),
            move |deleted| {
                let Some(shared) = weak.upgrade() else { return };
                // Only topics kpress itself saw go: one its principal may not list
                // keeps the name clients' Metadata gave it.
                shared
                    .cluster
                    .forget_named_topics(|topic| deleted.contains(topic));
                shared
                    .policy
                    .topic_labels
                    .forget_unknown(|topic| shared.is_known_topic(topic));
                crate::apis::produce::metrics::forget_series(|label| {
                    label == OTHER_TOPICS || shared.is_known_topic(label)
                });
            },
        );
    }

    /// How frames are read and written, in either direction.
    pub(crate) fn frame_limits(&self) -> FrameLimits {
        FrameLimits {
            max_frame_bytes: self.limits.max_frame_bytes,
            frame_timeout: self.limits.frame_timeout,
        }
    }

    /// A new connection's share of the `direction` pool (its frames' size prefixes
    /// on top of the configured bytes).
    pub(crate) fn connection_pool(&self, direction: Direction) -> ConnectionPool {
        ConnectionPool::new(
            self.budget.pool(direction),
            self.limits.max_connection_inflight_bytes + SIZE_PREFIX_LEN,
        )
    }

    pub(crate) fn is_shutting_down(&self) -> bool {
        *self.lifecycle.shutdown.borrow()
    }

    /// Whether a rule or the brokers name `topic` (it may get a metric label).
    pub(crate) fn is_known_topic(&self, topic: &str) -> bool {
        self.policy.has_rule_for(topic)
            || self.cluster.is_named_topic(topic)
            || self.topic_configs.is_cluster_topic(topic)
    }

    /// Opens the upstream connection for a client of `target`: a bootstrap server, or
    /// the address a broker advertised for the node. Never anywhere else.
    pub(crate) async fn connect_upstream(
        &self,
        target: &UpstreamTarget,
    ) -> Result<Stream, ConnectionError> {
        match target {
            UpstreamTarget::Bootstrap => {
                transport::connect_any(&self.transport.connector, self.bootstrap_servers()).await
            }
            UpstreamTarget::Node(id) => {
                let address = self
                    .cluster
                    .node_address(*id)
                    .ok_or(ConnectionError::UnknownNode(*id))?;
                self.transport.connector.connect(&address.to_string()).await
            }
        }
    }

    /// Re-reads the TLS files of both sides; what does not load leaves the files in
    /// force, with a log line and a count.
    pub(crate) fn reload_tls(&self) {
        let sides = [
            (
                "listener",
                self.transport.listener_tls.as_ref().map(|t| t.reload()),
            ),
            (
                "upstream",
                self.transport.upstream_tls.as_ref().map(|t| t.reload()),
            ),
        ];
        for (side, reloaded) in sides {
            let Some(reloaded) = reloaded else { continue };
            let result = match reloaded {
                Ok(result) => {
                    if result == crate::tls::Reloaded::Changed {
                        tracing::info!(side, "TLS certificates reloaded: new handshakes use them");
                    }
                    result
                }
                Err(err) => {
                    tracing::error!(
                        side,
                        error = %err,
                        "TLS certificates not reloaded: keeping the ones in force"
                    );
                    crate::tls::Reloaded::Failed
                }
            };
            metrics::tls_reload(side, result.as_str());
        }
    }
}
