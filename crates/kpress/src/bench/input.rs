//! The records `kpress bench` measures: built from a dataset's files, or read from a
//! log segment as stored.

use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context};
use kpress_batch::{RecordBatch, HEADER_LEN};
use kpress_codec::Codec;
use kpress_measure::{RecordsSection, SegmentLimits};
use serde_json::{json, Value};

/// Largest input file read whole: a dataset sample or a segment (Kafka's default
/// segment.bytes is 1 GiB).
const MAX_FILE_BYTES: u64 = 1 << 30;
/// Most records bytes built from a dataset (its records repeated up to --batch-count).
const MAX_MEASURED_BYTES: u64 = 1 << 30;

/// Records sections to measure and where they came from.
#[derive(Debug, Clone)]
pub(super) struct Records {
    pub(super) sections: Vec<RecordsSection>,
    pub(super) files: Vec<String>,
    /// How the sections were made, for people.
    source: String,
}

impl Records {
    pub(super) fn records(&self) -> u64 {
        self.sections.iter().map(|s| u64::from(s.count)).sum()
    }

    pub(super) fn raw_bytes(&self) -> u64 {
        self.sections.iter().map(|s| s.records.len() as u64).sum()
    }

    pub(super) fn describe(&self) -> String {
        format!(
            "{}: {} batches, {} records, {} bytes of records ({:.0} per batch)",
            self.source,
            self.sections.len(),
            self.records(),
            self.raw_bytes(),
            self.raw_bytes() as f64 / self.sections.len().max(1) as f64
        )
    }

    pub(super) fn describe_briefly(&self) -> String {
        format!(
            "{}, {} batches of {:.0} B",
            self.source,
            self.sections.len(),
            self.raw_bytes() as f64 / self.sections.len().max(1) as f64
        )
    }
}

/// How records are grouped into batches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Batching {
    /// This many records per batch (KIP-780's `--batch-size`).
    Records(usize),
    /// As a producer with this `batch.size` groups them.
    Bytes(usize),
}

/// Every record of a dataset's files, one per line (or per file).
pub(super) struct Values {
    pub(super) values: Vec<Vec<u8>>,
    pub(super) files: Vec<String>,
    pub(super) source: String,
}

/// Reads every record of `dir`'s files and `files`, as [`read_dataset`] reads them.
pub(super) fn read_values(
    dir: Option<&Path>,
    files: &[PathBuf],
    record_per_file: bool,
) -> anyhow::Result<Values> {
    let paths = dataset_paths(dir, files)?;
    let mut values = Vec::new();
    let mut total: u64 = 0;
    for path in &paths {
        let data = read_bounded(path)?;
        total += data.len() as u64;
        if total > MAX_MEASURED_BYTES {
            bail!("the files hold more than {MAX_MEASURED_BYTES} bytes: measure a sample");
        }
        if record_per_file {
            values.push(data);
        } else {
            values.extend(kpress_measure::lines(&data).map(<[u8]>::to_vec));
        }
    }
    if values.is_empty() {
        bail!("no records in the files: every file is empty or blank");
    }
    let names: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
    let source = match dir {
        Some(dir) if files.is_empty() => dir.display().to_string(),
        _ => names.join(", "),
    };
    Ok(Values {
        values,
        files: names,
        source,
    })
}

/// `dir`'s files (regular, not hidden, in name order), then `files`.
fn dataset_paths(dir: Option<&Path>, files: &[PathBuf]) -> anyhow::Result<Vec<PathBuf>> {
    let mut paths = Vec::new();
    if let Some(dir) = dir {
        let entries = fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))?;
        let mut found = Vec::new();
        for entry in entries {
            let entry = entry.with_context(|| format!("reading {}", dir.display()))?;
            let hidden = entry.file_name().to_string_lossy().starts_with('.');
            let file = entry.file_type().is_ok_and(|t| t.is_file())
                || fs::metadata(entry.path()).is_ok_and(|m| m.is_file());
            if file && !hidden {
                found.push(entry.path());
            }
        }
        found.sort();
        if found.is_empty() {
            bail!("{}: no files to read records from", dir.display());
        }
        paths.extend(found);
    }
    paths.extend(files.iter().cloned());
    Ok(paths)
}

/// Reads `dir`'s files (regular, not hidden, in name order) and `files`, until they hold
/// the records of `batch_count` batches, and builds `batch_count` sections, repeating
/// the records when there are fewer.
pub(super) fn read_dataset(
    dir: Option<&Path>,
    files: &[PathBuf],
    record_per_file: bool,
    batching: Batching,
    batch_count: usize,
) -> anyhow::Result<Records> {
    let paths = dataset_paths(dir, files)?;

    // Records wanted, or (by bytes) file bytes that hold enough records.
    let (wanted_records, wanted_bytes) = match batching {
        Batching::Records(n) => (n.saturating_mul(batch_count), usize::MAX),
        Batching::Bytes(n) => (usize::MAX, n.saturating_mul(batch_count)),
    };
    let mut datas = Vec::new();
    let (mut have_records, mut have_bytes) = (0usize, 0usize);
    for path in &paths {
        if have_records >= wanted_records || have_bytes >= wanted_bytes {
            break;
        }
        let data = read_bounded(path)?;
        have_records += if record_per_file {
            1
        } else {
            kpress_measure::lines(&data).count()
        };
        have_bytes += data.len();
        datas.push((path, data));
    }
    let mut values: Vec<&[u8]> = Vec::new();
    for (_, data) in &datas {
        if record_per_file {
            values.push(data);
        } else {
            values.extend(kpress_measure::lines(data));
        }
    }
    values.truncate(wanted_records);
    if values.is_empty() {
        bail!(
            "no records in {}: every file is empty{}",
            paths
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", "),
            if record_per_file { "" } else { " or blank" }
        );
    }
    let used: Vec<String> = datas.iter().map(|(p, _)| p.display().to_string()).collect();
    let built = match batching {
        Batching::Records(n) => kpress_measure::sections(&values, n),
        Batching::Bytes(n) => kpress_measure::sections_by_bytes(&values, n),
    };
    // Repeating the records must not build more than can be measured in memory.
    let measured: u64 = built
        .iter()
        .cycle()
        .take(batch_count)
        .map(|s| s.records.len() as u64)
        .sum();
    if measured > MAX_MEASURED_BYTES {
        bail!(
            "{batch_count} batches would be {measured} bytes of records; the most measured at \
             once is {MAX_MEASURED_BYTES}: lower --batch-count, --batch-size or --batch-bytes"
        );
    }
    let sections = kpress_measure::cycle_to(built, batch_count);
    let source = match dir {
        Some(dir) if files.is_empty() => dir.display().to_string(),
        _ => used.join(", "),
    };
    Ok(Records {
        sections,
        files: used,
        source: format!(
            "{source} ({} per {})",
            if record_per_file {
                "a record"
            } else {
                "records"
            },
            if record_per_file { "file" } else { "line" },
        ),
    })
}

fn read_bounded(path: &Path) -> anyhow::Result<Vec<u8>> {
    let len = fs::metadata(path)
        .with_context(|| format!("reading {}", path.display()))?
        .len();
    if len > MAX_FILE_BYTES {
        bail!(
            "{}: {len} bytes is more than the {MAX_FILE_BYTES} bytes read whole; measure a sample",
            path.display()
        );
    }
    fs::read(path).with_context(|| format!("reading {}", path.display()))
}

/// A segment's batches as stored.
#[derive(Debug, Clone)]
pub(super) struct Stored {
    pub(super) records: Records,
    path: String,
    stored_bytes: u64,
    /// Batches per stored codec, in codec id order.
    codecs: Vec<(Codec, usize)>,
    decompress: Duration,
    damaged: Vec<kpress_measure::DamagedBatch>,
    skipped: usize,
}

/// Reads the segment at `path` (its first `batch_count` data batches), reports each
/// damaged batch on stderr, and times decompressing the stored batches.
pub(super) fn read_segment(
    path: &Path,
    batch_count: Option<u32>,
    passes: usize,
) -> anyhow::Result<Stored> {
    let data = read_bounded(path)?;
    let mut segment = kpress_measure::read_segment(&data, SegmentLimits::default());
    for damaged in &segment.damaged {
        eprintln!("kpress: warning: {}: {damaged}; skipped", path.display());
    }
    if let Some(count) = batch_count {
        segment.batches.truncate(count as usize);
    }
    if segment.batches.is_empty() {
        bail!(
            "{}: no readable record batch ({} damaged, {} without data records)",
            path.display(),
            segment.damaged.len(),
            segment.skipped
        );
    }
    // read_segment framed each batch at its position, so each parses again.
    let payloads: Vec<(Codec, &[u8], usize)> = segment
        .batches
        .iter()
        .filter_map(|b| {
            let batch = RecordBatch::parse(data.get(b.position..)?).ok()?;
            Some((b.codec, batch.records(), b.section.records.len()))
        })
        .collect();
    let decompress = kpress_measure::decompress_stored(&payloads, passes)
        .with_context(|| format!("{}: decompressing the stored batches", path.display()))?;
    let mut codecs: Vec<(Codec, usize)> = Vec::new();
    for b in &segment.batches {
        match codecs.iter_mut().find(|(c, _)| *c == b.codec) {
            Some((_, n)) => *n += 1,
            None => codecs.push((b.codec, 1)),
        }
    }
    codecs.sort_by_key(|(c, _)| c.id());
    let stored_bytes = segment.batches.iter().map(|b| b.stored_bytes as u64).sum();
    let display = path.display().to_string();
    Ok(Stored {
        stored_bytes,
        codecs,
        decompress,
        skipped: segment.skipped,
        records: Records {
            sections: segment.batches.into_iter().map(|b| b.section).collect(),
            files: vec![display.clone()],
            source: format!("{display} (as stored)"),
        },
        damaged: segment.damaged,
        path: display,
    })
}

impl Stored {
    /// Stored batches over the same batches uncompressed, as `TrialResult::ratio`.
    fn ratio(&self) -> f64 {
        let uncompressed =
            self.records.raw_bytes() + (HEADER_LEN * self.records.sections.len()) as u64;
        self.stored_bytes as f64 / uncompressed.max(1) as f64
    }

    fn decompress_mb_per_s(&self) -> f64 {
        let seconds = self.decompress.as_secs_f64();
        if seconds <= 0.0 {
            return 0.0;
        }
        self.records.raw_bytes() as f64 / 1e6 / seconds
    }

    fn codec_list(&self) -> String {
        self.codecs
            .iter()
            .map(|(c, n)| format!("{c} {n}"))
            .collect::<Vec<_>>()
            .join(", ")
    }

    pub(super) fn describe(&self) -> String {
        let n = self.records.sections.len();
        let mut out = format!(
            "{}: {n} batches as stored ({}), {} records, {} bytes of records ({:.0} per batch)\n\
             stored: {} bytes, ratio {:.4}, avg batch {:.1} B, decompress {:.1} µs per batch, \
             {:.1} MB/s per core",
            self.path,
            self.codec_list(),
            self.records.records(),
            self.records.raw_bytes(),
            self.records.raw_bytes() as f64 / n as f64,
            self.stored_bytes,
            self.ratio(),
            self.stored_bytes as f64 / n as f64,
            self.decompress.as_secs_f64() * 1e6 / n as f64,
            self.decompress_mb_per_s(),
        );
        if !self.damaged.is_empty() || self.skipped > 0 {
            out.push_str(&format!(
                "\nleft out: {} damaged batches, {} without data records",
                self.damaged.len(),
                self.skipped
            ));
        }
        out
    }

    pub(super) fn to_json(&self) -> Value {
        json!({
            "batches": self.records.sections.len(),
            "records": self.records.records(),
            "raw_bytes": self.records.raw_bytes(),
            "batch_bytes": self.stored_bytes,
            "ratio": self.ratio(),
            "codecs": self.codecs.iter().map(|(c, n)| json!({"codec": c.name(), "batches": n})).collect::<Vec<_>>(),
            "decompress_seconds": self.decompress.as_secs_f64(),
            "decompress_mb_per_s": self.decompress_mb_per_s(),
            "damaged": self.damaged.iter().map(|d| json!({
                "position": d.position, "base_offset": d.base_offset, "reason": d.reason,
            })).collect::<Vec<_>>(),
            "skipped": self.skipped,
        })
    }
}
