//! The seam between a connection's loops and the Kafka APIs: one [`ApiHandler`] per API
//! key, looked up in [`Handlers`], which the proxy is built with.
//!
//! A connection reads each request, gives it a [`RequestContext`] and asks the handler
//! of its API for a [`RequestStep`]: forward a [`Message`] now, answer it locally, or
//! finish [`Work`] first (CPU work off the async threads, or a question to the
//! cluster). Steps are forwarded in request order whatever order their work finishes
//! in. The same `RequestContext` comes back with the broker's response, and the
//! handler's [`ResponseStep`] says what the client gets: the response as read, other
//! bytes, or the result of [`Work`], relayed in order. Handlers see the connection
//! through its [`ConnectionContext`]: who the client is (address, the software it
//! names: [`ClientSoftware`]), the listener, whether it has authenticated, the policy in force, the budget, the global work slots and kpress's
//! own requests to the cluster. An API without a handler is relayed as bytes both ways.
//! kpress's own handlers are in `apis` ([`Handlers::kpress`]); the connection loop is
//! given the handlers, and nothing else holds them.

mod client;
mod context;

use std::any::Any;
use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Instant;

use bytes::BytesMut;
use kpress_protocol::frame::RequestHeader;

use crate::budget::BudgetPermit;
use crate::error::ConnectionError;
pub use crate::frame_io::Frame;

pub(crate) use client::ClientIds;
pub use client::{ClientSoftware, MAX_CLIENT_ID_BYTES, MAX_CLIENT_SOFTWARE_BYTES};
pub use context::ConnectionContext;

/// What kpress does with one Kafka API. Both methods run on the connection's task: keep
/// them short, and put CPU work or waiting in [`Work`].
pub trait ApiHandler: Send + Sync + fmt::Debug + 'static {
    /// The request step. By default the request is forwarded as read.
    fn on_request(
        &self,
        conn: &Arc<ConnectionContext>,
        request: &mut RequestContext,
        frame: Frame,
    ) -> Result<RequestStep, HandlerError> {
        let _ = (conn, request);
        Ok(RequestStep::Forward(Message::original(frame)))
    }

    /// The response step, with the request's context. By default the response is
    /// relayed as read.
    fn on_response(
        &self,
        conn: &Arc<ConnectionContext>,
        request: &mut RequestContext,
        frame: Frame,
    ) -> Result<ResponseStep, HandlerError> {
        let _ = (conn, request);
        Ok(ResponseStep::Relay(Message::original(frame)))
    }
}

/// What becomes of a request.
#[derive(Debug)]
pub enum RequestStep {
    /// Forward these bytes to the broker now (in request order).
    Forward(Message),
    /// kpress answers the client with this frame (size prefix included); nothing is
    /// forwarded, and the answer takes its place among the responses.
    Answer(BytesMut),
    /// Forward what this work produces, once it has; later requests are read (and
    /// their work started) meanwhile, but none is forwarded before it.
    Later(Work),
}

/// What becomes of a response.
#[derive(Debug)]
pub enum ResponseStep {
    /// Relay these bytes to the client.
    Relay(Message),
    /// Relay this frame (size prefix included) instead; its budget is taken before
    /// it is written.
    Replace(BytesMut),
    /// Relay what this work produces, once it has (responses stay in order).
    Later(Work),
}

/// Bytes for the other side: a frame as read, or new bytes with their budget.
#[derive(Debug)]
pub struct Message(Bytes);

#[derive(Debug)]
enum Bytes {
    Original(Frame),
    Rewritten {
        bytes: BytesMut,
        _permit: BudgetPermit,
    },
}

impl Message {
    /// A frame passed on unchanged.
    pub fn original(frame: Frame) -> Message {
        Message(Bytes::Original(frame))
    }

    /// New bytes, counted in the budget by `permit`.
    pub(crate) fn rewritten(bytes: BytesMut, permit: BudgetPermit) -> Message {
        Message(Bytes::Rewritten {
            bytes,
            _permit: permit,
        })
    }

    /// The whole frame, size prefix included.
    pub fn bytes(&self) -> &[u8] {
        match &self.0 {
            Bytes::Original(frame) => frame.bytes(),
            Bytes::Rewritten { bytes, .. } => bytes,
        }
    }
}

/// Work a step waits for: a task of its own, stopped if the connection ends first, so
/// a closed connection's work does not hold global slots. Made by
/// [`ConnectionContext::spawn`].
#[derive(Debug)]
pub struct Work(tokio::task::JoinHandle<Result<Message, ConnectionError>>);

impl Work {
    pub(crate) async fn finish(mut self) -> Result<Message, ConnectionError> {
        (&mut self.0)
            .await
            .map_err(|err| ConnectionError::RewriteTask(err.to_string()))?
    }
}

impl Drop for Work {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl ConnectionContext {
    /// Starts `work` on a task of its own, for a [`RequestStep::Later`] or
    /// [`ResponseStep::Later`].
    pub fn spawn<F>(&self, work: F) -> Work
    where
        F: Future<Output = Result<Message, HandlerError>> + Send + 'static,
    {
        Work(tokio::spawn(async move { work.await.map_err(|err| err.0) }))
    }
}

/// Why a handler closes the connection.
#[derive(Debug)]
pub struct HandlerError(pub(crate) ConnectionError);

impl fmt::Display for HandlerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl std::error::Error for HandlerError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.0)
    }
}

impl From<ConnectionError> for HandlerError {
    fn from(err: ConnectionError) -> Self {
        HandlerError(err)
    }
}

/// One request, from its request step to its response step.
#[derive(Debug)]
pub struct RequestContext {
    header: RequestHeader,
    client_id: Option<Arc<str>>,
    expects_response: bool,
    /// When kpress began forwarding it, for the upstream latency.
    forwarded: Option<Instant>,
    /// What the handler keeps for the response step.
    state: Option<Box<dyn Any + Send>>,
}

impl RequestContext {
    pub(crate) fn new(header: RequestHeader) -> RequestContext {
        RequestContext {
            header,
            client_id: None,
            expects_response: true,
            forwarded: None,
            state: None,
        }
    }

    /// With the client id of its header (see [`ClientIds`]).
    pub(crate) fn with_client_id(mut self, client_id: Option<Arc<str>>) -> RequestContext {
        self.client_id = client_id;
        self
    }

    /// The request's header fields.
    pub fn header(&self) -> &RequestHeader {
        &self.header
    }

    /// The `client.id` of the request's header, cut to [`MAX_CLIENT_ID_BYTES`]; `None`
    /// when the client sent none. Clients send one per connection, but the header is
    /// the request's: nothing stops a client from changing it.
    pub fn client_id(&self) -> Option<&str> {
        self.client_id.as_deref()
    }

    pub fn api_key(&self) -> i16 {
        self.header.api_key
    }

    pub fn api_version(&self) -> i16 {
        self.header.api_version
    }

    pub fn correlation_id(&self) -> i32 {
        self.header.correlation_id
    }

    /// The broker answers nothing to this request (Produce with acks=0): no response
    /// is awaited for it.
    pub fn expect_no_response(&mut self) {
        self.expects_response = false;
    }

    pub(crate) fn expects_response(&self) -> bool {
        self.expects_response
    }

    pub(crate) fn note_forwarded(&mut self) {
        self.forwarded = Some(Instant::now());
    }

    pub(crate) fn forwarded(&self) -> Option<Instant> {
        self.forwarded
    }

    /// Keeps `state` for this request's response step.
    pub fn keep<T: Any + Send>(&mut self, state: T) {
        self.state = Some(Box::new(state));
    }

    /// What the request step kept, if it is a `T`.
    pub fn kept<T: Any + Send>(&mut self) -> Option<&mut T> {
        self.state.as_mut()?.downcast_mut()
    }
}

/// The handlers a proxy is built with, by API key. An API without one is relayed as
/// bytes.
#[derive(Debug, Clone, Default)]
pub struct Handlers {
    by_key: Vec<Option<Arc<dyn ApiHandler>>>,
}

/// Relays requests and responses as read.
#[derive(Debug)]
struct PassThrough;

impl ApiHandler for PassThrough {}

static PASS_THROUGH: PassThrough = PassThrough;

impl Handlers {
    /// No handlers: every API is relayed as bytes (no Produce rewrite, no address
    /// rewriting: only for tests of the seam itself).
    pub fn none() -> Handlers {
        Handlers::default()
    }

    /// `handler` for `api_key`, in place of the one registered before (if any). A
    /// handler for an API whose responses carry node addresses must rewrite them
    /// (see `kpress_protocol::api`), or clients would see the brokers' own.
    ///
    /// # Panics
    ///
    /// For a negative `api_key`: Kafka has none.
    pub fn register(mut self, api_key: i16, handler: impl ApiHandler) -> Handlers {
        self.set(api_key, Arc::new(handler));
        self
    }

    pub(crate) fn set(&mut self, api_key: i16, handler: Arc<dyn ApiHandler>) {
        let index = usize::try_from(api_key).expect("Kafka API keys are not negative");
        if self.by_key.len() <= index {
            self.by_key.resize(index + 1, None);
        }
        self.by_key[index] = Some(handler);
    }

    /// The handler of `api_key`.
    pub(crate) fn get(&self, api_key: i16) -> &dyn ApiHandler {
        usize::try_from(api_key)
            .ok()
            .and_then(|index| self.by_key.get(index))
            .and_then(Option::as_deref)
            .unwrap_or(&PASS_THROUGH)
    }

    /// The request step of `frame`: the connection's authentication watch sees it,
    /// then the handler of its API decides.
    pub(crate) fn request_step(
        &self,
        conn: &Arc<ConnectionContext>,
        request: &mut RequestContext,
        frame: Frame,
    ) -> Result<RequestStep, ConnectionError> {
        conn.watch_request(request.header(), &frame);
        self.get(request.api_key())
            .on_request(conn, request, frame)
            .map_err(|err| err.0)
    }

    /// The response step of the broker's `frame` answering `request`.
    pub(crate) fn response_step(
        &self,
        conn: &Arc<ConnectionContext>,
        request: &mut RequestContext,
        frame: Frame,
    ) -> Result<ResponseStep, ConnectionError> {
        conn.watch_response(request.header(), &frame)?;
        self.get(request.api_key())
            .on_response(conn, request, frame)
            .map_err(|err| err.0)
    }
}
