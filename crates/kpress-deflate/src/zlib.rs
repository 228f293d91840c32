//! The zlib provider: flate2 over zlib-rs, kpress's default and reference output.
//! Levels are zlib's own. Its members are byte-identical to flate2's `GzEncoder`.

use std::cell::RefCell;
use std::convert::Infallible;

use flate2::{Compress, Compression, Decompress, FlushCompress, FlushDecompress, Status};

use crate::provider::{fill_spare, first_guess, ThreadState};
use crate::{DeflateError, GzipProvider, ProviderKind};

/// flate2 (zlib-rs) raw deflate with one compressor per level and thread.
#[derive(Debug, Default, Clone, Copy)]
pub struct ZlibProvider;

thread_local! {
    static STATE: RefCell<ThreadState<Compress, Decompress>> =
        const { RefCell::new(ThreadState::new()) };
}

/// zlib's `compressBound` for raw deflate, the most one `Finish` call can need.
pub(crate) fn compress_bound(len: usize) -> usize {
    len + (len >> 12) + (len >> 14) + (len >> 25) + 13
}

impl GzipProvider for ZlibProvider {
    fn kind(&self) -> ProviderKind {
        ProviderKind::Zlib
    }

    fn deflate_raw(&self, input: &[u8], level: u32, out: &mut Vec<u8>) -> Result<(), DeflateError> {
        let level = level.clamp(1, 9);
        STATE.with_borrow_mut(|state| {
            let Ok(compressor) = state.compressor(level, || {
                Ok::<_, Infallible>(Compress::new(Compression::new(level), false))
            });
            compressor.reset();
            out.reserve(compress_bound(input.len()));
            loop {
                let consumed = compressor.total_in() as usize;
                let status = compressor
                    .compress_vec(&input[consumed..], out, FlushCompress::Finish)
                    .map_err(|e| DeflateError::Provider {
                        provider: ProviderKind::Zlib,
                        reason: e.to_string(),
                    })?;
                match status {
                    Status::StreamEnd => return Ok(()),
                    Status::Ok | Status::BufError => out.reserve(out.capacity().max(4096)),
                }
            }
        })
    }

    fn inflate_raw(
        &self,
        input: &[u8],
        budget: usize,
        size_hint: Option<usize>,
        out: &mut Vec<u8>,
    ) -> Result<usize, DeflateError> {
        STATE.with_borrow_mut(|state| {
            let Ok(d) = state.decompressor(|| Ok::<_, Infallible>(Decompress::new(false)));
            d.reset(false);
            let corrupt = |reason: String| DeflateError::Corrupt {
                provider: ProviderKind::Zlib,
                reason,
            };
            let start = out.len();
            let mut want = first_guess(input.len(), budget, size_hint);
            loop {
                let produced = out.len() - start;
                let consumed = d.total_in() as usize;
                let before_out = d.total_out();
                let status = if produced == budget {
                    // At the limit: the stream must end without another byte.
                    let mut probe = [0u8; 1];
                    d.decompress(&input[consumed..], &mut probe, FlushDecompress::None)
                        .map_err(|e| corrupt(e.to_string()))?
                } else {
                    let room = want.min(budget - produced);
                    fill_spare(out, room, |spare| {
                        let status = d
                            .decompress_uninit(&input[consumed..], spare, FlushDecompress::None)
                            .map_err(|e| corrupt(e.to_string()))?;
                        Ok(((d.total_out() - before_out) as usize, status))
                    })?
                };
                if produced == budget && d.total_out() > before_out {
                    return Err(DeflateError::LimitExceeded { limit: budget });
                }
                if status == Status::StreamEnd {
                    return Ok(d.total_in() as usize);
                }
                if d.total_out() == before_out && d.total_in() as usize == consumed {
                    return Err(corrupt("deflate stream is truncated".into()));
                }
                if out.len() - start - produced == want {
                    want = want.saturating_mul(2);
                }
            }
        })
    }
}
