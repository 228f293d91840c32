//! MSK IAM tokens from the standard AWS credential environment.

use std::path::PathBuf;
use std::time::SystemTime;

use time::OffsetDateTime;

use crate::sigv4::{self, AwsCredentials};
use crate::sts::{Assumed, WebIdentity};
use crate::{after, AuthError, BearerToken, REFRESH_FRACTION};

/// An MSK IAM token maker for one region.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MskIam {
    pub region: String,
    /// The `User-Agent` query parameter of the token, which MSK logs.
    pub user_agent: String,
}

impl MskIam {
    /// A token signed now with the environment's credentials (read at each new token,
    /// so a rotated environment is picked up by the next one). Web-identity
    /// credentials from STS are kept in `assumed` until 80% of their life.
    pub(crate) async fn token(
        &self,
        http: &reqwest::Client,
        assumed: &mut Option<Assumed>,
        now: SystemTime,
    ) -> Result<BearerToken, AuthError> {
        self.token_with(http, assumed, now, |name| std::env::var(name).ok())
            .await
    }

    /// [`Self::token`] with the environment read through `var`.
    async fn token_with(
        &self,
        http: &reqwest::Client,
        assumed: &mut Option<Assumed>,
        now: SystemTime,
        var: impl Fn(&str) -> Option<String>,
    ) -> Result<BearerToken, AuthError> {
        let (credentials, credentials_expire) = match credential_source_from_env(var)? {
            AwsCredentialSource::Environment(credentials) => (credentials, None),
            AwsCredentialSource::WebIdentity(identity) => {
                let fresh = assumed.as_ref().is_some_and(|a| {
                    let life = a
                        .expires_at
                        .duration_since(a.obtained_at)
                        .unwrap_or_default();
                    now < a.obtained_at + life.mul_f64(REFRESH_FRACTION)
                });
                if !fresh {
                    *assumed = Some(identity.assume(http, &self.region, now).await?);
                }
                let a = assumed.as_ref().expect("assumed above");
                (a.credentials.clone(), Some(a.expires_at))
            }
        };
        let at = OffsetDateTime::from(now);
        let token = sigv4::msk_token(&self.region, &credentials, at, &self.user_agent);
        // The signature is worth nothing once the credentials that made it expire.
        let expires_at = after(now, sigv4::MSK_TOKEN_EXPIRES_SECONDS.into())
            .map(|at| credentials_expire.map_or(at, |c| at.min(c)));
        BearerToken::new(token, now, expires_at)
    }
}

/// Where MSK IAM signing credentials come from, in the order AWS's SDKs look.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AwsCredentialSource {
    /// `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`.
    Environment(AwsCredentials),
    /// `AWS_WEB_IDENTITY_TOKEN_FILE` and `AWS_ROLE_ARN` (optionally
    /// `AWS_ROLE_SESSION_NAME`, `AWS_ENDPOINT_URL_STS`): STS AssumeRoleWithWebIdentity.
    WebIdentity(WebIdentity),
}

/// The credential source the environment describes: static keys first, then a web
/// identity.
pub fn credential_source_from_env(
    var: impl Fn(&str) -> Option<String>,
) -> Result<AwsCredentialSource, AuthError> {
    let set = |name: &str| var(name).filter(|v| !v.is_empty());
    let keys_set = set("AWS_ACCESS_KEY_ID").is_some() || set("AWS_SECRET_ACCESS_KEY").is_some();
    match (
        keys_set,
        set("AWS_WEB_IDENTITY_TOKEN_FILE"),
        set("AWS_ROLE_ARN"),
    ) {
        (false, Some(file), Some(role_arn)) => Ok(AwsCredentialSource::WebIdentity(WebIdentity {
            token_file: PathBuf::from(file),
            role_arn,
            session_name: set("AWS_ROLE_SESSION_NAME").unwrap_or_else(|| "kpress".to_owned()),
            endpoint: set("AWS_ENDPOINT_URL_STS"),
        })),
        (false, Some(_), None) => Err(AuthError::AwsCredentials(
            "AWS_WEB_IDENTITY_TOKEN_FILE is set but AWS_ROLE_ARN is not: which role would \
             kpress assume?"
                .into(),
        )),
        _ => credentials_from_env(var).map(AwsCredentialSource::Environment),
    }
}

/// Credentials from `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY` and, for temporary
/// ones, `AWS_SESSION_TOKEN`.
pub fn credentials_from_env(
    var: impl Fn(&str) -> Option<String>,
) -> Result<AwsCredentials, AuthError> {
    let set = |name: &str| var(name).filter(|v| !v.is_empty());
    match (set("AWS_ACCESS_KEY_ID"), set("AWS_SECRET_ACCESS_KEY")) {
        (Some(access_key_id), Some(secret_access_key)) => Ok(AwsCredentials {
            access_key_id,
            secret_access_key,
            session_token: set("AWS_SESSION_TOKEN"),
        }),
        (Some(_), None) => Err(AuthError::AwsCredentials(
            "AWS_ACCESS_KEY_ID is set but AWS_SECRET_ACCESS_KEY is not".into(),
        )),
        (None, Some(_)) => Err(AuthError::AwsCredentials(
            "AWS_SECRET_ACCESS_KEY is set but AWS_ACCESS_KEY_ID is not".into(),
        )),
        (None, None) => Err(AuthError::AwsCredentials(
            "set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN for \
             temporary credentials), or AWS_WEB_IDENTITY_TOKEN_FILE and AWS_ROLE_ARN, in \
             kpress's environment"
                .into(),
        )),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::sync::Arc;

    use base64::engine::general_purpose::URL_SAFE_NO_PAD;
    use base64::Engine;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    use super::*;

    /// A stand-in STS answering every request with `answer`; the requests' first lines
    /// and how many came.
    async fn sts(answer: String) -> (String, Arc<std::sync::Mutex<Vec<String>>>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
        let log = seen.clone();
        tokio::spawn(async move {
            loop {
                let (mut stream, _) = listener.accept().await.unwrap();
                let mut request = Vec::new();
                let mut buf = [0u8; 4096];
                while !request.ends_with(b"\r\n\r\n") {
                    let n = stream.read(&mut buf).await.unwrap();
                    if n == 0 {
                        break;
                    }
                    request.extend_from_slice(&buf[..n]);
                }
                let text = String::from_utf8_lossy(&request);
                log.lock()
                    .unwrap()
                    .push(text.lines().next().unwrap_or("").to_owned());
                let response = format!(
                    "HTTP/1.1 200 OK\r\nContent-Type: text/xml\r\nContent-Length: {}\r\n\r\n{answer}",
                    answer.len()
                );
                stream.write_all(response.as_bytes()).await.unwrap();
                stream.shutdown().await.unwrap();
            }
        });
        (url, seen)
    }

    #[tokio::test]
    async fn a_web_identity_is_exchanged_with_sts_and_its_credentials_sign() {
        let (url, seen) = sts(crate::sts::tests::ANSWER.to_owned()).await;
        let dir = tempfile::tempdir().unwrap();
        let token_file = dir.path().join("token");
        std::fs::write(&token_file, "eyJ.web-identity.sig\n").unwrap();
        let vars = env(&[
            ("AWS_WEB_IDENTITY_TOKEN_FILE", token_file.to_str().unwrap()),
            ("AWS_ROLE_ARN", "arn:aws:iam::123456789012:role/kpress"),
            ("AWS_ENDPOINT_URL_STS", &url),
        ]);
        let msk = MskIam {
            region: "eu-west-1".into(),
            user_agent: "kpress/test".into(),
        };
        let http = crate::client_credentials::http_client().unwrap();
        let mut assumed = None;
        // An hour before the answer's Expiration (2026-11-25T23:00:23Z).
        let now: SystemTime = OffsetDateTime::parse(
            "2026-11-25T22:00:23Z",
            &time::format_description::well_known::Rfc3339,
        )
        .unwrap()
        .into();
        let token = msk
            .token_with(&http, &mut assumed, now, &vars)
            .await
            .unwrap();
        let url_signed =
            String::from_utf8(URL_SAFE_NO_PAD.decode(token.secret()).unwrap()).unwrap();
        assert!(
            url_signed.contains("X-Amz-Credential=ASgeIAIOSFODNN7EXAMPLE%2F20261125%2Feu-west-1%2Fkafka-cluster%2Faws4_request")
                && url_signed.contains("X-Amz-Security-Token=AQoDYXdzEE0a8ANXXXXXXXXNO1ewxE5TijQyp%2BIEXAMPLE"),
            "{url_signed}"
        );
        // Reused within 80% of their life: one STS call for two tokens.
        let later = now + std::time::Duration::from_secs(600);
        msk.token_with(&http, &mut assumed, later, &vars)
            .await
            .unwrap();
        let requests = seen.lock().unwrap().clone();
        assert_eq!(requests.len(), 1, "{requests:?}");
        assert_eq!(
            requests[0],
            "GET /?Action=AssumeRoleWithWebIdentity&RoleArn=arn%3Aaws%3Aiam%3A%3A123456789012%3Arole%2Fkpress&RoleSessionName=kpress&Version=2011-06-15&WebIdentityToken=eyJ.web-identity.sig HTTP/1.1"
        );
    }

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        move |name| map.get(name).cloned()
    }

    #[test]
    fn credentials_come_from_the_standard_variables() {
        let creds = credentials_from_env(env(&[
            ("AWS_ACCESS_KEY_ID", "AKID"),
            ("AWS_SECRET_ACCESS_KEY", "secret"),
            ("AWS_SESSION_TOKEN", "session"),
        ]))
        .unwrap();
        assert_eq!(creds.session_token.as_deref(), Some("session"));
        let creds = credentials_from_env(env(&[
            ("AWS_ACCESS_KEY_ID", "AKID"),
            ("AWS_SECRET_ACCESS_KEY", "secret"),
            ("AWS_SESSION_TOKEN", ""),
        ]))
        .unwrap();
        assert_eq!(creds.session_token, None);
    }

    #[test]
    fn missing_and_unsupported_sources_are_named() {
        for (vars, says) in [
            (&[][..], "set AWS_ACCESS_KEY_ID"),
            (
                &[("AWS_ACCESS_KEY_ID", "A")][..],
                "AWS_SECRET_ACCESS_KEY is not",
            ),
            (
                &[("AWS_WEB_IDENTITY_TOKEN_FILE", "/var/run/token")][..],
                "AWS_ROLE_ARN is not",
            ),
        ] {
            let err = credential_source_from_env(env(vars))
                .unwrap_err()
                .to_string();
            assert!(err.contains(says), "{err}");
        }
        // Static keys win over a web identity, as in AWS's SDKs.
        let both = credential_source_from_env(env(&[
            ("AWS_ACCESS_KEY_ID", "AKID"),
            ("AWS_SECRET_ACCESS_KEY", "secret"),
            ("AWS_WEB_IDENTITY_TOKEN_FILE", "/var/run/token"),
            ("AWS_ROLE_ARN", "arn"),
        ]))
        .unwrap();
        assert!(matches!(both, AwsCredentialSource::Environment(_)));
        let identity = credential_source_from_env(env(&[
            ("AWS_WEB_IDENTITY_TOKEN_FILE", "/var/run/token"),
            ("AWS_ROLE_ARN", "arn:aws:iam::1:role/r"),
            ("AWS_ROLE_SESSION_NAME", "kpress-pod-1"),
        ]))
        .unwrap();
        assert_eq!(
            identity,
            AwsCredentialSource::WebIdentity(WebIdentity {
                token_file: "/var/run/token".into(),
                role_arn: "arn:aws:iam::1:role/r".into(),
                session_name: "kpress-pod-1".into(),
                endpoint: None,
            })
        );
    }
}
