//! What the background producers (`steady_producer.rs`, `timed_producer.rs`, both
//! `KpressClient produce-steady`) share: the process and its files (stdout, stderr, a
//! stop file), the progress lines it prints ("progress sent=S acked=K failed=X", and
//! "steady …" last), waiting for acknowledgements, stopping it, and reading its topic
//! back (`KpressClient tally`).

use crate::java_client::JavaClient;
use crate::paths;
use crate::process::{run_ok, ChildGuard};
use anyhow::{bail, ensure, Context};
use std::fmt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The word of the producer's last line.
const LAST_LINE: &str = "steady";

/// `KpressClient <subcommand>` of the current Kafka version on records of `prefix` in
/// `topic` through `bootstrap`, with bodies from `lines_file`. The client reads records'
/// names back by splitting on white space, so a prefix is one word.
pub(crate) fn client_command(
    subcommand: &str,
    bootstrap: &str,
    topic: &str,
    prefix: &str,
    lines_file: &Path,
) -> anyhow::Result<Command> {
    anyhow::ensure!(
        !prefix.is_empty() && !prefix.contains(char::is_whitespace),
        "a record prefix is one word"
    );
    let mut cmd = JavaClient::new(paths::kafka_version()).command(subcommand);
    cmd.args([
        "--bootstrap",
        bootstrap,
        "--topic",
        topic,
        "--prefix",
        prefix,
    ])
    .arg("--file")
    .arg(lines_file);
    Ok(cmd)
}

/// How a `produce-steady` run sends: records per second, the bound on its length, its
/// codec and its batching.
pub(crate) struct Pace<'a> {
    pub rate: u32,
    pub max_duration: Duration,
    pub compression: &'a str,
    pub linger_ms: u32,
    pub batch_size: u32,
}

/// `KpressClient produce-steady` of records of `prefix` into `topic` at `pace`.
pub(crate) fn produce_steady_command(
    bootstrap: &str,
    topic: &str,
    prefix: &str,
    lines_file: &Path,
    pace: Pace<'_>,
) -> anyhow::Result<Command> {
    let mut cmd = client_command("produce-steady", bootstrap, topic, prefix, lines_file)?;
    cmd.args(["--rate", &pace.rate.to_string()])
        .args(["--duration-ms", &pace.max_duration.as_millis().to_string()])
        .args(["--compression", pace.compression])
        .args(["--linger-ms", &pace.linger_ms.to_string()])
        .args(["--batch-size", &pace.batch_size.to_string()]);
    Ok(cmd)
}

/// What the producer printed last: records handed to `send`, acknowledged, failed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Progress {
    pub sent: u64,
    pub acked: u64,
    pub failed: u64,
}

impl Progress {
    /// A line "`verb` sent=S acked=K failed=X" (other `k=v` words are passed over).
    pub(crate) fn parse(line: &str, verb: &str) -> Option<Progress> {
        let mut words = line.split_whitespace();
        if words.next() != Some(verb) {
            return None;
        }
        let mut progress = Progress::default();
        let mut seen = 0;
        for word in words {
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

impl Progress {
    /// What an idempotent `acks=all` producer must not end with: a failed send, or
    /// sends neither acknowledged nor failed.
    pub(crate) fn problems(sent: u64, acked: u64, failed: u64) -> Vec<String> {
        let ended = Progress {
            sent,
            acked,
            failed,
        };
        ended.ended_problems()
    }

    fn ended_problems(&self) -> Vec<String> {
        let mut problems = Vec::new();
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

impl fmt::Display for Progress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "sent {} acked {} failed {}",
            self.sent, self.acked, self.failed
        )
    }
}

/// How one kind of background producer is named and behaves.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Kind {
    /// Its name in messages ("steady", "timed").
    pub name: &'static str,
    /// Whether a failed send ends a wait at once.
    pub stop_on_failure: bool,
}

/// A running background producer, killed on drop.
#[derive(Debug)]
pub(crate) struct BackgroundProducer {
    process: ChildGuard,
    dir: tempfile::TempDir,
    topic: String,
    kind: Kind,
}

impl BackgroundProducer {
    /// Spawns `cmd` (`produce-steady` with its options; `--stop-file` is given here)
    /// with its output in a fresh directory; each of `files` is an option given the path
    /// of its name in that directory (`acks-output` …).
    pub(crate) fn start(
        mut cmd: Command,
        topic: &str,
        kind: Kind,
        files: &[&str],
    ) -> anyhow::Result<BackgroundProducer> {
        let dir = tempfile::Builder::new()
            .prefix(&format!("kpress-{}-", kind.name))
            .tempdir()?;
        let stdout = std::fs::File::create(dir.path().join("stdout"))?;
        let stderr = std::fs::File::create(dir.path().join("stderr"))?;
        for file in files {
            cmd.arg(format!("--{file}")).arg(dir.path().join(file));
        }
        cmd.arg("--stop-file")
            .arg(dir.path().join("stop"))
            .stdin(Stdio::null())
            .stdout(stdout)
            .stderr(stderr);
        let process = ChildGuard::spawn(&mut cmd)?;
        Ok(BackgroundProducer {
            process,
            dir,
            topic: topic.to_string(),
            kind,
        })
    }

    /// The path of one of its files.
    pub(crate) fn file(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    pub(crate) fn topic(&self) -> &str {
        &self.topic
    }

    fn stdout(&self) -> String {
        read_or_empty(&self.file("stdout"))
    }

    pub(crate) fn stderr(&self) -> String {
        read_or_empty(&self.file("stderr"))
    }

    pub(crate) fn progress(&self) -> Progress {
        self.stdout()
            .lines()
            .rev()
            .find_map(|l| Progress::parse(l, "progress"))
            .unwrap_or_default()
    }

    /// Waits until at least `acked` records are acknowledged; fails after `timeout`,
    /// or at once if the producer exited (or, if its kind says so, a send failed).
    pub(crate) fn wait_acked(&mut self, acked: u64, timeout: Duration) -> anyhow::Result<Progress> {
        let deadline = Instant::now() + timeout;
        let what = self.kind.name;
        loop {
            let progress = self.progress();
            ensure!(
                !self.kind.stop_on_failure || progress.failed == 0,
                "{}: a send failed at {progress}\n{}",
                self.topic,
                self.stderr()
            );
            if progress.acked >= acked {
                return Ok(progress);
            }
            if let Some(status) = self.process.try_wait() {
                bail!(
                    "the {what} producer on {} exited ({status}) at {progress}\n{}",
                    self.topic,
                    self.stderr()
                );
            }
            if Instant::now() > deadline {
                bail!(
                    "the {what} producer on {} did not reach {acked} acknowledged records \
                     within {timeout:?}: {progress}\n--- its stderr ---\n{}",
                    self.topic,
                    self.stderr()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Waits until `more` records beyond those acknowledged now are acknowledged.
    pub(crate) fn wait_more_acked(
        &mut self,
        more: u64,
        timeout: Duration,
    ) -> anyhow::Result<Progress> {
        let now = self.progress().acked;
        self.wait_acked(now + more, timeout)
    }

    /// Stops sending, waits (up to `timeout`) until every record sent is acknowledged
    /// or has failed and the producer exited successfully, and returns its last line.
    pub(crate) fn finish(&mut self, timeout: Duration) -> anyhow::Result<Progress> {
        std::fs::write(self.file("stop"), b"")?;
        let deadline = Instant::now() + timeout;
        let what = self.kind.name;
        let status = loop {
            if let Some(status) = self.process.try_wait() {
                break status;
            }
            if Instant::now() > deadline {
                self.process.kill();
                bail!(
                    "the {what} producer on {} did not finish within {timeout:?} of being \
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
            "the {what} producer on {} exited with {status}\n--- stdout ---\n{stdout}\n--- stderr ---\n{}",
            self.topic,
            self.stderr()
        );
        stdout
            .lines()
            .find_map(|l| Progress::parse(l, LAST_LINE))
            .with_context(|| format!("no final '{LAST_LINE} …' line in:\n{stdout}"))
    }
}

/// What `KpressClient tally` found: what it wrote to its output, and the records and
/// corrupt ones it counted.
pub(crate) struct Tallied {
    pub output: String,
    pub records: u64,
    pub corrupt: u64,
}

/// Reads `topic` back through `bootstrap` with `tally` (records of `prefix` with bodies
/// from `lines_file`; with `partitions`, as `--partitions` wrote them) within `timeout`.
pub(crate) fn tally_topic(
    bootstrap: &str,
    topic: &str,
    prefix: &str,
    lines_file: &Path,
    partitions: Option<u32>,
    timeout: Duration,
) -> anyhow::Result<Tallied> {
    let out = tempfile::Builder::new()
        .prefix("kpress-tally-")
        .tempfile()?;
    let mut cmd = client_command("tally", bootstrap, topic, prefix, lines_file)?;
    cmd.arg("--output")
        .arg(out.path())
        .args(["--timeout-ms", &timeout.as_millis().to_string()]);
    if let Some(partitions) = partitions {
        cmd.args(["--partitions", &partitions.to_string()]);
    }
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
    Ok(Tallied {
        output: std::fs::read_to_string(out.path())?,
        records: field("records")?,
        corrupt: field("corrupt")?,
    })
}

fn read_or_empty(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn progress_lines_parse_under_their_word() {
        assert_eq!(
            Progress::parse("progress sent=3 acked=2 failed=0", "progress"),
            Some(Progress {
                sent: 3,
                acked: 2,
                failed: 0
            })
        );
        assert_eq!(Progress::parse("progress sent=3", "progress"), None);
        assert_eq!(
            Progress::parse("timed sent=3 acked=2 failed=0", "steady"),
            None
        );
    }
}
