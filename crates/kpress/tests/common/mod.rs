//! What the binary's test files share.

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
