//! Small-batch advice: when the advised codec's batches come out larger, batch by batch,
//! than what the producer sends now (kpress stores them and counts them `grown`), say
//! so, from what batch size they stop, and what to do: batch more, or
//! `only_if_smaller`.

use std::fmt::Write;

use kpress_codec::Candidate;
use kpress_measure::RecordsSection;
use serde_json::{json, Value};

use super::input::Input;
use super::rank::{number, percent};
use super::report::size;
use crate::bench::crossover::{batch_bytes, Comparison};

/// `batch.size` values (bytes of records) searched for where the advised codec stops
/// growing batches: a few records a batch up to a full default batch and beyond.
const LADDER: [usize; 11] = [
    512,
    1024,
    2048,
    4096,
    8192,
    16 * 1024,
    32 * 1024,
    64 * 1024,
    128 * 1024,
    256 * 1024,
    1024 * 1024,
];

/// Grown batches are worth a paragraph from this share of the batches on.
const WORTH_SAYING: f64 = 0.1;
/// The printed rule says `only_if_smaller = true` from this share on: most rewrites
/// would be kept larger than what they replace.
pub(crate) const MOSTLY_GROWN: f64 = 0.5;

/// The advised codec against what stores the records now, batch by batch.
pub(crate) struct SmallBatches {
    choice: Candidate,
    /// What the producer sends now, for people.
    now: String,
    now_spec: Candidate,
    comparison: Comparison,
    records_per_batch: f64,
    /// The smallest ladder `batch.size` at which the choice is smaller in total and
    /// fewer than half its batches grow, with the records a batch there.
    stops_at: Option<(usize, f64)>,
}

impl SmallBatches {
    pub(crate) fn grown_share(&self) -> f64 {
        self.comparison.grown_share()
    }

    /// Whether the printed rule should keep the producer's batch when not smaller.
    pub(crate) fn suggests_only_if_smaller(&self) -> bool {
        self.grown_share() >= MOSTLY_GROWN
    }

    pub(crate) fn text(&self, out: &mut String) {
        let c = &self.comparison;
        let _ = write!(
            out,
            "Small batches: at today's {:.0} records a batch, {} of {} batches ({}) come out \
             larger in {} than in {} ({} {} in total); kpress stores them in the rule's codec \
             and counts them `grown`.",
            self.records_per_batch,
            c.grown,
            c.batches,
            percent(self.grown_share()),
            self.choice,
            self.now,
            percent(c.change().abs()),
            if c.change() > 0.0 { "more" } else { "less" },
        );
        match self.stops_at {
            Some((batch_size, records)) => {
                let _ = write!(
                    out,
                    " From batch.size {} (about {records:.0} records a batch) {} stores less \
                     than {} and most batches shrink: batch more (the producers' batch.size, \
                     and linger.ms to fill it)",
                    size(batch_size as u64),
                    self.choice,
                    self.now_spec
                );
            }
            None => {
                let _ = write!(
                    out,
                    " It stores more than {} even at batch.size {}: batching more will not \
                     turn it around",
                    self.now_spec,
                    size(*LADDER.last().expect("a ladder") as u64)
                );
            }
        }
        let _ = writeln!(
            out,
            ", or set only_if_smaller = true in the rule to keep the producer's batch when the \
             rewrite is not smaller (with a named codec: in topic mode a batch passed as sent \
             into a topic of another codec is converted by the broker itself, to the same size)."
        );
    }

    pub(crate) fn json(&self) -> Value {
        let c = &self.comparison;
        json!({
            "candidate": self.choice.to_string(),
            "now": self.now,
            "batches": c.batches,
            "grown": c.grown,
            "not_smaller": c.not_smaller,
            "batch_bytes": c.candidate_bytes,
            "now_bytes": c.producer_bytes,
            "records_per_batch": self.records_per_batch,
            "smaller_from_batch_size": self.stops_at.map(|(s, _)| s),
            "only_if_smaller": self.suggests_only_if_smaller(),
        })
    }
}

/// `choice` against what the producer sends now (`now`: its codec as a spec, and
/// each batch's bytes as sent), when enough of today's batches grow to say so.
pub(crate) fn check(
    input: &Input,
    choice: &Candidate,
    now_label: &str,
    now_spec: &Candidate,
    now_bytes: &[u64],
) -> anyhow::Result<Option<SmallBatches>> {
    if choice == now_spec {
        return Ok(None);
    }
    let comparison = Comparison::of(now_bytes, &batch_bytes(choice, &input.sections)?);
    if comparison.grown_share() < WORTH_SAYING {
        return Ok(None);
    }
    let raw_now = raw_per_batch(&input.sections);
    let mut stops_at = None;
    for batch_size in LADDER {
        if (batch_size as f64) <= raw_now {
            continue;
        }
        let sections = (input.regroup)(batch_size)?;
        let there = Comparison::of(
            &batch_bytes(now_spec, &sections)?,
            &batch_bytes(choice, &sections)?,
        );
        if there.smaller() && there.grown_share() < MOSTLY_GROWN {
            stops_at = Some((batch_size, records_per_batch(&sections)));
            break;
        }
    }
    Ok(Some(SmallBatches {
        choice: choice.clone(),
        now: now_label.to_owned(),
        now_spec: now_spec.clone(),
        comparison,
        records_per_batch: records_per_batch(&input.sections),
        stops_at,
    }))
}

/// From kpress's own counters: the share of a topic's rewritten batches that grew
/// (`rewritten`, `grown`), when it is worth a sentence; `mean_batch` is the client
/// batches' mean size.
pub(crate) fn live_text(rewritten: f64, grown: f64, mean_batch: Option<f64>) -> Option<String> {
    if rewritten <= 0.0 || grown / rewritten < WORTH_SAYING {
        return None;
    }
    Some(format!(
        "{} of {} batches kpress rewrote ({}) came out larger than the producer sent them{}: \
         batch more (the producers' batch.size, and linger.ms to fill it), or set \
         only_if_smaller = true in the topic's rule to keep the producer's batch when the \
         rewrite is not smaller (with a named codec: in topic mode a batch passed as sent is \
         converted by the broker itself, to the same size). kpress bench --batch-sizes on a \
         sample of the topic's records shows from what batch size its codec stops growing.",
        number(grown),
        number(rewritten),
        percent((grown / rewritten).min(1.0)),
        mean_batch.map_or(String::new(), |m| format!(
            " (client batches average {})",
            size(m.round() as u64)
        )),
    ))
}

fn raw_per_batch(sections: &[RecordsSection]) -> f64 {
    sections.iter().map(|s| s.records.len() as f64).sum::<f64>() / sections.len().max(1) as f64
}

fn records_per_batch(sections: &[RecordsSection]) -> f64 {
    sections.iter().map(|s| f64::from(s.count)).sum::<f64>() / sections.len().max(1) as f64
}
