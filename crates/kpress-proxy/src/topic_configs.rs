//! What each topic of the cluster stores: its own `compression.type` and
//! `compression.<codec>.level` (KIP-390), for `compression.type = "topic"`, and the
//! list of the cluster's topics, which also decides which topics get metric labels.
//!
//! One task per proxy asks the cluster, on kpress's side connection: every
//! `topic_config_refresh_ms` (and at once after a policy reload) it reads the whole
//! topic list (Metadata) and the configs of every topic (DescribeConfigs, many topics
//! per request), replacing what it knew, so deleted topics are forgotten and a topic
//! created again is seen anew. Between refreshes, a topic not known yet is looked up
//! once (single-flight: it is marked pending and queued; topics queued together share
//! one request). Nothing here ever makes a producer wait: a topic not known yet is
//! answered [`TopicCompression::Pending`] at once and its batches pass as sent.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, PoisonError, RwLock, Weak};
use std::time::Duration;

use kpress_batch::{CompressionType, PolicyLookup, TargetSource};
use kpress_codec::options::{GZIP_LEVEL, LZ4_LEVEL, ZSTD_LEVEL};
use kpress_codec::Codec;
use kpress_config::{is_legal_topic_char, TopicCompression, TopicConfigSource};
use kpress_protocol::{ConfigSource, TopicConfigs};
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::cluster_client::{ClusterClient, ClusterClientError};
use crate::kept_side::KeptSide;
use crate::metrics;
use crate::shared::Shared;

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

/// The config keys asked for: the codec and the level of each codec that has one.
const KEYS: [&str; 4] = ["compression.type", GZIP_LEVEL, LZ4_LEVEL, ZSTD_LEVEL];

/// Kafka's error codes a DescribeConfigs answer gives a topic.
const UNKNOWN_TOPIC_OR_PARTITION: i16 = 3;
const TOPIC_AUTHORIZATION_FAILED: i16 = 29;
const CLUSTER_AUTHORIZATION_FAILED: i16 = 31;

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
        0 => {}
        TOPIC_AUTHORIZATION_FAILED | CLUSTER_AUTHORIZATION_FAILED => {
            // An unauthorized principal cannot tell whether the topic exists.
            return failed(TopicCompression::Denied, false, "denied");
        }
        UNKNOWN_TOPIC_OR_PARTITION => {
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

/// Counts a Produce request's batches, given per topic, by where their target came from.
pub(crate) fn count_target_sources<'a>(
    rules: &dyn PolicyLookup,
    topics: impl Iterator<Item = (&'a str, usize)>,
) {
    for (topic, batches) in topics {
        metrics::batches_by_target_source(rules.target_source(topic), batches);
    }
}

/// Starts the task that keeps `shared`'s cache filled. It asks the cluster nothing
/// until a topic-mode lookup first wants an answer (so a proxy whose policy never
/// follows topics never asks), then refreshes on its interval.
pub(crate) fn spawn(shared: &Arc<Shared>) {
    let cache = Arc::clone(&shared.topic_configs);
    let weak = Arc::downgrade(shared);
    let mut policies = shared.policy.subscribe();
    tokio::spawn(async move {
        tokio::select! {
            _ = cache.wake.notified() => {}
            _ = closed(&weak) => return,
        }
        let mut next_refresh = Instant::now();
        let mut follow_reloads = true;
        let mut side = KeptSide::default();
        loop {
            let Some(shared) = weak.upgrade() else { return };
            if shared.is_shutting_down() {
                return;
            }
            if cache.refresh_now.swap(false, Ordering::Relaxed) || Instant::now() >= next_refresh {
                refresh(&shared, &mut side, &cache).await;
                next_refresh = Instant::now() + cache.refresh;
            }
            let queued = cache.take_queued(TOPICS_PER_REQUEST);
            if !queued.is_empty() {
                look_up(&shared, &mut side, &cache, &queued).await;
                continue;
            }
            drop(shared);
            tokio::select! {
                _ = tokio::time::sleep_until(next_refresh) => {}
                _ = cache.wake.notified() => {}
                changed = policies.changed(), if follow_reloads => match changed {
                    Ok(()) => cache.refresh_now.store(true, Ordering::Relaxed),
                    // No more policies will come: the interval alone drives refreshes.
                    Err(_) => follow_reloads = false,
                },
            }
        }
    });
}

/// Completes when the proxy's shared state is gone (polled: the task holds no strong
/// reference while it waits).
async fn closed(shared: &Weak<Shared>) {
    loop {
        match shared.upgrade() {
            Some(s) if !s.is_shutting_down() => {}
            _ => return,
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// The whole topic list and every topic's configs; what was known stays if it fails.
async fn refresh(shared: &Arc<Shared>, side: &mut KeptSide, cache: &TopicConfigCache) {
    let read = side
        .run(shared, |stream| async move {
            let mut client = ClusterClient::over(shared, stream);
            let answers = read_cluster(&mut client, cache.capacity).await?;
            Ok::<_, ClusterClientError>((answers, client.into_stream()))
        })
        .await;
    match read {
        Ok(answers) => {
            let listed = answers.iter().filter(|(_, a)| a.exists).count();
            let deleted = cache.replace(answers);
            metrics::topic_config_refresh("ok");
            metrics::cluster_topics(listed);
            // Only topics kpress itself saw go: one its principal may not list keeps the
            // name clients' Metadata gave it.
            shared
                .cluster
                .forget_named_topics(|topic| deleted.contains(topic));
            shared
                .policy
                .topic_labels
                .forget_unknown(|topic| shared.is_known_topic(topic));
            tracing::debug!(
                topics = listed,
                "read the cluster's topics and their configs"
            );
        }
        Err(err) => {
            metrics::topic_config_refresh("failed");
            tracing::warn!(
                error = %err,
                "cannot read the cluster's topic configs; topic-mode topics not known yet pass as sent"
            );
        }
    }
}

async fn read_cluster(
    client: &mut ClusterClient,
    capacity: usize,
) -> Result<Vec<(Arc<str>, Answer)>, ClusterClientError> {
    let version = client.api_versions().await?.describe_configs();
    let mut names: Vec<Arc<str>> = client
        .metadata()
        .await?
        .topics
        .into_iter()
        .filter(|t| is_topic_name(t))
        .map(Arc::from)
        .collect();
    names.sort_unstable();
    names.dedup();
    names.truncate(capacity);
    let Some(version) = version else {
        metrics::topic_config_lookups("unsupported", names.len());
        return Ok(names
            .into_iter()
            .map(|t| {
                let answer = Answer {
                    compression: TopicCompression::Unavailable,
                    exists: true,
                };
                (t, answer)
            })
            .collect());
    };
    let mut answers = Vec::with_capacity(names.len());
    for chunk in names.chunks(TOPICS_PER_REQUEST) {
        answers.extend(describe(client, version, chunk).await?);
    }
    // The listing names every topic, even one the describe could not.
    for (_, answer) in &mut answers {
        answer.exists = true;
    }
    Ok(answers)
}

/// Looks up `topics` (pending, queued between refreshes).
async fn look_up(
    shared: &Arc<Shared>,
    side: &mut KeptSide,
    cache: &TopicConfigCache,
    topics: &[Arc<str>],
) {
    let result = side
        .run(shared, |stream| async move {
            let mut client = ClusterClient::over(shared, stream);
            let answers = match client.api_versions().await?.describe_configs() {
                Some(version) => Some(describe(&mut client, version, topics).await?),
                None => None,
            };
            Ok::<_, ClusterClientError>((answers, client.into_stream()))
        })
        .await;
    match result {
        Ok(Some(answers)) => cache.store(answers),
        Ok(None) => {
            metrics::topic_config_lookups("unsupported", topics.len());
            cache.unanswered(topics);
        }
        Err(err) => {
            metrics::topic_config_lookups("failed", topics.len());
            tracing::warn!(
                error = %err,
                topics = topics.len(),
                "cannot look up topic configs; their batches pass as sent"
            );
            cache.unanswered(topics);
        }
    }
}

/// One DescribeConfigs request for `topics`; a topic the answer leaves out is
/// unavailable.
async fn describe(
    client: &mut ClusterClient,
    version: i16,
    topics: &[Arc<str>],
) -> Result<Vec<(Arc<str>, Answer)>, ClusterClientError> {
    let names: Vec<&str> = topics.iter().map(|t| &**t).collect();
    let described = client
        .describe_topic_configs(version, &names, &KEYS)
        .await?;
    let mut by_name: HashMap<&str, &TopicConfigs> =
        described.iter().map(|c| (c.topic.as_str(), c)).collect();
    let mut out = Vec::with_capacity(topics.len());
    for topic in topics {
        let (answer, result) = match by_name.remove(&**topic) {
            Some(configs) => answer(configs),
            None => (
                Answer {
                    compression: TopicCompression::Unavailable,
                    exists: false,
                },
                "error",
            ),
        };
        metrics::topic_config_lookups(result, 1);
        out.push((Arc::clone(topic), answer));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
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

    fn known(compression: &str, level: Option<i32>, source: TargetSource) -> TopicCompression {
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
    mod stand_in {
        use std::sync::Mutex;

        use bytes::{Buf, BytesMut};
        use kafka_protocol::messages::api_versions_response::ApiVersion;
        use kafka_protocol::messages::describe_configs_response::{
            DescribeConfigsResourceResult, DescribeConfigsResult,
        };
        use kafka_protocol::messages::metadata_response::MetadataResponseTopic;
        use kafka_protocol::messages::{
            ApiVersionsResponse, DescribeConfigsRequest, DescribeConfigsResponse, MetadataResponse,
            RequestHeader,
        };
        use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, StrBytes};
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        use tokio::net::{TcpListener, TcpStream};

        use super::*;

        #[derive(Default)]
        pub(super) struct Broker {
            /// Topic → its `compression.type`; "secret" is refused (no ACL).
            pub(super) topics: Mutex<Vec<(String, String)>>,
            /// (API key, topics named) of each request served.
            pub(super) requests: Mutex<Vec<(i16, Vec<String>)>>,
            /// Connections accepted.
            pub(super) connections: std::sync::atomic::AtomicUsize,
        }

        impl Broker {
            /// The topics each DescribeConfigs request named, in order.
            pub(super) fn described(&self) -> Vec<Vec<String>> {
                self.requests
                    .lock()
                    .unwrap()
                    .iter()
                    .filter(|(key, _)| *key == kpress_protocol::api_key::DESCRIBE_CONFIGS)
                    .map(|(_, topics)| topics.clone())
                    .collect()
            }
        }

        pub(super) async fn serve(listener: TcpListener, broker: Arc<Broker>) {
            loop {
                let (stream, _) = listener.accept().await.unwrap();
                broker.connections.fetch_add(1, Ordering::Relaxed);
                tokio::spawn(connection(stream, Arc::clone(&broker)));
            }
        }

        async fn connection(mut stream: TcpStream, broker: Arc<Broker>) {
            loop {
                let mut size = [0u8; 4];
                if stream.read_exact(&mut size).await.is_err() {
                    return;
                }
                let mut request = vec![0u8; i32::from_be_bytes(size) as usize];
                stream.read_exact(&mut request).await.unwrap();
                let key = i16::from_be_bytes([request[0], request[1]]);
                let version = i16::from_be_bytes([request[2], request[3]]);
                let correlation =
                    i32::from_be_bytes([request[4], request[5], request[6], request[7]]);
                let mut body = BytesMut::new();
                let header_version = match key {
                    18 => {
                        let keys = [(0, 9), (3, 12), (32, 4)];
                        ApiVersionsResponse::default()
                            .with_api_keys(
                                keys.iter()
                                    .map(|&(k, max)| {
                                        ApiVersion::default().with_api_key(k).with_max_version(max)
                                    })
                                    .collect(),
                            )
                            .encode(&mut body, version)
                            .unwrap();
                        broker.requests.lock().unwrap().push((key, Vec::new()));
                        0
                    }
                    3 => {
                        let topics = broker.topics.lock().unwrap().clone();
                        broker.requests.lock().unwrap().push((key, Vec::new()));
                        MetadataResponse::default()
                            .with_topics(
                                topics
                                    .iter()
                                    .zip(1u8..)
                                    .map(|((name, _), id)| {
                                        MetadataResponseTopic::default()
                                            .with_topic_id(uuid::Uuid::from_bytes([id; 16]))
                                            .with_name(Some(
                                                StrBytes::from_string(name.clone()).into(),
                                            ))
                                    })
                                    .collect(),
                            )
                            .encode(&mut body, version)
                            .unwrap();
                        MetadataResponse::header_version(version)
                    }
                    32 => {
                        let mut buf = bytes::Bytes::from(request);
                        RequestHeader::decode(
                            &mut buf,
                            DescribeConfigsRequest::header_version(version),
                        )
                        .unwrap();
                        let asked = DescribeConfigsRequest::decode(&mut buf, version).unwrap();
                        assert!(!buf.has_remaining());
                        let names: Vec<String> = asked
                            .resources
                            .iter()
                            .map(|r| r.resource_name.to_string())
                            .collect();
                        broker.requests.lock().unwrap().push((key, names.clone()));
                        let topics = broker.topics.lock().unwrap().clone();
                        let results = names
                            .iter()
                            .map(|name| {
                                let result = DescribeConfigsResult::default()
                                    .with_resource_type(2)
                                    .with_resource_name(StrBytes::from_string(name.clone()));
                                match topics.iter().find(|(t, _)| t == name) {
                                    _ if name == "secret" => result.with_error_code(29),
                                    None => result.with_error_code(3),
                                    Some((_, codec)) => result.with_configs(vec![
                                        DescribeConfigsResourceResult::default()
                                            .with_name(StrBytes::from_static_str(
                                                "compression.type",
                                            ))
                                            .with_value(Some(StrBytes::from_string(codec.clone())))
                                            .with_config_source(1),
                                    ]),
                                }
                            })
                            .collect();
                        DescribeConfigsResponse::default()
                            .with_results(results)
                            .encode(&mut body, version)
                            .unwrap();
                        DescribeConfigsResponse::header_version(version)
                    }
                    other => panic!("unexpected API key {other}"),
                };
                let mut response = correlation.to_be_bytes().to_vec();
                if header_version >= 1 {
                    response.push(0); // header tagged fields
                }
                response.extend_from_slice(&body);
                let mut frame = (response.len() as i32).to_be_bytes().to_vec();
                frame.extend_from_slice(&response);
                if stream.write_all(&frame).await.is_err() {
                    return;
                }
            }
        }
    }

    /// Waits until `done` holds (the task runs on its own), at most 10 s.
    async fn until(mut done: impl FnMut() -> bool) {
        for _ in 0..1000 {
            if done() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("not within 10 s");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_task_refreshes_batches_lookups_and_follows_the_cluster() {
        use crate::shared::SharedConfig;
        use crate::ProxySettings;
        use kpress_batch::RewritePolicy;

        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let broker = Arc::new(stand_in::Broker::default());
        *broker.topics.lock().unwrap() = vec![
            ("a".into(), "zstd".into()),
            ("b".into(), "producer".into()),
            ("secret".into(), "lz4".into()),
        ];
        tokio::spawn(stand_in::serve(listener, Arc::clone(&broker)));
        let mut settings = ProxySettings::for_tests(
            "127.0.0.1:0".parse().unwrap(),
            "127.0.0.1".into(),
            20000,
            vec![addr.to_string()],
        );
        // Long enough that only the refreshes the test causes happen.
        settings.topic_configs = Arc::new(TopicConfigCache::new(Duration::from_secs(3600)));
        let rules = || crate::PolicySnapshot::rules_only(Arc::new(RewritePolicy::default()));
        let (reload, policies) = tokio::sync::watch::channel(rules());
        let (shared, _control) = Shared::new(SharedConfig {
            policies,
            ..SharedConfig::for_tests(Arc::new(RewritePolicy::default()), settings)
        })
        .unwrap();
        spawn(&shared);
        let cache = Arc::clone(&shared.topic_configs);
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(
            broker.requests.lock().unwrap().is_empty(),
            "nothing is asked before a topic-mode lookup wants an answer"
        );

        // The first demand answers at once and starts a full read: the list, then one
        // DescribeConfigs for every topic.
        assert_eq!(cache.topic_compression("a"), TopicCompression::Pending);
        until(|| cache.is_cluster_topic("b")).await;
        assert_eq!(
            cache.topic_compression("a"),
            known("zstd", None, TargetSource::Topic)
        );
        assert_eq!(cache.topic_compression("secret"), TopicCompression::Denied);
        assert!(!cache.is_cluster_topic("made-up"));
        let described = broker.described();
        assert_eq!(described, [vec!["a", "b", "secret"]]);

        broker.requests.lock().unwrap().clear();
        broker
            .topics
            .lock()
            .unwrap()
            .push(("c".into(), "gzip".into()));
        // Asked at once, answered without waiting; asked again, never looked up twice.
        for topic in ["c", "made-up"] {
            assert_eq!(cache.topic_compression(topic), TopicCompression::Pending);
        }
        for _ in 0..100 {
            cache.topic_compression("c");
            cache.topic_compression("made-up");
        }
        until(|| cache.topic_compression("c") != TopicCompression::Pending).await;
        assert_eq!(
            cache.topic_compression("c"),
            known("gzip", None, TargetSource::Topic)
        );
        until(|| cache.topic_compression("made-up") == TopicCompression::Unavailable).await;
        let described = broker.described();
        // Queued together they share a request, unless the task took "c" alone first.
        let asked: Vec<&String> = described.iter().flatten().collect();
        assert_eq!(asked, ["c", "made-up"], "each topic asked about once");
        assert!(cache.is_cluster_topic("c"));
        assert!(!cache.is_cluster_topic("made-up"));

        // A policy reload refreshes at once: a deleted topic is forgotten, an altered
        // one followed.
        *broker.topics.lock().unwrap() = vec![("a".into(), "lz4".into())];
        reload.send(rules()).unwrap();
        until(|| !cache.is_cluster_topic("b")).await;
        assert_eq!(
            cache.topic_compression("a"),
            known("lz4", None, TargetSource::Topic)
        );
        assert_eq!(
            cache
                .learned()
                .iter()
                .map(|l| l.topic.as_str())
                .collect::<Vec<_>>(),
            ["a"]
        );
        // Two full reads and two lookups, on one kept connection.
        assert_eq!(broker.connections.load(Ordering::Relaxed), 1);
    }

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
            let mut allowance = ProduceAllowance::new(api_version, 64 << 20);
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
