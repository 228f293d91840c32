//! AWS Signature Version 4, query-string ("presigned") form, and the MSK IAM token
//! built on it: a presigned `kafka-cluster:Connect` request, base64url-encoded.
//!
//! Written from AWS's SigV4 specification: canonical request, string to sign, a
//! signing key derived by HMAC-SHA256 chain, the signature as lowercase hex.

use std::fmt;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};
use time::macros::format_description;
use time::OffsetDateTime;

/// The service MSK's IAM listeners check signatures for.
pub const MSK_SERVICE: &str = "kafka-cluster";
/// The action MSK authorises a connection with.
pub const MSK_ACTION: &str = "kafka-cluster:Connect";
/// Seconds a presigned MSK token is valid: the signers AWS publishes use 900.
pub const MSK_TOKEN_EXPIRES_SECONDS: u32 = 900;

const ALGORITHM: &str = "AWS4-HMAC-SHA256";

/// Credentials that sign a request. The secret key and session token never appear in
/// `Debug` output.
#[derive(Clone, PartialEq, Eq)]
pub struct AwsCredentials {
    pub access_key_id: String,
    pub secret_access_key: String,
    /// Present for temporary credentials (STS, instance roles); signed along.
    pub session_token: Option<String>,
}

impl fmt::Debug for AwsCredentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AwsCredentials")
            .field("access_key_id", &self.access_key_id)
            .field("secret_access_key", &"<redacted>")
            .field(
                "session_token",
                &self.session_token.as_ref().map(|_| "<redacted>"),
            )
            .finish()
    }
}

/// The host MSK's token names for `region`.
pub fn msk_host(region: &str) -> String {
    format!("kafka.{region}.amazonaws.com")
}

/// The MSK IAM OAUTHBEARER token for `region`, signed at `at` with `credentials`:
/// `GET https://kafka.<region>.amazonaws.com/?Action=kafka-cluster%3AConnect`
/// presigned for 900 s, with `User-Agent=<user_agent>` appended to the query, the
/// whole URL base64url-encoded without padding.
pub fn msk_token(
    region: &str,
    credentials: &AwsCredentials,
    at: OffsetDateTime,
    user_agent: &str,
) -> String {
    let host = msk_host(region);
    let mut query = presign(
        &PresignRequest {
            host: &host,
            path: "/",
            query: &[("Action", MSK_ACTION)],
            service: MSK_SERVICE,
            region,
            expires_seconds: MSK_TOKEN_EXPIRES_SECONDS,
        },
        credentials,
        at,
    );
    query.push(("User-Agent".to_owned(), user_agent.to_owned()));
    let url = format!("https://{host}/?{}", encode_query(&mut query));
    URL_SAFE_NO_PAD.encode(url)
}

/// A GET request to presign.
#[derive(Debug, Clone, Copy)]
pub struct PresignRequest<'a> {
    pub host: &'a str,
    /// Already in canonical (URI-encoded) form.
    pub path: &'a str,
    /// The request's own query parameters, unencoded.
    pub query: &'a [(&'a str, &'a str)],
    pub service: &'a str,
    pub region: &'a str,
    pub expires_seconds: u32,
}

/// The query parameters of `request` presigned at `at`: the request's own, the
/// `X-Amz-*` ones, and `X-Amz-Signature`; unencoded, in no particular order.
pub fn presign(
    request: &PresignRequest<'_>,
    credentials: &AwsCredentials,
    at: OffsetDateTime,
) -> Vec<(String, String)> {
    let at = at.to_offset(time::UtcOffset::UTC);
    let amz_date = at
        .format(format_description!(
            "[year][month][day]T[hour][minute][second]Z"
        ))
        .expect("a UTC time formats");
    let day = &amz_date[..8];
    let scope = format!("{day}/{}/{}/aws4_request", request.region, request.service);
    let mut query: Vec<(String, String)> = request
        .query
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    query.push(("X-Amz-Algorithm".into(), ALGORITHM.into()));
    query.push((
        "X-Amz-Credential".into(),
        format!("{}/{scope}", credentials.access_key_id),
    ));
    query.push(("X-Amz-Date".into(), amz_date.clone()));
    query.push(("X-Amz-Expires".into(), request.expires_seconds.to_string()));
    if let Some(token) = &credentials.session_token {
        query.push(("X-Amz-Security-Token".into(), token.clone()));
    }
    query.push(("X-Amz-SignedHeaders".into(), "host".into()));
    let canonical_query = encode_query(&mut query);
    let empty_payload = hex(&Sha256::digest(b""));
    let canonical_request = format!(
        "GET\n{}\n{canonical_query}\nhost:{}\n\nhost\n{empty_payload}",
        request.path, request.host
    );
    let string_to_sign = format!(
        "{ALGORITHM}\n{amz_date}\n{scope}\n{}",
        hex(&Sha256::digest(canonical_request.as_bytes()))
    );
    let key = signing_key(
        &credentials.secret_access_key,
        day,
        request.region,
        request.service,
    );
    let signature = hex(&hmac(&key, string_to_sign.as_bytes()));
    query.push(("X-Amz-Signature".into(), signature));
    query
}

/// `query` sorted by name then value, each part URI-encoded, joined by `&`.
fn encode_query(query: &mut [(String, String)]) -> String {
    query.sort();
    query
        .iter()
        .map(|(k, v)| format!("{}={}", uri_encode(k), uri_encode(v)))
        .collect::<Vec<_>>()
        .join("&")
}

/// SigV4's URI encoding: every byte but `A-Z a-z 0-9 - _ . ~` as `%XX` (uppercase).
pub fn uri_encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'_' | b'.' | b'~') {
            out.push(byte as char);
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

fn signing_key(secret: &str, day: &str, region: &str, service: &str) -> Vec<u8> {
    let k_date = hmac(format!("AWS4{secret}").as_bytes(), day.as_bytes());
    let k_region = hmac(&k_date, region.as_bytes());
    let k_service = hmac(&k_region, service.as_bytes());
    hmac(&k_service, b"aws4_request")
}

fn hmac(key: &[u8], data: &[u8]) -> Vec<u8> {
    let mut mac = Hmac::<Sha256>::new_from_slice(key).expect("HMAC takes any key length");
    mac.update(data);
    mac.finalize().into_bytes().to_vec()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn example_credentials(session_token: Option<&str>) -> AwsCredentials {
        AwsCredentials {
            access_key_id: "AKIDEXAMPLE".into(),
            secret_access_key: "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY".into(),
            session_token: session_token.map(str::to_owned),
        }
    }

    /// The signing-key derivation example of AWS's SigV4 documentation.
    #[test]
    fn signing_key_matches_the_documented_example() {
        let key = signing_key(
            "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY",
            "20120215",
            "us-east-1",
            "iam",
        );
        assert_eq!(
            hex(&key),
            "f4780e2d9f65fa895f9c67b32ce1baf0b0d8a43505a000a1a9e090d414db404d"
        );
    }

    #[test]
    fn uri_encoding_keeps_only_unreserved_bytes() {
        assert_eq!(uri_encode("aZ09-_.~"), "aZ09-_.~");
        assert_eq!(uri_encode("a b/c:d+e=é"), "a%20b%2Fc%3Ad%2Be%3D%C3%A9");
    }

    #[test]
    fn msk_token_is_a_base64url_presigned_connect_url() {
        let at = OffsetDateTime::from_unix_timestamp(1_440_938_160).unwrap();
        let token = msk_token(
            "eu-west-1",
            &example_credentials(Some("tok+en/=")),
            at,
            "kpress/t",
        );
        assert!(!token.contains(['=', '+', '/']), "{token}");
        let url = String::from_utf8(URL_SAFE_NO_PAD.decode(&token).unwrap()).unwrap();
        assert!(
            url.starts_with(
                "https://kafka.eu-west-1.amazonaws.com/?Action=kafka-cluster%3AConnect&User-Agent=kpress%2Ft&X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=AKIDEXAMPLE%2F20150830%2Feu-west-1%2Fkafka-cluster%2Faws4_request&X-Amz-Date=20150830T123600Z&X-Amz-Expires=900&X-Amz-Security-Token=tok%2Ben%2F%3D&X-Amz-Signature="
            ),
            "{url}"
        );
        assert!(url.ends_with("&X-Amz-SignedHeaders=host"), "{url}");
        // Another second, another signature.
        let later = msk_token(
            "eu-west-1",
            &example_credentials(Some("tok+en/=")),
            at + time::Duration::seconds(1),
            "kpress/t",
        );
        assert_ne!(token, later);
    }

    #[test]
    fn debug_hides_secrets() {
        let text = format!("{:?}", example_credentials(Some("the-session")));
        assert!(text.contains("AKIDEXAMPLE"), "{text}");
        assert!(
            !text.contains("EXAMPLEKEY") && !text.contains("the-session"),
            "{text}"
        );
    }
}
