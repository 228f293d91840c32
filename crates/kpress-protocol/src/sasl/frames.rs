//! SaslHandshake and SaslAuthenticate frames for kpress's own connections,
//! and the broker's answers to them.

use bytes::BytesMut;
use kafka_protocol::messages::{
    SaslAuthenticateRequest, SaslAuthenticateResponse, SaslHandshakeRequest, SaslHandshakeResponse,
};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;

use super::{bounded_text, Mechanism, SaslError, MAX_MESSAGE_CHARS, MAX_NAME_CHARS};
use crate::error::{check_version, WireError};
use crate::rewriting::{encode_request_frame, guarded_decode};
use crate::wire::{LengthPrefix, Reader};
use crate::{api, api_key};

const HANDSHAKE_API: &str = "SaslHandshake";
const AUTHENTICATE_API: &str = "SaslAuthenticate";

/// The SaslHandshake version kpress sends: v1 is followed by SaslAuthenticate
/// requests (v0 by raw tokens). Every broker since Kafka 1.0 serves it.
pub const SASL_HANDSHAKE_VERSION: i16 = 1;

/// The SaslAuthenticate version kpress sends: v1 (non-flexible, with the
/// session lifetime of KIP-368) is served by every broker from Kafka 2.2 to
/// 4.1 (whose specs list v0-v2).
pub const SASL_AUTHENTICATE_VERSION: i16 = 1;

/// SaslAuthenticate versions [`parse_authenticate_response`] reads.
const AUTHENTICATE_MIN_VERSION: i16 = 0;
const AUTHENTICATE_MAX_VERSION: i16 = 2;
const AUTHENTICATE_FIRST_FLEXIBLE: i16 = api::first_flexible(api_key::SASL_AUTHENTICATE);
/// SaslAuthenticate v1 added `session_lifetime_ms`.
const AUTHENTICATE_FIRST_LIFETIME: i16 = 1;

/// Most mechanism names of a broker's list an error message repeats.
const MAX_LISTED_MECHANISMS: usize = 32;

/// A whole SaslHandshake v1 request frame (size prefix, header, body).
pub fn handshake_request(
    correlation_id: i32,
    client_id: &str,
    mechanism: Mechanism,
) -> Result<BytesMut, SaslError> {
    let request =
        SaslHandshakeRequest::default().with_mechanism(StrBytes::from_static_str(mechanism.name()));
    Ok(encode_request_frame(
        HANDSHAKE_API,
        api_key::SASL_HANDSHAKE,
        SASL_HANDSHAKE_VERSION,
        correlation_id,
        client_id,
        &request,
    )?)
}

/// A whole SaslAuthenticate v1 ([`SASL_AUTHENTICATE_VERSION`]) request frame
/// carrying `auth_bytes` (from [`super::SaslClient`]).
pub fn authenticate_request(
    correlation_id: i32,
    client_id: &str,
    auth_bytes: &[u8],
) -> Result<BytesMut, SaslError> {
    let request = SaslAuthenticateRequest::default()
        .with_auth_bytes(bytes::Bytes::copy_from_slice(auth_bytes));
    Ok(encode_request_frame(
        AUTHENTICATE_API,
        api_key::SASL_AUTHENTICATE,
        SASL_AUTHENTICATE_VERSION,
        correlation_id,
        client_id,
        &request,
    )?)
}

/// Reads a SaslHandshake (v0 or v1: same body) response body, after its
/// response header. `Ok` when the broker accepted the mechanism.
pub fn parse_handshake_response(body: &[u8]) -> Result<(), SaslError> {
    let response: SaslHandshakeResponse = guarded_decode(
        HANDSHAKE_API,
        SASL_HANDSHAKE_VERSION,
        body,
        walk_handshake_response,
    )?;
    match ResponseError::try_from_code(response.error_code) {
        None => Ok(()),
        Some(ResponseError::UnsupportedSaslMechanism) => {
            let total = response.mechanisms.len();
            let mut enabled = response
                .mechanisms
                .iter()
                .take(MAX_LISTED_MECHANISMS)
                .map(|name| bounded_text(name.as_str(), MAX_NAME_CHARS))
                .collect::<Vec<_>>()
                .join(", ");
            if total > MAX_LISTED_MECHANISMS {
                enabled.push_str(&format!(" and {} more", total - MAX_LISTED_MECHANISMS));
            }
            if total == 0 {
                enabled.push_str("none");
            }
            Err(SaslError::MechanismNotEnabled { enabled })
        }
        Some(error) => Err(SaslError::HandshakeFailed {
            code: response.error_code,
            error: error.to_string(),
        }),
    }
}

/// Bounds-checked walk of a SaslHandshake response: the guard before decoding.
fn walk_handshake_response(body: &[u8], _version: i16) -> Result<(), WireError> {
    let mut r = Reader::new(body);
    r.i16()?; // error_code
    let mechanisms = r.required_count(false, 2, "mechanisms")?;
    for _ in 0..mechanisms {
        let at = r.position();
        r.length_prefixed(LengthPrefix::Int16)?
            .ok_or(WireError::UnexpectedNull {
                at,
                field: "mechanisms",
            })?;
    }
    r.finish()
}

/// Reads a SaslAuthenticate response body (v0-v2, after its response
/// header) and returns the broker's auth bytes for [`super::SaslClient::next`].
/// An error code becomes [`SaslError::AuthenticationFailed`] with the
/// broker's own message.
pub fn parse_authenticate_response(api_version: i16, body: &[u8]) -> Result<Vec<u8>, SaslError> {
    check_version(
        AUTHENTICATE_API,
        api_version,
        AUTHENTICATE_MIN_VERSION,
        AUTHENTICATE_MAX_VERSION,
    )?;
    let response: SaslAuthenticateResponse =
        guarded_decode(AUTHENTICATE_API, api_version, body, |body, version| {
            walk_authenticate_response(body, version).map(|_| ())
        })?;
    match ResponseError::try_from_code(response.error_code) {
        None => Ok(response.auth_bytes.to_vec()),
        Some(error) => Err(SaslError::AuthenticationFailed {
            code: response.error_code,
            error: error.to_string(),
            message: match &response.error_message {
                Some(message) => bounded_text(message.as_str(), MAX_MESSAGE_CHARS),
                None => "the broker gave no message".to_owned(),
            },
        }),
    }
}

/// How long the broker keeps an authenticated session (KIP-368), from a
/// successful SaslAuthenticate response body (v1+, after its header): the
/// broker closes the connection on the first request after that many
/// milliseconds unless it re-authenticated. `None` when the broker sets no
/// limit, for v0, for errors and for bodies that do not parse.
pub fn session_lifetime_ms(api_version: i16, body: &[u8]) -> Option<i64> {
    if !authenticate_version_known(api_version) {
        return None;
    }
    let answer = walk_authenticate_response(body, api_version).ok()?;
    (answer.error_code == 0 && answer.session_lifetime_ms > 0).then_some(answer.session_lifetime_ms)
}

/// The fields of a SaslAuthenticate response kpress acts on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct AuthenticateAnswer {
    pub(super) error_code: i16,
    pub(super) auth_bytes_len: usize,
    /// 0 (no limit) before v1.
    pub(super) session_lifetime_ms: i64,
}

/// Bounds-checked walk of a SaslAuthenticate response (v0-v2; the caller
/// checks the version).
pub(super) fn walk_authenticate_response(
    body: &[u8],
    version: i16,
) -> Result<AuthenticateAnswer, WireError> {
    let flex = version >= AUTHENTICATE_FIRST_FLEXIBLE;
    let bytes_prefix = if flex {
        LengthPrefix::Compact
    } else {
        LengthPrefix::Int32
    };
    let mut r = Reader::new(body);
    let error_code = r.i16()?;
    r.skip_string(flex)?; // error_message
    let at = r.position();
    let auth_bytes = r
        .length_prefixed(bytes_prefix)?
        .ok_or(WireError::UnexpectedNull {
            at,
            field: "auth_bytes",
        })?;
    let mut session_lifetime_ms = 0;
    if version >= AUTHENTICATE_FIRST_LIFETIME {
        let mut bytes = [0u8; 8];
        bytes.copy_from_slice(r.take(8)?);
        session_lifetime_ms = i64::from_be_bytes(bytes);
    }
    if flex {
        r.skip_tagged_fields()?;
    }
    r.finish()?;
    Ok(AuthenticateAnswer {
        error_code,
        auth_bytes_len: auth_bytes.len(),
        session_lifetime_ms,
    })
}

/// Whether `version` is one [`walk_authenticate_response`] reads.
pub(super) fn authenticate_version_known(version: i16) -> bool {
    (AUTHENTICATE_MIN_VERSION..=AUTHENTICATE_MAX_VERSION).contains(&version)
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use kafka_protocol::messages::RequestHeader;
    use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion};
    use proptest::prelude::*;

    use super::*;
    use crate::error::ProtocolError;

    /// Splits a frame into its header and body, checking the size prefix.
    fn decode_frame<T: Decodable + HeaderVersion>(
        frame: &[u8],
        version: i16,
    ) -> (RequestHeader, T) {
        let size = i32::from_be_bytes(frame[..4].try_into().unwrap()) as usize;
        assert_eq!(size, frame.len() - 4);
        let mut buf = Bytes::copy_from_slice(&frame[4..]);
        let header = RequestHeader::decode(&mut buf, T::header_version(version)).unwrap();
        let body = T::decode(&mut buf, version).unwrap();
        assert!(buf.is_empty());
        (header, body)
    }

    #[test]
    fn handshake_request_names_the_mechanism() {
        for mechanism in Mechanism::ALL {
            let frame = handshake_request(7, "kpress", mechanism).unwrap();
            let (header, request): (_, SaslHandshakeRequest) =
                decode_frame(&frame, SASL_HANDSHAKE_VERSION);
            assert_eq!(
                (
                    header.request_api_key,
                    header.request_api_version,
                    header.correlation_id
                ),
                (17, 1, 7)
            );
            assert_eq!(header.client_id.as_deref(), Some("kpress"));
            assert_eq!(request.mechanism.as_str(), mechanism.name());
        }
    }

    #[test]
    fn authenticate_request_carries_the_bytes() {
        let frame = authenticate_request(-3, "kpress-side", b"\0user\0pencil").unwrap();
        let (header, request): (_, SaslAuthenticateRequest) =
            decode_frame(&frame, SASL_AUTHENTICATE_VERSION);
        assert_eq!(
            (
                header.request_api_key,
                header.request_api_version,
                header.correlation_id
            ),
            (36, 1, -3)
        );
        assert_eq!(header.client_id.as_deref(), Some("kpress-side"));
        assert_eq!(&request.auth_bytes[..], b"\0user\0pencil");
    }

    #[test]
    fn oversized_client_id_is_an_error() {
        let client_id = "x".repeat(40_000);
        let err = handshake_request(1, &client_id, Mechanism::Plain).unwrap_err();
        assert!(matches!(
            err,
            SaslError::Protocol(ProtocolError::Encode { .. })
        ));
    }

    fn handshake_body(error_code: i16, mechanisms: &[&str]) -> Vec<u8> {
        let mut body = BytesMut::new();
        SaslHandshakeResponse::default()
            .with_error_code(error_code)
            .with_mechanisms(
                mechanisms
                    .iter()
                    .map(|m| StrBytes::from_string((*m).to_owned()))
                    .collect(),
            )
            .encode(&mut body, 1)
            .unwrap();
        body.to_vec()
    }

    #[test]
    fn handshake_accepted() {
        assert_eq!(
            parse_handshake_response(&handshake_body(0, &["PLAIN", "SCRAM-SHA-512"])),
            Ok(())
        );
    }

    #[test]
    fn unsupported_mechanism_lists_the_enabled_ones() {
        let err = parse_handshake_response(&handshake_body(33, &["SCRAM-SHA-512", "GSSAPI"]))
            .unwrap_err();
        assert_eq!(
            err,
            SaslError::MechanismNotEnabled {
                enabled: "SCRAM-SHA-512, GSSAPI".to_owned()
            }
        );
        assert!(err
            .to_string()
            .contains("it enables: SCRAM-SHA-512, GSSAPI"));
        let err = parse_handshake_response(&handshake_body(33, &[])).unwrap_err();
        assert!(err.to_string().ends_with("it enables: none"), "{err}");
    }

    #[test]
    fn long_mechanism_lists_are_bounded() {
        let names: Vec<String> = (0..100).map(|i| format!("M{i}")).collect();
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        let err = parse_handshake_response(&handshake_body(33, &names)).unwrap_err();
        let text = err.to_string();
        assert!(text.contains("M31 and 68 more"), "{text}");
        assert!(!text.contains("M32"), "{text}");
    }

    #[test]
    fn other_handshake_errors_are_named() {
        let err = parse_handshake_response(&handshake_body(34, &[])).unwrap_err();
        assert_eq!(
            err,
            SaslError::HandshakeFailed {
                code: 34,
                error: "IllegalSaslState".to_owned()
            }
        );
    }

    #[test]
    fn garbage_handshake_responses_are_errors() {
        let body = handshake_body(0, &["PLAIN"]);
        for cut in 0..body.len() {
            assert!(parse_handshake_response(&body[..cut]).is_err(), "cut {cut}");
        }
        let mut trailing = body.clone();
        trailing.push(0);
        assert!(parse_handshake_response(&trailing).is_err());
        // A count of two billion mechanisms in six bytes.
        let huge = [0, 0, 0x7f, 0xff, 0xff, 0xff];
        let err = parse_handshake_response(&huge).unwrap_err();
        assert!(matches!(
            err,
            SaslError::Protocol(ProtocolError::MalformedResponse {
                source: WireError::CountTooLarge { .. },
                ..
            })
        ));
        // A null mechanism name.
        let null_name = [0, 0, 0, 0, 0, 1, 0xff, 0xff];
        assert!(parse_handshake_response(&null_name).is_err());
    }

    fn authenticate_body(
        version: i16,
        error_code: i16,
        message: Option<&str>,
        auth: &[u8],
    ) -> Vec<u8> {
        let mut body = BytesMut::new();
        SaslAuthenticateResponse::default()
            .with_error_code(error_code)
            .with_error_message(message.map(|m| StrBytes::from_string(m.to_owned())))
            .with_auth_bytes(Bytes::copy_from_slice(auth))
            .with_session_lifetime_ms(3_600_000)
            .encode(&mut body, version)
            .unwrap();
        body.to_vec()
    }

    #[test]
    fn authenticate_response_gives_the_auth_bytes() {
        for version in 0..=2 {
            let body = authenticate_body(version, 0, None, b"r=abc,s=c2FsdA==,i=4096");
            assert_eq!(
                parse_authenticate_response(version, &body),
                Ok(b"r=abc,s=c2FsdA==,i=4096".to_vec())
            );
            let body = authenticate_body(version, 0, None, b"");
            assert_eq!(parse_authenticate_response(version, &body), Ok(vec![]));
        }
    }

    #[test]
    fn session_lifetime_from_v1() {
        let body = |version, error_code, lifetime| {
            let mut body = BytesMut::new();
            SaslAuthenticateResponse::default()
                .with_error_code(error_code)
                .with_session_lifetime_ms(lifetime)
                .encode(&mut body, version)
                .unwrap();
            body.to_vec()
        };
        for version in 1..=2 {
            assert_eq!(
                session_lifetime_ms(version, &body(version, 0, 60_000)),
                Some(60_000)
            );
            assert_eq!(session_lifetime_ms(version, &body(version, 0, 0)), None);
            assert_eq!(
                session_lifetime_ms(version, &body(version, 58, 60_000)),
                None
            );
            let full = body(version, 0, 60_000);
            assert_eq!(session_lifetime_ms(version, &full[..full.len() - 1]), None);
        }
        assert_eq!(session_lifetime_ms(0, &body(0, 0, 60_000)), None);
        assert_eq!(session_lifetime_ms(3, &body(2, 0, 60_000)), None);
    }

    #[test]
    fn authenticate_errors_carry_the_brokers_message() {
        let message = "Authentication failed during authentication due to invalid credentials with SASL mechanism SCRAM-SHA-256";
        for version in 0..=2 {
            let body = authenticate_body(version, 58, Some(message), b"");
            let err = parse_authenticate_response(version, &body).unwrap_err();
            assert_eq!(
                err,
                SaslError::AuthenticationFailed {
                    code: 58,
                    error: "SaslAuthenticationFailed".to_owned(),
                    message: message.to_owned(),
                }
            );
            assert!(err.to_string().contains(message));
            let body = authenticate_body(version, 58, None, b"");
            let text = parse_authenticate_response(version, &body)
                .unwrap_err()
                .to_string();
            assert!(text.contains("error code 58"), "{text}");
        }
    }

    #[test]
    fn garbage_authenticate_responses_are_errors() {
        for version in 0..=2 {
            let body = authenticate_body(version, 0, Some("m"), b"bytes");
            for cut in 0..body.len() {
                assert!(
                    parse_authenticate_response(version, &body[..cut]).is_err(),
                    "v{version} cut {cut}"
                );
            }
        }
        // v1: no error message, then auth bytes declared 2 GiB long.
        let huge = [
            0, 0, 0xff, 0xff, 0x7f, 0xff, 0xff, 0xff, 0, 0, 0, 0, 0, 0, 0, 0,
        ];
        let err = parse_authenticate_response(1, &huge).unwrap_err();
        assert!(matches!(
            err,
            SaslError::Protocol(ProtocolError::MalformedResponse {
                source: WireError::Truncated { .. },
                ..
            })
        ));
        assert!(matches!(
            parse_authenticate_response(3, &authenticate_body(2, 0, None, b"")),
            Err(SaslError::Protocol(
                ProtocolError::UnsupportedVersion { .. }
            ))
        ));
    }

    proptest! {
        #[test]
        fn random_answers_never_panic(body in proptest::collection::vec(any::<u8>(), 0..64), version in -1i16..4) {
            let _ = parse_handshake_response(&body);
            let _ = parse_authenticate_response(version, &body);
        }
    }
}
