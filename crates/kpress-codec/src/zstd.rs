//! zstd: one standard frame with its content size written (librdkafka sizes its output
//! from it), window at most 2^27; frames back to back read, window at most 2^27 (the
//! limit of Kafka's Java client).
//!
//! Reading, each frame's room is sized from its headers before zstd runs (see
//! [`zstd_frame`](crate::zstd_frame)): a declared content size is checked against the
//! limit and against the most the frame's blocks can produce, and a frame without one
//! gets that most, never more than the limit leaves. The frame is then decoded in one
//! call into that room, which zstd uses as the window, so the decoder holds no window
//! buffer whatever window a frame declares.
//!
//! Copies per byte: none beyond the codec's own; zstd writes straight into `out`'s
//! spare capacity both ways.

use std::mem::MaybeUninit;

use zstd::zstd_safe::{
    self, get_error_name, CCtx, CParameter, DCtx, InBuffer, OutBuffer, ResetDirective, WriteBuf,
};

use crate::spare::append_with;
use crate::zstd_frame::{read_frame, Frame};
use crate::{Codec, CodecError};

/// The largest window Kafka's Java client (zstd-jni's default) decodes.
pub(crate) const WINDOW_LOG_MAX: u32 = 27;

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

/// Whether a zstd error code says the output room was too small.
fn is_room_too_small(code: usize) -> bool {
    // SAFETY: a pure mapping of an error code to its enum, valid for any value.
    let error = unsafe { zstd_safe::zstd_sys::ZSTD_getErrorCode(code) };
    error == zstd_safe::zstd_sys::ZSTD_ErrorCode::ZSTD_error_dstSize_tooSmall
}

/// A zstd decompression context. Each frame is decoded in one call straight into the
/// caller's output (zstd's one-shot API), which serves as the frame's window: the
/// context holds no window buffer, whatever window a frame declares, only its fixed
/// tables (about 96 KiB).
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
        ZstdDecompressor {
            dctx: DCtx::create(),
        }
    }
}

impl ZstdDecompressor {
    /// Reads every zstd frame of `input` into `out`, appending at most `limit` bytes.
    ///
    /// Each frame's room is sized from its headers before zstd runs: its declared
    /// content size, checked against the limit and against the most its blocks can
    /// produce, or without one, that most (see [`zstd_frame`](crate::zstd_frame)); never
    /// more than the limit leaves.
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
        let start = out.len();
        let mut pos = 0;
        while pos < input.len() {
            let frame = match read_frame(&input[pos..])? {
                Frame::Skippable { len } => {
                    pos += len;
                    continue;
                }
                Frame::Data(frame) => frame,
            };
            let room = (limit - (out.len() - start)) as u64;
            if let Some(size) = frame.content_size {
                if size > room {
                    return Err(limit_exceeded);
                }
                if size > frame.max_output {
                    return Err(corrupt(format!(
                        "frame declares {size} content bytes, but its blocks can produce at most {}",
                        frame.max_output
                    )));
                }
            }
            if frame.window_size > 1 << WINDOW_LOG_MAX {
                return Err(corrupt(format!(
                    "frame window of {} bytes is larger than 2^{WINDOW_LOG_MAX}, the most Kafka's Java client decodes",
                    frame.window_size
                )));
            }
            // Within `room`, which is a usize.
            let capacity = frame.content_size.unwrap_or(frame.max_output).min(room) as usize;
            let bytes = &input[pos..pos + frame.len];
            let dctx = &mut self.dctx;
            // SAFETY: zstd reports through its return value exactly the bytes it
            // wrote, and nothing on error.
            let result = unsafe {
                append_with(out, capacity, |spare| {
                    let mut buf = SpareBuf { spare, filled: 0 };
                    match dctx.decompress(&mut buf, bytes) {
                        Ok(written) => (written, Ok(())),
                        Err(code) => (0, Err(code)),
                    }
                })
            };
            match result {
                Ok(()) => {}
                // Sized to the limit rather than to what the blocks can produce.
                Err(code)
                    if is_room_too_small(code)
                        && frame.content_size.is_none()
                        && frame.max_output > room =>
                {
                    return Err(limit_exceeded);
                }
                Err(code) => return Err(corrupt(get_error_name(code))),
            }
            pos += frame.len;
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
    fn a_large_window_costs_the_decoder_no_window_buffer() {
        // A 2^27 window and no content size, as a streaming writer at a high level
        // declares it, around 100 bytes.
        let mut frame = vec![0x28, 0xB5, 0x2F, 0xFD, 0x00, 17 << 3];
        frame.extend(((100u32 << 3) | 1).to_le_bytes()[..3].iter());
        frame.extend([b'k'; 100]);
        let mut decompressor = ZstdDecompressor::default();
        let idle = decompressor.dctx.sizeof();
        let mut out = Vec::new();
        assert_eq!(decompressor.decompress(&frame, 64 << 20, &mut out), Ok(100));
        let held = decompressor.dctx.sizeof();
        assert!(held <= idle + (64 << 10), "{idle} bytes idle, {held} after");
    }

    /// Frames of every block kind: raw (incompressible), RLE (runs) and compressed;
    /// with and without a content size and checksum, and a skippable frame between.
    fn varied_frames() -> &'static [u8] {
        static FRAMES: std::sync::OnceLock<Vec<u8>> = std::sync::OnceLock::new();
        FRAMES.get_or_init(|| {
            let mut noise = vec![0u8; 3000];
            let mut x = 0x9E37_79B9_u32;
            for b in &mut noise {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                *b = x as u8;
            }
            let text: Vec<u8> = (0..3000u32)
                .flat_map(|i| format!("k{} v{}\n", i % 37, i % 11).into_bytes())
                .collect();
            let content = [noise, vec![0u8; 200_000], text].concat();
            let mut frames = zstd::bulk::compress(&content, 3).unwrap();
            frames.extend([0x50, 0x2A, 0x4D, 0x18, 2, 0, 0, 0, 9, 9]);
            let mut encoder = zstd::stream::write::Encoder::new(&mut frames, 1).unwrap();
            encoder.include_checksum(true).unwrap();
            std::io::Write::write_all(&mut encoder, &content[..50_000]).unwrap();
            encoder.finish().unwrap();
            frames
        })
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig {
            cases: 512,
            ..proptest::prelude::ProptestConfig::default()
        })]

        /// Sizing frames from their headers is never stricter than zstd's own
        /// streaming decoder at Java's window limit, and never lets more through.
        #[test]
        fn damaged_frames_decode_exactly_as_zstd_decodes_them(
            edits in proptest::collection::vec(
                (proptest::prelude::any::<proptest::sample::Index>(), proptest::prelude::any::<u8>()),
                0..4,
            ),
            cut in proptest::prelude::any::<proptest::sample::Index>(),
            limit in 0usize..400_000,
        ) {
            let mut input = varied_frames().to_vec();
            for (at, byte) in edits {
                let at = at.index(input.len());
                input[at] = byte;
            }
            input.truncate(1 + cut.index(input.len()));
            let reference = zstd::stream::decode_all(&input[..]).ok();
            let mut out = Vec::new();
            let ours = ZstdDecompressor::default().decompress(&input, limit, &mut out);
            match (&ours, &reference) {
                (Ok(n), Some(expected)) => {
                    proptest::prop_assert_eq!(*n, expected.len());
                    proptest::prop_assert!(out == *expected);
                }
                (Err(CodecError::LimitExceeded { .. }), Some(expected)) => {
                    proptest::prop_assert!(expected.len() > limit);
                }
                (Ok(_), None) => proptest::prop_assert!(false, "accepted what zstd refuses"),
                (Err(e), Some(expected)) if expected.len() <= limit => {
                    proptest::prop_assert!(false, "refused what zstd decodes: {e}");
                }
                _ => {}
            }
            proptest::prop_assert!(out.capacity() <= limit);
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
