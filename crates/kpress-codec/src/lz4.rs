//! lz4: one LZ4 frame with independent blocks and no checksums written (what Java's
//! producer writes); the first frame of a stream read, with the optional fields and
//! checksums the frame format allows.
//!
//! Copies per byte: compressing at level 9, lz4_flex needs an initialized output
//! slice, so each block's room in `out` is zero-filled first (one memset); liblz4 HC
//! writes into `out`'s spare capacity directly. A block that does not shrink is copied
//! in stored form (one copy). Decompressing, lz4_flex writes into a zero-filled room in
//! `out` (one memset); stored blocks are copied once.

use std::ffi::{c_char, c_int, c_void};

use lz4_flex::block::{compress_into_with_table, decompress_into, CompressTable};

use crate::options::LZ4_LEVEL_DEFAULT;
use crate::spare::{append_with, reserve_within};
use crate::xxh32::xxh32;
use crate::{Codec, CodecError};

const MAGIC: [u8; 4] = [0x04, 0x22, 0x4D, 0x18];
/// FLG: version 01, independent blocks, no checksums, no content size, no dictID.
const FLG_WRITTEN: u8 = 0x60;
const FLG_VERSION_MASK: u8 = 0xC0;
const FLG_VERSION_01: u8 = 0x40;
const FLG_BLOCK_INDEPENDENT: u8 = 0x20;
const FLG_BLOCK_CHECKSUM: u8 = 0x10;
const FLG_CONTENT_SIZE: u8 = 0x08;
const FLG_CONTENT_CHECKSUM: u8 = 0x04;
const FLG_RESERVED: u8 = 0x02;
const FLG_DICT_ID: u8 = 0x01;
const BD_RESERVED: u8 = 0x8F;
/// Block size field bit marking a block stored uncompressed.
const STORED_BLOCK: u32 = 0x8000_0000;
const END_MARK: [u8; 4] = [0; 4];

// Links the liblz4 that lz4-sys builds; the functions below are not declared by it.
extern crate lz4_sys;

extern "C" {
    fn LZ4_sizeofStateHC() -> c_int;
    fn LZ4_initStreamHC(buffer: *mut c_void, size: usize) -> *mut c_void;
    fn LZ4_compress_HC_extStateHC_fastReset(
        state: *mut c_void,
        src: *const c_char,
        dst: *mut c_char,
        src_size: c_int,
        dst_capacity: c_int,
        compression_level: c_int,
    ) -> c_int;
}

fn corrupt(reason: impl Into<String>) -> CodecError {
    CodecError::Corrupt {
        codec: Codec::Lz4,
        reason: reason.into(),
    }
}

fn compress_error(reason: impl Into<String>) -> CodecError {
    CodecError::Compress {
        codec: Codec::Lz4,
        reason: reason.into(),
    }
}

/// The block compressor a level selects, with its reusable state.
enum BlockCompressor {
    /// Level 9: the fast LZ4 compressor, as Kafka's Java client picks for it.
    Fast(CompressTable),
    /// Any other level: LZ4 HC, with liblz4's state allocated once.
    Hc { state: Vec<u64>, level: c_int },
}

impl std::fmt::Debug for BlockCompressor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BlockCompressor::Fast(_) => f.write_str("Fast"),
            BlockCompressor::Hc { level, .. } => write!(f, "Hc({level})"),
        }
    }
}

/// Writes one LZ4 frame per call.
#[derive(Debug)]
pub(crate) struct Lz4Compressor {
    blocks: BlockCompressor,
    /// `compression.lz4.block` as the frame's block size code, 4..=7.
    block_code: u8,
    block_bytes: usize,
}

impl Lz4Compressor {
    pub(crate) fn new(level: i32, block_code: u8) -> Lz4Compressor {
        let blocks = if level == LZ4_LEVEL_DEFAULT {
            BlockCompressor::Fast(CompressTable::large())
        } else {
            // SAFETY: a plain query of a constant.
            let size = usize::try_from(unsafe { LZ4_sizeofStateHC() }).unwrap_or(0);
            // u64 words give the 8-byte alignment liblz4 requires of the state.
            let mut state = vec![0u64; size.div_ceil(8)];
            // SAFETY: `state` is `size` bytes (rounded up), aligned to 8, and owned by
            // the compressor for as long as liblz4 uses it.
            unsafe { LZ4_initStreamHC(state.as_mut_ptr().cast(), size) };
            BlockCompressor::Hc { state, level }
        };
        Lz4Compressor {
            blocks,
            block_code,
            block_bytes: 1 << (8 + 2 * usize::from(block_code)),
        }
    }

    pub(crate) fn compress(&mut self, input: &[u8], out: &mut Vec<u8>) -> Result<(), CodecError> {
        let descriptor = [FLG_WRITTEN, self.block_code << 4];
        let header_checksum = (xxh32(&descriptor, 0) >> 8) as u8;
        out.extend_from_slice(&MAGIC);
        out.extend_from_slice(&descriptor);
        out.push(header_checksum);
        for block in input.chunks(self.block_bytes) {
            let size_at = out.len();
            out.extend_from_slice(&[0; 4]);
            let written = self.compress_block(block, out)?;
            let size = if written > 0 && written < block.len() {
                written as u32
            } else {
                // Not smaller: liblz4 and Java store such a block as is.
                out.truncate(size_at + 4);
                out.extend_from_slice(block);
                block.len() as u32 | STORED_BLOCK
            };
            out[size_at..size_at + 4].copy_from_slice(&size.to_le_bytes());
        }
        out.extend_from_slice(&END_MARK);
        Ok(())
    }

    /// Appends `block` compressed to `out`; returns the compressed length, or 0 if it
    /// did not fit in the block's own size (then the caller stores it).
    fn compress_block(&mut self, block: &[u8], out: &mut Vec<u8>) -> Result<usize, CodecError> {
        match &mut self.blocks {
            BlockCompressor::Fast(table) => {
                let at = out.len();
                out.resize(
                    at + lz4_flex::block::get_maximum_output_size(block.len()),
                    0,
                );
                let written = compress_into_with_table(block, &mut out[at..], table)
                    .map_err(|e| compress_error(e.to_string()))?;
                out.truncate(at + written);
                Ok(written)
            }
            BlockCompressor::Hc { state, level } => {
                // Blocks are at most 4 MiB, far inside c_int.
                let src_size = c_int::try_from(block.len())
                    .map_err(|_| compress_error("block larger than liblz4 accepts"))?;
                // A capacity one short of the block makes liblz4 give up (return 0)
                // on blocks that would not shrink.
                let capacity = block.len().saturating_sub(1);
                let level = *level;
                // SAFETY: liblz4 writes at most `capacity` bytes to `dst` and returns
                // how many it wrote (0 on failure); `state` was initialized by
                // LZ4_initStreamHC and is used by one call at a time.
                let written = unsafe {
                    append_with(out, capacity, |spare| {
                        let n = LZ4_compress_HC_extStateHC_fastReset(
                            state.as_mut_ptr().cast(),
                            block.as_ptr().cast(),
                            spare.as_mut_ptr().cast(),
                            src_size,
                            capacity as c_int,
                            level,
                        );
                        let n = usize::try_from(n).unwrap_or(0);
                        (n, n)
                    })
                };
                Ok(written)
            }
        }
    }
}

/// What a frame descriptor says about the blocks that follow.
struct FrameDescriptor {
    block_max: usize,
    block_checksum: bool,
    content_size: Option<u64>,
    content_checksum: bool,
    /// Bytes from the magic to the first block.
    header_len: usize,
}

fn parse_descriptor(input: &[u8]) -> Result<FrameDescriptor, CodecError> {
    let magic = input
        .get(..4)
        .ok_or_else(|| corrupt("truncated frame magic"))?;
    if magic != MAGIC {
        return Err(corrupt(format!(
            "bad frame magic {magic:02x?}, expected 04 22 4d 18"
        )));
    }
    let (flg, bd) = match input.get(4..6) {
        Some(&[flg, bd]) => (flg, bd),
        _ => return Err(corrupt("truncated frame descriptor")),
    };
    if flg & FLG_VERSION_MASK != FLG_VERSION_01 {
        return Err(corrupt(format!(
            "unsupported frame version in FLG {flg:#04x}"
        )));
    }
    if flg & FLG_RESERVED != 0 || bd & BD_RESERVED != 0 {
        return Err(corrupt(format!(
            "reserved bits set in FLG {flg:#04x} / BD {bd:#04x}"
        )));
    }
    if flg & FLG_BLOCK_INDEPENDENT == 0 {
        // Kafka's Java client refuses linked blocks too.
        return Err(corrupt("linked (dependent) blocks are not supported"));
    }
    if flg & FLG_DICT_ID != 0 {
        return Err(corrupt("frames with a dictionary id are not supported"));
    }
    let block_code = bd >> 4;
    if !(4..=7).contains(&block_code) {
        return Err(corrupt(format!("invalid block size code {block_code}")));
    }
    let mut len = 6;
    let content_size = if flg & FLG_CONTENT_SIZE != 0 {
        let bytes = input
            .get(len..len + 8)
            .ok_or_else(|| corrupt("truncated content size"))?;
        len += 8;
        let mut size = [0; 8];
        size.copy_from_slice(bytes);
        Some(u64::from_le_bytes(size))
    } else {
        None
    };
    let header_checksum = *input
        .get(len)
        .ok_or_else(|| corrupt("truncated frame header checksum"))?;
    let expected = (xxh32(&input[4..len], 0) >> 8) as u8;
    if header_checksum != expected {
        return Err(corrupt(format!(
            "frame header checksum {header_checksum:#04x}, expected {expected:#04x}"
        )));
    }
    Ok(FrameDescriptor {
        block_max: 1 << (8 + 2 * usize::from(block_code)),
        block_checksum: flg & FLG_BLOCK_CHECKSUM != 0,
        content_size,
        content_checksum: flg & FLG_CONTENT_CHECKSUM != 0,
        header_len: len + 1,
    })
}

fn read_u32_le(input: &[u8], at: usize, what: &str) -> Result<u32, CodecError> {
    match input.get(at..at.saturating_add(4)) {
        Some(&[a, b, c, d]) => Ok(u32::from_le_bytes([a, b, c, d])),
        _ => Err(corrupt(format!("truncated {what}"))),
    }
}

/// Reads the first LZ4 frame of `input` into `out`, appending at most `limit` bytes.
/// Bytes after the frame's end mark are ignored, as Kafka's Java client does.
pub(crate) fn decompress(
    input: &[u8],
    limit: usize,
    out: &mut Vec<u8>,
) -> Result<usize, CodecError> {
    let frame = parse_descriptor(input)?;
    let limit_exceeded = CodecError::LimitExceeded {
        codec: Codec::Lz4,
        limit,
    };
    if frame.content_size.is_some_and(|size| size > limit as u64) {
        return Err(limit_exceeded);
    }
    let start = out.len();
    let mut pos = frame.header_len;
    loop {
        let size = read_u32_le(input, pos, "block size")?;
        pos += 4;
        if size == 0 {
            break;
        }
        let stored = size & STORED_BLOCK != 0;
        let size = (size & !STORED_BLOCK) as usize;
        if size > frame.block_max {
            return Err(corrupt(format!(
                "block of {size} bytes exceeds the frame's {}-byte block size",
                frame.block_max
            )));
        }
        let block = input.get(pos..pos + size).ok_or_else(|| {
            corrupt(format!(
                "block of {size} bytes overruns the {} bytes left",
                input.len() - pos
            ))
        })?;
        pos += size;
        if frame.block_checksum {
            let stored_sum = read_u32_le(input, pos, "block checksum")?;
            pos += 4;
            if stored_sum != xxh32(block, 0) {
                return Err(corrupt("block checksum mismatch"));
            }
        }
        let room = limit - (out.len() - start);
        if stored {
            if block.len() > room {
                return Err(limit_exceeded);
            }
            reserve_within(out, block.len(), room);
            out.extend_from_slice(block);
        } else {
            let at = out.len();
            let capacity = frame.block_max.min(room);
            reserve_within(out, capacity, room);
            out.resize(at + capacity, 0);
            match decompress_into(block, &mut out[at..]) {
                Ok(written) => out.truncate(at + written),
                Err(e) => {
                    out.truncate(at);
                    // Only a block that would fill its full size may be cut short by the limit.
                    return Err(
                        if capacity < frame.block_max
                            && matches!(e, lz4_flex::block::DecompressError::OutputTooSmall { .. })
                        {
                            limit_exceeded
                        } else {
                            corrupt(format!("invalid block: {e}"))
                        },
                    );
                }
            }
        }
    }
    let content = &out[start..];
    if let Some(size) = frame.content_size {
        if size != content.len() as u64 {
            return Err(corrupt(format!(
                "frame declares {size} content bytes but holds {}",
                content.len()
            )));
        }
    }
    if frame.content_checksum {
        let stored_sum = read_u32_le(input, pos, "content checksum")?;
        if stored_sum != xxh32(content, 0) {
            return Err(corrupt("content checksum mismatch"));
        }
    }
    Ok(content.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame_header(flg: u8, bd: u8, content_size: Option<u64>) -> Vec<u8> {
        let mut frame = MAGIC.to_vec();
        frame.extend([flg, bd]);
        if let Some(size) = content_size {
            frame.extend(size.to_le_bytes());
        }
        frame.push((xxh32(&frame[4..], 0) >> 8) as u8);
        frame
    }

    #[test]
    fn a_frame_claiming_a_huge_content_size_is_refused_up_front() {
        let mut frame = frame_header(0x68, 0x40, Some(1 << 40));
        frame.extend(END_MARK);
        let mut out = Vec::new();
        assert_eq!(
            decompress(&frame, 1 << 20, &mut out),
            Err(CodecError::LimitExceeded {
                codec: Codec::Lz4,
                limit: 1 << 20
            })
        );
        assert_eq!(out.capacity(), 0);
    }

    #[test]
    fn descriptor_checks_name_the_problem() {
        let cases: [(Vec<u8>, &str); 6] = [
            (frame_header(0xA0, 0x40, None), "version"),
            (frame_header(0x62, 0x40, None), "reserved"),
            (frame_header(0x60, 0x41, None), "reserved"),
            (frame_header(0x61, 0x40, None), "dictionary"),
            (frame_header(0x60, 0x30, None), "block size code"),
            (
                vec![0x04, 0x22, 0x4D, 0x18, 0x60, 0x40, 0x00],
                "header checksum",
            ),
        ];
        for (mut frame, reason) in cases {
            frame.extend(END_MARK);
            let err = decompress(&frame, 100, &mut Vec::new()).unwrap_err();
            assert!(err.to_string().contains(reason), "{reason}: {err}");
        }
        let mut ok = frame_header(0x60, 0x70, None);
        ok.extend(END_MARK);
        assert_eq!(decompress(&ok, 0, &mut Vec::new()), Ok(0));
    }

    #[test]
    fn block_larger_than_the_frame_block_size_is_corrupt() {
        let mut frame = frame_header(0x60, 0x40, None);
        frame.extend((65537u32 | STORED_BLOCK).to_le_bytes());
        frame.extend(vec![0; 65537]);
        frame.extend(END_MARK);
        let err = decompress(&frame, 1 << 20, &mut Vec::new()).unwrap_err();
        assert!(err.to_string().contains("exceeds"), "{err}");
    }
}
