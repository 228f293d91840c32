//! Bearer tokens for kpress's own SASL/OAUTHBEARER login to brokers.
//!
//! Three sources, one [`BearerTokens`] in front of them:
//!
//! - an OAuth 2 token endpoint, client-credentials grant ([`ClientCredentials`]);
//! - a token file another program keeps fresh, such as a Kubernetes projected token,
//!   re-read when it changes ([`TokenSource::File`]);
//! - AWS MSK IAM: a SigV4-presigned `kafka-cluster:Connect` request signed with
//!   credentials from the environment's keys, or from STS for a web identity (EKS)
//!   ([`MskIam`], [`AwsCredentialSource`]).
//!
//! A token is reused until [`REFRESH_FRACTION`] of its lifetime has passed, then
//! fetched anew, so that a login never presents a token about to expire.

mod aws;
mod client_credentials;
mod jwt;
pub mod sigv4;
mod sts;
mod token_file;

use std::fmt;
use std::path::PathBuf;
use std::time::{Duration, SystemTime};

pub use aws::{credential_source_from_env, credentials_from_env, AwsCredentialSource, MskIam};
pub use client_credentials::{ClientCredentials, MAX_TOKEN_RESPONSE_BYTES, TOKEN_REQUEST_TIMEOUT};
pub use sigv4::AwsCredentials;
pub use sts::WebIdentity;

/// The share of a token's lifetime after which a new one is fetched (Kafka's Java
/// client refreshes at 80% too).
pub const REFRESH_FRACTION: f64 = 0.8;

/// Why no token could be had. Messages name where the token was sought, never a
/// secret.
#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    #[error("cannot build the HTTPS client for token requests: {0}")]
    HttpClient(String),
    #[error("token endpoint {url}: {problem}")]
    TokenEndpoint { url: String, problem: String },
    #[error("token file {path}: {problem}")]
    TokenFile { path: PathBuf, problem: String },
    #[error("AWS credentials: {0}")]
    AwsCredentials(String),
    #[error("the token {0}")]
    InvalidToken(&'static str),
}

/// A bearer token and when it stops being valid, if known. `Debug` hides the token.
#[derive(Clone, PartialEq, Eq)]
pub struct BearerToken {
    value: String,
    obtained_at: SystemTime,
    expires_at: Option<SystemTime>,
}

impl BearerToken {
    /// A token obtained `obtained_at`, valid until `expires_at` if known. Refused when
    /// empty or when it holds what OAUTHBEARER cannot carry (control characters,
    /// spaces: RFC 6750's b64token has neither).
    pub fn new(
        value: String,
        obtained_at: SystemTime,
        expires_at: Option<SystemTime>,
    ) -> Result<Self, AuthError> {
        if value.is_empty() {
            return Err(AuthError::InvalidToken("is empty"));
        }
        if value.bytes().any(|b| !(0x21..0x7f).contains(&b)) {
            return Err(AuthError::InvalidToken(
                "holds a space, a control character or a non-ASCII byte",
            ));
        }
        Ok(BearerToken {
            value,
            obtained_at,
            expires_at,
        })
    }

    /// The token itself: for the SASL exchange only, never for logs.
    pub fn secret(&self) -> &str {
        &self.value
    }

    pub fn expires_at(&self) -> Option<SystemTime> {
        self.expires_at
    }

    /// When a new token should be fetched: [`REFRESH_FRACTION`] into its lifetime, or
    /// `None` when the lifetime is unknown (then every login fetches anew).
    pub fn refresh_at(&self) -> Option<SystemTime> {
        let lifetime = self.expires_at?.duration_since(self.obtained_at).ok()?;
        Some(self.obtained_at + lifetime.mul_f64(REFRESH_FRACTION))
    }

    fn fresh_at(&self, now: SystemTime) -> bool {
        self.refresh_at().is_some_and(|at| now < at)
    }
}

impl fmt::Debug for BearerToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BearerToken")
            .field("value", &"<redacted>")
            .field("expires_at", &self.expires_at)
            .finish()
    }
}

/// Where tokens come from.
#[derive(Debug, Clone)]
pub enum TokenSource {
    ClientCredentials(ClientCredentials),
    /// A file holding the token (surrounding whitespace ignored).
    File(PathBuf),
    AwsMskIam(MskIam),
}

impl TokenSource {
    /// What the source is, for logs: no secret.
    pub fn describe(&self) -> String {
        match self {
            TokenSource::ClientCredentials(c) => {
                format!(
                    "client credentials of {:?} at {}",
                    c.client_id, c.token_endpoint_url
                )
            }
            TokenSource::File(path) => format!("token file {}", path.display()),
            TokenSource::AwsMskIam(msk) => format!("AWS MSK IAM in {}", msk.region),
        }
    }
}

/// Tokens from one [`TokenSource`], cached until their refresh time.
pub struct BearerTokens {
    source: TokenSource,
    http: Option<reqwest::Client>,
    cached: tokio::sync::Mutex<Cache>,
}

#[derive(Default)]
struct Cache {
    token: Option<BearerToken>,
    file: token_file::Seen,
    /// MSK IAM with a web identity: the role's credentials from STS.
    assumed: Option<sts::Assumed>,
}

impl fmt::Debug for BearerTokens {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BearerTokens")
            .field("source", &self.source.describe())
            .finish_non_exhaustive()
    }
}

impl BearerTokens {
    pub fn new(source: TokenSource) -> Result<Self, AuthError> {
        let http = match &source {
            TokenSource::ClientCredentials(_) | TokenSource::AwsMskIam(_) => {
                Some(client_credentials::http_client()?)
            }
            TokenSource::File(_) => None,
        };
        Ok(BearerTokens {
            source,
            http,
            cached: tokio::sync::Mutex::new(Cache::default()),
        })
    }

    pub fn source(&self) -> &TokenSource {
        &self.source
    }

    /// A token for a login now: the cached one while it is fresh, else a new one.
    pub async fn token(&self) -> Result<BearerToken, AuthError> {
        let mut cache = self.cached.lock().await;
        let now = SystemTime::now();
        match &self.source {
            TokenSource::File(path) => {
                // A changed file wins over a cached token, whatever its age.
                let (token, seen) = token_file::read_if_changed(path, &cache.file, now).await?;
                cache.file = seen;
                if let Some(token) = token {
                    cache.token = Some(token);
                }
                cache
                    .token
                    .clone()
                    .ok_or(AuthError::InvalidToken("file was never read"))
            }
            _ => {
                if let Some(token) = cache.token.as_ref().filter(|t| t.fresh_at(now)) {
                    return Ok(token.clone());
                }
                let token = match &self.source {
                    TokenSource::ClientCredentials(c) => {
                        let http = self.http.as_ref().expect("built for client credentials");
                        c.fetch(http, now).await?
                    }
                    TokenSource::AwsMskIam(msk) => {
                        let http = self.http.as_ref().expect("built for MSK IAM");
                        msk.token(http, &mut cache.assumed, now).await?
                    }
                    TokenSource::File(_) => unreachable!("handled above"),
                };
                tracing::debug!(
                    source = %self.source.describe(),
                    expires_in_s = token
                        .expires_at()
                        .and_then(|at| at.duration_since(now).ok())
                        .map(|d| d.as_secs()),
                    "new bearer token for kpress's own login"
                );
                cache.token = Some(token.clone());
                Ok(token)
            }
        }
    }
}

/// `seconds` from `now`, saturating.
fn after(now: SystemTime, seconds: u64) -> Option<SystemTime> {
    now.checked_add(Duration::from_secs(seconds))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_refresh_at_eighty_percent_of_their_life() {
        let start = SystemTime::UNIX_EPOCH + Duration::from_secs(1000);
        let token = BearerToken::new("t".into(), start, after(start, 100)).unwrap();
        assert_eq!(token.refresh_at(), after(start, 80));
        assert!(token.fresh_at(start + Duration::from_secs(79)));
        assert!(!token.fresh_at(start + Duration::from_secs(80)));
        let unknown = BearerToken::new("t".into(), start, None).unwrap();
        assert!(!unknown.fresh_at(start));
    }

    #[test]
    fn tokens_oauthbearer_cannot_carry_are_refused() {
        let now = SystemTime::now();
        for bad in ["", "a b", "a\u{1}b", "é"] {
            assert!(BearerToken::new(bad.into(), now, None).is_err(), "{bad:?}");
        }
        let token = BearerToken::new("eyJ.abc-_~+/=".into(), now, None).unwrap();
        assert!(!format!("{token:?}").contains("eyJ"));
    }
}
