//! Multi-head attention (`torch.nn.MultiheadAttention`, batch-first) and the head
//! split/merge reshapes that the transformer models share.

use super::{Init, Linear, VarBuilder};
use crate::{Result, Tensor};
use kiln_ir::Error;

/// `[.., L, heads*dh]` → `[.., heads, L, dh]`.
pub fn split_heads(x: &Tensor, heads: usize) -> Result<Tensor> {
    let dims = x.dims();
    let (lead, last) = match dims.split_last() {
        Some((&d, lead)) if !lead.is_empty() && heads > 0 && d.is_multiple_of(heads) => (lead, d),
        _ => {
            return Err(Error::Shape(format!(
                "split_heads: input {dims:?} must be [.., L, D] with D a multiple of {heads} heads"
            )));
        }
    };
    let mut shape: Vec<i64> = lead.iter().map(|&d| d as i64).collect();
    shape.extend([heads as i64, (last / heads) as i64]);
    x.reshape(&shape)?.transpose(-3, -2)
}

/// `[.., heads, L, dh]` → `[.., L, heads*dh]`.
pub fn merge_heads(x: &Tensor) -> Result<Tensor> {
    let dims = x.dims();
    let r = dims.len();
    if r < 3 {
        return Err(Error::Shape(format!("merge_heads: input {dims:?} must be [.., H, L, dh]")));
    }
    let mut shape: Vec<i64> = dims[..r - 3].iter().map(|&d| d as i64).collect();
    shape.extend([dims[r - 2] as i64, (dims[r - 3] * dims[r - 1]) as i64]);
    x.transpose(-3, -2)?.reshape(&shape)
}

/// PyTorch-style multi-head attention over batch-first inputs `[B, L, dim]`: the q, k, v
/// projections packed in `in_proj_weight` `[3*dim, dim]` / `in_proj_bias` `[3*dim]`, then
/// scaled dot-product attention per head, then `out_proj`.
#[derive(Clone, Debug)]
pub struct MultiHeadAttention {
    /// `[3*dim, dim]`: rows `0..dim` project q, `dim..2dim` k, `2dim..3dim` v.
    pub in_proj_weight: Tensor,
    /// `[3*dim]`.
    pub in_proj_bias: Tensor,
    /// `[dim, dim]` output projection.
    pub out_proj: Linear,
    /// Number of heads (divides `dim`).
    pub heads: usize,
    /// Whether query `i` only sees keys `j <= i`.
    pub causal: bool,
    dim: usize,
}

impl MultiHeadAttention {
    /// A layer of `heads` heads over width `dim`, initialised as PyTorch's (xavier-uniform
    /// input projection, zero biases).
    pub fn new(vb: VarBuilder, dim: usize, heads: usize, causal: bool) -> Result<MultiHeadAttention> {
        if heads == 0 || !dim.is_multiple_of(heads) {
            return Err(Error::Value(format!(
                "multi-head attention: dim {dim} is not a multiple of {heads} heads"
            )));
        }
        // As PyTorch, xavier bounds come from the fans of the packed tensor (dim in, 3*dim out).
        let in_proj_weight = vb.get("in_proj_weight", &[3 * dim, dim], Init::XavierUniform)?;
        let in_proj_bias = vb.get("in_proj_bias", &[3 * dim], Init::Const(0.0))?;
        let out_proj =
            Linear::with_init(vb.pp("out_proj"), dim, dim, Init::KaimingUniformFanIn, Some(Init::Const(0.0)))?;
        Ok(MultiHeadAttention { in_proj_weight, in_proj_bias, out_proj, heads, causal, dim })
    }

    /// Self-attention: `forward_qkv(x, x, x, None)`.
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        self.forward_qkv(x, x, x, None)
    }

    /// Attention of queries `q` `[B, Lq, dim]` over keys `k` and values `v` `[B, Lk, dim]`.
    /// `mask` is added to the scores and must broadcast to `[B, heads, Lq, Lk]`.
    pub fn forward_qkv(&self, q: &Tensor, k: &Tensor, v: &Tensor, mask: Option<&Tensor>) -> Result<Tensor> {
        let project = |x: &Tensor, i: usize| -> Result<Tensor> {
            let w = self.in_proj_weight.narrow(0, i * self.dim, self.dim)?;
            let b = self.in_proj_bias.narrow(0, i * self.dim, self.dim)?;
            split_heads(&x.linear(&w, Some(&b))?, self.heads)
        };
        let (qh, kh, vh) = (project(q, 0)?, project(k, 1)?, project(v, 2)?);
        let out = Tensor::attention(&qh, &kh, &vh, mask, self.causal, None)?;
        self.out_proj.forward(&merge_heads(&out)?)
    }
}
