//! `kpress bench`: KIP-780's TestCompression for any data. Builds the record batches a
//! producer would send from a dataset (or reads a log segment's batches as stored),
//! and measures each candidate codec's compressed size and one core's compress and
//! decompress time on them.

pub(crate) mod crossover;
mod input;
mod plot;
mod progress;

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{anyhow, bail, Context};
use kpress_codec::{Candidate, Codec, CompressionOptions};
use kpress_measure::render::{self, Input};
use kpress_measure::{pareto_front, TrialResult};
use serde_json::{json, Value};

use input::{Batching, Records, Stored};

/// Batches measured from a dataset when `--batch-count` is not given (TestCompression's).
const DEFAULT_BATCH_COUNT: usize = 100;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub(crate) enum Format {
    /// An aligned table for people.
    #[default]
    Table,
    /// One line per candidate, after a header line.
    Csv,
    /// One JSON document: {"input": ..., "stored": ..., "results": [...]}.
    Json,
}

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// Directory of input files, read in name order: one record per non-empty line
    /// of each file (or one per file with --record-per-file).
    #[arg(long, value_name = "DATASET", required_unless_present_any = ["file", "segment"])]
    dir: Option<PathBuf>,
    /// An input file read as --dir reads its files (repeatable; with or instead of --dir).
    #[arg(long, value_name = "FILE")]
    file: Vec<PathBuf>,
    /// A Kafka log segment (a partition's NNN.log): measures its batches as stored and
    /// what each candidate would make of the same records.
    #[arg(long, value_name = "FILE.log", conflicts_with_all = ["dir", "file", "record_per_file"])]
    segment: Option<PathBuf>,
    /// Each file is one record, instead of each line.
    #[arg(long)]
    record_per_file: bool,
    /// Records per batch built from a dataset.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    batch_size: u32,
    /// Batches as a producer with this `batch.size` groups the records (instead of
    /// --batch-size records each): records are added while the batch stays within it.
    #[arg(long, value_name = "BYTES", conflicts_with_all = ["batch_size", "segment"],
          value_parser = clap::value_parser!(u32).range(64..=(1 << 30)))]
    batch_bytes: Option<u32>,
    /// Compare each candidate, batch by batch, with the same batches as the producer
    /// compresses them (--against) at each of these numbers of records per batch
    /// (comma-separated; no value: 1,2,5,10,14,20,50,100,200,500,1000,2000): where a
    /// rewrite stops coming out larger than the producer's batch. Sizes only, full batches
    /// of the dataset's records (at most --batch-count of them).
    #[arg(long, value_name = "RECORDS,...", value_delimiter = ',', num_args = 0..,
          conflicts_with_all = ["segment", "batch_bytes", "plot"],
          value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    batch_sizes: Option<Vec<u32>>,
    /// With --batch-sizes: what the producer sends, as a candidate spec (default gzip:6,
    /// the Java producer's and librdkafka's default gzip level).
    #[arg(long, value_name = "SPEC", requires = "batch_sizes")]
    against: Option<String>,
    /// Batches to measure: the dataset's records are repeated if they make fewer
    /// (default 100); a segment's first N batches (default all).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=10_000_000))]
    batch_count: Option<u32>,
    /// Codec to measure (none, gzip, snappy, lz4, zstd), with --property options.
    #[arg(long, value_name = "CODEC")]
    compression: Option<String>,
    /// An option of --compression as KEY=VALUE, e.g. compression.zstd.level=1; repeatable
    /// (also spelled --compression-property, as TestCompression does).
    #[arg(
        long = "property",
        alias = "compression-property",
        value_name = "KEY=VALUE",
        requires = "compression"
    )]
    properties: Vec<String>,
    /// A codec with options as one spec, e.g. zstd:3, gzip:6:libdeflate, lz4:9:block=7,
    /// zstd:1:window=22, snappy:block=4096, none; repeatable.
    #[arg(long = "candidate", value_name = "SPEC")]
    candidates: Vec<String>,
    /// Every codec with its useful levels and options (gzip 1/6/9 per provider,
    /// snappy blocks, lz4 9/17 with blocks 4-7, zstd -5..19 and window 22).
    #[arg(long)]
    matrix: bool,
    /// How the results print: table, csv or json, smallest first.
    #[arg(long, value_enum, default_value_t = Format::Table)]
    format: Format,
    /// Also draw compressed ratio against compression MB/s per core, with the Pareto
    /// front marked, to FILE.svg or FILE.png (repeatable).
    #[arg(long, value_name = "FILE.svg|FILE.png")]
    plot: Vec<PathBuf>,
    /// Times each candidate compresses and decompresses everything; the least CPU
    /// time of the passes is reported (also spelled --runs).
    #[arg(
        long,
        alias = "runs",
        default_value_t = 3,
        value_parser = clap::value_parser!(u32).range(1..=100)
    )]
    passes: u32,
}

pub(crate) fn main(args: Args) -> anyhow::Result<ExitCode> {
    for path in &args.plot {
        plot::check_extension(path)?;
    }
    let candidates = candidates(&args)?;
    if candidates.is_empty() && args.segment.is_none() {
        bail!("nothing to measure: name --compression, --candidate or --matrix");
    }
    if let Some(sizes) = &args.batch_sizes {
        return batch_sizes(&args, sizes, &candidates);
    }
    let (records, stored) = match &args.segment {
        Some(path) => {
            let stored = input::read_segment(path, args.batch_count, args.passes as usize)?;
            (stored.records.clone(), Some(stored))
        }
        None => (
            input::read_dataset(
                args.dir.as_deref(),
                &args.file,
                args.record_per_file,
                match args.batch_bytes {
                    Some(bytes) => Batching::Bytes(bytes as usize),
                    None => Batching::Records(args.batch_size as usize),
                },
                args.batch_count.map_or(DEFAULT_BATCH_COUNT, |n| n as usize),
            )?,
            None,
        ),
    };

    let mut progress = progress::Progress::new(candidates.len());
    let mut results = Vec::with_capacity(candidates.len());
    for candidate in &candidates {
        progress.start(candidate);
        let result = kpress_measure::trial(candidate, &records.sections, args.passes as usize)
            .with_context(|| format!("measuring {candidate}"))?;
        results.push(result);
    }
    progress.finish();
    // Smallest first, then fastest.
    results.sort_by(|a, b| {
        a.batch_bytes
            .cmp(&b.batch_bytes)
            .then(b.compress_mb_per_s().total_cmp(&a.compress_mb_per_s()))
    });
    let front = pareto_front(&results);

    let input = Input {
        dir: args.dir.as_ref().map(|d| d.display().to_string()),
        segment: args.segment.as_ref().map(|s| s.display().to_string()),
        records: records.records(),
        raw_bytes: records.raw_bytes(),
        batch_size: (args.segment.is_none() && args.batch_bytes.is_none())
            .then_some(args.batch_size as usize),
        batch_count: records.sections.len(),
    };
    let out = match args.format {
        Format::Table => table(&records, stored.as_ref(), &results, &front),
        Format::Csv => render::to_csv(&results, &front),
        Format::Json => {
            let mut doc = render::to_json(&input, &results, &front);
            doc["input"]["files"] = json!(records.files);
            doc["input"]["batch_bytes"] = json!(args.batch_bytes);
            doc["stored"] = stored.as_ref().map_or(Value::Null, Stored::to_json);
            format!("{doc:#}\n")
        }
    };
    std::io::stdout().write_all(out.as_bytes())?;

    for path in &args.plot {
        let title = format!("kpress bench: {}", records.describe_briefly());
        plot::draw(path, &title, &results, &front)
            .with_context(|| format!("drawing {}", path.display()))?;
    }
    Ok(ExitCode::SUCCESS)
}

/// `--batch-sizes`: each candidate against the producer's codec per records per batch.
fn batch_sizes(args: &Args, sizes: &[u32], candidates: &[Candidate]) -> anyhow::Result<ExitCode> {
    let against: Candidate = args
        .against
        .as_deref()
        .unwrap_or(crossover::PRODUCER_GZIP)
        .parse()
        .map_err(|e| anyhow!("--against {e}"))?;
    let sizes: Vec<usize> = if sizes.is_empty() {
        crossover::DEFAULT_BATCH_SIZES.to_vec()
    } else {
        sizes.iter().map(|&n| n as usize).collect()
    };
    let dataset = input::read_values(args.dir.as_deref(), &args.file, args.record_per_file)?;
    let values: Vec<&[u8]> = dataset.values.iter().map(Vec::as_slice).collect();
    let measured = crossover::measure(
        &values,
        &sizes,
        args.batch_count.map(|n| n as usize),
        &against,
        candidates,
    )?;
    let out = match args.format {
        Format::Table => measured.table(&format!("{} ({} records)", dataset.source, values.len())),
        Format::Csv => measured.csv(),
        Format::Json => format!(
            "{:#}\n",
            measured.json(json!({
                "files": dataset.files,
                "records": values.len(),
                "record_per_file": args.record_per_file,
            }))
        ),
    };
    std::io::stdout().write_all(out.as_bytes())?;
    Ok(ExitCode::SUCCESS)
}

/// The candidates named by --compression/--property, --candidate and --matrix, each once.
fn candidates(args: &Args) -> anyhow::Result<Vec<Candidate>> {
    let mut out: Vec<Candidate> = Vec::new();
    if let Some(name) = &args.compression {
        out.push(compression_candidate(name, &args.properties)?);
    }
    for spec in &args.candidates {
        // The spec's error names the spec and what is wrong with it.
        out.push(spec.parse().map_err(|e| anyhow!("--candidate {e}"))?);
    }
    if args.matrix {
        out.extend(kpress_measure::matrix());
    }
    let mut unique: Vec<Candidate> = Vec::with_capacity(out.len());
    for candidate in out {
        if !unique.contains(&candidate) {
            unique.push(candidate);
        }
    }
    Ok(unique)
}

/// `--compression zstd --property compression.zstd.level=1`, as TestCompression takes them.
fn compression_candidate(name: &str, properties: &[String]) -> anyhow::Result<Candidate> {
    // The codec alone parses as a spec, which names the allowed codecs when it is not one.
    let codec = name
        .parse::<Candidate>()
        .with_context(|| format!("--compression {name}"))?
        .codec();
    let mut options = CompressionOptions::default();
    for property in properties {
        let (key, value) = property
            .split_once('=')
            .ok_or_else(|| anyhow!("--property {property:?} is not KEY=VALUE"))?;
        let key = key.trim();
        options
            .set(key, value.trim())
            .with_context(|| format!("--property {property}"))?;
        if !Candidate::keys(codec).contains(&key) {
            bail!(
                "--property {property}: not an option of {codec}: {codec} takes {}",
                keys_of(codec)
            );
        }
    }
    Ok(Candidate::from_options(codec, &options))
}

fn keys_of(codec: Codec) -> String {
    match Candidate::keys(codec) {
        [] => "no options".to_owned(),
        keys => keys.join(", "),
    }
}

fn table(
    records: &Records,
    stored: Option<&Stored>,
    results: &[TrialResult],
    front: &[usize],
) -> String {
    let mut out = String::new();
    match stored {
        Some(stored) => out.push_str(&stored.describe()),
        None => out.push_str(&records.describe()),
    }
    out.push('\n');
    if !results.is_empty() {
        out.push('\n');
        out.push_str(&render::to_table(results, front));
        out.push_str(
            "\navg batch B: compressed batch with its 61-byte header; µs: CPU time per batch, \
             one core; ratio: batches compressed / uncompressed; * = Pareto front \
             (smallest for its speed)\n",
        );
    }
    out
}
