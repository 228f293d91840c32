//! `kpress doctor --admin URL`: the consumers a running kpress has seen that do not
//! read every codec (its `/consumers` page), set against the topics the doctor read.
//! A finding per consumer and topic it cannot read as stored: a note where kpress
//! re-encodes for it, a problem where it does not (straight from the broker, or with
//! re-encoding off, it fails on those batches).

use std::time::Duration;

use anyhow::{bail, Context};
use kpress_codec::Codec;
use serde::Deserialize;

use super::findings::Finding;
use super::report::TopicRow;
use crate::plain_http;

/// What fetching the page may take in all.
const DEADLINE: Duration = Duration::from_secs(5);

/// The largest answer read: 256 consumers with 32 topics each fit many times over.
const MAX_ANSWER_BYTES: u64 = 8 << 20;

/// The admin endpoint's path.
const PATH: &str = "/consumers";

/// One consumer as `/consumers` lists it.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
pub(crate) struct SeenConsumer {
    pub(crate) client_id: Option<String>,
    pub(crate) software_name: Option<String>,
    pub(crate) software_version: Option<String>,
    pub(crate) listener: String,
    pub(crate) max_fetch_version: i16,
    pub(crate) reads: Vec<String>,
    pub(crate) handling: String,
    #[serde(default)]
    pub(crate) topics: Vec<String>,
}

#[derive(Deserialize)]
struct Page {
    consumers: Vec<SeenConsumer>,
}

/// The consumers `admin` (`http://HOST:PORT`, the `[admin] bind` of a running kpress)
/// has seen.
pub(super) fn read(admin: &str) -> anyhow::Result<Vec<SeenConsumer>> {
    let body = get(admin)?;
    let page: Page = serde_json::from_str(&body)
        .with_context(|| format!("{admin}{PATH} did not answer the consumers document"))?;
    Ok(page.consumers)
}

/// The body of `GET admin/consumers`, over HTTP/1.0 (the admin endpoint's plain HTTP).
fn get(admin: &str) -> anyhow::Result<String> {
    let url = format!("{}{PATH}", admin.trim_end_matches('/'));
    if plain_http::parse_url(&url).map_or(true, |target| target.path != PATH) {
        bail!("--admin wants http://HOST:PORT, got {admin}");
    }
    let answer = plain_http::get(&url, "kpress-doctor", DEADLINE, MAX_ANSWER_BYTES)?;
    if answer.status != 200 {
        bail!(
            "{url} answered {:?} (a kpress without /consumers is older than this doctor)",
            answer.status_line
        );
    }
    answer.ok_text()
}

/// A consumer named for people: its `client.id`, software and listener.
fn who(consumer: &SeenConsumer) -> String {
    let id = match &consumer.client_id {
        Some(id) => format!("client.id {id:?}"),
        None => "a consumer without client.id".to_owned(),
    };
    let software = match (&consumer.software_name, &consumer.software_version) {
        (Some(name), Some(version)) => format!(", {name}/{version}"),
        _ => String::new(),
    };
    format!(
        "{id}{software} (Fetch v{}, via {}, reads {})",
        consumer.max_fetch_version,
        consumer.listener,
        consumer.reads.join(", ")
    )
}

/// The codec a topic's batches are stored in, when the doctor knows it: the topic's
/// own `compression.type` if it names one (the broker recompresses into it), else the
/// codec kpress writes for it.
fn stored_codec(topic: &TopicRow) -> Option<&'static str> {
    let named = |name: &str| {
        let name = if name == "uncompressed" { "none" } else { name };
        Codec::ALL.into_iter().map(Codec::name).find(|c| *c == name)
    };
    topic
        .settings
        .compression_type
        .as_ref()
        .and_then(|(value, _)| named(value))
        .or_else(|| named(&topic.target))
}

/// A finding per consumer and topic it cannot read as stored: the topics kpress found
/// it fetching in a codec it does not read, and the topics the doctor read whose
/// stored codec it does not read.
pub(super) fn consumer_findings(consumers: &[SeenConsumer], topics: &[TopicRow]) -> Vec<Finding> {
    let mut findings = Vec::new();
    for consumer in consumers {
        let mut unreadable: Vec<(String, Option<&str>)> = consumer
            .topics
            .iter()
            .map(|topic| (topic.clone(), None))
            .collect();
        for topic in topics {
            let Some(codec) = stored_codec(topic) else {
                continue;
            };
            if consumer.reads.iter().any(|r| r == codec) {
                continue;
            }
            match unreadable.iter_mut().find(|(name, _)| *name == topic.name) {
                Some(seen) => seen.1 = Some(codec),
                None => unreadable.push((topic.name.clone(), Some(codec))),
            }
        }
        let who = who(consumer);
        for (topic, codec) in unreadable {
            let stored = match codec {
                Some(codec) => format!("its batches are stored in {codec}"),
                None => "kpress found batches in a codec it does not read".to_owned(),
            };
            let subject = format!(
                "{} / {topic}",
                consumer.client_id.as_deref().unwrap_or_default()
            );
            let straight =
                format!("{who} cannot read topic {topic} straight from the broker ({stored})");
            findings.push(match consumer.handling.as_str() {
                "reencoded" => Finding::info(
                    "consumer_reencoded",
                    subject,
                    format!("{straight}; kpress re-encodes those batches for it"),
                ),
                "reencode_off" => Finding::problem(
                    "consumer_cannot_read",
                    subject,
                    format!(
                        "{straight}, and kpress does not re-encode for it: \
                         [consumers] reencode = false"
                    ),
                ),
                "version_not_reencoded" => Finding::problem(
                    "consumer_cannot_read",
                    subject,
                    format!(
                        "{straight}, and kpress does not re-encode for it: it fetches at \
                         Fetch v{}, a version kpress does not read",
                        consumer.max_fetch_version
                    ),
                ),
                other => Finding::problem(
                    "consumer_cannot_read",
                    subject,
                    format!("{straight}; kpress reports its handling as {other:?}"),
                ),
            });
        }
    }
    findings
}

/// The finding when the admin endpoint cannot be read.
pub(super) fn admin_unread(admin: &str, error: &anyhow::Error) -> Finding {
    Finding::problem(
        "admin_unreachable",
        admin,
        format!("could not read the consumers kpress has seen from {admin}{PATH}: {error:#}"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::doctor::findings::{Severity, TopicSettings};

    fn consumer(handling: &str, topics: &[&str]) -> SeenConsumer {
        SeenConsumer {
            client_id: Some("old".to_owned()),
            software_name: None,
            software_version: None,
            listener: "bootstrap".to_owned(),
            max_fetch_version: 8,
            reads: ["none", "gzip", "snappy", "lz4"].map(String::from).to_vec(),
            handling: handling.to_owned(),
            topics: topics.iter().map(|t| t.to_string()).collect(),
        }
    }

    fn topic(name: &str, target: &str, compression_type: &str) -> TopicRow {
        TopicRow {
            name: name.to_owned(),
            rule: None,
            target: target.to_owned(),
            target_source: "rule",
            largest_write: None,
            settings: TopicSettings {
                compression_type: Some((compression_type.to_owned(), "topic")),
                ..TopicSettings::default()
            },
        }
    }

    #[test]
    fn one_finding_per_consumer_and_topic_it_cannot_read() {
        let topics = [
            topic("policy-zstd", "zstd", "producer"),
            topic("broker-zstd", "lz4", "zstd"),
            topic("lz4", "lz4", "producer"),
            topic("as-sent", "producer", "producer"),
        ];
        let found = consumer_findings(
            &[consumer("reencoded", &["as-sent", "policy-zstd"])],
            &topics,
        );
        let subjects: Vec<&str> = found.iter().map(|f| f.subject.as_str()).collect();
        assert_eq!(
            subjects,
            ["old / as-sent", "old / policy-zstd", "old / broker-zstd"],
            "{found:#?}"
        );
        assert!(found
            .iter()
            .all(|f| f.severity == Severity::Info && f.kind == "consumer_reencoded"));
        assert!(
            found[1].message.contains("stored in zstd"),
            "{}",
            found[1].message
        );

        let found = consumer_findings(&[consumer("reencode_off", &[])], &topics);
        assert_eq!(found.len(), 2);
        assert!(found.iter().all(|f| f.severity == Severity::Problem));
        assert!(
            found[0].message.contains("reencode = false"),
            "{}",
            found[0].message
        );
    }

    #[test]
    fn the_consumers_page_parses() {
        let page: Page = serde_json::from_str(
            r#"{"consumers": [{"client_id": null, "software_name": "librdkafka",
                "software_version": "2.16.1", "listener": "node 1", "max_fetch_version": 15,
                "reads": ["none", "gzip"], "handling": "reencoded", "fetches": 3,
                "topics": ["t"]}]}"#,
        )
        .unwrap();
        let c = &page.consumers[0];
        assert_eq!(c.client_id, None);
        assert_eq!(c.topics, ["t"]);
        assert!(who(c).contains("librdkafka/2.16.1 (Fetch v15, via node 1, reads none, gzip)"));
    }
}
