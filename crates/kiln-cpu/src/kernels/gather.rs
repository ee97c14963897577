//! Gather along an axis (ONNX Gather, embedding lookup).

use super::norm::real::{for_each_row, worth_parallel};
use kiln_ir::{DType, Element, Error, HostTensor, Layout, Result};

/// `data` gathered at `indices` along `axis`; out-of-range indices are an error.
pub fn gather(data: &HostTensor, indices: &HostTensor, axis: usize, shape: &[usize]) -> Result<HostTensor> {
    let dshape = data.shape();
    if axis >= dshape.len() {
        return Err(Error::Shape(format!("gather: axis {axis} is out of range for data {dshape:?}")));
    }
    let idx = resolve_indices(indices, dshape, axis)?;
    let expected: Vec<usize> =
        dshape[..axis].iter().chain(indices.shape()).chain(&dshape[axis + 1..]).copied().collect();
    if expected != shape {
        return Err(Error::Shape(format!(
            "gather: data {dshape:?} and indices {:?} along axis {axis} give {expected:?}, not {shape:?}",
            indices.shape()
        )));
    }
    let numel: usize = shape.iter().product();
    if numel == 0 {
        return Ok(HostTensor::zeros(data.dtype(), shape));
    }
    let l = &data.layout;
    // Storage offsets relative to element [0, ..]: one per outer index, one per inner index.
    let outer_offsets = relative_offsets(&l.shape[..axis], &l.strides[..axis]);
    let inner_layout = Layout { shape: l.shape[axis + 1..].to_vec(), strides: l.strides[axis + 1..].to_vec(), offset: 0 };
    let inner = inner_layout.numel();
    let inner_offsets =
        if inner_layout.is_contiguous() { None } else { Some(relative_offsets(&inner_layout.shape, &inner_layout.strides)) };
    let axis_stride = l.strides[axis];
    let storage = kiln_ir::with_dtype!(data.dtype(), T, {
        let src = T::slice(&data.storage).ok_or_else(|| Error::DType(format!("gather: storage is not {}", data.dtype())))?;
        let mut out: Vec<T> = vec![T::zero(); numel];
        // Output row r (of `inner` elements) is data[o, idx[j], ..] with (o, j) = divmod(r, #indices).
        for_each_row(&mut out, inner, worth_parallel(numel), |r, row| {
            let (o, j) = (r / idx.len(), r % idx.len());
            let start = l.offset as isize + outer_offsets[o] + idx[j] as isize * axis_stride;
            match &inner_offsets {
                // Embedding lookups and every dense table take this path: copy whole rows.
                None => {
                    let s = start as usize;
                    row.copy_from_slice(&src[s..s + inner]);
                }
                Some(offs) => {
                    for (v, off) in row.iter_mut().zip(offs) {
                        *v = src[(start + off) as usize];
                    }
                }
            }
            Ok(())
        })?;
        T::into_storage(out)
    });
    HostTensor::new(storage, shape)
}

/// The indices as positions in `0..dshape[axis]` (negative ones count from the end, once);
/// an index outside `-n..n` is an error naming it and the dim size.
fn resolve_indices(indices: &HostTensor, dshape: &[usize], axis: usize) -> Result<Vec<usize>> {
    let raw: Vec<i64> = match indices.dtype() {
        DType::I64 => indices.to_vec::<i64>()?,
        DType::I32 => indices.to_vec::<i32>()?.into_iter().map(i64::from).collect(),
        d => return Err(Error::DType(format!("gather: indices must be i64 or i32, got {d}"))),
    };
    let n = dshape[axis] as i64;
    raw.into_iter()
        .map(|i| {
            let p = if i < 0 { i + n } else { i };
            if (0..n).contains(&p) {
                Ok(p as usize)
            } else {
                Err(Error::Value(format!(
                    "gather: index {i} is out of range for axis {axis} of size {n} (data shape {dshape:?})"
                )))
            }
        })
        .collect()
}

/// Storage offsets, relative to the first element, of every index of a (shape, strides)
/// block in row-major order. Strides may be negative, so the walk starts from a shifted base
/// that keeps every visited offset non-negative.
fn relative_offsets(shape: &[usize], strides: &[isize]) -> Vec<isize> {
    let shift: isize = shape.iter().zip(strides).map(|(&n, &s)| if s < 0 { -s * (n.max(1) as isize - 1) } else { 0 }).sum();
    let l = Layout { shape: shape.to_vec(), strides: strides.to_vec(), offset: shift as usize };
    let mut out = Vec::with_capacity(l.numel());
    l.for_each_offset(|o| out.push(o as isize - shift));
    out
}
