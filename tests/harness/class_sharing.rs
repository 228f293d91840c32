//! Class-data sharing (AppCDS) for the harness's Kafka JVMs. A broker or tool JVM
//! spends most of its start loading and verifying thousands of classes from Kafka's
//! jars, on CPU the tests beside it need. The first JVM of a kind (per Kafka version,
//! JDK, jar set and options) dumps the classes it loaded into an archive when it exits
//! cleanly (`-XX:ArchiveClassesAtExit`); later ones map that archive
//! (`-XX:SharedArchiveFile`), which about halves a broker's start. A JVM that cannot
//! use an archive (another JDK, changed jars) loads its classes as usual
//! (`-Xshare:auto`), so an archive only ever saves time; the archives live under
//! `target/kpress-tests/class-sharing/`, keyed by everything the JVM checks.
//! `KPRESS_CLASS_SHARING=0` turns it off.

use crate::paths;
use sha2::{Digest, Sha256};
use std::fs::OpenOptions;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

/// A claim older than this was left by a test process that died while dumping.
const STALE_CLAIM: Duration = Duration::from_secs(600);

/// JVM warnings (an archive that does not fit, say) go to stderr: tools' stdout is
/// parsed.
fn warnings_to_stderr() -> Vec<String> {
    vec![
        "-Xlog:disable".to_string(),
        "-Xlog:all=warning:stderr".to_string(),
    ]
}

/// What a JVM runs as; each kind has its own archive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JvmKind<'a> {
    /// `kafka.Kafka`, a KRaft node.
    Broker,
    /// A Kafka tool on Kafka's jars alone (StorageTool, DumpLogSegments, kafka-configs).
    Tool,
    /// A subcommand of a test client on Kafka's jars and the client's jar.
    Client(&'a str),
}

impl JvmKind<'_> {
    fn name(self) -> String {
        match self {
            JvmKind::Broker => "broker".to_string(),
            JvmKind::Tool => "tool".to_string(),
            JvmKind::Client(subcommand) => format!("client-{subcommand}"),
        }
    }
}

/// `KPRESS_CLASS_SHARING=0` turns class sharing off (JVMs load every class themselves).
fn enabled() -> bool {
    std::env::var_os("KPRESS_CLASS_SHARING").is_none_or(|v| v != "0")
}

/// A line for the message of a JVM that failed to start: how to rule class sharing
/// out. Empty when it is off.
pub fn off_hint() -> &'static str {
    if enabled() {
        "\nIf the JVM's output names a shared archive (SharedArchiveFile, \
         ArchiveClassesAtExit), rerun with KPRESS_CLASS_SHARING=0 or delete \
         target/kpress-tests/class-sharing/."
    } else {
        ""
    }
}

/// `(len, mtime)` of `path`, as the JVM checks a classpath jar.
fn stamp(path: &Path) -> Option<(u64, SystemTime)> {
    let metadata = std::fs::metadata(path).ok()?;
    Some((metadata.len(), metadata.modified().ok()?))
}

/// The `java` the harness runs (first on `PATH`), resolved through links.
fn java_binary() -> Option<PathBuf> {
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|dir| dir.join("java"))
        .find(|p| p.is_file())
        .and_then(|p| p.canonicalize().ok())
}

/// The archive of `kind` JVMs of Kafka `version` started with `options` and the jars
/// `extra_classpath` after Kafka's: its name hashes the JDK, every jar (name, size,
/// mtime) and the options.
fn archive_path(
    version: &str,
    kind: JvmKind,
    options: &[&str],
    extra_classpath: &[&Path],
) -> Option<PathBuf> {
    let mut hash = Sha256::new();
    let java = java_binary()?;
    hash.update(format!("{}\n{:?}\n", java.display(), stamp(&java)?));
    // The JDK's own base archive the dynamic one sits on.
    let jdk = java.parent()?.parent()?;
    hash.update(format!("{:?}\n", stamp(&jdk.join("lib/server/libjvm.so"))));
    let mut jars = sorted_files(&paths::kafka_libs(version))?;
    jars.extend(extra_classpath.iter().map(|p| p.to_path_buf()));
    hash_files(&mut hash, &jars)?;
    for option in options {
        hash.update(format!("{option}\n"));
    }
    let key = short_key(hash);
    let dir = cache_dir()?;
    Some(dir.join(format!("{version}-{}-{key}.jsa", kind.name())))
}

/// The files in `dir`, sorted by path: a stable order to hash.
fn sorted_files(dir: &Path) -> Option<Vec<PathBuf>> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    files.sort();
    Some(files)
}

/// Hashes each file's path, size and mtime; `None` if one cannot be read.
fn hash_files(hash: &mut Sha256, files: &[PathBuf]) -> Option<()> {
    for file in files {
        hash.update(format!("{}\n{:?}\n", file.display(), stamp(file)?));
    }
    Some(())
}

/// The first 8 bytes of `hash` in hex: the key in a cached file's name.
fn short_key(hash: Sha256) -> String {
    hash.finalize()
        .iter()
        .take(8)
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Where archives and jars are cached, created if missing.
fn cache_dir() -> Option<PathBuf> {
    let dir = paths::scratch_dir().join("class-sharing");
    std::fs::create_dir_all(&dir).ok()?;
    Some(dir)
}

/// Options for a `kind` JVM of `version` started with `options` (and the jars
/// `extra_classpath`): mapping its archive when there is one, or else nothing beyond
/// routing warnings to stderr.
pub fn use_archive(
    version: &str,
    kind: JvmKind,
    options: &[&str],
    extra_classpath: &[&Path],
) -> Vec<String> {
    let mut args = warnings_to_stderr();
    if !enabled() {
        return args;
    }
    if let Some(archive) =
        archive_path(version, kind, options, extra_classpath).filter(|a| a.is_file())
    {
        args.push(format!("-XX:SharedArchiveFile={}", archive.display()));
    }
    args
}

/// The right to make one archive: the JVM started with [`args`](Self::args) writes it
/// when it exits, and [`finish`](Self::finish) publishes it.
#[derive(Debug)]
pub struct ArchiveDump {
    archive: PathBuf,
    partial: PathBuf,
    claim: PathBuf,
    finished: bool,
}

impl ArchiveDump {
    /// Claims making the archive of `kind` JVMs of `version` started with `options`:
    /// `None` when it exists, when making it failed before (a JDK that cannot dump is not
    /// asked again) or when another JVM is making it now.
    pub fn claim(
        version: &str,
        kind: JvmKind,
        options: &[&str],
        extra_classpath: &[&Path],
    ) -> Option<ArchiveDump> {
        if !enabled() {
            return None;
        }
        let archive = archive_path(version, kind, options, extra_classpath)?;
        let failed = archive.with_extension("failed");
        if archive.exists() || failed.exists() {
            return None;
        }
        let claim = archive.with_extension("claim");
        let fresh = || OpenOptions::new().write(true).create_new(true).open(&claim);
        if fresh().is_err() {
            let age = std::fs::metadata(&claim)
                .and_then(|m| m.modified())
                .ok()
                .and_then(|t| t.elapsed().ok())?;
            if age < STALE_CLAIM {
                return None;
            }
            let _ = std::fs::remove_file(&claim);
            fresh().ok()?;
        }
        Some(ArchiveDump {
            partial: archive.with_extension(format!("jsa.{}.partial", std::process::id())),
            archive,
            claim,
            finished: false,
        })
    }

    /// The JVM options that dump the archive at the JVM's exit (instead of
    /// [`use_archive`]'s).
    pub fn args(&self) -> Vec<String> {
        let mut args = warnings_to_stderr();
        args.push(format!(
            "-XX:ArchiveClassesAtExit={}",
            self.partial.display()
        ));
        args
    }

    /// Publishes the archive once its JVM has exited cleanly. A JVM that exited cleanly
    /// but wrote nothing cannot dump: that is recorded, so no later JVM tries again. After
    /// a JVM that failed, a later one may try.
    pub fn finish(mut self, exited_cleanly: bool) {
        self.finished = true;
        let written = std::fs::metadata(&self.partial).is_ok_and(|m| m.len() > 0);
        if exited_cleanly && written {
            if std::fs::rename(&self.partial, &self.archive).is_err() {
                let _ = std::fs::remove_file(&self.partial);
            }
        } else {
            let _ = std::fs::remove_file(&self.partial);
            if exited_cleanly {
                let _ = std::fs::write(self.archive.with_extension("failed"), b"");
            }
        }
        let _ = std::fs::remove_file(&self.claim);
    }

    /// Records that making this archive failed, so no later JVM tries again: for a kind
    /// whose attempt is dear (a broker started and stopped only for it).
    pub fn give_up(mut self) {
        self.finished = true;
        let _ = std::fs::remove_file(&self.partial);
        let _ = std::fs::write(self.archive.with_extension("failed"), b"");
        let _ = std::fs::remove_file(&self.claim);
    }
}

impl Drop for ArchiveDump {
    /// Unfinished (its JVM never ran, or a test panicked): leaves the archive to a later JVM.
    fn drop(&mut self) {
        if !self.finished {
            let _ = std::fs::remove_file(&self.partial);
            let _ = std::fs::remove_file(&self.claim);
        }
    }
}

/// A jar of the classes under `dir` (a test client compiled by `scripts/setup.sh`): a
/// JVM dumps no archive with a directory on its classpath. Made once per content of
/// `dir` (names, sizes, mtimes), by the JDK's `jar`; `None` if that fails.
pub fn classes_jar(dir: &Path) -> Option<PathBuf> {
    if !enabled() {
        return None;
    }
    let mut hash = Sha256::new();
    let files = sorted_files(dir)?;
    hash.update(format!("{}\n", dir.display()));
    hash_files(&mut hash, &files)?;
    let key = short_key(hash);
    let dir_name = dir.file_name()?.to_string_lossy().into_owned();
    let jars = cache_dir()?;
    let jar = jars.join(format!("{dir_name}-{key}.jar"));
    if jar.is_file() {
        return Some(jar);
    }
    let partial = jar.with_extension(format!("jar.{}.partial", std::process::id()));
    let made = std::process::Command::new("jar")
        .arg("cf")
        .arg(&partial)
        .arg("-C")
        .arg(dir)
        .arg(".")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if made && std::fs::rename(&partial, &jar).is_ok() {
        return Some(jar);
    }
    let _ = std::fs::remove_file(&partial);
    None
}
