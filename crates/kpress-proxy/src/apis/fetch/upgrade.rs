//! The request step: a Fetch from a consumer that cannot read zstd goes to the broker
//! at the first version that may carry zstd, so brokers before 4.0 answer with the
//! batches (not UNSUPPORTED_COMPRESSION_TYPE) and kpress can re-encode them.

use std::sync::Arc;

use kpress_protocol::upgrade_fetch_request;

use super::{metrics, upgrades, Upgraded, FETCH_FIRST_ZSTD_VERSION};
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
    if !upgrades(&consumers, version) {
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
        request.keep(Upgraded {
            client_version: version,
            upstream_version: version,
            consumers: Arc::clone(&consumers),
        });
        return Message::original(frame);
    };
    metrics::upgraded(version);
    request.keep(Upgraded {
        client_version: version,
        upstream_version: FETCH_FIRST_ZSTD_VERSION,
        consumers: Arc::clone(&consumers),
    });
    drop(frame);
    Message::rewritten(upgraded, permit)
}
