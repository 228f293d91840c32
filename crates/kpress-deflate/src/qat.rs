//! The QAT provider: Intel QuickAssist deflate through the real QATzip library, opened
//! at run time by `qat-sys`.
//!
//! Sessions: one QATzip session per thread and level for compression and one per
//! thread for decompression, set up on first use (`qzInit` with the software backup
//! on, then `qzSetupSessionDeflateExt`) and torn down when the thread ends.
//!
//! Format: QATzip writes raw deflate (`QZ_DEFLATE_RAW`) and kpress wraps it in one
//! gzip member: QATzip's own gzip output (`QZ_DEFLATE_GZIP_EXT`) can be several
//! members, and librdkafka reads only the first. Decompression inflates a member's
//! raw body through QATzip with `stop_decompression_stream_end` set, so it stops at
//! the end of the deflate stream and the trailer is checked by kpress.
//!
//! Chunking: QATzip deflates input in independent `hw_buff_sz` pieces; kpress sets the
//! largest size every QAT generation accepts, 512 KiB, so 1 MiB batches lose little
//! ratio to the splits (with the 64 KiB default they are about 13% larger).
//!
//! Levels: QATzip's deflate levels are zlib's 1..=9 (`QZ_DEFLATE_COMP_LVL_MINIMUM` ..
//! `_MAXIMUM`) and are passed through unchanged; without a device its software backup
//! compresses with zlib at that level, with a QAT device the hardware maps them onto
//! its own search depths.
//!
//! Hardware: the probe opens a session with the software backup off first; QATzip
//! answers `QZ_NOSW_NO_HW` when there is no QAT device, which is reported as
//! `hardware: false` ("QZ_NO_HW"), and the provider then works in QATzip's software
//! backup. (QATzip 1.3.1 tries to open the device again on every call in that mode and
//! its user-space driver prints "Cannot open /dev/vfio" to stderr each time.)

use std::cell::RefCell;
use std::mem::MaybeUninit;
use std::os::raw::{c_int, c_uint};
use std::sync::atomic::{AtomicU64, Ordering};

use qat_sys::ffi;
use qat_sys::Qatzip;

use crate::provider::{fill_spare, first_guess};
use crate::zlib::compress_bound;
use crate::{DeflateError, GzipProvider, ProviderError, ProviderKind, ProviderStatus};

/// How the QAT provider opens its sessions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QatConfig {
    /// Let QATzip fall back to software when there is no device (`qzInit`'s
    /// `sw_backup`). Off, a host without QAT fails at start.
    pub software_backup: bool,
}

impl Default for QatConfig {
    fn default() -> Self {
        QatConfig {
            software_backup: true,
        }
    }
}

/// QATzip-backed gzip.
#[derive(Debug)]
pub struct QatProvider {
    lib: &'static Qatzip,
    config: QatConfig,
    id: u64,
    hardware: bool,
    detail: String,
}

/// The name of a QATzip return code, for messages.
pub fn status_name(rc: c_int) -> String {
    let name = match rc {
        0 => "QZ_OK",
        1 => "QZ_DUPLICATE",
        2 => "QZ_FORCE_SW",
        -1 => "QZ_PARAMS",
        -2 => "QZ_FAIL",
        -3 => "QZ_BUF_ERROR",
        -4 => "QZ_DATA_ERROR",
        -5 => "QZ_TIMEOUT",
        -100 => "QZ_INTEG",
        11 => "QZ_NO_HW",
        12 => "QZ_NO_MDRV",
        13 => "QZ_NO_INST_ATTACH",
        14 => "QZ_LOW_MEM",
        15 => "QZ_LOW_DEST_MEM",
        16 => "QZ_UNSUPPORTED_FMT",
        100 => "QZ_NONE",
        -101 => "QZ_NOSW_NO_HW",
        -102 => "QZ_NOSW_NO_MDRV",
        -103 => "QZ_NOSW_NO_INST_ATTACH",
        -104 => "QZ_NOSW_LOW_MEM",
        -105 => "QZ_NO_SW_AVAIL",
        -116 => "QZ_NOSW_UNSUPPORTED_FMT",
        -117 => "QZ_POST_PROCESS_ERROR",
        -118 => "QZ_METADATA_OVERFLOW",
        -119 => "QZ_OUT_OF_RANGE",
        -200 => "QZ_NOT_SUPPORTED",
        _ => return format!("QATzip status {rc}"),
    };
    format!("{name} ({rc})")
}

/// One QATzip session, torn down and closed on drop.
struct Session {
    lib: &'static Qatzip,
    raw: Box<ffi::QzSession_T>,
}

impl Session {
    fn open(lib: &'static Qatzip, config: QatConfig, level: u32) -> Result<Session, c_int> {
        let f = lib.functions();
        let mut raw = Box::<ffi::QzSession_T>::default();
        // SAFETY: `raw` is a zeroed session that lives in a Box (QATzip keeps no
        // pointer into our stack); `params` is filled by QATzip's own defaults first.
        unsafe {
            let rc = f.qzInit(&mut *raw, u8::from(config.software_backup));
            if rc != ffi::QZ_OK as c_int && rc != ffi::QZ_DUPLICATE as c_int {
                return Err(rc);
            }
            let mut params = ffi::QzSessionParamsDeflateExt_T::default();
            let rc = f.qzGetDefaultsDeflateExt(&mut params);
            if rc != ffi::QZ_OK as c_int {
                f.qzClose(&mut *raw);
                return Err(rc);
            }
            params.deflate_params.data_fmt = ffi::QzDataFormat_E_QZ_DEFLATE_RAW;
            params.deflate_params.huffman_hdr = ffi::QzHuffmanHdr_E_QZ_DYNAMIC_HDR;
            params.deflate_params.common_params.comp_lvl = level;
            params.deflate_params.common_params.direction = ffi::QzDirection_E_QZ_DIR_BOTH;
            params.deflate_params.common_params.sw_backup = u8::from(config.software_backup);
            // QATzip deflates its input in independent hw_buff_sz pieces (the default
            // 64 KiB makes 1 MiB batches 13% larger than zlib at the same level); 512
            // KiB is the largest every QAT generation accepts.
            params.deflate_params.common_params.hw_buff_sz = ffi::QZ_HW_BUFF_MAX_SZ;
            params.stop_decompression_stream_end = 1;
            let rc = f.qzSetupSessionDeflateExt(&mut *raw, &mut params);
            if rc != ffi::QZ_OK as c_int && rc != ffi::QZ_DUPLICATE as c_int {
                f.qzClose(&mut *raw);
                return Err(rc);
            }
        }
        Ok(Session { lib, raw })
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        let f = self.lib.functions();
        // SAFETY: the session was set up by `open` and is released exactly once.
        unsafe {
            f.qzTeardownSession(&mut *self.raw);
            f.qzClose(&mut *self.raw);
        }
    }
}

/// Level 0 stands for the decompression session.
type SessionKey = (u64, u32);

thread_local! {
    static SESSIONS: RefCell<Vec<(SessionKey, Session)>> = const { RefCell::new(Vec::new()) };
}

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

impl QatProvider {
    /// Opens QATzip (see `qat_sys::load` for where it looks), probes for a QAT device
    /// and checks that a session can be set up with `config`.
    pub fn open(config: QatConfig) -> Result<QatProvider, ProviderError> {
        let lib = qat_sys::load().map_err(|e| ProviderError::Unavailable {
            provider: ProviderKind::Qat,
            reason: e.to_string(),
        })?;
        Self::with_library(lib, config)
    }

    /// As [`open`](Self::open), with an already opened library.
    pub fn with_library(
        lib: &'static Qatzip,
        config: QatConfig,
    ) -> Result<QatProvider, ProviderError> {
        let unavailable = |reason: String| ProviderError::Unavailable {
            provider: ProviderKind::Qat,
            reason,
        };
        // A session without software backup fails exactly when there is no usable
        // device; that answer is the hardware probe.
        let (hardware, probe_rc) = match Session::open(
            lib,
            QatConfig {
                software_backup: false,
            },
            1,
        ) {
            Ok(_session) => (true, ffi::QZ_OK as c_int),
            Err(rc) => (false, rc),
        };
        if !hardware && !config.software_backup {
            return Err(unavailable(format!(
                "QATzip at {} found no usable QAT device ({}) and the software backup is off",
                lib.path().display(),
                status_name(probe_rc)
            )));
        }
        let session = Session::open(lib, config, 1).map_err(|rc| {
            unavailable(format!(
                "QATzip at {} could not set up a session: {}",
                lib.path().display(),
                status_name(rc)
            ))
        })?;
        drop(session);
        let detail = if hardware {
            format!("QATzip {} with a QAT device", lib.path().display())
        } else {
            format!(
                "QATzip {}: QZ_NO_HW (no QAT device, {}), running in QATzip's software backup",
                lib.path().display(),
                status_name(probe_rc)
            )
        };
        Ok(QatProvider {
            lib,
            config,
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            hardware,
            detail,
        })
    }

    /// Whether a QAT device does the work (false: QATzip's software backup).
    pub fn hardware(&self) -> bool {
        self.hardware
    }

    /// The opened library.
    pub fn library(&self) -> &'static Qatzip {
        self.lib
    }

    pub fn status(&self) -> ProviderStatus {
        ProviderStatus {
            provider: ProviderKind::Qat,
            available: true,
            hardware: self.hardware,
            detail: self.detail.clone(),
        }
    }

    fn failed(rc: c_int, call: &str) -> DeflateError {
        DeflateError::Provider {
            provider: ProviderKind::Qat,
            reason: format!("{call} returned {}", status_name(rc)),
        }
    }

    /// Runs `f` with this thread's session for `level` (0: decompression), opening it
    /// first if needed; `f` says whether the session may be kept.
    fn with_session<T>(
        &self,
        level: u32,
        f: impl FnOnce(&mut ffi::QzSession_T) -> (Result<T, DeflateError>, bool),
    ) -> Result<T, DeflateError> {
        SESSIONS.with_borrow_mut(|sessions| {
            let key = (self.id, level);
            let at = match sessions.iter().position(|(k, _)| *k == key) {
                Some(at) => at,
                None => {
                    let session = Session::open(self.lib, self.config, level.max(1))
                        .map_err(|rc| Self::failed(rc, "qzSetupSessionDeflateExt"))?;
                    sessions.push((key, session));
                    sessions.len() - 1
                }
            };
            let (result, keep) = f(&mut sessions[at].1.raw);
            if !keep {
                sessions.swap_remove(at);
            }
            result
        })
    }
}

impl GzipProvider for QatProvider {
    fn kind(&self) -> ProviderKind {
        ProviderKind::Qat
    }

    fn deflate_raw(&self, input: &[u8], level: u32, out: &mut Vec<u8>) -> Result<(), DeflateError> {
        let level = level.clamp(
            ffi::QZ_DEFLATE_COMP_LVL_MINIMUM,
            ffi::QZ_DEFLATE_COMP_LVL_MAXIMUM,
        );
        let src_len = c_uint::try_from(input.len()).map_err(|_| DeflateError::Provider {
            provider: ProviderKind::Qat,
            reason: format!("{} bytes is beyond QATzip's 4 GiB input", input.len()),
        })?;
        let f = self.lib.functions();
        self.with_session(level, |sess| {
            // SAFETY: a live session of this thread.
            let qat_bound = unsafe { f.qzMaxCompressedLength(src_len, sess) } as usize;
            let room = qat_bound.max(compress_bound(input.len()) + 1024);
            let result = fill_spare(out, room, |spare: &mut [MaybeUninit<u8>]| {
                let mut consumed = src_len;
                let mut written = c_uint::try_from(spare.len()).unwrap_or(c_uint::MAX);
                // SAFETY: `input` and `spare` are valid for the lengths passed;
                // QATzip writes at most `written` bytes and reports the counts.
                let rc = unsafe {
                    f.qzCompress(
                        sess,
                        input.as_ptr(),
                        &mut consumed,
                        spare.as_mut_ptr().cast::<u8>(),
                        &mut written,
                        1,
                    )
                };
                if rc != ffi::QZ_OK as c_int {
                    return Err(Self::failed(rc, "qzCompress"));
                }
                if consumed != src_len {
                    return Err(DeflateError::Provider {
                        provider: ProviderKind::Qat,
                        reason: format!("qzCompress took {consumed} of {src_len} bytes"),
                    });
                }
                Ok((written as usize, ()))
            });
            // A failed call may leave the session mid-stream: start the next afresh.
            let keep = result.is_ok();
            (result, keep)
        })
    }

    fn inflate_raw(
        &self,
        input: &[u8],
        budget: usize,
        size_hint: Option<usize>,
        out: &mut Vec<u8>,
    ) -> Result<usize, DeflateError> {
        let src_len = c_uint::try_from(input.len()).map_err(|_| DeflateError::Provider {
            provider: ProviderKind::Qat,
            reason: format!("{} bytes is beyond QATzip's 4 GiB input", input.len()),
        })?;
        let f = self.lib.functions();
        let corrupt = |reason: String| DeflateError::Corrupt {
            provider: ProviderKind::Qat,
            reason,
        };
        // One qzDecompress call into `dest`: (status, at end of stream, input used,
        // bytes written).
        let call = |sess: &mut ffi::QzSession_T, dest: *mut u8, room: usize| {
            let mut consumed = src_len;
            let mut written = room as c_uint;
            let mut end: u8 = 0;
            // SAFETY: `input` is valid for `src_len` bytes and `dest` for `room`;
            // QATzip writes at most `written` bytes and reports the counts.
            let rc =
                unsafe { f.qzDecompress(sess, input.as_ptr(), &mut consumed, dest, &mut written) };
            // SAFETY: a live session of this thread.
            let end_rc = unsafe { f.qzGetDeflateEndOfStream(sess, &mut end) };
            let at_end = end_rc == ffi::QZ_OK as c_int && end != 0;
            let written = if rc == ffi::QZ_OK as c_int {
                written as usize
            } else {
                0
            };
            (rc, at_end, consumed as usize, written)
        };
        let classify = |rc: c_int| {
            if rc == ffi::QZ_DATA_ERROR {
                corrupt(format!("qzDecompress returned {}", status_name(rc)))
            } else {
                Self::failed(rc, "qzDecompress")
            }
        };
        if budget == 0 {
            // Only an empty stream fits: offer one byte and see whether it is taken.
            return self.with_session(0, |sess| {
                let mut probe = [0u8; 1];
                let (rc, at_end, consumed, written) = call(sess, probe.as_mut_ptr(), 1);
                let result = match () {
                    _ if rc != ffi::QZ_OK as c_int => Err(classify(rc)),
                    _ if written > 0 => Err(DeflateError::LimitExceeded { limit: budget }),
                    _ if at_end => Ok(consumed),
                    _ => Err(corrupt("deflate stream is truncated".into())),
                };
                (result, false)
            });
        }
        // One call per attempt with room for all of the output; a stream that does not
        // fit is started again in a fresh session with twice the room, up to the budget.
        let cap = budget.min(c_uint::MAX as usize);
        let mut room = first_guess(input.len(), budget, size_hint).min(cap);
        let start = out.len();
        loop {
            let attempt = self.with_session(0, |sess| {
                let result = fill_spare(out, room, |spare: &mut [MaybeUninit<u8>]| {
                    let (rc, at_end, consumed, written) =
                        call(sess, spare.as_mut_ptr().cast::<u8>(), spare.len());
                    Ok::<_, DeflateError>((written, (rc, at_end, consumed)))
                });
                match result {
                    Ok((rc, _, _)) if rc != ffi::QZ_OK as c_int => (Err(classify(rc)), false),
                    Ok((_, true, consumed)) => (Ok(Some(consumed)), true),
                    // Not at the end of the stream: out of room, or out of input.
                    Ok(_) if out.len() - start == room => (Ok(None), false),
                    Ok(_) => (Err(corrupt("deflate stream is truncated".into())), false),
                    Err(e) => (Err(e), false),
                }
            })?;
            match attempt {
                Some(consumed) => return Ok(consumed),
                None if room < cap => {
                    out.truncate(start);
                    room = room.saturating_mul(2).min(cap);
                }
                None if cap == budget => return Err(DeflateError::LimitExceeded { limit: budget }),
                None => {
                    return Err(DeflateError::Provider {
                        provider: ProviderKind::Qat,
                        reason: "a member beyond 4 GiB does not fit one QATzip call".into(),
                    })
                }
            }
        }
    }
}
