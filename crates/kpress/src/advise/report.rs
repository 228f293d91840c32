//! Figures for people and for JSON, shared by the offline and live advice.

use std::fmt::Write;

use serde_json::{json, Value};

use super::rank::{number, Measured, Ranked};

pub(crate) fn text_table(out: &mut String, ranked: &[Ranked]) {
    let _ = writeln!(
        out,
        "{:<24} {:>8} {:>12} {:>10} {:>12} {:>10}  note",
        "candidate", "ratio", "stored", "MB/s", "ms/MB", "dec MB/s"
    );
    for r in ranked {
        let m = &r.measured;
        let _ = writeln!(
            out,
            "{:<24} {:>8.4} {:>12} {:>10} {:>12} {:>10}  {}",
            m.candidate.to_string(),
            m.ratio(),
            m.stored_bytes,
            number(m.compress_mb_per_s()),
            number(m.compress_cpu_ms_per_mb()),
            m.decompress_mb_per_s().map(number).unwrap_or_default(),
            r.miss.as_deref().unwrap_or(""),
        );
    }
}

pub(crate) fn measured_json(m: &Measured) -> Value {
    json!({
        "candidate": m.candidate.to_string(),
        "codec": m.candidate.codec().name(),
        "properties": m.candidate.properties().into_iter().collect::<std::collections::BTreeMap<_, _>>(),
        "batches": m.batches,
        "raw_bytes": m.raw_bytes,
        "batch_bytes": m.stored_bytes,
        "ratio": m.ratio(),
        "compress_mb_per_s": finite(m.compress_mb_per_s()),
        "decompress_mb_per_s": m.decompress_mb_per_s().map(finite),
        "compress_cpu_ms_per_mb": m.compress_cpu_ms_per_mb(),
    })
}

pub(crate) fn ranked_json(r: &Ranked) -> Value {
    let mut value = measured_json(&r.measured);
    value["eligible"] = json!(r.miss.is_none());
    value["miss"] = json!(r.miss);
    value["sentence"] = json!(r.sentence);
    value
}

fn finite(x: f64) -> Option<f64> {
    x.is_finite().then_some(x)
}

/// A byte count for people: "1.2 MB" (10^6), as the MB/s figures are.
pub(crate) fn bytes(n: f64) -> String {
    if n >= 1e9 {
        format!("{} GB", number(n / 1e9))
    } else if n >= 1e6 {
        format!("{} MB", number(n / 1e6))
    } else if n >= 1e3 {
        format!("{} kB", number(n / 1e3))
    } else {
        format!("{} B", number(n))
    }
}

/// A batch size for people: "16 KiB", "1 MiB", as batch.size values are chosen.
pub(crate) fn size(n: u64) -> String {
    if n >= 1 << 20 && n.is_multiple_of(1 << 20) {
        format!("{} MiB", n >> 20)
    } else if n >= 1 << 10 && n.is_multiple_of(1 << 10) {
        format!("{} KiB", n >> 10)
    } else if n >= 1 << 10 {
        format!("{} KiB", number(n as f64 / 1024.0))
    } else {
        format!("{n} B")
    }
}
