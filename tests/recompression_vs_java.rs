//! The "Recompression per core" and "gzip at Kafka-6 size" targets, measured side
//! by side in one run (ignored: a measurement, run by `scripts/load.sh` or by hand with
//! a release build):
//!
//!   cargo test --release -p kpress-tests --test recompression_vs_java -- --ignored --nocapture
//!
//! A real 4.1.1 broker stores what the Java producer and kcat (librdkafka) write of the
//! apache log and the NGINX ndjson, in each codec, with each client's default batching
//! and with 1 MiB batches, into `compression.type=producer` topics; the segments are
//! copied out and, per source codec and batching, concatenated (and repeated up to
//! `RECOMPRESSION_MIN_MB` MB of record values, 32 by default) into one input.
//!
//! Per codec pair, in alternating rounds (`RECOMPRESSION_ROUNDS`, 3 by default):
//!  - Kafka's Java path (`tests/java-bench/KafkaRecompression.java`): every batch
//!    checked, its records read and rebuilt into the target codec as the broker's
//!    LogValidator does, on one thread, in a warm JVM, timed by that thread's CPU clock;
//!  - kpress: `kpress recompress` on the same input, timed by the process's CPU (user +
//!    system, all threads, from `wait4`), so its figure is per core however many
//!    threads it uses.
//!
//! Throughput is MB of record values per CPU second; medians are reported. Then, for
//! each gzip provider, the lowest level whose output is within ±3% of Java's gzip-6 size
//! is timed the same way against Java's gzip 6. The report (markdown) goes to stdout
//! and to `$RECOMPRESSION_REPORT`. Only correctness is asserted: every output, Java's and
//! kpress's, is read back by kafka-clients (CRC of every batch, every record) as exactly
//! the source's records in the target codec. Speed is reported, never asserted.

use kpress_batch::{Recompressor, RewritePolicy, RewriteStats, Target};
use kpress_codec::CompressionOptions;
use kpress_tests::cluster::KafkaCluster;
use kpress_tests::compression::Compression;
use kpress_tests::cpu_time::{run_cpu_timed, thread_cpu_seconds};
use kpress_tests::data::Dataset;
use kpress_tests::java_client::{JavaClient, ProduceOptions};
use kpress_tests::java_recompression::{JavaRecompression, JavaRewrite, VerifiedFile};
use kpress_tests::kpress::{kpress_binary, recompress_command, RecompressOptions};
use kpress_tests::{kafka_version, kcat};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// How a client batched its records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Batching {
    /// Each client's defaults (Java: batch.size 16384, linger.ms 5; librdkafka:
    /// batch.size 1000000, linger.ms 5).
    ClientDefault,
    /// batch.size 1 MiB and a linger long enough to fill it.
    OneMib,
}

impl Batching {
    const ALL: [Batching; 2] = [Batching::ClientDefault, Batching::OneMib];

    fn short_name(self) -> &'static str {
        match self {
            Batching::ClientDefault => "default",
            Batching::OneMib => "1mib",
        }
    }

    fn label(self) -> &'static str {
        match self {
            Batching::ClientDefault => "client default",
            Batching::OneMib => "1 MiB",
        }
    }

    fn java_options(self, codec: Compression) -> ProduceOptions {
        let (batch_size, linger_ms) = match self {
            Batching::ClientDefault => (16_384, 5),
            Batching::OneMib => (1_048_576, 200),
        };
        ProduceOptions {
            compression: codec,
            partition: Some(0),
            batch_size,
            linger_ms,
            ..ProduceOptions::default()
        }
    }

    fn kcat_settings(self) -> &'static [&'static str] {
        match self {
            Batching::ClientDefault => &["linger.ms=5", "batch.num.messages=10000"],
            Batching::OneMib => &[
                "linger.ms=200",
                "batch.size=1048576",
                "message.max.bytes=1048588",
            ],
        }
    }
}

const CLIENTS: [&str; 2] = ["java", "kcat"];
const DATASETS: [Dataset; 2] = [Dataset::ApacheAccessLog, Dataset::NginxPlusStatus];

/// One measured input: a source codec and batching, its segments concatenated.
#[derive(Debug)]
struct Input {
    codec: Compression,
    batching: Batching,
    /// The segments repeated to the measured size.
    path: PathBuf,
    /// The bytes of `path`, for kpress's in-process rewrite.
    bytes: Vec<u8>,
    /// One copy of the segments (for the gzip level search).
    one_copy: PathBuf,
    copies: u64,
    verified: VerifiedFile,
}

/// A codec pair the targets name, and its target ratio kpress/Java.
#[derive(Debug, Clone, Copy)]
struct Pair {
    from: Compression,
    to: Compression,
    level: Option<i32>,
    target: f64,
}

impl Pair {
    /// Where Java's rewrite of this pair's `batching` input goes.
    fn java_output(&self, dir: &Path, batching: Batching) -> PathBuf {
        dir.join(format!(
            "java-{}-{}-{}.log",
            self.from,
            self.to,
            batching.short_name()
        ))
    }
}

const PAIRS: [Pair; 7] = [
    Pair {
        from: Compression::Gzip,
        to: Compression::Zstd,
        level: Some(3),
        target: 4.5,
    },
    Pair {
        from: Compression::Lz4,
        to: Compression::Gzip,
        level: Some(6),
        target: 3.0,
    },
    Pair {
        from: Compression::Snappy,
        to: Compression::Zstd,
        level: Some(3),
        target: 3.0,
    },
    Pair {
        from: Compression::Lz4,
        to: Compression::Zstd,
        level: Some(3),
        target: 3.0,
    },
    Pair {
        from: Compression::None,
        to: Compression::Zstd,
        level: Some(3),
        target: 3.0,
    },
    Pair {
        from: Compression::Zstd,
        to: Compression::Gzip,
        level: Some(6),
        target: 3.0,
    },
    Pair {
        from: Compression::Gzip,
        to: Compression::Lz4,
        level: None,
        target: 3.0,
    },
];

/// kpress's in-process rewrite is measured only in an optimised build of this test (in a
/// debug build it would time unoptimised codecs); `kpress recompress` is measured always.
const IN_PROCESS_MEASURED: bool = !cfg!(debug_assertions);

/// The software gzip providers measured by name besides the default.
const PROVIDERS: [&str; 3] = ["zlib", "libdeflate", "isal"];

/// gzip at Kafka-6 size: at least this many times Java's gzip 6 per core.
const GZIP_KAFKA6_TARGET: f64 = 2.5;
/// …with output within this fraction of Java's gzip-6 size.
const GZIP_SIZE_TOLERANCE: f64 = 0.03;

/// One kpress configuration measured against a Java rebuild.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Variant {
    pair: usize,
    batching: Batching,
    /// None: the default provider.
    provider: Option<&'static str>,
    /// The gzip level when it differs from the pair's.
    gzip_level: Option<i32>,
}

impl Variant {
    fn level(&self) -> Option<i32> {
        self.gzip_level.or(PAIRS[self.pair].level)
    }

    fn properties(&self) -> Vec<String> {
        let pair = PAIRS[self.pair];
        let mut properties = Vec::new();
        if let Some(level) = self.level() {
            properties.push(format!("compression.{}.level={level}", pair.to.name()));
        }
        if let Some(provider) = self.provider {
            properties.push(format!("compression.gzip.provider={provider}"));
        }
        properties
    }

    fn file_stem(&self) -> String {
        let pair = PAIRS[self.pair];
        format!(
            "kpress-{}-{}-{}-{}-{}",
            pair.from,
            pair.to,
            self.level().map_or("d".to_string(), |l| l.to_string()),
            self.provider.unwrap_or("default"),
            self.batching.short_name()
        )
    }
}

/// A `kpress recompress` run's figures.
#[derive(Debug, Clone)]
struct KpressRun {
    cpu_seconds: f64,
    bytes_out: u64,
}

/// kpress's rewrite in this process, as the proxy runs it: Recompressor::rewrite_records
/// over the input in memory, on one thread, timed by that thread's CPU clock.
#[derive(Debug)]
struct InProcess {
    recompressor: Recompressor,
    policy: RewritePolicy,
    output: Vec<u8>,
    cpu_seconds: Vec<f64>,
}

impl InProcess {
    fn new(to: Compression, properties: &[String]) -> InProcess {
        let mut options = CompressionOptions::default();
        for property in properties {
            let (key, value) = property.split_once('=').expect("KEY=VALUE");
            options.set(key, value).expect("a valid kpress option");
        }
        InProcess {
            recompressor: Recompressor::new(),
            policy: RewritePolicy {
                target: Target::from_name(to.name(), options).expect("a codec"),
                ..RewritePolicy::default()
            },
            output: Vec::new(),
            cpu_seconds: Vec::new(),
        }
    }

    fn rewrite(&mut self, input: &[u8]) -> f64 {
        self.output.clear();
        let mut stats = RewriteStats::default();
        let started = thread_cpu_seconds();
        self.recompressor
            .rewrite_records(input, &self.policy, &mut self.output, &mut stats);
        thread_cpu_seconds() - started
    }
}

fn env_number(name: &str, default: f64) -> f64 {
    std::env::var(name)
        .ok()
        .map(|v| {
            v.trim()
                .parse()
                .unwrap_or_else(|_| panic!("{name}={v:?} is no number"))
        })
        .unwrap_or(default)
}

fn median(mut values: Vec<f64>) -> f64 {
    assert!(!values.is_empty());
    values.sort_by(f64::total_cmp);
    let mid = values.len() / 2;
    if values.len() % 2 == 1 {
        values[mid]
    } else {
        (values[mid - 1] + values[mid]) / 2.0
    }
}

/// Produces every dataset with both clients in every codec and batching into
/// `compression.type=producer` topics and copies out each one segment.
fn produce_segments(
    cluster: &KafkaCluster,
    dir: &Path,
) -> BTreeMap<(Batching, usize), Vec<PathBuf>> {
    let bootstrap = cluster.bootstrap();
    let java = JavaClient::new(cluster.version());
    let mut topics = Vec::new();
    for batching in Batching::ALL {
        for (codec_index, codec) in Compression::ALL.into_iter().enumerate() {
            for client in CLIENTS {
                for dataset in DATASETS {
                    let topic = format!(
                        "{client}-{}-{codec}-{}",
                        dataset.short_name(),
                        batching.short_name()
                    );
                    topics.push((batching, codec_index, codec, client, dataset, topic));
                }
            }
        }
    }
    let names: Vec<&str> = topics.iter().map(|t| t.5.as_str()).collect();
    java.create_topics(&bootstrap, &names, 1, 1, &["compression.type=producer"])
        .unwrap_or_else(|e| panic!("{e:#}\n{}", cluster.describe_logs()));
    let mut segments: BTreeMap<(Batching, usize), Vec<PathBuf>> = BTreeMap::new();
    for (batching, codec_index, codec, client, dataset, topic) in &topics {
        let produced = match *client {
            "java" => java
                .produce_file(
                    &bootstrap,
                    topic,
                    &dataset.path(),
                    &batching.java_options(*codec),
                )
                .map(drop),
            _ => kcat::produce_file(
                &bootstrap,
                topic,
                0,
                *codec,
                &dataset.path(),
                batching.kcat_settings(),
            ),
        };
        produced.unwrap_or_else(|e| panic!("{topic}: {e:#}\n{}", cluster.describe_logs()));
        let stored = cluster.segments(topic, 0).expect("segments");
        assert_eq!(stored.len(), 1, "{topic}: expected one segment: {stored:?}");
        let copy = dir.join(format!("{topic}.log"));
        std::fs::copy(&stored[0], &copy).expect("copy segment");
        segments
            .entry((*batching, *codec_index))
            .or_default()
            .push(copy);
    }
    segments
}

/// The records of one copy of the inputs: each client wrote each dataset once.
fn records_per_copy() -> (u64, u64) {
    let mut records = 0;
    let mut value_bytes = 0;
    for dataset in DATASETS {
        let values = dataset.records();
        records += values.len() as u64;
        value_bytes += values.iter().map(|v| v.len() as u64).sum::<u64>();
    }
    let clients = CLIENTS.len() as u64;
    (records * clients, value_bytes * clients)
}

fn concatenate(parts: &[PathBuf], copies: u64, output: &Path) {
    let mut bytes = Vec::new();
    for _ in 0..copies {
        for part in parts {
            bytes.extend(std::fs::read(part).expect("read segment"));
        }
    }
    std::fs::write(output, bytes).expect("write input");
}

fn kpress_recompress(
    input: &Path,
    output: &Path,
    to: Compression,
    properties: &[String],
) -> KpressRun {
    let options = RecompressOptions {
        properties: properties.to_vec(),
        ..RecompressOptions::default()
    };
    let run = run_cpu_timed(&mut recompress_command(input, output, to.name(), &options))
        .unwrap_or_else(|e| panic!("{e:#}"));
    KpressRun {
        cpu_seconds: run.cpu_seconds,
        bytes_out: std::fs::metadata(output).expect("kpress output").len(),
    }
}

/// Checks that `file` holds exactly the input's records, every batch in `codec`.
fn check_output(
    java: &mut JavaRecompression,
    file: &Path,
    input: &Input,
    codec: Compression,
) -> Option<String> {
    let verified = match java.verify(file) {
        Ok(v) => v,
        Err(e) => return Some(format!("{}: {e:#}", file.display())),
    };
    let expected_codecs = vec![codec.name().to_string()];
    if verified.records != input.verified.records
        || verified.sha256 != input.verified.sha256
        || verified.codecs != expected_codecs
    {
        return Some(format!(
            "{}: {} records sha256={} codecs {:?}, expected {} records sha256={} in {codec}",
            file.display(),
            verified.records,
            verified.sha256,
            verified.codecs,
            input.verified.records,
            input.verified.sha256
        ));
    }
    None
}

fn mbps(value_bytes: u64, cpu_seconds: f64) -> f64 {
    value_bytes as f64 / 1e6 / cpu_seconds.max(1e-9)
}

#[test]
#[ignore = "a measurement: run by scripts/load.sh or with --ignored on a release build"]
fn recompression_vs_java() {
    let rounds = env_number("RECOMPRESSION_ROUNDS", 3.0).max(1.0) as usize;
    let min_mb = env_number("RECOMPRESSION_MIN_MB", 32.0);
    let cluster = KafkaCluster::start(kafka_version(), 1).expect("starting Kafka");
    let dir = cluster.scratch_dir().join("recompression");
    std::fs::create_dir_all(&dir).expect("scratch dir");

    let segments = produce_segments(&cluster, &dir);
    let mut java = JavaRecompression::start(cluster.version()).expect("starting the Java side");
    let (records_per_copy, values_per_copy) = records_per_copy();
    let copies = ((min_mb * 1e6) / values_per_copy as f64).ceil().max(1.0) as u64;

    // Every source read back by kafka-clients: every record the clients wrote.
    let mut inputs: BTreeMap<(Batching, usize), Input> = BTreeMap::new();
    for ((batching, codec_index), parts) in &segments {
        let codec = Compression::ALL[*codec_index];
        let stem = format!("input-{codec}-{}", batching.short_name());
        let path = dir.join(format!("{stem}.log"));
        let one_copy = dir.join(format!("{stem}-x1.log"));
        concatenate(parts, copies, &path);
        concatenate(parts, 1, &one_copy);
        let verified = java.verify(&path).expect("verify input");
        let bytes = std::fs::read(&path).expect("read input");
        assert_eq!(
            verified.records,
            records_per_copy * copies,
            "{stem}: the clients' records"
        );
        inputs.insert(
            (*batching, *codec_index),
            Input {
                codec,
                batching: *batching,
                path,
                bytes,
                one_copy,
                copies,
                verified,
            },
        );
    }
    let input_of = |pair: &Pair, batching: Batching| -> &Input {
        let index = Compression::ALL
            .iter()
            .position(|c| *c == pair.from)
            .expect("codec");
        &inputs[&(batching, index)]
    };

    // Warm the JVM (JIT) on every pair once, and learn Java's output sizes.
    let mut java_sizes: BTreeMap<(usize, Batching), u64> = BTreeMap::new();
    for (p, pair) in PAIRS.iter().enumerate() {
        for batching in Batching::ALL {
            let input = input_of(pair, batching);
            let out = pair.java_output(&dir, batching);
            let rewrite = java
                .rewrite(pair.to.name(), pair.level, 1, 1, &input.path, &out)
                .unwrap_or_else(|e| panic!("{e:#}"));
            java_sizes.insert((p, batching), rewrite.bytes_out);
        }
    }

    // gzip at Kafka-6 size: per provider and batching, the lowest level within ±3% of
    // Java's gzip 6 (sizes scale with the copies, so one copy is searched).
    let lz4_gzip = PAIRS
        .iter()
        .position(|p| p.from == Compression::Lz4 && p.to == Compression::Gzip)
        .expect("lz4→gzip pair");
    let mut kafka6_levels: Vec<(Batching, &'static str, Option<i32>, f64)> = Vec::new();
    for batching in Batching::ALL {
        let input = input_of(&PAIRS[lz4_gzip], batching);
        let java_one_copy = java_sizes[&(lz4_gzip, batching)] as f64 / input.copies as f64;
        for provider in PROVIDERS {
            let mut chosen = None;
            let mut last_ratio = f64::NAN;
            for level in 1..=9 {
                let out = dir.join(format!("search-{provider}-{level}.log"));
                let run = kpress_recompress(
                    &input.one_copy,
                    &out,
                    Compression::Gzip,
                    &[
                        format!("compression.gzip.level={level}"),
                        format!("compression.gzip.provider={provider}"),
                    ],
                );
                last_ratio = run.bytes_out as f64 / java_one_copy;
                if last_ratio <= 1.0 + GZIP_SIZE_TOLERANCE {
                    if last_ratio >= 1.0 - GZIP_SIZE_TOLERANCE {
                        chosen = Some(level);
                    }
                    break;
                }
            }
            kafka6_levels.push((batching, provider, chosen, last_ratio));
        }
    }

    // Everything measured, per round alternating which side goes first.
    let mut variants: Vec<Variant> = Vec::new();
    for (p, pair) in PAIRS.iter().enumerate() {
        for batching in Batching::ALL {
            variants.push(Variant {
                pair: p,
                batching,
                provider: None,
                gzip_level: None,
            });
            if pair.to == Compression::Gzip && pair.from == Compression::Lz4 {
                for provider in PROVIDERS {
                    variants.push(Variant {
                        pair: p,
                        batching,
                        provider: Some(provider),
                        gzip_level: None,
                    });
                }
            }
        }
    }
    for (batching, provider, level, _) in &kafka6_levels {
        if let Some(level) = level {
            let variant = Variant {
                pair: lz4_gzip,
                batching: *batching,
                provider: Some(provider),
                gzip_level: Some(*level),
            };
            if !variants.iter().any(|v| {
                v.properties() == variant.properties()
                    && v.batching == *batching
                    && v.pair == lz4_gzip
            }) {
                variants.push(variant);
            }
        }
    }

    let mut java_runs: BTreeMap<(usize, Batching), Vec<JavaRewrite>> = BTreeMap::new();
    let mut kpress_runs: BTreeMap<Variant, Vec<KpressRun>> = BTreeMap::new();
    let mut in_process: BTreeMap<Variant, InProcess> = variants
        .iter()
        .map(|v| {
            let pair = PAIRS[v.pair];
            (v.clone(), InProcess::new(pair.to, &v.properties()))
        })
        .collect();
    for round in 0..rounds {
        for (p, pair) in PAIRS.iter().enumerate() {
            for batching in Batching::ALL {
                let input = input_of(pair, batching);
                let java_out = pair.java_output(&dir, batching);
                let mut run_java = |java: &mut JavaRecompression| {
                    let rewrite = java
                        .rewrite(pair.to.name(), pair.level, 0, 1, &input.path, &java_out)
                        .unwrap_or_else(|e| panic!("{e:#}"));
                    java_runs.entry((p, batching)).or_default().push(rewrite);
                };
                if round % 2 == 0 {
                    run_java(&mut java);
                }
                for variant in variants
                    .iter()
                    .filter(|v| v.pair == p && v.batching == batching)
                {
                    if IN_PROCESS_MEASURED {
                        let rewriter = in_process.get_mut(variant).expect("in-process rewriter");
                        if round == 0 {
                            rewriter.rewrite(&input.bytes);
                        }
                        let cpu = rewriter.rewrite(&input.bytes);
                        rewriter.cpu_seconds.push(cpu);
                    }
                    let out = dir.join(format!("{}.log", variant.file_stem()));
                    let run = kpress_recompress(&input.path, &out, pair.to, &variant.properties());
                    kpress_runs.entry(variant.clone()).or_default().push(run);
                }
                if round % 2 == 1 {
                    run_java(&mut java);
                }
            }
        }
        eprintln!(
            "recompression_vs_java: round {} of {rounds} done",
            round + 1
        );
    }

    // Correctness: every last output, Java's and kpress's, is the input's records.
    let mut problems = Vec::new();
    for (p, pair) in PAIRS.iter().enumerate() {
        for batching in Batching::ALL {
            let input = input_of(pair, batching);
            let java_out = pair.java_output(&dir, batching);
            problems.extend(check_output(&mut java, &java_out, input, pair.to));
            let runs = &java_runs[&(p, batching)];
            if runs.iter().any(|r| r.records != input.verified.records) {
                problems.push(format!(
                    "Java {}→{} did not rebuild every record",
                    pair.from, pair.to
                ));
            }
        }
    }
    for variant in &variants {
        let pair = PAIRS[variant.pair];
        if IN_PROCESS_MEASURED {
            let in_memory = dir.join(format!("{}-in-process.log", variant.file_stem()));
            std::fs::write(&in_memory, &in_process[variant].output)
                .expect("write in-process output");
            problems.extend(check_output(
                &mut java,
                &in_memory,
                input_of(&pair, variant.batching),
                pair.to,
            ));
        }
        let out = dir.join(format!("{}.log", variant.file_stem()));
        problems.extend(check_output(
            &mut java,
            &out,
            input_of(&pair, variant.batching),
            pair.to,
        ));
    }

    let measured = Measured {
        values: values_per_copy * copies,
        java_runs: &java_runs,
        kpress_runs: &kpress_runs,
        in_process: &in_process,
    };
    let report = report(&inputs, copies, rounds, &measured, &kafka6_levels);
    println!("{report}");
    if let Some(path) = std::env::var_os("RECOMPRESSION_REPORT") {
        std::fs::write(&path, &report).expect("write RECOMPRESSION_REPORT");
    }
    assert!(
        problems.is_empty(),
        "outputs that are not the input's records:\n{}",
        problems.join("\n")
    );
}

fn java_label(pair: &Pair) -> String {
    match pair.level {
        Some(level) => format!("{}→{} {level}", pair.from, pair.to),
        None => format!("{}→{}", pair.from, pair.to),
    }
}

/// Medians of the measured figures, per variant.
#[derive(Debug)]
struct Measured<'a> {
    values: u64,
    java_runs: &'a BTreeMap<(usize, Batching), Vec<JavaRewrite>>,
    kpress_runs: &'a BTreeMap<Variant, Vec<KpressRun>>,
    in_process: &'a BTreeMap<Variant, InProcess>,
}

impl Measured<'_> {
    fn java(&self, key: &(usize, Batching)) -> f64 {
        median(
            self.java_runs[key]
                .iter()
                .map(|r| mbps(r.value_bytes, r.cpu_seconds))
                .collect(),
        )
    }

    fn java_whole_jvm(&self, key: &(usize, Batching)) -> f64 {
        median(
            self.java_runs[key]
                .iter()
                .map(|r| mbps(r.value_bytes, r.process_cpu_seconds))
                .collect(),
        )
    }

    /// kpress's figure: in process, or where that was not measured, the process's.
    fn kpress(&self, variant: &Variant) -> f64 {
        if !IN_PROCESS_MEASURED {
            return self.kpress_process(variant);
        }
        median(
            self.in_process[variant]
                .cpu_seconds
                .iter()
                .map(|&cpu| mbps(self.values, cpu))
                .collect(),
        )
    }

    fn kpress_process(&self, variant: &Variant) -> f64 {
        median(
            self.kpress_runs[variant]
                .iter()
                .map(|r| mbps(self.values, r.cpu_seconds))
                .collect(),
        )
    }
}

fn variant_label(variant: &Variant) -> String {
    let pair = PAIRS[variant.pair];
    let provider = match (variant.provider, variant.gzip_level) {
        (None, _) if pair.to == Compression::Gzip => " (default provider)".to_string(),
        (None, _) => String::new(),
        (Some(p), None) => format!(" ({p})"),
        (Some(p), Some(level)) => format!(" ({p} level {level})"),
    };
    format!("{}{provider}", java_label(&pair))
}

fn report(
    inputs: &BTreeMap<(Batching, usize), Input>,
    copies: u64,
    rounds: usize,
    measured: &Measured<'_>,
    kafka6_levels: &[(Batching, &'static str, Option<i32>, f64)],
) -> String {
    let mut out = String::new();
    let binary = kpress_binary();
    let profile = binary
        .parent()
        .and_then(Path::file_name)
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let _ = writeln!(
        out,
        "## Recompression per core: Kafka {}'s Java rebuild against kpress\n",
        kafka_version()
    );
    let _ = writeln!(
        out,
        "Segments a {} broker wrote for the Java producer and kcat (librdkafka) of \
         apache_access.log and nginxplus_status.ndjson, per source codec and batching \
         concatenated ×{copies} ({:.1} MB of record values per input). MB/s = MB of record \
         values per CPU second, median of {rounds} alternating rounds. Java: \
         LogValidator's rebuild, the rebuilding thread's CPU in a warm JVM (in parentheses \
         the whole JVM's, GC and JIT threads included), input in memory. kpress: \
         `Recompressor::rewrite_records` (what the proxy and `kpress recompress` run), \
         input in memory, the thread's CPU; and `kpress recompress` as a process (user + \
         system CPU, start-up, reading and writing the files included; binary {}, \
         {profile}).\n",
        kafka_version(),
        measured.values as f64 / 1e6,
        binary.display(),
    );
    if !IN_PROCESS_MEASURED {
        let _ = writeln!(
            out,
            "**A debug build of this test: kpress's in-process rewrite would be unoptimised \
             code, so the kpress column is `kpress recompress`'s process CPU (file I/O \
             included; a debug binary unless KPRESS_BIN names a release one). Run with \
             --release for the in-process figures.**\n"
        );
    }
    let _ = writeln!(
        out,
        "| pair | batching | Java MB/s/core | kpress MB/s/core | kpress/Java | target | met | `kpress recompress` MB/s/core | its ×Java | Java out (bytes) | kpress out | kpress/Java size |"
    );
    let _ = writeln!(
        out,
        "|---|---|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|"
    );
    for (variant, runs) in measured.kpress_runs {
        let pair = PAIRS[variant.pair];
        let key = (variant.pair, variant.batching);
        let java = measured.java(&key);
        let kpress = measured.kpress(variant);
        let process = measured.kpress_process(variant);
        let ratio = kpress / java;
        let java_out = measured.java_runs[&key].last().map_or(0, |r| r.bytes_out);
        let kpress_out = runs.last().map_or(0, |r| r.bytes_out);
        let target = if variant.gzip_level.is_some() {
            GZIP_KAFKA6_TARGET
        } else {
            pair.target
        };
        let _ = writeln!(
            out,
            "| {} | {} | {java:.1} ({:.1}) | {kpress:.1} | {ratio:.2}× | ≥{target}× | {} | {process:.1} | {:.2}× | {java_out} | {kpress_out} | {:.3} |",
            variant_label(variant),
            variant.batching.label(),
            measured.java_whole_jvm(&key),
            if ratio >= target { "met" } else { "missed" },
            process / java,
            kpress_out as f64 / java_out.max(1) as f64,
        );
    }

    let lz4_gzip = PAIRS
        .iter()
        .position(|p| p.from == Compression::Lz4 && p.to == Compression::Gzip)
        .expect("lz4→gzip pair");
    let _ = writeln!(
        out,
        "\n## gzip at Kafka-6 size (±{:.0}%): lz4→gzip, each provider at its lowest level within the bound, against Java's gzip 6\n",
        GZIP_SIZE_TOLERANCE * 100.0
    );
    let _ = writeln!(out, "| provider | batching | level | size vs Java gzip 6 | kpress MB/s/core | Java gzip-6 MB/s/core | × Java | target | met |");
    let _ = writeln!(out, "|---|---|---:|---:|---:|---:|---:|---:|---|");
    let mut auto_met = true;
    for (batching, provider, level, size_ratio) in kafka6_levels {
        let java = measured.java(&(lz4_gzip, *batching));
        let Some(level) = level else {
            let _ = writeln!(
                out,
                "| {provider} | {} | none within ±3% (nearest {:.3}) | | | {java:.1} | | ≥{GZIP_KAFKA6_TARGET}× | missed |",
                batching.label(),
                size_ratio
            );
            if *provider == "libdeflate" {
                auto_met = false;
            }
            continue;
        };
        let variant = measured
            .kpress_runs
            .keys()
            .find(|v| {
                v.pair == lz4_gzip
                    && v.batching == *batching
                    && v.provider == Some(provider)
                    && v.level() == Some(*level)
            })
            .expect("measured variant");
        let kpress = measured.kpress(variant);
        let ratio = kpress / java;
        let met = ratio >= GZIP_KAFKA6_TARGET;
        if *provider == "libdeflate" && !met {
            auto_met = false;
        }
        let _ = writeln!(
            out,
            "| {provider} | {} | {level} | {size_ratio:.3} | {kpress:.1} | {java:.1} | {ratio:.2}× | ≥{GZIP_KAFKA6_TARGET}× | {} |",
            batching.label(),
            if met { "met" } else { "missed" }
        );
    }
    let _ = writeln!(
        out,
        "\n`auto` (libdeflate without a QAT device) {} the gzip-at-Kafka-6-size bound on these datasets.",
        if auto_met { "meets" } else { "does not meet" }
    );
    let _ = writeln!(out, "\nInputs (records read back by kafka-clients):\n");
    for input in inputs.values() {
        let _ = writeln!(
            out,
            "- {} {}: {} bytes, {} batches, {} records",
            input.codec,
            input.batching.label(),
            input.bytes.len(),
            input.verified.batches,
            input.verified.records
        );
    }
    out
}
