//! `kpress advise`: which codec and options to write a topic with, for a goal (the
//! smallest, the fastest, the smallest within a CPU floor), from a dataset or segment
//! measured here or from the proxy's shadow trials; with one sentence per trade-off,
//! the producer batching that would help more, and paste-ready `[[topics]]` rules.

mod autopilot;
mod batching;
mod input;
mod live;
mod metrics_page;
mod offline;
mod policy_block;
mod prometheus;
mod rank;
mod report;
mod shadow;
mod small_batches;

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::bail;

pub(crate) use rank::Goal;

#[derive(Debug, clap::Args)]
#[command(group(
    clap::ArgGroup::new("input").required(true).args(["dir", "segment", "from_metrics"])
))]
pub(crate) struct Args {
    /// A dataset: every file in the directory, one record per non-empty line.
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,
    /// A Kafka log segment (.log): its batches as stored, at their own batch size.
    #[arg(long, value_name = "FILE.log")]
    segment: Option<PathBuf>,
    /// kpress's metrics page (http://HOST:PORT/metrics, a file:// URL or a saved page):
    /// advice per topic from the proxy's [shadow] trials.
    #[arg(long, value_name = "URL")]
    from_metrics: Option<String>,
    /// What to optimise: the smallest stored bytes, or the most MB/s per core. A floor
    /// alone means size within the floor.
    #[arg(long, value_enum, default_value_t = Goal::Size)]
    goal: Goal,
    /// Floor: at least this many MB (10^6 bytes) of records compressed per second on
    /// one core.
    #[arg(long, value_name = "MBPS")]
    min_mbps: Option<f64>,
    /// Floor: at most this many CPU milliseconds per MB of records.
    #[arg(long, value_name = "MS")]
    max_cpu_ms_per_mb: Option<f64>,
    /// Measure every candidate of `kpress bench --matrix` instead of the quicker set.
    #[arg(long, conflicts_with_all = ["candidates", "from_metrics"])]
    matrix: bool,
    /// The candidates to measure, comma-separated specs (zstd:3,gzip:6:libdeflate).
    #[arg(
        long,
        value_delimiter = ',',
        value_name = "SPECS",
        conflicts_with = "from_metrics"
    )]
    candidates: Vec<kpress_codec::Candidate>,
    /// With --dir: records per batch (KIP-780's --batch-size) instead of --batch-bytes.
    #[arg(long, value_name = "RECORDS", conflicts_with = "batch_bytes")]
    batch_size: Option<usize>,
    /// With --dir: group records as a producer with this batch.size does (Kafka's
    /// default, 16384, unless given).
    #[arg(long, value_name = "BYTES")]
    batch_bytes: Option<usize>,
    /// With --dir: what the producer writes now (Kafka's producer default is none);
    /// the codec change and the batching change are weighed against it.
    #[arg(long, value_name = "SPEC")]
    current: Option<kpress_codec::Candidate>,
    /// With --dir: read at most this many bytes of the dataset's files.
    #[arg(long, value_name = "BYTES", default_value_t = input::DEFAULT_MAX_INPUT_BYTES)]
    max_input_bytes: u64,
    /// Times each candidate compresses the records; the least CPU time counts.
    #[arg(long, default_value_t = 1)]
    passes: usize,
    /// The `match` of the printed rule (a topic name, glob or re:<regex>).
    #[arg(long, value_name = "NAME", conflicts_with = "from_metrics")]
    topic: Option<String>,
    /// With --from-metrics: read the page twice this many seconds apart and advise on
    /// what happened between (rates per second) instead of over the counters' life.
    #[arg(long, value_name = "SECONDS")]
    interval: Option<f64>,
    #[arg(long, value_enum, default_value_t = Format::Text)]
    format: Format,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Format {
    Text,
    Json,
}

pub(crate) fn main(args: Args) -> anyhow::Result<ExitCode> {
    let floors = rank::Floors {
        min_mbps: args.min_mbps,
        max_cpu_ms_per_mb: args.max_cpu_ms_per_mb,
    };
    for (name, value) in [
        ("--min-mbps", args.min_mbps),
        ("--max-cpu-ms-per-mb", args.max_cpu_ms_per_mb),
        ("--interval", args.interval),
    ] {
        if let Some(v) = value {
            if !(v.is_finite() && v > 0.0) {
                bail!("{name} {v}: expected a number above 0");
            }
        }
    }
    let only_with_dir = [
        ("--batch-size", args.batch_size.is_some()),
        ("--batch-bytes", args.batch_bytes.is_some()),
        ("--current", args.current.is_some()),
    ];
    if args.dir.is_none() {
        if let Some((name, _)) = only_with_dir.iter().find(|(_, given)| *given) {
            bail!("{name} applies to --dir only (a segment's batches are as stored)");
        }
    }
    if args.interval.is_some() && args.from_metrics.is_none() {
        bail!("--interval applies to --from-metrics only");
    }
    let output = if let Some(source) = &args.from_metrics {
        live::run(source, args.interval, args.goal, &floors, args.format)?
    } else {
        offline::run(&args, &floors)?
    };
    print!("{output}");
    Ok(ExitCode::SUCCESS)
}

/// `match = …` when the user gave no topic: a glob they are to replace.
const PLACEHOLDER_MATCH: &str = "your-topic-*";
