//! An idempotent `acks=all` Java producer whose every acknowledgement is timed
//! (`KpressClient produce-steady --partitions N --acks-output`), the read-back of what
//! it stored straight from the brokers (`KpressClient tally --partitions N`), the audit
//! between the two (every acknowledged record stored exactly once, in order per
//! partition, byte for byte), and the longest a partition went without an
//! acknowledgement in a window of time.
//!
//! Records carry their partition and their sequence number in it: the i-th record sent
//! goes to partition i mod N as its record i div N.

pub use crate::background_producer::Progress;
use crate::background_producer::{
    produce_steady_command, tally_topic, BackgroundProducer, Kind, Pace,
};
use anyhow::{bail, ensure, Context};
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Settings of one timed producer.
#[derive(Debug, Clone)]
pub struct TimedOptions {
    /// The topic's partitions, written round-robin.
    pub partitions: u32,
    /// Records sent per second, over all partitions.
    pub rate: u32,
    /// `lz4`, `gzip`, … or `none`.
    pub compression: String,
    pub linger_ms: u32,
    /// The producer stops by itself after this long (a bound: tests stop it with
    /// [`TimedProducer::finish`]).
    pub max_duration: Duration,
    /// The lines record bodies are made of.
    pub lines_file: PathBuf,
}

impl TimedOptions {
    /// `rate` records per second over `partitions` partitions in `compression`.
    pub fn new(partitions: u32, rate: u32, compression: &str, lines_file: &Path) -> TimedOptions {
        TimedOptions {
            partitions,
            rate,
            compression: compression.to_string(),
            linger_ms: 5,
            max_duration: Duration::from_secs(600),
            lines_file: lines_file.to_path_buf(),
        }
    }
}

/// Microseconds since the Unix epoch: the clock acknowledgements are timed on.
pub fn wall_micros(at: SystemTime) -> u64 {
    at.duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
}

const KIND: Kind = Kind {
    name: "timed",
    stop_on_failure: true,
};

/// A running `produce-steady --partitions N`, killed on drop.
#[derive(Debug)]
pub struct TimedProducer {
    run: BackgroundProducer,
    prefix: String,
    options: TimedOptions,
}

impl TimedProducer {
    /// Starts producing records named `prefix` into `topic` through `bootstrap`.
    pub fn start(
        bootstrap: &str,
        topic: &str,
        prefix: &str,
        options: &TimedOptions,
    ) -> anyhow::Result<TimedProducer> {
        ensure!(options.partitions > 0, "a topic has partitions");
        // Kafka's own batch size and request timeout: the pauses measured are those a
        // client with the defaults sees.
        let pace = Pace {
            rate: options.rate,
            max_duration: options.max_duration,
            compression: &options.compression,
            linger_ms: options.linger_ms,
            batch_size: 16384,
        };
        let mut cmd = produce_steady_command(bootstrap, topic, prefix, &options.lines_file, pace)?;
        cmd.args(["--partitions", &options.partitions.to_string()])
            .args(["--property", "request.timeout.ms=30000"]);
        Ok(TimedProducer {
            run: BackgroundProducer::start(cmd, topic, KIND, &["acks-output"])?,
            prefix: prefix.to_string(),
            options: options.clone(),
        })
    }

    /// The producer's stderr so far (its warnings and first failure).
    pub fn stderr(&self) -> String {
        self.run.stderr()
    }

    /// The latest progress line.
    pub fn progress(&self) -> Progress {
        self.run.progress()
    }

    /// Waits until `more` records beyond those acknowledged now are acknowledged;
    /// fails after `timeout`, or at once if the producer exited or a send failed.
    pub fn wait_more_acked(&mut self, more: u64, timeout: Duration) -> anyhow::Result<Progress> {
        self.run.wait_more_acked(more, timeout)
    }

    /// Stops sending, waits (up to `timeout`) until every record sent is acknowledged
    /// or has failed and the producer exited, and returns what it reports.
    pub fn finish(mut self, timeout: Duration) -> anyhow::Result<TimedReport> {
        let progress = self.run.finish(timeout)?;
        let acks = parse_acks(
            &std::fs::read_to_string(self.run.file("acks-output"))?,
            self.options.partitions,
        )?;
        ensure!(
            acks.len() as u64 == progress.acked,
            "the producer reports {} acknowledged records but timed {}",
            progress.acked,
            acks.len()
        );
        Ok(TimedReport {
            topic: self.run.topic().to_string(),
            prefix: self.prefix,
            options: self.options,
            progress,
            acks,
            stderr: self.run.stderr(),
        })
    }
}

/// One acknowledgement: the record (partition, sequence number) and when.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ack {
    pub partition: u32,
    pub seq: u64,
    /// See [`wall_micros`].
    pub at_micros: u64,
}

fn parse_acks(text: &str, partitions: u32) -> anyhow::Result<Vec<Ack>> {
    text.lines()
        .filter(|l| !l.is_empty())
        .map(|line| {
            let mut fields = line.split(' ').map(str::parse::<u64>);
            let mut next = || -> anyhow::Result<u64> {
                Ok(fields
                    .next()
                    .with_context(|| format!("short acknowledgement line {line:?}"))??)
            };
            let ack = Ack {
                partition: u32::try_from(next()?)?,
                seq: next()?,
                at_micros: next()?,
            };
            ensure!(
                ack.partition < partitions,
                "partition out of range: {line:?}"
            );
            Ok(ack)
        })
        .collect()
}

/// What a finished timed producer reports.
#[derive(Debug, Clone)]
pub struct TimedReport {
    pub topic: String,
    pub prefix: String,
    pub options: TimedOptions,
    pub progress: Progress,
    /// Every acknowledgement, in the order the callbacks ran.
    pub acks: Vec<Ack>,
    pub stderr: String,
}

/// The longest a partition went without an acknowledgement in a window of time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pause {
    pub longest: Duration,
    pub partition: u32,
    /// When it began, microseconds after the window's start.
    pub began_after: Duration,
}

impl TimedReport {
    /// The longest any one partition went without an acknowledgement between `from`
    /// and `to` (a partition acknowledged nothing in the whole window: the window).
    pub fn longest_pause(&self, from: SystemTime, to: SystemTime) -> Pause {
        let (from, to) = (wall_micros(from), wall_micros(to));
        let mut pause = Pause {
            longest: Duration::ZERO,
            partition: 0,
            began_after: Duration::ZERO,
        };
        for partition in 0..self.options.partitions {
            let mut times: Vec<u64> = self
                .acks
                .iter()
                .filter(|a| a.partition == partition && a.at_micros > from && a.at_micros < to)
                .map(|a| a.at_micros)
                .collect();
            times.sort_unstable();
            let mut last = from;
            for at in times.into_iter().chain([to]) {
                let gap = Duration::from_micros(at - last);
                if gap > pause.longest {
                    pause = Pause {
                        longest: gap,
                        partition,
                        began_after: Duration::from_micros(last - from),
                    };
                }
                last = at;
            }
        }
        pause
    }
}

/// Records sent to `partition` when `sent` were sent round-robin over `partitions`.
fn sent_to(partition: u32, sent: u64, partitions: u32) -> u64 {
    let partitions = u64::from(partitions);
    sent / partitions + u64::from(u64::from(partition) < sent % partitions)
}

/// One record read back: its offset and the sequence number it carries (None: it is
/// not, byte for byte, a record of the producer for that partition).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadRecord {
    pub offset: u64,
    pub seq: Option<u64>,
}

/// Reads `report`'s topic back through `bootstrap` (every partition from the start to
/// the end offsets) within `timeout`: per partition, its records in offset order.
pub fn read_back(
    bootstrap: &str,
    report: &TimedReport,
    timeout: Duration,
) -> anyhow::Result<Vec<Vec<ReadRecord>>> {
    let partitions = report.options.partitions;
    let tallied = tally_topic(
        bootstrap,
        &report.topic,
        &report.prefix,
        &report.options.lines_file,
        Some(partitions),
        timeout,
    )?;
    let mut read: Vec<Vec<ReadRecord>> = vec![Vec::new(); partitions as usize];
    for line in tallied.output.lines() {
        let fields: Vec<&str> = line.split(' ').collect();
        let [partition, offset, seq] = fields[..] else {
            bail!("bad read-back line {line:?}");
        };
        let partition: usize = partition.parse()?;
        let seq: i64 = seq.parse()?;
        read.get_mut(partition)
            .with_context(|| format!("partition out of range: {line:?}"))?
            .push(ReadRecord {
                offset: offset.parse()?,
                seq: u64::try_from(seq).ok(),
            });
    }
    Ok(read)
}

/// A producer's acknowledged records against what its topic holds.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Audit {
    pub sent: u64,
    pub acked: u64,
    pub failed: u64,
    pub read: u64,
    /// Acknowledged, never read back: (partition, sequence number).
    pub lost: Vec<(u32, u64)>,
    /// Read back more than once (each listed once).
    pub duplicated: Vec<(u32, u64)>,
    /// Read back after a record that was sent after it: (partition, offset).
    pub reordered: Vec<(u32, u64)>,
    /// Not byte for byte a record the producer sent to that partition, or a sequence
    /// number it never sent there: (partition, offset).
    pub corrupt: Vec<(u32, u64)>,
    /// Read back, sent, not acknowledged (with no failed sends there are none).
    pub read_unacked: u64,
}

impl Audit {
    pub fn of(report: &TimedReport, read: &[Vec<ReadRecord>]) -> Audit {
        let partitions = report.options.partitions;
        let mut audit = Audit {
            sent: report.progress.sent,
            acked: report.progress.acked,
            failed: report.progress.failed,
            read: read.iter().map(|p| p.len() as u64).sum(),
            ..Audit::default()
        };
        // Per partition: times each sequence number was read (2: more than once), and
        // whether it was acknowledged.
        let mut times: Vec<Vec<u8>> = (0..partitions)
            .map(|p| vec![0; usize::try_from(sent_to(p, audit.sent, partitions)).unwrap()])
            .collect();
        for (partition, records) in read.iter().enumerate() {
            let p = u32::try_from(partition).unwrap();
            let mut highest: Option<u64> = None;
            for record in records {
                let Some(slot) = record
                    .seq
                    .and_then(|s| times[partition].get_mut(usize::try_from(s).ok()?))
                else {
                    audit.corrupt.push((p, record.offset));
                    continue;
                };
                let seq = record.seq.expect("a slot has a sequence number");
                if *slot > 0 {
                    if *slot == 1 {
                        audit.duplicated.push((p, seq));
                    }
                } else if highest.is_some_and(|h| seq < h) {
                    audit.reordered.push((p, record.offset));
                }
                *slot = slot.saturating_add(1).min(2);
                highest = highest.max(Some(seq));
            }
        }
        let mut acked: Vec<Vec<bool>> = times.iter().map(|t| vec![false; t.len()]).collect();
        for ack in &report.acks {
            let (p, s) = (ack.partition as usize, ack.seq as usize);
            match times[p].get(s) {
                Some(0) | None => audit.lost.push((ack.partition, ack.seq)),
                Some(_) => {}
            }
            if let Some(a) = acked[p].get_mut(s) {
                *a = true;
            }
        }
        audit.read_unacked = times
            .iter()
            .zip(&acked)
            .flat_map(|(t, a)| t.iter().zip(a))
            .filter(|(t, a)| **t > 0 && !**a)
            .count() as u64;
        audit
    }

    /// Nothing acknowledged lost, nothing duplicated, reordered or damaged, and no send
    /// failed.
    pub fn problems(&self) -> Vec<String> {
        let mut problems = Vec::new();
        let few = |v: &[(u32, u64)]| format!("{:?}", &v[..v.len().min(10)]);
        let mut check = |list: &[(u32, u64)], what: &str| {
            if !list.is_empty() {
                problems.push(format!("{} {what}, e.g. {}", list.len(), few(list)));
            }
        };
        check(
            &self.lost,
            "acknowledged records lost (partition, sequence number)",
        );
        check(
            &self.duplicated,
            "records stored more than once (partition, sequence number)",
        );
        check(
            &self.reordered,
            "records stored out of order (partition, offset)",
        );
        check(
            &self.corrupt,
            "records not byte for byte as sent (partition, offset)",
        );
        problems.extend(Progress::problems(self.sent, self.acked, self.failed));
        problems
    }
}

impl fmt::Display for Audit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "sent {}, acked {}, failed {}, read back {} (lost {}, duplicated {}, reordered {}, \
             corrupt {}, read but unacknowledged {})",
            self.sent,
            self.acked,
            self.failed,
            self.read,
            self.lost.len(),
            self.duplicated.len(),
            self.reordered.len(),
            self.corrupt.len(),
            self.read_unacked
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(sent: u64, acks: &[(u32, u64, u64)]) -> TimedReport {
        TimedReport {
            topic: "t".to_string(),
            prefix: "p".to_string(),
            options: TimedOptions::new(2, 1, "none", Path::new("lines")),
            progress: Progress {
                sent,
                acked: acks.len() as u64,
                failed: 0,
            },
            acks: acks
                .iter()
                .map(|&(partition, seq, at_micros)| Ack {
                    partition,
                    seq,
                    at_micros,
                })
                .collect(),
            stderr: String::new(),
        }
    }

    fn records(seqs: &[Option<u64>]) -> Vec<ReadRecord> {
        seqs.iter()
            .enumerate()
            .map(|(offset, &seq)| ReadRecord {
                offset: offset as u64,
                seq,
            })
            .collect()
    }

    #[test]
    fn the_audit_finds_lost_duplicated_reordered_and_corrupt_records() {
        // Seven sent over two partitions: 0, 1, 2, 3 to partition 0 and 0, 1, 2 to 1.
        let acks = [
            (0, 0, 1),
            (1, 0, 2),
            (0, 1, 3),
            (1, 1, 4),
            (0, 2, 5),
            (1, 2, 6),
        ];
        let clean = Audit::of(
            &report(6, &acks),
            &[
                records(&[Some(0), Some(1), Some(2)]),
                records(&[Some(0), Some(1), Some(2)]),
            ],
        );
        assert!(clean.problems().is_empty(), "{clean}");
        let audit = Audit::of(
            &report(7, &acks),
            &[
                records(&[Some(0), Some(2), Some(1), Some(2), Some(3)]),
                records(&[Some(0), None, Some(7)]),
            ],
        );
        assert_eq!(audit.lost, [(1, 1), (1, 2)]);
        assert_eq!(audit.duplicated, [(0, 2)]);
        assert_eq!(audit.reordered, [(0, 2)]);
        assert_eq!(audit.corrupt, [(1, 1), (1, 2)]);
        assert_eq!(audit.read_unacked, 1);
        assert_eq!(audit.problems().len(), 5, "{:?}", audit.problems());
    }

    #[test]
    fn a_pause_is_the_longest_a_partition_went_unacknowledged() {
        let at = |micros| UNIX_EPOCH + Duration::from_micros(micros);
        let timed = report(
            8,
            &[
                (0, 0, 110),
                (1, 0, 120),
                (0, 1, 130),
                (0, 2, 300),
                (1, 1, 400),
                (0, 3, 450),
            ],
        );
        let pause = timed.longest_pause(at(100), at(500));
        assert_eq!(
            pause,
            Pause {
                longest: Duration::from_micros(280),
                partition: 1,
                began_after: Duration::from_micros(20),
            }
        );
        // Nothing acknowledged in the window: the window.
        assert_eq!(
            timed.longest_pause(at(200), at(300)).longest,
            Duration::from_micros(100)
        );
        assert_eq!(sent_to(0, 7, 2), 4);
        assert_eq!(sent_to(1, 7, 2), 3);
    }
}
