//! What a handler sees of its connection, and the services it may use: the client (its
//! address and the software it names), the
//! policy in force, the budget, the global work slots and its limits, what kpress
//! knows of the cluster, metric labels, and kpress's own requests to the cluster. The
//! proxy's shared state is a private field: a handler reaches nothing else.

use std::fmt;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use kpress_measure::thread_cpu_time;

use bytes::BytesMut;
use kpress_protocol::frame::{response_header_len, RequestHeader};
use kpress_protocol::sasl::AuthProgress;

use crate::budget::{BudgetPermit, ConnectionPool, Direction};
use crate::cluster::{AddressObserver, NodeListeners};
use crate::error::{ConnectionError, ProxyError};
use crate::frame_io::Frame;
use crate::handler::{ClientSoftware, HandlerError, Message};
use crate::policy::PolicySnapshot;
use crate::scheduler::{Overloaded, WorkKey, WorkPermit};
use crate::settings::ProduceSettings;
use crate::shared::Shared;
use crate::topic_ids::LookupResult;
use crate::topic_labels::TopicLabels;
use crate::transport::UpstreamTarget;

/// One client connection, as its handlers see it.
pub struct ConnectionContext {
    /// Distinct per connection in this process: its turn among a topic's connections
    /// for the work slots.
    id: u64,
    client: SocketAddr,
    upstream: UpstreamTarget,
    /// `upstream` as [`ConnectionContext::listener`] names it, made once.
    listener: Box<str>,
    /// The client's SASL exchange, watched only when batches wait for authentication.
    auth: Option<Mutex<AuthProgress>>,
    /// What the client's last ApiVersions v3+ request named.
    software: Mutex<Option<ClientSoftware>>,
    /// This connection's share of each budget pool.
    pub(crate) requests_pool: ConnectionPool,
    pub(crate) responses_pool: ConnectionPool,
    /// The proxy's state, reached only through the methods below.
    proxy: Arc<Shared>,
    /// Binds the listeners of nodes a response names, before it is relayed.
    node_listeners: Arc<dyn NodeListeners>,
}

impl fmt::Debug for ConnectionContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ConnectionContext")
            .field("client", &self.client)
            .field("upstream", &self.upstream)
            .field("software", &self.client_software())
            .field("authenticated", &self.is_authenticated())
            .finish_non_exhaustive()
    }
}

impl ConnectionContext {
    pub(crate) fn new(
        proxy: Arc<Shared>,
        node_listeners: Arc<dyn NodeListeners>,
        client: SocketAddr,
        upstream: UpstreamTarget,
    ) -> ConnectionContext {
        static NEXT_ID: AtomicU64 = AtomicU64::new(0);
        let auth = (!proxy.produce.rewrite_before_auth).then(|| Mutex::new(AuthProgress::new()));
        ConnectionContext {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            client,
            listener: upstream.to_string().into(),
            upstream,
            auth,
            software: Mutex::new(None),
            requests_pool: proxy.connection_pool(Direction::Request),
            responses_pool: proxy.connection_pool(Direction::Response),
            proxy,
            node_listeners,
        }
    }

    /// The client's address.
    pub fn client(&self) -> SocketAddr {
        self.client
    }

    /// The software the client named in its latest ApiVersions v3+ request (KIP-511),
    /// bounded; `None` until it has sent one (clients send ApiVersions first on a
    /// connection; those older than KIP-511 send v0-v2, which name none: the
    /// request's [`client_id`](crate::handler::RequestContext::client_id) is then the
    /// only handle).
    pub fn client_software(&self) -> Option<ClientSoftware> {
        self.software
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Keeps what an ApiVersions request named, in place of any earlier one.
    pub(crate) fn set_client_software(&self, software: ClientSoftware) {
        *self.software.lock().unwrap_or_else(PoisonError::into_inner) = Some(software);
    }

    /// The listener the client came through, as logs name it (`bootstrap`, `node 3`).
    pub fn listener(&self) -> &str {
        &self.listener
    }

    /// Whether the broker has accepted the client's SASL authentication (or it needs
    /// none); always true when batches are rewritten before authentication.
    pub fn is_authenticated(&self) -> bool {
        self.auth.as_ref().is_none_or(|auth| {
            auth.lock()
                .unwrap_or_else(PoisonError::into_inner)
                .is_authenticated()
        })
    }

    /// The policy in force now: one snapshot serves one request.
    pub fn policy(&self) -> PolicySnapshot {
        self.proxy.policy.snapshot()
    }

    /// How Produce requests are rewritten.
    pub(crate) fn produce_settings(&self) -> &ProduceSettings {
        &self.proxy.produce
    }

    /// The largest frame either side may send.
    pub(crate) fn max_frame_bytes(&self) -> usize {
        self.proxy.limits.max_frame_bytes
    }

    /// The topic a Produce v13 topic id names, if kpress has learned it.
    pub(crate) fn topic_name(&self, id: &[u8; 16]) -> Option<Arc<str>> {
        self.proxy.cluster.topic_name(id)
    }

    /// The ids among `ids` worth asking the cluster about: not asked in vain lately.
    pub(crate) fn ids_to_resolve(&self, ids: &[[u8; 16]]) -> Vec<[u8; 16]> {
        self.proxy.cluster.ids_to_resolve(ids)
    }

    /// The topic label values of metrics (bounded in number).
    pub(crate) fn topic_labels(&self) -> &TopicLabels {
        &self.proxy.policy.topic_labels
    }

    /// Whether a rule or the brokers name `topic` (it may get a metric label).
    pub(crate) fn is_known_topic(&self, topic: &str) -> bool {
        self.proxy.is_known_topic(topic)
    }

    /// The observer a response's broker addresses go through: it records them and
    /// hands out kpress's own.
    pub(crate) fn address_observer(&self) -> AddressObserver<'_> {
        AddressObserver::new(&self.proxy.cluster)
    }

    /// Serves `nodes` (from an [`AddressObserver`]): their listeners are bound when
    /// this returns.
    pub(crate) fn serve_nodes(&self, nodes: &[i32]) -> Result<(), ProxyError> {
        self.node_listeners.ensure(nodes)
    }

    /// Holds `bytes` of this connection's request budget if they fit now (never waits).
    pub(crate) fn try_reserve_request(&self, bytes: usize) -> Option<BudgetPermit> {
        self.requests_pool.try_acquire(bytes)
    }

    /// New bytes for the client (a whole frame, size prefix included), counted in this
    /// connection's response budget, waiting for room: drop the response they replace
    /// first, or a full budget could wait on itself.
    pub async fn new_response(&self, bytes: BytesMut) -> Result<Message, HandlerError> {
        let permit = self
            .responses_pool
            .acquire(bytes.len())
            .await
            .map_err(ConnectionError::OverBudget)?;
        Ok(Message::rewritten(bytes, permit))
    }

    /// Runs `work` on the blocking pool once one of the global work slots (one per
    /// CPU, shared by both directions of every connection) is free, in the turn of
    /// work with no topic; `queued` is when the work began waiting for it.
    pub async fn offload<T, F>(&self, work: F) -> Result<T, HandlerError>
    where
        F: FnOnce(Instant) -> T + Send + 'static,
        T: Send + 'static,
    {
        let queued = Instant::now();
        let slot = self
            .work_slot(None, None)
            .await
            .map_err(|err| HandlerError(ConnectionError::RewriteTask(err.to_string())))?;
        self.run_blocking(slot, queued, work).await
    }

    /// How many global work slots there are (one per CPU).
    pub(crate) fn work_slot_count(&self) -> usize {
        self.proxy.work_slots.slots()
    }

    /// Waits for a work slot in the turn of `lane` (a topic; `None`: work with no
    /// topic) and of this connection within it; with a `deadline`, at most until then.
    pub(crate) async fn work_slot(
        &self,
        lane: Option<Arc<str>>,
        deadline: Option<tokio::time::Instant>,
    ) -> Result<WorkPermit, Overloaded> {
        let key = WorkKey {
            lane,
            connection: self.id,
        };
        self.proxy.work_slots.acquire(&key, deadline).await
    }

    /// An express slot for cheap work of `lane` (the overload fallback), if one is
    /// free now.
    pub(crate) fn express_slot(&self, lane: Option<Arc<str>>) -> Option<WorkPermit> {
        let key = WorkKey {
            lane,
            connection: self.id,
        };
        self.proxy.work_slots.try_express(&key)
    }

    /// Runs `work` on the blocking pool under `slot`, whose lane is charged the
    /// thread CPU time it takes; `queued` is when the work began waiting for the slot.
    pub(crate) async fn run_blocking<T, F>(
        &self,
        mut slot: WorkPermit,
        queued: Instant,
        work: F,
    ) -> Result<T, HandlerError>
    where
        F: FnOnce(Instant) -> T + Send + 'static,
        T: Send + 'static,
    {
        tokio::task::spawn_blocking(move || {
            let started = thread_cpu_time();
            let out = work(queued);
            slot.charge(thread_cpu_time().saturating_sub(started));
            drop(slot);
            out
        })
        .await
        .map_err(|err| HandlerError(ConnectionError::RewriteTask(err.to_string())))
    }

    /// Asks the cluster, on kpress's side channel, for the names of Produce v13 topic
    /// `ids`, waiting briefly; `false` when no answer came in time.
    pub(crate) async fn name_topic_ids(&self, ids: Vec<[u8; 16]>) -> bool {
        match self.proxy.topic_ids.lookup(ids).await {
            LookupResult::Asked(nodes) => {
                // Nodes learned on the way get listeners too (their addresses are known).
                if let Err(err) = self.serve_nodes(&nodes) {
                    tracing::warn!(error = %err, "cannot serve the broker nodes a topic-id lookup named");
                }
                true
            }
            LookupResult::NotInTime => false,
        }
    }

    /// Notes a request for the authentication watch.
    pub(crate) fn watch_request(&self, header: &RequestHeader, frame: &Frame) {
        let (Some(auth), Some(header_len)) = (&self.auth, header.header_len) else {
            return;
        };
        let body = frame.body().get(header_len..).unwrap_or_default();
        auth.lock()
            .unwrap_or_else(PoisonError::into_inner)
            .on_request(header.api_key, header.api_version, body);
    }

    /// Notes the broker's response to `header`'s request for the authentication watch.
    pub(crate) fn watch_response(
        &self,
        header: &RequestHeader,
        frame: &Frame,
    ) -> Result<(), ConnectionError> {
        let Some(auth) = &self.auth else {
            return Ok(());
        };
        let body = frame.body();
        let header_len = response_header_len(header.api_key, header.api_version, body)
            .map_err(ConnectionError::BrokerFrame)?;
        // An API kpress does not know: not SASL, so only "answered" matters.
        let body = header_len.map_or(&[][..], |len| &body[len..]);
        auth.lock()
            .unwrap_or_else(PoisonError::into_inner)
            .on_response(header.api_key, header.api_version, body);
        Ok(())
    }
}
