//! Batched NumPy matmul through the `gemm` crate (floats) and a plain loop (integers).
use kiln_ir::{HostTensor, Result};

/// `a @ b` with NumPy semantics; `shape` is the inferred output shape.
pub fn matmul(a: &HostTensor, b: &HostTensor, shape: &[usize]) -> Result<HostTensor> { let _ = (a, b, shape); Err(kiln_ir::Error::Unsupported("not implemented yet".into())) }
