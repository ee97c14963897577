//! The one entry point that evaluates a single op on host tensors: CPU eager mode and the
//! interpreter both come through here. Output shapes come from [`kiln_ir::infer`], so there is
//! one definition of each op's result type.

use crate::kernels::{
    activation, attention, cast, conv, elementwise, gather, matmul, movement, norm, pool, reduce,
};
use crate::kernels::{scan, scatter, topk};
use kiln_ir::{Error, HostTensor, Op, Result, TensorType, infer::infer};

/// Evaluates `op` on `inputs`. View ops (reshape of contiguous data, permute, expand, slice)
/// return views sharing the input's storage; everything else returns a dense new tensor.
pub fn eval(op: &Op, inputs: &[&HostTensor]) -> Result<HostTensor> {
    let tys: Vec<TensorType> =
        inputs.iter().map(|t| TensorType::new(t.dtype(), t.ir_shape())).collect();
    let refs: Vec<&TensorType> = tys.iter().collect();
    let out = infer(op, &refs)?;
    let shape = out.shape.as_fixed().ok_or_else(|| {
        Error::Shape(format!("{}: result shape {} has unbound symbolic dims", op.name(), out.shape))
    })?;
    let x = inputs[0];
    match op {
        Op::Input { .. } | Op::Constant(_) => {
            Err(Error::Graph(format!("{} nodes are bound by the interpreter, not evaluated", op.name())))
        }
        Op::Unary(u) => elementwise::unary(*u, x, out.dtype),
        Op::Binary(b) => elementwise::binary(*b, x, inputs[1], out.dtype, &shape),
        Op::Where => elementwise::where_(x, inputs[1], inputs[2], &shape),
        Op::Cast(d) => cast::cast(x, *d),
        Op::BitCast(d) => crate::kernels::bitcast::bitcast(x, *d),
        Op::Reduce { op, axes, keep_dims } => reduce::reduce(*op, x, axes, *keep_dims, &shape),
        Op::ArgReduce { op, axis, select_last, .. } => {
            reduce::arg_reduce(*op, x, *axis, *select_last, &shape)
        }
        Op::Reshape(_) | Op::Permute(_) | Op::Expand(_) | Op::Slice(_) => {
            movement::view(op, x, &shape)
        }
        Op::Pad { pads, mode } => movement::pad(x, pads, *mode, &shape),
        Op::Concat { axis } => movement::concat(inputs, *axis, &shape),
        Op::Gather { axis } => gather::gather(x, inputs[1], *axis, &shape),
        Op::Cumulative { op, axis, exclusive, reverse } => scan::cumulative(*op, x, *axis, *exclusive, *reverse),
        Op::TopK { axis, k, largest, sorted, output } => topk::topk(x, *axis, *k, *largest, *sorted, *output),
        Op::GatherElements { axis } => scatter::gather_elements(x, inputs[1], *axis),
        Op::ScatterElements { axis, reduction } => {
            scatter::scatter_elements(x, inputs[1], inputs[2], *axis, *reduction)
        }
        Op::GatherNd { batch_dims } => scatter::gather_nd(x, inputs[1], *batch_dims),
        Op::ScatterNd { reduction } => scatter::scatter_nd(x, inputs[1], inputs[2], *reduction),
        Op::MatMul => matmul::matmul(x, inputs[1], &shape),
        Op::Conv2d(a) => conv::conv2d(a, x, inputs[1], inputs.get(2).copied(), &shape),
        Op::Pool2d(p) => pool::pool2d(p, x, &shape),
        Op::Softmax { axis } => norm::softmax(x, *axis, false),
        Op::LogSoftmax { axis } => norm::softmax(x, *axis, true),
        Op::LayerNorm { axis, eps } => norm::layer_norm(x, inputs.get(1).copied(), inputs.get(2).copied(), *axis, *eps),
        Op::BatchNorm { eps } => norm::batch_norm(x, inputs[1], inputs[2], inputs[3], inputs[4], *eps),
        Op::Gelu { tanh_approx } => activation::gelu(x, *tanh_approx),
        Op::Attention { causal, scale } => {
            attention::attention(x, inputs[1], inputs[2], inputs.get(3).copied(), *causal, *scale, &shape)
        }
        Op::Resize(a) => crate::kernels::resize::resize(a, x, &shape),
        Op::ConvTranspose2d(a) => {
            crate::kernels::conv_transpose::conv_transpose2d(a, x, inputs[1], inputs.get(2).copied(), &shape)
        }
        Op::GridSample(a) => crate::kernels::grid_sample::grid_sample(a, x, inputs[1], &shape),
        Op::EncodeLowp { to, saturate } => crate::kernels::lowp::encode(x, *to, *saturate),
        Op::DecodeLowp { from } => crate::kernels::lowp::decode(x, *from),
    }
}
