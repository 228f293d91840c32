//! TLS through the transport seam on loopback, with certificates made per test:
//! handshakes both ways, mTLS, SNI routing, plaintext refused, reloads.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use kpress_protocol::ResponseObserver;
use rcgen::{CertificateParams, DnType, IsCa, KeyPair};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use super::*;
use crate::cluster::{AddressObserver, Cluster};
use crate::error::ConnectionError;
use crate::routing::SniRouting;
use crate::transport::{Acceptor, Connector, ListenerRole, UpstreamTarget};
use kpress_config::{HostPattern, NodeRouting};

/// A CA that issues certificates into a temp dir.
struct Pki {
    dir: PathBuf,
    ca: rcgen::Certificate,
    ca_key: KeyPair,
    ca_file: PathBuf,
}

impl Pki {
    fn new(dir: &Path, name: &str) -> Pki {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(DnType::CommonName, format!("{name} CA"));
        let ca_key = KeyPair::generate().unwrap();
        let ca = params.self_signed(&ca_key).unwrap();
        let ca_file = dir.join(format!("{name}-ca.pem"));
        std::fs::write(&ca_file, ca.pem()).unwrap();
        Pki {
            dir: dir.to_owned(),
            ca,
            ca_key,
            ca_file,
        }
    }

    /// A certificate for `names` (its SANs), written as `<file>.pem` and `<file>.key`.
    fn issue(&self, file: &str, names: &[&str]) -> (PathBuf, PathBuf) {
        let params =
            CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>())
                .unwrap();
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.ca, &self.ca_key).unwrap();
        let cert_file = self.dir.join(format!("{file}.pem"));
        let key_file = self.dir.join(format!("{file}.key"));
        std::fs::write(&cert_file, cert.pem()).unwrap();
        std::fs::write(&key_file, key.serialize_pem()).unwrap();
        (cert_file, key_file)
    }
}

fn listener_settings(cert: &(PathBuf, PathBuf)) -> ListenerTlsSettings {
    ListenerTlsSettings {
        cert: cert.0.clone(),
        key: cert.1.clone(),
        client_ca: None,
        client_auth: ClientAuth::None,
        min_version: TlsVersion::Tls12,
    }
}

fn upstream_settings(ca: &Path) -> UpstreamTlsSettings {
    UpstreamTlsSettings {
        ca: Some(ca.to_owned()),
        client_cert: None,
        server_name: None,
        verify: true,
    }
}

fn cluster() -> Cluster {
    Cluster::new(NodeRouting::Ports {
        advertised_host: "127.0.0.1".into(),
        node_port_base: 1,
    })
}

/// Accepts one connection on a fresh port with `acceptor` as listener `role`; a
/// connection to `name:port` is made by `connector`. Returns both ends' results.
async fn handshake(
    acceptor: Acceptor,
    role: ListenerRole,
    cluster: Cluster,
    connector: Connector,
    name: &str,
) -> (
    Result<UpstreamTarget, ConnectionError>,
    Result<(), ConnectionError>,
) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let server = tokio::spawn(async move {
        let (tcp, _) = listener.accept().await.unwrap();
        match acceptor
            .accept(tcp, role, &cluster, Duration::from_secs(5))
            .await
        {
            Ok((mut stream, target)) => {
                let mut ping = [0u8; 4];
                stream.read_exact(&mut ping).await.unwrap();
                stream.write_all(b"pong").await.unwrap();
                stream.flush().await.unwrap();
                Ok(target)
            }
            Err(err) => Err(err),
        }
    });
    let client = async {
        let mut stream = connector.connect(&format!("{name}:{port}")).await?;
        stream
            .write_all(b"ping")
            .await
            .map_err(ConnectionError::BrokerIo)?;
        stream.flush().await.map_err(ConnectionError::BrokerIo)?;
        let mut pong = [0u8; 4];
        stream
            .read_exact(&mut pong)
            .await
            .map_err(ConnectionError::BrokerIo)?;
        assert_eq!(&pong, b"pong");
        Ok(())
    }
    .await;
    (server.await.unwrap(), client)
}

/// [`handshake`] on a bootstrap listener of `listener`, by a client of `upstream`
/// connecting to `name`.
async fn bootstrap_handshake(
    listener: ListenerTlsSettings,
    upstream: UpstreamTlsSettings,
    name: &str,
) -> (
    Result<UpstreamTarget, ConnectionError>,
    Result<(), ConnectionError>,
) {
    handshake(
        tls_acceptor(listener, None),
        ListenerRole::Bootstrap,
        cluster(),
        tls_connector(upstream),
        name,
    )
    .await
}

fn tls_acceptor(settings: ListenerTlsSettings, sni: Option<SniRouting>) -> Acceptor {
    Acceptor::new(Some(Arc::new(ServerTls::load(settings).unwrap())), sni)
}

fn tls_connector(settings: UpstreamTlsSettings) -> Connector {
    Connector::new(Some(Arc::new(ClientTls::load(settings).unwrap())))
}

#[tokio::test]
async fn tls_on_both_sides_of_the_seam() {
    let dir = tempfile_dir();
    let pki = Pki::new(dir.path(), "test");
    let server = pki.issue("server", &["localhost", "127.0.0.1"]);
    let (target, client) = handshake(
        tls_acceptor(listener_settings(&server), None),
        ListenerRole::Node(3),
        cluster(),
        tls_connector(upstream_settings(&pki.ca_file)),
        "127.0.0.1",
    )
    .await;
    client.unwrap();
    assert_eq!(target.unwrap(), UpstreamTarget::Node(3));

    // By name too, with TLS 1.3 only.
    let tls13 = ListenerTlsSettings {
        min_version: TlsVersion::Tls13,
        ..listener_settings(&server)
    };
    let (target, client) =
        bootstrap_handshake(tls13, upstream_settings(&pki.ca_file), "localhost").await;
    client.unwrap();
    assert_eq!(target.unwrap(), UpstreamTarget::Bootstrap);
}

#[tokio::test]
async fn a_certificate_from_another_ca_is_refused_unless_verify_is_off() {
    let dir = tempfile_dir();
    let pki = Pki::new(dir.path(), "test");
    let other = Pki::new(dir.path(), "other");
    let server = other.issue("server", &["localhost"]);
    let (_, client) = bootstrap_handshake(
        listener_settings(&server),
        upstream_settings(&pki.ca_file),
        "localhost",
    )
    .await;
    let err = client.unwrap_err().to_string();
    assert!(err.contains("certificate"), "{err}");

    let unverified = UpstreamTlsSettings {
        verify: false,
        ..upstream_settings(&pki.ca_file)
    };
    let (_, client) =
        bootstrap_handshake(listener_settings(&server), unverified, "localhost").await;
    client.unwrap();
}

#[tokio::test]
async fn server_name_overrides_the_host_checked() {
    let dir = tempfile_dir();
    let pki = Pki::new(dir.path(), "test");
    let server = pki.issue("server", &["kafka.internal"]);
    let (_, client) = bootstrap_handshake(
        listener_settings(&server),
        upstream_settings(&pki.ca_file),
        "127.0.0.1",
    )
    .await;
    assert!(client.is_err(), "127.0.0.1 is not in the certificate");
    let named = UpstreamTlsSettings {
        server_name: Some("kafka.internal".into()),
        ..upstream_settings(&pki.ca_file)
    };
    let (_, client) = bootstrap_handshake(listener_settings(&server), named, "127.0.0.1").await;
    client.unwrap();
}

#[tokio::test]
async fn mtls_required_refuses_a_client_without_a_certificate() {
    let dir = tempfile_dir();
    let pki = Pki::new(dir.path(), "test");
    let server = pki.issue("server", &["localhost"]);
    let client_cert = pki.issue("client", &["kpress-client"]);
    let stranger = Pki::new(dir.path(), "stranger").issue("stranger", &["stranger"]);
    let required = ListenerTlsSettings {
        client_ca: Some(pki.ca_file.clone()),
        client_auth: ClientAuth::Required,
        ..listener_settings(&server)
    };
    let (accepted, _) = bootstrap_handshake(
        required.clone(),
        upstream_settings(&pki.ca_file),
        "localhost",
    )
    .await;
    assert!(
        matches!(accepted, Err(ConnectionError::TlsHandshake(_))),
        "{accepted:?}"
    );
    let (accepted, _) = bootstrap_handshake(
        required.clone(),
        UpstreamTlsSettings {
            client_cert: Some(stranger),
            ..upstream_settings(&pki.ca_file)
        },
        "localhost",
    )
    .await;
    assert!(accepted.is_err(), "a certificate of another CA is refused");
    let (accepted, client) = bootstrap_handshake(
        required,
        UpstreamTlsSettings {
            client_cert: Some(client_cert.clone()),
            ..upstream_settings(&pki.ca_file)
        },
        "localhost",
    )
    .await;
    client.unwrap();
    accepted.unwrap();

    // Requested: without a certificate is served.
    let requested = ListenerTlsSettings {
        client_ca: Some(pki.ca_file.clone()),
        client_auth: ClientAuth::Requested,
        ..listener_settings(&server)
    };
    let (accepted, client) =
        bootstrap_handshake(requested, upstream_settings(&pki.ca_file), "localhost").await;
    client.unwrap();
    accepted.unwrap();
}

#[tokio::test]
async fn plaintext_on_a_tls_listener_is_refused_clearly() {
    let dir = tempfile_dir();
    let pki = Pki::new(dir.path(), "test");
    let server = pki.issue("server", &["localhost"]);
    let (accepted, client) = handshake(
        tls_acceptor(listener_settings(&server), None),
        ListenerRole::Bootstrap,
        cluster(),
        Connector::new(None),
        "127.0.0.1",
    )
    .await;
    assert!(
        matches!(accepted, Err(ConnectionError::PlaintextOnTls)),
        "{accepted:?}"
    );
    assert!(client.is_err());
}

#[tokio::test]
async fn sni_names_route_to_known_nodes_and_nothing_else() {
    let dir = tempfile_dir();
    let pki = Pki::new(dir.path(), "test");
    let server = pki.issue(
        "server",
        &["*.kafka.test", "bootstrap.kafka.test", "127.0.0.1"],
    );
    let routing = NodeRouting::Sni {
        advertised_host_pattern: HostPattern::new("broker-{node}.kafka.test").unwrap(),
        bootstrap_host: Some("bootstrap.kafka.test".into()),
        advertised_port: 9093,
    };
    let sni = SniRouting::of(&routing).unwrap();
    let sni_cluster = || {
        let cluster = Cluster::new(routing.clone());
        AddressObserver::new(&cluster).broker(2, "127.0.0.1", 9092);
        cluster
    };
    let named = |name: &str| {
        tls_connector(UpstreamTlsSettings {
            server_name: Some(name.to_owned()),
            ..upstream_settings(&pki.ca_file)
        })
    };
    let cases = [
        ("broker-2.kafka.test", Some(UpstreamTarget::Node(2))),
        ("bootstrap.kafka.test", Some(UpstreamTarget::Bootstrap)),
        // A node the brokers never named, and a name of nothing kpress serves.
        ("broker-7.kafka.test", None),
        ("evil.kafka.test", None),
    ];
    for (name, expected) in cases {
        let (accepted, client) = handshake(
            tls_acceptor(listener_settings(&server), Some(sni.clone())),
            ListenerRole::Sni,
            sni_cluster(),
            named(name),
            "127.0.0.1",
        )
        .await;
        match expected {
            Some(target) => {
                client.unwrap();
                assert_eq!(accepted.unwrap(), target, "{name}");
            }
            None => {
                assert!(
                    matches!(&accepted, Err(ConnectionError::UnknownServerName(n)) if n == name),
                    "{name}: {accepted:?}"
                );
                // The client learns it from a TLS alert.
                let err = client.unwrap_err().to_string();
                assert!(
                    err.contains("AccessDenied") || err.contains("alert"),
                    "{err}"
                );
            }
        }
    }
    // No SNI at all (a client that connected to an IP address): the bootstrap.
    let (accepted, client) = handshake(
        tls_acceptor(listener_settings(&server), Some(sni.clone())),
        ListenerRole::Sni,
        sni_cluster(),
        tls_connector(upstream_settings(&pki.ca_file)),
        "127.0.0.1",
    )
    .await;
    client.unwrap();
    assert_eq!(accepted.unwrap(), UpstreamTarget::Bootstrap);
}

#[tokio::test]
async fn reloads_take_new_files_and_keep_old_ones_that_do_not_load() {
    let dir = tempfile_dir();
    let first = Pki::new(dir.path(), "first");
    let second = Pki::new(dir.path(), "second");
    let cert = first.issue("server", &["localhost"]);
    let tls = Arc::new(ServerTls::load(listener_settings(&cert)).unwrap());
    let acceptor = || Acceptor::new(Some(Arc::clone(&tls)), None);
    assert_eq!(tls.reload().unwrap(), Reloaded::Unchanged);

    // A broken key: refused, the first certificate still serves.
    std::fs::write(&cert.1, "-----BEGIN PRIVATE KEY-----\nnot base64\n").unwrap();
    assert!(tls.reload().is_err());
    let (_, client) = handshake(
        acceptor(),
        ListenerRole::Bootstrap,
        cluster(),
        tls_connector(upstream_settings(&first.ca_file)),
        "localhost",
    )
    .await;
    client.unwrap();

    // A new certificate from another CA, written over the same files.
    let renewed = second.issue("renewed", &["localhost"]);
    std::fs::copy(&renewed.0, &cert.0).unwrap();
    std::fs::copy(&renewed.1, &cert.1).unwrap();
    assert_eq!(tls.reload().unwrap(), Reloaded::Changed);
    let (_, client) = handshake(
        acceptor(),
        ListenerRole::Bootstrap,
        cluster(),
        tls_connector(upstream_settings(&second.ca_file)),
        "localhost",
    )
    .await;
    client.unwrap();
    let (_, client) = handshake(
        acceptor(),
        ListenerRole::Bootstrap,
        cluster(),
        tls_connector(upstream_settings(&first.ca_file)),
        "localhost",
    )
    .await;
    assert!(client.is_err(), "the old CA no longer matches");
}

#[test]
fn load_errors_name_the_key_and_file() {
    let dir = tempfile_dir();
    let pki = Pki::new(dir.path(), "test");
    let cert = pki.issue("server", &["localhost"]);
    let other = pki.issue("other", &["localhost"]);
    let missing = ListenerTlsSettings {
        cert: dir.path().join("absent.pem"),
        ..listener_settings(&cert)
    };
    let err = ServerTls::load(missing).unwrap_err().to_string();
    assert!(
        err.starts_with("listener.tls.cert: cannot read") && err.contains("absent.pem"),
        "{err}"
    );
    let key_as_cert = ListenerTlsSettings {
        cert: cert.1.clone(),
        ..listener_settings(&cert)
    };
    let err = ServerTls::load(key_as_cert).unwrap_err().to_string();
    assert!(err.contains("holds no certificate"), "{err}");
    let mismatched = ListenerTlsSettings {
        key: other.1.clone(),
        ..listener_settings(&cert)
    };
    let err = ServerTls::load(mismatched).unwrap_err().to_string();
    assert!(err.contains("does not go with listener.tls.cert"), "{err}");
    let err = ClientTls::load(UpstreamTlsSettings {
        server_name: Some("not a name".into()),
        ..upstream_settings(&pki.ca_file)
    })
    .unwrap_err()
    .to_string();
    assert!(err.contains("server_name"), "{err}");
}

fn tempfile_dir() -> tempfile::TempDir {
    tempfile::tempdir().unwrap()
}
