//! SASL/OAUTHBEARER's client messages (RFC 7628) as Kafka brokers read them.
//!
//! The initial client response is the GS2 header `n,,`, then `\x01auth=Bearer
//! <token>`, optional `\x01key=value` extensions, and a closing `\x01\x01`. A broker
//! that accepts the token answers with empty auth bytes. One that refuses it answers
//! with error code 0 and a JSON error (`{"status":"invalid_token",...}`) as auth
//! bytes, and waits for the client's `\x01` before failing the exchange with an error
//! code (RFC 7628 3.2.3).

use super::{bounded_text, SaslError};

/// What the client sends after the broker's JSON error, to end the exchange.
pub const FAILURE_ACKNOWLEDGEMENT: &[u8] = b"\x01";

/// Longest JSON error an error message repeats.
const MAX_ERROR_CHARS: usize = 512;

/// The initial client response carrying `token`, with `extensions` (SASL extension
/// names are letters only; values are printable or whitespace, RFC 7628 3.1).
pub fn initial_response(token: &str, extensions: &[(&str, &str)]) -> Result<Vec<u8>, SaslError> {
    // RFC 6750's b64token: printable ASCII without spaces.
    if token.is_empty() {
        return Err(SaslError::InvalidCredential {
            field: "token",
            problem: "is empty",
        });
    }
    if !token.bytes().all(|b| (0x21..0x7f).contains(&b)) {
        return Err(SaslError::InvalidCredential {
            field: "token",
            problem: "holds a space, a control character or a non-ASCII byte",
        });
    }
    let mut message = format!("n,,\x01auth=Bearer {token}");
    for (key, value) in extensions {
        if key.is_empty() || !key.bytes().all(|b| b.is_ascii_alphabetic()) || *key == "auth" {
            return Err(SaslError::InvalidCredential {
                field: "extension name",
                problem: "is not letters only, or is \"auth\"",
            });
        }
        if !value
            .bytes()
            .all(|b| (0x21..0x7f).contains(&b) || matches!(b, b' ' | b'\t' | b'\r' | b'\n'))
        {
            return Err(SaslError::InvalidCredential {
                field: "extension value",
                problem: "holds a control character or a non-ASCII byte",
            });
        }
        message.push('\x01');
        message.push_str(key);
        message.push('=');
        message.push_str(value);
    }
    message.push_str("\x01\x01");
    Ok(message.into_bytes())
}

/// The broker's JSON error, one line and bounded, for an error message.
pub fn server_error(auth_bytes: &[u8]) -> String {
    bounded_text(&String::from_utf8_lossy(auth_bytes), MAX_ERROR_CHARS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_initial_response_follows_rfc_7628() {
        assert_eq!(
            initial_response("eyJ.a-b_c~+/=", &[]).unwrap(),
            b"n,,\x01auth=Bearer eyJ.a-b_c~+/=\x01\x01"
        );
        assert_eq!(
            initial_response("t", &[("logicalCluster", "lkc-1"), ("x", "a b")]).unwrap(),
            b"n,,\x01auth=Bearer t\x01logicalCluster=lkc-1\x01x=a b\x01\x01"
        );
    }

    #[test]
    fn what_the_message_cannot_carry_is_refused() {
        for token in ["", "a b", "a\x01b", "é"] {
            assert!(initial_response(token, &[]).is_err(), "{token:?}");
        }
        for (key, value) in [("", "v"), ("a1", "v"), ("auth", "v"), ("k", "a\x01")] {
            assert!(
                initial_response("t", &[(key, value)]).is_err(),
                "{key:?}={value:?}"
            );
        }
    }

    #[test]
    fn server_errors_are_bounded_and_on_one_line() {
        assert_eq!(
            server_error(b"{\"status\":\"invalid_token\"}\n"),
            "{\"status\":\"invalid_token\"}\\n"
        );
        assert!(server_error(&[b'a'; 2000]).chars().count() <= MAX_ERROR_CHARS + 1);
    }
}
