//! The client side of a SASL exchange: auth bytes in, auth bytes out.

use std::fmt;

use super::scram::{self, ScramHash};
use super::{Mechanism, SaslError};

/// What to do after the broker's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Send these auth bytes in the next SaslAuthenticate request.
    Send(Vec<u8>),
    /// Authenticated: the connection is ready for other requests.
    Done,
}

/// A sans-IO SASL client for kpress's own connections: PLAIN (one round
/// trip) or SCRAM-SHA-256/512 (two, with the broker proving it holds the
/// credentials too).
///
/// Send [`first_message`](Self::first_message) in the first
/// SaslAuthenticate request, then feed each answer's auth bytes to
/// [`next`](Self::next) until it returns [`Step::Done`]. An error ends the
/// exchange: the connection must be dropped.
pub struct SaslClient {
    mechanism: Mechanism,
    username: String,
    password: String,
    /// SCRAM's client nonce (empty for PLAIN).
    nonce: String,
    state: State,
}

enum State {
    /// The first message is out; its answer is awaited.
    First,
    /// SCRAM's client-final message is out; the server-final is awaited.
    ScramFinal {
        server_key: Vec<u8>,
        auth_message: Vec<u8>,
    },
    /// Authenticated, or failed.
    Over,
}

impl SaslClient {
    /// A client for `username` and `password`. Fails on credentials SASL
    /// cannot carry (empty username, a NUL byte), or when the operating
    /// system has no randomness for SCRAM's nonce.
    pub fn new(mechanism: Mechanism, username: &str, password: &str) -> Result<Self, SaslError> {
        let nonce = match mechanism {
            Mechanism::OAuthBearer => {
                return Err(SaslError::InvalidCredential {
                    field: "password",
                    problem: "is not what OAUTHBEARER takes: it sends a bearer token",
                })
            }
            Mechanism::Plain => String::new(),
            Mechanism::ScramSha256 | Mechanism::ScramSha512 => scram::random_nonce()?,
        };
        Self::with_nonce(mechanism, username, password, nonce)
    }

    /// A client whose SCRAM nonce is fixed: for protocol test vectors.
    pub(super) fn with_nonce(
        mechanism: Mechanism,
        username: &str,
        password: &str,
        nonce: String,
    ) -> Result<Self, SaslError> {
        // PLAIN separates its fields with NUL; SCRAM's saslname excludes it.
        let invalid = |field, problem| Err(SaslError::InvalidCredential { field, problem });
        if username.is_empty() {
            return invalid("username", "is empty");
        }
        if username.contains('\0') {
            return invalid("username", "contains a NUL character");
        }
        if password.is_empty() {
            return invalid("password", "is empty");
        }
        if password.contains('\0') {
            return invalid("password", "contains a NUL character");
        }
        Ok(SaslClient {
            mechanism,
            username: username.to_owned(),
            password: password.to_owned(),
            nonce,
            state: State::First,
        })
    }

    pub fn mechanism(&self) -> Mechanism {
        self.mechanism
    }

    /// The auth bytes of the first SaslAuthenticate request: PLAIN's
    /// `\0username\0password`, or SCRAM's client-first message
    /// `n,,n=<username>,r=<nonce>`.
    pub fn first_message(&self) -> Vec<u8> {
        match self.scram_hash() {
            None => {
                let mut message = Vec::with_capacity(2 + self.username.len() + self.password.len());
                message.push(0);
                message.extend_from_slice(self.username.as_bytes());
                message.push(0);
                message.extend_from_slice(self.password.as_bytes());
                message
            }
            Some(_) => format!("n,,{}", self.client_first_bare()).into_bytes(),
        }
    }

    /// Reads the auth bytes of the broker's answer (see
    /// [`super::parse_authenticate_response`]) and says what comes next.
    ///
    /// For SCRAM, the answer to the first message runs PBKDF2 with the
    /// broker's iteration count (at most [`super::MAX_SCRAM_ITERATIONS`]):
    /// at most 10 ms at Kafka's counts (up to 16384), about half a second
    /// for SHA-512 at the cap (release build).
    pub fn next(&mut self, server_bytes: &[u8]) -> Result<Step, SaslError> {
        // Whatever happens, this answer is the last one of its state; an
        // error leaves the exchange over.
        let state = std::mem::replace(&mut self.state, State::Over);
        match (state, self.scram_hash()) {
            // PLAIN's answer carries nothing: the error code was the verdict.
            (State::First, None) => Ok(Step::Done),
            (State::First, Some(hash)) => {
                let client_final = scram::client_final(
                    hash,
                    &self.password,
                    &self.nonce,
                    &self.client_first_bare(),
                    server_bytes,
                )?;
                self.state = State::ScramFinal {
                    server_key: client_final.server_key,
                    auth_message: client_final.auth_message,
                };
                Ok(Step::Send(client_final.message))
            }
            (
                State::ScramFinal {
                    server_key,
                    auth_message,
                },
                Some(hash),
            ) => {
                scram::verify_server_final(hash, &server_key, &auth_message, server_bytes)?;
                Ok(Step::Done)
            }
            (State::ScramFinal { .. } | State::Over, _) => Err(SaslError::ExchangeOver {
                mechanism: self.mechanism,
                bytes: server_bytes.len(),
            }),
        }
    }

    fn scram_hash(&self) -> Option<ScramHash> {
        match self.mechanism {
            Mechanism::Plain | Mechanism::OAuthBearer => None,
            Mechanism::ScramSha256 => Some(ScramHash::Sha256),
            Mechanism::ScramSha512 => Some(ScramHash::Sha512),
        }
    }

    fn client_first_bare(&self) -> String {
        scram::client_first_bare(&self.username, &self.nonce)
    }
}

impl fmt::Debug for SaslClient {
    /// The password stays out of logs.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = match self.state {
            State::First => "first",
            State::ScramFinal { .. } => "scram-final",
            State::Over => "over",
        };
        f.debug_struct("SaslClient")
            .field("mechanism", &self.mechanism)
            .field("username", &self.username)
            .field("state", &state)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use base64::engine::general_purpose::STANDARD as BASE64;
    use base64::Engine;
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn plain_sends_nul_separated_credentials_then_is_done() {
        let mut client = SaslClient::new(Mechanism::Plain, "alice", "s3cret,=").unwrap();
        assert_eq!(client.first_message(), b"\0alice\0s3cret,=");
        assert_eq!(client.next(b""), Ok(Step::Done));
        assert!(matches!(
            client.next(b""),
            Err(SaslError::ExchangeOver {
                mechanism: Mechanism::Plain,
                bytes: 0
            })
        ));
    }

    #[test]
    fn credentials_sasl_cannot_carry_are_refused() {
        for mechanism in Mechanism::WITH_PASSWORD {
            for (username, password, field) in [
                ("", "p", "username"),
                ("a\0b", "p", "username"),
                ("u", "", "password"),
                ("u", "p\0", "password"),
            ] {
                let err = SaslClient::new(mechanism, username, password).unwrap_err();
                assert!(
                    matches!(err, SaslError::InvalidCredential { field: f, .. } if f == field),
                    "{mechanism} {username:?} {password:?}: {err}"
                );
            }
        }
    }

    #[test]
    fn debug_hides_the_password() {
        let client = SaslClient::new(Mechanism::ScramSha256, "user", "pencil").unwrap();
        let debug = format!("{client:?}");
        assert!(
            debug.contains("user") && !debug.contains("pencil"),
            "{debug}"
        );
    }

    #[test]
    fn scram_client_first_has_a_fresh_nonce_and_escaped_name() {
        let a = SaslClient::new(Mechanism::ScramSha512, "a=b,c", "p").unwrap();
        let b = SaslClient::new(Mechanism::ScramSha512, "a=b,c", "p").unwrap();
        let first = String::from_utf8(a.first_message()).unwrap();
        let nonce = first.strip_prefix("n,,n=a=3Db=2Cc,r=").unwrap();
        assert_eq!(nonce.len(), 32);
        assert_ne!(a.first_message(), b.first_message());
        assert_eq!(a.first_message(), a.first_message());
    }

    const RFC7677_NONCE: &str = "rOprNGfwEbeRWgbNEkqO";
    const RFC7677_SERVER_FIRST: &[u8] =
        b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096";

    fn rfc7677_client() -> SaslClient {
        SaslClient::with_nonce(
            Mechanism::ScramSha256,
            "user",
            "pencil",
            RFC7677_NONCE.to_owned(),
        )
        .unwrap()
    }

    /// RFC 7677 section 3's SCRAM-SHA-256 exchange, byte for byte.
    #[test]
    fn scram_sha256_rfc7677_test_vector() {
        let mut client = rfc7677_client();
        assert_eq!(client.first_message(), b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO");
        let Ok(Step::Send(client_final)) = client.next(RFC7677_SERVER_FIRST) else {
            panic!("no client-final message");
        };
        assert_eq!(
            String::from_utf8(client_final).unwrap(),
            "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,\
             p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
        );
        assert_eq!(
            client.next(b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="),
            Ok(Step::Done)
        );
        assert!(matches!(
            client.next(b""),
            Err(SaslError::ExchangeOver { .. })
        ));
    }

    #[test]
    fn tampered_server_signature_is_refused() {
        let good = BASE64
            .decode("6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=")
            .unwrap();
        let mut flipped = good.clone();
        flipped[31] ^= 1;
        let short = &good[..31];
        for signature in [&flipped[..], short, b""] {
            let mut client = rfc7677_client();
            client.next(RFC7677_SERVER_FIRST).unwrap();
            let server_final = format!("v={}", BASE64.encode(signature));
            assert_eq!(
                client.next(server_final.as_bytes()),
                Err(SaslError::ScramServerSignature)
            );
            // A failed exchange stays failed.
            assert!(matches!(
                client.next(b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="),
                Err(SaslError::ExchangeOver { .. })
            ));
        }
    }

    #[test]
    fn server_error_attribute_is_named() {
        let mut client = rfc7677_client();
        client.next(RFC7677_SERVER_FIRST).unwrap();
        let err = client.next(b"e=invalid-proof").unwrap_err();
        assert_eq!(
            err,
            SaslError::ScramServerError {
                error: "invalid-proof".to_owned()
            }
        );
        assert!(err.to_string().contains("invalid-proof"));
    }

    #[test]
    fn bad_iterations_are_refused_before_any_pbkdf2() {
        for i in ["4095", "1000001", "18446744073709551616", "many"] {
            let mut client = rfc7677_client();
            let server_first = format!(
                "r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i={i}"
            );
            let err = client.next(server_first.as_bytes()).unwrap_err();
            assert!(
                matches!(
                    err,
                    SaslError::ScramIterations { .. } | SaslError::MalformedScram { .. }
                ),
                "i={i}: {err}"
            );
        }
    }

    #[test]
    fn garbage_server_first_messages_are_refused() {
        let cases: &[&[u8]] = &[
            b"",
            b"\xff\xfe",
            b"garbage",
            b"r=,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096",
            // The nonce must extend ours, not replace or merely repeat it.
            b"r=someoneelse%hvYD,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096",
            b"r=rOprNGfwEbeRWgbNEkqO,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096",
            b"r=rOprNGfwEbeRWgbNEkq,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096",
            b"r=rOprNGfwEbeRWgbNEkqO\x01x,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096",
            b"m=ext,r=rOprNGfwEbeRWgbNEkqO%hvYD,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096",
            b"s=W22ZaJ0SNY7soEsUEjb6gQ==,r=rOprNGfwEbeRWgbNEkqO%hvYD,i=4096",
            b"r=rOprNGfwEbeRWgbNEkqO%hvYD,s=not base64!,i=4096",
            b"r=rOprNGfwEbeRWgbNEkqO%hvYD,s=,i=4096",
            b"r=rOprNGfwEbeRWgbNEkqO%hvYD,s=W22ZaJ0SNY7soEsUEjb6gQ==",
            b"r=rOprNGfwEbeRWgbNEkqO%hvYD,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=",
            b"e=other-error",
        ];
        for case in cases {
            let mut client = rfc7677_client();
            let err = client.next(case).unwrap_err();
            assert!(
                matches!(err, SaslError::MalformedScram { .. }),
                "{:?}: {err}",
                String::from_utf8_lossy(case)
            );
            assert!(matches!(
                client.next(RFC7677_SERVER_FIRST),
                Err(SaslError::ExchangeOver { .. })
            ));
        }
    }

    #[test]
    fn server_first_extensions_after_the_iterations_are_ignored() {
        let mut client = rfc7677_client();
        let server_first = [RFC7677_SERVER_FIRST, b",x=future"].concat();
        assert!(matches!(client.next(&server_first), Ok(Step::Send(_))));
    }

    #[test]
    fn garbage_server_final_messages_are_refused() {
        for case in [&b""[..], b"\xff", b"x=1", b"v=***", b"v", b"=v=abc"] {
            let mut client = rfc7677_client();
            client.next(RFC7677_SERVER_FIRST).unwrap();
            let err = client.next(case).unwrap_err();
            assert!(
                matches!(err, SaslError::MalformedScram { .. }),
                "{:?}: {err}",
                String::from_utf8_lossy(case)
            );
        }
    }

    /// A SCRAM server as RFC 5802 describes it, for round trips.
    struct TestServer {
        hash: ScramHash,
        salt: Vec<u8>,
        iterations: u32,
        stored_key: Vec<u8>,
        server_key: Vec<u8>,
    }

    impl TestServer {
        fn new(hash: ScramHash, password: &str) -> Self {
            let salt = b"kpress-test-salt".to_vec();
            let iterations = 4096;
            let mut salted = vec![0u8; hash.hash(b"").len()];
            match hash {
                ScramHash::Sha256 => pbkdf2::pbkdf2_hmac::<sha2::Sha256>(
                    password.as_bytes(),
                    &salt,
                    iterations,
                    &mut salted,
                ),
                ScramHash::Sha512 => pbkdf2::pbkdf2_hmac::<sha2::Sha512>(
                    password.as_bytes(),
                    &salt,
                    iterations,
                    &mut salted,
                ),
            }
            let client_key = hash.hmac(&salted, b"Client Key");
            TestServer {
                hash,
                salt,
                iterations,
                stored_key: hash.hash(&client_key),
                server_key: hash.hmac(&salted, b"Server Key"),
            }
        }

        /// Answers a client-first message; returns the server-first and
        /// the client-first-bare it read.
        fn first(&self, client_first: &[u8]) -> (String, String) {
            let client_first = std::str::from_utf8(client_first).unwrap();
            let bare = client_first.strip_prefix("n,,").unwrap().to_owned();
            let nonce = bare.split(",r=").nth(1).unwrap();
            let server_first = format!(
                "r={nonce}3rfcNHYJY1ZVvWVs7j,s={},i={}",
                BASE64.encode(&self.salt),
                self.iterations
            );
            (server_first, bare)
        }

        /// Checks the client's proof; returns the server-final message.
        fn last(&self, bare: &str, server_first: &str, client_final: &[u8]) -> Result<String, ()> {
            let client_final = std::str::from_utf8(client_final).unwrap();
            let (without_proof, proof) = client_final.rsplit_once(",p=").unwrap();
            let auth_message = format!("{bare},{server_first},{without_proof}");
            let signature = self.hash.hmac(&self.stored_key, auth_message.as_bytes());
            let client_key: Vec<u8> = BASE64
                .decode(proof)
                .unwrap()
                .iter()
                .zip(&signature)
                .map(|(p, s)| p ^ s)
                .collect();
            if self.hash.hash(&client_key) != self.stored_key {
                return Err(());
            }
            let server_signature = self.hash.hmac(&self.server_key, auth_message.as_bytes());
            Ok(format!("v={}", BASE64.encode(server_signature)))
        }
    }

    fn round_trip(
        mechanism: Mechanism,
        hash: ScramHash,
        username: &str,
        password: &str,
        server_password: &str,
    ) -> Result<Step, SaslError> {
        let server = TestServer::new(hash, server_password);
        let mut client = SaslClient::new(mechanism, username, password).unwrap();
        let (server_first, bare) = server.first(&client.first_message());
        assert_eq!(
            bare.split(",r=").next().unwrap(),
            format!("n={}", scram::escape_username(username))
        );
        let Step::Send(client_final) = client.next(server_first.as_bytes())? else {
            panic!("no client-final message");
        };
        match server.last(&bare, &server_first, &client_final) {
            Ok(server_final) => client.next(server_final.as_bytes()),
            Err(()) => Err(SaslError::ScramServerError {
                error: "invalid-proof".to_owned(),
            }),
        }
    }

    #[test]
    fn scram_sha512_round_trip() {
        assert_eq!(
            round_trip(
                Mechanism::ScramSha512,
                ScramHash::Sha512,
                "kpress=proxy,1",
                "pässwörd",
                "pässwörd"
            ),
            Ok(Step::Done)
        );
        assert_eq!(
            round_trip(
                Mechanism::ScramSha512,
                ScramHash::Sha512,
                "kpress",
                "wrong",
                "right"
            ),
            Err(SaslError::ScramServerError {
                error: "invalid-proof".to_owned()
            })
        );
    }

    #[test]
    fn scram_sha256_round_trip() {
        assert_eq!(
            round_trip(
                Mechanism::ScramSha256,
                ScramHash::Sha256,
                "kpress",
                "secret",
                "secret"
            ),
            Ok(Step::Done)
        );
    }

    #[test]
    fn a_server_of_another_hash_is_refused() {
        // A SHA-256 server's signature cannot satisfy a SHA-512 client.
        let server = TestServer::new(ScramHash::Sha256, "p");
        let mut client = SaslClient::new(Mechanism::ScramSha512, "u", "p").unwrap();
        let (server_first, bare) = server.first(&client.first_message());
        let Ok(Step::Send(client_final)) = client.next(server_first.as_bytes()) else {
            panic!("no client-final message");
        };
        assert!(server.last(&bare, &server_first, &client_final).is_err());
        let forged = format!(
            "v={}",
            BASE64.encode(server.hash.hmac(&server.server_key, b"anything"))
        );
        assert_eq!(
            client.next(forged.as_bytes()),
            Err(SaslError::ScramServerSignature)
        );
    }

    /// The RFC 7677 client's state after the server-first message (PBKDF2
    /// runs once, not once per case).
    fn rfc7677_client_final() -> &'static scram::ClientFinal {
        static CLIENT_FINAL: std::sync::OnceLock<scram::ClientFinal> = std::sync::OnceLock::new();
        CLIENT_FINAL.get_or_init(|| {
            let client = rfc7677_client();
            scram::client_final(
                ScramHash::Sha256,
                "pencil",
                RFC7677_NONCE,
                &client.client_first_bare(),
                RFC7677_SERVER_FIRST,
            )
            .unwrap()
        })
    }

    proptest! {
        #[test]
        fn random_server_first_messages_never_panic(first in proptest::collection::vec(any::<u8>(), 0..96)) {
            let mut client = rfc7677_client();
            prop_assert!(client.next(&first).is_err());
            prop_assert!(client.next(&first).is_err());
        }

        #[test]
        fn random_server_final_messages_are_refused(last in proptest::collection::vec(any::<u8>(), 0..96)) {
            let state = rfc7677_client_final();
            let verified = scram::verify_server_final(ScramHash::Sha256, &state.server_key, &state.auth_message, &last);
            prop_assert!(verified.is_err());
        }
    }

    #[test]
    fn the_state_after_server_first_verifies_the_rfc7677_signature() {
        let state = rfc7677_client_final();
        assert_eq!(
            scram::verify_server_final(
                ScramHash::Sha256,
                &state.server_key,
                &state.auth_message,
                b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=",
            ),
            Ok(())
        );
    }
}
