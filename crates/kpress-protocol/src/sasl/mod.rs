//! SASL for Kafka connections, sans-IO.
//!
//! Two jobs, one per direction of trust:
//!
//! - **kpress's own side connections** (its Metadata requests) authenticate
//!   with kpress's configured credentials: [`handshake_request`] and
//!   [`authenticate_request`] build the frames, [`parse_handshake_response`]
//!   and [`parse_authenticate_response`] read the broker's answers
//!   ([`session_lifetime_ms`]: when the broker wants re-authentication), and
//!   [`SaslClient`] produces the auth bytes for PLAIN and SCRAM-SHA-256/512
//!   (RFC 4616, RFC 5802, RFC 7677). The caller owns the socket:
//!
//!   ```text
//!   send handshake_request(mechanism); parse_handshake_response
//!   bytes = client.first_message()
//!   loop: send authenticate_request(bytes); server = parse_authenticate_response
//!         match client.next(server)? { Step::Send(b) => bytes = b, Step::Done => break }
//!   ```
//!
//! - **Client connections** relay the client's own SASL exchange untouched;
//!   [`AuthProgress`] watches it so that kpress can hold back work (batch
//!   rewriting) until the broker has accepted the client.

mod client;
mod frames;
pub mod oauthbearer;
mod progress;
mod scram;

use std::fmt;
use std::str::FromStr;

pub use client::{SaslClient, Step};
pub use frames::{
    authenticate_request, handshake_request, parse_authenticate_response, parse_handshake_response,
    session_lifetime_ms, SASL_AUTHENTICATE_VERSION, SASL_HANDSHAKE_VERSION,
};
pub use progress::AuthProgress;
pub use scram::{MAX_SCRAM_ITERATIONS, MIN_SCRAM_ITERATIONS};

use crate::error::ProtocolError;

/// A SASL mechanism kpress can authenticate its own connections with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Mechanism {
    Plain,
    ScramSha256,
    ScramSha512,
    /// RFC 7628: a bearer token from [`oauthbearer::initial_response`], not a password.
    OAuthBearer,
}

impl Mechanism {
    /// Every mechanism, in the order error messages list them.
    pub const ALL: [Mechanism; 4] = [
        Mechanism::Plain,
        Mechanism::ScramSha256,
        Mechanism::ScramSha512,
        Mechanism::OAuthBearer,
    ];

    /// The mechanisms [`SaslClient`] logs in with a username and password.
    pub const WITH_PASSWORD: [Mechanism; 3] = [
        Mechanism::Plain,
        Mechanism::ScramSha256,
        Mechanism::ScramSha512,
    ];

    /// The IANA name, as SaslHandshake and the policy file spell it.
    pub fn name(self) -> &'static str {
        match self {
            Mechanism::Plain => "PLAIN",
            Mechanism::ScramSha256 => "SCRAM-SHA-256",
            Mechanism::ScramSha512 => "SCRAM-SHA-512",
            Mechanism::OAuthBearer => "OAUTHBEARER",
        }
    }
}

impl fmt::Display for Mechanism {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Mechanism {
    type Err = SaslError;

    /// Exact names only: Kafka brokers compare mechanism names case-sensitively.
    fn from_str(name: &str) -> Result<Self, SaslError> {
        Mechanism::ALL
            .into_iter()
            .find(|mechanism| mechanism.name() == name)
            .ok_or_else(|| SaslError::UnknownMechanism {
                name: bounded_text(name, MAX_NAME_CHARS),
            })
    }
}

/// Why a SASL exchange could not go on.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SaslError {
    #[error("unknown SASL mechanism {name:?} (kpress supports \"PLAIN\", \"SCRAM-SHA-256\", \"SCRAM-SHA-512\" and \"OAUTHBEARER\")")]
    UnknownMechanism { name: String },
    /// A username or password SASL cannot carry.
    #[error("SASL {field} {problem}")]
    InvalidCredential {
        field: &'static str,
        problem: &'static str,
    },
    #[error("no randomness for the SCRAM client nonce: {reason}")]
    Randomness { reason: String },
    /// A frame kpress could not build, or a broker answer that does not parse.
    #[error(transparent)]
    Protocol(#[from] ProtocolError),
    /// SaslHandshake error UNSUPPORTED_SASL_MECHANISM (33).
    #[error("the broker does not enable the requested SASL mechanism (UNSUPPORTED_SASL_MECHANISM); it enables: {enabled}")]
    MechanismNotEnabled {
        /// The broker's list, comma-separated (bounded in length).
        enabled: String,
    },
    /// Any other SaslHandshake error.
    #[error("SaslHandshake failed: {error} (error code {code})")]
    HandshakeFailed { code: i16, error: String },
    /// A SaslAuthenticate error, with the broker's message: it says why
    /// (wrong password, unknown user, ...).
    #[error("SaslAuthenticate failed: {error} (error code {code}): {message}")]
    AuthenticationFailed {
        code: i16,
        error: String,
        message: String,
    },
    /// A SCRAM server message that does not parse or breaks RFC 5802.
    #[error("malformed SCRAM {message} from the broker: {problem}")]
    MalformedScram {
        message: &'static str,
        problem: String,
    },
    /// Iteration counts below the minimum are weak; above the maximum they
    /// would spend seconds of CPU on PBKDF2.
    #[error("SCRAM iteration count {iterations} from the broker is outside {min}..={max}")]
    ScramIterations { iterations: u64, min: u32, max: u32 },
    /// The server-final `e=` attribute.
    #[error("the broker refused SCRAM authentication: {error}")]
    ScramServerError { error: String },
    /// The broker did not prove that it knows kpress's credentials.
    #[error("SCRAM server signature does not match: the broker does not hold kpress's credentials (or is not the broker it claims to be)")]
    ScramServerSignature,
    /// [`SaslClient::next`] after the exchange finished or failed.
    #[error("the {mechanism} exchange is already over; {bytes} more bytes from the broker are unexpected")]
    ExchangeOver { mechanism: Mechanism, bytes: usize },
}

/// Longest mechanism name an error message repeats.
const MAX_NAME_CHARS: usize = 64;
/// Longest broker error text an error message repeats.
const MAX_MESSAGE_CHARS: usize = 1024;

/// `text` cut to `max_chars`, control characters escaped: broker and
/// client text goes into log lines, whole and on one line.
fn bounded_text(text: &str, max_chars: usize) -> String {
    let mut out = String::with_capacity(text.len().min(max_chars));
    for (count, c) in text.chars().enumerate() {
        if count == max_chars {
            out.push('…');
            break;
        }
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mechanism_names_round_trip() {
        for mechanism in Mechanism::ALL {
            assert_eq!(mechanism.name().parse::<Mechanism>(), Ok(mechanism));
            assert_eq!(mechanism.to_string(), mechanism.name());
        }
        assert_eq!(
            [
                Mechanism::Plain.name(),
                Mechanism::ScramSha256.name(),
                Mechanism::ScramSha512.name(),
                Mechanism::OAuthBearer.name()
            ],
            ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"]
        );
    }

    #[test]
    fn unknown_mechanism_names_the_supported_ones() {
        for name in [
            "plain",
            "SCRAM-SHA-1",
            "GSSAPI",
            "",
            "PLAIN ",
            "oauthbearer",
        ] {
            let err = name.parse::<Mechanism>().unwrap_err();
            assert_eq!(
                err,
                SaslError::UnknownMechanism {
                    name: name.to_owned()
                }
            );
            let text = err.to_string();
            assert!(text.contains("SCRAM-SHA-512"), "{text}");
        }
    }

    #[test]
    fn bounded_text_cuts_and_escapes() {
        assert_eq!(bounded_text("abc", 3), "abc");
        assert_eq!(bounded_text("abcd", 3), "abc…");
        assert_eq!(bounded_text("a\nb\0", 10), "a\\nb\\u{0}");
        assert_eq!(bounded_text("ééé", 2), "éé…");
    }
}
