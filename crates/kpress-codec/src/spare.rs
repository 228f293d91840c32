//! Appending to a `Vec<u8>` through its spare capacity, so codecs write their output
//! in place (no zero-fill, no staging copy) and never past a bound.

use std::mem::MaybeUninit;

/// Reserves room for `max` more bytes in `out`, lets `write` fill a prefix of that
/// room, and makes the prefix it reports part of `out`.
///
/// # Safety
///
/// `write` must return a count `n <= max` such that it initialized the first `n`
/// bytes of the slice it was given.
pub(crate) unsafe fn append_with<R>(
    out: &mut Vec<u8>,
    max: usize,
    write: impl FnOnce(&mut [MaybeUninit<u8>]) -> (usize, R),
) -> R {
    out.reserve_exact(max);
    let (written, result) = write(&mut out.spare_capacity_mut()[..max]);
    assert!(written <= max, "a codec reported writing past its buffer");
    let len = out.len() + written;
    // SAFETY: the caller guarantees that `written` bytes after the old length were
    // initialized, and they lie within the capacity reserved above.
    unsafe { out.set_len(len) };
    result
}

/// Makes room for `needed` more bytes in `out`, growing it geometrically (as
/// `Vec::reserve` would) but never by more than `room`, the bytes a caller's limit
/// still allows. `needed` must not exceed `room`.
pub(crate) fn reserve_within(out: &mut Vec<u8>, needed: usize, room: usize) {
    if out.capacity() - out.len() < needed {
        out.reserve_exact(needed.max(out.len().min(room)));
    }
}
