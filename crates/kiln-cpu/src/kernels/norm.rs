//! Softmax, log-softmax, layer norm and inference batch norm.
use kiln_ir::{HostTensor, Result};

/// Softmax (or log-softmax) along `axis`.
pub fn softmax(x: &HostTensor, axis: usize, log: bool) -> Result<HostTensor> { let _ = (x, axis, log); Err(kiln_ir::Error::Unsupported("not implemented yet".into())) }

/// Layer norm over axes `axis..`.
pub fn layer_norm(x: &HostTensor, scale: Option<&HostTensor>, bias: Option<&HostTensor>, axis: usize, eps: f64) -> Result<HostTensor> { let _ = (x, scale, bias, axis, eps); Err(kiln_ir::Error::Unsupported("not implemented yet".into())) }

/// Inference batch norm over channel axis 1.
pub fn batch_norm(x: &HostTensor, scale: &HostTensor, bias: &HostTensor, mean: &HostTensor, var: &HostTensor, eps: f64) -> Result<HostTensor> { let _ = (x, scale, bias, mean, var, eps); Err(kiln_ir::Error::Unsupported("not implemented yet".into())) }
