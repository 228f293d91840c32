//! kpress's own SASL/OAUTHBEARER login on a side connection, after SaslHandshake:
//! one SaslAuthenticate with the RFC 7628 initial response carrying a token from
//! [`BearerTokens`]; on a refusal, the broker's JSON error is acknowledged as the RFC
//! asks and reported.

use std::time::Duration;

use kpress_auth::BearerTokens;
use kpress_protocol::api_key;
use kpress_protocol::sasl::{self, oauthbearer};
use tokio::io::{AsyncRead, AsyncWrite};

use super::{exchange, next_correlation_id, session_lifetime, CLIENT_ID};
use crate::budget::ConnectionPool;
use crate::error::ConnectionError;
use crate::frame_io::FrameLimits;

/// Logs in with a token from `tokens`; the broker's session lifetime (KIP-368), which
/// is at most the token's remaining life.
pub(crate) async fn authenticate<S: AsyncRead + AsyncWrite + Unpin>(
    stream: &mut S,
    tokens: &BearerTokens,
    limits: FrameLimits,
    share: &ConnectionPool,
) -> Result<Option<Duration>, ConnectionError> {
    let failed = |text: String| ConnectionError::SideAuthentication(text);
    let token = tokens
        .token()
        .await
        .map_err(|err| failed(format!("no OAUTHBEARER token: {err}")))?;
    let first = oauthbearer::initial_response(token.secret(), &[])
        .map_err(|err| failed(err.to_string()))?;
    let body = send(stream, &first, limits, share).await?;
    let answer = sasl::parse_authenticate_response(sasl::SASL_AUTHENTICATE_VERSION, &body)
        .map_err(|err| failed(err.to_string()))?;
    if answer.is_empty() {
        return Ok(session_lifetime(&body));
    }
    // A JSON error: the broker fails the exchange once the client acknowledges it.
    let error = oauthbearer::server_error(&answer);
    let verdict = match send(stream, oauthbearer::FAILURE_ACKNOWLEDGEMENT, limits, share).await {
        Ok(body) => {
            match sasl::parse_authenticate_response(sasl::SASL_AUTHENTICATE_VERSION, &body) {
                Err(err) => err.to_string(),
                Ok(_) => "the broker did not end the exchange".to_owned(),
            }
        }
        Err(err) => err.to_string(),
    };
    Err(failed(format!(
        "the broker refused kpress's OAUTHBEARER token ({}): {error}; {verdict}",
        tokens.source().describe()
    )))
}

async fn send<S: AsyncRead + AsyncWrite + Unpin>(
    stream: &mut S,
    auth_bytes: &[u8],
    limits: FrameLimits,
    share: &ConnectionPool,
) -> Result<Vec<u8>, ConnectionError> {
    let request = sasl::authenticate_request(next_correlation_id(), CLIENT_ID, auth_bytes)
        .map_err(|err| ConnectionError::SideAuthentication(err.to_string()))?;
    exchange(
        stream,
        &request,
        api_key::SASL_AUTHENTICATE,
        sasl::SASL_AUTHENTICATE_VERSION,
        limits,
        share,
    )
    .await
}
