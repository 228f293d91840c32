//! `kpress bench` as an operator runs it: on the shipped datasets (a few small batches,
//! so the tests are quick), on segments built here (damaged ones included), and with
//! bad arguments. Sizes and counts are asserted, never timings.

mod common;

use std::path::{Path, PathBuf};
use std::process::Output;

use common::kpress;
use kpress_batch::builder::{BatchBuilder, Record};
use kpress_codec::Codec;
use serde_json::Value;

fn datasets() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../datasets")
}

fn apache_log() -> String {
    datasets().join("apache_access.log").display().to_string()
}

fn bench(args: &[&str]) -> Output {
    kpress(&[&["bench"], args].concat())
}

/// `kpress bench ARGS... --passes 1`: one timed pass keeps a test quick.
fn quick(args: &[&str]) -> Output {
    bench(&[args, &["--passes", "1"]].concat())
}

/// [`quick`] with `--format json`, its document.
fn quick_json(args: &[&str]) -> Value {
    json(&quick(&[args, &["--format", "json"]].concat()))
}

fn json(output: &Output) -> Value {
    assert!(
        output.status.success(),
        "kpress bench failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).expect("one JSON document")
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

#[test]
fn kip_780_usage_measures_the_codec_with_its_properties() {
    let file = apache_log();
    let doc = quick_json(&[
        "--file",
        &file,
        "--batch-size",
        "10",
        "--batch-count",
        "5",
        "--compression",
        "zstd",
        "--property",
        "compression.zstd.level=1",
        "--property",
        "compression.zstd.window=0",
    ]);
    assert_eq!(doc["input"]["batch_size"], 10);
    assert_eq!(doc["input"]["batch_count"], 5);
    assert_eq!(doc["input"]["records"], 50);
    let results = doc["results"].as_array().unwrap();
    assert_eq!(results.len(), 1);
    let r = &results[0];
    assert_eq!(r["candidate"], "zstd:1");
    assert_eq!(r["codec"], "zstd");
    assert_eq!(r["properties"]["compression.zstd.level"], "1");
    assert_eq!(r["batches"], 5);
    assert_eq!(r["records"], 50);
    assert_eq!(r["raw_bytes"], doc["input"]["raw_bytes"]);
    let ratio = r["ratio"].as_f64().unwrap();
    assert!(ratio > 0.05 && ratio < 0.8, "{ratio}");
    assert_eq!(r["pareto"], true);
}

#[test]
fn the_table_prints_testcompressions_figures_per_candidate() {
    let file = apache_log();
    let out = quick(&[
        "--file",
        &file,
        "--batch-count",
        "3",
        "--candidate",
        "lz4:9",
        "--candidate",
        "gzip:6",
        "--candidate",
        "gzip",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("3 batches, 30 records"), "{text}");
    assert!(
        text.contains("avg batch B") && text.contains("compress µs"),
        "{text}"
    );
    // gzip and gzip:6 are one candidate.
    let rows: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("gzip") || l.starts_with("lz4"))
        .collect();
    assert_eq!(rows.len(), 2, "{text}");
    // Sorted by size: gzip is smaller than lz4 on text.
    assert!(rows[0].starts_with("gzip:6 "), "{text}");
}

#[test]
fn batches_by_bytes_as_a_producers_batch_size() {
    let file = apache_log();
    let doc = quick_json(&[
        "--file",
        &file,
        "--batch-bytes",
        "16384",
        "--batch-count",
        "4",
        "--candidate",
        "zstd:3",
    ]);
    assert_eq!(doc["input"]["batch_size"], Value::Null);
    assert_eq!(doc["input"]["batch_bytes"], 16384);
    let r = &doc["results"][0];
    assert_eq!(r["batches"], 4);
    // Each batch holds what fits in 16 KiB with its header: 61 + records <= 16384.
    let raw = r["raw_bytes"].as_u64().unwrap();
    assert!(
        raw <= 4 * (16384 - 61) && raw > 4 * (16384 - 61 - 400),
        "{raw}"
    );
}

#[test]
fn a_record_per_file_with_csv() {
    let dir = datasets().display().to_string();
    let out = quick(&[
        "--dir",
        &dir,
        "--record-per-file",
        "--batch-size",
        "2",
        "--batch-count",
        "3",
        "--candidate",
        "snappy",
        "--format",
        "csv",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 2, "{text}");
    assert!(lines[0].starts_with("candidate,codec,batches,records,raw_bytes,batch_bytes,ratio"));
    // Four files, two per batch, three batches: the files are repeated.
    assert!(lines[1].starts_with("snappy,snappy,3,6,"), "{text}");
}

#[test]
fn the_matrix_is_sorted_by_size_with_a_pareto_front() {
    let file = apache_log();
    let doc = quick_json(&["--file", &file, "--batch-count", "2", "--matrix"]);
    let results = doc["results"].as_array().unwrap();
    assert!(results.len() >= 40, "{}", results.len());
    let sizes: Vec<u64> = results
        .iter()
        .map(|r| r["batch_bytes"].as_u64().unwrap())
        .collect();
    assert!(sizes.windows(2).all(|w| w[0] <= w[1]), "{sizes:?}");
    let specs: Vec<&str> = results
        .iter()
        .map(|r| r["candidate"].as_str().unwrap())
        .collect();
    for spec in [
        "none",
        "zstd:-5",
        "zstd:19",
        "lz4:17:block=7",
        "snappy:block=4096",
        "gzip:9",
    ] {
        assert!(specs.contains(&spec), "{spec} in {specs:?}");
    }
    // The smallest result is on the front; so is the fastest.
    assert_eq!(results[0]["pareto"], true);
    let fastest = results
        .iter()
        .max_by(|a, b| {
            let speed = |r: &Value| r["compress_mb_per_s"].as_f64().unwrap();
            speed(a).total_cmp(&speed(b))
        })
        .unwrap();
    assert_eq!(fastest["pareto"], true);
}

#[test]
fn plots_are_written_as_svg_and_png() {
    let dir = tempfile::tempdir().unwrap();
    let svg = dir.path().join("plot.svg");
    let png = dir.path().join("plot.png");
    let file = apache_log();
    let out = quick(&[
        "--file",
        &file,
        "--batch-count",
        "2",
        "--candidate",
        "zstd:1",
        "--candidate",
        "zstd:9",
        "--candidate",
        "lz4:9",
        "--plot",
        svg.to_str().unwrap(),
        "--plot",
        png.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = std::fs::read_to_string(&svg).unwrap();
    assert!(text.starts_with("<svg"), "{}", &text[..100.min(text.len())]);
    assert!(text.contains("Pareto front"));
    assert!(text.contains("compression MB/s per core"));
    let bytes = std::fs::read(&png).unwrap();
    assert!(bytes.starts_with(b"\x89PNG\r\n\x1a\n"));
    assert!(bytes.len() > 10_000, "{}", bytes.len());
}

fn batch(codec: Codec, base_offset: i64, n: usize) -> Vec<u8> {
    let records: Vec<Record> = (0..n)
        .map(|i| {
            Record::value(format!(
                "{{\"user\":{},\"event\":\"click\",\"page\":{}}}",
                i % 7,
                i
            ))
        })
        .collect();
    BatchBuilder {
        base_offset,
        ..BatchBuilder::codec(codec)
    }
    .build(&records)
    .unwrap()
}

#[test]
fn a_segment_is_measured_as_stored_and_damaged_batches_are_reported() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("00000000000000000000.log");
    let mut damaged = batch(Codec::Lz4, 100, 50);
    let middle = damaged.len() / 2;
    damaged[middle] ^= 0x55;
    let mut segment = [
        batch(Codec::Gzip, 0, 50),
        batch(Codec::Zstd, 50, 50),
        damaged,
        batch(Codec::Zstd, 150, 50),
    ]
    .concat();
    segment.extend_from_slice(&batch(Codec::Snappy, 200, 50)[..30]);
    std::fs::write(&path, &segment).unwrap();
    let seg = path.display().to_string();

    let out = quick(&[
        "--segment",
        &seg,
        "--candidate",
        "zstd:3",
        "--format",
        "json",
    ]);
    let doc = json(&out);
    assert_eq!(doc["input"]["segment"], seg.as_str());
    assert_eq!(doc["input"]["batch_size"], Value::Null);
    let stored = &doc["stored"];
    assert_eq!(stored["batches"], 3);
    assert_eq!(stored["records"], 150);
    assert_eq!(stored["codecs"][0]["codec"], "gzip");
    assert_eq!(stored["codecs"][1]["batches"], 2);
    let damaged = stored["damaged"].as_array().unwrap();
    assert_eq!(damaged.len(), 2, "{damaged:?}");
    assert_eq!(damaged[0]["base_offset"], 100);
    assert!(damaged[0]["reason"]
        .as_str()
        .unwrap()
        .contains("CRC mismatch"));
    assert_eq!(damaged[1]["base_offset"], 200);
    assert!(damaged[1]["reason"].as_str().unwrap().contains("truncated"));
    let warnings = stderr(&out);
    assert!(warnings.contains("batch at offset 100"), "{warnings}");
    let r = &doc["results"][0];
    assert_eq!(r["candidate"], "zstd:3");
    assert_eq!(r["records"], 150);
    assert_eq!(r["raw_bytes"], stored["raw_bytes"]);

    // As stored only, as a table.
    let out = quick(&["--segment", &seg]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains("3 batches as stored (gzip 1, zstd 2), 150 records"),
        "{text}"
    );
    assert!(text.contains("left out: 2 damaged batches"), "{text}");
}

#[test]
fn a_segment_with_nothing_readable_is_an_error_not_a_panic() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("garbage.log");
    std::fs::write(&path, [0xffu8; 4096]).unwrap();
    let out = bench(&["--segment", path.to_str().unwrap(), "--candidate", "zstd:3"]);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(err.contains("no readable record batch"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn bad_arguments_say_what_is_allowed() {
    let file = apache_log();
    for (args, says) in [
        (
            vec!["--compression", "brotli"],
            "unknown codec \"brotli\": allowed are none, gzip, snappy, lz4, zstd",
        ),
        (
            vec![
                "--compression",
                "zstd",
                "--property",
                "compression.zstd.level=99",
            ],
            "compression.zstd.level = 99 is out of range: allowed -131072..22",
        ),
        (
            vec![
                "--compression",
                "zstd",
                "--property",
                "compression.lz4.level=9",
            ],
            "not an option of zstd: zstd takes compression.zstd.level, compression.zstd.window",
        ),
        (
            vec!["--candidate", "lz4:block=9"],
            "compression.lz4.block = 9 is out of range: allowed 4..7",
        ),
        (vec![], "nothing to measure"),
        (
            vec![
                "--batch-size",
                "1000000",
                "--batch-count",
                "10000",
                "--candidate",
                "lz4",
            ],
            "the most measured at once is 1073741824: lower --batch-count, --batch-size or --batch-bytes",
        ),
        (
            vec!["--matrix", "--plot", "out.jpg"],
            "must end in .svg or .png",
        ),
    ] {
        let mut all = vec!["--file", file.as_str()];
        all.extend(args.iter().copied());
        let out = bench(&all);
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        let err = stderr(&out);
        assert!(err.contains(says), "{args:?}: {err}");
    }
}

#[test]
fn batch_sizes_compare_each_candidate_with_the_producers_gzip_batch_by_batch() {
    let file = apache_log();
    let args = [
        "--file",
        &file,
        "--batch-sizes",
        "1,14,1000,20000",
        "--batch-count",
        "20",
        "--candidate",
        "zstd:3",
        "--candidate",
        "lz4",
    ];
    let doc = json(&bench(&[&args[..], &["--format", "json"]].concat()));
    assert_eq!(doc["against"], "gzip:6");
    assert_eq!(doc["too_few_records"], serde_json::json!([20000]));
    let rows = doc["rows"].as_array().unwrap();
    let sizes: Vec<u64> = rows
        .iter()
        .map(|r| r["records_per_batch"].as_u64().unwrap())
        .collect();
    assert_eq!(sizes, [1, 14, 1000]);
    // At most --batch-count full batches: the 10,000 lines make 10 of 1000.
    let batches: Vec<u64> = rows
        .iter()
        .map(|r| r["batches"].as_u64().unwrap())
        .collect();
    assert_eq!(batches, [20, 20, 10]);
    let cell = |row: usize, candidate: usize, key: &str| {
        rows[row]["candidates"][candidate][key].as_u64().unwrap()
    };
    // lz4 is larger than gzip-6 in every batch; zstd-3 in most of 14 lines, none of 1000.
    for (row, &n) in batches.iter().enumerate() {
        assert_eq!(cell(row, 1, "grown"), n, "{doc}");
    }
    assert!(cell(1, 0, "grown") * 2 > 20, "{doc}");
    assert_eq!(cell(2, 0, "grown"), 0, "{doc}");
    assert!(cell(2, 0, "batch_bytes") < rows[2]["against_bytes"].as_u64().unwrap());
    assert_eq!(
        doc["crossover"],
        serde_json::json!([
            {"candidate": "zstd:3", "smaller_from_records_per_batch": 1000},
            {"candidate": "lz4:9", "smaller_from_records_per_batch": null},
        ])
    );

    let out = bench(&args);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        text.contains("against the same batches in gzip:6"),
        "{text}"
    );
    assert!(
        text.contains("- zstd:3: smaller from 1000 records per batch than gzip:6."),
        "{text}"
    );
    assert!(
        text.contains("- lz4:9: larger at every size up to 1000 records per batch than gzip:6."),
        "{text}"
    );

    // --against names what the producer sends; it needs --batch-sizes.
    let out = bench(&[
        "--file",
        &file,
        "--batch-sizes",
        "14",
        "--batch-count",
        "5",
        "--candidate",
        "zstd:3",
        "--against",
        "lz4",
        "--format",
        "csv",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let csv = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = csv.lines().collect();
    assert_eq!(lines.len(), 2, "{csv}");
    assert!(lines[1].starts_with("14,5,"), "{csv}");
    assert!(lines[1].contains(",lz4:9,"), "{csv}");
    // zstd-3 is smaller than lz4 in every batch.
    assert!(lines[1].ends_with(",0,0"), "{csv}");
    let refused = bench(&["--file", &file, "--candidate", "zstd:3", "--against", "lz4"]);
    assert!(!refused.status.success());
    assert!(
        stderr(&refused).contains("--batch-sizes"),
        "{}",
        stderr(&refused)
    );
}
