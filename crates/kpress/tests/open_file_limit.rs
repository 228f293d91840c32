//! The open-file limit through the real binary, started under `prlimit` in front of a
//! port nobody serves (the limit is settled before kpress looks for brokers): `kpress
//! run` raises its soft limit to what `[limits] max_connections` needs, up to the hard
//! limit, and logs the limit in force; a hard limit below the need is an error line
//! naming the limit, the need and the fix, and kpress serves what fits; a hard limit
//! that leaves room for no connection at all stops it at once.

mod common;

use common::{lines_until, spawn_reading_stderr, unreachable_policy};
use std::process::{Child, Command};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// `[limits] max_connections` of every policy here: 2 descriptors each, plus 256 for
/// kpress itself.
const MAX_CONNECTIONS: u64 = 1000;
const NEED: u64 = 2 * MAX_CONNECTIONS + 256;

/// `prlimit --nofile=SOFT:HARD kpress run --config FILE` (prlimit execs kpress, so the
/// child's pid is kpress's).
fn start(config: &std::path::Path, soft: u64, hard: u64) -> (Child, mpsc::Receiver<String>) {
    spawn_reading_stderr(
        Command::new("prlimit")
            .arg(format!("--nofile={soft}:{hard}"))
            .arg(env!("CARGO_BIN_EXE_kpress"))
            .arg("run")
            .arg("--config")
            .arg(config),
        &[("NO_COLOR", "1")],
    )
}

/// The soft and hard "Max open files" of process `pid`.
fn open_file_limits(pid: u32) -> (u64, u64) {
    let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).unwrap();
    let line = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .unwrap_or_else(|| panic!("{limits}"));
    let numbers: Vec<u64> = line
        .split_whitespace()
        .filter_map(|w| w.parse().ok())
        .collect();
    (numbers[0], numbers[1])
}

fn stop(mut child: Child) {
    child.kill().expect("stopping kpress");
    child.wait().unwrap();
}

#[test]
fn the_soft_limit_is_raised_to_what_max_connections_needs() {
    let dir = tempfile::tempdir().unwrap();
    let config = unreachable_policy(dir.path(), MAX_CONNECTIONS, "");
    let (child, lines) = start(&config, 256, NEED + 1000);
    let seen = lines_until(&lines, Duration::from_secs(20), |l| {
        l.contains("open-file limit: ")
    });
    assert_eq!(
        open_file_limits(child.id()),
        (NEED, NEED + 1000),
        "{seen:#?}"
    );
    stop(child);
    let line = seen.last().unwrap();
    assert!(
        line.contains(&format!(
            "open-file limit: {NEED} (raised from 256), hard limit {}; [limits] \
             max_connections = {MAX_CONNECTIONS} needs {NEED}",
            NEED + 1000
        )),
        "{seen:#?}"
    );
    assert!(!seen.iter().any(|l| l.contains("ERROR")), "{seen:#?}");
}

#[test]
fn a_hard_limit_below_the_need_is_an_error_naming_the_fix() {
    let dir = tempfile::tempdir().unwrap();
    let config = unreachable_policy(dir.path(), MAX_CONNECTIONS, "");
    let (child, lines) = start(&config, 256, 1000);
    let seen = lines_until(&lines, Duration::from_secs(20), |l| {
        l.contains("is below the")
    });
    // Raised as far as it goes; kpress runs and serves what fits.
    assert_eq!(open_file_limits(child.id()), (1000, 1000), "{seen:#?}");
    stop(child);
    let error = seen.last().unwrap();
    let fit = (1000 - 256) / 2;
    for wanted in [
        "ERROR",
        &format!("the open-file limit 1000 is below the {NEED} descriptors"),
        &format!("max_connections = {MAX_CONNECTIONS} needs"),
        &format!("about {fit} connections fit"),
        &format!("`ulimit -n {NEED}`"),
        &format!("`LimitNOFILE={NEED}`"),
        &format!("lower [limits] max_connections to {fit}"),
    ] {
        assert!(error.contains(wanted), "{wanted:?} not in {error}");
    }
}

#[test]
fn a_hard_limit_with_no_room_for_a_connection_stops_kpress() {
    let dir = tempfile::tempdir().unwrap();
    let config = unreachable_policy(dir.path(), MAX_CONNECTIONS, "");
    let started = Instant::now();
    let (mut child, lines) = start(&config, 64, 200);
    let status = child.wait().unwrap();
    let stderr: Vec<String> = lines.iter().collect();
    let stderr = stderr.join("\n");
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(started.elapsed() < Duration::from_secs(10));
    for wanted in [
        "kpress: error: not starting: the open-file limit is 200 descriptors (hard limit)",
        &format!("max_connections = {MAX_CONNECTIONS} needs {NEED}"),
        "not even one connection fits",
        &format!("`ulimit -n {NEED}`"),
        &format!("`LimitNOFILE={NEED}`"),
    ] {
        assert!(stderr.contains(wanted), "{wanted:?} not in {stderr}");
    }
}
