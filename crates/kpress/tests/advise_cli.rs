//! `kpress advise` through the real binary: on a dataset, a log segment and a saved or
//! served metrics page; every TOML block it prints is checked by `kpress check-config`.

mod common;

use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use common::kpress;
use kpress_batch::builder::{BatchBuilder, Record};
use kpress_codec::Codec;
use serde_json::Value;

fn ok(args: &[&str]) -> String {
    let out = kpress(args);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "kpress {args:?} failed: {}\n{stdout}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

fn failure(args: &[&str]) -> String {
    let out = kpress(args);
    assert!(!out.status.success(), "kpress {args:?} succeeded");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn json(args: &[&str]) -> Value {
    let mut args = args.to_vec();
    args.extend(["--format", "json"]);
    serde_json::from_str(&ok(&args)).expect("advise --format json prints JSON")
}

fn apache_lines(n: usize) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../datasets/apache_access.log");
    let text = std::fs::read_to_string(path).expect("the shipped apache dataset");
    text.lines().take(n).map(|l| format!("{l}\n")).collect()
}

/// A dataset directory of the apache log's first `n` lines.
fn dataset(n: usize) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("access.log"), apache_lines(n)).unwrap();
    dir
}

/// `block` in a minimal policy file, checked by `kpress check-config`.
fn assert_policy_accepts(block: &str) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("kpress.toml");
    std::fs::write(
        &path,
        format!(
            "[listener]\nbind = \"127.0.0.1:19092\"\n[upstream]\nbootstrap_servers = [\"127.0.0.1:9092\"]\n\n{block}"
        ),
    )
    .unwrap();
    let out = kpress(&["check-config", path.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "check-config refused the block:\n{block}\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The text output's paste-ready block: everything after its heading.
fn text_block(text: &str) -> &str {
    let at = text
        .find("the first match wins):\n\n")
        .expect("a paste-ready block");
    &text[at + "the first match wins):\n\n".len()..]
}

const QUICK: &str = "gzip:6,gzip:1,zstd:3,zstd:1,lz4:9,snappy,none";

/// `advise --dir DIR --candidates QUICK EXTRA...`.
fn advise_quick<'a>(dir: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    [&["advise", "--dir", dir, "--candidates", QUICK], extra].concat()
}

#[test]
fn dataset_size_goal_ranks_explains_and_prints_a_rule_check_config_accepts() {
    let dir = dataset(3000);
    let path = dir.path().to_str().unwrap();
    let text = ok(&advise_quick(path, &["--topic", "logs.*"]));
    assert!(text.contains("3000 records"), "{text}");
    // One sentence per candidate, each naming what it stores and how fast it runs.
    for spec in QUICK.split(',') {
        assert!(
            text.lines()
                .any(|l| l.starts_with(&format!("- {spec} ")) && l.contains("per core")),
            "no sentence for {spec}:\n{text}"
        );
    }
    let block = text_block(&text);
    assert!(
        block.contains("[[topics]]\nmatch = \"logs.*\"\n"),
        "{block}"
    );
    assert_policy_accepts(block);

    let report = json(&advise_quick(path, &[]));
    let ranking = report["ranking"].as_array().unwrap();
    assert_eq!(ranking.len(), 7);
    // Size: eligible ones by ratio, `none` last (it stores no less than uncompressed).
    let ratios: Vec<f64> = ranking
        .iter()
        .filter(|r| r["eligible"] == true)
        .map(|r| r["ratio"].as_f64().unwrap())
        .collect();
    assert!(ratios.windows(2).all(|w| w[0] <= w[1]), "{ratios:?}");
    assert_eq!(ranking.last().unwrap()["candidate"], "none");
    assert_eq!(report["choice"], ranking[0]["candidate"]);
    let toml = report["toml"].as_str().unwrap();
    assert!(toml.contains("match = \"your-topic-*\""), "{toml}");
    assert_policy_accepts(toml);
}

#[test]
fn speed_goal_and_floors_choose_within_them() {
    let dir = dataset(2000);
    let path = dir.path().to_str().unwrap();
    let speed = json(&advise_quick(path, &["--goal", "speed"]));
    let ranking = speed["ranking"].as_array().unwrap();
    let speeds: Vec<f64> = ranking
        .iter()
        .filter(|r| r["eligible"] == true)
        .map(|r| r["compress_mb_per_s"].as_f64().unwrap_or(f64::INFINITY))
        .collect();
    assert!(speeds.windows(2).all(|w| w[0] >= w[1]), "{speeds:?}");
    assert_ne!(speed["choice"], "none");

    // A CPU ceiling between gzip:1's cost and the fastest's keeps gzip out.
    let size = json(&advise_quick(path, &[]));
    let cost = |spec: &str| {
        size["ranking"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["candidate"] == spec)
            .unwrap()["compress_cpu_ms_per_mb"]
            .as_f64()
            .unwrap()
    };
    let ceiling = (cost("lz4:9").max(cost("snappy")) * 1.5).min(cost("gzip:1") * 0.9);
    let floored = json(&advise_quick(
        path,
        &["--max-cpu-ms-per-mb", &ceiling.to_string()],
    ));
    for r in floored["ranking"].as_array().unwrap() {
        let eligible = r["eligible"] == true;
        assert_eq!(
            eligible,
            r["compress_cpu_ms_per_mb"].as_f64().unwrap() <= ceiling && r["candidate"] != "none",
            "{r}"
        );
        if !eligible && r["candidate"] != "none" {
            assert!(
                r["miss"].as_str().unwrap().contains("--max-cpu-ms-per-mb"),
                "{r}"
            );
            assert!(r["sentence"].as_str().unwrap().contains("ceiling"), "{r}");
        }
    }
    assert!(!floored["choice"].as_str().unwrap().starts_with("gzip"));
    assert_policy_accepts(floored["toml"].as_str().unwrap());

    // A floor nothing meets: no rule, and the text says so.
    let text = ok(&[
        "advise",
        "--dir",
        path,
        "--candidates",
        "gzip:9",
        "--min-mbps",
        "1000000",
    ]);
    assert!(
        text.contains("No candidate meets the goal's floors"),
        "{text}"
    );
}

#[test]
fn small_batches_get_batching_advice_measured_at_larger_sizes() {
    let dir = dataset(10000);
    let path = dir.path().to_str().unwrap();
    let report = json(&[
        "advise",
        "--dir",
        path,
        "--candidates",
        "gzip:6,zstd:3",
        "--current",
        "gzip:6",
    ]);
    let batching = &report["batching"];
    let sizes: Vec<u64> = batching["larger"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["batch_size"].as_u64().unwrap())
        .collect();
    // Kafka's default 16 KiB now; the ladder above it.
    assert_eq!(sizes, [65536, 262144, 1048576]);
    let best_1m = &batching["larger"][2]["best"];
    assert!(
        best_1m["ratio"].as_f64().unwrap() < batching["current_best"]["ratio"].as_f64().unwrap()
    );
    // The producer writes gzip:6 already, so no codec change at 16 KiB saves as much as
    // larger batches: batching is the lever.
    assert_eq!(batching["biggest_lever"], true);
    let text = ok(&[
        "advise",
        "--dir",
        path,
        "--candidates",
        "gzip:6,zstd:3",
        "--current",
        "gzip:6",
    ]);
    assert!(text.contains("Batch size is the biggest lever"), "{text}");
    assert!(text.contains("batch.size="), "{text}");
    assert!(text.contains("linger.ms"), "{text}");

    // Batches already of 1 MiB: nothing larger to weigh.
    let big = json(&[
        "advise",
        "--dir",
        path,
        "--candidates",
        "zstd:3",
        "--batch-bytes",
        "1048576",
    ]);
    assert!(big["batching"].is_null(), "{big}");
}

/// A segment of `batches` gzip batches of `per_batch` apache lines each.
fn gzip_segment(dir: &Path, batches: usize, per_batch: usize) -> PathBuf {
    let lines = apache_lines(batches * per_batch);
    let values: Vec<&str> = lines.lines().collect();
    let mut segment = Vec::new();
    for (i, chunk) in values.chunks(per_batch).enumerate() {
        let records: Vec<Record> = chunk.iter().map(|v| Record::value(v.as_bytes())).collect();
        let mut builder = BatchBuilder::codec(Codec::Gzip);
        builder.base_offset = (i * per_batch) as i64;
        segment.extend(builder.build(&records).unwrap());
    }
    let path = dir.join("00000000000000000000.log");
    std::fs::write(&path, segment).unwrap();
    path
}

#[test]
fn segment_is_measured_as_stored_and_regrouped_for_batching() {
    let dir = tempfile::tempdir().unwrap();
    let segment = gzip_segment(dir.path(), 200, 20);
    let path = segment.to_str().unwrap();
    let report = json(&[
        "advise",
        "--segment",
        path,
        "--candidates",
        "gzip:6,zstd:3,lz4:9",
    ]);
    assert_eq!(report["input"]["batches"], 200);
    assert_eq!(report["input"]["records"], 4000);
    assert_eq!(report["input"]["codecs"][0], "gzip");
    let stored = std::fs::metadata(&segment).unwrap().len();
    assert_eq!(report["current"]["stored_bytes"], stored);
    // About 5 kB batches: every ladder size is larger, each measured on the same
    // records (their offset and timestamp deltas renumbered: a byte or two per record).
    let raw = report["input"]["raw_bytes"].as_f64().unwrap();
    let larger = report["batching"]["larger"].as_array().unwrap();
    assert_eq!(larger.len(), 4);
    for l in larger {
        let ranking = l["ranking"].as_array().unwrap();
        assert_eq!(ranking.len(), 3);
        for r in ranking {
            assert_eq!(r["raw_bytes"], ranking[0]["raw_bytes"]);
            let regrouped = r["raw_bytes"].as_f64().unwrap();
            assert!(
                (regrouped / raw - 1.0).abs() < 0.02,
                "{regrouped} against {raw}"
            );
        }
    }
    let text = ok(&[
        "advise",
        "--segment",
        path,
        "--candidates",
        "gzip:6,zstd:3",
        "--topic",
        "web",
    ]);
    assert!(text.contains("the segment as stored (gzip)"), "{text}");
    assert_policy_accepts(text_block(&text));
}

#[test]
fn bad_inputs_are_refused_with_a_reason() {
    let empty = tempfile::tempdir().unwrap();
    let path = empty.path().to_str().unwrap();
    assert!(failure(&["advise", "--dir", path]).contains("no records"));
    assert!(failure(&["advise", "--dir", "/nonexistent/kpress"]).contains("/nonexistent/kpress"));
    let junk = empty.path().join("junk.log");
    std::fs::write(&junk, b"not a segment at all, just some bytes").unwrap();
    assert!(failure(&["advise", "--segment", junk.to_str().unwrap()])
        .contains("no readable record batch"));
    let data = dataset(10);
    let data = data.path().to_str().unwrap();
    assert!(failure(&["advise", "--dir", data, "--min-mbps", "0"]).contains("--min-mbps"));
    assert!(failure(&["advise", "--dir", data, "--candidates", "brotli:3"]).contains("brotli"));
    assert!(failure(&["advise", "--goal", "size"]).contains("required"));
    // Options of one input are refused with another, not ignored.
    assert!(failure(&["advise", "--segment", "x.log", "--batch-bytes", "4096"]).contains("--dir"));
    assert!(failure(&["advise", "--dir", data, "--interval", "5"]).contains("--from-metrics"));
    assert!(failure(&["advise", "--from-metrics", "m.txt", "--topic", "t"]).contains("--topic"));
    let page = empty.path().join("page.txt");
    std::fs::write(&page, "kpress_produce_bytes_in_total{topic=\"a} 1\n").unwrap();
    let err = failure(&["advise", "--from-metrics", page.to_str().unwrap()]);
    assert!(
        err.contains("not a metrics page") && err.contains("line 1"),
        "{err}"
    );
}

/// A page as kpress serves it with [shadow] trials on two topics.
const PAGE: &str = r#"# HELP kpress_produce_bytes_in_total bytes read
# TYPE kpress_produce_bytes_in_total counter
kpress_produce_bytes_in_total{topic="logs"} 10000000
kpress_produce_bytes_in_total{topic="events"} 2000000
kpress_produce_bytes_out_total{topic="logs"} 10000000
kpress_produce_bytes_out_total{topic="events"} 2000000
# TYPE kpress_batch_bytes histogram
kpress_batch_bytes_bucket{topic="logs",le="8192"} 2500
kpress_batch_bytes_bucket{topic="logs",le="+Inf"} 2500
kpress_batch_bytes_sum{topic="logs"} 10000000
kpress_batch_bytes_count{topic="logs"} 2500
kpress_batch_bytes_sum{topic="events"} 2000000
kpress_batch_bytes_count{topic="events"} 10
kpress_shadow_batches_total{topic="logs"} 25
kpress_shadow_raw_bytes_total{topic="logs"} 500000
kpress_shadow_bytes_in_total{topic="logs",candidate="zstd:3"} 100000
kpress_shadow_bytes_out_total{topic="logs",candidate="zstd:3"} 80000
kpress_shadow_cpu_seconds_total{topic="logs",candidate="zstd:3"} 0.0025
kpress_shadow_bytes_in_total{topic="logs",candidate="gzip:6:libdeflate"} 100000
kpress_shadow_bytes_out_total{topic="logs",candidate="gzip:6:libdeflate"} 85000
kpress_shadow_cpu_seconds_total{topic="logs",candidate="gzip:6:libdeflate"} 0.01
kpress_shadow_bytes_in_total{topic="logs",candidate="zstd:19"} 100000
kpress_shadow_bytes_out_total{topic="logs",candidate="zstd:19"} 70000
kpress_shadow_cpu_seconds_total{topic="logs",candidate="zstd:19"} 0.25
kpress_shadow_batches_total{topic="events"} 4
kpress_shadow_raw_bytes_total{topic="events"} 800000
kpress_shadow_bytes_in_total{topic="events",candidate="lz4:9"} 400000
kpress_shadow_bytes_out_total{topic="events",candidate="lz4:9"} 420000
kpress_shadow_cpu_seconds_total{topic="events",candidate="lz4:9"} 0.001
kpress_shadow_skipped_total{reason="cpu_budget"} 12
"#;

#[test]
fn saved_metrics_page_gives_per_topic_rules_and_savings() {
    let dir = tempfile::tempdir().unwrap();
    let page = dir.path().join("metrics.txt");
    std::fs::write(&page, PAGE).unwrap();
    let page = page.to_str().unwrap();
    let text = ok(&["advise", "--from-metrics", page, "--goal", "size"]);
    // logs: zstd:19 stores 0.7 of what arrives: 3 MB saved of 10 MB.
    assert!(
        text.contains("zstd:19 would forward 7 MB: 3 MB less (30%)"),
        "{text}"
    );
    // events: lz4:9 would grow it: no rule.
    assert!(text.contains("keep its rule"), "{text}");
    assert!(text.contains("cpu_budget 12"), "{text}");
    assert!(text.contains("batch.size=262144"), "{text}");
    let block = text_block(&text);
    assert!(
        block.contains(
            "match = \"logs\"\ncompression.type = \"zstd\"\ncompression.zstd.level = 19\n"
        ),
        "{block}"
    );
    assert!(!block.contains("events"), "{block}");
    assert_policy_accepts(block);

    // 500 kB of records in 0.25 s is 2 MB/s: below a 100 MB/s floor zstd:3 wins (200 MB/s).
    let floored = json(&[
        "advise",
        "--from-metrics",
        &format!("file://{page}"),
        "--min-mbps",
        "100",
    ]);
    let logs = floored["topics"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["topic"] == "logs")
        .unwrap();
    assert_eq!(logs["choice"]["candidate"], "zstd:3");
    assert_eq!(logs["choice"]["saving"], 2000000.0);
    assert!((logs["choice"]["saving_fraction"].as_f64().unwrap() - 0.2).abs() < 1e-9);
    assert_policy_accepts(floored["toml"].as_str().unwrap());
}

#[test]
fn served_metrics_page_is_fetched_over_http() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let address = listener.local_addr().unwrap();
    let server = std::thread::spawn(move || {
        let (mut stream, _) = listener.accept().unwrap();
        let mut request = [0u8; 4096];
        let _ = stream.read(&mut request).unwrap();
        let answer = format!(
            "HTTP/1.1 200 OK\r\ncontent-type: text/plain; version=0.0.4\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{PAGE}",
            PAGE.len()
        );
        stream.write_all(answer.as_bytes()).unwrap();
    });
    let report = json(&[
        "advise",
        "--from-metrics",
        &format!("http://{address}/metrics"),
        "--goal",
        "speed",
    ]);
    server.join().unwrap();
    let logs = &report["topics"].as_array().unwrap()[1];
    assert_eq!(logs["topic"], "logs");
    // Fastest that saves: zstd:3 at 200 MB/s per core.
    assert_eq!(logs["choice"]["candidate"], "zstd:3");
    assert_policy_accepts(report["toml"].as_str().unwrap());
    // Nobody listening: a clear error naming the URL.
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let err = failure(&[
        "advise",
        "--from-metrics",
        &format!("http://{closed}/metrics"),
    ]);
    assert!(err.contains(&closed.to_string()), "{err}");
}

#[test]
fn an_interval_reads_twice_and_advises_on_rates() {
    // The second page: 1 MB more into "logs" in 250 batches of 4 kB, the trials alike.
    let later = PAGE
        .replace(
            "kpress_produce_bytes_in_total{topic=\"logs\"} 10000000",
            "kpress_produce_bytes_in_total{topic=\"logs\"} 11000000",
        )
        .replace(
            "kpress_produce_bytes_out_total{topic=\"logs\"} 10000000",
            "kpress_produce_bytes_out_total{topic=\"logs\"} 11000000",
        )
        .replace(
            "kpress_batch_bytes_sum{topic=\"logs\"} 10000000",
            "kpress_batch_bytes_sum{topic=\"logs\"} 11000000",
        )
        .replace(
            "kpress_batch_bytes_count{topic=\"logs\"} 2500",
            "kpress_batch_bytes_count{topic=\"logs\"} 2750",
        )
        // Only zstd:3 was tried meanwhile, on 100 kB: 80 kB out.
        .replace(
            "kpress_shadow_bytes_in_total{topic=\"logs\",candidate=\"zstd:3\"} 100000",
            "kpress_shadow_bytes_in_total{topic=\"logs\",candidate=\"zstd:3\"} 200000",
        )
        .replace(
            "kpress_shadow_bytes_out_total{topic=\"logs\",candidate=\"zstd:3\"} 80000",
            "kpress_shadow_bytes_out_total{topic=\"logs\",candidate=\"zstd:3\"} 160000",
        )
        .replace(
            "kpress_shadow_cpu_seconds_total{topic=\"logs\",candidate=\"zstd:3\"} 0.0025",
            "kpress_shadow_cpu_seconds_total{topic=\"logs\",candidate=\"zstd:3\"} 0.005",
        )
        .replace(
            "kpress_shadow_raw_bytes_total{topic=\"logs\"} 500000",
            "kpress_shadow_raw_bytes_total{topic=\"logs\"} 1000000",
        )
        .replace(
            "kpress_shadow_batches_total{topic=\"logs\"} 25",
            "kpress_shadow_batches_total{topic=\"logs\"} 50",
        );
    assert_ne!(later, PAGE);
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let address = listener.local_addr().unwrap();
    let server = std::thread::spawn(move || {
        for page in [PAGE.to_owned(), later] {
            let (mut stream, _) = listener.accept().unwrap();
            let mut request = [0u8; 4096];
            let _ = stream.read(&mut request).unwrap();
            let answer = format!("HTTP/1.0 200 OK\r\n\r\n{page}");
            stream.write_all(answer.as_bytes()).unwrap();
        }
    });
    let url = format!("http://{address}/metrics");
    let text = ok(&["advise", "--from-metrics", &url, "--interval", "0.5"]);
    server.join().unwrap();
    // Only what changed between the reads: "events" did not move, "logs" took 1 MB
    // (about 2 MB/s) in 4 kB batches.
    assert!(text.contains("(figures per second)"), "{text}");
    assert!(text.contains("no shadow trials in this interval"), "{text}");
    assert!(text.contains("zstd:3 would forward"), "{text}");
    assert!(text.contains("(20%)"), "{text}");
    assert!(text.contains("/s in"), "{text}");
    assert!(text.contains("batches average 3.91 KiB"), "{text}");
    assert!(text.contains("with linger.ms="), "{text}");
    assert!(text.contains("/s)\n"), "{text}");
    let linger: f64 = text
        .split("with linger.ms=")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{text}"));
    // 256 KiB at 1 MB per (0.5 s and the reads' own time) takes 100-260 ms.
    assert!((100.0..=300.0).contains(&linger), "{linger}\n{text}");
    assert_policy_accepts(text_block(&text));
}

#[test]
fn matrix_measures_every_bench_candidate() {
    let dir = dataset(300);
    let report = json(&["advise", "--dir", dir.path().to_str().unwrap(), "--matrix"]);
    let ranking = report["ranking"].as_array().unwrap();
    let specs: Vec<&str> = ranking
        .iter()
        .map(|r| r["candidate"].as_str().unwrap())
        .collect();
    for spec in [
        "none",
        "gzip:9",
        "snappy:block=4096",
        "lz4:17:block=7",
        "zstd:-5",
        "zstd:19:window=22",
    ] {
        assert!(specs.contains(&spec), "{spec} not in {specs:?}");
    }
    assert!(ranking.len() >= 40, "{}", ranking.len());
    assert_policy_accepts(report["toml"].as_str().unwrap());
}

#[test]
fn small_batches_that_grow_are_named_with_only_if_smaller_in_the_rule() {
    let dir = dataset(5000);
    let path = dir.path().to_str().unwrap();
    // 14 log lines a batch: zstd-3 comes out larger than the producer's gzip-6 in most.
    let args = [
        "advise",
        "--dir",
        path,
        "--candidates",
        "zstd:3",
        "--current",
        "gzip:6",
        "--batch-size",
        "14",
    ];
    let report = json(&args);
    let small = &report["small_batches"];
    let (grown, batches) = (
        small["grown"].as_u64().unwrap(),
        small["batches"].as_u64().unwrap(),
    );
    assert_eq!(batches, 358, "{small}");
    assert!(grown * 2 > batches, "{small}");
    assert!(small["not_smaller"].as_u64().unwrap() >= grown, "{small}");
    assert_eq!(small["candidate"], "zstd:3");
    assert_eq!(small["now"], "gzip:6");
    assert_eq!(small["only_if_smaller"], true);
    // zstd-3 stores less than gzip-6 only once batches hold hundreds of lines.
    assert_eq!(small["smaller_from_batch_size"], 262144, "{small}");
    let toml = report["toml"].as_str().unwrap();
    assert!(toml.contains("only_if_smaller = true\n"), "{toml}");
    assert_policy_accepts(toml);

    let text = ok(&args);
    assert!(
        text.contains(&format!(
            "Small batches: at today's 14 records a batch, {grown} of {batches} batches"
        )),
        "{text}"
    );
    assert!(text.contains("counts them `grown`"), "{text}");
    assert!(text.contains("From batch.size 256 KiB"), "{text}");
    assert!(
        text.contains("only_if_smaller = true in the rule"),
        "{text}"
    );
    assert!(text.contains("in topic mode"), "{text}");
    assert!(
        text_block(&text).contains("only_if_smaller = true\n"),
        "{text}"
    );

    // lz4 grows at every size: batching more does not turn it around.
    let lz4 = ok(&[
        "advise",
        "--dir",
        path,
        "--candidates",
        "lz4:9",
        "--current",
        "gzip:6",
        "--batch-size",
        "14",
    ]);
    assert!(
        lz4.contains("batching more will not turn it around"),
        "{lz4}"
    );

    // Batches of 1 MiB, or a producer that does not compress: nothing grows.
    for extra in [
        ["--current", "gzip:6", "--batch-bytes", "1048576"],
        ["--current", "none", "--batch-size", "14"],
    ] {
        let report = json(
            &[
                &["advise", "--dir", path, "--candidates", "zstd:3"][..],
                &extra,
            ]
            .concat(),
        );
        assert!(report["small_batches"].is_null(), "{extra:?}: {report}");
        assert!(
            !report["toml"].as_str().unwrap().contains("only_if_smaller"),
            "{extra:?}: {report}"
        );
    }
}

#[test]
fn grown_counters_on_a_metrics_page_name_the_topic_and_the_way_out() {
    let page = "# TYPE kpress_batches_rewritten_total counter\n\
        kpress_batches_rewritten_total{topic=\"clicks\",from=\"gzip\",to=\"zstd\"} 25780\n\
        kpress_batches_grown_total{topic=\"clicks\",from=\"gzip\",to=\"zstd\"} 25039\n\
        kpress_batch_bytes_sum{topic=\"clicks\"} 26890000\n\
        kpress_batch_bytes_count{topic=\"clicks\"} 25780\n\
        kpress_batches_rewritten_total{topic=\"logs\",from=\"gzip\",to=\"zstd\"} 100\n\
        kpress_batches_grown_total{topic=\"logs\",from=\"gzip\",to=\"zstd\"} 2\n";
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("metrics.txt");
    std::fs::write(&path, page).unwrap();
    let path = path.to_str().unwrap();
    let text = ok(&["advise", "--from-metrics", path]);
    assert!(
        text.contains(
            "Grown: 25039 of 25780 batches kpress rewrote (97%) came out larger than the \
             producer sent them (client batches average 1.02 KiB)"
        ),
        "{text}"
    );
    assert!(
        text.contains("only_if_smaller = true in the topic's rule"),
        "{text}"
    );
    assert!(text.contains("kpress bench --batch-sizes"), "{text}");
    // 2 of 100 grown is not worth a sentence.
    assert_eq!(text.matches("Grown:").count(), 1, "{text}");

    let report = json(&["advise", "--from-metrics", path]);
    let topics = report["topics"].as_array().unwrap();
    let clicks = topics.iter().find(|t| t["topic"] == "clicks").unwrap();
    assert_eq!(clicks["rewritten_batches"], 25780.0);
    assert_eq!(clicks["grown_batches"], 25039.0);
    assert!(
        clicks["grown"].as_str().unwrap().contains("(97%)"),
        "{clicks}"
    );
    let logs = topics.iter().find(|t| t["topic"] == "logs").unwrap();
    assert!(logs["grown"].is_null(), "{logs}");
}

/// A page of a kpress with auto topics: one decided, one left as sent, one undecided.
const AUTOPILOT_PAGE: &str = r#"# TYPE kpress_produce_bytes_in_total counter
kpress_produce_bytes_in_total{topic="logs"} 10000000
kpress_produce_bytes_out_total{topic="logs"} 2100000
# TYPE kpress_autopilot_choice gauge
kpress_autopilot_choice{topic="logs",candidate="zstd:3"} 1
kpress_autopilot_choice{topic="logs",candidate="producer"} 0
kpress_autopilot_choice{topic="blobs",candidate="producer"} 1
kpress_autopilot_choice{topic="fresh",candidate="lz4"} 0
# TYPE kpress_autopilot_shared gauge
kpress_autopilot_shared 0
"#;

/// `/policy`'s autopilot object for the page above, as kpress serves it (trimmed).
const AUTOPILOT_POLICY: &str = r#"{"file": "kpress.toml", "autopilot": {
  "mode": "alone", "alone_because": "kpress may not open topic _kpress_autopilot (ACLs)",
  "topic": "_kpress_autopilot", "replica": "kpress-0:9092", "replicas": 1,
  "window_ms": 60000, "last_window_at": "2026-11-28T14:02:00.000Z",
  "topics": [
    {"topic": "logs", "rule": "[defaults]", "choice": "zstd:3",
     "since": "2026-11-28T14:00:00.000Z", "adopted_from": null,
     "why": "zstd:3 stores 0.21 of as sent, 9.5% smaller than lz4; first choice; 0.02 cores, no budget",
     "traffic_bytes_per_s": 1000.0, "budget_used_cores": 0.02, "budget_limit_cores": null,
     "candidates": []},
    {"topic": "blobs", "rule": "[defaults]", "choice": "producer",
     "since": "2026-11-28T14:01:00.000Z", "adopted_from": null,
     "why": "as sent: no candidate saves more than the 2.0% margin; 0.00 cores, no budget",
     "traffic_bytes_per_s": 500.0, "budget_used_cores": 0.02, "budget_limit_cores": null,
     "candidates": []}
  ]}}"#;

#[test]
fn autopilot_choices_are_shown_from_a_saved_page() {
    let dir = tempfile::tempdir().unwrap();
    let page = dir.path().join("metrics.txt");
    std::fs::write(&page, AUTOPILOT_PAGE).unwrap();
    let page = page.to_str().unwrap();
    let text = ok(&["advise", "--from-metrics", page]);
    assert!(text.contains("Autopilot: 3 auto topics."), "{text}");
    assert!(text.contains("\"logs\": zstd:3\n"), "{text}");
    assert!(text.contains("\"blobs\": as sent (producer)\n"), "{text}");
    assert!(text.contains("\"fresh\": undecided\n"), "{text}");
    assert!(text.contains("read over http:// only"), "{text}");
    let report = json(&["advise", "--from-metrics", page]);
    let topics = report["autopilot"]["topics"].as_array().unwrap();
    let names: Vec<&str> = topics
        .iter()
        .map(|t| t["topic"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["blobs", "fresh", "logs"]);
    assert_eq!(topics[2]["choice"], "zstd:3");
    assert_eq!(topics[1]["choice"], Value::Null);
    // A page without autopilot metrics has no section.
    let plain = dir.path().join("plain.txt");
    std::fs::write(&plain, PAGE).unwrap();
    let plain = json(&["advise", "--from-metrics", plain.to_str().unwrap()]);
    assert_eq!(plain["autopilot"], Value::Null);
    assert!(!ok(&["advise", "--from-metrics", page]).is_empty());
}

/// Serves each request by its path (`/metrics`, `/policy`) until `requests` were served.
fn serve_paths(
    listener: std::net::TcpListener,
    requests: usize,
    pages: Vec<(&'static str, String)>,
) -> std::thread::JoinHandle<Vec<String>> {
    std::thread::spawn(move || {
        let mut paths = Vec::new();
        for _ in 0..requests {
            let (mut stream, _) = listener.accept().unwrap();
            let mut request = [0u8; 4096];
            let n = stream.read(&mut request).unwrap();
            let head = String::from_utf8_lossy(&request[..n]).into_owned();
            let path = head.split(' ').nth(1).unwrap_or("").to_owned();
            let body = pages
                .iter()
                .find(|(p, _)| *p == path)
                .map(|(_, body)| body.clone());
            let answer = match body {
                Some(body) => format!(
                    "HTTP/1.1 200 OK\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                ),
                None => "HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n".to_owned(),
            };
            stream.write_all(answer.as_bytes()).unwrap();
            paths.push(path);
        }
        paths
    })
}

#[test]
fn autopilot_since_and_why_come_from_policy_on_the_same_address() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let address = listener.local_addr().unwrap();
    let server = serve_paths(
        listener,
        2,
        vec![
            ("/metrics", AUTOPILOT_PAGE.to_owned()),
            ("/policy", AUTOPILOT_POLICY.to_owned()),
        ],
    );
    let url = format!("http://{address}/metrics");
    let report = json(&["advise", "--from-metrics", &url]);
    assert_eq!(server.join().unwrap(), ["/metrics", "/policy"]);
    let autopilot = &report["autopilot"];
    assert_eq!(autopilot["mode"], "alone");
    let logs = autopilot["topics"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["topic"] == "logs")
        .unwrap();
    assert_eq!(logs["since"], "2026-11-28T14:00:00.000Z");
    assert!(logs["why"]
        .as_str()
        .unwrap()
        .starts_with("zstd:3 stores 0.21"));

    // Text: the why beside each choice, and why this replica decides alone.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let address = listener.local_addr().unwrap();
    let server = serve_paths(
        listener,
        2,
        vec![
            ("/metrics", AUTOPILOT_PAGE.to_owned()),
            ("/policy", AUTOPILOT_POLICY.to_owned()),
        ],
    );
    let text = ok(&[
        "advise",
        "--from-metrics",
        &format!("http://{address}/metrics"),
    ]);
    server.join().unwrap();
    assert!(
        text.contains(
            "Autopilot (deciding alone: kpress may not open topic _kpress_autopilot (ACLs))"
        ),
        "{text}"
    );
    assert!(
        text.contains(
            "\"blobs\": as sent (producer) since 2026-11-28T14:01:00.000Z: as sent: no candidate"
        ),
        "{text}"
    );

    // /policy not served there: the choices stand, and the report says why the rest is missing.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let address = listener.local_addr().unwrap();
    let server = serve_paths(listener, 2, vec![("/metrics", AUTOPILOT_PAGE.to_owned())]);
    let report = json(&[
        "advise",
        "--from-metrics",
        &format!("http://{address}/metrics"),
    ]);
    server.join().unwrap();
    let note = report["autopilot"]["policy_note"].as_str().unwrap();
    assert!(note.contains("404"), "{note}");
    assert_eq!(report["autopilot"]["topics"][2]["choice"], "zstd:3");
}
