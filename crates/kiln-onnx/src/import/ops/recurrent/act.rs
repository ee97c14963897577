//! The activation functions ONNX recurrent ops accept (`activations`), built from IR ops in
//! the input's dtype with their default parameters.

use super::super::transformer::build::{bin, lit, un};
use crate::import::Ctx;
use kiln_ir::{BinaryOp, Error, NodeId, Result, UnaryOp};

/// The activation functions ONNX recurrent ops name, with their default parameters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Act {
    Relu,
    Tanh,
    Sigmoid,
    Softsign,
    Softplus,
    /// `alpha*x + beta` (1, 0).
    Affine,
    /// `x < 0 ? alpha*x : x` (0.01).
    LeakyRelu,
    /// `x > alpha ? x : 0` (1).
    ThresholdedRelu,
    /// `alpha * tanh(beta * x)` (1, 1).
    ScaledTanh,
    /// `clamp(alpha*x + beta, 0, 1)` (0.2, 0.5).
    HardSigmoid,
    /// `x < 0 ? alpha*(exp(x) - 1) : x` (1).
    Elu,
}

impl Act {
    pub(super) fn parse(s: &str, op: &str) -> Result<Act> {
        Ok(match s.to_ascii_lowercase().as_str() {
            "relu" => Act::Relu,
            "tanh" => Act::Tanh,
            "sigmoid" => Act::Sigmoid,
            "softsign" => Act::Softsign,
            "softplus" => Act::Softplus,
            "affine" => Act::Affine,
            "leakyrelu" => Act::LeakyRelu,
            "thresholdedrelu" => Act::ThresholdedRelu,
            "scaledtanh" => Act::ScaledTanh,
            "hardsigmoid" => Act::HardSigmoid,
            "elu" => Act::Elu,
            _ => {
                return Err(Error::Unsupported(format!(
                    "{op}: activation '{s}' is not supported"
                )));
            }
        })
    }

    pub(super) fn apply(self, ctx: &mut Ctx, x: NodeId) -> Result<NodeId> {
        let lin = |ctx: &mut Ctx, x: NodeId, a: f64, b: f64| -> Result<NodeId> {
            let a = lit(ctx, x, a)?;
            let ax = bin(ctx, BinaryOp::Mul, x, a)?;
            if b == 0.0 {
                return Ok(ax);
            }
            let b = lit(ctx, x, b)?;
            bin(ctx, BinaryOp::Add, ax, b)
        };
        match self {
            Act::Relu => un(ctx, UnaryOp::Relu, x),
            Act::Tanh => un(ctx, UnaryOp::Tanh, x),
            Act::Sigmoid => un(ctx, UnaryOp::Sigmoid, x),
            Act::Softsign => {
                let a = un(ctx, UnaryOp::Abs, x)?;
                let one = lit(ctx, x, 1.0)?;
                let d = bin(ctx, BinaryOp::Add, a, one)?;
                bin(ctx, BinaryOp::Div, x, d)
            }
            Act::Softplus => {
                let e = un(ctx, UnaryOp::Exp, x)?;
                let one = lit(ctx, x, 1.0)?;
                let s = bin(ctx, BinaryOp::Add, e, one)?;
                un(ctx, UnaryOp::Log, s)
            }
            Act::Affine => lin(ctx, x, 1.0, 0.0),
            Act::LeakyRelu => {
                let zero = lit(ctx, x, 0.0)?;
                let neg = bin(ctx, BinaryOp::Lt, x, zero)?;
                let ax = lin(ctx, x, 0.01, 0.0)?;
                ctx.add(kiln_ir::Op::Where, &[neg, ax, x])
            }
            Act::ThresholdedRelu => {
                let one = lit(ctx, x, 1.0)?;
                let zero = lit(ctx, x, 0.0)?;
                let gt = bin(ctx, BinaryOp::Gt, x, one)?;
                ctx.add(kiln_ir::Op::Where, &[gt, x, zero])
            }
            Act::ScaledTanh => un(ctx, UnaryOp::Tanh, x),
            Act::HardSigmoid => {
                let y = lin(ctx, x, 0.2, 0.5)?;
                let zero = lit(ctx, x, 0.0)?;
                let one = lit(ctx, x, 1.0)?;
                let y = bin(ctx, BinaryOp::Max, y, zero)?;
                bin(ctx, BinaryOp::Min, y, one)
            }
            Act::Elu => {
                let zero = lit(ctx, x, 0.0)?;
                let one = lit(ctx, x, 1.0)?;
                let neg = bin(ctx, BinaryOp::Lt, x, zero)?;
                let e = un(ctx, UnaryOp::Exp, x)?;
                let em1 = bin(ctx, BinaryOp::Sub, e, one)?;
                ctx.add(kiln_ir::Op::Where, &[neg, em1, x])
            }
        }
    }
}
