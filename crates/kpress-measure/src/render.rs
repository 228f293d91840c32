//! Results as a table, CSV or JSON (the schema `kpress advise` and the shadow trials
//! read), without I/O.

use std::fmt::Write;

use serde_json::{json, Map, Value};

use crate::TrialResult;

/// What was measured, for the JSON `input` object.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Input {
    pub dir: Option<String>,
    pub segment: Option<String>,
    pub records: u64,
    pub raw_bytes: u64,
    /// Records per batch, when batches were built (`--batch-size`).
    pub batch_size: Option<usize>,
    /// Batches measured.
    pub batch_count: usize,
}

/// One result as a JSON object; `pareto` says whether it is on the front.
pub fn result_json(r: &TrialResult, pareto: bool) -> Value {
    let properties: Map<String, Value> = r
        .candidate
        .properties()
        .into_iter()
        .map(|(k, v)| (k.to_owned(), Value::String(v)))
        .collect();
    json!({
        "candidate": r.candidate.to_string(),
        "codec": r.candidate.codec().name(),
        "properties": properties,
        "batches": r.batches,
        "records": r.records,
        "raw_bytes": r.raw_bytes,
        "batch_bytes": r.batch_bytes,
        "ratio": round(r.ratio(), 5),
        "compress_mb_per_s": round(r.compress_mb_per_s(), 2),
        "decompress_mb_per_s": round(r.decompress_mb_per_s(), 2),
        "compress_cpu_ms_per_mb": round(r.compress_cpu_ms_per_mb(), 4),
        "compress_seconds": round(r.compress.as_secs_f64(), 6),
        "decompress_seconds": round(r.decompress.as_secs_f64(), 6),
        "pareto": pareto,
    })
}

/// The whole document: `{"input": {...}, "results": [...]}`.
pub fn to_json(input: &Input, results: &[TrialResult], front: &[usize]) -> Value {
    json!({
        "input": {
            "dir": input.dir,
            "segment": input.segment,
            "records": input.records,
            "raw_bytes": input.raw_bytes,
            "batch_size": input.batch_size,
            "batch_count": input.batch_count,
        },
        "results": results
            .iter()
            .enumerate()
            .map(|(i, r)| result_json(r, front.contains(&i)))
            .collect::<Vec<_>>(),
    })
}

fn round(v: f64, digits: i32) -> f64 {
    let scale = 10f64.powi(digits);
    (v * scale).round() / scale
}

const CSV_HEADER: &str = "candidate,codec,batches,records,raw_bytes,batch_bytes,ratio,\
avg_batch_bytes,avg_compress_us,avg_decompress_us,compress_mb_per_s,decompress_mb_per_s,\
compress_cpu_ms_per_mb,pareto";

/// One line per result after a header line.
pub fn to_csv(results: &[TrialResult], front: &[usize]) -> String {
    let mut out = String::from(CSV_HEADER);
    out.push('\n');
    for (i, r) in results.iter().enumerate() {
        // Specs hold no commas or quotes (codec, integers, names, `=`).
        let _ = writeln!(
            out,
            "{},{},{},{},{},{},{:.5},{:.1},{:.2},{:.2},{:.2},{:.2},{:.4},{}",
            r.candidate,
            r.candidate.codec().name(),
            r.batches,
            r.records,
            r.raw_bytes,
            r.batch_bytes,
            r.ratio(),
            r.avg_batch_bytes(),
            r.avg_compress().as_secs_f64() * 1e6,
            r.avg_decompress().as_secs_f64() * 1e6,
            r.compress_mb_per_s(),
            r.decompress_mb_per_s(),
            r.compress_cpu_ms_per_mb(),
            front.contains(&i),
        );
    }
    out
}

/// An aligned table: per candidate the average compressed batch (header included),
/// average compress and decompress CPU time per batch (KIP-780 TestCompression's
/// three figures), then ratio, MB/s per core, CPU ms per MB; `*` marks the Pareto
/// front.
pub fn to_table(results: &[TrialResult], front: &[usize]) -> String {
    let header = [
        "candidate",
        "avg batch B",
        "ratio",
        "compress µs",
        "decompress µs",
        "compress MB/s",
        "decompress MB/s",
        "CPU ms/MB",
        "front",
    ];
    let rows: Vec<[String; 9]> = results
        .iter()
        .enumerate()
        .map(|(i, r)| {
            [
                r.candidate.to_string(),
                format!("{:.1}", r.avg_batch_bytes()),
                format!("{:.4}", r.ratio()),
                format!("{:.1}", r.avg_compress().as_secs_f64() * 1e6),
                format!("{:.1}", r.avg_decompress().as_secs_f64() * 1e6),
                format!("{:.1}", r.compress_mb_per_s()),
                format!("{:.1}", r.decompress_mb_per_s()),
                format!("{:.3}", r.compress_cpu_ms_per_mb()),
                if front.contains(&i) { "*" } else { "" }.to_owned(),
            ]
        })
        .collect();
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let mut line = |cells: &mut dyn Iterator<Item = &str>| {
        let mut text = String::new();
        for (i, (cell, w)) in cells.zip(&widths).enumerate() {
            let pad = w - cell.chars().count();
            if i == 0 {
                text.push_str(cell);
                text.push_str(&" ".repeat(pad));
            } else {
                text.push_str("  ");
                text.push_str(&" ".repeat(pad));
                text.push_str(cell);
            }
        }
        out.push_str(text.trim_end());
        out.push('\n');
    };
    line(&mut header.iter().copied());
    for row in &rows {
        line(&mut row.iter().map(String::as_str));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn results() -> Vec<TrialResult> {
        vec![TrialResult {
            candidate: "gzip:6:libdeflate".parse().unwrap(),
            batches: 2,
            records: 20,
            raw_bytes: 1878,
            batch_bytes: 500,
            compress: Duration::from_micros(100),
            decompress: Duration::from_micros(20),
        }]
    }

    #[test]
    fn json_follows_the_schema() {
        let input = Input {
            dir: Some("datasets".into()),
            records: 20,
            raw_bytes: 1878,
            batch_size: Some(10),
            batch_count: 2,
            ..Input::default()
        };
        let v = to_json(&input, &results(), &[0]);
        assert_eq!(v["input"]["segment"], Value::Null);
        assert_eq!(v["input"]["batch_size"], 10);
        let r = &v["results"][0];
        assert_eq!(r["candidate"], "gzip:6:libdeflate");
        assert_eq!(r["codec"], "gzip");
        assert_eq!(r["properties"]["compression.gzip.level"], "6");
        assert_eq!(r["properties"]["compression.gzip.provider"], "libdeflate");
        assert_eq!(r["batch_bytes"], 500);
        assert_eq!(r["ratio"], 0.25);
        assert_eq!(r["compress_mb_per_s"], 18.78);
        assert_eq!(r["pareto"], true);
    }

    #[test]
    fn csv_and_table_have_a_line_per_result() {
        let csv = to_csv(&results(), &[]);
        let lines: Vec<&str> = csv.lines().collect();
        assert_eq!(lines.len(), 2);
        assert_eq!(lines[0].split(',').count(), lines[1].split(',').count());
        assert!(
            lines[1].starts_with("gzip:6:libdeflate,gzip,2,20,1878,500,0.25000,250.0,50.00,10.00,")
        );
        let table = to_table(&results(), &[0]);
        assert_eq!(table.lines().count(), 2);
        assert!(table.lines().nth(1).unwrap().ends_with('*'));
    }
}
