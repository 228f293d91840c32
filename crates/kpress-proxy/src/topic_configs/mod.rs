//! What each topic of the cluster stores: its own `compression.type` and
//! `compression.<codec>.level` (KIP-390), for `compression.type = "topic"`, and the
//! list of the cluster's topics, which also decides which topics get metric labels.
//!
//! One task per proxy ([`refresh`]) asks the cluster, on kpress's side channel: every
//! `topic_config_refresh_ms` (and at once after a policy reload) it reads the whole
//! topic list (Metadata) and the configs of every topic (DescribeConfigs, many topics
//! per request), replacing what it knew, so deleted topics are forgotten and a topic
//! created again is seen anew. Between refreshes, a topic not known yet is looked up
//! once (single-flight: it is marked pending and queued; topics queued together share
//! one request). Nothing here ever makes a producer wait: a topic not known yet is
//! answered [`TopicCompression::Pending`] at once and its batches pass as sent.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

use kpress_batch::{CompressionType, TargetSource};
use kpress_codec::options::{GZIP_LEVEL, LZ4_LEVEL, ZSTD_LEVEL};
use kpress_codec::Codec;
use kpress_config::{is_legal_topic_char, TopicCompression, TopicConfigSource};
use kpress_protocol::{error_code, ConfigSource, TopicConfigs};
use tokio::sync::Notify;

use crate::metrics;

pub(crate) mod refresh;

/// Topics remembered at most (the cluster's and those asked about). Past it a topic
/// not known passes as sent (`topic_config_unavailable`) until a refresh makes room:
/// clients inventing names cannot grow the cache or the lookups without bound.
pub const TOPIC_CONFIG_CAPACITY: usize = 50_000;

/// Names the cluster has not listed that are remembered at most between two refreshes
/// (new topics, and names clients make up): past it such a name passes as sent
/// without a lookup, so made-up names cost the brokers a bounded number of requests.
const UNLISTED_CAPACITY: usize = 10_000;

/// Topics one DescribeConfigs request names: an answer of a few hundred KiB at most.
const TOPICS_PER_REQUEST: usize = 200;

/// The cluster's topics and what each stores, as last learned.
#[derive(Debug)]
pub struct TopicConfigCache {
    refresh: Duration,
    capacity: usize,
    state: RwLock<State>,
    /// Wakes the task: a topic to look up, or the first demand.
    wake: Notify,
    /// Set by the task when a refresh should run at once (a policy reload).
    refresh_now: AtomicBool,
}

#[derive(Debug, Default)]
struct State {
    /// What kpress knows of each topic (the cluster's, and names asked about).
    topics: HashMap<Arc<str>, TopicCompression>,
    /// The names the cluster itself listed or confirmed: never one a client made up.
    cluster: HashSet<Arc<str>>,
    /// Marked pending, not yet asked about.
    queued: Vec<Arc<str>>,
}

/// One topic's answer, as `/policy` and `kpress doctor` show it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LearnedTopic {
    pub topic: String,
    pub compression: TopicCompression,
    /// Whether the cluster listed the topic (or confirmed it in an answer).
    pub in_cluster: bool,
}

impl TopicConfigCache {
    /// An empty cache refreshed every `refresh` once the proxy runs.
    pub fn new(refresh: Duration) -> TopicConfigCache {
        TopicConfigCache::with_capacity(refresh, TOPIC_CONFIG_CAPACITY)
    }

    fn with_capacity(refresh: Duration, capacity: usize) -> TopicConfigCache {
        TopicConfigCache {
            refresh,
            capacity,
            state: RwLock::default(),
            wake: Notify::new(),
            refresh_now: AtomicBool::new(false),
        }
    }

    pub fn refresh_interval(&self) -> Duration {
        self.refresh
    }

    /// Whether the cluster has `topic` (as of the last refresh or lookup).
    pub fn is_cluster_topic(&self, topic: &str) -> bool {
        self.read().cluster.contains(topic)
    }

    /// Every topic known, sorted by name.
    pub fn learned(&self) -> Vec<LearnedTopic> {
        let state = self.read();
        let mut out: Vec<LearnedTopic> = state
            .topics
            .iter()
            .map(|(topic, compression)| LearnedTopic {
                topic: topic.to_string(),
                compression: *compression,
                in_cluster: state.cluster.contains(topic),
            })
            .collect();
        out.sort_by(|a, b| a.topic.cmp(&b.topic));
        out
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, State> {
        self.state.read().unwrap_or_else(PoisonError::into_inner)
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, State> {
        self.state.write().unwrap_or_else(PoisonError::into_inner)
    }

    /// Marks `topic` pending and queues it for the task; `Unavailable` when the cache
    /// is full or the name is none Kafka allows (no broker could answer for it).
    fn queue(&self, topic: &str) -> TopicCompression {
        if !is_topic_name(topic) {
            return TopicCompression::Unavailable;
        }
        let mut state = self.write();
        if let Some(known) = state.topics.get(topic) {
            return *known;
        }
        let unlisted = state.topics.len().saturating_sub(state.cluster.len());
        if state.topics.len() >= self.capacity || unlisted >= UNLISTED_CAPACITY.min(self.capacity) {
            drop(state);
            metrics::topic_config_lookups("cache_full", 1);
            return TopicCompression::Unavailable;
        }
        let name: Arc<str> = Arc::from(topic);
        state
            .topics
            .insert(Arc::clone(&name), TopicCompression::Pending);
        state.queued.push(name);
        drop(state);
        self.wake.notify_one();
        TopicCompression::Pending
    }

    /// Up to `max` queued topics, taken off the queue (they stay pending).
    fn take_queued(&self, max: usize) -> Vec<Arc<str>> {
        let mut state = self.write();
        let n = state.queued.len().min(max);
        state.queued.drain(..n).collect()
    }

    /// Stores the answers of a lookup of some topics.
    fn store(&self, answers: Vec<(Arc<str>, Answer)>) {
        let mut state = self.write();
        for (topic, answer) in answers {
            if answer.exists {
                state.cluster.insert(Arc::clone(&topic));
            }
            state.topics.insert(topic, answer.compression);
        }
    }

    /// Replaces everything known with a full read of the cluster: topics it no longer
    /// has are forgotten (and returned); names queued meanwhile stay queued and pending.
    fn replace(&self, answers: Vec<(Arc<str>, Answer)>) -> HashSet<Arc<str>> {
        let mut state = self.write();
        let mut topics = HashMap::with_capacity(answers.len());
        let mut cluster = HashSet::with_capacity(answers.len());
        for (topic, answer) in answers {
            if answer.exists {
                cluster.insert(Arc::clone(&topic));
            }
            topics.insert(topic, answer.compression);
        }
        let queued: Vec<Arc<str>> = std::mem::take(&mut state.queued)
            .into_iter()
            .filter(|t| !topics.contains_key(t))
            .collect();
        for topic in &queued {
            topics.insert(Arc::clone(topic), TopicCompression::Pending);
        }
        let deleted = state
            .cluster
            .iter()
            .filter(|t| !cluster.contains(*t))
            .cloned()
            .collect();
        *state = State {
            topics,
            cluster,
            queued,
        };
        deleted
    }

    /// Pending topics whose lookup got no answer: they pass as sent until the next
    /// refresh asks again.
    fn unanswered(&self, topics: &[Arc<str>]) {
        let mut state = self.write();
        for topic in topics {
            if let Some(known) = state.topics.get_mut(topic) {
                if *known == TopicCompression::Pending {
                    *known = TopicCompression::Unavailable;
                }
            }
        }
    }
}

impl TopicConfigSource for TopicConfigCache {
    fn topic_compression(&self, topic: &str) -> TopicCompression {
        if let Some(known) = self.read().topics.get(topic) {
            return *known;
        }
        self.queue(topic)
    }
}

/// Whether Kafka allows `topic` as a name (a broker answers nothing else).
fn is_topic_name(topic: &str) -> bool {
    !topic.is_empty()
        && topic.len() <= kpress_config::TOPIC_NAME_MAX_CHARS
        && topic != "."
        && topic != ".."
        && topic.chars().all(is_legal_topic_char)
}

/// What one topic's DescribeConfigs entry says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Answer {
    compression: TopicCompression,
    /// The broker knows the topic (it answered without UNKNOWN_TOPIC_OR_PARTITION).
    exists: bool,
}

/// Reads one topic's answer; the label of the lookups metric with it.
fn answer(configs: &TopicConfigs) -> (Answer, &'static str) {
    let failed = |compression, exists, result| {
        (
            Answer {
                compression,
                exists,
            },
            result,
        )
    };
    match configs.error_code {
        error_code::NONE => {}
        error_code::TOPIC_AUTHORIZATION_FAILED | error_code::CLUSTER_AUTHORIZATION_FAILED => {
            // An unauthorized principal cannot tell whether the topic exists.
            return failed(TopicCompression::Denied, false, "denied");
        }
        error_code::UNKNOWN_TOPIC_OR_PARTITION => {
            return failed(TopicCompression::Unavailable, false, "unknown_topic")
        }
        _ => return failed(TopicCompression::Unavailable, true, "error"),
    }
    let entry = |key: &str| configs.entries.iter().find(|e| e.name == key);
    let Some(codec_entry) = entry("compression.type") else {
        return failed(TopicCompression::Unavailable, true, "error");
    };
    let Some(compression) = codec_entry
        .value
        .as_deref()
        .and_then(|v| v.parse::<CompressionType>().ok())
    else {
        return failed(TopicCompression::Unavailable, true, "error");
    };
    let level_key = match compression {
        CompressionType::Codec(Codec::Gzip) => Some(GZIP_LEVEL),
        CompressionType::Codec(Codec::Lz4) => Some(LZ4_LEVEL),
        CompressionType::Codec(Codec::Zstd) => Some(ZSTD_LEVEL),
        _ => None,
    };
    let level = match level_key.and_then(entry).map(|e| e.value.as_deref()) {
        // Brokers before 3.8 have no levels: the codec's default is what they store.
        None | Some(None) => None,
        Some(Some(text)) => match text.trim().parse::<i32>() {
            Ok(level) => Some(level),
            Err(_) => return failed(TopicCompression::Unavailable, true, "error"),
        },
    };
    (
        Answer {
            compression: TopicCompression::Known {
                compression,
                level,
                source: target_source(codec_entry.source),
            },
            exists: true,
        },
        "ok",
    )
}

/// What a topic's DescribeConfigs answer (with `compression.type` and the levels)
/// makes of it for topic mode, as the proxy reads it.
pub fn topic_compression_of(configs: &TopicConfigs) -> TopicCompression {
    answer(configs).0.compression
}

fn target_source(source: ConfigSource) -> TargetSource {
    match source {
        ConfigSource::Topic => TargetSource::Topic,
        ConfigSource::DynamicBroker
        | ConfigSource::DynamicDefaultBroker
        | ConfigSource::StaticBroker => TargetSource::BrokerDefault,
        ConfigSource::Default | ConfigSource::Other(_) => TargetSource::Default,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kpress_batch::PolicyLookup;
    use kpress_protocol::ConfigEntry;

    fn cache(capacity: usize) -> TopicConfigCache {
        TopicConfigCache::with_capacity(Duration::from_secs(30), capacity)
    }

    fn entry(name: &str, value: Option<&str>, source: ConfigSource) -> ConfigEntry {
        ConfigEntry {
            name: name.to_owned(),
            value: value.map(str::to_owned),
            source,
        }
    }

    fn configs(topic: &str, error_code: i16, entries: Vec<ConfigEntry>) -> TopicConfigs {
        TopicConfigs {
            topic: topic.to_owned(),
            error_code,
            error_message: None,
            entries,
        }
    }

    pub(super) fn known(
        compression: &str,
        level: Option<i32>,
        source: TargetSource,
    ) -> TopicCompression {
        TopicCompression::Known {
            compression: compression.parse().unwrap(),
            level,
            source,
        }
    }

    fn exists(compression: TopicCompression) -> Answer {
        Answer {
            compression,
            exists: true,
        }
    }

    /// A broker stand-in serving ApiVersions v0, Metadata and DescribeConfigs on every
    /// connection, from a topic → `compression.type` table the test changes; every
    /// request's API key and topics are recorded.
    #[test]
    fn a_topic_mode_zstd_target_keeps_the_old_client_rule() {
        use kpress_batch::builder::{BatchBuilder, Record};
        use kpress_batch::{Outcome, PassReason, ProduceAllowance, Recompressor};

        let cache = Arc::new(cache(10));
        cache.replace(vec![
            (
                Arc::from("z"),
                exists(known("zstd", Some(10), TargetSource::Topic)),
            ),
            (
                Arc::from("as-sent"),
                exists(known("producer", None, TargetSource::Default)),
            ),
        ]);
        let config = kpress_config::parse(
            "[listener]\nbind = \"127.0.0.1:19092\"\n\
             [upstream]\nbootstrap_servers = [\"127.0.0.1:9092\"]\n",
            "t.toml",
        )
        .unwrap();
        let set = kpress_config::PolicySet::with_topic_configs(&config, cache);
        let records: Vec<Record> = (0..50)
            .map(|i| Record::value(format!("record {i} of a batch worth compressing")))
            .collect();
        let batch = BatchBuilder::codec(Codec::Gzip).build(&records).unwrap();
        let outcome = |topic: &str, api_version: i16| {
            let mut allowance =
                ProduceAllowance::new(kpress_protocol::produce_allows_zstd(api_version), 64 << 20);
            let mut outcome = None;
            Recompressor::new().rewrite_partition(
                &batch,
                set.policy_for(topic),
                &mut allowance,
                &mut Vec::new(),
                |o, _| outcome = Some(*o),
            );
            outcome.unwrap()
        };
        assert!(matches!(
            outcome("z", 9),
            Outcome::Rewritten {
                from: Codec::Gzip,
                to: Codec::Zstd,
                ..
            }
        ));
        // Produce v3-v6 cannot carry zstd: the broker converts, as without kpress.
        assert_eq!(
            outcome("z", 6),
            Outcome::PassedThrough(PassReason::ZstdNeedsProduceV7)
        );
        assert_eq!(
            outcome("as-sent", 9),
            Outcome::PassedThrough(PassReason::PolicyProducer)
        );
        assert_eq!(
            outcome("new", 9),
            Outcome::PassedThrough(PassReason::TopicConfigPending)
        );
    }

    #[test]
    fn a_topic_not_known_is_pending_once_and_queued_once() {
        let cache = cache(10);
        assert_eq!(cache.topic_compression("a"), TopicCompression::Pending);
        assert_eq!(cache.topic_compression("a"), TopicCompression::Pending);
        assert_eq!(cache.topic_compression("b"), TopicCompression::Pending);
        // Single-flight: each name is queued once, and both go in one request.
        let queued = cache.take_queued(TOPICS_PER_REQUEST);
        assert_eq!(queued, [Arc::from("a"), Arc::from("b")]);
        assert!(cache.take_queued(TOPICS_PER_REQUEST).is_empty());
        assert_eq!(cache.topic_compression("a"), TopicCompression::Pending);
        cache.store(vec![(
            Arc::from("a"),
            exists(known("zstd", Some(10), TargetSource::Topic)),
        )]);
        assert_eq!(
            cache.topic_compression("a"),
            known("zstd", Some(10), TargetSource::Topic)
        );
        assert!(cache.is_cluster_topic("a"));
        // A lookup with no answer: as sent until the next refresh.
        cache.unanswered(&queued);
        assert_eq!(cache.topic_compression("b"), TopicCompression::Unavailable);
        assert!(!cache.is_cluster_topic("b"));
        assert!(cache.take_queued(TOPICS_PER_REQUEST).is_empty());
    }

    #[test]
    fn the_cache_is_bounded_and_illegal_names_are_never_asked_about() {
        let cache = cache(2);
        for name in ["", "a b", "..", &"x".repeat(250)] {
            assert_eq!(cache.topic_compression(name), TopicCompression::Unavailable);
        }
        assert_eq!(cache.topic_compression("a"), TopicCompression::Pending);
        assert_eq!(cache.topic_compression("b"), TopicCompression::Pending);
        assert_eq!(cache.topic_compression("c"), TopicCompression::Unavailable);
        assert_eq!(cache.take_queued(100).len(), 2);
        assert_eq!(cache.learned().len(), 2);
        // Names the cluster has not listed have a bound of their own.
        let cache = TopicConfigCache::new(Duration::from_secs(30));
        for i in 0..UNLISTED_CAPACITY {
            assert_eq!(
                cache.topic_compression(&format!("made-up-{i}")),
                TopicCompression::Pending
            );
        }
        assert_eq!(
            cache.topic_compression("one-more"),
            TopicCompression::Unavailable
        );
    }

    #[test]
    fn a_refresh_replaces_everything_and_forgets_deleted_topics() {
        let cache = cache(10);
        cache.replace(vec![
            (
                Arc::from("old"),
                exists(known("lz4", None, TargetSource::Topic)),
            ),
            (
                Arc::from("kept"),
                exists(known("gzip", Some(1), TargetSource::Topic)),
            ),
        ]);
        // A name a client made up, asked about and unknown to the broker.
        assert_eq!(
            cache.topic_compression("made-up"),
            TopicCompression::Pending
        );
        let queued = cache.take_queued(10);
        cache.store(vec![(
            Arc::clone(&queued[0]),
            Answer {
                compression: TopicCompression::Unavailable,
                exists: false,
            },
        )]);
        assert!(!cache.is_cluster_topic("made-up"));
        // Queued between refreshes and not answered yet: stays pending.
        assert_eq!(cache.topic_compression("new"), TopicCompression::Pending);
        let deleted = cache.replace(vec![
            (
                Arc::from("kept"),
                exists(known("zstd", Some(3), TargetSource::Topic)),
            ),
            (
                Arc::from("created"),
                exists(known("producer", None, TargetSource::Default)),
            ),
        ]);
        assert_eq!(deleted, HashSet::from([Arc::from("old")]));
        assert!(!cache.is_cluster_topic("old"));
        assert!(cache.is_cluster_topic("created"));
        assert_eq!(
            cache.topic_compression("kept"),
            known("zstd", Some(3), TargetSource::Topic)
        );
        let names: Vec<String> = cache.learned().into_iter().map(|l| l.topic).collect();
        assert_eq!(names, ["created", "kept", "new"]);
        assert_eq!(cache.take_queued(10), [Arc::from("new")]);
        // Deleted, then asked about again: looked up anew.
        assert_eq!(cache.topic_compression("old"), TopicCompression::Pending);
    }

    #[test]
    fn answers_read_codec_level_source_and_errors() {
        let topic = ConfigSource::Topic;
        let zstd = configs(
            "t",
            0,
            vec![
                entry("compression.type", Some("zstd"), topic),
                entry(ZSTD_LEVEL, Some("10"), topic),
                entry(LZ4_LEVEL, Some("9"), ConfigSource::Default),
            ],
        );
        assert_eq!(
            answer(&zstd),
            (exists(known("zstd", Some(10), TargetSource::Topic)), "ok")
        );
        let inherited = configs(
            "t",
            0,
            vec![entry(
                "compression.type",
                Some("lz4"),
                ConfigSource::DynamicDefaultBroker,
            )],
        );
        assert_eq!(
            answer(&inherited).0.compression,
            known("lz4", None, TargetSource::BrokerDefault)
        );
        let uncompressed = configs(
            "t",
            0,
            vec![entry("compression.type", Some("uncompressed"), topic)],
        );
        assert_eq!(
            answer(&uncompressed).0.compression,
            known("none", None, TargetSource::Topic)
        );
        for (code, compression, result) in [
            (29, TopicCompression::Denied, "denied"),
            (3, TopicCompression::Unavailable, "unknown_topic"),
            (7, TopicCompression::Unavailable, "error"),
        ] {
            let (answer, label) = answer(&configs("t", code, Vec::new()));
            assert_eq!((answer.compression, label), (compression, result));
        }
        let odd = configs(
            "t",
            0,
            vec![entry("compression.type", Some("brotli"), topic)],
        );
        assert_eq!(answer(&odd).1, "error");
    }
}
