//! The response step of a Fetch from a client that cannot read every codec: broker
//! addresses first (KIP-951 node endpoints of v16+, on the connection's task, where
//! the listeners they name are bound), then the records: surveyed on the connection's
//! task, re-encoded under a work slot when a partition needs it, and written back at
//! the client's version (a flexible response at its own, every byte but the records
//! replaced as read).

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use bytes::BytesMut;
use kpress_batch::{RecompressMode, Recompressor, RewritePolicy, Target};
use kpress_protocol::frame::{response_header_len, SIZE_PREFIX_LEN};
use kpress_protocol::{
    api_key, fetch_response_records, rewrites_response, DecodedFetchResponse, FetchTopic,
    ProtocolError, FETCH_FIRST_SESSION_VERSION,
};

use super::cache::ReencodedCache;
use super::reencode::{needs_work, ReencodeLimits, Reencoder, MAX_REENCODE_TIME};
use super::report::ResponseReport;
use super::{metrics, seen, Upgraded};
use crate::apis::addresses;
use crate::error::ConnectionError;
use crate::frame_io::Frame;
use crate::handler::{ConnectionContext, HandlerError, Message, RequestContext, ResponseStep};
use crate::policy::PolicySnapshot;
use crate::scheduler::Overloaded;

/// The largest response whose envelope alone is rewritten on the connection's task;
/// larger ones are copied on the blocking pool, so the reactor thread is never held
/// long.
const MAX_INLINE_FRAME_BYTES: usize = 1 << 20;

thread_local! {
    /// Codec state and scratch buffers, reused by every re-encode on this blocking
    /// thread.
    static RECOMPRESSOR: RefCell<Recompressor> = RefCell::new(Recompressor::new());
}

pub(super) fn response_step(
    conn: &Arc<ConnectionContext>,
    request: &RequestContext,
    upgraded: Upgraded,
    mut frame: Frame,
) -> Result<ResponseStep, HandlerError> {
    // Addresses before records: whatever happens to the records, the client never sees
    // a broker's own address, and the records step works on the frame as rewritten.
    let header = request.header();
    let carries_addresses = rewrites_response(header.api_key, header.api_version);
    let addressed = match carries_addresses
        .then(|| addresses::rewrite_addresses(&frame, header, conn))
        .transpose()?
        .flatten()
    {
        Some(bytes) => {
            frame.bytes = bytes;
            true
        }
        None => false,
    };
    // The frame as it stands: as read, or with kpress's addresses (a new frame, whose
    // budget is taken before it is written).
    let as_it_stands = |frame: Frame| {
        if addressed {
            ResponseStep::Replace(frame.bytes)
        } else {
            ResponseStep::Relay(Message::original(frame))
        }
    };
    let body = match header_len(&frame, upgraded.upstream_version) {
        Some(len) => &frame.body()[len..],
        None => &[],
    };
    let needs = |codec| upgraded.target(codec).is_some();
    // Records bytes that need re-encoding, by topic: the work's lane is the largest.
    let mut work: HashMap<FetchTopic<'_>, usize> = HashMap::new();
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
            Ok(as_it_stands(frame))
        } else {
            metrics::unreadable("closed");
            Err(ConnectionError::Response(err).into())
        };
    }
    if work.is_empty() {
        if same_envelope {
            return Ok(as_it_stands(frame));
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
    seen::note_topics(
        conn,
        request,
        work.keys().map(|topic| topic_key(conn, *topic)),
    );
    let lane = work
        .iter()
        .max_by_key(|(_, bytes)| **bytes)
        .map(|(topic, _)| topic_key(conn, *topic));
    let task = Arc::clone(conn);
    Ok(ResponseStep::Later(conn.spawn(async move {
        reencode_response(&task, upgraded, frame, lane).await
    })))
}

/// The length of the response header of `frame`, a Fetch response at `version`:
/// `None` when the frame is too short to hold one (the survey then finds it
/// malformed).
fn header_len(frame: &Frame, version: i16) -> Option<usize> {
    response_header_len(api_key::FETCH, version, frame.body())
        .ok()
        .flatten()
}

/// What a Fetch response's topic goes by in the metrics, the cache of re-encoded
/// batches and the policy: its name; for an id (v13+), the name kpress learned from a
/// Metadata response, looked up in memory (a consumer fetches topics it asked Metadata
/// about, through kpress), else `id:` and the id in hex, which no topic name can be
/// (':' is not a topic name character) and which no rule or label names.
pub(super) fn topic_key(conn: &ConnectionContext, topic: FetchTopic<'_>) -> Arc<str> {
    match topic {
        FetchTopic::Name(name) => Arc::from(name),
        FetchTopic::Id(id) => conn.topic_name(&id).unwrap_or_else(|| unnamed_topic(&id)),
    }
}

/// The key of a topic id kpress has no name for.
pub(super) fn unnamed_topic(id: &[u8; 16]) -> Arc<str> {
    let mut key = String::with_capacity(3 + 32);
    key.push_str("id:");
    for byte in id {
        key.push_str(&format!("{byte:02x}"));
    }
    Arc::from(key)
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
    let no_key = |_: FetchTopic<'_>| -> Arc<str> { Arc::from("") };
    let mut recompressor = Recompressor::new();
    rebuild(
        frame,
        upgraded,
        limits,
        &never,
        &no_key,
        &mut recompressor,
        None,
    )
    .map(|(bytes, _)| bytes)
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
    let names = Arc::clone(conn);
    let job = move |limits: ReencodeLimits| {
        let for_topic = |topic: &str| consumer_policy(&policy, &upgraded, topic);
        let key = |topic: FetchTopic<'_>| topic_key(&names, topic);
        RECOMPRESSOR.with_borrow_mut(|recompressor| {
            rebuild(
                frame,
                &upgraded,
                limits,
                &for_topic,
                &key,
                recompressor,
                cache,
            )
        })
    };
    let result = match slot {
        Ok(slot) => {
            conn.run_blocking(slot, queued, move |_| {
                limits.deadline = Some(Instant::now() + MAX_REENCODE_TIME);
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
/// was done to each partition; `topic_key` names each topic for `policy_for`, the
/// cache and the report.
fn rebuild(
    frame: Frame,
    upgraded: &Upgraded,
    limits: ReencodeLimits,
    policy_for: &dyn Fn(&str) -> RewritePolicy,
    topic_key: &dyn Fn(FetchTopic<'_>) -> Arc<str>,
    recompressor: &mut Recompressor,
    cache: Option<&ReencodedCache>,
) -> Result<(BytesMut, ResponseReport), ProtocolError> {
    let header_len = header_len(&frame, upgraded.upstream_version).ok_or_else(|| {
        ProtocolError::MalformedResponse {
            api: "Fetch",
            version: upgraded.upstream_version,
            source: kpress_protocol::WireError::Truncated {
                at: 0,
                needed: 4,
                remaining: frame.body().len(),
            },
        }
    })?;
    let Frame { bytes, _permit } = frame;
    let frame_len = bytes.len();
    let bytes = bytes.freeze();
    let header_end = SIZE_PREFIX_LEN + header_len;
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
        let topic = topic_key(topic);
        let policy = policy_for(&topic);
        if let Some(new) = reencoder.partition(&topic, index, current, &policy, needs) {
            *records = Some(new);
        }
    });
    let mut report = std::mem::take(&mut reencoder.report);
    report.client_version = upgraded.client_version;
    let out = decoded.encode_frame(upgraded.client_version, &bytes[SIZE_PREFIX_LEN..header_end])?;
    Ok((out, report))
}
