//! Structural tests of the scheduler: how many steps known patterns become, of which kind,
//! and the shape of the kernels (numerics are checked against the interpreter in
//! kiln-cpu/tests/schedule_diff.rs).

use kiln_ir::{
    BinaryOp, Conv2dAttrs, DType, Dim, Graph, HostTensor, NodeId, Op, ReduceOp, Shape, SliceAxis,
    TensorType, UnaryOp, decompose,
};
use kiln_sched::{CPU_EXTERN_DTYPES, Expr, ExternOp, GPU_EXTERN_DTYPES, ScheduleOptions, Stage, StepKind, StepKindName, schedule};

const FUSE: ScheduleOptions = ScheduleOptions {
    fuse: true,
    extern_dtypes: CPU_EXTERN_DTYPES,
    row_epilogues: true,
};
const NOFUSE: ScheduleOptions = ScheduleOptions {
    fuse: false,
    extern_dtypes: CPU_EXTERN_DTYPES,
    row_epilogues: true,
};

fn input(g: &mut Graph, name: &str, shape: &[usize]) -> NodeId {
    g.input(name, TensorType::new(DType::F32, Shape::fixed(shape)))
}

fn scalar(g: &mut Graph, v: f32) -> NodeId {
    g.constant(HostTensor::scalar(v))
}

fn bin(g: &mut Graph, op: BinaryOp, a: NodeId, b: NodeId) -> NodeId {
    g.add(Op::Binary(op), &[a, b]).unwrap()
}

fn kinds(g: &Graph, o: &ScheduleOptions) -> Vec<StepKindName> {
    let (p, r) = schedule(g, o).unwrap();
    assert_eq!(p.steps.len(), r.steps.len());
    r.steps.iter().map(|s| s.kind).collect()
}

#[test]
fn pointwise_chain_is_one_flat_kernel() {
    let mut g = Graph::new();
    let x = input(&mut g, "x", &[4, 5, 6]);
    let one = scalar(&mut g, 1.0);
    let half = scalar(&mut g, 0.5);
    let a = bin(&mut g, BinaryOp::Add, x, one);
    let r = g.add(Op::Unary(UnaryOp::Relu), &[a]).unwrap();
    let y = bin(&mut g, BinaryOp::Mul, r, half);
    g.output(y);
    let (p, rep) = schedule(&g, &FUSE).unwrap();
    assert_eq!(p.steps.len(), 1, "{rep}");
    let StepKind::Kernel { kernel, args } = &p.steps[0].kind else {
        panic!("not a kernel")
    };
    // One flat loop, scalars as literals (two args: x and y).
    assert_eq!(kernel.outer.len(), 1);
    assert_eq!(kernel.outer[0].extent, 120);
    assert_eq!(args.len(), 2);
    assert!(
        kernel
            .exprs
            .iter()
            .any(|e| matches!(e.expr, Expr::Const(_)))
    );
    assert_eq!(rep.steps[0].kind, StepKindName::Pointwise);
    // Without fusion: one step per compute op.
    assert_eq!(kinds(&g, &NOFUSE).len(), 3);
    assert!(rep.to_string().contains("graph output"));
}

fn softmax_graph(shape: &[usize], axis: usize) -> Graph {
    let mut g = Graph::new();
    let x = input(&mut g, "x", shape);
    let s = g.add(Op::Softmax { axis }, &[x]).unwrap();
    g.output(s);
    decompose(&g).unwrap()
}

#[test]
fn decomposed_softmax_is_one_kernel() {
    let g = softmax_graph(&[8, 16], 1);
    let (p, rep) = schedule(&g, &FUSE).unwrap();
    assert_eq!(p.steps.len(), 1, "{rep}");
    let k = p.kernels().next().unwrap();
    let reduces = k
        .stages
        .iter()
        .filter(|s| matches!(s, Stage::Reduce { .. }))
        .count();
    let stores = k
        .stages
        .iter()
        .filter(|s| matches!(s, Stage::Store { .. }))
        .count();
    assert_eq!((reduces, stores), (2, 1));
    assert_eq!(k.outer.len(), 1);
    assert_eq!(k.outer[0].extent, 8);
    // Softmax over a middle axis and over attention-like 4-D scores.
    assert_eq!(
        schedule(&softmax_graph(&[3, 5, 7], 1), &FUSE)
            .unwrap()
            .0
            .steps
            .len(),
        1
    );
    assert_eq!(
        schedule(&softmax_graph(&[2, 3, 4, 4], 3), &FUSE)
            .unwrap()
            .0
            .steps
            .len(),
        1
    );
    let nofuse = schedule(&g, &NOFUSE).unwrap().1;
    assert_eq!(nofuse.steps.len(), nofuse.compute_ops);
}

#[test]
fn decomposed_layer_norm_is_at_most_two_kernels() {
    let mut g = Graph::new();
    let x = input(&mut g, "x", &[2, 3, 8]);
    let w = input(&mut g, "w", &[8]);
    let b = input(&mut g, "b", &[8]);
    let y = g
        .add(Op::LayerNorm { axis: 2, eps: 1e-5 }, &[x, w, b])
        .unwrap();
    g.output(y);
    let g = decompose(&g).unwrap();
    let (p, rep) = schedule(&g, &FUSE).unwrap();
    assert!(p.steps.len() <= 2, "{rep}");
    assert_eq!(p.steps.len(), 1, "{rep}");
}

#[test]
fn conv_bias_relu_residual_is_one_extern_with_epilogue() {
    let mut g = Graph::new();
    let x = input(&mut g, "x", &[1, 3, 6, 6]);
    let skip = input(&mut g, "skip", &[1, 4, 6, 6]);
    let w = g.constant(
        HostTensor::from_vec(
            (0..108).map(|i| i as f32 * 0.01).collect::<Vec<f32>>(),
            &[4, 3, 3, 3],
        )
        .unwrap(),
    );
    let bias =
        g.constant(HostTensor::from_vec(vec![0.1f32, -0.2, 0.3, 0.0], &[1, 4, 1, 1]).unwrap());
    let attrs = Conv2dAttrs {
        stride: [1, 1],
        padding: [1, 1, 1, 1],
        dilation: [1, 1],
        groups: 1, channels_last: false,
    };
    let c = g.add(Op::Conv2d(attrs), &[x, w]).unwrap();
    let cb = bin(&mut g, BinaryOp::Add, c, bias);
    let r = g.add(Op::Unary(UnaryOp::Relu), &[cb]).unwrap();
    let y = bin(&mut g, BinaryOp::Add, r, skip);
    g.output(y);
    let (p, rep) = schedule(&g, &FUSE).unwrap();
    assert_eq!(p.steps.len(), 1, "{rep}");
    let StepKind::Extern {
        epilogue: Some(e),
        out_shape,
        ..
    } = &p.steps[0].kind
    else {
        panic!("{rep}")
    };
    assert_eq!(out_shape, &vec![1, 4, 6, 6]);
    assert_eq!(e.kernel.outer[0].extent, 4, "first outer loop = rows (N*O)");
    assert_eq!(rep.steps[0].kind, StepKindName::ExternEpilogue);
    // Without externs the conv is an eval step and the rest one kernel.
    let k = kinds(
        &g,
        &ScheduleOptions {
            extern_dtypes: &[],
            ..FUSE
        },
    );
    assert_eq!(k, vec![StepKindName::Eval, StepKindName::Pointwise]);
}

#[test]
fn matmul_bias_gelu_is_one_extern() {
    let mut g = Graph::new();
    let a = input(&mut g, "a", &[2, 5, 8]);
    let w = input(&mut g, "w", &[8, 6]);
    let b = input(&mut g, "b", &[6]);
    let m = g.add(Op::MatMul, &[a, w]).unwrap();
    let mb = bin(&mut g, BinaryOp::Add, m, b);
    let y = g.add(Op::Gelu { tanh_approx: true }, &[mb]).unwrap();
    g.output(y);
    let g = decompose(&g).unwrap();
    let (p, rep) = schedule(&g, &FUSE).unwrap();
    assert_eq!(p.steps.len(), 1, "{rep}");
    let StepKind::Extern {
        epilogue: Some(e), ..
    } = &p.steps[0].kind
    else {
        panic!("{rep}")
    };
    assert_eq!(e.kernel.outer[0].extent, 10);
}

#[test]
fn view_chains_create_no_copy() {
    let mut g = Graph::new();
    let x = input(&mut g, "x", &[2, 3, 4]);
    let p = g.add(Op::Permute(vec![2, 0, 1]), &[x]).unwrap();
    let r = g.add(Op::Reshape(Shape::fixed(&[4, 6])), &[p]).unwrap();
    let s = g
        .add(
            Op::Slice(vec![
                SliceAxis {
                    start: 0,
                    end: 4,
                    step: 2,
                },
                SliceAxis::FULL,
            ]),
            &[r],
        )
        .unwrap();
    let e = g.add(Op::Unary(UnaryOp::Exp), &[s]).unwrap();
    g.output(e);
    assert_eq!(kinds(&g, &FUSE), vec![StepKindName::Pointwise]);
    // A view that is an output is copied.
    let mut g2 = Graph::new();
    let x = input(&mut g2, "x", &[2, 3]);
    let t = g2.add(Op::Permute(vec![1, 0]), &[x]).unwrap();
    g2.output(t);
    g2.output(x);
    assert_eq!(
        kinds(&g2, &FUSE),
        vec![StepKindName::Copy, StepKindName::Copy]
    );
}

#[test]
fn siblings_fuse_horizontally_and_multi_use_is_materialised_when_costly() {
    let mut g = Graph::new();
    let x = input(&mut g, "x", &[16]);
    let a = g.add(Op::Unary(UnaryOp::Exp), &[x]).unwrap();
    let b = g.add(Op::Unary(UnaryOp::Sin), &[x]).unwrap();
    g.output(a);
    g.output(b);
    let (p, _) = schedule(&g, &FUSE).unwrap();
    assert_eq!(p.steps.len(), 1);
    let k = p.kernels().next().unwrap();
    assert_eq!(k.stages.len(), 2);

    // sum over rows and max over rows of one input: one kernel with two reductions.
    let mut g = Graph::new();
    let x = input(&mut g, "x", &[4, 9]);
    let s = g
        .add(
            Op::Reduce {
                op: ReduceOp::Sum,
                axes: vec![1],
                keep_dims: false,
            },
            &[x],
        )
        .unwrap();
    let m = g
        .add(
            Op::Reduce {
                op: ReduceOp::Max,
                axes: vec![1],
                keep_dims: false,
            },
            &[x],
        )
        .unwrap();
    g.output(s);
    g.output(m);
    assert_eq!(kinds(&g, &FUSE), vec![StepKindName::Reduction]);

    // An expensive value with two consumers over different domains is stored once.
    let mut g = Graph::new();
    let x = input(&mut g, "x", &[4, 9]);
    let mut v = x;
    for u in [
        UnaryOp::Exp,
        UnaryOp::Sin,
        UnaryOp::Cos,
        UnaryOp::Tanh,
        UnaryOp::Sigmoid,
    ] {
        v = g.add(Op::Unary(u), &[v]).unwrap();
    }
    let s0 = g
        .add(
            Op::Reduce {
                op: ReduceOp::Sum,
                axes: vec![0],
                keep_dims: false,
            },
            &[v],
        )
        .unwrap();
    let s1 = g
        .add(
            Op::Reduce {
                op: ReduceOp::Sum,
                axes: vec![1],
                keep_dims: false,
            },
            &[v],
        )
        .unwrap();
    g.output(s0);
    g.output(s1);
    let (p, rep) = schedule(&g, &FUSE).unwrap();
    // Stored by the kernel of the first reduction (a fused producer), read by the second.
    assert_eq!(p.steps.len(), 2, "{rep}");
    assert!(rep.to_string().contains("2 consumers"), "{rep}");
}

#[test]
fn other_ops_are_eval_steps_on_strided_views() {
    let mut g = Graph::new();
    let x = input(&mut g, "x", &[3, 4]);
    let idx = g.constant(HostTensor::from_vec(vec![2i64, 0], &[2]).unwrap());
    let t = g.add(Op::Permute(vec![1, 0]), &[x]).unwrap();
    let ga = g.add(Op::Gather { axis: 0 }, &[t, idx]).unwrap();
    let y = g.add(Op::Unary(UnaryOp::Neg), &[ga]).unwrap();
    g.output(y);
    let (p, rep) = schedule(&g, &FUSE).unwrap();
    assert_eq!(
        kinds(&g, &FUSE),
        vec![StepKindName::Eval, StepKindName::Pointwise],
        "{rep}"
    );
    let StepKind::Eval { inputs, .. } = &p.steps[0].kind else {
        panic!()
    };
    assert_eq!(inputs[0].shape, vec![4, 3]);
    assert_eq!(inputs[0].strides, vec![1, 4]);
    assert!(rep.to_string().contains("op not generated: gather"));

    // Integer division by a tensor is an eval; by a nonzero constant it fuses.
    let mut g = Graph::new();
    let a = g.input("a", TensorType::new(DType::I32, Shape::fixed(&[5])));
    let b = g.input("b", TensorType::new(DType::I32, Shape::fixed(&[5])));
    let d = bin(&mut g, BinaryOp::Div, a, b);
    let three = g.constant(HostTensor::scalar(3i32));
    let e = bin(&mut g, BinaryOp::Div, d, three);
    g.output(e);
    assert_eq!(
        kinds(&g, &FUSE),
        vec![StepKindName::Eval, StepKindName::Pointwise]
    );
}

#[test]
fn symbolic_shapes_are_refused() {
    let mut g = Graph::new();
    let x = g.input(
        "x",
        TensorType::new(DType::F32, Shape(vec![Dim::sym("n"), Dim::Fixed(3)])),
    );
    let y = g.add(Op::Unary(UnaryOp::Exp), &[x]).unwrap();
    g.output(y);
    let e = schedule(&g, &FUSE).unwrap_err();
    assert!(e.to_string().contains("bind the dims first"), "{e}");
}

#[test]
fn names_are_unique_c_identifiers() {
    let g = softmax_graph(&[4, 4], 1);
    let (p, _) = schedule(&g, &NOFUSE).unwrap();
    let names: Vec<&str> = p.kernels().map(|k| k.name.as_str()).collect();
    let mut dedup = names.clone();
    dedup.sort();
    dedup.dedup();
    assert_eq!(names.len(), dedup.len());
    for n in names {
        assert!(
            n.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                && !n.starts_with(|c: char| c.is_ascii_digit())
        );
    }
}

#[test]
fn reads_at_other_indices_fall_back_to_stored_values() {
    // Row sums read transposed cannot be a local of the consumer's kernel.
    let mut g = Graph::new();
    let x = input(&mut g, "x", &[4, 4]);
    let r = g
        .add(
            Op::Reduce {
                op: ReduceOp::Sum,
                axes: vec![1],
                keep_dims: true,
            },
            &[x],
        )
        .unwrap();
    let rt = g.add(Op::Permute(vec![1, 0]), &[r]).unwrap();
    let e = g.add(Op::Unary(UnaryOp::Exp), &[x]).unwrap();
    let z = bin(&mut g, BinaryOp::Add, e, rt);
    g.output(z);
    assert_eq!(
        kinds(&g, &FUSE),
        vec![StepKindName::Reduction, StepKindName::Pointwise]
    );

    // A matmul output read transposed cannot be an epilogue of that matmul.
    let mut g = Graph::new();
    let a = input(&mut g, "a", &[5, 5]);
    let m = g.add(Op::MatMul, &[a, a]).unwrap();
    let mt = g.add(Op::Permute(vec![1, 0]), &[m]).unwrap();
    let y = bin(&mut g, BinaryOp::Add, m, mt);
    g.output(y);
    assert_eq!(
        kinds(&g, &FUSE),
        vec![StepKindName::Extern, StepKindName::Pointwise]
    );
}

/// A resnet-like stack of conv + bias + relu (+ residual) blocks, ~500 nodes.
fn conv_stack(blocks: usize) -> Graph {
    let mut g = Graph::new();
    let mut x = input(&mut g, "x", &[1, 8, 14, 14]);
    let attrs = Conv2dAttrs {
        stride: [1, 1],
        padding: [1, 1, 1, 1],
        dilation: [1, 1],
        groups: 1, channels_last: false,
    };
    for b in 0..blocks {
        let skip = x;
        for _ in 0..2 {
            let w = g.constant(
                HostTensor::from_vec(vec![0.01f32 * b as f32; 8 * 8 * 9], &[8, 8, 3, 3]).unwrap(),
            );
            let bias = g.constant(
                HostTensor::from_vec(
                    (0..8).map(|i| i as f32).collect::<Vec<f32>>(),
                    &[1, 8, 1, 1],
                )
                .unwrap(),
            );
            let c = g.add(Op::Conv2d(attrs), &[x, w]).unwrap();
            let cb = bin(&mut g, BinaryOp::Add, c, bias);
            x = g.add(Op::Unary(UnaryOp::Relu), &[cb]).unwrap();
        }
        x = bin(&mut g, BinaryOp::Add, x, skip);
    }
    let m = g
        .add(
            Op::Reduce {
                op: ReduceOp::Mean,
                axes: vec![2, 3],
                keep_dims: false,
            },
            &[x],
        )
        .unwrap();
    g.output(m);
    g
}

#[test]
fn resnet_like_graph_schedules_fast_into_extern_steps() {
    let g = conv_stack(50);
    assert!(g.nodes.len() >= 500);
    let t = std::time::Instant::now();
    let (p, rep) = schedule(&g, &FUSE).unwrap();
    let took = t.elapsed();
    // Every conv is one extern step (bias, relu and the residual add in its epilogue); the
    // last conv's bias/relu/add are only read by the mean over [H, W], its output rows'
    // columns, so the mean is that conv's row epilogue: 100 steps, every one a conv.
    assert_eq!(p.steps.len(), 100, "{rep}");
    assert_eq!(rep.count(StepKindName::ExternEpilogue), 100, "{rep}");
    // Generous for debug builds on a shared machine; release takes a few milliseconds.
    assert!(took.as_millis() < 500, "scheduling took {took:?}");
    let k = p.kernels().last().unwrap();
    // One outer loop over the conv's rows (channels); the mean over [H, W] is one inner loop.
    assert_eq!(k.outer.len(), 1, "{rep}");
    let Stage::Reduce { loops, .. } = &k.stages[0] else {
        panic!("{rep}")
    };
    assert_eq!(loops.len(), 1);
    // Without row epilogues (the CUDA runtime) the mean is a kernel of its own, with the last
    // conv's bias/relu/add fused into it (the conv output is read once either way).
    let (p, rep) = schedule(&g, &ScheduleOptions { row_epilogues: false, ..FUSE }).unwrap();
    assert_eq!(p.steps.len(), 101, "{rep}");
    assert_eq!(rep.count(StepKindName::ExternEpilogue), 99, "{rep}");
    assert_eq!(rep.count(StepKindName::Extern), 1, "{rep}");
    assert_eq!(rep.count(StepKindName::Reduction), 1, "{rep}");
}

/// The ops of a program's extern steps, and how many eval steps it has.
fn externs_and_evals(g: &Graph, o: &ScheduleOptions) -> (Vec<ExternOp>, usize) {
    let (p, _) = schedule(g, o).unwrap();
    let externs = p
        .steps
        .iter()
        .filter_map(|s| match &s.kind {
            StepKind::Extern { op, .. } => Some(op.clone()),
            _ => None,
        })
        .collect();
    let evals = p.steps.iter().filter(|s| matches!(s.kind, StepKind::Eval { .. })).count();
    (externs, evals)
}

#[test]
fn half_matmul_and_conv_are_externs_only_where_the_extern_dtypes_allow() {
    let attrs = Conv2dAttrs {
        stride: [1, 1],
        padding: [1, 1, 1, 1],
        dilation: [1, 1],
        groups: 1, channels_last: false,
    };
    let gpu = ScheduleOptions {
        extern_dtypes: GPU_EXTERN_DTYPES,
        ..FUSE
    };
    for dt in [DType::BF16, DType::F16] {
        let mut g = Graph::new();
        let t = |s: &[usize]| TensorType::new(dt, Shape::fixed(s));
        let a = g.input("a", t(&[2, 3, 4]));
        let b = g.input("b", t(&[4, 5]));
        let x = g.input("x", t(&[1, 2, 6, 6]));
        let w = g.input("w", t(&[4, 2, 3, 3]));
        let bias = g.input("bias", t(&[4]));
        let mm = g.add(Op::MatMul, &[a, b]).unwrap();
        let r = g.add(Op::Unary(UnaryOp::Relu), &[mm]).unwrap();
        let c = g.add(Op::Conv2d(attrs), &[x, w, bias]).unwrap();
        g.output(r);
        g.output(c);
        // The default (the CPU's f32-only externs): both are evaluated.
        assert_eq!(ScheduleOptions::default().extern_dtypes, CPU_EXTERN_DTYPES);
        assert_eq!(externs_and_evals(&g, &FUSE), (vec![], 2), "{dt}");
        // The GPU's: both are library calls, the relu the matmul's epilogue.
        let (ops, evals) = externs_and_evals(&g, &gpu);
        assert_eq!((ops, evals), (vec![ExternOp::MatMul, ExternOp::Conv2d(attrs)], 0), "{dt}");
        // No extern dtypes: externs off.
        let off = ScheduleOptions { extern_dtypes: &[], ..gpu };
        assert_eq!(externs_and_evals(&g, &off), (vec![], 2), "{dt}");
    }
    // Mixed dtypes are never an extern (the library calls take one type).
    let mut g = Graph::new();
    let a = g.input("a", TensorType::new(DType::BF16, Shape::fixed(&[3, 4])));
    let b = g.input("b", TensorType::new(DType::BF16, Shape::fixed(&[4, 5])));
    let b32 = g.add(Op::Cast(DType::F32), &[b]).unwrap();
    let a32 = g.add(Op::Cast(DType::F32), &[a]).unwrap();
    let mm = g.add(Op::MatMul, &[a32, b32]).unwrap();
    g.output(mm);
    assert_eq!(externs_and_evals(&g, &gpu).0, vec![ExternOp::MatMul], "f32 after the casts");
}
