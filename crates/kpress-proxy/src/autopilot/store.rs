//! The fleet store: a compacted topic of one partition through which kpress replicas
//! share records (key, value), written and read over kpress's own side connections
//! (the TLS and SASL login of `[upstream]`), so the fleet needs no other credentials.
//!
//! [`FleetStore::open`] creates the topic when Metadata does not know it, then follows
//! its partition's leader, wherever it is: an answer saying the leader moved (or a
//! lost connection) sends the next attempt to the leader Metadata names then. Reads
//! start at offset 0, so a replica that starts reads the whole compacted history.
//!
//! Every call ends within [`CALL_DEADLINE`] and reads at most [`READ_MAX_BYTES`] of
//! batches, decompressed within [`READ_MAX_DECOMPRESSED_BYTES`]: the topic is shared
//! and its contents are not trusted.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use kafka_protocol::messages::{
    CreateTopicsResponse, FetchResponse, MetadataResponse, ProduceResponse,
};
use kafka_protocol::protocol::Request;
use kpress_batch::builder::{BatchBuilder, Record};
use kpress_batch::{RecordBatch, DEFAULT_MAX_BATCH_BYTES};
use kpress_codec::{Codec, Decompressor};
use kpress_protocol::{error_code, GuardedResponse, CREATE_TOPICS_MAX_VERSION};

use crate::error::ConnectionError;
use crate::side::{
    AdvertisedBroker, ClusterConnector, KeptSide, SideChannel, METADATA_TIMEOUT, METADATA_VERSION,
};
use crate::transport::Stream;

/// How long one call (open, publish, read) may take, retries included: as long as one
/// of kpress's own requests may wait for its answer.
pub(crate) const CALL_DEADLINE: Duration = METADATA_TIMEOUT;

/// Batches one read asks for (Kafka hands over a larger first batch whole).
pub(crate) const READ_MAX_BYTES: i32 = 1 << 20;

/// What the batches of one read may decompress to together; a batch larger alone is
/// skipped, warned about.
pub(crate) const READ_MAX_DECOMPRESSED_BYTES: usize = 16 << 20;

/// The largest batch one publish writes: Kafka's default `max.message.bytes`.
pub(crate) const PUBLISH_MAX_BATCH_BYTES: usize = DEFAULT_MAX_BATCH_BYTES;

/// The only partition of the topic.
const PARTITION: i32 = 0;

/// The classic Produce version kpress writes its own records with (Kafka 2.0+).
const PRODUCE_VERSION: i16 = kpress_protocol::PRODUCE_LAST_CLASSIC_VERSION;

/// The Fetch version the store reads with: v11 would let a follower answer (KIP-392),
/// with its own, older high watermark; before it only the leader does.
const FETCH_VERSION: i16 = 10;

/// Pause between attempts while a leader is elected or a topic just created settles.
const RETRY_PAUSE: Duration = Duration::from_millis(200);

/// Why a call failed: the cluster refusing kpress's principal, which only an operator
/// changes, or anything that may pass.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// TOPIC_AUTHORIZATION_FAILED or CLUSTER_AUTHORIZATION_FAILED: kpress's principal
    /// may not `what` (ACLs).
    #[error(
        "kpress may not {what}: grant its principal CREATE, WRITE, READ and DESCRIBE on \
         the topic (or create it yourself: one partition, cleanup.policy=compact), then \
         restart kpress"
    )]
    Denied { what: String },
    /// The cluster did not do `what` this time (no leader, a lost connection, no
    /// answer in time, an error code); a later call may succeed.
    #[error("cannot {what}: {reason}")]
    Transient { what: String, reason: String },
    /// The records of one publish make a batch past the limit.
    #[error("{bytes} bytes of records make a batch past the {limit}-byte limit")]
    TooLarge { bytes: usize, limit: usize },
}

impl StoreError {
    pub fn is_denied(&self) -> bool {
        matches!(self, StoreError::Denied { .. })
    }
}

/// The partition leader's connection.
struct Leader {
    node_id: i32,
    address: String,
    stream: Stream,
    /// Halfway through the broker's SASL session (KIP-368): past it, the next request
    /// goes on a new connection, before the broker would close this one.
    renew_at: Option<Instant>,
}

/// One replica's handle on the fleet's compacted topic.
pub struct FleetStore {
    side: Arc<SideChannel>,
    topic: String,
    /// Of the topic, when kpress creates it (-1: the broker's default).
    replication_factor: i16,
    /// Metadata and CreateTopics go to a bootstrap server on this connection.
    bootstrap: KeptSide,
    leader: Option<Leader>,
    /// The offset the next read starts at.
    next_offset: i64,
    /// The partition's high watermark at the last read.
    high_watermark: i64,
    decompressor: Decompressor,
}

impl std::fmt::Debug for FleetStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FleetStore")
            .field("topic", &self.topic)
            .field("leader", &self.leader.as_ref().map(|l| &l.address))
            .field("next_offset", &self.next_offset)
            .finish_non_exhaustive()
    }
}

/// What one attempt of a call came to.
enum Attempt<T> {
    Done(T),
    /// Worth another try, at the leader Metadata names then.
    Retry(String),
}

/// What a call does, attempt after attempt.
enum Call<'a> {
    FindLeader,
    Produce(&'a Bytes),
    Fetch,
}

/// What a call gave.
enum Outcome {
    Found,
    Produced,
    Read(Vec<(Vec<u8>, Vec<u8>)>),
}

impl FleetStore {
    /// The store on `topic` over `side`: the topic is created when missing (one
    /// partition, `cleanup.policy=compact`, `replication_factor`, -1 for the broker's
    /// default) and its leader connected.
    pub(crate) async fn open(
        side: Arc<SideChannel>,
        topic: &str,
        replication_factor: i16,
    ) -> Result<FleetStore, StoreError> {
        let mut store = FleetStore {
            side,
            topic: topic.to_owned(),
            replication_factor,
            bootstrap: KeptSide::default(),
            leader: None,
            next_offset: 0,
            high_watermark: 0,
            decompressor: Decompressor::new(),
        };
        let what = format!("open topic {topic}");
        store.run(&what, Call::FindLeader).await?;
        Ok(store)
    }

    /// [`FleetStore::open`] over `connector`'s side connections (TLS and login as its
    /// settings say).
    pub async fn open_through(
        connector: &ClusterConnector,
        topic: &str,
        replication_factor: i16,
    ) -> Result<FleetStore, StoreError> {
        FleetStore::open(Arc::clone(connector.side()), topic, replication_factor).await
    }

    pub fn topic(&self) -> &str {
        &self.topic
    }

    /// The node leading the partition, as last found.
    pub fn leader(&self) -> Option<i32> {
        self.leader.as_ref().map(|leader| leader.node_id)
    }

    /// The offset the next [`FleetStore::read_new`] starts at.
    pub fn next_offset(&self) -> i64 {
        self.next_offset
    }

    /// Whether the last read reached the end of the partition as it was then.
    pub fn caught_up(&self) -> bool {
        self.next_offset >= self.high_watermark
    }

    /// Writes `records` (key, value) as one lz4 batch, acknowledged by every in-sync
    /// replica (acks=all). Nothing to write is no request. A batch whose answer was
    /// lost is written again: readers may see it twice, which keyed records (the
    /// latest per key counts) make harmless.
    pub async fn publish(&mut self, records: &[(Vec<u8>, Vec<u8>)]) -> Result<(), StoreError> {
        if records.is_empty() {
            return Ok(());
        }
        let batch = Bytes::from(encode_batch(records)?);
        let what = format!("publish to {}", self.topic);
        self.run(&what, Call::Produce(&batch)).await.map(|_| ())
    }

    /// The records written since the last read (from offset 0 after open), as (key,
    /// value) in offset order: control batches and tombstones are skipped, and so is a
    /// batch that does not parse (warned about). One Fetch, at most
    /// [`READ_MAX_BYTES`]: call again until [`FleetStore::caught_up`] to read a long
    /// history.
    pub async fn read_new(&mut self) -> Result<Vec<(Vec<u8>, Vec<u8>)>, StoreError> {
        let what = format!("read {}", self.topic);
        match self.run(&what, Call::Fetch).await? {
            Outcome::Read(records) => Ok(records),
            Outcome::Found | Outcome::Produced => Ok(Vec::new()),
        }
    }

    /// Attempts `call` until it is done, fails for good, or [`CALL_DEADLINE`] passes;
    /// each retry goes to the leader Metadata names then.
    async fn run(&mut self, what: &str, call: Call<'_>) -> Result<Outcome, StoreError> {
        let deadline = Instant::now() + CALL_DEADLINE;
        let mut last = String::from("no attempt finished");
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match tokio::time::timeout(left, self.attempt(&call)).await {
                Ok(Ok(Attempt::Done(outcome))) => return Ok(outcome),
                Ok(Ok(Attempt::Retry(reason))) => {
                    tracing::debug!(topic = %self.topic, %reason, "fleet store: trying again");
                    last = reason;
                    self.leader = None;
                }
                Ok(Err(err)) => return Err(err),
                // Cut off inside a request: its connection is gone with it.
                Err(_) => self.leader = None,
            }
            if Instant::now() + RETRY_PAUSE >= deadline {
                return Err(StoreError::Transient {
                    what: what.to_owned(),
                    reason: format!("not done within {CALL_DEADLINE:?}: {last}"),
                });
            }
            tokio::time::sleep(RETRY_PAUSE).await;
        }
    }

    async fn attempt(&mut self, call: &Call<'_>) -> Result<Attempt<Outcome>, StoreError> {
        match call {
            Call::FindLeader => Ok(match self.leader_ready().await? {
                Attempt::Done(()) => Attempt::Done(Outcome::Found),
                Attempt::Retry(reason) => Attempt::Retry(reason),
            }),
            Call::Produce(batch) => self.produce_once(batch).await,
            Call::Fetch => self.fetch_once().await,
        }
    }

    async fn produce_once(&mut self, batch: &Bytes) -> Result<Attempt<Outcome>, StoreError> {
        let timeout_ms = i32::try_from(CALL_DEADLINE.as_millis()).unwrap_or(i32::MAX);
        let request =
            kpress_protocol::produce_request(&self.topic, PARTITION, batch.clone(), -1, timeout_ms);
        let response: ProduceResponse = match self.ask_leader(&request, PRODUCE_VERSION).await? {
            Attempt::Done(response) => response,
            Attempt::Retry(reason) => return Ok(Attempt::Retry(reason)),
        };
        let code = response
            .responses
            .iter()
            .filter(|topic| topic.name.as_str() == self.topic)
            .flat_map(|topic| &topic.partition_responses)
            .find(|partition| partition.index == PARTITION)
            .map(|partition| partition.error_code);
        match code {
            Some(error_code::NONE) => Ok(Attempt::Done(Outcome::Produced)),
            Some(code) => self.refused(code, "write to"),
            None => Ok(Attempt::Retry(
                "the Produce answer names no partition 0".into(),
            )),
        }
    }

    async fn fetch_once(&mut self) -> Result<Attempt<Outcome>, StoreError> {
        let request = kpress_protocol::fetch_partition_request(
            &self.topic,
            PARTITION,
            self.next_offset,
            READ_MAX_BYTES,
            0,
        );
        let response: FetchResponse = match self.ask_leader(&request, FETCH_VERSION).await? {
            Attempt::Done(response) => response,
            Attempt::Retry(reason) => return Ok(Attempt::Retry(reason)),
        };
        if response.error_code != error_code::NONE {
            return self.refused(response.error_code, "read");
        }
        let Some(partition) = response
            .responses
            .into_iter()
            .filter(|topic| topic.topic.as_str() == self.topic)
            .flat_map(|topic| topic.partitions)
            .find(|partition| partition.partition_index == PARTITION)
        else {
            return Ok(Attempt::Retry(
                "the Fetch answer names no partition 0".into(),
            ));
        };
        match partition.error_code {
            error_code::NONE => {}
            error_code::OFFSET_OUT_OF_RANGE => {
                // Deleted records, or a topic made anew: read what the log holds now.
                tracing::warn!(
                    topic = %self.topic,
                    offset = self.next_offset,
                    log_start = partition.log_start_offset,
                    "fleet store: offset out of range, reading from the log start"
                );
                self.next_offset = partition.log_start_offset.max(0);
                self.high_watermark = partition.high_watermark;
                return Ok(Attempt::Done(Outcome::Read(Vec::new())));
            }
            code => return self.refused(code, "read"),
        }
        self.high_watermark = partition.high_watermark;
        let records = partition.records.unwrap_or_default();
        Ok(Attempt::Done(Outcome::Read(self.take_records(&records))))
    }

    /// What a Kafka error `code` to `doing` the topic comes to.
    fn refused<T>(&mut self, code: i16, doing: &str) -> Result<Attempt<T>, StoreError> {
        match code {
            error_code::TOPIC_AUTHORIZATION_FAILED | error_code::CLUSTER_AUTHORIZATION_FAILED => {
                Err(StoreError::Denied {
                    what: format!("{doing} topic {} (Kafka error {code})", self.topic),
                })
            }
            error_code::NOT_LEADER_OR_FOLLOWER
            | error_code::LEADER_NOT_AVAILABLE
            | error_code::UNKNOWN_TOPIC_OR_PARTITION => Ok(Attempt::Retry(format!(
                "node {:?} answered Kafka error {code} (no longer the leader)",
                self.leader()
            ))),
            code => Err(StoreError::Transient {
                what: format!("{doing} topic {}", self.topic),
                reason: format!("Kafka error {code}"),
            }),
        }
    }

    /// Sends `request` to the partition's leader, found (and the topic created) first
    /// when there is no connection to it.
    async fn ask_leader<R>(
        &mut self,
        request: &R,
        version: i16,
    ) -> Result<Attempt<R::Response>, StoreError>
    where
        R: Request + Sync,
        R::Response: GuardedResponse,
    {
        if let Attempt::Retry(reason) = self.leader_ready().await? {
            return Ok(Attempt::Retry(reason));
        }
        let Some(mut leader) = self.leader.take() else {
            return Ok(Attempt::Retry("no leader".into()));
        };
        match self.side.send(&mut leader.stream, request, version).await {
            Ok(response) => {
                self.leader = Some(leader);
                Ok(Attempt::Done(response))
            }
            Err(err) => Ok(Attempt::Retry(format!(
                "node {} at {}: {err}",
                leader.node_id, leader.address
            ))),
        }
    }

    /// A connection to the partition's leader, unless one is kept whose session is not
    /// due to end.
    async fn leader_ready(&mut self) -> Result<Attempt<()>, StoreError> {
        if let Some(leader) = &self.leader {
            if leader.renew_at.is_none_or(|at| Instant::now() < at) {
                return Ok(Attempt::Done(()));
            }
            self.leader = None;
        }
        let (node_id, address) = match self.find_leader().await? {
            Attempt::Done(found) => found,
            Attempt::Retry(reason) => return Ok(Attempt::Retry(reason)),
        };
        match self.side.session(&address).await {
            Ok((stream, lifetime)) => {
                // Halfway through the broker's session a new connection is made: the
                // store's few requests a window make that cheap.
                let renew_at = lifetime.map(|lifetime| Instant::now() + lifetime / 2);
                self.leader = Some(Leader {
                    node_id,
                    address,
                    stream,
                    renew_at,
                });
                Ok(Attempt::Done(()))
            }
            Err(err) => Ok(Attempt::Retry(format!(
                "leader node {node_id} at {address}: {err}"
            ))),
        }
    }

    /// The partition leader's node id and address, from a bootstrap server's Metadata;
    /// the topic is created when it does not know it.
    async fn find_leader(&mut self) -> Result<Attempt<(i32, String)>, StoreError> {
        let request = kpress_protocol::metadata_topics_request(&[&self.topic]);
        let metadata: MetadataResponse = match self.ask_bootstrap(&request, METADATA_VERSION).await
        {
            Ok(metadata) => metadata,
            Err(err) => return Ok(Attempt::Retry(format!("Metadata: {err}"))),
        };
        let Some(topic) = metadata
            .topics
            .iter()
            .find(|topic| topic.name.as_deref().map(|n| &**n) == Some(self.topic.as_str()))
        else {
            return Ok(Attempt::Retry("Metadata does not name the topic".into()));
        };
        match topic.error_code {
            error_code::NONE => {}
            error_code::UNKNOWN_TOPIC_OR_PARTITION => return self.create().await,
            error_code::TOPIC_AUTHORIZATION_FAILED => {
                return Err(StoreError::Denied {
                    what: format!(
                        "describe topic {} (Kafka error {})",
                        self.topic, topic.error_code
                    ),
                })
            }
            code => return Ok(Attempt::Retry(format!("Metadata: Kafka error {code}"))),
        }
        let Some(leader) = topic
            .partitions
            .iter()
            .find(|partition| partition.partition_index == PARTITION)
            .filter(|partition| partition.error_code == error_code::NONE)
            .map(|partition| partition.leader_id.0)
            .filter(|leader| *leader >= 0)
        else {
            return Ok(Attempt::Retry("the partition has no leader".into()));
        };
        let Some(broker) = metadata.brokers.iter().find(|b| b.node_id.0 == leader) else {
            return Ok(Attempt::Retry(format!(
                "Metadata gives no address for leader node {leader}"
            )));
        };
        let address = AdvertisedBroker {
            node_id: leader,
            host: broker.host.to_string(),
            port: broker.port,
        }
        .address();
        Ok(Attempt::Done((leader, address)))
    }

    /// Creates the topic (one partition, compacted); it then needs a leader, so the
    /// caller tries again.
    async fn create(&mut self) -> Result<Attempt<(i32, String)>, StoreError> {
        let timeout_ms = i32::try_from(CALL_DEADLINE.as_millis()).unwrap_or(i32::MAX);
        let request = kpress_protocol::create_topic_request(
            &self.topic,
            1,
            self.replication_factor,
            &[("cleanup.policy", "compact")],
            timeout_ms,
        );
        let response: CreateTopicsResponse = match self
            .ask_bootstrap(&request, CREATE_TOPICS_MAX_VERSION)
            .await
        {
            Ok(response) => response,
            Err(err) => return Ok(Attempt::Retry(format!("CreateTopics: {err}"))),
        };
        let result = response
            .topics
            .iter()
            .find(|topic| topic.name.as_str() == self.topic);
        let code = result.map_or(error_code::NONE, |topic| topic.error_code);
        match code {
            error_code::NONE => {
                tracing::info!(
                    topic = %self.topic,
                    replication_factor = self.replication_factor,
                    "fleet store: created the compacted topic"
                );
                Ok(Attempt::Retry(
                    "topic created, waiting for its leader".into(),
                ))
            }
            error_code::TOPIC_ALREADY_EXISTS => Ok(Attempt::Retry(
                "topic created meanwhile, waiting for its leader".into(),
            )),
            error_code::TOPIC_AUTHORIZATION_FAILED | error_code::CLUSTER_AUTHORIZATION_FAILED => {
                Err(StoreError::Denied {
                    what: format!("create topic {} (Kafka error {code})", self.topic),
                })
            }
            code => Err(StoreError::Transient {
                what: format!("create topic {}", self.topic),
                reason: format!(
                    "Kafka error {code}{}",
                    result
                        .and_then(|topic| topic.error_message.as_deref())
                        .map(|message| format!(": {message}"))
                        .unwrap_or_default()
                ),
            }),
        }
    }

    /// Sends `request` to a bootstrap server on the kept connection.
    async fn ask_bootstrap<R>(
        &mut self,
        request: &R,
        version: i16,
    ) -> Result<R::Response, ConnectionError>
    where
        R: Request + Sync,
        R::Response: GuardedResponse,
    {
        let side = &*self.side;
        self.bootstrap
            .run(side, |mut stream| async move {
                let answer = side.send(&mut stream, request, version).await?;
                Ok((answer, stream))
            })
            .await
    }

    /// The (key, value) records of the whole batches in `records` past the next
    /// offset, which moves past them; a batch that would take the read past
    /// [`READ_MAX_DECOMPRESSED_BYTES`] waits for the next read.
    fn take_records(&mut self, records: &[u8]) -> Vec<(Vec<u8>, Vec<u8>)> {
        self.take_records_within(records, READ_MAX_DECOMPRESSED_BYTES)
    }

    /// [`FleetStore::take_records`], decompressing at most `limit` bytes.
    fn take_records_within(&mut self, records: &[u8], limit: usize) -> Vec<(Vec<u8>, Vec<u8>)> {
        let mut out = Vec::new();
        let mut budget = limit;
        let mut raw = Vec::new();
        for batch in kpress_batch::batches(records) {
            // A cut last batch (the read's byte limit) is read whole next time.
            let Ok(batch) = batch else { break };
            let end = batch
                .base_offset()
                .saturating_add(i64::from(batch.last_offset_delta()))
                .saturating_add(1);
            if end <= self.next_offset {
                continue;
            }
            raw.clear();
            match self.records_of(&batch, budget, &mut raw) {
                Ok(()) => {}
                Err(Skip::OverBudget) if budget < limit => break,
                Err(skip) => {
                    if skip != Skip::Empty {
                        tracing::warn!(
                            topic = %self.topic,
                            offset = batch.base_offset(),
                            reason = skip.reason(),
                            "fleet store: skipping a batch"
                        );
                    }
                    self.next_offset = end;
                    continue;
                }
            }
            budget -= raw.len();
            match parse_records(&raw, batch.records_count()) {
                Some(records) => {
                    for (delta, key, value) in records {
                        let offset = batch.base_offset().saturating_add(delta);
                        if let (true, Some(key), Some(value)) =
                            (offset >= self.next_offset, key, value)
                        {
                            out.push((key.to_vec(), value.to_vec()));
                        }
                    }
                }
                None => tracing::warn!(
                    topic = %self.topic,
                    offset = batch.base_offset(),
                    "fleet store: skipping a batch whose records do not parse"
                ),
            }
            self.next_offset = end;
        }
        out
    }

    /// The uncompressed records section of `batch`, within `limit` bytes.
    fn records_of(
        &mut self,
        batch: &RecordBatch<'_>,
        limit: usize,
        out: &mut Vec<u8>,
    ) -> Result<(), Skip> {
        if batch.is_control() || batch.records_count() == 0 {
            return Err(Skip::Empty);
        }
        if !batch.crc_is_valid() {
            return Err(Skip::Crc);
        }
        let codec = batch.codec().ok_or(Skip::Codec)?;
        match self
            .decompressor
            .decompress(codec, batch.records(), limit, out)
        {
            Ok(_) => Ok(()),
            Err(kpress_codec::CodecError::LimitExceeded { .. }) => Err(Skip::OverBudget),
            Err(_) => Err(Skip::Corrupt),
        }
    }
}

/// Why a batch gives no records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Skip {
    /// A control batch, or none: nothing to read, nothing to warn about.
    Empty,
    Crc,
    Codec,
    Corrupt,
    OverBudget,
}

impl Skip {
    fn reason(self) -> &'static str {
        match self {
            Skip::Empty => "no records",
            Skip::Crc => "its CRC does not match",
            Skip::Codec => "an unknown codec",
            Skip::Corrupt => "it does not decompress",
            Skip::OverBudget => "it decompresses past the read's limit",
        }
    }
}

/// One lz4 batch of `records`, timestamped now.
fn encode_batch(records: &[(Vec<u8>, Vec<u8>)]) -> Result<Vec<u8>, StoreError> {
    // Readers decompress a batch within this; the record framing adds a few bytes each.
    let raw: usize = records
        .iter()
        .map(|(key, value)| key.len() + value.len() + 32)
        .sum();
    if raw > READ_MAX_DECOMPRESSED_BYTES || i32::try_from(records.len()).is_err() {
        return Err(StoreError::TooLarge {
            bytes: raw,
            limit: READ_MAX_DECOMPRESSED_BYTES,
        });
    }
    let records: Vec<Record> = records
        .iter()
        .map(|(key, value)| Record {
            key: Some(key.clone()),
            value: Some(value.clone()),
            headers: Vec::new(),
        })
        .collect();
    let now_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| {
            i64::try_from(since.as_millis()).unwrap_or(i64::MAX)
        });
    let batch = BatchBuilder {
        base_timestamp: now_ms,
        ..BatchBuilder::codec(Codec::Lz4)
    }
    .build(&records)
    .map_err(|err| StoreError::Transient {
        what: "compress the records".into(),
        reason: err.to_string(),
    })?;
    if batch.len() > PUBLISH_MAX_BATCH_BYTES {
        return Err(StoreError::TooLarge {
            bytes: batch.len(),
            limit: PUBLISH_MAX_BATCH_BYTES,
        });
    }
    Ok(batch)
}

/// A record's offset delta, key and value (`None`: null).
type RecordView<'a> = (i64, Option<&'a [u8]>, Option<&'a [u8]>);

/// Each record of an uncompressed records section, which must hold exactly `count`
/// records and nothing more; `None` otherwise.
fn parse_records(raw: &[u8], count: i32) -> Option<Vec<RecordView<'_>>> {
    let mut rest = raw;
    let mut records = Vec::new();
    while !rest.is_empty() {
        let length = usize::try_from(varint(&mut rest)?).ok()?;
        let mut body = take(&mut rest, length)?;
        take(&mut body, 1)?; // attributes
        varint(&mut body)?; // timestamp delta
        let delta = varint(&mut body)?;
        let key = nullable_bytes(&mut body)?;
        let value = nullable_bytes(&mut body)?;
        let headers = varint(&mut body)?;
        if headers < 0 {
            return None;
        }
        for _ in 0..headers {
            nullable_bytes(&mut body)?;
            nullable_bytes(&mut body)?;
        }
        if !body.is_empty() {
            return None;
        }
        records.push((delta, key, value));
    }
    (i32::try_from(records.len()).ok()? == count).then_some(records)
}

/// A zigzag varint (Kafka's varint and varlong, at most 10 bytes).
fn varint(buf: &mut &[u8]) -> Option<i64> {
    let mut raw: u64 = 0;
    for i in 0..10 {
        let (&byte, rest) = buf.split_first()?;
        *buf = rest;
        raw |= u64::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            return Some(((raw >> 1) as i64) ^ -((raw & 1) as i64));
        }
    }
    None
}

fn take<'a>(buf: &mut &'a [u8], n: usize) -> Option<&'a [u8]> {
    if n > buf.len() {
        return None;
    }
    let (head, rest) = buf.split_at(n);
    *buf = rest;
    Some(head)
}

/// Varint length then that many bytes; -1 is null.
fn nullable_bytes<'a>(buf: &mut &'a [u8]) -> Option<Option<&'a [u8]>> {
    match varint(buf)? {
        -1 => Some(None),
        n => take(buf, usize::try_from(n).ok()?).map(Some),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kpress_batch::builder::encode_records;

    fn record(key: Option<&[u8]>, value: Option<&[u8]>) -> Record {
        Record {
            key: key.map(<[u8]>::to_vec),
            value: value.map(<[u8]>::to_vec),
            headers: vec![("h".into(), Some(b"v".to_vec()))],
        }
    }

    #[test]
    fn records_parse_back_with_their_offsets_and_nulls() {
        let raw = encode_records(&[
            record(Some(b"k1"), Some(b"v1")),
            record(Some(b"k2"), None),
            record(None, Some(b"v3")),
        ]);
        let parsed = parse_records(&raw, 3).unwrap();
        assert_eq!(
            parsed,
            vec![
                (0, Some(&b"k1"[..]), Some(&b"v1"[..])),
                (1, Some(&b"k2"[..]), None),
                (2, None, Some(&b"v3"[..])),
            ]
        );
        assert!(parse_records(&raw, 2).is_none(), "the count must agree");
        for cut in 1..raw.len() {
            assert!(parse_records(&raw[..cut], 3).is_none(), "cut at {cut}");
        }
    }

    #[test]
    fn hostile_lengths_and_counts_fail_without_allocating() {
        // A record claiming i64::MAX bytes; a header count of 2^62.
        let mut huge = Vec::new();
        kpress_batch::builder::put_varint(&mut huge, i64::MAX);
        assert!(parse_records(&huge, 1).is_none());
        let mut body = vec![0];
        for v in [0, 0, -1, -1, 1 << 62] {
            kpress_batch::builder::put_varint(&mut body, v);
        }
        let mut headers = Vec::new();
        kpress_batch::builder::put_varint(&mut headers, body.len() as i64);
        headers.extend_from_slice(&body);
        assert!(parse_records(&headers, 1).is_none());
        assert_eq!(varint(&mut &[0xff; 11][..]), None);
    }

    #[test]
    fn a_publish_is_one_lz4_batch_within_the_limits() {
        let records = vec![(b"figures/a/t".to_vec(), b"{\"v\":1}".to_vec()); 3];
        let batch = encode_batch(&records).unwrap();
        let parsed = RecordBatch::parse(&batch).unwrap();
        assert_eq!(parsed.codec(), Some(Codec::Lz4));
        assert_eq!(parsed.records_count(), 3);
        assert!(parsed.crc_is_valid());
        let huge = vec![(vec![0; 8], vec![0; READ_MAX_DECOMPRESSED_BYTES])];
        assert!(matches!(
            encode_batch(&huge),
            Err(StoreError::TooLarge { .. })
        ));
    }

    fn store() -> FleetStore {
        FleetStore {
            side: Arc::new(SideChannel::for_tests(vec!["127.0.0.1:1".into()])),
            topic: "t".into(),
            replication_factor: -1,
            bootstrap: KeptSide::default(),
            leader: None,
            next_offset: 0,
            high_watermark: 0,
            decompressor: Decompressor::new(),
        }
    }

    fn batch(base_offset: i64, codec: Codec, records: &[Record]) -> Vec<u8> {
        BatchBuilder {
            base_offset,
            ..BatchBuilder::codec(codec)
        }
        .build(records)
        .unwrap()
    }

    fn pair(key: &str, value: &str) -> (Vec<u8>, Vec<u8>) {
        (key.as_bytes().to_vec(), value.as_bytes().to_vec())
    }

    #[test]
    fn reads_take_every_codec_and_skip_what_holds_no_figures() {
        let kv = |k: &str, v: &str| Record {
            key: Some(k.into()),
            value: Some(v.into()),
            headers: Vec::new(),
        };
        let mut log = Vec::new();
        for (i, codec) in Codec::ALL.into_iter().enumerate() {
            let key = format!("k{i}");
            log.extend(batch(i as i64 * 2, codec, &[kv(&key, "a"), kv(&key, "b")]));
        }
        // Offsets 10-12: a tombstone, a record without a key, then one to keep.
        let tombstone = Record {
            value: None,
            ..kv("gone", "")
        };
        let keyless = Record::value("no key");
        log.extend(batch(
            10,
            Codec::Lz4,
            &[tombstone, keyless, kv("kept", "c")],
        ));
        // Offset 13: a control batch (a transaction marker).
        log.extend(
            BatchBuilder {
                base_offset: 13,
                extra_attributes: 0x30,
                ..BatchBuilder::default()
            }
            .build(&[kv("\0\0\0\0", "")])
            .unwrap(),
        );
        // Offset 14: a batch whose CRC does not match.
        let mut damaged = batch(14, Codec::None, &[kv("bad", "crc")]);
        let last = damaged.len() - 1;
        damaged[last] ^= 0xff;
        log.extend(damaged);
        let whole = log.len();
        // Offset 15, cut by the read's byte limit: read whole next time.
        let next = batch(15, Codec::Zstd, &[kv("next", "d")]);
        log.extend_from_slice(&next[..next.len() - 3]);

        let mut store = store();
        let read = store.take_records(&log);
        let mut expected = Vec::new();
        for i in 0..5 {
            expected.extend([pair(&format!("k{i}"), "a"), pair(&format!("k{i}"), "b")]);
        }
        expected.push(pair("kept", "c"));
        assert_eq!(read, expected);
        assert_eq!(
            store.next_offset(),
            15,
            "past the damaged batch, not the cut one"
        );

        // The same bytes again (a retried read): nothing twice; then the whole batch.
        assert!(store.take_records(&log[..whole]).is_empty());
        assert_eq!(store.take_records(&next), vec![pair("next", "d")]);
        assert_eq!(store.next_offset(), 16);
    }

    #[test]
    fn a_batch_starting_before_the_next_offset_gives_only_the_records_after_it() {
        let records: Vec<Record> = (0..4)
            .map(|i| Record {
                key: Some(format!("k{i}").into_bytes()),
                value: Some(b"v".to_vec()),
                headers: Vec::new(),
            })
            .collect();
        let mut store = store();
        store.next_offset = 102;
        let read = store.take_records(&batch(100, Codec::Gzip, &records));
        assert_eq!(read, vec![pair("k2", "v"), pair("k3", "v")]);
        assert_eq!(store.next_offset(), 104);
    }

    #[test]
    fn a_read_stops_before_a_batch_past_its_limit_and_skips_one_past_it_alone() {
        let big = |key: &str, size: usize| Record {
            key: Some(key.into()),
            value: Some(vec![7; size]),
            headers: Vec::new(),
        };
        let mut log = batch(0, Codec::Lz4, &[big("a", 1000)]);
        log.extend(batch(1, Codec::Lz4, &[big("b", 1000)]));
        let mut store = store();
        let read = store.take_records_within(&log, 1500);
        assert_eq!(read.len(), 1);
        assert_eq!(store.next_offset(), 1, "the second batch waits");
        let read = store.take_records_within(&log, 1500);
        assert_eq!(read[0].0, b"b");
        assert_eq!(store.next_offset(), 2);
        let alone = batch(2, Codec::Lz4, &[big("c", 2000)]);
        assert!(store.take_records_within(&alone, 1500).is_empty());
        assert_eq!(store.next_offset(), 3, "skipped rather than read forever");
    }

    #[test]
    fn the_calls_can_run_on_any_runtime_thread() {
        fn sendable<T: Send>(_: &T) {}
        let side = Arc::new(SideChannel::for_tests(vec!["127.0.0.1:1".into()]));
        sendable(&FleetStore::open(side, "t", -1));
        let mut store: Option<FleetStore> = None;
        if let Some(store) = store.as_mut() {
            sendable(&store.publish(&[]));
            sendable(&store.read_new());
        }
    }
}
