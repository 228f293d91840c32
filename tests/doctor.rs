//! `kpress doctor --format json` against a real Kafka 4.1.1 broker whose topics are
//! configured to trigger each problem: a gzip topic under a zstd policy (the broker
//! would recompress kpress's batches), a topic whose `max.message.bytes` is below the
//! policy's `max_batch_bytes`, a topic with a zstd level of its own (a note), and clean
//! topics. A policy that suits every topic exits 0; a dead bootstrap server is
//! reported beside a live one; over SASL_SSL, kpress's own TLS and SCRAM login are each
//! reported ok, and a wrong password as a failed SASL step. With auto rules, the
//! autopilot's fleet topic is checked without being created: shared where kpress may
//! use it; on a broker with the StandardAuthorizer, each replica would decide alone
//! where kpress may not describe it, create it, or write it.

use std::path::Path;
use std::process::Command;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use kpress_tests::cluster::{BrokerListener, ClusterSecurity};
use kpress_tests::java::client_command;
use kpress_tests::java_client::JavaClient;
use kpress_tests::kpress::kpress_binary;
use kpress_tests::ports::free_port;
use kpress_tests::process::run_ok;
use kpress_tests::tls::{SaslMechanism, SaslUser};
use kpress_tests::{kafka_version, KafkaCluster};
use serde_json::Value;

/// kpress's own login on the SASL_SSL listener.
fn kpress_user() -> SaslUser {
    SaslUser::new(SaslMechanism::ScramSha512, "kpress", "kpress-secret")
}

/// One broker with a SASL_SSL listener beside PLAINTEXT, and this file's topics.
fn cluster() -> &'static KafkaCluster {
    static CLUSTER: OnceLock<KafkaCluster> = OnceLock::new();
    CLUSTER.get_or_init(|| {
        let started = Instant::now();
        let security = ClusterSecurity {
            listeners: vec![BrokerListener::SaslSsl],
            sasl_users: vec![kpress_user()],
        };
        let cluster = KafkaCluster::start_with(kafka_version(), 1, &security)
            .unwrap_or_else(|e| panic!("starting Kafka: {e:#}"));
        let java = JavaClient::new(kafka_version());
        let bootstrap = cluster.bootstrap();
        for (topic, configs) in [
            ("doc-gzip", &["compression.type=gzip"][..]),
            (
                "doc-small",
                &["compression.type=producer", "max.message.bytes=100000"][..],
            ),
            (
                "doc-zstd9",
                &["compression.type=zstd", "compression.zstd.level=9"][..],
            ),
            ("doc-clean", &["compression.type=producer"][..]),
        ] {
            java.create_topic(&bootstrap, topic, 1, configs)
                .unwrap_or_else(|e| panic!("creating {topic}: {e:#}"));
        }
        eprintln!("broker and topics up in {:.1?}", started.elapsed());
        cluster
    })
}

/// A zstd policy with Kafka's default batch limit: doc-gzip is recompressed by the
/// broker, doc-small accepts less than kpress may write.
const ZSTD_POLICY: &str = "[defaults]\ncompression.type = \"zstd\"\n";

/// A policy every topic suits: gzip where the topic says gzip, and batches no larger
/// than the smallest topic limit.
const FITTING_POLICY: &str = "[limits]\nmax_batch_bytes = 100000\n\
     [defaults]\ncompression.type = \"zstd\"\n\
     [[topics]]\nmatch = \"doc-gzip\"\ncompression.type = \"gzip\"\n";

/// Writes a policy file with `upstream` sections and `rules` into `dir`.
fn policy_file(dir: &Path, servers: &[String], upstream_extra: &str, rules: &str) -> String {
    let servers: Vec<String> = servers.iter().map(|s| format!("\"{s}\"")).collect();
    let text = format!(
        "[listener]\nbind = \"127.0.0.1:{}\"\n[upstream]\nbootstrap_servers = [{}]\n\
         {upstream_extra}{rules}",
        free_port(),
        servers.join(", ")
    );
    let path = dir.join("kpress.toml");
    std::fs::write(&path, text).unwrap();
    path.display().to_string()
}

/// Runs `kpress doctor --format json`; its exit code and document.
fn doctor(config: &str) -> (i32, Value) {
    let output = Command::new(kpress_binary())
        .args(["doctor", "--config", config, "--format", "json"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let doc: Value = serde_json::from_str(&stdout).unwrap_or_else(|e| {
        panic!(
            "doctor printed no JSON document ({e}):\n{stdout}\nstderr:\n{}",
            String::from_utf8_lossy(&output.stderr)
        )
    });
    (output.status.code().unwrap_or(-1), doc)
}

fn findings<'d>(doc: &'d Value, kind: &str) -> Vec<&'d Value> {
    doc["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["kind"] == kind)
        .collect()
}

fn subjects(doc: &Value, kind: &str) -> Vec<String> {
    findings(doc, kind)
        .iter()
        .map(|f| f["subject"].as_str().unwrap().to_owned())
        .collect()
}

fn topic<'d>(doc: &'d Value, name: &str) -> &'d Value {
    doc["topics"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == name)
        .unwrap_or_else(|| panic!("no topic {name} in {doc:#}"))
}

fn stage(status: &str) -> Value {
    serde_json::json!({ "status": status })
}

#[test]
fn each_problem_topic_is_named_and_the_exit_code_is_1() {
    let cluster = cluster();
    let dir = tempfile::tempdir().unwrap();
    let config = policy_file(dir.path(), &[cluster.bootstrap()], "", ZSTD_POLICY);
    let (code, doc) = doctor(&config);
    assert_eq!(code, 1, "{doc:#}");
    assert_eq!(doc["ok"], false);
    assert_eq!(subjects(&doc, "recompressed_by_broker"), ["doc-gzip"]);
    let recompressed = findings(&doc, "recompressed_by_broker")[0];
    assert_eq!(recompressed["severity"], "problem");
    assert!(
        recompressed["message"]
            .as_str()
            .unwrap()
            .contains("kpress writes zstd but the topic's compression.type=gzip"),
        "{recompressed}"
    );
    assert_eq!(subjects(&doc, "exceeds_max_message_bytes"), ["doc-small"]);
    assert!(findings(&doc, "exceeds_max_message_bytes")[0]["message"]
        .as_str()
        .unwrap()
        .contains("up to 1048588 bytes"));
    assert_eq!(doc["problems"], 2, "{doc:#}");
    // The topic's own level is a note: the broker keeps same-codec batches.
    assert_eq!(subjects(&doc, "level_differs"), ["doc-zstd9"]);
    assert_eq!(findings(&doc, "level_differs")[0]["severity"], "info");

    let gzip = topic(&doc, "doc-gzip");
    assert_eq!(gzip["policy_compression"], "zstd");
    assert_eq!(
        gzip["compression_type"],
        serde_json::json!({ "value": "gzip", "source": "topic" })
    );
    assert_eq!(gzip["max_message_bytes"]["source"], "default");
    let small = topic(&doc, "doc-small");
    assert_eq!(small["max_message_bytes"]["value"], "100000");
    assert_eq!(small["largest_write_bytes"], 1048588);
    assert_eq!(topic(&doc, "doc-zstd9")["levels"]["zstd"], "9");
    assert_eq!(
        topic(&doc, "doc-clean")["compression_type"]["value"],
        "producer"
    );

    // The broker, its version and reachability; the host's gzip providers.
    let brokers = doc["brokers"].as_array().unwrap();
    assert_eq!(brokers.len(), 1, "{doc:#}");
    assert_eq!(brokers[0]["reachable"], true);
    assert_eq!(brokers[0]["tcp"], stage("ok"));
    assert_eq!(brokers[0]["tls"], stage("not_configured"));
    assert_eq!(
        brokers[0]["address"],
        cluster.node_addresses()[0].to_string()
    );
    if kafka_version().starts_with("4.1") {
        assert_eq!(
            brokers[0]["kafka_version"],
            "at least Kafka 4.1 (Produce up to v13)"
        );
    }
    let providers = doc["gzip_providers"].as_array().unwrap();
    assert!(
        providers
            .iter()
            .any(|p| p["provider"] == "zlib" && p["available"] == true),
        "{providers:?}"
    );
    assert!(providers.iter().any(|p| p["provider"] == "qat"));
}

#[test]
fn a_policy_every_topic_suits_exits_0() {
    let cluster = cluster();
    let dir = tempfile::tempdir().unwrap();
    let config = policy_file(dir.path(), &[cluster.bootstrap()], "", FITTING_POLICY);
    let (code, doc) = doctor(&config);
    assert_eq!(code, 0, "{doc:#}");
    assert_eq!(doc["ok"], true);
    assert_eq!(doc["problems"], 0);
    assert_eq!(topic(&doc, "doc-gzip")["policy_compression"], "gzip");
    assert_eq!(topic(&doc, "doc-gzip")["rule"], 1);
    assert_eq!(topic(&doc, "doc-small")["largest_write_bytes"], 100000);
    // Notes do not fail it.
    assert_eq!(subjects(&doc, "level_differs"), ["doc-zstd9"]);
}

#[test]
fn a_dead_bootstrap_server_is_reported_beside_a_live_one() {
    let cluster = cluster();
    let dead = format!("127.0.0.1:{}", free_port());
    let dir = tempfile::tempdir().unwrap();
    let config = policy_file(
        dir.path(),
        &[dead.clone(), cluster.bootstrap()],
        "",
        FITTING_POLICY,
    );
    let (code, doc) = doctor(&config);
    assert_eq!(code, 1, "{doc:#}");
    assert_eq!(
        subjects(&doc, "bootstrap_unreachable"),
        std::slice::from_ref(&dead)
    );
    let servers = doc["bootstrap_servers"].as_array().unwrap();
    assert_eq!(servers[0]["address"], dead);
    assert_eq!(servers[0]["tcp"]["status"], "failed");
    assert!(
        servers[0]["tcp"]["error"]
            .as_str()
            .unwrap()
            .contains("refused"),
        "{servers:?}"
    );
    assert_eq!(servers[0]["tls"], stage("not_tried"));
    assert_eq!(servers[1]["reachable"], true);
    // The live one was used: the topics were read.
    assert_eq!(topic(&doc, "doc-gzip")["policy_compression"], "gzip");
    assert_eq!(doc["problems"], 1, "{doc:#}");

    // Only dead servers: nothing else can be checked.
    let config = policy_file(dir.path(), &[dead], "", FITTING_POLICY);
    let (code, doc) = doctor(&config);
    assert_eq!(code, 1);
    assert_eq!(subjects(&doc, "cluster_unread"), ["cluster"]);
    assert_eq!(doc["topics"], serde_json::json!([]));
}

#[test]
fn over_sasl_ssl_each_step_of_kpress_own_login_is_checked() {
    let cluster = cluster();
    let dir = tempfile::tempdir().unwrap();
    let password = dir.path().join("password");
    let ca = cluster.pki().ca_cert().display().to_string();
    let upstream = |password_text: &str| {
        std::fs::write(&password, password_text).unwrap();
        format!(
            "[upstream.tls]\nca = \"{ca}\"\n[upstream.sasl]\nmechanism = \"SCRAM-SHA-512\"\n\
             username = \"kpress\"\npassword_file = \"{}\"\n",
            password.display()
        )
    };
    let servers = [cluster.listener_bootstrap(BrokerListener::SaslSsl)];
    let config = policy_file(
        dir.path(),
        &servers,
        &upstream(&kpress_user().password),
        FITTING_POLICY,
    );
    let (code, doc) = doctor(&config);
    assert_eq!(code, 0, "{doc:#}");
    let bootstrap = &doc["bootstrap_servers"][0];
    for step in ["tcp", "tls", "sasl"] {
        assert_eq!(bootstrap[step], stage("ok"), "{step}: {doc:#}");
    }
    // The broker is advertised on the listener kpress asked through.
    let broker = &doc["brokers"][0];
    assert_eq!(
        broker["address"],
        cluster.sasl_ssl_addresses()[0].to_string()
    );
    assert_eq!(broker["sasl"], stage("ok"));
    assert_eq!(topic(&doc, "doc-gzip")["compression_type"]["value"], "gzip");

    let config = policy_file(dir.path(), &servers, &upstream("wrong"), FITTING_POLICY);
    let (code, doc) = doctor(&config);
    assert_eq!(code, 1, "{doc:#}");
    let bootstrap = &doc["bootstrap_servers"][0];
    assert_eq!(bootstrap["tls"], stage("ok"));
    assert_eq!(bootstrap["sasl"]["status"], "failed", "{doc:#}");
    assert!(
        bootstrap["sasl"]["error"]
            .as_str()
            .unwrap()
            .contains("[upstream.sasl]"),
        "{bootstrap}"
    );
    assert_eq!(subjects(&doc, "cluster_unread"), ["cluster"]);
}

#[test]
fn with_auto_rules_the_fleet_topic_is_checked_without_being_created() {
    let cluster = cluster();
    let dir = tempfile::tempdir().unwrap();
    let auto = |topic: &str, share: bool| {
        format!(
            "[defaults]\ncompression.type = \"auto\"\n\
             [autopilot]\ntopic = \"{topic}\"\nshare = {share}\n"
        )
    };
    let message = |doc: &Value, kind: &str| -> String {
        let found = findings(doc, kind);
        assert_eq!(found.len(), 1, "{kind} in {doc:#}");
        found[0]["message"].as_str().unwrap().to_owned()
    };
    // Missing: a CreateTopics that only validates says kpress may create it, twice,
    // since nothing was created.
    let config = policy_file(
        dir.path(),
        &[cluster.bootstrap()],
        "",
        &auto("doc-fleet", true),
    );
    for _ in 0..2 {
        let (_, doc) = doctor(&config);
        let text = message(&doc, "autopilot_shared");
        assert!(
            text.contains("does not exist yet and kpress may create it"),
            "{text}"
        );
    }
    // Present: the broker's authorized operations (no authorizer: all of them).
    JavaClient::new(kafka_version())
        .create_topic(
            &cluster.bootstrap(),
            "doc-fleet-made",
            1,
            &["cleanup.policy=compact"],
        )
        .unwrap();
    let config = policy_file(
        dir.path(),
        &[cluster.bootstrap()],
        "",
        &auto("doc-fleet-made", true),
    );
    let (_, doc) = doctor(&config);
    let text = message(&doc, "autopilot_shared");
    assert!(text.contains("may describe, read and write it"), "{text}");
    // Sharing off: each replica decides alone, a note.
    let config = policy_file(
        dir.path(),
        &[cluster.bootstrap()],
        "",
        &auto("doc-fleet", false),
    );
    let (_, doc) = doctor(&config);
    assert!(message(&doc, "autopilot_alone").contains("share = false"));
    assert_eq!(findings(&doc, "autopilot_alone")[0]["severity"], "info");
    // No auto rule: nothing about the autopilot.
    let config = policy_file(dir.path(), &[cluster.bootstrap()], "", FITTING_POLICY);
    let (_, doc) = doctor(&config);
    assert!(doc["findings"]
        .as_array()
        .unwrap()
        .iter()
        .all(|f| !f["kind"].as_str().unwrap().starts_with("autopilot")));
}

/// Kafka's `kafka-acls --add` against `cluster`'s PLAINTEXT listener (a super user).
fn add_acl(cluster: &KafkaCluster, args: &[&str]) {
    // The tool moved from core to tools in 4.0.
    let class = if cluster.version().starts_with('3') {
        "kafka.admin.AclCommand"
    } else {
        "org.apache.kafka.tools.AclCommand"
    };
    let mut cmd = client_command(cluster.version(), &[]);
    cmd.arg(class)
        .args([
            "--bootstrap-server",
            &cluster.bootstrap(),
            "--add",
            "--force",
        ])
        .args(args);
    run_ok(&mut cmd, Duration::from_secs(120))
        .unwrap_or_else(|e| panic!("kafka-acls {args:?}: {e:#}"));
}

#[test]
fn without_acls_for_the_fleet_topic_each_replica_would_decide_alone() {
    // The StandardAuthorizer; kpress logs in with SASL/PLAIN and may describe the
    // topics prefixed "a." (their configs too), read "a.read-only", nothing else.
    let kpress = SaslUser::new(SaslMechanism::Plain, "kpress", "kpress-secret");
    let security = ClusterSecurity {
        listeners: vec![BrokerListener::SaslPlaintext],
        sasl_users: vec![kpress.clone()],
    };
    let properties =
        "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer\n\
         super.users=User:ANONYMOUS\n";
    let cluster = KafkaCluster::start_with_properties(kafka_version(), 1, &security, properties)
        .unwrap_or_else(|e| panic!("starting Kafka with ACLs: {e:#}"));
    let kpress_may = |operations: &[&str], pattern: &[&str]| {
        let mut args = vec!["--allow-principal", "User:kpress"];
        for operation in operations {
            args.extend(["--operation", operation]);
        }
        args.extend(pattern);
        add_acl(&cluster, &args);
    };
    // Three JVM tools, independent of each other: at once.
    std::thread::scope(|scope| {
        scope.spawn(|| {
            JavaClient::new(kafka_version())
                .create_topic(
                    &cluster.bootstrap(),
                    "a.read-only",
                    1,
                    &["cleanup.policy=compact"],
                )
                .unwrap()
        });
        scope.spawn(|| {
            kpress_may(
                &["Describe", "DescribeConfigs"],
                &["--resource-pattern-type", "prefixed", "--topic", "a."],
            )
        });
        scope.spawn(|| kpress_may(&["Read"], &["--topic", "a.read-only"]));
    });

    let dir = tempfile::tempdir().unwrap();
    let password = dir.path().join("password");
    std::fs::write(&password, &kpress.password).unwrap();
    let upstream = format!(
        "[upstream.sasl]\nmechanism = \"PLAIN\"\nusername = \"kpress\"\npassword_file = \"{}\"\n",
        password.display()
    );
    let sasl = cluster.sasl_addresses()[0].to_string();
    let alone = |fleet_topic: &str| -> (i32, String) {
        let rules = format!(
            "[defaults]\ncompression.type = \"auto\"\n[autopilot]\ntopic = \"{fleet_topic}\"\n"
        );
        let config = policy_file(dir.path(), std::slice::from_ref(&sasl), &upstream, &rules);
        let (code, doc) = doctor(&config);
        let found = findings(&doc, "autopilot_alone");
        assert_eq!(found.len(), 1, "{doc:#}");
        assert_eq!(found[0]["severity"], "problem");
        let message = found[0]["message"].as_str().unwrap().to_owned();
        assert!(
            message.contains("each replica would decide alone"),
            "{message}"
        );
        (code, message)
    };
    // Not even DESCRIBE on the default fleet topic.
    let (code, message) = alone("_kpress_autopilot");
    assert_eq!(code, 1);
    assert!(
        message.contains("may not describe _kpress_autopilot"),
        "{message}"
    );
    // DESCRIBE (the prefix) on a missing topic, but no CREATE.
    let (_, message) = alone("a.fleet");
    assert!(message.contains("may not create it"), "{message}");
    // Present, readable, not writable: the broker's authorized operations say so.
    let (_, message) = alone("a.read-only");
    assert!(message.contains("may not WRITE a.read-only"), "{message}");
}
