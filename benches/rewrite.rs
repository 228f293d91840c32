//! The full batch rewrite (source codec to target codec) against the bare codec
//! calls on the same payloads, so the cost of kpress's own work is visible: header
//! and CRC checks, the record-count walk, the header patch and the new CRC. The two
//! run in turn within each sample and are timed in this thread's CPU time
//! (`alternating`), so other processes' load on the shared machine does not count.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use kpress_batch::{Outcome, RecompressMode, Recompressor, RewritePolicy, Target};
use kpress_benches::{
    batches, bench_against_floor, load_dataset, options_with, ratio_log, record_sections,
    short_runs, BareCodecs,
};
use kpress_codec::options::{GZIP_LEVEL, LZ4_LEVEL, ZSTD_LEVEL};
use kpress_codec::{Codec, CompressionOptions};
use std::hint::black_box;
use std::time::Duration;

fn pairs() -> Vec<(Codec, CompressionOptions, Codec, CompressionOptions)> {
    let gzip6 = options_with(&[(GZIP_LEVEL, 6)]);
    let zstd3 = options_with(&[(ZSTD_LEVEL, 3)]);
    let lz4 = options_with(&[(LZ4_LEVEL, 9)]);
    let default = CompressionOptions::default();
    vec![
        (Codec::Gzip, gzip6.clone(), Codec::Zstd, zstd3.clone()),
        (Codec::Snappy, default.clone(), Codec::Zstd, zstd3.clone()),
        (Codec::Lz4, lz4.clone(), Codec::Zstd, zstd3.clone()),
        (Codec::None, default.clone(), Codec::Zstd, zstd3.clone()),
        (Codec::None, default.clone(), Codec::Lz4, lz4),
        (Codec::Zstd, zstd3, Codec::Gzip, gzip6),
    ]
}

fn rewrite(c: &mut Criterion) {
    for dataset in kpress_benches::DATASETS {
        let data = load_dataset(dataset);
        for (size_label, size) in [("16KiB", 16 * 1024), ("1MiB", 1024 * 1024)] {
            let raw_bytes: usize = record_sections(&data, size).iter().map(Vec::len).sum();
            let mut group = c.benchmark_group(format!("rewrite/{dataset}/{size_label}"));
            group.throughput(Throughput::Bytes(raw_bytes as u64));
            for (from, from_options, to, to_options) in pairs() {
                let label = format!("{from}-to-{to}");
                let batches = batches(&data, size, from, &from_options);
                let policy = RewritePolicy {
                    target: Target::Codec {
                        codec: to,
                        options: to_options.clone(),
                    },
                    mode: RecompressMode::CodecDiffers,
                    ..RewritePolicy::default()
                };
                let mut recompressor = Recompressor::new();
                let mut out = Vec::with_capacity(size * 2);
                let (mut bytes_in, mut bytes_out) = (0, 0);
                for batch in &batches {
                    out.clear();
                    let outcome = recompressor.rewrite_batch(batch, &policy, &mut out);
                    assert!(
                        matches!(outcome, Outcome::Rewritten { .. }),
                        "{label}: {outcome:?}"
                    );
                    bytes_in += batch.len();
                    bytes_out += out.len();
                }
                ratio_log(
                    &format!("rewrite/{dataset}/{size_label}"),
                    &label,
                    bytes_in,
                    bytes_out,
                );

                // The floor: the same two codec calls on the records payloads alone.
                let mut codecs = BareCodecs::new(to, &to_options);
                let mut kpress = || {
                    for batch in &batches {
                        out.clear();
                        black_box(recompressor.rewrite_batch(black_box(batch), &policy, &mut out));
                    }
                };
                let mut bare = || {
                    for batch in &batches {
                        codecs.recode(from, batch);
                    }
                };
                bench_against_floor(&mut group, "kpress-rewrite", &label, &mut kpress, &mut bare);
            }
            group.finish();
        }
    }
}

criterion_group! {
    name = benches;
    config = short_runs(Duration::from_secs(2));
    targets = rewrite
}
criterion_main!(benches);
