//! Produce: each batch recompressed into its topic's policy codec before the broker
//! sees it. The request's path, top to bottom:
//!
//! 1. Produce v0-v2 (magic 0/1 message sets) and requests of a client that has not
//!    authenticated yet (with `rewrite_before_auth = false`) go on as sent.
//! 2. A request of at most [`MAX_INLINE_FRAME_BYTES`] none of whose batches takes codec
//!    work is classified on the connection's task: counted, sampled for the shadow
//!    trials, and forwarded as sent, with no task, slot or thread to wait for.
//! 3. Any other is rewritten off the async threads, under a global work slot
//!    ([`rewrite::rewrite_produce`]), waiting in the turn of the request's topic with
//!    the most bytes (the scheduler shares the slots fairly between topics and their
//!    connections; cheap topics may also take an express slot). If no slot is free
//!    within `[limits] max_rewrite_wait_ms`, the request's batches are rewritten at
//!    their rules' overload fallback on an express slot (counted
//!    `overloaded_fallback`), or, with no fallback or no express slot free, the
//!    request goes on as sent (`overloaded_passed`). v13 topic ids
//!    kpress cannot name are looked up (kpress's own Metadata request, waiting
//!    briefly) and the rewrite is tried once more.
//! 4. The outcome is counted and sampled; the rewritten request goes on if it fits the
//!    budget and `max_frame_bytes`, else the original does. Any problem forwards the
//!    original bytes: the broker answers the client as it would without kpress.
//!
//! Its response carries broker addresses from v10 (KIP-951), rewritten like
//! Metadata's.

pub(crate) mod metrics;
mod reports;
mod rewrite;
#[cfg(test)]
mod tests;

use std::sync::Arc;
use std::time::{Duration, Instant};

use kpress_protocol::frame::{RequestHeader, SIZE_PREFIX_LEN};
use kpress_protocol::{produce_acks, Fault as ProtocolFault, ProtocolError, PRODUCE_MIN_VERSION};

use self::metrics::BatchFate;
use self::reports::{count_target_sources, BatchReports};
use self::rewrite::{
    has_fallback_work, rewrite_produce, survey, try_without_codec_work, ProduceRewrite,
    RewriteLimits, Survey, Under,
};
use super::addresses;
use crate::error::ConnectionError;
use crate::handler::{
    ApiHandler, ConnectionContext, Frame, HandlerError, Message, RequestContext, RequestStep,
    ResponseStep,
};
use crate::policy::PolicySnapshot;
use crate::scheduler::Overloaded;

/// The largest Produce frame checked on the connection's task for codec work: a batch
/// passed through still has its CRC checked (about 0.1 ms per MiB), which larger
/// requests do on the blocking pool so the reactor thread is never held long.
const MAX_INLINE_FRAME_BYTES: usize = 1 << 20;

#[derive(Debug)]
pub(crate) struct Produce;

impl ApiHandler for Produce {
    fn on_request(
        &self,
        conn: &Arc<ConnectionContext>,
        request: &mut RequestContext,
        frame: Frame,
    ) -> Result<RequestStep, HandlerError> {
        let header = *request.header();
        let forward = |frame| Ok(RequestStep::Forward(Message::original(frame)));
        let Some(header_len) = header.header_len else {
            return forward(frame);
        };
        let body = frame.body().get(header_len..).unwrap_or_default();
        if let Some(acks) = legacy_produce_acks(body, header.api_version) {
            // Magic 0/1 message sets: nothing kpress rewrites; the broker decides.
            if acks == 0 {
                request.expect_no_response();
            }
            metrics::produce_not_read("legacy_message_set", frame.bytes.len());
            return forward(frame);
        }
        let acks = produce_acks(body, header.api_version).map_err(ConnectionError::ProduceAcks)?;
        // acks=0: the broker answers nothing, so nothing may be awaited.
        if acks == 0 {
            request.expect_no_response();
        }
        if !conn.is_authenticated() {
            // The broker refuses it anyway; kpress spends no CPU on it.
            metrics::produce_not_rewritten("before_auth");
            metrics::produce_not_read("before_auth", frame.bytes.len());
            return forward(frame);
        }
        if let Some(reports) = classify_inline(conn, &header, header_len, &frame) {
            record(conn, reports, None);
            return forward(frame);
        }
        let task = Arc::clone(conn);
        Ok(RequestStep::Later(conn.spawn(async move {
            rewrite_request(&task, frame, header, header_len).await
        })))
    }

    fn on_response(
        &self,
        conn: &Arc<ConnectionContext>,
        request: &mut RequestContext,
        frame: Frame,
    ) -> Result<ResponseStep, HandlerError> {
        addresses::rewrite(conn, request, frame)
    }
}

/// `acks` of a Produce request older than the versions kpress parses (v0-v2: clients
/// before Kafka 0.11, still served by Kafka 3.x), where it is the first field of the
/// body; `None` for any other version.
fn legacy_produce_acks(body: &[u8], api_version: i16) -> Option<i16> {
    if !(0..PRODUCE_MIN_VERSION).contains(&api_version) {
        return None;
    }
    // A body too short to hold acks: the broker refuses it and answers or closes.
    let acks = body
        .first_chunk::<2>()
        .map_or(-1, |a| i16::from_be_bytes(*a));
    Some(acks)
}

/// The reports of a request none of whose batches takes codec work, classified here;
/// `None` when it must be rewritten (or is too large to check on this thread).
fn classify_inline(
    conn: &ConnectionContext,
    header: &RequestHeader,
    header_len: usize,
    frame: &Frame,
) -> Option<BatchReports> {
    if frame.bytes.len() > MAX_INLINE_FRAME_BYTES {
        return None;
    }
    let started = Instant::now();
    let reports = try_without_codec_work(
        &frame.bytes[SIZE_PREFIX_LEN..],
        header_len,
        header.api_version,
        rewrite_limits(conn),
        &conn.policy(),
        &|id| conn.topic_name(id),
    )?;
    metrics::produce_rewrite_times(Duration::ZERO, started.elapsed());
    Some(reports)
}

/// Rewrites the request off the async threads; names unknown v13 topic ids and tries
/// once more; then decides what goes on.
async fn rewrite_request(
    conn: &Arc<ConnectionContext>,
    frame: Frame,
    header: RequestHeader,
    header_len: usize,
) -> Result<Message, HandlerError> {
    let (frame, result) = match run_rewrite(conn, frame, header, header_len).await? {
        Attempt::Done(frame, result) => (frame, result),
        Attempt::Overloaded(frame, survey) => {
            return Ok(pass_overloaded(conn, frame, survey, &header))
        }
    };
    let to_resolve = match &result {
        Ok(rewrite) => conn.ids_to_resolve(&rewrite.unknown_topic_ids),
        Err(_) => Vec::new(),
    };
    if to_resolve.is_empty() {
        return Ok(finish(conn, frame, result, &header));
    }
    if !conn.name_topic_ids(to_resolve).await {
        tracing::debug!(
            client = %conn.client(),
            upstream = %conn.listener(),
            "Produce v13 topic ids not named in time; their batches go untouched"
        );
        return Ok(finish(conn, frame, result, &header));
    }
    // Once more, now that the ids may have names.
    Ok(match run_rewrite(conn, frame, header, header_len).await? {
        Attempt::Done(frame, retried) => finish(conn, frame, retried, &header),
        Attempt::Overloaded(frame, survey) => pass_overloaded(conn, frame, survey, &header),
    })
}

type RewriteResult = Result<ProduceRewrite, ProtocolError>;

/// A rewrite tried, or not begun: no work slot within `max_rewrite_wait`. The frame
/// travels there and back either way.
enum Attempt {
    Done(Frame, RewriteResult),
    /// The request's batches, untried, for counting.
    Overloaded(Frame, Survey),
}

/// The CPU-bound rewrite, under a global work slot taken in the turn of the request's
/// largest topic, if one is free within `max_rewrite_wait`; else at the rules'
/// overload fallback on an express slot, if a rule has one and a slot is free.
async fn run_rewrite(
    conn: &Arc<ConnectionContext>,
    frame: Frame,
    header: RequestHeader,
    header_len: usize,
) -> Result<Attempt, HandlerError> {
    let queued = Instant::now();
    let deadline = tokio::time::Instant::now() + conn.produce_settings().max_rewrite_wait;
    // Framing and batch headers only: cheap enough for the connection's task.
    let batches = survey(
        &frame.bytes[SIZE_PREFIX_LEN..],
        header_len,
        header.api_version,
        &|id| conn.topic_name(id),
    );
    let policy = conn.policy();
    let lane = batches.reports.largest_topic();
    // A rule that has spent its CPU share of the window does not queue: the request
    // goes as if its deadline had passed, by its largest topic's rule.
    let slots = conn.work_slot_count();
    let over_share = lane
        .as_deref()
        .is_some_and(|topic| policy.rules.over_cpu_share(topic, slots));
    let acquired = if over_share {
        metrics::cpu_share_spent();
        Err(Overloaded)
    } else {
        conn.work_slot(lane.clone(), Some(deadline)).await
    };
    let (slot, under) = match acquired {
        Ok(slot) => {
            note_waits(&policy, &batches.reports, queued.elapsed(), false);
            (slot, Under::Normal)
        }
        Err(Overloaded) => {
            if !over_share {
                note_waits(&policy, &batches.reports, queued.elapsed(), true);
            }
            let express = has_fallback_work(&*policy.rules, &batches.reports)
                .then(|| conn.express_slot(lane))
                .flatten();
            match express {
                Some(slot) => (slot, Under::Overload),
                None => return Ok(Attempt::Overloaded(frame, batches)),
            }
        }
    };
    let task = Arc::clone(conn);
    conn.run_blocking(slot, queued, move |queued| {
        let started = Instant::now();
        let result = rewrite_produce(
            &frame.bytes[SIZE_PREFIX_LEN..],
            header_len,
            header.api_version,
            rewrite_limits(&task),
            &policy,
            under,
            &|id| task.topic_name(id),
        );
        metrics::produce_rewrite_times(started - queued, started.elapsed());
        Attempt::Done(frame, result)
    })
    .await
}

/// Tells the rules how long the request waited for a work slot, once per topic entry
/// in it, or that it gave up waiting (`missed`): adaptive levels go by it. Entries are
/// already one per run of a topic's partitions; a topic a client repeats only adds
/// waits of the same length, which leaves a rule's mean wait as it was.
fn note_waits(policy: &PolicySnapshot, reports: &BatchReports, waited: Duration, missed: bool) {
    for (topic, _) in &reports.outcomes {
        policy.rules.note_wait(topic, waited, missed);
    }
}

/// No work slot within `max_rewrite_wait` and no fallback rewrite: the request goes
/// on as sent (every batch in it is valid as the client made it), its batches counted
/// `overloaded_passed`.
fn pass_overloaded(
    conn: &ConnectionContext,
    frame: Frame,
    survey: Survey,
    header: &RequestHeader,
) -> Message {
    let Survey {
        reports,
        unknown_topic_ids,
    } = survey;
    if unknown_topic_ids > 0 {
        metrics::unknown_topic_ids(unknown_topic_ids);
    }
    tracing::debug!(
        correlation_id = header.correlation_id,
        client = %conn.client(),
        "no rewrite slot within [limits] max_rewrite_wait_ms; forwarding the Produce request as sent"
    );
    let batches = reports.outcomes.iter().map(|(_, r)| r.len() as u64).sum();
    metrics::batches_overloaded(batches);
    record(conn, reports, Some(BatchFate::Overloaded));
    Message::original(frame)
}

/// What goes on after a rewrite: the rewritten request, or the original when the
/// rewrite failed, changed nothing, outgrew `max_frame_bytes` or finds no budget.
fn finish(
    conn: &ConnectionContext,
    frame: Frame,
    result: RewriteResult,
    header: &RequestHeader,
) -> Message {
    let mut rewrite = match result {
        Ok(rewrite) => rewrite,
        Err(err) => {
            match err.fault() {
                ProtocolFault::Proxy => tracing::warn!(
                    correlation_id = header.correlation_id,
                    error = %err,
                    "kpress could not re-encode a Produce request; forwarding it untouched"
                ),
                _ => tracing::debug!(
                    correlation_id = header.correlation_id,
                    error = %err,
                    "Produce request not parsed; forwarding it untouched for the broker to answer"
                ),
            }
            metrics::produce_not_read("unparsed", frame.bytes.len());
            return Message::original(frame);
        }
    };
    let unknown = rewrite.unknown_topic_ids.len() + rewrite.unknown_topic_ids_omitted;
    if unknown > 0 {
        metrics::unknown_topic_ids(unknown);
    }
    if rewrite.over_max_frame {
        metrics::rewrite_dropped(metrics::DROPPED_MAX_FRAME_BYTES);
        record(conn, rewrite.reports, Some(BatchFate::DroppedOverMaxFrame));
        tracing::debug!(
            correlation_id = header.correlation_id,
            "rewritten Produce request over [limits] max_frame_bytes; forwarding the original"
        );
        return Message::original(frame);
    }
    let Some(bytes) = rewrite.frame.take() else {
        record(conn, rewrite.reports, None);
        return Message::original(frame);
    };
    // The output is counted too; if the budget has no room for it right now, the
    // original goes (waiting here while holding the input could deadlock the pool).
    let Some(permit) = conn.try_reserve_request(bytes.len()) else {
        metrics::rewrite_dropped(metrics::DROPPED_BUDGET);
        record(conn, rewrite.reports, Some(BatchFate::DroppedNoBudget));
        tracing::debug!(
            correlation_id = header.correlation_id,
            "no in-flight budget for a rewritten Produce request; forwarding the original"
        );
        return Message::original(frame);
    };
    let batches = rewrite.reports.rewritten_batches();
    record(conn, rewrite.reports, None);
    tracing::trace!(
        correlation_id = header.correlation_id,
        batches,
        bytes_in = frame.bytes.len(),
        bytes_out = bytes.len(),
        "rewrote Produce request"
    );
    drop(frame);
    Message::rewritten(bytes, permit)
}

/// Queues the request's shadow samples and counts its batches, by topic.
fn record(conn: &ConnectionContext, mut reports: BatchReports, dropped: Option<BatchFate>) {
    let known = |topic: &str| conn.is_known_topic(topic);
    reports.send_shadow_samples(conn.topic_labels(), known);
    reports.record_metrics(conn.topic_labels(), known, dropped);
    let policy = conn.policy();
    let rules = &*policy.rules;
    for (topic, cpu) in reports.cpu_by_topic() {
        rules.note_rewrite_cpu(topic, cpu);
    }
    let collector = policy.shadow.as_ref().and_then(|t| t.collector());
    count_target_sources(
        rules,
        collector.map(|c| &**c),
        reports.outcomes.iter().map(|(t, r)| (&**t, r.as_slice())),
    );
}

fn rewrite_limits(conn: &ConnectionContext) -> RewriteLimits {
    RewriteLimits {
        max_request_decompressed_bytes: conn.produce_settings().max_request_decompressed_bytes,
        max_frame_bytes: conn.max_frame_bytes(),
    }
}
