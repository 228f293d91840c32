//! `kpress bench --matrix`'s candidates, and the Pareto front of their results.

use kpress_codec::gzip_providers::{ProviderKind, Registry};
use kpress_codec::Candidate;

use crate::TrialResult;

/// zstd levels measured with the library's own window (window 0).
const ZSTD_LEVELS: [i32; 24] = [
    -5, -4, -3, -2, -1, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19,
];
/// zstd levels also measured with KIP-780's largest window (22: long-distance matching
/// over 4 MiB), which pays only on batches with repeats far apart.
const ZSTD_WINDOW_22_LEVELS: [i32; 4] = [1, 3, 9, 19];
const GZIP_LEVELS: [u32; 3] = [1, 6, 9];
/// KIP-780's snappy block sizes worth comparing; 32 KiB is snappy-java's default.
const SNAPPY_BLOCKS: [usize; 4] = [4096, 16384, 32768, 65536];
/// lz4 level 9 is the fast compressor, 17 the strongest LZ4 HC.
const LZ4_LEVELS: [u32; 2] = [9, 17];
const LZ4_BLOCKS: [u8; 4] = [4, 5, 6, 7];

/// Every codec with its useful levels and KIP-780 options: `none` as the baseline,
/// gzip 1/6/9 with each gzip provider this host has (QAT only when already probed and
/// present), snappy blocks, lz4 9/17 with blocks 4-7, zstd -5..19, and zstd with
/// window 22 at a few levels.
pub fn matrix() -> Vec<Candidate> {
    let providers: Vec<ProviderKind> = Registry::global()
        .statuses_without_probing()
        .into_iter()
        .filter(|s| s.available)
        .map(|s| s.provider)
        .collect();
    let mut specs = vec!["none".to_owned()];
    for level in GZIP_LEVELS {
        for provider in &providers {
            specs.push(format!("gzip:{level}:{provider}"));
        }
    }
    specs.extend(SNAPPY_BLOCKS.iter().map(|b| format!("snappy:block={b}")));
    for level in LZ4_LEVELS {
        specs.extend(LZ4_BLOCKS.iter().map(|b| format!("lz4:{level}:block={b}")));
    }
    specs.extend(ZSTD_LEVELS.iter().map(|l| format!("zstd:{l}")));
    specs.extend(
        ZSTD_WINDOW_22_LEVELS
            .iter()
            .map(|l| format!("zstd:{l}:window=22")),
    );
    specs
        .iter()
        .map(|spec| {
            let parsed: Candidate = spec
                .parse()
                .unwrap_or_else(|e| panic!("matrix spec {spec} is valid: {e}"));
            // Canonical form: Kafka's defaults left out (`snappy`, not `snappy:block=32768`).
            Candidate::from_options(parsed.codec(), parsed.options())
        })
        .collect()
}

/// Indices of `results` on the Pareto front of (smaller ratio, higher compress MB/s):
/// those no other result beats on one and at least matches on the other. In input
/// order.
pub fn pareto_front(results: &[TrialResult]) -> Vec<usize> {
    let points: Vec<(f64, f64)> = results
        .iter()
        .map(|r| (r.ratio(), r.compress_mb_per_s()))
        .collect();
    (0..points.len())
        .filter(|&i| {
            let (ratio, speed) = points[i];
            !points
                .iter()
                .any(|&(r, s)| r <= ratio && s >= speed && (r < ratio || s > speed))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn matrix_covers_the_kip_780_options_once_each() {
        let m = matrix();
        let specs: Vec<String> = m.iter().map(|c| c.to_string()).collect();
        for spec in [
            "none",
            "gzip:1",
            "gzip:9:libdeflate",
            "snappy",
            "snappy:block=4096",
            "lz4:9",
            "lz4:17:block=7",
            "zstd:-5",
            "zstd:19",
            "zstd:3:window=22",
        ] {
            assert!(specs.iter().any(|s| s == spec), "{spec} in {specs:?}");
        }
        let mut unique = specs.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(unique.len(), specs.len(), "{specs:?}");
    }

    fn result(ratio_per_mille: u64, compress_ms: u64) -> TrialResult {
        TrialResult {
            candidate: "zstd:3".parse().unwrap(),
            batches: 1,
            records: 1,
            raw_bytes: 1_000_000 - 61,
            batch_bytes: ratio_per_mille * 1000,
            compress: Duration::from_millis(compress_ms),
            decompress: Duration::from_millis(1),
        }
    }

    #[test]
    fn pareto_front_keeps_what_nothing_beats() {
        let results = [
            result(500, 10), // 0: fastest
            result(300, 20), // 1: front
            result(300, 30), // 2: as small as 1 but slower
            result(200, 40), // 3: smallest
            result(400, 40), // 4: beaten by 3
            result(500, 10), // 5: ties 0
        ];
        assert_eq!(pareto_front(&results), vec![0, 1, 3, 5]);
        assert!(pareto_front(&[]).is_empty());
    }
}
