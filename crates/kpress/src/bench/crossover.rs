//! `kpress bench --batch-sizes`: at each number of records per batch, each candidate's
//! batches against the same batches as the producer compresses them (`--against`,
//! gzip-6 by default): where a rewrite stops coming out larger than what it replaces
//! (kpress counts those batches `grown`). Sizes only: they do not depend on the
//! machine, so the table is the same on every run.

use std::fmt::Write;

use anyhow::Context;
use kpress_batch::HEADER_LEN;
use kpress_codec::{Candidate, Codec, Compressor};
use kpress_measure::RecordsSection;
use serde_json::{json, Value};

/// Records per batch measured when `--batch-sizes` lists none: from a record a batch
/// (a producer with linger.ms=0 at a low rate) to a full default batch.
pub(crate) const DEFAULT_BATCH_SIZES: [usize; 12] =
    [1, 2, 5, 10, 14, 20, 50, 100, 200, 500, 1000, 2000];

/// What the Java producer and librdkafka write by default for `compression.type=gzip`:
/// zlib's default level, 6 (`compression.gzip.level=-1`, librdkafka's
/// `compression.level=-1`).
pub(crate) const PRODUCER_GZIP: &str = "gzip:6";

/// Each batch's bytes (the 61-byte header and the compressed records) in `candidate`.
pub(crate) fn batch_bytes(
    candidate: &Candidate,
    sections: &[RecordsSection],
) -> anyhow::Result<Vec<u64>> {
    let codec = candidate.codec();
    let mut compressor = Compressor::new(codec, candidate.options());
    let mut out = Vec::new();
    sections
        .iter()
        .map(|section| {
            out.clear();
            if codec == Codec::None {
                out.extend_from_slice(&section.records);
            } else {
                compressor
                    .compress(&section.records, &mut out)
                    .with_context(|| format!("compressing with {candidate}"))?;
            }
            Ok((HEADER_LEN + out.len()) as u64)
        })
        .collect()
}

/// A candidate's batches against the producer's, batch by batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Comparison {
    pub(crate) batches: usize,
    pub(crate) producer_bytes: u64,
    pub(crate) candidate_bytes: u64,
    /// Batches larger than the producer's: kpress stores them and counts them `grown`.
    pub(crate) grown: usize,
    /// Batches not smaller (`grown` and equal ones): what `only_if_smaller` passes as sent.
    pub(crate) not_smaller: usize,
}

impl Comparison {
    pub(crate) fn of(producer: &[u64], candidate: &[u64]) -> Comparison {
        let pairs = || producer.iter().zip(candidate);
        Comparison {
            batches: producer.len().min(candidate.len()),
            producer_bytes: pairs().map(|(p, _)| p).sum(),
            candidate_bytes: pairs().map(|(_, c)| c).sum(),
            grown: pairs().filter(|(p, c)| c > p).count(),
            not_smaller: pairs().filter(|(p, c)| c >= p).count(),
        }
    }

    /// The candidate's bytes over the producer's, less one: +0.08 is 8% larger.
    pub(crate) fn change(&self) -> f64 {
        self.candidate_bytes as f64 / self.producer_bytes.max(1) as f64 - 1.0
    }

    pub(crate) fn grown_share(&self) -> f64 {
        self.grown as f64 / self.batches.max(1) as f64
    }

    /// Smaller in total than the producer's batches.
    pub(crate) fn smaller(&self) -> bool {
        self.candidate_bytes < self.producer_bytes
    }
}

/// One number of records per batch.
#[derive(Debug, Clone)]
pub(crate) struct Row {
    pub(crate) records_per_batch: usize,
    pub(crate) batches: usize,
    pub(crate) raw_bytes: u64,
    pub(crate) producer_bytes: u64,
    /// Per candidate, in the order given.
    pub(crate) comparisons: Vec<Comparison>,
}

/// The whole measurement.
#[derive(Debug, Clone)]
pub(crate) struct Crossover {
    pub(crate) against: Candidate,
    pub(crate) candidates: Vec<Candidate>,
    pub(crate) rows: Vec<Row>,
    /// Sizes left out: fewer records than one batch of that size.
    pub(crate) too_few_records: Vec<usize>,
}

/// Groups `values` at each of `sizes` records per batch (full batches only, at most
/// `max_batches` of them) and compares each candidate with `against` batch by batch.
pub(crate) fn measure(
    values: &[&[u8]],
    sizes: &[usize],
    max_batches: Option<usize>,
    against: &Candidate,
    candidates: &[Candidate],
) -> anyhow::Result<Crossover> {
    let mut sizes = sizes.to_vec();
    sizes.sort_unstable();
    sizes.dedup();
    let mut rows = Vec::new();
    let mut too_few_records = Vec::new();
    for n in sizes {
        let whole = values.len() / n.max(1);
        if whole == 0 {
            too_few_records.push(n);
            continue;
        }
        // A short last batch would compare unlike batches: only full ones count.
        let take = max_batches.map_or(whole, |m| m.min(whole));
        let sections = kpress_measure::sections(&values[..take * n], n);
        let producer = batch_bytes(against, &sections)?;
        let comparisons = candidates
            .iter()
            .map(|c| Ok(Comparison::of(&producer, &batch_bytes(c, &sections)?)))
            .collect::<anyhow::Result<Vec<_>>>()?;
        rows.push(Row {
            records_per_batch: n,
            batches: sections.len(),
            raw_bytes: sections.iter().map(|s| s.records.len() as u64).sum(),
            producer_bytes: producer.iter().sum(),
            comparisons,
        });
    }
    Ok(Crossover {
        against: against.clone(),
        candidates: candidates.to_vec(),
        rows,
        too_few_records,
    })
}

impl Crossover {
    /// The fewest records per batch from which the candidate's batches are smaller in
    /// total than the producer's at every measured size; `None` when even the largest
    /// measured is not.
    pub(crate) fn crossover(&self, candidate: usize) -> Option<usize> {
        let mut from = None;
        for row in self.rows.iter().rev() {
            if !row.comparisons[candidate].smaller() {
                break;
            }
            from = Some(row.records_per_batch);
        }
        from
    }

    fn crossover_text(&self, candidate: usize) -> String {
        let largest = self.rows.last().map_or(0, |r| r.records_per_batch);
        match self.crossover(candidate) {
            Some(n) if Some(n) == self.rows.first().map(|r| r.records_per_batch) => {
                "smaller at every measured size".to_owned()
            }
            Some(n) => format!("smaller from {n} records per batch"),
            None => format!("larger at every size up to {largest} records per batch"),
        }
    }

    pub(crate) fn table(&self, source: &str) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "{source}: each candidate's batches against the same batches in {} (what the \
             producer sends), batch by batch",
            self.against
        );
        if !self.too_few_records.is_empty() {
            let sizes: Vec<String> = self.too_few_records.iter().map(|n| n.to_string()).collect();
            let _ = writeln!(
                out,
                "left out: {} records per batch (fewer records than one batch)",
                sizes.join(", ")
            );
        }
        out.push('\n');
        let mut header = vec![
            "records/batch".to_owned(),
            "batches".to_owned(),
            "records B".to_owned(),
            format!("{} B", self.against),
        ];
        header.extend(self.candidates.iter().map(|c| c.to_string()));
        let mut lines = vec![header];
        for row in &self.rows {
            let per_batch = |total: u64| format!("{:.0}", total as f64 / row.batches as f64);
            let mut line = vec![
                row.records_per_batch.to_string(),
                row.batches.to_string(),
                per_batch(row.raw_bytes),
                per_batch(row.producer_bytes),
            ];
            line.extend(row.comparisons.iter().map(|c| {
                format!(
                    "{:+.1}% {:.0}%g",
                    c.change() * 100.0,
                    c.grown_share() * 100.0
                )
            }));
            lines.push(line);
        }
        let widths: Vec<usize> = (0..lines[0].len())
            .map(|i| lines.iter().map(|l| l[i].len()).max().unwrap_or(0))
            .collect();
        for line in &lines {
            let cells: Vec<String> = line
                .iter()
                .zip(&widths)
                .enumerate()
                .map(|(i, (cell, w))| {
                    if i == 0 {
                        format!("{cell:<w$}")
                    } else {
                        format!("{cell:>w$}")
                    }
                })
                .collect();
            let _ = writeln!(out, "{}", cells.join("  ").trim_end());
        }
        let _ = writeln!(
            out,
            "\nB: bytes per batch, the 61-byte header included. Per candidate: its batches' \
             bytes against {}'s in total, and the share of batches larger than the \
             producer's (g: kpress stores them, counted `grown`, unless only_if_smaller).",
            self.against
        );
        for (i, candidate) in self.candidates.iter().enumerate() {
            let _ = writeln!(
                out,
                "- {candidate}: {} than {}.",
                self.crossover_text(i),
                self.against
            );
        }
        out
    }

    pub(crate) fn csv(&self) -> String {
        let mut out = String::from(
            "records_per_batch,batches,raw_bytes,against,against_bytes,candidate,batch_bytes,\
             grown,not_smaller\n",
        );
        for row in &self.rows {
            for (candidate, c) in self.candidates.iter().zip(&row.comparisons) {
                let _ = writeln!(
                    out,
                    "{},{},{},{},{},{candidate},{},{},{}",
                    row.records_per_batch,
                    row.batches,
                    row.raw_bytes,
                    self.against,
                    row.producer_bytes,
                    c.candidate_bytes,
                    c.grown,
                    c.not_smaller
                );
            }
        }
        out
    }

    pub(crate) fn json(&self, input: Value) -> Value {
        json!({
            "input": input,
            "against": self.against.to_string(),
            "too_few_records": self.too_few_records,
            "rows": self.rows.iter().map(|row| json!({
                "records_per_batch": row.records_per_batch,
                "batches": row.batches,
                "raw_bytes": row.raw_bytes,
                "against_bytes": row.producer_bytes,
                "candidates": self.candidates.iter().zip(&row.comparisons).map(|(candidate, c)| json!({
                    "candidate": candidate.to_string(),
                    "batch_bytes": c.candidate_bytes,
                    "change": c.change(),
                    "grown": c.grown,
                    "not_smaller": c.not_smaller,
                })).collect::<Vec<_>>(),
            })).collect::<Vec<_>>(),
            "crossover": self.candidates.iter().enumerate().map(|(i, candidate)| json!({
                "candidate": candidate.to_string(),
                "smaller_from_records_per_batch": self.crossover(i),
            })).collect::<Vec<_>>(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_grown_and_not_smaller_batch_by_batch() {
        let c = Comparison::of(&[100, 100, 100, 100], &[120, 100, 90, 101]);
        assert_eq!(
            c,
            Comparison {
                batches: 4,
                producer_bytes: 400,
                candidate_bytes: 411,
                grown: 2,
                not_smaller: 3,
            }
        );
        assert!(!c.smaller());
        assert!((c.change() - 0.0275).abs() < 1e-9);
        assert!((c.grown_share() - 0.5).abs() < 1e-9);
    }

    #[test]
    fn the_crossover_holds_at_every_larger_size() {
        let lines: Vec<Vec<u8>> = (0..400)
            .map(|i| format!("GET /item/{i} HTTP/1.1 200 {}", i * 7).into_bytes())
            .collect();
        let values: Vec<&[u8]> = lines.iter().map(Vec::as_slice).collect();
        let against: Candidate = "gzip:6".parse().unwrap();
        let none: Candidate = "none".parse().unwrap();
        let gzip9: Candidate = "gzip:9".parse().unwrap();
        let m = measure(&values, &[1, 10, 100, 1000], None, &against, &[none, gzip9]).unwrap();
        assert_eq!(m.too_few_records, vec![1000]);
        assert_eq!(
            m.rows.iter().map(|r| r.batches).collect::<Vec<_>>(),
            vec![400, 40, 4]
        );
        // Uncompressed records are larger than gzip's at every size but one record.
        assert_eq!(m.crossover(0), None);
        assert!(m
            .table("t")
            .contains("- none: larger at every size up to 100"));
        let json = m.json(Value::Null);
        assert_eq!(json["rows"][0]["candidates"][0]["candidate"], "none");
        assert_eq!(m.csv().lines().count(), 1 + 3 * 2);
    }
}
