//! The model zoo: reference parameter counts and names, traced output shapes, eager forward
//! against the reference interpreter, determinism and errors.

use kiln::nn::VarBuilder;
use kiln::zoo::{self, InputSpec, Model, ModelConfig, bert, gpt2, resnet};
use kiln::{DType, Graph, Tensor};
use kiln_ir::Shape;

fn checksum(ts: &[Tensor]) -> Vec<u64> {
    ts.iter().flat_map(|t| t.to_f64_vec().unwrap()).map(f64::to_bits).collect()
}

/// Output shapes of a traced graph.
fn out_shapes(g: &Graph) -> Vec<Shape> {
    g.outputs.iter().map(|&o| g.ty(o).shape.clone()).collect()
}

/// Traces `m.forward` on placeholders shaped like `m.inputs()` but with batch `batch`.
fn trace_at_batch(m: &dyn Model, batch: usize) -> Graph {
    let specs: Vec<InputSpec> = m
        .inputs()
        .into_iter()
        .map(|mut s| {
            s.shape[0] = batch;
            s
        })
        .collect();
    let args: Vec<(&str, DType, &[usize])> =
        specs.iter().map(|s| (s.name.as_str(), s.dtype, s.shape.as_slice())).collect();
    kiln::trace(&args, |xs| m.forward(xs)).unwrap()
}

/// A zoo name, its reference parameter count and its output shapes at a given batch.
type Expected = (&'static str, usize, fn(usize) -> Vec<Shape>);

/// The reference sizes, built one at a time (about 0.5 GB of f32 each at most) and dropped.
#[test]
fn full_size_models_match_reference_counts_and_shapes() {
    let expect: [Expected; 4] = [
        ("resnet18", 11_689_512, |b| vec![Shape::fixed(&[b, 1000])]),
        ("resnet50", 25_557_032, |b| vec![Shape::fixed(&[b, 1000])]),
        ("bert-base", 109_482_240, |b| vec![Shape::fixed(&[b, 128, 768]), Shape::fixed(&[b, 768])]),
        ("gpt2", 124_439_808, |b| vec![Shape::fixed(&[b, 128, 768])]),
    ];
    assert_eq!(zoo::NAMES, expect.map(|e| e.0).as_slice());
    for (name, params, shapes) in expect {
        let m = zoo::build(name, &ModelConfig::default()).unwrap();
        assert_eq!(m.name(), name);
        assert_eq!(m.num_parameters(), params, "{name}");
        let g = zoo::trace_model(m.as_ref()).unwrap();
        assert_eq!(out_shapes(&g), shapes(1), "{name} at batch 1");
        assert_eq!(g.inputs.len(), 1);
        // Weights are held once: constants cover the parameters (plus BN buffers), not more.
        let consts = g.const_numel();
        assert!(consts >= params && consts < params + params / 50, "{name}: {consts} constant elements");
        assert_eq!(out_shapes(&trace_at_batch(m.as_ref(), 2)), shapes(2), "{name} at batch 2");
    }
}

#[test]
fn resnet18_names_follow_torchvision() {
    let vb = VarBuilder::random(0, DType::F32);
    let m = resnet::ResNet::new(vb.clone(), &resnet::ResNetConfig::resnet18(), 1).unwrap();
    assert_eq!(m.num_parameters(), 11_689_512);
    let names = vb.names();
    // 122 keys in torchvision's state_dict, less the 20 `num_batches_tracked`.
    assert_eq!(names.len(), 102);
    for n in [
        "conv1.weight",
        "bn1.running_mean",
        "bn1.running_var",
        "layer1.0.conv1.weight",
        "layer2.0.downsample.0.weight",
        "layer2.0.downsample.1.bias",
        "layer4.1.bn2.weight",
        "fc.weight",
        "fc.bias",
    ] {
        assert!(names.contains(&n.to_string()), "missing {n}");
    }
    assert!(!names.contains(&"layer1.0.downsample.0.weight".to_string()));
    assert_eq!(vb.parameter_names().len(), 102 - 2 * 20);
}

#[test]
fn resnet18_eager_forward_is_finite() {
    let m = zoo::build("resnet18", &ModelConfig::default()).unwrap();
    let x = m.example_inputs(0).unwrap();
    assert_eq!(x[0].shape(), &[1, 3, 224, 224]);
    let y = m.forward(&x).unwrap();
    assert_eq!(y.len(), 1);
    assert_eq!(y[0].shape(), &[1, 1000]);
    let v = y[0].to_f64_vec().unwrap();
    assert!(v.iter().all(|x| x.is_finite()), "non-finite logits");
    // Kaiming init keeps activations in range: logits neither vanish nor explode.
    let max = v.iter().fold(0.0f64, |a, x| a.max(x.abs()));
    assert!(max > 1e-3 && max < 1e3, "max |logit| {max}");
}

fn tiny_resnet() -> resnet::ResNetConfig {
    resnet::ResNetConfig { block: resnet::BlockKind::Basic, layers: [1, 1, 1, 1], base_width: 4, num_classes: 7, image_size: 32 }
}

/// Eager forward equals running the traced graph in the reference interpreter.
fn assert_eager_equals_traced(m: &dyn Model) {
    let x = m.example_inputs(1).unwrap();
    let eager = m.forward(&x).unwrap();
    let g = zoo::trace_model(m).unwrap();
    let hosts: Vec<_> = x.iter().map(|t| t.to_host().unwrap()).collect();
    let traced = kiln_cpu::run(&g, &hosts).unwrap();
    assert_eq!(eager.len(), traced.len());
    for (e, t) in eager.iter().zip(&traced) {
        assert_eq!(e.shape(), t.shape());
        let (e, t) = (e.to_f64_vec().unwrap(), t.to_f64_vec());
        for (a, b) in e.iter().zip(&t) {
            assert!(a.is_finite() && (a - b).abs() <= 1e-5 * (1.0 + b.abs()), "{}: {a} vs {b}", m.name());
        }
    }
}

#[test]
fn tiny_models_eager_equals_interpreter() {
    let bert = bert::Bert::new(VarBuilder::random(1, DType::F32), &bert::BertConfig::tiny(), 2, 7).unwrap();
    assert_eager_equals_traced(&bert);
    let gpt = gpt2::Gpt2::new(VarBuilder::random(1, DType::F32), &gpt2::Gpt2Config::tiny(), 2, 5).unwrap();
    assert_eager_equals_traced(&gpt);
    let rn = resnet::ResNet::new(VarBuilder::random(1, DType::F32), &tiny_resnet(), 2).unwrap();
    assert_eager_equals_traced(&rn);
}

#[test]
fn tiny_transformer_names_and_shapes() {
    let vb = VarBuilder::random(0, DType::F32);
    let b = bert::Bert::new(vb.clone(), &bert::BertConfig::tiny(), 1, 6).unwrap();
    let names = vb.names();
    assert_eq!(names.len(), 5 + 2 * 16 + 2, "HF BertModel state_dict keys");
    for n in [
        "embeddings.word_embeddings.weight",
        "embeddings.position_embeddings.weight",
        "embeddings.token_type_embeddings.weight",
        "embeddings.LayerNorm.weight",
        "encoder.layer.0.attention.self.query.weight",
        "encoder.layer.1.attention.output.dense.bias",
        "encoder.layer.1.attention.output.LayerNorm.bias",
        "encoder.layer.0.intermediate.dense.weight",
        "encoder.layer.0.output.LayerNorm.weight",
        "pooler.dense.weight",
    ] {
        assert!(names.contains(&n.to_string()), "missing {n}");
    }
    let out = b.forward(&b.example_inputs(0).unwrap()).unwrap();
    assert_eq!(out[0].shape(), &[1, 6, 64]);
    assert_eq!(out[1].shape(), &[1, 64]);
    // tanh pooler.
    assert!(out[1].to_f64_vec().unwrap().iter().all(|x| x.abs() <= 1.0));

    let vb = VarBuilder::random(0, DType::F32);
    let g = gpt2::Gpt2::new(vb.clone(), &gpt2::Gpt2Config::tiny(), 1, 3).unwrap();
    let names = vb.names();
    assert_eq!(names.len(), 2 + 2 * 12 + 2, "HF GPT2Model state_dict keys");
    for n in ["wte.weight", "wpe.weight", "h.0.ln_1.weight", "h.1.attn.c_proj.bias", "h.0.mlp.c_fc.weight", "ln_f.bias"] {
        assert!(names.contains(&n.to_string()), "missing {n}");
    }
    let w = vb.get("h.0.attn.c_attn.weight", &[64, 192], kiln::nn::Init::Const(0.0)).unwrap();
    assert_eq!(w.shape(), &[64, 192], "Conv1D weights are [in, out]");
    assert_eq!(g.num_parameters(), vb.num_parameters());
}

#[test]
fn gpt2_is_causal_and_bert_is_not() {
    // Changing the last token changes no earlier GPT-2 position, but every BERT position.
    let ids_a = Tensor::from_vec(vec![5i64, 17, 42, 3], &[1, 4]).unwrap();
    let ids_b = Tensor::from_vec(vec![5i64, 17, 42, 99], &[1, 4]).unwrap();
    let gpt = gpt2::Gpt2::new(VarBuilder::random(2, DType::F32), &gpt2::Gpt2Config::tiny(), 1, 4).unwrap();
    let (a, b) = (gpt.hidden_states(&ids_a).unwrap(), gpt.hidden_states(&ids_b).unwrap());
    let (a, b) = (a.to_f64_vec().unwrap(), b.to_f64_vec().unwrap());
    assert_eq!(a[..3 * 64], b[..3 * 64]);
    assert_ne!(a[3 * 64..], b[3 * 64..]);
    let bert = bert::Bert::new(VarBuilder::random(2, DType::F32), &bert::BertConfig::tiny(), 1, 4).unwrap();
    let (a, b) = (bert.encode(&ids_a).unwrap().0, bert.encode(&ids_b).unwrap().0);
    let (a, b) = (a.to_f64_vec().unwrap(), b.to_f64_vec().unwrap());
    assert_ne!(a[..64], b[..64]);
}

#[test]
fn same_seed_same_weights_and_inputs() {
    let run = |seed: u64| {
        let m = bert::Bert::new(VarBuilder::random(seed, DType::F32), &bert::BertConfig::tiny(), 1, 8).unwrap();
        checksum(&m.forward(&m.example_inputs(0).unwrap()).unwrap())
    };
    assert_eq!(run(3), run(3));
    assert_ne!(run(3), run(4));
    let rn = |seed: u64| {
        let m = resnet::ResNet::new(VarBuilder::random(seed, DType::F32), &tiny_resnet(), 1).unwrap();
        checksum(&m.forward(&m.example_inputs(5).unwrap()).unwrap())
    };
    assert_eq!(rn(0), rn(0));
    assert_ne!(rn(0), rn(1));

    let m = gpt2::Gpt2::new(VarBuilder::random(0, DType::F32), &gpt2::Gpt2Config::tiny(), 3, 30).unwrap();
    let a = m.example_inputs(1).unwrap();
    assert_eq!(checksum(&a), checksum(&m.example_inputs(1).unwrap()));
    assert_ne!(checksum(&a), checksum(&m.example_inputs(2).unwrap()));
    assert_eq!(a[0].dtype(), DType::I64);
    assert_eq!(a[0].shape(), &[3, 30]);
    let ids = a[0].to_vec::<i64>().unwrap();
    assert!(ids.iter().all(|&i| (0..100).contains(&i)));
    assert!(ids.iter().collect::<std::collections::HashSet<_>>().len() > 30, "ids spread over the vocab");
}

#[test]
fn other_float_dtypes_build_and_run() {
    let m = resnet::ResNet::new(VarBuilder::random(0, DType::F64), &tiny_resnet(), 1).unwrap();
    let x = m.example_inputs(0).unwrap();
    assert_eq!(x[0].dtype(), DType::F64);
    let y = m.forward(&x).unwrap();
    assert_eq!((y[0].dtype(), y[0].shape()), (DType::F64, &[1, 7][..]));
    let spec = m.inputs();
    assert_eq!(spec, vec![InputSpec { name: "input".into(), dtype: DType::F64, shape: vec![1, 3, 32, 32] }]);
}

#[test]
fn errors_are_values() {
    let err = zoo::build("resnet19", &ModelConfig::default()).err().unwrap().to_string();
    for n in zoo::NAMES {
        assert!(err.contains(n), "{err}");
    }
    assert!(err.contains("resnet19"));
    let err = zoo::build("gpt2", &ModelConfig { dtype: DType::I32, ..Default::default() }).err().unwrap().to_string();
    assert!(err.contains("i32"), "{err}");
    let err = bert::Bert::new(VarBuilder::random(0, DType::F32), &bert::BertConfig::tiny(), 1, 33).err().unwrap();
    assert!(err.to_string().contains("33"), "{err}");
    let g = gpt2::Gpt2::new(VarBuilder::random(0, DType::F32), &gpt2::Gpt2Config::tiny(), 1, 4).unwrap();
    assert!(g.forward(&[]).is_err());
    let long = Tensor::zeros(&[1, 40], DType::I64);
    assert!(g.forward(&[long]).unwrap_err().to_string().contains("[1, 40]"));
    assert!(g.forward(&[Tensor::from_vec(vec![100i64], &[1, 1]).unwrap()]).is_err(), "id out of vocab");
    let r = resnet::ResNet::new(VarBuilder::random(0, DType::F32), &tiny_resnet(), 1).unwrap();
    assert!(r.forward(&[Tensor::zeros(&[1, 4, 32, 32], DType::F32)]).is_err(), "wrong channel count");
}
