//! SASL/OAUTHBEARER against a real Kafka 4.1 broker that validates JWTs
//! (`OAuthBearerValidatorCallbackHandler`) against a JWKS endpoint this test serves,
//! next to a token endpoint it serves too: client-credentials grants answered with
//! short-lived RS256 JWTs signed by a key the test generates.
//!
//! - kpress's own side connection logs in with `[upstream.sasl] mechanism =
//!   "OAUTHBEARER"` (client credentials), and Produce v13 requests for topics created
//!   behind its back are resolved by its Metadata lookups. The broker sets
//!   `connections.max.reauth.ms`, the tokens live 30 s: the lookups are timed so that
//!   the side connection re-authenticates in place (KIP-368) once with its cached
//!   token and once with a refreshed one, and the broker never closes it.
//! - kpress with `token_file` logs in with the token in a file and resolves a topic id.
//! - A raw client logs in through kpress with its own OAUTHBEARER token, produces,
//!   re-authenticates on the same connection with a new token, and produces again past
//!   its first session's end: clients' logins and re-authentications pass through.
//! - A Java client logs in through kpress with its own client credentials (the
//!   client's OAUTHBEARER exchange passes through untouched) and its records read back.
//! - A token the broker refuses (its signature altered) makes `kpress doctor` report
//!   the broker's `invalid_token` JSON error, after the RFC 7628 acknowledgement,
//!   without printing the token; the broker fetched the JWKS, so signatures were
//!   checked.
//! - kpress in topic mode (no policy: `compression.type = "topic"` is the default) reads
//!   a topic's own `compression.type` over its OAUTHBEARER login: a Produce v13 for a
//!   zstd topic created behind its back, and a Java client's own client-credentials
//!   login producing through it, are rewritten into zstd by kpress.
//! - Neither the client secret nor a token appears in kpress's log.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use base64::Engine;
use kpress_batch::builder::BatchBuilder;
use kpress_codec::Codec;
use kpress_tests::cluster::{BrokerListener, ClusterSecurity};
use kpress_tests::compression::Compression;
use kpress_tests::data::write_records;
use kpress_tests::java_client::{ConsumeOptions, JavaClient, ProduceOptions};
use kpress_tests::kpress::{kpress_binary, storing_rules, KpressProxy, KpressSetup};
use kpress_tests::raw_produce::produce_by_id_on;
use kpress_tests::secure_stream::SecureStream;
use kpress_tests::tls::{ClientSecurity, SaslMechanism, SaslUser};
use kpress_tests::{kafka_version, KafkaCluster};
use ring::rand::SystemRandom;
use ring::signature::{RsaKeyPair, RSA_PKCS1_SHA256};

const TIMEOUT: Duration = Duration::from_secs(30);
/// The broker's `connections.max.reauth.ms`.
const REAUTH: Duration = Duration::from_secs(20);
/// How long the test's tokens live.
const TOKEN_LIFE: Duration = Duration::from_secs(30);
const KPRESS_SECRET: &str = "kpress-client-secret-7f3a";
const JAVA_SECRET: &str = "java-client-secret-91bc";
const KEY_ID: &str = "kpress-test-key";
/// How often the broker fetched the JWKS: at least once, or it checked no signature.
static JWKS_FETCHES: AtomicUsize = AtomicUsize::new(0);

/// The raw producer's own login (PLAIN: the listener enables both mechanisms; what is
/// tested is kpress's own login).
fn alice() -> SaslUser {
    SaslUser::new(SaslMechanism::Plain, "alice", "alice-secret")
}

/// When tokens were issued and when they expire (JWT `exp`), by client id.
type Issued = HashMap<String, Vec<(Instant, Instant)>>;

/// An OAuth 2 authorisation server: `/jwks` and `/token` (client-credentials grant,
/// client id and secret in HTTP Basic), over plain HTTP on loopback.
struct IdentityProvider {
    addr: SocketAddr,
    key: Arc<RsaKeyPair>,
    /// When tokens were issued and when they expire (JWT `exp`), by client id.
    issued: Arc<Mutex<Issued>>,
    /// Every token issued, to look for in logs.
    tokens: Arc<Mutex<Vec<String>>>,
}

impl IdentityProvider {
    fn start(clients: &[(&str, &str)]) -> IdentityProvider {
        let dir = tempfile::tempdir().expect("a temp dir");
        // OpenSSL 3 writes a DER RSA key as PKCS#1 (RSAPrivateKey).
        let der = dir.path().join("key.der");
        let generated = Command::new("openssl")
            .args([
                "genpkey",
                "-algorithm",
                "RSA",
                "-pkeyopt",
                "rsa_keygen_bits:2048",
            ])
            .args(["-outform", "DER", "-out"])
            .arg(&der)
            .output()
            .expect("openssl runs");
        assert!(generated.status.success(), "{generated:?}");
        let key = Arc::new(
            RsaKeyPair::from_der(&std::fs::read(&der).unwrap()).expect("a PKCS#1 RSA key"),
        );
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let provider = IdentityProvider {
            addr: listener.local_addr().unwrap(),
            key,
            issued: Arc::default(),
            tokens: Arc::default(),
        };
        let clients: HashMap<String, String> = clients
            .iter()
            .map(|(id, secret)| ((*id).to_owned(), (*secret).to_owned()))
            .collect();
        let (key, issued, tokens) = (
            provider.key.clone(),
            provider.issued.clone(),
            provider.tokens.clone(),
        );
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let (key, issued, tokens, clients) =
                    (key.clone(), issued.clone(), tokens.clone(), clients.clone());
                std::thread::spawn(move || {
                    let _ = serve(stream, &key, &clients, &issued, &tokens);
                });
            }
        });
        provider
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    fn issued_to(&self, client: &str) -> usize {
        self.issued.lock().unwrap().get(client).map_or(0, Vec::len)
    }

    fn first_issued_to(&self, client: &str) -> Option<(Instant, Instant)> {
        self.issued.lock().unwrap().get(client)?.first().copied()
    }

    /// A token for `subject`, as `/token` would issue it.
    fn token_for(&self, subject: &str) -> String {
        let (token, _) = jwt(&self.key, subject, TOKEN_LIFE);
        self.tokens.lock().unwrap().push(token.clone());
        token
    }
}

/// A JWT for `subject` living `life` (whole seconds, as `exp` counts them), and the
/// instant its `exp` falls on.
fn jwt(key: &RsaKeyPair, subject: &str, life: Duration) -> (String, Instant) {
    let (wall, now_instant) = (SystemTime::now(), Instant::now());
    let now = wall.duration_since(UNIX_EPOCH).unwrap().as_secs();
    let exp = UNIX_EPOCH + Duration::from_secs(now + life.as_secs());
    let ends = now_instant + exp.duration_since(wall).unwrap_or_default();
    let header = format!(r#"{{"alg":"RS256","typ":"JWT","kid":"{KEY_ID}"}}"#);
    let claims = format!(
        r#"{{"sub":"{subject}","iat":{now},"exp":{},"scope":"kafka"}}"#,
        now + life.as_secs()
    );
    let signed = format!(
        "{}.{}",
        URL_SAFE_NO_PAD.encode(header),
        URL_SAFE_NO_PAD.encode(claims)
    );
    let mut signature = vec![0; key.public().modulus_len()];
    key.sign(
        &RSA_PKCS1_SHA256,
        &SystemRandom::new(),
        signed.as_bytes(),
        &mut signature,
    )
    .expect("RS256 signs");
    (
        format!("{signed}.{}", URL_SAFE_NO_PAD.encode(signature)),
        ends,
    )
}

fn jwks(key: &RsaKeyPair) -> String {
    let public: ring::rsa::PublicKeyComponents<Vec<u8>> = key.public().into();
    format!(
        r#"{{"keys":[{{"kty":"RSA","kid":"{KEY_ID}","use":"sig","alg":"RS256","n":"{}","e":"{}"}}]}}"#,
        URL_SAFE_NO_PAD.encode(&public.n),
        URL_SAFE_NO_PAD.encode(&public.e)
    )
}

/// One HTTP/1.1 request on `stream`, answered and closed.
fn serve(
    stream: TcpStream,
    key: &RsaKeyPair,
    clients: &HashMap<String, String>,
    issued: &Mutex<Issued>,
    tokens: &Mutex<Vec<String>>,
) -> std::io::Result<()> {
    stream.set_read_timeout(Some(TIMEOUT))?;
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut request_line = String::new();
    reader.read_line(&mut request_line)?;
    let mut headers = HashMap::new();
    loop {
        let mut line = String::new();
        reader.read_line(&mut line)?;
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        if let Some((name, value)) = line.split_once(':') {
            headers.insert(name.trim().to_ascii_lowercase(), value.trim().to_owned());
        }
    }
    let length: usize = headers
        .get("content-length")
        .and_then(|l| l.parse().ok())
        .unwrap_or(0);
    let mut body = vec![0; length.min(64 * 1024)];
    reader.read_exact(&mut body)?;
    let (status, answer) = match request_line.split_whitespace().take(2).collect::<Vec<_>>()[..] {
        ["GET", "/jwks"] => {
            JWKS_FETCHES.fetch_add(1, Ordering::Relaxed);
            ("200 OK", jwks(key))
        }
        ["POST", "/token"] => match client_of(&headers, &body, clients) {
            Some(client) => {
                let (token, ends) = jwt(key, &client, TOKEN_LIFE);
                tokens.lock().unwrap().push(token.clone());
                issued
                    .lock()
                    .unwrap()
                    .entry(client)
                    .or_default()
                    .push((Instant::now(), ends));
                (
                    "200 OK",
                    format!(
                        r#"{{"access_token":"{token}","token_type":"Bearer","expires_in":{}}}"#,
                        TOKEN_LIFE.as_secs()
                    ),
                )
            }
            None => (
                "401 Unauthorized",
                r#"{"error":"invalid_client"}"#.to_owned(),
            ),
        },
        _ => ("404 Not Found", "{}".to_owned()),
    };
    let mut stream = stream;
    write!(
        stream,
        "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{answer}",
        answer.len()
    )?;
    stream.flush()
}

/// The client a client-credentials request authenticates as (HTTP Basic with the
/// form-encoded id and secret), if its grant type is right.
fn client_of(
    headers: &HashMap<String, String>,
    body: &[u8],
    clients: &HashMap<String, String>,
) -> Option<String> {
    let form = String::from_utf8_lossy(body);
    if !form
        .split('&')
        .any(|p| p == "grant_type=client_credentials")
    {
        return None;
    }
    let basic = headers.get("authorization")?.strip_prefix("Basic ")?;
    let decoded = String::from_utf8(STANDARD.decode(basic).ok()?).ok()?;
    let (id, secret) = decoded.split_once(':')?;
    (clients.get(id).map(String::as_str) == Some(secret)).then(|| id.to_owned())
}

/// One broker whose SASL_PLAINTEXT listener enables PLAIN and OAUTHBEARER (JWTs
/// checked against `idp`'s JWKS) and asks for re-authentication every [`REAUTH`].
///
/// Kafka 4.1.1's `OAuthBearerValidatorCallbackHandler` builds its default
/// `DefaultJwtValidator` without a key resolver, which then checks claims only
/// (`ClientJwtValidator`): `sasl.oauthbearer.jwt.validator.class=BrokerJwtValidator`
/// makes it fetch the JWKS and verify signatures (set per listener, it is ignored).
fn broker(idp: &IdentityProvider) -> KafkaCluster {
    let security = ClusterSecurity {
        listeners: vec![BrokerListener::SaslPlaintext],
        sasl_users: vec![alice()],
    };
    let listener = "listener.name.sasl_plaintext.oauthbearer";
    let properties = format!(
        "sasl.enabled.mechanisms=PLAIN,OAUTHBEARER\n\
         {listener}.sasl.server.callback.handler.class=org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler\n\
         {listener}.sasl.jaas.config=org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required ;\n\
         sasl.oauthbearer.jwt.validator.class=org.apache.kafka.common.security.oauthbearer.BrokerJwtValidator\n\
         sasl.oauthbearer.jwks.endpoint.url={jwks}\n\
         connections.max.reauth.ms={reauth}\n",
        jwks = idp.url("/jwks"),
        reauth = REAUTH.as_millis()
    );
    KafkaCluster::start_with_properties(kafka_version(), 1, &security, &properties)
        .unwrap_or_else(|e| panic!("starting the broker: {e:#}"))
}

fn rules() -> String {
    // Debug logs show the side connection's re-authentications.
    format!("{}\n[log]\nlevel = \"debug\"\n", storing_rules(&["zstd"]))
}

fn kpress_with_sasl(cluster: &KafkaCluster, sasl_lines: &[String]) -> KpressProxy {
    let mut upstream_keys = vec![
        "[upstream.sasl]".to_owned(),
        "mechanism = \"OAUTHBEARER\"".to_owned(),
    ];
    upstream_keys.extend(sasl_lines.iter().cloned());
    KpressProxy::start_with(KpressSetup {
        upstream_keys,
        ..KpressSetup::in_front_of(&cluster.sasl_addresses(), &cluster.node_ids(), &rules())
    })
    .unwrap_or_else(|e| panic!("starting kpress: {e:#}"))
}

fn toml_path(path: &Path) -> String {
    format!("{:?}", path.display().to_string())
}

fn records(tag: &str) -> Vec<Vec<u8>> {
    (0..300)
        .map(|i| {
            format!(r#"{{"n":{i},"tag":"{tag}","text":"a record that compresses well"}}"#)
                .into_bytes()
        })
        .collect()
}

/// Creates `topic` on the broker directly and returns its id, which kpress has never
/// seen.
fn topic_behind_kpress(cluster: &KafkaCluster, topic: &str) -> [u8; 16] {
    JavaClient::new(kafka_version())
        .create_producer_codec_topics(&cluster.bootstrap(), &[topic], 1)
        .unwrap_or_else(|e| panic!("creating {topic}: {e:#}"));
    topic_id(cluster, topic)
}

/// `topic`'s id, from a Metadata request sent straight to the broker.
fn topic_id(cluster: &KafkaCluster, topic: &str) -> [u8; 16] {
    let mut direct = SecureStream::connect(
        cluster.sasl_addresses()[0],
        &ClientSecurity::sasl_plaintext(&alice()),
        TIMEOUT,
    )
    .unwrap_or_else(|e| panic!("SASL/PLAIN to the broker: {e:#}"));
    struct Names(Vec<([u8; 16], String)>);
    impl kpress_protocol::ResponseObserver for Names {
        fn broker(&mut self, _: i32, host: &str, port: i32) -> (String, i32) {
            (host.to_owned(), port)
        }
        fn topic(&mut self, id: [u8; 16], name: &str) {
            self.0.push((id, name.to_owned()));
        }
    }
    let correlation_id = direct.next_correlation_id();
    let request = kpress_protocol::metadata_request(12, correlation_id, &[]).expect("Metadata");
    let body = direct.exchange(&request).expect("Metadata answered");
    let mut names = Names(Vec::new());
    kpress_protocol::rewrite_response(3, 12, &body[5..], &mut names).expect("parse Metadata");
    names
        .0
        .into_iter()
        .find(|(_, name)| name == topic)
        .map(|(id, _)| id)
        .expect("the broker names the topic")
}

/// A gzip Produce v13 by topic id through kpress's node 1; problems, if any.
fn produce_by_id_through(
    proxy: &KpressProxy,
    cluster: &KafkaCluster,
    topic: &str,
    id: [u8; 16],
) -> Vec<String> {
    let node = SocketAddr::from((
        [127, 0, 0, 1],
        proxy.node_port_base().expect("ports mode") + 1,
    ));
    let records = records(topic);
    let batch = gzip_batch(&records);
    let produced = SecureStream::connect(node, &ClientSecurity::sasl_plaintext(&alice()), TIMEOUT)
        .and_then(|mut stream| produce_by_id_on(&mut stream, id, 0, &batch, TIMEOUT));
    match produced {
        Ok(answer) if answer.error_code == 0 => match cluster.dump_partition_0(&[topic]) {
            // Stored as zstd: kpress named the topic and applied its rule.
            Ok(dump) => dump[0].problems_storing(topic, Compression::Zstd, &records),
            Err(e) => vec![format!("DumpLogSegments of {topic}: {e:#}")],
        },
        other => vec![format!("Produce v13 for {topic} through kpress: {other:?}")],
    }
}

/// A client's own OAUTHBEARER login, or re-authentication (KIP-368), on `stream`:
/// SaslHandshake then one SaslAuthenticate with `token`; the broker's session lifetime.
fn client_login(stream: &mut SecureStream, token: &str) -> anyhow::Result<Duration> {
    use kpress_protocol::sasl;
    const CLIENT: &str = "oauth-raw-client";
    // SaslHandshake v1 and SaslAuthenticate v1 answer with header v0: the correlation id.
    let id = stream.next_correlation_id();
    let body = stream.exchange(&sasl::handshake_request(
        id,
        CLIENT,
        sasl::Mechanism::OAuthBearer,
    )?)?;
    sasl::parse_handshake_response(&body[4..])?;
    let id = stream.next_correlation_id();
    let first = sasl::oauthbearer::initial_response(token, &[])?;
    let body = stream.exchange(&sasl::authenticate_request(id, CLIENT, &first)?)?;
    let answer = sasl::parse_authenticate_response(sasl::SASL_AUTHENTICATE_VERSION, &body[4..])?;
    anyhow::ensure!(
        answer.is_empty(),
        "token refused: {}",
        String::from_utf8_lossy(&answer)
    );
    let ms = sasl::session_lifetime_ms(sasl::SASL_AUTHENTICATE_VERSION, &body[4..])
        .ok_or_else(|| anyhow::anyhow!("the broker set no session lifetime"))?;
    Ok(Duration::from_millis(u64::try_from(ms)?))
}

/// A gzip batch of `records`.
fn gzip_batch(records: &[Vec<u8>]) -> Vec<u8> {
    BatchBuilder::codec(Codec::Gzip)
        .build_values(records)
        .expect("a gzip batch")
}

/// A gzip Produce v13 of `records` on `stream` (already logged in).
fn produce_on(stream: &mut SecureStream, id: [u8; 16], records: &[Vec<u8>]) -> anyhow::Result<()> {
    let batch = gzip_batch(records);
    let answer = produce_by_id_on(stream, id, 0, &batch, TIMEOUT)?;
    anyhow::ensure!(answer.error_code == 0, "Produce answered {answer:?}");
    Ok(())
}

fn counter(proxy: &KpressProxy, name: &str, labels: &[(&str, &str)]) -> f64 {
    proxy
        .counter(name, labels)
        .unwrap_or_else(|e| panic!("scraping {name}: {e:#}"))
}

fn sleep_until(at: Instant) {
    std::thread::sleep(at.saturating_duration_since(Instant::now()));
}

fn secrets_in_log(proxy: &KpressProxy, idp: &IdentityProvider) -> Vec<String> {
    let log = proxy.log();
    let mut found = Vec::new();
    if log.contains(KPRESS_SECRET) {
        found.push("kpress's client secret is in its log".to_owned());
    }
    for token in idp.tokens.lock().unwrap().iter() {
        // The signature part alone would be enough to replay nothing, but no part of a
        // token belongs in a log.
        if log.contains(token.rsplit('.').next().unwrap()) {
            found.push("a bearer token is in kpress's log".to_owned());
            break;
        }
    }
    found
}

#[test]
fn oauthbearer_logins_refresh_reauthenticate_and_pass_through() {
    let idp = IdentityProvider::start(&[("kpress", KPRESS_SECRET), ("java-client", JAVA_SECRET)]);
    // Kafka 4.x contacts only allowed OAuth URLs: the broker (JWKS) and the Java client
    // (token endpoint) are JVMs started by this process, and inherit this.
    let allowed = format!(
        "-Dorg.apache.kafka.sasl.oauthbearer.allowed.urls={},{}",
        idp.url("/jwks"),
        idp.url("/token")
    );
    // Set before any thread of this test binary starts a JVM.
    std::env::set_var("JAVA_TOOL_OPTIONS", &allowed);
    let cluster = broker(&idp);
    let dir = tempfile::tempdir().unwrap();
    let secret_file = dir.path().join("client-secret");
    std::fs::write(&secret_file, format!("{KPRESS_SECRET}\n")).unwrap();
    let proxy = kpress_with_sasl(
        &cluster,
        &[
            format!("token_endpoint_url = \"{}\"", idp.url("/token")),
            "client_id = \"kpress\"".to_owned(),
            format!("client_secret_file = {}", toml_path(&secret_file)),
            "scope = \"kafka\"".to_owned(),
        ],
    );
    let mut failures = Vec::new();
    let topics = [
        "zstd.oauth.first",
        "zstd.oauth.reauth",
        "zstd.oauth.refreshed",
    ];
    // A client logs in through kpress with its own OAUTHBEARER token and produces on
    // one connection throughout, re-authenticating once with a new token.
    let client_topic = "zstd.oauth.client-reauth";
    // One JVM creates them all: the schedule below counts from kpress's first token and
    // needs lookup 1 within a few seconds of it.
    JavaClient::new(kafka_version())
        .create_producer_codec_topics(
            &cluster.bootstrap(),
            &[topics[0], topics[1], topics[2], client_topic],
            1,
        )
        .unwrap_or_else(|e| panic!("creating the topics: {e:#}"));
    let ids: Vec<[u8; 16]> = topics.iter().map(|t| topic_id(&cluster, t)).collect();

    // kpress logged in at start (learning the brokers) with its first token. The
    // broker's session lifetime is the smaller of REAUTH and the token's remaining life;
    // kpress fetches a new token 80% into the `expires_in` it was given.
    let (token, token_ends) = idp
        .first_issued_to("kpress")
        .expect("kpress fetched a token at start");
    let token_stale = token + TOKEN_LIFE.mul_f64(0.8) + Duration::from_millis(100);
    let session = |from: Instant| REAUTH.min(token_ends.saturating_duration_since(from));
    let client_id = topic_id(&cluster, client_topic);
    let node = SocketAddr::from((
        [127, 0, 0, 1],
        proxy.node_port_base().expect("ports mode") + 1,
    ));
    let mut client = SecureStream::connect(node, &ClientSecurity::default(), TIMEOUT)
        .unwrap_or_else(|e| panic!("connecting to kpress: {e:#}"));
    let client_session = client_login(&mut client, &idp.token_for("raw-client"))
        .unwrap_or_else(|e| panic!("the client's OAUTHBEARER login through kpress: {e:#}"));
    let client_start = Instant::now();
    let client_records: Vec<Vec<Vec<u8>>> = ["a", "b", "c"]
        .iter()
        .map(|part| records(&format!("client-{part}")))
        .collect();
    let client_step = |stream: &mut SecureStream, part: usize, failures: &mut Vec<String>| {
        if let Err(e) = produce_on(stream, client_id, &client_records[part]) {
            failures.push(format!("the client's Produce {part} through kpress: {e:#}"));
        }
    };
    client_step(&mut client, 0, &mut failures);

    // Lookup 1: a new side connection, a new session.
    let first = Instant::now();
    failures.extend(produce_by_id_through(&proxy, &cluster, topics[0], ids[0]));
    // Lookup 2 at 90% of that session: re-authenticated in place, the token still fresh.
    let second = first + session(first).mul_f64(0.9);
    assert!(
        second + Duration::from_millis(500) < token_stale,
        "the schedule needs lookup 2 before the token's refresh time"
    );
    sleep_until(second);
    let second = Instant::now();
    failures.extend(produce_by_id_through(&proxy, &cluster, topics[1], ids[1]));
    // The client re-authenticates on its connection, through kpress.
    match client_login(&mut client, &idp.token_for("raw-client")) {
        Ok(_) => client_step(&mut client, 1, &mut failures),
        Err(e) => failures.push(format!(
            "the client's re-authentication through kpress: {e:#}"
        )),
    }
    // Lookup 3 once the token is stale and the shorter second session is due, before
    // it ends: re-authenticated in place with a token fetched anew.
    let due = (second + session(second).mul_f64(0.8)).max(token_stale);
    let ends = second + session(second);
    assert!(
        due + Duration::from_millis(500) < ends,
        "the schedule leaves no room for lookup 3"
    );
    sleep_until(due + (ends - due) / 2);
    failures.extend(produce_by_id_through(&proxy, &cluster, topics[2], ids[2]));
    // Past the client's first session: the broker would have closed the connection
    // had the re-authentication not reached it.
    if client_start.elapsed() <= client_session {
        failures.push(format!(
            "the client's last Produce came {:?} into a {client_session:?} session: it proves nothing",
            client_start.elapsed()
        ));
    }
    client_step(&mut client, 2, &mut failures);
    match cluster.dump_partition_0(&[client_topic]) {
        Ok(dump) => failures.extend(dump[0].problems_storing(
            client_topic,
            Compression::Zstd,
            &client_records.concat(),
        )),
        Err(e) => failures.push(format!("DumpLogSegments of {client_topic}: {e:#}")),
    }

    // At start, lookup 1, and two re-authentications.
    let ok = counter(
        &proxy,
        "kpress_side_authentications_total",
        &[("result", "ok")],
    );
    let failed = counter(
        &proxy,
        "kpress_side_authentications_total",
        &[("result", "failed")],
    );
    if ok != 4.0 || failed != 0.0 {
        failures.push(format!(
            "kpress's own logins: {ok} ok, {failed} failed (want 4 and 0)"
        ));
    }
    let reauthenticated = proxy
        .log()
        .matches("side connection re-authenticated")
        .count();
    if reauthenticated != 2 {
        failures.push(format!(
            "the side connection re-authenticated {reauthenticated} times in place (want 2)"
        ));
    }
    if idp.issued_to("kpress") != 2 {
        failures.push(format!(
            "{} tokens issued to kpress (want 2: one refresh)",
            idp.issued_to("kpress")
        ));
    }
    let unresolved = counter(&proxy, "kpress_unknown_topic_ids_total", &[]);
    if unresolved != 0.0 {
        failures.push(format!("{unresolved} topic ids left unresolved"));
    }

    // A Java client with its own client-credentials login, through kpress.
    let java = JavaClient::new(kafka_version());
    let java_topic = "zstd.oauth.java";
    java.create_producer_codec_topics(&cluster.bootstrap(), &[java_topic], 1)
        .unwrap_or_else(|e| panic!("creating {java_topic}: {e:#}"));
    let java_records = records("java");
    let file = write_records(&dir.path().join("java-records"), &java_records);
    let oauth_client = java_client_oauth(&idp);
    let produced = java.produce_file(
        &proxy.bootstrap(),
        java_topic,
        &file,
        &ProduceOptions {
            properties: oauth_client,
            ..ProduceOptions::default()
        },
    );
    match produced {
        Ok(n) if n == java_records.len() => {
            match java.read_back_problems(
                &cluster.bootstrap(),
                &[java_topic],
                &java_records,
                &ConsumeOptions::default(),
                "Java",
            ) {
                Ok(problems) => failures.extend(problems),
                Err(e) => failures.push(format!("reading {java_topic} back: {e:#}")),
            }
            match cluster.dump_partition_0(&[java_topic]) {
                Ok(dump) => failures.extend(dump[0].problems_storing(
                    java_topic,
                    Compression::Zstd,
                    &java_records,
                )),
                Err(e) => failures.push(format!("DumpLogSegments of {java_topic}: {e:#}")),
            }
        }
        other => failures.push(format!(
            "Java OAUTHBEARER producer through kpress: {other:?}"
        )),
    }
    if JWKS_FETCHES.load(Ordering::Relaxed) == 0 {
        failures.push("the broker never fetched the JWKS: it checked no signature".to_owned());
    }
    if idp.issued_to("java-client") == 0 {
        failures.push("the Java client never fetched a token".to_owned());
    }
    failures.extend(secrets_in_log(&proxy, &idp));

    // token_file: a second kpress logs in with the token in a file.
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, idp.token_for("kpress-file")).unwrap();
    let file_proxy = kpress_with_sasl(
        &cluster,
        &[format!("token_file = {}", toml_path(&token_file))],
    );
    let file_topic = "zstd.oauth.token-file";
    let file_id = topic_behind_kpress(&cluster, file_topic);
    failures.extend(produce_by_id_through(
        &file_proxy,
        &cluster,
        file_topic,
        file_id,
    ));
    let file_ok = counter(
        &file_proxy,
        "kpress_side_authentications_total",
        &[("result", "ok")],
    );
    if file_ok < 1.0 {
        failures.push(format!("token_file login: {file_ok} ok"));
    }
    failures.extend(secrets_in_log(&file_proxy, &idp));

    // Topic mode over the OAUTHBEARER login: a third kpress with no policy.
    let (tm_proxy, tm_failures) =
        topic_mode_over_oauthbearer(&cluster, &idp, &secret_file, dir.path());
    failures.extend(tm_failures);

    // A token the broker refuses (its signature altered): `kpress doctor` logs in anew
    // and reports the broker's JSON error, acknowledged as RFC 7628 asks, without the
    // token.
    let valid = idp.token_for("kpress-file");
    let (signed, signature) = valid.rsplit_once('.').expect("a JWT");
    let altered_signature: String = signature.chars().rev().collect();
    std::fs::write(&token_file, format!("{signed}.{altered_signature}")).unwrap();
    let config = file_proxy.config_file().expect("kpress's config file");
    let doctor = Command::new(kpress_binary())
        .args(["doctor", "--config"])
        .arg(&config)
        .output()
        .expect("kpress doctor runs");
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&doctor.stdout),
        String::from_utf8_lossy(&doctor.stderr)
    );
    if !said.contains("refused kpress's OAUTHBEARER token") || !said.contains("invalid_token") {
        failures.push(format!(
            "kpress doctor with a refused token did not report the broker's error:\n{said}"
        ));
    }
    if said.contains(&altered_signature) || said.contains(signed) {
        failures.push("kpress doctor printed the refused token".to_owned());
    }

    assert!(
        failures.is_empty(),
        "{}\n--- kpress (client credentials) ---\n{}\n--- kpress (token file) ---\n{}\n--- kpress (topic mode) ---\n{}\n{}",
        failures.join("\n"),
        proxy.log(),
        file_proxy.log(),
        tm_proxy.log(),
        cluster.describe_logs()
    );
}

/// kpress with no policy (topic mode) logging in with client credentials; a zstd topic
/// created behind its back. A Produce v13 by id makes kpress name the topic and look
/// its config up over its OAUTHBEARER login; once the lookup has answered, a second
/// Produce v13 and a Java client logging in with its own client credentials are
/// rewritten into zstd by kpress. Returns the proxy (for its log) and the problems.
fn topic_mode_over_oauthbearer(
    cluster: &KafkaCluster,
    idp: &IdentityProvider,
    secret_file: &Path,
    dir: &Path,
) -> (KpressProxy, Vec<String>) {
    let mut failures = Vec::new();
    let proxy = KpressProxy::start_with(KpressSetup {
        upstream_keys: vec![
            "topic_config_refresh_ms = 1000".to_owned(),
            "[upstream.sasl]".to_owned(),
            "mechanism = \"OAUTHBEARER\"".to_owned(),
            format!("token_endpoint_url = \"{}\"", idp.url("/token")),
            "client_id = \"kpress\"".to_owned(),
            format!("client_secret_file = {}", toml_path(secret_file)),
            "scope = \"kafka\"".to_owned(),
        ],
        ..KpressSetup::in_front_of(&cluster.sasl_addresses(), &cluster.node_ids(), "")
    })
    .unwrap_or_else(|e| panic!("starting kpress in topic mode: {e:#}"));
    let java = JavaClient::new(kafka_version());
    let topic = "oauth.topic-mode";
    java.create_topic(&cluster.bootstrap(), topic, 1, &["compression.type=zstd"])
        .unwrap_or_else(|e| panic!("creating {topic}: {e:#}"));
    let id = topic_id(cluster, topic);
    let node = SocketAddr::from((
        [127, 0, 0, 1],
        proxy.node_port_base().expect("ports mode") + 1,
    ));
    let (first, second) = (records("topic-mode-first"), records("topic-mode-second"));
    let produce = |records: &[Vec<u8>]| {
        SecureStream::connect(node, &ClientSecurity::sasl_plaintext(&alice()), TIMEOUT)
            .and_then(|mut stream| {
                produce_by_id_on(&mut stream, id, 0, &gzip_batch(records), TIMEOUT)
            })
            .map_err(|e| format!("{e:#}"))
            .and_then(|answer| {
                (answer.error_code == 0)
                    .then_some(())
                    .ok_or_else(|| format!("{answer:?}"))
            })
    };
    if let Err(e) = produce(&first) {
        failures.push(format!(
            "topic mode: the first Produce v13 through kpress: {e}"
        ));
    }
    let deadline = Instant::now() + TIMEOUT;
    while counter(
        &proxy,
        "kpress_topic_config_lookups_total",
        &[("result", "ok")],
    ) < 1.0
        && Instant::now() < deadline
    {
        std::thread::sleep(Duration::from_millis(100));
    }
    let rewritten = |proxy: &KpressProxy| {
        counter(
            proxy,
            "kpress_batches_rewritten_total",
            &[("topic", topic), ("to", "zstd")],
        )
    };
    let before = rewritten(&proxy);
    if let Err(e) = produce(&second) {
        failures.push(format!(
            "topic mode: the second Produce v13 through kpress: {e}"
        ));
    }
    if rewritten(&proxy) != before + 1.0 {
        failures.push(format!(
            "topic mode: kpress did not rewrite the Produce v13 after the lookup ({before} then {})",
            rewritten(&proxy)
        ));
    }
    let java_records = records("topic-mode-java");
    let file = write_records(&dir.join("topic-mode-java"), &java_records);
    let before = rewritten(&proxy);
    let produced = java.produce_file(
        &proxy.bootstrap(),
        topic,
        &file,
        &ProduceOptions {
            compression: Compression::Lz4,
            properties: java_client_oauth(idp),
            ..ProduceOptions::default()
        },
    );
    if let Err(e) = produced {
        failures.push(format!(
            "topic mode: Java OAUTHBEARER producer through kpress: {e:#}"
        ));
    }
    let expected: Vec<Vec<u8>> = [first, second, java_records].concat();
    match cluster.dump_partition_0(&[topic]) {
        Ok(dump) => {
            let java_batches = dump[0].batches.len().saturating_sub(2) as f64;
            if java_batches == 0.0 || rewritten(&proxy) - before != java_batches {
                failures.push(format!(
                    "topic mode: kpress rewrote {} of the Java client's {java_batches} batches",
                    rewritten(&proxy) - before
                ));
            }
            failures.extend(dump[0].problems_storing(topic, Compression::Zstd, &expected));
        }
        Err(e) => failures.push(format!("DumpLogSegments of {topic}: {e:#}")),
    }
    for (name, labels, want) in [
        ("kpress_unknown_topic_ids_total", vec![], 0.0),
        (
            "kpress_side_authentications_total",
            vec![("result", "failed")],
            0.0,
        ),
        (
            "kpress_topic_config_lookups_total",
            vec![("result", "denied")],
            0.0,
        ),
    ] {
        let got = counter(&proxy, name, &labels);
        if got != want {
            failures.push(format!(
                "topic mode: {name}{labels:?} is {got}, want {want}"
            ));
        }
    }
    failures.extend(secrets_in_log(&proxy, idp));
    (proxy, failures)
}

/// A Java client's own OAUTHBEARER login: client credentials of "java-client" at
/// `idp`'s token endpoint.
fn java_client_oauth(idp: &IdentityProvider) -> Vec<String> {
    vec![
        "security.protocol=SASL_PLAINTEXT".to_owned(),
        "sasl.mechanism=OAUTHBEARER".to_owned(),
        "sasl.login.callback.handler.class=org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginCallbackHandler".to_owned(),
        format!("sasl.oauthbearer.token.endpoint.url={}", idp.url("/token")),
        format!(
            "sasl.jaas.config=org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required clientId=\"java-client\" clientSecret=\"{JAVA_SECRET}\" scope=\"kafka\" ;"
        ),
    ]
}
