//! Faults done to a running [`KafkaCluster`]'s nodes: a node killed with SIGKILL
//! (no controlled shutdown, requests in flight cut off), and a partition's leadership
//! moved to another node with Kafka's own admin tools (a reassignment that puts the
//! node first, then a preferred leader election). Also what a rolling operation
//! waits on: the quorum's active controller, and every partition back in sync and led
//! by its preferred replica.

use crate::cluster::KafkaCluster;
use crate::java;
use crate::proc_status::pid_with_argument;
use crate::process::run_ok;
use anyhow::{bail, Context};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// The config file node `index` was started with (its command line names it).
fn node_config(cluster: &KafkaCluster, index: usize) -> PathBuf {
    cluster
        .log_file(index)
        .parent()
        .expect("a node's log lives in its dir")
        .join("server.properties")
}

/// Kills node `index` with SIGKILL, waits until it is gone, and reaps it; the
/// cluster's [`start_node`](KafkaCluster::start_node) brings it back.
pub fn kill_node(cluster: &mut KafkaCluster, index: usize) -> anyhow::Result<()> {
    let pid = pid_with_argument(&node_config(cluster, index))?.to_string();
    let status = std::process::Command::new("kill")
        .args(["-KILL", &pid])
        .status()?;
    if !status.success() {
        bail!("kill -KILL {pid} failed ({status})");
    }
    // The handle still holds the (now dead) child: stopping it only reaps it.
    cluster
        .stop_node(index)
        .with_context(|| format!("reaping node {index} after SIGKILL"))
}

/// The leader of `topic`-`partition` as the cluster's Metadata names it, once it has one.
pub fn partition_leader(
    cluster: &KafkaCluster,
    topic: &str,
    partition: i32,
    timeout: Duration,
) -> anyhow::Result<u32> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Ok(metadata) = cluster.metadata() {
            let leader = metadata
                .topic(topic)
                .and_then(|t| t.partitions.iter().find(|p| p.partition == partition))
                .filter(|p| p.error_code == 0 && p.leader >= 0)
                .map(|p| p.leader as u32);
            if let Some(leader) = leader {
                return Ok(leader);
            }
        }
        if Instant::now() > deadline {
            bail!("{topic}-{partition} has no leader after {timeout:?}");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Makes node `to` the leader of `topic`-`partition` (replicated on every node of the
/// cluster): `kafka-reassign-partitions` lists `to` first, then
/// `kafka-leader-election --election-type PREFERRED` elects it. Waits until Metadata
/// names it.
pub fn move_leader(
    cluster: &KafkaCluster,
    topic: &str,
    partition: i32,
    to: u32,
    timeout: Duration,
) -> anyhow::Result<()> {
    let mut replicas = vec![to];
    replicas.extend(cluster.node_ids().into_iter().filter(|id| *id != to));
    let plan = format!(
        r#"{{"version":1,"partitions":[{{"topic":"{topic}","partition":{partition},"replicas":{replicas:?}}}]}}"#
    );
    let plan_file = tempfile::Builder::new()
        .prefix("kpress-reassign-")
        .suffix(".json")
        .tempfile()?;
    std::fs::write(plan_file.path(), plan)?;
    let bootstrap = cluster.bootstrap();
    let mut reassign = java::client_command(cluster.version(), &[]);
    reassign
        .arg("org.apache.kafka.tools.reassign.ReassignPartitionsCommand")
        .args(["--bootstrap-server", &bootstrap])
        .arg("--reassignment-json-file")
        .arg(plan_file.path())
        .arg("--execute");
    run_ok(&mut reassign, Duration::from_secs(60)).context("kafka-reassign-partitions")?;
    // The replica set is unchanged (only its order), so the reassignment completes at
    // once; the election may still find it pending for a moment: retry.
    let deadline = Instant::now() + timeout;
    loop {
        let mut elect = java::client_command(cluster.version(), &[]);
        elect
            .arg("org.apache.kafka.tools.LeaderElectionCommand")
            .args(["--bootstrap-server", &bootstrap])
            .args(["--election-type", "PREFERRED"])
            .args(["--topic", topic])
            .args(["--partition", &partition.to_string()]);
        let elected = run_ok(&mut elect, Duration::from_secs(60));
        let leader = partition_leader(cluster, topic, partition, Duration::from_secs(10))?;
        if leader == to {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!(
                "{topic}-{partition} is led by node {leader}, not {to}, {timeout:?} after \
                 the reassignment; last election: {elected:?}"
            );
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// The KRaft quorum's leader (the active controller) and its epoch, as
/// `kafka-metadata-quorum describe --status` reports them (`LeaderId`, `LeaderEpoch`).
pub fn quorum_leader(cluster: &KafkaCluster) -> anyhow::Result<(u32, u64)> {
    let mut describe = java::client_command(cluster.version(), &[]);
    describe
        .arg("org.apache.kafka.tools.MetadataQuorumCommand")
        .args(["--bootstrap-server", &cluster.bootstrap()])
        .args(["describe", "--status"]);
    let out = run_ok(&mut describe, Duration::from_secs(60))
        .context("kafka-metadata-quorum describe --status")?
        .stdout_text();
    let field = |name: &str| -> anyhow::Result<u64> {
        out.lines()
            .find_map(|l| l.strip_prefix(name)?.trim().strip_prefix(':'))
            .with_context(|| format!("no {name} in:\n{out}"))?
            .trim()
            .parse()
            .with_context(|| format!("{name} is no number in:\n{out}"))
    };
    Ok((u32::try_from(field("LeaderId")?)?, field("LeaderEpoch")?))
}

/// Waits until every partition of `topics` has all its replicas in sync and is led by
/// its preferred replica (the first listed), as Metadata tells: the cluster recovered
/// from a node's restart (the controller's leader rebalance moves leaders back).
pub fn wait_in_sync_and_balanced(
    cluster: &KafkaCluster,
    topics: &[&str],
    timeout: Duration,
) -> anyhow::Result<()> {
    let deadline = Instant::now() + timeout;
    loop {
        let mut lagging = Vec::new();
        match cluster.metadata() {
            Ok(metadata) => {
                for topic in topics {
                    let Some(t) = metadata.topic(topic) else {
                        lagging.push(format!("{topic}: not listed"));
                        continue;
                    };
                    for p in &t.partitions {
                        let mut isr = p.isr.clone();
                        let mut replicas = p.replicas.clone();
                        isr.sort_unstable();
                        replicas.sort_unstable();
                        if p.error_code != 0
                            || isr != replicas
                            || p.replicas.first() != Some(&p.leader)
                        {
                            lagging.push(format!(
                                "{topic}-{}: leader {} replicas {:?} isr {:?} error {}",
                                p.partition, p.leader, p.replicas, p.isr, p.error_code
                            ));
                        }
                    }
                }
            }
            Err(err) => lagging.push(format!("no metadata: {err:#}")),
        }
        if lagging.is_empty() {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!(
                "not every partition in sync and led by its preferred replica after \
                 {timeout:?}:\n{}",
                lagging.join("\n")
            );
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}
