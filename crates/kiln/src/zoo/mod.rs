//! The model zoo: reference architectures (torchvision ResNet-18/50, HF BERT-base and GPT-2)
//! with the references' parameter names, shapes and init, built from a [`ModelConfig`] and
//! runnable eagerly or traced into a [`Graph`].

pub mod bert;
pub mod gpt2;
pub mod resnet;

use crate::nn::VarBuilder;
use crate::rng::Rng;
use crate::{DType, Graph, Result, Tensor};
use kiln_ir::Error;
use std::path::PathBuf;

/// The names [`build`] accepts.
pub const NAMES: &[&str] = &["resnet18", "resnet50", "bert-base", "gpt2"];

/// How to build a zoo model.
#[derive(Clone, Debug, PartialEq)]
pub struct ModelConfig {
    /// Batch size of the example inputs and of the traced graph.
    pub batch: usize,
    /// Sequence length (transformers only).
    pub seq: usize,
    /// Float dtype of weights and activations.
    pub dtype: DType,
    /// Seed of the random weights (ignored when `weights` is given).
    pub seed: u64,
    /// A safetensors checkpoint to load by name; random weights when `None`.
    pub weights: Option<PathBuf>,
}

impl Default for ModelConfig {
    /// Batch 1, sequence 128, f32, seed 0, random weights.
    fn default() -> Self {
        ModelConfig { batch: 1, seq: 128, dtype: DType::F32, seed: 0, weights: None }
    }
}

/// The name, dtype and shape of one model input.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InputSpec {
    /// What the input is called in traced graphs (`input`, `input_ids`).
    pub name: String,
    /// Its dtype.
    pub dtype: DType,
    /// Its shape.
    pub shape: Vec<usize>,
}

/// A built model: knows its inputs, runs forward on eager tensors or trace placeholders.
pub trait Model: Send + Sync {
    /// The zoo name (`resnet18`, ...).
    fn name(&self) -> &str;
    /// The inputs `forward` takes, in order, at the configured batch (and sequence) size.
    fn inputs(&self) -> Vec<InputSpec>;
    /// Runs the model on `inputs` (as described by [`Model::inputs`]; other batch sizes work
    /// eagerly too).
    fn forward(&self, inputs: &[Tensor]) -> Result<Vec<Tensor>>;
    /// Number of trainable parameters (elements; buffers excluded).
    fn num_parameters(&self) -> usize;
    /// Deterministic inputs matching [`Model::inputs`]: images ~ N(0, 1), token ids uniform
    /// over the vocabulary.
    fn example_inputs(&self, seed: u64) -> Result<Vec<Tensor>>;
}

/// Builds the zoo model `name` (one of [`NAMES`]) as `cfg` says.
pub fn build(name: &str, cfg: &ModelConfig) -> Result<Box<dyn Model>> {
    if !cfg.dtype.is_float() {
        return Err(Error::DType(format!(
            "model '{name}': weights and activations need a float dtype, got {}",
            cfg.dtype
        )));
    }
    if cfg.batch == 0 {
        return Err(Error::Value(format!("model '{name}': batch must be at least 1")));
    }
    let vb = match &cfg.weights {
        Some(p) => VarBuilder::from_safetensors(p, cfg.dtype)?,
        None => VarBuilder::random(cfg.seed, cfg.dtype),
    };
    Ok(match name {
        "resnet18" => Box::new(resnet::ResNet::new(vb, &resnet::ResNetConfig::resnet18(), cfg.batch)?),
        "resnet50" => Box::new(resnet::ResNet::new(vb, &resnet::ResNetConfig::resnet50(), cfg.batch)?),
        "bert-base" => Box::new(bert::Bert::new(vb, &bert::BertConfig::base(), cfg.batch, cfg.seq)?),
        "gpt2" => Box::new(gpt2::Gpt2::new(vb, &gpt2::Gpt2Config::base(), cfg.batch, cfg.seq)?),
        _ => {
            return Err(Error::Value(format!(
                "unknown model '{name}'; the zoo has: {}",
                NAMES.join(", ")
            )));
        }
    })
}

/// Traces `model.forward` on placeholders of its [`Model::inputs`] into a graph whose
/// constants are the model's weights.
pub fn trace_model(model: &dyn Model) -> Result<Graph> {
    let specs = model.inputs();
    let args: Vec<(&str, DType, &[usize])> =
        specs.iter().map(|s| (s.name.as_str(), s.dtype, s.shape.as_slice())).collect();
    crate::trace(&args, |xs| model.forward(xs))
}

/// A `shape` tensor of `dtype` with N(0, 1) elements drawn from `seed`.
pub fn random_normal(shape: &[usize], dtype: DType, seed: u64) -> Result<Tensor> {
    crate::nn::Init::Normal { mean: 0.0, std: 1.0 }.make(shape, dtype, &mut Rng::new(seed))
}

/// A `shape` tensor of i64 ids uniform in `[0, vocab)` drawn from `seed`.
pub fn random_ids(shape: &[usize], vocab: usize, seed: u64) -> Result<Tensor> {
    let mut rng = Rng::new(seed);
    let n: usize = shape.iter().product();
    let ids: Vec<i64> = (0..n).map(|_| rng.below(vocab as u64) as i64).collect();
    Tensor::from_vec(ids, shape)
}

/// Checks that `forward` got `n` inputs, naming the model.
pub(crate) fn expect_inputs<'a>(model: &str, inputs: &'a [Tensor], n: usize) -> Result<&'a [Tensor]> {
    if inputs.len() != n {
        return Err(Error::Value(format!("model '{model}' takes {n} input(s), got {}", inputs.len())));
    }
    Ok(inputs)
}
