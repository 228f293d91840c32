//! `kpress check-config` and `kpress run` on policy files, through the real binary.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::{free_addr, kpress, text, write};

/// Runs `kpress run --config config` until its log has a line containing each of
/// `wanted` (or 60 s pass), then stops it with SIGTERM; returns the log and the
/// exit status.
fn run_until_logged(config: &str, wanted: &[&str]) -> (String, std::process::ExitStatus) {
    use std::io::BufRead;
    let mut child = Command::new(env!("CARGO_BIN_EXE_kpress"))
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

fn repo_config(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../config")
        .join(name)
}

const BAD: &str = r#"[listener]
bind = "127.0.0.1:19092"
advertised_host = "127.0.0.1"
node_port_base = 19100
[upstream]
bootstrap_servers = ["127.0.0.1:9092"]
[[topics]]
match = "logs.*"
compression.type = "zstd"
compression.zstd.level = 23
compression.zstd.windw = 0
"#;

#[test]
fn shipped_configs_check_ok_with_a_summary() {
    for name in [
        "kpress.toml",
        "speed-first-regional.toml",
        "size-first-aggregation.toml",
    ] {
        let path = repo_config(name);
        let out = kpress(&["check-config", path.to_str().unwrap()]);
        let stdout = text(&out.stdout);
        assert!(out.status.success(), "{name}: {}", text(&out.stderr));
        assert!(
            !text(&out.stderr).contains("warning:"),
            "{name} uses a deprecated key: {}",
            text(&out.stderr)
        );
        assert!(
            stdout.starts_with(&format!("{}: ok\n", path.display())),
            "{stdout}"
        );
        assert!(stdout.contains("  rule 1 (line "), "{stdout}");
        assert!(stdout.contains("  other topics: "), "{stdout}");
    }
    let out = kpress(&["check-config", repo_config("kpress.toml").to_str().unwrap()]);
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains(
            "logs.*: zstd (compression.zstd.level=3, compression.zstd.window=0), recompress codec-differs"
        ),
        "{stdout}"
    );
    assert!(stdout.contains("metrics.*: lz4"), "{stdout}");
}

#[test]
fn bad_file_exits_1_naming_file_line_key_value_and_range() {
    let dir = tempfile::tempdir().unwrap();
    let bad = write(&dir, "bad.toml", BAD);
    let out = kpress(&["check-config", &bad]);
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stdout.is_empty(), "{}", text(&out.stdout));
    let stderr = text(&out.stderr);
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(
        lines,
        [
            format!("{bad}:10:26: compression.zstd.level = 23: out of range (allowed: -131072..22)"),
            format!(
                "{bad}:11:18: compression.zstd.windw: unknown key in [[topics]] (allowed: match, compression.type, recompress, only_if_smaller, compression.gzip.level, compression.gzip.buffer, compression.snappy.block, compression.lz4.level, compression.lz4.block, compression.zstd.level, compression.zstd.window, compression.gzip.provider, overload.compression.type, overload.compression.gzip.level, overload.compression.lz4.level, overload.compression.zstd.level, overload.min_level, overload.max_cpu_share); did you mean compression.zstd.window?"
            ),
            format!("{bad}: 2 problems"),
        ]
    );
}

#[test]
fn every_file_is_checked_and_any_bad_one_fails() {
    let dir = tempfile::tempdir().unwrap();
    let bad = write(&dir, "bad.toml", BAD);
    let good = repo_config("kpress.toml");
    let out = kpress(&["check-config", good.to_str().unwrap(), &bad]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stdout).starts_with(&format!("{}: ok", good.display())));
    assert!(text(&out.stderr).contains(&format!("{bad}:10:26: ")));
}

#[test]
fn unreadable_and_syntactically_broken_files() {
    let out = kpress(&["check-config", "/nonexistent/kpress.toml"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("cannot read /nonexistent/kpress.toml"),
        "{}",
        text(&out.stderr)
    );
    let dir = tempfile::tempdir().unwrap();
    let broken = write(&dir, "broken.toml", "[listener\nbind = 1\n");
    let out = kpress(&["check-config", &broken]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).starts_with(&format!("{broken}:1:")),
        "{}",
        text(&out.stderr)
    );
    assert!(text(&out.stderr).contains("TOML syntax"));
}

#[test]
fn run_refuses_an_invalid_file_at_once_with_the_same_messages() {
    let dir = tempfile::tempdir().unwrap();
    let bad = write(&dir, "bad.toml", BAD);
    let started = Instant::now();
    let out = kpress(&["run", "--config", &bad]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains(&format!(
            "{bad}:10:26: compression.zstd.level = 23: out of range (allowed: -131072..22)"
        )),
        "{stderr}"
    );
    assert!(stderr.contains(&format!("{bad}:11:18: compression.zstd.windw: unknown key")));
    assert!(stderr.contains("not starting"), "{stderr}");
    // It never tried to reach the (absent) broker.
    assert!(started.elapsed() < Duration::from_secs(10));
}

#[test]
fn run_serves_while_no_broker_answers_and_says_which_key_names_it() {
    let closed = free_addr();
    let listen = free_addr();
    let dir = tempfile::tempdir().unwrap();
    let config = write(
        &dir,
        "k.toml",
        &format!(
            "[listener]\nbind = \"{listen}\"\nnode_port_base = 30000\n[upstream]\nbootstrap_servers = [\"{closed}\"]\n"
        ),
    );
    // Brokers down while kpress starts is routine: it serves its port, says which
    // key names the brokers, and keeps trying until stopped.
    let (log, status) = run_until_logged(&config, &["bootstrap servers still unreachable"]);
    assert_eq!(status.code(), Some(0), "{log}");
    assert!(log.contains("kpress stopped"), "{log}");
    assert!(log.contains(&closed.to_string()), "{log}");
    assert!(
        log.contains("check [upstream] bootstrap_servers if this persists"),
        "{log}"
    );
    assert!(log.contains("kpress bootstrap listener ready"), "{log}");
}

#[test]
fn run_names_the_admin_key_when_its_port_is_taken() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let taken_addr = taken.local_addr().unwrap();
    let listen = free_addr();
    let dir = tempfile::tempdir().unwrap();
    let config = write(
        &dir,
        "k.toml",
        &format!(
            "[listener]\nbind = \"{listen}\"\nnode_port_base = 30000\n[upstream]\nbootstrap_servers = [\"127.0.0.1:1\"]\n[admin]\nbind = \"{taken_addr}\"\n"
        ),
    );
    let out = kpress(&["run", "--config", &config]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains(&format!("{taken_addr} ([admin] bind in {config})")),
        "{stderr}"
    );
    drop(taken);
}

#[test]
fn a_listener_bind_and_bootstrap_servers_are_a_whole_policy_file() {
    let closed = free_addr();
    let listen = free_addr();
    let dir = tempfile::tempdir().unwrap();
    let config = write(
        &dir,
        "k.toml",
        &format!(
            "[listener]\nbind = \"{listen}\"\n[upstream]\nbootstrap_servers = [\"{closed}\"]\n"
        ),
    );
    let out = kpress(&["check-config", &config]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let base = listen.port() + 100;
    assert!(
        stdout.contains(&format!(
            "  listen {listen} (advertised as 127.0.0.1, broker node N on port {base}+N for node ids 0..={}) -> {closed}\n",
            u16::MAX - base
        )),
        "{stdout}"
    );
    assert!(
        text(&out.stderr).is_empty(),
        "no warnings: {}",
        text(&out.stderr)
    );
    let (log, status) = run_until_logged(&config, &["kpress bootstrap listener ready"]);
    assert_eq!(status.code(), Some(0), "{log}");
}

#[test]
fn consumers_and_client_rules_are_summarized() {
    let dir = tempfile::tempdir().unwrap();
    let head = "[listener]\nbind = \"127.0.0.1:19092\"\n\
                [upstream]\nbootstrap_servers = [\"127.0.0.1:9092\"]\n";
    let config = write(
        &dir,
        "k.toml",
        &format!(
            "{head}[consumers]\ncompression.lz4.level = 12\ncache_bytes = 1048576\n\
             [[clients]]\nmatch = \"kafkajs*\"\naccept = [\"gzip\"]\n\
             [[clients]]\nsoftware = \"apache-kafka-java/2.*\"\nlistener = \"node *\"\n\
             accept = [\"lz4\", \"snappy\"]\n"
        ),
    );
    let out = kpress(&["check-config", &config]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{}", text(&out.stderr));
    for line in [
        "  consumers: Fetch batches a client cannot read are re-encoded into lz4 (level 12), \
         else into a codec it reads; 1048576 bytes of re-encoded batches cached\n",
        "  client rule 1 (line 8) match kafkajs*: reads none, gzip\n",
        "  client rule 2 (line 11) software apache-kafka-java/2.*, listener node *: reads \
         none, snappy, lz4\n",
    ] {
        assert!(stdout.contains(line), "{line}\n{stdout}");
    }
    let off = write(
        &dir,
        "off.toml",
        &format!("{head}[consumers]\nreencode = false\n"),
    );
    let out = kpress(&["check-config", &off]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("  consumers: Fetch responses pass as the broker sent them"));
}

#[test]
fn renamed_keys_are_refused_naming_what_to_write_instead() {
    let dir = tempfile::tempdir().unwrap();
    let listen = free_addr();
    let config = write(
        &dir,
        "old.toml",
        &format!(
            "[listener]\nbind = \"{listen}\"\n[upstream]\nbootstrap_servers = [\"127.0.0.1:1\"]\n\
             [metrics]\nbind = \"127.0.0.1:1\"\n[[topics]]\nmatch = \"a\"\ncompression.type = \"lz4\"\nallow_growth = false\n"
        ),
    );
    let out = kpress(&["check-config", &config]);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stdout.is_empty(), "{stdout}");
    assert!(
        stderr.contains(&format!(
            "{config}:5:2: metrics: unknown section [metrics]: use [admin]"
        )),
        "{stderr}"
    );
    assert!(
        stderr.contains(&format!(
            "{config}:10:1: allow_growth: unknown key in [[topics]]: use only_if_smaller, its opposite: allow_growth = false is only_if_smaller = true"
        )),
        "{stderr}"
    );
    assert!(
        stderr.contains(&format!("{config}: 2 problems")),
        "{stderr}"
    );
    assert!(!stderr.contains("warning:"), "{stderr}");
}

#[test]
fn run_without_a_readable_policy_file_says_what_it_needs() {
    let out = kpress(&["run", "--config", "/nonexistent/kpress.toml"]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("kpress: cannot read /nonexistent/kpress.toml: ")
            && stderr.contains(
                "kpress: not starting: --config needs a policy file kpress can read (config/kpress.toml is an example)"
            ),
        "{stderr}"
    );
}

#[test]
fn log_filter_must_be_valid() {
    let out = kpress(&["--log", "kpress=notalevel", "check-config", "x.toml"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("--log"));
}
