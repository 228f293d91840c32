//! What a zstd frame's headers say, read without decoding anything (RFC 8878 section
//! 3.1): where the frame ends, the content size and window it declares, and the most
//! its blocks can produce. The decoder sizes its output from these before zstd runs,
//! so no declared size is trusted past what the frame's bytes can produce.
//!
//! zstd's own API gives a frame's compressed size and declared content size, but no
//! bound on what a frame without a content size produces, nor a check of a declared
//! one against its blocks; this walk of the block headers gives both.

use crate::{Codec, CodecError};

const MAGIC: u32 = 0xFD2F_B528;
/// Skippable frames: magic 0x184D2A50..=0x184D2A5F, a 4-byte length, then ignored data.
const SKIPPABLE_MAGIC: u32 = 0x184D_2A50;
const SKIPPABLE_MAGIC_MASK: u32 = 0xFFFF_FFF0;
/// The largest block any frame may hold, compressed or decoded.
const BLOCK_SIZE_MAX: u64 = 128 << 10;
const BLOCK_RAW: u32 = 0;
const BLOCK_RLE: u32 = 1;
const BLOCK_COMPRESSED: u32 = 2;

fn corrupt(reason: impl Into<String>) -> CodecError {
    CodecError::Corrupt {
        codec: Codec::Zstd,
        reason: reason.into(),
    }
}

/// One frame at the start of a zstd payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Frame {
    /// A skippable frame of `len` bytes: it decodes to nothing.
    Skippable {
        len: usize,
    },
    Data(DataFrame),
}

/// A frame holding data, as its headers describe it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct DataFrame {
    /// The frame's bytes, from the magic to the end of its last block (or checksum).
    pub(crate) len: usize,
    /// The content size the frame header declares, if any.
    pub(crate) content_size: Option<u64>,
    /// The window the frame needs (the content size for a single-segment frame).
    pub(crate) window_size: u64,
    /// The most the frame's blocks can decode to: raw and RLE blocks exactly, a
    /// compressed block at most the frame's block maximum. At most 32 KiB per byte of
    /// the frame (a 4-byte RLE or compressed block producing 128 KiB).
    pub(crate) max_output: u64,
}

fn read_le(bytes: &[u8]) -> u64 {
    bytes
        .iter()
        .rev()
        .fold(0, |value, &byte| (value << 8) | u64::from(byte))
}

/// Reads the frame at the start of `input` (which may hold more frames after it).
/// Refuses a frame whose headers are malformed or overrun `input`, and a block larger
/// than the frame's block maximum (zstd refuses those too).
pub(crate) fn read_frame(input: &[u8]) -> Result<Frame, CodecError> {
    let magic = input
        .get(..4)
        .map(read_le)
        .ok_or_else(|| corrupt("truncated frame magic"))? as u32;
    if magic & SKIPPABLE_MAGIC_MASK == SKIPPABLE_MAGIC {
        let size = input
            .get(4..8)
            .map(read_le)
            .ok_or_else(|| corrupt("truncated skippable frame length"))?;
        let len = usize::try_from(size)
            .ok()
            .and_then(|size| size.checked_add(8))
            .filter(|&len| len <= input.len())
            .ok_or_else(|| {
                corrupt(format!(
                    "skippable frame of {size} bytes overruns the {} bytes left",
                    input.len() - 8
                ))
            })?;
        return Ok(Frame::Skippable { len });
    }
    if magic != MAGIC {
        return Err(corrupt(format!(
            "bad frame magic {:02x?}, expected 28 b5 2f fd",
            &input[..4]
        )));
    }
    let truncated_header = || corrupt("truncated frame header");
    let descriptor = *input.get(4).ok_or_else(truncated_header)?;
    if descriptor & 0x08 != 0 {
        return Err(corrupt(format!(
            "reserved bit set in frame header descriptor {descriptor:#04x}"
        )));
    }
    let single_segment = descriptor & 0x20 != 0;
    let dictionary_id_len = [0, 1, 2, 4][usize::from(descriptor & 0x03)];
    let content_size_len = match descriptor >> 6 {
        0 if single_segment => 1,
        0 => 0,
        1 => 2,
        2 => 4,
        _ => 8,
    };
    let mut pos = 5;
    let window_descriptor = if single_segment {
        None
    } else {
        pos += 1;
        Some(*input.get(5).ok_or_else(truncated_header)?)
    };
    pos += dictionary_id_len;
    let content_size = match content_size_len {
        0 => None,
        len => {
            let bytes = input.get(pos..pos + len).ok_or_else(truncated_header)?;
            pos += len;
            // The 2-byte form counts from 256.
            Some(read_le(bytes) + if len == 2 { 256 } else { 0 })
        }
    };
    if pos > input.len() {
        return Err(truncated_header());
    }
    let window_size = match (window_descriptor, content_size) {
        (Some(descriptor), _) => {
            let window_log = 10 + u32::from(descriptor >> 3);
            let base = 1u64 << window_log;
            base + (base >> 3) * u64::from(descriptor & 0x07)
        }
        // A single-segment frame always has a content size.
        (None, size) => size.unwrap_or(0),
    };
    let block_max = window_size.min(BLOCK_SIZE_MAX);
    let checksum = descriptor & 0x04 != 0;
    let mut max_output: u64 = 0;
    loop {
        let header = input
            .get(pos..pos + 3)
            .map(read_le)
            .ok_or_else(|| corrupt("truncated block header"))? as u32;
        pos += 3;
        let last = header & 1 != 0;
        let block_type = (header >> 1) & 0x03;
        let size = u64::from(header >> 3);
        let (stored, produced) = match block_type {
            BLOCK_RAW => (size, size),
            BLOCK_RLE => (1, size),
            // An empty compressed block is corrupt (zstd refuses it) and produces
            // nothing; any other counts as the block maximum, so no byte of a frame
            // stands for more than 32 KiB.
            BLOCK_COMPRESSED if size == 0 => (0, 0),
            BLOCK_COMPRESSED => (size, block_max),
            _ => return Err(corrupt("reserved block type")),
        };
        if size > block_max {
            return Err(corrupt(format!(
                "block of {size} bytes exceeds the frame's {block_max}-byte block maximum"
            )));
        }
        pos = usize::try_from(stored)
            .ok()
            .and_then(|stored| pos.checked_add(stored))
            .filter(|&end| end <= input.len())
            .ok_or_else(|| {
                corrupt(format!(
                    "block of {stored} bytes overruns the {} bytes left",
                    input.len() - pos
                ))
            })?;
        max_output += produced;
        if last {
            break;
        }
    }
    if checksum {
        pos += 4;
        if pos > input.len() {
            return Err(corrupt("truncated content checksum"));
        }
    }
    Ok(Frame::Data(DataFrame {
        len: pos,
        content_size,
        window_size,
        max_output,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(input: &[u8]) -> DataFrame {
        match read_frame(input) {
            Ok(Frame::Data(frame)) => frame,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn agrees_with_zstd_on_frames_zstd_writes() {
        let text: Vec<u8> = (0..40_000u32)
            .flat_map(|i| format!("line {} of {}\n", i % 977, i % 13).into_bytes())
            .collect();
        for level in [-5, 1, 3, 19] {
            // With the content size (one call), and streamed without it.
            let whole = zstd::bulk::compress(&text, level).unwrap();
            let mut streamed = Vec::new();
            let mut encoder = zstd::stream::write::Encoder::new(&mut streamed, level).unwrap();
            encoder.include_checksum(true).unwrap();
            std::io::Write::write_all(&mut encoder, &text).unwrap();
            encoder.finish().unwrap();
            for frame in [whole, streamed] {
                let read = data(&frame);
                assert_eq!(read.len, frame.len());
                assert_eq!(
                    read.len,
                    zstd::zstd_safe::find_frame_compressed_size(&frame).unwrap()
                );
                let declared = zstd::zstd_safe::get_frame_content_size(&frame).unwrap();
                assert_eq!(read.content_size, declared);
                assert!(read.max_output >= text.len() as u64, "{level}");
                // Full 128 KiB blocks but the last, below the levels that split blocks.
                if level < 19 {
                    let blocks = (text.len() as u64).div_ceil(BLOCK_SIZE_MAX);
                    assert_eq!(read.max_output, blocks * BLOCK_SIZE_MAX, "{level}");
                }
            }
        }
    }

    #[test]
    fn skippable_frames_are_measured_and_overruns_refused() {
        let mut skippable = vec![0x5A, 0x2A, 0x4D, 0x18, 3, 0, 0, 0, 1, 2, 3];
        assert_eq!(read_frame(&skippable), Ok(Frame::Skippable { len: 11 }));
        skippable.truncate(10);
        let err = read_frame(&skippable).unwrap_err();
        assert!(err.to_string().contains("overruns"), "{err}");
    }

    #[test]
    fn malformed_headers_name_the_problem() {
        let cases: [(&[u8], &str); 8] = [
            (&[0x28, 0xB5, 0x2F], "magic"),
            (&[0x28, 0xB5, 0x2F, 0xFE, 0, 0], "magic"),
            (&[0x28, 0xB5, 0x2F, 0xFD], "frame header"),
            (&[0x28, 0xB5, 0x2F, 0xFD, 0x08, 0x00], "reserved bit"),
            (&[0x28, 0xB5, 0x2F, 0xFD, 0xC0, 0x00, 1, 2], "frame header"),
            (
                &[0x28, 0xB5, 0x2F, 0xFD, 0x00, 0x00, 0x07, 0, 0],
                "reserved block",
            ),
            // A 1 KiB window cannot hold a 2 KiB raw block.
            (
                &[0x28, 0xB5, 0x2F, 0xFD, 0x00, 0x00, 0x01, 0x40, 0],
                "block maximum",
            ),
            (
                &[0x28, 0xB5, 0x2F, 0xFD, 0x00, 0x00, 0x29, 0, 0, b'a'],
                "overruns",
            ),
        ];
        for (input, reason) in cases {
            let err = read_frame(input).unwrap_err();
            assert!(err.to_string().contains(reason), "{reason}: {err}");
        }
    }

    #[test]
    fn rle_blocks_count_their_size_and_compressed_blocks_the_block_maximum() {
        // No content size, 1 MiB window: an RLE block of 1000 bytes, then a
        // compressed block of 2 bytes (not decodable, but it could be 128 KiB).
        let mut frame = vec![0x28, 0xB5, 0x2F, 0xFD, 0x00, 10 << 3];
        frame.extend(&((1000u32 << 3) | (BLOCK_RLE << 1)).to_le_bytes()[..3]);
        frame.push(b'x');
        frame.extend(&((2u32 << 3) | (BLOCK_COMPRESSED << 1) | 1).to_le_bytes()[..3]);
        frame.extend([0, 0]);
        let read = data(&frame);
        assert_eq!(read.len, frame.len());
        assert_eq!(read.window_size, 1 << 20);
        assert_eq!(read.max_output, 1000 + BLOCK_SIZE_MAX);
        // Empty compressed blocks produce nothing: 3 bytes never stand for 128 KiB.
        let mut frame = vec![0x28, 0xB5, 0x2F, 0xFD, 0x00, 10 << 3];
        for last in [0, 0, 1] {
            frame.extend(&((BLOCK_COMPRESSED << 1) | last).to_le_bytes()[..3]);
        }
        assert_eq!(data(&frame).max_output, 0);
    }
}
