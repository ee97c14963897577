//! Scaled dot-product attention.
use kiln_ir::{HostTensor, Result};

/// `softmax(q kᵀ · scale + mask) v` (semantics in [`kiln_ir::Op::Attention`]).
pub fn attention(q: &HostTensor, k: &HostTensor, v: &HostTensor, mask: Option<&HostTensor>, causal: bool, scale: Option<f64>, shape: &[usize]) -> Result<HostTensor> { let _ = (q, k, v, mask, causal, scale, shape); Err(kiln_ir::Error::Unsupported("not implemented yet".into())) }
