//! A counting global allocator: the system allocator plus two atomics (bytes live now, and the
//! most bytes live at once), so `bench` can report the peak heap a forward pass needs.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

/// Wraps [`System`], counting the bytes currently allocated and their high-water mark.
pub struct CountingAlloc;

static CURRENT: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

#[global_allocator]
static GLOBAL: CountingAlloc = CountingAlloc;

fn grew(bytes: usize) {
    let now = CURRENT.fetch_add(bytes, Ordering::Relaxed) + bytes;
    PEAK.fetch_max(now, Ordering::Relaxed);
}

fn shrank(bytes: usize) {
    CURRENT.fetch_sub(bytes, Ordering::Relaxed);
}

// SAFETY: every call is forwarded unchanged to `System`; the counters never affect the memory
// handed out.
unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: same contract as the caller's.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            grew(layout.size());
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: same contract as the caller's.
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            grew(layout.size());
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(ptr, layout) };
        shrank(layout.size());
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: same contract as the caller's.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            if new_size >= layout.size() {
                grew(new_size - layout.size());
            } else {
                shrank(layout.size() - new_size);
            }
        }
        p
    }
}

/// Bytes allocated and not yet freed, across all threads.
pub fn current_bytes() -> usize {
    CURRENT.load(Ordering::Relaxed)
}

/// Starts a new measurement window: the peak is reset to what is live now, which is returned as
/// the baseline to subtract from [`peak_bytes`].
pub fn reset_peak() -> usize {
    let now = current_bytes();
    PEAK.store(now, Ordering::Relaxed);
    now
}

/// The most bytes live at once since the last [`reset_peak`].
pub fn peak_bytes() -> usize {
    PEAK.load(Ordering::Relaxed)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// True when `f`'s allocation raised the peak by 8 MB in one of a few tries: other test
    /// threads allocate and free at the same time, and a big free of theirs between the reset
    /// and the allocation lowers the base it is measured from.
    fn raises_peak_by_8mb(f: impl Fn()) -> bool {
        (0..5).any(|_| {
            let base = reset_peak();
            f();
            peak_bytes().saturating_sub(base) >= 8 << 20
        })
    }

    #[test]
    fn peak_sees_a_temporary_allocation() {
        assert!(raises_peak_by_8mb(|| {
            let big = vec![1u8; 8 << 20];
            std::hint::black_box(&big);
        }));
    }

    #[test]
    fn realloc_growth_is_counted() {
        assert!(raises_peak_by_8mb(|| {
            let mut v: Vec<u64> = Vec::with_capacity(1);
            v.reserve_exact(1 << 20);
            std::hint::black_box(&v);
        }));
    }
}
