//! Inputs for the benches: the repository's datasets cut into Kafka record batches.
//!
//! Records are the dataset's lines, framed as Kafka v2 records (no key, no headers)
//! by kpress-batch's test builder, grouped into batches of a target size.

use criterion::measurement::WallTime;
use criterion::{BenchmarkGroup, BenchmarkId, Criterion};
use kpress_batch::builder::{encode_records, BatchBuilder, Record};
use kpress_batch::HEADER_LEN;
use kpress_codec::{Codec, CompressionOptions, Compressor, Decompressor};
use kpress_measure::thread_cpu_time;
use std::hint::black_box;
use std::path::PathBuf;
use std::time::Duration;

/// The two datasets in `datasets/`.
pub const DATASETS: [&str; 2] = ["apache_access.log", "nginxplus_status.ndjson"];

/// Reads a dataset from the repository's `datasets/` (or `KPRESS_DATASETS`).
pub fn load_dataset(name: &str) -> Vec<u8> {
    let dir = std::env::var_os("KPRESS_DATASETS")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../datasets"));
    let path = dir.join(name);
    std::fs::read(&path)
        .unwrap_or_else(|e| panic!("reading {}: {e} (set KPRESS_DATASETS)", path.display()))
}

/// The dataset's lines as records, grouped into batches of about `target_bytes`
/// of record values, as a producer's accumulator would group them.
pub fn record_groups(data: &[u8], target_bytes: usize) -> Vec<Vec<Record>> {
    let mut groups = Vec::new();
    let (mut group, mut group_bytes) = (Vec::new(), 0);
    for line in data.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
        // A record's framing adds at most 16 bytes to its value.
        if !group.is_empty() && group_bytes + line.len() + 16 > target_bytes {
            groups.push(std::mem::take(&mut group));
            group_bytes = 0;
        }
        group_bytes += line.len() + 16;
        group.push(Record::value(line));
    }
    if !group.is_empty() {
        groups.push(group);
    }
    groups
}

/// Uncompressed records sections of about `target_bytes` each.
pub fn record_sections(data: &[u8], target_bytes: usize) -> Vec<Vec<u8>> {
    record_groups(data, target_bytes)
        .iter()
        .map(|g| encode_records(g))
        .collect()
}

/// Full RecordBatch v2s of about `target_bytes` of records, compressed with `codec`.
pub fn batches(
    data: &[u8],
    target_bytes: usize,
    codec: Codec,
    options: &CompressionOptions,
) -> Vec<Vec<u8>> {
    let builder = BatchBuilder {
        codec,
        options: options.clone(),
        ..BatchBuilder::default()
    };
    record_groups(data, target_bytes)
        .iter()
        .map(|g| builder.build(g).expect("building a bench batch"))
        .collect()
}

/// Options with one key changed from Kafka's defaults.
pub fn options_with(pairs: &[(&str, i64)]) -> CompressionOptions {
    let mut options = CompressionOptions::default();
    for (key, value) in pairs {
        options.set_int(key, *value).expect("bench option in range");
    }
    options
}

/// Prints a case's compression ratio and appends it to
/// `target/criterion/kpress-ratios.tsv` (group, case, raw bytes, compressed bytes).
pub fn ratio_log(group: &str, case: &str, raw_bytes: usize, compressed_bytes: usize) {
    let ratio = compressed_bytes as f64 / raw_bytes as f64;
    eprintln!("ratio {group}/{case}: {ratio:.4} ({compressed_bytes} / {raw_bytes} bytes)");
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/criterion");
    if std::fs::create_dir_all(&dir).is_ok() {
        use std::io::Write;
        if let Ok(mut f) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.join("kpress-ratios.tsv"))
        {
            let _ = writeln!(f, "{group}\t{case}\t{raw_bytes}\t{compressed_bytes}");
        }
    }
}

/// The floor a batch rewrite is measured against: the same two codec calls on a
/// batch's records payload alone, with no framing, policy or CRC.
pub struct BareCodecs {
    decompressor: Decompressor,
    compressor: Compressor,
    scratch: Vec<u8>,
    out: Vec<u8>,
}

impl std::fmt::Debug for BareCodecs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BareCodecs").finish_non_exhaustive()
    }
}

impl BareCodecs {
    /// Codecs that compress into `to` with `options`.
    pub fn new(to: Codec, options: &CompressionOptions) -> BareCodecs {
        BareCodecs {
            decompressor: Decompressor::new(),
            compressor: Compressor::new(to, options),
            scratch: Vec::new(),
            out: Vec::new(),
        }
    }

    /// Decompresses `batch`'s records payload from `from` (unless uncompressed) and
    /// compresses it again.
    pub fn recode(&mut self, from: Codec, batch: &[u8]) {
        let payload = &batch[HEADER_LEN..];
        self.scratch.clear();
        self.out.clear();
        let raw = if from == Codec::None {
            payload
        } else {
            self.decompressor
                .decompress(from, black_box(payload), 64 << 20, &mut self.scratch)
                .expect("decompress");
            &self.scratch[..]
        };
        self.compressor
            .compress(raw, &mut self.out)
            .expect("compress");
    }
}

/// Runs `measured` and `other` in turn, `iters` times each, and returns the CPU time
/// this thread spent in `measured`: for `Bencher::iter_custom`. A bench and its
/// baseline, each measured this way with the other as `other`, see the same cache and
/// clock conditions, and time the other engineers' processes take on this shared
/// 2-core machine is not counted, so their ratio holds far steadier than wall times.
pub fn alternating(iters: u64, mut measured: impl FnMut(), mut other: impl FnMut()) -> Duration {
    let mut total = Duration::ZERO;
    for _ in 0..iters {
        let start = thread_cpu_time();
        measured();
        total += thread_cpu_time().saturating_sub(start);
        other();
    }
    total
}

/// Benches `rewrite` as `name` and the bare-codec floor `bare` as `bare-codecs`, both
/// for `case`, each timed by [`alternating`] with the other run in between.
pub fn bench_against_floor(
    group: &mut BenchmarkGroup<'_, WallTime>,
    name: &str,
    case: &str,
    rewrite: &mut impl FnMut(),
    bare: &mut impl FnMut(),
) {
    group.bench_function(BenchmarkId::new(name, case), |b| {
        b.iter_custom(|iters| alternating(iters, &mut *rewrite, &mut *bare))
    });
    group.bench_function(BenchmarkId::new("bare-codecs", case), |b| {
        b.iter_custom(|iters| alternating(iters, &mut *bare, &mut *rewrite))
    });
}

/// Appends how many requests one iteration of a case handles to
/// `target/criterion/kpress-requests.tsv` (group, case, requests), so `report.py` can
/// give the time per request.
pub fn requests_log(group: &str, case: &str, requests: usize) {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/criterion");
    if std::fs::create_dir_all(&dir).is_ok() {
        use std::io::Write;
        if let Ok(mut f) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.join("kpress-requests.tsv"))
        {
            let _ = writeln!(f, "{group}\t{case}\t{requests}");
        }
    }
}

/// criterion for this machine's 2 shared cores: short runs of 10 samples, so the many
/// cases finish in minutes; compare ratios within one run (differences under ~15%
/// are noise).
pub fn short_runs(measurement: Duration) -> Criterion {
    Criterion::default()
        .sample_size(10)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(measurement)
}
