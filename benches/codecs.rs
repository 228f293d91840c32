//! Per codec, level and KIP-780 option: compress and decompress MB/s and ratio at
//! 16 KiB and 1 MiB batches of the datasets.
//!
//! criterion reports time and throughput; the compression ratio of every case is
//! printed once at start and written to `target/criterion/kpress-ratios.tsv`, which
//! `benches/report.py` joins with criterion's estimates into the README's table.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use kpress_benches::{load_dataset, options_with, ratio_log, record_sections, short_runs};
use kpress_codec::options::*;
use kpress_codec::{Codec, CompressionOptions, Compressor, Decompressor};
use std::hint::black_box;
use std::time::Duration;

/// The cases: a codec and the options that differ from Kafka's defaults.
fn cases() -> Vec<(String, Codec, CompressionOptions)> {
    let mut cases = Vec::new();
    let mut add = |label: String, codec: Codec, pairs: &[(&str, i64)]| {
        cases.push((label, codec, options_with(pairs)));
    };
    for level in [1, 6, 9] {
        add(format!("gzip-{level}"), Codec::Gzip, &[(GZIP_LEVEL, level)]);
    }
    for buffer in [512, 65536] {
        add(
            format!("gzip-6-buffer{buffer}"),
            Codec::Gzip,
            &[(GZIP_BUFFER, buffer)],
        );
    }
    for block in [4096, 32768, 262144] {
        add(
            format!("snappy-block{block}"),
            Codec::Snappy,
            &[(SNAPPY_BLOCK, block)],
        );
    }
    for level in [1, 9, 12, 17] {
        add(format!("lz4-{level}"), Codec::Lz4, &[(LZ4_LEVEL, level)]);
    }
    for block in [5, 6, 7] {
        add(
            format!("lz4-9-block{block}"),
            Codec::Lz4,
            &[(LZ4_BLOCK, block)],
        );
    }
    for level in [-1, 1, 3, 6, 12] {
        add(format!("zstd-{level}"), Codec::Zstd, &[(ZSTD_LEVEL, level)]);
    }
    for window in [16, 22] {
        add(
            format!("zstd-3-window{window}"),
            Codec::Zstd,
            &[(ZSTD_WINDOW, window)],
        );
    }
    cases
}

const BATCH_SIZES: [(&str, usize); 2] = [("16KiB", 16 * 1024), ("1MiB", 1024 * 1024)];

fn codecs(c: &mut Criterion) {
    for dataset in kpress_benches::DATASETS {
        let data = load_dataset(dataset);
        for (size_label, size) in BATCH_SIZES {
            let sections = record_sections(&data, size);
            let raw_bytes: usize = sections.iter().map(Vec::len).sum();
            let mut group = c.benchmark_group(format!("codec/{dataset}/{size_label}"));
            group.throughput(Throughput::Bytes(raw_bytes as u64));
            for (label, codec, options) in cases() {
                let mut compressor = Compressor::new(codec, &options);
                let compressed: Vec<Vec<u8>> = sections
                    .iter()
                    .map(|s| {
                        let mut out = Vec::new();
                        compressor.compress(s, &mut out).expect("compress");
                        out
                    })
                    .collect();
                let compressed_bytes: usize = compressed.iter().map(Vec::len).sum();
                ratio_log(
                    &format!("codec/{dataset}/{size_label}"),
                    &label,
                    raw_bytes,
                    compressed_bytes,
                );

                let mut out = Vec::with_capacity(size * 2);
                group.bench_function(BenchmarkId::new("compress", &label), |b| {
                    b.iter(|| {
                        for s in &sections {
                            out.clear();
                            compressor
                                .compress(black_box(s), &mut out)
                                .expect("compress");
                        }
                    })
                });
                let mut decompressor = Decompressor::new();
                group.bench_function(BenchmarkId::new("decompress", &label), |b| {
                    b.iter(|| {
                        for s in &compressed {
                            out.clear();
                            decompressor
                                .decompress(codec, black_box(s), 64 << 20, &mut out)
                                .expect("decompress");
                        }
                    })
                });
            }
            group.finish();
        }
    }
}

criterion_group! {
    name = benches;
    config = short_runs(Duration::from_secs(1));
    targets = codecs
}
criterion_main!(benches);
