//! librdkafka 2.16 through confluent-kafka (`tests/python/ck_client.py` in the
//! `.cache/venv` Python): the same produce/consume surface as the Java client.

use crate::data;
use crate::java_client::{
    parse_consumed, parse_summary, ConsumeOptions, ConsumedRecord, ProduceOptions,
};
use crate::paths;
use crate::process::run_ok;
use anyhow::Context;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

fn command(subcommand: &str) -> Command {
    let mut cmd = Command::new(paths::venv_python());
    cmd.arg(paths::tests_file("python/ck_client.py"))
        .arg(subcommand);
    cmd
}

/// Produces the lines of `file` to `topic` with confluent-kafka; checks its checksum
/// against the file's records and returns the count. `options.batch_size` is
/// librdkafka's `batch.size` (bytes of uncompressed records per batch).
pub fn produce_file(
    bootstrap: &str,
    topic: &str,
    file: &Path,
    options: &ProduceOptions,
) -> anyhow::Result<usize> {
    produce_file_to_topics(bootstrap, &[topic], file, options)
}

/// [`produce_file`] into each of `topics`, by one producer.
pub fn produce_file_to_topics(
    bootstrap: &str,
    topics: &[&str],
    file: &Path,
    options: &ProduceOptions,
) -> anyhow::Result<usize> {
    let expected = data::split_lines(&std::fs::read(file)?);
    let mut cmd = command("produce");
    cmd.args(["--bootstrap", bootstrap]);
    for topic in topics {
        cmd.args(["--topic", topic]);
    }
    cmd.args(["--compression", options.compression.name()])
        .args(["--acks", &options.acks])
        .args(["--linger-ms", &options.linger_ms.to_string()])
        .args(["--batch-size", &options.batch_size.to_string()])
        .args(["--idempotence", &options.idempotence.to_string()]);
    if let Some(partition) = options.partition {
        cmd.args(["--partition", &partition.to_string()]);
    }
    if let Some((id, commit)) = &options.transaction {
        cmd.args(["--transactional-id", id])
            .args(["--transaction", if *commit { "commit" } else { "abort" }]);
    }
    for property in &options.properties {
        cmd.args(["--property", property]);
    }
    cmd.arg("--file").arg(file);
    let finished = run_ok(&mut cmd, Duration::from_secs(300))
        .with_context(|| format!("confluent-kafka producer on {topics:?}"))?;
    let (count, sha) = parse_summary(&finished.stdout_text(), "produced")?;
    anyhow::ensure!(
        count == expected.len() && sha == data::checksum(&expected),
        "confluent-kafka sent {count} records (sha256 {sha}), the file has {}",
        expected.len()
    );
    Ok(count)
}

/// Reads `count` records from `topics` with confluent-kafka, ordered by topic,
/// partition and offset.
pub fn consume(
    bootstrap: &str,
    topics: &[&str],
    count: usize,
    options: &ConsumeOptions,
) -> anyhow::Result<Vec<ConsumedRecord>> {
    let out = tempfile::Builder::new()
        .prefix("kpress-consumed-")
        .tempfile()?;
    let mut cmd = command("consume");
    cmd.args(["--bootstrap", bootstrap])
        .args(["--count", &count.to_string()])
        .args(["--timeout-ms", &options.timeout.as_millis().to_string()])
        .args([
            "--isolation",
            if options.read_committed {
                "read_committed"
            } else {
                "read_uncommitted"
            },
        ])
        .arg("--output")
        .arg(out.path());
    for topic in topics {
        cmd.args(["--topic", topic]);
    }
    if let Some(group) = &options.group_id {
        cmd.args(["--group-id", group]);
    }
    for property in &options.properties {
        cmd.args(["--property", property]);
    }
    let finished = run_ok(&mut cmd, options.timeout + Duration::from_secs(60))
        .with_context(|| format!("confluent-kafka consumer on {topics:?}"))?;
    let records = parse_consumed(&std::fs::read_to_string(out.path())?)?;
    let (reported, sha) = parse_summary(&finished.stdout_text(), "consumed")?;
    let values: Vec<&[u8]> = records.iter().map(|r| r.value.as_slice()).collect();
    anyhow::ensure!(
        reported == records.len() && sha == data::checksum(&values),
        "the confluent-kafka consumer's output file disagrees with its own summary"
    );
    Ok(records)
}
