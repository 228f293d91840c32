//! `kpress recompress` on files that are not segments and on outputs it cannot write:
//! it says what is wrong with which file.

mod common;

use common::recompress;
use std::path::Path;
use std::process::Output;

fn recompress_to_zstd(input: &Path, output: &Path) -> Output {
    recompress(input, output, &["--compression", "zstd"])
}

#[test]
fn a_text_file_is_copied_unchanged_with_a_warning_that_it_is_no_segment() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("notes.txt");
    let output = dir.path().join("out.log");
    std::fs::write(&input, "hello, not a segment\n").unwrap();
    let run = recompress_to_zstd(&input, &output);
    assert!(run.status.success());
    let stdout = String::from_utf8_lossy(&run.stdout);
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(stdout.contains("batches rewritten: 0\n"), "{stdout}");
    assert!(stdout.contains("  malformed: 1\n"), "{stdout}");
    assert!(
        stderr.contains(&format!(
            "kpress: warning: 1 of 1 batches in {} are not valid record batches, nothing was rewritten: is it a Kafka log segment",
            input.display()
        )),
        "{stderr}"
    );
    assert_eq!(
        std::fs::read(&output).unwrap(),
        std::fs::read(&input).unwrap()
    );
}

#[test]
fn an_empty_file_says_it_holds_no_batches() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("empty.log");
    std::fs::write(&input, b"").unwrap();
    let run = recompress_to_zstd(&input, &dir.path().join("out.log"));
    assert!(run.status.success());
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(
        stderr.contains(&format!(
            "kpress: warning: {} holds no record batches: nothing was rewritten",
            input.display()
        )),
        "{stderr}"
    );
}

#[test]
fn missing_input_and_unwritable_output_name_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing.log");
    let run = recompress_to_zstd(&missing, &dir.path().join("out.log"));
    assert_eq!(run.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(
        stderr.contains(&format!("kpress: error: reading {}: ", missing.display())),
        "{stderr}"
    );
    assert!(!dir.path().join("out.log").exists());

    let input = dir.path().join("in.log");
    std::fs::write(&input, b"x").unwrap();
    let unwritable = dir.path().join("no-such-dir").join("out.log");
    let run = recompress_to_zstd(&input, &unwritable);
    assert_eq!(run.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(
        stderr.contains(&format!(
            "kpress: error: creating {}: ",
            unwritable.display()
        )),
        "{stderr}"
    );
    assert!(
        !stderr.contains("warning"),
        "failed before any work: {stderr}"
    );
}
