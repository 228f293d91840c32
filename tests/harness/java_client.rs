//! The Java kafka-clients test client (`tests/java/KpressClient.java`, compiled by
//! `scripts/setup.sh` for each Kafka version): topics, producing and consuming.

use crate::class_sharing::{self, ArchiveDump, JvmKind};
use crate::client_cli;
use crate::compression::Compression;
use crate::data::{diff_records, unhex};
use crate::java;
use crate::paths;
use crate::process::run_ok;
use anyhow::{bail, Context};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

/// `KpressClient` built against one Kafka version's kafka-clients.
#[derive(Debug, Clone)]
pub struct JavaClient {
    version: String,
    classes: PathBuf,
}

/// Settings of one `produce` run; `Default` is a plain idempotent producer.
#[derive(Debug, Clone)]
pub struct ProduceOptions {
    pub compression: Compression,
    pub acks: String,
    pub linger_ms: u32,
    pub batch_size: u32,
    pub idempotence: bool,
    pub partition: Option<u32>,
    /// `(transactional.id, commit)`: one transaction over all records, committed or aborted.
    pub transaction: Option<(String, bool)>,
    /// More producer properties, `k=v`.
    pub properties: Vec<String>,
}

impl Default for ProduceOptions {
    fn default() -> Self {
        ProduceOptions {
            compression: Compression::None,
            acks: "all".to_string(),
            linger_ms: 50,
            batch_size: 65536,
            idempotence: true,
            partition: None,
            transaction: None,
            properties: Vec::new(),
        }
    }
}

/// Settings of one `consume` run.
#[derive(Debug, Clone)]
pub struct ConsumeOptions {
    pub read_committed: bool,
    /// Subscribe with this group; without it, assign every partition from the start.
    pub group_id: Option<String>,
    pub timeout: Duration,
    /// More consumer properties, `k=v`.
    pub properties: Vec<String>,
}

impl Default for ConsumeOptions {
    fn default() -> Self {
        ConsumeOptions {
            read_committed: false,
            group_id: None,
            timeout: Duration::from_secs(60),
            properties: Vec::new(),
        }
    }
}

/// A record a consumer read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsumedRecord {
    pub topic: String,
    pub partition: u32,
    pub offset: i64,
    pub value: Vec<u8>,
}

/// The subcommand whose class archive `subcommand` maps: the background producer and
/// its tally, run by `background_producer.rs` and so never making an archive of their
/// own, load what `produce` and `consume` load.
fn archived_as(subcommand: &str) -> &str {
    match subcommand {
        "produce-steady" => "produce",
        "tally" => "consume",
        other => other,
    }
}

/// The values of `records` from `topic`, in order.
pub fn values_of<'r>(records: &'r [ConsumedRecord], topic: &str) -> Vec<&'r [u8]> {
    records
        .iter()
        .filter(|r| r.topic == topic)
        .map(|r| r.value.as_slice())
        .collect()
}

/// Parses the count and `sha256=` of a client's "produced N sha256=X" / "consumed N sha256=X" line.
pub fn parse_summary(stdout: &str, verb: &str) -> anyhow::Result<(usize, String)> {
    let line = stdout
        .lines()
        .find(|l| l.starts_with(verb))
        .with_context(|| format!("no '{verb} …' line in: {stdout}"))?;
    let mut words = line.split_whitespace().skip(1);
    let count = words.next().context("no count")?.parse()?;
    let sha = words
        .next()
        .and_then(|w| w.strip_prefix("sha256="))
        .context("no sha256=")?
        .to_string();
    Ok((count, sha))
}

/// Parses the "topic TAB partition TAB offset TAB hex(value)" lines of a consumer.
pub fn parse_consumed(text: &str) -> anyhow::Result<Vec<ConsumedRecord>> {
    text.lines()
        .filter(|l| !l.is_empty())
        .map(|line| {
            let mut parts = line.split('\t');
            let (Some(topic), Some(partition), Some(offset), Some(value)) =
                (parts.next(), parts.next(), parts.next(), parts.next())
            else {
                bail!("malformed consumed record line: {line}");
            };
            Ok(ConsumedRecord {
                topic: topic.to_string(),
                partition: partition.parse()?,
                offset: offset.parse()?,
                value: unhex(value)?,
            })
        })
        .collect()
}

impl JavaClient {
    /// The client for Kafka `version` (panics with "run scripts/setup.sh" if not built).
    pub fn new(version: &str) -> JavaClient {
        JavaClient {
            version: version.to_string(),
            classes: paths::java_test_clients(version),
        }
    }

    pub fn version(&self) -> &str {
        &self.version
    }

    pub(crate) fn command(&self, subcommand: &str) -> std::process::Command {
        self.command_sharing(subcommand, None)
    }

    /// The client's classes as a jar, for class sharing (made once a process per version).
    fn classes_jar(&self) -> Option<PathBuf> {
        static JARS: Mutex<Vec<(PathBuf, Option<PathBuf>)>> = Mutex::new(Vec::new());
        let mut jars = JARS.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((_, jar)) = jars.iter().find(|(dir, _)| *dir == self.classes) {
            return jar.clone();
        }
        let jar = class_sharing::classes_jar(&self.classes);
        jars.push((self.classes.clone(), jar.clone()));
        jar
    }

    /// `KpressClient subcommand`, mapping the subcommand's shared class archive, or
    /// making it at exit when `dump` is given.
    fn command_sharing(
        &self,
        subcommand: &str,
        dump: Option<&ArchiveDump>,
    ) -> std::process::Command {
        let mut cmd = match self.classes_jar() {
            Some(jar) => {
                let sharing = match dump {
                    Some(dump) => dump.args(),
                    None => class_sharing::use_archive(
                        &self.version,
                        JvmKind::Client(archived_as(subcommand)),
                        &java::CLIENT_OPTIONS,
                        &[&jar],
                    ),
                };
                java::client_command_sharing(&self.version, &[&jar], &sharing)
            }
            None => java::client_command(&self.version, &[&self.classes]),
        };
        cmd.arg("KpressClient").arg(subcommand);
        cmd
    }

    /// Runs `KpressClient subcommand` to its end with `run`; the first run of each
    /// subcommand (per version and client build) that ends well makes its class archive.
    fn run_sharing<T>(
        &self,
        subcommand: &str,
        run: impl FnOnce(std::process::Command) -> anyhow::Result<T>,
    ) -> anyhow::Result<T> {
        let dump = self.classes_jar().and_then(|jar| {
            ArchiveDump::claim(
                &self.version,
                JvmKind::Client(subcommand),
                &java::CLIENT_OPTIONS,
                &[&jar],
            )
        });
        let result = run(self.command_sharing(subcommand, dump.as_ref()));
        if let Some(dump) = dump {
            dump.finish(result.is_ok());
        }
        result
    }

    /// Creates `topic` with `partitions` partitions (replication factor 1) and topic
    /// configs `configs` (`k=v`), and waits until every partition has a leader.
    pub fn create_topic(
        &self,
        bootstrap: &str,
        topic: &str,
        partitions: u32,
        configs: &[&str],
    ) -> anyhow::Result<()> {
        self.create_topic_replicated(bootstrap, topic, partitions, 1, configs)
    }

    /// Creates `topics` with `partitions` partitions each and `compression.type=producer`
    /// (the broker stores each batch in the codec it arrives in, so the stored codec is
    /// what the client or kpress sent).
    pub fn create_producer_codec_topics(
        &self,
        bootstrap: &str,
        topics: &[&str],
        partitions: u32,
    ) -> anyhow::Result<()> {
        self.create_topics(
            bootstrap,
            topics,
            partitions,
            1,
            &["compression.type=producer"],
        )
    }

    /// [`create_topic`](Self::create_topic) with a replication factor.
    pub fn create_topic_replicated(
        &self,
        bootstrap: &str,
        topic: &str,
        partitions: u32,
        replication_factor: u16,
        configs: &[&str],
    ) -> anyhow::Result<()> {
        self.create_topics(bootstrap, &[topic], partitions, replication_factor, configs)
    }

    /// Creates every topic of `topics` alike (one JVM for all of them) and waits until
    /// every partition has a leader.
    pub fn create_topics(
        &self,
        bootstrap: &str,
        topics: &[&str],
        partitions: u32,
        replication_factor: u16,
        configs: &[&str],
    ) -> anyhow::Result<()> {
        self.run_sharing("create-topic", |mut cmd| {
            cmd.args(["--bootstrap", bootstrap])
                .args(["--partitions", &partitions.to_string()])
                .args(["--replication-factor", &replication_factor.to_string()]);
            for topic in topics {
                cmd.args(["--topic", topic]);
            }
            for config in configs {
                cmd.args(["--config", config]);
            }
            run_ok(&mut cmd, Duration::from_secs(120))
                .with_context(|| format!("creating topics {topics:?}"))
        })?;
        Ok(())
    }

    /// Produces the lines of `file` as records (values, no keys) and checks that the
    /// client's checksum matches the file's records. Returns the record count.
    pub fn produce_file(
        &self,
        bootstrap: &str,
        topic: &str,
        file: &Path,
        options: &ProduceOptions,
    ) -> anyhow::Result<usize> {
        self.produce_file_to_topics(bootstrap, &[topic], file, options)
    }

    /// [`produce_file`](Self::produce_file) into each of `topics`, by one producer (one
    /// JVM; its Produce requests carry several topics).
    pub fn produce_file_to_topics(
        &self,
        bootstrap: &str,
        topics: &[&str],
        file: &Path,
        options: &ProduceOptions,
    ) -> anyhow::Result<usize> {
        self.run_sharing("produce", |mut cmd| {
            client_cli::add_produce_args(&mut cmd, bootstrap, topics, options);
            client_cli::produce_file(cmd, file, "the Java client", topics)
        })
    }

    /// Produces `records` given on the command line (short UTF-8 values).
    pub fn produce_records(
        &self,
        bootstrap: &str,
        topic: &str,
        records: &[&str],
        options: &ProduceOptions,
    ) -> anyhow::Result<()> {
        let mut cmd = self.produce_command(bootstrap, &[topic], options);
        for record in records {
            cmd.args(["--record", record]);
        }
        run_ok(&mut cmd, Duration::from_secs(300))
            .with_context(|| format!("Java producer on {topic}"))?;
        Ok(())
    }

    fn produce_command(
        &self,
        bootstrap: &str,
        topics: &[&str],
        options: &ProduceOptions,
    ) -> std::process::Command {
        let mut cmd = self.command("produce");
        client_cli::add_produce_args(&mut cmd, bootstrap, topics, options);
        cmd
    }

    /// Reads `count` records from `topics` and returns them ordered by topic, then
    /// partition, then offset. Fails if a different number of records arrives.
    pub fn consume(
        &self,
        bootstrap: &str,
        topics: &[&str],
        count: usize,
        options: &ConsumeOptions,
    ) -> anyhow::Result<Vec<ConsumedRecord>> {
        self.run_sharing("consume", |cmd| {
            client_cli::consume(cmd, "Java", bootstrap, topics, count, options)
        })
    }

    /// Consumes `expected.len()` records from each of `topics` through `bootstrap`;
    /// a "`topic`: `reader`: difference" line for each topic whose values are not
    /// exactly `expected`.
    pub fn read_back_problems<E: AsRef<[u8]>>(
        &self,
        bootstrap: &str,
        topics: &[&str],
        expected: &[E],
        options: &ConsumeOptions,
        reader: &str,
    ) -> anyhow::Result<Vec<String>> {
        let consumed = self.consume(bootstrap, topics, expected.len() * topics.len(), options)?;
        Ok(topics
            .iter()
            .filter_map(|topic| {
                diff_records(expected, &values_of(&consumed, topic))
                    .map(|diff| format!("{topic}: {reader}: {diff}"))
            })
            .collect())
    }
}
