//! lz4: one LZ4 frame with independent blocks and no checksums written (what Java's
//! producer writes); the first frame of a stream read, with the optional fields and
//! checksums the frame format allows.
//!
//! Copies per byte: compressing at level 9, lz4_flex needs an initialized output
//! slice, so each block's room in `out` is zero-filled first (one memset); liblz4 HC
//! writes into `out`'s spare capacity directly. A block that does not shrink is copied
//! in stored form (one copy). Decompressing, liblz4 writes each block straight into
//! `out`'s spare capacity (one copy, no memset); stored blocks are copied once. A block
//! is first decoded into 64 KiB of room (or whatever larger room `out` already has
//! spare), never more than the block's bytes can decode to (255 per byte); one that
//! needs more is sized exactly from its sequence headers (a walk that
//! copies nothing) and decoded again into exactly that room, so its first 64 KiB are
//! decoded twice.

use std::ffi::{c_char, c_int, c_void};

use lz4_flex::block::{compress_into_with_table, CompressTable};

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
    /// liblz4 refused to set up the HC state: compressing any block reports why.
    Unusable(CodecError),
}

impl std::fmt::Debug for BlockCompressor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BlockCompressor::Fast(_) => f.write_str("Fast"),
            BlockCompressor::Hc { level, .. } => write!(f, "Hc({level})"),
            BlockCompressor::Unusable(e) => write!(f, "Unusable({e})"),
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

impl BlockCompressor {
    /// LZ4 HC at `level`, with a state of `size` bytes set up by liblz4, which refuses
    /// (NULL) a buffer too small or misaligned for it.
    fn hc(level: c_int, size: usize) -> BlockCompressor {
        // u64 words give the 8-byte alignment liblz4 requires of the state.
        let mut state = vec![0u64; size.div_ceil(8)];
        // SAFETY: `state` is `size` bytes (rounded up), aligned to 8, and owned by
        // the compressor for as long as liblz4 uses it; liblz4 writes nothing to a
        // buffer it refuses.
        let stream = unsafe { LZ4_initStreamHC(state.as_mut_ptr().cast(), size) };
        if stream.is_null() {
            return BlockCompressor::Unusable(compress_error(format!(
                "LZ4_initStreamHC refused a {size}-byte state"
            )));
        }
        BlockCompressor::Hc { state, level }
    }
}

impl Lz4Compressor {
    pub(crate) fn new(level: i32, block_code: u8) -> Lz4Compressor {
        let blocks = if level == LZ4_LEVEL_DEFAULT {
            BlockCompressor::Fast(CompressTable::large())
        } else {
            // SAFETY: a plain query of a constant.
            let size = usize::try_from(unsafe { LZ4_sizeofStateHC() }).unwrap_or(0);
            BlockCompressor::hc(level, size)
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
            BlockCompressor::Unusable(e) => Err(e.clone()),
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
                // Geometric: `out` may collect many batches, and an exact reservation per batch
                // would move everything before it each time.
                out.reserve(capacity);
                // SAFETY: liblz4 writes at most `capacity` bytes to `dst` and returns
                // how many it wrote (0 on failure); `state` was accepted by
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

/// The room a block is first decoded into, unless `out` already has more spare: most
/// Kafka batches fit, and liblz4 leaves the unused part untouched, so it costs less
/// than walking the block to size it exactly.
const FIRST_ROOM: usize = 64 << 10;

enum BlockError {
    /// The block decodes to more than the caller's limit leaves room for.
    PastLimit,
    Corrupt(CodecError),
}

impl From<CodecError> for BlockError {
    fn from(e: CodecError) -> BlockError {
        BlockError::Corrupt(e)
    }
}

/// Appends the compressed LZ4 block `block` decoded to `out`, writing and reserving
/// at most `room` bytes. On error `out` may hold part of the block.
fn decompress_block(
    block: &[u8],
    block_max: usize,
    room: usize,
    out: &mut Vec<u8>,
) -> Result<(), BlockError> {
    let first_room = block_max
        .min(room)
        .min(max_block_decoded_len(block.len()))
        .min(FIRST_ROOM.max(out.capacity() - out.len()));
    reserve_within(out, first_room, room);
    if decode_into_spare(block, first_room, out).is_some() {
        return Ok(());
    }
    // Corrupt, past the limit, or larger than the first room (rather than reserving
    // the frame's maximum block size, up to 4 MiB, for every block): the block's
    // sequences say which.
    let decoded = block_decoded_len(block, block_max)?;
    if decoded > room {
        return Err(BlockError::PastLimit);
    }
    if decoded <= first_room {
        return Err(BlockError::Corrupt(corrupt("invalid block")));
    }
    reserve_within(out, decoded, room);
    match decode_into_spare(block, decoded, out) {
        Some(written) if written == decoded => Ok(()),
        Some(written) => Err(BlockError::Corrupt(corrupt(format!(
            "block decoded to {written} bytes, its sequences say {decoded}"
        )))),
        None => Err(BlockError::Corrupt(corrupt("invalid block"))),
    }
}

/// liblz4 decodes `block` straight into at most `capacity` bytes of `out`'s spare
/// capacity, which must already be reserved; returns the bytes appended, or `None`
/// (nothing appended) if the block is malformed or needs more room.
fn decode_into_spare(block: &[u8], capacity: usize, out: &mut Vec<u8>) -> Option<usize> {
    // Blocks and rooms are at most 4 MiB, far inside c_int.
    let src_size = c_int::try_from(block.len()).ok()?;
    let dst_capacity = c_int::try_from(capacity).ok()?;
    // SAFETY: LZ4_decompress_safe reads at most `src_size` bytes of `block`, writes at
    // most `dst_capacity` bytes of `spare` (the first `capacity` bytes of spare
    // capacity) on any input, and returns how many it wrote, or a negative number.
    unsafe {
        append_with(out, capacity, |spare| {
            let n = lz4_sys::LZ4_decompress_safe(
                block.as_ptr().cast(),
                spare.as_mut_ptr().cast(),
                src_size,
                dst_capacity,
            );
            let written = usize::try_from(n).ok();
            (written.unwrap_or(0), written)
        })
    }
}

/// The most a compressed LZ4 block of `len` bytes can decode to. A literal writes one
/// byte per byte; a match writes at most 19 bytes from its 3 (token and offset) and 255
/// more per length byte, so no byte of a block decodes to more than 255.
fn max_block_decoded_len(len: usize) -> usize {
    len.saturating_mul(255)
}

/// The number of bytes the compressed LZ4 block `block` decodes to, read from its
/// sequence headers alone (literal bytes are skipped, nothing is copied). A block
/// whose headers overrun it, end without a final literals-only sequence, point a
/// match before the block's start, or decode past `block_max` is corrupt.
fn block_decoded_len(block: &[u8], block_max: usize) -> Result<usize, CodecError> {
    let mut pos = 0;
    let mut decoded: usize = 0;
    loop {
        let token = *block
            .get(pos)
            .ok_or_else(|| corrupt("block ends without a final literals-only sequence"))?;
        pos += 1;
        let literals = sequence_len(block, &mut pos, token >> 4)?;
        pos = pos
            .checked_add(literals)
            .filter(|&end| end <= block.len())
            .ok_or_else(|| corrupt(format!("{literals} literal bytes overrun the block")))?;
        decoded = decoded.saturating_add(literals);
        if pos == block.len() {
            break;
        }
        let offset = match block.get(pos..pos + 2) {
            Some(&[low, high]) => usize::from(u16::from_le_bytes([low, high])),
            _ => return Err(corrupt("truncated match offset")),
        };
        pos += 2;
        if offset == 0 || offset > decoded {
            return Err(corrupt(format!(
                "match offset {offset} outside the {decoded} bytes decoded"
            )));
        }
        let matched = sequence_len(block, &mut pos, token & 0x0F)?.saturating_add(4);
        decoded = decoded.saturating_add(matched);
        if decoded > block_max {
            return Err(decodes_past(block_max));
        }
    }
    if decoded > block_max {
        return Err(decodes_past(block_max));
    }
    Ok(decoded)
}

fn decodes_past(block_max: usize) -> CodecError {
    corrupt(format!(
        "block decodes past the frame's {block_max}-byte block size"
    ))
}

/// A literal or match length: the token's nibble, extended by bytes while they are
/// 255 (the nibble and each byte are added) when the nibble is 15.
fn sequence_len(block: &[u8], pos: &mut usize, nibble: u8) -> Result<usize, CodecError> {
    let mut len = usize::from(nibble);
    if nibble == 0x0F {
        loop {
            let byte = *block
                .get(*pos)
                .ok_or_else(|| corrupt("truncated sequence length"))?;
            *pos += 1;
            len = len.saturating_add(usize::from(byte));
            if byte != 0xFF {
                break;
            }
        }
    }
    Ok(len)
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
    if let Some(size) = frame.content_size {
        if size > limit as u64 {
            return Err(limit_exceeded);
        }
        // Never used to size anything, but a tiny frame declaring megabytes is refused
        // before any block is decoded.
        let most = max_block_decoded_len(input.len());
        if size > most as u64 {
            return Err(corrupt(format!(
                "frame declares {size} content bytes, but its {} bytes can produce at most {most}",
                input.len()
            )));
        }
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
            if let Err(e) = decompress_block(block, frame.block_max, room, out) {
                out.truncate(at);
                return Err(match e {
                    BlockError::PastLimit => limit_exceeded,
                    BlockError::Corrupt(e) => e,
                });
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
    use lz4_flex::block::decompress_into;
    use proptest::prelude::*;

    /// The compressed (not stored) blocks of one of our frames.
    fn compressed_blocks(frame: &[u8]) -> Vec<&[u8]> {
        let mut blocks = Vec::new();
        let mut pos = 7;
        loop {
            let size = read_u32_le(frame, pos, "block size").unwrap();
            pos += 4;
            if size == 0 {
                return blocks;
            }
            let len = (size & !STORED_BLOCK) as usize;
            if size & STORED_BLOCK == 0 {
                blocks.push(&frame[pos..pos + len]);
            }
            pos += len;
        }
    }

    /// What lz4_flex decodes `block` to, given all the room a block may need.
    fn decoded_by_lz4_flex(block: &[u8], block_max: usize) -> Option<usize> {
        decompress_into(block, &mut vec![0; block_max]).ok()
    }

    /// Walks every compressed block of `input` framed at every block size code, by
    /// the fast and an HC compressor; returns how many blocks were checked.
    fn assert_walk_agrees(input: &[u8]) -> usize {
        let mut checked = 0;
        for block_code in 4..=7u8 {
            let block_max = 1 << (8 + 2 * usize::from(block_code));
            for level in [LZ4_LEVEL_DEFAULT, 12] {
                let mut frame = Vec::new();
                Lz4Compressor::new(level, block_code)
                    .compress(input, &mut frame)
                    .unwrap();
                for block in compressed_blocks(&frame) {
                    let expected = decoded_by_lz4_flex(block, block_max).unwrap();
                    assert_eq!(block_decoded_len(block, block_max), Ok(expected));
                    checked += 1;
                }
                let mut out = Vec::new();
                assert_eq!(decompress(&frame, input.len(), &mut out), Ok(input.len()));
                assert!(out == input && out.capacity() <= input.len().max(FIRST_ROOM));
                if let Some(limit) = input.len().checked_sub(1) {
                    let mut out = Vec::new();
                    assert_eq!(
                        decompress(&frame, limit, &mut out),
                        Err(CodecError::LimitExceeded {
                            codec: Codec::Lz4,
                            limit
                        })
                    );
                    assert!(out.capacity() <= limit);
                }
            }
        }
        checked
    }

    #[test]
    fn walk_agrees_with_the_decoder_on_the_datasets_at_every_block_size() {
        let dir = std::env::var_os("KPRESS_DATASETS")
            .map(std::path::PathBuf::from)
            .unwrap_or_else(|| {
                std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../datasets")
            });
        let mut checked = 0;
        for name in ["apache_access.log", "nginxplus_status.ndjson"] {
            let path = dir.join(name);
            let data = std::fs::read(&path).unwrap_or_else(|e| {
                panic!(
                    "dataset {} (KPRESS_DATASETS overrides): {e}",
                    path.display()
                )
            });
            checked += assert_walk_agrees(&data);
            // A small batch, as the proxy mostly sees.
            checked += assert_walk_agrees(&data[..data.len().min(16 << 10)]);
        }
        assert!(checked > 0, "no dataset block walked");
    }

    /// Hand-built sequences: one token, its length bytes, literals, offset.
    fn sequence(literals: &[u8], matched: Option<(u16, usize)>) -> Vec<u8> {
        fn extend_len(out: &mut Vec<u8>, mut rest: usize) {
            while rest >= 255 {
                out.push(255);
                rest -= 255;
            }
            out.push(rest as u8);
        }
        let match_nibble = matched.map_or(0, |(_, len)| (len - 4).min(15));
        let mut out = vec![((literals.len().min(15) as u8) << 4) | match_nibble as u8];
        if literals.len() >= 15 {
            extend_len(&mut out, literals.len() - 15);
        }
        out.extend_from_slice(literals);
        if let Some((offset, len)) = matched {
            out.extend(offset.to_le_bytes());
            if len - 4 >= 15 {
                extend_len(&mut out, len - 19);
            }
        }
        out
    }

    #[test]
    fn walk_reads_hand_built_sequences() {
        let block = [
            sequence(b"abcd", Some((4, 4 + 15 + 255 + 1000))),
            sequence(&[b'x'; 300], Some((1, 4))),
            sequence(b"end", None),
        ]
        .concat();
        let expected = 4 + 4 + 15 + 255 + 1000 + 300 + 4 + 3;
        assert_eq!(block_decoded_len(&block, 1 << 16), Ok(expected));
        assert_eq!(decoded_by_lz4_flex(&block, 1 << 16), Some(expected));
        // The smallest block: a lone token with no literals.
        assert_eq!(block_decoded_len(&[0], 1 << 16), Ok(0));
    }

    #[test]
    fn walk_refuses_hostile_blocks() {
        let good = [sequence(b"abcd", Some((4, 40))), sequence(b"end", None)].concat();
        let cases: Vec<(Vec<u8>, &str)> = vec![
            // A literal length whose extension runs off the block.
            (vec![0xF0, 0xFF, 0xFF], "truncated sequence length"),
            // Literal length larger than the block holds.
            (vec![0xF0, 0xFF, 0x10, b'a'], "overrun"),
            // Match length extension truncated.
            (vec![0x1F, b'a', 1, 0, 0xFF], "truncated sequence length"),
            // Offset cut in half.
            (vec![0x10, b'a', 1], "truncated match offset"),
            (vec![0x00, 0, 0], "offset"),
            (vec![0x20, b'a', b'b', 3, 0, 0x00], "offset 3 outside"),
            // The block ends with a match: no final literals-only sequence.
            (good[..good.len() - 4].to_vec(), "final literals-only"),
            // Matches that decode past the block size: 16448 extension bytes.
            (
                [vec![0x1F, b'a', 1, 0], vec![0xFF; 16448], vec![0x00, 0x00]].concat(),
                "decodes past",
            ),
        ];
        for (block, reason) in cases {
            let err = block_decoded_len(&block, 1 << 16).unwrap_err();
            assert!(err.to_string().contains(reason), "{reason}: {err}");
            // Not stricter than the decoder: lz4_flex refuses each of them too.
            assert_eq!(decoded_by_lz4_flex(&block, 1 << 16), None, "{reason}");
        }
        // The same block is fine at a larger block size.
        let long = [vec![0x1F, b'a', 1, 0], vec![0xFF; 16448], vec![0x00, 0x00]].concat();
        assert_eq!(
            block_decoded_len(&long, 1 << 22),
            Ok(1 + 15 + 4 + 255 * 16448)
        );
    }

    #[test]
    fn a_block_decoding_past_the_limit_takes_no_more_than_its_first_room() {
        let input = vec![7u8; 1 << 20];
        let mut frame = Vec::new();
        Lz4Compressor::new(LZ4_LEVEL_DEFAULT, 7)
            .compress(&input, &mut frame)
            .unwrap();
        let mut out = Vec::new();
        assert_eq!(
            decompress(&frame, (1 << 20) - 1, &mut out),
            Err(CodecError::LimitExceeded {
                codec: Codec::Lz4,
                limit: (1 << 20) - 1
            })
        );
        assert_eq!(out.capacity(), FIRST_ROOM);
        assert_eq!(decompress(&frame, 1 << 20, &mut out), Ok(1 << 20));
        assert_eq!(out, input);
        // Sized exactly, not to the frame's 4 MiB block size.
        assert_eq!(out.capacity(), 1 << 20);
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

        #[test]
        fn walk_agrees_with_the_decoder_on_random_data(
            // Runs of a few repeated symbols: compressible, with literal and match
            // lengths both short and past 15.
            runs in prop::collection::vec((any::<u8>(), 1usize..600, 0u8..4), 0..400),
            noise in prop::collection::vec(any::<u8>(), 0..3000),
        ) {
            let mut input: Vec<u8> = runs
                .iter()
                .flat_map(|&(byte, len, spread)| {
                    (0..len).map(move |i| byte.wrapping_add((i % (usize::from(spread) + 1)) as u8))
                })
                .collect();
            input.extend(&noise);
            assert_walk_agrees(&input);
        }
    }

    /// One compressed block of log-like text that decodes to 300 KiB, past the first
    /// room, so decoding it takes the walk and the exact room.
    fn large_block() -> &'static [u8] {
        static BLOCK: std::sync::OnceLock<Vec<u8>> = std::sync::OnceLock::new();
        BLOCK.get_or_init(|| {
            let text: Vec<u8> = (0..20_000u32)
                .flat_map(|i| {
                    format!("10.0.{}.{} GET /p/{} {}\n", i % 7, i % 251, i % 97, i * 13)
                        .into_bytes()
                })
                .take(300 << 10)
                .collect();
            let mut frame = Vec::new();
            Lz4Compressor::new(LZ4_LEVEL_DEFAULT, 7)
                .compress(&text, &mut frame)
                .unwrap();
            let blocks = compressed_blocks(&frame);
            assert_eq!(blocks.len(), 1);
            blocks[0].to_vec()
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

        #[test]
        fn damaged_large_blocks_are_errors_never_panics(
            edits in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..8),
            cut in any::<prop::sample::Index>(),
            limit in 0usize..(1 << 20),
        ) {
            let mut block = large_block().to_vec();
            for (at, byte) in edits {
                let at = at.index(block.len());
                block[at] = byte;
            }
            block.truncate(1 + cut.index(block.len()));
            let walked = block_decoded_len(&block, 4 << 20);
            let mut frame = frame_header(0x60, 0x70, None);
            frame.extend((block.len() as u32).to_le_bytes());
            frame.extend(&block);
            frame.extend(END_MARK);
            let mut out = Vec::new();
            match decompress(&frame, limit, &mut out) {
                Ok(n) => prop_assert_eq!((Ok(n), out.len()), (walked, n)),
                Err(CodecError::LimitExceeded { .. }) => prop_assert!(walked.unwrap() > limit),
                Err(_) => {}
            }
            prop_assert!(out.capacity() <= limit);
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 1024, ..ProptestConfig::default() })]

        #[test]
        fn hostile_blocks_are_errors_never_panics(
            block in prop::collection::vec(
                prop_oneof![any::<u8>(), Just(0xFFu8), Just(0xF0u8), Just(0x0Fu8)],
                1..600,
            ),
            block_code in 4u8..=7,
            limit in 0usize..(1 << 23),
        ) {
            let block_max = 1 << (8 + 2 * usize::from(block_code));
            let walked = block_decoded_len(&block, block_max);
            // Whatever lz4_flex accepts, the walk sizes exactly.
            if let Some(decoded) = decoded_by_lz4_flex(&block, block_max) {
                prop_assert_eq!(walked.clone(), Ok(decoded));
            }
            let mut frame = frame_header(0x60, block_code << 4, None);
            frame.extend((block.len() as u32).to_le_bytes());
            frame.extend(&block);
            frame.extend(END_MARK);
            let mut out = Vec::new();
            match decompress(&frame, limit, &mut out) {
                Ok(n) => {
                    prop_assert_eq!(Ok(n), walked);
                    prop_assert_eq!(out.len(), n);
                }
                Err(CodecError::LimitExceeded { .. }) => {
                    prop_assert!(walked.unwrap() > limit);
                    prop_assert!(out.is_empty());
                }
                Err(_) => prop_assert!(out.is_empty()),
            }
            prop_assert!(out.capacity() <= limit);
        }
    }

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
    fn a_content_size_its_blocks_cannot_produce_is_corrupt_before_any_room_is_made() {
        // 60 MiB declared, within the limit, by a frame holding one 5-byte block.
        let mut frame = frame_header(0x68, 0x70, Some(60 << 20));
        frame.extend(5u32.to_le_bytes());
        frame.extend(sequence(b"abcd", None));
        frame.extend(END_MARK);
        let mut out = Vec::new();
        let err = decompress(&frame, 64 << 20, &mut out).unwrap_err();
        assert!(
            matches!(err, CodecError::Corrupt { .. }) && err.to_string().contains("at most"),
            "{err}"
        );
        assert_eq!(out.capacity(), 0);
    }

    #[test]
    fn a_block_gets_no_more_room_than_its_bytes_can_decode_to() {
        // Five bytes decode to at most 5 * 255; a damaged one gets no 64 KiB first room.
        let block = [0x10, b'a', 1, 0, 0xFF];
        let mut frame = frame_header(0x60, 0x70, None);
        frame.extend((block.len() as u32).to_le_bytes());
        frame.extend(block);
        frame.extend(END_MARK);
        let mut out = Vec::new();
        assert!(matches!(
            decompress(&frame, 64 << 20, &mut out),
            Err(CodecError::Corrupt { .. })
        ));
        assert!(out.capacity() <= 5 * 255, "{}", out.capacity());
        // The densest block there is: a 4-byte match extended by 255s, every byte
        // of it decoding to 255, decodes within the bound.
        let dense = [
            vec![0x1F, b'a', 1, 0],
            vec![0xFF; 1000],
            vec![0x00],
            sequence(b"aaaaa", None),
        ]
        .concat();
        let decoded = 1 + 15 + 4 + 255 * 1000 + 5;
        assert!(decoded <= max_block_decoded_len(dense.len()));
        let mut frame = frame_header(0x60, 0x70, None);
        frame.extend((dense.len() as u32).to_le_bytes());
        frame.extend(&dense);
        frame.extend(END_MARK);
        let mut out = Vec::new();
        assert_eq!(decompress(&frame, decoded, &mut out), Ok(decoded));
        assert!(out.iter().all(|&b| b == b'a'));
    }

    #[test]
    fn an_hc_state_liblz4_refuses_is_an_error_on_every_block_never_used() {
        // SAFETY: a plain query of a constant.
        let size = usize::try_from(unsafe { LZ4_sizeofStateHC() }).unwrap();
        for too_small in [0, 8, size - 8] {
            let mut compressor = Lz4Compressor {
                blocks: BlockCompressor::hc(12, too_small),
                block_code: 4,
                block_bytes: 1 << 16,
            };
            for _ in 0..2 {
                let err = compressor.compress(b"abcabcabcabc", &mut Vec::new());
                assert!(
                    matches!(&err, Err(CodecError::Compress { reason, .. }) if reason.contains("LZ4_initStreamHC")),
                    "{too_small}: {err:?}"
                );
            }
        }
        let mut frame = Vec::new();
        Lz4Compressor::new(12, 4)
            .compress(b"abcabcabcabc", &mut frame)
            .unwrap();
        assert_eq!(decompress(&frame, 12, &mut Vec::new()), Ok(12));
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
