//! Reductions over axes and arg-max/arg-min.
use kiln_ir::{ArgReduceOp, HostTensor, ReduceOp, Result};

/// Reduces `axes` of `x`; `shape` is the inferred output shape.
pub fn reduce(op: ReduceOp, x: &HostTensor, axes: &[usize], keep_dims: bool, shape: &[usize]) -> Result<HostTensor> { let _ = (op, x, axes, keep_dims, shape); Err(kiln_ir::Error::Unsupported("not implemented yet".into())) }

/// Index (i64) of the extreme along `axis`; `shape` is the inferred output shape.
pub fn arg_reduce(op: ArgReduceOp, x: &HostTensor, axis: usize, select_last: bool, shape: &[usize]) -> Result<HostTensor> { let _ = (op, x, axis, select_last, shape); Err(kiln_ir::Error::Unsupported("not implemented yet".into())) }
