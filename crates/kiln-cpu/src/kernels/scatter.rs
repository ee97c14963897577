//! Element-wise and tuple-wise indexing: GatherElements, ScatterElements, GatherND and
//! ScatterND (ONNX semantics, documented on the [`kiln_ir::Op`] variants).
//!
//! Inputs of any layout are first read in row-major order (`to_vec`), so the loops below
//! work on dense data; every index is checked before it is used, so no loop can panic.

use super::accum::Accum;
use kiln_ir::{DType, Element, Error, HostTensor, Op, Result, ScatterReduction};

/// `out[i][j][k] = data[indices[i][j][k]][j][k]` (for `axis == 0`); the result has the
/// indices' shape.
pub fn gather_elements(data: &HostTensor, indices: &HostTensor, axis: usize) -> Result<HostTensor> {
    let name = Op::GatherElements { axis }.name();
    let (dshape, ishape) = (data.shape(), indices.shape());
    check_elements_shapes(&name, dshape, ishape, axis)?;
    let targets = element_targets(&name, dshape, ishape, &index_values(&name, indices)?, axis)?;
    let storage = kiln_ir::with_dtype!(data.dtype(), T, {
        let src = data.to_vec::<T>()?;
        T::into_storage(targets.iter().map(|&t| src[t]).collect())
    });
    HostTensor::new(storage, ishape)
}

/// A copy of `data` with `out[indices[i][j][k]][j][k] = updates[i][j][k]` (for `axis == 0`),
/// combined by `reduction`; updates apply in row-major order.
pub fn scatter_elements(
    data: &HostTensor,
    indices: &HostTensor,
    updates: &HostTensor,
    axis: usize,
    reduction: ScatterReduction,
) -> Result<HostTensor> {
    let name = Op::ScatterElements { axis, reduction }.name();
    let (dshape, ishape) = (data.shape(), indices.shape());
    check_elements_shapes(&name, dshape, ishape, axis)?;
    check_updates(&name, data, updates, ishape, reduction)?;
    let targets = element_targets(&name, dshape, ishape, &index_values(&name, indices)?, axis)?;
    let storage = kiln_ir::with_dtype!(data.dtype(), T, {
        let mut out = data.to_vec::<T>()?;
        let upd = updates.to_vec::<T>()?;
        let f = combine::<T>(reduction);
        for (&t, &u) in targets.iter().zip(&upd) {
            out[t] = f(out[t], u);
        }
        T::into_storage(out)
    });
    HostTensor::new(storage, dshape)
}

/// Slices of `data` picked by the index tuples in the last dim of `indices`, walking the first
/// `batch_dims` dims of both together.
pub fn gather_nd(data: &HostTensor, indices: &HostTensor, batch_dims: usize) -> Result<HostTensor> {
    let name = Op::GatherNd { batch_dims }.name();
    let (dshape, ishape) = (data.shape(), indices.shape());
    let b = batch_dims;
    let (r, q) = (dshape.len(), ishape.len());
    if r == 0 || q == 0 || b >= r.min(q) || dshape[..b] != ishape[..b] {
        return Err(Error::Shape(format!(
            "{name}: data {dshape:?} and indices {ishape:?} need rank >= 1, batch_dims {b} below both ranks and equal batch dims"
        )));
    }
    let m = ishape[q - 1];
    if m == 0 || m > r - b {
        return Err(Error::Shape(format!(
            "{name}: index tuples of length {m} into data {dshape:?} past {b} batch dims"
        )));
    }
    let batches: usize = dshape[..b].iter().product();
    let per_batch: usize = ishape[b..q - 1].iter().product();
    let slice: usize = dshape[b + m..].iter().product();
    let batch_stride: usize = dshape[b..].iter().product();
    let offsets = tuple_offsets(&name, dshape, b, m, &index_values(&name, indices)?)?;
    let mut out_shape = ishape[..q - 1].to_vec();
    out_shape.extend_from_slice(&dshape[b + m..]);
    let storage = kiln_ir::with_dtype!(data.dtype(), T, {
        let src = data.to_vec::<T>()?;
        let mut out: Vec<T> = Vec::with_capacity(batches * per_batch * slice);
        for (t, &off) in offsets.iter().enumerate() {
            let start = (t / per_batch.max(1)) * batch_stride + off;
            out.extend_from_slice(&src[start..start + slice]);
        }
        T::into_storage(out)
    });
    HostTensor::new(storage, &out_shape)
}

/// A copy of `data` with the slices named by the index tuples of `indices` combined with
/// `updates` by `reduction`; updates apply in row-major order of the tuples.
pub fn scatter_nd(
    data: &HostTensor,
    indices: &HostTensor,
    updates: &HostTensor,
    reduction: ScatterReduction,
) -> Result<HostTensor> {
    let name = Op::ScatterNd { reduction }.name();
    let (dshape, ishape) = (data.shape(), indices.shape());
    let (r, q) = (dshape.len(), ishape.len());
    if r == 0 || q == 0 || ishape[q - 1] == 0 || ishape[q - 1] > r {
        return Err(Error::Shape(format!(
            "{name}: data {dshape:?} and indices {ishape:?} need rank >= 1 and index tuples of length 1..={r}"
        )));
    }
    let k = ishape[q - 1];
    let mut ushape = ishape[..q - 1].to_vec();
    ushape.extend_from_slice(&dshape[k..]);
    check_updates(&name, data, updates, &ushape, reduction)?;
    let slice: usize = dshape[k..].iter().product();
    let offsets = tuple_offsets(&name, dshape, 0, k, &index_values(&name, indices)?)?;
    let storage = kiln_ir::with_dtype!(data.dtype(), T, {
        let mut out = data.to_vec::<T>()?;
        let upd = updates.to_vec::<T>()?;
        let f = combine::<T>(reduction);
        for (t, &off) in offsets.iter().enumerate() {
            let (dst, src) = (&mut out[off..off + slice], &upd[t * slice..(t + 1) * slice]);
            for (o, &u) in dst.iter_mut().zip(src) {
                *o = f(*o, u);
            }
        }
        T::into_storage(out)
    });
    HostTensor::new(storage, dshape)
}

/// How an update meets the value at its position.
fn combine<T: Element + Accum>(r: ScatterReduction) -> fn(T, T) -> T {
    match r {
        ScatterReduction::None => |_, u| u,
        ScatterReduction::Add => |v, u| T::narrow(T::add(v.widen(), u.widen())),
        ScatterReduction::Mul => |v, u| T::narrow(T::mul(v.widen(), u.widen())),
        ScatterReduction::Max => T::max_nan,
        ScatterReduction::Min => T::min_nan,
    }
}

/// The indices (i64 or i32, any layout) as i64 in row-major order.
fn index_values(name: &str, indices: &HostTensor) -> Result<Vec<i64>> {
    match indices.dtype() {
        DType::I64 => indices.to_vec::<i64>(),
        DType::I32 => Ok(indices.to_vec::<i32>()?.into_iter().map(i64::from).collect()),
        d => Err(Error::DType(format!("{name}: indices must be i64 or i32, got {d} {:?}", indices.shape()))),
    }
}

/// `i` as a position in `0..n` (negative counts from the end, once); out of range is an error
/// naming the index, the dim and the data shape.
fn resolve(name: &str, i: i64, n: usize, dim: usize, dshape: &[usize]) -> Result<usize> {
    let n64 = n as i64;
    let p = if i < 0 { i + n64 } else { i };
    if (0..n64).contains(&p) {
        Ok(p as usize)
    } else {
        Err(Error::Value(format!(
            "{name}: index {i} is out of range for dim {dim} of size {n} (data shape {dshape:?}); valid indices are -{n}..{n}"
        )))
    }
}

/// Indices of data's rank whose dims other than `axis` are at most data's.
fn check_elements_shapes(name: &str, dshape: &[usize], ishape: &[usize], axis: usize) -> Result<()> {
    if axis >= dshape.len() {
        return Err(Error::Shape(format!("{name}: axis {axis} is out of range for data {dshape:?}")));
    }
    let fits =
        ishape.len() == dshape.len() && ishape.iter().zip(dshape).enumerate().all(|(d, (&i, &n))| d == axis || i <= n);
    if !fits {
        return Err(Error::Shape(format!(
            "{name}: indices {ishape:?} must have the rank of data {dshape:?} and no larger dim except axis {axis}"
        )));
    }
    Ok(())
}

/// Updates of data's dtype and shape `ushape`; bool allows no sum or product.
fn check_updates(
    name: &str,
    data: &HostTensor,
    updates: &HostTensor,
    ushape: &[usize],
    r: ScatterReduction,
) -> Result<()> {
    if updates.dtype() != data.dtype() || updates.shape() != ushape {
        return Err(Error::Shape(format!(
            "{name}: updates must be {} {ushape:?} (data {} {:?}), got {} {:?}",
            data.dtype(),
            data.dtype(),
            data.shape(),
            updates.dtype(),
            updates.shape()
        )));
    }
    if data.dtype() == DType::Bool && matches!(r, ScatterReduction::Add | ScatterReduction::Mul) {
        return Err(Error::DType(format!(
            "{name}: reduction {r:?} needs a numeric dtype, got bool {:?}",
            data.shape()
        )));
    }
    Ok(())
}

/// For each element of the indices (row-major), the dense offset in data it addresses: its own
/// position with the coordinate along `axis` replaced by the (resolved) index value.
fn element_targets(name: &str, dshape: &[usize], ishape: &[usize], idx: &[i64], axis: usize) -> Result<Vec<usize>> {
    let dstrides = dense_strides(dshape);
    let mut coord = vec![0usize; ishape.len()];
    // Offset of `coord` in data, without the axis term.
    let mut base = 0usize;
    let mut out = Vec::with_capacity(idx.len());
    for &i in idx {
        let p = resolve(name, i, dshape[axis], axis, dshape)?;
        out.push(base + p * dstrides[axis]);
        // Advance the odometer over the indices' shape.
        for d in (0..ishape.len()).rev() {
            coord[d] += 1;
            if d != axis {
                base += dstrides[d];
            }
            if coord[d] < ishape[d] {
                break;
            }
            if d != axis {
                base -= dstrides[d] * coord[d];
            }
            coord[d] = 0;
        }
    }
    Ok(out)
}

/// The dense offset, within one block of data's dims `first..` (past the batch dims), of each
/// length-`m` index tuple of `idx` (which addresses dims `first..first + m`).
fn tuple_offsets(name: &str, dshape: &[usize], first: usize, m: usize, idx: &[i64]) -> Result<Vec<usize>> {
    let block = &dshape[first..];
    let strides = dense_strides(block);
    idx.chunks_exact(m)
        .map(|tuple| {
            tuple
                .iter()
                .enumerate()
                .try_fold(0usize, |acc, (d, &i)| Ok(acc + resolve(name, i, block[d], first + d, dshape)? * strides[d]))
        })
        .collect()
}

/// Row-major strides of a dense tensor of `shape`.
fn dense_strides(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![1usize; shape.len()];
    for d in (0..shape.len().saturating_sub(1)).rev() {
        s[d] = s[d + 1] * shape[d + 1];
    }
    s
}
