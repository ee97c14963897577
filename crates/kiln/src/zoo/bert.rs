//! HF `BertModel` (encoder with pooler), with HF's parameter names and init. Inputs are
//! `input_ids` only: token types are all zero and there is no padding mask.

use super::{InputSpec, Model, expect_inputs, random_ids};
use crate::nn::{Embedding, Init, LayerNorm, Linear, VarBuilder, merge_heads, split_heads};
use crate::{DType, Result, Tensor};
use kiln_ir::Error;

/// The hyper-parameters of a BERT encoder (HF `BertConfig` names in the docs).
#[derive(Clone, Debug, PartialEq)]
pub struct BertConfig {
    /// `vocab_size`.
    pub vocab: usize,
    /// `max_position_embeddings`: the longest sequence.
    pub max_positions: usize,
    /// `type_vocab_size`.
    pub type_vocab: usize,
    /// `num_hidden_layers`.
    pub layers: usize,
    /// `hidden_size`.
    pub hidden: usize,
    /// `num_attention_heads` (divides `hidden`).
    pub heads: usize,
    /// `intermediate_size` of the feed-forward block.
    pub intermediate: usize,
    /// `layer_norm_eps`.
    pub eps: f64,
    /// `initializer_range`: std of the normal init of weights and embeddings.
    pub init_std: f64,
}

impl BertConfig {
    /// `bert-base-uncased` (109,482,240 parameters with the pooler).
    pub fn base() -> BertConfig {
        BertConfig {
            vocab: 30522,
            max_positions: 512,
            type_vocab: 2,
            layers: 12,
            hidden: 768,
            heads: 12,
            intermediate: 3072,
            eps: 1e-12,
            init_std: 0.02,
        }
    }

    /// A 2-layer, 64-wide BERT for tests (vocab 100, 32 positions, 4 heads).
    pub fn tiny() -> BertConfig {
        BertConfig {
            vocab: 100,
            max_positions: 32,
            type_vocab: 2,
            layers: 2,
            hidden: 64,
            heads: 4,
            intermediate: 128,
            ..BertConfig::base()
        }
    }
}

/// A Linear with BERT's init: weight N(0, init_std), bias 0.
fn dense(vb: VarBuilder, cfg: &BertConfig, i: usize, o: usize) -> Result<Linear> {
    Linear::with_init(vb, i, o, Init::Normal { mean: 0.0, std: cfg.init_std }, Some(Init::Const(0.0)))
}

/// One encoder layer: self-attention and feed-forward, each with residual and post-LayerNorm.
struct BertLayer {
    query: Linear,
    key: Linear,
    value: Linear,
    attn_out: Linear,
    attn_norm: LayerNorm,
    intermediate: Linear,
    output: Linear,
    out_norm: LayerNorm,
    heads: usize,
}

impl BertLayer {
    fn new(vb: VarBuilder, cfg: &BertConfig) -> Result<BertLayer> {
        let (h, att) = (cfg.hidden, vb.pp("attention"));
        let sa = att.pp("self");
        Ok(BertLayer {
            query: dense(sa.pp("query"), cfg, h, h)?,
            key: dense(sa.pp("key"), cfg, h, h)?,
            value: dense(sa.pp("value"), cfg, h, h)?,
            attn_out: dense(att.pp("output").pp("dense"), cfg, h, h)?,
            attn_norm: LayerNorm::new(att.pp("output").pp("LayerNorm"), h, cfg.eps)?,
            intermediate: dense(vb.pp("intermediate").pp("dense"), cfg, h, cfg.intermediate)?,
            output: dense(vb.pp("output").pp("dense"), cfg, cfg.intermediate, h)?,
            out_norm: LayerNorm::new(vb.pp("output").pp("LayerNorm"), h, cfg.eps)?,
            heads: cfg.heads,
        })
    }

    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let q = split_heads(&self.query.forward(x)?, self.heads)?;
        let k = split_heads(&self.key.forward(x)?, self.heads)?;
        let v = split_heads(&self.value.forward(x)?, self.heads)?;
        let ctx = merge_heads(&Tensor::attention(&q, &k, &v, None, false, None)?)?;
        let h = self.attn_norm.forward(&self.attn_out.forward(&ctx)?.add(x)?)?;
        let ff = self.output.forward(&self.intermediate.forward(&h)?.gelu()?)?;
        self.out_norm.forward(&ff.add(&h)?)
    }
}

/// HF `BertModel`: `input_ids` `[B, S]` → `last_hidden_state` `[B, S, hidden]` and
/// `pooler_output` `[B, hidden]`.
pub struct Bert {
    name: String,
    word: Embedding,
    position: Embedding,
    token_type: Embedding,
    emb_norm: LayerNorm,
    layers: Vec<BertLayer>,
    pooler: Linear,
    cfg: BertConfig,
    batch: usize,
    seq: usize,
    num_parameters: usize,
}

impl Bert {
    /// Builds `cfg` from `vb` (names `embeddings.word_embeddings.weight`,
    /// `encoder.layer.0.attention.self.query.weight`, `pooler.dense.bias`, ...); `batch` and
    /// `seq` are the input size of [`Model::inputs`].
    pub fn new(vb: VarBuilder, cfg: &BertConfig, batch: usize, seq: usize) -> Result<Bert> {
        if seq == 0 || seq > cfg.max_positions {
            return Err(Error::Value(format!(
                "bert: sequence length {seq} must be between 1 and {} (max_position_embeddings)",
                cfg.max_positions
            )));
        }
        let before = vb.num_parameters();
        let emb = vb.pp("embeddings");
        let init = Init::Normal { mean: 0.0, std: cfg.init_std };
        let word = Embedding::with_init(emb.pp("word_embeddings"), cfg.vocab, cfg.hidden, init)?;
        let position = Embedding::with_init(emb.pp("position_embeddings"), cfg.max_positions, cfg.hidden, init)?;
        let token_type = Embedding::with_init(emb.pp("token_type_embeddings"), cfg.type_vocab, cfg.hidden, init)?;
        let emb_norm = LayerNorm::new(emb.pp("LayerNorm"), cfg.hidden, cfg.eps)?;
        let enc = vb.pp("encoder").pp("layer");
        let layers =
            (0..cfg.layers).map(|i| BertLayer::new(enc.pp(&i.to_string()), cfg)).collect::<Result<Vec<_>>>()?;
        let pooler = dense(vb.pp("pooler").pp("dense"), cfg, cfg.hidden, cfg.hidden)?;
        let name = if *cfg == BertConfig::base() { "bert-base".to_string() } else { "bert".to_string() };
        Ok(Bert {
            name,
            word,
            position,
            token_type,
            emb_norm,
            layers,
            pooler,
            cfg: cfg.clone(),
            batch,
            seq,
            num_parameters: vb.num_parameters() - before,
        })
    }

    /// `(last_hidden_state, pooler_output)` of `input_ids` `[B, S]`.
    pub fn encode(&self, ids: &Tensor) -> Result<(Tensor, Tensor)> {
        let seq = match ids.shape() {
            [_, s] if *s >= 1 && *s <= self.cfg.max_positions => *s,
            other => {
                return Err(Error::Shape(format!(
                    "bert: input_ids must be [B, S] with 1 <= S <= {}, got {other:?}",
                    self.cfg.max_positions
                )));
            }
        };
        // Positions 0..S and token type 0 everywhere: contiguous rows of the tables, which a
        // slice selects exactly as a lookup would.
        let pos = self.position.weight.narrow(0, 0, seq)?;
        let typ = self.token_type.weight.narrow(0, 0, 1)?;
        let x = self.word.forward(ids)?.add(&pos)?.add(&typ)?;
        let mut h = self.emb_norm.forward(&x)?;
        for layer in &self.layers {
            h = layer.forward(&h)?;
        }
        let first = h.narrow(1, 0, 1)?.squeeze(1)?;
        let pooled = self.pooler.forward(&first)?.tanh()?;
        Ok((h, pooled))
    }
}

impl Model for Bert {
    fn name(&self) -> &str {
        &self.name
    }

    fn inputs(&self) -> Vec<InputSpec> {
        vec![InputSpec { name: "input_ids".into(), dtype: DType::I64, shape: vec![self.batch, self.seq] }]
    }

    fn forward(&self, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
        let ids = &expect_inputs(&self.name, inputs, 1)?[0];
        let (h, pooled) = self.encode(ids)?;
        Ok(vec![h, pooled])
    }

    fn num_parameters(&self) -> usize {
        self.num_parameters
    }

    fn example_inputs(&self, seed: u64) -> Result<Vec<Tensor>> {
        Ok(vec![random_ids(&[self.batch, self.seq], self.cfg.vocab, seed)?])
    }
}
