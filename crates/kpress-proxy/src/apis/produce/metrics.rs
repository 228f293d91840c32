//! Produce's metrics: their names and how the slice counts them. The per-topic series
//! every connection shares ([`crate::metrics::TopicSeries`]) and the crate's tables
//! (histogram buckets, fractional counters) stay in [`crate::metrics`].

use std::sync::OnceLock;
use std::time::Duration;

use kpress_batch::PassReason;
use kpress_codec::Codec;
use metrics::{Counter, Histogram};

use crate::metrics::{pair_index, CODEC_PAIRS, OVERLOADED_PASSED};
pub(crate) use crate::metrics::{DROPPED_BUDGET, DROPPED_MAX_FRAME_BYTES};

/// Batches forwarded untouched, labelled `reason` ([`PassReason::as_str`], or
/// [`OVERLOADED_PASSED`]: no work slot within `[limits] max_rewrite_wait_ms`).
pub(crate) const BATCHES_PASSED: &str = "kpress_batches_passed_total";

/// Produce v13 topic ids no Metadata could name; their batches went untouched.
pub(crate) const UNKNOWN_TOPIC_IDS: &str = "kpress_unknown_topic_ids_total";
/// Produce rewrite outputs dropped (the original went on), labelled `reason`:
/// `budget` (no in-flight budget for the output) or `max_frame_bytes` (the rewritten
/// request would be a frame larger than `[limits] max_frame_bytes`).
pub(crate) const REWRITES_DROPPED: &str = "kpress_rewrites_dropped_total";

/// Batches by where their target codec came from, labelled `target_source`: `rule` (a
/// rule or `[defaults]` names it), `topic` (the topic's own `compression.type`),
/// `broker_default` (a broker config the topic inherits), `default` (Kafka's built-in
/// default), `unresolved` (topic mode, the topic's config not known: passed as sent).
pub(crate) const BATCHES_BY_TARGET_SOURCE: &str = "kpress_batches_by_target_source_total";

/// Produce requests forwarded without a rewrite attempt, labelled `reason`:
/// `before_auth` (the connection had not finished SASL authentication and
/// `rewrite_before_auth` is off).
pub(crate) const PRODUCE_NOT_REWRITTEN: &str = "kpress_produce_requests_not_rewritten_total";
/// Bytes of the Produce frames counted in [`PRODUCE_NOT_REWRITTEN`] or otherwise
/// forwarded without kpress reading their batches, labelled `reason`: `before_auth`,
/// `legacy_message_set` (Produce v0-v2: magic 0/1 message sets), `unparsed` (a request
/// kpress could not parse; the broker answers it). Their batches are in none of the
/// per-topic counters (their topics were not read), and they went on unchanged.
pub(crate) const PRODUCE_NOT_REWRITTEN_BYTES: &str =
    "kpress_produce_requests_not_rewritten_bytes_total";

/// Histogram: wall time of one batch rewrite that was kept, labelled `from` and `to`
/// (codec names).
pub(crate) const REWRITE_SECONDS: &str = "kpress_rewrite_seconds";

/// Histogram: per Produce request rewritten, time waiting for a rewrite slot and a
/// blocking-pool thread.
pub(crate) const PRODUCE_QUEUE_SECONDS: &str = "kpress_produce_queue_seconds";
/// Histogram: per Produce request rewritten, time spent rewriting it (all its batches).
pub(crate) const PRODUCE_REWRITE_SECONDS: &str = "kpress_produce_rewrite_seconds";

/// Produce requests sent to their rule's overload fallback without waiting for a work
/// slot: the rule's topics had spent its `overload.max_cpu_share` of the window's
/// rewrite CPU. Their batches are counted `overloaded_fallback` or `overloaded_passed`.
pub(crate) const OVERLOAD_CPU_SHARE_REQUESTS: &str = "kpress_overload_cpu_share_requests_total";

/// Records one kept batch rewrite's wall time by codec pair.
pub(crate) fn rewrite_time(from: Codec, to: Codec, took: Duration) {
    static BY_PAIR: [OnceLock<Histogram>; CODEC_PAIRS] = [const { OnceLock::new() }; CODEC_PAIRS];
    BY_PAIR[pair_index(from, to)]
        .get_or_init(
            || metrics::histogram!(REWRITE_SECONDS, "from" => from.name(), "to" => to.name()),
        )
        .record(took.as_secs_f64());
}

/// Records one Produce rewrite's wait for a slot and thread, and its own time.
pub(crate) fn produce_rewrite_times(queued: Duration, rewriting: Duration) {
    static HANDLES: OnceLock<(Histogram, Histogram)> = OnceLock::new();
    let (queue, rewrite) = HANDLES.get_or_init(|| {
        (
            metrics::histogram!(PRODUCE_QUEUE_SECONDS),
            metrics::histogram!(PRODUCE_REWRITE_SECONDS),
        )
    });
    queue.record(queued.as_secs_f64());
    rewrite.record(rewriting.as_secs_f64());
}

/// Counts a Produce request forwarded without its batches read (see
/// [`PRODUCE_NOT_REWRITTEN_BYTES`]).
pub(crate) fn produce_not_read(reason: &'static str, frame_bytes: usize) {
    metrics::counter!(PRODUCE_NOT_REWRITTEN_BYTES, "reason" => reason)
        .increment(frame_bytes as u64);
}

/// Counts a batch passed through in [`BATCHES_PASSED`].
pub(crate) fn batch_passed(reason: PassReason) {
    static COUNTERS: [OnceLock<Counter>; PassReason::ALL.len()] =
        [const { OnceLock::new() }; PassReason::ALL.len()];
    COUNTERS[reason.index()]
        .get_or_init(|| metrics::counter!(BATCHES_PASSED, "reason" => reason.as_str()))
        .increment(1);
}

/// Counts a request sent to the overload fallback by its rule's CPU share.
pub(crate) fn cpu_share_spent() {
    static COUNTER: OnceLock<Counter> = OnceLock::new();
    COUNTER
        .get_or_init(|| metrics::counter!(OVERLOAD_CPU_SHARE_REQUESTS))
        .increment(1);
}

/// Counts `count` batches passed through in [`BATCHES_PASSED`] as [`OVERLOADED_PASSED`].
pub(crate) fn batches_overloaded(count: u64) {
    static COUNTER: OnceLock<Counter> = OnceLock::new();
    COUNTER
        .get_or_init(|| metrics::counter!(BATCHES_PASSED, "reason" => OVERLOADED_PASSED))
        .increment(count);
}

pub(crate) fn unknown_topic_ids(count: usize) {
    metrics::counter!(UNKNOWN_TOPIC_IDS).increment(count as u64);
}

pub(crate) fn rewrite_dropped(reason: &'static str) {
    metrics::counter!(REWRITES_DROPPED, "reason" => reason).increment(1);
}

/// Counts `batches` whose target came from `source`.
pub(crate) fn batches_by_target_source(source: kpress_batch::TargetSource, batches: usize) {
    static COUNTERS: [OnceLock<Counter>; kpress_batch::TargetSource::ALL.len()] =
        [const { OnceLock::new() }; kpress_batch::TargetSource::ALL.len()];
    let index = kpress_batch::TargetSource::ALL
        .iter()
        .position(|s| *s == source)
        .unwrap_or(0);
    COUNTERS[index]
        .get_or_init(
            || metrics::counter!(BATCHES_BY_TARGET_SOURCE, "target_source" => source.as_str()),
        )
        .increment(batches as u64);
}

pub(crate) fn produce_not_rewritten(reason: &'static str) {
    metrics::counter!(PRODUCE_NOT_REWRITTEN, "reason" => reason).increment(1);
}
