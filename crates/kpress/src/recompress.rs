//! `kpress recompress`: rewrites every record batch of a file of concatenated batches
//! (a Kafka log segment) into one codec, offline, and prints what it did. The file is
//! streamed batch by batch, batches rewritten on `--threads` cores and written in order.

mod stream;

use anyhow::{anyhow, Context};
use clap::error::ErrorKind;
use kpress_batch::{
    PassReason, RewritePolicy, RewriteStats, Target, DEFAULT_MAX_BATCH_BYTES,
    DEFAULT_MAX_DECOMPRESSED_BYTES,
};
use kpress_codec::CompressionOptions;
use std::io::{BufReader, BufWriter, Write};
use std::num::NonZeroUsize;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::format::Format;

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// File of concatenated record batches, e.g. a partition's 00000000000000000000.log.
    #[arg(long)]
    input: PathBuf,
    /// Where to write the rewritten batches.
    #[arg(long)]
    output: PathBuf,
    /// Target codec: producer (keep every batch as is), none, gzip, snappy, lz4 or zstd.
    #[arg(long)]
    compression: String,
    /// A compression option as KEY=VALUE, e.g. compression.zstd.level=19; repeatable.
    #[arg(long = "property", value_name = "KEY=VALUE")]
    properties: Vec<String>,
    /// codec-differs: rewrite batches not already in the target codec;
    /// always: also re-encode those at the given options.
    #[arg(long, default_value = "codec-differs")]
    recompress: String,
    /// Largest batch a rewrite may produce; larger rewrites keep the original batch.
    #[arg(long, default_value_t = DEFAULT_MAX_BATCH_BYTES)]
    max_batch_bytes: usize,
    /// Most bytes a batch may decompress to; larger batches are kept as they are.
    #[arg(long, default_value_t = DEFAULT_MAX_DECOMPRESSED_BYTES)]
    max_decompressed_bytes: usize,
    /// Keep the original batch unless its rewrite is smaller (by default the target
    /// codec is stored whatever its size, as Kafka's compression.type stores its codec).
    #[arg(long)]
    only_if_smaller: bool,
    /// Not taken: refused with what to write instead (see `ALLOW_GROWTH_REFUSED`).
    #[arg(long, hide = true)]
    allow_growth: bool,
    /// text (default) or json: the summary as one JSON document on stdout.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    format: Format,
    /// Threads rewriting batches (default: the cores available); batches are still
    /// written in input order.
    #[arg(long)]
    threads: Option<NonZeroUsize>,
}

/// `--allow-growth` is the opposite of `--only-if-smaller`, and what it asked for is the
/// default; a usage error (exit 2) says so rather than clap's bare "unexpected argument".
const ALLOW_GROWTH_REFUSED: &str = "unexpected argument '--allow-growth': the target codec is \
     stored whatever its size by default, as Kafka's compression.type does; use \
     --only-if-smaller to keep the original batch unless the rewrite is smaller\n";

fn policy(args: &Args) -> anyhow::Result<RewritePolicy> {
    let mut options = CompressionOptions::default();
    for property in &args.properties {
        let (key, value) = property
            .split_once('=')
            .ok_or_else(|| anyhow!("--property {property:?} is not KEY=VALUE"))?;
        options.set(key.trim(), value)?;
    }
    Ok(RewritePolicy {
        target: Target::from_name(&args.compression, options)?,
        mode: args.recompress.parse()?,
        max_batch_bytes: args.max_batch_bytes,
        max_decompressed_bytes: args.max_decompressed_bytes,
        only_if_smaller: args.only_if_smaller,
        ..RewritePolicy::default()
    })
}

pub(crate) fn main(args: Args) -> anyhow::Result<ExitCode> {
    if args.allow_growth {
        clap::Error::raw(ErrorKind::UnknownArgument, ALLOW_GROWTH_REFUSED).exit();
    }
    let policy = policy(&args)?;
    let input = std::fs::File::open(&args.input)
        .with_context(|| format!("reading {}", args.input.display()))?;
    let input_len = input
        .metadata()
        .with_context(|| format!("reading {}", args.input.display()))?
        .len();
    // Created before the work, so an unwritable output fails before minutes of compression.
    let output_file = std::fs::File::create(&args.output)
        .with_context(|| format!("creating {}", args.output.display()))?;
    let threads = args
        .threads
        .or_else(|| std::thread::available_parallelism().ok())
        .map_or(1, NonZeroUsize::get);

    let started = Instant::now();
    let mut reader = BufReader::new(input);
    let mut writer = BufWriter::new(output_file);
    let stats = stream::recompress_stream(
        &mut reader,
        input_len,
        &mut writer,
        &policy,
        stream::Pipeline::for_threads(threads),
    )
    .and_then(|stats| writer.flush().map(|()| stats))
    .with_context(|| {
        format!(
            "recompressing {} into {}",
            args.input.display(),
            args.output.display()
        )
    })?;
    let elapsed = started.elapsed();

    let warning = not_a_segment_warning(&args, &stats);
    match args.format {
        Format::Text => print!("{}", summary(&args, &policy, &stats, elapsed)),
        Format::Json => println!(
            "{:#}",
            summary_json(&args, &policy, &stats, elapsed, warning.as_deref())
        ),
    }
    if let Some(warning) = warning {
        eprintln!("kpress: warning: {warning}");
    }
    Ok(ExitCode::SUCCESS)
}

/// Says so when the input did not read as record batches: a wrong file is then copied
/// unchanged, which the summary's counts alone leave the operator to work out.
fn not_a_segment_warning(args: &Args, stats: &RewriteStats) -> Option<String> {
    let malformed = stats.passed_for(PassReason::Malformed);
    if stats.batches() == 0 {
        return Some(format!(
            "{} holds no record batches: nothing was rewritten",
            args.input.display()
        ));
    }
    if malformed == 0 {
        return None;
    }
    let rewritten = if stats.batches_rewritten == 0 {
        "nothing was rewritten"
    } else {
        "those bytes were copied unchanged"
    };
    Some(format!(
        "{malformed} of {} batches in {} are not valid record batches, {rewritten}: \
         is it a Kafka log segment (a partition's 00000000000000000000.log)?",
        stats.batches(),
        args.input.display(),
    ))
}

/// The summary's numbers as one JSON document; every pass reason is listed, with 0
/// where none passed for it.
fn summary_json(
    args: &Args,
    policy: &RewritePolicy,
    stats: &RewriteStats,
    elapsed: Duration,
    warning: Option<&str>,
) -> Value {
    let passed_by_reason: serde_json::Map<String, Value> = stats
        .passed_by_reason()
        .map(|(reason, count)| (reason.as_str().to_owned(), json!(count)))
        .collect();
    json!({
        "input": args.input.display().to_string(),
        "output": args.output.display().to_string(),
        "target": policy.target.name(),
        "recompress": policy.mode.name(),
        "batches_rewritten": stats.batches_rewritten,
        "batches_grown": stats.batches_grown,
        "batches_passed": stats.batches_passed(),
        "passed_by_reason": passed_by_reason,
        "bytes_in": stats.bytes_in,
        "bytes_out": stats.bytes_out,
        "ratio": stats.ratio(),
        "elapsed_seconds": elapsed.as_secs_f64(),
        "warnings": warning.into_iter().collect::<Vec<_>>(),
    })
}

fn summary(args: &Args, policy: &RewritePolicy, stats: &RewriteStats, elapsed: Duration) -> String {
    let mut s = format!(
        "{} -> {} (target {}, recompress {})\n",
        args.input.display(),
        args.output.display(),
        policy.target.name(),
        policy.mode,
    );
    s += &format!("batches rewritten: {}\n", stats.batches_rewritten);
    s += &format!("batches grown: {}\n", stats.batches_grown);
    s += &format!("batches passed through: {}\n", stats.batches_passed());
    for (reason, count) in stats.passed_by_reason().filter(|(_, n)| *n > 0) {
        s += &format!("  {}: {count}\n", reason.as_str());
    }
    s += &format!(
        "bytes in: {}\nbytes out: {}\nratio: {:.4}\n",
        stats.bytes_in,
        stats.bytes_out,
        stats.ratio()
    );
    let secs = elapsed.as_secs_f64();
    let rate = if secs > 0.0 {
        format!(" ({:.1} MB/s in)", stats.bytes_in as f64 / secs / 1e6)
    } else {
        String::new()
    };
    s += &format!("elapsed: {secs:.3} s{rate}\n");
    s
}
