//! The TLS side of kpress's listeners: a server config built from `[listener.tls]`,
//! swapped whole when its files change.

use std::sync::Arc;

use arc_swap::ArcSwap;
use rustls::server::{ClientHello, ResolvesServerCert, WebPkiClientVerifier};
use rustls::sign::CertifiedKey;
use rustls::ServerConfig;

use super::{pem, provider, ClientAuth, ListenerTlsSettings, Reloaded, TlsError, TlsVersion};

/// A listener's TLS config, reloadable while serving.
#[derive(Debug)]
pub struct ServerTls {
    settings: ListenerTlsSettings,
    current: ArcSwap<Loaded>,
    /// Completes a handshake only to refuse it: it has no certificate, so the client
    /// gets a fatal alert (used for SNI names kpress does not serve).
    refusing: Arc<ServerConfig>,
}

#[derive(Debug)]
struct Loaded {
    config: Arc<ServerConfig>,
    /// The files' bytes as loaded, to tell a change from a touch.
    files: Vec<u8>,
}

impl ServerTls {
    /// Loads the files `settings` names; any problem names its key and file.
    pub fn load(settings: ListenerTlsSettings) -> Result<ServerTls, TlsError> {
        let loaded = load(&settings)?;
        let refusing = ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(|source| TlsError::Rustls {
                what: "building the TLS config",
                source,
            })?
            .with_no_client_auth()
            .with_cert_resolver(Arc::new(NoCertificate));
        Ok(ServerTls {
            settings,
            current: ArcSwap::from_pointee(loaded),
            refusing: Arc::new(refusing),
        })
    }

    /// The config for the next handshake.
    pub(crate) fn config(&self) -> Arc<ServerConfig> {
        Arc::clone(&self.current.load().config)
    }

    /// A config that refuses every handshake with a fatal alert.
    pub(crate) fn refusing(&self) -> Arc<ServerConfig> {
        Arc::clone(&self.refusing)
    }

    /// Re-reads the files; the new config serves the next handshake. On an error the
    /// config in force stays.
    pub fn reload(&self) -> Result<Reloaded, TlsError> {
        let files = read_files(&self.settings)?;
        if files == self.current.load().files {
            return Ok(Reloaded::Unchanged);
        }
        self.current.store(Arc::new(load(&self.settings)?));
        Ok(Reloaded::Changed)
    }
}

fn read_files(settings: &ListenerTlsSettings) -> Result<Vec<u8>, TlsError> {
    let mut files = pem::read("listener.tls.cert", &settings.cert)?;
    files.extend(pem::read("listener.tls.key", &settings.key)?);
    if let Some(ca) = &settings.client_ca {
        files.extend(pem::read("listener.tls.client_ca", ca)?);
    }
    Ok(files)
}

fn load(settings: &ListenerTlsSettings) -> Result<Loaded, TlsError> {
    let cert_pem = pem::read("listener.tls.cert", &settings.cert)?;
    let key_pem = pem::read("listener.tls.key", &settings.key)?;
    let chain = pem::certificates("listener.tls.cert", &settings.cert, &cert_pem)?;
    let key = pem::private_key("listener.tls.key", &settings.key, &key_pem)?;
    let mut files = cert_pem;
    files.extend(key_pem);

    let versions: &[&rustls::SupportedProtocolVersion] = match settings.min_version {
        TlsVersion::Tls12 => &[&rustls::version::TLS13, &rustls::version::TLS12],
        TlsVersion::Tls13 => &[&rustls::version::TLS13],
    };
    let builder = ServerConfig::builder_with_provider(provider())
        .with_protocol_versions(versions)
        .map_err(|source| TlsError::Rustls {
            what: "listener.tls.min_version",
            source,
        })?;
    let builder = match (&settings.client_ca, settings.client_auth) {
        (Some(ca), auth) if auth != ClientAuth::None => {
            let ca_pem = pem::read("listener.tls.client_ca", ca)?;
            let roots = pem::trust_store("listener.tls.client_ca", ca, &ca_pem)?;
            files.extend(ca_pem);
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider());
            let verifier = match auth {
                ClientAuth::Requested => verifier.allow_unauthenticated(),
                _ => verifier,
            };
            let verifier = verifier.build().map_err(|err| TlsError::Invalid {
                key: "listener.tls.client_ca",
                path: ca.clone(),
                detail: err.to_string(),
            })?;
            builder.with_client_cert_verifier(verifier)
        }
        _ => builder.with_no_client_auth(),
    };
    let config = builder
        .with_single_cert(chain, key)
        .map_err(|err| TlsError::Invalid {
            key: "listener.tls.key",
            path: settings.key.clone(),
            detail: format!("does not go with listener.tls.cert: {err}"),
        })?;
    Ok(Loaded {
        config: Arc::new(config),
        files,
    })
}

/// Resolves no certificate, so rustls ends the handshake with a fatal alert.
#[derive(Debug)]
struct NoCertificate;

impl ResolvesServerCert for NoCertificate {
    fn resolve(&self, _: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        None
    }
}
