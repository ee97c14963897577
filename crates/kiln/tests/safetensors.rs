//! safetensors save/load round trips, loading models by name, and the errors users see.

use kiln::nn::{Init, SafetensorsFile, VarBuilder, save_safetensors};
use kiln::zoo::{self, Model, ModelConfig, bert, gpt2, resnet};
use kiln::{DType, Tensor};
use std::path::PathBuf;

/// A fresh file path in the temp dir, unique per test and process.
fn tmp(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("kiln-st-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(format!("{name}.safetensors"))
}

#[test]
fn round_trip_every_dtype_and_layout() {
    let half = |v: &[f32]| v.iter().map(|&x| kiln_ir::half::f16::from_f32(x)).collect::<Vec<_>>();
    let bhalf = |v: &[f32]| v.iter().map(|&x| kiln_ir::half::bf16::from_f32(x)).collect::<Vec<_>>();
    let t = |r: kiln::Result<Tensor>| r.unwrap();
    let tensors: Vec<(String, Tensor)> = vec![
        ("f32".into(), t(Tensor::from_vec(vec![1.5f32, f32::NAN, f32::NEG_INFINITY, -0.0], &[2, 2]))),
        ("f16".into(), t(Tensor::from_vec(half(&[1.0, -2.5, 65504.0]), &[3]))),
        ("bf16".into(), t(Tensor::from_vec(bhalf(&[1.0, -2.5, 3.0e38]), &[3, 1]))),
        ("f64".into(), t(Tensor::from_vec(vec![1e300f64, -1e-300], &[2]))),
        ("i64".into(), t(Tensor::from_vec(vec![i64::MIN, i64::MAX, 0], &[1, 3]))),
        ("i32".into(), t(Tensor::from_vec(vec![-7i32, 7], &[2]))),
        ("i8".into(), t(Tensor::from_vec(vec![-128i8, 127], &[2]))),
        ("u8".into(), t(Tensor::from_vec(vec![0u8, 255], &[2]))),
        ("bool".into(), t(Tensor::from_vec(vec![true, false, true], &[3]))),
        ("scalar".into(), Tensor::scalar(42i64)),
        ("empty".into(), Tensor::zeros(&[0, 4], DType::F32)),
        // A transposed view is saved in its logical (row-major) order.
        ("view".into(), t(t(Tensor::from_vec(vec![1i32, 2, 3, 4, 5, 6], &[2, 3])).t())),
        // A broadcast (stride-0) view.
        ("expanded".into(), t(t(Tensor::from_vec(vec![1.0f32, 2.0], &[2, 1])).expand(&[2, 3]))),
    ];
    let path = tmp("dtypes");
    save_safetensors(&path, &tensors).unwrap();
    let f = SafetensorsFile::open(&path).unwrap();
    let mut names: Vec<String> = tensors.iter().map(|(n, _)| n.clone()).collect();
    names.sort();
    assert_eq!(f.names(), names);
    for (name, want) in &tensors {
        let got = f.load(name).unwrap();
        assert_eq!(got.dtype(), want.dtype(), "{name}");
        assert_eq!(got.shape(), want.shape(), "{name}");
        let (g, w) = (got.to_f64_vec(), want.to_f64_vec().unwrap());
        assert_eq!(g.len(), w.len());
        for (a, b) in g.iter().zip(&w) {
            assert!(a == b || (a.is_nan() && b.is_nan()), "{name}: {g:?} vs {w:?}");
        }
    }
    assert_eq!(f.load("view").unwrap().to_vec::<i32>().unwrap(), vec![1, 4, 2, 5, 3, 6]);
    assert_eq!(f.load("expanded").unwrap().to_vec::<f32>().unwrap(), vec![1.0, 1.0, 1.0, 2.0, 2.0, 2.0]);
}

#[test]
fn save_rejects_duplicates_and_open_reports_bad_files() {
    let a = Tensor::zeros(&[1], DType::F32);
    let err = save_safetensors(&tmp("dup"), &[("x".into(), a.clone()), ("x".into(), a)]).unwrap_err();
    assert!(err.to_string().contains("'x'"), "{err}");

    let missing = std::env::temp_dir().join("kiln-no-such-dir/none.safetensors");
    let err = SafetensorsFile::open(&missing).unwrap_err().to_string();
    assert!(err.contains("none.safetensors"), "{err}");

    let garbage = tmp("garbage");
    std::fs::write(&garbage, b"not a safetensors file at all").unwrap();
    let err = SafetensorsFile::open(&garbage).unwrap_err().to_string();
    assert!(err.contains("garbage.safetensors"), "{err}");
    let err = VarBuilder::from_safetensors(&garbage, DType::F32).err().unwrap().to_string();
    assert!(err.contains("garbage.safetensors"), "{err}");
}

#[test]
fn var_builder_loads_by_name_and_reports_mismatches() {
    let path = tmp("vb");
    let w = Tensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3]).unwrap();
    let b16 = Tensor::from_vec(vec![kiln_ir::half::f16::ONE], &[1]).unwrap();
    let stats = Tensor::from_vec(vec![0.5f32, 0.25], &[2]).unwrap();
    save_safetensors(
        &path,
        &[
            ("fc.weight".into(), w),
            ("half".into(), b16),
            ("bert.pooler.dense.bias".into(), stats.clone()),
            ("bn.running_var".into(), stats),
        ],
    )
    .unwrap();
    let vb = VarBuilder::from_safetensors(&path, DType::F32).unwrap();
    let got = vb.pp("fc").get("weight", &[2, 3], Init::Const(0.0)).unwrap();
    assert_eq!(got.to_vec::<f32>().unwrap(), vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0], "the init is not used");
    // Buffers load too and are not counted.
    let var = vb.pp("bn").get_buffer("running_var", &[2], Init::Const(1.0)).unwrap();
    assert_eq!(var.to_vec::<f32>().unwrap(), vec![0.5, 0.25]);
    assert_eq!(vb.num_parameters(), 6);
    // Whole-model checkpoints with a `bert.` prefix load under the base model's names.
    let pooled = vb.pp("pooler.dense").get("bias", &[2], Init::Const(0.0)).unwrap();
    assert_eq!(pooled.to_vec::<f32>().unwrap(), vec![0.5, 0.25]);

    let file = path.file_name().unwrap().to_string_lossy().to_string();
    let err = vb.pp("fc").get("bias", &[2], Init::Const(0.0)).unwrap_err().to_string();
    assert!(err.contains("'fc.bias'") && err.contains(&file), "{err}");
    let err = vb.pp("head.fc").get("weight", &[2, 3], Init::Const(0.0)).unwrap_err().to_string();
    assert!(err.contains("'head.fc.weight'") && err.contains("names in the file: fc.weight"), "hint: {err}");
    let vb2 = VarBuilder::from_safetensors(&path, DType::F32).unwrap();
    let err = vb2.get("fc.weight", &[3, 2], Init::Const(0.0)).unwrap_err().to_string();
    assert!(err.contains("fc.weight") && err.contains("[2, 3]") && err.contains("[3, 2]") && err.contains(&file), "{err}");
    let err = vb2.get("half", &[1], Init::Const(0.0)).unwrap_err().to_string();
    assert!(err.contains("half") && err.contains("f16") && err.contains("f32"), "{err}");
    assert_eq!(vb2.num_parameters(), 0, "failed loads count nothing");
}

/// Saves every variable of `vb` to `name`.safetensors and returns the builder reading it back.
fn save_and_reopen(vb: &VarBuilder, name: &str) -> VarBuilder {
    let path = tmp(name);
    save_safetensors(&path, &vb.vars()).unwrap();
    VarBuilder::from_safetensors(&path, vb.dtype()).unwrap()
}

fn outputs(m: &dyn Model) -> Vec<Vec<f64>> {
    let x = m.example_inputs(3).unwrap();
    m.forward(&x).unwrap().iter().map(|t| t.to_f64_vec().unwrap()).collect()
}

#[test]
fn tiny_transformers_round_trip_through_files() {
    let vb = VarBuilder::random(9, DType::F32);
    let a = bert::Bert::new(vb.clone(), &bert::BertConfig::tiny(), 2, 5).unwrap();
    let vb2 = save_and_reopen(&vb, "bert-tiny");
    let b = bert::Bert::new(vb2.clone(), &bert::BertConfig::tiny(), 2, 5).unwrap();
    assert_eq!(a.num_parameters(), b.num_parameters());
    assert_eq!(vb.names(), vb2.names());
    assert_eq!(outputs(&a), outputs(&b));

    let vb = VarBuilder::random(9, DType::F32);
    let a = gpt2::Gpt2::new(vb.clone(), &gpt2::Gpt2Config::tiny(), 1, 4).unwrap();
    let b = gpt2::Gpt2::new(save_and_reopen(&vb, "gpt2-tiny"), &gpt2::Gpt2Config::tiny(), 1, 4).unwrap();
    assert_eq!(outputs(&a), outputs(&b));
}

#[test]
fn tiny_resnet_round_trip_includes_buffers() {
    let cfg = resnet::ResNetConfig {
        block: resnet::BlockKind::Bottleneck,
        layers: [1, 1, 1, 1],
        base_width: 4,
        num_classes: 5,
        image_size: 32,
    };
    let vb = VarBuilder::random(4, DType::F32);
    let a = resnet::ResNet::new(vb.clone(), &cfg, 1).unwrap();
    assert!(vb.names().contains(&"layer1.0.bn3.running_mean".to_string()));
    assert!(vb.names().contains(&"layer2.0.downsample.1.running_var".to_string()));
    let b = resnet::ResNet::new(save_and_reopen(&vb, "resnet-tiny"), &cfg, 1).unwrap();
    assert_eq!(outputs(&a), outputs(&b));
}

#[test]
fn zoo_build_from_a_wrong_file_names_the_missing_key() {
    let path = tmp("wrong-model");
    save_safetensors(&path, &[("something.else".into(), Tensor::zeros(&[1], DType::F32))]).unwrap();
    let cfg = ModelConfig { weights: Some(path), ..Default::default() };
    let err = zoo::build("resnet18", &cfg).err().unwrap().to_string();
    assert!(err.contains("conv1.weight") && err.contains("wrong-model.safetensors"), "{err}");
}
