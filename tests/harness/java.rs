//! Java command lines for Kafka's classes: classpath per version and logging that goes
//! where a test wants it (log4j2 for Kafka 4.x, reload4j for 3.x; both configs are
//! passed, each version reads its own).

use crate::class_sharing::{self, ArchiveDump, JvmKind};
use crate::paths;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// A log4j2 properties file sending everything at `level` and above to `log_file`.
pub fn log4j2_file_config(log_file: &Path, level: &str) -> String {
    format!(
        "status = warn\n\
         appender.file.type = File\n\
         appender.file.name = FILE\n\
         appender.file.fileName = {}\n\
         appender.file.layout.type = PatternLayout\n\
         appender.file.layout.pattern = [%d] %p %m (%c)%n\n\
         rootLogger.level = {level}\n\
         rootLogger.appenderRef.file.ref = FILE\n",
        log_file.display()
    )
}

/// The reload4j (log4j 1) equivalent of [`log4j2_file_config`].
pub fn log4j1_file_config(log_file: &Path, level: &str) -> String {
    format!(
        "log4j.rootLogger={level}, file\n\
         log4j.appender.file=org.apache.log4j.FileAppender\n\
         log4j.appender.file.File={}\n\
         log4j.appender.file.layout=org.apache.log4j.PatternLayout\n\
         log4j.appender.file.layout.ConversionPattern=[%d] %p %m (%c)%n\n",
        log_file.display()
    )
}

/// Client-side logging: warnings and errors to stderr, which the harness captures and
/// shows when a command fails.
fn client_log_configs() -> &'static (PathBuf, PathBuf) {
    static CONFIGS: OnceLock<(PathBuf, PathBuf)> = OnceLock::new();
    CONFIGS.get_or_init(|| {
        let dir = paths::scratch_dir();
        let log4j2 = dir.join("client-log4j2.properties");
        let log4j1 = dir.join("client-log4j.properties");
        paths::write_atomically(
            &log4j2,
            b"status = warn\n\
              appender.err.type = Console\n\
              appender.err.name = ERR\n\
              appender.err.target = SYSTEM_ERR\n\
              appender.err.layout.type = PatternLayout\n\
              appender.err.layout.pattern = %p %m (%c)%n\n\
              rootLogger.level = WARN\n\
              rootLogger.appenderRef.err.ref = ERR\n",
        )
        .expect("write client log4j2 config");
        paths::write_atomically(
            &log4j1,
            b"log4j.rootLogger=WARN, err\n\
              log4j.appender.err=org.apache.log4j.ConsoleAppender\n\
              log4j.appender.err.Target=System.err\n\
              log4j.appender.err.layout=org.apache.log4j.PatternLayout\n\
              log4j.appender.err.layout.ConversionPattern=%p %m (%c)%n\n",
        )
        .expect("write client log4j config");
        (log4j2, log4j1)
    })
}

/// `java` with Kafka `version`'s jars (and `extra` entries) on the classpath, set up for
/// a short-lived client or tool: small heap, quick startup, UTF-8 output, logs to stderr.
/// A tool on Kafka's jars alone maps the tools' shared class archive
/// ([`class_sharing`](crate::class_sharing)).
pub fn client_command(version: &str, extra_classpath: &[&Path]) -> Command {
    let sharing = if extra_classpath.is_empty() {
        class_sharing::use_archive(version, JvmKind::Tool, &CLIENT_OPTIONS, &[])
    } else {
        Vec::new()
    };
    client_command_sharing(version, extra_classpath, &sharing)
}

/// [`client_command`] for a tool on Kafka's jars alone that makes the tools' shared
/// class archive when it exits.
pub(crate) fn tool_command_dumping(version: &str, dump: &ArchiveDump) -> Command {
    client_command_sharing(version, &[], &dump.args())
}

/// The options of every [`client_command`] JVM.
pub(crate) const CLIENT_OPTIONS: [&str; 3] = [
    "-Xmx512m",
    "-XX:+UseSerialGC",
    // Short-lived processes: C1 only starts faster and costs less CPU on 2 cores.
    "-XX:TieredStopAtLevel=1",
];

pub(crate) fn client_command_sharing(
    version: &str,
    extra_classpath: &[&Path],
    sharing: &[String],
) -> Command {
    let (log4j2, log4j1) = client_log_configs();
    let mut cmd = base_command(version, extra_classpath);
    cmd.args(CLIENT_OPTIONS)
        .args(sharing)
        .arg(format!("-Dlog4j2.configurationFile={}", log4j2.display()))
        .arg(format!("-Dlog4j.configuration=file:{}", log4j1.display()))
        .arg(format!("-Djava.io.tmpdir={}", jvm_tmp_dir().display()));
    cmd
}

/// `java.io.tmpdir` for the harness's JVMs: lz4-java and snappy-java unpack native
/// libraries there and leave them behind when a JVM is killed; keep that out of /tmp.
pub fn jvm_tmp_dir() -> PathBuf {
    let dir = paths::scratch_dir().join("jvm-tmp");
    std::fs::create_dir_all(&dir).expect("create the JVMs' temp dir");
    dir
}

/// `java` with Kafka `version`'s jars on the classpath and nothing else decided.
pub fn base_command(version: &str, extra_classpath: &[&Path]) -> Command {
    let mut classpath = format!("{}/*", paths::kafka_libs(version).display());
    for entry in extra_classpath {
        classpath.push(':');
        classpath.push_str(&entry.display().to_string());
    }
    let mut cmd = Command::new("java");
    cmd.args([
        "-Dfile.encoding=UTF-8",
        "-Dstdout.encoding=UTF-8",
        "-Dstderr.encoding=UTF-8",
    ])
    .arg("-cp")
    .arg(classpath);
    cmd
}
