//! Every codec reads back what it writes, appending after what `out` already holds.

mod common;

use common::{compress, decompress, log_payload, options};
use kpress_codec::options::*;
use kpress_codec::{Codec, CompressionOptions, Compressor, Decompressor};

const SIZES: [usize; 7] = [0, 1, 100, 16 * 1024, 64 * 1024 + 1, 300_000, 1 << 20];

#[test]
fn every_codec_round_trips_log_payloads_at_default_options() {
    let defaults = CompressionOptions::default();
    for codec in Codec::ALL {
        for size in SIZES {
            let input = log_payload(size);
            let compressed = compress(codec, &defaults, &input);
            let back = decompress(codec, &compressed, input.len()).unwrap();
            assert!(back == input, "{codec} at {size} bytes");
        }
    }
}

#[test]
fn compress_and_decompress_append_after_existing_bytes() {
    let header = [0xAB; 61];
    let input = log_payload(50_000);
    let mut decompressor = Decompressor::new();
    for codec in Codec::ALL {
        let mut compressor = Compressor::new(codec, &CompressionOptions::default());
        let mut out = header.to_vec();
        compressor.compress(&input, &mut out).unwrap();
        assert_eq!(out[..61], header, "{codec}");
        // A reused compressor writes the same bytes again.
        let mut again = Vec::new();
        compressor.compress(&input, &mut again).unwrap();
        assert_eq!(out[61..], again[..], "{codec}");

        let mut back = b"prefix".to_vec();
        let n = decompressor
            .decompress(codec, &out[61..], input.len(), &mut back)
            .unwrap();
        assert_eq!(n, input.len());
        assert_eq!(&back[..6], b"prefix");
        assert!(back[6..] == input[..], "{codec}");
    }
}

#[test]
fn options_at_their_bounds_round_trip() {
    let input = log_payload(200_000);
    let cases: &[(Codec, &[(&str, i64)])] = &[
        (Codec::Gzip, &[(GZIP_LEVEL, 1), (GZIP_BUFFER, 512)]),
        (Codec::Gzip, &[(GZIP_LEVEL, 9), (GZIP_BUFFER, 1 << 20)]),
        (Codec::Snappy, &[(SNAPPY_BLOCK, 1024)]),
        (Codec::Snappy, &[(SNAPPY_BLOCK, 1 << 30)]),
        (Codec::Lz4, &[(LZ4_LEVEL, 1), (LZ4_BLOCK, 4)]),
        (Codec::Lz4, &[(LZ4_LEVEL, 17), (LZ4_BLOCK, 7)]),
        (Codec::Lz4, &[(LZ4_LEVEL, 9), (LZ4_BLOCK, 7)]),
        (Codec::Zstd, &[(ZSTD_LEVEL, -131072), (ZSTD_WINDOW, 10)]),
        (Codec::Zstd, &[(ZSTD_LEVEL, 22), (ZSTD_WINDOW, 22)]),
        (Codec::Zstd, &[(ZSTD_LEVEL, 1), (ZSTD_WINDOW, 0)]),
    ];
    for (codec, pairs) in cases {
        let compressed = compress(*codec, &options(pairs), &input);
        let back = decompress(*codec, &compressed, input.len()).unwrap();
        assert!(back == input, "{codec} {pairs:?}");
    }
}

#[test]
fn incompressible_input_round_trips() {
    // A xorshift stream: nothing for any codec to find.
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    let input: Vec<u8> = (0..200_000)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect();
    for codec in Codec::ALL {
        for level in [1, 9] {
            let o = options(&[(LZ4_LEVEL, level)]);
            let compressed = compress(codec, &o, &input);
            let back = decompress(codec, &compressed, input.len()).unwrap();
            assert!(back == input, "{codec}");
        }
    }
}

#[test]
fn compressors_and_decompressors_can_move_between_threads() {
    fn assert_send<T: Send>() {}
    assert_send::<Compressor>();
    assert_send::<Decompressor>();
}
