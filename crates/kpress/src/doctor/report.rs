//! Everything the doctor learned, printed for people (text) or scripts (the JSON
//! document whose schema the typed structs below spell out).

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::Serialize;
use serde_json::Value;

use super::findings::{
    release_from_produce, Finding, Severity, TopicSettings, COMPRESSION_TYPE, MAX_MESSAGE_BYTES,
};
use crate::gzip_providers;
use kpress_proxy::{ApiMaxVersions, Reachability, Stage};

/// Everything the doctor learned, printed as text or JSON.
#[derive(Debug, Default)]
pub(super) struct Report {
    pub(super) config: String,
    pub(super) bootstrap: Vec<Reachability>,
    /// Per advertised broker: node id, reachability, versions (or why none).
    pub(super) brokers: Vec<(i32, Reachability, Result<ApiMaxVersions, String>)>,
    pub(super) topics: Vec<TopicRow>,
    pub(super) findings: Vec<Finding>,
}

#[derive(Debug)]
pub(super) struct TopicRow {
    pub(super) name: String,
    pub(super) rule: Option<usize>,
    pub(super) target: String,
    /// Where the target came from: `rule`, or for topic mode `topic`,
    /// `broker_default`, `default`, `unresolved`.
    pub(super) target_source: &'static str,
    pub(super) largest_write: Option<usize>,
    pub(super) settings: TopicSettings,
}

/// `kpress doctor --format json`.
#[derive(Serialize)]
struct ReportJson<'a> {
    config: &'a str,
    ok: bool,
    problems: usize,
    infos: usize,
    gzip_providers: Value,
    bootstrap_servers: Vec<ReachabilityJson<'a>>,
    brokers: Vec<BrokerJson<'a>>,
    topics: Vec<TopicJson<'a>>,
    findings: &'a [Finding],
}

#[derive(Serialize)]
struct ReachabilityJson<'a> {
    address: &'a str,
    reachable: bool,
    tcp: StageJson<'a>,
    tls: StageJson<'a>,
    sasl: StageJson<'a>,
}

/// One step of a connection: `{"status": "ok"}`, `{"status": "failed", "error": …}`, …
#[derive(Serialize)]
#[serde(tag = "status", rename_all = "snake_case")]
enum StageJson<'a> {
    Ok,
    Failed { error: &'a str },
    NotConfigured,
    NotTried,
}

#[derive(Serialize)]
struct BrokerJson<'a> {
    #[serde(flatten)]
    reachability: ReachabilityJson<'a>,
    node_id: i32,
    #[serde(flatten)]
    versions: VersionsJson<'a>,
}

#[derive(Serialize)]
#[serde(untagged)]
enum VersionsJson<'a> {
    Read {
        produce_max_version: Option<i16>,
        kafka_version: String,
        api_max_versions: Vec<ApiVersionJson>,
    },
    Unread {
        error: &'a str,
    },
}

#[derive(Serialize)]
struct ApiVersionJson {
    api_key: i16,
    max_version: i16,
}

#[derive(Serialize)]
struct TopicJson<'a> {
    name: &'a str,
    /// 1-based, as check-config numbers rules; `null` for `[defaults]`.
    rule: Option<usize>,
    policy_compression: &'a str,
    target_source: &'static str,
    largest_write_bytes: Option<usize>,
    compression_type: Option<ConfigValueJson<'a>>,
    max_message_bytes: Option<ConfigValueJson<'a>>,
    /// Codec name → the topic's level for it.
    levels: BTreeMap<&'static str, &'a str>,
}

/// A topic config's value and where the broker took it from.
#[derive(Serialize)]
struct ConfigValueJson<'a> {
    value: &'a str,
    source: &'static str,
}

impl<'a> From<&'a Stage> for StageJson<'a> {
    fn from(stage: &'a Stage) -> Self {
        match stage {
            Stage::Ok => StageJson::Ok,
            Stage::Failed(error) => StageJson::Failed { error },
            Stage::NotConfigured => StageJson::NotConfigured,
            Stage::NotTried => StageJson::NotTried,
        }
    }
}

impl<'a> From<&'a Reachability> for ReachabilityJson<'a> {
    fn from(r: &'a Reachability) -> Self {
        ReachabilityJson {
            address: &r.address,
            reachable: r.reachable(),
            tcp: (&r.tcp).into(),
            tls: (&r.tls).into(),
            sasl: (&r.sasl).into(),
        }
    }
}

fn config_value<'a>(pair: &'a Option<(String, &'static str)>) -> Option<ConfigValueJson<'a>> {
    pair.as_ref()
        .map(|(value, source)| ConfigValueJson { value, source })
}

/// What a broker's ApiVersions say of its release, and its Produce version.
pub(super) fn version_line(versions: &ApiMaxVersions) -> (Option<i16>, String) {
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

fn stage_text(name: &str, stage: &Stage) -> String {
    match stage {
        Stage::Ok => format!("{name} ok"),
        Stage::Failed(error) => format!("{name} FAILED ({error})"),
        Stage::NotConfigured => format!("{name} not configured"),
        Stage::NotTried => format!("{name} not tried"),
    }
}

/// Each step of a connection, for people: `tcp ok, tls not configured, sasl ok`.
pub(super) fn reachability_text(r: &Reachability) -> String {
    format!(
        "{}, {}, {}",
        stage_text("tcp", &r.tcp),
        stage_text("tls", &r.tls),
        stage_text("sasl", &r.sasl)
    )
}

impl Report {
    pub(super) fn problems(&self) -> usize {
        self.findings
            .iter()
            .filter(|f| f.severity == Severity::Problem)
            .count()
    }

    /// The JSON document, its keys in serde_json's order (sorted).
    pub(super) fn json(&self) -> serde_json::Result<Value> {
        let problems = self.problems();
        let document = ReportJson {
            config: &self.config,
            ok: problems == 0,
            problems,
            infos: self.findings.len() - problems,
            gzip_providers: gzip_providers::statuses_json(),
            bootstrap_servers: self.bootstrap.iter().map(ReachabilityJson::from).collect(),
            brokers: self
                .brokers
                .iter()
                .map(|(node_id, reach, versions)| BrokerJson {
                    reachability: reach.into(),
                    node_id: *node_id,
                    versions: match versions {
                        Ok(versions) => {
                            let (produce, release) = version_line(versions);
                            VersionsJson::Read {
                                produce_max_version: produce,
                                kafka_version: release,
                                api_max_versions: versions
                                    .0
                                    .iter()
                                    .map(|&(api_key, max_version)| ApiVersionJson {
                                        api_key,
                                        max_version,
                                    })
                                    .collect(),
                            }
                        }
                        Err(error) => VersionsJson::Unread { error },
                    },
                })
                .collect(),
            topics: self
                .topics
                .iter()
                .map(|t| TopicJson {
                    name: &t.name,
                    rule: t.rule.map(|i| i + 1),
                    policy_compression: &t.target,
                    target_source: t.target_source,
                    largest_write_bytes: t.largest_write,
                    compression_type: config_value(&t.settings.compression_type),
                    max_message_bytes: config_value(&t.settings.max_message_bytes),
                    levels: t
                        .settings
                        .levels
                        .iter()
                        .map(|(codec, level)| (codec.name(), level.as_str()))
                        .collect(),
                })
                .collect(),
            findings: &self.findings,
        };
        serde_json::to_value(document)
    }

    pub(super) fn text(&self) -> String {
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
                "  {}: kpress {} ({rule}, target from {}); topic {COMPRESSION_TYPE} {}, \
                 {MAX_MESSAGE_BYTES} {}",
                t.name,
                t.target,
                t.target_source,
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

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use kpress_codec::Codec;

    fn reachability(address: &str, tls: Stage) -> Reachability {
        Reachability {
            address: address.to_owned(),
            tcp: Stage::Ok,
            tls,
            sasl: Stage::NotConfigured,
        }
    }

    #[test]
    fn the_json_document_keeps_its_schema() {
        let report = Report {
            config: "k.toml".to_owned(),
            bootstrap: vec![reachability("b:9092", Stage::Failed("bad cert".to_owned()))],
            brokers: vec![
                (
                    1,
                    reachability("n1:9092", Stage::NotConfigured),
                    Ok(ApiMaxVersions(vec![(0, 12), (32, 4)])),
                ),
                (
                    2,
                    reachability("n2:9092", Stage::NotTried),
                    Err("not reachable".to_owned()),
                ),
            ],
            topics: vec![
                TopicRow {
                    name: "logs".to_owned(),
                    rule: Some(0),
                    target: "zstd".to_owned(),
                    target_source: "rule",
                    largest_write: Some(1_048_588),
                    settings: TopicSettings {
                        compression_type: Some(("zstd".to_owned(), "topic")),
                        max_message_bytes: Some(("1048588".to_owned(), "default")),
                        levels: vec![
                            (Codec::Zstd, "3".to_owned()),
                            (Codec::Gzip, "-1".to_owned()),
                        ],
                    },
                },
                TopicRow {
                    name: "raw".to_owned(),
                    rule: None,
                    target: "producer".to_owned(),
                    target_source: "topic",
                    largest_write: None,
                    settings: TopicSettings::default(),
                },
            ],
            findings: vec![
                Finding::problem("bootstrap_unreachable", "b:9092", "cannot".to_owned()),
                Finding::info("level_differs", "logs", "note".to_owned()),
            ],
        };
        let stage = |status: &str| json!({ "status": status });
        assert_eq!(
            report.json().unwrap(),
            json!({
                "config": "k.toml",
                "ok": false,
                "problems": 1,
                "infos": 1,
                "gzip_providers": gzip_providers::statuses_json(),
                "bootstrap_servers": [{
                    "address": "b:9092",
                    "reachable": false,
                    "tcp": stage("ok"),
                    "tls": { "status": "failed", "error": "bad cert" },
                    "sasl": stage("not_configured"),
                }],
                "brokers": [
                    {
                        "address": "n1:9092",
                        "reachable": true,
                        "tcp": stage("ok"),
                        "tls": stage("not_configured"),
                        "sasl": stage("not_configured"),
                        "node_id": 1,
                        "produce_max_version": 12,
                        "kafka_version": "at least Kafka 4.0 (Produce up to v12)",
                        "api_max_versions": [
                            { "api_key": 0, "max_version": 12 },
                            { "api_key": 32, "max_version": 4 },
                        ],
                    },
                    {
                        "address": "n2:9092",
                        "reachable": false,
                        "tcp": stage("ok"),
                        "tls": stage("not_tried"),
                        "sasl": stage("not_configured"),
                        "node_id": 2,
                        "error": "not reachable",
                    },
                ],
                "topics": [
                    {
                        "name": "logs",
                        "rule": 1,
                        "policy_compression": "zstd",
                        "target_source": "rule",
                        "largest_write_bytes": 1_048_588,
                        "compression_type": { "value": "zstd", "source": "topic" },
                        "max_message_bytes": { "value": "1048588", "source": "default" },
                        "levels": { "gzip": "-1", "zstd": "3" },
                    },
                    {
                        "name": "raw",
                        "rule": null,
                        "policy_compression": "producer",
                        "target_source": "topic",
                        "largest_write_bytes": null,
                        "compression_type": null,
                        "max_message_bytes": null,
                        "levels": {},
                    },
                ],
                "findings": [
                    {
                        "severity": "problem",
                        "kind": "bootstrap_unreachable",
                        "subject": "b:9092",
                        "message": "cannot",
                    },
                    {
                        "severity": "info",
                        "kind": "level_differs",
                        "subject": "logs",
                        "message": "note",
                    },
                ],
            })
        );
    }

    #[test]
    fn versions_are_read_as_releases() {
        assert_eq!(
            version_line(&ApiMaxVersions(vec![(0, 13)])),
            (
                Some(13),
                "at least Kafka 4.1 (Produce up to v13)".to_owned()
            )
        );
        assert_eq!(
            version_line(&ApiMaxVersions(vec![(3, 12)])),
            (None, "no Produce API listed".to_owned())
        );
    }

    #[test]
    fn the_text_tells_each_connection_step() {
        let r = reachability("b:9092", Stage::Failed("bad cert".to_owned()));
        assert_eq!(
            reachability_text(&r),
            "tcp ok, tls FAILED (bad cert), sasl not configured"
        );
    }
}
