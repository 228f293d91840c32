//! Advice from records measured here: a dataset directory or a log segment. Measures
//! the candidates with kpress-measure, ranks them, weighs a larger producer batch
//! against a codec change, and renders the advice.

use std::fmt::Write;

use anyhow::bail;
use kpress_codec::gzip_providers::Registry;
use kpress_codec::Candidate;
use serde_json::json;

use super::batching::{self, BATCH_LADDER, LARGER_FACTOR};
use super::input::{read_dir, read_segment};
use super::policy_block::{self, Rule};
use super::rank::{self, measure, number, Floors, Goal};
use super::report::{bytes, ranked_json, text_table};
use super::small_batches;
use super::{Args, Format, PLACEHOLDER_MATCH};

/// The quicker set measured without --matrix: each codec at its common levels.
const QUICK_SET: [&str; 11] = [
    "none", "gzip:1", "gzip:6", "gzip:9", "snappy", "lz4:9", "lz4:17", "zstd:1", "zstd:3",
    "zstd:9", "zstd:19",
];

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
        Some(batching::batching(
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
    // What the producer sends now, batch by batch, when it compresses: the advised
    // codec may come out larger than it at today's batch size.
    let now_per_batch = match (&input.stored_per_batch, &args.current) {
        (Some((codec, per_batch)), _) => Some((
            format!("the segment as stored ({})", codec.codec()),
            codec.clone(),
            per_batch.clone(),
        )),
        (None, Some(current)) if current.codec() != kpress_codec::Codec::None => Some((
            current.to_string(),
            current.clone(),
            crate::bench::crossover::batch_bytes(current, &input.sections)?,
        )),
        _ => None,
    };
    let small = match (&choice, &now_per_batch) {
        (Some(choice), Some((label, spec, per_batch))) => {
            small_batches::check(&input, &choice.measured.candidate, label, spec, per_batch)?
        }
        _ => None,
    };
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
        only_if_smaller: small
            .as_ref()
            .is_some_and(small_batches::SmallBatches::suggests_only_if_smaller),
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
                "small_batches": small.as_ref().map(small_batches::SmallBatches::json),
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
            if let Some(small) = &small {
                let _ = writeln!(out);
                small.text(&mut out);
            }
            let _ = writeln!(out);
            match &toml {
                Some(toml) => {
                    let _ = writeln!(out, "Paste into the policy file, before broader rules (the first match wins):\n\n{toml}");
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
