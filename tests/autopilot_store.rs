//! The fleet store against real brokers: kpress's own side connections create the
//! compacted topic, publish and read back records, a store opened later reads the
//! whole history (a replica that restarts), a leadership move is followed, and a
//! principal the authorizer refuses gets `Denied`, never a transient error.
//!
//! One two-node cluster with a SASL/PLAIN listener and the StandardAuthorizer serves
//! the tests on the current broker: its PLAINTEXT listener's ANONYMOUS principal is a
//! super user. The older broker gets a plain node of its own.

use std::sync::OnceLock;
use std::time::Duration;

use kpress_proxy::{
    ClusterConnector, FleetStore, LimitSettings, ListenerSettings, NodeRouting, ProduceSettings,
    ProxySettings, SaslLogin, SaslMechanism as Mechanism, StoreError, UpstreamSettings,
};
use kpress_tests::cluster::{BrokerListener, ClusterSecurity};
use kpress_tests::java::client_command;
use kpress_tests::node_faults::{move_leader, partition_leader};
use kpress_tests::process::run_ok;
use kpress_tests::tls::{SaslMechanism, SaslUser};
use kpress_tests::{kafka_old_version, kafka_version, KafkaCluster};

type Records = Vec<(Vec<u8>, Vec<u8>)>;

/// A principal with no ACLs but those a test grants it.
fn fleet_user() -> SaslUser {
    SaslUser::new(SaslMechanism::Plain, "fleet", "fleet-secret")
}

fn cluster() -> &'static KafkaCluster {
    static CLUSTER: OnceLock<KafkaCluster> = OnceLock::new();
    CLUSTER.get_or_init(|| {
        let security = ClusterSecurity {
            listeners: vec![BrokerListener::SaslPlaintext],
            sasl_users: vec![fleet_user()],
        };
        let properties =
            "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer\n\
             super.users=User:ANONYMOUS\n";
        KafkaCluster::start_with_properties(kafka_version(), 2, &security, properties)
            .unwrap_or_else(|e| panic!("starting Kafka with ACLs: {e:#}"))
    })
}

/// Side connections to `bootstrap`, logging in as `login` when given.
fn connector(bootstrap: String, login: Option<SaslLogin>) -> ClusterConnector {
    let settings = ProxySettings {
        listener: ListenerSettings {
            bind: "127.0.0.1:0".parse().unwrap(),
            routing: NodeRouting::Ports {
                advertised_host: "127.0.0.1".into(),
                node_port_base: 20000,
            },
            tls: None,
            reuse_port: false,
        },
        upstream: UpstreamSettings {
            bootstrap_servers: vec![bootstrap],
            tls: None,
            login,
        },
        limits: LimitSettings {
            max_frame_bytes: 8 << 20,
            max_inflight_bytes: 64 << 20,
            max_connection_inflight_bytes: 8 << 20,
            max_connections: 10,
            frame_timeout: Duration::from_secs(30),
            idle_timeout: Duration::from_secs(600),
            max_topic_labels: 10,
        },
        produce: ProduceSettings {
            rewrite_before_auth: true,
            max_request_decompressed_bytes: 64 << 20,
            max_rewrite_wait: Duration::from_millis(500),
        },
        shutdown_grace: Duration::from_secs(1),
    };
    ClusterConnector::new(&settings).expect("a connector")
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// Everything `store` has not read yet, reading until it is caught up.
async fn read_all(store: &mut FleetStore) -> Records {
    let mut records = Vec::new();
    loop {
        records.extend(store.read_new().await.expect("a read"));
        if store.caught_up() {
            return records;
        }
    }
}

fn numbered(from: usize, to: usize) -> Records {
    (from..to)
        .map(|i| {
            (
                format!("figures/replica-{}/topic-{i}", i % 2).into_bytes(),
                format!("{{\"v\":1,\"n\":{i}}}").repeat(20).into_bytes(),
            )
        })
        .collect()
}

/// `cleanup.policy` of `topic`, as DescribeConfigs gives it.
async fn cleanup_policy(connector: &ClusterConnector, address: &str, topic: &str) -> String {
    let mut client = connector.connect(address).await.expect("a connection");
    let version = client
        .api_versions()
        .await
        .unwrap()
        .describe_configs()
        .expect("DescribeConfigs");
    let configs = client
        .describe_topic_configs(version, &[topic], &["cleanup.policy"])
        .await
        .expect("the topic's configs");
    configs[0]
        .value("cleanup.policy")
        .unwrap_or_default()
        .to_owned()
}

/// A store opened on each node as its only bootstrap server (so at least one of them
/// reaches a leader that is not its bootstrap) creates the compacted topic once, reads
/// back what either wrote in order, and one opened afterwards reads the whole history;
/// after the leadership moves, both write and read on.
#[test]
fn stores_share_a_compacted_topic_and_a_new_one_reads_its_history() {
    let cluster = cluster();
    let nodes = cluster.node_addresses();
    let topic = "_kpress_autopilot";
    runtime().block_on(async {
        let first_connector = connector(nodes[0].to_string(), None);
        let mut first = FleetStore::open_through(&first_connector, topic, 2)
            .await
            .unwrap_or_else(|e| panic!("opening on node 0: {e}"));
        let policy = cleanup_policy(&first_connector, &nodes[0].to_string(), topic).await;
        assert_eq!(policy, "compact");
        assert!(
            read_all(&mut first).await.is_empty(),
            "a new topic is empty"
        );

        let second_connector = connector(nodes[1].to_string(), None);
        let mut second = FleetStore::open_through(&second_connector, topic, 2)
            .await
            .unwrap_or_else(|e| panic!("opening on node 1 (the topic exists): {e}"));
        assert_eq!(first.leader(), second.leader(), "one leader");

        first.publish(&numbered(0, 3)).await.expect("publish");
        second.publish(&numbered(3, 5)).await.expect("publish");
        first.publish(&[]).await.expect("nothing to publish");
        let written = numbered(0, 5);
        assert_eq!(read_all(&mut first).await, written);
        assert_eq!(read_all(&mut second).await, written);
        assert!(first.read_new().await.unwrap().is_empty(), "nothing new");

        // A replica that starts later reads the whole compacted history from offset 0.
        let mut restarted = FleetStore::open_through(&second_connector, topic, 2)
            .await
            .expect("opening again");
        assert_eq!(read_all(&mut restarted).await, written);

        // The leadership moves: writes and reads follow it.
        let leader = partition_leader(cluster, topic, 0, Duration::from_secs(30)).unwrap();
        assert_eq!(first.leader(), Some(leader as i32));
        let other = cluster
            .node_ids()
            .into_iter()
            .find(|id| *id != leader)
            .unwrap();
        move_leader(cluster, topic, 0, other, Duration::from_secs(60))
            .unwrap_or_else(|e| panic!("moving the leader: {e:#}"));
        first
            .publish(&numbered(5, 6))
            .await
            .unwrap_or_else(|e| panic!("publishing after the move: {e}"));
        assert_eq!(first.leader(), Some(other as i32));
        assert_eq!(read_all(&mut second).await, numbered(5, 6));
        assert_eq!(second.leader(), Some(other as i32));
    });
}

/// On the older broker (one node, the broker's default replication factor) the store
/// creates its topic, reads back what it wrote, and a new one reads the history.
#[test]
fn the_store_works_on_the_older_broker() {
    let cluster = KafkaCluster::start(kafka_old_version(), 1).expect("starting Kafka");
    let address = cluster.node_addresses()[0].to_string();
    runtime().block_on(async {
        let connector = connector(address.clone(), None);
        let mut store = FleetStore::open_through(&connector, "_kpress_autopilot", -1)
            .await
            .unwrap_or_else(|e| panic!("opening on {}: {e}", kafka_old_version()));
        assert_eq!(
            cleanup_policy(&connector, &address, "_kpress_autopilot").await,
            "compact"
        );
        store.publish(&numbered(0, 4)).await.expect("publish");
        assert_eq!(read_all(&mut store).await, numbered(0, 4));
        let mut restarted = FleetStore::open_through(&connector, "_kpress_autopilot", -1)
            .await
            .expect("opening again");
        assert_eq!(read_all(&mut restarted).await, numbered(0, 4));
    });
}

/// Kafka's `kafka-acls --add` against the cluster's PLAINTEXT listener.
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

fn denied(result: Result<impl std::fmt::Debug, StoreError>, doing: &str) {
    match result {
        Err(err @ StoreError::Denied { .. }) => assert!(err.is_denied(), "{err}"),
        other => panic!("{doing}: {other:?}, not Denied"),
    }
}

/// A principal with no ACLs may neither describe nor create the topic; one that may
/// describe it but neither write nor read it opens the store and is refused each.
#[test]
fn a_principal_without_acls_is_denied() {
    let cluster = cluster();
    let user = fleet_user();
    let login = SaslLogin {
        mechanism: Mechanism::Plain,
        username: user.name.clone(),
        password: user.password.clone(),
        bearer: None,
    };
    let sasl = cluster.sasl_addresses()[0].to_string();
    let refused = connector(sasl, Some(login));
    let admin = connector(cluster.node_addresses()[0].to_string(), None);
    let topic = "_kpress_autopilot_closed";
    runtime().block_on(async {
        denied(
            FleetStore::open_through(&refused, topic, -1).await,
            "opening with no ACLs",
        );
        add_acl(
            cluster,
            &[
                "--allow-principal",
                "User:fleet",
                "--operation",
                "Describe",
                "--topic",
                topic,
            ],
        );
        denied(
            FleetStore::open_through(&refused, topic, -1).await,
            "creating with Describe only",
        );
        // Made by an operator, it opens, but writes and reads are refused.
        FleetStore::open_through(&admin, topic, -1)
            .await
            .expect("the super user creates it");
        let mut store = FleetStore::open_through(&refused, topic, -1)
            .await
            .expect("Describe is enough to open");
        denied(store.publish(&numbered(0, 1)).await, "publishing");
        denied(store.read_new().await, "reading");
    });
}
