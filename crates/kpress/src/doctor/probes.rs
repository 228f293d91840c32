//! What the doctor asks the cluster: each bootstrap server's and advertised broker's
//! reachability and versions, then the topics' configs, over kpress's own admin
//! connections (as `kpress run` connects). Every finding is made by `findings`.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use kpress_batch::PolicyLookup;
use kpress_config::{Config, PolicySet, TopicCompression, TopicConfigSource};
use kpress_proxy::{ClusterClientError, ClusterConnector, ProxySettings, TopicConfigs};

use super::findings::{
    self, largest_write, topic_findings, TopicSettings, COMPRESSION_TYPE, LEVEL_KEYS,
    MAX_MESSAGE_BYTES,
};
use super::report::{reachability_text, Report, TopicRow};
use crate::{gzip_providers, upstream_login};

/// Topics per DescribeConfigs request: answers stay a few hundred KiB.
const TOPICS_PER_REQUEST: usize = 200;
/// Kafka's internal topics: the broker refuses clients' Produce requests to them, so
/// kpress never writes there.
const INTERNAL_TOPICS: [&str; 3] = [
    "__consumer_offsets",
    "__transaction_state",
    "__share_group_state",
];

/// The doctor's DescribeConfigs answers, read as topic mode reads them.
struct Described(HashMap<String, TopicCompression>);

impl TopicConfigSource for Described {
    fn topic_compression(&self, topic: &str) -> TopicCompression {
        self.0
            .get(topic)
            .copied()
            .unwrap_or(TopicCompression::Unavailable)
    }
}

/// A topic's configs as the broker answered them (value and source).
fn topic_settings(configs: &TopicConfigs) -> TopicSettings {
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

pub(super) async fn examine(config_name: String, config: &Config) -> anyhow::Result<Report> {
    let mut report = Report {
        config: config_name,
        ..Report::default()
    };
    for warning in &config.warnings {
        report.findings.push(findings::Finding::info(
            "config_warning",
            "config",
            warning.to_string(),
        ));
    }
    report
        .findings
        .extend(findings::provider_findings(&gzip_providers::statuses()));
    let settings = match upstream_login::login(config) {
        Ok(login) => ProxySettings::from_config(config, login, Duration::ZERO),
        Err(err) => {
            report
                .findings
                .push(findings::config_invalid(format!("{err:#}")));
            return Ok(report);
        }
    };
    let connector = match ClusterConnector::new(&settings) {
        Ok(connector) => connector,
        Err(err) => {
            report
                .findings
                .push(findings::config_invalid(err.to_string()));
            return Ok(report);
        }
    };
    for server in connector.bootstrap_servers() {
        let reachability = connector.check(server).await;
        if !reachability.reachable() {
            report.findings.push(findings::bootstrap_unreachable(
                server,
                &reachability_text(&reachability),
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
        report.findings.push(findings::no_bootstrap_server());
        return Ok(report);
    };
    let read = async {
        let mut client = connector.connect(&server).await?;
        let versions = client.api_versions().await?;
        let view = client.metadata().await?;
        Ok::<_, ClusterClientError>((client, versions, view))
    };
    let (mut client, versions, view) = match read.await {
        Ok(read) => read,
        Err(err) => {
            report
                .findings
                .push(findings::cluster_unread(&server, &err.to_string()));
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
            report.findings.push(findings::broker_unreachable(
                broker.node_id,
                &address,
                &reachability_text(&reachability),
            ));
            Err("not reachable".to_owned())
        };
        report
            .brokers
            .push((broker.node_id, reachability, versions));
    }
    report
        .findings
        .extend(super::autopilot::fleet_findings(&mut client, &versions, config).await);
    let topics: Vec<&str> = view
        .topics
        .iter()
        .map(String::as_str)
        .filter(|t| !INTERNAL_TOPICS.contains(t))
        .collect();
    let Some(version) = versions.describe_configs() else {
        report.findings.push(findings::no_describe_configs(&server));
        return Ok(report);
    };
    let mut keys = vec![COMPRESSION_TYPE, MAX_MESSAGE_BYTES];
    keys.extend(LEVEL_KEYS.iter().map(|(_, key)| *key));
    let mut answered = Vec::with_capacity(topics.len());
    for chunk in topics.chunks(TOPICS_PER_REQUEST) {
        match client.describe_topic_configs(version, chunk, &keys).await {
            Ok(configs) => answered.extend(configs),
            Err(err) => {
                report
                    .findings
                    .push(findings::describe_configs_failed(&server, &err.to_string()));
                return Ok(report);
            }
        }
    }
    answered.sort_by(|a, b| a.topic.cmp(&b.topic));
    // Topic mode resolves each topic from these answers, as the proxy would.
    let described = Described(
        answered
            .iter()
            .map(|c| (c.topic.clone(), kpress_proxy::topic_compression_of(c)))
            .collect(),
    );
    let policies = PolicySet::with_topic_configs(config, Arc::new(described));
    for configs in answered {
        if configs.error_code != 0 {
            report.findings.push(findings::topic_undescribed(
                &configs.topic,
                configs.error_code,
                configs.error_message.as_deref(),
            ));
            continue;
        }
        let policy = policies.policy_for(&configs.topic);
        let settings = topic_settings(&configs);
        report
            .findings
            .extend(topic_findings(&configs.topic, policy, &settings));
        report.topics.push(TopicRow {
            rule: policies.rule_index(&configs.topic),
            target: policy.target.name().to_owned(),
            target_source: policies.target_source(&configs.topic).as_str(),
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
    use kpress_proxy::{ConfigEntry, ConfigSource};

    #[test]
    fn a_topic_mode_topic_agrees_with_its_broker_by_construction() {
        let entry = |name: &str, value: &str| ConfigEntry {
            name: name.to_owned(),
            value: Some(value.to_owned()),
            source: ConfigSource::Topic,
        };
        let answered = TopicConfigs {
            topic: "t".to_owned(),
            error_code: 0,
            error_message: None,
            entries: vec![
                entry(COMPRESSION_TYPE, "gzip"),
                entry("compression.gzip.level", "1"),
                entry(MAX_MESSAGE_BYTES, "1048588"),
            ],
        };
        let described = Described(HashMap::from([(
            "t".to_owned(),
            kpress_proxy::topic_compression_of(&answered),
        )]));
        // The default policy follows each topic's own configuration.
        let config = crate::test_policy::with("");
        let set = PolicySet::with_topic_configs(&config, Arc::new(described));
        let policy = set.policy_for("t");
        assert_eq!(policy.target.name(), "gzip");
        assert_eq!(set.target_source("t").as_str(), "topic");
        let found = topic_findings("t", policy, &topic_settings(&answered));
        assert!(
            found.iter().all(|f| f.kind != "recompressed_by_broker"),
            "{found:?}"
        );
        // A topic the doctor got no answer for passes as sent.
        assert_eq!(
            set.policy_for("gone").target.name(),
            "topic_config_unavailable"
        );
    }
}
