//! AWS STS `AssumeRoleWithWebIdentity`: temporary credentials for a role, in exchange
//! for a web identity token (on EKS, the projected service-account token named by
//! `AWS_WEB_IDENTITY_TOKEN_FILE`). The call is unsigned: the token is the proof.

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use quick_xml::events::Event;
use quick_xml::Reader;
use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;

use crate::client_credentials::{bounded, read_bounded, without_url};
use crate::sigv4::{uri_encode, AwsCredentials};
use crate::AuthError;

/// Largest web identity token file read.
const MAX_TOKEN_FILE_BYTES: u64 = 64 * 1024;

/// A role to assume with a web identity token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebIdentity {
    /// `AWS_WEB_IDENTITY_TOKEN_FILE`, read at each call (kubelet rotates it).
    pub token_file: PathBuf,
    /// `AWS_ROLE_ARN`.
    pub role_arn: String,
    /// `AWS_ROLE_SESSION_NAME`, or `kpress`.
    pub session_name: String,
    /// `AWS_ENDPOINT_URL_STS`, or STS's regional endpoint.
    pub endpoint: Option<String>,
}

/// Credentials STS gave, with their expiration.
#[derive(Debug, Clone)]
pub(crate) struct Assumed {
    pub(crate) credentials: AwsCredentials,
    pub(crate) obtained_at: SystemTime,
    pub(crate) expires_at: SystemTime,
}

impl WebIdentity {
    fn endpoint(&self, region: &str) -> String {
        match &self.endpoint {
            Some(url) => url.trim_end_matches('/').to_owned(),
            None => format!("https://sts.{region}.amazonaws.com"),
        }
    }

    /// Calls STS in `region` for the role's credentials.
    pub(crate) async fn assume(
        &self,
        http: &reqwest::Client,
        region: &str,
        now: SystemTime,
    ) -> Result<Assumed, AuthError> {
        let endpoint = self.endpoint(region);
        let failed = |problem: String| {
            AuthError::AwsCredentials(format!(
                "STS AssumeRoleWithWebIdentity at {endpoint} for {}: {problem}",
                self.role_arn
            ))
        };
        let token = read_token(&self.token_file).await.map_err(&failed)?;
        let query = [
            ("Action", "AssumeRoleWithWebIdentity"),
            ("RoleArn", self.role_arn.as_str()),
            ("RoleSessionName", self.session_name.as_str()),
            ("Version", "2011-06-15"),
            ("WebIdentityToken", token.as_str()),
        ]
        .iter()
        .map(|(k, v)| format!("{k}={}", uri_encode(v)))
        .collect::<Vec<_>>()
        .join("&");
        let mut response = http
            .get(format!("{endpoint}/?{query}"))
            .send()
            .await
            .map_err(|err| failed(format!("request failed: {}", without_url(&err))))?;
        let status = response.status();
        let body = read_bounded(&mut response).await.map_err(&failed)?;
        let text = String::from_utf8_lossy(&body);
        if !status.is_success() {
            return Err(failed(format!("HTTP {status}: {}", bounded(&text))));
        }
        parse_credentials(&text, now).map_err(failed)
    }
}

async fn read_token(path: &Path) -> Result<String, String> {
    let shown = path.display();
    let meta = tokio::fs::metadata(path)
        .await
        .map_err(|err| format!("cannot read the web identity token file {shown}: {err}"))?;
    if meta.len() > MAX_TOKEN_FILE_BYTES {
        return Err(format!(
            "the web identity token file {shown} is larger than {MAX_TOKEN_FILE_BYTES} bytes"
        ));
    }
    let text = tokio::fs::read_to_string(path)
        .await
        .map_err(|err| format!("cannot read the web identity token file {shown}: {err}"))?;
    let token = text.trim();
    if token.is_empty() {
        return Err(format!("the web identity token file {shown} is empty"));
    }
    Ok(token.to_owned())
}

/// The `Credentials` of an `AssumeRoleWithWebIdentityResponse`.
fn parse_credentials(xml: &str, now: SystemTime) -> Result<Assumed, String> {
    let mut reader = Reader::from_str(xml);
    let mut inside_credentials = false;
    let mut current: Option<String> = None;
    let (mut access, mut secret, mut session, mut expiration) = (None, None, None, None);
    loop {
        match reader.read_event() {
            Ok(Event::Start(e)) => {
                let name = String::from_utf8_lossy(e.local_name().as_ref()).into_owned();
                if name == "Credentials" {
                    inside_credentials = true;
                }
                current = Some(name);
            }
            Ok(Event::End(e)) => {
                if e.local_name().as_ref() == b"Credentials" {
                    inside_credentials = false;
                }
                current = None;
            }
            Ok(Event::Text(t)) if inside_credentials => {
                let value = t
                    .decode()
                    .map_err(|err| format!("answer is not XML: {err}"))?
                    .trim()
                    .to_owned();
                match current.as_deref() {
                    Some("AccessKeyId") => access = Some(value),
                    Some("SecretAccessKey") => secret = Some(value),
                    Some("SessionToken") => session = Some(value),
                    Some("Expiration") => expiration = Some(value),
                    _ => {}
                }
            }
            Ok(Event::Eof) => break,
            Ok(_) => {}
            Err(err) => return Err(format!("answer is not XML: {err}")),
        }
    }
    let missing = |what: &str| format!("answer has no Credentials/{what}");
    let expiration = expiration.ok_or_else(|| missing("Expiration"))?;
    let expires_at: SystemTime = OffsetDateTime::parse(&expiration, &Rfc3339)
        .map_err(|err| format!("Expiration {expiration:?} is not an RFC 3339 time: {err}"))?
        .into();
    Ok(Assumed {
        credentials: AwsCredentials {
            access_key_id: access.ok_or_else(|| missing("AccessKeyId"))?,
            secret_access_key: secret.ok_or_else(|| missing("SecretAccessKey"))?,
            session_token: Some(session.ok_or_else(|| missing("SessionToken"))?),
        },
        obtained_at: now,
        expires_at,
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// The shape of STS's documented example answer.
    pub(crate) const ANSWER: &str = r#"<AssumeRoleWithWebIdentityResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/">
  <AssumeRoleWithWebIdentityResult>
    <SubjectFromWebIdentityToken>system:serviceaccount:kafka:kpress</SubjectFromWebIdentityToken>
    <AssumedRoleUser>
      <Arn>arn:aws:sts::123456789012:assumed-role/kpress/kpress</Arn>
      <AssumedRoleId>AROACLKWSDQRAOEXAMPLE:kpress</AssumedRoleId>
    </AssumedRoleUser>
    <Credentials>
      <SessionToken>AQoDYXdzEE0a8ANXXXXXXXXNO1ewxE5TijQyp+IEXAMPLE</SessionToken>
      <SecretAccessKey>wJalrXUtnFEMI/K7MDENG/bPxRfiCYzEXAMPLEKEY</SecretAccessKey>
      <Expiration>2026-11-25T23:00:23Z</Expiration>
      <AccessKeyId>ASgeIAIOSFODNN7EXAMPLE</AccessKeyId>
    </Credentials>
  </AssumeRoleWithWebIdentityResult>
  <ResponseMetadata><RequestId>ad4156e9-bce1-11e2-82e6-6b6efEXAMPLE</RequestId></ResponseMetadata>
</AssumeRoleWithWebIdentityResponse>"#;

    #[test]
    fn credentials_are_read_from_the_answer() {
        let assumed = parse_credentials(ANSWER, SystemTime::UNIX_EPOCH).unwrap();
        assert_eq!(assumed.credentials.access_key_id, "ASgeIAIOSFODNN7EXAMPLE");
        assert_eq!(
            assumed.credentials.secret_access_key,
            "wJalrXUtnFEMI/K7MDENG/bPxRfiCYzEXAMPLEKEY"
        );
        assert_eq!(
            assumed.credentials.session_token.as_deref(),
            Some("AQoDYXdzEE0a8ANXXXXXXXXNO1ewxE5TijQyp+IEXAMPLE")
        );
        let expected: SystemTime = OffsetDateTime::parse("2026-11-25T23:00:23Z", &Rfc3339)
            .unwrap()
            .into();
        assert_eq!(assumed.expires_at, expected);
    }

    #[test]
    fn incomplete_answers_are_refused() {
        for (xml, says) in [
            ("<a>", "no Credentials/Expiration"),
            (
                "<R><Credentials><Expiration>soon</Expiration></Credentials></R>",
                "not an RFC 3339 time",
            ),
            (
                "<R><Credentials><Expiration>2026-11-25T23:00:23Z</Expiration></Credentials></R>",
                "no Credentials/AccessKeyId",
            ),
        ] {
            let err = parse_credentials(xml, SystemTime::UNIX_EPOCH).unwrap_err();
            assert!(err.contains(says), "{xml}: {err}");
        }
    }
}
