//! Each provider against the JDK's `GZIPInputStream` / `GZIPOutputStream` (what Kafka's
//! Java client uses), run through `java` on the source file `tests/java-gzip/GzipCheck.java`.
//! `java` must be on PATH (scripts/setup.sh checks for a JDK): a missing one fails the
//! test rather than passing it untested.

use std::path::{Path, PathBuf};
use std::process::Command;

use kpress_deflate::{ProviderKind, Registry};

fn java() -> &'static str {
    let found = Command::new("java")
        .arg("-version")
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(
        found,
        "no working `java` on PATH: install a JDK 17+ (scripts/setup.sh)"
    );
    "java"
}

fn dataset(name: &str) -> Vec<u8> {
    let dir = kpress_tests::paths::datasets_dir();
    std::fs::read(dir.join(name)).unwrap()
}

fn checker() -> PathBuf {
    kpress_tests::paths::tests_file("java-gzip/GzipCheck.java")
}

fn scratch(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("kpress-java-gzip-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn samples() -> Vec<(&'static str, Vec<u8>)> {
    let apache = dataset("apache_access.log");
    let nginx = dataset("nginxplus_status.ndjson");
    vec![
        ("apache16k", apache[..16 * 1024].to_vec()),
        ("apache1m", apache[..1 << 20].to_vec()),
        ("nginx1m", nginx[..1 << 20].to_vec()),
    ]
}

fn run(java: &str, args: &[&Path]) -> String {
    let out = Command::new(java)
        .arg(checker())
        .args(args)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "java {args:?}: {text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    text
}

#[test]
fn java_gzipinputstream_reads_every_providers_output() {
    let java = java();
    let dir = scratch("read");
    let registry = Registry::global();
    let mut written = 0;
    for (name, raw) in samples() {
        std::fs::write(dir.join(format!("{name}.raw")), &raw).unwrap();
        for kind in ProviderKind::ALL {
            let provider = registry.get(kind).unwrap();
            for level in [1, 6, 9] {
                let mut gz = Vec::new();
                provider.compress(&raw, level, &mut gz).unwrap();
                std::fs::write(dir.join(format!("{name}@{kind}-{level}.gz")), gz).unwrap();
                written += 1;
            }
        }
    }
    let report = run(java, &[Path::new("read"), &dir]);
    assert!(
        report.contains(&format!("checked {written}, failed 0")),
        "{report}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn every_provider_reads_java_gzipoutputstream_output() {
    let java = java();
    let dir = scratch("write");
    let registry = Registry::global();
    for (name, raw) in samples() {
        let raw_path = dir.join(format!("{name}.raw"));
        std::fs::write(&raw_path, &raw).unwrap();
        for level in ["1", "6", "9"] {
            let gz_path = dir.join(format!("{name}-java-{level}.gz"));
            run(
                java,
                &[Path::new("write"), &raw_path, &gz_path, Path::new(level)],
            );
            let gz = std::fs::read(&gz_path).unwrap();
            for kind in ProviderKind::ALL {
                let mut out = Vec::new();
                registry
                    .get(kind)
                    .unwrap()
                    .decompress(&gz, raw.len(), &mut out)
                    .unwrap();
                assert!(out == raw, "{kind} reading Java level {level} on {name}");
            }
        }
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
