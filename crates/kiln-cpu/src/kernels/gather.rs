//! Gather along an axis (ONNX Gather, embedding lookup).
use kiln_ir::{HostTensor, Result};

/// `data` gathered at `indices` along `axis`; out-of-range indices are an error.
pub fn gather(data: &HostTensor, indices: &HostTensor, axis: usize, shape: &[usize]) -> Result<HostTensor> { let _ = (data, indices, axis, shape); Err(kiln_ir::Error::Unsupported("not implemented yet".into())) }
