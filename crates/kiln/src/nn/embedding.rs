//! Lookup table of vectors (`torch.nn.Embedding`).

use super::{Init, VarBuilder};
use crate::{Result, Tensor};

/// Maps integer ids to rows of `weight` `[vocab, dim]`.
#[derive(Clone, Debug)]
pub struct Embedding {
    /// `[vocab, dim]`.
    pub weight: Tensor,
}

impl Embedding {
    /// A table with PyTorch's default init N(0, 1).
    pub fn new(vb: VarBuilder, vocab: usize, dim: usize) -> Result<Embedding> {
        Embedding::with_init(vb, vocab, dim, Init::Normal { mean: 0.0, std: 1.0 })
    }

    /// A table created with `init`.
    pub fn with_init(vb: VarBuilder, vocab: usize, dim: usize, init: Init) -> Result<Embedding> {
        Ok(Embedding { weight: vb.get("weight", &[vocab, dim], init)? })
    }

    /// Looks up `ids` (i64 or i32, any shape), giving `[..ids, dim]`.
    pub fn forward(&self, ids: &Tensor) -> Result<Tensor> {
        Tensor::embedding(&self.weight, ids)
    }
}
