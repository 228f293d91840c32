//! A readiness probe of the brokers: a side connection to a bootstrap server (TCP, TLS
//! as `[upstream.tls]` says, no login) and one ApiVersions request, which brokers
//! answer before any SASL login. An answer counts in [`ProxyStatus`] like any other,
//! so an idle proxy stays ready while its brokers answer.

use std::sync::Arc;
use std::time::Duration;

use kpress_protocol::api_key;
use kpress_protocol::frame::SIZE_PREFIX_LEN;

use super::SideChannel;
use crate::budget::{Budget, Direction};
use crate::frame_io::FrameLimits;
use crate::settings::UpstreamSettings;
use crate::status::ProxyStatus;
use crate::tls::ClientTls;
use crate::transport::Connector;

/// Time for the request to be written and its answer read once connected.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(5);
/// An ApiVersions answer lists every API once: a few KiB even with tagged fields.
const MAX_ANSWER_BYTES: usize = 64 << 10;
const CORRELATION_ID: i32 = 0x6b70_7262;
const CLIENT_ID: &[u8] = b"kpress-probe";

/// Why no bootstrap server answered a probe.
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    #[error("[upstream.tls] does not load: {0}")]
    Tls(#[from] crate::tls::TlsError),
    #[error("no bootstrap server answered: {0}")]
    NoAnswer(String),
}

/// Asks the bootstrap servers in order until one answers an ApiVersions request (any
/// well-formed answer, an error code included, is an answer); records it in `status`
/// and returns that server.
pub async fn probe_upstream(
    settings: &UpstreamSettings,
    status: &ProxyStatus,
) -> Result<String, ProbeError> {
    // Loaded per probe: probes are rare (one per readiness window at most when idle),
    // and a fresh load sees rotated certificates without a reload hook of its own.
    let tls = ClientTls::load_shared(settings.tls.clone())?;
    let side = probe_channel(settings, Connector::new(tls));
    let mut failures = Vec::new();
    for server in &settings.bootstrap_servers {
        match ask(&side, server).await {
            Ok(()) => {
                status.upstream_answered();
                return Ok(server.clone());
            }
            Err(err) => failures.push(format!("{server}: {err}")),
        }
    }
    Err(ProbeError::NoAnswer(failures.join("; ")))
}

/// A side channel reading only an ApiVersions answer's worth, within
/// [`ANSWER_TIMEOUT`]. Its own status: the caller's counts an answer once checked.
fn probe_channel(settings: &UpstreamSettings, connector: Connector) -> SideChannel {
    let limits = FrameLimits {
        max_frame_bytes: MAX_ANSWER_BYTES,
        frame_timeout: ANSWER_TIMEOUT,
    };
    let responses = Budget::new(2 * (MAX_ANSWER_BYTES + SIZE_PREFIX_LEN))
        .pool(Direction::Response)
        .clone();
    SideChannel::within(settings, limits, connector, responses, Arc::default())
}

async fn ask(side: &SideChannel, server: &str) -> Result<(), String> {
    let mut stream = side.connect_only(server).await.map_err(|e| e.to_string())?;
    let request = api_versions_v0_request();
    let answer = side.send_frame(&mut stream, &request, api_key::API_VERSIONS, 0);
    let body = match tokio::time::timeout(ANSWER_TIMEOUT, answer).await {
        Ok(result) => result.map_err(|e| e.to_string())?,
        Err(_) => return Err(format!("no ApiVersions answer within {ANSWER_TIMEOUT:?}")),
    };
    check_answer(&body)
}

/// ApiVersions v0 (every Kafka version answers it): header v1, empty body.
pub(crate) fn api_versions_v0_request() -> Vec<u8> {
    let mut body = Vec::with_capacity(10 + CLIENT_ID.len());
    body.extend_from_slice(&api_key::API_VERSIONS.to_be_bytes());
    body.extend_from_slice(&0i16.to_be_bytes());
    body.extend_from_slice(&CORRELATION_ID.to_be_bytes());
    body.extend_from_slice(&(CLIENT_ID.len() as i16).to_be_bytes());
    body.extend_from_slice(CLIENT_ID);
    let mut frame = Vec::with_capacity(SIZE_PREFIX_LEN + body.len());
    frame.extend_from_slice(&(body.len() as i32).to_be_bytes());
    frame.extend_from_slice(&body);
    frame
}

/// An answer to our request (the side channel checked its correlation id): at least
/// the error code.
fn check_answer(body: &[u8]) -> Result<(), String> {
    if body.len() < 2 {
        return Err("ApiVersions answer without an error code".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use kpress_protocol::frame::frame_body_len;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[test]
    fn the_request_is_one_api_versions_v0_frame() {
        let frame = api_versions_v0_request();
        let len = frame_body_len(frame[..4].try_into().unwrap(), 1024).unwrap();
        assert_eq!(len, frame.len() - 4);
        let header = kpress_protocol::frame::peek_request_header(&frame[4..]).unwrap();
        assert_eq!(header.api_key, api_key::API_VERSIONS);
        assert_eq!(header.api_version, 0);
        assert_eq!(header.correlation_id, CORRELATION_ID);
    }

    /// A broker stand-in answering one ApiVersions request with `correlation_id`
    /// (the request's when `None`) and an error code.
    async fn stand_in(correlation_id: Option<i32>) -> std::net::SocketAddr {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            let (mut socket, _) = listener.accept().await.unwrap();
            let mut request = vec![0u8; api_versions_v0_request().len()];
            socket.read_exact(&mut request).await.unwrap();
            let mut answer = 6i32.to_be_bytes().to_vec();
            match correlation_id {
                Some(id) => answer.extend_from_slice(&id.to_be_bytes()),
                None => answer.extend_from_slice(&request[8..12]),
            }
            answer.extend_from_slice(&0i16.to_be_bytes());
            socket.write_all(&answer).await.unwrap();
        });
        addr
    }

    #[tokio::test]
    async fn a_listening_broker_stand_in_answering_is_recorded() {
        let addr = stand_in(None).await;
        let closed = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let refused = closed.local_addr().unwrap();
        drop(closed);
        let settings = UpstreamSettings {
            bootstrap_servers: vec![refused.to_string(), addr.to_string()],
            tls: None,
            login: None,
        };
        let status = ProxyStatus::default();
        let answered = probe_upstream(&settings, &status).await.unwrap();
        assert_eq!(answered, addr.to_string());
        assert!(status.since_upstream_answer().is_some());

        let settings = UpstreamSettings {
            bootstrap_servers: vec![refused.to_string()],
            ..settings
        };
        let err = probe_upstream(&settings, &ProxyStatus::default())
            .await
            .unwrap_err();
        assert!(err.to_string().contains(&refused.to_string()), "{err}");
    }

    #[tokio::test]
    async fn only_an_answer_to_this_request_counts() {
        assert!(check_answer(&35i16.to_be_bytes()).is_ok());
        assert!(check_answer(&[0]).is_err());
        let other = stand_in(Some(7)).await;
        let settings = UpstreamSettings {
            bootstrap_servers: vec![other.to_string()],
            tls: None,
            login: None,
        };
        let status = ProxyStatus::default();
        let err = probe_upstream(&settings, &status).await.unwrap_err();
        assert!(err.to_string().contains("correlation id 7"), "{err}");
        assert!(status.since_upstream_answer().is_none());
    }
}
