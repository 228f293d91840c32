//! From what the doctor read to what it found: pure functions of the policy, the
//! topics' configs and this host, with no network of their own.

use kpress_batch::{CompressionType, RewritePolicy, Target, HEADER_LEN};
use kpress_codec::gzip_providers::{ProviderKind, ProviderStatus};
use kpress_codec::Codec;
use serde::Serialize;

/// The topic configs the doctor reads.
pub(super) const COMPRESSION_TYPE: &str = "compression.type";
pub(super) const MAX_MESSAGE_BYTES: &str = "max.message.bytes";
pub(super) const LEVEL_KEYS: [(Codec, &str); 3] = [
    (Codec::Gzip, "compression.gzip.level"),
    (Codec::Lz4, "compression.lz4.level"),
    (Codec::Zstd, "compression.zstd.level"),
];

/// How much a finding matters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Severity {
    /// Something to fix: exit code 1.
    Problem,
    /// Worth knowing, nothing to fix.
    Info,
}

impl Severity {
    pub(super) fn name(self) -> &'static str {
        match self {
            Severity::Problem => "problem",
            Severity::Info => "info",
        }
    }
}

/// One thing the doctor found; serialized as the JSON report's `findings` items.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct Finding {
    pub(crate) severity: Severity,
    /// A stable name for scripts: `recompressed_by_broker`, `exceeds_max_message_bytes`, …
    pub(crate) kind: &'static str,
    pub(crate) subject: String,
    pub(crate) message: String,
}

impl Finding {
    pub(super) fn problem(
        kind: &'static str,
        subject: impl Into<String>,
        message: String,
    ) -> Finding {
        Finding {
            severity: Severity::Problem,
            kind,
            subject: subject.into(),
            message,
        }
    }

    pub(super) fn info(kind: &'static str, subject: impl Into<String>, message: String) -> Finding {
        Finding {
            severity: Severity::Info,
            kind,
            subject: subject.into(),
            message,
        }
    }
}

/// A topic's configs as the broker answered them (value and source).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct TopicSettings {
    pub(crate) compression_type: Option<(String, &'static str)>,
    pub(crate) max_message_bytes: Option<(String, &'static str)>,
    /// Per codec with a level: the topic's level, if the broker has the key (3.8+).
    pub(crate) levels: Vec<(Codec, String)>,
}

/// The largest batch kpress may write for a topic under `policy`, or `None` when it
/// writes none of its own (`producer`: batches pass as the producer sent them).
///
/// A rewrite is kept only if it fits `max_batch_bytes` (else the original batch
/// goes on), so that bounds every codec. Uncompressed output (`none`) is the records
/// as they decompress, bounded by `max_decompressed_bytes` too, plus the batch
/// header. A compressed rewrite of incompressible records can come out a little
/// larger than they are, so for codecs only `max_batch_bytes` is a safe bound.
pub(crate) fn largest_write(policy: &RewritePolicy) -> Option<usize> {
    match &policy.target {
        Target::Producer | Target::Unresolved(_) => None,
        Target::Codec {
            codec: Codec::None, ..
        } => Some(
            policy
                .max_batch_bytes
                .min(policy.max_decompressed_bytes.saturating_add(HEADER_LEN)),
        ),
        Target::Codec { .. } => Some(policy.max_batch_bytes),
    }
}

/// What the broker would do to a topic's batches kpress writes: the two problems
/// (a second recompression, a batch larger than the topic accepts) and notes.
pub(crate) fn topic_findings(
    topic: &str,
    policy: &RewritePolicy,
    settings: &TopicSettings,
) -> Vec<Finding> {
    let mut findings = Vec::new();
    match settings.compression_type.as_ref().map(|(v, _)| v.as_str()) {
        None => findings.push(Finding::info(
            "compression_type_unknown",
            topic,
            format!("the broker did not report {COMPRESSION_TYPE} for {topic}"),
        )),
        Some(value) => match (value.parse::<CompressionType>(), &policy.target) {
            (Err(_), _) => findings.push(Finding::problem(
                "compression_type_unrecognised",
                topic,
                format!(
                    "{topic}: {COMPRESSION_TYPE}={value} is no codec kpress knows \
                     (allowed: {})",
                    CompressionType::ALLOWED
                ),
            )),
            // Topic mode resolves to the topic's own codec, or passes batches as sent.
            (Ok(CompressionType::Producer), _) | (Ok(_), Target::Unresolved(_)) => {}
            (Ok(CompressionType::Codec(stored)), Target::Producer) => findings.push(Finding::info(
                "broker_decides",
                topic,
                format!(
                    "{topic}: the policy keeps producers' batches (producer) and the topic's \
                     {COMPRESSION_TYPE}={value}: the broker stores {} and recompresses \
                     batches in any other codec itself",
                    stored.name()
                ),
            )),
            (Ok(CompressionType::Codec(stored)), Target::Codec { codec, options })
                if stored == *codec =>
            {
                if let Some(note) = level_note(topic, *codec, options, settings) {
                    findings.push(note);
                }
            }
            (Ok(CompressionType::Codec(stored)), Target::Codec { codec, .. }) => {
                findings.push(Finding::problem(
                    "recompressed_by_broker",
                    topic,
                    format!(
                        "{topic}: kpress writes {} but the topic's {COMPRESSION_TYPE}={value}: \
                         the broker recompresses every batch kpress rewrote into {} a second \
                         time; set the topic's {COMPRESSION_TYPE} to producer (or {}), or the \
                         policy's to {}",
                        codec.name(),
                        stored.name(),
                        codec.name(),
                        stored.name(),
                    ),
                ))
            }
        },
    }
    let Some(largest) = largest_write(policy) else {
        return findings;
    };
    match settings.max_message_bytes.as_ref() {
        None => findings.push(Finding::info(
            "max_message_bytes_unknown",
            topic,
            format!("the broker did not report {MAX_MESSAGE_BYTES} for {topic}"),
        )),
        Some((value, _)) => match value.parse::<u64>() {
            Ok(limit) if largest as u64 > limit => findings.push(Finding::problem(
                "exceeds_max_message_bytes",
                topic,
                format!(
                    "{topic}: kpress may write {} batches of up to {largest} bytes ([limits] \
                     max_batch_bytes {}{}) but the topic accepts at most {limit} \
                     ({MAX_MESSAGE_BYTES}): a batch whose rewrite lands in between is refused \
                     (RECORD_TOO_LARGE) where the producer's own might have fitted; set \
                     max_batch_bytes to at most {limit}, or raise the topic's \
                     {MAX_MESSAGE_BYTES}",
                    policy.target.name(),
                    policy.max_batch_bytes,
                    if largest < policy.max_batch_bytes {
                        format!(", max_decompressed_bytes {}", policy.max_decompressed_bytes)
                    } else {
                        String::new()
                    },
                ),
            )),
            Ok(_) => {}
            Err(_) => findings.push(Finding::info(
                "max_message_bytes_unknown",
                topic,
                format!("{topic}: {MAX_MESSAGE_BYTES}={value} is not a byte count"),
            )),
        },
    }
    findings
}

/// A note when the topic names a level for the codec kpress writes: the broker keeps
/// same-codec batches as they are, so kpress's level is what gets stored.
fn level_note(
    topic: &str,
    codec: Codec,
    options: &kpress_codec::CompressionOptions,
    settings: &TopicSettings,
) -> Option<Finding> {
    let (_, topic_level) = settings.levels.iter().find(|(c, _)| *c == codec)?;
    let topic_level: i64 = topic_level.parse().ok()?;
    let (policy_level, topic_level) = match codec {
        Codec::Gzip => (
            i64::from(options.gzip_effective_level()),
            if topic_level < 0 { 6 } else { topic_level },
        ),
        Codec::Lz4 => (i64::from(options.lz4_level()), topic_level),
        Codec::Zstd => (i64::from(options.zstd_level()), topic_level),
        Codec::None | Codec::Snappy => return None,
    };
    (policy_level != topic_level).then(|| {
        Finding::info(
            "level_differs",
            topic,
            format!(
                "{topic}: the broker keeps kpress's {} batches as they are (it compares codecs, \
                 not levels), so they are stored at kpress's level {policy_level}, not the \
                 topic's {topic_level}",
                codec.name()
            ),
        )
    })
}

/// The oldest Kafka release whose brokers list Produce up to `max` (v13 ⇒ 4.1, v12 ⇒
/// 4.0, v11 ⇒ 3.8, v10 ⇒ 3.7, …); kpress caps Produce at the version it parses, so
/// a newer broker still reads as the newest release kpress knows.
pub(crate) fn release_from_produce(max: i16) -> &'static str {
    match max {
        13.. => "4.1",
        12 => "4.0",
        11 => "3.8",
        10 => "3.7",
        8 | 9 => "2.4",
        7 => "2.1",
        6 => "2.0",
        5 => "1.0",
        3 | 4 => "0.11",
        _ => "0.10",
    }
}

/// Notes about this host's gzip providers: QATzip present without its accelerator.
pub(super) fn provider_findings(statuses: &[ProviderStatus]) -> Vec<Finding> {
    statuses
        .iter()
        .filter(|s| s.provider == ProviderKind::Qat && s.available && !s.hardware)
        .map(|status| {
            Finding::info(
                "qat_without_hardware",
                "gzip",
                format!(
                    "gzip provider qat runs QATzip's software backup, not the accelerator: {}",
                    status.detail
                ),
            )
        })
        .collect()
}

/// A policy file that cannot be run: each line is a problem.
pub(super) fn config_invalid(message: String) -> Finding {
    Finding::problem("config_invalid", "config", message)
}

/// A bootstrap server kpress cannot open its connections to; `how` tells each step.
pub(super) fn bootstrap_unreachable(server: &str, how: &str) -> Finding {
    Finding::problem(
        "bootstrap_unreachable",
        server,
        format!("bootstrap server {server} cannot be used: {how}"),
    )
}

/// An advertised broker kpress cannot open its connections to; `how` tells each step.
pub(super) fn broker_unreachable(node_id: i32, address: &str, how: &str) -> Finding {
    Finding::problem(
        "broker_unreachable",
        format!("node {node_id}"),
        format!("broker node {node_id} as advertised at {address} cannot be used: {how}"),
    )
}

/// No bootstrap server could be used at all.
pub(super) fn no_bootstrap_server() -> Finding {
    Finding::problem(
        "cluster_unread",
        "cluster",
        "no bootstrap server can be used: topics and brokers not checked".to_owned(),
    )
}

/// The cluster's versions or metadata could not be read from `server`.
pub(super) fn cluster_unread(server: &str, error: &str) -> Finding {
    Finding::problem(
        "cluster_unread",
        "cluster",
        format!("cannot read the cluster from {server}: {error}"),
    )
}

/// `server` lists no DescribeConfigs version kpress reads.
pub(super) fn no_describe_configs(server: &str) -> Finding {
    Finding::problem(
        "describe_configs_failed",
        server,
        format!("{server} lists no DescribeConfigs version kpress reads (v1-v4)"),
    )
}

/// A DescribeConfigs request to `server` failed.
pub(super) fn describe_configs_failed(server: &str, error: &str) -> Finding {
    Finding::problem(
        "describe_configs_failed",
        server,
        format!("cannot read topic configs from {server}: {error}"),
    )
}

/// The broker answered DescribeConfigs for `topic` with an error.
pub(super) fn topic_undescribed(topic: &str, error_code: i16, message: Option<&str>) -> Finding {
    Finding::problem(
        "describe_configs_failed",
        topic,
        format!(
            "{topic}: the broker would not describe its configs (error {error_code}{})",
            message.map(|m| format!(": {m}")).unwrap_or_default()
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use kpress_codec::CompressionOptions;

    fn settings(compression: &str, max_message_bytes: &str) -> TopicSettings {
        TopicSettings {
            compression_type: Some((compression.to_owned(), "topic")),
            max_message_bytes: Some((max_message_bytes.to_owned(), "default")),
            levels: Vec::new(),
        }
    }

    fn to(codec: Codec) -> RewritePolicy {
        RewritePolicy::to_codec(codec, CompressionOptions::default())
    }

    fn kinds(findings: &[Finding]) -> Vec<(&'static str, Severity)> {
        findings.iter().map(|f| (f.kind, f.severity)).collect()
    }

    #[test]
    fn a_topic_codec_other_than_the_policys_is_a_second_recompression() {
        let found = topic_findings("t", &to(Codec::Zstd), &settings("gzip", "1048588"));
        assert_eq!(
            kinds(&found),
            [("recompressed_by_broker", Severity::Problem)]
        );
        assert!(found[0].message.contains("kpress writes zstd"), "{found:?}");
        assert!(found[0].message.contains("compression.type=gzip"));
        // `uncompressed` is the topic's name for none.
        let found = topic_findings("t", &to(Codec::Lz4), &settings("uncompressed", "1048588"));
        assert_eq!(
            kinds(&found),
            [("recompressed_by_broker", Severity::Problem)]
        );
    }

    #[test]
    fn producer_topics_and_matching_codecs_are_fine() {
        for (topic, policy) in [("producer", Codec::Zstd), ("zstd", Codec::Zstd)] {
            assert_eq!(
                topic_findings("t", &to(policy), &settings(topic, "1048588")),
                []
            );
        }
        assert_eq!(
            topic_findings("t", &to(Codec::None), &settings("uncompressed", "1048588")),
            []
        );
    }

    #[test]
    fn a_producer_policy_on_a_codec_topic_is_only_a_note() {
        let found = topic_findings("t", &RewritePolicy::default(), &settings("gzip", "10"));
        assert_eq!(kinds(&found), [("broker_decides", Severity::Info)]);
    }

    #[test]
    fn a_topic_that_accepts_less_than_kpress_may_write_is_a_problem() {
        let policy = RewritePolicy {
            max_batch_bytes: 2_000_000,
            ..to(Codec::Zstd)
        };
        let found = topic_findings("t", &policy, &settings("producer", "1048588"));
        assert_eq!(
            kinds(&found),
            [("exceeds_max_message_bytes", Severity::Problem)]
        );
        assert!(
            found[0].message.contains("up to 2000000 bytes"),
            "{found:?}"
        );
        assert!(found[0].message.contains("at most 1048588"));
        assert_eq!(
            topic_findings("t", &policy, &settings("producer", "2000000")),
            []
        );
        // Both problems at once.
        let found = topic_findings("t", &policy, &settings("snappy", "1000"));
        assert_eq!(
            kinds(&found),
            [
                ("recompressed_by_broker", Severity::Problem),
                ("exceeds_max_message_bytes", Severity::Problem)
            ]
        );
    }

    #[test]
    fn the_largest_write_follows_the_target() {
        assert_eq!(largest_write(&RewritePolicy::default()), None);
        assert_eq!(
            largest_write(&to(Codec::Gzip)),
            Some(kpress_batch::DEFAULT_MAX_BATCH_BYTES)
        );
        let none = RewritePolicy {
            max_batch_bytes: 1 << 20,
            max_decompressed_bytes: 1000,
            ..to(Codec::None)
        };
        assert_eq!(largest_write(&none), Some(1000 + HEADER_LEN));
        // Compressed output of incompressible records may exceed them: no such bound.
        let zstd = RewritePolicy {
            max_decompressed_bytes: 1000,
            ..to(Codec::Zstd)
        };
        assert_eq!(largest_write(&zstd), Some(zstd.max_batch_bytes));
        // A producer policy writes nothing of its own, whatever the topic's limit.
        assert_eq!(
            topic_findings("t", &RewritePolicy::default(), &settings("producer", "1")),
            []
        );
    }

    #[test]
    fn a_topic_level_for_kpress_codec_is_noted_as_not_applied() {
        let mut with_level = settings("zstd", "1048588");
        with_level.levels = vec![(Codec::Zstd, "9".into())];
        let found = topic_findings("t", &to(Codec::Zstd), &with_level);
        assert_eq!(kinds(&found), [("level_differs", Severity::Info)]);
        with_level.levels = vec![(Codec::Zstd, "3".into())];
        assert_eq!(topic_findings("t", &to(Codec::Zstd), &with_level), []);
        // gzip's -1 is zlib's 6, kpress's default too.
        let mut gzip = settings("gzip", "1048588");
        gzip.levels = vec![(Codec::Gzip, "-1".into())];
        assert_eq!(topic_findings("t", &to(Codec::Gzip), &gzip), []);
    }

    #[test]
    fn unknown_or_missing_values_are_said() {
        let found = topic_findings("t", &to(Codec::Zstd), &settings("brotli", "x"));
        assert_eq!(
            kinds(&found),
            [
                ("compression_type_unrecognised", Severity::Problem),
                ("max_message_bytes_unknown", Severity::Info)
            ]
        );
        let found = topic_findings("t", &to(Codec::Zstd), &TopicSettings::default());
        assert_eq!(
            kinds(&found),
            [
                ("compression_type_unknown", Severity::Info),
                ("max_message_bytes_unknown", Severity::Info)
            ]
        );
    }

    #[test]
    fn releases_are_read_from_produce_versions() {
        assert_eq!(release_from_produce(13), "4.1");
        assert_eq!(release_from_produce(12), "4.0");
        assert_eq!(release_from_produce(11), "3.8");
        assert_eq!(release_from_produce(10), "3.7");
        assert_eq!(release_from_produce(7), "2.1");
    }

    #[test]
    fn qat_without_its_accelerator_is_a_note() {
        let status = |provider, available, hardware| ProviderStatus {
            provider,
            available,
            hardware,
            detail: "software backup".to_owned(),
        };
        let found = provider_findings(&[
            status(ProviderKind::Zlib, true, false),
            status(ProviderKind::Qat, true, false),
            status(ProviderKind::Qat, false, false),
            status(ProviderKind::Qat, true, true),
        ]);
        assert_eq!(kinds(&found), [("qat_without_hardware", Severity::Info)]);
        assert!(found[0].message.ends_with(": software backup"), "{found:?}");
    }

    #[test]
    fn cluster_findings_name_what_failed() {
        assert_eq!(
            topic_undescribed("t", 29, Some("denied")).message,
            "t: the broker would not describe its configs (error 29: denied)"
        );
        assert_eq!(
            topic_undescribed("t", 29, None).message,
            "t: the broker would not describe its configs (error 29)"
        );
        let f = broker_unreachable(
            3,
            "h:9092",
            "tcp FAILED (refused), tls not tried, sasl not tried",
        );
        assert_eq!(
            (f.kind, f.subject.as_str()),
            ("broker_unreachable", "node 3")
        );
        assert_eq!(no_bootstrap_server().severity, Severity::Problem);
    }
}
