//! The autopilot's ways to the cluster: the fleet store, through which replicas share
//! figures and decisions.

pub(crate) mod collector;
pub(crate) mod metrics;
pub(crate) mod pilot;
pub(crate) mod store;

pub use collector::Collector;
pub use pilot::{replica_id, Autopilot, AutopilotStatus, FleetLink, TopicStatus};
pub use store::{FleetStore, StoreError};
