//! Activations that are not plain unary ops (GELU).
use kiln_ir::{HostTensor, Result};

/// GELU, exact (erf) or tanh-approximated.
pub fn gelu(x: &HostTensor, tanh_approx: bool) -> Result<HostTensor> { let _ = (x, tanh_approx); Err(kiln_ir::Error::Unsupported("not implemented yet".into())) }
