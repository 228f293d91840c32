//! The sans-IO Kafka protocol layer of the kpress proxy: bytes in, bytes out,
//! no sockets. The tokio proxy (`kpress-proxy`) frames the connections and
//! calls in here for the few messages kpress changes; everything else is
//! relayed as raw bytes.
//!
//! # Per-API facts
//!
//! [`api`] is the one registry of what kpress knows per API key: the first
//! flexible version, the versions kpress parses, from which version
//! responses carry broker node addresses, and from which version record
//! batches may be zstd. Frame headers, the ApiVersions cap, every parser and
//! the zstd check of Produce ([`produce_allows_zstd`]) read their versions
//! from it.
//!
//! # Requests (from clients: hostile input)
//!
//! - [`produce_acks`]: `acks` of a Produce request (acks=0 gets no response).
//! - [`produce_allows_zstd`]: whether a Produce version may carry zstd batches.
//! - [`rewrite_produce_with`]: each partition's records of a Produce request
//!   (v3-v13) go through a [`RecordsRewriter`] (kpress-proxy's recompresses
//!   them with the topic's policy); returns the new request frame (size
//!   prefix, header, body), ready to write, or `None` to forward the
//!   original. v13 topic ids without a known name are listed (at most
//!   [`MAX_UNKNOWN_TOPIC_IDS`], the rest counted) and left untouched.
//!   Hostile counts and lengths are errors, never allocations.
//! - [`upgrade_fetch_request`]: a Fetch request (v4-v11) re-encoded at a later
//!   non-flexible version, with Kafka's defaults for the fields it lacks.
//! - [`answer_unsupported_api_versions`]: an ApiVersions request newer than
//!   kpress parses is answered by kpress itself, as a broker answers a
//!   version it does not know, so the client retries with an older one.
//! - [`api_versions_client_software`]: the client software an ApiVersions
//!   v3+ request names (KIP-511), as sent.
//!
//! # Responses (from the broker)
//!
//! - [`rewrites_response`]: whether a response kind may need rewriting.
//! - [`rewrite_response`]: rewrites the body (after the response header):
//!   every broker address (Metadata, FindCoordinator, DescribeCluster, KIP-951
//!   NodeEndpoints in Produce v10+ and Fetch v16+, KIP-932 NodeEndpoints in
//!   ShareFetch and ShareAcknowledge v1) becomes the address the
//!   [`ResponseObserver`] returns; Metadata topic ids are reported to it;
//!   ApiVersions max versions are capped to what kpress parses
//!   ([`PARSED_MAX_VERSIONS`], lowered further by
//!   [`ResponseObserver::max_version`]). ApiVersions responses always use
//!   response header v0, and a broker refusing the requested ApiVersions
//!   version answers in the v0 body format ([`api_versions_body_version`]).
//! - [`fetch_response_records`], [`DecodedFetchResponse`]: each partition's
//!   records of a Fetch response (v4 up, topics by name or by id), and the
//!   response written back with some records replaced: a non-flexible one at
//!   another non-flexible version, a flexible one at its own, every other byte
//!   as read.
//! - [`metadata_request`]: a whole Metadata request frame for kpress's own
//!   calls (learning brokers, naming v13 topic ids).
//! - [`request_frame`] and [`decode_response`]: any other request of kpress's
//!   own as its kafka-protocol type, and its answer decoded once a walk has
//!   checked its counts ([`GuardedResponse`]: ApiVersions, DescribeConfigs, and for
//!   kpress's own topics CreateTopics ([`create_topic_request`]), Metadata
//!   ([`metadata_topics_request`]), Produce v3-v8 ([`produce_request`]) and Fetch
//!   v4-v11 ([`fetch_partition_request`])).
//!
//! # Node addresses kpress leaves alone
//!
//! Of the responses in Kafka 4.1's message specs that carry a host and port,
//! these are relayed unchanged:
//!
//! - DescribeQuorum v2+ (`nodes[].listeners`): the KRaft controllers'
//!   listeners. kpress proxies brokers, not controllers; the admin client
//!   (behind `kafka-metadata-quorum.sh`) reports these addresses and does not
//!   connect to them.
//! - Vote, BeginQuorumEpoch, EndQuorumEpoch and FetchSnapshot
//!   (`NodeEndpoints`), and UpdateRaftVoter (`CurrentLeader`): controller
//!   listener APIs, which a broker listener refuses, so no client reaches
//!   them through kpress.
//! - StreamsGroupHeartbeat and StreamsGroupDescribe (`Endpoint`): the Kafka
//!   Streams instances' own application endpoints, not broker addresses.
//! - DescribeAcls and DeleteAcls `host`: an ACL's client host pattern.
//!
//! # Errors
//!
//! [`ProtocolError::fault`] says whose fault a failure is ([`Fault::Client`],
//! [`Fault::Broker`], [`Fault::Proxy`]). Whatever the fault, the original bytes
//! are intact: forward them untouched.
//!
//! # Frames
//!
//! [`frame`] (size-prefixed frames, request header peeking) belongs to the
//! proxy's I/O side.

pub mod api;
pub mod api_key;
mod api_versions;
mod cluster;
mod coordinator;
mod create_topics;
mod describe_configs;
mod endpoints;
mod error;
pub mod error_code;
mod fetch;
pub mod frame;
mod metadata;
mod partition_requests;
mod produce;
mod produce_response;
mod response;
mod rewriting;
pub mod sasl;
mod typed;
mod wire;

pub use api_versions::{
    answer_unsupported_api_versions, api_versions_body_version, api_versions_client_software,
    API_VERSIONS_MAX_VERSION, PARSED_MAX_VERSIONS,
};
pub use create_topics::{
    create_topic_request, CREATE_TOPICS_MAX_VERSION, CREATE_TOPICS_MIN_VERSION,
};
pub use describe_configs::{
    describe_configs_version, describe_topic_configs_request, parse_describe_configs_response,
    topic_configs, ConfigEntry, ConfigSource, TopicConfigs, DESCRIBE_CONFIGS_MAX_VERSION,
    DESCRIBE_CONFIGS_MIN_VERSION,
};
pub use error::{Fault, ProtocolError, WireError};
pub use fetch::{
    fetch_response_records, upgrade_fetch_request, DecodedFetchResponse, FetchTopic,
    FETCH_FIRST_FLEXIBLE_VERSION, FETCH_FIRST_SESSION_VERSION, FETCH_FIRST_TOPIC_ID_VERSION,
    FETCH_LAST_CLASSIC_VERSION, FETCH_MAX_VERSION, FETCH_MIN_VERSION,
};
pub use metadata::metadata_request;
pub use partition_requests::{fetch_partition_request, metadata_topics_request};
pub use produce::{
    produce_acks, produce_allows_zstd, rewrite_produce_with, ProduceSplice, RecordsRewriter,
    MAX_UNKNOWN_TOPIC_IDS, PRODUCE_MAX_VERSION, PRODUCE_MIN_VERSION,
};
pub use produce_response::{produce_request, PRODUCE_LAST_CLASSIC_VERSION};
pub use response::{rewrite_response, rewrites_response};
pub use rewriting::ResponseObserver;
pub use typed::{decode_response, request_frame, GuardedResponse};
