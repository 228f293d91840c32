//! Batching advice: the same records grouped at larger `batch.size` values, each
//! codec's best setting measured again there, against the best at today's size.

use std::fmt::Write;

use anyhow::Context;
use kpress_codec::Candidate;
use serde_json::{json, Value};

use super::input::Input;
use super::rank::{self, measure, percent, Floors, Goal, Measured, Ranked};
use super::report::{measured_json, ranked_json, size};

/// The larger `batch.size` values weighed for batching advice.
pub(crate) const BATCH_LADDER: [usize; 4] = [16 * 1024, 64 * 1024, 256 * 1024, 1024 * 1024];

/// The eligible candidates at each larger batch size, against the best at the current
/// one.
pub(crate) struct Batching {
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
    pub(crate) fn best_gain(&self) -> f64 {
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

    pub(crate) fn text(&self, out: &mut String, lever: Option<(bool, f64)>) {
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

    pub(crate) fn json(&self, lever: bool) -> Value {
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
pub(crate) const LARGER_FACTOR: f64 = 1.5;

/// Each codec's best eligible candidate measured again with the records grouped at
/// each larger `batch.size` of the ladder.
pub(crate) fn batching(
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
