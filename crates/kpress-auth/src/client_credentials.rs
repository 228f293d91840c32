//! OAuth 2 client-credentials grant (RFC 6749 section 4.4): POST to the token
//! endpoint with the client's id and secret in HTTP Basic authentication.

use std::fmt;
use std::time::{Duration, SystemTime};

use base64::engine::general_purpose::STANDARD;
use base64::Engine;

use crate::sigv4::uri_encode;
use crate::{after, jwt, AuthError, BearerToken};

/// Largest token response read; a longer one is refused.
pub const MAX_TOKEN_RESPONSE_BYTES: usize = 256 * 1024;
/// How long one token request may take, connection included.
pub const TOKEN_REQUEST_TIMEOUT: Duration = Duration::from_secs(15);
/// Longest error body an error message repeats.
const MAX_ERROR_CHARS: usize = 300;

/// A client of an OAuth 2 token endpoint. `Debug` hides the secret.
#[derive(Clone, PartialEq, Eq)]
pub struct ClientCredentials {
    /// `http://` or `https://`.
    pub token_endpoint_url: String,
    pub client_id: String,
    pub client_secret: String,
    /// Sent as the `scope` form field when set.
    pub scope: Option<String>,
}

impl fmt::Debug for ClientCredentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientCredentials")
            .field("token_endpoint_url", &self.token_endpoint_url)
            .field("client_id", &self.client_id)
            .field("client_secret", &"<redacted>")
            .field("scope", &self.scope)
            .finish()
    }
}

pub(crate) fn http_client() -> Result<reqwest::Client, AuthError> {
    reqwest::Client::builder()
        .timeout(TOKEN_REQUEST_TIMEOUT)
        .connect_timeout(TOKEN_REQUEST_TIMEOUT)
        // A token endpoint that redirects elsewhere would get the secret sent on.
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .map_err(|err| AuthError::HttpClient(err.to_string()))
}

impl ClientCredentials {
    /// Requests a token.
    pub(crate) async fn fetch(
        &self,
        http: &reqwest::Client,
        now: SystemTime,
    ) -> Result<BearerToken, AuthError> {
        let failed = |problem: String| AuthError::TokenEndpoint {
            url: self.token_endpoint_url.clone(),
            problem,
        };
        // RFC 6749 2.3.1: id and secret form-encoded, then HTTP Basic.
        let basic = STANDARD.encode(format!(
            "{}:{}",
            uri_encode(&self.client_id),
            uri_encode(&self.client_secret)
        ));
        let mut form = String::from("grant_type=client_credentials");
        if let Some(scope) = &self.scope {
            form.push_str("&scope=");
            form.push_str(&uri_encode(scope));
        }
        let mut response = http
            .post(&self.token_endpoint_url)
            .header("Authorization", format!("Basic {basic}"))
            .header("Content-Type", "application/x-www-form-urlencoded")
            .header("Accept", "application/json")
            .body(form)
            .send()
            .await
            .map_err(|err| failed(format!("request failed: {}", without_url(&err))))?;
        let status = response.status();
        let body = read_bounded(&mut response).await.map_err(failed)?;
        if !status.is_success() {
            return Err(failed(format!(
                "HTTP {status}: {}",
                bounded(&String::from_utf8_lossy(&body))
            )));
        }
        parse_token_response(&body, now).map_err(failed)
    }
}

/// A response body of at most [`MAX_TOKEN_RESPONSE_BYTES`].
pub(crate) async fn read_bounded(response: &mut reqwest::Response) -> Result<Vec<u8>, String> {
    let too_large = || format!("response larger than {MAX_TOKEN_RESPONSE_BYTES} bytes");
    if response
        .content_length()
        .is_some_and(|len| len > MAX_TOKEN_RESPONSE_BYTES as u64)
    {
        return Err(too_large());
    }
    let mut body = Vec::new();
    while let Some(chunk) = response
        .chunk()
        .await
        .map_err(|err| format!("reading the response: {}", without_url(&err)))?
    {
        if body.len() + chunk.len() > MAX_TOKEN_RESPONSE_BYTES {
            return Err(too_large());
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// The access token and its lifetime from a successful response (RFC 6749 5.1).
/// The lifetime is `expires_in`, else the JWT's `exp`.
fn parse_token_response(body: &[u8], now: SystemTime) -> Result<BearerToken, String> {
    let json: serde_json::Value =
        serde_json::from_slice(body).map_err(|err| format!("response is not JSON: {err}"))?;
    let token = json
        .get("access_token")
        .and_then(|t| t.as_str())
        .ok_or("response has no access_token string")?;
    let expires_at = match json.get("expires_in") {
        Some(v) => {
            let seconds = v
                .as_u64()
                .or_else(|| v.as_str().and_then(|s| s.parse().ok()))
                .ok_or("expires_in is not a number of seconds")?;
            after(now, seconds)
        }
        None => jwt::expiry(token),
    };
    BearerToken::new(token.to_owned(), now, expires_at).map_err(|err| err.to_string())
}

/// reqwest's error text, without the URL it may repeat (the URL is named already).
pub(crate) fn without_url(err: &reqwest::Error) -> String {
    let mut text = err.without_url_ref_text();
    let mut source = std::error::Error::source(err);
    while let Some(inner) = source {
        text.push_str(": ");
        text.push_str(&inner.to_string());
        source = inner.source();
    }
    text
}

trait WithoutUrl {
    fn without_url_ref_text(&self) -> String;
}

impl WithoutUrl for reqwest::Error {
    fn without_url_ref_text(&self) -> String {
        if self.is_timeout() {
            format!("no answer within {TOKEN_REQUEST_TIMEOUT:?}")
        } else if self.is_connect() {
            "cannot connect".to_owned()
        } else {
            "HTTP error".to_owned()
        }
    }
}

pub(crate) fn bounded(text: &str) -> String {
    let mut out: String = text
        .chars()
        .take(MAX_ERROR_CHARS)
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    if text.chars().count() > MAX_ERROR_CHARS {
        out.push('…');
    }
    out
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    use super::*;

    #[test]
    fn responses_give_the_token_and_its_lifetime() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1000);
        let token = parse_token_response(
            br#"{"access_token":"abc","token_type":"Bearer","expires_in":60}"#,
            now,
        )
        .unwrap();
        assert_eq!(token.secret(), "abc");
        assert_eq!(token.expires_at(), after(now, 60));
        let token =
            parse_token_response(br#"{"access_token":"abc","expires_in":"30"}"#, now).unwrap();
        assert_eq!(token.expires_at(), after(now, 30));
        for (body, problem) in [
            (&b"<html>"[..], "not JSON"),
            (br#"{"error":"invalid_client"}"#, "no access_token"),
            (br#"{"access_token":"a","expires_in":-5}"#, "expires_in"),
            (br#"{"access_token":"a b"}"#, "space"),
        ] {
            let err = parse_token_response(body, now).unwrap_err();
            assert!(err.contains(problem), "{err}");
        }
    }

    /// Serves `response` (a whole HTTP response) to one request and returns the request.
    async fn serve_once(response: Vec<u8>) -> (String, tokio::task::JoinHandle<String>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/token", listener.local_addr().unwrap());
        let task = tokio::spawn(async move {
            let (mut stream, _) = listener.accept().await.unwrap();
            let mut request = Vec::new();
            let mut buf = [0u8; 4096];
            // Headers, then a body whose length the request declared.
            loop {
                let n = stream.read(&mut buf).await.unwrap();
                request.extend_from_slice(&buf[..n]);
                let text = String::from_utf8_lossy(&request);
                if let Some(end) = text.find("\r\n\r\n") {
                    let len = text
                        .lines()
                        .find_map(|l| {
                            l.to_ascii_lowercase()
                                .strip_prefix("content-length: ")
                                .map(|v| v.trim().parse::<usize>().unwrap())
                        })
                        .unwrap_or(0);
                    if request.len() >= end + 4 + len {
                        break;
                    }
                }
            }
            stream.write_all(&response).await.unwrap();
            stream.shutdown().await.unwrap();
            String::from_utf8(request).unwrap()
        });
        (url, task)
    }

    fn credentials(url: String) -> ClientCredentials {
        ClientCredentials {
            token_endpoint_url: url,
            client_id: "kpress id".into(),
            client_secret: "s3cr:t&".into(),
            scope: Some("kafka produce".into()),
        }
    }

    #[tokio::test]
    async fn the_grant_sends_basic_auth_and_the_scope() {
        let body = r#"{"access_token":"tok","expires_in":120}"#;
        let (url, server) = serve_once(
            format!(
                "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
                body.len()
            )
            .into_bytes(),
        )
        .await;
        let token = credentials(url)
            .fetch(&http_client().unwrap(), SystemTime::now())
            .await
            .unwrap();
        assert_eq!(token.secret(), "tok");
        let request = server.await.unwrap();
        assert!(request.starts_with("POST /token HTTP/1.1\r\n"), "{request}");
        let basic = STANDARD.encode("kpress%20id:s3cr%3At%26");
        assert!(
            request.contains(&format!("authorization: Basic {basic}\r\n")),
            "{request}"
        );
        assert!(
            request.ends_with("\r\n\r\ngrant_type=client_credentials&scope=kafka%20produce"),
            "{request}"
        );
    }

    #[tokio::test]
    async fn errors_and_oversized_answers_are_refused_without_the_secret() {
        let (url, _server) = serve_once(
            b"HTTP/1.1 401 Unauthorized\r\nContent-Length: 26\r\n\r\n{\"error\":\"invalid_client\"}".to_vec(),
        )
        .await;
        let err = credentials(url)
            .fetch(&http_client().unwrap(), SystemTime::now())
            .await
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("401") && err.contains("invalid_client"),
            "{err}"
        );
        assert!(!err.contains("s3cr"), "{err}");

        let huge = MAX_TOKEN_RESPONSE_BYTES + 1;
        let mut response =
            format!("HTTP/1.1 200 OK\r\nContent-Length: {huge}\r\n\r\n").into_bytes();
        response.resize(response.len() + huge, b'a');
        let (url, _server) = serve_once(response).await;
        let err = credentials(url)
            .fetch(&http_client().unwrap(), SystemTime::now())
            .await
            .unwrap_err()
            .to_string();
        assert!(err.contains("larger than"), "{err}");
    }
}
