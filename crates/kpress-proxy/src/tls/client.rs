//! TLS to brokers: a client config built from `[upstream.tls]`, swapped whole when its
//! files change.

use std::sync::Arc;

use arc_swap::ArcSwap;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{verify_tls12_signature, verify_tls13_signature, CryptoProvider};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;
use tokio_rustls::TlsConnector;

use super::{pem, provider, Reloaded, TlsError, UpstreamTlsSettings};

/// kpress's TLS client for broker connections, reloadable while serving.
#[derive(Debug)]
pub struct ClientTls {
    settings: UpstreamTlsSettings,
    /// `upstream.tls.server_name`, checked in every broker's certificate.
    server_name: Option<ServerName<'static>>,
    current: ArcSwap<Loaded>,
}

#[derive(Debug)]
struct Loaded {
    config: Arc<ClientConfig>,
    files: Vec<u8>,
}

impl ClientTls {
    /// The TLS `settings` name, loaded and shared; `None` without `[upstream.tls]`.
    pub(crate) fn load_shared(
        settings: Option<UpstreamTlsSettings>,
    ) -> Result<Option<Arc<ClientTls>>, TlsError> {
        Ok(settings.map(ClientTls::load).transpose()?.map(Arc::new))
    }

    /// Loads the files `settings` names (or the system roots); any problem names its
    /// key and file.
    pub fn load(settings: UpstreamTlsSettings) -> Result<ClientTls, TlsError> {
        let server_name = settings
            .server_name
            .as_ref()
            .map(|name| {
                ServerName::try_from(name.clone()).map_err(|_| TlsError::ServerName(name.clone()))
            })
            .transpose()?;
        let loaded = load(&settings)?;
        Ok(ClientTls {
            settings,
            server_name,
            current: ArcSwap::from_pointee(loaded),
        })
    }

    /// Whether certificates go unchecked (`verify = false`).
    pub fn verifies(&self) -> bool {
        self.settings.verify
    }

    /// Re-reads the files; the new config serves the next connection. On an error the
    /// config in force stays.
    pub fn reload(&self) -> Result<Reloaded, TlsError> {
        let files = read_files(&self.settings)?;
        if files == self.current.load().files {
            return Ok(Reloaded::Unchanged);
        }
        self.current.store(Arc::new(load(&self.settings)?));
        Ok(Reloaded::Changed)
    }

    /// The TLS handshake with the broker at `host` over `tcp`.
    pub(crate) async fn connect(
        &self,
        host: &str,
        tcp: TcpStream,
    ) -> std::io::Result<TlsStream<TcpStream>> {
        let name = match &self.server_name {
            Some(name) => name.clone(),
            None => ServerName::try_from(host.to_owned()).map_err(|_| {
                std::io::Error::new(
                    std::io::ErrorKind::InvalidInput,
                    format!(
                        "broker host {host:?} is not a name TLS can check: set upstream.tls.server_name"
                    ),
                )
            })?,
        };
        let connector = TlsConnector::from(Arc::clone(&self.current.load().config));
        connector.connect(name, tcp).await
    }
}

fn read_files(settings: &UpstreamTlsSettings) -> Result<Vec<u8>, TlsError> {
    let mut files = Vec::new();
    if let Some(ca) = &settings.ca {
        files.extend(pem::read("upstream.tls.ca", ca)?);
    }
    if let Some((cert, key)) = &settings.client_cert {
        files.extend(pem::read("upstream.tls.cert", cert)?);
        files.extend(pem::read("upstream.tls.key", key)?);
    }
    Ok(files)
}

fn load(settings: &UpstreamTlsSettings) -> Result<Loaded, TlsError> {
    let mut files = Vec::new();
    let builder = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|source| TlsError::Rustls {
            what: "building the upstream TLS config",
            source,
        })?;
    let builder = if settings.verify {
        let roots = match &settings.ca {
            Some(ca) => {
                let ca_pem = pem::read("upstream.tls.ca", ca)?;
                let roots = pem::trust_store("upstream.tls.ca", ca, &ca_pem)?;
                files.extend(ca_pem);
                roots
            }
            None => system_roots()?,
        };
        builder.with_root_certificates(roots)
    } else {
        if let Some(ca) = &settings.ca {
            files.extend(pem::read("upstream.tls.ca", ca)?);
        }
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AcceptAnyCertificate(provider())))
    };
    let config = match &settings.client_cert {
        Some((cert, key)) => {
            let cert_pem = pem::read("upstream.tls.cert", cert)?;
            let key_pem = pem::read("upstream.tls.key", key)?;
            let chain = pem::certificates("upstream.tls.cert", cert, &cert_pem)?;
            let private_key = pem::private_key("upstream.tls.key", key, &key_pem)?;
            files.extend(cert_pem);
            files.extend(key_pem);
            builder
                .with_client_auth_cert(chain, private_key)
                .map_err(|err| TlsError::Invalid {
                    key: "upstream.tls.key",
                    path: key.clone(),
                    detail: format!("does not go with upstream.tls.cert: {err}"),
                })?
        }
        None => builder.with_no_client_auth(),
    };
    Ok(Loaded {
        config: Arc::new(config),
        files,
    })
}

/// The host's CA certificates (e.g. /etc/ssl/certs), as `openssl` would find them.
fn system_roots() -> Result<RootCertStore, TlsError> {
    let found = rustls_native_certs::load_native_certs();
    let mut store = RootCertStore::empty();
    let (added, _) = store.add_parsable_certificates(found.certs);
    if added == 0 {
        let errors: Vec<String> = found.errors.iter().map(ToString::to_string).collect();
        return Err(TlsError::SystemRoots(if errors.is_empty() {
            "none found".to_owned()
        } else {
            errors.join("; ")
        }));
    }
    Ok(store)
}

/// `verify = false`: any certificate is taken, but the handshake's signatures are still
/// checked, so the connection is encrypted to whoever holds the key it showed.
#[derive(Debug)]
struct AcceptAnyCertificate(Arc<CryptoProvider>);

impl ServerCertVerifier for AcceptAnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}
