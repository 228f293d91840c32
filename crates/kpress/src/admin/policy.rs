//! `/policy`: the policy in force as JSON, in the policy file's own keys, with
//! secrets shown only by where they are read from.

use std::time::{Duration, SystemTime};

use std::sync::Arc;

use kpress_batch::{PolicyLookup, Target};
use kpress_config::{
    AutoBudget, AutoPolicy, BearerTokenSource, ClientAuth, Config, NodeRouting, PasswordSource,
    PolicySet, TopicCompression, TopicConfigSource, TopicPolicy,
};
use kpress_proxy::LearnedTopic;
use serde_json::{json, Map, Value};
use time::format_description::BorrowedFormatItem;
use time::macros::format_description;
use time::OffsetDateTime;

use crate::policy_reload::AppliedPolicy;

/// The policy in force as `/policy` shows it: everything the file decides, secrets
/// only by where they are read from.
pub(super) fn policy_json(applied: &AppliedPolicy) -> Value {
    let config = &applied.config;
    json!({
        "file": applied.path.display().to_string(),
        "sha256": applied.file_hash,
        "loaded_at": rfc3339_utc(applied.loaded_at),
        "listener": listener_json(config),
        "upstream": upstream_json(config),
        "limits": limits_json(config),
        "admin": config.admin.as_ref().map(|admin| json!({
            "bind": admin.bind.to_string(),
            "readiness_window_secs": admin.readiness_window.as_secs(),
        })),
        "shadow": config.shadow.as_ref().map(|shadow| json!({
            "candidates": shadow.candidates.iter().map(|c| c.to_string()).collect::<Vec<_>>(),
            "sample": shadow.sample,
            "max_cpu_fraction": shadow.max_cpu_fraction,
            "threads": shadow.threads,
            "max_queue_bytes": shadow.max_queue_bytes,
        })),
        "overload": json!({
            "adaptive": config.overload.adaptive,
            "target_wait_ms": config.overload.target_wait_ms,
            "window_ms": config.overload.window_ms,
        }),
        "defaults": with_level(rule_json(&config.defaults), &applied.rules, None),
        "topics": config.topics.iter().enumerate().map(|(index, rule)| {
            let mut entry = Map::new();
            entry.insert("match".into(), rule.pattern.to_string().into());
            entry.insert("line".into(), rule.line.into());
            if let Value::Object(policy) = rule_json(&rule.policy) {
                entry.extend(policy);
            }
            with_level(Value::Object(entry), &applied.rules, Some(index))
        }).collect::<Vec<_>>(),
        "consumers": consumers_json(config),
        "clients": clients_json(config),
        "autopilot": autopilot_json(applied),
    })
}

/// The autopilot (`null` while no rule is auto): whether it decides with the fleet or
/// alone and why, and each auto topic's choice with the figures behind it.
fn autopilot_json(applied: &AppliedPolicy) -> Value {
    let Some(autopilot) = &applied.autopilot else {
        return Value::Null;
    };
    if applied.rules.auto_rules().is_empty() {
        return Value::Null;
    }
    let at = |ms: u64| rfc3339_utc(SystemTime::UNIX_EPOCH + Duration::from_millis(ms));
    let status = autopilot.status();
    let topics = status.topics.iter().map(|topic| {
        let explanation = &topic.explanation;
        let candidates = explanation.candidates.iter().map(|c| {
            json!({
                "candidate": c.candidate.as_deref().unwrap_or(kpress_proxy::metrics::AS_SENT),
                "ratio": c.ratio,
                "cpu_ms_per_mb": c.cpu_ms_per_mb,
                "samples": c.samples,
                "cores": c.cores,
                "objective": c.objective,
                "eligible": c.ineligible.is_none(),
                "ineligible": c.ineligible.as_ref().map(ToString::to_string),
            })
        });
        json!({
            "topic": topic.topic,
            "rule": topic.rule,
            "choice": topic.choice,
            "since": topic.since_ms.map(at),
            "adopted_from": topic.adopted_from,
            "why": explanation.why,
            "traffic_bytes_per_s": explanation.traffic_bytes_per_s,
            "budget_used_cores": explanation.budget_used_cores,
            "budget_limit_cores": explanation.budget_limit_cores,
            "candidates": candidates.collect::<Vec<_>>(),
        })
    });
    json!({
        "mode": if status.shared { "shared" } else { "alone" },
        "alone_because": status.alone_because,
        "topic": status.topic,
        "replica": status.replica,
        "replicas": status.replicas,
        "window_ms": status.window_ms,
        "last_window_at": status.last_window_ms.map(at),
        "topics": topics.collect::<Vec<_>>(),
    })
}

/// An auto rule's `auto.*` settings under the file's key names (without `auto.`).
fn auto_json(auto: &AutoPolicy) -> Value {
    let (max_cores, max_cpu_share) = match auto.budget {
        AutoBudget::Unlimited => (None, None),
        AutoBudget::Cores(cores) => (Some(cores), None),
        AutoBudget::CpuShare(share) => (None, Some(share.fraction())),
    };
    json!({
        "candidates": auto.candidates.iter().map(ToString::to_string).collect::<Vec<_>>(),
        "initial": auto
            .initial
            .as_ref()
            .map_or_else(|| "producer".to_owned(), ToString::to_string),
        "max_cores": max_cores,
        "max_cpu_share": max_cpu_share,
        "objective": auto.objective.name(),
        "price_per_gb_stored": auto.prices.stored_per_gb,
        "price_per_gb_moved": auto.prices.moved_per_gb,
        "price_per_core_hour": auto.prices.core_hour,
        "min_samples": auto.min_samples,
        "margin": auto.margin,
        "max_changes_per_hour": auto.max_changes_per_hour,
    })
}

fn consumers_json(config: &Config) -> Value {
    let consumers = &config.consumers;
    let mut out = json!({
        "reencode": consumers.reencode,
        "codec": consumers.codec.name(),
        "cache_bytes": consumers.cache_bytes,
    });
    let level = format!("compression.{}.level", consumers.codec.name());
    if let Some(value) = consumers.options.get(&level) {
        out[level] = value.into();
    }
    out
}

/// `[[clients]]` in file order, each with the patterns it sets and the codecs it reads.
fn clients_json(config: &Config) -> Value {
    let rules = config.consumers.clients.rules().iter().map(|rule| {
        let mut entry = Map::new();
        let mut pattern = |key: &str, text: Option<String>| {
            if let Some(text) = text {
                entry.insert(key.into(), text.into());
            }
        };
        pattern("match", rule.client_id.as_ref().map(ToString::to_string));
        pattern("software", rule.software.as_ref().map(ToString::to_string));
        pattern("listener", rule.listener.as_ref().map(ToString::to_string));
        entry.insert(
            "accept".into(),
            rule.accept
                .iter()
                .map(|c| c.name())
                .collect::<Vec<_>>()
                .into(),
        );
        entry.insert("line".into(), rule.line.into());
        Value::Object(entry)
    });
    Value::Array(rules.collect())
}

/// A rule's JSON with `effective_level`, the level in force now (lower than the
/// configured one while `[overload] adaptive` has stepped it down), when its codec has
/// levels.
fn with_level(mut rule: Value, rules: &PolicySet, index: Option<usize>) -> Value {
    if let (Value::Object(entry), Some(level)) = (&mut rule, rules.rule_level(index)) {
        entry.insert("effective_level".into(), level.effective.into());
    }
    rule
}

fn listener_json(config: &Config) -> Value {
    let listener = &config.listener;
    let mut out = Map::new();
    out.insert("bind".into(), listener.bind.to_string().into());
    match &listener.routing {
        NodeRouting::Ports {
            advertised_host,
            node_port_base,
        } => {
            out.insert("mode".into(), "ports".into());
            out.insert("advertised_host".into(), advertised_host.clone().into());
            out.insert("node_port_base".into(), (*node_port_base).into());
        }
        NodeRouting::Sni {
            advertised_host_pattern,
            bootstrap_host,
            advertised_port,
        } => {
            out.insert("mode".into(), "sni".into());
            out.insert(
                "advertised_host_pattern".into(),
                advertised_host_pattern.to_string().into(),
            );
            out.insert("bootstrap_host".into(), bootstrap_host.clone().into());
            out.insert("advertised_port".into(), (*advertised_port).into());
        }
    }
    out.insert(
        "tls".into(),
        listener.tls.as_ref().map_or(Value::Null, |tls| {
            json!({
                "cert": tls.cert.display().to_string(),
                "key": tls.key.display().to_string(),
                "client_ca": tls.client_ca.as_ref().map(|p| p.display().to_string()),
                "client_auth": match tls.client_auth {
                    ClientAuth::None => None,
                    auth => Some(auth.name()),
                },
                "min_version": tls.min_version.name(),
            })
        }),
    );
    out.insert(
        "rewrite_before_auth".into(),
        listener.rewrite_before_auth.into(),
    );
    out.insert("reuse_port".into(), listener.reuse_port.into());
    Value::Object(out)
}

fn upstream_json(config: &Config) -> Value {
    let upstream = &config.upstream;
    json!({
        "bootstrap_servers": upstream.bootstrap_servers,
        "topic_config_refresh_ms": upstream.topic_config_refresh.as_millis() as u64,
        "tls": upstream.tls.as_ref().map(|tls| json!({
            "ca": tls.ca.as_ref().map(|p| p.display().to_string()),
            "cert": tls.client_cert.as_ref().map(|(cert, _)| cert.display().to_string()),
            "key": tls.client_cert.as_ref().map(|(_, key)| key.display().to_string()),
            "server_name": tls.server_name,
            "verify": tls.verify,
        })),
        "sasl": upstream.sasl.as_ref().map(|sasl| {
            let mut out = Map::new();
            out.insert("mechanism".into(), sasl.mechanism.name().into());
            out.insert("username".into(), sasl.username.clone().into());
            match &sasl.password {
                PasswordSource::File(path) => {
                    out.insert("password_file".into(), path.display().to_string().into())
                }
                PasswordSource::Env(name) => out.insert("password_env".into(), name.clone().into()),
            };
            Value::Object(out)
        }).or_else(|| upstream.oauthbearer.as_ref().map(bearer_json)),
    })
}

/// `[upstream.sasl]` for OAUTHBEARER: the keys as written, secrets by their place only.
fn bearer_json(source: &BearerTokenSource) -> Value {
    let mut out = Map::new();
    out.insert("mechanism".into(), "OAUTHBEARER".into());
    match source {
        BearerTokenSource::ClientCredentials {
            token_endpoint_url,
            client_id,
            client_secret,
            scope,
        } => {
            out.insert(
                "token_endpoint_url".into(),
                token_endpoint_url.clone().into(),
            );
            out.insert("client_id".into(), client_id.clone().into());
            match client_secret {
                PasswordSource::File(path) => out.insert(
                    "client_secret_file".into(),
                    path.display().to_string().into(),
                ),
                PasswordSource::Env(name) => {
                    out.insert("client_secret_env".into(), name.clone().into())
                }
            };
            if let Some(scope) = scope {
                out.insert("scope".into(), scope.clone().into());
            }
        }
        BearerTokenSource::TokenFile(path) => {
            out.insert("token_file".into(), path.display().to_string().into());
        }
        BearerTokenSource::AwsMskIam { region } => {
            out.insert("token_provider".into(), "aws_msk_iam".into());
            out.insert("region".into(), region.clone().into());
        }
    }
    Value::Object(out)
}

fn limits_json(config: &Config) -> Value {
    let limits = &config.limits;
    json!({
        "max_batch_bytes": limits.max_batch_bytes,
        "max_decompressed_bytes": limits.max_decompressed_bytes,
        "max_frame_bytes": limits.max_frame_bytes,
        "max_inflight_bytes": limits.max_inflight_bytes,
        "max_connection_inflight_bytes": limits.max_connection_inflight_bytes,
        "max_connections": limits.max_connections,
        "frame_timeout_ms": limits.frame_timeout_ms,
        "idle_timeout_ms": limits.idle_timeout_ms,
        "max_request_decompressed_bytes": limits.max_request_decompressed_bytes,
        "max_decompression_ratio": limits.max_decompression_ratio,
        "max_topic_labels": limits.max_topic_labels,
        "max_rewrite_wait_ms": limits.max_rewrite_wait_ms,
    })
}

/// One rule's policy under the policy file's own keys: `compression.type`, the
/// target codec's `compression.*` options (and the gzip provider wherever it reads
/// gzip input), `recompress` and `only_if_smaller`.
fn rule_json(policy: &TopicPolicy) -> Value {
    use kpress_codec::gzip_providers::ProviderChoice;
    use kpress_codec::options::{GZIP_PROVIDER, OPTION_KEYS};
    use kpress_config::Compression;

    let mut options = Map::new();
    let mut gzip = false;
    if let Compression::Codec(codec) = policy.compression {
        gzip = codec == kpress_codec::Codec::Gzip;
        let prefix = format!("compression.{}.", codec.name());
        for key in OPTION_KEYS.iter().filter(|key| key.starts_with(&prefix)) {
            if let Some(value) = policy.options.get(key) {
                options.insert((*key).into(), value.into());
            }
        }
    }
    if gzip || policy.options.gzip_provider() != ProviderChoice::Default {
        options.insert(
            GZIP_PROVIDER.into(),
            policy.options.gzip_provider().name().into(),
        );
    }
    let mut overload = Map::new();
    overload.insert(
        "compression.type".into(),
        policy.overload.compression.name().into(),
    );
    if let Compression::Codec(codec) = policy.overload.compression {
        if let Some(key) = kpress_config::overload::level_key(codec) {
            let level = policy.overload.levels.get(key);
            overload.insert(key.into(), level.into());
        }
    }
    overload.insert("min_level".into(), policy.overload.min_level.into());
    overload.insert(
        "max_cpu_share".into(),
        policy.overload.max_cpu_share.map(|s| s.fraction()).into(),
    );
    let mut rule = json!({
        "compression.type": policy.compression.name(),
        "options": options,
        "recompress": policy.recompress.name(),
        "only_if_smaller": policy.only_if_smaller,
        "overload": overload,
    });
    if policy.compression == Compression::Auto {
        rule["auto"] = auto_json(&policy.auto);
    }
    rule
}

/// Each topic kpress learned from the cluster, sorted by name, with what the policy
/// in force makes of it: the rule that covers it (`null`: `[defaults]`), the target
/// and its level, where the target came from (`target_source`), and what the cluster
/// said (`topic_config`).
pub(super) fn learned_topics_json(
    config: &Config,
    learned: &[LearnedTopic],
    source: Arc<dyn TopicConfigSource>,
) -> Value {
    let set = PolicySet::with_topic_configs(config, source);
    learned
        .iter()
        .map(|topic| {
            let name = topic.topic.as_str();
            let target = &set.policy_for(name).target;
            json!({
                "topic": name,
                "rule": set.rule_index(name).map(|i| config.topics[i].pattern.to_string()),
                "target": target.name(),
                "level": target_level(target),
                "target_source": set.target_source(name).as_str(),
                "topic_config": topic_config_json(&topic.compression),
                "in_cluster": topic.in_cluster,
            })
        })
        .collect()
}

/// The level a target compresses at, for codecs that have one.
fn target_level(target: &Target) -> Option<i64> {
    let Target::Codec { codec, options } = target else {
        return None;
    };
    options.get(&format!("compression.{}.level", codec.name()))
}

fn topic_config_json(compression: &TopicCompression) -> Value {
    match compression {
        TopicCompression::Known {
            compression,
            level,
            source,
        } => json!({
            "state": "known",
            "compression.type": compression.name(),
            "level": level,
            "source": source.as_str(),
        }),
        TopicCompression::Pending => json!({ "state": "pending" }),
        TopicCompression::Denied => json!({ "state": "denied" }),
        TopicCompression::Unavailable => json!({ "state": "unavailable" }),
    }
}

/// `2026-01-31T12:34:56.789Z`: UTC, milliseconds always three digits (truncated).
const RFC3339_MILLIS: &[BorrowedFormatItem<'_>] =
    format_description!("[year]-[month]-[day]T[hour]:[minute]:[second].[subsecond digits:3]Z");

/// `at` as [`RFC3339_MILLIS`]; a time before the epoch reads as the epoch, and one past
/// year 9999 as its seconds since the epoch.
fn rfc3339_utc(at: SystemTime) -> String {
    let since_epoch = at
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default();
    OffsetDateTime::from_unix_timestamp_nanos(since_epoch.as_nanos() as i128)
        .ok()
        .and_then(|utc| utc.format(RFC3339_MILLIS).ok())
        .unwrap_or_else(|| format!("{}s after 1970-01-01T00:00:00Z", since_epoch.as_secs()))
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    pub(in crate::admin) fn config(extra: &str) -> Config {
        crate::test_policy::with(extra)
    }

    pub(in crate::admin) fn applied(config: Config) -> AppliedPolicy {
        AppliedPolicy {
            path: "/etc/kpress/k.toml".into(),
            rules: std::sync::Arc::new(kpress_config::PolicySet::new(&config)),
            topic_configs: None,
            autopilot: None,
            config,
            file_hash: "ab".repeat(32),
            loaded_at: SystemTime::UNIX_EPOCH + Duration::from_millis(1_767_225_600_123),
        }
    }

    /// What the proxy's cache would answer after a refresh.
    struct Learned(Vec<LearnedTopic>);

    impl TopicConfigSource for Learned {
        fn topic_compression(&self, topic: &str) -> TopicCompression {
            self.0
                .iter()
                .find(|l| l.topic == topic)
                .map_or(TopicCompression::Pending, |l| l.compression)
        }
    }

    #[test]
    fn learned_topics_show_their_resolution_and_its_source() {
        use kpress_batch::{CompressionType, TargetSource};
        let config = config("[[topics]]\nmatch = \"fixed\"\ncompression.type = \"lz4\"\n");
        let learned = |topic: &str, compression| LearnedTopic {
            topic: topic.to_owned(),
            compression,
            in_cluster: true,
        };
        let topics = vec![
            learned(
                "events",
                TopicCompression::Known {
                    compression: CompressionType::Codec(kpress_codec::Codec::Zstd),
                    level: Some(10),
                    source: TargetSource::Topic,
                },
            ),
            learned(
                "fixed",
                TopicCompression::Known {
                    compression: CompressionType::Codec(kpress_codec::Codec::Gzip),
                    level: None,
                    source: TargetSource::BrokerDefault,
                },
            ),
            learned("secret", TopicCompression::Denied),
        ];
        let json = learned_topics_json(&config, &topics, Arc::new(Learned(topics.clone())));
        assert_eq!(
            json[0],
            json!({
                "topic": "events", "rule": null, "target": "zstd", "level": 10,
                "target_source": "topic", "in_cluster": true,
                "topic_config": {
                    "state": "known", "compression.type": "zstd", "level": 10, "source": "topic",
                },
            })
        );
        assert_eq!(json[1]["rule"], "fixed");
        assert_eq!(json[1]["target"], "lz4");
        assert_eq!(json[1]["target_source"], "rule");
        assert_eq!(json[2]["target"], "topic_config_denied");
        assert_eq!(json[2]["target_source"], "unresolved");
        assert_eq!(json[2]["topic_config"]["state"], "denied");
    }

    #[test]
    fn each_rule_shows_its_overload_settings_and_the_level_in_force() {
        use kpress_batch::PolicyLookup;

        let policy = applied(config(
            "[overload]\nadaptive = true\n[defaults]\ncompression.type = \"lz4\"\n\
             [[topics]]\nmatch = \"heavy.*\"\ncompression.type = \"zstd\"\n\
             compression.zstd.level = 19\noverload.compression.type = \"lz4\"\n\
             overload.min_level = 10\noverload.max_cpu_share = 0.25\n",
        ));
        let json = policy_json(&policy);
        assert_eq!(
            json["overload"],
            json!({"adaptive": true, "target_wait_ms": 100, "window_ms": 1000})
        );
        let heavy = &json["topics"][0];
        assert_eq!(
            heavy["overload"],
            json!({
                "compression.type": "lz4",
                "compression.lz4.level": 9,
                "min_level": 10,
                "max_cpu_share": 0.25,
            })
        );
        assert_eq!(heavy["effective_level"], 19);
        assert_eq!(json["defaults"]["effective_level"], 9);
        // Three windows with missed deadlines: one notch down.
        for _ in 0..3 {
            policy
                .rules
                .note_wait("heavy.a", Duration::from_millis(500), true);
            policy.rules.end_window();
        }
        assert_eq!(policy_json(&policy)["topics"][0]["effective_level"], 16);
    }

    #[test]
    fn consumers_and_client_rules_are_shown_in_file_order() {
        let json = policy_json(&applied(config(
            "[consumers]\ncodec = \"zstd\"\ncompression.zstd.level = 1\ncache_bytes = 0\n\
             [[clients]]\nmatch = \"legacy-*\"\naccept = [\"gzip\"]\n\
             [[clients]]\nsoftware = \"librdkafka/1.*\"\nlistener = \"bootstrap\"\n\
             accept = [\"lz4\", \"snappy\"]\n",
        )));
        assert_eq!(
            json["consumers"],
            json!({
                "reencode": true,
                "codec": "zstd",
                "compression.zstd.level": 1,
                "cache_bytes": 0,
            })
        );
        assert_eq!(json["clients"][0]["match"], "legacy-*");
        assert_eq!(json["clients"][0]["accept"], json!(["none", "gzip"]));
        assert_eq!(json["clients"][1]["software"], "librdkafka/1.*");
        assert_eq!(json["clients"][1]["listener"], "bootstrap");
        assert_eq!(
            json["clients"][1]["accept"],
            json!(["none", "snappy", "lz4"])
        );
        assert!(json["clients"][1].get("match").is_none());
        let defaults = policy_json(&applied(config("")));
        assert_eq!(defaults["consumers"]["compression.lz4.level"], 9);
        assert_eq!(defaults["clients"], json!([]));
    }

    #[test]
    fn auto_rules_show_their_settings_and_the_autopilot_its_choices() {
        let config = config(
            "[autopilot]\nshare = false\n\
             [[topics]]\nmatch = \"logs.*\"\ncompression.type = \"auto\"\n\
             auto.candidates = [\"zstd:3\", \"lz4\"]\nauto.max_cores = 1.5\n\
             auto.min_samples = 5\n",
        );
        let json = policy_json(&applied(config.clone()));
        assert_eq!(json["autopilot"], Value::Null);
        assert_eq!(
            json["topics"][0]["auto"],
            json!({
                "candidates": ["zstd:3", "lz4:9"],
                "initial": "producer",
                "max_cores": 1.5,
                "max_cpu_share": null,
                "objective": "bytes",
                "price_per_gb_stored": 0.10,
                "price_per_gb_moved": 0.02,
                "price_per_core_hour": 0.04,
                "min_samples": 5,
                "margin": 0.02,
                "max_changes_per_hour": 4,
            })
        );
        assert!(json["defaults"].get("auto").is_none());

        let autopilot =
            kpress_proxy::Autopilot::new(config.autopilot.clone(), "here:19092".to_owned(), 100);
        let policy = AppliedPolicy::at_start(
            std::path::Path::new("/nonexistent"),
            config,
            None,
            Some(Arc::clone(&autopilot)),
        );
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let mut fleet = autopilot.fleet(None);
        let mut window = || {
            runtime.block_on(autopilot.window(&mut fleet, &policy.config, &policy.rules));
        };
        window();
        std::thread::sleep(Duration::from_millis(5));
        let collector = autopilot.collector();
        for _ in 0..6 {
            collector.add_traffic("logs.a", 10_000, 1);
            collector.add_batch(
                "logs.a",
                10_000,
                40_000,
                &[("zstd:3", 3000, 20_000), ("lz4:9", 5000, 5000)],
            );
        }
        window();
        let json = policy_json(&policy)["autopilot"].clone();
        assert_eq!(json["mode"], "alone");
        assert_eq!(json["alone_because"], "[autopilot] share = false");
        assert_eq!(json["topic"], "_kpress_autopilot");
        assert_eq!(json["replica"], "here:19092");
        assert_eq!(json["replicas"], 1);
        assert!(json["last_window_at"].as_str().unwrap().ends_with('Z'));
        let topic = &json["topics"][0];
        assert_eq!(topic["topic"], "logs.a");
        assert_eq!(topic["rule"], "logs.*");
        assert_eq!(topic["choice"], "zstd:3");
        assert!(topic["since"].as_str().unwrap().ends_with('Z'));
        assert_eq!(topic["adopted_from"], Value::Null);
        assert!(topic["why"].as_str().is_some_and(|why| !why.is_empty()));
        assert_eq!(topic["budget_limit_cores"], 1.5);
        assert!(topic["budget_used_cores"].as_f64().unwrap() > 0.0);
        let candidates = topic["candidates"].as_array().unwrap();
        let labels: Vec<&str> = candidates
            .iter()
            .map(|c| c["candidate"].as_str().unwrap())
            .collect();
        assert_eq!(labels, ["producer", "zstd:3", "lz4:9"]);
        assert_eq!(candidates[1]["samples"], 6);
        assert_eq!(candidates[1]["ratio"], 0.3);
        assert_eq!(candidates[1]["cpu_ms_per_mb"], 0.5);
        assert_eq!(candidates[1]["eligible"], true);
        assert_eq!(candidates[1]["ineligible"], Value::Null);
    }

    #[test]
    fn times_are_rfc3339_utc() {
        assert_eq!(
            rfc3339_utc(SystemTime::UNIX_EPOCH),
            "1970-01-01T00:00:00.000Z"
        );
        let at = SystemTime::UNIX_EPOCH + Duration::from_millis(1_767_225_600_123);
        assert_eq!(rfc3339_utc(at), "2026-01-01T00:00:00.123Z");
        // A leap day, and the last second of a day.
        let at = SystemTime::UNIX_EPOCH + Duration::from_secs(951_868_799);
        assert_eq!(rfc3339_utc(at), "2000-02-29T23:59:59.000Z");
        let at = SystemTime::UNIX_EPOCH + Duration::from_secs(4_107_542_400);
        assert_eq!(rfc3339_utc(at), "2100-03-01T00:00:00.000Z");
        // Sub-millisecond digits are cut, not rounded.
        let at = SystemTime::UNIX_EPOCH + Duration::from_nanos(1_767_225_600_123_999_999);
        assert_eq!(rfc3339_utc(at), "2026-01-01T00:00:00.123Z");
        // Before the epoch: the epoch.
        let at = SystemTime::UNIX_EPOCH - Duration::from_secs(1);
        assert_eq!(rfc3339_utc(at), "1970-01-01T00:00:00.000Z");
    }

    #[test]
    fn the_policy_shows_rules_in_kafka_names_and_no_secrets() {
        let config = config(
            "[upstream.sasl]\nmechanism = \"SCRAM-SHA-512\"\nusername = \"kpress\"\n\
             password_env = \"KPRESS_PW\"\n\
             [limits]\nmax_connections = 7\n\
             [admin]\nbind = \"127.0.0.1:9464\"\nreadiness_window_secs = 12\n\
             [shadow]\ncandidates = [\"zstd\", \"lz4:9\"]\nsample = 0.5\n\
             [defaults]\ncompression.type = \"lz4\"\n\
             [[topics]]\nmatch = \"logs.*\"\ncompression.type = \"zstd\"\n\
             compression.zstd.level = 7\nonly_if_smaller = true\n\
             [[topics]]\nmatch = \"re:^a.+\"\ncompression.type = \"gzip\"\n\
             compression.gzip.provider = \"zlib\"\nrecompress = \"always\"\n\
             [[topics]]\nmatch = \"raw\"\ncompression.type = \"producer\"\n",
        );
        let json = policy_json(&applied(config));
        assert_eq!(json["file"], "/etc/kpress/k.toml");
        assert_eq!(json["sha256"], "ab".repeat(32));
        assert_eq!(json["loaded_at"], "2026-01-01T00:00:00.123Z");
        assert_eq!(json["listener"]["bind"], "127.0.0.1:19092");
        assert_eq!(json["listener"]["mode"], "ports");
        assert_eq!(json["listener"]["node_port_base"], 19100);
        assert_eq!(json["listener"]["tls"], Value::Null);
        assert_eq!(json["upstream"]["bootstrap_servers"][0], "127.0.0.1:9092");
        let sasl = &json["upstream"]["sasl"];
        assert_eq!(sasl["mechanism"], "SCRAM-SHA-512");
        assert_eq!(sasl["password_env"], "KPRESS_PW");
        assert!(sasl.get("password").is_none());
        assert_eq!(json["limits"]["max_connections"], 7);
        assert_eq!(json["admin"]["bind"], "127.0.0.1:9464");
        assert_eq!(json["admin"]["readiness_window_secs"], 12);
        assert_eq!(json["shadow"]["candidates"], json!(["zstd:3", "lz4:9"]));
        assert_eq!(json["shadow"]["sample"], 0.5);
        assert_eq!(json["shadow"]["threads"], 1);
        let defaults = &json["defaults"];
        assert_eq!(defaults["compression.type"], "lz4");
        assert_eq!(defaults["options"]["compression.lz4.level"], 9);
        assert_eq!(defaults["recompress"], "codec-differs");
        assert_eq!(defaults["only_if_smaller"], false);
        let topics = json["topics"].as_array().unwrap();
        assert_eq!(topics.len(), 3);
        assert_eq!(topics[0]["match"], "logs.*");
        assert_eq!(topics[0]["compression.type"], "zstd");
        assert_eq!(
            topics[0]["options"],
            json!({"compression.zstd.level": 7, "compression.zstd.window": 0})
        );
        assert_eq!(topics[0]["only_if_smaller"], true);
        assert_eq!(topics[1]["match"], "re:^a.+");
        assert_eq!(topics[1]["recompress"], "always");
        assert_eq!(topics[1]["options"]["compression.gzip.provider"], "zlib");
        assert!(topics[1]["options"]["compression.gzip.level"].is_i64());
        assert_eq!(topics[2]["compression.type"], "producer");
        assert_eq!(topics[2]["options"], json!({}));
    }

    #[test]
    fn oauthbearer_sources_show_their_keys_and_no_secrets() {
        let json = policy_json(&applied(config(
            "[upstream.sasl]\nmechanism = \"OAUTHBEARER\"\n\
             token_endpoint_url = \"https://idp.example.com/token\"\nclient_id = \"kpress\"\n\
             client_secret_file = \"/run/secrets/idp\"\n",
        )));
        assert_eq!(
            json["upstream"]["sasl"],
            json!({
                "mechanism": "OAUTHBEARER",
                "token_endpoint_url": "https://idp.example.com/token",
                "client_id": "kpress",
                "client_secret_file": "/run/secrets/idp",
            })
        );
        let json = policy_json(&applied(config(
            "[upstream.sasl]\nmechanism = \"OAUTHBEARER\"\n\
             token_provider = \"aws_msk_iam\"\nregion = \"us-east-1\"\n",
        )));
        assert_eq!(
            json["upstream"]["sasl"],
            json!({"mechanism": "OAUTHBEARER", "token_provider": "aws_msk_iam", "region": "us-east-1"})
        );
    }

    #[test]
    fn sni_listeners_and_upstream_tls_are_summarized() {
        let mut config = config("");
        config.listener.routing = NodeRouting::Sni {
            advertised_host_pattern: kpress_config::HostPattern::new("b-{node}.kafka.test")
                .unwrap(),
            bootstrap_host: Some("kafka.test".into()),
            advertised_port: 9093,
        };
        config.upstream.tls = Some(kpress_config::UpstreamTls {
            ca: Some("/pki/ca.pem".into()),
            client_cert: Some(("/pki/k.pem".into(), "/pki/k.key".into())),
            server_name: None,
            verify: true,
        });
        let json = policy_json(&applied(config));
        assert_eq!(json["listener"]["mode"], "sni");
        assert_eq!(
            json["listener"]["advertised_host_pattern"],
            "b-{node}.kafka.test"
        );
        assert_eq!(json["listener"]["advertised_port"], 9093);
        assert_eq!(json["upstream"]["tls"]["cert"], "/pki/k.pem");
        assert_eq!(json["upstream"]["tls"]["verify"], true);
        assert_eq!(json["admin"], Value::Null);
    }
}
