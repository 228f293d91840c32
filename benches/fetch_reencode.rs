//! A Fetch response's zstd batch re-encoded for a consumer that cannot read zstd,
//! against the bare codec calls on the same payloads: zstd decompress of the records
//! section, then lz4 compress with Kafka's lz4 framing.
//!
//! The measured call is the one the Fetch response path makes per batch it re-encodes:
//! `Recompressor::rewrite_partition` with the response's shared decompression allowance
//! and the consumer policy (`[consumers]` defaults: lz4 at Kafka's default options,
//! re-encoded whenever the codec differs, no batch size cap). The two run in turn
//! within each sample and are timed in this thread's CPU time (`alternating`).

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use kpress_batch::{
    Outcome, ProduceAllowance, RecompressMode, Recompressor, RewritePolicy, Target,
};
use kpress_benches::{
    batches, bench_against_floor, load_dataset, options_with, ratio_log, record_sections,
    short_runs, BareCodecs,
};
use kpress_codec::options::ZSTD_LEVEL;
use kpress_codec::{Codec, CompressionOptions};
use std::hint::black_box;
use std::time::Duration;

/// What one response may decompress in all: far above one iteration's batches, so the
/// allowance is checked and charged but never runs out.
const RESPONSE_DECOMPRESSED_BYTES: usize = 1 << 30;

fn consumer_policy() -> RewritePolicy {
    RewritePolicy {
        target: Target::Codec {
            codec: Codec::Lz4,
            options: CompressionOptions::default(),
        },
        mode: RecompressMode::CodecDiffers,
        max_batch_bytes: i32::MAX as usize,
        ..RewritePolicy::default()
    }
}

fn fetch_reencode(c: &mut Criterion) {
    let zstd3 = options_with(&[(ZSTD_LEVEL, 3)]);
    let policy = consumer_policy();
    for dataset in kpress_benches::DATASETS {
        let data = load_dataset(dataset);
        for (size_label, size) in [
            ("16KiB", 16 * 1024),
            ("256KiB", 256 * 1024),
            ("1MiB", 1024 * 1024),
        ] {
            let group_name = format!("fetch-reencode/{dataset}/{size_label}");
            let raw_bytes: usize = record_sections(&data, size).iter().map(Vec::len).sum();
            let mut group = c.benchmark_group(&group_name);
            group.throughput(Throughput::Bytes(raw_bytes as u64));
            let label = "zstd-to-lz4";
            let batches = batches(&data, size, Codec::Zstd, &zstd3);
            let mut recompressor = Recompressor::new();
            let mut out = Vec::with_capacity(size * 2);
            let (mut bytes_in, mut bytes_out) = (0, 0);
            let mut allowance = ProduceAllowance::new(true, RESPONSE_DECOMPRESSED_BYTES);
            for batch in &batches {
                out.clear();
                let mut outcome = None;
                recompressor.rewrite_partition(batch, &policy, &mut allowance, &mut out, |o, _| {
                    outcome = Some(*o)
                });
                assert!(
                    matches!(outcome, Some(Outcome::Rewritten { .. })),
                    "{group_name}: {outcome:?}"
                );
                bytes_in += batch.len();
                bytes_out += out.len();
            }
            ratio_log(&group_name, "zstd-3", raw_bytes, bytes_in);
            ratio_log(&group_name, label, raw_bytes, bytes_out);

            let mut codecs = BareCodecs::new(Codec::Lz4, &CompressionOptions::default());
            let mut kpress = || {
                // One allowance per pass, as one per response.
                let mut allowance = ProduceAllowance::new(true, RESPONSE_DECOMPRESSED_BYTES);
                for batch in &batches {
                    out.clear();
                    recompressor.rewrite_partition(
                        black_box(batch),
                        &policy,
                        &mut allowance,
                        &mut out,
                        |o, _| {
                            black_box(o);
                        },
                    );
                }
            };
            let mut bare = || {
                for batch in &batches {
                    codecs.recode(Codec::Zstd, batch);
                }
            };
            bench_against_floor(&mut group, "fetch-reencode", label, &mut kpress, &mut bare);
            group.finish();
        }
    }
}

criterion_group! {
    name = benches;
    config = short_runs(Duration::from_secs(5));
    targets = fetch_reencode
}
criterion_main!(benches);
