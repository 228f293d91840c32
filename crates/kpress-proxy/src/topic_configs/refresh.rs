//! The task that keeps a [`TopicConfigCache`] filled: a client of the side channel that
//! reads the whole topic list and every topic's configs on the cache's interval, and
//! looks up the topics queued between refreshes.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use kpress_codec::options::{GZIP_LEVEL, LZ4_LEVEL, ZSTD_LEVEL};
use kpress_config::TopicCompression;
use kpress_protocol::TopicConfigs;
use tokio::sync::watch;
use tokio::time::Instant;

use super::{answer, is_topic_name, Answer, TopicConfigCache, TOPICS_PER_REQUEST};
use crate::metrics;
use crate::policy::PolicySnapshot;
use crate::side::{ClusterClient, ClusterClientError, KeptSide, SideChannel};

/// The config keys asked for: the codec and the level of each codec that has one.
const KEYS: [&str; 4] = ["compression.type", GZIP_LEVEL, LZ4_LEVEL, ZSTD_LEVEL];

/// Starts the task that keeps `cache` filled, asking on `side`. It asks the cluster
/// nothing until a topic-mode lookup first wants an answer (so a proxy whose policy
/// never follows topics never asks), then refreshes on its interval and at once after
/// each new policy on `policies`; after each refresh, `forget` is told the topics the
/// cluster no longer has. It ends when `shutdown` becomes true.
pub(crate) fn spawn(
    cache: Arc<TopicConfigCache>,
    side: Arc<SideChannel>,
    mut policies: watch::Receiver<PolicySnapshot>,
    mut shutdown: watch::Receiver<bool>,
    forget: impl Fn(&HashSet<Arc<str>>) + Send + 'static,
) {
    tokio::spawn(async move {
        let stopping = shutdown.wait_for(|stopping| *stopping);
        tokio::pin!(stopping);
        tokio::select! {
            _ = cache.wake.notified() => {}
            _ = &mut stopping => return,
        }
        let mut next_refresh = Instant::now();
        let mut follow_reloads = true;
        let mut kept = KeptSide::default();
        loop {
            if cache.refresh_now.swap(false, Ordering::Relaxed) || Instant::now() >= next_refresh {
                if let Some(deleted) = refresh(&side, &mut kept, &cache).await {
                    forget(&deleted);
                }
                next_refresh = Instant::now() + cache.refresh;
            }
            let queued = cache.take_queued(TOPICS_PER_REQUEST);
            if !queued.is_empty() {
                look_up(&side, &mut kept, &cache, &queued).await;
                continue;
            }
            tokio::select! {
                _ = &mut stopping => return,
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

/// The whole topic list and every topic's configs; what was known stays if it fails.
/// The topics the cluster no longer has, if it answered.
async fn refresh(
    side: &Arc<SideChannel>,
    kept: &mut KeptSide,
    cache: &TopicConfigCache,
) -> Option<HashSet<Arc<str>>> {
    let read = kept
        .run(side, |stream| async move {
            let mut client = ClusterClient::over(side, stream);
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
            tracing::debug!(
                topics = listed,
                "read the cluster's topics and their configs"
            );
            Some(deleted)
        }
        Err(err) => {
            metrics::topic_config_refresh("failed");
            tracing::warn!(
                error = %err,
                "cannot read the cluster's topic configs; topic-mode topics not known yet pass as sent"
            );
            None
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
    side: &Arc<SideChannel>,
    kept: &mut KeptSide,
    cache: &TopicConfigCache,
    topics: &[Arc<str>],
) {
    let result = kept
        .run(side, |stream| async move {
            let mut client = ClusterClient::over(side, stream);
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
    use super::super::tests::known;
    use super::*;
    use kpress_batch::TargetSource;
    use kpress_config::TopicConfigSource;
    use std::time::Duration;

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
        use tokio::io::AsyncWriteExt;
        use tokio::net::{TcpListener, TcpStream};

        use crate::tests::{read_request, ReadRequest};
        use kpress_protocol::api_key;

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
                    .filter(|(key, _)| *key == api_key::DESCRIBE_CONFIGS)
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
            while let Some(ReadRequest {
                api_key: key,
                version,
                correlation_id: correlation,
                frame: request,
            }) = read_request(&mut stream).await
            {
                let mut body = BytesMut::new();
                let header_version = match key {
                    api_key::API_VERSIONS => {
                        let keys = [
                            (api_key::PRODUCE, 9),
                            (api_key::METADATA, 12),
                            (api_key::DESCRIBE_CONFIGS, 4),
                        ];
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
                    api_key::METADATA => {
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
                    api_key::DESCRIBE_CONFIGS => {
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
        // Long enough that only the refreshes the test causes happen.
        let cache = Arc::new(TopicConfigCache::new(Duration::from_secs(3600)));
        let side = Arc::new(SideChannel::for_tests(vec![addr.to_string()]));
        let rules = || PolicySnapshot::rules_only(Arc::new(RewritePolicy::default()));
        let (reload, policies) = tokio::sync::watch::channel(rules());
        let (_shutdown, shutdown) = tokio::sync::watch::channel(false);
        spawn(Arc::clone(&cache), side, policies, shutdown, |_| {});
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
}
