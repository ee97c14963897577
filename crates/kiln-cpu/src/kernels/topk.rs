//! The k largest or smallest elements along an axis (ONNX TopK): their values or indices.

use super::accum::Accum;
use super::norm::real::{for_each_row, worth_parallel};
use kiln_ir::{DType, Element, Error, HostTensor, Op, Result, TopKOutput};
use std::cmp::Ordering;

/// The top-`k` selection of `x` along `axis` (semantics in [`kiln_ir::Op::TopK`]): values in
/// `x`'s dtype or i64 indices, as `output` says.
pub fn topk(
    x: &HostTensor,
    axis: usize,
    k: usize,
    largest: bool,
    sorted: bool,
    output: TopKOutput,
) -> Result<HostTensor> {
    let name = Op::TopK { axis, k, largest, sorted, output }.name();
    let shape = x.shape();
    if axis >= shape.len() {
        return Err(Error::Shape(format!("{name}: axis {axis} is out of range for shape {shape:?}")));
    }
    let n = shape[axis];
    if k > n {
        return Err(Error::Shape(format!("{name}: k = {k} exceeds the size {n} of axis {axis} (shape {shape:?})")));
    }
    if x.dtype() == DType::Bool {
        return Err(Error::DType(format!("{name}: needs a numeric input, got bool {shape:?}")));
    }
    let outer: usize = shape[..axis].iter().product();
    let inner: usize = shape[axis + 1..].iter().product();
    let mut out_shape = shape.to_vec();
    out_shape[axis] = k;
    let sel = Selection { outer, n, inner, k, largest, sorted };
    kiln_ir::with_dtype!(x.dtype(), T, {
        let src = x.to_vec::<T>()?;
        match output {
            TopKOutput::Values => {
                let vals = sel.run::<T, T>(&src, |_, v| v)?;
                HostTensor::from_vec(vals, &out_shape)
            }
            TopKOutput::Indices => {
                let idx = sel.run::<T, i64>(&src, |j, _| j as i64)?;
                HostTensor::from_vec(idx, &out_shape)
            }
        }
    })
}

/// The geometry and order of one top-k over dense `[outer, n, inner]` data.
struct Selection {
    outer: usize,
    n: usize,
    inner: usize,
    k: usize,
    largest: bool,
    sorted: bool,
}

impl Selection {
    /// The dense `[outer, k, inner]` result, `emit(index, value)` for each selected element.
    fn run<T: Element + Accum, U: Element>(&self, src: &[T], emit: impl Fn(usize, T) -> U + Sync) -> Result<Vec<U>> {
        let &Selection { outer, n, inner, k, largest, sorted } = self;
        let mut out = vec![U::zero(); outer * k * inner];
        // Higher rank first (by value, then the lower index): a total order, so ties resolve
        // to the lower index whatever the selection algorithm does.
        let before = |a: &(usize, T), b: &(usize, T)| -> Ordering {
            let by_value = T::total_cmp_nan(a.1, b.1);
            let by_value = if largest { by_value.reverse() } else { by_value };
            by_value.then(a.0.cmp(&b.0))
        };
        for_each_row(&mut out, k * inner, worth_parallel(outer * n * inner), |o, block| {
            let mut lane: Vec<(usize, T)> = Vec::with_capacity(n);
            for i in 0..inner {
                lane.clear();
                lane.extend((0..n).map(|j| (j, src[(o * n + j) * inner + i])));
                if k < n && k > 0 {
                    lane.select_nth_unstable_by(k - 1, before);
                }
                let top = &mut lane[..k];
                if sorted {
                    top.sort_unstable_by(before);
                } else {
                    top.sort_unstable_by_key(|e| e.0);
                }
                for (r, &(j, v)) in top.iter().enumerate() {
                    block[r * inner + i] = emit(j, v);
                }
            }
            Ok(())
        })?;
        Ok(out)
    }
}
