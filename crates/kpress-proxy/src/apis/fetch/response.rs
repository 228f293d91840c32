//! The response step of a Fetch from a client that cannot read zstd: surveyed on the
//! connection's task, re-encoded under a work slot when a partition needs it, and
//! written back at the client's version.

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use kpress_batch::{RecompressMode, Recompressor, RewritePolicy, Target};
use kpress_protocol::frame::SIZE_PREFIX_LEN;
use kpress_protocol::{
    fetch_response_records, DecodedFetchResponse, ProtocolError, FETCH_FIRST_SESSION_VERSION,
};

use super::cache::ReencodedCache;
use super::reencode::{needs_work, ReencodeLimits, Reencoder};
use super::report::ResponseReport;
use super::{metrics, Upgraded};
use crate::error::ConnectionError;
use crate::frame_io::Frame;
use crate::handler::{ConnectionContext, HandlerError, Message, ResponseStep};
use crate::policy::PolicySnapshot;
use crate::scheduler::Overloaded;

/// Response header v0 (the correlation id): every non-flexible Fetch version's.
const RESPONSE_HEADER_LEN: usize = 4;

/// The largest response whose envelope alone is rewritten on the connection's task;
/// larger ones are copied on the blocking pool, so the reactor thread is never held
/// long.
const MAX_INLINE_FRAME_BYTES: usize = 1 << 20;

/// How long one response's re-encode may take once it has its work slot; batches
/// still to re-encode then are cut (the consumer fetches them again). Well inside a
/// consumer's `request.timeout.ms` (30 s by default).
const REENCODE_TIME_LIMIT: Duration = Duration::from_secs(10);

thread_local! {
    /// Codec state and scratch buffers, reused by every re-encode on this blocking
    /// thread.
    static RECOMPRESSOR: RefCell<Recompressor> = RefCell::new(Recompressor::new());
}

pub(super) fn response_step(
    conn: &Arc<ConnectionContext>,
    upgraded: Upgraded,
    frame: Frame,
) -> Result<ResponseStep, HandlerError> {
    let body = frame.body().get(RESPONSE_HEADER_LEN..).unwrap_or_default();
    let needs = |codec| upgraded.target(codec).is_some();
    // Records bytes that need re-encoding, by topic: the work's lane is the largest.
    let mut work: HashMap<&str, usize> = HashMap::new();
    let surveyed = fetch_response_records(body, upgraded.upstream_version, |topic, _, records| {
        if needs_work(records, &needs) {
            *work.entry(topic).or_default() += records.len();
        }
    });
    let same_envelope = upgraded.client_version >= FETCH_FIRST_SESSION_VERSION
        || upgraded.client_version == upgraded.upstream_version;
    if let Err(err) = surveyed {
        return if same_envelope {
            // The client reads these bytes as it would without kpress.
            metrics::unreadable("relayed");
            tracing::debug!(error = %err, "Fetch response not parsed; relayed as read");
            Ok(ResponseStep::Relay(Message::original(frame)))
        } else {
            metrics::unreadable("closed");
            Err(ConnectionError::Response(err).into())
        };
    }
    if work.is_empty() {
        if same_envelope {
            return Ok(ResponseStep::Relay(Message::original(frame)));
        }
        if frame.bytes.len() <= MAX_INLINE_FRAME_BYTES {
            let bytes = envelope_only(frame, &upgraded).map_err(ConnectionError::Response)?;
            return Ok(ResponseStep::Replace(bytes));
        }
        // A copy with no codec work: no work slot to wait for.
        let task = Arc::clone(conn);
        return Ok(ResponseStep::Later(conn.spawn(async move {
            let bytes = tokio::task::spawn_blocking(move || envelope_only(frame, &upgraded))
                .await
                .map_err(|err| ConnectionError::RewriteTask(err.to_string()))?
                .map_err(ConnectionError::Response)?;
            task.new_response(bytes).await
        })));
    }
    let lane = work
        .iter()
        .max_by_key(|(_, bytes)| **bytes)
        .map(|(topic, _)| Arc::<str>::from(*topic));
    let task = Arc::clone(conn);
    Ok(ResponseStep::Later(conn.spawn(async move {
        reencode_response(&task, upgraded, frame, lane).await
    })))
}

/// The response with only its envelope written at the client's version.
fn envelope_only(frame: Frame, upgraded: &Upgraded) -> Result<BytesMut, ProtocolError> {
    let limits = ReencodeLimits {
        response_decompressed_bytes: 0,
        deadline: None,
        max_frame_bytes: usize::MAX,
        overloaded: true,
    };
    let never = |_: &str| -> RewritePolicy { RewritePolicy::default() };
    let mut recompressor = Recompressor::new();
    rebuild(frame, upgraded, limits, &never, &mut recompressor, None).map(|(bytes, _)| bytes)
}

/// Re-encodes under a work slot taken in the turn of `lane` (the topic with the most
/// bytes to re-encode), then hands the new frame over within the response budget.
async fn reencode_response(
    conn: &Arc<ConnectionContext>,
    upgraded: Upgraded,
    frame: Frame,
    lane: Option<Arc<str>>,
) -> Result<Message, HandlerError> {
    let queued = Instant::now();
    let wait = conn.produce_settings().max_rewrite_wait;
    let slot = conn
        .work_slot(lane, Some(tokio::time::Instant::now() + wait))
        .await;
    let policy = conn.policy();
    let cache = ReencodedCache::global();
    // A no-op unless a reload changed it.
    cache.set_capacity(upgraded.consumers.cache_bytes);
    let cache = (upgraded.consumers.cache_bytes > 0).then_some(cache);
    let mut limits = ReencodeLimits {
        response_decompressed_bytes: conn.produce_settings().max_request_decompressed_bytes,
        deadline: None,
        max_frame_bytes: conn.max_frame_bytes(),
        overloaded: false,
    };
    let job = move |limits: ReencodeLimits| {
        let for_topic = |topic: &str| consumer_policy(&policy, &upgraded, topic);
        RECOMPRESSOR.with_borrow_mut(|recompressor| {
            rebuild(frame, &upgraded, limits, &for_topic, recompressor, cache)
        })
    };
    let result = match slot {
        Ok(slot) => {
            conn.run_blocking(slot, queued, move |_| {
                limits.deadline = Some(Instant::now() + REENCODE_TIME_LIMIT);
                job(limits)
            })
            .await?
        }
        Err(Overloaded) => {
            // Nothing to decode or compress: the batches the consumer cannot read are
            // cut, the rest copied.
            limits.overloaded = true;
            tokio::task::spawn_blocking(move || job(limits))
                .await
                .map_err(|err| ConnectionError::RewriteTask(err.to_string()))?
        }
    };
    let (bytes, report) = result.map_err(ConnectionError::Response)?;
    metrics::record(conn, &report);
    conn.new_response(bytes).await
}

/// The rewrite policy of `topic`'s batches for this consumer: its codec, with the
/// topic's decompression limits; never held to `only_if_smaller` (the consumer must
/// get a codec it reads whatever its size).
fn consumer_policy(policy: &PolicySnapshot, upgraded: &Upgraded, topic: &str) -> RewritePolicy {
    let limits = policy.rules.policy_for(topic);
    let codec = upgraded.output_codec();
    RewritePolicy {
        target: Target::Codec {
            codec,
            options: upgraded.consumers.options.clone(),
        },
        mode: RecompressMode::CodecDiffers,
        max_batch_bytes: i32::MAX as usize,
        max_decompressed_bytes: limits.max_decompressed_bytes,
        max_decompression_ratio: limits.max_decompression_ratio,
        only_if_smaller: false,
    }
}

/// The whole new frame (size prefix, header, body at the client's version) and what
/// was done to each partition.
fn rebuild(
    frame: Frame,
    upgraded: &Upgraded,
    limits: ReencodeLimits,
    policy_for: &dyn Fn(&str) -> RewritePolicy,
    recompressor: &mut Recompressor,
    cache: Option<&ReencodedCache>,
) -> Result<(BytesMut, ResponseReport), ProtocolError> {
    let Frame { bytes, _permit } = frame;
    let frame_len = bytes.len();
    let bytes = bytes.freeze();
    let header_end = SIZE_PREFIX_LEN + RESPONSE_HEADER_LEN;
    let mut decoded =
        DecodedFetchResponse::decode(bytes.slice(header_end..), upgraded.upstream_version)?;
    let needs = |codec| upgraded.target(codec).is_some();
    let mut reencoder = Reencoder::new(recompressor, limits, frame_len);
    if let Some(cache) = cache {
        reencoder = reencoder.with_cache(cache);
    }
    decoded.for_each_records(|topic, index, records| {
        let Some(current) = records.as_ref() else {
            return;
        };
        if !needs_work(current, &needs) {
            return;
        }
        let policy = policy_for(topic);
        if let Some(new) = reencoder.partition(topic, index, current, &policy, needs) {
            *records = Some(new);
        }
    });
    let report = std::mem::take(&mut reencoder.report);
    let out = decoded.encode_frame(upgraded.client_version, &bytes[SIZE_PREFIX_LEN..header_end])?;
    Ok((out, report))
}
