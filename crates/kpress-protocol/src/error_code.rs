//! Kafka error codes (`common/protocol/Errors.java`) that kpress answers with or reads,
//! each stated once.

/// No error.
pub const NONE: i16 = 0;
/// The offset asked for is outside the partition's log.
pub const OFFSET_OUT_OF_RANGE: i16 = 1;
/// The topic or partition does not exist on the broker.
pub const UNKNOWN_TOPIC_OR_PARTITION: i16 = 3;
/// The partition has no leader right now (an election is under way).
pub const LEADER_NOT_AVAILABLE: i16 = 5;
/// The broker asked is not the partition's leader (any more).
pub const NOT_LEADER_OR_FOLLOWER: i16 = 6;
/// The principal may not access the topic.
pub const TOPIC_AUTHORIZATION_FAILED: i16 = 29;
/// The principal may not perform the cluster operation.
pub const CLUSTER_AUTHORIZATION_FAILED: i16 = 31;
/// The broker does not support the request's version.
pub const UNSUPPORTED_VERSION: i16 = 35;
/// A topic of that name exists already.
pub const TOPIC_ALREADY_EXISTS: i16 = 36;
