//! Replays every saved input of each fuzz target through its body, on stable and
//! without libFuzzer: `fuzz/corpus/<target>/` (the seeds and what fuzzing kept) and
//! `fuzz/regressions/<target>/` (every crash found, once fixed). A failing input is a
//! test failure naming its file. `fuzz/pending/` holds reproducers not fixed yet and
//! is not replayed.

use std::any::Any;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::process::Command;

fn fuzz_dir() -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz");
    dir.canonicalize().unwrap_or(dir)
}

/// The files of `fuzz/<kind>/<target>/`, sorted; none when the directory is absent.
fn inputs(kind: &str, target: &str) -> Vec<PathBuf> {
    let dir = fuzz_dir().join(kind).join(target);
    let entries = match std::fs::read_dir(&dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Vec::new(),
        Err(e) => panic!("cannot list {}: {e}", dir.display()),
    };
    let mut files: Vec<PathBuf> = entries
        .map(|entry| entry.expect("a directory entry").path())
        .filter(|path| path.is_file())
        .collect();
    files.sort();
    files
}

fn panic_message(payload: &(dyn Any + Send)) -> &str {
    payload
        .downcast_ref::<String>()
        .map(String::as_str)
        .or_else(|| payload.downcast_ref::<&str>().copied())
        .unwrap_or("(a panic without a message)")
}

/// Set in the child process that replays one target.
const CHILD_ENV: &str = "KPRESS_FUZZ_REPLAY_CHILD";
/// What the child prints before each input, so an abort (out of memory, stack
/// overflow), which no `catch_unwind` sees, still names its input.
const STARTING: &str = "replaying ";

/// Replays `target`'s inputs in a child process (this test binary, running only
/// this test) and fails with the inputs that failed, or the one it died on.
fn replay(target: &str, body: fn(&[u8])) {
    if std::env::var_os(CHILD_ENV).is_some() {
        return replay_here(target, body);
    }
    let exe = std::env::current_exe().expect("the test binary's path");
    let output = Command::new(exe)
        .args([target, "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, "1")
        .output()
        .expect("running the replay child");
    if output.status.success() {
        return;
    }
    let stderr = String::from_utf8_lossy(&output.stderr);
    let last_started = stderr
        .lines()
        .filter_map(|line| line.strip_prefix(STARTING))
        .next_back()
        .unwrap_or("(none)");
    let report: Vec<&str> = stderr
        .lines()
        .filter(|line| !line.starts_with(STARTING))
        .collect();
    panic!(
        "replaying {target} failed ({}); the last input started was {last_started}\n{}",
        output.status,
        report.join("\n")
    );
}

fn replay_here(target: &str, body: fn(&[u8])) {
    let corpus = inputs("corpus", target);
    assert!(
        !corpus.is_empty(),
        "fuzz/corpus/{target}/ has no inputs: the seeds are committed with the repository"
    );
    let regressions = inputs("regressions", target);
    let mut failures = Vec::new();
    for file in corpus.iter().chain(&regressions) {
        let data =
            std::fs::read(file).unwrap_or_else(|e| panic!("cannot read {}: {e}", file.display()));
        eprintln!("{STARTING}{}", file.display());
        if let Err(payload) = catch_unwind(AssertUnwindSafe(|| body(&data))) {
            failures.push(format!("{}: {}", file.display(), panic_message(&*payload)));
        }
    }
    assert!(
        failures.is_empty(),
        "{} input(s) of {target} fail:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn request_frame() {
    replay("request_frame", kpress_fuzz::request_frame);
}

#[test]
fn response_rewrite() {
    replay("response_rewrite", kpress_fuzz::response_rewrite);
}

#[test]
fn codec_decode() {
    replay("codec_decode", kpress_fuzz::codec_decode);
}

#[test]
fn batch_rewrite() {
    replay("batch_rewrite", kpress_fuzz::batch_rewrite);
}

#[test]
fn policy_parse() {
    replay("policy_parse", kpress_fuzz::policy_parse);
}
