//! The `exp` claim of a JWT, read without verifying it: kpress only needs to know
//! when to fetch the next token; the broker checks the signature.

use std::time::{Duration, SystemTime};

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;

/// Longest payload decoded: JWTs are small; anything larger is not looked into.
const MAX_PAYLOAD_BYTES: usize = 64 * 1024;

/// When the JWT `token` expires by its `exp` claim; `None` for a token that is not a
/// JWT or has no numeric `exp`.
pub(crate) fn expiry(token: &str) -> Option<SystemTime> {
    let mut parts = token.split('.');
    let (_header, payload, _signature) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() || payload.len() > MAX_PAYLOAD_BYTES {
        return None;
    }
    let payload = URL_SAFE_NO_PAD.decode(payload.trim_end_matches('=')).ok()?;
    let claims: serde_json::Value = serde_json::from_slice(&payload).ok()?;
    let exp = claims.get("exp")?.as_f64()?;
    (0.0..1e11)
        .contains(&exp)
        .then(|| SystemTime::UNIX_EPOCH + Duration::from_secs_f64(exp))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn jwt(payload: &str) -> String {
        format!(
            "eyJhbGciOiJSUzI1NiJ9.{}.c2ln",
            URL_SAFE_NO_PAD.encode(payload)
        )
    }

    #[test]
    fn exp_is_read_from_the_payload() {
        assert_eq!(
            expiry(&jwt(r#"{"sub":"kpress","exp":1700000000}"#)),
            Some(SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000))
        );
        for not in [
            jwt(r#"{"sub":"kpress"}"#),
            jwt(r#"{"exp":"soon"}"#),
            jwt(r#"{"exp":-1}"#),
            "opaque-token".to_owned(),
            "a.b.c.d".to_owned(),
            "a.!!!.c".to_owned(),
        ] {
            assert_eq!(expiry(&not), None, "{not}");
        }
    }
}
