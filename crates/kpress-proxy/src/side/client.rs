//! A Kafka client for kpress's own questions to the cluster (`kpress doctor` asks them:
//! versions, brokers, topic configs). Not the HTTP `[admin]` endpoint: connections
//! opened exactly as the proxy opens its side connections (TCP, TLS as
//! `[upstream.tls]` says, kpress's own login as `[upstream.sasl]` says), one request
//! answered at a time, every answer read within the proxy's frame limits and budget.

use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::Arc;

use kpress_protocol::frame::{peek_request_header, SIZE_PREFIX_LEN};
use kpress_protocol::{api_key, metadata_request, rewrite_response, ProtocolError};
use kpress_protocol::{ResponseObserver, TopicConfigs};
use tokio::net::TcpStream;

use super::{probe, SideChannel, METADATA_VERSION};
use crate::budget::{Budget, Direction};
use crate::error::{ConnectionError, ProxyError};
use crate::settings::ProxySettings;
use crate::tls::ClientTls;
use crate::transport::{Connector, Stream, CONNECT_TIMEOUT};

/// Correlation ids of these requests; a connection answers one request at a time,
/// so any distinct value per request will do.
static NEXT_CORRELATION_ID: AtomicI32 = AtomicI32::new(1);

/// Why a question to the cluster got no answer.
#[derive(Debug, thiserror::Error)]
pub enum ClusterClientError {
    /// The settings do not load (a TLS file, for one).
    #[error("{0}")]
    Setup(#[from] ProxyError),
    /// The broker could not be reached, refused kpress's login, or broke the exchange.
    #[error("{address}: {message}")]
    Broker { address: String, message: String },
    /// The broker's answer does not parse.
    #[error("{address}: {source}")]
    Response {
        address: String,
        #[source]
        source: ProtocolError,
    },
    /// kpress could not build its own request.
    #[error("cannot build kpress's request: {0}")]
    Request(#[source] ProtocolError),
}

/// How one step of reaching a broker went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stage {
    Ok,
    Failed(String),
    /// The policy does not ask for this step (no `[upstream.tls]` or `[upstream.sasl]`).
    NotConfigured,
    /// An earlier step failed.
    NotTried,
}

impl Stage {
    /// Whether this step is no obstacle (done, or not asked for).
    pub fn passed(&self) -> bool {
        matches!(self, Stage::Ok | Stage::NotConfigured)
    }
}

/// Each step of reaching one broker address, as kpress's connections take them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reachability {
    pub address: String,
    pub tcp: Stage,
    pub tls: Stage,
    pub sasl: Stage,
}

impl Reachability {
    /// Whether kpress can open its connections to this address.
    pub fn reachable(&self) -> bool {
        self.tcp.passed() && self.tls.passed() && self.sasl.passed()
    }
}

/// A broker as a Metadata response advertises it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdvertisedBroker {
    pub node_id: i32,
    pub host: String,
    pub port: i32,
}

impl AdvertisedBroker {
    /// `host:port`, brackets around an IPv6 host.
    pub fn address(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }
}

/// The brokers and topics a Metadata response names.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClusterView {
    pub brokers: Vec<AdvertisedBroker>,
    /// Topic names, in the order the broker listed them.
    pub topics: Vec<String>,
}

/// The highest version of each API a broker lists in ApiVersions, as kpress relays
/// it to clients: an API kpress parses is capped at the version kpress parses.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ApiMaxVersions(pub Vec<(i16, i16)>);

impl ApiMaxVersions {
    pub fn max_version(&self, api_key: i16) -> Option<i16> {
        self.0
            .iter()
            .find(|(key, _)| *key == api_key)
            .map(|(_, max)| *max)
    }

    /// The highest Produce version listed (capped at what kpress parses).
    pub fn produce(&self) -> Option<i16> {
        self.max_version(api_key::PRODUCE)
    }

    /// The DescribeConfigs version to ask this broker, if it has one kpress reads.
    pub fn describe_configs(&self) -> Option<i16> {
        self.max_version(api_key::DESCRIBE_CONFIGS)
            .and_then(kpress_protocol::describe_configs_version)
    }
}

/// Opens cluster-client connections to the brokers a policy names.
#[derive(Debug)]
pub struct ClusterConnector {
    side: Arc<SideChannel>,
    tls_configured: bool,
}

impl ClusterConnector {
    /// Loads what `settings` name for reaching brokers: `[upstream.tls]` and
    /// `[upstream.sasl]`, with the proxy's frame limits and budget.
    pub fn new(settings: &ProxySettings) -> Result<ClusterConnector, ClusterClientError> {
        let tls =
            ClientTls::load_shared(settings.upstream.tls.clone()).map_err(ProxyError::from)?;
        let side = SideChannel::new(
            &settings.upstream,
            &settings.limits,
            Connector::new(tls),
            Budget::new(settings.limits.max_inflight_bytes)
                .pool(Direction::Response)
                .clone(),
            Arc::default(),
        );
        Ok(ClusterConnector {
            side: Arc::new(side),
            tls_configured: settings.upstream.tls.is_some(),
        })
    }

    pub fn bootstrap_servers(&self) -> &[String] {
        self.side.bootstrap_servers()
    }

    /// The side channel its connections are made with.
    pub(crate) fn side(&self) -> &Arc<SideChannel> {
        &self.side
    }

    /// Tries each step of reaching `address` on a connection of its own: TCP alone,
    /// then TCP and TLS, then TCP, TLS and kpress's own SASL login.
    pub async fn check(&self, address: &str) -> Reachability {
        let mut reachability = Reachability {
            address: address.to_owned(),
            tcp: Stage::NotTried,
            tls: Stage::NotTried,
            sasl: Stage::NotTried,
        };
        reachability.tcp =
            match tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(address)).await {
                Ok(Ok(_)) => Stage::Ok,
                Ok(Err(err)) => Stage::Failed(err.to_string()),
                Err(_) => Stage::Failed(format!("no connection within {CONNECT_TIMEOUT:?}")),
            };
        if reachability.tcp != Stage::Ok {
            return reachability;
        }
        reachability.tls = if self.tls_configured {
            match self.side.connect_only(address).await {
                Ok(_) => Stage::Ok,
                Err(err) => Stage::Failed(err.to_string()),
            }
        } else {
            Stage::NotConfigured
        };
        if !reachability.tls.passed() {
            return reachability;
        }
        reachability.sasl = if self.side.has_login() {
            match self.side.connect(address).await {
                Ok(_) => Stage::Ok,
                Err(err) => Stage::Failed(err.to_string()),
            }
        } else {
            Stage::NotConfigured
        };
        reachability
    }

    /// A connection to `address` as kpress's side connections are: TLS and kpress's
    /// own SASL login as the policy says.
    pub async fn connect(&self, address: &str) -> Result<ClusterClient, ClusterClientError> {
        let stream = self
            .side
            .connect(address)
            .await
            .map_err(|err| broker_error(address, &err))?;
        Ok(ClusterClient {
            side: Arc::clone(&self.side),
            stream,
            address: address.to_owned(),
        })
    }
}

/// A side connection to a bootstrap server that failed.
impl From<ConnectionError> for ClusterClientError {
    fn from(err: ConnectionError) -> ClusterClientError {
        broker_error("bootstrap", &err)
    }
}

fn broker_error(address: &str, err: &ConnectionError) -> ClusterClientError {
    ClusterClientError::Broker {
        address: address.to_owned(),
        message: err.to_string(),
    }
}

/// One cluster-client connection to a broker.
pub struct ClusterClient {
    side: Arc<SideChannel>,
    stream: Stream,
    address: String,
}

impl std::fmt::Debug for ClusterClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClusterClient")
            .field("address", &self.address)
            .finish_non_exhaustive()
    }
}

impl ClusterClient {
    /// A client on `stream`, a connection of `side` to a bootstrap server.
    pub(crate) fn over(side: &Arc<SideChannel>, stream: Stream) -> ClusterClient {
        ClusterClient {
            side: Arc::clone(side),
            stream,
            address: "bootstrap".to_owned(),
        }
    }

    /// The connection, to keep for later requests.
    pub(crate) fn into_stream(self) -> Stream {
        self.stream
    }

    pub fn address(&self) -> &str {
        &self.address
    }

    /// A correlation id for a request this client will send.
    pub fn next_correlation_id(&self) -> i32 {
        NEXT_CORRELATION_ID.fetch_add(1, Ordering::Relaxed)
    }

    /// Sends one whole request frame (size prefix, header, body) and returns its
    /// response body after the response header. The answer must come within the
    /// time kpress gives its own Metadata requests, and fit the proxy's frame limit.
    pub async fn request(&mut self, frame: &[u8]) -> Result<Vec<u8>, ClusterClientError> {
        let header = frame
            .get(SIZE_PREFIX_LEN..)
            .ok_or_else(|| ClusterClientError::Request(not_a_frame()))
            .and_then(|body| {
                peek_request_header(body).map_err(|err| ClusterClientError::Broker {
                    address: self.address.clone(),
                    message: format!("kpress's own request does not parse: {err}"),
                })
            })?;
        self.side
            .send_frame(&mut self.stream, frame, header.api_key, header.api_version)
            .await
            .map_err(|err| broker_error(&self.address, &err))
    }

    /// The broker's ApiVersions (v0, which every Kafka answers), as kpress relays them.
    pub async fn api_versions(&mut self) -> Result<ApiMaxVersions, ClusterClientError> {
        let body = self.request(&probe::api_versions_v0_request()).await?;
        let mut versions = VersionsSeen::default();
        rewrite_response(api_key::API_VERSIONS, 0, &body, &mut versions).map_err(|source| {
            ClusterClientError::Response {
                address: self.address.clone(),
                source,
            }
        })?;
        Ok(ApiMaxVersions(versions.0))
    }

    /// Every broker and topic of the cluster (Metadata v12, Kafka 3.1+).
    pub async fn metadata(&mut self) -> Result<ClusterView, ClusterClientError> {
        let version = METADATA_VERSION;
        let frame = metadata_request(version, self.next_correlation_id(), &[])
            .map_err(ClusterClientError::Request)?;
        let body = self.request(&frame).await?;
        let mut view = ClusterSeen::default();
        rewrite_response(api_key::METADATA, version, &body, &mut view).map_err(|source| {
            ClusterClientError::Response {
                address: self.address.clone(),
                source,
            }
        })?;
        Ok(view.0)
    }

    /// `keys` of each of `topics` (DescribeConfigs at `version`).
    pub async fn describe_topic_configs(
        &mut self,
        version: i16,
        topics: &[&str],
        keys: &[&str],
    ) -> Result<Vec<TopicConfigs>, ClusterClientError> {
        let request = kpress_protocol::describe_topic_configs_request(topics, keys);
        match self.side.send(&mut self.stream, &request, version).await {
            Ok(response) => Ok(kpress_protocol::topic_configs(response)),
            Err(ConnectionError::SideRequest(err)) => Err(ClusterClientError::Request(err)),
            Err(ConnectionError::SideResponse(source)) => Err(ClusterClientError::Response {
                address: self.address.clone(),
                source,
            }),
            Err(err) => Err(broker_error(&self.address, &err)),
        }
    }
}

fn not_a_frame() -> ProtocolError {
    ProtocolError::Encode {
        api: "request",
        version: 0,
        reason: "shorter than a size prefix".into(),
    }
}

/// Collects each API's max version from an ApiVersions response, changing nothing.
#[derive(Default)]
struct VersionsSeen(Vec<(i16, i16)>);

impl ResponseObserver for VersionsSeen {
    fn broker(&mut self, _: i32, host: &str, port: i32) -> (String, i32) {
        (host.to_owned(), port)
    }

    fn topic(&mut self, _: [u8; 16], _: &str) {}

    fn max_version(&mut self, api_key: i16, capped_max: i16) -> i16 {
        self.0.push((api_key, capped_max));
        capped_max
    }
}

/// Collects the brokers and topic names of a Metadata response, changing nothing.
#[derive(Default)]
struct ClusterSeen(ClusterView);

impl ResponseObserver for ClusterSeen {
    fn broker(&mut self, node_id: i32, host: &str, port: i32) -> (String, i32) {
        self.0.brokers.push(AdvertisedBroker {
            node_id,
            host: host.to_owned(),
            port,
        });
        (host.to_owned(), port)
    }

    fn topic(&mut self, _: [u8; 16], name: &str) {
        self.0.topics.push(name.to_owned());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::BytesMut;
    use kafka_protocol::messages::api_versions_response::ApiVersion;
    use kafka_protocol::messages::metadata_response::MetadataResponseTopic;
    use kafka_protocol::messages::metadata_response::{MetadataResponse, MetadataResponseBroker};
    use kafka_protocol::messages::{ApiVersionsResponse, BrokerId, TopicName};
    use kafka_protocol::protocol::{Encodable, StrBytes};
    use tokio::io::AsyncWriteExt;
    use tokio::net::TcpListener;

    use crate::tests::{read_request, ReadRequest};

    /// Answers ApiVersions v0 and Metadata v12 like a one-node broker with topic `t`.
    async fn stand_in(listener: TcpListener) {
        let port = listener.local_addr().unwrap().port();
        let (mut stream, _) = listener.accept().await.unwrap();
        while let Some(ReadRequest {
            api_key,
            version,
            correlation_id,
            ..
        }) = read_request(&mut stream).await
        {
            let mut response = correlation_id.to_be_bytes().to_vec();
            let mut body = BytesMut::new();
            if api_key == api_key::API_VERSIONS {
                ApiVersionsResponse::default()
                    .with_api_keys(vec![
                        ApiVersion::default()
                            .with_api_key(api_key::PRODUCE)
                            .with_min_version(3)
                            .with_max_version(13),
                        ApiVersion::default()
                            .with_api_key(api_key::DESCRIBE_CONFIGS)
                            .with_min_version(1)
                            .with_max_version(4),
                    ])
                    .encode(&mut body, 0)
                    .unwrap();
            } else {
                response.push(0); // flexible response header
                MetadataResponse::default()
                    .with_brokers(vec![MetadataResponseBroker::default()
                        .with_node_id(BrokerId(3))
                        .with_host(StrBytes::from_static_str("127.0.0.1"))
                        .with_port(i32::from(port))])
                    .with_topics(vec![MetadataResponseTopic::default()
                        .with_name(Some(TopicName(StrBytes::from_static_str("t"))))])
                    .encode(&mut body, version)
                    .unwrap();
                // A non-nil topic id after the name (compact string "t"): only named
                // ids are reported.
                let name_at = body
                    .windows(18)
                    .position(|w| w[..2] == [2, b't'] && w[2..].iter().all(|b| *b == 0))
                    .unwrap();
                body[name_at + 2..name_at + 18].fill(7);
            }
            response.extend_from_slice(&body);
            let mut frame = (response.len() as i32).to_be_bytes().to_vec();
            frame.extend_from_slice(&response);
            stream.write_all(&frame).await.unwrap();
        }
    }

    #[tokio::test]
    async fn versions_and_the_cluster_are_read_from_a_broker_stand_in() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        tokio::spawn(stand_in(listener));
        let settings = ProxySettings::for_tests(
            "127.0.0.1:0".parse().unwrap(),
            "127.0.0.1".into(),
            19100,
            vec![addr.clone()],
        );
        let connector = ClusterConnector::new(&settings).unwrap();
        let mut client = connector.connect(&addr).await.unwrap();
        let versions = client.api_versions().await.unwrap();
        assert_eq!(versions.max_version(api_key::PRODUCE), Some(13));
        assert_eq!(versions.max_version(api_key::DESCRIBE_CONFIGS), Some(4));
        assert_eq!(versions.max_version(api_key::FETCH), None);
        assert_eq!(versions.produce(), Some(13));
        assert_eq!(versions.describe_configs(), Some(4));
        let view = client.metadata().await.unwrap();
        assert_eq!(view.topics, ["t"]);
        assert_eq!(view.brokers.len(), 1);
        assert_eq!(view.brokers[0].node_id, 3);
        assert_eq!(view.brokers[0].address(), addr);
    }

    #[tokio::test]
    async fn each_step_is_reported_and_later_ones_are_not_tried() {
        let closed = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let refused = closed.local_addr().unwrap().to_string();
        drop(closed);
        let open = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let listening = open.local_addr().unwrap().to_string();
        let settings = ProxySettings::for_tests(
            "127.0.0.1:0".parse().unwrap(),
            "127.0.0.1".into(),
            19100,
            vec![refused.clone()],
        );
        let connector = ClusterConnector::new(&settings).unwrap();
        let down = connector.check(&refused).await;
        assert!(matches!(down.tcp, Stage::Failed(_)), "{down:?}");
        assert_eq!((down.tls, down.sasl), (Stage::NotTried, Stage::NotTried));
        assert!(!connector.check(&refused).await.reachable());
        let up = connector.check(&listening).await;
        assert_eq!(up.tcp, Stage::Ok);
        assert_eq!(
            (&up.tls, &up.sasl),
            (&Stage::NotConfigured, &Stage::NotConfigured)
        );
        assert!(up.reachable());
        assert!(connector.connect(&refused).await.is_err());
    }

    #[test]
    fn ipv6_hosts_get_brackets() {
        let broker = AdvertisedBroker {
            node_id: 1,
            host: "::1".into(),
            port: 9092,
        };
        assert_eq!(broker.address(), "[::1]:9092");
    }
}
