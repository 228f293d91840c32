//! The gzip provider interface: a provider supplies raw deflate and inflate; the
//! gzip member framing, CRC-32 and the decompression bound are the same for all.

use std::fmt;
use std::mem::MaybeUninit;

use crate::member::{self, TRAILER_LEN};
use crate::DeflateError;

/// The deflate implementations kpress can use for gzip.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ProviderKind {
    /// Intel QuickAssist through QATzip (hardware, or QATzip's software backup).
    Qat,
    /// Intel ISA-L's igzip (software, SIMD).
    Isal,
    /// Eric Biggers' libdeflate (software, whole-buffer).
    Libdeflate,
    /// zlib-rs through flate2: kpress's default, the reference output.
    Zlib,
}

impl ProviderKind {
    /// Every provider, in the order `auto` prefers them when each qualifies.
    pub const ALL: [ProviderKind; 4] = [
        ProviderKind::Qat,
        ProviderKind::Isal,
        ProviderKind::Libdeflate,
        ProviderKind::Zlib,
    ];

    /// The name used in `compression.gzip.provider`.
    pub fn name(self) -> &'static str {
        match self {
            ProviderKind::Qat => "qat",
            ProviderKind::Isal => "isal",
            ProviderKind::Libdeflate => "libdeflate",
            ProviderKind::Zlib => "zlib",
        }
    }
}

impl fmt::Display for ProviderKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What a provider reports about itself on this host, for logs and status pages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProviderStatus {
    pub provider: ProviderKind,
    /// The provider can be selected.
    pub available: bool,
    /// It runs on an accelerator rather than the CPU.
    pub hardware: bool,
    /// Library path and version, the software-backup reason, or why it is unavailable.
    pub detail: String,
}

/// A gzip implementation. Implementors supply raw deflate and inflate with their own
/// per-thread state; [`compress`](Self::compress) and [`decompress`](Self::decompress)
/// add the one gzip member framing of [`crate::member`].
///
/// Levels are zlib's 1..=9 (Kafka's `compression.gzip.level` with -1 resolved to 6);
/// each provider maps them onto its own scale and documents how.
pub trait GzipProvider: Send + Sync + fmt::Debug {
    fn kind(&self) -> ProviderKind;

    /// Appends the raw deflate stream (RFC 1951, final block included) of `input` to
    /// `out`. On error `out` may hold partial output past its original length.
    fn deflate_raw(&self, input: &[u8], level: u32, out: &mut Vec<u8>) -> Result<(), DeflateError>;

    /// Inflates the raw deflate stream at the start of `input` (which may continue with
    /// other bytes) and appends its output to `out`, returning how many input bytes the
    /// stream took. Output beyond `budget` bytes fails with
    /// [`DeflateError::LimitExceeded`] after allocating at most about `budget` bytes.
    /// `size_hint` is what the gzip trailer claims: a first guess, never trusted.
    fn inflate_raw(
        &self,
        input: &[u8],
        budget: usize,
        size_hint: Option<usize>,
        out: &mut Vec<u8>,
    ) -> Result<usize, DeflateError>;

    /// Appends exactly one gzip member holding `input`, compressed at `level` (1..=9).
    /// On error `out` is left as it was.
    fn compress(&self, input: &[u8], level: u32, out: &mut Vec<u8>) -> Result<(), DeflateError> {
        let start = out.len();
        member::write_header(out, level);
        if let Err(e) = self.deflate_raw(input, level, out) {
            out.truncate(start);
            return Err(e);
        }
        member::write_trailer(out, crc32fast::hash(input), input.len());
        Ok(())
    }

    /// Appends the concatenated contents of the one or more gzip members in `input` to
    /// `out` and returns how many bytes that was; more than `limit` bytes fails with
    /// [`DeflateError::LimitExceeded`]. Each member's CRC-32 and ISIZE are checked;
    /// bytes after the last member that do not start another are refused. On error
    /// `out` is left as it was.
    fn decompress(
        &self,
        input: &[u8],
        limit: usize,
        out: &mut Vec<u8>,
    ) -> Result<usize, DeflateError> {
        let start = out.len();
        let result = decompress_members(self, input, limit, out);
        if result.is_err() {
            out.truncate(start);
        }
        result
    }
}

fn decompress_members<P: GzipProvider + ?Sized>(
    provider: &P,
    input: &[u8],
    limit: usize,
    out: &mut Vec<u8>,
) -> Result<usize, DeflateError> {
    let corrupt = |reason: String| DeflateError::Corrupt {
        provider: provider.kind(),
        reason,
    };
    if input.is_empty() {
        return Err(corrupt("empty gzip payload".into()));
    }
    // The last member's ISIZE: the whole size when, as usual, there is one member.
    let size_hint = input
        .len()
        .checked_sub(TRAILER_LEN)
        .and_then(|at| member::read_trailer(&input[at..]))
        .map(|t| t.isize as usize);
    let start = out.len();
    let mut rest = input;
    while !rest.is_empty() {
        let header_len = member::parse_header(rest).map_err(|reason| {
            if rest.len() == input.len() {
                corrupt(reason)
            } else {
                corrupt(format!(
                    "{} bytes after the last gzip member: {reason}",
                    rest.len()
                ))
            }
        })?;
        let body = &rest[header_len..];
        let member_start = out.len();
        let budget = limit - (member_start - start);
        let used = provider
            .inflate_raw(body, budget, size_hint, out)
            .map_err(|e| match e {
                // Reported against the caller's limit, not what was left of it.
                DeflateError::LimitExceeded { .. } => DeflateError::LimitExceeded { limit },
                e => e,
            })?;
        let trailer = body
            .get(used..)
            .and_then(member::read_trailer)
            .ok_or_else(|| corrupt("gzip member ends without its 8-byte trailer".into()))?;
        let content = &out[member_start..];
        let crc = crc32fast::hash(content);
        if crc != trailer.crc {
            return Err(corrupt(format!(
                "gzip CRC-32 {:#010x} does not match the trailer's {:#010x}",
                crc, trailer.crc
            )));
        }
        if content.len() as u32 != trailer.isize {
            return Err(corrupt(format!(
                "gzip member holds {} bytes but its trailer says {} (mod 2^32)",
                content.len(),
                trailer.isize
            )));
        }
        rest = &body[used + TRAILER_LEN..];
    }
    Ok(out.len() - start)
}

/// Lets `fill` write into the next `want` bytes of `out`'s spare capacity (reserved
/// here, not zeroed) and keeps the `n` bytes it reports written; passes on its `T`.
pub(crate) fn fill_spare<T, E>(
    out: &mut Vec<u8>,
    want: usize,
    fill: impl FnOnce(&mut [MaybeUninit<u8>]) -> Result<(usize, T), E>,
) -> Result<T, E> {
    // Exact: a caller's room is a bound on allocation (decompression limits).
    out.reserve_exact(want);
    let spare = &mut out.spare_capacity_mut()[..want];
    let (written, value) = fill(spare)?;
    assert!(written <= want, "a provider reported more output than room");
    // SAFETY: `fill` initialised the first `written` bytes of the spare capacity, which
    // the assertion keeps within what was reserved.
    unsafe { out.set_len(out.len() + written) };
    Ok(value)
}

/// The most a raw deflate stream of `len` bytes can inflate to. Its densest code is a
/// 258-byte match at distance 1 in 2 bits (1-bit length and distance codes): 1032
/// bytes per input byte.
pub(crate) fn max_inflated_len(len: usize) -> usize {
    len.saturating_mul(1032)
}

/// The first output reservation for inflating `input_len` bytes within `budget`: the
/// trailer's claim when the input can produce it, else a multiple of the input, at
/// least 64 KiB; never more than `budget` nor than the input can inflate to.
pub(crate) fn first_guess(input_len: usize, budget: usize, size_hint: Option<usize>) -> usize {
    let most = max_inflated_len(input_len).min(budget);
    let guess = match size_hint {
        Some(hint) if hint <= most => hint,
        _ => input_len.saturating_mul(4).max(64 * 1024),
    };
    guess.clamp(1, most.max(1))
}

/// A provider's library state on one thread: a compressor per zlib level (index
/// 1..=9), made on first use, and one decompressor.
pub(crate) struct ThreadState<C, D> {
    compressors: [Option<C>; 10],
    decompressor: Option<D>,
}

impl<C, D> ThreadState<C, D> {
    pub(crate) const fn new() -> Self {
        ThreadState {
            compressors: [const { None }; 10],
            decompressor: None,
        }
    }

    /// The compressor for `level` (already clamped to 1..=9), made by `make` if new.
    pub(crate) fn compressor<E>(
        &mut self,
        level: u32,
        make: impl FnOnce() -> Result<C, E>,
    ) -> Result<&mut C, E> {
        get_or_try_insert(&mut self.compressors[level as usize], make)
    }

    /// The decompressor, made by `make` if new.
    pub(crate) fn decompressor<E>(
        &mut self,
        make: impl FnOnce() -> Result<D, E>,
    ) -> Result<&mut D, E> {
        get_or_try_insert(&mut self.decompressor, make)
    }
}

fn get_or_try_insert<T, E>(
    slot: &mut Option<T>,
    make: impl FnOnce() -> Result<T, E>,
) -> Result<&mut T, E> {
    if let Some(value) = slot {
        return Ok(value);
    }
    Ok(slot.insert(make()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_densest_deflate_zlib_writes_is_within_the_expansion_bound() {
        use std::io::Write;
        let zeros = vec![0u8; 16 << 20];
        let mut encoder =
            flate2::write::DeflateEncoder::new(Vec::new(), flate2::Compression::best());
        encoder.write_all(&zeros).unwrap();
        let raw = encoder.finish().unwrap();
        // About 1030 bytes per byte: close to the bound, and within it.
        assert!(zeros.len() > max_inflated_len(raw.len()) * 99 / 100);
        assert!(zeros.len() <= max_inflated_len(raw.len()));
        assert_eq!(
            first_guess(raw.len(), 64 << 20, Some(zeros.len())),
            zeros.len()
        );
        // A claim the input cannot produce is not the first guess.
        assert_eq!(first_guess(20, 64 << 20, Some(60 << 20)), 20 * 1032);
    }
}
