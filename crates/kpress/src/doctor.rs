//! `kpress doctor --config FILE`: asks the brokers a policy names whether they would
//! undo or refuse kpress's work, and whether kpress can reach them at all.
//!
//! It connects as `kpress run` does (`[upstream]`, `[upstream.tls]`, kpress's own
//! `[upstream.sasl]` login), then reports:
//! - each bootstrap server's and each advertised broker's reachability (TCP, TLS,
//!   SASL), and each broker's Kafka version as far as its ApiVersions tell;
//! - per topic, its `compression.type`, levels and `max.message.bytes` next to the
//!   policy's target for it, with a problem where the broker would recompress what
//!   kpress wrote, or refuse a batch kpress may write;
//! - the gzip providers of this host.
//!
//! Exit 0 when nothing is a problem, 1 otherwise; notes (`info`) never fail it.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use kpress_batch::{CompressionType, PolicyLookup, RewritePolicy, Target, HEADER_LEN};
use kpress_codec::Codec;
use kpress_config::{Config, PolicySet};
use kpress_proxy::{AdminConnector, ApiMaxVersions, Reachability, Stage, TopicConfigs};
use serde_json::{json, Value};

use crate::{check_config, gzip_providers, run};

/// How a command prints its result.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub(crate) enum Format {
    /// Lines for people.
    #[default]
    Text,
    /// One JSON document on stdout, for scripts.
    Json,
}

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// The policy file, as `kpress run` takes it.
    #[arg(long, short = 'c', value_name = "FILE")]
    config: PathBuf,
    /// text (default) or json: one JSON document on stdout.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    format: Format,
}

/// The topic configs the doctor reads.
const COMPRESSION_TYPE: &str = "compression.type";
const MAX_MESSAGE_BYTES: &str = "max.message.bytes";
const LEVEL_KEYS: [(Codec, &str); 3] = [
    (Codec::Gzip, "compression.gzip.level"),
    (Codec::Lz4, "compression.lz4.level"),
    (Codec::Zstd, "compression.zstd.level"),
];
/// Topics per DescribeConfigs request: answers stay a few hundred KiB.
const TOPICS_PER_REQUEST: usize = 200;
/// Kafka's internal topics: the broker refuses clients' Produce requests to them, so
/// kpress never writes there.
const INTERNAL_TOPICS: [&str; 3] = [
    "__consumer_offsets",
    "__transaction_state",
    "__share_group_state",
];

/// How much a finding matters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Severity {
    /// Something to fix: exit code 1.
    Problem,
    /// Worth knowing, nothing to fix.
    Info,
}

impl Severity {
    fn name(self) -> &'static str {
        match self {
            Severity::Problem => "problem",
            Severity::Info => "info",
        }
    }
}

/// One thing the doctor found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Finding {
    pub(crate) severity: Severity,
    /// A stable name for scripts: `recompressed_by_broker`, `exceeds_max_message_bytes`, …
    pub(crate) kind: &'static str,
    pub(crate) subject: String,
    pub(crate) message: String,
}

impl Finding {
    fn problem(kind: &'static str, subject: impl Into<String>, message: String) -> Finding {
        Finding {
            severity: Severity::Problem,
            kind,
            subject: subject.into(),
            message,
        }
    }

    fn info(kind: &'static str, subject: impl Into<String>, message: String) -> Finding {
        Finding {
            severity: Severity::Info,
            kind,
            subject: subject.into(),
            message,
        }
    }

    fn json(&self) -> Value {
        json!({
            "severity": self.severity.name(),
            "kind": self.kind,
            "subject": self.subject,
            "message": self.message,
        })
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

impl TopicSettings {
    fn from_configs(configs: &TopicConfigs) -> TopicSettings {
        let entry = |name: &str| {
            configs
                .entry(name)
                .and_then(|e| Some((e.value.clone()?, e.source.name())))
        };
        TopicSettings {
            compression_type: entry(COMPRESSION_TYPE),
            max_message_bytes: entry(MAX_MESSAGE_BYTES),
            levels: LEVEL_KEYS
                .iter()
                .filter_map(|(codec, key)| Some((*codec, configs.value(key)?.to_owned())))
                .collect(),
        }
    }
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
        Target::Producer => None,
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
            (Ok(CompressionType::Producer), _) => {}
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

fn version_line(versions: &ApiMaxVersions) -> (Option<i16>, String) {
    match versions.produce() {
        Some(max) => (
            Some(max),
            format!(
                "at least Kafka {} (Produce up to v{max})",
                release_from_produce(max)
            ),
        ),
        None => (None, "no Produce API listed".to_owned()),
    }
}

fn stage_json(stage: &Stage) -> Value {
    match stage {
        Stage::Ok => json!({ "status": "ok" }),
        Stage::Failed(error) => json!({ "status": "failed", "error": error }),
        Stage::NotConfigured => json!({ "status": "not_configured" }),
        Stage::NotTried => json!({ "status": "not_tried" }),
    }
}

fn stage_text(name: &str, stage: &Stage) -> String {
    match stage {
        Stage::Ok => format!("{name} ok"),
        Stage::Failed(error) => format!("{name} FAILED ({error})"),
        Stage::NotConfigured => format!("{name} not configured"),
        Stage::NotTried => format!("{name} not tried"),
    }
}

fn reachability_json(r: &Reachability) -> Value {
    json!({
        "address": r.address,
        "reachable": r.reachable(),
        "tcp": stage_json(&r.tcp),
        "tls": stage_json(&r.tls),
        "sasl": stage_json(&r.sasl),
    })
}

fn reachability_text(r: &Reachability) -> String {
    format!(
        "{}, {}, {}",
        stage_text("tcp", &r.tcp),
        stage_text("tls", &r.tls),
        stage_text("sasl", &r.sasl)
    )
}

/// Everything the doctor learned, printed as text or JSON.
#[derive(Debug, Default)]
struct Report {
    config: String,
    bootstrap: Vec<Reachability>,
    /// Per advertised broker: node id, reachability, versions (or why none).
    brokers: Vec<(i32, Reachability, Result<ApiMaxVersions, String>)>,
    topics: Vec<TopicRow>,
    findings: Vec<Finding>,
}

#[derive(Debug)]
struct TopicRow {
    name: String,
    rule: Option<usize>,
    target: String,
    largest_write: Option<usize>,
    settings: TopicSettings,
}

impl Report {
    fn problems(&self) -> usize {
        self.findings
            .iter()
            .filter(|f| f.severity == Severity::Problem)
            .count()
    }

    fn json(&self) -> Value {
        let problems = self.problems();
        let pair = |p: &Option<(String, &'static str)>| match p {
            Some((value, source)) => json!({ "value": value, "source": source }),
            None => Value::Null,
        };
        json!({
            "config": self.config,
            "ok": problems == 0,
            "problems": problems,
            "infos": self.findings.len() - problems,
            "gzip_providers": gzip_providers::statuses_json(),
            "bootstrap_servers": self.bootstrap.iter().map(reachability_json).collect::<Vec<_>>(),
            "brokers": self.brokers.iter().map(|(node_id, reach, versions)| {
                let mut broker = reachability_json(reach);
                broker["node_id"] = json!(node_id);
                match versions {
                    Ok(versions) => {
                        let (produce, release) = version_line(versions);
                        broker["produce_max_version"] = json!(produce);
                        broker["kafka_version"] = json!(release);
                        broker["api_max_versions"] = versions.0.iter()
                            .map(|(key, max)| json!({ "api_key": key, "max_version": max }))
                            .collect::<Vec<_>>().into();
                    }
                    Err(error) => broker["error"] = json!(error),
                }
                broker
            }).collect::<Vec<_>>(),
            "topics": self.topics.iter().map(|t| json!({
                "name": t.name,
                "rule": t.rule.map(|i| i + 1),
                "policy_compression": t.target,
                "largest_write_bytes": t.largest_write,
                "compression_type": pair(&t.settings.compression_type),
                "max_message_bytes": pair(&t.settings.max_message_bytes),
                "levels": t.settings.levels.iter()
                    .map(|(codec, level)| (codec.name().to_owned(), json!(level)))
                    .collect::<serde_json::Map<_, _>>(),
            })).collect::<Vec<_>>(),
            "findings": self.findings.iter().map(Finding::json).collect::<Vec<_>>(),
        })
    }

    fn text(&self) -> String {
        let mut out = format!("kpress doctor: {}\n", self.config);
        out.push_str("gzip providers on this host:\n");
        for status in gzip_providers::statuses() {
            let _ = writeln!(out, "  {}", gzip_providers::describe(&status));
        }
        out.push_str("bootstrap servers:\n");
        for r in &self.bootstrap {
            let _ = writeln!(out, "  {}: {}", r.address, reachability_text(r));
        }
        if !self.brokers.is_empty() {
            out.push_str("brokers, as advertised:\n");
        }
        for (node_id, r, versions) in &self.brokers {
            let version = match versions {
                Ok(versions) => version_line(versions).1,
                Err(error) => format!("no versions: {error}"),
            };
            let _ = writeln!(
                out,
                "  node {node_id} at {}: {}; {version}",
                r.address,
                reachability_text(r)
            );
        }
        if !self.topics.is_empty() {
            out.push_str("topics:\n");
        }
        for t in &self.topics {
            let shown = |p: &Option<(String, &str)>| match p {
                Some((value, source)) => format!("{value} ({source})"),
                None => "?".to_owned(),
            };
            let rule = match t.rule {
                Some(i) => format!("rule {}", i + 1),
                None => "defaults".to_owned(),
            };
            let _ = writeln!(
                out,
                "  {}: kpress {} ({rule}); topic {COMPRESSION_TYPE} {}, {MAX_MESSAGE_BYTES} {}",
                t.name,
                t.target,
                shown(&t.settings.compression_type),
                shown(&t.settings.max_message_bytes),
            );
        }
        for finding in &self.findings {
            let _ = writeln!(out, "{}: {}", finding.severity.name(), finding.message);
        }
        let problems = self.problems();
        let _ = writeln!(
            out,
            "{problems} problem{}, {} note{}",
            if problems == 1 { "" } else { "s" },
            self.findings.len() - problems,
            if self.findings.len() - problems == 1 {
                ""
            } else {
                "s"
            },
        );
        out
    }
}

pub(crate) fn main(args: Args) -> anyhow::Result<ExitCode> {
    let config_name = args.config.display().to_string();
    let config = match check_config::load_checked(&args.config) {
        Ok(config) => config,
        Err((_, lines)) => {
            let report = Report {
                config: config_name,
                findings: lines
                    .into_iter()
                    .map(|line| Finding::problem("config_invalid", "config", line))
                    .collect(),
                ..Report::default()
            };
            print(&report, args.format);
            return Ok(ExitCode::FAILURE);
        }
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the tokio runtime")?;
    let report = runtime.block_on(examine(config_name, &config))?;
    print(&report, args.format);
    Ok(if report.problems() == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

fn print(report: &Report, format: Format) {
    match format {
        Format::Text => print!("{}", report.text()),
        Format::Json => println!("{:#}", report.json()),
    }
}

async fn examine(config_name: String, config: &Config) -> anyhow::Result<Report> {
    let mut report = Report {
        config: config_name,
        ..Report::default()
    };
    for warning in &config.warnings {
        report.findings.push(Finding::info(
            "config_warning",
            "config",
            warning.to_string(),
        ));
    }
    for status in gzip_providers::statuses() {
        if status.provider == kpress_codec::gzip_providers::ProviderKind::Qat
            && status.available
            && !status.hardware
        {
            report.findings.push(Finding::info(
                "qat_without_hardware",
                "gzip",
                format!(
                    "gzip provider qat runs QATzip's software backup, not the accelerator: {}",
                    status.detail
                ),
            ));
        }
    }
    let settings = match run::proxy_settings(config, Duration::ZERO) {
        Ok(settings) => settings,
        Err(err) => {
            report.findings.push(Finding::problem(
                "config_invalid",
                "config",
                format!("{err:#}"),
            ));
            return Ok(report);
        }
    };
    let connector = match AdminConnector::new(&settings) {
        Ok(connector) => connector,
        Err(err) => {
            report.findings.push(Finding::problem(
                "config_invalid",
                "config",
                err.to_string(),
            ));
            return Ok(report);
        }
    };
    for server in connector.bootstrap_servers() {
        let reachability = connector.check(server).await;
        if !reachability.reachable() {
            report.findings.push(Finding::problem(
                "bootstrap_unreachable",
                server.clone(),
                format!(
                    "bootstrap server {server} cannot be used: {}",
                    reachability_text(&reachability)
                ),
            ));
        }
        report.bootstrap.push(reachability);
    }
    let Some(server) = report
        .bootstrap
        .iter()
        .find(|r| r.reachable())
        .map(|r| r.address.clone())
    else {
        report.findings.push(Finding::problem(
            "cluster_unread",
            "cluster",
            "no bootstrap server can be used: topics and brokers not checked".to_owned(),
        ));
        return Ok(report);
    };
    let read = async {
        let mut client = connector.connect(&server).await?;
        let versions = client.api_versions().await?;
        let view = client.metadata().await?;
        Ok::<_, kpress_proxy::AdminError>((client, versions, view))
    };
    let (mut client, versions, view) = match read.await {
        Ok(read) => read,
        Err(err) => {
            report.findings.push(Finding::problem(
                "cluster_unread",
                "cluster",
                format!("cannot read the cluster from {server}: {err}"),
            ));
            return Ok(report);
        }
    };
    for broker in &view.brokers {
        let address = broker.address();
        let reachability = connector.check(&address).await;
        let versions = if reachability.reachable() {
            match connector.connect(&address).await {
                Ok(mut node) => node.api_versions().await.map_err(|e| e.to_string()),
                Err(err) => Err(err.to_string()),
            }
        } else {
            report.findings.push(Finding::problem(
                "broker_unreachable",
                format!("node {}", broker.node_id),
                format!(
                    "broker node {} as advertised at {address} cannot be used: {}",
                    broker.node_id,
                    reachability_text(&reachability)
                ),
            ));
            Err("not reachable".to_owned())
        };
        report
            .brokers
            .push((broker.node_id, reachability, versions));
    }
    let policies = PolicySet::new(config);
    let topics: Vec<&str> = view
        .topics
        .iter()
        .map(String::as_str)
        .filter(|t| !INTERNAL_TOPICS.contains(t))
        .collect();
    let Some(version) = versions.describe_configs() else {
        report.findings.push(Finding::problem(
            "describe_configs_failed",
            server.clone(),
            format!("{server} lists no DescribeConfigs version kpress reads (v1-v4)"),
        ));
        return Ok(report);
    };
    let mut keys = vec![COMPRESSION_TYPE, MAX_MESSAGE_BYTES];
    keys.extend(LEVEL_KEYS.iter().map(|(_, key)| *key));
    let mut answered = Vec::with_capacity(topics.len());
    for chunk in topics.chunks(TOPICS_PER_REQUEST) {
        match client.describe_topic_configs(version, chunk, &keys).await {
            Ok(configs) => answered.extend(configs),
            Err(err) => {
                report.findings.push(Finding::problem(
                    "describe_configs_failed",
                    server.clone(),
                    format!("cannot read topic configs from {server}: {err}"),
                ));
                return Ok(report);
            }
        }
    }
    answered.sort_by(|a, b| a.topic.cmp(&b.topic));
    for configs in answered {
        if configs.error_code != 0 {
            report.findings.push(Finding::problem(
                "describe_configs_failed",
                configs.topic.clone(),
                format!(
                    "{}: the broker would not describe its configs (error {}{})",
                    configs.topic,
                    configs.error_code,
                    configs
                        .error_message
                        .as_deref()
                        .map(|m| format!(": {m}"))
                        .unwrap_or_default()
                ),
            ));
            continue;
        }
        let policy = policies.policy_for(&configs.topic);
        let settings = TopicSettings::from_configs(&configs);
        report
            .findings
            .extend(topic_findings(&configs.topic, policy, &settings));
        report.topics.push(TopicRow {
            rule: policies.rule_index(&configs.topic),
            target: policy.target.name().to_owned(),
            largest_write: largest_write(policy),
            name: configs.topic,
            settings,
        });
    }
    Ok(report)
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
        assert_eq!(
            version_line(&ApiMaxVersions(vec![(0, 13)])).1,
            "at least Kafka 4.1 (Produce up to v13)"
        );
    }
}
