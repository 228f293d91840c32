//! `compression.gzip.provider` (KIP-1121) naming each provider, QATzip and ISA-L
//! included, so it needs the accelerator libraries `scripts/setup.sh` provides (QATzip
//! from `.cache/qatzip` in its software backup, no QAT device; ISA-L's `libisal2`):
//! the codec layer uses the configured provider (its output is byte for byte the
//! provider's own) and several providers at once read each other; a policy file names
//! a provider in `[defaults]` and `[[topics]]`, inherited like every option and shown
//! in the summary; `kpress check-config` reports QATzip available in software
//! (`QZ_NO_HW`) when a policy names `qat` or `auto`, and `kpress run` refuses `qat`
//! where QATzip is missing and logs it as a warning where it runs without a device.
//! The crates' own tests cover what needs no accelerator.

use std::path::Path;
use std::process::{Command, Output};
use std::sync::Arc;
use std::time::{Duration, Instant};

use kpress_batch::{PolicyLookup, Target};
use kpress_codec::gzip_providers::{
    GzipProvider, IsalProvider, LibdeflateProvider, ProviderChoice, ProviderKind, Registry,
    ZlibProvider,
};
use kpress_codec::options::{GZIP_LEVEL, GZIP_PROVIDER};
use kpress_codec::{Codec, CompressionOptions, Compressor, Decompressor};
use kpress_config::{parse, PolicySet};
use kpress_tests::kpress::kpress_binary;

/// The smallest valid policy file: a listener and an upstream, no policy.
const HEAD: &str = r#"[listener]
bind = "127.0.0.1:19092"
advertised_host = "127.0.0.1"
node_port_base = 19100
[upstream]
bootstrap_servers = ["127.0.0.1:9092"]
"#;

/// The apache log repeated or cut to `len` bytes.
fn log_payload(len: usize) -> Vec<u8> {
    let path = kpress_tests::paths::datasets_dir().join("apache_access.log");
    let log = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", Path::display(&path)));
    log.iter().copied().cycle().take(len).collect()
}

fn gzip_options(provider: Option<&str>, level: i64) -> CompressionOptions {
    let mut o = CompressionOptions::default();
    o.set_int(GZIP_LEVEL, level).unwrap();
    if let Some(p) = provider {
        o.set(GZIP_PROVIDER, p).unwrap();
    }
    o
}

fn compress(options: &CompressionOptions, input: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    Compressor::new(Codec::Gzip, options)
        .compress(input, &mut out)
        .unwrap();
    out
}

/// Runs `kpress ARGS...` with `KPRESS_LOG` unset, so its log is the default.
fn kpress_cli(args: &[&str]) -> Output {
    Command::new(kpress_binary())
        .args(args)
        .env_remove("KPRESS_LOG")
        .output()
        .expect("run kpress")
}

/// Runs `kpress run --config config` until its log has a line containing each of
/// `wanted` (or 60 s pass), then stops it with SIGTERM; returns the log and the
/// exit status.
fn run_until_logged(config: &str, wanted: &[&str]) -> (String, std::process::ExitStatus) {
    use std::io::BufRead;
    let mut child = Command::new(kpress_binary())
        .args(["run", "--config", config])
        .env_remove("KPRESS_LOG")
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start kpress");
    let stderr = child.stderr.take().unwrap();
    let (lines_tx, lines) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
        {
            let _ = lines_tx.send(line);
        }
    });
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut log = String::new();
    while !wanted.iter().all(|w| log.contains(w)) {
        let left = deadline.saturating_duration_since(Instant::now());
        match lines.recv_timeout(left) {
            Ok(line) => {
                log.push_str(&line);
                log.push('\n');
            }
            Err(_) => break,
        }
    }
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let status = child.wait().unwrap();
    // The reader ends at the pipe's end, after the last line.
    log.extend(lines.iter().map(|l| l + "\n"));
    (log, status)
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// A loopback address nobody listens on: bound to find a free port, then closed.
fn free_addr() -> std::net::SocketAddr {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
}

fn write(dir: &tempfile::TempDir, name: &str, contents: &str) -> String {
    let path = dir.path().join(name);
    std::fs::write(&path, contents).unwrap();
    path.to_str().unwrap().to_owned()
}

fn provider_config(dir: &tempfile::TempDir, provider: Option<&str>, broker: &str) -> String {
    let line = provider.map_or(String::new(), |p| {
        format!("compression.gzip.provider = \"{p}\"\n")
    });
    write(
        dir,
        "p.toml",
        &format!(
            "[listener]\nbind = \"127.0.0.1:0\"\nnode_port_base = 30000\n[upstream]\nbootstrap_servers = [\"{broker}\"]\n[[topics]]\nmatch = \"g\"\ncompression.type = \"gzip\"\n{line}"
        ),
    )
}

fn provider_of(set: &PolicySet, topic: &str) -> ProviderChoice {
    match &set.policy_for(topic).target {
        Target::Codec { options, .. } => options.gzip_provider(),
        Target::Producer | Target::Unresolved(_) => panic!("{topic}: producer policy"),
    }
}

#[test]
fn the_configured_provider_is_the_one_used() {
    let input = log_payload(300_000);
    let direct = |p: &dyn GzipProvider| {
        let mut out = Vec::new();
        p.compress(&input, 6, &mut out).unwrap();
        out
    };
    let qat = Registry::global()
        .get(ProviderKind::Qat)
        .expect("QATzip from .cache/qatzip");
    for (name, expected) in [
        ("libdeflate", direct(&LibdeflateProvider)),
        ("isal", direct(&IsalProvider)),
        ("qat", direct(&*qat)),
        ("zlib", direct(&ZlibProvider)),
    ] {
        let ours = compress(&gzip_options(Some(name), 6), &input);
        assert!(ours == expected, "{name}");
    }
    // The providers' outputs differ, so equality above identifies the provider.
    assert!(direct(&LibdeflateProvider) != direct(&ZlibProvider));
    assert!(direct(&IsalProvider) != direct(&ZlibProvider));
}

#[test]
fn several_providers_at_once_on_different_threads_read_each_other() {
    let input = Arc::new(log_payload(200_000));
    let names = ["zlib", "libdeflate", "isal", "qat", "auto"];
    let threads: Vec<_> = names
        .iter()
        .map(|&name| {
            let input = input.clone();
            std::thread::spawn(move || {
                let options = gzip_options(Some(name), 6);
                let mut compressor = Compressor::new(Codec::Gzip, &options);
                let mut outputs = Vec::new();
                for round in 0..5 {
                    let part = &input[round * 20_000..][..100_000];
                    let mut out = Vec::new();
                    compressor.compress(part, &mut out).unwrap();
                    outputs.push((round, out));
                }
                outputs
            })
        })
        .collect();
    let all: Vec<_> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    for reader in names {
        let mut d = Decompressor::with_options(&gzip_options(Some(reader), 6));
        for outputs in &all {
            for (round, gz) in outputs {
                let mut back = Vec::new();
                d.decompress(Codec::Gzip, gz, 100_000, &mut back).unwrap();
                assert!(back == input[round * 20_000..][..100_000], "{reader}");
            }
        }
    }
}

#[test]
fn provider_is_read_in_defaults_and_rules_and_inherited() {
    let text = format!(
        r#"{HEAD}[defaults]
compression.type = "gzip"
compression.gzip.provider = "isal"
[[topics]]
match = "fast.*"
compression.type = "gzip"
compression.gzip.level = 1
compression.gzip.provider = "libdeflate"
[[topics]]
match = "inherits"
compression.type = "gzip"
[[topics]]
match = "zstd.*"
compression.type = "zstd"
compression.gzip = {{ provider = "QAT" }}
[[topics]]
match = "plain"
compression.type = "zstd"
compression.gzip.provider = "zlib"
[[topics]]
match = "auto"
compression.type = "gzip"
compression.gzip.provider = "auto"
"#
    );
    let config = parse(&text, "t.toml").unwrap();
    let set = PolicySet::new(&config);
    let named = |k| ProviderChoice::Named(k);
    assert_eq!(provider_of(&set, "other"), named(ProviderKind::Isal));
    assert_eq!(provider_of(&set, "fast.a"), named(ProviderKind::Libdeflate));
    assert_eq!(provider_of(&set, "inherits"), named(ProviderKind::Isal));
    assert_eq!(provider_of(&set, "zstd.a"), named(ProviderKind::Qat));
    assert_eq!(provider_of(&set, "plain"), named(ProviderKind::Zlib));
    assert_eq!(provider_of(&set, "auto"), ProviderChoice::Auto);
    assert_eq!(
        config.topics[0]
            .policy
            .options
            .get_text(GZIP_PROVIDER)
            .as_deref(),
        Some("libdeflate")
    );

    // The summary shows the provider of gzip targets, and of gzip input elsewhere.
    assert_eq!(
        config.topics[0].policy.to_string(),
        "gzip (compression.gzip.level=1, compression.gzip.buffer=8192, compression.gzip.provider=libdeflate), recompress codec-differs"
    );
    assert_eq!(
        config.topics[2].policy.to_string(),
        "zstd (compression.zstd.level=3, compression.zstd.window=0), gzip input read by compression.gzip.provider=qat, recompress codec-differs"
    );
    // Without a provider a zstd target reads as before; `zlib` named is shown.
    assert!(config.topics[3]
        .policy
        .to_string()
        .contains("gzip input read by compression.gzip.provider=zlib"));
    let auto = config.topics[4].policy.to_string();
    // No QAT device on this machine: auto is libdeflate.
    assert!(
        auto.contains("compression.gzip.provider=auto (libdeflate)"),
        "{auto}"
    );
    assert!(config
        .defaults
        .to_string()
        .contains("compression.gzip.provider=isal"));
}

#[test]
fn check_config_reports_gzip_providers_and_probes_qatzip_only_when_a_policy_needs_it() {
    let dir = tempfile::tempdir().unwrap();
    let plain = provider_config(&dir, None, "127.0.0.1:9092");
    let out = kpress_cli(&["check-config", &plain]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        stdout.contains("compression.gzip.provider=zlib), recompress"),
        "{stdout}"
    );
    assert!(
        stdout.contains("gzip providers on this host:\n"),
        "{stdout}"
    );
    assert!(
        stdout.contains("  qat: unavailable: QATzip not probed: no policy names qat or auto\n"),
        "{stdout}"
    );
    for line in [
        "  isal: available, software: ",
        "  libdeflate: available, software: ",
        "  zlib: available, software: ",
    ] {
        assert!(stdout.contains(line), "{stdout}");
    }

    for provider in ["qat", "auto"] {
        let with_qat = provider_config(&dir, Some(provider), "127.0.0.1:9092");
        let out = kpress_cli(&["check-config", &with_qat]);
        let stdout = text(&out.stdout);
        assert!(out.status.success(), "{}", text(&out.stderr));
        let qat_line = stdout
            .lines()
            .find(|l| l.starts_with("  qat: "))
            .unwrap_or_else(|| panic!("{stdout}"));
        // This machine has QATzip (.cache/qatzip) but no QAT device.
        assert!(
            qat_line.starts_with("  qat: available, software: ") && qat_line.contains("QZ_NO_HW"),
            "{qat_line}"
        );
    }
}

#[test]
fn run_refuses_a_provider_the_host_lacks_and_logs_qat_without_hardware() {
    let dir = tempfile::tempdir().unwrap();
    let closed = free_addr().to_string();
    let config = provider_config(&dir, Some("qat"), &closed);

    // No QATzip: refused at start, located, nothing substituted.
    let empty = tempfile::tempdir().unwrap();
    let out = Command::new(kpress_binary())
        .args(["run", "--config", &config])
        .env_remove("KPRESS_LOG")
        .env("QATZIP_LIB_DIR", empty.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains(&format!(
            "{config}:9:29: compression.gzip.provider = \"qat\": provider named explicitly but not available on this host: "
        )) && stderr.contains("(allowed: auto, isal, libdeflate, zlib)")
            && stderr.contains("not starting"),
        "{stderr}"
    );

    // QATzip without a device: starts, having logged QZ_NO_HW as a warning.
    let (stderr, status) = run_until_logged(
        &config,
        &["gzip provider qat: ", "kpress bootstrap listener ready"],
    );
    assert!(status.success(), "{stderr}");
    let qat_line = stderr
        .lines()
        .find(|l| l.contains("gzip provider qat: "))
        .unwrap_or_else(|| panic!("{stderr}"));
    assert!(
        qat_line.contains("WARN")
            && qat_line.contains("available, software")
            && qat_line.contains("QZ_NO_HW"),
        "{qat_line}"
    );
    assert!(
        stderr.contains("gzip provider libdeflate: available, software"),
        "{stderr}"
    );
}
