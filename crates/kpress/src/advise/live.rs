//! `kpress advise --from-metrics`: the policy that would save most within the goal,
//! per topic, from the proxy's shadow trials and produce counters.

use std::fmt::Write;
use std::time::{Duration, Instant};

use anyhow::Context;
use serde_json::{json, Value};

use super::policy_block::{self, Rule};
use super::rank::{number, percent, Floors, Goal};
use super::report::{bytes, ranked_json, size};
use super::shadow::{self, Figures, TopicAdvice};
use super::small_batches;
use super::{autopilot, metrics_page, Format};

/// Client batches averaging less than this are worth growing.
const SMALL_BATCH_BYTES: f64 = 64.0 * 1024.0;
/// The `batch.size` suggested for small batches: where the datasets' ratios level off.
const SUGGESTED_BATCH_BYTES: u64 = 256 * 1024;
/// A linger longer than this is too much latency to suggest without saying so.
const MAX_SUGGESTED_LINGER_MS: f64 = 1000.0;

pub(crate) fn run(
    source: &str,
    interval: Option<f64>,
    goal: Goal,
    floors: &Floors,
    format: Format,
) -> anyhow::Result<String> {
    let scrape = || -> anyhow::Result<(Figures, String)> {
        let page = metrics_page::read(source)?;
        let figures =
            Figures::from_page(&page).with_context(|| format!("{source}: not a metrics page"))?;
        Ok((figures, page))
    };
    let (figures, page, interval) = match interval {
        Some(seconds) => {
            let started = Instant::now();
            let (earlier, _) = scrape()?;
            std::thread::sleep(Duration::from_secs_f64(seconds));
            // The time between the two reads, not the one asked for: the first read's
            // own time is in it.
            let elapsed = started.elapsed().as_secs_f64();
            let (later, page) = scrape()?;
            (later.since(&earlier), page, Some(elapsed))
        }
        None => {
            let (figures, page) = scrape()?;
            (figures, page, None)
        }
    };
    let advice = shadow::advise(&figures, goal, floors);
    // What the autopilot decided is a state, not a rate: the last page's.
    let autopilot = autopilot::read(source, &page)?;
    Ok(render(
        source, &figures, &advice, &autopilot, interval, goal, format,
    ))
}

fn rules(advice: &[TopicAdvice], interval: Option<f64>) -> Vec<Rule> {
    advice
        .iter()
        .filter(|a| !shadow::is_other_topics(&a.topic))
        .filter_map(|a| {
            let choice = a.choice.as_ref()?;
            Some(Rule {
                topic_match: a.topic.clone(),
                candidate: choice.candidate.clone(),
                comment: vec![format!(
                    "{}: {} less than now ({}{})",
                    choice.candidate,
                    percent(choice.saving_fraction()),
                    bytes(per(choice.saving(), interval)),
                    if interval.is_some() {
                        "/s"
                    } else {
                        " over the counters' life"
                    },
                )],
                only_if_smaller: false,
            })
        })
        .collect()
}

fn per(amount: f64, interval: Option<f64>) -> f64 {
    interval.map_or(amount, |seconds| amount / seconds)
}

/// Producer batching advice from the topic's batch-size histogram and its byte rate.
fn batching_text(advice: &TopicAdvice, interval: Option<f64>) -> Option<String> {
    let mean = advice.mean_batch_bytes()?;
    if mean >= SMALL_BATCH_BYTES {
        return None;
    }
    let mut text = format!(
        "batches average {} as the clients send them: larger batches compress better; try \
         the producers' batch.size={SUGGESTED_BATCH_BYTES}",
        size(mean.round() as u64)
    );
    match interval.map(|s| advice.figures.produce_in / s) {
        Some(rate) if rate > 0.0 => {
            let linger_ms = SUGGESTED_BATCH_BYTES as f64 / rate * 1e3;
            let _ = write!(
                text,
                " with linger.ms={} (the topic takes {}/s: that fills {} if one producer \
                 writes one partition; multiply by the partitions each producer writes at once)",
                number(linger_ms.ceil()),
                bytes(rate),
                size(SUGGESTED_BATCH_BYTES)
            );
            if linger_ms > MAX_SUGGESTED_LINGER_MS {
                let _ = write!(
                    text,
                    "; that is over {} ms of latency, so a smaller batch.size may be the \
                     better trade",
                    number(MAX_SUGGESTED_LINGER_MS)
                );
            }
        }
        _ => text.push_str(
            " with enough linger.ms to fill it at your rate (--interval measures the rate)",
        ),
    }
    text.push('.');
    Some(text)
}

fn render(
    source: &str,
    figures: &Figures,
    advice: &[TopicAdvice],
    autopilot: &autopilot::Section,
    interval: Option<f64>,
    goal: Goal,
    format: Format,
) -> String {
    let rules = rules(advice, interval);
    let toml = policy_block::render(&rules);
    let unit = if interval.is_some() { "/s" } else { "" };
    match format {
        Format::Json => {
            let topics: Vec<Value> = advice
                .iter()
                .map(|a| {
                    json!({
                        "topic": a.topic,
                        "bytes_in": per(a.figures.produce_in, interval),
                        "bytes_out": per(a.figures.produce_out, interval),
                        "mean_batch_bytes": a.mean_batch_bytes(),
                        "shadow_raw_bytes": per(a.figures.shadow_raw, interval),
                        "shadow_batches": per(a.figures.shadow_batches, interval),
                        "ranking": a.ranked.iter().map(ranked_json).collect::<Vec<_>>(),
                        "choice": a.choice.as_ref().map(|c| json!({
                            "candidate": c.candidate.to_string(),
                            "bytes_now": per(c.bytes_now, interval),
                            "bytes_projected": per(c.bytes_projected, interval),
                            "saving": per(c.saving(), interval),
                            "saving_fraction": c.saving_fraction(),
                        })),
                        "batching": batching_text(a, interval),
                        "rewritten_batches": per(a.figures.rewritten, interval),
                        "grown_batches": per(a.figures.grown, interval),
                        "grown": small_batches::live_text(a.figures.rewritten, a.figures.grown, a.mean_batch_bytes()),
                        "unreadable_candidates": a.unreadable,
                    })
                })
                .collect();
            let mut out = serde_json::to_string_pretty(&json!({
                "source": source,
                "goal": goal.name(),
                "interval_seconds": interval,
                "per_second": interval.is_some(),
                "topics": topics,
                "shadow_skipped": figures.skipped,
                "autopilot": autopilot.json(),
                "toml": (!rules.is_empty()).then_some(toml),
            }))
            .expect("JSON values serialise");
            out.push('\n');
            out
        }
        Format::Text => {
            let mut out = String::new();
            let _ = writeln!(
                out,
                "{source}: shadow trials of {} topics, {}.",
                advice.len(),
                match interval {
                    Some(s) => format!("over {} s (figures per second)", number(s)),
                    None => "over the counters' life".to_owned(),
                }
            );
            if advice.is_empty() {
                let _ = writeln!(
                    out,
                    "No shadow trials on the page: set [shadow] candidates in the policy and \
                     let traffic flow."
                );
            }
            for a in advice {
                let _ = writeln!(
                    out,
                    "\nTopic {:?}: {}{unit} in, {}{unit} forwarded now.",
                    a.topic,
                    bytes(per(a.figures.produce_in, interval)),
                    bytes(per(a.figures.produce_out, interval)),
                );
                match &a.choice {
                    None if a.ranked.is_empty() => {
                        let _ = writeln!(
                            out,
                            "  no shadow trials in this {}.",
                            if interval.is_some() {
                                "interval"
                            } else {
                                "page"
                            }
                        );
                    }
                    Some(c) => {
                        let _ = writeln!(
                            out,
                            "  {} would forward {}{unit}: {}{unit} less ({}).",
                            c.candidate,
                            bytes(per(c.bytes_projected, interval)),
                            bytes(per(c.saving(), interval)),
                            percent(c.saving_fraction()),
                        );
                    }
                    None => {
                        let _ = writeln!(
                            out,
                            "  no candidate within the goal stores less than what goes now: keep its rule."
                        );
                    }
                }
                for r in &a.ranked {
                    let _ = writeln!(
                        out,
                        "  - ratio {:.3}, {} MB/s per core: {}",
                        r.measured.ratio(),
                        number(r.measured.compress_mb_per_s()),
                        r.sentence,
                    );
                }
                if let Some(text) = batching_text(a, interval) {
                    let _ = writeln!(out, "  Batching: {text}");
                }
                if let Some(text) = small_batches::live_text(
                    a.figures.rewritten,
                    a.figures.grown,
                    a.mean_batch_bytes(),
                ) {
                    let _ = writeln!(out, "  Grown: {text}");
                }
                if shadow::is_other_topics(&a.topic) && a.choice.is_some() {
                    let _ = writeln!(
                        out,
                        "  ({:?} counts topics without a label of their own: a [defaults] rule would reach them.)",
                        a.topic
                    );
                }
                if !a.unreadable.is_empty() {
                    let _ = writeln!(
                        out,
                        "  candidate labels kpress cannot read, left out: {}",
                        a.unreadable.join(", ")
                    );
                }
            }
            let skipped: f64 = figures.skipped.values().sum();
            if skipped > 0.0 {
                let reasons: Vec<String> = figures
                    .skipped
                    .iter()
                    .map(|(r, n)| format!("{r} {}", number(*n)))
                    .collect();
                let _ = writeln!(out, "\nSampled batches not tried: {}.", reasons.join(", "));
            }
            autopilot.text(&mut out);
            if rules.is_empty() {
                let _ = writeln!(out, "\nNo rule to suggest.");
            } else {
                let _ = writeln!(out, "\nPaste into the policy file, before broader rules (the first match wins):\n\n{toml}");
            }
            out
        }
    }
}
