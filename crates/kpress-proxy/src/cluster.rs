//! What kpress knows about the cluster behind it: each broker node's real address,
//! which nodes already have a kpress listener, and the names of topic ids. Filled at
//! start and from every response kpress rewrites; read by every connection.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::{Duration, Instant};

use kpress_protocol::ResponseObserver;

use crate::error::ProxyError;
use kpress_config::NodeRouting;

/// A broker's real address, as the broker advertised it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct BrokerAddress {
    pub(crate) host: String,
    pub(crate) port: u16,
}

impl fmt::Display for BrokerAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.host, self.port)
    }
}

/// The port kpress serves node `node_id` on: `node_port_base + node_id`.
pub(crate) fn node_port(node_port_base: u16, node_id: i32) -> Result<u16, ProxyError> {
    u16::try_from(i64::from(node_port_base) + i64::from(node_id))
        .ok()
        .filter(|_| node_id >= 0)
        .ok_or(ProxyError::NodePortOverflow {
            node_id,
            node_port_base,
        })
}

/// How long a topic id no Metadata could name is not asked about again: a deleted
/// topic would otherwise cost a Metadata round trip on every Produce naming it.
pub(crate) const UNRESOLVED_RETRY_AFTER: Duration = Duration::from_secs(30);

/// Topic ids remembered as unnamed at most; past it, expired entries go, and if none
/// has expired the set starts over (ids are then asked about once more).
pub(crate) const UNRESOLVED_CAPACITY: usize = 10_000;

/// Shared knowledge of the cluster. Locks are held only for map operations.
#[derive(Debug)]
pub(crate) struct Cluster {
    routing: NodeRouting,
    nodes: RwLock<HashMap<i32, BrokerAddress>>,
    /// Nodes with a bound listener; held while binding, so no response naming a node
    /// is relayed before its port is served.
    listening: Mutex<HashSet<i32>>,
    topic_names: RwLock<HashMap<[u8; 16], Arc<str>>>,
    /// Names the brokers' Metadata gave (those topics get metric labels).
    named_topics: RwLock<HashSet<Arc<str>>>,
    /// Topic ids kpress asked the broker about in vain, and when.
    unresolved: Mutex<HashMap<[u8; 16], Instant>>,
}

impl Cluster {
    pub(crate) fn new(routing: NodeRouting) -> Cluster {
        Cluster {
            routing,
            nodes: RwLock::default(),
            listening: Mutex::default(),
            topic_names: RwLock::default(),
            named_topics: RwLock::default(),
            unresolved: Mutex::default(),
        }
    }

    /// How nodes are handed out to clients.
    pub(crate) fn routing(&self) -> &NodeRouting {
        &self.routing
    }

    pub(crate) fn node_address(&self, node_id: i32) -> Option<BrokerAddress> {
        self.nodes
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&node_id)
            .cloned()
    }

    pub(crate) fn topic_name(&self, id: &[u8; 16]) -> Option<Arc<str>> {
        self.topic_names
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(id)
            .cloned()
    }

    /// The ids among `ids` worth asking the broker about: not asked in vain lately.
    pub(crate) fn ids_to_resolve(&self, ids: &[[u8; 16]]) -> Vec<[u8; 16]> {
        let unresolved = self
            .unresolved
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        ids.iter()
            .filter(|id| {
                unresolved
                    .get(*id)
                    .is_none_or(|asked| asked.elapsed() >= UNRESOLVED_RETRY_AFTER)
            })
            .copied()
            .collect()
    }

    /// Notes which of `ids` are still unnamed after asking the broker.
    pub(crate) fn note_unresolved(&self, ids: &[[u8; 16]]) {
        let now = Instant::now();
        let mut unresolved = self
            .unresolved
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if unresolved.len() + ids.len() > UNRESOLVED_CAPACITY {
            unresolved.retain(|_, asked| asked.elapsed() < UNRESOLVED_RETRY_AFTER);
            if unresolved.len() + ids.len() > UNRESOLVED_CAPACITY {
                unresolved.clear();
            }
        }
        for id in ids.iter().take(UNRESOLVED_CAPACITY) {
            if self.topic_name(id).is_none() {
                unresolved.insert(*id, now);
            } else {
                unresolved.remove(id);
            }
        }
    }

    /// Whether the brokers' Metadata named a topic `name`.
    pub(crate) fn is_named_topic(&self, name: &str) -> bool {
        self.named_topics
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .contains(name)
    }

    /// Forgets the names of `deleted` topics, so they give up their metric labels.
    pub(crate) fn forget_named_topics(&self, deleted: impl Fn(&str) -> bool) {
        self.named_topics
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .retain(|name| !deleted(name));
    }

    /// A topic the brokers' Metadata answered: it may carry a metric label from the
    /// first request, before topic mode's refresh lists it.
    fn record_named_topic(&self, name: &str) {
        if self.is_named_topic(name) {
            return;
        }
        self.named_topics
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(Arc::from(name));
    }

    fn record_topic(&self, id: [u8; 16], name: &str) {
        let known = self.topic_name(&id);
        if known.as_deref() != Some(name) {
            let name: Arc<str> = Arc::from(name);
            self.topic_names
                .write()
                .unwrap_or_else(PoisonError::into_inner)
                .insert(id, Arc::clone(&name));
            self.named_topics
                .write()
                .unwrap_or_else(PoisonError::into_inner)
                .insert(name);
        }
    }

    fn record_node(&self, node_id: i32, address: BrokerAddress) {
        let known = self.node_address(node_id);
        if known.as_ref() != Some(&address) {
            tracing::info!(node_id, %address, "learned broker node address");
            self.nodes
                .write()
                .unwrap_or_else(PoisonError::into_inner)
                .insert(node_id, address);
        }
    }

    /// The nodes with a listener, locked: whoever binds a node's listener holds this
    /// until the listener is bound, so others wait rather than hand out its port early.
    pub(crate) fn listeners(&self) -> std::sync::MutexGuard<'_, HashSet<i32>> {
        self.listening
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn has_listener(&self, node_id: i32) -> bool {
        self.listening
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .contains(&node_id)
    }
}

/// Binds listeners for broker nodes kpress has just learned of. Synchronous, so a
/// response naming a node can wait for its port to be served before it is relayed.
pub(crate) trait NodeListeners: Send + Sync {
    /// Binds a listener for every node in `nodes` that has none yet.
    fn ensure(&self, nodes: &[i32]) -> Result<(), ProxyError>;
}

/// The [`ResponseObserver`] for every response kpress rewrites: records real node
/// addresses and topic ids, and hands out kpress's address for each node.
#[derive(Debug)]
pub(crate) struct AddressObserver<'a> {
    cluster: &'a Cluster,
    /// Nodes seen without a kpress listener yet: bind them before the response is
    /// relayed, so a client never connects to a port nobody serves.
    pub(crate) nodes_without_listener: Vec<i32>,
    /// Nodes kpress cannot serve; the response must not be relayed.
    pub(crate) problems: Vec<ProxyError>,
}

impl<'a> AddressObserver<'a> {
    pub(crate) fn new(cluster: &'a Cluster) -> AddressObserver<'a> {
        AddressObserver {
            cluster,
            nodes_without_listener: Vec::new(),
            problems: Vec::new(),
        }
    }
}

/// What a client gets for a node kpress does not serve: no address at all, as the
/// broker itself writes for "no node" (node -1, empty host, port -1).
fn no_address() -> (String, i32) {
    (String::new(), -1)
}

impl ResponseObserver for AddressObserver<'_> {
    fn broker(&mut self, node_id: i32, host: &str, port: i32) -> (String, i32) {
        if node_id < 0 {
            // "No node" (e.g. FindCoordinator with an error): there is nothing to serve.
            return no_address();
        }
        let handed_out = match &self.cluster.routing {
            NodeRouting::Ports {
                advertised_host,
                node_port_base,
            } => match node_port(*node_port_base, node_id) {
                Ok(port) => (advertised_host.clone(), i32::from(port)),
                Err(err) => {
                    self.problems.push(err);
                    return no_address();
                }
            },
            NodeRouting::Sni {
                advertised_host_pattern,
                advertised_port,
                ..
            } => match advertised_host_pattern.host(node_id) {
                Some(host) => (host, i32::from(*advertised_port)),
                None => return no_address(),
            },
        };
        match u16::try_from(port) {
            Ok(port) => {
                self.cluster.record_node(
                    node_id,
                    BrokerAddress {
                        host: host.to_owned(),
                        port,
                    },
                );
                let needs_listener = matches!(self.cluster.routing, NodeRouting::Ports { .. });
                if needs_listener
                    && !self.cluster.has_listener(node_id)
                    && !self.nodes_without_listener.contains(&node_id)
                {
                    self.nodes_without_listener.push(node_id);
                }
            }
            // An unusable real port: kpress's address for the node is handed out anyway
            // (a connection to it will fail with a log line), never the broker's.
            Err(_) => tracing::warn!(node_id, host, port, "broker advertised an invalid port"),
        }
        handed_out
    }

    fn topic(&mut self, id: [u8; 16], name: &str) {
        self.cluster.record_topic(id, name);
    }

    fn named_topic(&mut self, name: &str) {
        self.cluster.record_named_topic(name);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kpress_config::HostPattern;

    fn ports(host: &str, node_port_base: u16) -> NodeRouting {
        NodeRouting::Ports {
            advertised_host: host.into(),
            node_port_base,
        }
    }

    #[test]
    fn in_sni_mode_nodes_get_names_on_one_port_and_no_listener() {
        let cluster = Cluster::new(NodeRouting::Sni {
            advertised_host_pattern: HostPattern::new("broker-{node}.kafka.test").unwrap(),
            bootstrap_host: None,
            advertised_port: 9093,
        });
        let mut observer = AddressObserver::new(&cluster);
        assert_eq!(
            observer.broker(2, "10.0.0.2", 9092),
            ("broker-2.kafka.test".to_owned(), 9093)
        );
        assert!(observer.nodes_without_listener.is_empty());
        assert_eq!(
            cluster.node_address(2).unwrap().to_string(),
            "10.0.0.2:9092"
        );
    }

    #[test]
    fn node_ports_are_base_plus_id_and_overflow_is_an_error() {
        assert_eq!(node_port(19100, 0).unwrap(), 19100);
        assert_eq!(node_port(19100, 7).unwrap(), 19107);
        assert_eq!(node_port(65535, 0).unwrap(), 65535);
        assert!(matches!(
            node_port(65535, 1),
            Err(ProxyError::NodePortOverflow { node_id: 1, .. })
        ));
        assert!(node_port(100, -1).is_err());
        assert!(node_port(0, i32::MAX).is_err());
    }

    #[test]
    fn observer_records_real_address_and_hands_out_kpress_address() {
        let cluster = Cluster::new(ports("kpress.local", 20000));
        let mut observer = AddressObserver::new(&cluster);
        assert_eq!(
            observer.broker(3, "10.0.0.3", 9092),
            ("kpress.local".to_owned(), 20003)
        );
        assert_eq!(observer.broker(-1, "leak", 1), (String::new(), -1));
        observer.topic([7; 16], "orders");
        assert_eq!(observer.nodes_without_listener, vec![3]);
        assert!(observer.problems.is_empty());
        assert_eq!(
            cluster.node_address(3),
            Some(BrokerAddress {
                host: "10.0.0.3".into(),
                port: 9092
            })
        );
        assert_eq!(cluster.topic_name(&[7; 16]).as_deref(), Some("orders"));
        assert!(cluster.is_named_topic("orders"));
        assert!(cluster.listeners().insert(3));
        let mut again = AddressObserver::new(&cluster);
        again.broker(3, "10.0.0.3", 9092);
        assert!(again.nodes_without_listener.is_empty());
    }

    #[test]
    fn ids_asked_in_vain_are_not_asked_again_soon() {
        let cluster = Cluster::new(ports("kpress.local", 20000));
        let (a, b) = ([1; 16], [2; 16]);
        assert_eq!(cluster.ids_to_resolve(&[a, b]), vec![a, b]);
        AddressObserver::new(&cluster).topic(b, "named");
        cluster.note_unresolved(&[a, b]);
        assert_eq!(cluster.ids_to_resolve(&[a]), Vec::<[u8; 16]>::new());
        assert_eq!(cluster.ids_to_resolve(&[b]), vec![b]);
    }

    #[test]
    fn the_unresolved_set_is_bounded() {
        let cluster = Cluster::new(ports("kpress.local", 20000));
        let id = |i: u32| {
            let mut id = [0u8; 16];
            id[..4].copy_from_slice(&i.to_be_bytes());
            id
        };
        let first: Vec<_> = (0..UNRESOLVED_CAPACITY as u32).map(id).collect();
        cluster.note_unresolved(&first);
        assert!(cluster.ids_to_resolve(&first[..10]).is_empty());
        // More than fit: the set starts over rather than grow.
        let more: Vec<_> = (0..100).map(|i| id(1_000_000 + i)).collect();
        cluster.note_unresolved(&more);
        assert!(cluster.unresolved.lock().unwrap().len() <= UNRESOLVED_CAPACITY);
        assert!(cluster.ids_to_resolve(&more).is_empty());
    }

    #[test]
    fn observer_never_leaks_an_address_it_cannot_serve() {
        let cluster = Cluster::new(ports("kpress.local", 65530));
        let mut observer = AddressObserver::new(&cluster);
        assert_eq!(observer.broker(10, "10.0.0.10", 9092), (String::new(), -1));
        assert_eq!(observer.problems.len(), 1);
        assert_eq!(cluster.node_address(10), None);
    }
}
