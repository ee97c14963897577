//! Typed element access to raw buffer memory (the arena, bound inputs and constants).
//!
//! Bools live as one byte 0/1 (as the C renderer stores them); they are read as `byte != 0`
//! so that no byte pattern can make an invalid Rust `bool`.

use kiln_ir::{DType, Element, Storage};

/// Reads element `i` of a buffer of `T` at `base`.
///
/// # Safety
/// `base` must point to at least `i + 1` elements of `T` (bytes for bool).
#[inline]
pub(crate) unsafe fn read<T: Element>(base: *const u8, i: usize) -> T {
    if T::DTYPE == DType::Bool {
        // SAFETY: the caller guarantees byte `i` exists.
        let b = unsafe { base.add(i).read() };
        T::from_f64((b != 0) as u8 as f64)
    } else {
        // SAFETY: as above, for `size_of::<T>()` bytes at element `i`.
        unsafe { base.cast::<T>().add(i).read_unaligned() }
    }
}

/// Writes element `i` of a buffer of `T` at `base` (bools as the byte 0 or 1).
///
/// # Safety
/// `base` must point to at least `i + 1` writable elements of `T`.
#[inline]
pub(crate) unsafe fn write<T: Element>(base: *mut u8, i: usize, v: T) {
    if T::DTYPE == DType::Bool {
        // SAFETY: the caller guarantees byte `i` exists and is writable.
        unsafe { base.add(i).write((v.to_f64() != 0.0) as u8) }
    } else {
        // SAFETY: as above, for `size_of::<T>()` bytes at element `i`.
        unsafe { base.cast::<T>().add(i).write_unaligned(v) }
    }
}

/// The address of a storage's first element. The memory is only ever read through it.
pub(crate) fn storage_ptr(s: &Storage) -> *mut u8 {
    kiln_ir::with_dtype!(s.dtype(), T, {
        T::slice(s).map_or(std::ptr::null_mut(), |v| v.as_ptr() as *mut u8)
    })
}
