//! Movement ops: views (reshape, permute, expand, slice) and copies (pad, concat).
use kiln_ir::{HostTensor, Op, PadMode, Result};

/// Reshape / Permute / Expand / Slice as a view of `x` when possible (reshape of a
/// non-contiguous tensor copies first); `shape` is the inferred output shape.
pub fn view(op: &Op, x: &HostTensor, shape: &[usize]) -> Result<HostTensor> { let _ = (op, x, shape); Err(kiln_ir::Error::Unsupported("not implemented yet".into())) }

/// Pads `x`; `shape` is the inferred output shape.
pub fn pad(x: &HostTensor, pads: &[(usize, usize)], mode: PadMode, shape: &[usize]) -> Result<HostTensor> { let _ = (x, pads, mode, shape); Err(kiln_ir::Error::Unsupported("not implemented yet".into())) }

/// Joins `inputs` along `axis`.
pub fn concat(inputs: &[&HostTensor], axis: usize, shape: &[usize]) -> Result<HostTensor> { let _ = (inputs, axis, shape); Err(kiln_ir::Error::Unsupported("not implemented yet".into())) }
