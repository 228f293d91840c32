//! The command line the two test clients share (`java/KpressClient.java` and
//! `python/ck_client.py`): building `produce`/`consume` arguments from the options,
//! and checking what they report against what was expected.

use crate::data;
use crate::java_client::{
    parse_consumed, parse_summary, ConsumeOptions, ConsumedRecord, ProduceOptions,
};
use crate::process::run_ok;
use anyhow::Context;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

/// Adds the `produce` arguments for `topics` and `options` to `cmd`.
pub(crate) fn add_produce_args(
    cmd: &mut Command,
    bootstrap: &str,
    topics: &[&str],
    options: &ProduceOptions,
) {
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
}

/// Runs `cmd` (a `produce` command) on `file` and checks that `client` reports
/// sending exactly the file's records; returns their count.
pub(crate) fn produce_file(
    mut cmd: Command,
    file: &Path,
    client: &str,
    topics: &[&str],
) -> anyhow::Result<usize> {
    let expected = data::split_lines(&std::fs::read(file)?);
    cmd.arg("--file").arg(file);
    let finished = run_ok(&mut cmd, Duration::from_secs(300))
        .with_context(|| format!("{client} producer on {topics:?}"))?;
    let (count, sha) = parse_summary(&finished.stdout_text(), "produced")?;
    anyhow::ensure!(
        count == expected.len() && sha == data::checksum(&expected),
        "{client} sent {count} records (sha256 {sha}), the file has {} (sha256 {})",
        expected.len(),
        data::checksum(&expected)
    );
    Ok(count)
}

/// Adds the `consume` arguments to `cmd`, runs it, and returns the records `client`
/// wrote, checked against its own count and checksum.
pub(crate) fn consume(
    mut cmd: Command,
    client: &str,
    bootstrap: &str,
    topics: &[&str],
    count: usize,
    options: &ConsumeOptions,
) -> anyhow::Result<Vec<ConsumedRecord>> {
    let out = tempfile::Builder::new()
        .prefix("kpress-consumed-")
        .tempfile()?;
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
        .with_context(|| format!("{client} consumer on {topics:?}"))?;
    let records = parse_consumed(&std::fs::read_to_string(out.path())?)?;
    let (reported, sha) = parse_summary(&finished.stdout_text(), "consumed")?;
    let values: Vec<&[u8]> = records.iter().map(|r| r.value.as_slice()).collect();
    anyhow::ensure!(
        reported == records.len() && sha == data::checksum(&values),
        "the {client} consumer's output file disagrees with its own summary"
    );
    Ok(records)
}
