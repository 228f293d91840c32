//! The proxy's metrics shared by its parts, through the `metrics` facade (the binary
//! installs an exporter): connections, requests, budgets, policy, TLS, shadow trials,
//! the gzip providers, the per-topic names the advisor reads, and the codec-pair table.
//! A slice's own names and counting live in its `metrics.rs` (Produce:
//! `apis/produce/metrics.rs`); the `topic` label values in [`crate::topic_labels`].

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use kpress_codec::gzip_providers::{self, ProviderKind, ProviderStatus};
use kpress_codec::Codec;
use kpress_protocol::api_key;
use metrics::{Counter, Gauge, Histogram};

/// Bucket bounds of every histogram of the crate, for the exporter: built where every
/// slice's names are known.
pub use crate::apis::metrics::HISTOGRAM_BUCKETS;
/// The autopilot's names (`compression.type = "auto"`).
pub use crate::autopilot::metrics::{
    AS_SENT, AUTOPILOT_BUDGET_CORES, AUTOPILOT_BUDGET_USED_CORES, AUTOPILOT_CHANGES,
    AUTOPILOT_CHOICE, AUTOPILOT_REPLICAS, AUTOPILOT_SHARED, AUTOPILOT_UNTRACKED_BATCHES,
};

/// Batches recompressed, labelled `topic`, `from`, `to`.
pub const BATCHES_REWRITTEN: &str = "kpress_batches_rewritten_total";
/// Of the batches rewritten, those that came out larger than the producer sent them
/// (the policy's codec is stored unless `only_if_smaller`), labelled `topic`, `from`,
/// `to`; each is in [`BATCHES_REWRITTEN`] too.
pub const BATCHES_GROWN: &str = "kpress_batches_grown_total";
/// Bytes of the batches that were recompressed, before.
pub const REWRITTEN_BYTES_IN: &str = "kpress_rewritten_bytes_in_total";
/// Bytes of the batches that were recompressed, after.
pub const REWRITTEN_BYTES_OUT: &str = "kpress_rewritten_bytes_out_total";
/// Client connections accepted, labelled `listener` (`bootstrap` or `node`).
pub const CONNECTIONS: &str = "kpress_connections_total";
/// Client connections open now.
pub const CONNECTIONS_OPEN: &str = "kpress_connections_open";
/// Bytes of frames held in the in-flight budget now.
pub const INFLIGHT_BYTES: &str = "kpress_inflight_bytes";
/// Frames refused (their connection closed), labelled `reason`.
pub const FRAMES_REFUSED: &str = "kpress_frames_refused_total";
/// Client connections closed as they were accepted, labelled `reason`
/// (`max_connections`, `descriptors`: too few file descriptors left, see
/// [`crate::descriptors`]).
pub const CONNECTIONS_REFUSED: &str = "kpress_connections_refused_total";
/// Failed `accept` calls on client and admin listeners, labelled `reason`:
/// `descriptors` (the open-file limit or the system's file table reached), `other`.
pub const ACCEPT_FAILURES: &str = "kpress_accept_failures_total";
/// kpress's own Metadata lookups of Produce v13 topic ids, labelled `result`:
/// `named` (every id), `unnamed` (some left), `failed` (no answer), `queue_full`
/// (not asked: too many lookups waiting).
pub const TOPIC_ID_LOOKUPS: &str = "kpress_topic_id_lookups_total";
/// Topics whose `compression.type` and level kpress asked the cluster about
/// (DescribeConfigs on its side connection, for `compression.type = "topic"`), labelled
/// `result`: `ok`, `denied` (no `DESCRIBE_CONFIGS` for kpress's principal),
/// `unknown_topic`, `error` (another error code for the topic), `failed` (no answer:
/// connection, login, timeout), `unsupported` (no DescribeConfigs version kpress reads),
/// `cache_full` (not asked: the cache holds its bound of topics).
pub const TOPIC_CONFIG_LOOKUPS: &str = "kpress_topic_config_lookups_total";
/// Full reads of the cluster's topics and their configs, labelled `result` (`ok`,
/// `failed`: the previous answers stay).
pub const TOPIC_CONFIG_REFRESHES: &str = "kpress_topic_config_refreshes_total";
/// Topics the cluster had at the last full read (they get `topic` labels of their own,
/// up to `[limits] max_topic_labels`).
pub const CLUSTER_TOPICS: &str = "kpress_cluster_topics";
/// Requests kpress answered itself instead of forwarding, labelled `api`
/// (ApiVersions at a version kpress cannot parse: UNSUPPORTED_VERSION, as a broker
/// answers, so the client retries lower).
pub const REQUESTS_ANSWERED_LOCALLY: &str = "kpress_requests_answered_locally_total";

/// Client TLS handshakes that failed, labelled `reason`: `plaintext` (a client spoke
/// plaintext Kafka to a TLS listener), `unknown_server_name` (an SNI name that is
/// neither the bootstrap's nor a known node's: refused with an alert), `timeout`,
/// `handshake` (any other TLS failure, e.g. a missing or untrusted client certificate).
pub const TLS_HANDSHAKE_FAILURES: &str = "kpress_tls_handshake_failures_total";
/// Re-reads of TLS files (on a change or SIGHUP), labelled `side` (`listener`,
/// `upstream`) and `result` (`changed`, `unchanged`, `failed`: the old files stay).
pub const TLS_RELOADS: &str = "kpress_tls_reloads_total";

/// Bytes of every produced batch kpress read, rewritten or not, as the client sent
/// them; labelled `topic` ([`TopicLabels`](crate::topic_labels::TopicLabels)).
pub const PRODUCE_BYTES_IN: &str = "kpress_produce_bytes_in_total";
/// Bytes of the same batches as they went to the broker (the original for those not
/// rewritten); labelled `topic`. `in - out` is what kpress saved.
pub const PRODUCE_BYTES_OUT: &str = "kpress_produce_bytes_out_total";
/// Records in the same batches (their `recordsCount`), labelled `topic`.
pub const PRODUCE_RECORDS: &str = "kpress_produce_records_total";
/// The same batches, labelled `topic` and `outcome`: `rewritten`, a pass reason
/// ([`PassReason::as_str`](kpress_batch::PassReason::as_str)),
/// [`OVERLOADED_PASSED`](crate::apis::produce::metrics::OVERLOADED_PASSED) (no work
/// slot within `[limits] max_rewrite_wait_ms`: the request went on as sent), or, when
/// a rewritten request was dropped and its original forwarded, the drop reason of
/// [`REWRITES_DROPPED`](crate::apis::produce::metrics::REWRITES_DROPPED)
/// (`max_frame_bytes`, `budget`).
pub const BATCHES: &str = "kpress_batches_total";
/// CPU time of the rewriting thread spent on the topic's batches (decoding attempts
/// that failed included), labelled `topic`: divided by the savings it gives CPU per
/// saved byte.
pub const REWRITE_CPU_SECONDS: &str = "kpress_rewrite_cpu_seconds_total";
/// Histogram: bytes per produced batch as the client sent it, labelled `topic`.
pub const BATCH_BYTES: &str = "kpress_batch_bytes";
/// Histogram: records per produced batch, labelled `topic`.
pub const BATCH_RECORDS: &str = "kpress_batch_records";
/// Requests read from clients, labelled `api` (Kafka's name of the API key,
/// `unknown` for keys Kafka does not define).
pub const REQUESTS: &str = "kpress_requests_total";
/// Histogram: from forwarding a request to having read the broker's response,
/// labelled `api` (requests without a response, Produce with acks=0, are not in it).
pub const UPSTREAM_LATENCY: &str = "kpress_upstream_latency_seconds";

/// Counters of fractional seconds. The facade's counters take whole numbers, so these
/// are facade gauges only ever increased; [`served_types`] makes `/metrics` declare them
/// counters, as their `_total` says and as `rate()` over them needs.
pub const FRACTIONAL_COUNTERS: [&str; 2] = [REWRITE_CPU_SECONDS, SHADOW_CPU_SECONDS];

/// The exporter's text with the `# TYPE` line of each of [`FRACTIONAL_COUNTERS`] saying
/// `counter`.
pub fn served_types(rendered: String) -> String {
    if !FRACTIONAL_COUNTERS
        .iter()
        .any(|name| rendered.contains(&format!("# TYPE {name} gauge\n")))
    {
        return rendered;
    }
    let mut out = String::with_capacity(rendered.len());
    for line in rendered.split_inclusive('\n') {
        match line
            .strip_prefix("# TYPE ")
            .and_then(|rest| rest.strip_suffix(" gauge\n"))
        {
            Some(name) if FRACTIONAL_COUNTERS.contains(&name) => {
                out.push_str("# TYPE ");
                out.push_str(name);
                out.push_str(" counter\n");
            }
            _ => out.push_str(line),
        }
    }
    out
}

/// kpress's own SASL authentications on its side connections, labelled `result`
/// (`ok`, `failed`).
pub const SIDE_AUTHENTICATIONS: &str = "kpress_side_authentications_total";

/// Re-reads of the policy file (on a change or SIGHUP), labelled `result`: `applied`,
/// `unchanged` (same bytes), `invalid` (the file has problems: the policy in force
/// stays), `restart_needed` (rules applied; keys that cannot change live were not).
pub const POLICY_RELOADS: &str = "kpress_policy_reloads_total";
/// Unix time of the policy file kpress applied last.
pub const POLICY_LOADED_TIME: &str = "kpress_policy_loaded_timestamp_seconds";
/// The level in force of each rule whose codec has levels, by `rule` (its match
/// pattern, or `[defaults]`) and `codec`: the configured level, or lower while
/// `[overload] adaptive` has stepped it down.
pub const OVERLOAD_LEVEL: &str = "kpress_overload_level";

/// Shadow trials (`[shadow]`): bytes of the sampled batches as the producer sent them
/// (whole batches), labelled `topic` and `candidate` (the candidate's spec, e.g.
/// `zstd:3`).
pub const SHADOW_BYTES_IN: &str = "kpress_shadow_bytes_in_total";
/// The same batches' size written with the candidate: the 61-byte batch header plus
/// the records compressed; labelled `topic`, `candidate`. `out / in` is what the
/// candidate would store per byte sent today.
pub const SHADOW_BYTES_OUT: &str = "kpress_shadow_bytes_out_total";
/// Thread CPU time compressing the same batches with the candidate, labelled `topic`,
/// `candidate` (decompressing them once, shared by all candidates, is not in it).
pub const SHADOW_CPU_SECONDS: &str = "kpress_shadow_cpu_seconds_total";
/// Uncompressed records bytes of the batches tried, labelled `topic`: divided by
/// [`SHADOW_CPU_SECONDS`] it is a candidate's compression speed per core.
pub const SHADOW_RAW_BYTES: &str = "kpress_shadow_raw_bytes_total";
/// Batches tried, labelled `topic` (each with every candidate).
pub const SHADOW_BATCHES: &str = "kpress_shadow_batches_total";
/// Sampled batches not tried, labelled `reason`: `queue_full` (the trial queue's
/// `max_queue_bytes` was reached), `cpu_budget` (the trials had used their
/// `max_cpu_fraction`), `corrupt` (not a v2 batch with a valid CRC), `not_decodable`
/// (its codec failed or it decompresses past `[limits]`), `compress_failed` (a
/// candidate failed on it).
pub const SHADOW_SKIPPED: &str = "kpress_shadow_skipped_total";

/// The `topic` label of topics without a label of their own (see
/// [`TopicLabels`](crate::topic_labels::TopicLabels)).
pub const OTHER_TOPICS: &str = "_other";

/// 1 when the gzip provider (KIP-1121) can be selected on this host, else 0
/// (QAT also reads 0 when no policy named `qat` or `auto`, so QATzip was not probed);
/// labelled `provider`.
pub const GZIP_PROVIDER_AVAILABLE: &str = "kpress_gzip_provider_available";
/// 1 when the gzip provider runs on an accelerator (a QAT device), 0 on the CPU
/// (QATzip's software backup after `QZ_NO_HW` included); labelled `provider`.
pub const GZIP_PROVIDER_HARDWARE: &str = "kpress_gzip_provider_hardware";
/// Payloads a gzip provider failed on that zlib then handled, labelled `provider`
/// and `operation` (`compress`, `decompress`).
pub const GZIP_PROVIDER_FALLBACKS: &str = "kpress_gzip_provider_fallbacks_total";

/// Sets the provider gauges from statuses taken at start.
pub fn gzip_provider_statuses(statuses: &[ProviderStatus]) {
    for s in statuses {
        let provider = s.provider.name();
        metrics::gauge!(GZIP_PROVIDER_AVAILABLE, "provider" => provider)
            .set(f64::from(u8::from(s.available)));
        metrics::gauge!(GZIP_PROVIDER_HARDWARE, "provider" => provider)
            .set(f64::from(u8::from(s.hardware)));
    }
}

/// Copies kpress-deflate's process-wide fallback counts into the counters; called
/// periodically, since the codec layer counts without a metrics dependency.
pub fn gzip_provider_fallbacks() {
    for kind in ProviderKind::ALL {
        let provider = kind.name();
        metrics::counter!(GZIP_PROVIDER_FALLBACKS, "provider" => provider, "operation" => "compress")
            .absolute(gzip_providers::compress_fallbacks(kind));
        metrics::counter!(GZIP_PROVIDER_FALLBACKS, "provider" => provider, "operation" => "decompress")
            .absolute(gzip_providers::decompress_fallbacks(kind));
    }
}

/// Codec ids run 0-4 (none, gzip, snappy, lz4, zstd).
const CODECS: usize = 5;
pub(crate) const CODEC_PAIRS: usize = CODECS * CODECS;

/// The slot of a (from, to) pair in a table of [`CODEC_PAIRS`].
pub(crate) fn pair_index(from: Codec, to: Codec) -> usize {
    let (from, to) = (usize::from(from.id()), usize::from(to.id()));
    (from.min(CODECS - 1)) * CODECS + to.min(CODECS - 1)
}

/// Handles labelled by API key: Kafka's keys, then one slot for any other key.
struct ByApiKey<T: 'static> {
    slots: [OnceLock<T>; API_KEY_SLOTS],
}

/// Kafka's keys run to 92 today; keys past the table share the last slot.
const API_KEY_SLOTS: usize = 128;

impl<T> ByApiKey<T> {
    const fn new() -> ByApiKey<T> {
        ByApiKey {
            slots: [const { OnceLock::new() }; API_KEY_SLOTS],
        }
    }

    fn get(&self, key: i16, register: impl FnOnce(&'static str) -> T) -> &T {
        let index = usize::try_from(key)
            .ok()
            .filter(|&i| i < API_KEY_SLOTS - 1)
            .unwrap_or(API_KEY_SLOTS - 1);
        self.slots[index].get_or_init(|| register(api_key::name(key)))
    }
}

/// Counts a request read from a client.
pub(crate) fn request(api_key: i16) {
    static COUNTERS: ByApiKey<Counter> = ByApiKey::new();
    COUNTERS
        .get(api_key, |api| metrics::counter!(REQUESTS, "api" => api))
        .increment(1);
}

/// Records how long the broker took to answer a request.
pub(crate) fn upstream_latency(api_key: i16, took: Duration) {
    static HISTOGRAMS: ByApiKey<Histogram> = ByApiKey::new();
    HISTOGRAMS
        .get(
            api_key,
            |api| metrics::histogram!(UPSTREAM_LATENCY, "api" => api),
        )
        .record(took.as_secs_f64());
}

pub(crate) fn connection_opened(listener: &'static str) {
    metrics::counter!(CONNECTIONS, "listener" => listener).increment(1);
    metrics::gauge!(CONNECTIONS_OPEN).increment(1.0);
}

pub(crate) fn connection_closed() {
    metrics::gauge!(CONNECTIONS_OPEN).decrement(1.0);
}

/// The in-flight bytes gauge, moved twice per frame: its handle is looked up in the
/// registry once, not per frame.
fn inflight_bytes() -> &'static Gauge {
    static GAUGE: OnceLock<Gauge> = OnceLock::new();
    GAUGE.get_or_init(|| metrics::gauge!(INFLIGHT_BYTES))
}

pub(crate) fn inflight_bytes_add(bytes: usize) {
    inflight_bytes().increment(bytes as f64);
}

pub(crate) fn inflight_bytes_sub(bytes: usize) {
    inflight_bytes().decrement(bytes as f64);
}

pub(crate) fn frame_refused(reason: &'static str) {
    metrics::counter!(FRAMES_REFUSED, "reason" => reason).increment(1);
}

pub(crate) fn connection_refused(reason: &'static str) {
    metrics::counter!(CONNECTIONS_REFUSED, "reason" => reason).increment(1);
}

pub(crate) fn accept_failed(reason: &'static str) {
    metrics::counter!(ACCEPT_FAILURES, "reason" => reason).increment(1);
}

pub(crate) fn topic_id_lookup(result: &'static str) {
    metrics::counter!(TOPIC_ID_LOOKUPS, "result" => result).increment(1);
}

pub(crate) fn topic_config_lookups(result: &'static str, topics: usize) {
    metrics::counter!(TOPIC_CONFIG_LOOKUPS, "result" => result).increment(topics as u64);
}

pub(crate) fn topic_config_refresh(result: &'static str) {
    metrics::counter!(TOPIC_CONFIG_REFRESHES, "result" => result).increment(1);
}

pub(crate) fn cluster_topics(count: usize) {
    metrics::gauge!(CLUSTER_TOPICS).set(count as f64);
}

pub(crate) fn answered_locally(api: &'static str) {
    metrics::counter!(REQUESTS_ANSWERED_LOCALLY, "api" => api).increment(1);
}

/// Counts a re-read of the policy file (see [`POLICY_RELOADS`]).
pub fn policy_reload(result: &'static str) {
    metrics::counter!(POLICY_RELOADS, "result" => result).increment(1);
}

/// Sets [`POLICY_LOADED_TIME`].
pub fn policy_loaded(unix_seconds: f64) {
    metrics::gauge!(POLICY_LOADED_TIME).set(unix_seconds);
}

/// Sets [`OVERLOAD_LEVEL`] of a rule (its match pattern, or `[defaults]`).
pub fn overload_level(rule: &str, codec: &'static str, level: i32) {
    metrics::gauge!(OVERLOAD_LEVEL, "rule" => rule.to_owned(), "codec" => codec)
        .set(f64::from(level));
}

pub(crate) fn tls_handshake_failed(reason: &'static str) {
    metrics::counter!(TLS_HANDSHAKE_FAILURES, "reason" => reason).increment(1);
}

pub(crate) fn tls_reload(side: &'static str, result: &'static str) {
    metrics::counter!(TLS_RELOADS, "side" => side, "result" => result).increment(1);
}

/// Counts a sampled batch not tried (see [`SHADOW_SKIPPED`]).
pub(crate) fn shadow_skipped(reason: &'static str) {
    metrics::counter!(SHADOW_SKIPPED, "reason" => reason).increment(1);
}

/// One candidate's result on one tried batch.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ShadowResult {
    pub(crate) bytes_out: usize,
    pub(crate) cpu: Duration,
}

/// Counts one tried batch of `topic` (its label): `bytes_in` as sent, `raw` bytes of
/// records, and each candidate's result, `candidates[i]` labelling `results[i]`.
pub(crate) fn shadow_trial(
    topic: &Arc<str>,
    bytes_in: usize,
    raw: usize,
    candidates: &[Arc<str>],
    results: &[ShadowResult],
) {
    let topic_label = || metrics::SharedString::from(Arc::clone(topic));
    metrics::counter!(SHADOW_BATCHES, "topic" => topic_label()).increment(1);
    metrics::counter!(SHADOW_RAW_BYTES, "topic" => topic_label()).increment(raw as u64);
    for (candidate, result) in candidates.iter().zip(results) {
        let candidate = || metrics::SharedString::from(Arc::clone(candidate));
        metrics::counter!(SHADOW_BYTES_IN, "topic" => topic_label(), "candidate" => candidate())
            .increment(bytes_in as u64);
        metrics::counter!(SHADOW_BYTES_OUT, "topic" => topic_label(), "candidate" => candidate())
            .increment(result.bytes_out as u64);
        // Served as a counter: see FRACTIONAL_COUNTERS.
        metrics::gauge!(SHADOW_CPU_SECONDS, "topic" => topic_label(), "candidate" => candidate())
            .increment(result.cpu.as_secs_f64());
    }
}

pub(crate) fn side_authentication(result: &'static str) {
    metrics::counter!(SIDE_AUTHENTICATIONS, "result" => result).increment(1);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fractional_counters_are_served_as_counters() {
        let rendered = "# TYPE kpress_rewrite_cpu_seconds_total gauge\n\
                        kpress_rewrite_cpu_seconds_total{topic=\"t\"} 0.25\n\
                        # TYPE kpress_connections_open gauge\n\
                        kpress_connections_open 3\n\
                        # TYPE kpress_shadow_cpu_seconds_total gauge\n";
        assert_eq!(
            served_types(rendered.to_owned()),
            "# TYPE kpress_rewrite_cpu_seconds_total counter\n\
             kpress_rewrite_cpu_seconds_total{topic=\"t\"} 0.25\n\
             # TYPE kpress_connections_open gauge\n\
             kpress_connections_open 3\n\
             # TYPE kpress_shadow_cpu_seconds_total counter\n"
        );
        let untouched = "# TYPE kpress_connections_open gauge\nkpress_connections_open 3\n";
        assert_eq!(served_types(untouched.to_owned()), untouched);
    }

    #[test]
    fn every_codec_pair_has_its_own_slot() {
        let codecs = [
            Codec::None,
            Codec::Gzip,
            Codec::Snappy,
            Codec::Lz4,
            Codec::Zstd,
        ];
        let mut slots: Vec<_> = codecs
            .iter()
            .flat_map(|&a| codecs.iter().map(move |&b| pair_index(a, b)))
            .collect();
        slots.sort();
        slots.dedup();
        assert_eq!(slots.len(), CODEC_PAIRS);
        assert!(slots.iter().all(|&s| s < CODEC_PAIRS));
    }
}
