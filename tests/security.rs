//! The harness's TLS, mTLS and SASL_SSL pieces proven against a real Kafka 4.1.1
//! broker directly (no kpress): one node listening for SSL, SSL with client
//! certificates required (`MTLS`), SASL_SSL and SASL_PLAINTEXT (PLAIN, SCRAM-SHA-256
//! and SCRAM-SHA-512 users; SCRAM users formatted into the metadata with
//! `StorageTool format --add-scram`), certificates from a per-run [`TestPki`]
//! (rcgen), Kafka's PEM key and trust stores.
//!
//! The Java client, kcat and confluent-kafka each produce a dataset file and read it
//! back byte for byte over each kind of listener, configured from one
//! [`ClientSecurity`] each; without a certificate, with one from another CA, or with
//! a wrong password they are refused. The raw [`SecureStream`] speaks ApiVersions and
//! SASL/PLAIN over TLS and sends a hand-built Produce v13 on its authenticated
//! connection.
//!
//! kcat's librdkafka 2.0.2 does PLAIN but not SCRAM against Kafka 4.x (its SCRAM
//! client-final message repeats the client nonce, which Kafka 4 refuses; librdkafka
//! 2.6.1 fixed it), so SCRAM is spoken by Java and confluent-kafka (librdkafka 2.16).

use kpress_batch::builder::{BatchBuilder, Record};
use kpress_codec::Codec;
use kpress_tests::cluster::{BrokerListener, ClusterSecurity};
use kpress_tests::compression::Compression;
use kpress_tests::data::{diff_records, write_records, Dataset};
use kpress_tests::hosts::HostsEntries;
use kpress_tests::java_client::{values_of, ConsumeOptions, JavaClient, ProduceOptions};
use kpress_tests::process::run;
use kpress_tests::raw_produce::produce_by_id_on;
use kpress_tests::secure_stream::{SecureStream, TlsOptions, TlsVersion};
use kpress_tests::tls::{CertFiles, ClientSecurity, SaslMechanism, SaslUser};
use kpress_tests::{confluent, kafka_version, kcat, KafkaCluster};
use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

const TIMEOUT: Duration = Duration::from_secs(30);

fn alice() -> SaslUser {
    SaslUser::new(SaslMechanism::Plain, "alice", "alice-secret")
}

fn bob() -> SaslUser {
    SaslUser::new(SaslMechanism::ScramSha256, "bob", "bob-secret")
}

fn carol() -> SaslUser {
    SaslUser::new(SaslMechanism::ScramSha512, "carol", "carol-secret")
}

/// The login kpress's own side connections use (`[upstream.sasl]`).
fn kpress_user() -> SaslUser {
    SaslUser::new(SaslMechanism::ScramSha512, "kpress", "kpress-secret")
}

/// The one broker of this binary, with every kind of listener.
fn cluster() -> &'static KafkaCluster {
    static CLUSTER: OnceLock<KafkaCluster> = OnceLock::new();
    CLUSTER.get_or_init(|| {
        let started = Instant::now();
        let security = ClusterSecurity::all_listeners(&[alice(), bob(), carol(), kpress_user()]);
        let cluster = KafkaCluster::start_with(kafka_version(), 1, &security)
            .unwrap_or_else(|e| panic!("starting Kafka with TLS and SASL listeners: {e:#}"));
        eprintln!(
            "broker with SSL, MTLS, SASL_SSL and SASL_PLAINTEXT listeners up in {:.1?}",
            started.elapsed()
        );
        cluster
    })
}

/// The dataset's first 2000 records and a file of them (one per line).
fn dataset() -> &'static (Vec<Vec<u8>>, PathBuf) {
    static DATA: OnceLock<(Vec<Vec<u8>>, PathBuf)> = OnceLock::new();
    DATA.get_or_init(|| {
        let records = Dataset::ApacheAccessLog.records()[..2000].to_vec();
        let file = write_records(&cluster().scratch_dir().join("apache-2000.log"), &records);
        (records, file)
    })
}

fn create_topics(topics: &[&str]) {
    JavaClient::new(kafka_version())
        .create_producer_codec_topics(&cluster().bootstrap(), topics, 1)
        .unwrap_or_else(|e| panic!("creating {topics:?}: {e:#}"));
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Client {
    Java,
    Kcat,
    Confluent,
}

/// `client` produces the dataset into `topic` through `bootstrap` with `security`
/// and reads it back the same way; what went wrong, if anything.
fn round_trip(
    client: Client,
    bootstrap: &str,
    topic: &str,
    security: &ClientSecurity,
) -> Option<String> {
    let (expected, file) = dataset();
    let what = format!("{client:?} over {} on {topic}", security.protocol());
    let problem = match client {
        Client::Java => {
            let java = JavaClient::new(kafka_version());
            let properties = security.java_properties();
            java.produce_file(
                bootstrap,
                topic,
                file,
                &ProduceOptions {
                    compression: Compression::Lz4,
                    properties: properties.clone(),
                    ..ProduceOptions::default()
                },
            )
            .and_then(|_| {
                java.read_back_problems(
                    bootstrap,
                    &[topic],
                    expected,
                    &ConsumeOptions {
                        properties,
                        ..ConsumeOptions::default()
                    },
                    "Java",
                )
            })
            .map(|problems| (!problems.is_empty()).then(|| problems.join("; ")))
        }
        Client::Kcat => {
            let settings = security.librdkafka_settings();
            let settings: Vec<&str> = settings.iter().map(String::as_str).collect();
            kcat::produce_file(bootstrap, topic, 0, Compression::Snappy, file, &settings)
                .map(|()| kcat::read_back_problem(bootstrap, topic, 0, &settings, expected))
        }
        Client::Confluent => {
            let options = ProduceOptions {
                compression: Compression::Gzip,
                properties: security.librdkafka_settings(),
                ..ProduceOptions::default()
            };
            confluent::produce_file(bootstrap, topic, file, &options)
                .and_then(|_| {
                    confluent::consume(
                        bootstrap,
                        &[topic],
                        expected.len(),
                        &ConsumeOptions {
                            properties: security.librdkafka_settings(),
                            ..ConsumeOptions::default()
                        },
                    )
                })
                .map(|records| diff_records(expected, &values_of(&records, topic)))
        }
    };
    match problem {
        Ok(None) => None,
        Ok(Some(diff)) => Some(format!("{what}: read back: {diff}")),
        Err(e) => Some(format!("{what}: {e:#}")),
    }
}

/// Runs every `(client, topic, security)` round trip side by side against the
/// `listener` bootstrap; every problem found.
fn round_trips(listener: BrokerListener, runs: &[(Client, &str, ClientSecurity)]) -> Vec<String> {
    let bootstrap = cluster().listener_bootstrap(listener);
    let topics: Vec<&str> = runs.iter().map(|(_, topic, _)| *topic).collect();
    create_topics(&topics);
    std::thread::scope(|s| {
        let handles: Vec<_> = runs
            .iter()
            .map(|(client, topic, security)| {
                let bootstrap = &bootstrap;
                s.spawn(move || round_trip(*client, bootstrap, topic, security))
            })
            .collect();
        handles
            .into_iter()
            .filter_map(|h| h.join().expect("a client thread panicked"))
            .collect()
    })
}

/// Whether kcat gets Metadata from `bootstrap` with `security` within 5 s.
fn kcat_gets_metadata(bootstrap: &str, security: &ClientSecurity) -> bool {
    let mut cmd = Command::new("kcat");
    cmd.args(["-L", "-b", bootstrap, "-m", "5"]);
    for setting in security.librdkafka_settings() {
        cmd.arg("-X").arg(setting);
    }
    run(&mut cmd, Duration::from_secs(60)).is_ok_and(|finished| finished.status.success())
}

fn ssl() -> ClientSecurity {
    ClientSecurity::ssl(cluster().pki().ca_cert())
}

fn client_cert(name: &str) -> CertFiles {
    cluster()
        .pki()
        .client(name)
        .expect("issuing a client certificate")
}

fn assert_none(failures: &[String]) {
    assert!(
        failures.is_empty(),
        "{}\n{}",
        failures.join("\n"),
        cluster().describe_logs()
    );
}

/// SSL without client certificates: each client trusts the test CA and checks the
/// broker's certificate names 127.0.0.1 (hostname verification at its default).
#[test]
fn ssl_listener_serves_java_kcat_and_confluent() {
    let failures = round_trips(
        BrokerListener::Ssl,
        &[
            (Client::Java, "ssl.java", ssl()),
            (Client::Kcat, "ssl.kcat", ssl()),
            (Client::Confluent, "ssl.confluent", ssl()),
        ],
    );
    assert_none(&failures);
}

/// `ssl.client.auth=required`: no certificate, or one from another CA, is refused
/// (kcat and the raw client); each client with a certificate of the test CA (Java
/// from a PEM key store) produces and reads back.
#[test]
fn mtls_listener_requires_a_client_certificate() {
    let cluster = cluster();
    let bootstrap = cluster.listener_bootstrap(BrokerListener::Mtls);
    let addr = cluster.mtls_addresses()[0];
    let pki = cluster.pki();
    let mut failures = Vec::new();
    let untrusted = ssl().with_cert(&pki.untrusted().expect("untrusted certificate"));
    for (what, security) in [
        ("no certificate", ssl()),
        ("another CA's certificate", untrusted),
    ] {
        if kcat_gets_metadata(&bootstrap, &security) {
            failures.push(format!(
                "kcat with {what} got Metadata from the MTLS listener"
            ));
        }
        match SecureStream::connect(addr, &security, TIMEOUT).and_then(|mut s| s.api_versions(3)) {
            Ok(answer) => failures.push(format!(
                "the raw client with {what} was answered: {answer:?}"
            )),
            Err(e) => eprintln!("raw client with {what} refused as expected: {e:#}"),
        }
    }
    let runs: Vec<(Client, &str, ClientSecurity)> = [
        (Client::Java, "mtls.java"),
        (Client::Kcat, "mtls.kcat"),
        (Client::Confluent, "mtls.confluent"),
    ]
    .into_iter()
    .map(|(client, topic)| (client, topic, ssl().with_cert(&client_cert(topic))))
    .collect();
    failures.extend(round_trips(BrokerListener::Mtls, &runs));
    assert_none(&failures);
}

/// SASL_SSL with PLAIN (users in the broker's JAAS config): Java, kcat and
/// confluent-kafka; a wrong password is refused.
#[test]
fn sasl_ssl_plain_logins() {
    let ca = cluster().pki().ca_cert();
    let plain = ClientSecurity::sasl_ssl(ca, &alice());
    let mut failures = round_trips(
        BrokerListener::SaslSsl,
        &[
            (Client::Java, "sasl-ssl-plain.java", plain.clone()),
            (Client::Kcat, "sasl-ssl-plain.kcat", plain.clone()),
            (Client::Confluent, "sasl-ssl-plain.confluent", plain),
        ],
    );
    let wrong = ClientSecurity::sasl_ssl(ca, &alice().with_password("wrong"));
    if kcat_gets_metadata(
        &cluster().listener_bootstrap(BrokerListener::SaslSsl),
        &wrong,
    ) {
        failures.push("kcat with a wrong PLAIN password got Metadata".to_string());
    }
    assert_none(&failures);
}

/// SASL_SSL with SCRAM users formatted into the metadata: SCRAM-SHA-512 by Java and
/// confluent-kafka, SCRAM-SHA-256 by confluent-kafka; SCRAM-SHA-256 over
/// SASL_PLAINTEXT too; a wrong SCRAM password is refused.
#[test]
fn sasl_ssl_scram_logins() {
    let ca = cluster().pki().ca_cert();
    let mut failures = round_trips(
        BrokerListener::SaslSsl,
        &[
            (
                Client::Java,
                "sasl-ssl-scram512.java",
                ClientSecurity::sasl_ssl(ca, &carol()),
            ),
            (
                Client::Confluent,
                "sasl-ssl-scram512.confluent",
                ClientSecurity::sasl_ssl(ca, &carol()),
            ),
            (
                Client::Confluent,
                "sasl-ssl-scram256.confluent",
                ClientSecurity::sasl_ssl(ca, &bob()),
            ),
        ],
    );
    failures.extend(round_trips(
        BrokerListener::SaslPlaintext,
        &[(
            Client::Java,
            "sasl-plaintext-scram256.java",
            ClientSecurity::sasl_plaintext(&bob()),
        )],
    ));
    let java = JavaClient::new(kafka_version());
    let wrong = ClientSecurity::sasl_ssl(ca, &carol().with_password("wrong"));
    if java
        .consume(
            &cluster().listener_bootstrap(BrokerListener::SaslSsl),
            &["sasl-ssl-scram512.java"],
            1,
            &ConsumeOptions {
                properties: wrong.java_properties(),
                timeout: Duration::from_secs(20),
                ..ConsumeOptions::default()
            },
        )
        .is_ok()
    {
        failures.push("Java with a wrong SCRAM-SHA-512 password read records".to_string());
    }
    assert_none(&failures);
}

/// Topic ids by name from a Metadata v12 request on `stream`.
fn topic_ids(stream: &mut SecureStream) -> Vec<([u8; 16], String)> {
    struct Names(Vec<([u8; 16], String)>);
    impl kpress_protocol::ResponseObserver for Names {
        fn broker(&mut self, _: i32, host: &str, port: i32) -> (String, i32) {
            (host.to_owned(), port)
        }
        fn topic(&mut self, id: [u8; 16], name: &str) {
            self.0.push((id, name.to_owned()));
        }
    }
    let correlation_id = stream.next_correlation_id();
    let request =
        kpress_protocol::metadata_request(12, correlation_id, &[]).expect("encode Metadata");
    let body = stream
        .exchange(&request)
        .expect("Metadata over the secure stream");
    let mut names = Names(Vec::new());
    // Response header v1: the correlation id and an empty tag buffer.
    kpress_protocol::rewrite_response(3, 12, &body[5..], &mut names).expect("parse Metadata");
    names.0
}

/// The raw client: ApiVersions over TLS 1.2 and 1.3 with the certificate checked
/// against the IP or a name; refused by a CA it does not trust, for a name the
/// certificate lacks, and in plain TCP on a TLS port; SASL/PLAIN over TLS (a wrong
/// password refused with Kafka's error 58); a hand-built Produce v13 by topic id on
/// the authenticated connection, read back by kcat over SASL_SSL.
#[test]
fn raw_secure_stream_speaks_tls_and_sasl_plain() {
    let cluster = cluster();
    let pki = cluster.pki();
    let ssl_addr = cluster.ssl_addresses()[0];
    let sasl_ssl_addr = cluster.sasl_ssl_addresses()[0];
    let mut failures = Vec::new();

    for (only_version, server_name) in [
        (None, None),
        (Some(TlsVersion::Tls12), Some("localhost")),
        (Some(TlsVersion::Tls13), None),
    ] {
        let options = TlsOptions {
            server_name: server_name.map(str::to_string),
            only_version,
        };
        match SecureStream::connect_with(ssl_addr, &ssl(), &options, TIMEOUT) {
            Ok(mut stream) => {
                let negotiated = stream.tls_version();
                if only_version.is_some() && negotiated != only_version {
                    failures.push(format!("{options:?}: negotiated {negotiated:?}"));
                }
                if let Err(e) = stream.api_versions(3) {
                    failures.push(format!("ApiVersions over TLS ({options:?}): {e:#}"));
                }
            }
            Err(e) => failures.push(format!("TLS to the SSL listener ({options:?}): {e:#}")),
        }
    }
    let refused = [
        (
            "a client trusting another CA",
            ClientSecurity::ssl(&pki.untrusted().expect("untrusted").ca),
            TlsOptions::default(),
        ),
        (
            "a name the certificate lacks",
            ssl(),
            TlsOptions {
                server_name: Some("broker-9.kafka.test".to_string()),
                ..TlsOptions::default()
            },
        ),
        (
            "plain TCP",
            ClientSecurity::default(),
            TlsOptions::default(),
        ),
    ];
    for (what, security, options) in refused {
        let answer = SecureStream::connect_with(ssl_addr, &security, &options, TIMEOUT)
            .and_then(|mut stream| stream.api_versions(3));
        match answer {
            Ok(answer) => failures.push(format!("{what} was answered on the SSL port: {answer:?}")),
            Err(e) => eprintln!("{what} refused as expected: {e:#}"),
        }
    }

    let ca = pki.ca_cert();
    match SecureStream::connect(
        sasl_ssl_addr,
        &ClientSecurity::sasl_ssl(ca, &alice().with_password("wrong")),
        TIMEOUT,
    ) {
        Ok(_) => failures.push("SASL/PLAIN with a wrong password accepted".to_string()),
        Err(e) if format!("{e:#}").contains("error 58") => {}
        Err(e) => failures.push(format!("a wrong password refused without error 58: {e:#}")),
    }
    if SecureStream::connect(
        sasl_ssl_addr,
        &ClientSecurity::sasl_ssl(ca, &carol()),
        TIMEOUT,
    )
    .is_ok()
    {
        failures.push("the raw client claims to speak SCRAM".to_string());
    }

    let topic = "sasl-ssl.raw-produce-v13";
    create_topics(&[topic]);
    let plain = ClientSecurity::sasl_ssl(ca, &alice());
    let records: Vec<Vec<u8>> = dataset().0[..300].to_vec();
    let mut stream = SecureStream::connect(sasl_ssl_addr, &plain, TIMEOUT)
        .unwrap_or_else(|e| panic!("SASL/PLAIN over TLS: {e:#}"));
    if let Err(e) = stream.api_versions(3) {
        failures.push(format!("ApiVersions after SASL/PLAIN: {e:#}"));
    }
    let topic_id = topic_ids(&mut stream)
        .into_iter()
        .find(|(_, name)| name == topic)
        .map(|(id, _)| id)
        .expect("Metadata over SASL_SSL names the topic");
    let batch = BatchBuilder::codec(Codec::Gzip)
        .build(
            &records
                .iter()
                .cloned()
                .map(Record::value)
                .collect::<Vec<_>>(),
        )
        .expect("build a gzip batch");
    match produce_by_id_on(&mut stream, topic_id, 0, &batch, TIMEOUT) {
        Ok(answer) if answer.error_code == 0 => {
            let settings = plain.librdkafka_settings();
            let settings: Vec<&str> = settings.iter().map(String::as_str).collect();
            let bootstrap = cluster.listener_bootstrap(BrokerListener::SaslSsl);
            failures.extend(kcat::read_back_problem(
                &bootstrap, topic, 0, &settings, &records,
            ));
        }
        other => failures.push(format!("Produce v13 over SASL_SSL: {other:?}")),
    }
    assert_none(&failures);
}

/// Names added to `/etc/hosts` resolve to loopback while the guard lives and are gone
/// (exactly those lines) after it drops.
#[test]
fn hosts_entries_resolve_to_loopback_until_dropped() {
    use std::net::ToSocketAddrs;
    let name = format!("kpress-selftest-{}.kafka.test", std::process::id());
    let resolve = || {
        (name.as_str(), 9092)
            .to_socket_addrs()
            .map(|addrs| addrs.map(|a| a.ip()).collect::<Vec<_>>())
    };
    let before = std::fs::read_to_string("/etc/hosts").expect("read /etc/hosts");
    let entries = HostsEntries::loopback(&[&name]).unwrap_or_else(|e| panic!("{e:#}"));
    let resolved = resolve().unwrap_or_else(|e| panic!("{name} does not resolve: {e}"));
    assert_eq!(resolved, [std::net::IpAddr::from([127, 0, 0, 1])]);
    drop(entries);
    let after = std::fs::read_to_string("/etc/hosts").expect("read /etc/hosts");
    assert!(!after.contains(&name), "{after}");
    assert!(resolve().is_err(), "{name} still resolves");
    // Other processes may have added or removed their own lines meanwhile; every line
    // that was there before and is not a harness line is still there.
    for line in before.lines().filter(|l| !l.contains("# kpress-tests")) {
        assert!(after.lines().any(|l| l == line), "{line:?} lost");
    }
}
