//! Elementwise unary, binary (broadcasting) and where kernels.
use kiln_ir::{BinaryOp, DType, HostTensor, Result, UnaryOp};

/// `f(x)` elementwise; `out_dtype` is the inferred result dtype (bool for IsNan/IsInf).
pub fn unary(op: UnaryOp, x: &HostTensor, out_dtype: DType) -> Result<HostTensor> { let _ = (op, x, out_dtype); Err(kiln_ir::Error::Unsupported("not implemented yet".into())) }

/// `f(a, b)` elementwise with NumPy broadcasting to `shape`; `out_dtype` is bool for comparisons.
pub fn binary(op: BinaryOp, a: &HostTensor, b: &HostTensor, out_dtype: DType, shape: &[usize]) -> Result<HostTensor> { let _ = (op, a, b, out_dtype, shape); Err(kiln_ir::Error::Unsupported("not implemented yet".into())) }

/// `cond ? x : y` broadcast to `shape`.
pub fn where_(cond: &HostTensor, x: &HostTensor, y: &HostTensor, shape: &[usize]) -> Result<HostTensor> { let _ = (cond, x, y, shape); Err(kiln_ir::Error::Unsupported("not implemented yet".into())) }
