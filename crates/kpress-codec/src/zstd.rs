//! zstd: one standard frame with its content size written (librdkafka sizes its output
//! from it), window at most 2^27; frames back to back read, window at most 2^27 (the
//! limit of Kafka's Java client).
//!
//! Copies per byte: none beyond the codec's own; zstd writes straight into `out`'s
//! spare capacity both ways.

use std::mem::MaybeUninit;

use zstd::zstd_safe::{
    self, get_error_name, CCtx, CParameter, DCtx, DParameter, InBuffer, OutBuffer, ResetDirective,
    WriteBuf,
};

use crate::spare::append_with;
use crate::{Codec, CodecError};

/// The largest window Kafka's Java client (zstd-jni's default) decodes.
pub(crate) const WINDOW_LOG_MAX: u32 = 27;
/// Output room a frame without a content size gets at first; it doubles with the
/// output so far, up to the limit.
const MIN_DECODE_STEP: usize = 128 * 1024;

fn corrupt(reason: impl Into<String>) -> CodecError {
    CodecError::Corrupt {
        codec: Codec::Zstd,
        reason: reason.into(),
    }
}

fn compress_error(code: usize) -> CodecError {
    CodecError::Compress {
        codec: Codec::Zstd,
        reason: get_error_name(code).to_owned(),
    }
}

/// A slice of a `Vec`'s spare capacity as zstd's output buffer.
struct SpareBuf<'a> {
    spare: &'a mut [MaybeUninit<u8>],
    filled: usize,
}

// SAFETY: `as_slice` covers only the `filled` bytes zstd reported writing, capacity is
// the slice's own length and the pointer is the slice's start.
unsafe impl WriteBuf for SpareBuf<'_> {
    fn as_slice(&self) -> &[u8] {
        // SAFETY: the first `filled` bytes were written by zstd (see filled_until).
        unsafe { std::slice::from_raw_parts(self.spare.as_ptr().cast(), self.filled) }
    }
    fn capacity(&self) -> usize {
        self.spare.len()
    }
    fn as_mut_ptr(&mut self) -> *mut u8 {
        self.spare.as_mut_ptr().cast()
    }
    unsafe fn filled_until(&mut self, n: usize) {
        self.filled = n;
    }
}

/// Writes one zstd frame per call, reusing one compression context.
pub(crate) struct ZstdCompressor {
    cctx: CCtx<'static>,
    /// Why the options could not be applied, reported by every `compress`.
    setup_error: Option<usize>,
}

impl std::fmt::Debug for ZstdCompressor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ZstdCompressor")
            .field("setup_error", &self.setup_error.map(get_error_name))
            .finish_non_exhaustive()
    }
}

impl ZstdCompressor {
    /// `window` 0 keeps the library's window for the level (at most 2^27 at any
    /// level) with long-distance matching off; 10..=22 enables long-distance matching
    /// with that window log.
    pub(crate) fn new(level: i32, window: u8) -> ZstdCompressor {
        let mut cctx = CCtx::create();
        let mut setup = || -> Result<(), usize> {
            cctx.set_parameter(CParameter::CompressionLevel(level))?;
            cctx.set_parameter(CParameter::ContentSizeFlag(true))?;
            cctx.set_parameter(CParameter::ChecksumFlag(false))?;
            if window != 0 {
                cctx.set_parameter(CParameter::EnableLongDistanceMatching(true))?;
                cctx.set_parameter(CParameter::WindowLog(u32::from(window)))?;
            }
            Ok(())
        };
        let setup_error = setup().err();
        ZstdCompressor { cctx, setup_error }
    }

    pub(crate) fn compress(&mut self, input: &[u8], out: &mut Vec<u8>) -> Result<(), CodecError> {
        if let Some(code) = self.setup_error {
            return Err(compress_error(code));
        }
        let cctx = &mut self.cctx;
        // A failed call leaves the context mid-frame; start every frame afresh.
        cctx.reset(ResetDirective::SessionOnly)
            .map_err(compress_error)?;
        cctx.set_pledged_src_size(Some(input.len() as u64))
            .map_err(compress_error)?;
        let bound = zstd_safe::compress_bound(input.len());
        // Geometric: `out` may collect many batches, and an exact reservation per batch
        // would move everything before it each time.
        out.reserve(bound);
        // SAFETY: zstd reports through `OutBuffer::pos` exactly the bytes it wrote.
        unsafe {
            append_with(out, bound, |spare| {
                let mut buf = SpareBuf { spare, filled: 0 };
                let mut output = OutBuffer::around(&mut buf);
                let mut source = InBuffer::around(input);
                // With the whole bound as room, one call ends the frame (returns 0).
                let result = cctx.compress_stream2(
                    &mut output,
                    &mut source,
                    zstd_safe::zstd_sys::ZSTD_EndDirective::ZSTD_e_end,
                );
                let written = output.pos();
                match result {
                    Ok(0) => (written, Ok(())),
                    Ok(_) => (
                        0,
                        Err(CodecError::Compress {
                            codec: Codec::Zstd,
                            reason: "frame did not fit in compress_bound".into(),
                        }),
                    ),
                    Err(code) => (0, Err(compress_error(code))),
                }
            })
        }
    }
}

/// A zstd decompression context with Java's window limit.
pub(crate) struct ZstdDecompressor {
    dctx: DCtx<'static>,
}

impl std::fmt::Debug for ZstdDecompressor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ZstdDecompressor").finish_non_exhaustive()
    }
}

impl Default for ZstdDecompressor {
    fn default() -> Self {
        let mut dctx = DCtx::create();
        // Both calls only fail for out-of-range values; 27 is in range everywhere.
        let _ = dctx.set_parameter(DParameter::WindowLogMax(WINDOW_LOG_MAX));
        ZstdDecompressor { dctx }
    }
}

impl ZstdDecompressor {
    /// Reads every zstd frame of `input` into `out`, appending at most `limit` bytes.
    pub(crate) fn decompress(
        &mut self,
        input: &[u8],
        limit: usize,
        out: &mut Vec<u8>,
    ) -> Result<usize, CodecError> {
        if input.is_empty() {
            return Err(corrupt("empty payload"));
        }
        let limit_exceeded = CodecError::LimitExceeded {
            codec: Codec::Zstd,
            limit,
        };
        let dctx = &mut self.dctx;
        dctx.reset(ResetDirective::SessionOnly)
            .map_err(|code| corrupt(get_error_name(code)))?;
        let start = out.len();
        let mut pos = 0;
        // One pass per frame: the declared size, if any, is checked before any room is made.
        while pos < input.len() {
            let declared = zstd_safe::get_frame_content_size(&input[pos..])
                .ok()
                .flatten();
            let room = limit - (out.len() - start);
            if declared.is_some_and(|size| size > room as u64) {
                return Err(limit_exceeded);
            }
            let frame_start = out.len();
            loop {
                let produced = out.len() - frame_start;
                let room = limit - (out.len() - start);
                let rest = &input[pos..];
                let mut source = InBuffer::around(rest);
                let (result, written) = if room == 0 {
                    // At the limit: the frame must end without another byte of output.
                    let mut probe = [0u8; 1];
                    let mut output = OutBuffer::around(&mut probe[..]);
                    let result = dctx.decompress_stream(&mut output, &mut source);
                    let written = output.pos();
                    (result, written)
                } else {
                    let step = match declared {
                        Some(size) => (size as usize).saturating_sub(produced).max(1),
                        None => MIN_DECODE_STEP.max(produced),
                    }
                    .min(room);
                    // SAFETY: zstd reports through `OutBuffer::pos` exactly the bytes
                    // it wrote.
                    unsafe {
                        append_with(out, step, |spare| {
                            let mut buf = SpareBuf { spare, filled: 0 };
                            let mut output = OutBuffer::around(&mut buf);
                            let result = dctx.decompress_stream(&mut output, &mut source);
                            let written = output.pos();
                            (written, (result, written))
                        })
                    }
                };
                let consumed = source.pos();
                pos += consumed;
                match result {
                    Err(code) => {
                        return Err(corrupt(get_error_name(code)));
                    }
                    Ok(_) if room == 0 && written > 0 => return Err(limit_exceeded),
                    // 0: the frame is complete and the context is ready for the next one.
                    Ok(0) => break,
                    Ok(_) if consumed == 0 && written == 0 => {
                        return Err(corrupt("truncated frame"));
                    }
                    Ok(_) => {}
                }
            }
        }
        Ok(out.len() - start)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_level_picks_a_window_beyond_java_limit() {
        // With window 0 the level's own parameters apply; they are largest when the
        // source size is unknown, as in a streamed frame. (Levels 20-22 need hundreds
        // of MiB of tables to try here; zstd's table gives them window logs 26-27.)
        for level in [-131072, -1, 1, 3, 9, 19] {
            let frame = zstd::encode_all(&b"x"[..], level).unwrap();
            let fhd = frame[4];
            assert_eq!(fhd & 0x20, 0, "a streamed frame has a window descriptor");
            let window_log = 10 + u32::from(frame[5] >> 3);
            assert!(window_log <= WINDOW_LOG_MAX, "level {level}: {window_log}");
        }
    }

    #[test]
    fn frames_never_exceed_the_window_limit_at_the_largest_window_option() {
        let mut compressor = ZstdCompressor::new(1, 22);
        let mut out = Vec::new();
        compressor.compress(&[b'a'; 100], &mut out).unwrap();
        let mut decompressor = ZstdDecompressor::default();
        let mut back = Vec::new();
        assert_eq!(decompressor.decompress(&out, 100, &mut back), Ok(100));
    }
}
