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
