//! 2-D convolution (NCHW) by im2col + gemm.
use kiln_ir::{Conv2dAttrs, HostTensor, Result};

/// Convolution of `x` with `w` (+ `bias`); `shape` is the inferred output shape.
pub fn conv2d(a: &Conv2dAttrs, x: &HostTensor, w: &HostTensor, bias: Option<&HostTensor>, shape: &[usize]) -> Result<HostTensor> { let _ = (a, x, w, bias, shape); Err(kiln_ir::Error::Unsupported("not implemented yet".into())) }
