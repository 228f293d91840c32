//! TLS, mTLS, SASL_SSL and SNI against real Kafka 4.1.1 brokers: first the harness's
//! pieces directly (no kpress), then kpress in front of them. One node listens for
//! SSL, SSL with client certificates required (`MTLS`), SASL_SSL and SASL_PLAINTEXT
//! (PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512 users; SCRAM users formatted into the
//! metadata with `StorageTool format --add-scram`), with certificates from a per-run
//! `TestPki` (rcgen) in Kafka's PEM key and trust stores.
//!
//! The Java client, kcat and confluent-kafka each produce a dataset file and read it
//! back byte for byte over each kind of listener, configured from one
//! `ClientSecurity` each; without a certificate, with one from another CA, or with
//! a wrong password they are refused. The raw `SecureStream` speaks ApiVersions and
//! SASL/PLAIN over TLS and sends a hand-built Produce v13 on its authenticated
//! connection.
//!
//! Through `kpress run` (policy: `zstd.*` topics store zstd): TLS both ways, mTLS
//! both ways (kpress requires client certificates and presents its own to a broker
//! listener that requires one), a SASL_SSL cluster where clients' own PLAIN and SCRAM
//! logins pass through and kpress's side connections log in with `[upstream.sasl]`
//! (a Produce v13 for a topic created behind its back is resolved and recompressed),
//! and single-port SNI routing in front of three brokers with their names in
//! `/etc/hosts`; every record reads back byte for byte and the broker stores zstd.
//! Plaintext clients on kpress's TLS port, missing or untrusted client certificates
//! and SNI names of no node are refused and counted.
//!
//! kcat's librdkafka 2.0.2 does PLAIN but not SCRAM against Kafka 4.x (its SCRAM
//! client-final message repeats the client nonce, which Kafka 4 refuses; librdkafka
//! 2.6.1 fixed it), so SCRAM is spoken by Java and confluent-kafka (librdkafka 2.16).

use kpress_batch::builder::BatchBuilder;
use kpress_codec::Codec;
use kpress_tests::cluster::{BrokerListener, ClusterSecurity};
use kpress_tests::compression::Compression;
use kpress_tests::data::{diff_records, write_records, Dataset};
use kpress_tests::hosts::HostsEntries;
use kpress_tests::java_client::{values_of, ConsumeOptions, JavaClient, ProduceOptions};
use kpress_tests::kpress::{
    storing_rules, KpressProxy, KpressSetup, ListenerTlsKeys, SniListener, UpstreamSaslKeys,
    UpstreamTlsKeys,
};
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
    round_trips_via(&cluster().listener_bootstrap(listener), runs)
}

/// [`round_trips`] through `bootstrap` (kpress's), the topics created on the broker.
fn round_trips_via(bootstrap: &str, runs: &[(Client, &str, ClientSecurity)]) -> Vec<String> {
    let topics: Vec<&str> = runs.iter().map(|(_, topic, _)| *topic).collect();
    create_topics(&topics);
    std::thread::scope(|s| {
        let handles: Vec<_> = runs
            .iter()
            .map(|(client, topic, security)| {
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
        .build_values(&records)
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

// ---- Through kpress ----

/// `zstd.*` topics store zstd whether or not it is smaller, so a batch left in the
/// producer's codec is one kpress did not rewrite.
fn rules() -> String {
    storing_rules(&["zstd"])
}

/// Every record of the dataset in zstd batches in partition 0 of each of `topics`.
fn stored_zstd_problems(cluster: &KafkaCluster, topics: &[&str]) -> Vec<String> {
    match cluster.dump_partition_0(topics) {
        Ok(dumps) => topics
            .iter()
            .zip(dumps)
            .flat_map(|(topic, dump)| dump.problems_storing(topic, Compression::Zstd, &dataset().0))
            .collect(),
        Err(e) => vec![format!("DumpLogSegments of {topics:?}: {e:#}")],
    }
}

fn counter(proxy: &KpressProxy, name: &str, labels: &[(&str, &str)]) -> f64 {
    proxy
        .counter(name, labels)
        .unwrap_or_else(|e| panic!("scraping {name}: {e:#}"))
}

fn assert_none_through(proxy: &KpressProxy, failures: &[String]) {
    assert!(
        failures.is_empty(),
        "{}\n{}\n{}",
        failures.join("\n"),
        proxy.log(),
        cluster().describe_logs()
    );
}

/// The certificate kpress serves its clients: it names the address they dial.
fn kpress_listener_tls() -> ListenerTlsKeys {
    let cert = cluster()
        .pki()
        .server(&["localhost", "127.0.0.1"])
        .expect("issuing kpress's certificate");
    ListenerTlsKeys::serving(&cert)
}

/// TLS from the clients to kpress and from kpress to the brokers' SSL listener:
/// Java, kcat and confluent-kafka produce (lz4, snappy, gzip) and read back through
/// kpress, the broker stores zstd. A plaintext client on the TLS port is refused,
/// counted and logged, and kpress keeps serving.
#[test]
fn tls_both_ways_through_kpress() {
    let cluster = cluster();
    let proxy = KpressProxy::start_with(KpressSetup {
        listener_tls: Some(kpress_listener_tls()),
        upstream_tls: Some(UpstreamTlsKeys::trusting(cluster.pki().ca_cert())),
        ..KpressSetup::in_front_of(&cluster.ssl_addresses(), &cluster.node_ids(), &rules())
    })
    .unwrap_or_else(|e| panic!("starting kpress: {e:#}"));
    let runs = [
        (Client::Java, "zstd.tls.java", ssl()),
        (Client::Kcat, "zstd.tls.kcat", ssl()),
        (Client::Confluent, "zstd.tls.confluent", ssl()),
    ];
    let mut failures = round_trips_via(&proxy.bootstrap(), &runs);
    failures.extend(stored_zstd_problems(
        cluster,
        &["zstd.tls.java", "zstd.tls.kcat", "zstd.tls.confluent"],
    ));

    if let Ok(answer) = SecureStream::connect(proxy.listen(), &ClientSecurity::default(), TIMEOUT)
        .and_then(|mut stream| stream.api_versions(3))
    {
        failures.push(format!(
            "a plaintext client was answered on kpress's TLS port: {answer:?}"
        ));
    }
    let plaintext = counter(
        &proxy,
        "kpress_tls_handshake_failures_total",
        &[("reason", "plaintext")],
    );
    if plaintext < 1.0 {
        failures.push(format!("{plaintext} plaintext handshakes counted"));
    }
    if !proxy
        .log()
        .contains("client spoke plaintext to a TLS listener")
    {
        failures.push("no log line about the plaintext client".to_string());
    }
    if let Err(e) =
        SecureStream::connect(proxy.listen(), &ssl(), TIMEOUT).and_then(|mut s| s.api_versions(3))
    {
        failures.push(format!(
            "kpress stopped serving TLS after a plaintext client: {e:#}"
        ));
    }
    assert_none_through(&proxy, &failures);
}

/// mTLS on both sides: kpress requires client certificates of the test CA (without
/// one, or with another CA's, kcat and the raw client are refused and counted) and
/// presents its own to the brokers' MTLS listener, which requires one.
#[test]
fn mtls_both_ways_through_kpress() {
    let cluster = cluster();
    let pki = cluster.pki();
    let kpress_cert = pki.client("kpress").expect("kpress's client certificate");
    let proxy = KpressProxy::start_with(KpressSetup {
        listener_tls: Some(kpress_listener_tls().requiring_clients_of(pki.ca_cert())),
        upstream_tls: Some(UpstreamTlsKeys::trusting(pki.ca_cert()).presenting(&kpress_cert)),
        ..KpressSetup::in_front_of(&cluster.mtls_addresses(), &cluster.node_ids(), &rules())
    })
    .unwrap_or_else(|e| panic!("starting kpress: {e:#}"));
    let mut failures = Vec::new();
    let untrusted = ssl().with_cert(&pki.untrusted().expect("untrusted certificate"));
    for (what, security) in [
        ("no certificate", ssl()),
        ("another CA's certificate", untrusted),
    ] {
        if kcat_gets_metadata(&proxy.bootstrap(), &security) {
            failures.push(format!("kcat with {what} got Metadata through kpress"));
        }
        if let Ok(answer) = SecureStream::connect(proxy.listen(), &security, TIMEOUT)
            .and_then(|mut s| s.api_versions(3))
        {
            failures.push(format!(
                "the raw client with {what} was answered by kpress: {answer:?}"
            ));
        }
    }
    let refused = counter(
        &proxy,
        "kpress_tls_handshake_failures_total",
        &[("reason", "handshake")],
    );
    if refused < 2.0 {
        failures.push(format!(
            "{refused} failed client handshakes counted, 2 or more expected"
        ));
    }
    let runs: Vec<(Client, &str, ClientSecurity)> = [
        (Client::Java, "zstd.mtls.java"),
        (Client::Kcat, "zstd.mtls.kcat"),
        (Client::Confluent, "zstd.mtls.confluent"),
    ]
    .into_iter()
    .map(|(client, topic)| (client, topic, ssl().with_cert(&client_cert(topic))))
    .collect();
    failures.extend(round_trips_via(&proxy.bootstrap(), &runs));
    failures.extend(stored_zstd_problems(
        cluster,
        &["zstd.mtls.java", "zstd.mtls.kcat", "zstd.mtls.confluent"],
    ));
    assert_none_through(&proxy, &failures);
}

/// A SASL_SSL cluster: clients' own SASL (PLAIN by Java and kcat, SCRAM-SHA-512 by
/// confluent-kafka, SCRAM-SHA-256 by Java) passes through kpress over TLS, a wrong
/// password is refused; kpress's side connections log in with `[upstream.sasl]`
/// (SCRAM-SHA-512, password file), so a hand-built Produce v13 for a topic created
/// behind kpress's back is resolved by its own Metadata and recompressed.
#[test]
fn sasl_ssl_cluster_through_kpress() {
    let cluster = cluster();
    let ca = cluster.pki().ca_cert();
    let proxy = KpressProxy::start_with(KpressSetup {
        listener_tls: Some(kpress_listener_tls()),
        upstream_tls: Some(UpstreamTlsKeys::trusting(ca)),
        upstream_sasl: Some(UpstreamSaslKeys::with_password_file(&kpress_user())),
        ..KpressSetup::in_front_of(&cluster.sasl_ssl_addresses(), &cluster.node_ids(), &rules())
    })
    .unwrap_or_else(|e| panic!("starting kpress: {e:#}"));
    let topics = [
        "zstd.sasl-ssl.java-plain",
        "zstd.sasl-ssl.kcat-plain",
        "zstd.sasl-ssl.confluent-scram512",
        "zstd.sasl-ssl.java-scram256",
    ];
    let runs = [
        (
            Client::Java,
            topics[0],
            ClientSecurity::sasl_ssl(ca, &alice()),
        ),
        (
            Client::Kcat,
            topics[1],
            ClientSecurity::sasl_ssl(ca, &alice()),
        ),
        (
            Client::Confluent,
            topics[2],
            ClientSecurity::sasl_ssl(ca, &carol()),
        ),
        (
            Client::Java,
            topics[3],
            ClientSecurity::sasl_ssl(ca, &bob()),
        ),
    ];
    let mut failures = round_trips_via(&proxy.bootstrap(), &runs);
    failures.extend(stored_zstd_problems(cluster, &topics));
    let wrong = ClientSecurity::sasl_ssl(ca, &alice().with_password("wrong"));
    if kcat_gets_metadata(&proxy.bootstrap(), &wrong) {
        failures.push("kcat with a wrong password got Metadata through kpress".to_string());
    }

    // Created on the broker directly; no client has asked kpress about it.
    let topic = "zstd.sasl-ssl.created-behind-kpress";
    create_topics(&[topic]);
    let topic_id = {
        let mut direct = SecureStream::connect(
            cluster.sasl_ssl_addresses()[0],
            &ClientSecurity::sasl_ssl(ca, &alice()),
            TIMEOUT,
        )
        .unwrap_or_else(|e| panic!("SASL/PLAIN to the broker: {e:#}"));
        topic_ids(&mut direct)
            .into_iter()
            .find(|(_, name)| name == topic)
            .map(|(id, _)| id)
            .expect("the broker names the topic")
    };
    let node = std::net::SocketAddr::from((
        [127, 0, 0, 1],
        proxy.node_port_base().expect("ports mode") + 1,
    ));
    let records: Vec<Vec<u8>> = dataset().0[..400].to_vec();
    let batch = BatchBuilder::codec(Codec::Gzip)
        .build_values(&records)
        .expect("build a gzip batch");
    let produced = SecureStream::connect(node, &ClientSecurity::sasl_ssl(ca, &alice()), TIMEOUT)
        .and_then(|mut stream| produce_by_id_on(&mut stream, topic_id, 0, &batch, TIMEOUT));
    match produced {
        Ok(answer) if answer.error_code == 0 => match cluster.dump_partition_0(&[topic]) {
            Ok(dump) => {
                failures.extend(dump[0].problems_storing(topic, Compression::Zstd, &records))
            }
            Err(e) => failures.push(format!("DumpLogSegments of {topic}: {e:#}")),
        },
        other => failures.push(format!("Produce v13 by id through kpress: {other:?}")),
    }
    let unresolved = counter(&proxy, "kpress_unknown_topic_ids_total", &[]);
    if unresolved != 0.0 {
        failures.push(format!("{unresolved} topic ids left unresolved"));
    }
    let logged_in = counter(
        &proxy,
        "kpress_side_authentications_total",
        &[("result", "ok")],
    );
    let failed = counter(
        &proxy,
        "kpress_side_authentications_total",
        &[("result", "failed")],
    );
    if logged_in < 1.0 || failed != 0.0 {
        failures.push(format!(
            "kpress's own logins: {logged_in} ok, {failed} failed"
        ));
    }
    assert_none_through(&proxy, &failures);
}

/// Single-port SNI mode in front of three brokers (TLS both ways): the names map to
/// loopback in `/etc/hosts` for the test; clients bootstrap from
/// `bootstrap.kafka.test`, Metadata through kpress names `broker-N.kafka.test` on the
/// one port, and each client writes a partition led by a different broker and reads
/// all three back. A name that is no node's gets a TLS alert; a connection without
/// SNI reaches the bootstrap.
#[test]
fn sni_routes_three_brokers_through_one_port() {
    let security = ClusterSecurity {
        listeners: vec![BrokerListener::Ssl],
        sasl_users: Vec::new(),
    };
    let cluster = KafkaCluster::start_with(kafka_version(), 3, &security)
        .unwrap_or_else(|e| panic!("starting three brokers with SSL: {e:#}"));
    let pki = cluster.pki();
    let names = [
        "bootstrap.kafka.test",
        "broker-1.kafka.test",
        "broker-2.kafka.test",
        "broker-3.kafka.test",
    ];
    let _hosts = HostsEntries::loopback(&names).unwrap_or_else(|e| panic!("{e:#}"));
    let serving = pki
        .server(&["*.kafka.test", "127.0.0.1"])
        .expect("kpress's certificate");
    let proxy = KpressProxy::start_with(KpressSetup {
        sni: Some(SniListener {
            advertised_host_pattern: "broker-{node}.kafka.test".to_string(),
            bootstrap_host: Some("bootstrap.kafka.test".to_string()),
        }),
        listener_tls: Some(ListenerTlsKeys::serving(&serving)),
        upstream_tls: Some(UpstreamTlsKeys::trusting(pki.ca_cert())),
        ..KpressSetup::in_front_of(&cluster.ssl_addresses(), &cluster.node_ids(), &rules())
    })
    .unwrap_or_else(|e| panic!("starting kpress: {e:#}"));
    let bootstrap = proxy.bootstrap();
    let security = ClientSecurity::ssl(pki.ca_cert());
    let mut failures = Vec::new();

    let topic = "zstd.sni";
    let java = JavaClient::new(kafka_version());
    java.create_producer_codec_topics(&cluster.bootstrap(), &[topic], 3)
        .unwrap_or_else(|e| panic!("{e:#}"));
    let leaders: Vec<i32> = cluster
        .metadata()
        .expect("Metadata")
        .topic(topic)
        .expect("the topic")
        .partitions
        .iter()
        .map(|p| p.leader)
        .collect();
    let mut distinct = leaders.clone();
    distinct.sort_unstable();
    distinct.dedup();
    assert_eq!(distinct.len(), 3, "partition leaders {leaders:?}");

    // kcat's Metadata through kpress: every broker by its SNI name on the one port.
    let mut list = Command::new("kcat");
    list.args(["-L", "-b", &bootstrap, "-m", "10", "-t", topic]);
    for setting in security.librdkafka_settings() {
        list.arg("-X").arg(setting);
    }
    match run(&mut list, Duration::from_secs(60)) {
        Ok(finished) if finished.status.success() => {
            let text = finished.stdout_text();
            for node in 1..=3 {
                let expected = format!(
                    "broker {node} at broker-{node}.kafka.test:{}",
                    proxy.listen().port()
                );
                if !text.contains(&expected) {
                    failures.push(format!(
                        "kcat -L through kpress lacks '{expected}':\n{text}"
                    ));
                }
            }
        }
        other => failures.push(format!("kcat -L through kpress: {other:?}")),
    }

    let (expected, file) = dataset();
    let produce = |client: Client, partition: u32| -> Result<(), String> {
        let what = format!("{client:?} producing partition {partition} through SNI");
        let options = |compression, properties| ProduceOptions {
            compression,
            partition: Some(partition),
            properties,
            ..ProduceOptions::default()
        };
        let result = match client {
            Client::Java => java
                .produce_file(
                    &bootstrap,
                    topic,
                    file,
                    &options(Compression::Lz4, security.java_properties()),
                )
                .map(drop),
            Client::Kcat => {
                let settings = security.librdkafka_settings();
                let settings: Vec<&str> = settings.iter().map(String::as_str).collect();
                kcat::produce_file(
                    &bootstrap,
                    topic,
                    partition,
                    Compression::Snappy,
                    file,
                    &settings,
                )
            }
            Client::Confluent => confluent::produce_file(
                &bootstrap,
                topic,
                file,
                &options(Compression::Gzip, security.librdkafka_settings()),
            )
            .map(drop),
        };
        result.map_err(|e| format!("{what}: {e:#}"))
    };
    let clients = [Client::Java, Client::Kcat, Client::Confluent];
    std::thread::scope(|s| {
        let handles: Vec<_> = clients
            .iter()
            .zip(0u32..)
            .map(|(client, partition)| s.spawn(move || produce(*client, partition)))
            .collect();
        for handle in handles {
            if let Err(e) = handle.join().expect("a producer thread panicked") {
                failures.push(e);
            }
        }
    });
    for partition in 0..3u32 {
        let segment = cluster
            .segments(topic, partition)
            .ok()
            .and_then(|s| s.into_iter().next());
        match segment
            .map(|path| kpress_tests::dump_log_segments(cluster.version(), &[path.as_path()]))
        {
            Some(Ok(dumps)) => {
                failures.extend(dumps[0].problems_storing(topic, Compression::Zstd, expected))
            }
            Some(Err(e)) => failures.push(format!("DumpLogSegments of {topic}-{partition}: {e:#}")),
            None => failures.push(format!("no segment of {topic}-{partition}")),
        }
    }
    let java_read = java.consume(
        &bootstrap,
        &[topic],
        expected.len() * 3,
        &ConsumeOptions {
            properties: security.java_properties(),
            ..ConsumeOptions::default()
        },
    );
    match java_read {
        Ok(records) => {
            for partition in 0..3 {
                let values: Vec<&[u8]> = records
                    .iter()
                    .filter(|r| r.partition == partition)
                    .map(|r| r.value.as_slice())
                    .collect();
                if let Some(diff) = diff_records(expected, &values) {
                    failures.push(format!("Java read {topic}-{partition} through SNI: {diff}"));
                }
            }
        }
        Err(e) => failures.push(format!("Java consumer through SNI: {e:#}")),
    }
    let settings = security.librdkafka_settings();
    let settings: Vec<&str> = settings.iter().map(String::as_str).collect();
    for partition in 0..3 {
        failures.extend(kcat::read_back_problem(
            &bootstrap, topic, partition, &settings, expected,
        ));
    }

    let unknown = TlsOptions {
        server_name: Some("broker-9.kafka.test".to_string()),
        ..TlsOptions::default()
    };
    if let Ok(answer) = SecureStream::connect_with(proxy.listen(), &security, &unknown, TIMEOUT)
        .and_then(|mut s| s.api_versions(3))
    {
        failures.push(format!("an SNI name of no node was answered: {answer:?}"));
    }
    let refused = counter(
        &proxy,
        "kpress_tls_handshake_failures_total",
        &[("reason", "unknown_server_name")],
    );
    if refused < 1.0 {
        failures.push(format!("{refused} unknown server names counted"));
    }
    // Dialled by IP, no SNI: the bootstrap answers.
    if let Err(e) = SecureStream::connect(proxy.listen(), &security, TIMEOUT)
        .and_then(|mut s| s.api_versions(3))
    {
        failures.push(format!("a connection without SNI: {e:#}"));
    }
    proxy.assert_no_failures(&failures, &cluster);
}
