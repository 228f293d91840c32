//! Broker responses kpress must change: every broker address it hands out
//! becomes a kpress address, and ApiVersions is capped to what kpress parses.
//!
//! Each response kind lives in its own module; this one only dispatches, by the kind
//! the registry ([`crate::api`]) names for the API.

use bytes::BytesMut;

use crate::api::{self, ResponseRewrite};
use crate::error::ProtocolError;
use crate::rewriting::ResponseObserver;
use crate::{api_versions, cluster, coordinator, endpoints, metadata};

/// Whether a response to `api_key` at `api_version` may need rewriting; the
/// proxy relays every other response without looking at it.
pub fn rewrites_response(api_key: i16, api_version: i16) -> bool {
    crate::api::rewrites_response(api_key, api_version)
}

/// Rewrites a response body (after the response header). Returns the new
/// body, or `None` when it is unchanged (relay the original bytes).
/// On error, relay the original bytes: the error says whose fault it was.
pub fn rewrite_response(
    api_key: i16,
    api_version: i16,
    body: &[u8],
    observer: &mut dyn ResponseObserver,
) -> Result<Option<BytesMut>, ProtocolError> {
    let rewrite = api::facts(api_key).and_then(|facts| facts.response_rewrite);
    match rewrite {
        Some(ResponseRewrite::Metadata) => {
            metadata::rewrite_metadata_response(api_version, body, observer)
        }
        Some(ResponseRewrite::FindCoordinator) => {
            coordinator::rewrite_find_coordinator_response(api_version, body, observer)
        }
        Some(ResponseRewrite::DescribeCluster) => {
            cluster::rewrite_describe_cluster_response(api_version, body, observer)
        }
        Some(ResponseRewrite::ApiVersions) => {
            api_versions::rewrite_api_versions_response(api_version, body, observer)
        }
        Some(ResponseRewrite::NodeEndpoints) | None => {
            endpoints::rewrite_node_endpoints(api_key, api_version, body, observer)
        }
    }
}
