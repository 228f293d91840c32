//! Advice from records measured here: a dataset directory or a log segment. Reads the
//! input (bounded), measures the candidates with kpress-measure, ranks them, and
//! weighs a larger producer batch against a codec change.

use std::fmt::Write;
use std::io::Read;
use std::path::Path;

use anyhow::{bail, Context};
use kpress_codec::gzip_providers::Registry;
use kpress_codec::{Candidate, Codec};
use kpress_measure::{RecordsSection, SegmentLimits, TrialResult};
use serde_json::{json, Value};

use super::policy_block::{self, Rule};
use super::rank::{self, number, percent, Floors, Goal, Measured, Ranked};
use super::{Args, Format, PLACEHOLDER_MATCH};

/// A dataset larger than this is read only this far (records enough for advice).
pub(crate) const DEFAULT_MAX_INPUT_BYTES: u64 = 256 * 1024 * 1024;
/// Kafka's producer default `batch.size`.
const KAFKA_DEFAULT_BATCH_BYTES: usize = 16384;
/// The larger `batch.size` values weighed for batching advice.
const BATCH_LADDER: [usize; 4] = [16 * 1024, 64 * 1024, 256 * 1024, 1024 * 1024];
/// A segment file larger than this is refused (Kafka's default segment is 1 GiB).
const MAX_SEGMENT_BYTES: u64 = 1 << 30;

/// The quicker set measured without --matrix: each codec at its common levels.
const QUICK_SET: [&str; 11] = [
    "none", "gzip:1", "gzip:6", "gzip:9", "snappy", "lz4:9", "lz4:17", "zstd:1", "zstd:3",
    "zstd:9", "zstd:19",
];

/// The records to measure and how to group them again at another batch size.
struct Input {
    /// What was read, for people.
    description: String,
    json: Value,
    sections: Vec<RecordsSection>,
    /// What stores these records now, when the input says (a segment's batches).
    stored_now: Option<(String, u64)>,
    regroup: Box<dyn Fn(usize) -> anyhow::Result<Vec<RecordsSection>>>,
}

pub(crate) fn run(args: &Args, floors: &Floors) -> anyhow::Result<String> {
    let input = if let Some(dir) = &args.dir {
        read_dir(dir, args)?
    } else if let Some(segment) = &args.segment {
        read_segment(segment)?
    } else {
        bail!("one of --dir, --segment or --from-metrics is needed");
    };
    let candidates = candidates(args);
    let passes = args.passes.max(1);
    let results = measure(&candidates, &input.sections, passes)?;
    let raw: u64 = input.sections.iter().map(|s| s.records.len() as u64).sum();
    let batches = input.sections.len() as u64;
    let current_batch = raw / batches.max(1) + rank::BATCH_HEADER_BYTES;
    // What the records cost now: a segment's stored bytes, or the producer's codec.
    let baseline = match (&input.stored_now, &args.current) {
        (Some((label, stored)), _) => Some((label.clone(), *stored)),
        (None, Some(current)) => {
            let result = kpress_measure::trial(current, &input.sections, passes)?;
            Some((format!("{current} (now)"), result.batch_bytes))
        }
        (None, None) => Some((
            "none (Kafka's producer default)".to_owned(),
            raw + 61 * batches,
        )),
    };
    let ranked = rank::rank(results, args.goal, floors);
    let largest = *BATCH_LADDER.last().expect("a ladder") as f64;
    let batching = if (current_batch as f64) * LARGER_FACTOR <= largest {
        Some(batching(
            &ranked,
            &input,
            current_batch,
            args.goal,
            floors,
            passes,
        )?)
    } else {
        None
    };
    let choice = rank::choice(&ranked).cloned();
    let topic = args
        .topic
        .clone()
        .unwrap_or_else(|| PLACEHOLDER_MATCH.to_owned());
    // Both gains in bytes per uncompressed byte, so they compare as bytes saved.
    let uncompressed = (raw + rank::BATCH_HEADER_BYTES * batches) as f64;
    let lever = batching
        .as_ref()
        .zip(choice.as_ref())
        .zip(baseline.as_ref())
        .map(|((batching, choice), (_, stored))| {
            let codec_gain = (*stored as f64 - choice.measured.stored_bytes as f64) / uncompressed;
            let codec_gain_relative =
                1.0 - choice.measured.stored_bytes as f64 / (*stored).max(1) as f64;
            (
                batching.best_gain() > codec_gain.max(0.0),
                codec_gain_relative.max(0.0),
            )
        });
    let rule = choice.as_ref().map(|c| Rule {
        topic_match: topic,
        candidate: c.measured.candidate.clone(),
        comment: vec![format!(
            "kpress advise --goal {}: {}",
            args.goal.name(),
            c.sentence
        )],
    });
    let toml = rule
        .as_ref()
        .map(|r| policy_block::render(std::slice::from_ref(r)));
    Ok(match args.format {
        Format::Json => {
            let mut out = serde_json::to_string_pretty(&json!({
                "input": input.json,
                "goal": args.goal.name(),
                "floors": {"min_mbps": floors.min_mbps, "max_cpu_ms_per_mb": floors.max_cpu_ms_per_mb},
                "current": baseline.as_ref().map(|(label, stored)| json!({"label": label, "stored_bytes": stored})),
                "ranking": ranked.iter().map(ranked_json).collect::<Vec<_>>(),
                "choice": choice.as_ref().map(|c| c.measured.candidate.to_string()),
                "batching": batching.as_ref().map(|b| b.json(lever.map(|(l, _)| l).unwrap_or(false))),
                "toml": toml,
            }))?;
            out.push('\n');
            out
        }
        Format::Text => {
            let mut out = String::new();
            let _ = writeln!(out, "{}", input.description);
            if let Some((label, stored)) = &baseline {
                let _ = writeln!(
                    out,
                    "Now: {label} stores {} (ratio {:.3}).",
                    bytes(*stored as f64),
                    *stored as f64 / uncompressed.max(1.0)
                );
            }
            let _ = writeln!(out, "\nRanked for {}:", goal_text(args.goal, floors));
            text_table(&mut out, &ranked);
            let _ = writeln!(out);
            for entry in &ranked {
                let _ = writeln!(out, "- {}", entry.sentence);
            }
            if let Some(batching) = &batching {
                let _ = writeln!(out);
                batching.text(&mut out, lever);
            }
            let _ = writeln!(out);
            match &toml {
                Some(toml) => {
                    let _ = writeln!(out, "Paste into the policy file:\n\n{toml}");
                }
                None => {
                    let _ = writeln!(
                        out,
                        "No candidate meets the goal's floors; no rule to suggest."
                    );
                }
            }
            out
        }
    })
}

fn goal_text(goal: Goal, floors: &Floors) -> String {
    let mut text = match goal {
        Goal::Size => "size (smallest stored bytes first)".to_owned(),
        Goal::Speed => "speed (most MB/s per core first)".to_owned(),
    };
    if let Some(min) = floors.min_mbps {
        let _ = write!(text, ", at least {} MB/s per core", number(min));
    }
    if let Some(max) = floors.max_cpu_ms_per_mb {
        let _ = write!(text, ", at most {} CPU ms per MB", number(max));
    }
    text
}

fn candidates(args: &Args) -> Vec<Candidate> {
    if args.matrix {
        return kpress_measure::matrix();
    }
    if !args.candidates.is_empty() {
        return args.candidates.clone();
    }
    let mut specs: Vec<String> = QUICK_SET.iter().map(|s| s.to_string()).collect();
    // The fastest software gzip provider this host has, beside zlib's.
    let available: Vec<String> = Registry::global()
        .statuses_without_probing()
        .into_iter()
        .filter(|s| s.available)
        .map(|s| s.provider.to_string())
        .collect();
    if available.iter().any(|p| p == "libdeflate") {
        specs.push("gzip:6:libdeflate".to_owned());
    }
    specs
        .iter()
        .map(|s| s.parse().expect("the quick set's specs are valid"))
        .collect()
}

fn measure(
    candidates: &[Candidate],
    sections: &[RecordsSection],
    passes: usize,
) -> anyhow::Result<Vec<Measured>> {
    candidates
        .iter()
        .map(|candidate| {
            kpress_measure::trial(candidate, sections, passes)
                .map(|r| measured(&r))
                .with_context(|| format!("measuring {candidate}"))
        })
        .collect()
}

fn measured(result: &TrialResult) -> Measured {
    Measured {
        candidate: result.candidate.clone(),
        batches: result.batches as u64,
        raw_bytes: result.raw_bytes,
        stored_bytes: result.batch_bytes,
        compress_seconds: result.compress.as_secs_f64(),
        decompress_seconds: Some(result.decompress.as_secs_f64()),
    }
}

/// The files of `dir` (not its subdirectories), in name order.
fn read_dir(dir: &Path, args: &Args) -> anyhow::Result<Input> {
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
        regroup: Box::new(move |batch_bytes| {
            let values: Vec<&[u8]> = owned.iter().map(Vec::as_slice).collect();
            Ok(kpress_measure::sections_by_bytes(&values, batch_bytes))
        }),
    })
}

fn read_segment(path: &Path) -> anyhow::Result<Input> {
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
    let mut codecs: Vec<Codec> = segment.batches.iter().map(|b| b.codec).collect();
    codecs.sort_by_key(|c| c.id());
    codecs.dedup();
    let codec_names: Vec<&str> = codecs.iter().map(|c| c.name()).collect();
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
        regroup: Box::new(move |batch_bytes| {
            kpress_measure::advice::regroup_by_bytes(&regroup_from, batch_bytes)
                .context("regrouping the segment's records")
        }),
    })
}

/// The eligible candidates at each larger batch size, against the best at the current
/// one.
struct Batching {
    current_batch: u64,
    current_best: Measured,
    /// Per larger `batch.size`: the eligible candidates ranked there.
    larger: Vec<(usize, Vec<Ranked>)>,
}

impl Batching {
    fn best_at(ranked: &[Ranked]) -> Option<&Measured> {
        rank::choice(ranked).map(|r| &r.measured)
    }

    /// The best reduction of the ratio (stored per uncompressed byte) a larger batch
    /// gives over the best at the current size.
    fn best_gain(&self) -> f64 {
        self.larger
            .iter()
            .filter_map(|(_, ranked)| Batching::best_at(ranked))
            .map(|best| self.current_best.ratio() - best.ratio())
            .fold(0.0, f64::max)
    }

    /// The smallest batch.size reaching at least 90% of the best gain: the least
    /// linger for most of the saving.
    fn suggested(&self) -> Option<(usize, &Measured)> {
        let best = self.best_gain();
        if best <= 0.0 {
            return None;
        }
        self.larger.iter().find_map(|(size, ranked)| {
            let m = Batching::best_at(ranked)?;
            (self.current_best.ratio() - m.ratio() >= 0.9 * best).then_some((*size, m))
        })
    }

    fn text(&self, out: &mut String, lever: Option<(bool, f64)>) {
        let now = &self.current_best;
        let _ = writeln!(
            out,
            "Batching (now {} per batch; best {} at ratio {:.3}):",
            size(self.current_batch),
            now.candidate,
            now.ratio()
        );
        for (batch_bytes, ranked) in &self.larger {
            let Some(best) = Batching::best_at(ranked) else {
                let _ = writeln!(
                    out,
                    "- batch.size {}: no candidate meets the floors.",
                    size(*batch_bytes as u64)
                );
                continue;
            };
            let change = best.ratio() / now.ratio() - 1.0;
            let mut line = format!(
                "- batch.size {}: {} at ratio {:.3} stores {} {} than {} now",
                size(*batch_bytes as u64),
                best.candidate,
                best.ratio(),
                percent(change.abs()),
                if change <= 0.0 { "less" } else { "more" },
                now.candidate,
            );
            // The codec chosen now, at this size, when another codec wins here.
            if best.candidate != now.candidate {
                if let Some(same) = ranked
                    .iter()
                    .find(|r| r.measured.candidate == now.candidate)
                {
                    let _ = write!(
                        line,
                        "; at this size it stores {} less than {}",
                        percent(1.0 - best.ratio() / same.measured.ratio()),
                        now.candidate
                    );
                }
            }
            let _ = writeln!(out, "{line}.");
        }
        match (self.suggested(), lever) {
            (Some((batch_bytes, best)), Some((true, codec_gain))) => {
                let _ = writeln!(
                    out,
                    "Batch size is the biggest lever: {} at batch.size {} stores {} less than \
                     {} at today's size, while the best codec change at today's size saves {}. \
                     Set the producers' batch.size={batch_bytes} and linger.ms long enough to \
                     fill it at your rate (a batch is sent when full or when linger.ms has \
                     passed){}.",
                    best.candidate,
                    size(batch_bytes as u64),
                    percent(1.0 - best.ratio() / now.ratio()),
                    now.candidate,
                    percent(codec_gain),
                    if best.candidate == now.candidate {
                        String::new()
                    } else {
                        format!(", and write the topic with {} then", best.candidate)
                    },
                );
            }
            (Some((batch_bytes, best)), _) => {
                let _ = writeln!(
                    out,
                    "The codec is the bigger lever; then batch.size={batch_bytes} (with \
                     linger.ms to fill it at your rate) would store {} less again, with {}.",
                    percent(1.0 - best.ratio() / now.ratio()),
                    best.candidate,
                );
            }
            (None, _) => {
                let _ = writeln!(out, "Larger batches would not store less.");
            }
        }
    }

    fn json(&self, lever: bool) -> Value {
        json!({
            "current_batch_bytes": self.current_batch,
            "current_best": measured_json(&self.current_best),
            "larger": self.larger.iter().map(|(size, ranked)| json!({
                "batch_size": size,
                "best": Batching::best_at(ranked).map(measured_json),
                "ranking": ranked.iter().map(ranked_json).collect::<Vec<_>>(),
            })).collect::<Vec<_>>(),
            "suggested_batch_size": self.suggested().map(|(size, _)| size),
            "biggest_lever": lever,
        })
    }
}

/// A ladder size counts as larger only from this factor above today's mean batch.
const LARGER_FACTOR: f64 = 1.5;

/// Each codec's best eligible candidate measured again with the records grouped at
/// each larger `batch.size` of the ladder.
fn batching(
    ranked: &[Ranked],
    input: &Input,
    current_batch: u64,
    goal: Goal,
    floors: &Floors,
    passes: usize,
) -> anyhow::Result<Batching> {
    // Per codec, its best eligible setting today: levels keep their order as batches
    // grow, while codecs change places (gzip ahead at 16 KiB, zstd at 1 MiB).
    let mut eligible: Vec<Candidate> = Vec::new();
    for r in ranked.iter().filter(|r| r.miss.is_none()) {
        let codec = r.measured.candidate.codec();
        if !eligible.iter().any(|c| c.codec() == codec) {
            eligible.push(r.measured.candidate.clone());
        }
    }
    let current_best = rank::choice(ranked)
        .or(ranked.first())
        .map(|r| r.measured.clone())
        .context("no candidate measured")?;
    let mut larger = Vec::new();
    for batch_bytes in BATCH_LADDER {
        if (batch_bytes as f64) < current_batch as f64 * LARGER_FACTOR {
            continue;
        }
        let sections = (input.regroup)(batch_bytes)?;
        let results = measure(&eligible, &sections, passes)?;
        larger.push((batch_bytes, rank::rank(results, goal, floors)));
    }
    Ok(Batching {
        current_batch,
        current_best,
        larger,
    })
}

fn text_table(out: &mut String, ranked: &[Ranked]) {
    let _ = writeln!(
        out,
        "{:<24} {:>8} {:>12} {:>10} {:>12} {:>10}  note",
        "candidate", "ratio", "stored", "MB/s", "ms/MB", "dec MB/s"
    );
    for r in ranked {
        let m = &r.measured;
        let _ = writeln!(
            out,
            "{:<24} {:>8.4} {:>12} {:>10} {:>12} {:>10}  {}",
            m.candidate.to_string(),
            m.ratio(),
            m.stored_bytes,
            number(m.compress_mb_per_s()),
            number(m.compress_cpu_ms_per_mb()),
            m.decompress_mb_per_s().map(number).unwrap_or_default(),
            r.miss.as_deref().unwrap_or(""),
        );
    }
}

pub(crate) fn measured_json(m: &Measured) -> Value {
    json!({
        "candidate": m.candidate.to_string(),
        "codec": m.candidate.codec().name(),
        "properties": m.candidate.properties().into_iter().collect::<std::collections::BTreeMap<_, _>>(),
        "batches": m.batches,
        "raw_bytes": m.raw_bytes,
        "batch_bytes": m.stored_bytes,
        "ratio": m.ratio(),
        "compress_mb_per_s": finite(m.compress_mb_per_s()),
        "decompress_mb_per_s": m.decompress_mb_per_s().map(finite),
        "compress_cpu_ms_per_mb": m.compress_cpu_ms_per_mb(),
    })
}

pub(crate) fn ranked_json(r: &Ranked) -> Value {
    let mut value = measured_json(&r.measured);
    value["eligible"] = json!(r.miss.is_none());
    value["miss"] = json!(r.miss);
    value["sentence"] = json!(r.sentence);
    value
}

fn finite(x: f64) -> Option<f64> {
    x.is_finite().then_some(x)
}

/// A byte count for people: "1.2 MB" (10^6), as the MB/s figures are.
pub(crate) fn bytes(n: f64) -> String {
    if n >= 1e9 {
        format!("{} GB", number(n / 1e9))
    } else if n >= 1e6 {
        format!("{} MB", number(n / 1e6))
    } else if n >= 1e3 {
        format!("{} kB", number(n / 1e3))
    } else {
        format!("{} B", number(n))
    }
}

/// A batch size for people: "16 KiB", "1 MiB", as batch.size values are chosen.
pub(crate) fn size(n: u64) -> String {
    if n >= 1 << 20 && n.is_multiple_of(1 << 20) {
        format!("{} MiB", n >> 20)
    } else if n >= 1 << 10 && n.is_multiple_of(1 << 10) {
        format!("{} KiB", n >> 10)
    } else if n >= 1 << 10 {
        format!("{} KiB", number(n as f64 / 1024.0))
    } else {
        format!("{n} B")
    }
}
