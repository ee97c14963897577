//! BatchNorm folding into a per-channel multiply-add (and a conv's bias into its shift), with
//! random parameters, against the reference interpreter on the unfolded graph; and the cases
//! that must not fold.

mod common;

use common::{Rng, count, max_rel_err, rand_f32};
use kiln_ir::{
    BinaryOp, Conv2dAttrs, DType, Graph, HostTensor, NodeId, Op, Shape, TensorType, UnaryOp, verify,
};
use kiln_opt::Pass;
use kiln_opt::passes::{BnFold, ChannelsLast, Dce};

/// Adds BatchNorm params `[c]` (scale, bias, mean, var > 0) as constants and the BN node.
fn bn(g: &mut Graph, rng: &mut Rng, x: NodeId, c: usize) -> NodeId {
    let scale = g.constant(rand_f32(rng, &[c], -2.0, 2.0));
    let bias = g.constant(rand_f32(rng, &[c], -1.0, 1.0));
    let mean = g.constant(rand_f32(rng, &[c], -0.5, 0.5));
    let var = g.constant(rand_f32(rng, &[c], 0.1, 3.0));
    g.add(Op::BatchNorm { eps: 1e-5 }, &[x, scale, bias, mean, var])
        .unwrap()
}

fn fold(g: &Graph) -> Graph {
    fold_with(g, BnFold::default())
}

fn fold_with(g: &Graph, pass: BnFold) -> Graph {
    let out = Dce.run(&pass.run(g).unwrap()).unwrap();
    verify(&out).unwrap();
    out
}

fn conv_bn(seed: u64, groups: usize, with_bias: bool) -> (Graph, Vec<HostTensor>) {
    let mut rng = Rng(seed);
    let (n, c, o, h) = (2, 4, 6, 7);
    let mut g = Graph::new();
    let x = g.input(
        "x",
        TensorType::new(DType::F32, Shape::fixed(&[n, c, h, h])),
    );
    let w = g.constant(rand_f32(&mut rng, &[o, c / groups, 3, 3], -1.0, 1.0));
    let mut args = vec![x, w];
    if with_bias {
        args.push(g.constant(rand_f32(&mut rng, &[o], -1.0, 1.0)));
    }
    let attrs = Conv2dAttrs {
        stride: [2, 1],
        padding: [1, 0, 1, 2],
        dilation: [1, 2],
        groups, channels_last: false,
    };
    let y = g.add(Op::Conv2d(attrs), &args).unwrap();
    let z = bn(&mut g, &mut rng, y, o);
    let r = g.add(Op::Unary(UnaryOp::Relu), &[z]).unwrap();
    g.output(r);
    (g, vec![rand_f32(&mut rng, &[n, c, h, h], -1.0, 1.0)])
}

#[test]
fn conv_bn_folds_into_a_multiply_add_and_drops_the_conv_bias() {
    for (seed, groups, with_bias) in [(1, 1, false), (2, 1, true), (3, 2, true), (4, 2, false)] {
        let (g, inputs) = conv_bn(seed, groups, with_bias);
        let out = fold(&g);
        assert_eq!(count(&out, "batch_norm"), 0, "{out}");
        assert_eq!(count(&out, "conv2d"), 1);
        assert_eq!((count(&out, "mul"), count(&out, "add")), (1, 1), "{out}");
        let conv = out.nodes.iter().find(|n| n.op.name() == "conv2d").unwrap();
        assert_eq!(conv.inputs.len(), 2, "the bias moved into the shift: {out}");
        assert_eq!(out.consts.len(), 3, "the weight, the scale and the shift remain");
        // The weight is the source's own tensor, not a rescaled copy.
        let w_src = g.consts.iter().find(|t| t.shape().len() == 4).unwrap();
        assert!(out.consts.iter().any(|t| std::sync::Arc::ptr_eq(t, w_src)), "weight copied");
        let err = max_rel_err(&g, &out, &inputs);
        assert!(err < 1e-5, "seed {seed} groups {groups}: max rel err {err}");
    }
}

#[test]
fn into_weights_conv_bn_leaves_only_a_conv_with_bias() {
    for (seed, groups, with_bias) in [(21, 1, false), (22, 1, true), (23, 2, true), (24, 2, false)] {
        let (g, inputs) = conv_bn(seed, groups, with_bias);
        let out = fold_with(&g, BnFold { into_weights: true, channels_last: false });
        assert_eq!(count(&out, "batch_norm") + count(&out, "mul") + count(&out, "add"), 0, "{out}");
        let conv = out.nodes.iter().find(|n| n.op.name() == "conv2d").unwrap();
        assert_eq!(conv.inputs.len(), 3, "the shift is the conv's bias: {out}");
        assert_eq!(out.consts.len(), 2, "a rescaled weight and the bias");
        let err = max_rel_err(&g, &out, &inputs);
        assert!(err < 1e-5, "seed {seed} groups {groups} bias {with_bias}: max rel err {err}");
    }
    // A conv read elsewhere too keeps its weight: the BatchNorm becomes the multiply-add.
    let (mut g, inputs) = conv_bn(25, 1, true);
    let conv = NodeId(g.nodes.iter().position(|n| n.op.name() == "conv2d").unwrap() as u32);
    g.output(conv);
    let out = fold_with(&g, BnFold { into_weights: true, channels_last: false });
    assert_eq!((count(&out, "batch_norm"), count(&out, "mul"), count(&out, "add")), (0, 1, 1), "{out}");
    let err = max_rel_err(&g, &out, &inputs);
    assert!(err < 1e-5, "max rel err {err}");
}

#[test]
fn f64_conv_bn_is_folded_in_f64() {
    let mut rng = Rng(9);
    let mut g = Graph::new();
    let x = g.input(
        "x",
        TensorType::new(DType::F64, Shape::fixed(&[1, 2, 5, 5])),
    );
    let w64 = |rng: &mut Rng, shape: &[usize]| {
        let n = shape.iter().product();
        HostTensor::from_vec(
            (0..n).map(|_| rng.uniform(-1.0, 1.0)).collect::<Vec<f64>>(),
            shape,
        )
        .unwrap()
    };
    let w = g.constant(w64(&mut rng, &[3, 2, 3, 3]));
    let y = g
        .add(
            Op::Conv2d(Conv2dAttrs {
                stride: [1, 1],
                padding: [1; 4],
                dilation: [1, 1],
                groups: 1, channels_last: false,
            }),
            &[x, w],
        )
        .unwrap();
    let p: Vec<NodeId> = (0..4)
        .map(|i| {
            let t = w64(&mut rng, &[3]);
            let t = if i == 3 {
                HostTensor::from_vec(
                    t.to_f64_vec()
                        .iter()
                        .map(|v| v.abs() + 0.5)
                        .collect::<Vec<f64>>(),
                    &[3],
                )
                .unwrap()
            } else {
                t
            };
            g.constant(t)
        })
        .collect();
    let z = g
        .add(Op::BatchNorm { eps: 1e-3 }, &[y, p[0], p[1], p[2], p[3]])
        .unwrap();
    g.output(z);
    let out = fold(&g);
    assert_eq!(count(&out, "batch_norm"), 0);
    let xs = w64(&mut rng, &[1, 2, 5, 5]);
    let err = max_rel_err(&g, &out, &[xs]);
    assert!(err < 1e-12, "max rel err {err}");
}

#[test]
fn matmul_bn_folds_with_and_without_bias() {
    for (seed, bias) in [(11u64, None), (12, Some(false)), (13, Some(true))] {
        let mut rng = Rng(seed);
        let (n, k, c) = (3, 5, 4);
        let mut g = Graph::new();
        let x = g.input("x", TensorType::new(DType::F32, Shape::fixed(&[n, k])));
        let w = g.constant(rand_f32(&mut rng, &[k, c], -1.0, 1.0));
        let mut y = g.add(Op::MatMul, &[x, w]).unwrap();
        if let Some(first) = bias {
            let shape: &[usize] = if first { &[1, c] } else { &[c] };
            let b = g.constant(rand_f32(&mut rng, shape, -1.0, 1.0));
            let args = if first { [b, y] } else { [y, b] };
            y = g.add(Op::Binary(BinaryOp::Add), &args).unwrap();
        }
        let z = bn(&mut g, &mut rng, y, c);
        g.output(z);
        let out = fold(&g);
        assert_eq!(count(&out, "batch_norm"), 0, "{out}");
        assert_eq!(count(&out, "matmul"), 1);
        assert_eq!(count(&out, "mul"), 1);
        assert_eq!(count(&out, "add"), 1 + bias.is_some() as usize);
        let err = max_rel_err(&g, &out, &[rand_f32(&mut rng, &[n, k], -1.0, 1.0)]);
        assert!(err < 1e-5, "bias {bias:?}: max rel err {err}");
    }
}

#[test]
fn conv_bias_stays_when_the_conv_output_is_used_elsewhere() {
    let (mut g, inputs) = conv_bn(5, 1, true);
    // The conv output also feeds a second output: its bias must stay in the conv.
    let conv = NodeId(
        g.nodes
            .iter()
            .position(|n| n.op.name() == "conv2d")
            .unwrap() as u32,
    );
    g.output(conv);
    let out = fold(&g);
    assert_eq!(count(&out, "batch_norm"), 0);
    assert_eq!(count(&out, "conv2d"), 1);
    let c = out.nodes.iter().find(|n| n.op.name() == "conv2d").unwrap();
    assert_eq!(c.inputs.len(), 3, "{out}");
    let err = max_rel_err(&g, &out, &inputs);
    assert!(err < 1e-5, "max rel err {err}");

    // Params that are not constants: no folding.
    let mut rng = Rng(6);
    let mut g = Graph::new();
    let x = g.input(
        "x",
        TensorType::new(DType::F32, Shape::fixed(&[1, 2, 4, 4])),
    );
    let s = g.input("s", TensorType::new(DType::F32, Shape::fixed(&[3])));
    let w = g.constant(rand_f32(&mut rng, &[3, 2, 1, 1], -1.0, 1.0));
    let y = g
        .add(
            Op::Conv2d(Conv2dAttrs {
                stride: [1, 1],
                padding: [0; 4],
                dilation: [1, 1],
                groups: 1, channels_last: false,
            }),
            &[x, w],
        )
        .unwrap();
    let c = g.constant(rand_f32(&mut rng, &[3], 0.5, 1.0));
    let z = g
        .add(Op::BatchNorm { eps: 1e-5 }, &[y, s, c, c, c])
        .unwrap();
    g.output(z);
    assert_eq!(count(&fold(&g), "batch_norm"), 1);

    // A conv whose weight is a graph input: the BatchNorm still becomes a multiply-add.
    let mut g = Graph::new();
    let x = g.input(
        "x",
        TensorType::new(DType::F32, Shape::fixed(&[1, 2, 4, 4])),
    );
    let w = g.input(
        "w",
        TensorType::new(DType::F32, Shape::fixed(&[3, 2, 1, 1])),
    );
    let y = g
        .add(
            Op::Conv2d(Conv2dAttrs {
                stride: [1, 1],
                padding: [0; 4],
                dilation: [1, 1],
                groups: 1, channels_last: false,
            }),
            &[x, w],
        )
        .unwrap();
    let z = bn(&mut g, &mut rng, y, 3);
    g.output(z);
    let out = fold(&g);
    assert_eq!(count(&out, "batch_norm"), 0);
    let ins = [rand_f32(&mut rng, &[1, 2, 4, 4], -1.0, 1.0), rand_f32(&mut rng, &[3, 2, 1, 1], -1.0, 1.0)];
    let err = max_rel_err(&g, &out, &ins);
    assert!(err < 1e-5, "max rel err {err}");
}

#[test]
fn scale_and_shift_are_computed_in_f64_per_channel_bit_exactly() {
    // Params very different per channel, so a value of the wrong channel shows in the bits;
    // a grouped conv with a bias, which moves into the shift.
    let mut rng = Rng(21);
    let (n, c, o, groups, h) = (1, 6, 9, 3, 5);
    let mut g = Graph::new();
    let x = g.input("x", TensorType::new(DType::F32, Shape::fixed(&[n, c, h, h])));
    let w = g.constant(rand_f32(&mut rng, &[o, c / groups, 3, 3], -1.0, 1.0));
    let b: Vec<f32> = (0..o).map(|k| 0.5 - 0.125 * k as f32).collect();
    let bid = g.constant(HostTensor::from_vec(b.clone(), &[o]).unwrap());
    let attrs = Conv2dAttrs { stride: [1, 1], padding: [1; 4], dilation: [1, 1], groups, channels_last: false };
    let y = g.add(Op::Conv2d(attrs), &[x, w, bid]).unwrap();
    let scale: Vec<f32> = (0..o).map(|k| (k as f32 + 1.0) * if k % 2 == 0 { 1.0 } else { -0.75 }).collect();
    let bias: Vec<f32> = (0..o).map(|k| 0.25 * k as f32 - 0.5).collect();
    let mean: Vec<f32> = (0..o).map(|k| 0.1 * k as f32).collect();
    let var: Vec<f32> = (0..o).map(|k| 0.5 + 0.3 * k as f32).collect();
    let eps = 1e-5;
    let p: Vec<NodeId> = [&scale, &bias, &mean, &var]
        .into_iter()
        .map(|v| g.constant(HostTensor::from_vec(v.clone(), &[o]).unwrap()))
        .collect();
    let z = g.add(Op::BatchNorm { eps }, &[y, p[0], p[1], p[2], p[3]]).unwrap();
    let r = g.add(Op::Unary(UnaryOp::Relu), &[z]).unwrap();
    g.output(r);
    let out = fold(&g);
    assert_eq!(count(&out, "batch_norm"), 0, "{out}");
    let consts: Vec<Vec<f32>> = out
        .consts
        .iter()
        .filter(|t| t.shape() == [o, 1, 1])
        .map(|t| t.to_vec::<f32>().unwrap())
        .collect();
    assert_eq!(consts.len(), 2, "a scale and a shift of shape [C, 1, 1]: {out}");
    for k in 0..o {
        let s = scale[k] as f64 / (var[k] as f64 + eps).sqrt();
        let t = bias[k] as f64 - mean[k] as f64 * s + b[k] as f64 * s;
        assert!(consts.iter().any(|v| v[k].to_bits() == (s as f32).to_bits()), "scale of channel {k}");
        assert!(consts.iter().any(|v| v[k].to_bits() == (t as f32).to_bits()), "shift of channel {k}");
    }
    let err = max_rel_err(&g, &out, &[rand_f32(&mut rng, &[n, c, h, h], -1.0, 1.0)]);
    assert!(err < 1e-5, "max rel err {err}");
}

#[test]
fn rank_2_batch_norm_scales_by_a_vector_and_rank_3_by_a_column() {
    for dims in [vec![4usize, 5], vec![2, 5, 7]] {
        let mut rng = Rng(31);
        let mut g = Graph::new();
        let x = g.input("x", TensorType::new(DType::F32, Shape::fixed(&dims)));
        let z = bn(&mut g, &mut rng, x, 5);
        g.output(z);
        let out = fold(&g);
        assert_eq!(count(&out, "batch_norm"), 0, "{out}");
        let want: &[usize] = if dims.len() == 2 { &[5] } else { &[5, 1] };
        assert_eq!(out.consts.iter().filter(|t| t.shape() == want).count(), 2, "scale and shift {want:?}: {out}");
        let err = max_rel_err(&g, &out, &[rand_f32(&mut rng, &dims, -1.0, 1.0)]);
        assert!(err < 1e-5, "{dims:?}: max rel err {err}");
    }
}

/// The constant a conv's weight input reads, through at most one view: (the constant, the view's
/// permutation if any).
fn weight_of(g: &Graph) -> (std::sync::Arc<HostTensor>, Option<Vec<usize>>) {
    let conv = g.nodes.iter().find(|n| n.op.name() == "conv2d").unwrap();
    let (c, perm) = match &g.node(conv.inputs[1]).op {
        Op::Permute(p) => (g.node(conv.inputs[1]).inputs[0], Some(p.clone())),
        _ => (conv.inputs[1], None),
    };
    let Op::Constant(id) = g.node(c).op else { panic!("weight is not a constant: {g}") };
    (g.consts[id.0 as usize].clone(), perm)
}

#[test]
fn into_weights_channels_last_writes_each_weight_once_nhwc_and_shares_it_across_compiles() {
    for (seed, groups, with_bias) in [(31, 1, true), (32, 2, false)] {
        let (g, inputs) = conv_bn(seed, groups, with_bias);
        let pass = BnFold { into_weights: true, channels_last: true };
        let out = fold_with(&g, pass);
        let err = max_rel_err(&g, &out, &inputs);
        assert!(err < 1e-5, "seed {seed}: max rel err {err}");
        // Stored [O, kh, kw, I], read through the permutation back to [O, I, kh, kw].
        let (w, perm) = weight_of(&out);
        assert_eq!((w.shape(), perm), (&[6, 3, 3, 4 / groups][..], Some(vec![0, 3, 1, 2])), "{out}");
        // channels_last takes that storage as the NHWC weight: no second copy.
        let last = Dce.run(&ChannelsLast.run(&out).unwrap()).unwrap();
        let (w_last, perm) = weight_of(&last);
        assert!(perm.is_none() && std::sync::Arc::ptr_eq(&w_last.storage, &w.storage), "{last}");
        assert!(max_rel_err(&g, &last, &inputs) < 1e-5);
        // Compiling again while a result holds the weight shares it ...
        let again = fold_with(&g, pass);
        assert!(std::sync::Arc::ptr_eq(&weight_of(&again).0.storage, &w.storage));
        // ... but not across different BatchNorm parameters.
        let mut other = g.clone();
        let var = other.nodes.iter().find(|n| n.op.name() == "batch_norm").unwrap().inputs[4];
        let Op::Constant(vid) = other.node(var).op else { panic!() };
        let bumped: Vec<f32> = other.consts[vid.0 as usize].to_vec::<f32>().unwrap().iter().map(|v| v * 2.0).collect();
        other.consts[vid.0 as usize] = std::sync::Arc::new(HostTensor::from_vec(bumped, &[6]).unwrap());
        let changed = fold_with(&other, pass);
        assert!(!std::sync::Arc::ptr_eq(&weight_of(&changed).0.storage, &w.storage));
        assert!(max_rel_err(&other, &changed, &inputs) < 1e-5);
    }
}
