//! What the binary's test files share.

// Each test file is its own crate and uses only some of these.
#![allow(dead_code)]

use std::path::Path;
use std::process::{Command, Output};

/// Runs `kpress recompress --input INPUT --output OUTPUT ARGS...`.
pub(crate) fn recompress(input: &Path, output: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kpress"))
        .arg("recompress")
        .arg("--input")
        .arg(input)
        .arg("--output")
        .arg(output)
        .args(args)
        .output()
        .expect("running kpress")
}

/// Runs `kpress ARGS...` with `KPRESS_LOG` unset, so its log is the default.
pub(crate) fn kpress(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kpress"))
        .args(args)
        .env_remove("KPRESS_LOG")
        .output()
        .expect("run kpress")
}
