//! Conv epilogues cuDNN applies inside the conv call. `cudnnConvolutionBiasActivationForward`
//! computes `y = relu(conv(x, w) + bias + z)` in one call, so a conv step with a bias whose
//! epilogue is `relu(out)` or `relu(out + z)` (ResNet's conv + folded BatchNorm + ReLU, and its
//! residual add) needs neither the epilogue kernel nor cuDNN's separate bias pass: two passes
//! over the output saved. [`super::fusion`] folds what this finds into the step.

use super::cudnn_refusal;
use super::fusion::{DenseEpilogue, is_float};
use kiln_ir::UnaryOp;
use kiln_sched::kernel::Expr;
use kiln_sched::{BufId, BufView, ExternOp, Program};

/// What the fused call adds after the conv and its bias: a ReLU, after adding `residual`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConvFusion {
    /// The buffer added before the ReLU (read at the output's own index).
    pub residual: Option<BufId>,
}

impl ConvFusion {
    /// `+bias+relu` or `+bias+add+relu`: what the fused call applies after the conv.
    pub fn label(&self) -> &'static str {
        if self.residual.is_some() { "+bias+add+relu" } else { "+bias+relu" }
    }
}

/// The fusion of a conv step's epilogue `e`, and the residual the fused call also reads (dense,
/// in the output's shape: the fused step's fourth input, as [`ExternOp::Conv2d`] documents),
/// when cuDNN can take it: a float conv with a bias that cuDNN runs ([`cudnn_refusal`]) whose
/// epilogue is `relu(out)` or `relu(out + z)`.
pub(crate) fn fusable(p: &Program, e: &DenseEpilogue) -> Option<(ConvFusion, Option<BufView>)> {
    let ExternOp::Conv2d(attrs) = e.op else { return None };
    if e.inputs.len() != 3 || cudnn_refusal(attrs, e.inputs, e.out_shape).is_some() {
        return None;
    }
    let numel = p.buffer(e.out).numel;
    let dense = |b: BufId| is_float(p, b) && p.buffer(b).numel == numel;
    let Expr::Unary { op: UnaryOp::Relu, x } = *e.expr(e.value)? else {
        return None;
    };
    let residual = match e.expr(x)? {
        Expr::Load { .. } => (e.load_here(x)? == e.out).then_some(None)?,
        Expr::Binary { op: kiln_ir::BinaryOp::Add, a, b } => match (e.load_here(*a)?, e.load_here(*b)?) {
            (l, z) | (z, l) if l == e.out && z != e.out && dense(z) => Some(z),
            _ => return None,
        },
        _ => return None,
    };
    Some((ConvFusion { residual }, residual.map(|z| BufView::dense(z, e.out_shape))))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exec::fusion::fuse_library_epilogues;
    use kiln_ir::{BinaryOp, Conv2dAttrs, DType, Graph, HostTensor, Op, Shape, TensorType};
    use kiln_sched::{BufKind, GPU_EXTERN_DTYPES, ScheduleOptions, StepKind, schedule};

    /// The conv fusions of `program` (no GEMM epilogue accepted).
    fn fuse_conv_epilogues(program: &mut Program) -> Vec<Option<ConvFusion>> {
        fuse_library_epilogues(program, &mut |_, _| false).into_iter().map(|f| f.and_then(|f| f.conv())).collect()
    }

    const ATTRS: Conv2dAttrs = Conv2dAttrs { stride: [1, 1], padding: [1, 1, 1, 1], dilation: [1, 1], groups: 1, channels_last: false };

    /// `relu(conv(x, w, b) [+ r])` (`tanh` for `relu: false`), `[1, 3, 6, 6] -> [1, 4, 6, 6]`,
    /// optionally also returning the conv.
    fn block(dtype: kiln_ir::DType, bias: bool, residual: bool, attrs: Conv2dAttrs, conv_is_output: bool, relu: bool) -> Program {
        let mut g = Graph::new();
        let x = g.input("x", TensorType::new(dtype, Shape::fixed(&[1, 3, 6, 6])));
        let w = g.constant(HostTensor::zeros(dtype, &[4, 3, 3, 3]));
        let mut args = vec![x, w];
        if bias {
            args.push(g.constant(HostTensor::zeros(dtype, &[4])));
        }
        let c = g.add(Op::Conv2d(attrs), &args).unwrap();
        let mut v = c;
        if residual {
            let r = g.input("r", TensorType::new(dtype, Shape::fixed(&[1, 4, 6, 6])));
            v = g.add(Op::Binary(BinaryOp::Add), &[v, r]).unwrap();
        }
        let out = g.add(Op::Unary(if relu { UnaryOp::Relu } else { UnaryOp::Tanh }), &[v]).unwrap();
        g.output(out);
        if conv_is_output {
            g.output(c);
        }
        let (mut p, _) = schedule(&g, &ScheduleOptions { fuse: true, extern_dtypes: GPU_EXTERN_DTYPES, row_epilogues: false }).unwrap();
        p.memory = Some(kiln_sched::plan_memory(&p));
        p
    }

    fn conv_step(p: &Program) -> (BufId, bool) {
        p.steps
            .iter()
            .find_map(|s| match &s.kind {
                StepKind::Extern { out, epilogue, .. } => Some((*out, epilogue.is_some())),
                _ => None,
            })
            .unwrap()
    }

    #[test]
    fn conv_bias_relu_and_residual_fold_into_the_cudnn_call() {
        for (residual, dtype) in [(false, DType::F32), (true, DType::F32), (true, DType::BF16), (false, DType::F16)] {
            let mut p = block(dtype, true, residual, ATTRS, false, true);
            let (_, had_epilogue) = conv_step(&p);
            assert!(had_epilogue);
            let before = p.kernels().count();
            let fused = fuse_conv_epilogues(&mut p);
            let f = fused.iter().flatten().copied().collect::<Vec<_>>();
            assert_eq!(f.len(), 1, "residual {residual}");
            assert_eq!(f[0].residual.is_some(), residual);
            let (out, has_epilogue) = conv_step(&p);
            assert!(!has_epilogue);
            assert_eq!(p.kernels().count(), before - 1, "the epilogue kernel is gone");
            // The fused call writes the program's output itself.
            assert_eq!(p.outputs[0].0, out);
            if let Some(r) = f[0].residual {
                assert_eq!(p.buffer(r).kind, BufKind::Input(1));
            }
        }
    }

    /// `relu(conv(x) + b + conv2(x) + b)` (both convs with a bias; either may take the
    /// epilogue): the residual is a temporary (the other conv's result)
    /// that dies in the fused call, so the memory plan made after fusion puts the output in its
    /// place, and the conv's own result, never written, takes no memory.
    #[test]
    fn a_fused_conv_writes_over_its_residual_in_the_memory_plan() {
        let dtype = DType::F32;
        let mut g = Graph::new();
        let x = g.input("x", TensorType::new(dtype, Shape::fixed(&[1, 3, 6, 6])));
        let w = g.constant(HostTensor::zeros(dtype, &[4, 3, 3, 3]));
        let w2 = g.constant(HostTensor::from_vec(vec![1f32; 108], &[4, 3, 3, 3]).unwrap());
        let b = g.constant(HostTensor::zeros(dtype, &[4]));
        let z = g.add(Op::Conv2d(ATTRS), &[x, w2, b]).unwrap();
        let c = g.add(Op::Conv2d(ATTRS), &[x, w, b]).unwrap();
        let sum = g.add(Op::Binary(BinaryOp::Add), &[c, z]).unwrap();
        let out = g.add(Op::Unary(UnaryOp::Relu), &[sum]).unwrap();
        g.output(out);
        let (mut p, _) = schedule(&g, &ScheduleOptions { fuse: true, extern_dtypes: GPU_EXTERN_DTYPES, row_epilogues: false }).unwrap();
        let fusable_step = |p: &Program| p.steps.iter().position(|s| matches!(&s.kind, StepKind::Extern { epilogue: Some(_), .. })).unwrap();
        let i = fusable_step(&p);
        let StepKind::Extern { out: result, .. } = p.steps[i].kind else { unreachable!() };
        let fused = fuse_conv_epilogues(&mut p);
        let residual = fused.iter().flatten().next().and_then(|f| f.residual).expect("fused with its residual");
        let plan = kiln_sched::plan_memory(&p);
        let StepKind::Extern { inputs, out: y, .. } = &p.steps[i].kind else { unreachable!() };
        let y = *y;
        assert_eq!(inputs.len(), 4, "the residual is the fused step's fourth input");
        assert_eq!(inputs[3].buf, residual);
        assert_eq!(plan.offsets[y.index()], plan.offsets[residual.index()], "y over its residual");
        assert_eq!(p.buffer(result).numel, 0, "the conv's own result needs no memory");
        // One map of [1, 4, 6, 6] f32 (576 bytes): the residual, then the output.
        assert_eq!(plan.arena_bytes, 576);
    }

    #[test]
    fn convs_cudnn_cannot_fuse_keep_their_epilogue() {
        let asymmetric = Conv2dAttrs { padding: [2, 2, 0, 0], ..ATTRS };
        let cases = [
            ("no bias", block(DType::F32, false, true, ATTRS, false, true)),
            ("tanh, not relu", block(DType::F32, true, true, ATTRS, false, false)),
            ("f64 (no extern)", block(DType::F64, true, false, ATTRS, false, true)),
            ("conv result also an output", block(DType::F32, true, false, ATTRS, true, true)),
            ("asymmetric padding runs on the host", block(DType::F32, true, true, asymmetric, false, true)),
        ];
        for (what, mut p) in cases {
            let before = p.steps.clone();
            assert!(fuse_conv_epilogues(&mut p).iter().all(Option::is_none), "{what}");
            assert_eq!(p.steps, before, "{what}");
        }
    }
}
