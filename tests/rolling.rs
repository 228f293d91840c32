//! A kpress fleet holds up through rolling operations. Two `kpress run` processes,
//! started from one policy file, share the Kafka ports (`reuse_port`) in front of a
//! three-node Kafka 4.1.1 cluster (KRaft, every node broker and controller: a
//! three-voter quorum). Throughout, an idempotent `acks=all` Java producer writes lz4
//! batches through kpress (rewritten into zstd) at a steady rate, and a second one,
//! alike, writes straight to the brokers; both time every acknowledgement. In order,
//! each step followed by a settle wait:
//!
//! - each node in turn stopped (SIGTERM, a controlled shutdown) and started again,
//!   the cluster waited on until every partition is in sync and led by its preferred
//!   replica again (the controller rebalances leaders every 5 s here);
//! - the active controller (the quorum's leader, as `kafka-metadata-quorum` names it)
//!   killed with SIGKILL and started again, the same wait, and a new quorum epoch;
//! - each kpress process in turn stopped (SIGTERM: it drains and exits 0) and a new
//!   one started with the same file on the same ports.
//!
//! Then both topics are read back straight from the brokers: every acknowledged record
//! is stored exactly once, in order per partition, byte for byte, and no send failed.
//! The pauses (the longest any partition went without an acknowledgement during each
//! step) are printed side by side, through kpress and direct, and written to
//! `$ROLLING_REPORT` if set; they are reported, not asserted (machines are noisy).
//! About 3 minutes on 2 cores.

use kpress_tests::batch_headers::stored_batches;
use kpress_tests::cluster::ClusterSecurity;
use kpress_tests::compression::Compression;
use kpress_tests::data::Dataset;
use kpress_tests::java_client::JavaClient;
use kpress_tests::kpress::{kpress_binary, storing_rules};
use kpress_tests::kpress_fleet::{FleetMember, FleetPolicy};
use kpress_tests::measure::publish_report;
use kpress_tests::node_faults::{kill_node, quorum_leader, wait_in_sync_and_balanced};
use kpress_tests::timed_producer::{
    read_back, Audit, Pause, TimedOptions, TimedProducer, TimedReport,
};
use kpress_tests::{kafka_version, KafkaCluster};
use std::fmt::Write as _;
use std::time::{Duration, Instant, SystemTime};

/// Partitions of each topic: one led by each node.
const PARTITIONS: u32 = 3;
/// Records per second of each producer.
const RATE: u32 = 500;
/// How long the cluster or a producer may take to recover from a step.
const RECOVERY: Duration = Duration::from_secs(120);
/// Records each producer must have acknowledged after a step, before the settle wait.
const AFTER_STEP: u64 = 400;
/// The wait after each step (and the steady window before the first).
const SETTLE: Duration = Duration::from_secs(2);
/// How long a stopped producer gets to settle what it sent.
const FINISH: Duration = Duration::from_secs(130);
/// How long reading a topic back may take.
const READ_BACK: Duration = Duration::from_secs(120);
/// How long a kpress process gets to drain and exit on SIGTERM.
const KPRESS_STOP: Duration = Duration::from_secs(30);

const THROUGH_KPRESS: &str = "zstd.rolling";
const DIRECT: &str = "rolling-direct";

/// One step of the operation and the time it spans, settle wait included.
struct Step {
    name: String,
    from: SystemTime,
    to: SystemTime,
}

/// The two producers, through kpress and direct.
struct Producers {
    via_kpress: TimedProducer,
    direct: TimedProducer,
}

impl Producers {
    /// Both acknowledged `AFTER_STEP` more records; `what` says after what.
    fn wait_more_acked(&mut self, what: &str, context: &dyn Fn() -> String) {
        for producer in [&mut self.via_kpress, &mut self.direct] {
            producer
                .wait_more_acked(AFTER_STEP, RECOVERY)
                .unwrap_or_else(|e| panic!("after {what}: {e:#}\n{}", context()));
        }
    }

    fn progress(&self) -> String {
        format!(
            "through kpress {}, direct {}",
            self.via_kpress.progress(),
            self.direct.progress()
        )
    }
}

/// The cluster's and the fleet's logs, for failure messages.
fn logs(cluster: &KafkaCluster, fleet: &[Option<FleetMember>]) -> String {
    let mut text: String = fleet.iter().flatten().map(FleetMember::log).collect();
    text.push_str(&cluster.describe_logs());
    text
}

/// Node `index` stopped (SIGKILL if `kill`, else SIGTERM) and started again, the
/// cluster back to normal, both producers acknowledged again, then the settle wait.
fn restart_node(
    cluster: &mut KafkaCluster,
    index: usize,
    kill: bool,
    name: &str,
    producers: &mut Producers,
    fleet: &[Option<FleetMember>],
) {
    let stopped = match kill {
        true => kill_node(cluster, index),
        false => cluster.stop_node(index),
    };
    stopped.unwrap_or_else(|e| panic!("{name}: {e:#}\n{}", logs(cluster, fleet)));
    cluster
        .start_node(index)
        .unwrap_or_else(|e| panic!("{name}: {e:#}\n{}", logs(cluster, fleet)));
    wait_in_sync_and_balanced(cluster, &[THROUGH_KPRESS, DIRECT], RECOVERY)
        .unwrap_or_else(|e| panic!("after {name}: {e:#}\n{}", logs(cluster, fleet)));
    producers.wait_more_acked(name, &|| logs(cluster, fleet));
    std::thread::sleep(SETTLE);
}

/// Ends the step `name` begun at `from`, and fails unless every process of the fleet
/// still runs.
fn end_step(
    steps: &mut Vec<Step>,
    name: String,
    from: SystemTime,
    fleet: &mut [Option<FleetMember>],
) {
    for member in fleet.iter_mut().flatten() {
        member
            .check_running()
            .unwrap_or_else(|e| panic!("after {name}: {e:#}"));
    }
    steps.push(Step {
        name,
        from,
        to: SystemTime::now(),
    });
}

/// Says what the test is at, seconds after it `began`.
fn note(began: Instant, text: &str) {
    eprintln!("[+{:.1} s] {text}", began.elapsed().as_secs_f64());
}

fn millis(d: Duration) -> String {
    format!("{:.0} ms", d.as_secs_f64() * 1000.0)
}

/// The pause table: per step, through kpress, direct and their ratio.
fn pause_table(steps: &[Step], via_kpress: &TimedReport, direct: &TimedReport) -> String {
    let mut table = format!(
        "Longest time any partition went without an acknowledgement ({RATE} records/s \
         per producer over {PARTITIONS} partitions, kpress {}):\n\n\
         | step | through kpress | direct | ratio |\n|---|---|---|---|\n",
        kpress_binary().display()
    );
    let mut details = String::new();
    for step in steps {
        let pause = |report: &TimedReport| report.longest_pause(step.from, step.to);
        let (k, d): (Pause, Pause) = (pause(via_kpress), pause(direct));
        let _ = writeln!(
            table,
            "| {} | {} | {} | {:.2} |",
            step.name,
            millis(k.longest),
            millis(d.longest),
            k.longest.as_secs_f64() / d.longest.as_secs_f64().max(1e-6)
        );
        let span = step.to.duration_since(step.from).unwrap_or_default();
        let _ = writeln!(
            details,
            "  {} ({:.1} s): through kpress partition {} from +{:.2} s, direct partition {} \
             from +{:.2} s",
            step.name,
            span.as_secs_f64(),
            k.partition,
            k.began_after.as_secs_f64(),
            d.partition,
            d.began_after.as_secs_f64()
        );
    }
    table.push_str("\nWhen each began (seconds into the step):\n");
    table.push_str(&details);
    table
}

#[test]
fn a_kpress_fleet_holds_up_through_rolling_operations() {
    let began = Instant::now();
    let mut cluster = KafkaCluster::start_with_properties(
        kafka_version(),
        3,
        &ClusterSecurity::default(),
        // A restarted node leads its partitions again within seconds, not minutes.
        "leader.imbalance.check.interval.seconds=5\n",
    )
    .unwrap_or_else(|e| panic!("starting three Kafka nodes: {e:#}"));
    JavaClient::new(kafka_version())
        .create_topics(
            &cluster.bootstrap(),
            &[THROUGH_KPRESS, DIRECT],
            PARTITIONS,
            3,
            &["compression.type=producer", "min.insync.replicas=2"],
        )
        .unwrap_or_else(|e| panic!("creating the topics: {e:#}\n{}", cluster.describe_logs()));
    wait_in_sync_and_balanced(&cluster, &[THROUGH_KPRESS, DIRECT], RECOVERY)
        .unwrap_or_else(|e| panic!("{e:#}\n{}", cluster.describe_logs()));

    let policy_dir = tempfile::tempdir().unwrap();
    // Every batch through kpress rewritten, however long a busy machine makes it wait.
    let rules = format!(
        "{}\n[limits]\nmax_rewrite_wait_ms = 30000\n",
        storing_rules(&["zstd"])
    );
    let policy = FleetPolicy::write(policy_dir.path(), &cluster, &rules).unwrap();
    let mut fleet: Vec<Option<FleetMember>> = ["kpress-1", "kpress-2"]
        .iter()
        .map(|name| {
            Some(
                FleetMember::start(name, &policy)
                    .unwrap_or_else(|e| panic!("starting {name}: {e:#}")),
            )
        })
        .collect();

    let options = TimedOptions::new(PARTITIONS, RATE, "lz4", &Dataset::ApacheAccessLog.path());
    note(began, "cluster, topics and fleet up");
    let mut producers = Producers {
        via_kpress: TimedProducer::start(&policy.bootstrap(), THROUGH_KPRESS, "kpress", &options)
            .expect("starting the producer through kpress"),
        direct: TimedProducer::start(&cluster.bootstrap(), DIRECT, "direct", &options)
            .expect("starting the direct producer"),
    };
    producers.wait_more_acked("starting", &|| logs(&cluster, &fleet));

    note(began, "both producers acknowledged");
    let mut steps = Vec::new();
    let from = SystemTime::now();
    std::thread::sleep(SETTLE);
    end_step(
        &mut steps,
        "steady, no operation".to_string(),
        from,
        &mut fleet,
    );

    for index in 0..cluster.node_ids().len() {
        let id = cluster.node_ids()[index];
        let name = format!("node {id}: SIGTERM, restart");
        note(began, &format!("{name} at {}", producers.progress()));
        let from = SystemTime::now();
        restart_node(&mut cluster, index, false, &name, &mut producers, &fleet);
        end_step(&mut steps, name, from, &mut fleet);
    }

    let (leader, epoch) = quorum_leader(&cluster).unwrap_or_else(|e| panic!("{e:#}"));
    let index = cluster
        .node_ids()
        .iter()
        .position(|id| *id == leader)
        .unwrap_or_else(|| panic!("the quorum's leader {leader} is no node"));
    let name = format!("active controller (node {leader}): SIGKILL, restart");
    note(
        began,
        &format!("{name} (quorum epoch {epoch}) at {}", producers.progress()),
    );
    let from = SystemTime::now();
    restart_node(&mut cluster, index, true, &name, &mut producers, &fleet);
    end_step(&mut steps, name, from, &mut fleet);
    let (new_leader, new_epoch) = quorum_leader(&cluster).unwrap_or_else(|e| panic!("{e:#}"));
    note(
        began,
        &format!("quorum leader now node {new_leader}, epoch {new_epoch}"),
    );
    assert!(
        new_leader != leader && new_epoch > epoch,
        "the quorum did not elect a new leader after node {leader} was killed: leader \
         {new_leader}, epoch {new_epoch} (was {epoch})"
    );

    let mut stopped_logs = String::new();
    for slot in 0..fleet.len() {
        let member = fleet[slot].take().expect("every process runs");
        let name = format!("{}: SIGTERM, a new one started", member.name());
        note(began, &format!("{name} at {}", producers.progress()));
        let from = SystemTime::now();
        let log = member
            .stop(KPRESS_STOP)
            .unwrap_or_else(|e| panic!("{e:#}\n{}", logs(&cluster, &fleet)));
        stopped_logs.push_str(&log);
        let restarted = format!("kpress-{}-restarted", slot + 1);
        fleet[slot] = Some(
            FleetMember::start(&restarted, &policy)
                .unwrap_or_else(|e| panic!("starting {restarted}: {e:#}")),
        );
        producers.wait_more_acked(&name, &|| {
            format!("{stopped_logs}{}", logs(&cluster, &fleet))
        });
        std::thread::sleep(SETTLE);
        end_step(&mut steps, name, from, &mut fleet);
    }

    let accepted: Vec<String> = fleet
        .iter()
        .flatten()
        .map(|m| format!("{} {}", m.name(), m.accepted()))
        .collect();
    eprintln!("connections accepted: {}", accepted.join(", "));
    let context = || format!("{stopped_logs}{}", logs(&cluster, &fleet));
    let Producers { via_kpress, direct } = producers;
    let reports: Vec<TimedReport> = [via_kpress, direct]
        .into_iter()
        .map(|p| {
            p.finish(FINISH)
                .unwrap_or_else(|e| panic!("{e:#}\n{}", context()))
        })
        .collect();
    note(began, "producers finished");
    // Both topics read back at once, straight from the brokers, beside Kafka's own
    // reading of what partition 0 of each stores.
    let bootstrap = cluster.bootstrap();
    let (reads, stored): (Vec<_>, _) = std::thread::scope(|scope| {
        let readers: Vec<_> = reports
            .iter()
            .map(|report| scope.spawn(|| read_back(&bootstrap, report, READ_BACK)))
            .collect();
        let stored = stored_batches(&cluster, &[THROUGH_KPRESS, DIRECT]);
        let reads = readers
            .into_iter()
            .map(|r| r.join().expect("a reader thread"))
            .collect();
        (reads, stored)
    });
    note(began, "read back");
    let mut problems = Vec::new();
    for (report, read) in reports.iter().zip(reads) {
        let read = read.unwrap_or_else(|e| panic!("{e:#}\n{}", context()));
        let audit = Audit::of(report, &read);
        eprintln!("{}: {audit}", report.topic);
        for problem in audit.problems() {
            problems.push(format!(
                "{}: {problem}\n--- producer stderr ---\n{}",
                report.topic, report.stderr
            ));
        }
    }
    assert!(
        problems.is_empty(),
        "{}\n{}",
        problems.join("\n"),
        context()
    );

    // The producer through kpress went through kpress, which rewrote its batches.
    let stored = stored.unwrap_or_else(|e| panic!("{e:#}\n{}", context()));
    for ((topic, codec), stored) in [
        (THROUGH_KPRESS, Compression::Zstd),
        (DIRECT, Compression::Lz4),
    ]
    .iter()
    .zip(&stored)
    {
        eprintln!("{topic}-0 stores {}", stored.codecs());
        assert!(
            stored.batches_not_in(codec.dump_name()) == 0
                && stored.invalid_batches == 0
                && stored.problems.is_empty(),
            "{topic}-0 stores {} ({} invalid), expected only {}: {:?}",
            stored.codecs(),
            stored.invalid_batches,
            codec.dump_name(),
            stored.problems
        );
    }

    publish_report(
        "ROLLING_REPORT",
        &pause_table(&steps, &reports[0], &reports[1]),
    );
}
