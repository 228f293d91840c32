//! snappy: xerial framing written (what Java's producer writes); xerial framing or
//! raw snappy (what librdkafka writes) read.
//!
//! Copies per byte: `snap` needs initialized output slices, so each chunk's room in
//! `out` is zero-filled before snappy writes it (one memset, no staging copy), both
//! ways. Reading, that room is a block's declared length, which is first checked
//! against the caller's limit and against what the block's bytes can produce at most
//! ([`max_decompressed_len`]), so a block never gets more zeroed than about 21 times
//! its own size.

use snap::raw::{decompress_len, max_compress_len, Decoder, Encoder};

use crate::spare::reserve_within;
use crate::{Codec, CodecError};

/// xerial snappy-java's stream magic: 0x82 "SNAPPY" 0.
pub(crate) const XERIAL_MAGIC: [u8; 8] = [0x82, b'S', b'N', b'A', b'P', b'P', b'Y', 0];
/// Magic, then big-endian int32 version 1 and minimum compatible version 1.
const XERIAL_HEADER: [u8; 16] = [
    0x82, b'S', b'N', b'A', b'P', b'P', b'Y', 0, 0, 0, 0, 1, 0, 0, 0, 1,
];

fn corrupt(reason: impl Into<String>) -> CodecError {
    CodecError::Corrupt {
        codec: Codec::Snappy,
        reason: reason.into(),
    }
}

/// Writes xerial-framed snappy, reusing one encoder.
#[derive(Debug)]
pub(crate) struct SnappyCompressor {
    encoder: Encoder,
    /// `compression.snappy.block`: uncompressed bytes per xerial chunk.
    block: usize,
}

impl SnappyCompressor {
    pub(crate) fn new(block: usize) -> SnappyCompressor {
        SnappyCompressor {
            encoder: Encoder::new(),
            block,
        }
    }

    pub(crate) fn compress(&mut self, input: &[u8], out: &mut Vec<u8>) -> Result<(), CodecError> {
        out.extend_from_slice(&XERIAL_HEADER);
        for chunk in input.chunks(self.block) {
            let length_at = out.len();
            let data_at = length_at + 4;
            out.resize(data_at + max_compress_len(chunk.len()), 0);
            let written = self
                .encoder
                .compress(chunk, &mut out[data_at..])
                .map_err(|e| CodecError::Compress {
                    codec: Codec::Snappy,
                    reason: e.to_string(),
                })?;
            out.truncate(data_at + written);
            // A chunk is at most 1 GiB (the option's bound), so its length fits an int32.
            let length = i32::try_from(written).map_err(|_| CodecError::Compress {
                codec: Codec::Snappy,
                reason: format!("chunk of {written} bytes does not fit xerial's int32 length"),
            })?;
            out[length_at..data_at].copy_from_slice(&length.to_be_bytes());
        }
        Ok(())
    }
}

/// Reads xerial-framed or raw snappy into `out`, appending at most `limit` bytes.
pub(crate) fn decompress(
    decoder: &mut Decoder,
    input: &[u8],
    limit: usize,
    out: &mut Vec<u8>,
) -> Result<usize, CodecError> {
    let start = out.len();
    if input.starts_with(&XERIAL_MAGIC) {
        let mut rest = input
            .get(XERIAL_HEADER.len()..)
            .ok_or_else(|| corrupt("truncated xerial header"))?;
        while !rest.is_empty() {
            let length = rest
                .get(..4)
                .ok_or_else(|| corrupt("truncated xerial chunk length"))?;
            let length = i32::from_be_bytes([length[0], length[1], length[2], length[3]]);
            let length = usize::try_from(length)
                .map_err(|_| corrupt(format!("negative xerial chunk length {length}")))?;
            let chunk = rest.get(4..4 + length).ok_or_else(|| {
                corrupt(format!(
                    "xerial chunk of {length} bytes overruns the {} bytes left",
                    rest.len() - 4
                ))
            })?;
            let room = limit - (out.len() - start);
            decompress_block(decoder, chunk, room, limit, out)?;
            rest = &rest[4 + length..];
        }
    } else {
        decompress_block(decoder, input, limit, limit, out)?;
    }
    Ok(out.len() - start)
}

/// The most a raw snappy block of `len` bytes can decode to. Its densest element is a
/// copy with a 2-byte offset: 3 bytes that write up to 64 (literals write at most what
/// they hold, the other copies 11 bytes from 2 and 64 from 5).
fn max_decompressed_len(len: usize) -> usize {
    len.saturating_mul(64) / 3
}

/// Decompresses one raw snappy block, checking its declared length against `room` and
/// against what the block can produce before making room for it.
fn decompress_block(
    decoder: &mut Decoder,
    block: &[u8],
    room: usize,
    limit: usize,
    out: &mut Vec<u8>,
) -> Result<(), CodecError> {
    let length =
        decompress_len(block).map_err(|e| corrupt(format!("invalid snappy block: {e}")))?;
    if length > room {
        return Err(CodecError::LimitExceeded {
            codec: Codec::Snappy,
            limit,
        });
    }
    let most = max_decompressed_len(block.len());
    if length > most {
        return Err(corrupt(format!(
            "snappy block declares {length} bytes, but its {} bytes can produce at most {most}",
            block.len()
        )));
    }
    let at = out.len();
    reserve_within(out, length, room);
    out.resize(at + length, 0);
    match decoder.decompress(block, &mut out[at..]) {
        Ok(written) if written == length => Ok(()),
        Ok(written) => {
            out.truncate(at);
            Err(corrupt(format!(
                "snappy block declares {length} bytes but holds {written}"
            )))
        }
        Err(e) => {
            out.truncate(at);
            Err(corrupt(format!("invalid snappy block: {e}")))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The densest raw snappy block: one literal byte, then `copies` copies of 64
    /// bytes at offset 1 (tag 0b11111110: length 64, 2-byte offset).
    fn densest_block(copies: usize) -> (Vec<u8>, usize) {
        let decoded = 1 + 64 * copies;
        let mut block = Vec::new();
        let mut n = decoded;
        while n >= 0x80 {
            block.push((n as u8) | 0x80);
            n >>= 7;
        }
        block.push(n as u8);
        block.extend([0x00, b'a']);
        for _ in 0..copies {
            block.extend([0xFE, 1, 0]);
        }
        (block, decoded)
    }

    #[test]
    fn the_densest_block_decodes_within_the_expansion_bound() {
        for copies in [0, 1, 2, 100, 20_000] {
            let (block, decoded) = densest_block(copies);
            assert!(decoded <= max_decompressed_len(block.len()), "{copies}");
            let mut out = Vec::new();
            let n = decompress(&mut Decoder::new(), &block, decoded, &mut out).unwrap();
            assert!(n == decoded && out.iter().all(|&b| b == b'a'));
        }
    }
}
