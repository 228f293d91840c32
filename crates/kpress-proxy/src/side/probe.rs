//! A readiness probe of the brokers: kpress's own connection to a bootstrap server (TCP,
//! TLS as `[upstream.tls]` says) and one ApiVersions request, which brokers answer
//! before any SASL login. An answer counts in [`ProxyStatus`] like any other, so an
//! idle proxy stays ready while its brokers answer.

use std::time::Duration;

use kpress_protocol::api_key;
use kpress_protocol::frame::{frame_body_len, response_correlation_id, SIZE_PREFIX_LEN};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

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
    let connector = Connector::new(tls);
    let mut failures = Vec::new();
    for server in &settings.bootstrap_servers {
        match ask(&connector, server).await {
            Ok(()) => {
                status.upstream_answered();
                return Ok(server.clone());
            }
            Err(err) => failures.push(format!("{server}: {err}")),
        }
    }
    Err(ProbeError::NoAnswer(failures.join("; ")))
}

async fn ask(connector: &Connector, server: &str) -> Result<(), String> {
    let mut stream = connector.connect(server).await.map_err(|e| e.to_string())?;
    let exchange = async {
        stream.write_all(&api_versions_v0_request()).await?;
        stream.flush().await?;
        let mut prefix = [0u8; SIZE_PREFIX_LEN];
        stream.read_exact(&mut prefix).await?;
        let len = frame_body_len(prefix, MAX_ANSWER_BYTES)
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))?;
        let mut body = vec![0u8; len];
        stream.read_exact(&mut body).await?;
        Ok::<_, std::io::Error>(body)
    };
    let body = match tokio::time::timeout(ANSWER_TIMEOUT, exchange).await {
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

/// An answer to our request: our correlation id, then at least the error code.
fn check_answer(body: &[u8]) -> Result<(), String> {
    let received = response_correlation_id(body).map_err(|e| e.to_string())?;
    if received != CORRELATION_ID {
        return Err(format!(
            "answered correlation id {received}, not {CORRELATION_ID}"
        ));
    }
    if body.len() < 6 {
        return Err("ApiVersions answer without an error code".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn only_an_answer_to_this_request_counts() {
        let mut answer = CORRELATION_ID.to_be_bytes().to_vec();
        answer.extend_from_slice(&35i16.to_be_bytes());
        assert!(check_answer(&answer).is_ok());
        assert!(check_answer(&answer[..4]).is_err());
        let mut other = 7i32.to_be_bytes().to_vec();
        other.extend_from_slice(&0i16.to_be_bytes());
        assert!(check_answer(&other)
            .unwrap_err()
            .contains("correlation id 7"));
    }

    #[tokio::test]
    async fn a_listening_broker_stand_in_answering_is_recorded() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            let (mut socket, _) = listener.accept().await.unwrap();
            let mut request = vec![0u8; api_versions_v0_request().len()];
            socket.read_exact(&mut request).await.unwrap();
            let mut answer = 6i32.to_be_bytes().to_vec();
            answer.extend_from_slice(&request[8..12]);
            answer.extend_from_slice(&0i16.to_be_bytes());
            socket.write_all(&answer).await.unwrap();
        });
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
}
