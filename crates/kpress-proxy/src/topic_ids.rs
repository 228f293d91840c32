//! Naming Produce v13 topic ids kpress has not seen in a Metadata response.
//!
//! One lookup task per proxy asks the brokers, on one side connection of its own,
//! about the ids that connections wait on. Lookups are single-flight: ids asked
//! together while a lookup runs wait for the next one, which asks for all of them at
//! once. A connection waits at most [`LOOKUP_WAIT`]; past that its batches go on
//! untouched and the lookup finishes for the next request. The queue of waiting
//! lookups is bounded, so a flood of unknown ids costs one Metadata request at a time
//! and never stalls a connection for long.

use std::collections::HashSet;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};

use crate::cluster::{AddressObserver, Cluster};
use crate::error::ConnectionError;
use crate::metrics;
use crate::side::{KeptSide, SideChannel, METADATA_VERSION};

/// How long a Produce request waits for its topic ids to be named.
pub(crate) const LOOKUP_WAIT: Duration = Duration::from_secs(2);

/// Lookups that may wait for the task at once; more pass through unnamed.
const QUEUE_CAPACITY: usize = 256;

/// Ids one Metadata request asks about; further ids wait for the next request.
const IDS_PER_METADATA_REQUEST: usize = 1000;

/// A connection's request to name `ids`; `done` fires when they were asked about,
/// with the nodes the answer named that have no listener yet.
#[derive(Debug)]
struct Lookup {
    ids: Vec<[u8; 16]>,
    done: oneshot::Sender<Vec<i32>>,
}

/// The handle connections use; the task starts with the first lookup, and ends when
/// the handle is dropped.
#[derive(Debug)]
pub(crate) struct TopicIdResolver {
    queue: mpsc::Sender<Lookup>,
    idle_task: Mutex<Option<Task>>,
}

/// What the lookup task is started with.
#[derive(Debug)]
struct Task {
    queue: mpsc::Receiver<Lookup>,
    cluster: Arc<Cluster>,
    side: Arc<SideChannel>,
}

impl TopicIdResolver {
    /// Names ids into `cluster`, asking on `side`.
    pub(crate) fn new(cluster: Arc<Cluster>, side: Arc<SideChannel>) -> TopicIdResolver {
        let (queue, receiver) = mpsc::channel(QUEUE_CAPACITY);
        TopicIdResolver {
            queue,
            idle_task: Mutex::new(Some(Task {
                queue: receiver,
                cluster,
                side,
            })),
        }
    }
}

/// How a lookup ended for the connection waiting on it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum LookupResult {
    /// The brokers were asked; some ids may now have names. The answer named these
    /// nodes, which have no listener yet (their addresses are now known).
    Asked(Vec<i32>),
    /// Not within [`LOOKUP_WAIT`], or the queue was full: go on without names.
    NotInTime,
}

impl TopicIdResolver {
    /// Asks the brokers about `ids` and waits at most [`LOOKUP_WAIT`] for the answer.
    pub(crate) async fn lookup(&self, ids: Vec<[u8; 16]>) -> LookupResult {
        self.start_task();
        let (done, answered) = oneshot::channel();
        if self.queue.try_send(Lookup { ids, done }).is_err() {
            metrics::topic_id_lookup("queue_full");
            return LookupResult::NotInTime;
        }
        match tokio::time::timeout(LOOKUP_WAIT, answered).await {
            Ok(Ok(nodes)) => LookupResult::Asked(nodes),
            _ => LookupResult::NotInTime,
        }
    }

    fn start_task(&self) {
        let task = self
            .idle_task
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(task) = task {
            tokio::spawn(run(task));
        }
    }
}

/// The lookup task: ends when its resolver is gone.
async fn run(task: Task) {
    let Task {
        mut queue,
        cluster,
        side: channel,
    } = task;
    let mut side = KeptSide::default();
    while let Some(first) = queue.recv().await {
        let mut waiting = vec![first.done];
        let mut ids: HashSet<[u8; 16]> = first.ids.into_iter().collect();
        // Everything queued meanwhile goes into the same request.
        while ids.len() < IDS_PER_METADATA_REQUEST {
            let Ok(more) = queue.try_recv() else { break };
            ids.extend(more.ids);
            waiting.push(more.done);
        }
        let mut new_nodes = Vec::new();
        let ids: Vec<[u8; 16]> = ids
            .into_iter()
            .filter(|id| cluster.topic_name(id).is_none())
            .take(IDS_PER_METADATA_REQUEST)
            .collect();
        if !ids.is_empty() {
            match ask(&cluster, &channel, &mut side, &ids).await {
                Ok(nodes) => {
                    new_nodes = nodes;
                    let named = ids
                        .iter()
                        .filter(|id| cluster.topic_name(id).is_some())
                        .count();
                    tracing::debug!(asked = ids.len(), named, "named Produce v13 topic ids");
                    metrics::topic_id_lookup(if named == ids.len() {
                        "named"
                    } else {
                        "unnamed"
                    });
                }
                Err(err) => {
                    metrics::topic_id_lookup("failed");
                    tracing::warn!(
                        fault = %err.fault(),
                        error = %err,
                        "cannot name Produce v13 topic ids; their batches go untouched"
                    );
                }
            }
            cluster.note_unresolved(&ids);
        }
        for done in waiting {
            let _ = done.send(new_nodes.clone());
        }
    }
}

/// One Metadata request for `ids` on the lookup task's side connection; the nodes it
/// named that have no listener yet.
async fn ask(
    cluster: &Cluster,
    channel: &SideChannel,
    side: &mut KeptSide,
    ids: &[[u8; 16]],
) -> Result<Vec<i32>, ConnectionError> {
    side.run(channel, |mut stream| async move {
        let mut observer = AddressObserver::new(cluster);
        channel
            .metadata(&mut stream, METADATA_VERSION, ids, &mut observer)
            .await?;
        Ok((observer.nodes_without_listener, stream))
    })
    .await
}

#[cfg(test)]
mod tests {
    //! The lookup task against a stand-in broker that answers one Metadata request per
    //! connection and then closes it, as a broker closes an idle or expired connection.

    use super::*;
    use bytes::{Buf, BytesMut};
    use kafka_protocol::messages::metadata_request::MetadataRequest;
    use kafka_protocol::messages::metadata_response::{MetadataResponse, MetadataResponseTopic};
    use kafka_protocol::messages::RequestHeader;
    use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
    use kpress_config::NodeRouting;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    /// Names every topic id it is asked about `topic-<first byte>`, once per connection.
    async fn one_answer_per_connection(listener: TcpListener) {
        loop {
            let (mut stream, _) = listener.accept().await.unwrap();
            let mut size = [0u8; 4];
            if stream.read_exact(&mut size).await.is_err() {
                continue;
            }
            let mut request = vec![0u8; i32::from_be_bytes(size) as usize];
            stream.read_exact(&mut request).await.unwrap();
            let mut buf = bytes::Bytes::from(request);
            let version = i16::from_be_bytes([buf[2], buf[3]]);
            let header = RequestHeader::decode(&mut buf, 2).unwrap();
            let asked = MetadataRequest::decode(&mut buf, version).unwrap();
            assert!(!buf.has_remaining());
            let topics = asked
                .topics
                .unwrap_or_default()
                .into_iter()
                .map(|t| {
                    MetadataResponseTopic::default()
                        .with_topic_id(t.topic_id)
                        .with_name(Some(
                            StrBytes::from_string(format!("topic-{}", t.topic_id.as_bytes()[0]))
                                .into(),
                        ))
                })
                .collect();
            let mut body = BytesMut::new();
            MetadataResponse::default()
                .with_topics(topics)
                .encode(&mut body, version)
                .unwrap();
            let mut response = header.correlation_id.to_be_bytes().to_vec();
            response.push(0); // header tagged fields
            response.extend_from_slice(&body);
            let mut frame = (response.len() as i32).to_be_bytes().to_vec();
            frame.extend_from_slice(&response);
            stream.write_all(&frame).await.unwrap();
            // Closed after one answer, as an idle or expired connection is.
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_side_connection_the_broker_closed_is_replaced() {
        let broker = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = broker.local_addr().unwrap();
        tokio::spawn(one_answer_per_connection(broker));
        let cluster = Arc::new(Cluster::new(NodeRouting::Ports {
            advertised_host: "127.0.0.1".into(),
            node_port_base: 20000,
        }));
        let side = Arc::new(SideChannel::for_tests(vec![addr.to_string()]));
        let resolver = TopicIdResolver::new(Arc::clone(&cluster), side);
        for first_byte in [1u8, 2, 3] {
            let id = [first_byte; 16];
            assert!(matches!(
                resolver.lookup(vec![id]).await,
                LookupResult::Asked(_)
            ));
            assert_eq!(
                cluster.topic_name(&id).as_deref(),
                Some(format!("topic-{first_byte}").as_str()),
                "lookup {first_byte}"
            );
        }
    }
}
