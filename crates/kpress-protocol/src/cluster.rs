//! DescribeCluster responses (v0-v2): every broker address rewritten.

use bytes::BytesMut;
use kafka_protocol::messages::DescribeClusterResponse;

use crate::error::{check_version, ProtocolError, WireError};
use crate::rewriting::{encode, guarded_decode, replace_address, ResponseObserver};
use crate::wire::Reader;
use crate::{api, api_key};

const API: &str = "DescribeCluster";
const DESCRIBE_CLUSTER_MIN_VERSION: i16 = api::parsed(api_key::DESCRIBE_CLUSTER).min;
const DESCRIBE_CLUSTER_MAX_VERSION: i16 = api::parsed(api_key::DESCRIBE_CLUSTER).max;

pub(crate) fn rewrite_describe_cluster_response(
    api_version: i16,
    body: &[u8],
    observer: &mut dyn ResponseObserver,
) -> Result<Option<BytesMut>, ProtocolError> {
    check_version(
        API,
        api_version,
        DESCRIBE_CLUSTER_MIN_VERSION,
        DESCRIBE_CLUSTER_MAX_VERSION,
    )?;
    let mut response: DescribeClusterResponse =
        guarded_decode(API, api_version, body, walk_describe_cluster_response)?;
    if response.brokers.is_empty() {
        return Ok(None);
    }
    for broker in &mut response.brokers {
        replace_address(
            observer,
            broker.broker_id.0,
            &mut broker.host,
            &mut broker.port,
        );
    }
    encode(API, api_version, &response).map(Some)
}

/// Bounds-checked walk of a DescribeCluster response (flexible in every
/// version): the guard before decoding.
fn walk_describe_cluster_response(body: &[u8], v: i16) -> Result<(), WireError> {
    let mut r = Reader::new(body);
    r.i32()?; // throttle_time_ms
    r.i16()?; // error_code
    r.skip_string(true)?; // error_message
    if v >= 1 {
        r.skip(1)?; // endpoint_type
    }
    r.skip_string(true)?; // cluster_id
    r.i32()?; // controller_id
    let min_broker = 4 + 1 + 4 + 1 + usize::from(v >= 2) + 1;
    let brokers = r.required_count(true, min_broker, "brokers")?;
    for _ in 0..brokers {
        r.i32()?; // broker_id
        r.skip_string(true)?; // host
        r.i32()?; // port
        r.skip_string(true)?; // rack
        if v >= 2 {
            r.skip(1)?; // is_fenced
        }
        r.skip_tagged_fields()?;
    }
    r.i32()?; // cluster_authorized_operations
    r.skip_tagged_fields()?;
    r.finish()
}
