//! Reading what advice measures: a dataset directory's lines (bounded), or a log
//! segment's batches as stored; each with how to group its records at another
//! `batch.size`.

use std::fmt::Write;
use std::io::Read;
use std::path::Path;

use anyhow::{bail, Context};
use kpress_codec::{Candidate, Codec};
use kpress_measure::{RecordsSection, SegmentLimits};
use serde_json::{json, Value};

use super::report::{bytes, size};
use super::Args;

/// A dataset larger than this is read only this far (records enough for advice).
pub(crate) const DEFAULT_MAX_INPUT_BYTES: u64 = 256 * 1024 * 1024;
/// Kafka's producer default `batch.size`.
const KAFKA_DEFAULT_BATCH_BYTES: usize = 16384;
/// A segment file larger than this is refused (Kafka's default segment is 1 GiB).
const MAX_SEGMENT_BYTES: u64 = 1 << 30;

/// The records to measure and how to group them again at another batch size.
pub(crate) struct Input {
    /// What was read, for people.
    pub(crate) description: String,
    pub(crate) json: Value,
    pub(crate) sections: Vec<RecordsSection>,
    /// What stores these records now, when the input says (a segment's batches).
    pub(crate) stored_now: Option<(String, u64)>,
    /// A segment stored in one compressed codec: that codec (at its Kafka default
    /// options) and each batch's bytes as stored.
    pub(crate) stored_per_batch: Option<(Candidate, Vec<u64>)>,
    pub(crate) regroup: Box<dyn Fn(usize) -> anyhow::Result<Vec<RecordsSection>>>,
}

/// The files of `dir` (not its subdirectories), in name order.
pub(crate) fn read_dir(dir: &Path, args: &Args) -> anyhow::Result<Input> {
    let mut paths: Vec<_> = std::fs::read_dir(dir)
        .with_context(|| format!("reading {}", dir.display()))?
        .filter_map(|e| e.ok())
        .filter(|e| e.file_type().map(|t| t.is_file()).unwrap_or(false))
        .map(|e| e.path())
        .collect();
    paths.sort();
    let mut data = Vec::new();
    let mut files = 0;
    for path in &paths {
        let left = args.max_input_bytes.saturating_sub(data.len() as u64);
        if left == 0 {
            break;
        }
        std::fs::File::open(path)
            .and_then(|f| f.take(left).read_to_end(&mut data))
            .with_context(|| format!("reading {}", path.display()))?;
        // A file cut at the cap loses its last, partial line.
        if !data.ends_with(b"\n") {
            data.push(b'\n');
        }
        files += 1;
    }
    let values: Vec<&[u8]> = kpress_measure::lines(&data).collect();
    if values.is_empty() {
        bail!(
            "{}: no records (no non-empty lines in its files)",
            dir.display()
        );
    }
    let (sections, grouping) = match args.batch_size {
        Some(records) => (
            kpress_measure::sections(&values, records),
            format!("{records} records per batch"),
        ),
        None => {
            let bytes = args.batch_bytes.unwrap_or(KAFKA_DEFAULT_BATCH_BYTES);
            (
                kpress_measure::sections_by_bytes(&values, bytes),
                format!("batch.size {}", size(bytes as u64)),
            )
        }
    };
    let owned: Vec<Vec<u8>> = values.iter().map(|v| v.to_vec()).collect();
    let raw: u64 = sections.iter().map(|s| s.records.len() as u64).sum();
    let description = format!(
        "{}: {files} files, {} records, {} of records in {} batches ({grouping}, {} per batch).",
        dir.display(),
        owned.len(),
        bytes(raw as f64),
        sections.len(),
        bytes(raw as f64 / sections.len() as f64),
    );
    let json = json!({"dir": dir.display().to_string(), "segment": null, "records": owned.len(),
        "raw_bytes": raw, "batches": sections.len(), "files": files});
    Ok(Input {
        description,
        json,
        sections,
        stored_now: None,
        stored_per_batch: None,
        regroup: Box::new(move |batch_bytes| {
            let values: Vec<&[u8]> = owned.iter().map(Vec::as_slice).collect();
            Ok(kpress_measure::sections_by_bytes(&values, batch_bytes))
        }),
    })
}

pub(crate) fn read_segment(path: &Path) -> anyhow::Result<Input> {
    let file = std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?;
    let mut data = Vec::new();
    file.take(MAX_SEGMENT_BYTES + 1)
        .read_to_end(&mut data)
        .with_context(|| format!("reading {}", path.display()))?;
    if data.len() as u64 > MAX_SEGMENT_BYTES {
        bail!(
            "{}: larger than {} (Kafka's largest default segment)",
            path.display(),
            size(MAX_SEGMENT_BYTES)
        );
    }
    let segment = kpress_measure::read_segment(&data, SegmentLimits::default());
    drop(data);
    if segment.batches.is_empty() {
        bail!(
            "{}: no readable record batch ({} damaged, {} skipped)",
            path.display(),
            segment.damaged.len(),
            segment.skipped
        );
    }
    let stored: u64 = segment.batches.iter().map(|b| b.stored_bytes as u64).sum();
    let per_batch: Vec<u64> = segment
        .batches
        .iter()
        .map(|b| b.stored_bytes as u64)
        .collect();
    let mut codecs: Vec<Codec> = segment.batches.iter().map(|b| b.codec).collect();
    codecs.sort_by_key(|c| c.id());
    codecs.dedup();
    let codec_names: Vec<&str> = codecs.iter().map(|c| c.name()).collect();
    let stored_per_batch = match codecs.as_slice() {
        [codec] if *codec != Codec::None => Some((Candidate::new(*codec), per_batch)),
        _ => None,
    };
    let sections: Vec<RecordsSection> = segment.batches.into_iter().map(|b| b.section).collect();
    let raw: u64 = sections.iter().map(|s| s.records.len() as u64).sum();
    let records: u64 = sections.iter().map(|s| u64::from(s.count)).sum();
    let mut description = format!(
        "{}: {} batches as stored ({}), {records} records, {} of records ({} per batch).",
        path.display(),
        sections.len(),
        codec_names.join(", "),
        bytes(raw as f64),
        bytes(raw as f64 / sections.len() as f64),
    );
    if !segment.damaged.is_empty() {
        let _ = write!(
            description,
            " {} damaged batches left out, the first: {}.",
            segment.damaged.len(),
            segment.damaged[0]
        );
    }
    let json = json!({"dir": null, "segment": path.display().to_string(), "records": records,
        "raw_bytes": raw, "batches": sections.len(), "stored_bytes": stored,
        "codecs": codec_names, "damaged": segment.damaged.len(), "skipped": segment.skipped});
    let regroup_from = sections.clone();
    Ok(Input {
        description,
        json,
        sections,
        stored_now: Some((
            format!("the segment as stored ({})", codec_names.join(", ")),
            stored,
        )),
        stored_per_batch,
        regroup: Box::new(move |batch_bytes| {
            kpress_measure::advice::regroup_by_bytes(&regroup_from, batch_bytes)
                .context("regrouping the segment's records")
        }),
    })
}
