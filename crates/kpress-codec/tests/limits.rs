//! Decompression is bounded: payloads that expand (or claim to expand) past the
//! caller's limit fail with LimitExceeded without the claimed size being allocated.

mod common;

use common::{compress, decompress, log_payload, options};
use kpress_codec::{Codec, CodecError, Decompressor};

const LIMIT: usize = 1 << 20;

/// Decompresses into a fresh Vec and checks both the error and that the Vec never
/// grew past the limit.
fn assert_limit_exceeded(codec: Codec, input: &[u8], limit: usize) {
    let mut out = Vec::new();
    let result = Decompressor::new().decompress(codec, input, limit, &mut out);
    assert_eq!(
        result,
        Err(CodecError::LimitExceeded { codec, limit }),
        "{codec}"
    );
    assert!(out.is_empty(), "{codec}: output left behind");
    assert!(
        out.capacity() <= limit,
        "{codec}: allocated {} bytes for a {limit}-byte limit",
        out.capacity()
    );
}

#[test]
fn zstd_frame_claiming_a_terabyte_is_refused_before_allocating() {
    let mut frame = vec![0x28, 0xB5, 0x2F, 0xFD];
    // FHD: 8-byte content size, not single segment; window descriptor 2^21.
    frame.extend([0xC0, 0x58]);
    frame.extend((1u64 << 40).to_le_bytes());
    // One last raw block of 5 bytes.
    frame.extend([(5 << 3) | 1, 0, 0]);
    frame.extend(b"hello");
    assert_limit_exceeded(Codec::Zstd, &frame, LIMIT);
}

#[test]
fn zstd_frame_without_content_size_is_cut_at_the_limit() {
    let zeros = vec![0u8; 20 << 20];
    let mut streamed = Vec::new();
    let mut encoder = zstd::stream::write::Encoder::new(&mut streamed, 1).unwrap();
    std::io::Write::write_all(&mut encoder, &zeros).unwrap();
    encoder.finish().unwrap();
    assert!(streamed.len() < 10_000);
    assert_limit_exceeded(Codec::Zstd, &streamed, LIMIT);
}

#[test]
fn gzip_of_100_mb_of_zeros_is_cut_at_the_limit() {
    let zeros = vec![0u8; 100 << 20];
    let gz = compress(
        Codec::Gzip,
        &options(&[("compression.gzip.level", 1)]),
        &zeros,
    );
    drop(zeros);
    assert!(gz.len() < 1 << 20, "{}", gz.len());
    assert_limit_exceeded(Codec::Gzip, &gz, LIMIT);
    // A later member cannot sneak past the limit either.
    let small = compress(Codec::Gzip, &options(&[]), &[7u8; 1000]);
    let two = [small.as_slice(), small.as_slice()].concat();
    assert_limit_exceeded(Codec::Gzip, &two, 1500);
    assert_eq!(
        decompress(Codec::Gzip, &two, 2000).unwrap(),
        vec![7u8; 2000]
    );
}

#[test]
fn snappy_raw_header_claiming_4_gb_is_refused_before_allocating() {
    // Varint 0xFFFFFFFF, then a literal that could never fill it.
    let raw = [0xFF, 0xFF, 0xFF, 0xFF, 0x0F, 0x00, b'x'];
    assert_limit_exceeded(Codec::Snappy, &raw, LIMIT);
    let mut xerial = compress(Codec::Snappy, &options(&[]), b"");
    xerial.extend((raw.len() as i32).to_be_bytes());
    xerial.extend(raw);
    assert_limit_exceeded(Codec::Snappy, &xerial, LIMIT);
    // Many honest chunks adding up past the limit.
    let many = compress(Codec::Snappy, &options(&[]), &vec![1u8; 3 << 20]);
    assert_limit_exceeded(Codec::Snappy, &many, LIMIT);
}

#[test]
fn lz4_frame_with_many_blocks_is_cut_at_the_limit() {
    let frame = compress(Codec::Lz4, &options(&[]), &vec![0u8; 10 << 20]);
    assert!(frame.len() < 100_000, "{}", frame.len());
    assert_limit_exceeded(Codec::Lz4, &frame, LIMIT);
    // A limit that falls inside a block.
    assert_limit_exceeded(Codec::Lz4, &frame, LIMIT + 1000);
}

#[test]
fn every_codec_accepts_exactly_the_limit_and_refuses_one_byte_less() {
    let input = log_payload(300_000);
    for codec in Codec::ALL {
        let compressed = compress(codec, &options(&[]), &input);
        assert_eq!(
            decompress(codec, &compressed, input.len()).unwrap(),
            input,
            "{codec}"
        );
        assert_limit_exceeded(codec, &compressed, input.len() - 1);
        assert_limit_exceeded(codec, &compressed, 0);
    }
}
