//! [`Module`]: a layer or model with one input and one output, what `kiln::compile_module`
//! compiles.

use crate::{Result, Tensor};

/// A layer or model whose forward pass takes one tensor and gives one.
pub trait Module {
    /// The forward pass.
    fn forward(&self, x: &Tensor) -> Result<Tensor>;
}

impl<M: Module + ?Sized> Module for &M {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        (**self).forward(x)
    }
}

impl<M: Module + ?Sized> Module for Box<M> {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        (**self).forward(x)
    }
}

impl<M: Module + ?Sized> Module for std::sync::Arc<M> {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        (**self).forward(x)
    }
}

/// `Module` for types whose inherent `forward(&self, &Tensor)` is the forward pass.
macro_rules! module_by_forward {
    ($($t:ty => $method:ident),* $(,)?) => {
        $(impl Module for $t {
            fn forward(&self, x: &Tensor) -> Result<Tensor> {
                <$t>::$method(self, x)
            }
        })*
    };
}

module_by_forward!(
    super::Linear => forward,
    super::Conv2d => forward,
    super::LayerNorm => forward,
    super::BatchNorm2d => forward,
    super::Embedding => forward,
    super::MultiHeadAttention => forward,
    crate::zoo::gpt2::Conv1D => forward,
    crate::zoo::gpt2::Gpt2 => hidden_states,
    crate::zoo::resnet::ResNet => logits,
);
