//! The request step: what the client reads is worked out (its Fetch version and the
//! `[[clients]]` rules). A Fetch from a consumer that cannot read zstd goes to the
//! broker at the first version that may carry zstd, so brokers before 4.0 answer with
//! the batches (not UNSUPPORTED_COMPRESSION_TYPE) and kpress can re-encode them. A
//! Fetch v10 or later from a client a rule limits goes on as sent, its answer
//! re-encoded at the same version. Versions kpress does not parse go on as sent,
//! counted: kpress does not read their responses.

use std::sync::Arc;

use kpress_config::CodecSet;
use kpress_protocol::{upgrade_fetch_request, FETCH_MAX_VERSION, FETCH_MIN_VERSION};

use super::{client_reads, metrics, upgrades, Upgraded, FETCH_FIRST_ZSTD_VERSION};
use crate::handler::{ConnectionContext, Frame, Message, RequestContext};

/// The request to forward: upgraded (its client's version kept in `request` for the
/// response step), or the frame as read when it needs no upgrade or cannot have one
/// (the broker then answers it as it would without kpress).
pub(super) fn request_step(
    conn: &ConnectionContext,
    request: &mut RequestContext,
    frame: Frame,
) -> Message {
    let header = *request.header();
    let version = header.api_version;
    let Some(header_len) = header.header_len else {
        return Message::original(frame);
    };
    let consumers = Arc::clone(&conn.policy().consumers);
    if !consumers.reencode {
        return Message::original(frame);
    }
    let reads = client_reads(
        &consumers,
        version,
        request.client_id(),
        || conn.client_software(),
        conn.listener(),
    );
    if reads == CodecSet::ALL {
        return Message::original(frame);
    }
    // What the response step needs, the request having gone upstream at that version.
    let kept = |upstream_version| Upgraded {
        client_version: version,
        upstream_version,
        reads,
        consumers: Arc::clone(&consumers),
    };
    if !upgrades(&consumers, reads, version) {
        if (FETCH_MIN_VERSION..=FETCH_MAX_VERSION).contains(&version) {
            // Already at a version that may carry every codec: only the answer changes.
            request.keep(kept(version));
        } else {
            metrics::not_reencoded("version");
        }
        return Message::original(frame);
    }
    let upgraded =
        match upgrade_fetch_request(frame.body(), header_len, version, FETCH_FIRST_ZSTD_VERSION) {
            Ok(bytes) => bytes,
            Err(err) => {
                tracing::debug!(
                    correlation_id = header.correlation_id,
                    error = %err,
                    "Fetch request not parsed; forwarding it as sent for the broker to answer"
                );
                return Message::original(frame);
            }
        };
    let Some(permit) = conn.try_reserve_request(upgraded.len()) else {
        // Sent as read, its answer is still checked: a broker from 4.0 on sends zstd
        // batches at any version.
        tracing::debug!(
            correlation_id = header.correlation_id,
            "no in-flight budget for an upgraded Fetch request; forwarding it as sent"
        );
        request.keep(kept(version));
        return Message::original(frame);
    };
    metrics::upgraded(version);
    request.keep(kept(FETCH_FIRST_ZSTD_VERSION));
    drop(frame);
    Message::rewritten(upgraded, permit)
}
