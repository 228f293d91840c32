//! Produce's metrics: their names, the per-topic series of the batches it reads
//! ([`TopicSeries`], made for a `topic` label of
//! [`TopicLabels`](crate::topic_labels::TopicLabels) when Produce first counts under it),
//! and how the slice counts them. Names the advisor reads and the crate's tables stay
//! in [`crate::metrics`].

use std::collections::HashMap;
use std::sync::{Arc, OnceLock, PoisonError, RwLock};
use std::time::Duration;

use kpress_batch::PassReason;
use kpress_codec::Codec;
use metrics::{Counter, Gauge, Histogram};

use crate::metrics::{
    pair_index, BATCHES, BATCHES_GROWN, BATCHES_REWRITTEN, BATCH_BYTES, BATCH_RECORDS, CODEC_PAIRS,
    PRODUCE_BYTES_IN, PRODUCE_BYTES_OUT, PRODUCE_RECORDS, REWRITE_CPU_SECONDS, REWRITTEN_BYTES_IN,
    REWRITTEN_BYTES_OUT,
};

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
/// default), `unresolved` (topic mode, the topic's config not known: passed as sent),
/// `auto` (the autopilot's choice, or an auto rule's initial policy).
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

/// Why a batch went to the broker as the client sent it although kpress read it, for
/// the `outcome` label: the rewrite's own reason, or the whole rewritten request
/// dropped (see [`REWRITES_DROPPED`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BatchFate {
    Rewritten,
    /// Rewritten and kept although larger than the batch the client sent (the policy
    /// stores the codec it names unless `only_if_smaller`).
    Grown,
    Passed(PassReason),
    /// The rewritten request would be a frame over `[limits] max_frame_bytes`.
    DroppedOverMaxFrame,
    /// No in-flight budget for the rewritten request.
    DroppedNoBudget,
    /// No work slot within `[limits] max_rewrite_wait_ms`: not tried, sent as is.
    Overloaded,
    /// No work slot within `[limits] max_rewrite_wait_ms`: rewritten at the rule's
    /// fallback setting on an express slot.
    OverloadedFallback,
}

impl BatchFate {
    const COUNT: usize = PassReason::ALL.len() + 6;

    fn index(self) -> usize {
        match self {
            BatchFate::Rewritten => 0,
            BatchFate::Grown => 1,
            BatchFate::Passed(reason) => 2 + reason.index(),
            BatchFate::DroppedOverMaxFrame => PassReason::ALL.len() + 2,
            BatchFate::DroppedNoBudget => PassReason::ALL.len() + 3,
            BatchFate::Overloaded => PassReason::ALL.len() + 4,
            BatchFate::OverloadedFallback => PassReason::ALL.len() + 5,
        }
    }

    pub(crate) fn as_str(self) -> &'static str {
        match self {
            BatchFate::Rewritten => "rewritten",
            BatchFate::Grown => "grown",
            BatchFate::Passed(reason) => reason.as_str(),
            BatchFate::DroppedOverMaxFrame => DROPPED_MAX_FRAME_BYTES,
            BatchFate::DroppedNoBudget => DROPPED_BUDGET,
            BatchFate::Overloaded => OVERLOADED_PASSED,
            BatchFate::OverloadedFallback => OVERLOADED_FALLBACK,
        }
    }
}

/// [`REWRITES_DROPPED`] reasons, also [`BATCHES`] outcomes.
pub(crate) const DROPPED_MAX_FRAME_BYTES: &str = "max_frame_bytes";
pub(crate) const DROPPED_BUDGET: &str = "budget";
/// The [`BATCHES`] outcome and [`BATCHES_PASSED`] reason of batches sent as is because
/// no work slot was free within `[limits] max_rewrite_wait_ms`.
pub(crate) const OVERLOADED_PASSED: &str = "overloaded_passed";
/// The [`BATCHES`] outcome of batches rewritten at their rule's fallback setting
/// because no work slot was free within `[limits] max_rewrite_wait_ms`.
pub(crate) const OVERLOADED_FALLBACK: &str = "overloaded_fallback";

/// One topic label's handles.
#[derive(Debug)]
pub(crate) struct TopicSeries {
    label: Arc<str>,
    bytes_in: Counter,
    bytes_out: Counter,
    records: Counter,
    /// Registered on first use: most topics see few of the outcomes.
    batches: [OnceLock<Counter>; BatchFate::COUNT],
    cpu_seconds: Gauge,
    batch_bytes: Histogram,
    batch_records: Histogram,
    /// [`BATCHES_REWRITTEN`] and [`BATCHES_GROWN`] by codec pair.
    rewritten: [OnceLock<Counter>; CODEC_PAIRS],
    grown: [OnceLock<Counter>; CODEC_PAIRS],
}

/// One batch kpress read, as [`TopicSeries::count`] takes it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct BatchCount {
    pub(crate) fate: BatchFate,
    pub(crate) bytes_in: usize,
    pub(crate) bytes_out: usize,
    pub(crate) records: u64,
}

impl TopicSeries {
    fn new(label: Arc<str>) -> TopicSeries {
        let topic = metrics::SharedString::from(Arc::clone(&label));
        TopicSeries {
            bytes_in: metrics::counter!(PRODUCE_BYTES_IN, "topic" => topic.clone()),
            bytes_out: metrics::counter!(PRODUCE_BYTES_OUT, "topic" => topic.clone()),
            records: metrics::counter!(PRODUCE_RECORDS, "topic" => topic.clone()),
            batches: [const { OnceLock::new() }; BatchFate::COUNT],
            cpu_seconds: metrics::gauge!(REWRITE_CPU_SECONDS, "topic" => topic.clone()),
            batch_bytes: metrics::histogram!(BATCH_BYTES, "topic" => topic.clone()),
            batch_records: metrics::histogram!(BATCH_RECORDS, "topic" => topic),
            rewritten: [const { OnceLock::new() }; CODEC_PAIRS],
            grown: [const { OnceLock::new() }; CODEC_PAIRS],
            label,
        }
    }

    /// Counts one batch.
    pub(crate) fn count(&self, batch: BatchCount) {
        self.bytes_in.increment(batch.bytes_in as u64);
        self.bytes_out.increment(batch.bytes_out as u64);
        self.records.increment(batch.records);
        self.batch_bytes.record(batch.bytes_in as f64);
        self.batch_records.record(batch.records as f64);
        self.batches[batch.fate.index()]
            .get_or_init(|| {
                metrics::counter!(
                    BATCHES,
                    "topic" => metrics::SharedString::from(Arc::clone(&self.label)),
                    "outcome" => batch.fate.as_str()
                )
            })
            .increment(1);
    }

    /// Counts a kept rewrite in [`BATCHES_REWRITTEN`] (and [`BATCHES_GROWN`] if it
    /// `grew`), [`REWRITTEN_BYTES_IN`] and [`REWRITTEN_BYTES_OUT`].
    pub(crate) fn rewritten(
        &self,
        from: Codec,
        to: Codec,
        bytes_in: usize,
        bytes_out: usize,
        grew: bool,
    ) {
        let by_pair = |name: &'static str| {
            let topic = metrics::SharedString::from(Arc::clone(&self.label));
            move || metrics::counter!(name, "topic" => topic, "from" => from.name(), "to" => to.name())
        };
        let pair = pair_index(from, to);
        self.rewritten[pair]
            .get_or_init(by_pair(BATCHES_REWRITTEN))
            .increment(1);
        if grew {
            self.grown[pair]
                .get_or_init(by_pair(BATCHES_GROWN))
                .increment(1);
        }
        static BYTES: OnceLock<(Counter, Counter)> = OnceLock::new();
        let (total_in, total_out) = BYTES.get_or_init(|| {
            (
                metrics::counter!(REWRITTEN_BYTES_IN),
                metrics::counter!(REWRITTEN_BYTES_OUT),
            )
        });
        total_in.increment(bytes_in as u64);
        total_out.increment(bytes_out as u64);
    }

    /// Adds rewriting thread CPU time spent on the topic.
    pub(crate) fn cpu_time(&self, cpu: Duration) {
        // Served as a counter: see FRACTIONAL_COUNTERS.
        self.cpu_seconds.increment(cpu.as_secs_f64());
    }
}

/// Each `topic` label's series, registered once and kept, so counting a batch
/// allocates nothing. Only labels Produce counted under are here: a topic that is only
/// consumed has no Produce series.
static SERIES: OnceLock<RwLock<HashMap<Arc<str>, Arc<TopicSeries>>>> = OnceLock::new();

/// The series of a `topic` label (one [`TopicLabels`](crate::topic_labels::TopicLabels)
/// gave, so their number is bounded).
pub(crate) fn topic_series(label: &Arc<str>) -> Arc<TopicSeries> {
    let series = SERIES.get_or_init(Default::default);
    if let Some(found) = series
        .read()
        .unwrap_or_else(PoisonError::into_inner)
        .get(&**label)
    {
        return Arc::clone(found);
    }
    let mut series = series.write().unwrap_or_else(PoisonError::into_inner);
    Arc::clone(
        series
            .entry(Arc::clone(label))
            .or_insert_with(|| Arc::new(TopicSeries::new(Arc::clone(label)))),
    )
}

/// Drops the series of labels `keep` refuses (topics that lost their label): a label
/// given again gets its series back, the exporter's counters going on from where they
/// were.
pub(crate) fn forget_series(keep: impl Fn(&str) -> bool) {
    if let Some(series) = SERIES.get() {
        series
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .retain(|label, _| keep(label));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_label_has_one_series() {
        let label: Arc<str> = Arc::from("produce-metrics-test-topic");
        let series = topic_series(&label);
        assert!(Arc::ptr_eq(
            &series,
            &topic_series(&Arc::from("produce-metrics-test-topic"))
        ));
        forget_series(|l| l != "produce-metrics-test-topic");
        assert!(!Arc::ptr_eq(&series, &topic_series(&label)));
    }

    #[test]
    fn outcome_labels_are_unique_and_index_their_slot() {
        let fates: Vec<BatchFate> = [BatchFate::Rewritten, BatchFate::Grown]
            .into_iter()
            .chain(PassReason::ALL.into_iter().map(BatchFate::Passed))
            .chain([
                BatchFate::DroppedOverMaxFrame,
                BatchFate::DroppedNoBudget,
                BatchFate::Overloaded,
                BatchFate::OverloadedFallback,
            ])
            .collect();
        assert_eq!(fates.len(), BatchFate::COUNT);
        for (i, fate) in fates.iter().enumerate() {
            assert_eq!(fate.index(), i);
        }
        let mut names: Vec<_> = fates.iter().map(|f| f.as_str()).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), BatchFate::COUNT);
    }
}
