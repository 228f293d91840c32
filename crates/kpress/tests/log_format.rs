//! kpress's own log through the real binary: `--log-format json` writes one JSON object
//! per line on stderr, and the level comes from `--log`, else `KPRESS_LOG`/`RUST_LOG`,
//! else the policy's `[log] level`. `kpress run` in front of a port nobody serves logs
//! its start (info) and the unreachable brokers (warn) within a few seconds.

mod common;

use common::{lines_until, spawn_reading_stderr, unreachable_policy};
use serde_json::Value;
use std::process::Command;
use std::time::Duration;

/// A policy in front of a port nothing listens on, with an optional `[log]` table.
/// Few connections: any machine's open-file limit holds them, so no error says it is
/// too low.
fn policy(dir: &tempfile::TempDir, log_table: &str) -> std::path::PathBuf {
    unreachable_policy(dir.path(), 100, log_table)
}

/// Runs `kpress <args> run --config FILE` until a line at warn shows up (kpress cannot
/// reach the brokers) or 20 s pass, and returns stderr's lines.
fn run_until_warn(args: &[&str], config: &std::path::Path, env: &[(&str, &str)]) -> Vec<String> {
    let mut command = Command::new(env!("CARGO_BIN_EXE_kpress"));
    command.args(args).arg("run").arg("--config").arg(config);
    let (mut child, rx) = spawn_reading_stderr(&mut command, env);
    let lines = lines_until(&rx, Duration::from_secs(20), |line| {
        line.contains("WARN") || line.contains("\"level\":\"WARN\"")
    });
    child.kill().expect("stopping kpress");
    child.wait().unwrap();
    lines
}

fn json_lines(lines: &[String]) -> Vec<Value> {
    lines
        .iter()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}")))
        .collect()
}

fn levels(events: &[Value]) -> Vec<&str> {
    events
        .iter()
        .map(|e| e["level"].as_str().unwrap())
        .collect()
}

#[test]
fn log_format_json_writes_one_object_per_event() {
    let dir = tempfile::tempdir().unwrap();
    let config = policy(&dir, "");
    let lines = run_until_warn(&["--log-format", "json"], &config, &[]);
    let events = json_lines(&lines);
    assert!(levels(&events).contains(&"INFO"), "{lines:#?}");
    assert!(levels(&events).contains(&"WARN"), "{lines:#?}");
    for event in &events {
        assert!(event["timestamp"].is_string(), "{event}");
        assert!(
            event["target"].as_str().unwrap().starts_with("kpress"),
            "{event}"
        );
        assert!(event["message"].is_string(), "{event}");
    }
    // Fields sit beside the message, for log pipelines to index.
    let unreachable = events.iter().find(|e| e["level"] == "WARN").unwrap();
    assert!(unreachable.get("error").is_some(), "{unreachable}");
}

#[test]
fn the_policys_level_applies_unless_a_flag_or_variable_names_one() {
    let dir = tempfile::tempdir().unwrap();
    let config = policy(&dir, "[log]\nlevel = \"warn\"\n");
    let quiet = json_lines(&run_until_warn(&["--log-format", "json"], &config, &[]));
    assert!(!quiet.is_empty());
    assert!(levels(&quiet).iter().all(|l| *l == "WARN"), "{quiet:#?}");

    for (args, env) in [
        (&["--log-format", "json", "--log", "info"][..], &[][..]),
        (&["--log-format", "json"][..], &[("RUST_LOG", "info")][..]),
        (&["--log-format", "json"][..], &[("KPRESS_LOG", "info")][..]),
    ] {
        let events = json_lines(&run_until_warn(args, &config, env));
        assert!(
            levels(&events).contains(&"INFO"),
            "{args:?} {env:?}: {events:#?}"
        );
    }
}

#[test]
fn text_stays_the_default() {
    let dir = tempfile::tempdir().unwrap();
    let config = policy(&dir, "");
    let lines = run_until_warn(&[], &config, &[]);
    assert!(lines.iter().any(|l| l.contains(" INFO ")), "{lines:#?}");
    assert!(lines
        .iter()
        .all(|l| serde_json::from_str::<Value>(l).is_err()));
}
