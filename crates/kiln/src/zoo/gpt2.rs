//! HF `GPT2Model` (the transformer without the LM head), with HF's parameter names, its
//! `Conv1D` layers (weight `[in, out]`) and its init.

use super::{InputSpec, Model, expect_inputs, random_ids};
use crate::nn::{Embedding, Init, LayerNorm, VarBuilder, merge_heads, split_heads};
use crate::{DType, Result, Tensor};
use kiln_ir::Error;

/// The hyper-parameters of GPT-2 (HF `GPT2Config` names in the docs).
#[derive(Clone, Debug, PartialEq)]
pub struct Gpt2Config {
    /// `vocab_size`.
    pub vocab: usize,
    /// `n_positions`: the longest sequence.
    pub max_positions: usize,
    /// `n_layer`.
    pub layers: usize,
    /// `n_embd`.
    pub hidden: usize,
    /// `n_head` (divides `hidden`).
    pub heads: usize,
    /// `layer_norm_epsilon`.
    pub eps: f64,
    /// `initializer_range`.
    pub init_std: f64,
}

impl Gpt2Config {
    /// `gpt2` (124,439,808 parameters).
    pub fn base() -> Gpt2Config {
        Gpt2Config { vocab: 50257, max_positions: 1024, layers: 12, hidden: 768, heads: 12, eps: 1e-5, init_std: 0.02 }
    }

    /// A 2-layer, 64-wide GPT-2 for tests (vocab 100, 32 positions, 4 heads).
    pub fn tiny() -> Gpt2Config {
        Gpt2Config { vocab: 100, max_positions: 32, layers: 2, hidden: 64, heads: 4, ..Gpt2Config::base() }
    }
}

/// HF's `Conv1D`: `y = x W + b` with `weight` `[in, out]` (the transpose of `nn.Linear`'s).
#[derive(Clone, Debug)]
pub struct Conv1D {
    /// `[in, out]`.
    pub weight: Tensor,
    /// `[out]`.
    pub bias: Tensor,
}

impl Conv1D {
    /// A layer with weight N(0, `std`) and zero bias.
    pub fn new(vb: VarBuilder, in_dim: usize, out_dim: usize, std: f64) -> Result<Conv1D> {
        Ok(Conv1D {
            weight: vb.get("weight", &[in_dim, out_dim], Init::Normal { mean: 0.0, std })?,
            bias: vb.get("bias", &[out_dim], Init::Const(0.0))?,
        })
    }

    /// Applies the layer to `x` `[.., in]`.
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        x.matmul(&self.weight)?.add(&self.bias)
    }
}

/// One pre-LayerNorm block: causal self-attention and an MLP, each residual.
struct Block {
    ln_1: LayerNorm,
    c_attn: Conv1D,
    attn_proj: Conv1D,
    ln_2: LayerNorm,
    c_fc: Conv1D,
    mlp_proj: Conv1D,
    heads: usize,
    hidden: usize,
}

impl Block {
    fn new(vb: VarBuilder, cfg: &Gpt2Config) -> Result<Block> {
        let h = cfg.hidden;
        // HF scales the init of the projections into the residual stream by 1/sqrt(2 n_layer).
        let proj_std = cfg.init_std / (2.0 * cfg.layers.max(1) as f64).sqrt();
        Ok(Block {
            ln_1: LayerNorm::new(vb.pp("ln_1"), h, cfg.eps)?,
            c_attn: Conv1D::new(vb.pp("attn").pp("c_attn"), h, 3 * h, cfg.init_std)?,
            attn_proj: Conv1D::new(vb.pp("attn").pp("c_proj"), h, h, proj_std)?,
            ln_2: LayerNorm::new(vb.pp("ln_2"), h, cfg.eps)?,
            c_fc: Conv1D::new(vb.pp("mlp").pp("c_fc"), h, 4 * h, cfg.init_std)?,
            mlp_proj: Conv1D::new(vb.pp("mlp").pp("c_proj"), 4 * h, h, proj_std)?,
            heads: cfg.heads,
            hidden: h,
        })
    }

    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let qkv = self.c_attn.forward(&self.ln_1.forward(x)?)?;
        let h = self.hidden;
        let part = |i: usize| split_heads(&qkv.narrow(-1, i * h, h)?, self.heads);
        let (q, k, v) = (part(0)?, part(1)?, part(2)?);
        let ctx = merge_heads(&Tensor::attention(&q, &k, &v, None, true, None)?)?;
        let x = x.add(&self.attn_proj.forward(&ctx)?)?;
        let m = self.mlp_proj.forward(&self.c_fc.forward(&self.ln_2.forward(&x)?)?.gelu_tanh()?)?;
        x.add(&m)
    }
}

/// HF `GPT2Model`: `input_ids` `[B, S]` → `last_hidden_state` `[B, S, hidden]`.
pub struct Gpt2 {
    name: String,
    wte: Embedding,
    wpe: Embedding,
    blocks: Vec<Block>,
    ln_f: LayerNorm,
    cfg: Gpt2Config,
    batch: usize,
    seq: usize,
    num_parameters: usize,
}

impl Gpt2 {
    /// Builds `cfg` from `vb` (names `wte.weight`, `h.0.attn.c_attn.weight`, `ln_f.bias`, ...);
    /// `batch` and `seq` are the input size of [`Model::inputs`].
    pub fn new(vb: VarBuilder, cfg: &Gpt2Config, batch: usize, seq: usize) -> Result<Gpt2> {
        if seq == 0 || seq > cfg.max_positions {
            return Err(Error::Value(format!(
                "gpt2: sequence length {seq} must be between 1 and {} (n_positions)",
                cfg.max_positions
            )));
        }
        let before = vb.num_parameters();
        let init = Init::Normal { mean: 0.0, std: cfg.init_std };
        let wte = Embedding::with_init(vb.pp("wte"), cfg.vocab, cfg.hidden, init)?;
        let wpe = Embedding::with_init(vb.pp("wpe"), cfg.max_positions, cfg.hidden, init)?;
        let h = vb.pp("h");
        let blocks = (0..cfg.layers).map(|i| Block::new(h.pp(&i.to_string()), cfg)).collect::<Result<Vec<_>>>()?;
        let ln_f = LayerNorm::new(vb.pp("ln_f"), cfg.hidden, cfg.eps)?;
        let name = if *cfg == Gpt2Config::base() { "gpt2".to_string() } else { "gpt2-custom".to_string() };
        Ok(Gpt2 {
            name,
            wte,
            wpe,
            blocks,
            ln_f,
            cfg: cfg.clone(),
            batch,
            seq,
            num_parameters: vb.num_parameters() - before,
        })
    }

    /// `last_hidden_state` of `input_ids` `[B, S]`.
    pub fn hidden_states(&self, ids: &Tensor) -> Result<Tensor> {
        let seq = match ids.shape() {
            [_, s] if *s >= 1 && *s <= self.cfg.max_positions => *s,
            other => {
                return Err(Error::Shape(format!(
                    "gpt2: input_ids must be [B, S] with 1 <= S <= {}, got {other:?}",
                    self.cfg.max_positions
                )));
            }
        };
        // Positions 0..S: a slice of the table selects the same rows a lookup would.
        let mut x = self.wte.forward(ids)?.add(&self.wpe.weight.narrow(0, 0, seq)?)?;
        for b in &self.blocks {
            x = b.forward(&x)?;
        }
        self.ln_f.forward(&x)
    }
}

impl Model for Gpt2 {
    fn name(&self) -> &str {
        &self.name
    }

    fn inputs(&self) -> Vec<InputSpec> {
        vec![InputSpec { name: "input_ids".into(), dtype: DType::I64, shape: vec![self.batch, self.seq] }]
    }

    fn forward(&self, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
        let ids = &expect_inputs(&self.name, inputs, 1)?[0];
        Ok(vec![self.hidden_states(ids)?])
    }

    fn num_parameters(&self) -> usize {
        self.num_parameters
    }

    fn example_inputs(&self, seed: u64) -> Result<Vec<Tensor>> {
        Ok(vec![random_ids(&[self.batch, self.seq], self.cfg.vocab, seed)?])
    }
}
