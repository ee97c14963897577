//! Shape and dtype inference for every op: results, and errors that name the op and shapes.

use kiln_ir::infer::{infer, matmul_shape, reduced_shape, window_out};
use kiln_ir::*;

fn t(d: DType, dims: &[usize]) -> TensorType {
    TensorType::new(d, dims)
}

fn f32t(dims: &[usize]) -> TensorType {
    t(DType::F32, dims)
}

/// A shape with symbolic dims written as names and fixed dims as numbers: `"b,3,s"`.
fn sym(spec: &str) -> Shape {
    Shape(
        spec.split(',')
            .filter(|p| !p.is_empty())
            .map(|p| p.trim().parse::<usize>().map(Dim::Fixed).unwrap_or_else(|_| Dim::sym(p.trim())))
            .collect(),
    )
}

fn symt(spec: &str) -> TensorType {
    TensorType { dtype: DType::F32, shape: sym(spec) }
}

fn run(op: Op, ins: &[TensorType]) -> Result<TensorType> {
    let refs: Vec<&TensorType> = ins.iter().collect();
    infer(&op, &refs)
}

fn ok(op: Op, ins: &[TensorType]) -> TensorType {
    match run(op.clone(), ins) {
        Ok(t) => t,
        Err(e) => panic!("{op:?} on {ins:?} failed: {e}"),
    }
}

/// Asserts an error of the given kind (its Display prefix) whose message contains every `subs`.
fn err(op: Op, ins: &[TensorType], kind: &str, subs: &[&str]) {
    match run(op.clone(), ins) {
        Ok(t) => panic!("{op:?} on {ins:?} should fail, gave {t}"),
        Err(e) => {
            let m = e.to_string();
            assert!(m.starts_with(kind), "{m:?} is not a {kind:?}");
            for s in subs {
                assert!(m.contains(s), "{m:?} does not mention {s:?}");
            }
        }
    }
}

const SHAPE: &str = "shape error";
const DTYPE: &str = "dtype error";
const GRAPH: &str = "invalid graph";
const VALUE: &str = "invalid value";

fn conv(stride: usize, pad: usize, groups: usize) -> Op {
    Op::Conv2d(Conv2dAttrs { stride: [stride; 2], padding: [pad; 4], dilation: [1, 1], groups, channels_last: false })
}

fn pool(kind: PoolKind, k: usize, s: usize, p: usize, ceil_mode: bool) -> Op {
    Op::Pool2d(Pool2dAttrs { kind, kernel: [k; 2], stride: [s; 2], padding: [p; 4], dilation: [1, 1], ceil_mode })
}

#[test]
fn leaf_ops_are_not_inferred() {
    err(Op::Input { name: "x".into() }, &[], GRAPH, &["input"]);
    err(Op::Constant(ConstId(0)), &[], GRAPH, &["const"]);
}

#[test]
fn unary() {
    assert_eq!(ok(Op::Unary(UnaryOp::Exp), &[f32t(&[2, 3])]), f32t(&[2, 3]));
    assert_eq!(ok(Op::Unary(UnaryOp::IsNan), &[t(DType::F16, &[4])]), t(DType::Bool, &[4]));
    assert_eq!(ok(Op::Unary(UnaryOp::IsInf), &[t(DType::I32, &[])]), t(DType::Bool, &[]));
    assert_eq!(ok(Op::Unary(UnaryOp::Not), &[t(DType::Bool, &[0, 2])]), t(DType::Bool, &[0, 2]));
    assert_eq!(ok(Op::Unary(UnaryOp::Not), &[t(DType::U8, &[3])]), t(DType::U8, &[3]));
    assert_eq!(ok(Op::Unary(UnaryOp::Relu), &[t(DType::I64, &[3])]), t(DType::I64, &[3]));
    assert_eq!(ok(Op::Unary(UnaryOp::Neg), &[t(DType::I8, &[1])]), t(DType::I8, &[1]));
    err(Op::Unary(UnaryOp::Exp), &[t(DType::I32, &[2])], DTYPE, &["exp", "i32[2]", "float"]);
    err(Op::Unary(UnaryOp::Not), &[f32t(&[2])], DTYPE, &["not", "f32[2]"]);
    err(Op::Unary(UnaryOp::Neg), &[t(DType::Bool, &[2])], DTYPE, &["neg", "bool[2]"]);
    err(Op::Unary(UnaryOp::IsNan), &[t(DType::Bool, &[2])], DTYPE, &["isnan"]);
    err(Op::Unary(UnaryOp::Exp), &[f32t(&[2]), f32t(&[2])], GRAPH, &["exp", "takes 1 inputs, got 2"]);
}

#[test]
fn binary_broadcasts_and_types() {
    let add = Op::Binary(BinaryOp::Add);
    assert_eq!(ok(add.clone(), &[f32t(&[2, 1, 3]), f32t(&[4, 1])]), f32t(&[2, 4, 3]));
    assert_eq!(ok(add.clone(), &[f32t(&[]), f32t(&[5])]), f32t(&[5]));
    assert_eq!(ok(add.clone(), &[f32t(&[0, 1]), f32t(&[1, 7])]), f32t(&[0, 7]));
    assert_eq!(ok(Op::Binary(BinaryOp::Lt), &[t(DType::I64, &[3]), t(DType::I64, &[1])]), t(DType::Bool, &[3]));
    assert_eq!(ok(Op::Binary(BinaryOp::Eq), &[t(DType::Bool, &[3]), t(DType::Bool, &[3])]), t(DType::Bool, &[3]));
    assert_eq!(ok(Op::Binary(BinaryOp::Xor), &[t(DType::Bool, &[2]), t(DType::Bool, &[])]), t(DType::Bool, &[2]));
    assert_eq!(ok(Op::Binary(BinaryOp::And), &[t(DType::I32, &[2]), t(DType::I32, &[2])]), t(DType::I32, &[2]));
    err(add.clone(), &[f32t(&[2, 3]), f32t(&[4])], SHAPE, &["add", "[2, 3]", "[4]", "broadcast"]);
    err(add.clone(), &[f32t(&[2]), t(DType::F64, &[2])], DTYPE, &["add", "f32", "f64"]);
    err(add.clone(), &[t(DType::Bool, &[2]), t(DType::Bool, &[2])], DTYPE, &["add", "bool"]);
    err(Op::Binary(BinaryOp::And), &[f32t(&[2]), f32t(&[2])], DTYPE, &["and", "f32[2]"]);
    err(add, &[f32t(&[2])], GRAPH, &["add", "takes 2 inputs, got 1"]);
}

#[test]
fn where_and_cast() {
    let b = t(DType::Bool, &[3, 1]);
    assert_eq!(ok(Op::Where, &[b.clone(), f32t(&[1, 4]), f32t(&[])]), f32t(&[3, 4]));
    err(Op::Where, &[f32t(&[3]), f32t(&[3]), f32t(&[3])], DTYPE, &["where", "condition"]);
    err(Op::Where, &[b.clone(), f32t(&[3, 1]), t(DType::F64, &[3, 1])], DTYPE, &["where", "f64[3, 1]"]);
    err(Op::Where, &[b, f32t(&[2, 1]), f32t(&[1])], SHAPE, &["where", "[3, 1]", "[2, 1]"]);
    assert_eq!(ok(Op::Cast(DType::I8), &[f32t(&[2, 0])]), t(DType::I8, &[2, 0]));
    assert_eq!(ok(Op::Cast(DType::F32), &[t(DType::Bool, &[])]), f32t(&[]));
}

#[test]
fn reductions() {
    let r = |axes: Vec<usize>, keep_dims| Op::Reduce { op: ReduceOp::Sum, axes, keep_dims };
    assert_eq!(ok(r(vec![0, 2], false), &[f32t(&[2, 3, 4])]), f32t(&[3]));
    assert_eq!(ok(r(vec![0, 2], true), &[f32t(&[2, 3, 4])]), f32t(&[1, 3, 1]));
    assert_eq!(ok(r(vec![], false), &[f32t(&[2, 3])]), f32t(&[2, 3]));
    assert_eq!(ok(r(vec![0], false), &[t(DType::I32, &[0, 5])]), t(DType::I32, &[5]));
    err(r(vec![2, 0], false), &[f32t(&[2, 3, 4])], SHAPE, &["reduce_sum", "sorted"]);
    err(r(vec![1, 1], false), &[f32t(&[2, 3, 4])], SHAPE, &["reduce_sum", "unique"]);
    err(r(vec![3], false), &[f32t(&[2, 3, 4])], SHAPE, &["reduce_sum", "axis 3", "rank 3"]);
    err(r(vec![0], false), &[t(DType::Bool, &[2])], DTYPE, &["reduce_sum", "bool[2]"]);
    let am = |axis, keep_dims| Op::ArgReduce { op: ArgReduceOp::ArgMax, axis, keep_dims, select_last: false };
    assert_eq!(ok(am(1, false), &[f32t(&[2, 3, 4])]), t(DType::I64, &[2, 4]));
    assert_eq!(ok(am(1, true), &[t(DType::U8, &[2, 3])]), t(DType::I64, &[2, 1]));
    err(am(1, false), &[f32t(&[2, 0])], SHAPE, &["argmax", "empty"]);
    err(am(2, false), &[f32t(&[2, 3])], SHAPE, &["argmax", "axis 2"]);
    assert_eq!(reduced_shape(&Shape::fixed(&[2, 3, 4]), &[1], true), Shape::fixed(&[2, 1, 4]));
}

#[test]
fn movement() {
    assert_eq!(ok(Op::Reshape(Shape::fixed(&[3, 4])), &[f32t(&[2, 6])]), f32t(&[3, 4]));
    assert_eq!(ok(Op::Reshape(Shape::fixed(&[])), &[f32t(&[1, 1])]), f32t(&[]));
    err(Op::Reshape(Shape::fixed(&[5])), &[f32t(&[2, 6])], SHAPE, &["reshape", "[2, 6]", "12 elements", "[5]"]);
    assert_eq!(ok(Op::Permute(vec![2, 0, 1]), &[f32t(&[2, 3, 4])]), f32t(&[4, 2, 3]));
    err(Op::Permute(vec![0, 0, 1]), &[f32t(&[2, 3, 4])], SHAPE, &["permute", "[0, 0, 1]", "f32[2, 3, 4]"]);
    err(Op::Permute(vec![1, 0]), &[f32t(&[2, 3, 4])], SHAPE, &["permute", "rank 3"]);
    assert_eq!(ok(Op::Expand(Shape::fixed(&[2, 3, 4])), &[f32t(&[3, 1])]), f32t(&[2, 3, 4]));
    err(Op::Expand(Shape::fixed(&[4])), &[f32t(&[3])], SHAPE, &["expand", "[3]", "[4]"]);
    err(Op::Expand(Shape::fixed(&[3])), &[f32t(&[1, 3])], SHAPE, &["expand", "[1, 3]"]);
    let s = |start, end, step| SliceAxis { start, end, step };
    assert_eq!(ok(Op::Slice(vec![s(1, 8, 2), SliceAxis::FULL]), &[f32t(&[10, 3])]), f32t(&[4, 3]));
    assert_eq!(ok(Op::Slice(vec![s(-1, i64::MIN, -1)]), &[f32t(&[5])]), f32t(&[5]));
    assert_eq!(ok(Op::Slice(vec![s(7, 2, 1)]), &[f32t(&[10])]), f32t(&[0]));
    err(Op::Slice(vec![SliceAxis::FULL]), &[f32t(&[2, 3])], SHAPE, &["slice", "1 slice ranges", "rank 2"]);
    err(Op::Slice(vec![s(0, 3, 0)]), &[f32t(&[3])], VALUE, &["slice", "step"]);
}

#[test]
fn pad_concat_gather() {
    let pad = |pads: Vec<(usize, usize)>, mode| Op::Pad { pads, mode };
    assert_eq!(ok(pad(vec![(1, 2), (0, 0)], PadMode::Constant(0.0)), &[f32t(&[3, 4])]), f32t(&[6, 4]));
    assert_eq!(ok(pad(vec![(2, 2)], PadMode::Reflect), &[f32t(&[3])]), f32t(&[7]));
    err(pad(vec![(3, 0)], PadMode::Reflect), &[f32t(&[3])], SHAPE, &["pad", "reflect", "(3, 0)"]);
    err(pad(vec![(1, 0)], PadMode::Edge), &[f32t(&[0])], SHAPE, &["pad", "edge"]);
    err(pad(vec![(1, 0)], PadMode::Edge), &[f32t(&[2, 2])], SHAPE, &["pad", "1 pad pairs", "rank 2"]);

    let cat = |axis| Op::Concat { axis };
    assert_eq!(ok(cat(1), &[f32t(&[2, 3]), f32t(&[2, 0]), f32t(&[2, 5])]), f32t(&[2, 8]));
    assert_eq!(ok(cat(0), &[f32t(&[4])]), f32t(&[4]));
    err(cat(1), &[f32t(&[2, 3]), f32t(&[3, 3])], SHAPE, &["concat", "f32[2, 3]", "f32[3, 3]", "axis 1"]);
    err(cat(0), &[f32t(&[2, 3]), f32t(&[2])], SHAPE, &["concat", "rank"]);
    err(cat(0), &[f32t(&[2]), t(DType::I32, &[2])], DTYPE, &["concat", "i32"]);
    err(cat(2), &[f32t(&[2, 3])], SHAPE, &["concat", "axis 2"]);
    err(cat(0), &[], GRAPH, &["concat", "got 0"]);

    let g = |axis| Op::Gather { axis };
    assert_eq!(ok(g(0), &[f32t(&[5, 4]), t(DType::I64, &[2, 3])]), f32t(&[2, 3, 4]));
    assert_eq!(ok(g(1), &[f32t(&[5, 4]), t(DType::I32, &[])]), f32t(&[5]));
    err(g(0), &[f32t(&[5, 4]), f32t(&[2])], DTYPE, &["gather", "indices"]);
    err(g(2), &[f32t(&[5, 4]), t(DType::I64, &[2])], SHAPE, &["gather", "axis 2"]);
}

#[test]
fn matmul() {
    assert_eq!(ok(Op::MatMul, &[f32t(&[2, 3]), f32t(&[3, 4])]), f32t(&[2, 4]));
    assert_eq!(ok(Op::MatMul, &[f32t(&[3]), f32t(&[3, 4])]), f32t(&[4]));
    assert_eq!(ok(Op::MatMul, &[f32t(&[2, 3]), f32t(&[3])]), f32t(&[2]));
    assert_eq!(ok(Op::MatMul, &[f32t(&[3]), f32t(&[3])]), f32t(&[]));
    assert_eq!(ok(Op::MatMul, &[f32t(&[5, 1, 2, 3]), f32t(&[4, 3, 6])]), f32t(&[5, 4, 2, 6]));
    assert_eq!(ok(Op::MatMul, &[f32t(&[0, 3]), f32t(&[3, 0])]), f32t(&[0, 0]));
    assert_eq!(ok(Op::MatMul, &[t(DType::I32, &[2, 3]), t(DType::I32, &[3, 1])]), t(DType::I32, &[2, 1]));
    err(Op::MatMul, &[f32t(&[2, 3]), f32t(&[4, 5])], SHAPE, &["matmul", "inner dims", "[2, 3] @ [4, 5]", "3 vs 4"]);
    err(Op::MatMul, &[f32t(&[2, 2, 3]), f32t(&[3, 3, 4])], SHAPE, &["matmul", "[2]", "[3]"]);
    err(Op::MatMul, &[f32t(&[]), f32t(&[3])], SHAPE, &["matmul", "rank >= 1"]);
    err(Op::MatMul, &[t(DType::Bool, &[2, 2]), t(DType::Bool, &[2, 2])], DTYPE, &["matmul", "numeric"]);
    err(Op::MatMul, &[f32t(&[2, 2]), t(DType::F16, &[2, 2])], DTYPE, &["matmul", "f16"]);
}

#[test]
fn conv_and_pool() {
    let x = f32t(&[1, 3, 224, 224]);
    let w = f32t(&[64, 3, 7, 7]);
    let b = f32t(&[64]);
    assert_eq!(ok(conv(2, 3, 1), &[x.clone(), w.clone()]), f32t(&[1, 64, 112, 112]));
    assert_eq!(ok(conv(2, 3, 1), &[x.clone(), w.clone(), b]), f32t(&[1, 64, 112, 112]));
    // depthwise: groups = channels, weight [C, 1, k, k]
    assert_eq!(ok(conv(1, 1, 8), &[f32t(&[2, 8, 5, 5]), f32t(&[8, 1, 3, 3])]), f32t(&[2, 8, 5, 5]));
    err(conv(1, 0, 2), &[f32t(&[1, 3, 8, 8]), f32t(&[4, 3, 3, 3])], SHAPE, &["conv2d", "groups=2"]);
    err(conv(1, 0, 1), &[f32t(&[1, 3, 8, 8]), f32t(&[4, 2, 3, 3])], SHAPE, &["conv2d", "groups=1"]);
    err(conv(1, 0, 1), &[f32t(&[1, 3, 8, 8]), f32t(&[4, 3, 3, 3]), f32t(&[5])], SHAPE, &["conv2d", "bias", "[4]"]);
    err(conv(1, 0, 1), &[f32t(&[3, 8, 8]), f32t(&[4, 3, 3, 3])], SHAPE, &["conv2d", "f32[3, 8, 8]", "[N, C, H, W]"]);
    err(conv(1, 0, 1), &[f32t(&[1, 3, 2, 2]), f32t(&[4, 3, 3, 3])], SHAPE, &["conv2d", "does not fit", "size 2"]);
    err(conv(0, 0, 1), &[f32t(&[1, 3, 8, 8]), f32t(&[4, 3, 3, 3])], VALUE, &["conv2d", "stride"]);
    err(conv(1, 0, 1), &[t(DType::I32, &[1, 3, 8, 8]), t(DType::I32, &[4, 3, 3, 3])], DTYPE, &["conv2d", "float"]);

    // Channels last: x [N, H, W, C], w [O, KH, KW, C/g] -> [N, OH, OW, O].
    let nhwc = |groups| Op::Conv2d(Conv2dAttrs { stride: [2, 2], padding: [3; 4], dilation: [1, 1], groups, channels_last: true });
    assert_eq!(ok(nhwc(1), &[f32t(&[1, 224, 224, 3]), f32t(&[64, 7, 7, 3]), f32t(&[64])]), f32t(&[1, 112, 112, 64]));
    assert_eq!(ok(nhwc(2), &[f32t(&[2, 9, 9, 4]), f32t(&[6, 7, 7, 2])]), f32t(&[2, 5, 5, 6]));
    err(nhwc(1), &[f32t(&[1, 3, 224, 224]), f32t(&[64, 7, 7, 3])], SHAPE, &["conv2d", "224 input channels", "groups=1"]);
    err(nhwc(1), &[f32t(&[224, 224, 3]), f32t(&[64, 7, 7, 3])], SHAPE, &["channels-last", "[N, H, W, C]"]);

    let x = f32t(&[1, 64, 112, 112]);
    assert_eq!(ok(pool(PoolKind::Max, 3, 2, 1, false), std::slice::from_ref(&x)), f32t(&[1, 64, 56, 56]));
    assert_eq!(ok(pool(PoolKind::Max, 2, 2, 0, true), &[f32t(&[1, 1, 5, 5])]), f32t(&[1, 1, 3, 3]));
    assert_eq!(ok(pool(PoolKind::Max, 2, 2, 0, false), &[t(DType::I32, &[1, 1, 5, 5])]), t(DType::I32, &[1, 1, 2, 2]));
    let avg = PoolKind::Avg { count_include_pad: true };
    err(pool(avg, 2, 2, 0, false), &[t(DType::I32, &[1, 1, 4, 4])], DTYPE, &["avg_pool2d", "float"]);
    err(pool(PoolKind::Max, 3, 1, 2, false), std::slice::from_ref(&x), VALUE, &["max_pool2d", "half the kernel"]);
    err(pool(PoolKind::Max, 3, 1, 0, false), &[f32t(&[1, 64, 112])], SHAPE, &["max_pool2d", "[N, C, H, W]"]);
}

#[test]
fn window_sizes_match_pytorch() {
    // torch.nn.functional.max_pool2d(torch.zeros(1,1,n,n), k, s, p, ceil_mode=c).shape[-1]
    assert_eq!(window_out(112, 3, 2, (1, 1), 1, false), Some(56));
    assert_eq!(window_out(5, 2, 2, (0, 0), 1, true), Some(3));
    assert_eq!(window_out(5, 2, 2, (0, 0), 1, false), Some(2));
    assert_eq!(window_out(6, 3, 2, (1, 1), 1, true), Some(4));
    assert_eq!(window_out(5, 3, 2, (1, 1), 1, true), Some(3));
    assert_eq!(window_out(10, 3, 1, (0, 0), 2, false), Some(6));
    assert_eq!(window_out(2, 3, 1, (0, 0), 1, false), None);
    assert_eq!(window_out(5, 3, 0, (0, 0), 1, false), None);
}

#[test]
fn normalization_and_activations() {
    let x = f32t(&[2, 5, 8]);
    assert_eq!(ok(Op::Softmax { axis: 2 }, std::slice::from_ref(&x)), x);
    assert_eq!(ok(Op::LogSoftmax { axis: 0 }, std::slice::from_ref(&x)), x);
    err(Op::Softmax { axis: 3 }, std::slice::from_ref(&x), SHAPE, &["softmax", "axis 3", "rank 3"]);
    err(Op::Softmax { axis: 0 }, &[t(DType::I64, &[3])], DTYPE, &["softmax", "float", "i64"]);

    let ln = Op::LayerNorm { axis: 1, eps: 1e-5 };
    assert_eq!(ok(ln.clone(), std::slice::from_ref(&x)), x);
    assert_eq!(ok(ln.clone(), &[x.clone(), f32t(&[5, 8]), f32t(&[8])]), x);
    err(ln.clone(), &[x.clone(), f32t(&[3, 8])], SHAPE, &["layer_norm", "[3, 8]", "[5, 8]"]);
    err(ln.clone(), &[x.clone(), f32t(&[2, 5, 8])], SHAPE, &["layer_norm", "normalized dims"]);
    err(ln, &[x.clone(), t(DType::F16, &[8])], DTYPE, &["layer_norm", "f16"]);

    let bn = Op::BatchNorm { eps: 1e-5 };
    let c = f32t(&[5]);
    assert_eq!(ok(bn.clone(), &[x.clone(), c.clone(), c.clone(), c.clone(), c.clone()]), x);
    err(bn.clone(), &[x.clone(), c.clone(), c.clone(), c.clone(), f32t(&[8])], SHAPE, &["batch_norm", "[5]"]);
    err(bn.clone(), &[f32t(&[5]), c.clone(), c.clone(), c.clone(), c.clone()], SHAPE, &["batch_norm", "rank >= 2"]);
    err(bn, &[x.clone(), c.clone()], GRAPH, &["batch_norm", "takes 5 inputs, got 2"]);

    assert_eq!(ok(Op::Gelu { tanh_approx: true }, &[t(DType::BF16, &[3])]), t(DType::BF16, &[3]));
    err(Op::Gelu { tanh_approx: false }, &[t(DType::I32, &[3])], DTYPE, &["gelu", "i32[3]"]);
}

#[test]
fn attention() {
    let a = Op::Attention { causal: false, scale: None };
    let (q, k, v) = (f32t(&[2, 4, 8, 16]), f32t(&[2, 4, 10, 16]), f32t(&[2, 4, 10, 32]));
    assert_eq!(ok(a.clone(), &[q.clone(), k.clone(), v.clone()]), f32t(&[2, 4, 8, 32]));
    assert_eq!(ok(a.clone(), &[q.clone(), k.clone(), v.clone(), f32t(&[8, 10])]), f32t(&[2, 4, 8, 32]));
    assert_eq!(ok(a.clone(), &[f32t(&[2, 1, 8, 16]), f32t(&[1, 4, 10, 16]), v.clone()]), f32t(&[2, 4, 8, 32]));
    err(a.clone(), &[q.clone(), k.clone(), v.clone(), f32t(&[8, 9])], SHAPE, &["attention", "[8, 9]", "[2, 4, 8, 10]"]);
    err(a.clone(), &[q.clone(), f32t(&[2, 4, 10, 15]), v.clone()], SHAPE, &["attention", "f32[2, 4, 10, 15]"]);
    err(a.clone(), &[q.clone(), k.clone(), f32t(&[2, 4, 9, 32])], SHAPE, &["attention"]);
    err(a.clone(), &[f32t(&[16]), f32t(&[16]), f32t(&[16])], SHAPE, &["attention"]);
    err(a, &[q, k], GRAPH, &["attention", "takes 3 to 4 inputs, got 2"]);
}

#[test]
fn symbolic_dims_flow_through() {
    let add = Op::Binary(BinaryOp::Add);
    assert_eq!(ok(add.clone(), &[symt("b,1"), symt("1,3")]).shape, sym("b,3"));
    assert_eq!(ok(add.clone(), &[symt("b,s"), symt("s")]).shape, sym("b,s"));
    assert_eq!(ok(add.clone(), &[symt("b"), symt("1")]).shape, sym("b"));
    err(add.clone(), &[symt("b"), symt("s")], SHAPE, &["add", "[b]", "[s]", "b vs s"]);
    err(add, &[symt("b"), symt("3")], SHAPE, &["add", "[b]", "[3]"]);

    assert_eq!(ok(Op::MatMul, &[symt("b,s,64"), symt("64,10")]).shape, sym("b,s,10"));
    assert_eq!(ok(Op::MatMul, &[symt("b,s,d"), symt("b,d,s")]).shape, sym("b,s,s"));
    err(Op::MatMul, &[symt("b,s,d"), symt("e,4")], SHAPE, &["matmul", "d vs e"]);
    assert_eq!(matmul_shape(&sym("n"), &sym("n,m"), "t").unwrap(), sym("m"));

    // A reshape with unknown element counts cannot be checked until the dims are bound.
    assert_eq!(ok(Op::Reshape(sym("b,12")), &[symt("b,3,4")]).shape, sym("b,12"));
    assert_eq!(ok(Op::Reshape(sym("b,3,4")), &[symt("b,12")]).shape, sym("b,3,4"));

    assert_eq!(ok(Op::Concat { axis: 1 }, &[symt("b,2"), symt("b,3")]).shape, sym("b,5"));
    assert_eq!(ok(Op::Concat { axis: 0 }, &[symt("b,2"), symt("3,2")]).shape, sym("b+3,2"));
    err(Op::Concat { axis: 1 }, &[symt("b,2"), symt("c,3")], SHAPE, &["concat", "f32[b, 2]", "f32[c, 3]"]);

    assert_eq!(ok(Op::Expand(sym("b,3")), &[symt("1,3")]).shape, sym("b,3"));
    assert_eq!(ok(Op::Permute(vec![1, 0]), &[symt("b,s")]).shape, sym("s,b"));
    assert_eq!(ok(Op::Slice(vec![SliceAxis::FULL, SliceAxis::FULL]), &[symt("b,s")]).shape, sym("b,s"));
    let r = Op::Reduce { op: ReduceOp::Mean, axes: vec![1], keep_dims: true };
    assert_eq!(ok(r, &[symt("b,s,8")]).shape, sym("b,1,8"));
    let x = symt("b,3,32,32");
    assert_eq!(ok(conv(1, 1, 1), &[x, f32t(&[8, 3, 3, 3])]).shape, sym("b,8,32,32"));
    let u = Dim::sym("u");
    let spatial = TensorType { dtype: DType::F32, shape: Shape(vec![1.into(), 3.into(), u.clone(), u]) };
    assert!(matches!(run(conv(1, 1, 1), &[spatial, f32t(&[8, 3, 3, 3])]), Err(Error::Unsupported(_))));
}
