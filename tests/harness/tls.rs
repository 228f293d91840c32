//! A throwaway PKI generated per test run with rcgen (ECDSA P-256 keys, unencrypted
//! PKCS#8 PEM): a CA, server certificates carrying the DNS names and IP addresses
//! clients check, client certificates for mTLS, and a second CA that nothing trusts
//! for negative tests. Nothing here is committed; every file lives in the directory
//! given to [`TestPki::generate`].
//!
//! Also how a client uses it: [`ClientSecurity`] describes one client's protocol, trust,
//! certificate and SASL login once and renders it as Java properties and as librdkafka
//! settings (kcat's `-X`, confluent-kafka's properties), so the clients of one test are
//! configured alike.

use anyhow::Context;
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose, SanType,
};
use std::fmt;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

/// The PEM files of one issued certificate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertFiles {
    /// The certificate, then its issuing CA's certificate.
    pub chain: PathBuf,
    /// Its private key, unencrypted PKCS#8 (`BEGIN PRIVATE KEY`).
    pub key: PathBuf,
    /// The key and then the chain in one file: what Kafka's PEM key store
    /// (`ssl.keystore.type=PEM`, `ssl.keystore.location`) reads.
    pub keystore: PathBuf,
    /// The certificate of the CA that issued it.
    pub ca: PathBuf,
}

/// A CA: its certificate and key in memory and its PEM files on disk.
struct Authority {
    cert: rcgen::Certificate,
    key: KeyPair,
    cert_file: PathBuf,
    key_file: PathBuf,
}

impl Authority {
    fn generate(dir: &Path, stem: &str, common_name: &str) -> anyhow::Result<Authority> {
        let key = KeyPair::generate().context("generating a CA key")?;
        let mut params = CertificateParams::default();
        params.distinguished_name = distinguished_name(common_name);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let cert = params
            .self_signed(&key)
            .with_context(|| format!("self-signing the CA {common_name}"))?;
        let cert_file = dir.join(format!("{stem}.pem"));
        let key_file = dir.join(format!("{stem}.key"));
        write(&cert_file, &cert.pem())?;
        write(&key_file, &key.serialize_pem())?;
        Ok(Authority {
            cert,
            key,
            cert_file,
            key_file,
        })
    }
}

/// A CA and what it issued, in one directory. See the module docs.
pub struct TestPki {
    dir: PathBuf,
    ca: Authority,
    untrusted: Authority,
    issued: AtomicU32,
}

impl fmt::Debug for TestPki {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TestPki")
            .field("dir", &self.dir)
            .field("ca", &self.ca.cert_file)
            .finish_non_exhaustive()
    }
}

impl TestPki {
    /// Creates `dir` if needed and writes a new CA (`ca.pem`, `ca.key`) and a second,
    /// untrusted one (`untrusted-ca.pem`, `untrusted-ca.key`) into it.
    pub fn generate(dir: &Path) -> anyhow::Result<TestPki> {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        Ok(TestPki {
            dir: dir.to_path_buf(),
            ca: Authority::generate(dir, "ca", "kpress-tests CA")?,
            untrusted: Authority::generate(dir, "untrusted-ca", "kpress-tests untrusted CA")?,
            issued: AtomicU32::new(0),
        })
    }

    /// The directory holding every file of this PKI.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The CA certificate (PEM) every client and broker of a test trusts.
    pub fn ca_cert(&self) -> &Path {
        &self.ca.cert_file
    }

    /// The CA's private key (PEM, PKCS#8).
    pub fn ca_key(&self) -> &Path {
        &self.ca.key_file
    }

    /// A server certificate for `names`, each a DNS name (`localhost`,
    /// `broker-1.kafka.test`, `*.kafka.test`) or an IP address (`127.0.0.1`) put in the
    /// subject alternative names, as hostname verification reads them; the first name
    /// is also the common name.
    pub fn server(&self, names: &[&str]) -> anyhow::Result<CertFiles> {
        let first = names.first().context("a server certificate needs a name")?;
        let mut params = CertificateParams::default();
        params.distinguished_name = distinguished_name(first);
        params.subject_alt_names = names
            .iter()
            .map(|name| subject_alt_name(name))
            .collect::<anyhow::Result<_>>()?;
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        self.issue(&self.ca, "server", first, params)
    }

    /// A client certificate for mTLS with `common_name` as its subject (Kafka's
    /// principal `User:CN=<common_name>`).
    pub fn client(&self, common_name: &str) -> anyhow::Result<CertFiles> {
        self.issue(&self.ca, "client", common_name, client_params(common_name))
    }

    /// A client certificate (common name `untrusted-client`) issued by the second CA,
    /// which no broker or proxy of the harness trusts; its `ca` is that CA, to give as
    /// the trust of something that must then refuse the real CA's certificates.
    pub fn untrusted(&self) -> anyhow::Result<CertFiles> {
        let name = "untrusted-client";
        self.issue(&self.untrusted, "client", name, client_params(name))
    }

    fn issue(
        &self,
        issuer: &Authority,
        kind: &str,
        label: &str,
        params: CertificateParams,
    ) -> anyhow::Result<CertFiles> {
        let n = self.issued.fetch_add(1, Ordering::Relaxed) + 1;
        let label: String = label
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
            .collect();
        let stem = format!("{kind}-{n}-{label}");
        let key = KeyPair::generate().context("generating a key")?;
        let cert = params
            .signed_by(&key, &issuer.cert, &issuer.key)
            .with_context(|| format!("issuing {stem}"))?;
        let chain = format!("{}{}", cert.pem(), issuer.cert.pem());
        let key_pem = key.serialize_pem();
        let files = CertFiles {
            chain: self.dir.join(format!("{stem}.pem")),
            key: self.dir.join(format!("{stem}.key")),
            keystore: self.dir.join(format!("{stem}.keystore.pem")),
            ca: issuer.cert_file.clone(),
        };
        write(&files.chain, &chain)?;
        write(&files.key, &key_pem)?;
        write(&files.keystore, &format!("{key_pem}{chain}"))?;
        Ok(files)
    }
}

fn distinguished_name(common_name: &str) -> DistinguishedName {
    let mut name = DistinguishedName::new();
    name.push(DnType::CommonName, common_name);
    name
}

fn subject_alt_name(name: &str) -> anyhow::Result<SanType> {
    Ok(match name.parse::<IpAddr>() {
        Ok(ip) => SanType::IpAddress(ip),
        Err(_) => SanType::DnsName(
            name.try_into()
                .with_context(|| format!("{name:?} is not a DNS name"))?,
        ),
    })
}

fn client_params(common_name: &str) -> CertificateParams {
    let mut params = CertificateParams::default();
    params.distinguished_name = distinguished_name(common_name);
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    params
}

fn write(path: &Path, text: &str) -> anyhow::Result<()> {
    std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))
}

/// A SASL mechanism Kafka brokers and the harness's clients speak.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SaslMechanism {
    Plain,
    ScramSha256,
    ScramSha512,
}

impl SaslMechanism {
    /// Kafka's name of the mechanism (`sasl.mechanism`, `sasl.enabled.mechanisms`).
    pub fn name(self) -> &'static str {
        match self {
            SaslMechanism::Plain => "PLAIN",
            SaslMechanism::ScramSha256 => "SCRAM-SHA-256",
            SaslMechanism::ScramSha512 => "SCRAM-SHA-512",
        }
    }

    /// The Java login module class of the mechanism (client and broker JAAS).
    pub fn java_login_module(self) -> &'static str {
        match self {
            SaslMechanism::Plain => "org.apache.kafka.common.security.plain.PlainLoginModule",
            SaslMechanism::ScramSha256 | SaslMechanism::ScramSha512 => {
                "org.apache.kafka.common.security.scram.ScramLoginModule"
            }
        }
    }
}

/// A SASL login: mechanism, user name and password.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SaslUser {
    pub mechanism: SaslMechanism,
    pub name: String,
    pub password: String,
}

impl SaslUser {
    pub fn new(mechanism: SaslMechanism, name: &str, password: &str) -> SaslUser {
        SaslUser {
            mechanism,
            name: name.to_string(),
            password: password.to_string(),
        }
    }

    /// This user with another password (a wrong one, for negative tests).
    pub fn with_password(&self, password: &str) -> SaslUser {
        SaslUser {
            password: password.to_string(),
            ..self.clone()
        }
    }

    /// The Java client's `sasl.jaas.config` value for this login.
    pub fn java_jaas_config(&self) -> String {
        format!(
            "{} required username=\"{}\" password=\"{}\";",
            self.mechanism.java_login_module(),
            self.name,
            self.password
        )
    }
}

/// TLS as a client speaks it: the CA it trusts and, for mTLS, its own certificate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientTls {
    /// The CA certificate (PEM) the server's certificate must chain to.
    pub ca: PathBuf,
    /// The client's certificate and key, presented when the server asks.
    pub cert: Option<CertFiles>,
}

/// One client's connection security: TLS or not, SASL or not (`security.protocol`
/// PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL). Hostname verification stays at the
/// clients' default (on), so server certificates must name the address dialled.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClientSecurity {
    pub tls: Option<ClientTls>,
    pub sasl: Option<SaslUser>,
}

impl ClientSecurity {
    /// TLS trusting `ca`, no client certificate, no SASL.
    pub fn ssl(ca: &Path) -> ClientSecurity {
        ClientSecurity {
            tls: Some(ClientTls {
                ca: ca.to_path_buf(),
                cert: None,
            }),
            sasl: None,
        }
    }

    /// TLS trusting `ca` and presenting `cert`.
    pub fn mtls(ca: &Path, cert: &CertFiles) -> ClientSecurity {
        ClientSecurity::ssl(ca).with_cert(cert)
    }

    /// SASL `user` over TLS trusting `ca`.
    pub fn sasl_ssl(ca: &Path, user: &SaslUser) -> ClientSecurity {
        ClientSecurity::ssl(ca).with_sasl(user)
    }

    /// SASL `user` over plain TCP.
    pub fn sasl_plaintext(user: &SaslUser) -> ClientSecurity {
        ClientSecurity::default().with_sasl(user)
    }

    /// This security with `cert` presented (panics without TLS: a certificate needs it).
    pub fn with_cert(mut self, cert: &CertFiles) -> ClientSecurity {
        self.tls
            .as_mut()
            .expect("a client certificate needs TLS")
            .cert = Some(cert.clone());
        self
    }

    /// This security with the SASL login `user`.
    pub fn with_sasl(mut self, user: &SaslUser) -> ClientSecurity {
        self.sasl = Some(user.clone());
        self
    }

    /// Kafka's `security.protocol` value.
    pub fn protocol(&self) -> &'static str {
        match (self.tls.is_some(), self.sasl.is_some()) {
            (false, false) => "PLAINTEXT",
            (true, false) => "SSL",
            (false, true) => "SASL_PLAINTEXT",
            (true, true) => "SASL_SSL",
        }
    }

    /// Java kafka-clients properties (`k=v`, as `ProduceOptions::properties` and
    /// `ConsumeOptions::properties` take them): PEM trust and key stores.
    pub fn java_properties(&self) -> Vec<String> {
        let mut properties = vec![format!("security.protocol={}", self.protocol())];
        if let Some(tls) = &self.tls {
            properties.push("ssl.truststore.type=PEM".to_string());
            properties.push(format!("ssl.truststore.location={}", tls.ca.display()));
            if let Some(cert) = &tls.cert {
                properties.push("ssl.keystore.type=PEM".to_string());
                properties.push(format!("ssl.keystore.location={}", cert.keystore.display()));
            }
        }
        if let Some(user) = &self.sasl {
            properties.push(format!("sasl.mechanism={}", user.mechanism.name()));
            properties.push(format!("sasl.jaas.config={}", user.java_jaas_config()));
        }
        properties
    }

    /// librdkafka settings (`k=v`: kcat's `-X`, confluent-kafka's `--property`).
    pub fn librdkafka_settings(&self) -> Vec<String> {
        let mut settings = vec![format!(
            "security.protocol={}",
            self.protocol().to_ascii_lowercase()
        )];
        if let Some(tls) = &self.tls {
            settings.push(format!("ssl.ca.location={}", tls.ca.display()));
            if let Some(cert) = &tls.cert {
                settings.push(format!("ssl.certificate.location={}", cert.chain.display()));
                settings.push(format!("ssl.key.location={}", cert.key.display()));
            }
        }
        if let Some(user) = &self.sasl {
            settings.push(format!("sasl.mechanisms={}", user.mechanism.name()));
            settings.push(format!("sasl.username={}", user.name));
            settings.push(format!("sasl.password={}", user.password));
        }
        settings
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustls::client::danger::ServerCertVerifier;
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
    use rustls::server::WebPkiClientVerifier;
    use rustls::RootCertStore;
    use std::sync::Arc;

    fn chain(path: &Path) -> Vec<CertificateDer<'static>> {
        CertificateDer::pem_file_iter(path)
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap()
    }

    fn roots(ca: &Path) -> Arc<RootCertStore> {
        let mut roots = RootCertStore::empty();
        for cert in chain(ca) {
            roots.add(cert).unwrap();
        }
        Arc::new(roots)
    }

    #[test]
    fn issued_certificates_verify_against_their_ca_only() {
        let dir = tempfile::tempdir().unwrap();
        let pki = TestPki::generate(dir.path()).unwrap();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let server = pki
            .server(&["localhost", "127.0.0.1", "broker-1.kafka.test"])
            .unwrap();
        let verifier = rustls::client::WebPkiServerVerifier::builder_with_provider(
            roots(pki.ca_cert()),
            provider.clone(),
        )
        .build()
        .unwrap();
        let served = chain(&server.chain);
        assert_eq!(served.len(), 2, "leaf and CA");
        let verify = |name: &str| {
            verifier.verify_server_cert(
                &served[0],
                &served[1..],
                &ServerName::try_from(name.to_string()).unwrap(),
                &[],
                UnixTime::now(),
            )
        };
        for name in ["localhost", "127.0.0.1", "broker-1.kafka.test"] {
            verify(name).unwrap_or_else(|e| panic!("{name}: {e}"));
        }
        assert!(verify("broker-2.kafka.test").is_err());
        assert!(verify("127.0.0.2").is_err());
        let wildcard = chain(&pki.server(&["*.kafka.test"]).unwrap().chain);
        verifier
            .verify_server_cert(
                &wildcard[0],
                &wildcard[1..],
                &ServerName::try_from("broker-7.kafka.test").unwrap(),
                &[],
                UnixTime::now(),
            )
            .unwrap();

        let client_verifier =
            WebPkiClientVerifier::builder_with_provider(roots(pki.ca_cert()), provider)
                .build()
                .unwrap();
        let client = chain(&pki.client("alice").unwrap().chain);
        client_verifier
            .verify_client_cert(&client[0], &client[1..], UnixTime::now())
            .unwrap();
        let untrusted = pki.untrusted().unwrap();
        assert_eq!(untrusted.ca, dir.path().join("untrusted-ca.pem"));
        let untrusted = chain(&untrusted.chain);
        assert!(client_verifier
            .verify_client_cert(&untrusted[0], &untrusted[1..], UnixTime::now())
            .is_err());
        let keystore = std::fs::read_to_string(&server.keystore).unwrap();
        assert!(keystore.starts_with("-----BEGIN PRIVATE KEY-----"));
        assert_eq!(keystore.matches("BEGIN CERTIFICATE").count(), 2);
    }

    #[test]
    fn renders_one_description_for_every_client() {
        let ca = Path::new("/pki/ca.pem");
        let cert = CertFiles {
            chain: "/pki/c.pem".into(),
            key: "/pki/c.key".into(),
            keystore: "/pki/c.keystore.pem".into(),
            ca: ca.into(),
        };
        let user = SaslUser::new(SaslMechanism::ScramSha512, "alice", "s3cret");
        let security = ClientSecurity::mtls(ca, &cert).with_sasl(&user);
        assert_eq!(security.protocol(), "SASL_SSL");
        assert_eq!(
            security.java_properties(),
            [
                "security.protocol=SASL_SSL",
                "ssl.truststore.type=PEM",
                "ssl.truststore.location=/pki/ca.pem",
                "ssl.keystore.type=PEM",
                "ssl.keystore.location=/pki/c.keystore.pem",
                "sasl.mechanism=SCRAM-SHA-512",
                "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule \
                 required username=\"alice\" password=\"s3cret\";",
            ]
        );
        assert_eq!(
            security.librdkafka_settings(),
            [
                "security.protocol=sasl_ssl",
                "ssl.ca.location=/pki/ca.pem",
                "ssl.certificate.location=/pki/c.pem",
                "ssl.key.location=/pki/c.key",
                "sasl.mechanisms=SCRAM-SHA-512",
                "sasl.username=alice",
                "sasl.password=s3cret",
            ]
        );
        assert_eq!(ClientSecurity::default().protocol(), "PLAINTEXT");
        assert_eq!(
            ClientSecurity::sasl_plaintext(&user).librdkafka_settings()[0],
            "security.protocol=sasl_plaintext"
        );
    }
}
