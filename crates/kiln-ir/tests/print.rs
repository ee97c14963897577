//! The printed form of a graph: one line per node with type, op, inputs, attributes and name.

use kiln_ir::*;

fn f32t(dims: &[usize]) -> TensorType {
    TensorType::new(DType::F32, dims)
}

/// The stem of a ResNet: conv1 (7x7 stride 2) -> relu -> max pool -> channel sum.
fn stem() -> Graph {
    let mut g = Graph::new();
    let x = g.input("x", f32t(&[1, 3, 224, 224]));
    let w = g.constant(HostTensor::zeros(DType::F32, &[64, 3, 7, 7]));
    let b = g.constant(HostTensor::zeros(DType::F32, &[64]));
    let a = Conv2dAttrs { stride: [2, 2], padding: [3, 3, 3, 3], dilation: [1, 1], groups: 1, channels_last: false };
    let c = g.add_named(Op::Conv2d(a), &[x, w, b], Some("conv1".into())).unwrap();
    let r = g.add(Op::Unary(UnaryOp::Relu), &[c]).unwrap();
    let p = Pool2dAttrs { kind: PoolKind::Max, kernel: [3, 3], stride: [2, 2], padding: [1; 4], dilation: [1, 1], ceil_mode: false };
    let p = g.add(Op::Pool2d(p), &[r]).unwrap();
    let half = g.constant(HostTensor::scalar(0.5f32));
    let m = g.add(Op::Binary(BinaryOp::Mul), &[p, half]).unwrap();
    let s = g.add(Op::Reduce { op: ReduceOp::Sum, axes: vec![1], keep_dims: true }, &[m]).unwrap();
    g.output(s);
    g.output(r);
    g
}

#[test]
fn one_line_per_node() {
    let text = stem().to_string();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 10, "{text}");
    assert_eq!(lines[0], "%0: f32[1, 3, 224, 224] = input \"x\" #0");
    assert_eq!(lines[1], "%1: f32[64, 3, 7, 7] = const #0");
    assert_eq!(lines[3], "%3: f32[1, 64, 112, 112] = conv2d(%0, %1, %2) stride=[2, 2] pad=[3, 3, 3, 3]  # conv1");
    assert_eq!(lines[4], "%4: f32[1, 64, 112, 112] = relu(%3)");
    assert_eq!(lines[5], "%5: f32[1, 64, 56, 56] = max_pool2d(%4) kernel=[3, 3] stride=[2, 2] pad=[1, 1, 1, 1]");
    assert_eq!(lines[6], "%6: f32[] = const #2 = [0.5]");
    assert_eq!(lines[7], "%7: f32[1, 64, 56, 56] = mul(%5, %6)");
    assert_eq!(lines[8], "%8: f32[1, 1, 56, 56] = reduce_sum(%7) axes=[1] keep_dims");
    assert_eq!(lines[9], "outputs: %8, %4");
}

#[test]
fn symbolic_dims_print_by_name() {
    let mut g = Graph::new();
    let x = g.input("ids", TensorType { dtype: DType::I64, shape: Shape(vec![Dim::sym("batch"), Dim::Fixed(8)]) });
    let c = g.add(Op::Cast(DType::F16), &[x]).unwrap();
    g.output(c);
    let text = g.to_string();
    assert!(text.contains("%0: i64[batch, 8] = input \"ids\" #0"), "{text}");
    assert!(text.contains("%1: f16[batch, 8] = cast(%0) to=f16"), "{text}");
}

#[test]
fn attributes_are_compact() {
    let s = |start, end, step| SliceAxis { start, end, step };
    assert_eq!(op_attrs(&Op::Slice(vec![SliceAxis::FULL, s(1, i64::MAX, 1), s(-1, i64::MIN, -1), s(0, 6, 2)])), "[:, 1:, -1::-1, :6:2]");
    assert_eq!(op_attrs(&Op::Permute(vec![0, 2, 1])), "perm=[0, 2, 1]");
    assert_eq!(op_attrs(&Op::Reshape(Shape(vec![Dim::sym("b"), Dim::Fixed(64)]))), "shape=[b, 64]");
    assert_eq!(op_attrs(&Op::Pad { pads: vec![(0, 0), (1, 2)], mode: PadMode::Constant(-1.5) }), "pads=[(0, 0), (1, 2)] mode=constant(-1.5)");
    assert_eq!(op_attrs(&Op::Pad { pads: vec![(1, 1)], mode: PadMode::Reflect }), "pads=[(1, 1)] mode=reflect");
    assert_eq!(op_attrs(&Op::ArgReduce { op: ArgReduceOp::ArgMin, axis: 2, keep_dims: false, select_last: true }), "axis=2 select_last");
    assert_eq!(op_attrs(&Op::Reduce { op: ReduceOp::Max, axes: vec![0, 1], keep_dims: false }), "axes=[0, 1]");
    assert_eq!(op_attrs(&Op::LayerNorm { axis: 2, eps: 1e-5 }), "axis=2 eps=0.00001");
    assert_eq!(op_attrs(&Op::BatchNorm { eps: 0.001 }), "eps=0.001");
    assert_eq!(op_attrs(&Op::Gelu { tanh_approx: true }), "tanh");
    assert_eq!(op_attrs(&Op::Gelu { tanh_approx: false }), "");
    assert_eq!(op_attrs(&Op::Attention { causal: true, scale: Some(0.125) }), "causal scale=0.125");
    assert_eq!(op_attrs(&Op::Attention { causal: false, scale: Some(0.125) }), "scale=0.125");
    assert_eq!(op_attrs(&Op::Attention { causal: false, scale: None }), "");
    assert_eq!(op_attrs(&Op::MatMul), "");
    let a = Conv2dAttrs { stride: [1, 1], padding: [0; 4], dilation: [2, 2], groups: 4, channels_last: false };
    assert_eq!(op_attrs(&Op::Conv2d(a)), "stride=[1, 1] pad=[0, 0, 0, 0] dilation=[2, 2] groups=4");
    let p = Pool2dAttrs { kind: PoolKind::Avg { count_include_pad: true }, kernel: [2, 2], stride: [2, 2], padding: [0; 4], dilation: [1, 1], ceil_mode: true };
    assert_eq!(op_attrs(&Op::Pool2d(p)), "kernel=[2, 2] stride=[2, 2] pad=[0, 0, 0, 0] ceil_mode count_include_pad");
}

#[test]
fn histogram_counts_ops() {
    let h = op_histogram(&stem());
    assert_eq!(
        h,
        vec![
            ("const".to_string(), 3),
            ("conv2d".to_string(), 1),
            ("input".to_string(), 1),
            ("max_pool2d".to_string(), 1),
            ("mul".to_string(), 1),
            ("reduce_sum".to_string(), 1),
            ("relu".to_string(), 1),
        ]
    );
    assert!(op_histogram(&Graph::new()).is_empty());
}
