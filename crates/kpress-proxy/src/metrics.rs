//! The proxy's metrics, through the `metrics` facade (the binary installs an exporter).
//! Every name and label is defined here so dashboards have one place to look.

use kpress_batch::PassReason;
use kpress_codec::gzip_providers::{self, ProviderKind, ProviderStatus};
use kpress_codec::Codec;

/// Batches recompressed, labelled `topic`, `from`, `to`.
pub const BATCHES_REWRITTEN: &str = "kpress_batches_rewritten_total";
/// Of the batches rewritten, those that came out larger than the producer sent them
/// (the policy's codec is stored unless `only_if_smaller`), labelled `topic`, `from`,
/// `to`; each is in [`BATCHES_REWRITTEN`] too.
pub const BATCHES_GROWN: &str = "kpress_batches_grown_total";
/// Batches forwarded untouched, labelled `reason` ([`PassReason::as_str`]).
pub const BATCHES_PASSED: &str = "kpress_batches_passed_total";
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
/// Produce v13 topic ids no Metadata could name; their batches went untouched.
pub const UNKNOWN_TOPIC_IDS: &str = "kpress_unknown_topic_ids_total";
/// Produce rewrite outputs dropped (the original went on), labelled `reason`:
/// `budget` (no in-flight budget for the output) or `max_frame_bytes` (the rewritten
/// request would be a frame larger than `[limits] max_frame_bytes`).
pub const REWRITES_DROPPED: &str = "kpress_rewrites_dropped_total";
/// Client connections closed as they were accepted, labelled `reason`
/// (`max_connections`).
pub const CONNECTIONS_REFUSED: &str = "kpress_connections_refused_total";
/// kpress's own Metadata lookups of Produce v13 topic ids, labelled `result`:
/// `named` (every id), `unnamed` (some left), `failed` (no answer), `queue_full`
/// (not asked: too many lookups waiting).
pub const TOPIC_ID_LOOKUPS: &str = "kpress_topic_id_lookups_total";
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
/// Produce requests forwarded without a rewrite attempt, labelled `reason`:
/// `before_auth` (the connection had not finished SASL authentication and
/// `rewrite_before_auth` is off).
pub const PRODUCE_NOT_REWRITTEN: &str = "kpress_produce_requests_not_rewritten_total";
/// kpress's own SASL authentications on its side connections, labelled `result`
/// (`ok`, `failed`).
pub const SIDE_AUTHENTICATIONS: &str = "kpress_side_authentications_total";

/// Re-reads of the policy file (on a change or SIGHUP), labelled `result`: `applied`,
/// `unchanged` (same bytes), `invalid` (the file has problems: the policy in force
/// stays), `restart_needed` (rules applied; keys that cannot change live were not).
pub const POLICY_RELOADS: &str = "kpress_policy_reloads_total";
/// Unix time of the policy file kpress applied last.
pub const POLICY_LOADED_TIME: &str = "kpress_policy_loaded_timestamp_seconds";

/// The `topic` label of topics without a label of their own (see [`TopicLabels`]).
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

/// Which topics get a `topic` label of their own: those a policy rule names or the
/// brokers' Metadata named, up to `[limits] max_topic_labels`; every other topic
/// (client-invented names included) is counted under [`OTHER_TOPICS`], so clients
/// cannot grow the exporter's series without bound.
#[derive(Debug)]
pub(crate) struct TopicLabels {
    cap: usize,
    labelled: std::sync::RwLock<std::collections::HashSet<Box<str>>>,
}

impl TopicLabels {
    pub(crate) fn new(cap: usize) -> TopicLabels {
        TopicLabels {
            cap,
            labelled: Default::default(),
        }
    }

    /// The label value for `topic`; `known` says whether a rule or the brokers name it.
    pub(crate) fn label(&self, topic: &str, known: impl FnOnce() -> bool) -> String {
        use std::sync::PoisonError;
        if self
            .labelled
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .contains(topic)
        {
            return topic.to_owned();
        }
        if !known() {
            return OTHER_TOPICS.to_owned();
        }
        let mut labelled = self
            .labelled
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        if labelled.len() < self.cap {
            labelled.insert(topic.into());
            return topic.to_owned();
        }
        OTHER_TOPICS.to_owned()
    }
}

pub(crate) fn batch_rewritten(
    topic: &str,
    from: Codec,
    to: Codec,
    bytes_in: usize,
    bytes_out: usize,
) {
    metrics::counter!(
        BATCHES_REWRITTEN,
        "topic" => topic.to_owned(),
        "from" => from.name(),
        "to" => to.name()
    )
    .increment(1);
    metrics::counter!(REWRITTEN_BYTES_IN).increment(bytes_in as u64);
    metrics::counter!(REWRITTEN_BYTES_OUT).increment(bytes_out as u64);
}

pub(crate) fn batch_grown(topic: &str, from: Codec, to: Codec) {
    metrics::counter!(
        BATCHES_GROWN,
        "topic" => topic.to_owned(),
        "from" => from.name(),
        "to" => to.name()
    )
    .increment(1);
}

pub(crate) fn batch_passed(reason: PassReason) {
    metrics::counter!(BATCHES_PASSED, "reason" => reason.as_str()).increment(1);
}

pub(crate) fn unknown_topic_ids(count: usize) {
    metrics::counter!(UNKNOWN_TOPIC_IDS).increment(count as u64);
}

pub(crate) fn connection_opened(listener: &'static str) {
    metrics::counter!(CONNECTIONS, "listener" => listener).increment(1);
    metrics::gauge!(CONNECTIONS_OPEN).increment(1.0);
}

pub(crate) fn connection_closed() {
    metrics::gauge!(CONNECTIONS_OPEN).decrement(1.0);
}

pub(crate) fn inflight_bytes_add(bytes: usize) {
    metrics::gauge!(INFLIGHT_BYTES).increment(bytes as f64);
}

pub(crate) fn inflight_bytes_sub(bytes: usize) {
    metrics::gauge!(INFLIGHT_BYTES).decrement(bytes as f64);
}

pub(crate) fn frame_refused(reason: &'static str) {
    metrics::counter!(FRAMES_REFUSED, "reason" => reason).increment(1);
}

pub(crate) fn rewrite_dropped(reason: &'static str) {
    metrics::counter!(REWRITES_DROPPED, "reason" => reason).increment(1);
}

pub(crate) fn connection_refused(reason: &'static str) {
    metrics::counter!(CONNECTIONS_REFUSED, "reason" => reason).increment(1);
}

pub(crate) fn topic_id_lookup(result: &'static str) {
    metrics::counter!(TOPIC_ID_LOOKUPS, "result" => result).increment(1);
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

pub(crate) fn tls_handshake_failed(reason: &'static str) {
    metrics::counter!(TLS_HANDSHAKE_FAILURES, "reason" => reason).increment(1);
}

pub(crate) fn tls_reload(side: &'static str, result: &'static str) {
    metrics::counter!(TLS_RELOADS, "side" => side, "result" => result).increment(1);
}

pub(crate) fn produce_not_rewritten(reason: &'static str) {
    metrics::counter!(PRODUCE_NOT_REWRITTEN, "reason" => reason).increment(1);
}

pub(crate) fn side_authentication(result: &'static str) {
    metrics::counter!(SIDE_AUTHENTICATIONS, "result" => result).increment(1);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_known_topics_get_labels_and_only_up_to_the_cap() {
        let labels = TopicLabels::new(2);
        assert_eq!(labels.label("invented-by-a-client", || false), OTHER_TOPICS);
        assert_eq!(labels.label("orders", || true), "orders");
        assert_eq!(labels.label("payments", || true), "payments");
        assert_eq!(labels.label("third", || true), OTHER_TOPICS);
        // Labelled topics keep their label without asking again.
        assert_eq!(labels.label("orders", || panic!("asked again")), "orders");
    }
}
