//! kpress's own requests to the cluster, the side channel: one [`SideChannel`] owns how
//! kpress connects (TLS as `[upstream.tls]` says), logs in (`[upstream.sasl]`, and
//! KIP-368 re-authentication), and reads answers within the proxy's limits; a request
//! goes as kpress built its frame ([`SideChannel::send_frame`]) or as its
//! kafka-protocol type ([`SideChannel::send`]), answered in its type. Its
//! clients are small: [`KeptSide`] keeps a connection between requests and retries on
//! a new one; the topic-id resolver (`topic_ids`), the topic-config cache
//! (`topic_configs`), the readiness probe ([`probe_upstream`]) and `kpress doctor`'s
//! [`ClusterClient`] each ask through it. No client connection's bytes pass here.

mod bearer;
mod client;
mod kept;
mod probe;

use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use kafka_protocol::protocol::Request;
use kpress_protocol::frame::{response_correlation_id, response_header_len, SIZE_PREFIX_LEN};
use kpress_protocol::{
    api_key, decode_response, metadata_request, request_frame, rewrite_response, sasl,
    GuardedResponse, ResponseObserver,
};
use tokio::io::{AsyncRead, AsyncWrite};

use crate::budget::{ConnectionPool, Pool};
use crate::error::ConnectionError;
use crate::frame_io::{read_frame, write_frame, Frame, FrameLimits};
use crate::metrics;
use crate::settings::{LimitSettings, SaslLogin, UpstreamSettings};
use crate::status::ProxyStatus;
use crate::transport::{first_of, Connector, Stream};

pub use client::{
    AdvertisedBroker, ApiMaxVersions, ClusterClient, ClusterClientError, ClusterConnector,
    ClusterView, Reachability, Stage,
};
pub(crate) use kept::KeptSide;
pub use probe::{probe_upstream, ProbeError};

/// Metadata v12: the first that names topics by id with a null name (KIP-516), served
/// by Kafka 3.1 and later. Produce v13 (topic ids) needs Kafka 4.1, so naming ids
/// always has it.
pub(crate) const METADATA_VERSION: i16 = 12;

/// Versions tried in turn to learn the brokers at start: v12, then v9 (Kafka 2.4+),
/// then v1 (Kafka 0.10+). A broker closes the connection on a version it lacks.
pub(crate) const DISCOVERY_METADATA_VERSIONS: [i16; 3] = [METADATA_VERSION, 9, 1];

/// How long kpress waits for the answer to one of its own Metadata requests.
pub(crate) const METADATA_TIMEOUT: Duration = Duration::from_secs(15);

/// Correlation ids of kpress's own requests, each on a connection of its own; negative
/// so they stand out in broker logs next to client ids, which start at 0.
static NEXT_CORRELATION_ID: AtomicI32 = AtomicI32::new(i32::MIN);

pub(crate) fn next_correlation_id() -> i32 {
    NEXT_CORRELATION_ID.fetch_add(1, Ordering::Relaxed)
}

/// kpress's own way to the cluster: how it connects (TLS as for clients), logs in
/// (`[upstream.sasl]`), and reads answers (within the proxy's frame limits and response
/// budget). Every request kpress itself sends goes through one.
pub(crate) struct SideChannel {
    connector: Connector,
    login: Option<SaslLogin>,
    bootstrap_servers: Vec<String>,
    limits: FrameLimits,
    responses: Pool,
    /// An answer counts as the brokers answering, for readiness.
    status: Arc<ProxyStatus>,
}

impl std::fmt::Debug for SideChannel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SideChannel")
            .field("bootstrap_servers", &self.bootstrap_servers)
            .field("login", &self.login)
            .finish_non_exhaustive()
    }
}

impl SideChannel {
    /// The channel `upstream` and `limits` describe, connecting with `connector` and
    /// reading answers within `responses`; every answer is noted in `status`.
    pub(crate) fn new(
        upstream: &UpstreamSettings,
        limits: &LimitSettings,
        connector: Connector,
        responses: Pool,
        status: Arc<ProxyStatus>,
    ) -> SideChannel {
        let limits = FrameLimits {
            max_frame_bytes: limits.max_frame_bytes,
            frame_timeout: limits.frame_timeout,
        };
        SideChannel::within(upstream, limits, connector, responses, status)
    }

    /// [`SideChannel::new`], reading answers within `limits` rather than the proxy's.
    pub(crate) fn within(
        upstream: &UpstreamSettings,
        limits: FrameLimits,
        connector: Connector,
        responses: Pool,
        status: Arc<ProxyStatus>,
    ) -> SideChannel {
        SideChannel {
            connector,
            login: upstream.login.clone(),
            bootstrap_servers: upstream.bootstrap_servers.clone(),
            limits,
            responses,
            status,
        }
    }

    /// A channel to `bootstrap_servers` with no TLS and no login, for in-crate tests.
    #[cfg(test)]
    pub(crate) fn for_tests(bootstrap_servers: Vec<String>) -> SideChannel {
        let mut settings = crate::settings::ProxySettings::for_tests(
            "127.0.0.1:0".parse().expect("an address"),
            "127.0.0.1".into(),
            20000,
            bootstrap_servers,
        );
        settings.limits.max_frame_bytes = 1 << 20;
        let budget = crate::budget::Budget::new(8 << 20);
        SideChannel::new(
            &settings.upstream,
            &settings.limits,
            Connector::new(None),
            budget.pool(crate::budget::Direction::Response).clone(),
            Arc::default(),
        )
    }

    pub(crate) fn bootstrap_servers(&self) -> &[String] {
        &self.bootstrap_servers
    }

    /// Whether kpress logs in on its side connections (`[upstream.sasl]`).
    pub(crate) fn has_login(&self) -> bool {
        self.login.is_some()
    }

    /// A TCP (and TLS) connection to `server`, not logged in.
    pub(crate) async fn connect_only(&self, server: &str) -> Result<Stream, ConnectionError> {
        self.connector.connect(server).await
    }

    /// A connection for kpress's own requests to `server`: TLS as for clients, then
    /// kpress's own SASL login when the policy gives one.
    pub(crate) async fn connect(&self, server: &str) -> Result<Stream, ConnectionError> {
        Ok(self.session(server).await?.0)
    }

    /// [`SideChannel::connect`], with the broker's session lifetime (KIP-368) when its
    /// login has one: the connection must re-authenticate
    /// ([`SideChannel::reauthenticate`]) before then.
    pub(crate) async fn session(
        &self,
        server: &str,
    ) -> Result<(Stream, Option<Duration>), ConnectionError> {
        let mut stream = self.connector.connect(server).await?;
        let lifetime = self.log_in(&mut stream, server).await?;
        Ok((stream, lifetime))
    }

    /// A side connection to the first bootstrap server that accepts and authenticates,
    /// with its session lifetime as [`SideChannel::session`] gives it.
    pub(crate) async fn session_any(&self) -> Result<(Stream, Option<Duration>), ConnectionError> {
        first_of(&self.bootstrap_servers, |server| self.session(server)).await
    }

    /// kpress's own login again on a side connection already logged in (KIP-368
    /// re-authentication), with a fresh token for OAUTHBEARER; the new session lifetime.
    pub(crate) async fn reauthenticate(
        &self,
        stream: &mut Stream,
    ) -> Result<Option<Duration>, ConnectionError> {
        self.log_in(stream, "the side connection's broker").await
    }

    async fn log_in(
        &self,
        stream: &mut Stream,
        server: &str,
    ) -> Result<Option<Duration>, ConnectionError> {
        let Some(login) = &self.login else {
            return Ok(None);
        };
        let authenticated = tokio::time::timeout(
            METADATA_TIMEOUT,
            authenticate(stream, login, self.limits, &self.responses),
        )
        .await
        .unwrap_or_else(|_| {
            Err(ConnectionError::SideAuthentication(format!(
                "no answer from {server} within {METADATA_TIMEOUT:?}"
            )))
        });
        metrics::side_authentication(if authenticated.is_ok() {
            "ok"
        } else {
            "failed"
        });
        authenticated
    }

    /// Sends `request` (a whole frame kpress built, of `api_key` at `version`) on
    /// `stream` and returns the response body after its header; the answer must come
    /// within [`METADATA_TIMEOUT`] and fit the frame limit and the response budget.
    pub(crate) async fn send_frame(
        &self,
        stream: &mut Stream,
        request: &[u8],
        api_key: i16,
        version: i16,
    ) -> Result<Vec<u8>, ConnectionError> {
        let share = ConnectionPool::new(
            &self.responses,
            self.limits.max_frame_bytes + SIZE_PREFIX_LEN,
        );
        let body = tokio::time::timeout(
            METADATA_TIMEOUT,
            exchange(stream, request, api_key, version, self.limits, &share),
        )
        .await
        .map_err(|_| {
            ConnectionError::BrokerIo(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!("no answer within {METADATA_TIMEOUT:?}"),
            ))
        })??;
        self.status.upstream_answered();
        Ok(body)
    }

    /// Sends `request` at `version` on `stream`, with kpress's client id and a
    /// correlation id of its own, and decodes the typed answer, as
    /// [`SideChannel::send_frame`] reads it. Only responses kpress-protocol has a
    /// bounds-checked walk of can be asked for ([`GuardedResponse`]): a broker's counts
    /// are checked against the bytes present before anything is sized from them.
    pub(crate) async fn send<R>(
        &self,
        stream: &mut Stream,
        request: &R,
        version: i16,
    ) -> Result<R::Response, ConnectionError>
    where
        R: Request,
        R::Response: GuardedResponse,
    {
        let frame = request_frame(request, version, next_correlation_id(), CLIENT_ID)
            .map_err(ConnectionError::SideRequest)?;
        let body = self.send_frame(stream, &frame, R::KEY, version).await?;
        decode_response(version, &body).map_err(ConnectionError::SideResponse)
    }

    /// Sends a Metadata request (version `version`) for `topic_ids` (all topics when
    /// empty) on `stream` and feeds the response to `observer`, which records node
    /// addresses and topic names.
    pub(crate) async fn metadata(
        &self,
        stream: &mut Stream,
        version: i16,
        topic_ids: &[[u8; 16]],
        observer: &mut (dyn ResponseObserver + Send),
    ) -> Result<(), ConnectionError> {
        let request =
            metadata_request(version, next_correlation_id(), topic_ids).map_err(|err| {
                ConnectionError::RewriteTask(format!(
                    "cannot encode kpress's Metadata request: {err}"
                ))
            })?;
        let body = self
            .send_frame(stream, &request, api_key::METADATA, version)
            .await?;
        rewrite_response(api_key::METADATA, version, &body, observer)
            .map_err(ConnectionError::Response)?;
        Ok(())
    }
}

/// SaslHandshake, then SaslAuthenticate rounds until the mechanism is done; the
/// session lifetime the broker gives (KIP-368), if any.
async fn authenticate<S: AsyncRead + AsyncWrite + Unpin>(
    stream: &mut S,
    login: &SaslLogin,
    limits: FrameLimits,
    pool: &Pool,
) -> Result<Option<Duration>, ConnectionError> {
    let share = ConnectionPool::new(pool, limits.max_frame_bytes + SIZE_PREFIX_LEN);
    let refused = |err: sasl::SaslError| ConnectionError::SideAuthentication(err.to_string());
    let handshake = sasl::handshake_request(next_correlation_id(), CLIENT_ID, login.mechanism)
        .map_err(refused)?;
    let body = exchange(
        stream,
        &handshake,
        api_key::SASL_HANDSHAKE,
        sasl::SASL_HANDSHAKE_VERSION,
        limits,
        &share,
    )
    .await?;
    sasl::parse_handshake_response(&body).map_err(refused)?;
    if let Some(tokens) = &login.bearer {
        return bearer::authenticate(stream, tokens, limits, &share).await;
    }
    let mut client = sasl::SaslClient::new(login.mechanism, &login.username, &login.password)
        .map_err(refused)?;
    let mut message = client.first_message();
    loop {
        let request = sasl::authenticate_request(next_correlation_id(), CLIENT_ID, &message)
            .map_err(refused)?;
        let body = exchange(
            stream,
            &request,
            api_key::SASL_AUTHENTICATE,
            sasl::SASL_AUTHENTICATE_VERSION,
            limits,
            &share,
        )
        .await?;
        let answer = sasl::parse_authenticate_response(sasl::SASL_AUTHENTICATE_VERSION, &body)
            .map_err(refused)?;
        // SCRAM's key derivation takes milliseconds of CPU: not on the reactor.
        let (returned, step) = tokio::task::spawn_blocking(move || {
            let step = client.next(&answer);
            (client, step)
        })
        .await
        .map_err(|err| ConnectionError::RewriteTask(err.to_string()))?;
        client = returned;
        match step.map_err(refused)? {
            sasl::Step::Send(next) => message = next,
            sasl::Step::Done => return Ok(session_lifetime(&body)),
        }
    }
}

/// The session lifetime in a successful SaslAuthenticate response body.
pub(crate) fn session_lifetime(body: &[u8]) -> Option<Duration> {
    sasl::session_lifetime_ms(sasl::SASL_AUTHENTICATE_VERSION, body)
        .and_then(|ms| u64::try_from(ms).ok())
        .map(Duration::from_millis)
}

/// The client id of kpress's own requests, as brokers log it.
pub(crate) const CLIENT_ID: &str = "kpress";

/// Writes `request` (a whole frame kpress built) and reads its response frame, whose
/// correlation id must be the request's.
pub(crate) async fn round_trip<S: AsyncRead + AsyncWrite + Unpin>(
    stream: &mut S,
    request: &[u8],
    limits: FrameLimits,
    share: &ConnectionPool,
) -> Result<Frame, ConnectionError> {
    let correlation_id = request_correlation_id(request);
    write_frame(stream, request, limits.frame_timeout)
        .await
        .map_err(ConnectionError::broker_write)?;
    let frame = read_frame(stream, limits, share, None)
        .await
        .map_err(ConnectionError::from_broker_read)?
        .ok_or(ConnectionError::BrokerClosed { correlation_id })?;
    let received = response_correlation_id(frame.body()).map_err(ConnectionError::BrokerFrame)?;
    if received != correlation_id {
        return Err(ConnectionError::CorrelationMismatch {
            expected: correlation_id,
            received,
        });
    }
    Ok(frame)
}

/// [`round_trip`], then the response body after the header of `api_key` at `version`.
pub(crate) async fn exchange<S: AsyncRead + AsyncWrite + Unpin>(
    stream: &mut S,
    request: &[u8],
    api_key: i16,
    version: i16,
    limits: FrameLimits,
    share: &ConnectionPool,
) -> Result<Vec<u8>, ConnectionError> {
    let frame = round_trip(stream, request, limits, share).await?;
    let body = frame.body();
    let header_len = response_header_len(api_key, version, body)
        .map_err(ConnectionError::BrokerFrame)?
        .unwrap_or(4);
    Ok(body[header_len..].to_vec())
}

/// The correlation id of a whole request frame kpress built itself.
fn request_correlation_id(frame: &[u8]) -> i32 {
    frame
        .get(SIZE_PREFIX_LEN + 4..SIZE_PREFIX_LEN + 8)
        .and_then(|b| b.try_into().ok())
        .map_or(0, i32::from_be_bytes)
}
