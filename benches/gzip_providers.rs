//! gzip providers side by side (KIP-1121's `compression.gzip.provider`): each provider at its levels compressing
//! 16 KiB and 1 MiB record sections of the datasets, and each decompressing
//! what flate2 level 6 (Kafka's default gzip) wrote, all in the same run.
//!
//! criterion reports MB/s; the ratio of every case is printed as a table on stdout
//! first (and appended to `target/criterion/kpress-ratios.tsv`). QAT runs in QATzip's
//! software backup on machines without a QAT device (its driver prints "Cannot open
//! /dev/vfio" on stderr per call; run with `2>/dev/null` to keep the output readable).

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use kpress_benches::{load_dataset, ratio_log, record_sections, short_runs};
use kpress_deflate::{isal_level, GzipProvider, ProviderKind, Registry};
use std::hint::black_box;
use std::sync::Arc;
use std::time::Duration;

const BATCH_SIZES: [(&str, usize); 2] = [("16KiB", 16 * 1024), ("1MiB", 1024 * 1024)];

/// (label, provider, zlib-scale level) for every case this host can run.
fn cases() -> Vec<(String, Arc<dyn GzipProvider>, u32)> {
    let registry = Registry::global();
    let mut cases = Vec::new();
    let levels: [(ProviderKind, &[u32]); 4] = [
        (ProviderKind::Zlib, &[1, 6, 9]),
        (ProviderKind::Libdeflate, &[1, 4, 6, 9]),
        // Kafka levels 1, 2, 3, 6 select ISA-L levels 0, 1, 2, 3.
        (ProviderKind::Isal, &[1, 2, 3, 6]),
        (ProviderKind::Qat, &[1, 6, 9]),
    ];
    for (kind, levels) in levels {
        let Ok(provider) = registry.get(kind) else {
            println!("skipping {kind}: not available on this host");
            continue;
        };
        for &level in levels {
            let label = match kind {
                ProviderKind::Isal => format!("isal-{} (kafka {level})", isal_level(level)),
                _ => format!("{kind}-{level}"),
            };
            cases.push((label, provider.clone(), level));
        }
    }
    cases
}

fn compress_all(provider: &dyn GzipProvider, sections: &[Vec<u8>], level: u32) -> Vec<Vec<u8>> {
    sections
        .iter()
        .map(|s| {
            let mut out = Vec::new();
            provider.compress(s, level, &mut out).expect("compress");
            out
        })
        .collect()
}

fn gzip_providers(c: &mut Criterion) {
    let cases = cases();
    let registry = Registry::global();
    let zlib = registry
        .get(ProviderKind::Zlib)
        .expect("zlib is always there");
    for dataset in kpress_benches::DATASETS {
        let data = load_dataset(dataset);
        for (size_label, size) in BATCH_SIZES {
            let sections = record_sections(&data, size);
            let raw_bytes: usize = sections.iter().map(Vec::len).sum();
            let group_name = format!("gzip-provider/{dataset}/{size_label}");

            // Ratios first, against flate2 level 6 from the same run.
            let reference: usize = compress_all(&*zlib, &sections, 6)
                .iter()
                .map(Vec::len)
                .sum();
            println!(
                "\n{group_name}: {} sections, {raw_bytes} bytes",
                sections.len()
            );
            println!("| case | ratio | vs zlib-6 |");
            println!("|---|--:|--:|");
            for (label, provider, level) in &cases {
                let compressed: usize = compress_all(&**provider, &sections, *level)
                    .iter()
                    .map(Vec::len)
                    .sum();
                ratio_log(&group_name, label, raw_bytes, compressed);
                println!(
                    "| {label} | {:.4} | {:+.1}% |",
                    compressed as f64 / raw_bytes as f64,
                    (compressed as f64 / reference as f64 - 1.0) * 100.0
                );
            }

            let mut group = c.benchmark_group(&group_name);
            group.throughput(Throughput::Bytes(raw_bytes as u64));
            for (label, provider, level) in &cases {
                group.bench_function(BenchmarkId::new("compress", label), |b| {
                    let mut out = Vec::with_capacity(2 * size);
                    b.iter(|| {
                        for s in &sections {
                            out.clear();
                            provider
                                .compress(black_box(s), *level, &mut out)
                                .expect("compress");
                        }
                        black_box(out.len())
                    })
                });
            }
            // Decompression of what Kafka's default gzip (zlib level 6) produces.
            let zlib6 = compress_all(&*zlib, &sections, 6);
            for kind in ProviderKind::ALL {
                let Ok(provider) = registry.get(kind) else {
                    continue;
                };
                group.bench_function(BenchmarkId::new("decompress-zlib6", kind.name()), |b| {
                    let mut out = Vec::with_capacity(2 * size);
                    b.iter(|| {
                        for gz in &zlib6 {
                            out.clear();
                            provider
                                .decompress(black_box(gz), 64 << 20, &mut out)
                                .expect("decompress");
                        }
                        black_box(out.len())
                    })
                });
            }
            group.finish();
        }
    }
}

criterion_group! {
    name = benches;
    config = short_runs(Duration::from_secs(2));
    targets = gzip_providers
}
criterion_main!(benches);
