//! Constant operands an extern step packs once, on its first run, and keeps for every later
//! run: what ONNX Runtime calls pre-packing. Which steps get a cell is decided when the
//! executable is built, from the program alone.

use super::conv::{self, PackedWeights, Winograd2Weights, WinogradWeights};
use super::matmul;
use crate::gemm::{self, PackedA, PackedRhs};
use kiln_sched::{BufKind, ExternOp, Program, StepKind};
use std::sync::OnceLock;

/// The packed constant of one extern step, filled on the step's first run.
pub(crate) enum Prepacked {
    /// A conv's weights for the conv tiles (`conv_tiles`).
    ConvTiles(OnceLock<PackedWeights>),
    /// A 3x3 conv's weights transformed for Winograd's F(4x4, 3x3) (`conv_winograd`).
    ConvWinograd(OnceLock<WinogradWeights>),
    /// A 3x3 conv's weights on a small map transformed for Winograd's F(2x2, 3x3)
    /// (`conv_winograd::f2`).
    ConvWinograd2(OnceLock<Winograd2Weights>),
    /// A matmul's constant right-hand side for kiln's GEMM ([`crate::gemm`]).
    MatmulRhs(OnceLock<PackedRhs>),
    /// A conv's weights as the packed left-hand side of kiln's GEMM ([`crate::gemm::gemm_a`]),
    /// for the convs the conv tiles do not take (1x1, strided).
    ConvGemm(OnceLock<PackedA>),
}

impl Prepacked {
    /// The algorithm this cell serves, as [`super::Executable::packed_algorithms`] names it (a
    /// matmul's weights are packed for Strassen's product or the plain one on its first run).
    pub(crate) fn name(&self) -> &'static str {
        match self {
            Prepacked::ConvTiles(_) => "conv tiles",
            Prepacked::ConvWinograd(_) => "conv winograd",
            Prepacked::ConvWinograd2(_) => "conv winograd f2",
            Prepacked::MatmulRhs(c) => match c.get() {
                Some(PackedRhs::Strassen(_)) => "matmul strassen",
                _ => "matmul packed gemm",
            },
            Prepacked::ConvGemm(_) => "conv packed gemm",
        }
    }

    /// The cell of a conv that runs on the conv tiles.
    pub(crate) fn conv_tiles(&self) -> Option<&OnceLock<PackedWeights>> {
        match self {
            Prepacked::ConvTiles(c) => Some(c),
            _ => None,
        }
    }

    /// The cell of a conv that runs by Winograd's F(4x4, 3x3).
    pub(crate) fn conv_winograd(&self) -> Option<&OnceLock<WinogradWeights>> {
        match self {
            Prepacked::ConvWinograd(c) => Some(c),
            _ => None,
        }
    }

    /// The cell of a conv that runs by Winograd's F(2x2, 3x3).
    pub(crate) fn conv_winograd2(&self) -> Option<&OnceLock<Winograd2Weights>> {
        match self {
            Prepacked::ConvWinograd2(c) => Some(c),
            _ => None,
        }
    }

    /// The cell of a matmul whose right-hand side is packed for kiln's GEMM.
    pub(crate) fn matmul_rhs(&self) -> Option<&OnceLock<PackedRhs>> {
        match self {
            Prepacked::MatmulRhs(c) => Some(c),
            _ => None,
        }
    }

    /// The cell of a conv whose weights are packed for kiln's GEMM.
    pub(crate) fn conv_gemm(&self) -> Option<&OnceLock<PackedA>> {
        match self {
            Prepacked::ConvGemm(c) => Some(c),
            _ => None,
        }
    }
}

/// The cell step `kind` of `p` gets, if any: a conv's (see [`conv::prepacked`]: Winograd,
/// the conv tiles or kiln's GEMM, for constant weights), or a matmul of a
/// constant right-hand side that one packing serves (no batch dims of its own) by a
/// left-hand side with unit column stride, on a CPU that runs kiln's GEMM.
pub(crate) fn for_step(p: &Program, kind: &StepKind) -> Option<Prepacked> {
    let StepKind::Extern {
        op,
        inputs,
        out_shape,
        ..
    } = kind
    else {
        return None;
    };
    let is_const = |i: usize| {
        inputs
            .get(i)
            .is_some_and(|v| matches!(p.buffer(v.buf).kind, BufKind::Const(_)))
    };
    match op {
        ExternOp::Conv2d(a) => conv::prepacked(a, inputs, out_shape, is_const(1)),
        ExternOp::MatMul => {
            let [a, b] = &inputs[..] else { return None };
            let fits = gemm::available() && is_const(1) && matmul::packs(a, b);
            fits.then(|| Prepacked::MatmulRhs(OnceLock::new()))
        }
    }
}
