//! The kpress proxy: tokio I/O, and what kpress does per Kafka API.
//!
//! [`run`] learns the brokers from a bootstrap server, then serves a bootstrap listener
//! and one listener per broker node (node N on port `node_port_base + N`), or, in SNI
//! mode, every node on the bootstrap port under a TLS server name of its own. Every
//! client connection gets its own upstream connection: from the bootstrap to a
//! bootstrap server, from a node's listener (or name) to that node. Either side may be
//! TLS (`transport`); clients' SASL is relayed untouched, and kpress's own side
//! connections log in with credentials of their own. Frames are relayed as raw
//! bytes, in order, with correlation ids untouched. What kpress does beyond relaying is
//! decided per API by the [`handler`]s the proxy is built with ([`Handlers`], see
//! [`run_with`]): kpress's own recompress Produce batches into each topic's policy
//! codec (off the reactor), answer and cap ApiVersions, and rewrite every response that
//! carries broker addresses to kpress's, so no real broker address reaches a client.
//! All frames in flight share one memory budget, and CPU work in either direction one
//! set of work slots. With `[shadow]`, a sample of each topic's batches is also
//! trial-compressed with candidate codecs on low-priority threads, only to be counted
//! ([`shadow`]). The rules and the trials change live as one [`PolicySnapshot`]: each
//! Produce request is rewritten and sampled under one. [`ClusterClient`] is a Kafka
//! client for kpress's own questions to the cluster (`kpress doctor`).
//!
//! The Kafka parsing is in `kpress-protocol` (sans-IO) and the batch rewrite in
//! `kpress-batch`; this crate holds the I/O, the scheduling, the per-API handlers that
//! call into them, and the bookkeeping (metrics, budget).

mod apis;
mod autopilot;
mod budget;
mod cluster;
mod connection;
pub mod descriptors;
mod error;
mod frame_io;
pub mod handler;
mod handoff;
mod listeners;
pub mod metrics;
mod policy;
mod routing;
mod scheduler;
mod server;
mod settings;
pub mod shadow;
mod shared;
mod side;
mod status;
#[cfg(test)]
mod test_policies;
#[cfg(test)]
mod tests;
pub mod tls;
mod topic_configs;
mod topic_ids;
mod topic_labels;
mod transport;

pub use apis::fetch::seen::{Handling as ConsumerHandling, SeenConsumer, SeenConsumers};
pub use autopilot::{
    replica_id, Autopilot, AutopilotStatus, Collector, FleetLink, FleetStore, StoreError,
    TopicStatus,
};
pub use error::ProxyError;
pub use handler::Handlers;
pub use kpress_config::{HostPattern, NodeRouting};
pub use kpress_protocol::sasl::Mechanism as SaslMechanism;
pub use kpress_protocol::{ConfigEntry, ConfigSource, TopicConfigs};
pub use policy::PolicySnapshot;
pub use server::{run, run_with, Controls};
pub use settings::{
    LimitSettings, ListenerSettings, ProduceSettings, ProxySettings, SaslLogin, UpstreamSettings,
};
pub use shadow::ShadowTrials;
pub use side::{
    probe_upstream, AdvertisedBroker, ApiMaxVersions, ClusterClient, ClusterClientError,
    ClusterConnector, ClusterView, ProbeError, Reachability, Stage,
};
pub use status::ProxyStatus;
pub use topic_configs::{
    topic_compression_of, LearnedTopic, TopicConfigCache, TOPIC_CONFIG_CAPACITY,
};
