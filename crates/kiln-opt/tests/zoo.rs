//! Zoo models through the whole pipeline: every BatchNorm of ResNet is folded and the outputs
//! stay those of the traced graph. Run with `--nocapture` to see node counts and timings.

mod common;

use common::{Rng, count, max_rel_err, rand_f32};
use kiln::nn::VarBuilder;
use kiln::zoo::{self, Model, resnet};
use kiln_ir::{DType, Graph, HostTensor, Op, verify};
use kiln_opt::{OptOptions, optimize};
use std::sync::Arc;
use std::time::Instant;

/// Gives every BatchNorm random statistics (the zoo's random init makes them the identity,
/// which would hide a wrong fold).
fn randomize_bn(g: &mut Graph, rng: &mut Rng) {
    let mut params = Vec::new();
    for n in &g.nodes {
        if let Op::BatchNorm { .. } = n.op {
            for (k, &p) in n.inputs[1..].iter().enumerate() {
                if let Op::Constant(c) = g.node(p).op {
                    params.push((c, k, g.ty(p).shape.as_fixed().unwrap()));
                }
            }
        }
    }
    for (c, k, shape) in params {
        // scale, bias, mean, var: var stays positive.
        let (lo, hi) = [(0.5, 1.5), (-0.2, 0.2), (-0.2, 0.2), (0.5, 2.0)][k];
        g.consts[c.0 as usize] = Arc::new(rand_f32(rng, &shape, lo, hi));
    }
}

fn report(
    name: &str,
    before: &Graph,
    after: &Graph,
    reports: &[kiln_opt::PassReport],
    total_ms: f64,
) {
    println!(
        "{name}: {} -> {} nodes, optimize took {total_ms:.1} ms",
        before.nodes.len(),
        after.nodes.len()
    );
    for r in reports {
        println!(
            "  {:10} {:5} -> {:5} nodes {:8} us",
            r.name, r.nodes_before, r.nodes_after, r.micros
        );
    }
}

#[test]
fn resnet18_folds_every_batch_norm_and_keeps_outputs() {
    let cfg = resnet::ResNetConfig {
        image_size: 64,
        ..resnet::ResNetConfig::resnet18()
    };
    let m = resnet::ResNet::new(VarBuilder::random(7, DType::F32), &cfg, 1).unwrap();
    let mut g = zoo::trace_model(&m).unwrap();
    randomize_bn(&mut g, &mut Rng(8));
    let bns = count(&g, "batch_norm");
    assert_eq!(bns, 20);
    let t = Instant::now();
    let (out, reports) = optimize(&g, &OptOptions::default()).unwrap();
    let ms = t.elapsed().as_secs_f64() * 1e3;
    verify(&out).unwrap();
    report("resnet18 (64x64)", &g, &out, &reports, ms);
    assert_eq!(count(&out, "batch_norm"), 0);
    assert_eq!(count(&out, "conv2d"), count(&g, "conv2d"));
    // Every folded conv carries its bias; nothing of the BatchNorm's arithmetic is left over.
    assert_eq!(count(&out, "sqrt") + count(&out, "div"), 0, "{out}");
    assert!(out.nodes.len() < g.nodes.len());
    let x: HostTensor = m.example_inputs(3).unwrap()[0].to_host().unwrap();
    let err = max_rel_err(&g, &out, &[x]);
    assert!(err < 1e-4, "max rel err {err}");

    // Without bn_fold the batch norms are decomposed into primitives instead.
    let opts = OptOptions {
        disabled: vec!["bn_fold".into()],
        decompose: true,
        ..OptOptions::default()
    };
    let (unfolded, _) = optimize(&g, &opts).unwrap();
    assert_eq!(count(&unfolded, "batch_norm"), 0);
    assert!(count(&unfolded, "sqrt") + count(&unfolded, "div") > 0);
}

#[test]
fn resnet50_optimize_counts_and_time() {
    let m = zoo::build("resnet50", &zoo::ModelConfig::default()).unwrap();
    let g = zoo::trace_model(m.as_ref()).unwrap();
    let t = Instant::now();
    let (out, reports) = optimize(&g, &OptOptions::default()).unwrap();
    let ms = t.elapsed().as_secs_f64() * 1e3;
    verify(&out).unwrap();
    report("resnet50 (batch 1, 224x224)", &g, &out, &reports, ms);
    assert_eq!(count(&out, "batch_norm"), 0);
    assert_eq!(count(&out, "conv2d"), 53);
    assert_eq!(out.inputs.len(), 1);
    assert_eq!(out.outputs.len(), 1);
    assert_eq!(out.ty(out.outputs[0]), g.ty(g.outputs[0]));
}

#[test]
fn for_a_gpu_resnets_run_channels_last_with_batch_norm_in_the_weights() {
    let small = resnet::ResNetConfig { image_size: 64, ..resnet::ResNetConfig::resnet18() };
    let bottleneck = resnet::ResNetConfig { block: resnet::BlockKind::Bottleneck, layers: [1, 1, 1, 1], base_width: 8, num_classes: 7, image_size: 32 };
    for (name, cfg) in [("resnet18", small), ("bottleneck", bottleneck.clone())] {
        let m = resnet::ResNet::new(VarBuilder::random(7, DType::F32), &cfg, 2).unwrap();
        let mut g = zoo::trace_model(&m).unwrap();
        randomize_bn(&mut g, &mut Rng(9));
        let gpu = OptOptions { target: kiln_opt::Target::Gpu, ..OptOptions::default() };
        let (out, reports) = optimize(&g, &gpu).unwrap();
        verify(&out).unwrap();
        assert!(reports.iter().any(|r| r.name == "channels_last"));
        let convs: Vec<_> = out.nodes.iter().filter_map(|n| match &n.op {
            Op::Conv2d(a) => Some((a.channels_last, n.inputs.len())),
            _ => None,
        }).collect();
        assert_eq!(convs.len(), count(&g, "conv2d"), "{name}");
        assert!(convs.iter().all(|&(last, args)| last && args == 3), "{name}: every conv NHWC with its BatchNorm as bias: {convs:?}");
        // BatchNorm left no multiply; the transposes left are the image's, into the stem, and
        // the stem's 2x2 pixel blocks (space_to_depth); residual adds, ReLUs, the max pool and
        // the global average pool all stay NHWC.
        assert_eq!((count(&out, "batch_norm"), count(&out, "mul")), (0, 0), "{name}: {out}");
        assert_eq!(count(&out, "permute"), 2, "{name}: {out}");
        // The 7x7 stride-2 stem over 3 channels is a 4x4 stride-1 conv over 12 (16 with zeros).
        let stem = out.nodes.iter().find(|n| matches!(&n.op, Op::Conv2d(_))).unwrap();
        let w = out.ty(stem.inputs[1]).shape.as_fixed().unwrap();
        assert!(matches!(&stem.op, Op::Conv2d(a) if a.stride == [1, 1]) && w[1..] == [4, 4, 16], "{name}: {w:?}");
        let x: HostTensor = m.example_inputs(3).unwrap()[0].to_host().unwrap();
        let err = max_rel_err(&g, &out, &[x]);
        assert!(err < 1e-4, "{name}: max rel err {err}");
    }
    // The CPU keeps NCHW.
    let m = resnet::ResNet::new(VarBuilder::random(7, DType::F32), &bottleneck, 1).unwrap();
    let g = zoo::trace_model(&m).unwrap();
    let (out, _) = optimize(&g, &OptOptions::default()).unwrap();
    assert!(out.nodes.iter().all(|n| !matches!(&n.op, Op::Conv2d(a) if a.channels_last)));
}
