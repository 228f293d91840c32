//! TLS for kpress's listeners (from clients) and upstream connections (to brokers), with
//! rustls. Both read PEM files named by the policy and can re-read them while serving:
//! a new certificate applies to the next handshake, open connections keep theirs, and a
//! file that does not load leaves the one in force.

mod client;
mod pem;
mod server;
#[cfg(test)]
mod tests;

use std::path::PathBuf;

pub use client::ClientTls;
pub use kpress_config::{
    ClientAuth, ListenerTls as ListenerTlsSettings, TlsVersion, UpstreamTls as UpstreamTlsSettings,
};
pub use server::ServerTls;

/// The crypto of every TLS config kpress builds: rustls with ring, never OpenSSL.
fn provider() -> std::sync::Arc<rustls::crypto::CryptoProvider> {
    std::sync::Arc::new(rustls::crypto::ring::default_provider())
}

/// Why TLS material could not be loaded; names the policy key and file.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("{key}: cannot read {path}: {source}")]
    Read {
        key: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{key}: {path} is not valid PEM: {detail}")]
    Pem {
        key: &'static str,
        path: PathBuf,
        detail: String,
    },
    #[error("{key}: {path} holds no {what}")]
    Missing {
        key: &'static str,
        path: PathBuf,
        what: &'static str,
    },
    #[error("{key}: {path}: {detail}")]
    Invalid {
        key: &'static str,
        path: PathBuf,
        detail: String,
    },
    #[error("{what}: {source}")]
    Rustls {
        what: &'static str,
        #[source]
        source: rustls::Error,
    },
    #[error("upstream.tls.server_name: {0:?} is neither a DNS name nor an IP address")]
    ServerName(String),
    #[error("no system CA certificates could be loaded (set upstream.tls.ca): {0}")]
    SystemRoots(String),
}

/// How a re-read of TLS files went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reloaded {
    /// The files changed and the new ones are in force.
    Changed,
    /// The files are as they were.
    Unchanged,
    /// The files changed but do not load; the old ones stay in force.
    Failed,
}

impl Reloaded {
    pub fn as_str(self) -> &'static str {
        match self {
            Reloaded::Changed => "changed",
            Reloaded::Unchanged => "unchanged",
            Reloaded::Failed => "failed",
        }
    }
}
