//! ApiVersions responses: the broker's list relayed, with the max version of
//! every API kpress parses capped to what kpress (and kafka-protocol 0.18)
//! supports. Min versions stay as the broker says: librdkafka turns
//! compression off when it cannot see old Produce versions.

use bytes::BytesMut;
use kafka_protocol::messages::ApiVersionsResponse;

use crate::api_key;
use crate::error::{check_version, ProtocolError, WireError};
use crate::response::{encode, guarded_decode, ResponseObserver};
use crate::wire::Reader;
use crate::{cluster, coordinator, endpoints, metadata, produce};

const API: &str = "ApiVersions";
pub(crate) const API_VERSIONS_MIN_VERSION: i16 = 0;
pub(crate) const API_VERSIONS_MAX_VERSION: i16 = 4;
const FIRST_FLEXIBLE: i16 = 3;
/// Kafka's UNSUPPORTED_VERSION error code.
const UNSUPPORTED_VERSION: i16 = 35;

/// The highest version kpress parses, per API key it parses.
pub const PARSED_MAX_VERSIONS: [(i16, i16); 8] = [
    (api_key::PRODUCE, produce::PRODUCE_MAX_VERSION),
    (api_key::FETCH, endpoints::FETCH_MAX_VERSION),
    (api_key::METADATA, metadata::METADATA_MAX_VERSION),
    (
        api_key::FIND_COORDINATOR,
        coordinator::FIND_COORDINATOR_MAX_VERSION,
    ),
    (api_key::API_VERSIONS, API_VERSIONS_MAX_VERSION),
    (
        api_key::DESCRIBE_CLUSTER,
        cluster::DESCRIBE_CLUSTER_MAX_VERSION,
    ),
    (api_key::SHARE_FETCH, endpoints::SHARE_VERSION),
    (api_key::SHARE_ACKNOWLEDGE, endpoints::SHARE_VERSION),
];

/// The version an ApiVersions response body is actually encoded in: a broker
/// that does not support the requested version answers UNSUPPORTED_VERSION in
/// the v0 format (its list then says which versions it does support).
pub fn api_versions_body_version(api_version: i16, body: &[u8]) -> i16 {
    match body {
        [hi, lo, ..] if i16::from_be_bytes([*hi, *lo]) == UNSUPPORTED_VERSION => 0,
        _ => api_version,
    }
}

pub(crate) fn rewrite_api_versions_response(
    api_version: i16,
    body: &[u8],
    observer: &mut dyn ResponseObserver,
) -> Result<Option<BytesMut>, ProtocolError> {
    let version = api_versions_body_version(api_version, body);
    check_version(
        API,
        version,
        API_VERSIONS_MIN_VERSION,
        API_VERSIONS_MAX_VERSION,
    )?;
    let mut response: ApiVersionsResponse =
        guarded_decode(API, version, body, walk_api_versions_response)?;
    let mut changed = false;
    for api in &mut response.api_keys {
        let parsed_max = PARSED_MAX_VERSIONS
            .iter()
            .find(|(key, _)| *key == api.api_key)
            .map_or(api.max_version, |(_, max)| *max);
        let capped = api.max_version.min(parsed_max);
        // Never below the broker's min: an empty range would hide the API.
        let max = observer
            .max_version(api.api_key, capped)
            .min(capped)
            .max(api.min_version);
        if max != api.max_version {
            api.max_version = max;
            changed = true;
        }
    }
    if !changed {
        return Ok(None);
    }
    encode(API, version, &response).map(Some)
}

/// Bounds-checked walk of an ApiVersions response, known tagged fields
/// included (kafka-protocol decodes their arrays too): the guard before decoding.
fn walk_api_versions_response(body: &[u8], v: i16) -> Result<(), WireError> {
    let flex = v >= FIRST_FLEXIBLE;
    let mut r = Reader::new(body);
    r.i16()?; // error_code
    let min_api = if flex { 7 } else { 6 };
    let apis = r.required_count(flex, min_api, "api_keys")?;
    for _ in 0..apis {
        r.skip(6)?; // api_key, min_version, max_version
        if flex {
            r.skip_tagged_fields()?;
        }
    }
    if v >= 1 {
        r.i32()?; // throttle_time_ms
    }
    if flex {
        let mut tag_error = Ok(());
        r.tagged_fields(|field| {
            // supported_features (0) and finalized_features (2): arrays of
            // {name, i16, i16, tagged fields}.
            if tag_error.is_ok() && (field.tag == 0 || field.tag == 2) {
                tag_error =
                    walk_features(field.content).map_err(|e| e.shifted(field.content_start));
            }
        })?;
        tag_error?;
    }
    r.finish()
}

fn walk_features(content: &[u8]) -> Result<(), WireError> {
    let mut r = Reader::new(content);
    let features = r.required_count(true, 1 + 4 + 1, "features")?;
    for _ in 0..features {
        r.skip_string(true)?;
        r.skip(4)?;
        r.skip_tagged_fields()?;
    }
    r.finish()
}
