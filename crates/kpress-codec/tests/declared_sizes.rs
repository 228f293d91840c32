//! A payload that declares more output than its bytes could ever produce is refused
//! before anything is reserved or zeroed for it. The limit here is large, so that it is
//! each codec's maximum expansion of its input, not the caller's limit, that refuses
//! these payloads: output grows only as far as the input bytes can take it.

mod common;

use common::{compress, log_payload, options};
use kpress_codec::{Codec, CodecError, Decompressor};

/// A limit the hostile declarations below stay within.
const LIMIT: usize = 64 << 20;

/// Decompresses `input` into a fresh Vec and checks that it is refused as corrupt,
/// with `reason` in the message, leaving at most `most_reserved` bytes of capacity.
fn assert_refused(codec: Codec, input: &[u8], reason: &str, most_reserved: usize) {
    let mut out = Vec::new();
    let err = Decompressor::new()
        .decompress(codec, input, LIMIT, &mut out)
        .unwrap_err();
    assert!(
        matches!(err, CodecError::Corrupt { codec: c, .. } if c == codec),
        "{codec}: {err}"
    );
    assert!(err.to_string().contains(reason), "{codec}: {err}");
    assert!(out.is_empty(), "{codec}: output left behind");
    assert!(
        out.capacity() <= most_reserved,
        "{codec}: reserved {} bytes for a {}-byte payload",
        out.capacity(),
        input.len()
    );
}

/// The raw snappy varint for `n`.
fn varint(mut n: usize) -> Vec<u8> {
    let mut out = Vec::new();
    while n >= 0x80 {
        out.push((n as u8) | 0x80);
        n >>= 7;
    }
    out.push(n as u8);
    out
}

#[test]
fn snappy_block_declaring_more_than_its_bytes_can_produce_is_refused_unzeroed() {
    // A 5-byte raw block (4-byte varint, then one literal tag) declaring 64 MiB.
    let raw = [varint(LIMIT), vec![0x00]].concat();
    assert_eq!(raw.len(), 5);
    assert_refused(Codec::Snappy, &raw, "can produce at most", 0);
    // The same block as a xerial chunk.
    let mut xerial = compress(Codec::Snappy, &options(&[]), b"");
    xerial.extend((raw.len() as i32).to_be_bytes());
    xerial.extend(&raw);
    assert_refused(Codec::Snappy, &xerial, "can produce at most", 0);
    // Honest blocks, even the densest snappy writes, are untouched by the check.
    for input in [vec![0u8; 1 << 20], log_payload(1 << 20)] {
        let compressed = compress(Codec::Snappy, &options(&[]), &input);
        let mut out = Vec::new();
        let n = Decompressor::new()
            .decompress(Codec::Snappy, &compressed, LIMIT, &mut out)
            .unwrap();
        assert!(n == input.len() && out == input);
    }
}

/// A zstd frame: magic, frame header descriptor `fhd`, the rest of the header, then
/// one last raw block holding `content`.
fn zstd_frame(fhd: u8, header_rest: &[u8], content: &[u8]) -> Vec<u8> {
    let mut frame = vec![0x28, 0xB5, 0x2F, 0xFD, fhd];
    frame.extend(header_rest);
    let block_header = ((content.len() as u32) << 3) | 1;
    frame.extend(&block_header.to_le_bytes()[..3]);
    frame.extend(content);
    frame
}

#[test]
fn zstd_frame_declaring_more_than_its_blocks_can_produce_is_refused_unreserved() {
    // Single segment, 4-byte content size of 60 MiB, one 5-byte raw block.
    let single = zstd_frame(0xA0, &(60u32 << 20).to_le_bytes(), b"hello");
    assert_refused(Codec::Zstd, &single, "can produce at most 5", 0);
    // Not single segment: a 2^27 window, 8-byte content size.
    let windowed = zstd_frame(
        0xC0,
        &[&[0x88][..], &(60u64 << 20).to_le_bytes()].concat(),
        b"hello",
    );
    assert_refused(Codec::Zstd, &windowed, "can produce at most 5", 0);
}

#[test]
fn zstd_frame_without_a_content_size_reserves_what_its_blocks_can_produce() {
    // A 2^27 window and no content size: a streaming decoder would have to size its
    // room from nothing; the blocks' headers say 5 bytes.
    let frame = zstd_frame(0x00, &[0x88], b"hello");
    let mut out = Vec::new();
    let n = Decompressor::new()
        .decompress(Codec::Zstd, &frame, LIMIT, &mut out)
        .unwrap();
    assert_eq!((n, out.as_slice()), (5, &b"hello"[..]));
    assert_eq!(out.capacity(), 5);
    // A zstd stream of real records without a content size (as Java's producer
    // writes them) is reserved at most one block beyond its size.
    let input = log_payload(1 << 20);
    let mut streamed = Vec::new();
    let mut encoder = zstd::stream::write::Encoder::new(&mut streamed, 3).unwrap();
    std::io::Write::write_all(&mut encoder, &input).unwrap();
    encoder.finish().unwrap();
    assert_eq!(streamed[4] & 0xE0, 0, "no content size, not single segment");
    let mut out = Vec::new();
    Decompressor::new()
        .decompress(Codec::Zstd, &streamed, LIMIT, &mut out)
        .unwrap();
    assert!(out == input);
    assert!(
        out.capacity() <= input.len() + (128 << 10),
        "{}",
        out.capacity()
    );
}

#[test]
fn zstd_window_beyond_java_limit_is_corrupt() {
    // Window descriptor exponent 18: 2^28, past the 2^27 Kafka's Java client decodes.
    let frame = zstd_frame(0x00, &[18 << 3], b"hello");
    assert_refused(Codec::Zstd, &frame, "window", 0);
}

#[test]
fn gzip_trailer_claiming_more_than_the_member_can_inflate_to_is_not_reserved() {
    // A member of a few bytes whose ISIZE claims 60 MiB: deflate inflates to at most
    // 1032 bytes per byte, so the claim is no guide to the room it needs.
    let mut gz = compress(Codec::Gzip, &options(&[]), b"a small payload");
    let n = gz.len();
    gz[n - 4..].copy_from_slice(&(60u32 << 20).to_le_bytes());
    assert_refused(Codec::Gzip, &gz, "trailer", 1032 * n);
}
