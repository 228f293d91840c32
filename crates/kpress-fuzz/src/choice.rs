//! The settings a fuzz input picks with its leading bytes: a rewrite policy, codec
//! options, decompression limits, and the harness's own switches.
//!
//! Every setting is one kpress can run with (options set through
//! `CompressionOptions::set`, with Kafka's ranges), so a failure is kpress's, never
//! the harness's.

use kpress_batch::{RecompressMode, RewritePolicy, Target};
use kpress_codec::options::{
    GZIP_LEVEL, GZIP_PROVIDER, LZ4_BLOCK, LZ4_LEVEL, SNAPPY_BLOCK, ZSTD_LEVEL, ZSTD_WINDOW,
};
use kpress_codec::{Codec, CompressionOptions};

/// The policy byte of `request_frame` and `batch_rewrite` inputs.
///
/// | bits | meaning |
/// |---|---|
/// | 0-2 | target: producer, none, gzip, snappy, lz4, zstd, gzip, zstd |
/// | 3 | `recompress = "always"` (else `codec-differs`) |
/// | 4 | store the target whatever its size, kpress's default (clear: `only_if_smaller`) |
/// | 5 | tight limits: 16 KiB batches, 64 KiB decompressed, ratio 8 (else kpress's defaults) |
/// | 6 | repair: fix the frame's size prefix, batch lengths and CRCs before the rewrite, so mutated payloads reach the codecs |
/// | 7 | the codec's alternative options (see [`codec_options`]) |
#[derive(Debug, Clone)]
pub(crate) struct PolicyChoice {
    pub(crate) policy: RewritePolicy,
    pub(crate) repair: bool,
}

const TARGETS: [Option<Codec>; 8] = [
    None,
    Some(Codec::None),
    Some(Codec::Gzip),
    Some(Codec::Snappy),
    Some(Codec::Lz4),
    Some(Codec::Zstd),
    Some(Codec::Gzip),
    Some(Codec::Zstd),
];

pub(crate) fn policy_choice(byte: u8) -> PolicyChoice {
    // Targets 6 and 7 use the variant after the one bit 7 picks, so every codec
    // option set is reachable with either mode.
    let index = usize::from(byte & 0x07);
    let variant = usize::from(byte >> 7) + usize::from(index >= 6) * 2;
    let target = match TARGETS[index] {
        None => Target::Producer,
        Some(codec) => Target::Codec {
            codec,
            options: codec_options(codec, variant),
        },
    };
    let mut policy = RewritePolicy {
        target,
        mode: if byte & 0x08 != 0 {
            RecompressMode::Always
        } else {
            RecompressMode::CodecDiffers
        },
        only_if_smaller: byte & 0x10 == 0,
        ..RewritePolicy::default()
    };
    if byte & 0x20 != 0 {
        policy.max_batch_bytes = 16 << 10;
        policy.max_decompressed_bytes = 64 << 10;
        policy.max_decompression_ratio = 8;
    }
    PolicyChoice {
        policy,
        repair: byte & 0x40 != 0,
    }
}

/// The request byte of `request_frame` and `batch_rewrite` inputs.
///
/// | bits | meaning |
/// |---|---|
/// | 0 | rewrite each partition with `Recompressor::rewrite_partition` (one batch, the request's allowance) instead of `rewrite_each` |
/// | 1-3 | `batch_rewrite` only: the Produce version `rewrite_partition` is told, 3 + n |
/// | 4-5 | the request's decompression budget: kpress's default, 0, 64 KiB, 1 MiB |
#[derive(Debug, Clone, Copy)]
pub(crate) struct RequestChoice {
    pub(crate) per_partition: bool,
    pub(crate) produce_version: i16,
    pub(crate) decompress_budget: usize,
}

pub(crate) fn request_choice(byte: u8) -> RequestChoice {
    const BUDGETS: [usize; 4] = [
        kpress_config::MAX_REQUEST_DECOMPRESSED_BYTES_DEFAULT,
        0,
        64 << 10,
        1 << 20,
    ];
    RequestChoice {
        per_partition: byte & 0x01 != 0,
        produce_version: 3 + i16::from((byte >> 1) & 0x07),
        decompress_budget: BUDGETS[usize::from((byte >> 4) & 0x03)],
    }
}

/// Four option sets per codec, `variant` 0 being Kafka's defaults:
///
/// | codec | 1 | 2 | 3 |
/// |---|---|---|---|
/// | gzip | level 1, libdeflate | level 9, ISA-L | level 6, zlib |
/// | snappy | 1 KiB blocks | 4 KiB blocks | 1 MiB blocks |
/// | lz4 | level 1 (HC), 256 KiB blocks | level 12, 64 KiB | level 17, 4 MiB |
/// | zstd | level -5 | level 9, window 10 (long mode) | level 1, window 22 |
///
/// A provider this host lacks is left at the default.
pub(crate) fn codec_options(codec: Codec, variant: usize) -> CompressionOptions {
    let settings: &[(&str, &str)] = match (codec, variant % 4) {
        (_, 0) | (Codec::None, _) => &[],
        (Codec::Gzip, 1) => &[(GZIP_LEVEL, "1"), (GZIP_PROVIDER, "libdeflate")],
        (Codec::Gzip, 2) => &[(GZIP_LEVEL, "9"), (GZIP_PROVIDER, "isal")],
        (Codec::Gzip, _) => &[(GZIP_LEVEL, "6"), (GZIP_PROVIDER, "zlib")],
        (Codec::Snappy, 1) => &[(SNAPPY_BLOCK, "1024")],
        (Codec::Snappy, 2) => &[(SNAPPY_BLOCK, "4096")],
        (Codec::Snappy, _) => &[(SNAPPY_BLOCK, "1048576")],
        (Codec::Lz4, 1) => &[(LZ4_LEVEL, "1"), (LZ4_BLOCK, "5")],
        (Codec::Lz4, 2) => &[(LZ4_LEVEL, "12"), (LZ4_BLOCK, "4")],
        (Codec::Lz4, _) => &[(LZ4_LEVEL, "17"), (LZ4_BLOCK, "7")],
        (Codec::Zstd, 1) => &[(ZSTD_LEVEL, "-5")],
        (Codec::Zstd, 2) => &[(ZSTD_LEVEL, "9"), (ZSTD_WINDOW, "10")],
        (Codec::Zstd, _) => &[(ZSTD_LEVEL, "1"), (ZSTD_WINDOW, "22")],
    };
    let mut options = CompressionOptions::default();
    for (key, value) in settings {
        match options.set(key, value) {
            Ok(()) => {}
            Err(_) if *key == GZIP_PROVIDER => {}
            Err(e) => panic!("the harness's own option {key} = {value} was refused: {e}"),
        }
    }
    options
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_byte_is_a_valid_choice() {
        for byte in 0..=u8::MAX {
            let choice = policy_choice(byte);
            assert_eq!(choice.policy.only_if_smaller, byte & 0x10 == 0);
            let request = request_choice(byte);
            assert!((3..=10).contains(&request.produce_version));
        }
        assert_eq!(policy_choice(0).policy.target, Target::Producer);
        for codec in Codec::ALL {
            for variant in 0..4 {
                codec_options(codec, variant);
            }
        }
    }
}
