//! Construction, inspection, devices, argument translation errors and the op counter. Most of
//! these need no kernels: errors come from argument checks or shape inference.

use kiln::dispatch::op_count;
use kiln::{DType, Device, Error, HostTensor, Tensor};

fn f32s(v: &[f32], shape: &[usize]) -> Tensor {
    Tensor::from_vec(v.to_vec(), shape).unwrap()
}

#[test]
fn constructors_fill_values_and_shapes() {
    let z = Tensor::zeros(&[2, 3], DType::F32);
    assert_eq!(z.shape(), &[2, 3]);
    assert_eq!(z.to_vec::<f32>().unwrap(), vec![0.0; 6]);
    let o = Tensor::ones(&[2], DType::I64);
    assert_eq!(o.to_vec::<i64>().unwrap(), vec![1, 1]);
    let b = Tensor::ones(&[3], DType::Bool);
    assert_eq!(b.to_vec::<bool>().unwrap(), vec![true; 3]);
    let f = Tensor::full(&[2, 2], 2.5, DType::F64);
    assert_eq!(f.to_vec::<f64>().unwrap(), vec![2.5; 4]);
    // Conversion to an integer dtype truncates.
    let fi = Tensor::full(&[1], 2.9, DType::I32);
    assert_eq!(fi.to_vec::<i32>().unwrap(), vec![2]);
    let a = Tensor::arange(4, DType::U8);
    assert_eq!(a.to_vec::<u8>().unwrap(), vec![0, 1, 2, 3]);
    let s = Tensor::scalar(7i64);
    assert_eq!((s.rank(), s.numel(), s.dtype()), (0, 1, DType::I64));
    assert_eq!(s.to_vec::<i64>().unwrap(), vec![7]);
    let e = Tensor::zeros(&[0, 3], DType::F32);
    assert_eq!((e.numel(), e.to_vec::<f32>().unwrap().len()), (0, 0));
    let h = Tensor::arange(0, DType::F16);
    assert_eq!(h.shape(), &[0]);
}

#[test]
fn from_vec_checks_the_element_count() {
    let err = Tensor::from_vec(vec![1.0f32, 2.0, 3.0], &[2, 2]).unwrap_err();
    assert!(matches!(err, Error::Shape(_)), "{err}");
    assert!(err.to_string().contains("[2, 2]"), "{err}");
}

#[test]
fn inspectors_report_layout_and_dtype() {
    let x = f32s(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3]);
    assert_eq!(x.dims(), vec![2, 3]);
    assert_eq!(x.rank(), 2);
    assert_eq!(x.numel(), 6);
    assert_eq!(x.dtype(), DType::F32);
    assert_eq!(x.device(), Device::Cpu);
    assert_eq!(x.strides(), vec![3, 1]);
    assert!(x.is_contiguous());
    assert!(!x.is_traced());
    assert_eq!(x.dim(-1).unwrap(), 3);
    assert_eq!(x.dim(0).unwrap(), 2);
    let err = x.dim(2).unwrap_err();
    assert!(err.to_string().contains("dim") && err.to_string().contains("rank 2"), "{err}");
    assert!(x.dim(-3).is_err());
    assert_eq!(x.to_f64_vec().unwrap(), vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    let err = x.to_vec::<i64>().unwrap_err();
    assert!(matches!(err, Error::DType(_)), "{err}");
}

#[test]
fn from_host_keeps_a_strided_view() {
    let h = HostTensor::from_vec(vec![1i32, 2, 3, 4, 5, 6], &[2, 3]).unwrap();
    let v = h.with_layout(h.layout.permute(&[1, 0]).unwrap());
    let t = Tensor::from_host(v);
    assert_eq!(t.shape(), &[3, 2]);
    assert_eq!(t.strides(), vec![1, 3]);
    assert!(!t.is_contiguous());
    assert_eq!(t.to_vec::<i32>().unwrap(), vec![1, 4, 2, 5, 3, 6]);
    assert!(std::sync::Arc::ptr_eq(&t.to_host().unwrap().storage, &h.storage));
    // contiguous() of a strided view copies into row-major order, without dispatching.
    let before = op_count();
    let c = t.contiguous().unwrap();
    assert_eq!(op_count(), before);
    assert!(c.is_contiguous());
    assert_eq!(c.strides(), vec![2, 1]);
    assert_eq!(c.to_vec::<i32>().unwrap(), vec![1, 4, 2, 5, 3, 6]);
    // ... and of a contiguous tensor is the same storage.
    let cc = c.contiguous().unwrap();
    assert!(std::sync::Arc::ptr_eq(&cc.to_host().unwrap().storage, &c.to_host().unwrap().storage));
}

#[test]
fn device_parse_display_and_refusal() {
    assert_eq!(Device::parse("cpu").unwrap(), Device::Cpu);
    assert_eq!(Device::parse(" CUDA ").unwrap(), Device::Cuda(0));
    assert_eq!(Device::parse("cuda:3").unwrap(), Device::Cuda(3));
    assert_eq!("cuda:1".parse::<Device>().unwrap(), Device::Cuda(1));
    assert_eq!(Device::Cuda(2).to_string(), "cuda:2");
    assert_eq!(Device::Cpu.to_string(), "cpu");
    for bad in ["tpu", "cuda:", "cuda:x", "", "cuda:-1"] {
        let err = Device::parse(bad).unwrap_err();
        assert!(err.to_string().contains("unknown device"), "{bad}: {err}");
    }
    let x = Tensor::zeros(&[1], DType::F32);
    assert_eq!(x.to_device(Device::Cpu).unwrap().device(), Device::Cpu);
    let err = x.to_device(Device::Cuda(0)).unwrap_err();
    assert!(matches!(err, Error::Unsupported(_)) && err.to_string().contains("cuda:0"), "{err}");
}

#[test]
fn reshape_infers_minus_one_and_rejects_bad_specs() {
    let x = Tensor::zeros(&[2, 3, 4], DType::F32);
    for (spec, msg) in [
        (&[-1i64, -1][..], "only one dim may be -1"),
        (&[5, -1][..], "not divisible"),
        (&[7, 3][..], "element counts differ"),
        (&[-2, 12][..], ">= 0 or -1"),
        (&[0, -1][..], "ambiguous"),
    ] {
        let err = x.reshape(spec).unwrap_err();
        let s = err.to_string();
        assert!(matches!(err, Error::Shape(_)), "{s}");
        assert!(s.contains("reshape") && s.contains("[2, 3, 4]") && s.contains(msg), "{spec:?}: {s}");
    }
}

#[test]
fn axis_arguments_are_checked() {
    let x = Tensor::zeros(&[2, 3], DType::F32);
    let err = x.softmax(2).unwrap_err();
    assert!(err.to_string().contains("softmax") && err.to_string().contains("axis 2"), "{err}");
    assert!(x.sum(&[0, -2], false).unwrap_err().to_string().contains("twice"));
    assert!(x.transpose(0, 5).is_err());
    assert!(x.unsqueeze(3).is_err());
    assert!(x.argmax(-3, false).is_err());
    let err = x.flatten(1, 0).unwrap_err();
    assert!(err.to_string().contains("flatten"), "{err}");
    let err = x.narrow(1, 2, 2).unwrap_err();
    assert!(err.to_string().contains("narrow") && err.to_string().contains("[2, 3]"), "{err}");
    assert!(x.narrow(1, usize::MAX, 2).is_err());
    assert!(x.slice(0, 0, 1, 0).unwrap_err().to_string().contains("step"));
    assert!(x.chunk(0, 0).is_err());
    assert!(x.pad(&[(1, 1), (1, 1), (1, 1)], kiln_ir::PadMode::Constant(0.0)).is_err());
    assert!(Tensor::cat(&[], 0).is_err());
    assert!(x.layer_norm(3, None, None, 1e-5).is_err());
    assert!(x.layer_norm(0, None, None, 1e-5).is_err());
    assert!(Tensor::zeros(&[3], DType::F32).batch_norm(&x, &x, None, None, 1e-5).is_err());
    assert!(x.adaptive_avg_pool2d_1().is_err());
    assert!(x.linear(&Tensor::zeros(&[3], DType::F32), None).unwrap_err().to_string().contains("linear"));
}

#[test]
fn shape_and_dtype_errors_name_the_op_and_shapes() {
    let a = Tensor::zeros(&[2, 3], DType::F32);
    let b = Tensor::zeros(&[4], DType::F32);
    let err = a.add(&b).unwrap_err();
    let s = err.to_string();
    assert!(matches!(err, Error::Shape(_)), "{s}");
    assert!(s.contains("add") && s.contains("[2, 3]") && s.contains("[4]"), "{s}");

    let i = Tensor::zeros(&[2, 3], DType::I64);
    let err = a.mul(&i).unwrap_err();
    let s = err.to_string();
    assert!(matches!(err, Error::DType(_)), "{s}");
    assert!(s.contains("mul") && s.contains("f32") && s.contains("i64"), "{s}");

    let err = a.matmul(&Tensor::zeros(&[2, 3], DType::F32)).unwrap_err();
    assert!(err.to_string().contains("matmul") && err.to_string().contains("inner dims"), "{err}");

    let err = i.exp().unwrap_err();
    assert!(matches!(err, Error::DType(_)) && err.to_string().contains("exp"), "{err}");
    let err = Tensor::zeros(&[2], DType::Bool).add_scalar(1.0).unwrap_err();
    assert!(matches!(err, Error::DType(_)) && err.to_string().contains("bool"), "{err}");
    let err = a.expand(&[4, 3]).unwrap_err();
    assert!(err.to_string().contains("expand"), "{err}");
    let err = a.permute(&[0, 0]).unwrap_err();
    assert!(err.to_string().contains("permute"), "{err}");
    let err = Tensor::embedding(&a, &Tensor::zeros(&[2], DType::F32)).unwrap_err();
    assert!(err.to_string().contains("gather") && err.to_string().contains("indices"), "{err}");
}

#[test]
fn op_count_counts_dispatched_ops_on_this_thread() {
    let x = Tensor::zeros(&[2, 2], DType::F32);
    let before = op_count();
    let _ = x.add(&x);
    let _ = x.exp();
    assert_eq!(op_count() - before, 2);
    // Other threads keep their own counts.
    let other = std::thread::spawn(|| {
        let y = Tensor::zeros(&[1], DType::F32);
        let start = op_count();
        let _ = y.neg();
        op_count() - start
    })
    .join()
    .unwrap();
    assert_eq!(other, 1);
    assert_eq!(op_count() - before, 2);
    // to_dtype to the same dtype and t() of a vector are free.
    let _ = x.to_dtype(DType::F32).unwrap();
    let _ = Tensor::zeros(&[3], DType::F32).t().unwrap();
    assert_eq!(op_count() - before, 2);
    // silu is two ops (sigmoid, mul); traced here so the count does not depend on kernels.
    let start = op_count();
    kiln::trace(&[("x", DType::F32, &[2])], |xs| Ok(vec![xs[0].silu()?])).unwrap();
    assert_eq!(op_count() - start, 2);
}

#[test]
fn traced_placeholders_hold_no_data() {
    let g = kiln::trace(&[("x", DType::F32, &[2, 3])], |xs| {
        let x = &xs[0];
        assert!(x.is_traced());
        assert_eq!((x.shape(), x.dtype()), (&[2usize, 3][..], DType::F32));
        assert_eq!(x.strides(), vec![3, 1]);
        assert!(x.to_host().is_err());
        let err = x.to_vec::<f32>().unwrap_err();
        assert!(err.to_string().contains("placeholder"), "{err}");
        assert!(x.to_f64_vec().is_err());
        Ok(vec![x.clone()])
    })
    .unwrap();
    assert_eq!(g.outputs, g.inputs);
}

#[test]
fn tensors_and_devices_cross_threads() {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<Tensor>();
    send_sync::<Device>();
    // Clones are cheap handles to the same data.
    let x = Tensor::arange(3, DType::F32);
    let y = x.clone();
    assert!(std::sync::Arc::ptr_eq(&x.to_host().unwrap().storage, &y.to_host().unwrap().storage));
    assert!(format!("{x:?}").contains("f32[3]"));
}
