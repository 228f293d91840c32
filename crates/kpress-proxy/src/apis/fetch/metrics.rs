//! Fetch's metrics: their names and how the slice counts them. Topic labels are the
//! ones Produce's metrics use ([`crate::topic_labels::TopicLabels`]: topics a rule or the
//! brokers name, up to `[limits] max_topic_labels`, the rest under `_other`).

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use kpress_batch::PassReason;
use kpress_codec::Codec;
use metrics::Counter;

use super::report::{CutReason, ResponseReport};
use crate::apis::log_limiter::LogLimiter;
use crate::handler::ConnectionContext;
use crate::metrics::{pair_index, CODEC_PAIRS};

/// Fetch requests of consumers that cannot read zstd (v4-v9) sent to the broker at
/// v10, labelled `version` (the client's).
pub(crate) const FETCH_UPGRADED: &str = "kpress_fetch_requests_upgraded_total";
/// Fetch requests from clients that do not read every codec, forwarded with nothing
/// re-encoded in their answers, labelled `reason` (`version`: a Fetch version whose
/// responses kpress does not read, outside the versions it parses).
pub(crate) const FETCH_NOT_REENCODED: &str = "kpress_fetch_requests_not_reencoded_total";
/// Fetch responses whose records kpress re-encoded for such a consumer.
pub(crate) const FETCH_REENCODED_RESPONSES: &str = "kpress_fetch_responses_reencoded_total";
/// Records bytes of the partitions kpress changed, as the broker sent them, by topic.
pub(crate) const FETCH_BYTES_IN: &str = "kpress_fetch_reencoded_bytes_in_total";
/// The same partitions' records bytes as the consumer got them, by topic.
pub(crate) const FETCH_BYTES_OUT: &str = "kpress_fetch_reencoded_bytes_out_total";
/// Batches re-encoded for consumers, labelled `topic`, `from` and `to` (codec names).
pub(crate) const FETCH_BATCHES_REENCODED: &str = "kpress_fetch_batches_reencoded_total";
/// Partitions whose records were cut before a batch the consumer cannot read and
/// kpress could not re-encode (empty when it was the first), labelled `topic` and
/// `reason`.
pub(crate) const FETCH_PARTITIONS_CUT: &str = "kpress_fetch_partitions_cut_total";
/// Batches the consumer cannot read that kpress passed as stored because they can
/// never be re-encoded (damaged, or a decompression bomb), labelled `topic` and
/// `reason`.
pub(crate) const FETCH_BATCHES_PASSED: &str = "kpress_fetch_batches_passed_total";
/// Fetch responses to upgraded requests kpress could not read (relayed only if the
/// client could read them as they were, else the connection is closed), labelled
/// `action`.
pub(crate) const FETCH_UNREADABLE: &str = "kpress_fetch_responses_unparsed_total";
/// Re-encoded batches found in the cache (`[consumers] cache_bytes`): a re-encoding
/// saved.
/// Batches served re-encoded from the cache, by `topic`.
pub(crate) const FETCH_BATCHES_FROM_CACHE: &str = "kpress_fetch_batches_from_cache_total";
pub(crate) const FETCH_CACHE_HITS: &str = "kpress_fetch_cache_hits_total";
/// Re-encoded batches looked for in the cache and not found.
pub(crate) const FETCH_CACHE_MISSES: &str = "kpress_fetch_cache_misses_total";
/// Bytes the cache's entries count for now (batches, topic names and bookkeeping).
pub(crate) const FETCH_CACHE_BYTES: &str = "kpress_fetch_cache_bytes";

/// Counts an upgraded request from a client at `version`.
pub(crate) fn upgraded(version: i16) {
    const VERSIONS: usize = 16;
    static BY_VERSION: [OnceLock<Counter>; VERSIONS] = [const { OnceLock::new() }; VERSIONS];
    let index = usize::try_from(version).unwrap_or(0).min(VERSIONS - 1);
    BY_VERSION[index]
        .get_or_init(|| metrics::counter!(FETCH_UPGRADED, "version" => version.to_string()))
        .increment(1);
}

/// Counts a request from a client that does not read every codec whose answer is
/// relayed as the broker sends it.
pub(crate) fn not_reencoded(reason: &'static str) {
    metrics::counter!(FETCH_NOT_REENCODED, "reason" => reason).increment(1);
}

pub(crate) fn unreadable(action: &'static str) {
    metrics::counter!(FETCH_UNREADABLE, "action" => action).increment(1);
}

/// Counts what one re-encoded response did, by topic.
pub(crate) fn record(conn: &ConnectionContext, report: &ResponseReport) {
    static RESPONSES: OnceLock<Counter> = OnceLock::new();
    RESPONSES
        .get_or_init(|| metrics::counter!(FETCH_REENCODED_RESPONSES))
        .increment(1);
    for partition in &report.partitions {
        let topic = &*partition.topic;
        let label = conn
            .topic_labels()
            .label(topic, || conn.is_known_topic(topic));
        let label = metrics::SharedString::from(label);
        metrics::counter!(FETCH_BYTES_IN, "topic" => label.clone())
            .increment(partition.bytes_in as u64);
        metrics::counter!(FETCH_BYTES_OUT, "topic" => label.clone())
            .increment(partition.bytes_out as u64);
        let mut by_pair = [0u64; CODEC_PAIRS];
        for (from, to) in &partition.reencoded {
            by_pair[pair_index(*from, *to)] += 1;
        }
        for from in Codec::ALL {
            let reason = reencode_reason(report.client_version, from);
            for to in Codec::ALL {
                let count = by_pair[pair_index(from, to)];
                if count > 0 {
                    batches_reencoded(label.clone(), from, to, reason, count);
                }
            }
        }
        if partition.from_cache > 0 {
            metrics::counter!(FETCH_BATCHES_FROM_CACHE, "topic" => label.clone())
                .increment(partition.from_cache as u64);
        }
        for reason in PassReason::ALL {
            let count = partition.passed.iter().filter(|&&r| r == reason).count();
            if count > 0 {
                passed(label.clone(), reason, count as u64);
                log_passed(conn, topic, reason, count);
            }
        }
        if let Some(reason) = partition.cut {
            cut(label, reason);
        }
    }
}

/// `reason` of [`FETCH_BATCHES_REENCODED`]: the consumer's Fetch version cannot carry
/// the stored codec (zstd before v10).
const REASON_FETCH_VERSION: &str = "fetch_version";
/// `reason` of [`FETCH_BATCHES_REENCODED`]: a `[[clients]]` rule leaves the codec out.
const REASON_CLIENT_RULE: &str = "client_rule";

/// Why a batch stored in `from` was re-encoded for a consumer fetching at
/// `client_version`: a codec its version reads was left out by its `[[clients]]` rule.
fn reencode_reason(client_version: i16, from: Codec) -> &'static str {
    if super::readable_at(client_version).contains(from) {
        REASON_CLIENT_RULE
    } else {
        REASON_FETCH_VERSION
    }
}

fn batches_reencoded(
    topic: metrics::SharedString,
    from: Codec,
    to: Codec,
    reason: &'static str,
    count: u64,
) {
    metrics::counter!(
        FETCH_BATCHES_REENCODED,
        "topic" => topic,
        "from" => from.name(),
        "to" => to.name(),
        "reason" => reason
    )
    .increment(count);
}

fn passed(topic: metrics::SharedString, reason: PassReason, count: u64) {
    metrics::counter!(FETCH_BATCHES_PASSED, "topic" => topic, "reason" => reason.as_str())
        .increment(count);
}

fn cut(topic: metrics::SharedString, reason: CutReason) {
    metrics::counter!(FETCH_PARTITIONS_CUT, "topic" => topic, "reason" => reason.as_str())
        .increment(1);
}

/// One line per reason per 10 s: a consumer sitting at a damaged batch or a bomb
/// fetches it again and again.
static PASSED_LOG: LogLimiter = LogLimiter::new(Duration::from_secs(10));

/// Says why a consumer got batches it cannot read: an operator looking at its error
/// finds the cause here, and that the same batch comes straight from the broker.
fn log_passed(conn: &ConnectionContext, topic: &str, reason: PassReason, count: usize) {
    if let Some(held_back) = PASSED_LOG.admit(reason, Instant::now()) {
        tracing::warn!(
            client = %conn.client(),
            topic,
            reason = reason.as_str(),
            batches = count,
            held_back,
            "Fetch: batches the consumer cannot read passed as stored: kpress will not \
             re-encode them (damaged, or past [limits] max_decompressed_bytes or \
             max_decompression_ratio); the consumer meets them as it would straight from \
             the broker"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_is_reencoded_for_the_fetch_version_or_for_the_clients_rule() {
        assert_eq!(reencode_reason(8, Codec::Zstd), REASON_FETCH_VERSION);
        assert_eq!(reencode_reason(9, Codec::Zstd), REASON_FETCH_VERSION);
        assert_eq!(reencode_reason(8, Codec::Lz4), REASON_CLIENT_RULE);
        assert_eq!(reencode_reason(10, Codec::Zstd), REASON_CLIENT_RULE);
        assert_eq!(reencode_reason(18, Codec::Snappy), REASON_CLIENT_RULE);
    }
}
