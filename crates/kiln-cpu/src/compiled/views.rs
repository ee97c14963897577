//! Strided [`BufView`]s of bound buffers: bounds checks (done once, when an executable is
//! built, so the raw accesses of a run stay inside their buffers) and copies into tensors.

use super::raw;
use kiln_ir::{Error, HostTensor, Result};
use kiln_sched::{BufView, Program};

/// Checks that every element `v` can address lies inside its buffer.
pub(crate) fn check_view(p: &Program, v: &BufView, what: &str) -> Result<()> {
    let buf = p.buffers.get(v.buf.index()).ok_or_else(|| {
        Error::Graph(format!(
            "{what}: view of buffer {} of {}",
            v.buf.0,
            p.buffers.len()
        ))
    })?;
    if v.shape.len() != v.strides.len() {
        return Err(Error::Graph(format!(
            "{what}: view shape {:?} and strides {:?} differ in rank",
            v.shape, v.strides
        )));
    }
    if v.shape.contains(&0) {
        return Ok(());
    }
    let mut last = Some(v.offset);
    for (&d, &s) in v.shape.iter().zip(&v.strides) {
        last = last.and_then(|l| (d - 1).checked_mul(s).and_then(|x| x.checked_add(l)));
    }
    match last {
        Some(l) if l < buf.numel => Ok(()),
        _ => Err(Error::Graph(format!(
            "{what}: view {:?}/{:?}+{} reaches outside buffer {} of {} elements",
            v.shape, v.strides, v.offset, v.buf.0, buf.numel
        ))),
    }
}

/// A dense tensor holding the elements of `v` (a checked view of a bound buffer).
pub(crate) fn read_view(p: &Program, ptrs: &[*mut u8], v: &BufView) -> Result<HostTensor> {
    let dtype = p.buffer(v.buf).dtype;
    let base = ptrs[v.buf.index()] as *const u8;
    let layout = v.layout();
    kiln_ir::with_dtype!(dtype, T, {
        let mut out: Vec<T> = Vec::with_capacity(layout.numel());
        // SAFETY: `check_view` proved every offset the layout yields is inside the buffer.
        layout.for_each_offset(|o| out.push(unsafe { raw::read::<T>(base, o) }));
        HostTensor::from_vec(out, &v.shape)
    })
}

/// Copies the dense tensor `t` into the buffer at `base` (which holds at least `t.numel()`
/// elements of `t`'s dtype): densely, or element `[i0, i1, ..]` to `Σ ik * strides[k]` (a
/// permutation of a dense layout, checked by `Executable::new`).
pub(crate) fn write_dense(t: &HostTensor, base: *mut u8, strides: Option<&[usize]>) -> Result<()> {
    kiln_ir::with_dtype!(t.dtype(), T, {
        let v = t.to_vec::<T>()?;
        match strides {
            None => {
                for (i, x) in v.into_iter().enumerate() {
                    // SAFETY: the caller guarantees the buffer holds `t.numel()` elements.
                    unsafe { raw::write::<T>(base, i, x) };
                }
            }
            Some(s) => {
                let layout = kiln_ir::Layout {
                    shape: t.shape().to_vec(),
                    strides: s.iter().map(|&x| x as isize).collect(),
                    offset: 0,
                };
                let mut it = v.into_iter();
                layout.for_each_offset(|o| {
                    if let Some(x) = it.next() {
                        // SAFETY: a permutation of a dense layout of `t.numel()` elements.
                        unsafe { raw::write::<T>(base, o, x) };
                    }
                });
            }
        }
    });
    Ok(())
}

/// The elements of a buffer of `numel` elements as a dense tensor of `shape`.
pub(crate) fn read_dense(
    base: *const u8,
    dtype: kiln_ir::DType,
    shape: &[usize],
) -> Result<HostTensor> {
    let n: usize = shape.iter().product();
    kiln_ir::with_dtype!(dtype, T, {
        // SAFETY: the caller guarantees the buffer holds `n` elements of `dtype`.
        let v: Vec<T> = (0..n).map(|i| unsafe { raw::read::<T>(base, i) }).collect();
        HostTensor::from_vec(v, shape)
    })
}
