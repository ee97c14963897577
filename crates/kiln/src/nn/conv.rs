//! 2-D convolution layer (`torch.nn.Conv2d`).

use super::{Init, VarBuilder};
use crate::{Result, Tensor};

/// Hyper-parameters of [`Conv2d`] besides channels and kernel size.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Conv2dConfig {
    /// `[sh, sw]`.
    pub stride: [usize; 2],
    /// Zero padding `[ph, pw]` on both sides.
    pub padding: [usize; 2],
    /// `[dh, dw]`.
    pub dilation: [usize; 2],
    /// Channel groups; in and out channels must be multiples of it.
    pub groups: usize,
    /// Whether the layer has a bias.
    pub bias: bool,
}

impl Default for Conv2dConfig {
    /// PyTorch's defaults: stride 1, no padding, no dilation, 1 group, with bias.
    fn default() -> Self {
        Conv2dConfig { stride: [1, 1], padding: [0, 0], dilation: [1, 1], groups: 1, bias: true }
    }
}

/// A 2-D convolution over NCHW input: `weight` `[out, in/groups, k, k]`, optional `bias` `[out]`.
#[derive(Clone, Debug)]
pub struct Conv2d {
    /// `[out, in/groups, kh, kw]`.
    pub weight: Tensor,
    /// `[out]`.
    pub bias: Option<Tensor>,
    /// Stride, padding, dilation, groups.
    pub cfg: Conv2dConfig,
}

impl Conv2d {
    /// A `kernel`×`kernel` convolution with PyTorch's default init (U(±1/sqrt(fan_in))).
    pub fn new(vb: VarBuilder, in_ch: usize, out_ch: usize, kernel: usize, cfg: Conv2dConfig) -> Result<Conv2d> {
        Conv2d::with_init(vb, in_ch, out_ch, kernel, cfg, Init::KaimingUniformFanIn)
    }

    /// A convolution whose weight is created with `weight_init`; the bias (if any) keeps
    /// PyTorch's default U(±1/sqrt(fan_in)).
    pub fn with_init(
        vb: VarBuilder,
        in_ch: usize,
        out_ch: usize,
        kernel: usize,
        cfg: Conv2dConfig,
        weight_init: Init,
    ) -> Result<Conv2d> {
        if cfg.groups == 0 || !in_ch.is_multiple_of(cfg.groups) || !out_ch.is_multiple_of(cfg.groups) {
            return Err(kiln_ir::Error::Value(format!(
                "conv2d: {in_ch} in and {out_ch} out channels are not both multiples of groups={}",
                cfg.groups
            )));
        }
        let weight = vb.get("weight", &[out_ch, in_ch / cfg.groups, kernel, kernel], weight_init)?;
        let bias = if cfg.bias {
            let fan_in = (in_ch / cfg.groups * kernel * kernel).max(1) as f64;
            let b = 1.0 / fan_in.sqrt();
            Some(vb.get("bias", &[out_ch], Init::Uniform { lo: -b, hi: b })?)
        } else {
            None
        };
        Ok(Conv2d { weight, bias, cfg })
    }

    /// Applies the convolution to `x` `[N, in, H, W]`.
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let c = &self.cfg;
        x.conv2d(&self.weight, self.bias.as_ref(), c.stride, c.padding, c.dilation, c.groups)
    }
}
