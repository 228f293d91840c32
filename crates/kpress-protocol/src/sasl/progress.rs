//! Whether a client's own (relayed) SASL exchange has authenticated it.
//!
//! kpress never takes part in a client's authentication; it only watches the
//! frames go by, so that work worth protecting (batch rewriting) can wait
//! until the broker has accepted the client. The signals are what a Kafka
//! broker does (Kafka's `SaslServerAuthenticator`):
//!
//! - Before SaslHandshake, a SASL listener answers only ApiVersions and
//!   SaslHandshake; any other request closes the connection unanswered.
//! - During authentication, a request other than SaslAuthenticate gets one
//!   error answer (ILLEGAL_SASL_STATE), then the connection is closed.
//! - PLAIN and SCRAM fail a step with an error code. OAUTHBEARER fails a
//!   bad token with error code 0 and a JSON error as auth bytes; it succeeds
//!   with empty auth bytes.

use super::frames::{authenticate_version_known, walk_authenticate_response};
use crate::api_key;
use crate::wire::{LengthPrefix, Reader};

/// Follows one client connection's SASL exchange from its requests and the
/// broker's responses (in the order the broker answers them).
///
/// [`is_authenticated`](Self::is_authenticated) becomes true, and then stays
/// true (KIP-368 re-authentication repeats the exchange on an authenticated
/// connection), when:
///
/// - PLAIN: a SaslAuthenticate succeeded (error code 0);
/// - OAUTHBEARER: a SaslAuthenticate succeeded with empty auth bytes;
/// - SCRAM-SHA-256/512: two SaslAuthenticate steps succeeded;
/// - any mechanism (GSSAPI, custom ones): the broker answered two requests
///   other than ApiVersions, SaslHandshake and SaslAuthenticate, sent after
///   a successful step. Two, because a broker answers one such request
///   mid-authentication (with an error) before closing;
/// - no SaslHandshake at all: the broker answered a request other than
///   ApiVersions, SaslHandshake and SaslAuthenticate. A SASL listener closes
///   such a connection unanswered, so the listener needs no SASL.
///
/// Garbage requests and responses never panic; they count for nothing.
#[derive(Debug, Clone, Default)]
pub struct AuthProgress {
    authenticated: bool,
    /// The mechanism of the latest SaslHandshake, once one was sent.
    mechanism: Option<ClientMechanism>,
    /// SaslAuthenticate steps with error code 0 since that handshake.
    successful_steps: u32,
    /// A non-SASL request went out before any SaslHandshake: a SASL listener
    /// closes the connection on it, so an answer means the listener has no SASL.
    sent_before_handshake: bool,
    /// A non-SASL request went out after a successful step.
    sent_after_step: bool,
    /// Answers to non-SASL requests since then.
    answers_after_step: u32,
}

/// What a client's SaslHandshake named, as far as progress is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ClientMechanism {
    Plain,
    OAuthBearer,
    Scram,
    /// GSSAPI, a custom mechanism, or a name that does not parse.
    Other,
}

/// Answers to requests after a successful step that prove authentication;
/// see [`AuthProgress`].
const ANSWERS_PROVING_AUTHENTICATION: u32 = 2;

impl AuthProgress {
    pub fn new() -> Self {
        Self::default()
    }

    /// Whether the broker has accepted this connection's authentication (or
    /// needs none).
    pub fn is_authenticated(&self) -> bool {
        self.authenticated
    }

    /// Notes a request the client sent: `body` is the request body after its
    /// header.
    pub fn on_request(&mut self, api_key: i16, _api_version: i16, body: &[u8]) {
        if self.authenticated {
            return;
        }
        match api_key {
            api_key::SASL_HANDSHAKE => {
                // v0 and v1 carry the same body: one mechanism name.
                self.mechanism = Some(handshake_mechanism(body));
                self.successful_steps = 0;
                self.sent_after_step = false;
                self.answers_after_step = 0;
            }
            api_key::SASL_AUTHENTICATE | api_key::API_VERSIONS => {}
            _ => match self.mechanism {
                None => self.sent_before_handshake = true,
                Some(_) if self.successful_steps > 0 => self.sent_after_step = true,
                Some(_) => {}
            },
        }
    }

    /// Notes the broker's response to a request of `api_key` at
    /// `api_version`: `body` is the response body after its header. Only
    /// the broker's answers count, not those kpress gives itself.
    pub fn on_response(&mut self, api_key: i16, api_version: i16, body: &[u8]) {
        if self.authenticated {
            return;
        }
        match api_key {
            api_key::SASL_AUTHENTICATE => self.on_authenticate_response(api_version, body),
            api_key::SASL_HANDSHAKE | api_key::API_VERSIONS => {}
            _ => {
                if self.sent_before_handshake {
                    self.authenticated = true;
                } else if self.sent_after_step {
                    self.answers_after_step = self.answers_after_step.saturating_add(1);
                    if self.answers_after_step >= ANSWERS_PROVING_AUTHENTICATION {
                        self.authenticated = true;
                    }
                }
            }
        }
    }

    fn on_authenticate_response(&mut self, api_version: i16, body: &[u8]) {
        let Some(mechanism) = self.mechanism else {
            // SaslAuthenticate before SaslHandshake: the broker closes.
            return;
        };
        if !authenticate_version_known(api_version) {
            return;
        }
        let Ok(answer) = walk_authenticate_response(body, api_version) else {
            return;
        };
        if answer.error_code != 0 {
            return;
        }
        self.successful_steps = self.successful_steps.saturating_add(1);
        self.authenticated = match mechanism {
            ClientMechanism::Plain => true,
            ClientMechanism::OAuthBearer => answer.auth_bytes_len == 0,
            ClientMechanism::Scram => self.successful_steps >= 2,
            ClientMechanism::Other => false,
        };
    }
}

fn handshake_mechanism(body: &[u8]) -> ClientMechanism {
    let mut reader = Reader::new(body);
    match reader.length_prefixed(LengthPrefix::Int16) {
        Ok(Some(b"PLAIN")) => ClientMechanism::Plain,
        Ok(Some(b"OAUTHBEARER")) => ClientMechanism::OAuthBearer,
        Ok(Some(b"SCRAM-SHA-256" | b"SCRAM-SHA-512")) => ClientMechanism::Scram,
        _ => ClientMechanism::Other,
    }
}

#[cfg(test)]
mod tests {
    use bytes::{Bytes, BytesMut};
    use kafka_protocol::messages::{SaslAuthenticateResponse, SaslHandshakeRequest};
    use kafka_protocol::protocol::{Encodable, StrBytes};
    use proptest::prelude::*;

    use super::*;

    const METADATA: i16 = api_key::METADATA;
    const PRODUCE: i16 = api_key::PRODUCE;

    fn handshake(mechanism: &str) -> Vec<u8> {
        let mut body = BytesMut::new();
        SaslHandshakeRequest::default()
            .with_mechanism(StrBytes::from_string(mechanism.to_owned()))
            .encode(&mut body, 1)
            .unwrap();
        body.to_vec()
    }

    fn authenticate(version: i16, error_code: i16, auth: &[u8]) -> Vec<u8> {
        let mut body = BytesMut::new();
        SaslAuthenticateResponse::default()
            .with_error_code(error_code)
            .with_error_message((error_code != 0).then(|| StrBytes::from_static_str("no")))
            .with_auth_bytes(Bytes::copy_from_slice(auth))
            .encode(&mut body, version)
            .unwrap();
        body.to_vec()
    }

    /// ApiVersions, then SaslHandshake naming `mechanism`, both answered.
    fn started(mechanism: &str) -> AuthProgress {
        let mut progress = AuthProgress::new();
        progress.on_request(api_key::API_VERSIONS, 3, &[]);
        progress.on_response(api_key::API_VERSIONS, 3, &[0; 8]);
        progress.on_request(api_key::SASL_HANDSHAKE, 1, &handshake(mechanism));
        progress.on_response(api_key::SASL_HANDSHAKE, 1, &[0; 6]);
        assert!(!progress.is_authenticated());
        progress
    }

    fn step(progress: &mut AuthProgress, version: i16, error_code: i16, auth: &[u8]) {
        progress.on_request(api_key::SASL_AUTHENTICATE, version, b"client bytes");
        progress.on_response(
            api_key::SASL_AUTHENTICATE,
            version,
            &authenticate(version, error_code, auth),
        );
    }

    #[test]
    fn plain_needs_one_successful_step() {
        for version in 0..=2 {
            let mut progress = started("PLAIN");
            step(&mut progress, version, 0, b"");
            assert!(progress.is_authenticated(), "v{version}");
        }
        let mut progress = started("PLAIN");
        step(&mut progress, 1, 58, b"");
        assert!(!progress.is_authenticated());
    }

    #[test]
    fn scram_needs_two_successful_steps() {
        for mechanism in ["SCRAM-SHA-256", "SCRAM-SHA-512"] {
            for version in 0..=2 {
                let mut progress = started(mechanism);
                step(&mut progress, version, 0, b"r=nonce,s=c2FsdA==,i=4096");
                assert!(!progress.is_authenticated());
                step(&mut progress, version, 0, b"v=signature");
                assert!(progress.is_authenticated(), "{mechanism} v{version}");
            }
            // A refused proof does not count.
            let mut progress = started(mechanism);
            step(&mut progress, 2, 0, b"r=nonce,s=c2FsdA==,i=4096");
            step(&mut progress, 2, 58, b"");
            assert!(!progress.is_authenticated());
        }
    }

    #[test]
    fn oauthbearer_needs_a_step_with_empty_auth_bytes() {
        let mut progress = started("OAUTHBEARER");
        // A bad token: error code 0, a JSON error as auth bytes.
        step(&mut progress, 2, 0, br#"{"status":"invalid_token"}"#);
        assert!(!progress.is_authenticated());
        let mut progress = started("OAUTHBEARER");
        step(&mut progress, 2, 0, b"");
        assert!(progress.is_authenticated());
    }

    #[test]
    fn other_mechanisms_need_two_answers_after_a_step() {
        let mut progress = started("GSSAPI");
        step(&mut progress, 1, 0, b"challenge");
        step(&mut progress, 1, 0, b"challenge");
        assert!(!progress.is_authenticated());
        progress.on_request(METADATA, 12, b"metadata");
        // ApiVersions answers prove nothing: brokers answer them mid-exchange.
        progress.on_request(api_key::API_VERSIONS, 3, &[]);
        progress.on_response(METADATA, 12, b"answer");
        progress.on_response(api_key::API_VERSIONS, 3, b"answer");
        assert!(!progress.is_authenticated());
        progress.on_request(PRODUCE, 9, b"produce");
        progress.on_response(PRODUCE, 9, b"answer");
        assert!(progress.is_authenticated());
    }

    #[test]
    fn requests_before_any_step_prove_nothing() {
        // Sent mid-authentication: the broker answers once with an error and closes.
        let mut progress = started("GSSAPI");
        progress.on_request(METADATA, 12, b"metadata");
        progress.on_request(METADATA, 12, b"metadata");
        step(&mut progress, 1, 0, b"challenge");
        progress.on_response(METADATA, 12, b"error answer");
        progress.on_response(METADATA, 12, b"error answer");
        assert!(!progress.is_authenticated());
    }

    #[test]
    fn a_connection_without_sasl_is_authenticated_by_an_answer() {
        let mut progress = AuthProgress::new();
        progress.on_request(api_key::API_VERSIONS, 3, &[]);
        progress.on_response(api_key::API_VERSIONS, 3, &[0; 8]);
        assert!(!progress.is_authenticated());
        progress.on_request(METADATA, 12, b"metadata");
        assert!(!progress.is_authenticated());
        progress.on_response(METADATA, 12, b"answer");
        assert!(progress.is_authenticated());
    }

    #[test]
    fn an_answer_to_a_request_before_the_handshake_needs_no_sasl() {
        let mut progress = AuthProgress::new();
        progress.on_request(METADATA, 12, b"metadata");
        progress.on_request(api_key::SASL_HANDSHAKE, 1, &handshake("PLAIN"));
        progress.on_response(METADATA, 12, b"answer");
        assert!(progress.is_authenticated());
    }

    #[test]
    fn an_answer_without_a_request_proves_nothing() {
        let mut progress = AuthProgress::new();
        progress.on_response(METADATA, 12, b"answer");
        assert!(!progress.is_authenticated());
        let mut progress = started("SCRAM-SHA-256");
        progress.on_response(METADATA, 12, b"answer");
        progress.on_response(METADATA, 12, b"answer");
        assert!(!progress.is_authenticated());
    }

    #[test]
    fn authenticate_without_handshake_proves_nothing() {
        let mut progress = AuthProgress::new();
        step(&mut progress, 1, 0, b"");
        step(&mut progress, 1, 0, b"");
        assert!(!progress.is_authenticated());
    }

    #[test]
    fn a_new_handshake_restarts_the_count() {
        let mut progress = started("SCRAM-SHA-512");
        step(&mut progress, 2, 0, b"server-first");
        progress.on_request(api_key::SASL_HANDSHAKE, 1, &handshake("SCRAM-SHA-512"));
        step(&mut progress, 2, 0, b"server-first");
        assert!(!progress.is_authenticated());
        step(&mut progress, 2, 0, b"server-final");
        assert!(progress.is_authenticated());
    }

    #[test]
    fn reauthentication_keeps_the_connection_authenticated() {
        let mut progress = started("PLAIN");
        step(&mut progress, 2, 0, b"");
        assert!(progress.is_authenticated());
        progress.on_request(api_key::SASL_HANDSHAKE, 1, &handshake("PLAIN"));
        step(&mut progress, 2, 58, b"");
        assert!(progress.is_authenticated());
    }

    #[test]
    fn garbage_handshakes_and_answers_count_as_other() {
        // A handshake that does not parse: nothing known about the mechanism.
        let mut progress = AuthProgress::new();
        progress.on_request(api_key::SASL_HANDSHAKE, 1, &[0xff]);
        step(&mut progress, 1, 0, b"");
        assert!(!progress.is_authenticated());
        // A SaslAuthenticate answer that does not parse, or at an unknown version.
        let mut progress = started("PLAIN");
        let body = authenticate(1, 0, b"");
        progress.on_response(api_key::SASL_AUTHENTICATE, 1, &body[..body.len() - 1]);
        progress.on_response(api_key::SASL_AUTHENTICATE, 3, &body);
        progress.on_response(api_key::SASL_AUTHENTICATE, -1, &body);
        assert!(!progress.is_authenticated());
    }

    proptest! {
        #[test]
        fn random_frames_never_panic(
            frames in proptest::collection::vec(
                (any::<bool>(), 0i16..80, -1i16..20, proptest::collection::vec(any::<u8>(), 0..32)),
                0..16,
            )
        ) {
            let mut progress = AuthProgress::new();
            for (request, api_key, api_version, body) in frames {
                if request {
                    progress.on_request(api_key, api_version, &body);
                } else {
                    progress.on_response(api_key, api_version, &body);
                }
            }
            let _ = progress.is_authenticated();
        }
    }
}
