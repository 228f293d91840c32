//! `--format json` of `check-config`, `recompress` and `doctor`, through the real
//! binary: one JSON document on stdout with the same facts the text gives.

mod common;

use std::path::Path;
use std::process::Output;

use common::{kpress, recompress};
use kpress_batch::builder::{BatchBuilder, Record};
use kpress_codec::Codec;
use serde_json::{json, Value};

fn document(output: &Output) -> Value {
    let stdout = String::from_utf8_lossy(&output.stdout);
    serde_json::from_str(&stdout).unwrap_or_else(|e| {
        panic!(
            "no JSON document ({e}):\n{stdout}\nstderr:\n{}",
            String::from_utf8_lossy(&output.stderr)
        )
    })
}

fn write(dir: &Path, name: &str, text: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path.display().to_string()
}

const VALID: &str = "[listener]\nbind = \"127.0.0.1:19092\"\n\
    [upstream]\nbootstrap_servers = [\"127.0.0.1:9092\"]\n\
    [defaults]\ncompression.type = \"zstd\"\n";

#[test]
fn check_config_reports_each_file_with_located_problems() {
    let dir = tempfile::tempdir().unwrap();
    let good = write(dir.path(), "good.toml", VALID);
    let bad = write(
        dir.path(),
        "bad.toml",
        &format!("{VALID}compression.zstd.levl = 3\n[limits]\nmax_batch_bytes = 10\n"),
    );
    let renamed = write(
        dir.path(),
        "renamed.toml",
        &format!("{VALID}[metrics]\nbind = \"127.0.0.1:9464\"\n"),
    );
    let missing = dir.path().join("absent.toml").display().to_string();
    let output = kpress(&[
        "check-config",
        "--format",
        "json",
        &good,
        &bad,
        &renamed,
        &missing,
    ]);
    assert_eq!(output.status.code(), Some(1));
    let doc = document(&output);
    assert!(
        output.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let files = doc["files"].as_array().unwrap();
    assert_eq!(files.len(), 4);
    assert_eq!(files[0]["path"], good);
    assert_eq!(files[0]["ok"], true);
    assert_eq!(files[0]["problems"], json!([]));
    assert_eq!(files[0]["warnings"], json!([]));

    assert_eq!(files[1]["ok"], false);
    let problems = files[1]["problems"].as_array().unwrap();
    assert_eq!(problems.len(), 2, "{problems:?}");
    let misspelt = &problems[0];
    assert_eq!(misspelt["line"], 7);
    assert_eq!(misspelt["column"], 18); // at `levl`
    assert_eq!(misspelt["key"], "compression.zstd.levl");
    assert_eq!(misspelt["did_you_mean"], "compression.zstd.level");
    let small = &problems[1];
    assert_eq!(small["key"], "limits.max_batch_bytes");
    assert_eq!(small["value"], "10");
    assert!(small["allowed"].as_str().unwrap().contains("61"), "{small}");
    assert!(small["message"].is_string());

    // A name kpress does not take: refused, naming the one to write instead.
    assert_eq!(files[2]["ok"], false);
    assert_eq!(files[2]["warnings"], json!([]));
    let problems = files[2]["problems"].as_array().unwrap();
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert_eq!(problems[0]["key"], "metrics");
    assert!(
        problems[0]["message"]
            .as_str()
            .unwrap()
            .contains("use [admin]"),
        "{problems:?}"
    );

    assert_eq!(files[3]["ok"], false);
    let unreadable = &files[3]["problems"][0];
    assert_eq!(unreadable["line"], Value::Null);
    assert!(unreadable["message"]
        .as_str()
        .unwrap()
        .contains("cannot read"));
    assert!(doc["gzip_providers"]
        .as_array()
        .unwrap()
        .iter()
        .any(|p| p["provider"] == "zlib"));

    // The text stays what it was.
    let output = kpress(&["check-config", &good]);
    assert_eq!(output.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&output.stdout).starts_with(&format!("{good}: ok\n")));
}

#[test]
fn recompress_prints_its_summary_as_json() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("00000000000000000000.log");
    let output = dir.path().join("out.log");
    let records: Vec<Record> = (0..200)
        .map(|i| Record::value(format!("{{\"n\":{i},\"path\":\"/api/v1/items/{i}\"}}")))
        .collect();
    let mut segment = Vec::new();
    for (i, codec) in [Codec::Gzip, Codec::Zstd].into_iter().enumerate() {
        let batch = BatchBuilder {
            base_offset: i as i64 * 200,
            ..BatchBuilder::codec(codec)
        }
        .build(&records)
        .unwrap();
        segment.extend_from_slice(&batch);
    }
    std::fs::write(&input, &segment).unwrap();
    let run = recompress(
        &input,
        &output,
        &["--compression", "zstd", "--format", "json"],
    );
    assert!(run.status.success(), "{run:?}");
    let doc = document(&run);
    assert_eq!(doc["target"], "zstd");
    assert_eq!(doc["recompress"], "codec-differs");
    assert_eq!(doc["batches_rewritten"], 1);
    assert_eq!(doc["batches_passed"], 1);
    assert_eq!(doc["passed_by_reason"]["same_codec"], 1);
    assert_eq!(doc["passed_by_reason"]["malformed"], 0);
    assert_eq!(doc["bytes_in"], segment.len());
    assert_eq!(doc["bytes_out"], std::fs::metadata(&output).unwrap().len());
    assert!(doc["ratio"].as_f64().unwrap() > 0.0);
    assert_eq!(doc["warnings"], json!([]));

    // A file that is no segment: the warning is in the document too.
    std::fs::write(&input, b"not a segment").unwrap();
    let run = recompress(
        &input,
        &output,
        &["--compression", "zstd", "--format", "json"],
    );
    let doc = document(&run);
    assert_eq!(doc["batches_rewritten"], 0);
    assert_eq!(doc["warnings"].as_array().unwrap().len(), 1, "{doc:#}");
}

#[test]
fn doctor_reports_an_invalid_policy_and_unreachable_brokers() {
    let dir = tempfile::tempdir().unwrap();
    let bad = write(
        dir.path(),
        "bad.toml",
        &format!("{VALID}[limits]\nmax_batch_bytes = 10\n"),
    );
    let output = kpress(&["doctor", "--config", &bad, "--format", "json"]);
    assert_eq!(output.status.code(), Some(1));
    let doc = document(&output);
    assert_eq!(doc["ok"], false);
    let findings = doc["findings"].as_array().unwrap();
    assert!(
        findings
            .iter()
            .all(|f| f["kind"] == "config_invalid" && f["severity"] == "problem"),
        "{findings:?}"
    );
    assert!(findings[0]["message"]
        .as_str()
        .unwrap()
        .contains("max_batch_bytes"));

    // Nothing listens on the bootstrap port: TCP fails, later steps are not tried.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let policy = write(
        dir.path(),
        "down.toml",
        &VALID.replace("127.0.0.1:9092", &format!("127.0.0.1:{port}")),
    );
    let output = kpress(&["doctor", "--config", &policy, "--format", "json"]);
    assert_eq!(output.status.code(), Some(1));
    let doc = document(&output);
    let server = &doc["bootstrap_servers"][0];
    assert_eq!(server["reachable"], false);
    assert_eq!(server["tcp"]["status"], "failed");
    assert_eq!(server["tls"]["status"], "not_tried");
    let kinds: Vec<&str> = doc["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["bootstrap_unreachable", "cluster_unread"]);
    // The text form says the same.
    let output = kpress(&["doctor", "--config", &policy]);
    assert_eq!(output.status.code(), Some(1));
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(text.contains("tcp FAILED"), "{text}");
    assert!(text.contains("2 problems, 0 notes"), "{text}");
}
