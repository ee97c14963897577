//! Normalization layers: inference `BatchNorm2d` and `LayerNorm` (PyTorch names).

use super::{Init, VarBuilder};
use crate::{Result, Tensor};

/// Inference batch norm over channel axis 1 of NCHW input: learnable `weight`/`bias` and the
/// `running_mean`/`running_var` buffers (which are not parameters).
#[derive(Clone, Debug)]
pub struct BatchNorm2d {
    /// Scale `[C]` (init 1).
    pub weight: Tensor,
    /// Shift `[C]` (init 0).
    pub bias: Tensor,
    /// Buffer `[C]` (init 0).
    pub running_mean: Tensor,
    /// Buffer `[C]` (init 1).
    pub running_var: Tensor,
    /// Added to the variance.
    pub eps: f64,
}

impl BatchNorm2d {
    /// A batch norm over `channels` channels.
    pub fn new(vb: VarBuilder, channels: usize, eps: f64) -> Result<BatchNorm2d> {
        Ok(BatchNorm2d {
            weight: vb.get("weight", &[channels], Init::Const(1.0))?,
            bias: vb.get("bias", &[channels], Init::Const(0.0))?,
            running_mean: vb.get_buffer("running_mean", &[channels], Init::Const(0.0))?,
            running_var: vb.get_buffer("running_var", &[channels], Init::Const(1.0))?,
            eps,
        })
    }

    /// `(x - running_mean) / sqrt(running_var + eps) * weight + bias` per channel.
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        x.batch_norm(&self.running_mean, &self.running_var, Some(&self.weight), Some(&self.bias), self.eps)
    }
}

/// Layer norm over the last axis with learnable `weight` (init 1) and `bias` (init 0).
#[derive(Clone, Debug)]
pub struct LayerNorm {
    /// Scale `[dim]`.
    pub weight: Tensor,
    /// Shift `[dim]`.
    pub bias: Tensor,
    /// Added to the variance.
    pub eps: f64,
}

impl LayerNorm {
    /// A layer norm over a last axis of size `dim`.
    pub fn new(vb: VarBuilder, dim: usize, eps: f64) -> Result<LayerNorm> {
        Ok(LayerNorm {
            weight: vb.get("weight", &[dim], Init::Const(1.0))?,
            bias: vb.get("bias", &[dim], Init::Const(0.0))?,
            eps,
        })
    }

    /// Normalizes `x` `[.., dim]` over its last axis (biased variance).
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        x.layer_norm(1, Some(&self.weight), Some(&self.bias), self.eps)
    }
}
