//! Matmul epilogues cuBLASLt applies inside the GEMM (`CUBLASLT_EPILOGUE_BIAS` /
//! `_RELU_BIAS`): a matmul step whose epilogue is `out + bias` or `relu(out + bias)`, with the
//! bias one value per output column (a Linear layer's bias, or one literal for every column),
//! runs as one cuBLASLt call, without the epilogue kernel's pass over the output. The bias is
//! added in the GEMM's f32 compute type before the one rounding to the output type, so f32
//! results are those of the unfused pair, and f16 / bf16 ones are rounded once instead of
//! twice. cuBLASLt's GELU epilogue is the tanh approximation, not the erf GELU of BERT, so it
//! is not used. [`super::fusion`] folds what this finds into the step.

use super::fusion::{DenseEpilogue, is_float};
use super::matmul::{Batching, MatmulPlan};
use kiln_ir::{BinaryOp, UnaryOp};
use kiln_sched::kernel::{Expr, Idx, Literal, Loop};
use kiln_sched::{BufId, BufView, ExternOp, Program};

/// The bias of a fused GEMM.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum GemmBias {
    /// Element `j` of this buffer for column `j` (the fused step's third input).
    Column(BufId),
    /// The same value for every column (a literal of the epilogue).
    Splat(f64),
}

/// What cuBLASLt applies after the product: the bias, then (`relu`) a ReLU.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GemmFusion {
    pub bias: GemmBias,
    pub relu: bool,
}

impl GemmFusion {
    /// `+bias` or `+bias+relu`: what the fused call applies after the product.
    pub fn label(&self) -> &'static str {
        if self.relu { "+bias+relu" } else { "+bias" }
    }
}

/// The fusion of a matmul step's epilogue `e`, the bias buffer the fused call also reads (its
/// third input) and the step's plan, when cuBLASLt can take it: a float matmul that runs as one
/// strided batch ([`MatmulPlan`]), whose epilogue is `out + bias` or `relu(out + bias)` with
/// `bias` a literal or a load of element `column` of a buffer.
pub(crate) fn fusable(p: &Program, e: &DenseEpilogue) -> Option<(GemmFusion, Option<BufView>, MatmulPlan)> {
    if *e.op != ExternOp::MatMul || e.inputs.len() != 2 {
        return None;
    }
    let dtype = p.buffer(e.out).dtype;
    let plan = MatmulPlan::new(e.inputs, e.out_shape, dtype).ok()??;
    let n = *e.out_shape.last()?;
    if !matches!(plan.batching(), Batching::Strided { .. }) || n == 0 {
        return None;
    }
    let (relu, sum) = match e.expr(e.value)? {
        Expr::Unary { op: UnaryOp::Relu, x } => (true, *x),
        _ => (false, e.value),
    };
    let Expr::Binary { op: BinaryOp::Add, a, b } = *e.expr(sum)? else {
        return None;
    };
    let other = match (e.load_here(a), e.load_here(b)) {
        (Some(l), _) if l == e.out => b,
        (_, Some(l)) if l == e.out => a,
        _ => return None,
    };
    let bias = match e.expr(other)? {
        Expr::Const(Literal::Float(v)) => GemmBias::Splat(*v),
        Expr::Load { .. } => {
            let (buf, index) = e.load(other)?;
            let ok = buf != e.out && is_float(p, buf) && p.buffer(buf).dtype == dtype && p.buffer(buf).numel >= n;
            if !ok || !column_of(e.index, index, &e.loops, n) {
                return None;
            }
            GemmBias::Column(buf)
        }
        _ => return None,
    };
    let extra = match bias {
        GemmBias::Column(buf) => Some(BufView::dense(buf, &[n])),
        GemmBias::Splat(_) => None,
    };
    Some((GemmFusion { bias, relu }, extra, plan))
}

/// Whether `bias` is `store % n` at every point of `loops`, where `store` (a dense store's
/// index: non-negative) is the flat element index: either literally `store % n`, or an affine
/// index that keeps the terms of `store` whose sum stays below `n` and drops terms that are
/// multiples of `n`.
fn column_of(store: &Idx, bias: &Idx, loops: &[Loop], n: usize) -> bool {
    if let Idx::Mod(x, m) = bias
        && **x == *store
        && *m == n as i64
    {
        return true;
    }
    let (Some((s, 0)), Some((b, 0))) = (store.affine(), bias.affine()) else {
        return false;
    };
    let n = n as i64;
    let mut kept_max = 0i64;
    for l in loops.iter().filter(|l| l.extent > 1) {
        let (cs, cb) = (s.get(&l.var).copied().unwrap_or(0), b.get(&l.var).copied().unwrap_or(0));
        if cs <= 0 && cb != 0 {
            return false;
        }
        if cb == cs && cs > 0 {
            kept_max += cs * (l.extent as i64 - 1);
        } else if !(cb == 0 && cs % n == 0) {
            return false;
        }
    }
    // A variable of the bias index that no loop (of more than one point) runs over.
    let unknown = b.iter().any(|(v, &c)| c != 0 && !loops.iter().any(|l| l.var == *v && l.extent > 1));
    !unknown && kept_max < n
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exec::fusion::fuse_library_epilogues;
    use kiln_ir::{DType, Graph, HostTensor, Op, Shape, TensorType};
    use kiln_sched::{GPU_EXTERN_DTYPES, ScheduleOptions, StepKind, schedule};

    /// `[relu](x [2, 3, 4] @ w [4, 5] + bias)`, where `bias` is `[5]` (per column), a scalar,
    /// or `[3, 1]` (per row: not a GEMM bias).
    fn linear(dtype: DType, bias: &[usize], relu: bool) -> Program {
        let mut g = Graph::new();
        let x = g.input("x", TensorType::new(dtype, Shape::fixed(&[2, 3, 4])));
        let w = g.constant(HostTensor::zeros(dtype, &[4, 5]));
        let n: usize = bias.iter().product();
        let b = g.constant(kiln_cpu::eval(&Op::Cast(dtype), &[&HostTensor::from_vec((0..n).map(|i| i as f64 + 0.5).collect::<Vec<f64>>(), bias).unwrap()]).unwrap());
        let m = g.add(Op::MatMul, &[x, w]).unwrap();
        let mut y = g.add(Op::Binary(BinaryOp::Add), &[m, b]).unwrap();
        if relu {
            y = g.add(Op::Unary(UnaryOp::Relu), &[y]).unwrap();
        }
        g.output(y);
        schedule(&g, &ScheduleOptions { fuse: true, extern_dtypes: GPU_EXTERN_DTYPES, row_epilogues: false }).unwrap().0
    }

    fn fuse(p: &mut Program) -> Vec<GemmFusion> {
        fuse_library_epilogues(p, &mut |_, _| true).into_iter().flatten().filter_map(|f| f.gemm()).collect()
    }

    #[test]
    fn a_column_bias_and_relu_fold_into_the_gemm() {
        for (dtype, relu) in [(DType::F32, false), (DType::F32, true), (DType::BF16, true), (DType::F16, false)] {
            let mut p = linear(dtype, &[5], relu);
            let kernels = p.kernels().count();
            let f = fuse(&mut p);
            assert_eq!(f.len(), 1, "{dtype} relu {relu}");
            assert_eq!(f[0].relu, relu);
            let GemmBias::Column(b) = f[0].bias else { panic!("a column bias") };
            assert_eq!(p.kernels().count(), kernels - 1, "the epilogue kernel is gone");
            let StepKind::Extern { inputs, out, epilogue, .. } = &p.steps[0].kind else { panic!() };
            assert!(epilogue.is_none());
            assert_eq!(inputs.len(), 3, "the bias is the fused step's third input");
            assert_eq!((inputs[2].buf, inputs[2].shape.as_slice()), (b, &[5][..]));
            assert_eq!(p.outputs[0].0, *out, "the fused call writes the output itself");
        }
    }

    #[test]
    fn a_scalar_bias_is_one_value_for_every_column() {
        let mut p = linear(DType::F32, &[], false);
        let f = fuse(&mut p);
        assert_eq!(f, vec![GemmFusion { bias: GemmBias::Splat(0.5), relu: false }]);
        let StepKind::Extern { inputs, .. } = &p.steps[0].kind else { panic!() };
        assert_eq!(inputs.len(), 2);
    }

    #[test]
    fn per_row_biases_and_refused_gemms_keep_their_epilogue() {
        for (what, mut p, accept) in [
            ("per-row bias", linear(DType::F32, &[3, 1], false), true),
            ("f64 (no extern)", linear(DType::F64, &[5], false), true),
            ("cuBLASLt has no algorithm", linear(DType::F32, &[5], true), false),
        ] {
            let before = p.steps.clone();
            assert!(fuse_library_epilogues(&mut p, &mut |_, _| accept).iter().all(Option::is_none), "{what}");
            assert_eq!(p.steps, before, "{what}");
        }
    }

    #[test]
    fn column_indices_are_recognised_exactly() {
        let v = |i: u32| Idx::Var(i);
        let loops = [Loop { var: 0, extent: 6 }, Loop { var: 1, extent: 4 }, Loop { var: 2, extent: 5 }];
        let store = v(0).mul(20).add(v(1).mul(5)).add(v(2));
        // Columns of 5, of 20, and the whole 120 as one row.
        assert!(column_of(&store, &v(2), &loops, 5));
        assert!(column_of(&store, &v(1).mul(5).add(v(2)), &loops, 20));
        assert!(column_of(&store, &store, &loops, 120));
        assert!(column_of(&store, &store.clone().rem(5), &loops, 5));
        // Not the column: the row, a shifted column, a column of the wrong width.
        assert!(!column_of(&store, &v(1), &loops, 5));
        assert!(!column_of(&store, &v(2).add(Idx::Const(1)), &loops, 5));
        assert!(!column_of(&store, &v(2), &loops, 20));
        assert!(!column_of(&store, &v(1).mul(5).add(v(2)), &loops, 10));
        assert!(!column_of(&store, &store.clone().rem(4), &loops, 5));
    }
}
