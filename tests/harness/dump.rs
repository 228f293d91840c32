//! Kafka's own reading of a log segment: `kafka.tools.DumpLogSegments --deep-iteration
//! --print-data-log`, parsed per batch (offsets, count, codec, CRC, validity) and per
//! record (offset and payload).

use crate::compression::Compression;
use crate::data::diff_records;
use crate::java;
use crate::process::run_ok;
use anyhow::{bail, Context};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// One record as DumpLogSegments prints it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DumpedRecord {
    pub offset: i64,
    /// `valueSize` (-1 for a null value).
    pub value_size: i64,
    /// The value as printed after `payload: ` (exact for UTF-8 values).
    pub payload: Vec<u8>,
}

/// One record batch as DumpLogSegments prints it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DumpedBatch {
    pub base_offset: i64,
    pub last_offset: i64,
    pub count: i64,
    /// `baseSequence`/`lastSequence`: the idempotent producer's numbering (-1 without).
    pub base_sequence: i64,
    pub last_sequence: i64,
    pub partition_leader_epoch: i64,
    pub producer_id: i64,
    pub producer_epoch: i64,
    pub is_transactional: bool,
    pub is_control: bool,
    pub position: i64,
    pub size: i64,
    pub magic: i64,
    /// `compresscodec`: none, gzip, snappy, lz4 or zstd.
    pub compresscodec: String,
    pub crc: u32,
    /// `isvalid`: the CRC matches and the batch parses.
    pub is_valid: bool,
    pub records: Vec<DumpedRecord>,
}

impl DumpedBatch {
    /// The record payloads in order.
    pub fn payloads(&self) -> impl Iterator<Item = &[u8]> {
        self.records.iter().map(|r| r.payload.as_slice())
    }
}

/// One dumped segment file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DumpedSegment {
    pub path: PathBuf,
    pub batches: Vec<DumpedBatch>,
    /// Lines DumpLogSegments printed that are neither a batch nor a record, such as
    /// "Found N invalid bytes at the end of ...": every one is a finding.
    pub problems: Vec<String>,
}

impl DumpedSegment {
    /// What is wrong with `topic`'s stored segment, if it should hold exactly
    /// `expected` in data batches of `codec`, each valid: one line per finding
    /// (DumpLogSegments' own, a batch in another codec or invalid, a record missing,
    /// extra or different). Control batches (transaction markers) are not data.
    pub fn problems_storing(
        &self,
        topic: &str,
        codec: Compression,
        expected: &[Vec<u8>],
    ) -> Vec<String> {
        let mut problems: Vec<String> = self
            .problems
            .iter()
            .map(|p| format!("{topic}: DumpLogSegments: {p}"))
            .collect();
        for batch in self.batches.iter().filter(|b| !b.is_control) {
            if !batch.is_valid || batch.compresscodec != codec.dump_name() {
                problems.push(format!(
                    "{topic}: batch at {} ({} records) stored as {}, valid {}; expected {codec}",
                    batch.base_offset, batch.count, batch.compresscodec, batch.is_valid
                ));
            }
        }
        if let Some(diff) = diff_records(expected, &self.payloads()) {
            problems.push(format!("{topic}: stored records: {diff}"));
        }
        problems
    }

    /// Every record payload of the segment, in order.
    pub fn payloads(&self) -> Vec<Vec<u8>> {
        self.batches
            .iter()
            .flat_map(|b| b.payloads().map(<[u8]>::to_vec))
            .collect()
    }
}

/// Dumps one segment with Kafka `version`'s DumpLogSegments.
pub fn dump_log_segment(version: &str, segment: &Path) -> anyhow::Result<Vec<DumpedBatch>> {
    let mut dumped = dump_log_segments(version, &[segment])?;
    let segment = dumped.pop().context("DumpLogSegments printed nothing")?;
    if !segment.problems.is_empty() {
        bail!(
            "DumpLogSegments reported on {}: {:?}",
            segment.path.display(),
            segment.problems
        );
    }
    Ok(segment.batches)
}

/// Dumps several segments with one JVM. Each file must be named like a segment (its base
/// offset, `00000000000000000000.log`): DumpLogSegments parses the name.
pub fn dump_log_segments(version: &str, segments: &[&Path]) -> anyhow::Result<Vec<DumpedSegment>> {
    anyhow::ensure!(!segments.is_empty(), "no segments to dump");
    let dumped =
        run_dump_log_segments(version, segments, &["--deep-iteration", "--print-data-log"])?;
    let by_path: HashMap<String, DumpedSegment> = dumped
        .into_iter()
        .map(|d| (d.path.display().to_string(), d))
        .collect();
    let mut by_path = by_path;
    segments
        .iter()
        .map(|p| {
            by_path
                .remove(&p.display().to_string())
                .with_context(|| format!("DumpLogSegments did not dump {}", p.display()))
        })
        .collect()
}

/// Runs DumpLogSegments with `options` on `segments` in one JVM and parses what it
/// printed, a segment per file it dumped.
pub(crate) fn run_dump_log_segments(
    version: &str,
    segments: &[&Path],
    options: &[&str],
) -> anyhow::Result<Vec<DumpedSegment>> {
    // `--files` takes a comma-separated list.
    let files = segments
        .iter()
        .map(|p| {
            let text = p.display().to_string();
            anyhow::ensure!(
                !text.contains(','),
                "a path with a comma cannot be dumped: {text}"
            );
            Ok(text)
        })
        .collect::<anyhow::Result<Vec<_>>>()?
        .join(",");
    let mut cmd = java::client_command(version, &[]);
    cmd.arg("kafka.tools.DumpLogSegments")
        .args(options)
        .args(["--files", &files]);
    let finished = run_ok(&mut cmd, Duration::from_secs(600))?;
    parse_dump(&finished.stdout_text())
}

fn field<'a>(line: &'a str, name: &str) -> Option<&'a str> {
    // Fields are "name: value" separated by single spaces; values have no spaces
    // except the payload, which is parsed separately.
    let key = format!("{name}: ");
    let start = if line.starts_with(&key) {
        0
    } else {
        line.find(&format!(" {key}"))? + 1
    };
    let rest = &line[start + key.len()..];
    Some(rest.split(' ').next().unwrap_or(""))
}

fn number(line: &str, name: &str) -> anyhow::Result<i64> {
    field(line, name)
        .with_context(|| format!("no {name} in: {line}"))?
        .parse()
        .with_context(|| format!("bad {name} in: {line}"))
}

fn flag(line: &str, name: &str) -> anyhow::Result<bool> {
    match field(line, name) {
        Some("true") => Ok(true),
        Some("false") => Ok(false),
        _ => bail!("no boolean {name} in: {line}"),
    }
}

fn parse_batch(line: &str) -> anyhow::Result<DumpedBatch> {
    Ok(DumpedBatch {
        base_offset: number(line, "baseOffset")?,
        last_offset: number(line, "lastOffset")?,
        count: number(line, "count")?,
        base_sequence: number(line, "baseSequence")?,
        last_sequence: number(line, "lastSequence")?,
        partition_leader_epoch: number(line, "partitionLeaderEpoch")?,
        producer_id: number(line, "producerId")?,
        producer_epoch: number(line, "producerEpoch")?,
        is_transactional: flag(line, "isTransactional")?,
        is_control: flag(line, "isControl")?,
        position: number(line, "position")?,
        size: number(line, "size")?,
        magic: number(line, "magic")?,
        compresscodec: field(line, "compresscodec")
            .with_context(|| format!("no compresscodec in: {line}"))?
            .to_string(),
        crc: u32::try_from(number(line, "crc")?).context("crc out of range")?,
        is_valid: flag(line, "isvalid")?,
        records: Vec::new(),
    })
}

fn parse_record(line: &str) -> anyhow::Result<DumpedRecord> {
    let offset = number(line, "offset")?;
    let value_size = field(line, "valueSize").map_or(Ok(-1), |v| v.parse())?;
    // The payload is the rest of the line after the first " payload: " following the
    // header keys (a key, if any, comes before it).
    let after_headers = line.find(" headerKeys: ").unwrap_or(0);
    let payload = line[after_headers..]
        .find(" payload: ")
        .map(|i| line.as_bytes()[after_headers + i + " payload: ".len()..].to_vec())
        .unwrap_or_default();
    Ok(DumpedRecord {
        offset,
        value_size,
        payload,
    })
}

/// Parses DumpLogSegments output (one or more "Dumping FILE" sections).
pub fn parse_dump(text: &str) -> anyhow::Result<Vec<DumpedSegment>> {
    let mut segments: Vec<DumpedSegment> = Vec::new();
    for line in text.lines() {
        if let Some(path) = line.strip_prefix("Dumping ") {
            segments.push(DumpedSegment {
                path: PathBuf::from(path),
                batches: Vec::new(),
                problems: Vec::new(),
            });
            continue;
        }
        let Some(segment) = segments.last_mut() else {
            continue;
        };
        if line.starts_with("baseOffset: ") {
            segment.batches.push(parse_batch(line)?);
        } else if let Some(record) = line.strip_prefix("| ") {
            let batch = segment
                .batches
                .last_mut()
                .with_context(|| format!("a record before any batch: {line}"))?;
            batch.records.push(parse_record(record)?);
        } else if line.starts_with("Log starting offset: ") || line.trim().is_empty() {
            // Header of a .log file.
        } else {
            segment.problems.push(line.to_string());
        }
    }
    Ok(segments)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_batches_and_records() {
        let text = "Dumping /tmp/x/00000000000000000000.log\n\
Log starting offset: 0\n\
baseOffset: 0 lastOffset: 1 count: 2 baseSequence: 0 lastSequence: 1 producerId: 0 producerEpoch: 0 partitionLeaderEpoch: 0 isTransactional: false isControl: false deleteHorizonMs: OptionalLong.empty position: 0 CreateTime: 1795318872249 size: 5527 magic: 2 compresscodec: gzip crc: 2852706901 isvalid: true\n\
| offset: 0 CreateTime: 1795318872201 keySize: -1 valueSize: 5 sequence: 0 headerKeys: [] payload: a b c\n\
| offset: 1 CreateTime: 1795318872201 keySize: -1 valueSize: 10 sequence: 1 headerKeys: [] payload:  payload: \n\
Found 3 invalid bytes at the end of 00000000000000000000.log\n";
        let dumped = parse_dump(text).unwrap();
        assert_eq!(dumped.len(), 1);
        let batch = &dumped[0].batches[0];
        assert_eq!(batch.compresscodec, "gzip");
        assert_eq!(batch.crc, 2852706901);
        assert!(batch.is_valid);
        assert_eq!(batch.count, 2);
        assert_eq!(batch.records[0].payload, b"a b c");
        assert_eq!(batch.records[1].payload, b" payload: ");
        assert_eq!(dumped[0].problems.len(), 1);
    }
}
