//! Kafka's own recompression path in a JVM (`tests/java-bench/KafkaRecompression.java`,
//! compiled here against a Kafka version's kafka-clients): the broker's LogValidator
//! rebuild of a segment's batches into another codec, timed by thread CPU, and a
//! checker that reads every batch and record of a file.

use crate::java;
use crate::paths;
use crate::process::run_ok;
use anyhow::{bail, Context};
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::Duration;

/// One `rewrite` command's answer.
#[derive(Debug, Clone, PartialEq)]
pub struct JavaRewrite {
    pub batches: u64,
    pub records: u64,
    /// The records' value bytes (uncompressed) of one pass.
    pub value_bytes: u64,
    pub bytes_in: u64,
    pub bytes_out: u64,
    /// Thread CPU seconds of one pass (the mean of the timed passes).
    pub cpu_seconds: f64,
    /// The whole JVM's CPU seconds over the same pass (GC and JIT threads too).
    pub process_cpu_seconds: f64,
}

/// One `verify` command's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifiedFile {
    pub batches: u64,
    pub records: u64,
    /// The codecs of the batches, Kafka's names, sorted.
    pub codecs: Vec<String>,
    /// SHA-256 over each value's 4-byte big-endian length and bytes, in order.
    pub sha256: String,
}

/// A running `KafkaRecompression` JVM taking commands; killed on drop.
#[derive(Debug)]
pub struct JavaRecompression {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    stderr_file: PathBuf,
}

/// `tests/java-bench` compiled for Kafka `version` (again when the source is newer).
fn compiled_classes(version: &str) -> anyhow::Result<PathBuf> {
    let source = paths::tests_file("java-bench/KafkaRecompression.java");
    let dir = paths::scratch_dir().join("java-bench").join(version);
    let class = dir.join("KafkaRecompression.class");
    let modified = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    if modified(&class).is_some() && modified(&class) >= modified(&source) {
        return Ok(dir);
    }
    // Compiled beside and renamed into place, so a concurrent run never sees half a tree.
    let building = dir.with_extension(format!("building{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&building);
    std::fs::create_dir_all(&building)?;
    let classpath = format!("{}/*", paths::kafka_libs(version).display());
    run_ok(
        Command::new("javac")
            .args(["-nowarn", "-d"])
            .arg(&building)
            .arg("-cp")
            .arg(classpath)
            .arg(&source),
        Duration::from_secs(300),
    )
    .context("compiling tests/java-bench/KafkaRecompression.java")?;
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::rename(&building, &dir)?;
    Ok(dir)
}

fn fields(line: &str, verb: &str) -> anyhow::Result<BTreeMap<String, String>> {
    let Some(rest) = line.strip_prefix(verb) else {
        bail!("KafkaRecompression answered {line:?}, expected '{verb} …'");
    };
    Ok(rest
        .split_whitespace()
        .filter_map(|w| w.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect())
}

fn number(fields: &BTreeMap<String, String>, key: &str) -> anyhow::Result<u64> {
    fields
        .get(key)
        .with_context(|| format!("no {key}= in {fields:?}"))?
        .parse()
        .with_context(|| format!("{key}= is no number"))
}

impl JavaRecompression {
    /// Starts the program with Kafka `version`'s jars and the broker's JVM settings
    /// (`kafka-run-class.sh`: 1 GiB heap, G1 with its pause goals).
    pub fn start(version: &str) -> anyhow::Result<JavaRecompression> {
        let classes = compiled_classes(version)?;
        let stderr_file = paths::scratch_dir().join(format!(
            "java-bench-{}-{}.stderr",
            std::process::id(),
            version
        ));
        let mut cmd = java::base_command(version, &[&classes]);
        cmd.args([
            "-Xms1g",
            "-Xmx1g",
            "-XX:+UseG1GC",
            "-XX:MaxGCPauseMillis=20",
            "-XX:InitiatingHeapOccupancyPercent=35",
            "-XX:+ExplicitGCInvokesConcurrent",
        ])
        .arg(format!(
            "-Djava.io.tmpdir={}",
            java::jvm_tmp_dir().display()
        ))
        .arg("KafkaRecompression")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&stderr_file)?);
        let mut child = cmd.spawn().context("starting KafkaRecompression")?;
        let stdin = child.stdin.take().context("stdin")?;
        let stdout = BufReader::new(child.stdout.take().context("stdout")?);
        Ok(JavaRecompression {
            child,
            stdin,
            stdout,
            stderr_file,
        })
    }

    fn ask(&mut self, command: &str) -> anyhow::Result<String> {
        writeln!(self.stdin, "{command}")?;
        self.stdin.flush()?;
        let mut line = String::new();
        if self.stdout.read_line(&mut line)? == 0 {
            bail!(
                "KafkaRecompression exited on {command:?}: {}",
                std::fs::read_to_string(&self.stderr_file).unwrap_or_default()
            );
        }
        let line = line.trim().to_string();
        if let Some(error) = line.strip_prefix("error ") {
            bail!("KafkaRecompression {command:?}: {error}");
        }
        Ok(line)
    }

    /// Rebuilds every batch of `input` into `codec` at `level` (None: the codec's
    /// default) as the broker does, `warmup` untimed passes then `passes` timed ones;
    /// the last pass is written to `output`.
    pub fn rewrite(
        &mut self,
        codec: &str,
        level: Option<i32>,
        warmup: u32,
        passes: u32,
        input: &Path,
        output: &Path,
    ) -> anyhow::Result<JavaRewrite> {
        let level = level.map_or("default".to_string(), |l| l.to_string());
        let line = self.ask(&format!(
            "rewrite {codec} {level} {warmup} {passes} {} {}",
            input.display(),
            output.display()
        ))?;
        let f = fields(&line, "rewrote")?;
        let passes = number(&f, "passes")?.max(1);
        Ok(JavaRewrite {
            batches: number(&f, "batches")?,
            records: number(&f, "records")?,
            value_bytes: number(&f, "value_bytes")?,
            bytes_in: number(&f, "bytes_in")?,
            bytes_out: number(&f, "bytes_out")?,
            cpu_seconds: number(&f, "cpu_ns")? as f64 / 1e9 / passes as f64,
            process_cpu_seconds: number(&f, "process_cpu_ns")? as f64 / 1e9 / passes as f64,
        })
    }

    /// Reads every batch (CRC checked) and record of `file` with kafka-clients.
    pub fn verify(&mut self, file: &Path) -> anyhow::Result<VerifiedFile> {
        let line = self.ask(&format!("verify {}", file.display()))?;
        let f = fields(&line, "verified")?;
        Ok(VerifiedFile {
            batches: number(&f, "batches")?,
            records: number(&f, "records")?,
            codecs: f
                .get("codecs")
                .map(|c| {
                    c.split(',')
                        .filter(|s| !s.is_empty())
                        .map(str::to_string)
                        .collect()
                })
                .unwrap_or_default(),
            sha256: f.get("sha256").context("no sha256=")?.clone(),
        })
    }
}

impl Drop for JavaRecompression {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.stderr_file);
    }
}
