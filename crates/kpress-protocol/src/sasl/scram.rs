//! SCRAM (RFC 5802) with SHA-256 and SHA-512 (RFC 7677): the client's
//! messages and proofs, and the checks on the server's messages.

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine;
use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256, Sha512};

use super::{bounded_text, SaslError, MAX_MESSAGE_CHARS};

/// Fewest PBKDF2 iterations kpress accepts (Kafka's own minimum, RFC 7677's
/// recommendation): fewer make a stolen exchange cheap to brute-force.
pub const MIN_SCRAM_ITERATIONS: u32 = 4096;
/// Most PBKDF2 iterations kpress runs (Kafka stores at most 16384): the cap
/// bounds one login to about half a second of CPU (SHA-512).
pub const MAX_SCRAM_ITERATIONS: u32 = 1_000_000;

/// The client nonce: 24 random bytes, 32 base64 characters.
const NONCE_BYTES: usize = 24;
/// `c=` of the client-final message: base64 of the GS2 header `n,,` (no
/// channel binding, no authorization identity).
const CHANNEL_BINDING: &str = "c=biws";

const SERVER_FIRST: &str = "server-first message";
const SERVER_FINAL: &str = "server-final message";

/// The hash a SCRAM mechanism is built on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ScramHash {
    Sha256,
    Sha512,
}

impl ScramHash {
    /// `Hi(password, salt, i)`: PBKDF2 with HMAC of this hash.
    fn salted_password(self, password: &[u8], salt: &[u8], iterations: u32) -> Vec<u8> {
        match self {
            ScramHash::Sha256 => {
                pbkdf2::pbkdf2_hmac_array::<Sha256, 32>(password, salt, iterations).to_vec()
            }
            ScramHash::Sha512 => {
                pbkdf2::pbkdf2_hmac_array::<Sha512, 64>(password, salt, iterations).to_vec()
            }
        }
    }

    pub(super) fn hmac(self, key: &[u8], message: &[u8]) -> Vec<u8> {
        match self {
            ScramHash::Sha256 => keyed::<Hmac<Sha256>>(key, message)
                .finalize()
                .into_bytes()
                .to_vec(),
            ScramHash::Sha512 => keyed::<Hmac<Sha512>>(key, message)
                .finalize()
                .into_bytes()
                .to_vec(),
        }
    }

    /// Whether `tag` is `HMAC(key, message)`, compared in constant time.
    fn verify_hmac(self, key: &[u8], message: &[u8], tag: &[u8]) -> bool {
        match self {
            ScramHash::Sha256 => keyed::<Hmac<Sha256>>(key, message)
                .verify_slice(tag)
                .is_ok(),
            ScramHash::Sha512 => keyed::<Hmac<Sha512>>(key, message)
                .verify_slice(tag)
                .is_ok(),
        }
    }

    pub(super) fn hash(self, data: &[u8]) -> Vec<u8> {
        match self {
            ScramHash::Sha256 => Sha256::digest(data).to_vec(),
            ScramHash::Sha512 => Sha512::digest(data).to_vec(),
        }
    }
}

fn keyed<M: Mac + hmac::digest::KeyInit>(key: &[u8], message: &[u8]) -> M {
    // HMAC hashes keys longer than a block and pads shorter ones: no key
    // length is refused.
    let mut mac = <M as Mac>::new_from_slice(key).expect("HMAC takes keys of any length");
    mac.update(message);
    mac
}

/// A fresh client nonce from the operating system's random source.
pub(super) fn random_nonce() -> Result<String, SaslError> {
    let mut bytes = [0u8; NONCE_BYTES];
    getrandom::fill(&mut bytes).map_err(|e| SaslError::Randomness {
        reason: e.to_string(),
    })?;
    Ok(BASE64.encode(bytes))
}

/// `saslname` of RFC 5802: `=` and `,` escaped.
pub(super) fn escape_username(username: &str) -> String {
    let mut out = String::with_capacity(username.len());
    for c in username.chars() {
        match c {
            '=' => out.push_str("=3D"),
            ',' => out.push_str("=2C"),
            c => out.push(c),
        }
    }
    out
}

/// `client-first-message-bare`: `n=<saslname>,r=<nonce>`.
pub(super) fn client_first_bare(username: &str, nonce: &str) -> String {
    format!("n={},r={}", escape_username(username), nonce)
}

/// The client-final message and what checking the server-final needs.
#[derive(Debug)]
pub(super) struct ClientFinal {
    pub(super) message: Vec<u8>,
    pub(super) server_key: Vec<u8>,
    pub(super) auth_message: Vec<u8>,
}

/// Reads the server-first message and computes the client-final message
/// (`c=biws,r=<nonce>,p=<proof>`). Runs PBKDF2 with the server's iteration
/// count, at most [`MAX_SCRAM_ITERATIONS`].
pub(super) fn client_final(
    hash: ScramHash,
    password: &str,
    client_nonce: &str,
    client_first_bare: &str,
    server_first: &[u8],
) -> Result<ClientFinal, SaslError> {
    let server_first = scram_text(SERVER_FIRST, server_first)?;
    let parsed = parse_server_first(server_first)?;
    if !(parsed.nonce.len() > client_nonce.len() && parsed.nonce.starts_with(client_nonce)) {
        return Err(malformed(
            SERVER_FIRST,
            "its nonce r= does not extend kpress's client nonce".to_owned(),
        ));
    }
    let salted = hash.salted_password(password.as_bytes(), &parsed.salt, parsed.iterations);
    let client_key = hash.hmac(&salted, b"Client Key");
    let stored_key = hash.hash(&client_key);
    let server_key = hash.hmac(&salted, b"Server Key");
    let without_proof = format!("{CHANNEL_BINDING},r={}", parsed.nonce);
    let auth_message = format!("{client_first_bare},{server_first},{without_proof}").into_bytes();
    let client_signature = hash.hmac(&stored_key, &auth_message);
    let proof: Vec<u8> = client_key
        .iter()
        .zip(&client_signature)
        .map(|(key, signature)| key ^ signature)
        .collect();
    let message = format!("{without_proof},p={}", BASE64.encode(proof)).into_bytes();
    Ok(ClientFinal {
        message,
        server_key,
        auth_message,
    })
}

/// Checks the server-final message: `v=<ServerSignature>` must be
/// `HMAC(ServerKey, AuthMessage)`; `e=<error>` is the server's refusal.
pub(super) fn verify_server_final(
    hash: ScramHash,
    server_key: &[u8],
    auth_message: &[u8],
    server_final: &[u8],
) -> Result<(), SaslError> {
    let server_final = scram_text(SERVER_FINAL, server_final)?;
    // Extensions may follow the first attribute; kpress knows none.
    let first = server_final.split(',').next().unwrap_or_default();
    if let Some(error) = first.strip_prefix("e=") {
        return Err(SaslError::ScramServerError {
            error: bounded_text(error, MAX_MESSAGE_CHARS),
        });
    }
    let Some(signature) = first.strip_prefix("v=") else {
        return Err(malformed(
            SERVER_FINAL,
            "it starts with neither v= nor e=".to_owned(),
        ));
    };
    let signature = BASE64
        .decode(signature)
        .map_err(|e| malformed(SERVER_FINAL, format!("v= is not base64: {e}")))?;
    if hash.verify_hmac(server_key, auth_message, &signature) {
        Ok(())
    } else {
        Err(SaslError::ScramServerSignature)
    }
}

struct ServerFirst<'a> {
    nonce: &'a str,
    salt: Vec<u8>,
    iterations: u32,
}

/// `[m=...,]r=<nonce>,s=<salt>,i=<iterations>[,extensions]`.
fn parse_server_first(message: &str) -> Result<ServerFirst<'_>, SaslError> {
    let mut attributes = message.split(',');
    let mut next = |name: &str| -> Result<&str, SaslError> {
        let attribute = attributes.next().unwrap_or_default();
        if attribute.starts_with("m=") {
            // RFC 5802: a client must fail on a mandatory extension it does not know.
            return Err(malformed(
                SERVER_FIRST,
                "it demands a mandatory extension (m=) kpress does not know".to_owned(),
            ));
        }
        attribute
            .strip_prefix(name)
            .ok_or_else(|| malformed(SERVER_FIRST, format!("no {name} attribute where expected")))
    };
    let nonce = next("r=")?;
    let salt = next("s=")?;
    let iterations = next("i=")?;
    if nonce.is_empty() || !nonce.bytes().all(|b| (0x21..=0x7e).contains(&b)) {
        return Err(malformed(
            SERVER_FIRST,
            "its nonce r= is empty or not printable ASCII".to_owned(),
        ));
    }
    let salt = BASE64
        .decode(salt)
        .map_err(|e| malformed(SERVER_FIRST, format!("salt s= is not base64: {e}")))?;
    if salt.is_empty() {
        return Err(malformed(SERVER_FIRST, "salt s= is empty".to_owned()));
    }
    if iterations.is_empty() || !iterations.bytes().all(|b| b.is_ascii_digit()) {
        return Err(malformed(
            SERVER_FIRST,
            format!(
                "iteration count i={} is not a number",
                bounded_text(iterations, 32)
            ),
        ));
    }
    // All digits: only overflow fails, and an overflowing count is out of range anyway.
    let count = iterations.parse::<u64>().unwrap_or(u64::MAX);
    let iterations = u32::try_from(count)
        .ok()
        .filter(|i| (MIN_SCRAM_ITERATIONS..=MAX_SCRAM_ITERATIONS).contains(i))
        .ok_or(SaslError::ScramIterations {
            iterations: count,
            min: MIN_SCRAM_ITERATIONS,
            max: MAX_SCRAM_ITERATIONS,
        })?;
    Ok(ServerFirst {
        nonce,
        salt,
        iterations,
    })
}

fn scram_text<'a>(message: &'static str, bytes: &'a [u8]) -> Result<&'a str, SaslError> {
    std::str::from_utf8(bytes).map_err(|e| malformed(message, format!("not UTF-8: {e}")))
}

fn malformed(message: &'static str, problem: String) -> SaslError {
    SaslError::MalformedScram { message, problem }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn usernames_are_escaped() {
        assert_eq!(escape_username("user"), "user");
        assert_eq!(escape_username("a=b,c"), "a=3Db=2Cc");
        assert_eq!(escape_username("=,="), "=3D=2C=3D");
        assert_eq!(client_first_bare("é,", "xyz"), "n=é=2C,r=xyz");
    }

    #[test]
    fn nonces_are_fresh_printable_and_comma_free() {
        let a = random_nonce().unwrap();
        let b = random_nonce().unwrap();
        assert_ne!(a, b);
        assert_eq!(a.len(), 32);
        assert!(a.bytes().all(|c| (0x21..=0x7e).contains(&c) && c != b','));
    }

    #[test]
    fn iteration_bounds() {
        let check =
            |i: &str| parse_server_first(&format!("r=abc,s=c2FsdA==,i={i}")).map(|p| p.iterations);
        assert_eq!(check("4096").ok(), Some(4096));
        assert_eq!(check("1000000").ok(), Some(1_000_000));
        for (i, count) in [
            ("4095", 4095),
            ("1", 1),
            ("0", 0),
            ("1000001", 1_000_001),
            ("4294967296", 4_294_967_296),
            ("99999999999999999999999", u64::MAX),
        ] {
            assert_eq!(
                check(i).err(),
                Some(SaslError::ScramIterations {
                    iterations: count,
                    min: 4096,
                    max: 1_000_000
                }),
                "i={i}"
            );
        }
        for i in ["", "-4096", "4096 ", "+4096", "0x1000", "४०९६"] {
            assert!(
                matches!(check(i), Err(SaslError::MalformedScram { .. })),
                "i={i}"
            );
        }
    }
}
