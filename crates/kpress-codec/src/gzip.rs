//! gzip: exactly one RFC 1952 member written around a raw deflate stream; one or more
//! members read back.
//!
//! Copies per byte: compressing, deflate writes straight into `out`'s spare capacity
//! and the CRC-32 reads the input once; decompressing, inflate writes straight into
//! `out`'s spare capacity and the CRC-32 reads the output once.

use flate2::{Compress, Compression, Decompress, FlushCompress, FlushDecompress, Status};

use crate::spare::append_with;
use crate::{Codec, CodecError};

const MAGIC: [u8; 2] = [0x1f, 0x8b];
const CM_DEFLATE: u8 = 8;
/// RFC 1952 operating system "unknown": the stream is not tied to a filesystem.
const OS_UNKNOWN: u8 = 255;
const HEADER_LEN: usize = 10;
const TRAILER_LEN: usize = 8;

const FHCRC: u8 = 0x02;
const FEXTRA: u8 = 0x04;
const FNAME: u8 = 0x08;
const FCOMMENT: u8 = 0x10;
const FRESERVED: u8 = 0xE0;

/// Output room inflate gets at first; it doubles with the output so far, up to the limit.
const MIN_INFLATE_STEP: usize = 32 * 1024;

fn corrupt(reason: impl Into<String>) -> CodecError {
    CodecError::Corrupt {
        codec: Codec::Gzip,
        reason: reason.into(),
    }
}

/// Writes one gzip member per call, reusing one deflate state.
#[derive(Debug)]
pub(crate) struct GzipCompressor {
    deflate: Compress,
    level: u32,
    /// `compression.gzip.buffer`: the output room deflate gets per step, as the
    /// buffer of Java's `DeflaterOutputStream` is. The deflate stream does not depend
    /// on it (a test checks this): deflate's output is a function of the input and
    /// where it is flushed, not of the room it writes into. The input, by contrast,
    /// goes to deflate whole: zlib-rs at levels 1, 5 and 6 compresses differently
    /// depending on how the input is split.
    buffer: usize,
}

impl GzipCompressor {
    pub(crate) fn new(level: u32, buffer: usize) -> GzipCompressor {
        GzipCompressor {
            deflate: Compress::new(Compression::new(level), false),
            level,
            buffer,
        }
    }

    pub(crate) fn compress(&mut self, input: &[u8], out: &mut Vec<u8>) -> Result<(), CodecError> {
        self.deflate.reset();
        // XFL as zlib sets it: 2 = slowest, 4 = fastest.
        let xfl = match self.level {
            9 => 2,
            1 => 4,
            _ => 0,
        };
        out.extend_from_slice(&[
            MAGIC[0], MAGIC[1], CM_DEFLATE, 0, 0, 0, 0, 0, xfl, OS_UNKNOWN,
        ]);
        let mut rest = input;
        loop {
            out.reserve(self.buffer);
            let (in_before, out_before) = (self.deflate.total_in(), self.deflate.total_out());
            let status = self
                .deflate
                .compress_vec(rest, out, FlushCompress::Finish)
                .map_err(|e| CodecError::Compress {
                    codec: Codec::Gzip,
                    reason: e.to_string(),
                })?;
            let consumed = (self.deflate.total_in() - in_before) as usize;
            rest = &rest[consumed..];
            if status == Status::StreamEnd {
                break;
            }
            if consumed == 0 && self.deflate.total_out() == out_before {
                return Err(CodecError::Compress {
                    codec: Codec::Gzip,
                    reason: "deflate made no progress".into(),
                });
            }
        }
        out.extend_from_slice(&crc32fast::hash(input).to_le_bytes());
        // ISIZE is the input length modulo 2^32.
        out.extend_from_slice(&(input.len() as u32).to_le_bytes());
        Ok(())
    }
}

/// Reads one or more gzip members into `out`, appending at most `limit` bytes.
pub(crate) fn decompress(
    inflate: &mut Decompress,
    input: &[u8],
    limit: usize,
    out: &mut Vec<u8>,
) -> Result<usize, CodecError> {
    if input.is_empty() {
        return Err(corrupt("empty payload"));
    }
    let start = out.len();
    let mut pos = 0;
    while pos < input.len() {
        pos += parse_header(&input[pos..])?;
        let member_start = out.len();
        let room = limit - (member_start - start);
        pos += inflate_member(inflate, &input[pos..], room, out).map_err(|e| match e {
            CodecError::LimitExceeded { codec, .. } => CodecError::LimitExceeded { codec, limit },
            e => e,
        })?;
        let trailer = input
            .get(pos..pos + TRAILER_LEN)
            .ok_or_else(|| corrupt("truncated member trailer"))?;
        let member = &out[member_start..];
        let crc = u32::from_le_bytes([trailer[0], trailer[1], trailer[2], trailer[3]]);
        let isize = u32::from_le_bytes([trailer[4], trailer[5], trailer[6], trailer[7]]);
        let actual_crc = crc32fast::hash(member);
        if crc != actual_crc {
            return Err(corrupt(format!(
                "CRC-32 mismatch: trailer says {crc:#010x}, data has {actual_crc:#010x}"
            )));
        }
        if isize != member.len() as u32 {
            return Err(corrupt(format!(
                "ISIZE mismatch: trailer says {isize}, member has {} bytes",
                member.len()
            )));
        }
        pos += TRAILER_LEN;
    }
    Ok(out.len() - start)
}

/// Checks one member header and returns its length.
fn parse_header(input: &[u8]) -> Result<usize, CodecError> {
    let fixed = input
        .get(..HEADER_LEN)
        .ok_or_else(|| corrupt("truncated member header"))?;
    if fixed[..2] != MAGIC {
        return Err(corrupt(format!(
            "bad magic {:02x} {:02x}, expected 1f 8b",
            fixed[0], fixed[1]
        )));
    }
    if fixed[2] != CM_DEFLATE {
        return Err(corrupt(format!(
            "compression method {}, only 8 (deflate) exists",
            fixed[2]
        )));
    }
    let flags = fixed[3];
    if flags & FRESERVED != 0 {
        return Err(corrupt(format!("reserved header flags set: {flags:#04x}")));
    }
    let mut len = HEADER_LEN;
    if flags & FEXTRA != 0 {
        let xlen = input
            .get(len..len + 2)
            .ok_or_else(|| corrupt("truncated FEXTRA length"))?;
        len += 2 + usize::from(u16::from_le_bytes([xlen[0], xlen[1]]));
        if len > input.len() {
            return Err(corrupt("truncated FEXTRA field"));
        }
    }
    for (flag, name) in [(FNAME, "FNAME"), (FCOMMENT, "FCOMMENT")] {
        if flags & flag != 0 {
            let nul = input[len..]
                .iter()
                .position(|&b| b == 0)
                .ok_or_else(|| corrupt(format!("unterminated {name} field")))?;
            len += nul + 1;
        }
    }
    if flags & FHCRC != 0 {
        let stored = input
            .get(len..len + 2)
            .ok_or_else(|| corrupt("truncated header CRC"))?;
        let stored = u16::from_le_bytes([stored[0], stored[1]]);
        let actual = crc32fast::hash(&input[..len]) as u16;
        if stored != actual {
            return Err(corrupt(format!(
                "header CRC mismatch: {stored:#06x} stored, {actual:#06x} computed"
            )));
        }
        len += 2;
    }
    Ok(len)
}

/// Inflates one raw deflate stream into `out`, at most `room` bytes; returns the
/// input bytes it consumed.
fn inflate_member(
    inflate: &mut Decompress,
    input: &[u8],
    room: usize,
    out: &mut Vec<u8>,
) -> Result<usize, CodecError> {
    inflate.reset(false);
    let mut consumed = 0;
    let mut produced = 0;
    loop {
        let rest = &input[consumed..];
        let (in_before, out_before) = (inflate.total_in(), inflate.total_out());
        let space = room - produced;
        let status = if space == 0 {
            // At the limit: the stream must end without another byte of output.
            let mut probe = [0u8; 1];
            inflate.decompress(rest, &mut probe, FlushDecompress::None)
        } else {
            let step = space.min(MIN_INFLATE_STEP.max(produced));
            // SAFETY: inflate initializes exactly the bytes total_out advances by,
            // and never more than the slice it is given.
            unsafe {
                append_with(out, step, |spare| {
                    let result = inflate.decompress_uninit(rest, spare, FlushDecompress::None);
                    ((inflate.total_out() - out_before) as usize, result)
                })
            }
        }
        .map_err(|e| corrupt(format!("invalid deflate stream: {e}")))?;
        let stepped_in = (inflate.total_in() - in_before) as usize;
        let stepped_out = (inflate.total_out() - out_before) as usize;
        if space == 0 && stepped_out > 0 {
            return Err(CodecError::LimitExceeded {
                codec: Codec::Gzip,
                limit: room,
            });
        }
        consumed += stepped_in;
        produced += stepped_out;
        if status == Status::StreamEnd {
            return Ok(consumed);
        }
        if stepped_in == 0 && stepped_out == 0 {
            return Err(corrupt("truncated deflate stream"));
        }
    }
}
