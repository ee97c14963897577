//! Reductions over axes and arg-max/arg-min.

use super::Tensor;
use crate::dispatch::dispatch;
use kiln_ir::{ArgReduceOp, Error, Op, ReduceOp, Result};

impl Tensor {
    /// Sum over `axes` (negative allowed; empty = all axes); `keep_dim` keeps them as size 1.
    pub fn sum(&self, axes: &[i64], keep_dim: bool) -> Result<Tensor> {
        self.reduce(ReduceOp::Sum, axes, keep_dim)
    }

    /// Mean over `axes` (as [`Tensor::sum`]); an empty reduction gives NaN.
    pub fn mean(&self, axes: &[i64], keep_dim: bool) -> Result<Tensor> {
        self.reduce(ReduceOp::Mean, axes, keep_dim)
    }

    /// Maximum over `axes` (as [`Tensor::sum`]).
    pub fn max(&self, axes: &[i64], keep_dim: bool) -> Result<Tensor> {
        self.reduce(ReduceOp::Max, axes, keep_dim)
    }

    /// Minimum over `axes` (as [`Tensor::sum`]).
    pub fn min(&self, axes: &[i64], keep_dim: bool) -> Result<Tensor> {
        self.reduce(ReduceOp::Min, axes, keep_dim)
    }

    /// Product over `axes` (as [`Tensor::sum`]).
    pub fn prod(&self, axes: &[i64], keep_dim: bool) -> Result<Tensor> {
        self.reduce(ReduceOp::Prod, axes, keep_dim)
    }

    /// Sum of all elements, as a rank-0 tensor.
    pub fn sum_all(&self) -> Result<Tensor> {
        self.sum(&[], false)
    }

    /// Index (i64) of the first maximum along `axis` (NaN counts as the largest).
    pub fn argmax(&self, axis: i64, keep_dim: bool) -> Result<Tensor> {
        self.arg_reduce(ArgReduceOp::ArgMax, "argmax", axis, keep_dim)
    }

    /// Index (i64) of the first minimum along `axis`.
    pub fn argmin(&self, axis: i64, keep_dim: bool) -> Result<Tensor> {
        self.arg_reduce(ArgReduceOp::ArgMin, "argmin", axis, keep_dim)
    }

    fn reduce(&self, op: ReduceOp, axes: &[i64], keep_dims: bool) -> Result<Tensor> {
        let name = Op::Reduce { op, axes: vec![], keep_dims }.name();
        let axes = if axes.is_empty() {
            // PyTorch: no dims means every dim (the IR's empty list would mean none).
            (0..self.rank()).collect()
        } else {
            let mut v = axes.iter().map(|&a| self.axis(a, &name)).collect::<Result<Vec<_>>>()?;
            v.sort_unstable();
            if v.windows(2).any(|w| w[0] == w[1]) {
                return Err(Error::Shape(format!(
                    "{name}: axes {axes:?} name the same axis twice for shape {:?}",
                    self.shape()
                )));
            }
            v
        };
        dispatch(Op::Reduce { op, axes, keep_dims }, &[self])
    }

    fn arg_reduce(&self, op: ArgReduceOp, name: &str, axis: i64, keep_dims: bool) -> Result<Tensor> {
        let axis = self.axis(axis, name)?;
        dispatch(Op::ArgReduce { op, axis, keep_dims, select_last: false }, &[self])
    }
}
