//! Reading the PEM files a policy names, with errors naming the key and the file.

use std::path::Path;

use rustls::RootCertStore;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

use super::TlsError;

/// Largest PEM file read: a long chain or a CA bundle is well under this, and a wrong
/// path (a disk image, a log) is refused before it is read into memory.
const MAX_PEM_BYTES: u64 = 4 << 20;

/// A file's bytes as read, kept to tell whether it changed since.
pub(super) fn read(key: &'static str, path: &Path) -> Result<Vec<u8>, TlsError> {
    let error = |source| TlsError::Read {
        key,
        path: path.to_owned(),
        source,
    };
    let size = std::fs::metadata(path).map_err(error)?.len();
    if size > MAX_PEM_BYTES {
        return Err(TlsError::Invalid {
            key,
            path: path.to_owned(),
            detail: format!(
                "{size} bytes is larger than any PEM file kpress reads ({MAX_PEM_BYTES})"
            ),
        });
    }
    std::fs::read(path).map_err(error)
}

/// Every certificate in a PEM file, in file order; at least one.
pub(super) fn certificates(
    key: &'static str,
    path: &Path,
    pem: &[u8],
) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|err| TlsError::Pem {
            key,
            path: path.to_owned(),
            detail: err.to_string(),
        })?;
    if certs.is_empty() {
        return Err(TlsError::Missing {
            key,
            path: path.to_owned(),
            what: "certificate (-----BEGIN CERTIFICATE-----)",
        });
    }
    Ok(certs)
}

/// The first private key in a PEM file.
pub(super) fn private_key(
    key: &'static str,
    path: &Path,
    pem: &[u8],
) -> Result<PrivateKeyDer<'static>, TlsError> {
    PrivateKeyDer::from_pem_slice(pem).map_err(|err| match err {
        rustls_pki_types::pem::Error::NoItemsFound => TlsError::Missing {
            key,
            path: path.to_owned(),
            what: "private key (PKCS#8, PKCS#1 or SEC1 PEM)",
        },
        other => TlsError::Pem {
            key,
            path: path.to_owned(),
            detail: other.to_string(),
        },
    })
}

/// The CA certificates of a PEM file as a trust store.
pub(super) fn trust_store(
    key: &'static str,
    path: &Path,
    pem: &[u8],
) -> Result<RootCertStore, TlsError> {
    let mut store = RootCertStore::empty();
    for cert in certificates(key, path, pem)? {
        store.add(cert).map_err(|err| TlsError::Invalid {
            key,
            path: path.to_owned(),
            detail: format!("not a usable CA certificate: {err}"),
        })?;
    }
    Ok(store)
}
