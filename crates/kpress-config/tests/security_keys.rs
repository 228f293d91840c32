//! The keys of TLS, mTLS, SASL and single-port SNI mode: valid forms and defaults, every
//! invalid value with its place and allowed range, and the files `load` checks.

use std::path::{Path, PathBuf};

use kpress_config::{
    load, parse, BearerTokenSource, ClientAuth, Config, ConfigError, HostPattern, ListenerTls,
    NodeRouting, PasswordSource, SaslMechanism, TlsVersion, UpstreamSasl, UpstreamTls,
};

mod common;

use common::{one_problem, ports, problem_texts, TempDir, HEAD};

/// A valid sni-mode file; lines 1-9.
const SNI: &str = r#"[listener]
bind = "0.0.0.0:9093"
mode = "sni"
advertised_host_pattern = "broker-{node}.kafka.example.com"
[listener.tls]
cert = "certs/kpress.pem"
key = "certs/kpress.key"
[upstream]
bootstrap_servers = ["kafka-1:9092"]
"#;

/// A valid ports-mode file with `[upstream]` last, so tables can be appended to it.
const PORTS_TLS: &str = r#"[listener]
bind = "127.0.0.1:19092"
node_port_base = 19100
[upstream]
bootstrap_servers = ["kafka-1:9093"]
"#;

const DNS_ALLOWED: &str = "letters, digits, '-' and '.'; labels of 1..63 characters, not starting \
     or ending with '-'; at most 253 characters; the last label not all digits";

fn config(text: &str) -> Config {
    parse(text, "t.toml").unwrap_or_else(|e| panic!("{e}\nin:\n{text}"))
}

fn sni(config: &Config) -> (&HostPattern, Option<&str>, u16) {
    match &config.listener.routing {
        NodeRouting::Sni {
            advertised_host_pattern,
            bootstrap_host,
            advertised_port,
        } => (
            advertised_host_pattern,
            bootstrap_host.as_deref(),
            *advertised_port,
        ),
        other => panic!("not sni mode: {other:?}"),
    }
}

fn listener_tls(config: &Config) -> &ListenerTls {
    config.listener.tls.as_ref().expect("[listener.tls]")
}

/// `PORTS_TLS` with `[upstream.tls]` holding `body`.
fn with_upstream_tls(body: &str) -> String {
    format!("{PORTS_TLS}[upstream.tls]\n{body}")
}

/// `PORTS_TLS` with `[upstream.sasl]` holding `body`; its first key is on line 7.
fn with_sasl(body: &str) -> String {
    format!("{PORTS_TLS}[upstream.sasl]\n{body}")
}

#[test]
fn sni_mode_names_nodes_by_pattern_and_advertises_bind_s_port() {
    let c = config(SNI);
    let (pattern, bootstrap, port) = sni(&c);
    assert_eq!(pattern.to_string(), "broker-{node}.kafka.example.com");
    assert_eq!(pattern.host(2).unwrap(), "broker-2.kafka.example.com");
    assert_eq!((bootstrap, port), (None, 9093));
    let tls = listener_tls(&c);
    assert_eq!(
        (tls.cert.as_path(), tls.key.as_path()),
        (Path::new("certs/kpress.pem"), Path::new("certs/kpress.key"))
    );
    let text = SNI.replace(
        "mode = \"sni\"\n",
        "mode = \"sni\"\nbootstrap_host = \"bootstrap.kafka.example.com\"\nadvertised_port = 443\n",
    );
    let c = config(&text);
    let (_, bootstrap, port) = sni(&c);
    assert_eq!(
        (bootstrap, port),
        (Some("bootstrap.kafka.example.com"), 443)
    );
}

#[test]
fn ports_mode_is_the_default_and_can_be_named() {
    assert_eq!(ports(&config(HEAD)), ("127.0.0.1", 19100));
    let text = HEAD.replace("[listener]\n", "[listener]\nmode = \"ports\"\n");
    assert_eq!(ports(&config(&text)), ("127.0.0.1", 19100));
    assert_eq!(
        one_problem(&HEAD.replace("[listener]\n", "[listener]\nmode = \"SNI\"\n")),
        "t.toml:2:8: listener.mode = \"SNI\": unknown listener mode: names are case-sensitive, \
         write \"sni\" (allowed: \"ports\", \"sni\")"
    );
    assert_eq!(
        one_problem(&HEAD.replace("[listener]\n", "[listener]\nmode = \"port\"\n")),
        "t.toml:2:8: listener.mode = \"port\": unknown listener mode (allowed: \"ports\", \"sni\")"
    );
    assert_eq!(
        one_problem(&HEAD.replace("[listener]\n", "[listener]\nmode = 1\n")),
        "t.toml:2:8: listener.mode = 1: must be a string, not integer (allowed: \"ports\", \"sni\")"
    );
}

#[test]
fn sni_mode_needs_tls_and_a_pattern() {
    let no_tls = SNI.replace(
        "[listener.tls]\ncert = \"certs/kpress.pem\"\nkey = \"certs/kpress.key\"\n",
        "",
    );
    assert_eq!(
        one_problem(&no_tls),
        "t.toml:3:8: listener.mode = \"sni\": needs [listener.tls]: nodes are told apart by the \
         server name (SNI) clients send in the TLS handshake, so sni mode exists only with TLS"
    );
    let no_pattern = SNI.replace(
        "advertised_host_pattern = \"broker-{node}.kafka.example.com\"\n",
        "",
    );
    assert_eq!(
        one_problem(&no_pattern),
        "t.toml:3:8: listener.advertised_host_pattern: missing: sni mode names each broker node \
         by it, e.g. \"broker-{node}.kafka.example.com\""
    );
}

#[test]
fn keys_of_one_mode_are_refused_in_the_other() {
    let text = SNI.replace(
        "mode = \"sni\"\n",
        "mode = \"sni\"\nadvertised_host = \"kpress.example.com\"\nnode_port_base = 19100\n",
    );
    assert_eq!(
        problem_texts(&text),
        [
            "t.toml:4:1: listener.advertised_host = \"kpress.example.com\": does not apply in sni \
             mode, which names each node by listener.advertised_host_pattern (remove it, or set \
             listener.mode = \"ports\")",
            "t.toml:5:1: listener.node_port_base = 19100: does not apply in sni mode, which \
             serves every node on listener.bind's port (remove it, or set listener.mode = \"ports\")",
        ]
    );
    let sni_keys = "advertised_host_pattern = \"b-{node}.k\"\nbootstrap_host = \"b.k\"\nadvertised_port = 9092\n";
    for mode in ["", "mode = \"ports\"\n"] {
        let text = HEAD.replace("[listener]\n", &format!("[listener]\n{mode}{sni_keys}"));
        let first = 2 + usize::from(!mode.is_empty());
        let why = "applies only in sni mode (listener.mode = \"sni\"); in ports mode, the \
                   default, each node is served on a port of its own";
        assert_eq!(
            problem_texts(&text),
            [
                format!(
                    "t.toml:{first}:1: listener.advertised_host_pattern = \"b-{{node}}.k\": {why}"
                ),
                format!(
                    "t.toml:{}:1: listener.bootstrap_host = \"b.k\": {why}",
                    first + 1
                ),
                format!(
                    "t.toml:{}:1: listener.advertised_port = 9092: {why}",
                    first + 2
                ),
            ]
        );
    }
}

#[test]
fn advertised_host_pattern_values() {
    for good in [
        "{node}.kafka",
        "kafka-{node}.eu-1.example.com",
        "B{node}X.Example.COM",
    ] {
        let text = SNI.replace("broker-{node}.kafka.example.com", good);
        assert_eq!(sni(&config(&text)).0.to_string(), good);
    }
    let allowed = format!("a DNS name with {{node}} once, where the node id goes: {DNS_ALLOWED}");
    let long_label = format!("{}{{node}}", "b".repeat(54));
    for (bad, why) in [
        ("broker.kafka.example.com", "has no {node}: each broker node needs a name of its own, with its node id where {node} stands".to_owned()),
        ("{node}.{node}.kafka", "has {node} more than once".to_owned()),
        ("broker-{id}-{node}.kafka", "'{' cannot be in a DNS name".to_owned()),
        ("broker_{node}.kafka", "'_' cannot be in a DNS name".to_owned()),
        ("broker-{node}..kafka", "has an empty label (a leading, trailing or doubled '.')".to_owned()),
        ("broker-{node}.kafka.", "has an empty label (a leading, trailing or doubled '.')".to_owned()),
        ("-{node}.kafka", "label \"-{node}\" starts or ends with '-'".to_owned()),
        ("kafka.{node}", "ends in an all-digit label, as an IP address does: clients send no server name (SNI) for an IP address".to_owned()),
        (&format!("{long_label}.kafka"), format!("label \"{long_label}\" is 64 characters long with a 10-digit node id (at most 63)")),
        (&format!("{}{{node}}.k", "a.".repeat(121)), "is 254 characters long with a 10-digit node id (at most 253)".to_owned()),
        ("", "is empty".to_owned()),
    ] {
        let text = SNI.replace("broker-{node}.kafka.example.com", bad);
        let shown: String = format!("\"{bad}\"").chars().take(60).collect();
        let ellipsis = if bad.len() + 2 > 60 { "…" } else { "" };
        assert_eq!(
            one_problem(&text),
            format!("t.toml:4:27: listener.advertised_host_pattern = {shown}{ellipsis}: {why} (allowed: {allowed})"),
            "{bad}"
        );
    }
}

#[test]
fn bootstrap_host_is_a_dns_name_of_its_own() {
    let with = |host: &str| {
        SNI.replace(
            "mode = \"sni\"\n",
            &format!("mode = \"sni\"\nbootstrap_host = \"{host}\"\n"),
        )
    };
    for good in [
        "bootstrap.kafka.example.com",
        "broker-01.kafka.example.com",
        "broker-x.kafka.example.com",
    ] {
        assert_eq!(sni(&config(&with(good))).1, Some(good));
    }
    assert_eq!(
        one_problem(&with("broker-7.kafka.example.com")),
        "t.toml:4:18: listener.bootstrap_host = \"broker-7.kafka.example.com\": is the name \
         listener.advertised_host_pattern gives broker node 7: the bootstrap needs a name of its own"
    );
    assert_eq!(
        one_problem(&with("BROKER-0.Kafka.Example.com")),
        "t.toml:4:18: listener.bootstrap_host = \"BROKER-0.Kafka.Example.com\": is the name \
         listener.advertised_host_pattern gives broker node 0: the bootstrap needs a name of its own"
    );
    for (bad, why) in [
        ("10.0.0.1", "ends in an all-digit label, as an IP address does: clients send no server name (SNI) for an IP address"),
        ("boot strap", "' ' cannot be in a DNS name"),
        ("", "is empty"),
    ] {
        assert_eq!(
            one_problem(&with(bad)),
            format!("t.toml:4:18: listener.bootstrap_host = \"{bad}\": {why} (allowed: {DNS_ALLOWED})")
        );
    }
}

#[test]
fn advertised_port_bounds_and_default() {
    let with = |port: &str| {
        SNI.replace(
            "mode = \"sni\"\n",
            &format!("mode = \"sni\"\nadvertised_port = {port}\n"),
        )
    };
    for good in [1, 65535] {
        assert_eq!(sni(&config(&with(&good.to_string()))).2, good);
    }
    for bad in ["0", "65536", "-1"] {
        assert_eq!(
            one_problem(&with(bad)),
            format!(
                "t.toml:4:19: listener.advertised_port = {bad}: out of range (allowed: 1..65535)"
            )
        );
    }
    assert_eq!(
        one_problem(&with("\"9092\"")),
        "t.toml:4:19: listener.advertised_port = \"9092\": must be an integer, not string (allowed: 1..65535)"
    );
    let any_port = SNI.replace("0.0.0.0:9093", "127.0.0.1:0");
    assert_eq!(
        one_problem(&any_port),
        "t.toml:2:8: listener.advertised_port: missing: listener.bind's port is 0 (any free \
         port), so clients need a port to be sent to (allowed: 1..65535)"
    );
    let any_port_named = any_port.replace(
        "mode = \"sni\"\n",
        "mode = \"sni\"\nadvertised_port = 9093\n",
    );
    assert_eq!(sni(&config(&any_port_named)).2, 9093);
}

#[test]
fn listener_tls_values_and_defaults() {
    let base = HEAD.replace(
        "[upstream]",
        "[listener.tls]\ncert = \"c.pem\"\nkey = \"k.pem\"\n[upstream]",
    );
    let tls = listener_tls(&config(&base)).clone();
    assert_eq!(
        tls,
        ListenerTls {
            cert: "c.pem".into(),
            key: "k.pem".into(),
            client_ca: None,
            client_auth: ClientAuth::None,
            min_version: TlsVersion::Tls12,
        }
    );
    let with =
        |lines: &str| base.replace("key = \"k.pem\"\n", &format!("key = \"k.pem\"\n{lines}"));
    let c = config(&with("client_ca = \"ca.pem\"\nmin_version = \"1.3\"\n"));
    let tls = listener_tls(&c);
    assert_eq!(tls.client_ca.as_deref(), Some(Path::new("ca.pem")));
    assert_eq!(
        tls.client_auth,
        ClientAuth::Required,
        "the default with client_ca"
    );
    assert_eq!(tls.min_version, TlsVersion::Tls13);
    for (written, auth) in [
        ("required", ClientAuth::Required),
        ("requested", ClientAuth::Requested),
    ] {
        let c = config(&with(&format!(
            "client_ca = \"ca.pem\"\nclient_auth = \"{written}\"\n"
        )));
        assert_eq!(listener_tls(&c).client_auth, auth);
        assert_eq!(auth.name(), written);
    }
    // Lines: 5 [listener.tls], 6 cert, 7 key, 8 and on: the added lines.
    assert_eq!(
        one_problem(&with("client_auth = \"required\"\n")),
        "t.toml:8:15: listener.tls.client_auth = \"required\": needs listener.tls.client_ca: \
         client certificates are checked against that CA"
    );
    assert_eq!(
        one_problem(&with(
            "client_ca = \"ca.pem\"\nclient_auth = \"optional\"\n"
        )),
        "t.toml:9:15: listener.tls.client_auth = \"optional\": unknown client_auth \
         (allowed: \"required\", \"requested\")"
    );
    assert_eq!(
        one_problem(&with("min_version = \"1.1\"\n")),
        "t.toml:8:15: listener.tls.min_version = \"1.1\": unknown TLS version (allowed: \"1.2\", \"1.3\")"
    );
    assert_eq!(
        one_problem(&with("min_version = 1.3\n")),
        "t.toml:8:15: listener.tls.min_version = 1.3: must be a string, not float (allowed: \"1.2\", \"1.3\")"
    );
    assert_eq!(
        one_problem(&with("client_ca = \"\"\n")),
        "t.toml:8:13: listener.tls.client_ca = \"\": must not be empty or hold control characters"
    );
    assert_eq!(
        one_problem(&with("certt = \"x\"\n")),
        "t.toml:8:1: listener.tls.certt: unknown key in [listener.tls] (allowed: cert, key, \
         client_ca, client_auth, min_version); did you mean cert?"
    );
    assert_eq!(
        problem_texts(&base.replace("cert = \"c.pem\"\nkey = \"k.pem\"\n", "")),
        [
            "t.toml:5:1: listener.tls.cert: missing key in [listener.tls]",
            "t.toml:5:1: listener.tls.key: missing key in [listener.tls]",
        ]
    );
    assert_eq!(
        one_problem(&HEAD.replace("[upstream]", "tls = true\n[upstream]")),
        "t.toml:5:7: listener.tls = true: must be a table, not boolean"
    );
    // The dotted spelling is the same table.
    let dotted = HEAD.replace(
        "[upstream]",
        "tls.cert = \"c.pem\"\ntls.key = \"k.pem\"\n[upstream]",
    );
    assert_eq!(listener_tls(&config(&dotted)).cert, PathBuf::from("c.pem"));
}

#[test]
fn upstream_tls_values_and_defaults() {
    let c = config(&with_upstream_tls(""));
    assert_eq!(
        c.upstream.tls,
        Some(UpstreamTls {
            ca: None,
            client_cert: None,
            server_name: None,
            verify: true,
        }),
        "an empty [upstream.tls] is TLS with the system's roots"
    );
    let c = config(&with_upstream_tls(
        "ca = \"ca.pem\"\ncert = \"kpress.pem\"\nkey = \"kpress.key\"\nserver_name = \"kafka.internal\"\nverify = false\n",
    ));
    assert_eq!(
        c.upstream.tls,
        Some(UpstreamTls {
            ca: Some("ca.pem".into()),
            client_cert: Some(("kpress.pem".into(), "kpress.key".into())),
            server_name: Some("kafka.internal".into()),
            verify: false,
        })
    );
    for ip in ["10.1.2.3", "::1", "fe80::1"] {
        let c = config(&with_upstream_tls(&format!("server_name = \"{ip}\"\n")));
        assert_eq!(c.upstream.tls.unwrap().server_name.as_deref(), Some(ip));
    }
    // Lines: 6 [upstream.tls], 7 and on: the body.
    assert_eq!(
        one_problem(&with_upstream_tls("cert = \"kpress.pem\"\n")),
        "t.toml:7:1: upstream.tls.cert: needs upstream.tls.key too: a client certificate for \
         brokers (mTLS) takes the certificate and its private key"
    );
    assert_eq!(
        one_problem(&with_upstream_tls(
            "ca = \"ca.pem\"\nkey = \"kpress.key\"\n"
        )),
        "t.toml:8:1: upstream.tls.key: needs upstream.tls.cert too: a client certificate for \
         brokers (mTLS) takes the certificate and its private key"
    );
    assert_eq!(
        one_problem(&with_upstream_tls("server_name = \"kafka_1\"\n")),
        format!(
            "t.toml:7:15: upstream.tls.server_name = \"kafka_1\": not an IP address, and '_' \
                 cannot be in a DNS name (allowed: an IP address, or a DNS name: {DNS_ALLOWED})"
        )
    );
    assert_eq!(
        one_problem(&with_upstream_tls("server_name = \"10.0.0.300\"\n")),
        format!(
            "t.toml:7:15: upstream.tls.server_name = \"10.0.0.300\": not an IP address, and \
                 ends in an all-digit label, as an IP address does: clients send no server name \
                 (SNI) for an IP address (allowed: an IP address, or a DNS name: {DNS_ALLOWED})"
        )
    );
    assert_eq!(
        one_problem(&with_upstream_tls("verify = \"no\"\n")),
        "t.toml:7:10: upstream.tls.verify = \"no\": must be true or false, not string (allowed: true, false)"
    );
    assert_eq!(
        one_problem(&with_upstream_tls("verfy = false\n")),
        "t.toml:7:1: upstream.tls.verfy: unknown key in [upstream.tls] (allowed: ca, cert, key, \
         server_name, verify); did you mean verify?"
    );
    assert_eq!(
        one_problem(&format!("{PORTS_TLS}tls = \"on\"\n")),
        "t.toml:6:7: upstream.tls = \"on\": must be a table, not string"
    );
}

#[test]
fn upstream_sasl_mechanisms_and_password_sources() {
    for mechanism in SaslMechanism::WITH_PASSWORD {
        let c = config(&with_sasl(&format!(
            "mechanism = \"{}\"\nusername = \"kpress\"\npassword_file = \"/run/secrets/kpress\"\n",
            mechanism.name()
        )));
        assert_eq!(
            c.upstream.sasl,
            Some(UpstreamSasl {
                mechanism,
                username: "kpress".into(),
                password: PasswordSource::File("/run/secrets/kpress".into()),
            })
        );
    }
    assert_eq!(
        SaslMechanism::ALL.map(SaslMechanism::name),
        ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"]
    );
    let c = config(&with_sasl(
        "mechanism = \"PLAIN\"\nusername = \"kpress\"\npassword_env = \"KPRESS_SASL_PASSWORD\"\n",
    ));
    assert_eq!(
        c.upstream.sasl.unwrap().password,
        PasswordSource::Env("KPRESS_SASL_PASSWORD".into())
    );
    let ok = "username = \"kpress\"\npassword_env = \"P\"\n";
    // Lines: 6 [upstream.sasl], 7 and on: the body.
    assert_eq!(
        one_problem(&with_sasl(&format!("mechanism = \"scram-sha-512\"\n{ok}"))),
        "t.toml:7:13: upstream.sasl.mechanism = \"scram-sha-512\": unknown SASL mechanism: names \
         are case-sensitive, write \"SCRAM-SHA-512\" (allowed: \"PLAIN\", \"SCRAM-SHA-256\", \"SCRAM-SHA-512\", \"OAUTHBEARER\")"
    );
    assert_eq!(
        one_problem(&with_sasl(&format!("mechanism = \"GSSAPI\"\n{ok}"))),
        "t.toml:7:13: upstream.sasl.mechanism = \"GSSAPI\": unknown SASL mechanism \
         (allowed: \"PLAIN\", \"SCRAM-SHA-256\", \"SCRAM-SHA-512\", \"OAUTHBEARER\")"
    );
    assert_eq!(
        problem_texts(&with_sasl("password_env = \"P\"\n")),
        [
            "t.toml:6:1: upstream.sasl.mechanism: missing key in [upstream.sasl]",
            "t.toml:6:1: upstream.sasl.username: missing key in [upstream.sasl]",
        ]
    );
    assert_eq!(
        one_problem(&with_sasl(
            "mechanism = \"PLAIN\"\nusername = \"\"\npassword_env = \"P\"\n"
        )),
        "t.toml:8:12: upstream.sasl.username = \"\": must not be empty or hold control characters"
    );
    for bad in ["", "1PASSWORD", "KPRESS-PASSWORD", "A=B"] {
        assert_eq!(
            one_problem(&with_sasl(&format!(
                "mechanism = \"PLAIN\"\nusername = \"u\"\npassword_env = \"{bad}\"\n"
            ))),
            format!(
                "t.toml:9:16: upstream.sasl.password_env = \"{bad}\": not an environment \
                     variable name (allowed: letters, digits and '_', not starting with a digit)"
            )
        );
    }
    assert_eq!(
        one_problem(&with_sasl(
            "mechanism = \"PLAIN\"\nusername = \"u\"\npassword_env = \"P\"\npassword_file = \"p\"\n"
        )),
        "t.toml:10:1: upstream.sasl.password_file: set only one of password_file and \
         password_env: which one would be the password?"
    );
    assert_eq!(
        one_problem(&with_sasl("mechanism = \"PLAIN\"\nusername = \"u\"\n")),
        "t.toml:6:1: upstream.sasl.password_file: missing key in [upstream.sasl]: kpress reads \
         its password from a file (password_file) or an environment variable (password_env)"
    );
    let p = problem_texts(&with_sasl(
        "mechanism = \"PLAIN\"\nusername = \"u\"\npasword_env = \"P\"\n",
    ));
    assert_eq!(p.len(), 2, "{p:#?}");
    assert!(p[0].starts_with("t.toml:6:1: upstream.sasl.password_file: missing key"));
    assert_eq!(
        p[1],
        "t.toml:9:1: upstream.sasl.pasword_env: unknown key in [upstream.sasl] (allowed: \
         mechanism, username, password_file, password_env, token_endpoint_url, client_id, \
         client_secret_file, client_secret_env, scope, token_file, token_provider, region); \
         did you mean password_env?"
    );
}

#[test]
fn a_password_in_the_policy_is_refused_with_why_and_never_shown() {
    let secret = "hunter2-s3cret";
    for extra in ["", "password_env = \"P\"\n"] {
        let text = with_sasl(&format!(
            "mechanism = \"PLAIN\"\nusername = \"u\"\npassword = \"{secret}\"\n{extra}"
        ));
        let p = one_problem(&text);
        assert_eq!(
            p,
            "t.toml:9:1: upstream.sasl.password: a password is not taken from the policy file: \
             whoever can read the policy could read it, and it would end up in backups and in \
             git; put it in a file named by password_file, or an environment variable named by \
             password_env"
        );
        assert!(!p.contains(secret));
    }
}

#[test]
fn rewrite_before_auth_defaults_to_false_on_a_declared_sasl_cluster() {
    let sasl = "mechanism = \"SCRAM-SHA-256\"\nusername = \"u\"\npassword_env = \"P\"\n";
    assert!(config(PORTS_TLS).listener.rewrite_before_auth);
    assert!(!config(&with_sasl(sasl)).listener.rewrite_before_auth);
    // Whatever the order of the sections.
    let sasl_first = format!("[upstream.sasl]\n{sasl}{}", HEAD);
    assert!(!config(&sasl_first).listener.rewrite_before_auth);
    for explicit in [true, false] {
        let line = format!("[listener]\nrewrite_before_auth = {explicit}\n");
        let plain = PORTS_TLS.replace("[listener]\n", &line);
        assert_eq!(config(&plain).listener.rewrite_before_auth, explicit);
        let declared = with_sasl(sasl).replace("[listener]\n", &line);
        assert_eq!(config(&declared).listener.rewrite_before_auth, explicit);
    }
    assert_eq!(
        one_problem(&PORTS_TLS.replace("[listener]\n", "[listener]\nrewrite_before_auth = 0\n")),
        "t.toml:2:23: listener.rewrite_before_auth = 0: must be true or false, not integer (allowed: true, false)"
    );
}

#[test]
fn every_problem_of_the_new_tables_is_reported_at_once() {
    let text = r#"[listener]
bind = "0.0.0.0:9093"
mode = "sni"
advertised_host_pattern = "broker.kafka"
node_port_base = 1
[listener.tls]
cert = "c.pem"
client_auth = "required"
[upstream]
bootstrap_servers = ["k:9092"]
[upstream.tls]
key = "k.pem"
[upstream.sasl]
mechanism = "PLAIN"
username = "u"
password = "x"
"#;
    let p: Vec<String> = problem_texts(text)
        .into_iter()
        .map(|p| p.split(": ").take(2).collect::<Vec<_>>().join(": "))
        .collect();
    assert_eq!(
        p,
        [
            "t.toml:4:27: listener.advertised_host_pattern = \"broker.kafka\"",
            "t.toml:5:1: listener.node_port_base = 1",
            "t.toml:6:1: listener.tls.key",
            "t.toml:8:15: listener.tls.client_auth = \"required\"",
            "t.toml:12:1: upstream.tls.key",
            "t.toml:16:1: upstream.sasl.password",
        ]
    );
}

#[test]
fn parse_keeps_paths_as_written_and_load_resolves_them_beside_the_file() {
    let dir = TempDir::new("resolve");
    let text = format!(
        "{}[listener.tls]\ncert = \"certs/kpress.pem\"\nkey = \"{}\"\nclient_ca = \"../ca.pem\"\n\
         [upstream.tls]\nca = \"certs/kafka-ca.pem\"\ncert = \"certs/client.pem\"\nkey = \"certs/client.key\"\n\
         [upstream.sasl]\nmechanism = \"SCRAM-SHA-512\"\nusername = \"kpress\"\npassword_file = \"secrets/password\"\n",
        HEAD.replace("[upstream]\nbootstrap_servers = [\"127.0.0.1:9092\"]\n", ""),
        dir.path().join("abs/kpress.key").display(),
    )
    .replace("[upstream.tls]", "[upstream]\nbootstrap_servers = [\"k:9093\"]\n[upstream.tls]");
    let policy = dir.write("policy/kpress.toml", &text);
    for file in [
        "policy/certs/kpress.pem",
        "abs/kpress.key",
        "ca.pem",
        "policy/certs/kafka-ca.pem",
        "policy/certs/client.pem",
        "policy/certs/client.key",
        "policy/secrets/password",
    ] {
        dir.write(file, "x\n");
    }
    let parsed = parse(&text, "kpress.toml").unwrap();
    let tls = listener_tls(&parsed);
    assert_eq!(tls.cert, PathBuf::from("certs/kpress.pem"));
    assert_eq!(tls.client_ca.as_deref(), Some(Path::new("../ca.pem")));

    let loaded = load(&policy).unwrap_or_else(|e| panic!("{e}"));
    let beside = |p: &str| dir.path().join("policy").join(p);
    let tls = listener_tls(&loaded);
    assert_eq!(tls.cert, beside("certs/kpress.pem"));
    assert_eq!(
        tls.key,
        dir.path().join("abs/kpress.key"),
        "absolute: as written"
    );
    assert_eq!(tls.client_ca, Some(beside("../ca.pem")));
    let upstream_tls = loaded.upstream.tls.unwrap();
    assert_eq!(upstream_tls.ca, Some(beside("certs/kafka-ca.pem")));
    assert_eq!(
        upstream_tls.client_cert,
        Some((beside("certs/client.pem"), beside("certs/client.key")))
    );
    assert_eq!(
        loaded.upstream.sasl.unwrap().password,
        PasswordSource::File(beside("secrets/password"))
    );
}

#[test]
fn load_reports_named_files_that_are_missing_or_not_files_at_their_keys() {
    let dir = TempDir::new("missing");
    let text = format!(
        "{PORTS_TLS}[upstream.tls]\nca = \"ca.pem\"\ncert = \"certs\"\nkey = \"k.pem\"\n\
         [upstream.sasl]\nmechanism = \"PLAIN\"\nusername = \"u\"\npassword_file = \"/nonexistent/kpress-password\"\n"
    )
    .replace(
        "[upstream]",
        "[listener.tls]\ncert = \"c.pem\"\nkey = \"k.pem\"\n[upstream]",
    );
    let policy = dir.write("kpress.toml", &text);
    dir.write("k.pem", "x\n");
    std::fs::create_dir(dir.path().join("certs")).unwrap();
    let err = load(&policy).unwrap_err();
    let ConfigError::Invalid(problems) = &err else {
        panic!("{err}");
    };
    let file = policy.display();
    let shown: Vec<String> = problems.iter().map(ToString::to_string).collect();
    let d = dir.path().display();
    assert_eq!(
        shown,
        [
            format!("{file}:5:8: listener.tls.cert = \"c.pem\": file not found: {d}/c.pem"),
            format!("{file}:10:6: upstream.tls.ca = \"ca.pem\": file not found: {d}/ca.pem"),
            format!(
                "{file}:11:8: upstream.tls.cert = \"certs\": {d}/certs is a directory, not a file"
            ),
            format!(
                "{file}:16:17: upstream.sasl.password_file = \"/nonexistent/kpress-password\": \
                 file not found: /nonexistent/kpress-password"
            ),
        ]
    );
    // The same text, parsed, names no file.
    parse(&text, "t.toml").unwrap();
}

#[test]
fn a_lone_mtls_key_is_reported_with_its_missing_file_and_the_other_keys_problems() {
    let dir = TempDir::new("lone-key");
    let policy = dir.write(
        "kpress.toml",
        &with_upstream_tls("key = \"k.pem\"\nserver_name = \"a..b\"\nverify = 1\n"),
    );
    let file = policy.display();
    let d = dir.path().display();
    let shown: Vec<String> = load(&policy)
        .unwrap_err()
        .problems()
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(
        shown,
        [
            format!(
                "{file}:7:1: upstream.tls.key: needs upstream.tls.cert too: a client certificate \
                 for brokers (mTLS) takes the certificate and its private key"
            ),
            format!("{file}:7:7: upstream.tls.key = \"k.pem\": file not found: {d}/k.pem"),
            format!(
                "{file}:8:15: upstream.tls.server_name = \"a..b\": not an IP address, and has an \
                 empty label (a leading, trailing or doubled '.') (allowed: an IP address, or a \
                 DNS name: {DNS_ALLOWED})"
            ),
            format!(
                "{file}:9:10: upstream.tls.verify = 1: must be true or false, not integer \
                 (allowed: true, false)"
            ),
        ]
    );
}

const BEARER: &str = "mechanism = \"OAUTHBEARER\"\n";

#[test]
fn oauthbearer_token_sources() {
    let c = config(&with_sasl(&format!(
        "{BEARER}token_endpoint_url = \"https://idp.example.com/oauth2/token\"\n\
         client_id = \"kpress\"\nclient_secret_file = \"/run/secrets/idp\"\nscope = \"kafka\"\n"
    )));
    assert_eq!(c.upstream.sasl, None);
    assert_eq!(
        c.upstream.oauthbearer,
        Some(BearerTokenSource::ClientCredentials {
            token_endpoint_url: "https://idp.example.com/oauth2/token".into(),
            client_id: "kpress".into(),
            client_secret: PasswordSource::File("/run/secrets/idp".into()),
            scope: Some("kafka".into()),
        })
    );
    let c = config(&with_sasl(&format!(
        "{BEARER}token_endpoint_url = \"http://127.0.0.1:8080/token\"\n\
         client_id = \"kpress\"\nclient_secret_env = \"IDP_SECRET\"\n"
    )));
    assert!(matches!(
        c.upstream.oauthbearer,
        Some(BearerTokenSource::ClientCredentials { client_secret: PasswordSource::Env(ref e), scope: None, .. }) if e == "IDP_SECRET"
    ));
    let c = config(&with_sasl(&format!(
        "{BEARER}token_file = \"/var/run/secrets/tokens/kafka\"\n"
    )));
    assert_eq!(
        c.upstream.oauthbearer,
        Some(BearerTokenSource::TokenFile(
            "/var/run/secrets/tokens/kafka".into()
        ))
    );
    let c = config(&with_sasl(&format!(
        "{BEARER}token_provider = \"aws_msk_iam\"\nregion = \"eu-central-1\"\n"
    )));
    assert_eq!(
        c.upstream.oauthbearer,
        Some(BearerTokenSource::AwsMskIam {
            region: "eu-central-1".into()
        })
    );
    assert!(kpress_config::accepted_keys().contains(&"upstream.sasl.token_endpoint_url".to_owned()));
}

#[test]
fn oauthbearer_problems_name_the_key_and_what_is_allowed() {
    // Lines: 6 [upstream.sasl], 7 mechanism, 8 and on: the rest.
    assert_eq!(
        one_problem(&with_sasl(BEARER)),
        "t.toml:6:1: upstream.sasl.token_endpoint_url: missing key in [upstream.sasl]: \
         OAUTHBEARER takes its tokens from a token endpoint (token_endpoint_url, client_id, \
         client_secret_file or client_secret_env), a file (token_file) or a provider \
         (token_provider)"
    );
    assert_eq!(
        one_problem(&with_sasl(&format!(
            "{BEARER}token_file = \"t\"\ntoken_provider = \"aws_msk_iam\"\nregion = \"us-east-1\"\n"
        ))),
        "t.toml:9:1: upstream.sasl.token_provider: set only one of token_endpoint_url, \
         token_file, token_provider: which one would give the tokens?"
    );
    assert_eq!(
        one_problem(&with_sasl(&format!(
            "{BEARER}token_provider = \"aws_msk_iam\"\n"
        ))),
        "t.toml:6:1: upstream.sasl.region: missing key in [upstream.sasl]"
    );
    for bad in ["us_east_1", "US-EAST-1", "useast1", "us-east-", "-east-1"] {
        assert_eq!(
            one_problem(&with_sasl(&format!(
                "{BEARER}token_provider = \"aws_msk_iam\"\nregion = \"{bad}\"\n"
            ))),
            format!(
                "t.toml:9:10: upstream.sasl.region = \"{bad}\": not an AWS region name \
                 (allowed: an AWS region such as \"us-east-1\" or \"eu-central-1\")"
            )
        );
    }
    assert_eq!(
        one_problem(&with_sasl(&format!(
            "{BEARER}token_provider = \"aws_iam\"\nregion = \"us-east-1\"\n"
        ))),
        "t.toml:8:18: upstream.sasl.token_provider = \"aws_iam\": unknown token provider \
         (allowed: \"aws_msk_iam\")"
    );
    for bad in [
        "ftp://idp/token",
        "https://",
        "idp.example.com/token",
        "https://u:p@idp/t",
    ] {
        assert_eq!(
            one_problem(&with_sasl(&format!(
                "{BEARER}token_endpoint_url = \"{bad}\"\nclient_id = \"k\"\nclient_secret_env = \"S\"\n"
            ))),
            format!(
                "t.toml:8:22: upstream.sasl.token_endpoint_url = \"{bad}\": not an http(s) URL \
                 with a host (allowed: http://host[:port]/path or https://host[:port]/path, no \
                 user info)"
            )
        );
    }
    assert_eq!(
        one_problem(&with_sasl(&format!(
            "{BEARER}token_endpoint_url = \"https://idp/t\"\nclient_id = \"k\"\n"
        ))),
        "t.toml:6:1: upstream.sasl.client_secret_file: missing key in [upstream.sasl]: kpress \
         reads the client secret from a file (client_secret_file) or an environment variable \
         (client_secret_env)"
    );
    assert_eq!(
        one_problem(&with_sasl(&format!(
            "{BEARER}token_file = \"t\"\nregion = \"us-east-1\"\n"
        ))),
        "t.toml:9:1: upstream.sasl.region: only with upstream.sasl.token_provider"
    );
    assert_eq!(
        one_problem(&with_sasl(&format!(
            "{BEARER}token_file = \"t\"\nusername = \"kpress\"\n"
        ))),
        "t.toml:9:1: upstream.sasl.username: only for PLAIN and SCRAM mechanisms, not OAUTHBEARER"
    );
    assert_eq!(
        one_problem(&with_sasl(
            "mechanism = \"PLAIN\"\nusername = \"u\"\npassword_env = \"P\"\ntoken_file = \"t\"\n"
        )),
        "t.toml:10:1: upstream.sasl.token_file: only for mechanism = \"OAUTHBEARER\", not PLAIN"
    );
    // A secret written into the policy is refused without echoing it.
    let text = one_problem(&with_sasl(&format!(
        "{BEARER}token_endpoint_url = \"https://idp/t\"\nclient_id = \"k\"\nclient_secret = \"hunter2\"\nclient_secret_env = \"S\"\n"
    )));
    assert!(
        text.contains("upstream.sasl.client_secret:") && !text.contains("hunter2"),
        "{text}"
    );
}
