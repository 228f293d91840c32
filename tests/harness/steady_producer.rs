//! A steady idempotent `acks=all` producer of sequenced records running in the
//! background while a test breaks something (`KpressClient produce-steady`), the
//! read-back of everything stored (`KpressClient tally`), and the accounting between the
//! two: every acknowledged record read back exactly once, nothing read twice.

use crate::compression::Compression;
use crate::java;
use crate::paths;
use crate::process::{run_ok, ChildGuard};
use anyhow::{bail, ensure, Context};
use std::fmt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

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

/// What the producer printed last: records handed to `send`, acknowledged, failed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Progress {
    pub sent: u64,
    pub acked: u64,
    pub failed: u64,
}

impl Progress {
    fn parse(line: &str) -> Option<Progress> {
        let mut progress = Progress::default();
        let mut seen = 0;
        for word in line.split_whitespace() {
            let Some((key, value)) = word.split_once('=') else {
                continue;
            };
            let value: u64 = value.parse().ok()?;
            match key {
                "sent" => progress.sent = value,
                "acked" => progress.acked = value,
                "failed" => progress.failed = value,
                _ => continue,
            }
            seen += 1;
        }
        (seen == 3).then_some(progress)
    }
}

impl fmt::Display for Progress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "sent {} acked {} failed {}",
            self.sent, self.acked, self.failed
        )
    }
}

/// The `KpressClient` command of the current Kafka version's client.
fn client_command(subcommand: &str) -> Command {
    let version = paths::kafka_version();
    let classes = paths::java_test_clients(version);
    let mut cmd = java::client_command(version, &[&classes]);
    cmd.arg("KpressClient").arg(subcommand);
    cmd
}

/// A running `produce-steady`, killed on drop.
#[derive(Debug)]
pub struct SteadyProducer {
    process: ChildGuard,
    dir: tempfile::TempDir,
    prefix: String,
    topic: String,
}

impl SteadyProducer {
    /// Starts producing records named `prefix` into `topic` through `bootstrap`.
    pub fn start(
        bootstrap: &str,
        topic: &str,
        prefix: &str,
        options: &SteadyOptions,
    ) -> anyhow::Result<SteadyProducer> {
        ensure!(
            !prefix.is_empty() && !prefix.contains(char::is_whitespace),
            "a record prefix is one word"
        );
        let dir = tempfile::Builder::new()
            .prefix("kpress-steady-")
            .tempdir()?;
        let stdout = std::fs::File::create(dir.path().join("stdout"))?;
        let stderr = std::fs::File::create(dir.path().join("stderr"))?;
        let mut cmd = client_command("produce-steady");
        cmd.args([
            "--bootstrap",
            bootstrap,
            "--topic",
            topic,
            "--prefix",
            prefix,
        ])
        .arg("--file")
        .arg(&options.lines_file)
        .args(["--rate", &options.rate.to_string()])
        .args([
            "--duration-ms",
            &options.max_duration.as_millis().to_string(),
        ])
        .arg("--stop-file")
        .arg(dir.path().join("stop"))
        .arg("--acked-output")
        .arg(dir.path().join("acked"))
        .args(["--compression", options.compression.name()])
        .args(["--linger-ms", &options.linger_ms.to_string()])
        .args(["--batch-size", &options.batch_size.to_string()]);
        for property in &options.properties {
            cmd.args(["--property", property]);
        }
        cmd.stdin(Stdio::null()).stdout(stdout).stderr(stderr);
        let process = ChildGuard::spawn(&mut cmd)?;
        Ok(SteadyProducer {
            process,
            dir,
            prefix: prefix.to_string(),
            topic: topic.to_string(),
        })
    }

    /// The record prefix, for [`tally`].
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    fn stdout(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("stdout")).unwrap_or_default()
    }

    /// The producer's stderr so far (its warnings and first failure).
    pub fn stderr(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("stderr")).unwrap_or_default()
    }

    /// The latest progress line.
    pub fn progress(&self) -> Progress {
        self.stdout()
            .lines()
            .rev()
            .find_map(Progress::parse)
            .unwrap_or_default()
    }

    /// Waits until at least `acked` records are acknowledged; fails after `timeout`,
    /// or at once if the producer exited or a send failed.
    pub fn wait_acked(&mut self, acked: u64, timeout: Duration) -> anyhow::Result<Progress> {
        let deadline = Instant::now() + timeout;
        loop {
            let progress = self.progress();
            if progress.acked >= acked {
                return Ok(progress);
            }
            if let Some(status) = self.process.try_wait() {
                bail!(
                    "the steady producer on {} exited ({status}) at {progress}\n{}",
                    self.topic,
                    self.stderr()
                );
            }
            if Instant::now() > deadline {
                bail!(
                    "the steady producer on {} did not reach {acked} acknowledged records \
                     within {timeout:?}: {progress}\n--- its stderr ---\n{}",
                    self.topic,
                    self.stderr()
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Waits until `more` records beyond those acknowledged now are acknowledged.
    pub fn wait_more_acked(&mut self, more: u64, timeout: Duration) -> anyhow::Result<Progress> {
        let now = self.progress().acked;
        self.wait_acked(now + more, timeout)
    }

    /// Stops sending, waits (up to `timeout`) until every record sent is acknowledged
    /// or has failed and the producer exited, and returns what it reports.
    pub fn finish(mut self, timeout: Duration) -> anyhow::Result<SteadyReport> {
        std::fs::write(self.dir.path().join("stop"), b"")?;
        let deadline = Instant::now() + timeout;
        let status = loop {
            if let Some(status) = self.process.try_wait() {
                break status;
            }
            if Instant::now() > deadline {
                self.process.kill();
                bail!(
                    "the steady producer on {} did not finish within {timeout:?} of being \
                     stopped: {}\n--- its stderr ---\n{}",
                    self.topic,
                    self.progress(),
                    self.stderr()
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        };
        let stdout = self.stdout();
        ensure!(
            status.success(),
            "the steady producer on {} exited with {status}\n--- stdout ---\n{stdout}\n--- stderr ---\n{}",
            self.topic,
            self.stderr()
        );
        let last = stdout
            .lines()
            .find(|l| l.starts_with("steady "))
            .and_then(Progress::parse)
            .with_context(|| format!("no final 'steady …' line in:\n{stdout}"))?;
        let acked = parse_numbers(&std::fs::read_to_string(self.dir.path().join("acked"))?)?;
        ensure!(
            acked.len() as u64 == last.acked,
            "the producer reports {} acknowledged records but listed {}",
            last.acked,
            acked.len()
        );
        Ok(SteadyReport {
            progress: last,
            acked,
            stderr: self.stderr(),
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
    let out = tempfile::Builder::new()
        .prefix("kpress-tally-")
        .tempfile()?;
    let mut cmd = client_command("tally");
    cmd.args([
        "--bootstrap",
        bootstrap,
        "--topic",
        topic,
        "--prefix",
        prefix,
    ])
    .arg("--file")
    .arg(lines_file)
    .arg("--output")
    .arg(out.path())
    .args(["--timeout-ms", &timeout.as_millis().to_string()]);
    let finished = run_ok(&mut cmd, timeout + Duration::from_secs(60))
        .with_context(|| format!("reading {topic} back"))?;
    let stdout = finished.stdout_text();
    let line = stdout
        .lines()
        .find(|l| l.starts_with("tallied "))
        .with_context(|| format!("no 'tallied …' line in: {stdout}"))?;
    let field = |name: &str| -> anyhow::Result<u64> {
        line.split_whitespace()
            .find_map(|w| w.strip_prefix(name)?.strip_prefix('='))
            .with_context(|| format!("no {name}= in {line:?}"))?
            .parse()
            .with_context(|| format!("bad {name}= in {line:?}"))
    };
    let read = parse_numbers(&std::fs::read_to_string(out.path())?)?;
    let (records, corrupt) = (field("records")?, field("corrupt")?);
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
        if self.failed > 0 {
            problems.push(format!("{} sends failed", self.failed));
        }
        if self.acked + self.failed != self.sent {
            problems.push(format!(
                "{} sent but {} acknowledged and {} failed",
                self.sent, self.acked, self.failed
            ));
        }
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
        assert_eq!(
            Progress::parse("progress sent=3 acked=2 failed=0"),
            Some(Progress {
                sent: 3,
                acked: 2,
                failed: 0
            })
        );
        assert_eq!(Progress::parse("progress sent=3"), None);
    }
}
