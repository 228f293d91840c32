//! The QAT provider: Intel QuickAssist deflate through the real QATzip library, opened
//! at run time by `qat-sys`.
//!
//! Sessions: a process-wide pool of QATzip sessions per provider and level (level 0:
//! decompression), each used by one thread at a time, so there are as many as threads
//! work at once, set up on first use (`qzInit` with the software backup on, then
//! `qzSetupSessionDeflateExt`) and kept, not thread-locals, so that worker threads
//! coming and going start none. A payload that leaves a decompression session
//! mid-stream (one QATzip finds corrupt, one cut short, one over the caller's limit)
//! does not cost its session: it is set up afresh in place (`qzTeardownSession`, then
//! `qzSetupSessionDeflateExt` with the same parameters, no `qzInit`) and kept. Only a
//! failure of the session itself (any other QATzip status, or a reset that fails)
//! drops it. A process-wide budget of session starts without a device
//! ([`MAX_SESSION_STARTS_WITHOUT_HARDWARE`]) stops a failing library from being
//! restarted without end: past it, QAT calls fail and the batch falls back to zlib
//! (counted).
//!
//! pthread keys: without a device, QATzip 1.3.1 leaks a pthread key (glibc has 1024
//! per process) on every `qzInit`, and `qzCompress` and `qzDecompress` run `qzInit`
//! on every call (its failed hardware probe leaves the library uninitialized).
//! Measured: 50 keys for 50 decompressions, 50 for 50 compressions, one per session
//! start, none for a reset. kpress adds no calls of its own beyond one session start
//! per level and thread at work, and stops calling QATzip without a device after
//! [`MAX_CALLS_WITHOUT_HARDWARE`] calls: past them the provider refuses and payloads
//! fall back to zlib (counted; QATzip's software backup is zlib anyway), so the process
//! keeps pthread keys for everything else.
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

use std::mem::MaybeUninit;
use std::os::raw::{c_int, c_uint};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Mutex;

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

/// How many QATzip sessions may start in a process without a QAT device (each start
/// leaks a pthread key in QATzip 1.3.1, as does each call; glibc has 1024).
pub const MAX_SESSION_STARTS_WITHOUT_HARDWARE: u32 = 200;

/// How many QATzip compress and decompress calls a process makes without a QAT device:
/// each leaks a pthread key in QATzip 1.3.1 and glibc has 1024, so past this the
/// provider refuses and the payload falls back to zlib (counted), leaving keys for the
/// rest of the process. Without a device QATzip's software backup is zlib anyway.
pub const MAX_CALLS_WITHOUT_HARDWARE: u32 = 600;

static SESSION_STARTS: AtomicU32 = AtomicU32::new(0);
static CALLS_WITHOUT_HARDWARE: AtomicU32 = AtomicU32::new(0);

/// One QATzip session, torn down and closed on drop.
struct Session {
    lib: &'static Qatzip,
    raw: Box<ffi::QzSession_T>,
    config: QatConfig,
    level: u32,
}

/// What a call leaves its session fit for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum After {
    /// The call completed: the session is ready for the next one.
    Ready,
    /// The payload stopped the session mid-stream (QZ_DATA_ERROR, a stream cut short,
    /// the caller's limit): set it up afresh and keep it.
    Reset,
    /// The session itself failed: close it.
    Retire,
}

impl Session {
    fn open(lib: &'static Qatzip, config: QatConfig, level: u32) -> Result<Session, c_int> {
        let f = lib.functions();
        let mut raw = Box::<ffi::QzSession_T>::default();
        // SAFETY: `raw` is a zeroed session that lives in a Box (QATzip keeps no
        // pointer into our stack).
        let rc = unsafe { f.qzInit(&mut *raw, u8::from(config.software_backup)) };
        if rc != ffi::QZ_OK as c_int && rc != ffi::QZ_DUPLICATE as c_int {
            return Err(rc);
        }
        let mut session = Session {
            lib,
            raw,
            config,
            level,
        };
        session.set_up()?;
        Ok(session)
    }

    /// Drops the session's stream state (a half-read stream, an inflate that hit bad
    /// data) by setting the session up afresh with the same parameters.
    fn reset(&mut self) -> Result<(), c_int> {
        // SAFETY: a session set up by `open`; QATzip frees its internal state and the
        // next call sets it up again.
        unsafe { self.lib.functions().qzTeardownSession(&mut *self.raw) };
        self.set_up()
    }

    /// Sets up an initialized session with kpress's deflate parameters.
    fn set_up(&mut self) -> Result<(), c_int> {
        let (f, raw, config, level) = (
            self.lib.functions(),
            &mut *self.raw,
            self.config,
            self.level,
        );
        // SAFETY: `raw` is an initialized session in a Box without internal state;
        // `params` is filled by QATzip's own defaults first.
        unsafe {
            let mut params = ffi::QzSessionParamsDeflateExt_T::default();
            let rc = f.qzGetDefaultsDeflateExt(&mut params);
            if rc != ffi::QZ_OK as c_int {
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
            let rc = f.qzSetupSessionDeflateExt(raw, &mut params);
            if rc != ffi::QZ_OK as c_int && rc != ffi::QZ_DUPLICATE as c_int {
                return Err(rc);
            }
        }
        Ok(())
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        let f = self.lib.functions();
        // SAFETY: the session was initialized by `open` and is released once here;
        // a teardown finds nothing to free if a failed reset already freed it.
        unsafe {
            f.qzTeardownSession(&mut *self.raw);
            f.qzClose(&mut *self.raw);
        }
    }
}

// SAFETY: a QATzip session is plain data plus library-owned state that any thread
// may use (QATzip documents its calls as thread-safe); the pool hands each session
// to one thread at a time.
unsafe impl Send for Session {}

/// Provider id and level (0: decompression).
type SessionKey = (u64, u32);

static POOL: Mutex<Vec<(SessionKey, Session)>> = Mutex::new(Vec::new());

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

    /// How many pooled QATzip sessions this process has started without a device.
    pub fn session_starts() -> u32 {
        SESSION_STARTS.load(Ordering::Relaxed)
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

    /// Runs `f` with a session for `level` (0: decompression) from the pool, opening
    /// one if none is free; `f` says what its call left the session fit for.
    fn with_session<T>(
        &self,
        level: u32,
        f: impl FnOnce(&mut ffi::QzSession_T) -> (Result<T, DeflateError>, After),
    ) -> Result<T, DeflateError> {
        if !self.hardware {
            let calls = CALLS_WITHOUT_HARDWARE.fetch_add(1, Ordering::Relaxed);
            if calls >= MAX_CALLS_WITHOUT_HARDWARE {
                if calls == MAX_CALLS_WITHOUT_HARDWARE {
                    tracing::warn!(
                        "{MAX_CALLS_WITHOUT_HARDWARE} QATzip calls without a QAT device (each leaks a pthread key); gzip goes through zlib from now on"
                    );
                }
                return Err(DeflateError::Provider {
                    provider: ProviderKind::Qat,
                    reason: format!(
                        "{MAX_CALLS_WITHOUT_HARDWARE} QATzip calls made without a QAT device; no more (each leaks a pthread key)"
                    ),
                });
            }
        }
        let key = (self.id, level);
        let pooled = {
            let mut pool = POOL.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
            pool.iter()
                .position(|(k, _)| *k == key)
                .map(|at| pool.swap_remove(at).1)
        };
        let mut session = match pooled {
            Some(session) => session,
            None => self.start_session(level)?,
        };
        let (result, after) = f(&mut session.raw);
        let keep = match after {
            After::Ready => true,
            After::Reset => session.reset().is_ok(),
            After::Retire => false,
        };
        if keep {
            POOL.lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .push((key, session));
        }
        result
    }

    fn start_session(&self, level: u32) -> Result<Session, DeflateError> {
        if !self.hardware {
            let started = SESSION_STARTS.fetch_add(1, Ordering::Relaxed);
            if started >= MAX_SESSION_STARTS_WITHOUT_HARDWARE {
                return Err(DeflateError::Provider {
                    provider: ProviderKind::Qat,
                    reason: format!(
                        "{MAX_SESSION_STARTS_WITHOUT_HARDWARE} QATzip sessions started without a QAT device; no more (each leaks a pthread key)"
                    ),
                });
            }
        }
        Session::open(self.lib, self.config, level.max(1))
            .map_err(|rc| Self::failed(rc, "qzSetupSessionDeflateExt"))
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
            // Geometric: `out` may collect many batches, and an exact reservation per batch
            // would move everything before it each time.
            out.reserve(room);
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
            // No payload makes qzCompress fail: a failure is the session's own.
            let after = if result.is_ok() {
                After::Ready
            } else {
                After::Retire
            };
            (result, after)
        })
    }

    fn inflate_raw(
        &self,
        input: &[u8],
        budget: usize,
        size_hint: Option<usize>,
        out: &mut Vec<u8>,
    ) -> Result<usize, DeflateError> {
        // Every call passes a part of `input`, so its length must fit c_uint.
        c_uint::try_from(input.len()).map_err(|_| DeflateError::Provider {
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
        let call = |sess: &mut ffi::QzSession_T, rest: &[u8], dest: *mut u8, room: usize| {
            // `rest` is within `input`, whose length fits c_uint (checked above).
            let mut consumed = rest.len() as c_uint;
            let mut written = room as c_uint;
            let mut end: u8 = 0;
            // SAFETY: `rest` is valid for its length and `dest` for `room` bytes;
            // QATzip writes at most `written` bytes and reports the counts.
            let rc =
                unsafe { f.qzDecompress(sess, rest.as_ptr(), &mut consumed, dest, &mut written) };
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
        // The stream goes through one session in as many calls as output room needs
        // (QATzip keeps the inflate state between calls until the end of the stream);
        // at the budget a one-byte probe tells "ends here" from "more".
        self.with_session(0, |sess| {
            let result = (|| {
                let start = out.len();
                let mut used = 0usize;
                let mut want = first_guess(input.len(), budget, size_hint);
                loop {
                    let produced = out.len() - start;
                    let rest = &input[used..];
                    let (rc, at_end, consumed, written) = if produced == budget {
                        let mut probe = [0u8; 1];
                        let r = call(sess, rest, probe.as_mut_ptr(), 1);
                        if r.3 > 0 {
                            return Err(DeflateError::LimitExceeded { limit: budget });
                        }
                        r
                    } else {
                        let room = want.min(budget - produced).min(c_uint::MAX as usize);
                        fill_spare(out, room, |spare: &mut [MaybeUninit<u8>]| {
                            let r = call(sess, rest, spare.as_mut_ptr().cast::<u8>(), spare.len());
                            Ok::<_, DeflateError>((r.3, r))
                        })?
                    };
                    if rc != ffi::QZ_OK as c_int {
                        return Err(classify(rc));
                    }
                    used += consumed;
                    if at_end {
                        return Ok(used);
                    }
                    if consumed == 0 && written == 0 {
                        return Err(corrupt("deflate stream is truncated".into()));
                    }
                    if written == want {
                        want = want.saturating_mul(2);
                    }
                }
            })();
            let after = match &result {
                Ok(_) => After::Ready,
                Err(DeflateError::Corrupt { .. } | DeflateError::LimitExceeded { .. }) => {
                    After::Reset
                }
                Err(DeflateError::Provider { .. }) => After::Retire,
            };
            (result, after)
        })
    }
}
