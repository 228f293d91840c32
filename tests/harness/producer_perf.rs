//! Kafka's own load generator, `org.apache.kafka.tools.ProducerPerformance`, run to
//! completion against any bootstrap (a broker or kpress) with the producer settings
//! and connection security a benchmark chooses, and its final summary line parsed:
//! records sent, records/s, MB/s, average, maximum and percentile latencies.
//!
//! Latency is ProducerPerformance's: from `send()` to the acknowledgement callback,
//! in whole milliseconds for the percentiles, so it includes the time a record waits
//! in the producer's buffer. Unthrottled runs (`throughput: None`) keep that buffer
//! full, and their latency then says more about the buffer than about the path;
//! latency comparisons want a fixed rate below what every compared path sustains.

use crate::compression::Compression;
use crate::java;
use crate::process::{run, Finished};
use anyhow::{bail, Context};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// What each record carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Payload {
    /// Lines of a UTF-8 text file (e.g. a dataset of `datasets/`), one record per
    /// line without its `\n`; ProducerPerformance picks one at random for every record
    /// from a fixed seed, so every run with the same file and count sends the same
    /// records.
    LinesOf(PathBuf),
    /// Records of this many bytes of random capital letters.
    RecordSize(u32),
}

/// One ProducerPerformance run: where to, how much, and the producer's settings.
#[derive(Debug, Clone)]
pub struct ProducerPerf {
    /// `bootstrap.servers`.
    pub bootstrap: String,
    pub topic: String,
    /// `--num-records`.
    pub records: u64,
    pub payload: Payload,
    /// `--throughput` in records per second; `None` is `-1`, as fast as it goes.
    pub throughput: Option<u64>,
    /// `acks`: `0`, `1` or `all`.
    pub acks: String,
    pub linger_ms: u32,
    pub batch_size: u32,
    pub compression: Compression,
    /// More producer properties, `k=v`, written after the ones above (a later key
    /// wins): e.g. [`ClientSecurity::java_properties`](crate::tls::ClientSecurity::java_properties).
    pub properties: Vec<String>,
    /// The whole run, JVM start included, is killed after this long.
    pub timeout: Duration,
}

impl ProducerPerf {
    /// `records` records of `payload` into `topic` through `bootstrap`, unthrottled,
    /// `acks=1`, `linger.ms=5`, `batch.size=262144`, lz4, a 10-minute bound.
    pub fn new(bootstrap: &str, topic: &str, records: u64, payload: Payload) -> ProducerPerf {
        ProducerPerf {
            bootstrap: bootstrap.to_string(),
            topic: topic.to_string(),
            records,
            payload,
            throughput: None,
            acks: "1".to_string(),
            linger_ms: 5,
            batch_size: 256 * 1024,
            compression: Compression::Lz4,
            properties: Vec::new(),
            timeout: Duration::from_secs(600),
        }
    }

    /// The producer's properties file (`--producer.config`): the settings above, then
    /// [`properties`](Self::properties). A file, because `--producer-props` splits each
    /// argument at every `=` and so cannot carry a `sasl.jaas.config`.
    pub fn producer_config(&self) -> anyhow::Result<String> {
        let mut text = String::new();
        let settings = [
            ("bootstrap.servers", self.bootstrap.clone()),
            ("acks", self.acks.clone()),
            ("linger.ms", self.linger_ms.to_string()),
            ("batch.size", self.batch_size.to_string()),
            ("compression.type", self.compression.name().to_string()),
        ];
        for (key, value) in settings {
            writeln!(text, "{key}={}", properties_value(&value))?;
        }
        for property in &self.properties {
            let (key, value) = property
                .split_once('=')
                .with_context(|| format!("producer property {property:?} is not k=v"))?;
            if key.is_empty() || key.contains([':', ' ', '\t', '\\', '#', '!']) {
                bail!("producer property key {key:?} cannot be written to a properties file");
            }
            writeln!(text, "{key}={}", properties_value(value))?;
        }
        Ok(text)
    }

    /// The `java` command of this run, reading its producer settings from
    /// `config_file` (see [`producer_config`](Self::producer_config)).
    pub fn command(&self, kafka_version: &str, config_file: &Path) -> Command {
        let mut cmd = java::client_command(kafka_version, &[]);
        // A load generator runs long enough to earn the optimizing compiler that the
        // short-lived clients go without; a later flag overrides the earlier one.
        cmd.arg("-XX:TieredStopAtLevel=4")
            // The summary is printed with the default locale's decimal separator.
            .args(["-Duser.language=en", "-Duser.country=US"])
            .arg("org.apache.kafka.tools.ProducerPerformance")
            .args(["--topic", &self.topic])
            .args(["--num-records", &self.records.to_string()]);
        match &self.payload {
            Payload::LinesOf(file) => {
                cmd.arg("--payload-file")
                    .arg(file)
                    .args(["--payload-delimiter", "\n"]);
            }
            Payload::RecordSize(size) => {
                cmd.args(["--record-size", &size.to_string()]);
            }
        }
        let throughput = self.throughput.map_or(-1, |rate| rate as i64);
        cmd.args(["--throughput", &throughput.to_string()])
            .arg("--producer.config")
            .arg(config_file);
        cmd
    }

    /// Runs ProducerPerformance of Kafka `kafka_version`'s tools jar to completion and
    /// returns its summary. Fails, with the tool's output, if it does not exit 0
    /// within [`timeout`](Self::timeout), prints no summary, or sent fewer records
    /// than asked (it prints a failed send's exception and goes on without counting it).
    pub fn run(&self, kafka_version: &str) -> anyhow::Result<PerfSummary> {
        let dir = tempfile::Builder::new().prefix("kpress-perf-").tempdir()?;
        let config_file = dir.path().join("producer.properties");
        std::fs::write(&config_file, self.producer_config()?)
            .with_context(|| format!("writing {}", config_file.display()))?;
        let mut cmd = self.command(kafka_version, &config_file);
        let started = Instant::now();
        let finished = run(&mut cmd, self.timeout).with_context(|| {
            format!(
                "ProducerPerformance into {} through {}",
                self.topic, self.bootstrap
            )
        })?;
        let elapsed = started.elapsed();
        let failure = |why: &str| {
            anyhow::anyhow!(
                "ProducerPerformance into {} through {}: {why}\n{}",
                self.topic,
                self.bootstrap,
                output(&finished)
            )
        };
        if !finished.status.success() {
            return Err(failure(&format!("exited with {}", finished.status)));
        }
        let stdout = finished.stdout_text();
        let mut summary = match PerfSummary::find_in(&stdout) {
            Ok(summary) => summary,
            Err(e) => return Err(failure(&format!("{e:#}"))),
        };
        if summary.records != self.records {
            return Err(failure(&format!(
                "{} of {} records acknowledged",
                summary.records, self.records
            )));
        }
        summary.elapsed = elapsed;
        Ok(summary)
    }
}

/// `value` for a Java properties file, where a backslash starts an escape and
/// leading whitespace is dropped.
fn properties_value(value: &str) -> String {
    let escaped = value.replace('\\', "\\\\");
    match escaped.strip_prefix(' ') {
        Some(rest) => format!("\\ {rest}"),
        None => escaped,
    }
}

/// A finished run's output, cut to its last lines.
fn output(finished: &Finished) -> String {
    let tail = |bytes: &[u8], max: usize| {
        let text = String::from_utf8_lossy(bytes);
        let start = text.len().saturating_sub(max);
        let start = (start..=text.len())
            .find(|at| text.is_char_boundary(*at))
            .unwrap_or(text.len());
        text[start..].to_string()
    };
    format!(
        "--- stdout (tail) ---\n{}\n--- stderr (tail) ---\n{}",
        tail(&finished.stdout, 3000),
        tail(&finished.stderr, 6000)
    )
}

/// ProducerPerformance's final summary line, e.g. "1000000 records sent, 181752.090149
/// records/sec (40.87 MB/sec), 4.73 ms avg latency, 270.00 ms max latency, 3 ms 50th,
/// 11 ms 95th, 26 ms 99th, 112 ms 99.9th.".
#[derive(Debug, Clone, PartialEq)]
pub struct PerfSummary {
    /// Records acknowledged (a failed send is not counted).
    pub records: u64,
    pub records_per_sec: f64,
    /// Record values' MiB (2^20 bytes, before compression) per second, as the tool
    /// prints them.
    pub mb_per_sec: f64,
    pub avg_latency_ms: f64,
    pub max_latency_ms: f64,
    pub p50_ms: u64,
    pub p95_ms: u64,
    pub p99_ms: u64,
    pub p999_ms: u64,
    /// The whole run as the harness timed it (JVM start and producer close included).
    pub elapsed: Duration,
    /// The summary line itself.
    pub line: String,
}

impl PerfSummary {
    /// The summary line of ProducerPerformance's `stdout` (the first line with the
    /// percentiles; the progress lines every 5 s have none).
    pub fn find_in(stdout: &str) -> anyhow::Result<PerfSummary> {
        let line = stdout
            .lines()
            .find(|line| line.contains(" records sent, ") && line.contains(" 99.9th"))
            .context("no summary line (\"N records sent, … 99.9th.\") in its output")?;
        PerfSummary::parse(line)
    }

    /// Parses one summary line.
    pub fn parse(line: &str) -> anyhow::Result<PerfSummary> {
        let bad = || format!("unexpected ProducerPerformance summary: {line:?}");
        let body = line.trim().trim_end_matches('.');
        let parts: Vec<&str> = body.split(", ").collect();
        let [sent, rate, avg, max, p50, p95, p99, p999] = parts.as_slice() else {
            bail!("{}", bad());
        };
        // "<n> <unit...>": the number and what follows it.
        fn number<T: std::str::FromStr>(part: &str, unit: &str) -> Option<T> {
            let (value, rest) = part.trim().split_once(' ')?;
            (rest == unit).then(|| value.parse().ok())?
        }
        let (records_per_sec, mb_per_sec) = rate
            .split_once(" (")
            .and_then(|(records, mb)| {
                Some((
                    number::<f64>(records, "records/sec")?,
                    number::<f64>(mb.strip_suffix(')')?, "MB/sec")?,
                ))
            })
            .with_context(bad)?;
        Ok(PerfSummary {
            records: number(sent, "records sent").with_context(bad)?,
            records_per_sec,
            mb_per_sec,
            avg_latency_ms: number(avg, "ms avg latency").with_context(bad)?,
            max_latency_ms: number(max, "ms max latency").with_context(bad)?,
            p50_ms: number(p50, "ms 50th").with_context(bad)?,
            p95_ms: number(p95, "ms 95th").with_context(bad)?,
            p99_ms: number(p99, "ms 99th").with_context(bad)?,
            p999_ms: number(p999, "ms 99.9th").with_context(bad)?,
            elapsed: Duration::ZERO,
            line: line.to_string(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_final_summary_line() {
        let stdout = "Reading payloads from: /d/apache_access.log\n\
                      Number of messages read: 10000\n\
                      868153 records sent, 173630.6 records/sec (39.04 MB/sec), 5.1 ms avg latency, 211.0 ms max latency.\n\
                      1000000 records sent, 181752.090149 records/sec (40.87 MB/sec), 4.73 ms avg latency, \
                      270.00 ms max latency, 3 ms 50th, 11 ms 95th, 26 ms 99th, 112 ms 99.9th.\n";
        let summary = PerfSummary::find_in(stdout).unwrap();
        assert_eq!(summary.records, 1_000_000);
        assert!((summary.records_per_sec - 181_752.090149).abs() < 1e-6);
        assert!((summary.mb_per_sec - 40.87).abs() < 1e-9);
        assert!((summary.avg_latency_ms - 4.73).abs() < 1e-9);
        assert!((summary.max_latency_ms - 270.0).abs() < 1e-9);
        assert_eq!(
            (
                summary.p50_ms,
                summary.p95_ms,
                summary.p99_ms,
                summary.p999_ms
            ),
            (3, 11, 26, 112)
        );
        assert!(PerfSummary::find_in("868153 records sent, 173630.6 records/sec").is_err());
        assert!(PerfSummary::parse(
            "1 records sent, 1,5 records/sec (0,00 MB/sec), 1 ms avg latency, 1 ms max latency, \
             1 ms 50th, 1 ms 95th, 1 ms 99th, 1 ms 99.9th."
        )
        .is_err());
    }

    #[test]
    fn writes_settings_then_properties() {
        let mut perf = ProducerPerf::new("127.0.0.1:9092", "t", 10, Payload::RecordSize(100));
        perf.properties = vec![
            "security.protocol=SSL".to_string(),
            "sasl.jaas.config=M required username=\"a\" password=\"b=c\";".to_string(),
            "acks=all".to_string(),
        ];
        assert_eq!(
            perf.producer_config().unwrap(),
            "bootstrap.servers=127.0.0.1:9092\nacks=1\nlinger.ms=5\nbatch.size=262144\n\
             compression.type=lz4\nsecurity.protocol=SSL\n\
             sasl.jaas.config=M required username=\"a\" password=\"b=c\";\nacks=all\n"
        );
        perf.properties = vec!["no-value".to_string()];
        assert!(perf.producer_config().is_err());
        assert_eq!(properties_value("C:\\x"), "C:\\\\x");
        assert_eq!(properties_value(" x"), "\\ x");
    }
}
