//! Settings that cannot take effect, through the real binary: `check-config` prints
//! them as warnings (text and JSON), `--strict` refuses them, `--running` adds the keys a
//! reload could not apply, and `kpress run` logs both at start and on reload.

mod common;

use std::process::Command;
use std::sync::mpsc;
use std::time::Duration;

use common::{free_addr, kpress, lines_until, spawn_reading_stderr, text, write};
use serde_json::Value;

fn head(listen: std::net::SocketAddr) -> String {
    format!(
        "[listener]\nbind = \"{listen}\"\nnode_port_base = 30000\n\
         [upstream]\nbootstrap_servers = [\"{}\"]\n",
        free_addr()
    )
}

/// Lines 6.. after `head`: a level beside the default topic mode (line 8), and a
/// target wait adaptive levels alone read, while they are off (line 10).
const NO_EFFECT: &str = "[[topics]]\nmatch = \"logs.*\"\ncompression.zstd.level = 19\n\
     [overload]\ntarget_wait_ms = 50\n";

#[test]
fn warnings_name_file_line_key_value_and_reason_and_strict_refuses_them() {
    let dir = tempfile::tempdir().unwrap();
    let file = write(&dir, "k.toml", &format!("{}{NO_EFFECT}", head(free_addr())));
    let out = kpress(&["check-config", &file]);
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(text(&out.stdout).starts_with(&format!("{file}: ok\n")));
    let warnings: Vec<&str> = stderr.lines().collect();
    assert_eq!(
        warnings,
        [
            format!(
                "warning: {file}:8:26: compression.zstd.level = 19: has no effect: \
                 compression.type \"topic\" (the default) stores each topic's own level (its \
                 compression.zstd.level): name a codec beside it to set a level"
            ),
            format!(
                "warning: {file}:10:18: overload.target_wait_ms = 50: has no effect: \
                 [overload] adaptive is off, and only adaptive levels judge the mean wait"
            ),
        ]
    );

    let out = kpress(&["check-config", "--strict", &file]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = text(&out.stderr);
    assert!(
        stderr.ends_with(&format!("{file}: 2 warnings, refused by --strict\n")),
        "{stderr}"
    );
    assert!(!text(&out.stdout).contains(": ok"), "{}", text(&out.stdout));

    // A file without warnings passes --strict.
    let clean = write(&dir, "clean.toml", &head(free_addr()));
    let out = kpress(&["check-config", "--strict", &clean]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stderr).is_empty(), "{}", text(&out.stderr));
}

#[test]
fn json_lists_warnings_and_strict_makes_their_file_not_ok() {
    let dir = tempfile::tempdir().unwrap();
    let file = write(&dir, "k.toml", &format!("{}{NO_EFFECT}", head(free_addr())));
    let clean = write(&dir, "clean.toml", &head(free_addr()));
    for strict in [false, true] {
        let mut args = vec!["check-config", "--format", "json", &file, &clean];
        if strict {
            args.insert(1, "--strict");
        }
        let out = kpress(&args);
        assert_eq!(out.status.code(), Some(if strict { 1 } else { 0 }));
        assert!(out.stderr.is_empty(), "{}", text(&out.stderr));
        let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
        let files = doc["files"].as_array().unwrap();
        assert_eq!(files[0]["ok"], !strict, "{doc:#}");
        assert_eq!(files[0]["problems"], serde_json::json!([]));
        let warnings = files[0]["warnings"].as_array().unwrap();
        assert_eq!(warnings.len(), 2, "{doc:#}");
        assert_eq!(warnings[0]["line"], 8);
        assert_eq!(warnings[0]["column"], 26);
        assert_eq!(warnings[0]["key"], "compression.zstd.level");
        assert_eq!(warnings[0]["value"], "19");
        assert!(
            warnings[0]["message"]
                .as_str()
                .unwrap()
                .starts_with("has no effect: compression.type \"topic\""),
            "{doc:#}"
        );
        assert_eq!(warnings[1]["line"], 10);
        assert_eq!(warnings[1]["key"], "overload.target_wait_ms");
        assert_eq!(files[1]["ok"], true);
        assert_eq!(files[1]["warnings"], serde_json::json!([]));
    }
}

#[test]
fn running_names_each_key_a_reload_could_apply_only_at_restart() {
    let dir = tempfile::tempdir().unwrap();
    let listen = free_addr();
    let base = head(listen);
    let running = write(
        &dir,
        "running.toml",
        &format!("{base}[limits]\nmax_rewrite_wait_ms = 500\n"),
    );
    let next = write(
        &dir,
        "next.toml",
        &format!(
            "{base}[overload]\nadaptive = true\n[limits]\nmax_rewrite_wait_ms = 200\n\
             [[topics]]\nmatch = \"a\"\ncompression.type = \"zstd\"\ncompression.zstd.level = 19\n"
        ),
    );
    let out = kpress(&["check-config", "--running", &running, &next]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stderr),
        format!(
            "warning: {next}:9:23: limits.max_rewrite_wait_ms = 200: changed (running: 500): \
             takes effect on restart; until then the running value stays in force\n"
        )
    );
    let out = kpress(&[
        "check-config",
        "--strict",
        "--format",
        "json",
        "--running",
        &running,
        &next,
        &running,
    ]);
    assert_eq!(out.status.code(), Some(1));
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["running"]["ok"], true);
    assert_eq!(doc["files"][0]["ok"], false);
    let warning = &doc["files"][0]["warnings"][0];
    assert_eq!(warning["key"], "limits.max_rewrite_wait_ms");
    assert_eq!(warning["line"], 9);
    assert!(warning["message"]
        .as_str()
        .unwrap()
        .contains("takes effect on restart"));
    // The running file against itself changes nothing.
    assert_eq!(doc["files"][1]["ok"], true);

    // A running policy that does not load leaves nothing to compare with.
    let broken = write(&dir, "broken.toml", "[listener]\n");
    let out = kpress(&["check-config", "--running", &broken, &next]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = text(&out.stderr);
    assert!(
        stderr.starts_with(&format!("kpress: --running {broken} is not usable:\n")),
        "{stderr}"
    );
    assert!(text(&out.stdout).is_empty(), "{}", text(&out.stdout));
}

/// `kpress run`'s log, line by line, until it is stopped.
struct Running {
    child: std::process::Child,
    lines: mpsc::Receiver<String>,
    log: String,
}

impl Running {
    fn start(config: &str) -> Running {
        let (child, lines) = spawn_reading_stderr(
            Command::new(env!("CARGO_BIN_EXE_kpress")).args(["run", "--config", config]),
            &[],
        );
        Running {
            child,
            lines,
            log: String::new(),
        }
    }

    /// Reads the log until a line contains `wanted` (panics after 60 s).
    fn wait_for(&mut self, wanted: &str) {
        if self.log.lines().any(|l| l.contains(wanted)) {
            return;
        }
        let seen = lines_until(&self.lines, Duration::from_secs(60), |l| l.contains(wanted));
        for line in &seen {
            self.log.push_str(line);
            self.log.push('\n');
        }
        assert!(
            seen.last().is_some_and(|l| l.contains(wanted)),
            "no log line with {wanted:?}:\n{}",
            self.log
        );
    }

    fn signal(&self, name: &str) {
        let status = Command::new("kill")
            .args([name, &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn run_logs_warnings_at_start_and_each_restart_key_on_reload() {
    let dir = tempfile::tempdir().unwrap();
    let base = head(free_addr());
    let config = write(&dir, "k.toml", &format!("{base}{NO_EFFECT}"));
    let mut kpress = Running::start(&config);
    kpress.wait_for("kpress bootstrap listener ready");
    kpress.wait_for(&format!(
        "{config}:8:26: compression.zstd.level = 19: has no effect"
    ));

    // Written whole, then SIGHUP: the reload reads the new bytes either way.
    let next = format!(
        "{base}[[topics]]\nmatch = \"logs.*\"\ncompression.type = \"zstd\"\n\
         compression.zstd.level = 19\n[limits]\nmax_rewrite_wait_ms = 200\n"
    );
    let staged = write(&dir, "k.toml.new", &next);
    std::fs::rename(&staged, &config).unwrap();
    kpress.signal("-HUP");
    kpress.wait_for(&format!(
        "{config}:11:23: limits.max_rewrite_wait_ms = 200: not set when kpress started: \
         takes effect on restart"
    ));
    kpress.wait_for("these changes need a restart and were not applied");
    kpress.signal("-TERM");
    kpress.wait_for("kpress stopped");
}
