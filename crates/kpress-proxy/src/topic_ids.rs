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
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};

use crate::budget::Direction;
use crate::cluster::AddressObserver;
use crate::error::ConnectionError;
use crate::listeners::ensure_node_listeners;
use crate::metrics;
use crate::shared::Shared;
use crate::transport::Stream;
use crate::upstream;

/// How long a Produce request waits for its topic ids to be named.
pub(crate) const LOOKUP_WAIT: Duration = Duration::from_secs(2);

/// Lookups that may wait for the task at once; more pass through unnamed.
const QUEUE_CAPACITY: usize = 256;

/// Ids one Metadata request asks about; further ids wait for the next request.
const IDS_PER_METADATA_REQUEST: usize = 1000;

/// A connection's request to name `ids`; `done` fires when they were asked about.
#[derive(Debug)]
struct Lookup {
    ids: Vec<[u8; 16]>,
    done: oneshot::Sender<()>,
}

/// The handle connections use; the task starts with the first lookup.
#[derive(Debug)]
pub(crate) struct TopicIdResolver {
    queue: mpsc::Sender<Lookup>,
    idle_task: Mutex<Option<mpsc::Receiver<Lookup>>>,
}

impl Default for TopicIdResolver {
    fn default() -> Self {
        let (queue, receiver) = mpsc::channel(QUEUE_CAPACITY);
        TopicIdResolver {
            queue,
            idle_task: Mutex::new(Some(receiver)),
        }
    }
}

/// How a lookup ended for the connection waiting on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LookupResult {
    /// The brokers were asked; some ids may now have names.
    Asked,
    /// Not within [`LOOKUP_WAIT`], or the queue was full: go on without names.
    NotInTime,
}

impl TopicIdResolver {
    /// Asks the brokers about `ids` and waits at most [`LOOKUP_WAIT`] for the answer.
    pub(crate) async fn lookup(&self, shared: &Arc<Shared>, ids: Vec<[u8; 16]>) -> LookupResult {
        self.start_task(shared);
        let (done, answered) = oneshot::channel();
        if self.queue.try_send(Lookup { ids, done }).is_err() {
            metrics::topic_id_lookup("queue_full");
            return LookupResult::NotInTime;
        }
        match tokio::time::timeout(LOOKUP_WAIT, answered).await {
            Ok(Ok(())) => LookupResult::Asked,
            _ => LookupResult::NotInTime,
        }
    }

    fn start_task(&self, shared: &Arc<Shared>) {
        let receiver = self
            .idle_task
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(receiver) = receiver {
            tokio::spawn(run(Arc::downgrade(shared), receiver));
        }
    }
}

/// The lookup task: ends when the proxy's shared state is gone.
async fn run(shared: Weak<Shared>, mut queue: mpsc::Receiver<Lookup>) {
    let mut side: Option<Stream> = None;
    while let Some(first) = queue.recv().await {
        let mut waiting = vec![first.done];
        let mut ids: HashSet<[u8; 16]> = first.ids.into_iter().collect();
        // Everything queued meanwhile goes into the same request.
        while ids.len() < IDS_PER_METADATA_REQUEST {
            let Ok(more) = queue.try_recv() else { break };
            ids.extend(more.ids);
            waiting.push(more.done);
        }
        let Some(shared) = shared.upgrade() else {
            return;
        };
        let ids: Vec<[u8; 16]> = ids
            .into_iter()
            .filter(|id| shared.cluster.topic_name(id).is_none())
            .take(IDS_PER_METADATA_REQUEST)
            .collect();
        if !ids.is_empty() {
            match ask(&shared, &mut side, &ids).await {
                Ok(()) => {
                    let named = ids
                        .iter()
                        .filter(|id| shared.cluster.topic_name(id).is_some())
                        .count();
                    tracing::debug!(asked = ids.len(), named, "named Produce v13 topic ids");
                    metrics::topic_id_lookup(if named == ids.len() {
                        "named"
                    } else {
                        "unnamed"
                    });
                }
                Err(err) => {
                    // The next lookup opens a new side connection.
                    side = None;
                    metrics::topic_id_lookup("failed");
                    tracing::warn!(
                        fault = %err.fault(),
                        error = %err,
                        "cannot name Produce v13 topic ids; their batches go untouched"
                    );
                }
            }
            shared.cluster.note_unresolved(&ids);
        }
        for done in waiting {
            let _ = done.send(());
        }
    }
}

/// One Metadata request for `ids` on the side connection, opened if need be.
async fn ask(
    shared: &Arc<Shared>,
    side: &mut Option<Stream>,
    ids: &[[u8; 16]],
) -> Result<(), ConnectionError> {
    let stream = match side {
        Some(stream) => stream,
        empty => empty.insert(upstream::side_connection_any(shared).await?),
    };
    let mut observer = AddressObserver::new(&shared.cluster);
    upstream::fetch_metadata(
        stream,
        upstream::METADATA_VERSION,
        ids,
        shared.frame_limits(),
        shared.budget.pool(Direction::Response),
        &mut observer,
    )
    .await?;
    // Nodes learned on the way get listeners too (their addresses are now known).
    ensure_node_listeners(shared, &observer.nodes_without_listener)
        .map_err(ConnectionError::Listener)
}
