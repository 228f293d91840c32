//! The ISA-L provider: Intel's igzip from the system's `libisal.so.2` (Debian libisal2),
//! opened at run time by `isal-sys`, so kpress builds and runs without ISA-L and reports
//! this provider unavailable, with the loader's reason, where the library is missing.
//! igzip is called directly so that its work buffers are kept per thread (about 300 KB
//! at level 3, which a per-call setup would allocate and zero each time).
//!
//! Levels: ISA-L has 0..=3, all faster and all larger than zlib's (its best, 3, is
//! still 7-43% larger than zlib 6 on the datasets). zlib/Kafka levels map so
//! that Kafka's default 6 gets ISA-L's best ratio:
//!
//! | Kafka / zlib | 1 | 2 | 3-5 | 6-9 |
//! |---|---|---|---|---|
//! | ISA-L        | 0 | 1 | 2   | 3   |

use std::cell::RefCell;
use std::mem::MaybeUninit;

use isal_sys::ffi as sys;
use isal_sys::ffi::IsalLibrary;

use crate::provider::{fill_spare, first_guess};
use crate::zlib::compress_bound;
use crate::{DeflateError, GzipProvider, ProviderError, ProviderKind, ProviderStatus};

/// ISA-L igzip raw deflate, stateless compression and stateful inflate, with each
/// thread's stream state and level buffers reused. The library is opened on first use
/// (once per process); where it cannot be, every call fails with the reason, and
/// [`crate::Registry`] reports the provider unavailable.
#[derive(Debug, Default, Clone, Copy)]
pub struct IsalProvider;

impl IsalProvider {
    /// The provider when `libisal.so.2` can be opened here, else why not.
    pub fn open() -> Result<IsalProvider, ProviderError> {
        isal_sys::load()
            .map(|_| IsalProvider)
            .map_err(|e| ProviderError::Unavailable {
                provider: ProviderKind::Isal,
                reason: e.to_string(),
            })
    }

    /// Whether ISA-L can be used here, with the library file in use or why not.
    pub fn status() -> ProviderStatus {
        let (available, detail) = match isal_sys::load() {
            Ok(lib) => {
                let file = lib.mapped_file().unwrap_or_else(|| lib.path().to_owned());
                (true, format!("ISA-L igzip ({})", file.display()))
            }
            Err(e) => (false, e.to_string()),
        };
        ProviderStatus {
            provider: ProviderKind::Isal,
            available,
            hardware: false,
            detail,
        }
    }
}

/// The opened library's functions, or the provider error a call reports without it.
fn library() -> Result<&'static IsalLibrary, DeflateError> {
    isal_sys::load()
        .map(|lib| lib.functions())
        .map_err(|e| DeflateError::Provider {
            provider: ProviderKind::Isal,
            reason: e.to_string(),
        })
}

/// The ISA-L level a zlib level maps to (see the module table).
pub fn isal_level(zlib_level: u32) -> u32 {
    match zlib_level {
        ..=1 => 0,
        2 => 1,
        3..=5 => 2,
        _ => 3,
    }
}

fn level_buf_size(isal_level: u32) -> usize {
    (match isal_level {
        0 => sys::ISAL_DEF_LVL0_DEFAULT,
        1 => sys::ISAL_DEF_LVL1_DEFAULT,
        2 => sys::ISAL_DEF_LVL2_DEFAULT,
        _ => sys::ISAL_DEF_LVL3_DEFAULT,
    }) as usize
}

struct ThreadState {
    // Boxed: ISA-L's structs are tens of KB and must not move while in use.
    deflate: Option<Box<sys::isal_zstream>>,
    level_bufs: [Vec<u8>; 4],
    inflate: Option<Box<sys::inflate_state>>,
}

thread_local! {
    static STATE: RefCell<ThreadState> = const {
        RefCell::new(ThreadState {
            deflate: None,
            level_bufs: [Vec::new(), Vec::new(), Vec::new(), Vec::new()],
            inflate: None,
        })
    };
}

fn boxed_zeroed<T>() -> Box<T> {
    let layout = std::alloc::Layout::new::<T>();
    // SAFETY: ISA-L's stream structs are plain C data (integers, pointers, arrays) of
    // non-zero size, for which all-zero bytes is a valid value (the init functions set
    // them up after); the allocation has T's layout, so the Box may own and free it.
    unsafe {
        let p = std::alloc::alloc_zeroed(layout).cast::<T>();
        if p.is_null() {
            std::alloc::handle_alloc_error(layout);
        }
        Box::from_raw(p)
    }
}

impl GzipProvider for IsalProvider {
    fn kind(&self) -> ProviderKind {
        ProviderKind::Isal
    }

    fn deflate_raw(&self, input: &[u8], level: u32, out: &mut Vec<u8>) -> Result<(), DeflateError> {
        let failed = |reason: String| DeflateError::Provider {
            provider: ProviderKind::Isal,
            reason,
        };
        let avail_in = u32::try_from(input.len()).map_err(|_| {
            failed(format!(
                "{} bytes is beyond ISA-L's 4 GiB input",
                input.len()
            ))
        })?;
        let lib = library()?;
        let level = isal_level(level);
        STATE.with_borrow_mut(|state| {
            let ThreadState {
                deflate,
                level_bufs,
                ..
            } = state;
            let stream = deflate.get_or_insert_with(boxed_zeroed::<sys::isal_zstream>);
            let level_buf = &mut level_bufs[level as usize];
            if level_buf.len() != level_buf_size(level) {
                level_buf.resize(level_buf_size(level), 0);
            }
            // Stored blocks at worst, plus ISA-L's header allowance.
            let mut room = compress_bound(input.len()) + sys::ISAL_DEF_MAX_HDR_SIZE as usize;
            // Geometric: `out` may collect many batches, and an exact reservation per batch
            // would move everything before it each time.
            out.reserve(room);
            loop {
                let result = fill_spare(out, room, |spare: &mut [MaybeUninit<u8>]| {
                    let avail_out = u32::try_from(spare.len()).unwrap_or(u32::MAX);
                    // SAFETY: the stream is reinitialised for each call and pointed at
                    // `input`, `spare` and this thread's level buffer, all of which
                    // outlive the call; ISA-L writes at most `avail_out` bytes.
                    let rc = unsafe {
                        lib.isal_deflate_stateless_init(&mut **stream);
                        stream.level = level;
                        stream.level_buf = level_buf.as_mut_ptr();
                        stream.level_buf_size = level_buf.len() as u32;
                        stream.gzip_flag = sys::IGZIP_DEFLATE as u16;
                        stream.flush = sys::NO_FLUSH as u16;
                        stream.end_of_stream = 1;
                        stream.next_in = input.as_ptr().cast_mut();
                        stream.avail_in = avail_in;
                        stream.next_out = spare.as_mut_ptr().cast::<u8>();
                        stream.avail_out = avail_out;
                        lib.isal_deflate_stateless(&mut **stream)
                    };
                    let written = if rc == sys::COMP_OK as i32 {
                        stream.total_out as usize
                    } else {
                        0
                    };
                    Ok::<_, DeflateError>((written, rc))
                })?;
                match result {
                    rc if rc == sys::COMP_OK as i32 => return Ok(()),
                    sys::STATELESS_OVERFLOW if room < usize::MAX / 4 => room *= 2,
                    rc => return Err(failed(format!("isal_deflate_stateless returned {rc}"))),
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
        let corrupt = |reason: String| DeflateError::Corrupt {
            provider: ProviderKind::Isal,
            reason,
        };
        // Larger inputs go through in 4 GiB steps of avail_in.
        let input_len = input.len();
        let lib = library()?;
        STATE.with_borrow_mut(|state| {
            let inflate = state
                .inflate
                .get_or_insert_with(boxed_zeroed::<sys::inflate_state>);
            // SAFETY: initialises (resets) this thread's inflate state.
            unsafe { lib.isal_inflate_init(&mut **inflate) };
            inflate.crc_flag = sys::ISAL_DEFLATE;
            inflate.next_in = input.as_ptr().cast_mut();
            inflate.avail_in = u32::try_from(input_len).unwrap_or(u32::MAX);
            let mut fed = inflate.avail_in as usize;
            let start = out.len();
            let mut want = first_guess(input_len, budget, size_hint);
            loop {
                let produced = out.len() - start;
                let before_in = inflate.avail_in;
                let rc = if produced == budget {
                    // At the limit: the stream must end without another byte.
                    let mut probe = [0u8; 1];
                    inflate.next_out = probe.as_mut_ptr();
                    inflate.avail_out = 1;
                    // SAFETY: next_in/avail_in cover the rest of `input`, next_out/
                    // avail_out the one-byte probe; ISA-L stays within both.
                    let rc = unsafe { lib.isal_inflate(&mut **inflate) };
                    if inflate.avail_out == 0 {
                        return Err(DeflateError::LimitExceeded { limit: budget });
                    }
                    rc
                } else {
                    let room = want.min(budget - produced).min(u32::MAX as usize);
                    fill_spare(out, room, |spare| {
                        inflate.next_out = spare.as_mut_ptr().cast::<u8>();
                        inflate.avail_out = spare.len() as u32;
                        // SAFETY: next_in/avail_in cover the rest of `input`, next_out/
                        // avail_out this call's spare room; ISA-L stays within both.
                        let rc = unsafe { lib.isal_inflate(&mut **inflate) };
                        Ok::<_, DeflateError>((spare.len() - inflate.avail_out as usize, rc))
                    })?
                };
                if rc < 0 {
                    return Err(corrupt(format!("isal_inflate returned {rc}")));
                }
                if inflate.block_state == sys::isal_block_state_ISAL_BLOCK_FINISH {
                    // Consumed: what was fed minus what is left, minus whole bytes
                    // ISA-L read ahead into its bit buffer.
                    let unread_bits = inflate.read_in_length.max(0) as usize;
                    return Ok(fed - inflate.avail_in as usize - unread_bits / 8);
                }
                if inflate.avail_in == 0 && fed < input_len {
                    let more = (input_len - fed).min(u32::MAX as usize);
                    inflate.next_in = input[fed..].as_ptr().cast_mut();
                    inflate.avail_in = more as u32;
                    fed += more;
                    continue;
                }
                let now = out.len() - start;
                if now == produced && inflate.avail_in == before_in {
                    return Err(corrupt("deflate stream is truncated".into()));
                }
                if now - produced == want {
                    want = want.saturating_mul(2);
                }
            }
        })
    }
}
