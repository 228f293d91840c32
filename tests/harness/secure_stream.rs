//! A raw Kafka connection with the security a [`ClientSecurity`] describes: TLS by
//! rustls (trusting the test CA, presenting a client certificate when given, checking
//! the server's certificate names the address or name dialled) and then SASL/PLAIN
//! (SaslHandshake v1 and SaslAuthenticate v1), before a test sends hand-built frames
//! (`bare_requests.rs`, `raw_produce::produce_by_id_on`) over it.
//!
//! The SASL part speaks PLAIN only: SCRAM needs a real client (Java, confluent-kafka).

use crate::bare_requests::{self, ApiVersionsAnswer};
use crate::tls::{ClientSecurity, ClientTls, SaslMechanism, SaslUser};
use crate::wire_reader::Reader;
use anyhow::{bail, ensure, Context};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::{ClientConfig, ClientConnection, RootCertStore, StreamOwned};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::Duration;

const SASL_HANDSHAKE: i16 = 17;
const SASL_AUTHENTICATE: i16 = 36;
/// SaslHandshake v1: the tokens that follow travel in SaslAuthenticate requests.
const SASL_HANDSHAKE_VERSION: i16 = 1;
/// SaslAuthenticate v1 (classic encoding; Kafka 2.0 to 4.x serve it).
const SASL_AUTHENTICATE_VERSION: i16 = 1;
const CLIENT_ID: &[u8] = b"kpress-tests-secure";
/// Kafka's SASL_AUTHENTICATION_FAILED error code.
pub const SASL_AUTHENTICATION_FAILED: i16 = 58;

/// A TLS protocol version to restrict a connection to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TlsVersion {
    Tls12,
    Tls13,
}

/// How to speak TLS beyond what [`ClientSecurity`] says.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TlsOptions {
    /// The name checked in the server's certificate and sent as SNI. Without it, the
    /// address's IP is checked and no SNI is sent (as clients dialling an IP do).
    pub server_name: Option<String>,
    /// Offer only this version (both 1.2 and 1.3 without it).
    pub only_version: Option<TlsVersion>,
}

enum Transport {
    Plain(TcpStream),
    Tls(Box<StreamOwned<ClientConnection, TcpStream>>),
}

/// A connection secured as a [`ClientSecurity`] says, ready for Kafka frames.
pub struct SecureStream {
    transport: Transport,
    next_correlation_id: i32,
}

impl std::fmt::Debug for SecureStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SecureStream")
            .field("tls_version", &self.tls_version())
            .finish_non_exhaustive()
    }
}

impl SecureStream {
    /// Connects to `addr`, completes the TLS handshake if `security` has TLS, and
    /// authenticates if it has a SASL user. Every read and write times out after
    /// `timeout`.
    ///
    /// With TLS 1.3 a server refusing the client's certificate (or its absence)
    /// says so after the client's handshake is done: that refusal surfaces on the
    /// first read, e.g. [`api_versions`](Self::api_versions).
    pub fn connect(
        addr: SocketAddr,
        security: &ClientSecurity,
        timeout: Duration,
    ) -> anyhow::Result<SecureStream> {
        SecureStream::connect_with(addr, security, &TlsOptions::default(), timeout)
    }

    /// [`connect`](Self::connect) with `options` for the TLS handshake.
    pub fn connect_with(
        addr: SocketAddr,
        security: &ClientSecurity,
        options: &TlsOptions,
        timeout: Duration,
    ) -> anyhow::Result<SecureStream> {
        let tcp = TcpStream::connect_timeout(&addr, timeout)
            .with_context(|| format!("connecting to {addr}"))?;
        tcp.set_read_timeout(Some(timeout))?;
        tcp.set_write_timeout(Some(timeout))?;
        tcp.set_nodelay(true)?;
        let transport = match &security.tls {
            None => Transport::Plain(tcp),
            Some(tls) => Transport::Tls(Box::new(handshake(tcp, addr, tls, options)?)),
        };
        let mut stream = SecureStream {
            transport,
            next_correlation_id: 1,
        };
        if let Some(user) = &security.sasl {
            stream.authenticate(user)?;
        }
        Ok(stream)
    }

    /// The negotiated TLS version (`None` on plain TCP).
    pub fn tls_version(&self) -> Option<TlsVersion> {
        match &self.transport {
            Transport::Plain(_) => None,
            Transport::Tls(tls) => match tls.conn.protocol_version()? {
                rustls::ProtocolVersion::TLSv1_2 => Some(TlsVersion::Tls12),
                rustls::ProtocolVersion::TLSv1_3 => Some(TlsVersion::Tls13),
                _ => None,
            },
        }
    }

    /// The DER certificates the server presented, its own first (`None` on plain TCP).
    pub fn server_certificates(&self) -> Option<Vec<Vec<u8>>> {
        match &self.transport {
            Transport::Plain(_) => None,
            Transport::Tls(tls) => Some(
                tls.conn
                    .peer_certificates()?
                    .iter()
                    .map(|c| c.to_vec())
                    .collect(),
            ),
        }
    }

    /// A correlation id not used before on this connection.
    pub fn next_correlation_id(&mut self) -> i32 {
        let id = self.next_correlation_id;
        self.next_correlation_id += 1;
        id
    }

    /// Sends a whole size-prefixed `frame` and returns the next frame's body.
    pub fn exchange(&mut self, frame: &[u8]) -> anyhow::Result<Vec<u8>> {
        bare_requests::exchange(self, frame)
    }

    /// ApiVersions at `version` (0 to 4 are what brokers serve) and its parsed answer.
    pub fn api_versions(&mut self, version: i16) -> anyhow::Result<ApiVersionsAnswer> {
        let correlation_id = self.next_correlation_id();
        let body = self.exchange(&bare_requests::api_versions(version, correlation_id))?;
        let answer = bare_requests::parse_api_versions(&body, version)?;
        ensure!(
            answer.correlation_id == correlation_id,
            "ApiVersions answered correlation id {}, sent {correlation_id}",
            answer.correlation_id
        );
        Ok(answer)
    }

    /// SaslHandshake v1 for `user`'s mechanism, then SaslAuthenticate v1 with its PLAIN
    /// token. An error names the broker's error code and message.
    pub fn authenticate(&mut self, user: &SaslUser) -> anyhow::Result<()> {
        if user.mechanism != SaslMechanism::Plain {
            bail!(
                "SecureStream speaks SASL PLAIN only, not {}",
                user.mechanism.name()
            );
        }
        let correlation_id = self.next_correlation_id();
        let mut body = request_header(SASL_HANDSHAKE, SASL_HANDSHAKE_VERSION, correlation_id);
        put_string(&mut body, user.mechanism.name().as_bytes());
        let answer = self.exchange(&framed(body))?;
        let (error_code, mechanisms) = parse_handshake(&answer, correlation_id)?;
        ensure!(
            error_code == 0,
            "SaslHandshake for {} refused with error {error_code}; the broker enables {mechanisms:?}",
            user.mechanism.name()
        );

        let mut token = vec![0u8];
        token.extend_from_slice(user.name.as_bytes());
        token.push(0);
        token.extend_from_slice(user.password.as_bytes());
        let correlation_id = self.next_correlation_id();
        let mut body = request_header(SASL_AUTHENTICATE, SASL_AUTHENTICATE_VERSION, correlation_id);
        body.extend_from_slice(&i32::try_from(token.len())?.to_be_bytes());
        body.extend_from_slice(&token);
        let answer = self.exchange(&framed(body))?;
        let (error_code, message) = parse_authenticate(&answer, correlation_id)?;
        ensure!(
            error_code == 0,
            "SaslAuthenticate for {} refused with error {error_code}: {}",
            user.name,
            message.as_deref().unwrap_or("(no message)")
        );
        Ok(())
    }
}

impl Read for SecureStream {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match &mut self.transport {
            Transport::Plain(tcp) => tcp.read(buf),
            Transport::Tls(tls) => tls.read(buf),
        }
    }
}

impl Write for SecureStream {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match &mut self.transport {
            Transport::Plain(tcp) => tcp.write(buf),
            Transport::Tls(tls) => tls.write(buf),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        match &mut self.transport {
            Transport::Plain(tcp) => tcp.flush(),
            Transport::Tls(tls) => tls.flush(),
        }
    }
}

/// The rustls client configuration for `tls`: its CA as the only root, its
/// certificate if any, the ring provider.
fn client_config(tls: &ClientTls, options: &TlsOptions) -> anyhow::Result<ClientConfig> {
    let mut roots = RootCertStore::empty();
    for cert in read_certificates(&tls.ca)? {
        roots
            .add(cert)
            .with_context(|| format!("a CA certificate of {}", tls.ca.display()))?;
    }
    let versions: &[&rustls::SupportedProtocolVersion] = match options.only_version {
        None => rustls::DEFAULT_VERSIONS,
        Some(TlsVersion::Tls12) => &[&rustls::version::TLS12],
        Some(TlsVersion::Tls13) => &[&rustls::version::TLS13],
    };
    let builder =
        ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_protocol_versions(versions)?
            .with_root_certificates(roots);
    Ok(match &tls.cert {
        None => builder.with_no_client_auth(),
        Some(cert) => {
            let key = PrivateKeyDer::from_pem_file(&cert.key)
                .with_context(|| format!("reading the key {}", cert.key.display()))?;
            builder.with_client_auth_cert(read_certificates(&cert.chain)?, key)?
        }
    })
}

fn read_certificates(path: &std::path::Path) -> anyhow::Result<Vec<CertificateDer<'static>>> {
    let certs = CertificateDer::pem_file_iter(path)
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .with_context(|| format!("reading certificates from {}", path.display()))?;
    ensure!(!certs.is_empty(), "no certificate in {}", path.display());
    Ok(certs)
}

/// Runs the TLS handshake on `tcp` to its end (as far as the client sees it).
fn handshake(
    mut tcp: TcpStream,
    addr: SocketAddr,
    tls: &ClientTls,
    options: &TlsOptions,
) -> anyhow::Result<StreamOwned<ClientConnection, TcpStream>> {
    let server_name = match &options.server_name {
        Some(name) => ServerName::try_from(name.clone())
            .with_context(|| format!("{name:?} is not a server name"))?,
        None => ServerName::IpAddress(addr.ip().into()),
    };
    let mut conn = ClientConnection::new(Arc::new(client_config(tls, options)?), server_name)?;
    while conn.is_handshaking() {
        conn.complete_io(&mut tcp)
            .with_context(|| format!("TLS handshake with {addr}"))?;
    }
    Ok(StreamOwned::new(conn, tcp))
}

/// A request header v1 (api key, version, correlation id, client id).
fn request_header(api_key: i16, version: i16, correlation_id: i32) -> Vec<u8> {
    let mut header = Vec::new();
    header.extend_from_slice(&api_key.to_be_bytes());
    header.extend_from_slice(&version.to_be_bytes());
    header.extend_from_slice(&correlation_id.to_be_bytes());
    put_string(&mut header, CLIENT_ID);
    header
}

fn put_string(out: &mut Vec<u8>, text: &[u8]) {
    let len = i16::try_from(text.len()).expect("a string fits an int16 length");
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(text);
}

fn framed(body: Vec<u8>) -> Vec<u8> {
    let mut frame = i32::try_from(body.len())
        .expect("a request fits an int32 size")
        .to_be_bytes()
        .to_vec();
    frame.extend_from_slice(&body);
    frame
}

/// A SaslHandshake v1 response (header v0): error code and enabled mechanisms.
fn parse_handshake(body: &[u8], correlation_id: i32) -> anyhow::Result<(i16, Vec<String>)> {
    let mut reader = Reader::new(body);
    reader.correlation_id(correlation_id)?;
    let error_code = reader.i16()?;
    let count = reader.i32()?;
    let mut mechanisms = Vec::new();
    for _ in 0..count.clamp(0, 64) {
        mechanisms.extend(reader.nullable_string()?);
    }
    Ok((error_code, mechanisms))
}

/// A SaslAuthenticate v1 response (header v0): error code and message.
fn parse_authenticate(body: &[u8], correlation_id: i32) -> anyhow::Result<(i16, Option<String>)> {
    let mut reader = Reader::new(body);
    reader.correlation_id(correlation_id)?;
    let error_code = reader.i16()?;
    let message = reader.nullable_string()?;
    Ok((error_code, message))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builds_and_parses_the_sasl_exchange() {
        let frame = framed(request_header(SASL_HANDSHAKE, 1, 7));
        assert_eq!(&frame[..4], &(frame.len() as i32 - 4).to_be_bytes());
        assert_eq!(&frame[4..12], &[0, 17, 0, 1, 0, 0, 0, 7]);
        let mut handshake = 7i32.to_be_bytes().to_vec();
        handshake.extend_from_slice(&[0, 33, 0, 0, 0, 1, 0, 5]);
        handshake.extend_from_slice(b"PLAIN");
        assert_eq!(
            parse_handshake(&handshake, 7).unwrap(),
            (33, vec!["PLAIN".to_string()])
        );
        assert!(parse_handshake(&handshake, 8).is_err());
        assert!(parse_handshake(&handshake[..9], 7).is_err());
        let mut authenticate = 9i32.to_be_bytes().to_vec();
        authenticate.extend_from_slice(&[0, 58, 0, 3]);
        authenticate.extend_from_slice(b"bad");
        assert_eq!(
            parse_authenticate(&authenticate, 9).unwrap(),
            (SASL_AUTHENTICATION_FAILED, Some("bad".to_string()))
        );
    }
}
