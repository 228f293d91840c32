//! `codec_decode`: each codec's bounded decoder on arbitrary payloads, and each
//! codec's round trip.

use kpress_codec::{Codec, CodecError, Compressor, Decompressor};

use crate::choice::codec_options;
use crate::heap::peak_growth;

/// Decompression limits bits 3-5 of the selector pick from: tiny ones, and kpress's
/// default `max_decompressed_bytes` (64 MiB), where only the input can bound what a
/// decoder may allocate.
const LIMITS: [usize; 8] = [0, 1, 100, 4 << 10, 64 << 10, 1 << 20, 16 << 20, 64 << 20];

/// Heap a decode may take whatever it decodes: first reservations (LZ4's first
/// 64 KiB room, zstd's 128 KiB step, gzip's 64 KiB first guess) and decoder state.
const HEAP_SLACK: usize = 1 << 20;

/// The most bytes one input byte can decode to in each codec's format: a snappy
/// copy of 64 bytes takes 3, an LZ4 match length byte adds 255, deflate reaches 1032
/// per byte, and a 4-byte zstd RLE block makes 128 KiB.
fn max_expansion(codec: Codec) -> usize {
    match codec {
        Codec::None => 1,
        Codec::Snappy => 32,
        Codec::Lz4 => 256,
        Codec::Gzip => 1032,
        Codec::Zstd => 32 << 10,
    }
}

/// Input: a selector byte (bits 0-2: codec, modulo 5; bits 3-5: limit, see
/// [`LIMITS`]; bits 6-7: option set, see `choice::codec_options`, which also picks
/// the gzip provider that decodes), then the payload.
///
/// Invariants of `Decompressor::decompress` on the payload: no panic; on success the
/// count is what it appended, at most the limit, after `out`'s existing bytes; on
/// error `out` is as it was and the error names the codec and limit; the heap it
/// takes stays within twice what the payload could decode to (never a size it
/// declares) plus [`HEAP_SLACK`]. Round trip: what `Compressor::compress` makes of
/// the payload decodes to the payload with exactly its length as the limit, and
/// fails with `LimitExceeded` one byte below.
pub fn codec_decode(data: &[u8]) {
    let [selector, payload @ ..] = data else {
        return;
    };
    let codec = Codec::ALL[usize::from(selector & 0x07) % Codec::ALL.len()];
    let limit = LIMITS[usize::from((selector >> 3) & 0x07)];
    let options = codec_options(codec, usize::from(selector >> 6));
    let mut decompressor = Decompressor::with_options(&options);

    const KEPT: &[u8] = b"kept";
    let mut out = KEPT.to_vec();
    let (result, peak) = peak_growth(|| decompressor.decompress(codec, payload, limit, &mut out));
    match result {
        Ok(n) => {
            assert_eq!(
                n,
                out.len() - KEPT.len(),
                "{codec}: count is not what was appended"
            );
            assert!(
                n <= limit,
                "{codec}: {n} bytes decoded past the {limit}-byte limit"
            );
            assert_eq!(
                &out[..KEPT.len()],
                KEPT,
                "{codec}: earlier output overwritten"
            );
        }
        Err(e) => {
            assert_eq!(
                out, KEPT,
                "{codec}: output left behind by a failed decode ({e})"
            );
            match e {
                CodecError::LimitExceeded { codec: c, limit: l } => {
                    assert_eq!(
                        (c, l),
                        (codec, limit),
                        "LimitExceeded names another codec or limit"
                    )
                }
                CodecError::Corrupt { codec: c, .. } => {
                    assert_eq!(c, codec, "Corrupt names another codec")
                }
                CodecError::Compress { .. } => {
                    panic!("{codec}: decoding failed as compression: {e}")
                }
            }
        }
    }
    let bound = limit.min(max_expansion(codec).saturating_mul(payload.len()));
    let allowed = 2 * bound + HEAP_SLACK;
    assert!(
        peak <= allowed,
        "{codec}: decoding {} bytes within a {limit}-byte limit took {peak} bytes of heap \
         (at most {allowed}: the payload cannot decode to more than {bound} bytes)",
        payload.len()
    );

    let mut compressed = Vec::new();
    Compressor::new(codec, &options)
        .compress(payload, &mut compressed)
        .unwrap_or_else(|e| panic!("{codec}: compressing {} bytes failed: {e}", payload.len()));
    let mut back = Vec::new();
    let n = decompressor
        .decompress(codec, &compressed, payload.len(), &mut back)
        .unwrap_or_else(|e| panic!("{codec}: kpress cannot decode its own output: {e}"));
    assert_eq!(n, payload.len(), "{codec}: round trip count");
    assert!(back == payload, "{codec}: the round trip changed the bytes");
    if let Some(short) = payload.len().checked_sub(1) {
        let mut out = Vec::new();
        assert_eq!(
            decompressor.decompress(codec, &compressed, short, &mut out),
            Err(CodecError::LimitExceeded {
                codec,
                limit: short
            }),
            "{codec}: a payload one byte over the limit"
        );
    }
}
