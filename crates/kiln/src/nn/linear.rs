//! Fully connected layer (`torch.nn.Linear`).

use super::{Init, VarBuilder};
use crate::{Result, Tensor};

/// `y = x Wᵀ + b` with `weight` `[out, in]` and optional `bias` `[out]` (PyTorch names).
#[derive(Clone, Debug)]
pub struct Linear {
    /// `[out, in]`.
    pub weight: Tensor,
    /// `[out]`.
    pub bias: Option<Tensor>,
}

impl Linear {
    /// A layer with PyTorch's default init: weight and bias U(±1/sqrt(in)).
    pub fn new(vb: VarBuilder, in_dim: usize, out_dim: usize, bias: bool) -> Result<Linear> {
        let bound = 1.0 / (in_dim.max(1) as f64).sqrt();
        let b_init = bias.then_some(Init::Uniform { lo: -bound, hi: bound });
        Linear::with_init(vb, in_dim, out_dim, Init::KaimingUniformFanIn, b_init)
    }

    /// A layer with the given inits; `bias_init: None` means no bias.
    pub fn with_init(
        vb: VarBuilder,
        in_dim: usize,
        out_dim: usize,
        weight_init: Init,
        bias_init: Option<Init>,
    ) -> Result<Linear> {
        let weight = vb.get("weight", &[out_dim, in_dim], weight_init)?;
        let bias = bias_init.map(|i| vb.get("bias", &[out_dim], i)).transpose()?;
        Ok(Linear { weight, bias })
    }

    /// Applies the layer to `x` `[.., in]`, giving `[.., out]`.
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        x.linear(&self.weight, self.bias.as_ref())
    }
}
