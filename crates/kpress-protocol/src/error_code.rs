//! Kafka error codes (`common/protocol/Errors.java`) that kpress answers with or reads,
//! each stated once.

/// No error.
pub const NONE: i16 = 0;
/// The topic or partition does not exist on the broker.
pub const UNKNOWN_TOPIC_OR_PARTITION: i16 = 3;
/// The principal may not access the topic.
pub const TOPIC_AUTHORIZATION_FAILED: i16 = 29;
/// The principal may not perform the cluster operation.
pub const CLUSTER_AUTHORIZATION_FAILED: i16 = 31;
/// The broker does not support the request's version.
pub const UNSUPPORTED_VERSION: i16 = 35;
