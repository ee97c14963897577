//! Cumulative sums and products along an axis (ONNX CumSum/CumProd).

use super::accum::Accum;
use kiln_ir::{CumulativeOp, DType, Element, Error, HostTensor, Op, Result};

/// The running `op` of `x` along `axis` (semantics in [`kiln_ir::Op::Cumulative`]).
pub fn cumulative(op: CumulativeOp, x: &HostTensor, axis: usize, exclusive: bool, reverse: bool) -> Result<HostTensor> {
    let name = Op::Cumulative { op, axis, exclusive, reverse }.name();
    let shape = x.shape();
    if axis >= shape.len() {
        return Err(Error::Shape(format!("{name}: axis {axis} is out of range for shape {shape:?}")));
    }
    if x.dtype() == DType::Bool {
        return Err(Error::DType(format!("{name}: needs a numeric input, got bool {shape:?}")));
    }
    let outer: usize = shape[..axis].iter().product();
    let inner: usize = shape[axis + 1..].iter().product();
    let n = shape[axis];
    let storage = kiln_ir::with_dtype!(x.dtype(), T, {
        let src = x.to_vec::<T>()?;
        T::into_storage(scan::<T>(&src, outer, n, inner, op, exclusive, reverse))
    });
    HostTensor::new(storage, shape)
}

/// One accumulation step (sum or product).
type Step<A> = fn(A, A) -> A;

/// The scan over dense `[outer, n, inner]` data. Each outer block keeps one accumulator per
/// inner position and walks the axis row by row, so every pass reads contiguous rows.
fn scan<T: Element + Accum>(
    src: &[T],
    outer: usize,
    n: usize,
    inner: usize,
    op: CumulativeOp,
    exclusive: bool,
    reverse: bool,
) -> Vec<T> {
    let (identity, step): (T::Acc, Step<T::Acc>) = match op {
        CumulativeOp::Sum => (T::ACC_ZERO, T::add),
        CumulativeOp::Prod => (T::ACC_ONE, T::mul),
    };
    let mut out = vec![T::zero(); src.len()];
    let mut acc = vec![identity; inner];
    for o in 0..outer {
        acc.fill(identity);
        for s in 0..n {
            let j = if reverse { n - 1 - s } else { s };
            let base = (o * n + j) * inner;
            let (xs, ys) = (&src[base..base + inner], &mut out[base..base + inner]);
            for ((a, &v), y) in acc.iter_mut().zip(xs).zip(ys) {
                let next = step(*a, v.widen());
                *y = T::narrow(if exclusive { *a } else { next });
                *a = next;
            }
        }
    }
    out
}
