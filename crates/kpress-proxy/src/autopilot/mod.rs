//! The autopilot's ways to the cluster: the fleet store, through which replicas share
//! figures and decisions.

pub(crate) mod store;

pub use store::{FleetStore, StoreError};
