//! Per-thread heap accounting, so a target can assert how much a call allocated at
//! once: "never allocate from a declared size" is a property of the peak, which no
//! result value shows.
//!
//! Counts the Rust heap only (every `Vec` a codec fills); C libraries' own `malloc`s
//! are bounded by libFuzzer's `-malloc_limit_mb` instead.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

/// The system allocator, with each thread's live and peak bytes counted.
struct CountingAllocator;

#[global_allocator]
static ALLOCATOR: CountingAllocator = CountingAllocator;

thread_local! {
    /// Bytes this thread allocated minus bytes it freed (negative when it frees
    /// another thread's memory).
    static LIVE: Cell<isize> = const { Cell::new(0) };
    /// The highest `LIVE` since the innermost [`peak_growth`] started.
    static PEAK: Cell<isize> = const { Cell::new(0) };
}

fn count(delta: isize) {
    // `try_with`: a thread's allocations during its own teardown are not counted.
    let _ = LIVE.try_with(|live| {
        let now = live.get() + delta;
        live.set(now);
        let _ = PEAK.try_with(|peak| peak.set(peak.get().max(now)));
    });
}

// SAFETY: every call is forwarded to `System` with the caller's arguments; counting
// touches only const-initialized thread-locals, which never allocate.
unsafe impl GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller upholds `GlobalAlloc::alloc`'s contract.
        let ptr = unsafe { System.alloc(layout) };
        if !ptr.is_null() {
            count(layout.size() as isize);
        }
        ptr
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller upholds `GlobalAlloc::alloc_zeroed`'s contract.
        let ptr = unsafe { System.alloc_zeroed(layout) };
        if !ptr.is_null() {
            count(layout.size() as isize);
        }
        ptr
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller upholds `GlobalAlloc::dealloc`'s contract.
        unsafe { System.dealloc(ptr, layout) };
        count(-(layout.size() as isize));
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: the caller upholds `GlobalAlloc::realloc`'s contract.
        let new = unsafe { System.realloc(ptr, layout, new_size) };
        if !new.is_null() {
            count(new_size as isize - layout.size() as isize);
        }
        new
    }
}

/// Runs `f` and returns its result and the most heap bytes this thread held at once
/// during the call beyond what it held when the call started.
pub(crate) fn peak_growth<R>(f: impl FnOnce() -> R) -> (R, usize) {
    let start = LIVE.with(Cell::get);
    let outer_peak = PEAK.with(|peak| peak.replace(start));
    let result = f();
    let peak = PEAK.with(Cell::get);
    PEAK.with(|p| p.set(outer_peak.max(peak)));
    (result, usize::try_from(peak - start).unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_the_peak_not_what_is_left() {
        let ((), peak) = peak_growth(|| {
            let big = vec![1u8; 1 << 20];
            drop(big);
            let _small = Box::new([1u8; 10]);
        });
        assert!((1 << 20..(1 << 20) + 4096).contains(&peak), "{peak}");
        let (kept, peak) = peak_growth(|| Vec::<u8>::with_capacity(4096));
        assert_eq!(peak, 4096);
        drop(kept);
        assert_eq!(peak_growth(|| ()).1, 0);
    }
}
