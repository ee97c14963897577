//! How a freshly created parameter is filled when no checkpoint is loaded, following
//! PyTorch's `torch.nn.init` so that randomly initialised models keep activations in range.

use crate::rng::Rng;
use crate::{DType, Result, Tensor};
use kiln_ir::{Element, Error, HostTensor};

/// The initial values of a parameter or buffer.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Init {
    /// Every element equal to this value (0 for biases, 1 for norm scales...).
    Const(f64),
    /// Normal with this mean and standard deviation.
    Normal { mean: f64, std: f64 },
    /// Uniform in `[lo, hi)`.
    Uniform { lo: f64, hi: f64 },
    /// `kaiming_normal_(mode='fan_out', nonlinearity='relu')`: N(0, 2 / fan_out), as
    /// torchvision's ResNet convolutions.
    KaimingNormalFanOut,
    /// `kaiming_uniform_(a=sqrt(5))`: U(±1/sqrt(fan_in)), PyTorch's default for
    /// `nn.Linear` and `nn.Conv2d` weights.
    KaimingUniformFanIn,
    /// `xavier_uniform_`: U(±sqrt(6 / (fan_in + fan_out))), as `nn.MultiheadAttention`'s
    /// input projection.
    XavierUniform,
}

/// `(fan_in, fan_out)` of a weight as PyTorch computes them: dim 1 and dim 0, each times the
/// receptive field (the product of the dims after the first two). A 1-D tensor has
/// fan_in = fan_out = its length.
pub fn fans(shape: &[usize]) -> (usize, usize) {
    match shape {
        [] => (1, 1),
        [n] => (*n, *n),
        [out, inp, rest @ ..] => {
            let field: usize = rest.iter().product();
            (inp * field, out * field)
        }
    }
}

impl Init {
    /// A tensor of `shape` and float `dtype` filled by this init, drawing from `rng`.
    pub fn make(&self, shape: &[usize], dtype: DType, rng: &mut Rng) -> Result<Tensor> {
        let n: usize = shape.iter().product();
        let (fan_in, fan_out) = fans(shape);
        // Empty weights have no fan; 1 keeps the bounds finite.
        let (fan_in, fan_out) = (fan_in.max(1) as f64, fan_out.max(1) as f64);
        let mut draw: Box<dyn FnMut(&mut Rng) -> f64> = match *self {
            Init::Const(c) => Box::new(move |_| c),
            Init::Normal { mean, std } => Box::new(move |r| mean + std * r.normal()),
            Init::Uniform { lo, hi } => Box::new(move |r| r.uniform(lo, hi)),
            Init::KaimingNormalFanOut => {
                let std = (2.0 / fan_out).sqrt();
                Box::new(move |r| std * r.normal())
            }
            Init::KaimingUniformFanIn => {
                let b = 1.0 / fan_in.sqrt();
                Box::new(move |r| r.uniform(-b, b))
            }
            Init::XavierUniform => {
                let b = (6.0 / (fan_in + fan_out)).sqrt();
                Box::new(move |r| r.uniform(-b, b))
            }
        };
        if !dtype.is_float() && !matches!(self, Init::Const(_)) {
            return Err(Error::DType(format!(
                "init {self:?} of a {shape:?} tensor needs a float dtype, got {dtype}"
            )));
        }
        let host = kiln_ir::with_dtype!(dtype, T, {
            let v: Vec<T> = (0..n).map(|_| T::from_f64(draw(rng))).collect();
            HostTensor::from_vec(v, shape)?
        });
        Ok(Tensor::from_host(host))
    }
}
