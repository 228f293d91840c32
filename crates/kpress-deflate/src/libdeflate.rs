//! The libdeflate provider (its bundled copy, through libdeflate-sys).
//!
//! Levels: zlib's 1..=9 are passed through as libdeflate levels 1..=9. libdeflate's
//! scale (0..=12) is modelled on zlib's, with 6 its default; at equal numbers it
//! compresses at least as well as zlib (levels 10-12 are slower, optimal parsing, and
//! not reachable from Kafka's range).
//!
//! libdeflate works on whole buffers: decompression needs room for all of a member's
//! output up front. The member's ISIZE gives the first size (bounded by the limit and
//! by what the input can inflate to); if the output does not fit, the room doubles up
//! to those bounds and it runs again.

use std::cell::RefCell;
use std::ffi::c_void;
use std::ptr::NonNull;

use libdeflate_sys::{
    libdeflate_alloc_compressor, libdeflate_alloc_decompressor, libdeflate_compressor,
    libdeflate_decompressor, libdeflate_deflate_compress, libdeflate_deflate_compress_bound,
    libdeflate_deflate_decompress_ex, libdeflate_free_compressor, libdeflate_free_decompressor,
    libdeflate_result_LIBDEFLATE_BAD_DATA, libdeflate_result_LIBDEFLATE_INSUFFICIENT_SPACE,
    libdeflate_result_LIBDEFLATE_SUCCESS,
};

use crate::provider::{fill_spare, first_guess, max_inflated_len, ThreadState};
use crate::{DeflateError, GzipProvider, ProviderKind};

/// libdeflate raw deflate with one compressor per level and thread.
#[derive(Debug, Default, Clone, Copy)]
pub struct LibdeflateProvider;

struct Compressor(NonNull<libdeflate_compressor>);

impl Drop for Compressor {
    fn drop(&mut self) {
        // SAFETY: allocated by libdeflate_alloc_compressor, freed once here.
        unsafe { libdeflate_free_compressor(self.0.as_ptr()) }
    }
}

struct Decompressor(NonNull<libdeflate_decompressor>);

impl Drop for Decompressor {
    fn drop(&mut self) {
        // SAFETY: allocated by libdeflate_alloc_decompressor, freed once here.
        unsafe { libdeflate_free_decompressor(self.0.as_ptr()) }
    }
}

thread_local! {
    static STATE: RefCell<ThreadState<Compressor, Decompressor>> =
        const { RefCell::new(ThreadState::new()) };
}

fn out_of_memory() -> DeflateError {
    DeflateError::Provider {
        provider: ProviderKind::Libdeflate,
        reason: "libdeflate could not allocate its state".into(),
    }
}

impl GzipProvider for LibdeflateProvider {
    fn kind(&self) -> ProviderKind {
        ProviderKind::Libdeflate
    }

    fn deflate_raw(&self, input: &[u8], level: u32, out: &mut Vec<u8>) -> Result<(), DeflateError> {
        let level = level.clamp(1, 9);
        STATE.with_borrow_mut(|state| {
            let c = state
                .compressor(level, || {
                    // SAFETY: plain allocation; a NULL result is handled.
                    let p = unsafe { libdeflate_alloc_compressor(level as i32) };
                    NonNull::new(p).map(Compressor).ok_or_else(out_of_memory)
                })?
                .0
                .as_ptr();
            // SAFETY: `c` is a live compressor owned by this thread.
            let bound = unsafe { libdeflate_deflate_compress_bound(c, input.len()) };
            // Geometric: `out` may collect many batches, and an exact reservation per batch
            // would move everything before it each time.
            out.reserve(bound);
            fill_spare(out, bound, |spare| {
                // SAFETY: `input` and `spare` are valid for their lengths; libdeflate
                // writes at most `spare.len()` bytes and returns how many, 0 if it
                // did not fit (impossible at the bound it computed).
                let n = unsafe {
                    libdeflate_deflate_compress(
                        c,
                        input.as_ptr().cast::<c_void>(),
                        input.len(),
                        spare.as_mut_ptr().cast::<c_void>(),
                        spare.len(),
                    )
                };
                if n == 0 {
                    Err(DeflateError::Provider {
                        provider: ProviderKind::Libdeflate,
                        reason: "output exceeded libdeflate's own bound".into(),
                    })
                } else {
                    Ok((n, ()))
                }
            })
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
            let d = state
                .decompressor(|| {
                    // SAFETY: plain allocation; a NULL result is handled.
                    let p = unsafe { libdeflate_alloc_decompressor() };
                    NonNull::new(p).map(Decompressor).ok_or_else(out_of_memory)
                })?
                .0
                .as_ptr();
            // Whole-buffer: room for everything, at most `budget` bytes and at most what
            // the input can inflate to. A stream that does not fit in `budget` bytes is
            // over the limit; one that does not fit in what it can inflate to, corrupt.
            let most = max_inflated_len(input.len()).min(budget);
            let mut room = first_guess(input.len(), budget, size_hint).min(most);
            loop {
                let mut used = 0usize;
                let result = fill_spare(out, room, |spare| {
                    let mut written = 0usize;
                    // SAFETY: `input` and `spare` are valid for their lengths; libdeflate
                    // writes at most `spare.len()` bytes and reports the counts.
                    let r = unsafe {
                        libdeflate_deflate_decompress_ex(
                            d,
                            input.as_ptr().cast::<c_void>(),
                            input.len(),
                            spare.as_mut_ptr().cast::<c_void>(),
                            spare.len(),
                            &mut used,
                            &mut written,
                        )
                    };
                    let written = if r == libdeflate_result_LIBDEFLATE_SUCCESS {
                        written
                    } else {
                        0
                    };
                    Ok::<_, DeflateError>((written, r))
                })?;
                #[allow(non_upper_case_globals)]
                match result {
                    libdeflate_result_LIBDEFLATE_SUCCESS => return Ok(used),
                    libdeflate_result_LIBDEFLATE_INSUFFICIENT_SPACE if room < most => {
                        room = room.saturating_mul(2).min(most);
                    }
                    libdeflate_result_LIBDEFLATE_INSUFFICIENT_SPACE if most == budget => {
                        return Err(DeflateError::LimitExceeded { limit: budget })
                    }
                    libdeflate_result_LIBDEFLATE_INSUFFICIENT_SPACE
                    | libdeflate_result_LIBDEFLATE_BAD_DATA => {
                        return Err(DeflateError::Corrupt {
                            provider: ProviderKind::Libdeflate,
                            reason: "invalid or truncated deflate stream".into(),
                        })
                    }
                    other => {
                        return Err(DeflateError::Provider {
                            provider: ProviderKind::Libdeflate,
                            reason: format!("libdeflate returned {other}"),
                        })
                    }
                }
            }
        })
    }
}
