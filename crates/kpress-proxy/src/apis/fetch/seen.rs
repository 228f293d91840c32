//! The consumers kpress has seen fetch that do not read every codec: who they are
//! (`client.id`, the software they announced, the listener), the highest Fetch version
//! they used, the codecs they read and whether kpress re-encodes for them. Served on
//! the admin endpoint for `kpress doctor`.
//!
//! Recorded on the Fetch request step from what it already worked out, only for
//! consumers that do not read every codec, and on the response step the topics whose
//! batches it could not read as stored (found by the survey that response makes
//! anyway).
//! Bounded: at most [`CAPACITY`] consumers, the one seen longest ago giving way to a
//! new one; `client.id` and software come bounded from the request and the connection.

use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use kpress_config::CodecSet;

use crate::handler::{ClientSoftware, ConnectionContext, RequestContext};

/// Consumers kept at most.
pub(crate) const CAPACITY: usize = 256;

/// Topics kept per consumer: the first ones found.
pub(crate) const MAX_TOPICS: usize = 32;

/// Whether kpress re-encodes what a consumer cannot read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Handling {
    /// Batches it cannot read are re-encoded into a codec it reads.
    Reencoded,
    /// `[consumers] reencode = false`: it gets batches as stored.
    ReencodeOff,
    /// Its Fetch version's answers are not read by kpress (outside the versions it
    /// parses): it gets batches as stored.
    VersionNotReencoded,
}

impl Handling {
    /// The name the admin endpoint and the doctor use.
    pub fn as_str(self) -> &'static str {
        match self {
            Handling::Reencoded => "reencoded",
            Handling::ReencodeOff => "reencode_off",
            Handling::VersionNotReencoded => "version_not_reencoded",
        }
    }
}

/// One consumer as last seen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SeenConsumer {
    pub client_id: Option<String>,
    pub software: Option<ClientSoftware>,
    pub listener: String,
    /// The highest Fetch version it sent.
    pub max_fetch_version: i16,
    /// The codecs it reads, as of its latest Fetch.
    pub reads: CodecSet,
    /// What kpress did for its latest Fetch.
    pub handling: Handling,
    /// Its Fetch requests seen while it was kept.
    pub fetches: u64,
    /// Topics that sent it batches in a codec it does not read (named by id, `id:`
    /// and hex, when kpress has no name for the id), at most [`MAX_TOPICS`].
    pub topics: Vec<Arc<str>>,
    last_seen: u64,
}

impl SeenConsumer {
    fn is(
        &self,
        client_id: Option<&str>,
        software: Option<&ClientSoftware>,
        listener: &str,
    ) -> bool {
        self.client_id.as_deref() == client_id
            && self.software.as_ref() == software
            && self.listener == listener
    }
}

/// The bounded record.
#[derive(Debug, Default)]
pub struct SeenConsumers {
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    consumers: Vec<SeenConsumer>,
    clock: u64,
}

/// What one Fetch request told about its consumer.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Sighting<'a> {
    pub(crate) client_id: Option<&'a str>,
    pub(crate) software: Option<&'a ClientSoftware>,
    pub(crate) listener: &'a str,
    pub(crate) version: i16,
    pub(crate) reads: CodecSet,
    pub(crate) handling: Handling,
}

impl SeenConsumers {
    /// The record every connection of this process writes to.
    pub fn global() -> &'static SeenConsumers {
        static SEEN: OnceLock<SeenConsumers> = OnceLock::new();
        SEEN.get_or_init(SeenConsumers::default)
    }

    /// Notes one Fetch request of a consumer that does not read every codec.
    pub(crate) fn note(&self, seen: Sighting<'_>) {
        let client_id = seen.client_id;
        let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        inner.clock += 1;
        let now = inner.clock;
        if let Some(known) = inner
            .consumers
            .iter_mut()
            .find(|c| c.is(client_id, seen.software, seen.listener))
        {
            known.max_fetch_version = known.max_fetch_version.max(seen.version);
            known.reads = seen.reads;
            known.handling = seen.handling;
            known.fetches += 1;
            known.last_seen = now;
            return;
        }
        let entry = SeenConsumer {
            client_id: client_id.map(str::to_owned),
            software: seen.software.cloned(),
            listener: seen.listener.to_owned(),
            max_fetch_version: seen.version,
            reads: seen.reads,
            handling: seen.handling,
            fetches: 1,
            topics: Vec::new(),
            last_seen: now,
        };
        if inner.consumers.len() < CAPACITY {
            inner.consumers.push(entry);
        } else if let Some(oldest) = inner.consumers.iter_mut().min_by_key(|c| c.last_seen) {
            *oldest = entry;
        }
    }

    /// Notes the topics whose batches a consumer already noted could not read as
    /// stored.
    pub(crate) fn note_topics(
        &self,
        client_id: Option<&str>,
        software: Option<&ClientSoftware>,
        listener: &str,
        topics: impl IntoIterator<Item = Arc<str>>,
    ) {
        let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(known) = inner
            .consumers
            .iter_mut()
            .find(|c| c.is(client_id, software, listener))
        else {
            return;
        };
        for topic in topics {
            if known.topics.len() >= MAX_TOPICS {
                break;
            }
            if !known.topics.contains(&topic) {
                known.topics.push(topic);
            }
        }
    }

    /// Every consumer kept, the most recently seen first.
    pub fn snapshot(&self) -> Vec<SeenConsumer> {
        let inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        let mut consumers = inner.consumers.clone();
        consumers.sort_by_key(|c| std::cmp::Reverse(c.last_seen));
        consumers
    }
}

/// [`SeenConsumers::note_topics`] for the consumer of `request` on `conn`.
pub(super) fn note_topics(
    conn: &ConnectionContext,
    request: &RequestContext,
    topics: impl IntoIterator<Item = Arc<str>>,
) {
    let software = conn.client_software();
    SeenConsumers::global().note_topics(
        request.client_id(),
        software.as_ref(),
        conn.listener(),
        topics,
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use kpress_codec::Codec;

    fn sighting(client_id: &str, version: i16) -> Sighting<'_> {
        Sighting {
            client_id: Some(client_id),
            software: None,
            listener: "bootstrap",
            version,
            reads: CodecSet::ALL.without(Codec::Zstd),
            handling: Handling::Reencoded,
        }
    }

    #[test]
    fn one_entry_per_consumer_with_its_highest_version_and_latest_state() {
        let seen = SeenConsumers::default();
        seen.note(sighting("old", 8));
        seen.note(sighting("old", 6));
        seen.note(Sighting {
            handling: Handling::ReencodeOff,
            ..sighting("old", 7)
        });
        let software = ClientSoftware::new(b"librdkafka", b"2.16.1");
        seen.note(Sighting {
            software: software.as_ref(),
            ..sighting("old", 11)
        });
        let all = seen.snapshot();
        assert_eq!(all.len(), 2, "{all:?}");
        // The most recent first: the same client.id with software is another consumer.
        assert_eq!(all[0].software, software);
        let old = &all[1];
        assert_eq!(old.client_id.as_deref(), Some("old"));
        assert_eq!((old.max_fetch_version, old.fetches), (8, 3));
        assert_eq!(old.handling, Handling::ReencodeOff);
    }

    #[test]
    fn holds_at_most_its_capacity_and_forgets_the_one_seen_longest_ago() {
        let seen = SeenConsumers::default();
        let ids: Vec<String> = (0..=CAPACITY).map(|i| format!("c{i}")).collect();
        for id in &ids[..CAPACITY] {
            seen.note(sighting(id, 8));
        }
        // c0 is seen again, so c1 is now the one seen longest ago.
        seen.note(sighting(&ids[0], 8));
        seen.note(sighting(&ids[CAPACITY], 8));
        let all = seen.snapshot();
        assert_eq!(all.len(), CAPACITY);
        let kept = |id: &str| all.iter().any(|c| c.client_id.as_deref() == Some(id));
        assert!(kept("c0") && kept(&ids[CAPACITY]) && kept("c2"));
        assert!(!kept("c1"));
    }

    #[test]
    fn keeps_each_topic_once_up_to_its_limit_and_only_for_a_consumer_it_holds() {
        let seen = SeenConsumers::default();
        seen.note_topics(Some("unknown"), None, "bootstrap", [Arc::from("t")]);
        assert!(seen.snapshot().is_empty());
        seen.note(sighting("old", 8));
        let topics: Vec<Arc<str>> = (0..MAX_TOPICS + 5)
            .map(|i| Arc::from(format!("t{i}")))
            .collect();
        seen.note_topics(
            Some("old"),
            None,
            "bootstrap",
            [Arc::from("t0"), Arc::from("t0")],
        );
        seen.note_topics(Some("old"), None, "bootstrap", topics.clone());
        let kept = &seen.snapshot()[0].topics;
        assert_eq!(kept.len(), MAX_TOPICS);
        assert_eq!(kept[..], topics[..MAX_TOPICS]);
    }
}
