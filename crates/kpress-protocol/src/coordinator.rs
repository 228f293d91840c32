//! FindCoordinator responses (v0-v6): the coordinator's address rewritten,
//! in the single-coordinator form (v0-v3) and the coordinator list (v4+).

use bytes::BytesMut;
use kafka_protocol::messages::FindCoordinatorResponse;

use crate::error::{check_version, ProtocolError, WireError};
use crate::rewriting::{encode, guarded_decode, replace_address, ResponseObserver};
use crate::wire::Reader;
use crate::{api, api_key};

const API: &str = "FindCoordinator";
const FIND_COORDINATOR_MIN_VERSION: i16 = api::parsed(api_key::FIND_COORDINATOR).min;
const FIND_COORDINATOR_MAX_VERSION: i16 = api::parsed(api_key::FIND_COORDINATOR).max;
const FIRST_FLEXIBLE: i16 = api::first_flexible(api_key::FIND_COORDINATOR);
/// FindCoordinator v4 answers for a list of keys (KIP-699).
const FIRST_LIST: i16 = 4;

pub(crate) fn rewrite_find_coordinator_response(
    api_version: i16,
    body: &[u8],
    observer: &mut dyn ResponseObserver,
) -> Result<Option<BytesMut>, ProtocolError> {
    check_version(
        API,
        api_version,
        FIND_COORDINATOR_MIN_VERSION,
        FIND_COORDINATOR_MAX_VERSION,
    )?;
    let mut response: FindCoordinatorResponse =
        guarded_decode(API, api_version, body, walk_find_coordinator_response)?;
    let mut changed = false;
    // A failed lookup carries node -1 and no address: nothing to map.
    if api_version < FIRST_LIST {
        if response.node_id.0 >= 0 {
            replace_address(
                observer,
                response.node_id.0,
                &mut response.host,
                &mut response.port,
            );
            changed = true;
        }
    } else {
        for coordinator in &mut response.coordinators {
            if coordinator.node_id.0 >= 0 {
                replace_address(
                    observer,
                    coordinator.node_id.0,
                    &mut coordinator.host,
                    &mut coordinator.port,
                );
                changed = true;
            }
        }
    }
    if !changed {
        return Ok(None);
    }
    encode(API, api_version, &response).map(Some)
}

/// Bounds-checked walk of a FindCoordinator response: the guard before decoding.
fn walk_find_coordinator_response(body: &[u8], v: i16) -> Result<(), WireError> {
    let flex = v >= FIRST_FLEXIBLE;
    let mut r = Reader::new(body);
    if v >= 1 {
        r.i32()?; // throttle_time_ms
    }
    if v < FIRST_LIST {
        r.i16()?; // error_code
        if v >= 1 {
            r.skip_string(flex)?; // error_message
        }
        r.i32()?; // node_id
        r.skip_string(flex)?; // host
        r.i32()?; // port
    } else {
        let min_coordinator = 1 + 4 + 1 + 4 + 2 + 1 + 1;
        let coordinators = r.required_count(flex, min_coordinator, "coordinators")?;
        for _ in 0..coordinators {
            r.skip_string(flex)?; // key
            r.i32()?; // node_id
            r.skip_string(flex)?; // host
            r.i32()?; // port
            r.i16()?; // error_code
            r.skip_string(flex)?; // error_message
            r.skip_tagged_fields()?;
        }
    }
    if flex {
        r.skip_tagged_fields()?;
    }
    r.finish()
}
