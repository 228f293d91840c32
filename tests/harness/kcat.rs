//! librdkafka 2.0 through `kcat`: producing a file's lines with a codec, and consuming
//! a partition byte-exactly (each value framed by its printed length).

use crate::compression::Compression;
use crate::process::run_ok;
use anyhow::{bail, Context};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

/// Produces the lines of `file` to `topic` partition `partition` with `compression`.
/// librdkafka sends a batch of one record uncompressed, so the linger and batch
/// settings make batches of many records.
pub fn produce_file(
    bootstrap: &str,
    topic: &str,
    partition: u32,
    compression: Compression,
    file: &Path,
    extra: &[&str],
) -> anyhow::Result<()> {
    let mut cmd = Command::new("kcat");
    cmd.args(["-P", "-b", bootstrap, "-t", topic])
        .args(["-p", &partition.to_string()])
        .args(["-z", compression.name()])
        .args(["-X", "linger.ms=100", "-X", "batch.num.messages=100000"])
        .args(["-X", "acks=all", "-X", "enable.idempotence=true"]);
    for setting in extra {
        cmd.args(["-X", setting]);
    }
    cmd.arg("-l").arg(file);
    run_ok(&mut cmd, Duration::from_secs(300))
        .with_context(|| format!("kcat producing {} to {topic}", file.display()))?;
    Ok(())
}

/// Reads `topic` partition `partition` from the beginning to its end and returns the
/// values in offset order, with their offsets.
pub fn consume_partition(
    bootstrap: &str,
    topic: &str,
    partition: u32,
    extra: &[&str],
) -> anyhow::Result<Vec<(i64, Vec<u8>)>> {
    let mut cmd = Command::new("kcat");
    cmd.args(["-C", "-b", bootstrap, "-t", topic])
        .args(["-p", &partition.to_string()])
        .args(["-o", "beginning", "-e", "-q"])
        .args(["-X", "check.crcs=true"])
        // At the partition's end the broker holds an empty fetch this long before `-e`
        // sees the end (500 ms by default, most of a read-back of a test's records).
        .args(["-X", "fetch.wait.max.ms=10"])
        // Offset and value length on one line, then exactly that many value bytes.
        .args(["-f", "%o %S\n%s\n"]);
    for setting in extra {
        cmd.args(["-X", setting]);
    }
    let finished = run_ok(&mut cmd, Duration::from_secs(300))
        .with_context(|| format!("kcat consuming {topic}-{partition}"))?;
    parse_framed(&finished.stdout)
}

/// `None` if kcat reads `topic`-`partition` through `bootstrap` as exactly `expected`;
/// otherwise what went wrong.
pub fn read_back_problem<R: AsRef<[u8]>>(
    bootstrap: &str,
    topic: &str,
    partition: u32,
    extra: &[&str],
    expected: &[R],
) -> Option<String> {
    match consume_partition(bootstrap, topic, partition, extra) {
        Ok(records) => {
            let values: Vec<&[u8]> = records.iter().map(|(_, v)| v.as_slice()).collect();
            crate::data::diff_records(expected, &values)
                .map(|diff| format!("{topic}-{partition}: kcat read back: {diff}"))
        }
        Err(e) => Some(format!("{topic}-{partition}: kcat: {e:#}")),
    }
}

fn parse_framed(mut bytes: &[u8]) -> anyhow::Result<Vec<(i64, Vec<u8>)>> {
    let mut records = Vec::new();
    while !bytes.is_empty() {
        let newline = bytes
            .iter()
            .position(|&b| b == b'\n')
            .context("kcat output: header without newline")?;
        let header = std::str::from_utf8(&bytes[..newline])?;
        let (offset, size) = header
            .split_once(' ')
            .with_context(|| format!("kcat output: bad header {header:?}"))?;
        let offset: i64 = offset.parse()?;
        let size: i64 = size.parse()?;
        let size = size.max(0) as usize; // -1: null value
        let value_start = newline + 1;
        let value_end = value_start + size;
        if bytes.len() < value_end + 1 || bytes[value_end] != b'\n' {
            bail!("kcat output: value of offset {offset} is not {size} bytes and a newline");
        }
        records.push((offset, bytes[value_start..value_end].to_vec()));
        bytes = &bytes[value_end + 1..];
    }
    Ok(records)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn framed_output_keeps_values_exact() {
        let out = b"0 3\na\nb\n1 0\n\n2 -1\n\n";
        let records = parse_framed(out).unwrap();
        assert_eq!(
            records,
            vec![(0, b"a\nb".to_vec()), (1, vec![]), (2, vec![])]
        );
        assert!(parse_framed(b"0 5\nabc\n").is_err());
    }
}
