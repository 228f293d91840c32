//! `kpress advise --from-metrics`: what the autopilot decided for each auto topic
//! (`compression.type = "auto"`). The choice comes from the metrics page
//! (`kpress_autopilot_choice`), so a saved page shows it too; since when, why, each
//! option's measured ratio and CPU, and the budget used come from `/policy` on the same
//! address when the page was read over HTTP. A `/policy`
//! that cannot be read leaves them out and says so: the choices stand on their own.

use std::collections::BTreeMap;
use std::fmt::Write;

use kpress_proxy::metrics::{AS_SENT, AUTOPILOT_CHOICE};
use serde_json::{json, Value};

use super::{metrics_page, prometheus};

/// Every autopilot metric's name starts so.
const AUTOPILOT_PREFIX: &str = "kpress_autopilot_";
/// More auto topics than a kpress page holds (`[limits] max_topic_labels` is at most
/// 100000): the page is something else.
const MAX_TOPICS: usize = 100_001;
/// `why` texts longer than this are cut: a hostile `/policy` cannot flood the output.
const MAX_WHY_CHARS: usize = 1000;

/// One auto topic as the autopilot sees it.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct AutoTopic {
    /// The candidate the topic gets now (`producer`: as sent); `None`: undecided.
    pub(crate) choice: Option<String>,
    /// Since when, as `/policy` gives it.
    pub(crate) since: Option<String>,
    pub(crate) why: Option<String>,
    /// The replica whose choice this one adopted (`None`: decided here).
    pub(crate) adopted_from: Option<String>,
    /// What the trials measured of each option on this topic, from `/policy`.
    pub(crate) candidates: Vec<Measured>,
    /// Cores the rule's choices are expected to use, and its budget (`None`: none).
    pub(crate) budget_used_cores: Option<f64>,
    pub(crate) budget_limit_cores: Option<f64>,
}

/// One option of an auto topic as its trials measured it.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Measured {
    pub(crate) candidate: String,
    /// Stored bytes over the bytes as sent.
    pub(crate) ratio: Option<f64>,
    pub(crate) cpu_ms_per_mb: Option<f64>,
    pub(crate) samples: Option<u64>,
    /// Why it cannot be chosen (`None`: it can).
    pub(crate) ineligible: Option<String>,
}

/// Options listed per topic at most: a candidate list is at most 16 long.
const MAX_CANDIDATES: usize = 32;

/// The autopilot section of the advice.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Section {
    pub(crate) topics: BTreeMap<String, AutoTopic>,
    /// `shared` or `alone`, from `/policy`.
    pub(crate) mode: Option<String>,
    /// Why this replica decides alone, from `/policy`.
    pub(crate) alone_because: Option<String>,
    /// Why since and why are missing: `/policy` not read, or without an autopilot.
    pub(crate) policy_note: Option<String>,
}

impl Section {
    pub(crate) fn is_empty(&self) -> bool {
        self.topics.is_empty() && self.mode.is_none()
    }

    pub(crate) fn json(&self) -> Value {
        if self.is_empty() {
            return Value::Null;
        }
        let topics: Vec<Value> = self
            .topics
            .iter()
            .map(|(topic, t)| {
                let candidates: Vec<Value> = t
                    .candidates
                    .iter()
                    .map(|c| {
                        json!({
                            "candidate": c.candidate,
                            "ratio": c.ratio,
                            "cpu_ms_per_mb": c.cpu_ms_per_mb,
                            "samples": c.samples,
                            "ineligible": c.ineligible,
                        })
                    })
                    .collect();
                json!({
                    "topic": topic,
                    "choice": t.choice,
                    "since": t.since,
                    "why": t.why,
                    "adopted_from": t.adopted_from,
                    "budget_used_cores": t.budget_used_cores,
                    "budget_limit_cores": t.budget_limit_cores,
                    "candidates": candidates,
                })
            })
            .collect();
        json!({
            "mode": self.mode,
            "alone_because": self.alone_because,
            "topics": topics,
            "policy_note": self.policy_note,
        })
    }

    pub(crate) fn text(&self, out: &mut String) {
        if self.is_empty() {
            return;
        }
        let _ = write!(out, "\nAutopilot");
        match (self.mode.as_deref(), self.alone_because.as_deref()) {
            (Some("alone"), Some(why)) => {
                let _ = write!(out, " (deciding alone: {why})");
            }
            (Some(mode), _) => {
                let _ = write!(out, " ({mode})");
            }
            (None, _) => {}
        }
        let _ = writeln!(out, ": {} auto topics.", self.topics.len());
        for (topic, t) in &self.topics {
            let choice = match t.choice.as_deref() {
                Some(AS_SENT) => "as sent (producer)".to_owned(),
                Some(candidate) => candidate.to_owned(),
                None => "undecided".to_owned(),
            };
            let _ = write!(out, "  {topic:?}: {choice}");
            if let Some(since) = &t.since {
                let _ = write!(out, " since {since}");
            }
            if let Some(replica) = &t.adopted_from {
                let _ = write!(out, " (adopted from {replica})");
            }
            match &t.why {
                Some(why) => {
                    let _ = writeln!(out, ": {why}");
                }
                None => out.push('\n'),
            }
            for c in &t.candidates {
                let number = |x: Option<f64>, digits: usize| {
                    x.map_or_else(|| "?".to_owned(), |x| format!("{x:.digits$}"))
                };
                let _ = write!(
                    out,
                    "    {}: {} of as sent, {} ms CPU per MB, {} samples",
                    c.candidate,
                    number(c.ratio, 3),
                    number(c.cpu_ms_per_mb, 2),
                    c.samples.map_or_else(|| "?".to_owned(), |n| n.to_string()),
                );
                match &c.ineligible {
                    Some(why) => {
                        let _ = writeln!(out, " (not eligible: {why})");
                    }
                    None => out.push('\n'),
                }
            }
            if let Some(used) = t.budget_used_cores {
                let limit = t
                    .budget_limit_cores
                    .map_or_else(|| "no budget".to_owned(), |l| format!("of {l:.2} cores"));
                let _ = writeln!(out, "    the rule's choices use {used:.3} cores, {limit}");
            }
        }
        if let Some(note) = &self.policy_note {
            let _ = writeln!(out, "  ({note})");
        }
    }
}

/// The section for the page read from `source`: the choices on `page`, with since
/// and why from `/policy` when `source` is an `http://` URL.
pub(crate) fn read(source: &str, page: &str) -> anyhow::Result<Section> {
    let (topics, seen) = choices(page)?;
    let mut section = Section {
        topics,
        ..Section::default()
    };
    if !seen {
        // No autopilot on the page: no request for /policy either.
        return Ok(section);
    }
    match policy_url(source) {
        None => {
            if !section.topics.is_empty() {
                section.policy_note =
                    Some("since when and why are in /policy, read over http:// only".into());
            }
        }
        Some(url) => match metrics_page::read(&url) {
            Ok(text) => match serde_json::from_str::<Value>(&text) {
                Ok(policy) => merge_policy(&mut section, &policy, &url),
                Err(err) => section.policy_note = Some(format!("{url}: not JSON ({err})")),
            },
            Err(err) => {
                if !section.topics.is_empty() {
                    section.policy_note = Some(format!("{err:#}"));
                }
            }
        },
    }
    Ok(section)
}

/// The choice of each auto topic on a metrics page: the candidate whose gauge is 1;
/// a topic with series but none at 1 is undecided. Also whether the page has any
/// autopilot metric at all.
pub(crate) fn choices(page: &str) -> anyhow::Result<(BTreeMap<String, AutoTopic>, bool)> {
    let mut topics: BTreeMap<String, AutoTopic> = BTreeMap::new();
    let mut seen = false;
    for sample in prometheus::samples(page) {
        let sample = sample?;
        seen |= sample.name.starts_with(AUTOPILOT_PREFIX);
        if sample.name != AUTOPILOT_CHOICE {
            continue;
        }
        let (Some(topic), Some(candidate)) = (sample.label("topic"), sample.label("candidate"))
        else {
            continue;
        };
        if !topics.contains_key(topic) && topics.len() >= MAX_TOPICS {
            anyhow::bail!("more than {MAX_TOPICS} auto topics: not a kpress metrics page");
        }
        let entry = topics.entry(topic.to_owned()).or_default();
        if sample.value == 1.0 {
            // Two candidates at 1 (a page scraped mid-change): the first in label
            // order, so the answer does not depend on the page's order.
            if entry.choice.as_deref().is_none_or(|c| candidate < c) {
                entry.choice = Some(candidate.to_owned());
            }
        }
    }
    Ok((topics, seen))
}

/// `http://host:port/policy` for a page at `http://host:port/…`.
fn policy_url(source: &str) -> Option<String> {
    let rest = source.strip_prefix("http://")?;
    let authority = rest.split('/').next().unwrap_or(rest);
    (!authority.is_empty()).then(|| format!("http://{authority}/policy"))
}

/// Adds `/policy`'s `autopilot` object: the mode, and per auto topic (its `topics`
/// list) since when, why and the replica it was adopted from. A topic `/policy` knows
/// and the page does not show is added with its choice.
fn merge_policy(section: &mut Section, policy: &Value, url: &str) {
    let Some(autopilot) = policy.get("autopilot").filter(|a| !a.is_null()) else {
        section.policy_note = Some(format!("{url} has no autopilot"));
        return;
    };
    section.mode = text(autopilot.get("mode"));
    section.alone_because = text(autopilot.get("alone_because"));
    let Some(list) = autopilot.get("topics").and_then(Value::as_array) else {
        return;
    };
    for value in list {
        let Some(topic) = text(value.get("topic")) else {
            continue;
        };
        if !section.topics.contains_key(&topic) && section.topics.len() >= MAX_TOPICS {
            break;
        }
        let entry = section.topics.entry(topic).or_default();
        if entry.choice.is_none() {
            entry.choice = text(value.get("choice"));
        }
        entry.since = text(value.get("since"));
        entry.why = text(value.get("why"));
        entry.adopted_from = text(value.get("adopted_from"));
        entry.budget_used_cores = value.get("budget_used_cores").and_then(Value::as_f64);
        entry.budget_limit_cores = value.get("budget_limit_cores").and_then(Value::as_f64);
        entry.candidates = value
            .get("candidates")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .take(MAX_CANDIDATES)
            .filter_map(|c| {
                Some(Measured {
                    candidate: text(c.get("candidate"))?,
                    ratio: c.get("ratio").and_then(Value::as_f64),
                    cpu_ms_per_mb: c.get("cpu_ms_per_mb").and_then(Value::as_f64),
                    samples: c.get("samples").and_then(Value::as_u64),
                    ineligible: text(c.get("ineligible")),
                })
            })
            .collect();
    }
}

/// A string (cut to [`MAX_WHY_CHARS`]) or a number as text; nothing for null.
fn text(value: Option<&Value>) -> Option<String> {
    match value? {
        Value::String(s) => Some(s.chars().take(MAX_WHY_CHARS).collect()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PAGE: &str = "# TYPE kpress_autopilot_choice gauge\n\
        kpress_autopilot_choice{topic=\"logs.a\",candidate=\"zstd:3\"} 1\n\
        kpress_autopilot_choice{topic=\"logs.a\",candidate=\"lz4\"} 0\n\
        kpress_autopilot_choice{topic=\"blobs\",candidate=\"producer\"} 1\n\
        kpress_autopilot_choice{topic=\"new\",candidate=\"lz4\"} 0\n\
        kpress_produce_bytes_in_total{topic=\"logs.a\"} 100\n";

    #[test]
    fn choices_come_from_the_gauge_at_1() {
        let (topics, seen) = choices(PAGE).unwrap();
        assert!(seen);
        assert_eq!(topics["logs.a"].choice.as_deref(), Some("zstd:3"));
        assert_eq!(topics["blobs"].choice.as_deref(), Some("producer"));
        assert_eq!(topics["new"].choice, None);
        assert_eq!(topics.len(), 3);
        assert_eq!(choices("kpress_up 1\n").unwrap(), (BTreeMap::new(), false));
        assert!(choices("not a page {\n").is_err());
    }

    #[test]
    fn policy_adds_since_why_and_the_mode() {
        let mut section = Section {
            topics: choices(PAGE).unwrap().0,
            ..Section::default()
        };
        // `/policy`'s shape (crates/kpress/src/admin/policy.rs), trimmed.
        let policy = json!({"autopilot": {
        "mode": "alone",
        "alone_because": "kpress may not open topic _kpress_autopilot (ACLs)",
        "topic": "_kpress_autopilot", "replicas": 1,
        "topics": [
            {"topic": "logs.a", "rule": "logs.*", "choice": "zstd:3",
             "since": "2026-11-28T14:00:00.000Z", "adopted_from": "kpress-1:9092",
             "why": "zstd:3 stores 0.21 of as sent",
             "budget_used_cores": 0.012, "budget_limit_cores": 1.5,
             "candidates": [
                {"candidate": "zstd:3", "ratio": 0.21, "cpu_ms_per_mb": 3.5, "samples": 40,
                 "eligible": true, "ineligible": null},
                {"candidate": "lz4:9", "ratio": 0.33, "cpu_ms_per_mb": 1.25, "samples": 12,
                 "eligible": false, "ineligible": "12 of 30 samples"}]},
            {"topic": "quiet", "rule": "logs.*", "choice": null, "since": null,
             "adopted_from": null, "why": "undecided: every candidate needs 30 samples"}
        ]}});
        merge_policy(&mut section, &policy, "http://x/policy");
        assert_eq!(section.mode.as_deref(), Some("alone"));
        assert_eq!(
            section.topics["logs.a"].since.as_deref(),
            Some("2026-11-28T14:00:00.000Z")
        );
        assert_eq!(section.topics["quiet"].choice, None);
        let mut text = String::new();
        section.text(&mut text);
        for line in [
            "Autopilot (deciding alone: kpress may not open topic _kpress_autopilot (ACLs)): 4 auto topics.",
            "\"logs.a\": zstd:3 since 2026-11-28T14:00:00.000Z (adopted from kpress-1:9092): zstd:3 stores",
            "\"blobs\": as sent (producer)\n",
            "\"new\": undecided\n",
            "\"quiet\": undecided: undecided: every candidate needs 30 samples",
            "    zstd:3: 0.210 of as sent, 3.50 ms CPU per MB, 40 samples\n",
            "    lz4:9: 0.330 of as sent, 1.25 ms CPU per MB, 12 samples (not eligible: 12 of 30 samples)\n",
            "    the rule's choices use 0.012 cores, of 1.50 cores\n",
        ] {
            assert!(text.contains(line), "{line} in {text}");
        }
        let json = section.json();
        assert_eq!(json["alone_because"], policy["autopilot"]["alone_because"]);
        assert_eq!(json["topics"][1]["adopted_from"], "kpress-1:9092");
        assert_eq!(json["topics"][1]["candidates"][1]["samples"], 12);
        assert_eq!(json["topics"][1]["budget_limit_cores"], 1.5);

        let mut section = Section::default();
        merge_policy(
            &mut section,
            &json!({"file": "k.toml", "autopilot": null}),
            "u",
        );
        assert_eq!(section.policy_note.as_deref(), Some("u has no autopilot"));
    }

    #[test]
    fn no_auto_topics_no_section() {
        let section = Section::default();
        assert!(section.is_empty());
        assert_eq!(section.json(), Value::Null);
        let mut text = String::new();
        section.text(&mut text);
        assert!(text.is_empty());
        assert_eq!(policy_url("file:///tmp/page"), None);
        assert_eq!(
            policy_url("http://127.0.0.1:9464/metrics").as_deref(),
            Some("http://127.0.0.1:9464/policy")
        );
    }
}
