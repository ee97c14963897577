//! BatchNorm folding into Conv2d and MatMul, with random parameters, against the reference
//! interpreter on the unfolded graph; and the cases that must not fold.

mod common;

use common::{Rng, count, max_rel_err, rand_f32};
use kiln_ir::{
    BinaryOp, Conv2dAttrs, DType, Graph, HostTensor, NodeId, Op, Shape, TensorType, UnaryOp, verify,
};
use kiln_opt::Pass;
use kiln_opt::passes::{BnFold, Dce, Fold};

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
    let out = Dce.run(&BnFold.run(g).unwrap()).unwrap();
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
        groups,
    };
    let y = g.add(Op::Conv2d(attrs), &args).unwrap();
    let z = bn(&mut g, &mut rng, y, o);
    let r = g.add(Op::Unary(UnaryOp::Relu), &[z]).unwrap();
    g.output(r);
    (g, vec![rand_f32(&mut rng, &[n, c, h, h], -1.0, 1.0)])
}

#[test]
fn conv_bn_folds_into_one_conv() {
    for (seed, groups, with_bias) in [(1, 1, false), (2, 1, true), (3, 2, true), (4, 2, false)] {
        let (g, inputs) = conv_bn(seed, groups, with_bias);
        let out = fold(&g);
        assert_eq!(count(&out, "batch_norm"), 0, "{out}");
        assert_eq!(count(&out, "conv2d"), 1);
        assert_eq!(
            out.consts.len(),
            2,
            "only the folded weight and bias remain"
        );
        let err = max_rel_err(&g, &out, &inputs);
        assert!(err < 1e-5, "seed {seed} groups {groups}: max rel err {err}");
    }
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
                groups: 1,
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
        assert_eq!(count(&out, "add"), 1);
        let err = max_rel_err(&g, &out, &[rand_f32(&mut rng, &[n, k], -1.0, 1.0)]);
        assert!(err < 1e-5, "bias {bias:?}: max rel err {err}");
    }
}

#[test]
fn bn_is_not_folded_when_the_conv_output_is_used_elsewhere() {
    let (mut g, inputs) = conv_bn(5, 1, true);
    // The conv output also feeds a second output: folding would change that value.
    let conv = NodeId(
        g.nodes
            .iter()
            .position(|n| n.op.name() == "conv2d")
            .unwrap() as u32,
    );
    g.output(conv);
    let out = fold(&g);
    assert_eq!(count(&out, "batch_norm"), 1);
    assert_eq!(max_rel_err(&g, &out, &inputs), 0.0);

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
                groups: 1,
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

    // A conv whose weight is a graph input: no folding.
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
                groups: 1,
            }),
            &[x, w],
        )
        .unwrap();
    let z = bn(&mut g, &mut rng, y, 3);
    g.output(z);
    assert_eq!(count(&fold(&g), "batch_norm"), 1);
}

/// The folded constant of `out` with `shape` (the conv weight), as f32 values.
fn const_of_shape(out: &Graph, shape: &[usize]) -> Vec<f32> {
    let found: Vec<&HostTensor> = out
        .consts
        .iter()
        .map(|t| t.as_ref())
        .filter(|t| t.shape() == shape)
        .collect();
    assert_eq!(found.len(), 1, "one constant of shape {shape:?}");
    found[0].to_vec::<f32>().unwrap()
}

/// BatchNorm params with a very different scale per channel, so a weight row multiplied by
/// a neighbour's factor (a wrong channel stride, `o / groups` for `o`) shows in the bits.
fn distinct_bn(g: &mut Graph, x: NodeId, c: usize) -> (NodeId, Vec<f64>) {
    let scale: Vec<f32> = (0..c)
        .map(|k| (k as f32 + 1.0) * if k % 2 == 0 { 1.0 } else { -0.75 })
        .collect();
    let bias: Vec<f32> = (0..c).map(|k| 0.25 * k as f32 - 0.5).collect();
    let mean: Vec<f32> = (0..c).map(|k| 0.1 * k as f32).collect();
    let var: Vec<f32> = (0..c).map(|k| 0.5 + 0.3 * k as f32).collect();
    let eps = 1e-5;
    // The factor the pass must use: computed in f64 from the f32 params.
    let s = (0..c)
        .map(|k| scale[k] as f64 / (var[k] as f64 + eps).sqrt())
        .collect();
    let p: Vec<NodeId> = [scale, bias, mean, var]
        .into_iter()
        .map(|v| g.constant(HostTensor::from_vec(v, &[c]).unwrap()))
        .collect();
    let z = g
        .add(Op::BatchNorm { eps }, &[x, p[0], p[1], p[2], p[3]])
        .unwrap();
    (z, s)
}

#[test]
fn grouped_conv_weight_is_scaled_per_output_channel_bit_exactly() {
    let mut rng = Rng(21);
    let (n, c, o, groups, h) = (1, 6, 9, 3, 5);
    let mut g = Graph::new();
    let x = g.input(
        "x",
        TensorType::new(DType::F32, Shape::fixed(&[n, c, h, h])),
    );
    let w = rand_f32(&mut rng, &[o, c / groups, 3, 3], -1.0, 1.0);
    let wv = w.to_vec::<f32>().unwrap();
    let wid = g.constant(w);
    let attrs = Conv2dAttrs {
        stride: [1, 1],
        padding: [1; 4],
        dilation: [1, 1],
        groups,
    };
    let y = g.add(Op::Conv2d(attrs), &[x, wid]).unwrap();
    let (z, s) = distinct_bn(&mut g, y, o);
    g.output(z);
    let out = fold(&g);
    assert_eq!(count(&out, "batch_norm"), 0, "{out}");
    let got = const_of_shape(&out, &[o, c / groups, 3, 3]);
    let row = wv.len() / o;
    for (i, (&w, &f)) in wv.iter().zip(&got).enumerate() {
        let want = (w as f64 * s[i / row]) as f32;
        assert_eq!(
            f.to_bits(),
            want.to_bits(),
            "weight element {i} (channel {})",
            i / row
        );
    }
    let err = max_rel_err(&g, &out, &[rand_f32(&mut rng, &[n, c, h, h], -1.0, 1.0)]);
    assert!(err < 1e-5, "max rel err {err}");
}

#[test]
fn permuted_weight_of_a_grouped_conv_folds_after_fold_materialises_it() {
    // The weight is stored [kh, kw, i, o] and permuted to [o, i, kh, kw]: a strided view,
    // which fold turns into a dense constant (it is small) before bn_fold scales it.
    let mut rng = Rng(22);
    let (n, c, o, groups, h) = (2, 6, 6, 3, 6);
    let mut g = Graph::new();
    let x = g.input(
        "x",
        TensorType::new(DType::F32, Shape::fixed(&[n, c, h, h])),
    );
    let stored = rand_f32(&mut rng, &[2, 2, c / groups, o], -1.0, 1.0);
    let sv = stored.to_vec::<f32>().unwrap();
    let wc = g.constant(stored);
    let w = g.add(Op::Permute(vec![3, 2, 0, 1]), &[wc]).unwrap();
    let attrs = Conv2dAttrs {
        stride: [1, 2],
        padding: [0, 1, 1, 0],
        dilation: [1, 1],
        groups,
    };
    let y = g.add(Op::Conv2d(attrs), &[x, w]).unwrap();
    let (z, s) = distinct_bn(&mut g, y, o);
    let r = g.add(Op::Unary(UnaryOp::Relu), &[z]).unwrap();
    g.output(r);
    let out = Dce
        .run(&BnFold.run(&Fold.run(&g).unwrap()).unwrap())
        .unwrap();
    verify(&out).unwrap();
    assert_eq!(count(&out, "batch_norm"), 0, "{out}");
    assert_eq!(count(&out, "permute"), 0, "{out}");
    let got = const_of_shape(&out, &[o, c / groups, 2, 2]);
    let ci = c / groups;
    for oc in 0..o {
        for i in 0..ci {
            for kh in 0..2 {
                for kw in 0..2 {
                    let w = sv[((kh * 2 + kw) * ci + i) * o + oc];
                    let f = got[((oc * ci + i) * 2 + kh) * 2 + kw];
                    assert_eq!(
                        f.to_bits(),
                        ((w as f64 * s[oc]) as f32).to_bits(),
                        "o {oc} i {i} k {kh},{kw}"
                    );
                }
            }
        }
    }
    let err = max_rel_err(&g, &out, &[rand_f32(&mut rng, &[n, c, h, h], -1.0, 1.0)]);
    assert!(err < 1e-5, "max rel err {err}");
}
