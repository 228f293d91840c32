//! One proxied connection: client frames relayed to one upstream broker connection,
//! responses relayed back in order. It knows no Kafka API by name: what becomes of each
//! request and response is the business of the handler of its API (`handler`).
//!
//! Three parts run together on the connection's task. The reading part reads a frame
//! (its bytes granted by the budget as they arrive) and asks its handler for a step in
//! request order: a frame to forward, work to finish first (started at once, on a task
//! of its own), or an answer kpress gives itself. The writing part takes the steps in
//! that order, waits for each one's work, notes which response to expect, and
//! forwards. So the Produce requests a client pipelines are rewritten on as many cores
//! as there are work slots, and still reach the broker in the order sent. The response
//! part takes the next expected response, reads it, asks the handler for its step, and
//! relays the result, waiting for its work if it has some. Kafka answers requests in
//! order on a connection, so a FIFO of pending responses is the whole response state;
//! Produce with acks=0 gets no entry because the broker sends nothing back, and a
//! request kpress answers itself gets its response in the same FIFO, so order holds.
//! A request's [`RequestContext`] travels through that FIFO to its response step.
//!
//! Generic over both streams, which may be TLS (`transport`).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use kpress_protocol::frame::{peek_request_header, response_correlation_id};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadHalf, WriteHalf};
use tokio::sync::watch;

use crate::budget::BudgetPermit;
use crate::error::ConnectionError;
use crate::frame_io::{read_frame_timed, write_frame, FrameLimits, ReadClock, ReadFrameError};
use crate::handler::{
    ClientIds, ConnectionContext, Handlers, Message, RequestContext, RequestStep, ResponseStep,
    Work,
};
use crate::handoff::{run_parts, Handoff, Moves};
use crate::metrics;
use crate::status::ProxyStatus;

/// What a connection's loops are given besides its context: the handlers of the
/// proxy, and the limits and status all its connections share.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Relay<'a> {
    pub(crate) handlers: &'a Handlers,
    pub(crate) limits: FrameLimits,
    /// A client with nothing to read and no response owed this long is closed.
    pub(crate) idle_timeout: Duration,
    /// Every broker response counts as the brokers answering.
    pub(crate) status: &'a ProxyStatus,
}

/// What the response part relays next.
#[derive(Debug)]
enum Pending {
    /// A response the broker owes, to this request.
    Broker(RequestContext),
    /// A response kpress wrote itself (the request was not forwarded), with its
    /// budget bytes.
    Local(BytesMut, BudgetPermit),
}

/// Relays frames between `client` and `upstream` until the client leaves, either side
/// fails, or shutdown begins (then requests already read are answered first).
pub(crate) async fn serve<C, U>(
    client: C,
    upstream: U,
    conn: ConnectionContext,
    relay: Relay<'_>,
    mut shutdown: watch::Receiver<bool>,
) -> Result<(), ConnectionError>
where
    C: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    U: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let conn = Arc::new(conn);
    let (mut client_read, mut client_write) = tokio::io::split(client);
    let (mut upstream_read, mut upstream_write) = tokio::io::split(upstream);
    let moves = Moves::default();
    let steps = Handoff::new(READ_AHEAD_REQUESTS, &moves);
    // Bounded by the steps read ahead and the responses owed.
    let pending = Handoff::new(usize::MAX, &moves);
    // Requests read and not yet done with (not yet forwarded, or their response not
    // yet relayed): while any is, the client is not idle.
    let owed = AtomicUsize::new(0);
    let reading = async {
        read_requests(&mut client_read, &steps, &owed, &conn, relay, &mut shutdown).await?;
        steps.close();
        Ok(())
    };
    let writing = async {
        let queue = Queue {
            pending: &pending,
            owed: &owed,
        };
        write_requests(
            &mut upstream_write,
            &steps,
            queue,
            relay.limits.frame_timeout,
        )
        .await?;
        pending.close();
        Ok(())
    };
    let responses = relay_responses(
        &mut upstream_read,
        &mut client_write,
        &pending,
        &owed,
        &conn,
        relay,
    );
    run_parts(&moves, reading, writing, responses).await?;
    // Every expected response was relayed; tell the client we are done.
    let _ = client_write.shutdown().await;
    Ok(())
}

/// Requests a connection queues behind the one being forwarded; reading stops while
/// the queue is full. Their work runs at once (each holding a work slot while it runs
/// on a CPU), so a client pipelining requests has them recompressed on several cores.
/// Their bytes count in the connection's budget like any frame's, so this only caps
/// how many.
const READ_AHEAD_REQUESTS: usize = 8;

/// One request read, in its place in the connection's order.
enum Step {
    /// kpress answers it itself, with these bytes and their budget.
    Answer(BytesMut, BudgetPermit),
    /// Forwarded once ready.
    Forward {
        request: RequestContext,
        next: Outgoing,
    },
}

/// A request's bytes for the broker: ready, or being worked on.
enum Outgoing {
    Ready(Message),
    Later(Work),
}

impl Outgoing {
    async fn ready(self) -> Result<Message, ConnectionError> {
        match self {
            Outgoing::Ready(message) => Ok(message),
            Outgoing::Later(work) => work.finish().await,
        }
    }
}

/// The writing part's end of the pending-response FIFO.
struct Queue<'a> {
    pending: &'a Handoff<'a, Pending>,
    /// Counted up by the reading part as each request is read.
    owed: &'a AtomicUsize,
}

impl Queue<'_> {
    fn push(&self, pending: Pending) {
        self.pending.push(pending);
    }

    /// A request done with without a response to relay (acks=0).
    fn forget(&self) {
        self.owed.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Reads the client's requests and turns each into a [`Step`], in order; their work
/// starts here and runs while later requests are read.
async fn read_requests<C>(
    client: &mut ReadHalf<C>,
    steps: &Handoff<'_, Step>,
    owed: &AtomicUsize,
    conn: &Arc<ConnectionContext>,
    relay: Relay<'_>,
    shutdown: &mut watch::Receiver<bool>,
) -> Result<(), ConnectionError>
where
    C: AsyncRead + AsyncWrite + Unpin,
{
    let pool = &conn.requests_pool;
    let limits = relay.limits;
    let mut clock = ReadClock::default();
    let mut client_ids = ClientIds::default();
    // One wait for the whole connection: its waker is registered once, not per frame.
    let stopping = shutdown.wait_for(|stopping| *stopping);
    tokio::pin!(stopping);
    loop {
        let idle = Some(relay.idle_timeout);
        let read = tokio::select! {
            // A frame cut off by shutdown is lost with the connection; the client resends.
            _ = &mut stopping => return Ok(()),
            read = read_frame_timed(client, limits, pool, idle, &mut clock) => read,
        };
        let frame = match read {
            // Idle only while nothing is owed: a long JoinGroup is not idleness.
            Err(ReadFrameError::Idle(_)) if owed.load(Ordering::Relaxed) > 0 => continue,
            read => read.map_err(ConnectionError::from_client_read)?,
        };
        let Some(frame) = frame else {
            return Ok(());
        };
        let header = peek_request_header(frame.body()).map_err(ConnectionError::ClientFrame)?;
        metrics::request(header.api_key);
        let mut request = RequestContext::new(header).with_client_id(client_ids.of(frame.body()));
        let step = match relay.handlers.request_step(conn, &mut request, frame)? {
            RequestStep::Answer(answer) => {
                let permit = pool
                    .acquire(answer.len())
                    .await
                    .map_err(ConnectionError::OverBudget)?;
                Step::Answer(answer, permit)
            }
            RequestStep::Forward(message) => Step::Forward {
                request,
                next: Outgoing::Ready(message),
            },
            RequestStep::Later(work) => Step::Forward {
                request,
                next: Outgoing::Later(work),
            },
        };
        owed.fetch_add(1, Ordering::Relaxed);
        steps.send(step).await;
    }
}

/// Forwards the steps in request order, each once its work is done, queueing the
/// responses to expect in the same order.
async fn write_requests<U>(
    upstream: &mut WriteHalf<U>,
    steps: &Handoff<'_, Step>,
    queue: Queue<'_>,
    frame_timeout: Duration,
) -> Result<(), ConnectionError>
where
    U: AsyncRead + AsyncWrite + Unpin,
{
    while let Some(step) = steps.recv().await {
        let (mut request, next) = match step {
            Step::Answer(bytes, permit) => {
                queue.push(Pending::Local(bytes, permit));
                continue;
            }
            Step::Forward { request, next } => (request, next),
        };
        let message = next.ready().await?;
        let expects_response = request.expects_response();
        if expects_response {
            request.note_forwarded();
            queue.push(Pending::Broker(request));
        }
        write_frame(upstream, message.bytes(), frame_timeout)
            .await
            .map_err(ConnectionError::broker_write)?;
        if !expects_response {
            queue.forget();
        }
        // Dropping `message` releases its budget bytes.
    }
    Ok(())
}

/// Relays the responses in request order, each as its handler says.
async fn relay_responses<C, U>(
    upstream: &mut ReadHalf<U>,
    client: &mut WriteHalf<C>,
    pending: &Handoff<'_, Pending>,
    owed: &AtomicUsize,
    conn: &Arc<ConnectionContext>,
    relay: Relay<'_>,
) -> Result<(), ConnectionError>
where
    C: AsyncRead + AsyncWrite + Unpin,
    U: AsyncRead + AsyncWrite + Unpin,
{
    let pool = &conn.responses_pool;
    let limits = relay.limits;
    let mut clock = ReadClock::default();
    loop {
        // While no response is owed, the broker may only close (idle timeout, its own
        // shutdown): then the client is closed too, so it reconnects instead of
        // sending into a dead connection. A one-byte read that is not chosen by the
        // select consumes nothing.
        let mut probe = [0u8; 1];
        let next = tokio::select! {
            biased;
            next = pending.recv() => next,
            idle = upstream.read(&mut probe) => {
                return Err(match idle {
                    Ok(0) => ConnectionError::BrokerClosedIdle,
                    Ok(_) => ConnectionError::BrokerUnsolicited,
                    Err(err) => ConnectionError::BrokerIo(err),
                });
            }
        };
        let mut request = match next {
            None => return Ok(()),
            Some(Pending::Local(bytes, _permit)) => {
                write_frame(client, &bytes, limits.frame_timeout)
                    .await
                    .map_err(ConnectionError::client_write)?;
                owed.fetch_sub(1, Ordering::Relaxed);
                continue;
            }
            Some(Pending::Broker(request)) => request,
        };
        let frame = read_frame_timed(upstream, limits, pool, None, &mut clock)
            .await
            .map_err(ConnectionError::from_broker_read)?
            .ok_or(ConnectionError::BrokerClosed {
                correlation_id: request.correlation_id(),
            })?;
        relay.status.upstream_answered();
        if let Some(forwarded) = request.forwarded() {
            metrics::upstream_latency(request.api_key(), forwarded.elapsed());
        }
        let received =
            response_correlation_id(frame.body()).map_err(ConnectionError::BrokerFrame)?;
        if received != request.correlation_id() {
            return Err(ConnectionError::CorrelationMismatch {
                expected: request.correlation_id(),
                received,
            });
        }
        match relay.handlers.response_step(conn, &mut request, frame)? {
            ResponseStep::Relay(message) => {
                write_frame(client, message.bytes(), limits.frame_timeout).await
            }
            ResponseStep::Replace(bytes) => {
                // Held only while writing; waiting is safe as nothing else is held.
                let _permit = pool
                    .acquire(bytes.len())
                    .await
                    .map_err(ConnectionError::OverBudget)?;
                write_frame(client, &bytes, limits.frame_timeout).await
            }
            ResponseStep::Later(work) => {
                let message = work.finish().await?;
                write_frame(client, message.bytes(), limits.frame_timeout).await
            }
        }
        .map_err(ConnectionError::client_write)?;
        owed.fetch_sub(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    //! The pipeline against in-memory streams: the broker side is played by the test,
    //! frame by frame (tests/proxy.rs runs a real broker).

    use super::*;
    use crate::budget::Direction;
    use crate::error::Fault;
    use crate::tests::*;
    use kpress_batch::RewritePolicy;
    use kpress_codec::{Codec, CompressionOptions};
    use std::time::Duration;
    use tokio::io::{AsyncReadExt, DuplexStream};

    #[tokio::test]
    async fn pipelined_requests_are_answered_in_order_and_acks_0_waits_for_nothing() {
        let mut h = start(shared_with(RewritePolicy::default(), 1 << 22, 30000));
        let list_offsets = request(2, 1, 1, b"list-offsets body");
        let produce = produce_v7(2, 0, &gzip_batch());
        let heartbeat = request(HEARTBEAT, 3, 3, b"heartbeat body");
        for req in [&list_offsets, &produce, &heartbeat] {
            h.client.write_all(req).await.unwrap();
        }
        // Forwarded byte for byte, in order (the policy keeps the producer's codec).
        assert_eq!(read_exact_frame(&mut h.broker).await, list_offsets);
        assert_eq!(read_exact_frame(&mut h.broker).await, produce);
        assert_eq!(read_exact_frame(&mut h.broker).await, heartbeat);
        // The broker answers 1 and 3 only (acks=0 gets nothing); both reach the client.
        h.broker.write_all(&response(1, b"one")).await.unwrap();
        h.broker.write_all(&response(3, b"three")).await.unwrap();
        assert_eq!(read_exact_frame(&mut h.client).await, response(1, b"one"));
        assert_eq!(read_exact_frame(&mut h.client).await, response(3, b"three"));
        drop(h.client);
        h.task.await.unwrap().unwrap();
    }

    #[tokio::test]
    async fn negative_frame_size_closes_the_connection_as_client_fault() {
        let mut h = start(shared_with(RewritePolicy::default(), 1 << 22, 30000));
        h.client.write_all(&[0xff, 0xff, 0xff, 0x00]).await.unwrap();
        let err = h.task.await.unwrap().unwrap_err();
        assert_eq!(err.fault(), Fault::Client);
        assert_eq!(err.refused_frame_reason(), Some("malformed"));
        // Nothing reached the broker, and the broker side sees the close.
        let mut rest = Vec::new();
        h.broker.read_to_end(&mut rest).await.unwrap();
        assert!(rest.is_empty());
    }

    #[tokio::test]
    async fn frame_over_the_budget_is_refused() {
        // 64 KiB budget: 32 KiB per direction; a 40 KiB request can never fit.
        let mut h = start(shared_with(RewritePolicy::default(), 64 << 10, 30000));
        h.client
            .write_all(&(40i32 << 10).to_be_bytes())
            .await
            .unwrap();
        let err = h.task.await.unwrap().unwrap_err();
        assert_eq!(err.fault(), Fault::Proxy);
        assert_eq!(err.refused_frame_reason(), Some("over_budget"));
    }

    #[tokio::test]
    async fn header_too_short_is_a_client_fault() {
        let mut h = start(shared_with(RewritePolicy::default(), 1 << 22, 30000));
        h.client.write_all(&frame(&[0, 1, 0])).await.unwrap();
        let err = h.task.await.unwrap().unwrap_err();
        assert_eq!(err.fault(), Fault::Client);
    }

    #[tokio::test]
    async fn wrong_correlation_id_from_broker_is_a_broker_fault() {
        let mut h = start(shared_with(RewritePolicy::default(), 1 << 22, 30000));
        h.client
            .write_all(&request(HEARTBEAT, 3, 7, b"x"))
            .await
            .unwrap();
        read_exact_frame(&mut h.broker).await;
        h.broker.write_all(&response(8, b"y")).await.unwrap();
        let err = h.task.await.unwrap().unwrap_err();
        assert_eq!(err.fault(), Fault::Broker);
        assert!(matches!(
            err,
            ConnectionError::CorrelationMismatch {
                expected: 7,
                received: 8
            }
        ));
    }

    #[tokio::test]
    async fn broker_closing_with_a_response_owed_is_a_broker_fault() {
        let mut h = start(shared_with(RewritePolicy::default(), 1 << 22, 30000));
        h.client
            .write_all(&request(HEARTBEAT, 3, 7, b"x"))
            .await
            .unwrap();
        read_exact_frame(&mut h.broker).await;
        drop(h.broker);
        let err = h.task.await.unwrap().unwrap_err();
        assert_eq!(err.fault(), Fault::Broker);
    }

    #[tokio::test]
    async fn broker_closing_an_idle_connection_closes_the_client() {
        let mut h = start(shared_with(RewritePolicy::default(), 1 << 22, 30000));
        drop(h.broker);
        let err = h.task.await.unwrap().unwrap_err();
        assert!(matches!(err, ConnectionError::BrokerClosedIdle));
        assert!(err.is_routine_close());
        let mut rest = Vec::new();
        h.client.read_to_end(&mut rest).await.unwrap();
        assert!(rest.is_empty());
    }

    #[tokio::test]
    async fn bytes_from_the_broker_nobody_asked_for_are_a_broker_fault() {
        let mut h = start(shared_with(RewritePolicy::default(), 1 << 22, 30000));
        h.broker.write_all(&response(1, b"unasked")).await.unwrap();
        let err = h.task.await.unwrap().unwrap_err();
        assert!(matches!(err, ConnectionError::BrokerUnsolicited));
        assert_eq!(err.fault(), Fault::Broker);
        // Nothing reached the client.
        let mut rest = Vec::new();
        h.client.read_to_end(&mut rest).await.unwrap();
        assert!(rest.is_empty());
    }

    #[tokio::test]
    async fn shutdown_answers_requests_already_read_then_closes() {
        let mut h = start(shared_with(RewritePolicy::default(), 1 << 22, 30000));
        h.client
            .write_all(&request(HEARTBEAT, 3, 1, b"x"))
            .await
            .unwrap();
        read_exact_frame(&mut h.broker).await;
        h.shutdown.send(true).unwrap();
        tokio::task::yield_now().await;
        assert!(!h.task.is_finished(), "closed with a response owed");
        h.broker.write_all(&response(1, b"late")).await.unwrap();
        assert_eq!(read_exact_frame(&mut h.client).await, response(1, b"late"));
        h.task.await.unwrap().unwrap();
        // The client sees the end of the stream.
        let mut rest = Vec::new();
        h.client.read_to_end(&mut rest).await.unwrap();
        assert!(rest.is_empty());
    }

    /// A broker that answers each request with a response of `response_len` bytes.
    async fn echo_broker(mut broker: DuplexStream, response_len: usize) {
        loop {
            let mut size = [0u8; 4];
            if broker.read_exact(&mut size).await.is_err() {
                return;
            }
            let mut body = vec![0u8; i32::from_be_bytes(size) as usize];
            broker.read_exact(&mut body).await.unwrap();
            let correlation_id = i32::from_be_bytes([body[4], body[5], body[6], body[7]]);
            let reply = response(correlation_id, &vec![7u8; response_len]);
            if broker.write_all(&reply).await.is_err() {
                return;
            }
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn many_connections_make_progress_under_a_tight_budget() {
        // 64 KiB: 32 KiB per direction, shared by 8 connections each pipelining
        // 20 requests and responses of ~10 KiB: at most 3 frames fit each way at once.
        let shared = shared_with(RewritePolicy::default(), 64 << 10, 30000);
        let mut clients = Vec::new();
        for _ in 0..8 {
            let mut h = start(Arc::clone(&shared));
            let broker = std::mem::replace(&mut h.broker, tokio::io::duplex(1).0);
            tokio::spawn(echo_broker(broker, 10_000));
            clients.push(tokio::spawn(async move {
                // Dropping the shutdown sender would mean shutdown: keep it.
                let _shutdown = h.shutdown;
                let (mut read, mut write) = tokio::io::split(h.client);
                let writer = tokio::spawn(async move {
                    for i in 0..20 {
                        write
                            .write_all(&request(HEARTBEAT, 3, i, &vec![1u8; 10_000]))
                            .await
                            .unwrap();
                    }
                    write
                });
                for i in 0..20i32 {
                    let mut size = [0u8; 4];
                    if let Err(err) = read.read_exact(&mut size).await {
                        panic!("read {i}: {err}; connection: {:?}", h.task.await);
                    }
                    let mut body = vec![0u8; i32::from_be_bytes(size) as usize];
                    read.read_exact(&mut body).await.unwrap();
                    assert_eq!(&body[..4], &i.to_be_bytes(), "responses out of order");
                }
                // The client leaves: the connection ends cleanly.
                drop(writer.await.unwrap());
                drop(read);
                h.task.await.unwrap().unwrap();
            }));
        }
        let all = async {
            for client in clients {
                client.await.unwrap();
            }
        };
        tokio::time::timeout(std::time::Duration::from_secs(30), all)
            .await
            .expect("connections stalled under the budget");
        assert_eq!(shared.budget.pool(Direction::Request).available(), 32 << 10);
        assert_eq!(
            shared.budget.pool(Direction::Response).available(),
            32 << 10
        );
    }

    #[tokio::test(start_paused = true)]
    async fn connections_announcing_frames_they_never_send_do_not_stall_others() {
        // 4 MiB budget: 2 MiB for requests. Three clients announce 1 MiB frames and
        // send 100 bytes; a fourth client's request must still go through at once.
        let mut settings = settings(4 << 20, 30000);
        settings.limits.frame_timeout = Duration::from_secs(30);
        let shared = shared_from(RewritePolicy::default(), settings);
        let mut stalled = Vec::new();
        for _ in 0..3 {
            let mut h = start(Arc::clone(&shared));
            h.client
                .write_all(&(1i32 << 20).to_be_bytes())
                .await
                .unwrap();
            h.client.write_all(&[0u8; 100]).await.unwrap();
            stalled.push(h);
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
        let mut good = start(Arc::clone(&shared));
        let heartbeat = request(HEARTBEAT, 3, 1, &[7u8; 50_000]);
        good.client.write_all(&heartbeat).await.unwrap();
        let forwarded =
            tokio::time::timeout(Duration::from_secs(1), read_exact_frame(&mut good.broker))
                .await
                .expect("a well-behaved client waited on stalled ones");
        assert_eq!(forwarded, heartbeat);
        // The stalled frames time out; their budget comes back.
        tokio::time::sleep(Duration::from_secs(31)).await;
        for h in stalled {
            let err = h.task.await.unwrap().unwrap_err();
            assert_eq!(err.refused_frame_reason(), Some("read_timeout"), "{err}");
            assert_eq!(err.fault(), Fault::Client);
        }
        drop(forwarded);
        assert_eq!(
            shared.budget.pool(Direction::Request).available(),
            2 << 20,
            "budget released"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_client_that_never_reads_its_responses_is_closed() {
        let mut settings = settings(4 << 20, 30000);
        settings.limits.frame_timeout = Duration::from_secs(5);
        let shared = shared_from(RewritePolicy::default(), settings);
        let mut h = start(Arc::clone(&shared));
        h.client
            .write_all(&request(HEARTBEAT, 3, 1, b"x"))
            .await
            .unwrap();
        read_exact_frame(&mut h.broker).await;
        // A response far larger than the client-side pipe, never read by the client.
        h.broker
            .write_all(&response(1, &vec![1u8; 512 << 10]))
            .await
            .unwrap();
        let err = tokio::time::timeout(Duration::from_secs(60), h.task)
            .await
            .expect("closed within the write timeout")
            .unwrap()
            .unwrap_err();
        assert_eq!(err.refused_frame_reason(), Some("write_timeout"), "{err}");
        assert_eq!(err.fault(), Fault::Client);
        assert_eq!(shared.budget.pool(Direction::Response).available(), 2 << 20);
    }

    #[tokio::test(start_paused = true)]
    async fn an_idle_client_is_closed_unless_a_response_is_owed() {
        let mut settings = settings(1 << 22, 30000);
        settings.limits.idle_timeout = Duration::from_secs(10);
        let shared = shared_from(RewritePolicy::default(), settings);
        // A response is owed for longer than the idle timeout (a JoinGroup, say).
        let mut waiting = start(Arc::clone(&shared));
        waiting
            .client
            .write_all(&request(11, 5, 1, b"join"))
            .await
            .unwrap();
        read_exact_frame(&mut waiting.broker).await;
        let idle = start(Arc::clone(&shared));
        tokio::time::sleep(Duration::from_secs(25)).await;
        let err = idle.task.await.unwrap().unwrap_err();
        assert!(matches!(err, ConnectionError::ClientIdle(_)), "{err}");
        assert!(err.is_routine_close());
        assert!(!waiting.task.is_finished(), "closed with a response owed");
        waiting
            .broker
            .write_all(&response(1, b"joined"))
            .await
            .unwrap();
        assert_eq!(
            read_exact_frame(&mut waiting.client).await,
            response(1, b"joined")
        );
    }

    /// A bootstrap server for topic-id lookups: accepts kpress's side connection, reads
    /// one Metadata request, reports it on `asked`, and waits for `release` before
    /// naming every id it was asked about `t`.
    async fn held_lookup_broker(
        listener: tokio::net::TcpListener,
        asked: tokio::sync::oneshot::Sender<()>,
        release: tokio::sync::oneshot::Receiver<()>,
    ) {
        use kafka_protocol::messages::metadata_request::MetadataRequest;
        use kafka_protocol::messages::metadata_response::{
            MetadataResponse, MetadataResponseTopic,
        };
        use kafka_protocol::messages::RequestHeader as KafkaRequestHeader;
        use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};

        let (mut stream, _) = listener.accept().await.unwrap();
        let mut size = [0u8; 4];
        stream.read_exact(&mut size).await.unwrap();
        let mut request = vec![0u8; i32::from_be_bytes(size) as usize];
        stream.read_exact(&mut request).await.unwrap();
        asked.send(()).unwrap();
        release.await.unwrap();
        let mut buf = bytes::Bytes::from(request);
        let version = i16::from_be_bytes([buf[2], buf[3]]);
        let header = KafkaRequestHeader::decode(&mut buf, 2).unwrap();
        let topics = MetadataRequest::decode(&mut buf, version)
            .unwrap()
            .topics
            .unwrap_or_default()
            .into_iter()
            .map(|t| {
                MetadataResponseTopic::default()
                    .with_topic_id(t.topic_id)
                    .with_name(Some(StrBytes::from_static_str("t").into()))
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
        stream.write_all(&frame(&response)).await.unwrap();
        // Held open: closing would only make the lookup task reconnect.
        std::future::pending::<()>().await;
    }

    /// Forwards requests as read, and notifies as each is read.
    #[derive(Debug)]
    struct NotifyOnRequest(Arc<tokio::sync::Notify>);

    impl crate::handler::ApiHandler for NotifyOnRequest {
        fn on_request(
            &self,
            _conn: &Arc<ConnectionContext>,
            _request: &mut RequestContext,
            frame: crate::handler::Frame,
        ) -> Result<RequestStep, crate::handler::HandlerError> {
            self.0.notify_one();
            Ok(RequestStep::Forward(Message::original(frame)))
        }
    }

    /// A connection whose first Produce request waits for its v13 topic id to be named
    /// (by a lookup the test holds), with a Produce by name and a Heartbeat behind it.
    struct HeldFirstRewrite {
        h: Harness,
        shared: Proxy,
        release: tokio::sync::oneshot::Sender<()>,
        requests: [Vec<u8>; 3],
    }

    async fn hold_first_rewrite() -> HeldFirstRewrite {
        let lookups = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let mut settings = settings(1 << 22, 30000);
        settings.upstream.bootstrap_servers = vec![lookups.local_addr().unwrap().to_string()];
        // Stored uncompressed: a rewrite's output is larger than its input.
        let policy = RewritePolicy::to_codec(Codec::None, CompressionOptions::default());
        let heartbeat_read = Arc::new(tokio::sync::Notify::new());
        let handlers = crate::Handlers::kpress()
            .register(HEARTBEAT, NotifyOnRequest(Arc::clone(&heartbeat_read)));
        let shared = shared_with_handlers(Arc::new(policy), settings, handlers);
        let mut h = start(Arc::clone(&shared));
        let (asked_tx, asked) = tokio::sync::oneshot::channel();
        let (release, release_rx) = tokio::sync::oneshot::channel();
        tokio::spawn(held_lookup_broker(lookups, asked_tx, release_rx));
        let batch = gzip_batch();
        let requests = [
            produce_v13(1, [0x5a; 16], &batch),
            produce_v7(2, -1, &batch),
            request(HEARTBEAT, 3, 3, b"heartbeat body"),
        ];
        for request in &requests {
            h.client.write_all(request).await.unwrap();
        }
        tokio::time::timeout(Duration::from_secs(10), asked)
            .await
            .expect("the first Produce asked for its topic id")
            .unwrap();
        // Requests in the socket but not yet read are not kpress's to answer: the tests
        // begin once all three were read.
        tokio::time::timeout(Duration::from_secs(10), heartbeat_read.notified())
            .await
            .expect("the Heartbeat behind both Produce requests was read");
        HeldFirstRewrite {
            h,
            shared,
            release,
            requests,
        }
    }

    /// The broker's answers to [`hold_first_rewrite`]'s three requests: a Produce v13
    /// response (header v1; kpress reads it for broker addresses), then two opaque ones.
    fn held_rewrite_responses() -> [Vec<u8>; 3] {
        use kafka_protocol::messages::produce_response::ProduceResponse;
        use kafka_protocol::protocol::Encodable;

        let mut produce_v13 = 1i32.to_be_bytes().to_vec();
        produce_v13.push(0); // header tagged fields
        let mut body = BytesMut::new();
        ProduceResponse::default().encode(&mut body, 13).unwrap();
        produce_v13.extend_from_slice(&body);
        [
            frame(&produce_v13),
            response(2, b"produced"),
            response(3, b"heartbeat"),
        ]
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn pipelined_rewrites_finishing_out_of_order_are_forwarded_in_order() {
        let HeldFirstRewrite {
            mut h,
            shared,
            release,
            requests,
        } = hold_first_rewrite().await;
        // The second Produce is rewritten while the first waits for its name: the
        // request budget holds its output, larger than the frame it replaces.
        let requests_pool = shared.budget.pool(Direction::Request);
        let read: usize = requests.iter().map(Vec::len).sum();
        let rewritten = async {
            while requests_pool.capacity() - requests_pool.available() <= read {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        };
        tokio::time::timeout(Duration::from_secs(10), rewritten)
            .await
            .expect("the second Produce was not rewritten while the first waited");
        // Still nothing may go ahead of the first.
        let early =
            tokio::time::timeout(Duration::from_millis(300), read_exact_frame(&mut h.broker)).await;
        assert!(
            early.is_err(),
            "a request overtook a Produce being rewritten"
        );
        release.send(()).unwrap();
        let first = next_frame(&mut h.broker).await;
        let second = next_frame(&mut h.broker).await;
        let third = next_frame(&mut h.broker).await;
        // Both Produce requests rewritten (the first once its id was named), in order.
        assert_eq!(first[8..12], 1i32.to_be_bytes(), "correlation id");
        assert_eq!(forwarded_codec(&first), Some(Codec::None));
        assert_eq!(second[8..12], 2i32.to_be_bytes(), "correlation id");
        assert_eq!(forwarded_codec(&second), Some(Codec::None));
        assert_eq!(third, requests[2]);
        let responses = held_rewrite_responses();
        for response in &responses {
            h.broker.write_all(response).await.unwrap();
        }
        for response in &responses {
            assert_eq!(&next_frame(&mut h.client).await, response);
        }
        drop(h.client);
        h.task.await.unwrap().unwrap();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_request_behind_a_slow_rewrite_waits_and_shutdown_forwards_both() {
        let HeldFirstRewrite {
            mut h,
            release,
            requests,
            ..
        } = hold_first_rewrite().await;
        // Shutdown while the first Produce is being rewritten: every request already
        // read is still forwarded, in order, and answered.
        h.shutdown.send(true).unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(!h.task.is_finished(), "closed with requests read");
        release.send(()).unwrap();
        let first = next_frame(&mut h.broker).await;
        assert_eq!(first[8..12], 1i32.to_be_bytes(), "correlation id");
        assert_eq!(forwarded_codec(&first), Some(Codec::None));
        assert_eq!(next_frame(&mut h.broker).await[8..12], 2i32.to_be_bytes());
        assert_eq!(next_frame(&mut h.broker).await, requests[2]);
        for response in held_rewrite_responses() {
            h.broker.write_all(&response).await.unwrap();
            assert_eq!(next_frame(&mut h.client).await, response);
        }
        h.task.await.unwrap().unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn a_connection_with_a_rewrite_under_way_is_not_idle() {
        let mut settings = settings(1 << 22, 30000);
        settings.limits.idle_timeout = Duration::from_secs(1);
        // The rewrite waits for its slot, however long.
        settings.produce.max_rewrite_wait = Duration::from_secs(3600);
        // acks=0: no response is owed, only the forwarding.
        let policy = RewritePolicy::to_codec(Codec::Zstd, CompressionOptions::default());
        let shared = shared_from(policy, settings);
        // Every rewrite slot taken: the Produce waits to be rewritten past the timeout.
        let held = shared.work_slots.hold_all().await;
        let mut h = start(Arc::clone(&shared));
        let batch = gzip_batch();
        h.client.write_all(&produce_v7(1, 0, &batch)).await.unwrap();
        tokio::time::sleep(Duration::from_secs(5)).await;
        assert!(
            !h.task.is_finished(),
            "closed as idle with a request unforwarded"
        );
        drop(held);
        let forwarded = read_exact_frame(&mut h.broker).await;
        assert_eq!(forwarded_codec(&forwarded), Some(Codec::Zstd));
        // Forwarded and owed nothing: now it is idle.
        let err = tokio::time::timeout(Duration::from_secs(10), h.task)
            .await
            .expect("closed as idle")
            .unwrap()
            .unwrap_err();
        assert!(matches!(err, ConnectionError::ClientIdle(_)), "{err}");
    }

    /// Upper-cases Heartbeat response bodies on the blocking pool, the first one slowly.
    #[derive(Debug)]
    struct SlowUpperCase;

    impl crate::handler::ApiHandler for SlowUpperCase {
        fn on_response(
            &self,
            conn: &Arc<ConnectionContext>,
            request: &mut RequestContext,
            frame: crate::handler::Frame,
        ) -> Result<ResponseStep, crate::handler::HandlerError> {
            let slow = request.correlation_id() == 1;
            let task = Arc::clone(conn);
            Ok(ResponseStep::Later(conn.spawn(async move {
                let bytes = task
                    .offload(move |_| {
                        if slow {
                            std::thread::sleep(Duration::from_millis(300));
                        }
                        let mut bytes = BytesMut::from(frame.bytes());
                        bytes[8..].make_ascii_uppercase();
                        bytes
                    })
                    .await?;
                task.new_response(bytes).await
            })))
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn response_work_runs_off_the_reactor_and_responses_stay_in_order() {
        let handlers = crate::Handlers::kpress().register(HEARTBEAT, SlowUpperCase);
        let policies = Arc::new(RewritePolicy::default());
        let mut h = start(shared_with_handlers(
            policies,
            settings(1 << 22, 30000),
            handlers,
        ));
        let requests = [
            request(HEARTBEAT, 3, 1, b"first"),
            request(HEARTBEAT, 3, 2, b"second"),
            request(2, 1, 3, b"list offsets"),
        ];
        for req in &requests {
            h.client.write_all(req).await.unwrap();
        }
        for req in &requests {
            assert_eq!(&read_exact_frame(&mut h.broker).await, req);
        }
        for (id, body) in [(1, &b"slow one"[..]), (2, b"quick one"), (3, b"as sent")] {
            h.broker.write_all(&response(id, body)).await.unwrap();
        }
        // Work on the blocking pool, slow for the first; none for the third: the client
        // gets them in request order.
        assert_eq!(
            read_exact_frame(&mut h.client).await,
            response(1, b"SLOW ONE")
        );
        assert_eq!(
            read_exact_frame(&mut h.client).await,
            response(2, b"QUICK ONE")
        );
        assert_eq!(
            read_exact_frame(&mut h.client).await,
            response(3, b"as sent")
        );
        drop(h.client);
        h.task.await.unwrap().unwrap();
    }
}
