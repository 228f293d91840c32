//! A steady idempotent `acks=all` producer of sequenced records running in the
//! background while a test breaks something (`KpressClient produce-steady`), the
//! read-back of everything stored (`KpressClient tally`), and the accounting between the
//! two: every acknowledged record read back exactly once, nothing read twice.

pub use crate::background_producer::Progress;
use crate::background_producer::{
    produce_steady_command, tally_topic, BackgroundProducer, Kind, Pace,
};
use crate::compression::Compression;
use anyhow::{ensure, Context};
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Settings of one steady producer.
#[derive(Debug, Clone)]
pub struct SteadyOptions {
    pub compression: Compression,
    /// Records sent per second.
    pub rate: u32,
    /// The producer stops by itself after this long (a bound, not the plan: tests stop
    /// it with [`SteadyProducer::finish`]).
    pub max_duration: Duration,
    pub linger_ms: u32,
    pub batch_size: u32,
    /// The lines record bodies are made of (record n carries line n mod lines).
    pub lines_file: PathBuf,
    /// More producer properties, `k=v`.
    pub properties: Vec<String>,
}

impl SteadyOptions {
    /// `rate` records per second in `compression`, bodies from `lines_file`.
    pub fn new(compression: Compression, rate: u32, lines_file: &Path) -> SteadyOptions {
        SteadyOptions {
            compression,
            rate,
            max_duration: Duration::from_secs(150),
            linger_ms: 5,
            batch_size: 65536,
            lines_file: lines_file.to_path_buf(),
            properties: Vec::new(),
        }
    }
}

const KIND: Kind = Kind {
    name: "steady",
    stop_on_failure: false,
};

/// A running `produce-steady`, killed on drop.
#[derive(Debug)]
pub struct SteadyProducer {
    run: BackgroundProducer,
    prefix: String,
}

impl SteadyProducer {
    /// Starts producing records named `prefix` into `topic` through `bootstrap`.
    pub fn start(
        bootstrap: &str,
        topic: &str,
        prefix: &str,
        options: &SteadyOptions,
    ) -> anyhow::Result<SteadyProducer> {
        let pace = Pace {
            rate: options.rate,
            max_duration: options.max_duration,
            compression: options.compression.name(),
            linger_ms: options.linger_ms,
            batch_size: options.batch_size,
        };
        let mut cmd = produce_steady_command(bootstrap, topic, prefix, &options.lines_file, pace)?;
        for property in &options.properties {
            cmd.args(["--property", property]);
        }
        Ok(SteadyProducer {
            run: BackgroundProducer::start(cmd, topic, KIND, &["acked-output"])?,
            prefix: prefix.to_string(),
        })
    }

    /// The record prefix, for [`tally`].
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The producer's stderr so far (its warnings and first failure).
    pub fn stderr(&self) -> String {
        self.run.stderr()
    }

    /// The latest progress line.
    pub fn progress(&self) -> Progress {
        self.run.progress()
    }

    /// Waits until at least `acked` records are acknowledged; fails after `timeout`,
    /// or at once if the producer exited.
    pub fn wait_acked(&mut self, acked: u64, timeout: Duration) -> anyhow::Result<Progress> {
        self.run.wait_acked(acked, timeout)
    }

    /// Waits until `more` records beyond those acknowledged now are acknowledged.
    pub fn wait_more_acked(&mut self, more: u64, timeout: Duration) -> anyhow::Result<Progress> {
        self.run.wait_more_acked(more, timeout)
    }

    /// Stops sending, waits (up to `timeout`) until every record sent is acknowledged
    /// or has failed and the producer exited, and returns what it reports.
    pub fn finish(mut self, timeout: Duration) -> anyhow::Result<SteadyReport> {
        let last = self.run.finish(timeout)?;
        let acked = parse_numbers(&std::fs::read_to_string(self.run.file("acked-output"))?)?;
        ensure!(
            acked.len() as u64 == last.acked,
            "the producer reports {} acknowledged records but listed {}",
            last.acked,
            acked.len()
        );
        Ok(SteadyReport {
            progress: last,
            acked,
            stderr: self.run.stderr(),
        })
    }
}

/// What a finished steady producer reports.
#[derive(Debug, Clone)]
pub struct SteadyReport {
    pub progress: Progress,
    /// The sequence numbers acknowledged, ascending.
    pub acked: Vec<u64>,
    pub stderr: String,
}

fn parse_numbers(text: &str) -> anyhow::Result<Vec<u64>> {
    text.lines()
        .filter(|l| !l.is_empty())
        .map(|l| l.parse().with_context(|| format!("not a number: {l:?}")))
        .collect()
}

/// Everything stored in `topic`, read through `bootstrap` from the beginning to the end
/// offsets: the sequence numbers of the records of `prefix` (with bodies from
/// `lines_file`), and how many records were anything else.
#[derive(Debug, Clone)]
pub struct Tally {
    pub read: Vec<u64>,
    pub corrupt: u64,
}

/// Reads `topic` back (see [`Tally`]) within `timeout`.
pub fn tally(
    bootstrap: &str,
    topic: &str,
    prefix: &str,
    lines_file: &Path,
    timeout: Duration,
) -> anyhow::Result<Tally> {
    let tallied = tally_topic(bootstrap, topic, prefix, lines_file, None, timeout)?;
    let read = parse_numbers(&tallied.output)?;
    let (records, corrupt) = (tallied.records, tallied.corrupt);
    ensure!(
        records == read.len() as u64 + corrupt,
        "tally of {topic}: {records} records, {} listed and {corrupt} corrupt",
        read.len()
    );
    Ok(Tally { read, corrupt })
}

/// A producer's acknowledged records against what was read back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Accounting {
    pub sent: u64,
    pub acked: u64,
    pub failed: u64,
    pub read: u64,
    /// Acknowledged, never read back.
    pub lost: Vec<u64>,
    /// Read back more than once (each listed once).
    pub duplicated: Vec<u64>,
    /// Read back though never sent (a sequence number past the last one sent).
    pub never_sent: Vec<u64>,
    /// Read back, sent, not acknowledged (a send whose outcome the producer never
    /// learned; with no failed sends there are none).
    pub read_unacked: u64,
    /// Records that are not exactly one the producer made.
    pub corrupt: u64,
}

impl Accounting {
    pub fn of(report: &SteadyReport, tally: &Tally) -> Accounting {
        let sent = report.progress.sent;
        // Times each record sent was read (saturating: 2 means "more than once"); a
        // soak reads millions, so a dense count, not a map.
        let mut times = vec![0u8; usize::try_from(sent).expect("sent fits memory")];
        let mut never_sent = Vec::new();
        for &n in &tally.read {
            match times.get_mut(n as usize).filter(|_| n < sent) {
                Some(t) => *t = t.saturating_add(1).min(2),
                None => never_sent.push(n),
            }
        }
        never_sent.sort_unstable();
        never_sent.dedup();
        let mut acked = vec![false; times.len()];
        let mut lost = Vec::new();
        for &n in &report.acked {
            match times.get(n as usize) {
                Some(0) | None => lost.push(n),
                Some(_) => {}
            }
            if let Some(a) = acked.get_mut(n as usize) {
                *a = true;
            }
        }
        let duplicated = (0..sent).filter(|n| times[*n as usize] > 1).collect();
        let read_unacked = times
            .iter()
            .zip(&acked)
            .filter(|(t, a)| **t > 0 && !**a)
            .count() as u64;
        Accounting {
            sent,
            acked: report.progress.acked,
            failed: report.progress.failed,
            read: tally.read.len() as u64,
            lost,
            duplicated,
            never_sent,
            read_unacked,
            corrupt: tally.corrupt,
        }
    }

    /// Nothing acknowledged lost, nothing duplicated, nothing invented or damaged, and
    /// no send failed: what an idempotent `acks=all` producer must see.
    pub fn problems(&self) -> Vec<String> {
        let mut problems = Vec::new();
        let few = |v: &[u64]| format!("{:?}", &v[..v.len().min(10)]);
        if !self.lost.is_empty() {
            problems.push(format!(
                "{} acknowledged records lost, e.g. {}",
                self.lost.len(),
                few(&self.lost)
            ));
        }
        if !self.duplicated.is_empty() {
            problems.push(format!(
                "{} records stored more than once, e.g. {}",
                self.duplicated.len(),
                few(&self.duplicated)
            ));
        }
        if !self.never_sent.is_empty() {
            problems.push(format!(
                "{} records read back that were never sent, e.g. {}",
                self.never_sent.len(),
                few(&self.never_sent)
            ));
        }
        if self.corrupt > 0 {
            problems.push(format!(
                "{} records read back are not what the producer sent",
                self.corrupt
            ));
        }
        problems.extend(Progress::problems(self.sent, self.acked, self.failed));
        problems
    }
}

impl fmt::Display for Accounting {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "sent {}, acked {}, failed {}, read back {} (lost {}, duplicated {}, never sent {}, \
             read but unacknowledged {}, corrupt {})",
            self.sent,
            self.acked,
            self.failed,
            self.read,
            self.lost.len(),
            self.duplicated.len(),
            self.never_sent.len(),
            self.read_unacked,
            self.corrupt
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accounting_finds_lost_duplicated_and_invented_records() {
        let report = SteadyReport {
            progress: Progress {
                sent: 6,
                acked: 4,
                failed: 2,
            },
            acked: vec![0, 1, 2, 4],
            stderr: String::new(),
        };
        let tally = Tally {
            read: vec![0, 2, 2, 3, 4, 9],
            corrupt: 0,
        };
        let accounting = Accounting::of(&report, &tally);
        assert_eq!(accounting.lost, vec![1]);
        assert_eq!(accounting.duplicated, vec![2]);
        assert_eq!(accounting.never_sent, vec![9]);
        assert_eq!(accounting.read_unacked, 1);
        assert_eq!(accounting.problems().len(), 4);
    }
}
