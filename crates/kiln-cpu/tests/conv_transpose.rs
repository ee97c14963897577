//! ConvTranspose2d kernel against a direct scatter loop in f64 (stride, dilation, groups,
//! asymmetric padding, output_padding, bias), ONNX's documented example, the adjoint identity
//! with Conv2d, strided inputs, half types, empty batches and the errors.

mod hot_common;

use half::{bf16, f16};
use hot_common::{assert_close, rand, stored_permuted};
use kiln_cpu::eval;
use kiln_ir::{Conv2dAttrs, ConvTranspose2dAttrs, Error, HostTensor, Op, op_attrs};

fn attrs(
    stride: [usize; 2],
    padding: [usize; 4],
    output_padding: [usize; 2],
    dilation: [usize; 2],
    groups: usize,
) -> ConvTranspose2dAttrs {
    ConvTranspose2dAttrs {
        stride,
        padding,
        output_padding,
        dilation,
        groups,
    }
}

/// Every input pixel scattered through every kernel tap, in f64; returns values and shape.
fn naive(
    a: &ConvTranspose2dAttrs,
    x: &HostTensor,
    w: &HostTensor,
    bias: Option<&HostTensor>,
) -> (Vec<f64>, Vec<usize>) {
    let (xs, ws) = (x.shape(), w.shape());
    let (n, c, h, wd) = (xs[0], xs[1], xs[2], xs[3]);
    let (og, kh, kw) = (ws[1], ws[2], ws[3]);
    let (cg, o) = (c / a.groups, og * a.groups);
    let [pt, pl, pb, pr] = a.padding;
    let oh = (h - 1) * a.stride[0] + a.dilation[0] * (kh - 1) + a.output_padding[0] + 1 - pt - pb;
    let ow = (wd - 1) * a.stride[1] + a.dilation[1] * (kw - 1) + a.output_padding[1] + 1 - pl - pr;
    let (xv, wv) = (x.to_f64_vec(), w.to_f64_vec());
    let mut out = vec![0.0; n * o * oh * ow];
    if let Some(b) = bias {
        let bv = b.to_f64_vec();
        for (i, v) in out.iter_mut().enumerate() {
            *v = bv[(i / (oh * ow)) % o];
        }
    }
    for b in 0..n {
        for ic in 0..c {
            let g = ic / cg;
            for ih in 0..h {
                for iw in 0..wd {
                    let xval = xv[((b * c + ic) * h + ih) * wd + iw];
                    for oc in 0..og {
                        for i in 0..kh {
                            for j in 0..kw {
                                let y =
                                    (ih * a.stride[0] + i * a.dilation[0]) as isize - pt as isize;
                                let z =
                                    (iw * a.stride[1] + j * a.dilation[1]) as isize - pl as isize;
                                if y < 0 || z < 0 || y >= oh as isize || z >= ow as isize {
                                    continue;
                                }
                                let wval = wv[((ic * og + oc) * kh + i) * kw + j];
                                let dst =
                                    ((b * o + g * og + oc) * oh + y as usize) * ow + z as usize;
                                out[dst] += xval * wval;
                            }
                        }
                    }
                }
            }
        }
    }
    (out, vec![n, o, oh, ow])
}

fn run(
    a: &ConvTranspose2dAttrs,
    x: &HostTensor,
    w: &HostTensor,
    bias: Option<&HostTensor>,
) -> kiln_ir::Result<HostTensor> {
    let mut inputs = vec![x, w];
    inputs.extend(bias);
    eval(&Op::ConvTranspose2d(*a), &inputs)
}

fn check(
    a: &ConvTranspose2dAttrs,
    x: &HostTensor,
    w: &HostTensor,
    bias: Option<&HostTensor>,
    tol: f64,
) {
    let what = format!(
        "{a:?} x {:?} w {:?} bias {}",
        x.shape(),
        w.shape(),
        bias.is_some()
    );
    let got = run(a, x, w, bias).unwrap_or_else(|e| panic!("{what}: {e}"));
    let (want, shape) = naive(a, x, w, bias);
    assert_eq!(got.shape(), &shape[..], "{what}: shape");
    assert_eq!(got.dtype(), x.dtype(), "{what}: dtype");
    assert_close(&got.to_f64_vec(), &want, tol, &what);
}

/// (x shape, w shape, attrs).
fn cases() -> Vec<(Vec<usize>, Vec<usize>, ConvTranspose2dAttrs)> {
    vec![
        (
            vec![2, 3, 4, 5],
            vec![3, 4, 3, 3],
            attrs([1, 1], [0; 4], [0, 0], [1, 1], 1),
        ),
        (
            vec![1, 3, 4, 3],
            vec![3, 2, 3, 3],
            attrs([2, 2], [1, 1, 1, 1], [1, 1], [1, 1], 1),
        ),
        (
            vec![2, 4, 3, 4],
            vec![4, 3, 2, 3],
            attrs([3, 2], [0, 1, 2, 0], [2, 1], [1, 2], 2),
        ),
        (
            vec![1, 6, 5, 4],
            vec![6, 1, 3, 3],
            attrs([2, 1], [1, 1, 1, 1], [0, 0], [2, 1], 6),
        ), // depthwise
        (
            vec![1, 2, 3, 3],
            vec![2, 3, 1, 1],
            attrs([2, 2], [0; 4], [1, 0], [1, 1], 1),
        ), // 1x1, stride gaps
        (
            vec![1, 2, 2, 2],
            vec![2, 2, 4, 4],
            attrs([1, 1], [2, 1, 1, 2], [0, 0], [1, 1], 1),
        ), // heavy crop
        (
            vec![1, 1, 1, 1],
            vec![1, 1, 1, 1],
            attrs([1, 1], [0; 4], [0, 0], [1, 1], 1),
        ),
        (
            vec![3, 4, 6, 6],
            vec![4, 5, 4, 4],
            attrs([2, 2], [1, 1, 1, 1], [0, 0], [1, 1], 1),
        ), // DCGAN-like
        (
            vec![1, 8, 9, 9],
            vec![8, 6, 3, 3],
            attrs([1, 1], [1, 1, 1, 1], [0, 0], [1, 1], 2),
        ),
    ]
}

#[test]
fn matches_naive_f64_and_f32() {
    for (i, (xs, ws, a)) in cases().into_iter().enumerate() {
        let o = ws[1] * a.groups;
        let seed = 100 + 3 * i as u64;
        let (x, w, b) = (
            rand::<f64>(&xs, seed),
            rand::<f64>(&ws, seed + 1),
            rand::<f64>(&[o], seed + 2),
        );
        check(&a, &x, &w, None, 1e-12);
        check(&a, &x, &w, Some(&b), 1e-12);
        let (x, w, b) = (
            rand::<f32>(&xs, seed),
            rand::<f32>(&ws, seed + 1),
            rand::<f32>(&[o], seed + 2),
        );
        check(&a, &x, &w, Some(&b), 1e-5);
    }
}

#[test]
fn big_enough_to_thread() {
    let a = attrs([2, 2], [1, 1, 1, 1], [1, 1], [1, 1], 1);
    let (x, w, b) = (
        rand::<f32>(&[2, 32, 20, 20], 7),
        rand::<f32>(&[32, 16, 3, 3], 8),
        rand::<f32>(&[16], 9),
    );
    check(&a, &x, &w, Some(&b), 1e-4);
}

/// ONNX's ConvTranspose example: a 3x3 ramp through a 3x3 kernel of ones, two output channels.
#[test]
fn onnx_documented_example() {
    let x =
        HostTensor::from_vec((0..9).map(|v| v as f32).collect::<Vec<_>>(), &[1, 1, 3, 3]).unwrap();
    let w = HostTensor::from_vec(vec![1.0f32; 18], &[1, 2, 3, 3]).unwrap();
    let got = run(&attrs([1, 1], [0; 4], [0, 0], [1, 1], 1), &x, &w, None).unwrap();
    let plane = [
        0.0, 1.0, 3.0, 3.0, 2.0, 3.0, 8.0, 15.0, 12.0, 7.0, 9.0, 21.0, 36.0, 27.0, 15.0, 9.0, 20.0,
        33.0, 24.0, 13.0, 6.0, 13.0, 21.0, 15.0, 8.0,
    ];
    assert_eq!(got.shape(), &[1, 2, 5, 5]);
    assert_eq!(got.to_f64_vec(), [plane, plane].concat());
}

/// `<conv2d(y, w), x> == <y, conv_transpose2d(x, w)>`: the transposed conv is conv's adjoint.
#[test]
fn is_the_adjoint_of_conv2d() {
    let setups = [
        ([2, 4, 5, 6], [4, 3, 3, 3], [2, 1], [1, 0, 2, 1], [1, 2], 1),
        ([1, 6, 4, 4], [6, 2, 3, 2], [1, 2], [0, 1, 1, 0], [2, 1], 3),
    ];
    for (xs, ws, stride, padding, dilation, groups) in setups {
        let ta = attrs(stride, padding, [0, 0], dilation, groups);
        let (x, w) = (rand::<f64>(&xs, 1), rand::<f64>(&ws, 2));
        let t = run(&ta, &x, &w, None).unwrap();
        let y = rand::<f64>(t.shape(), 3);
        let ca = Conv2dAttrs {
            stride,
            padding,
            dilation,
            groups, channels_last: false,
        };
        let c = eval(&Op::Conv2d(ca), &[&y, &w]).unwrap();
        assert_eq!(c.shape(), x.shape());
        let dot = |a: &HostTensor, b: &HostTensor| -> f64 {
            a.to_f64_vec()
                .iter()
                .zip(b.to_f64_vec())
                .map(|(p, q)| p * q)
                .sum()
        };
        let (lhs, rhs) = (dot(&c, &x), dot(&y, &t));
        assert!(
            (lhs - rhs).abs() <= 1e-10 * (1.0 + lhs.abs()),
            "{lhs} vs {rhs}"
        );
    }
}

#[test]
fn strided_inputs_and_half_types() {
    let (xs, ws, a) = cases().swap_remove(2);
    let (x, w, b) = (
        rand::<f64>(&xs, 5),
        rand::<f64>(&ws, 6),
        rand::<f64>(&[6], 7),
    );
    let (want, _) = naive(&a, &x, &w, Some(&b));
    let px = stored_permuted(&x, &[0, 2, 3, 1]);
    let pw = stored_permuted(&w, &[3, 2, 1, 0]);
    let got = run(&a, &px, &pw, Some(&b)).unwrap();
    assert_close(&got.to_f64_vec(), &want, 1e-12, "permuted inputs");
    check(
        &a,
        &rand::<f16>(&xs, 5),
        &rand::<f16>(&ws, 6),
        Some(&rand::<f16>(&[6], 7)),
        1e-2,
    );
    check(
        &a,
        &rand::<bf16>(&xs, 5),
        &rand::<bf16>(&ws, 6),
        Some(&rand::<bf16>(&[6], 7)),
        3e-2,
    );
}

#[test]
fn nan_and_inf_propagate_and_empty_batches_work() {
    let a = attrs([2, 2], [0; 4], [0, 0], [1, 1], 1);
    let mut xv = rand::<f64>(&[1, 1, 2, 2], 1).to_vec::<f64>().unwrap();
    xv[0] = f64::NAN;
    xv[3] = f64::INFINITY;
    let x = HostTensor::from_vec(xv, &[1, 1, 2, 2]).unwrap();
    let w = HostTensor::from_vec(vec![1.0f64, 2.0, 3.0, 4.0], &[1, 1, 2, 2]).unwrap();
    check(&a, &x, &w, None, 1e-12);
    let e = rand::<f32>(&[0, 3, 4, 4], 1);
    let got = run(&a, &e, &rand::<f32>(&[3, 2, 2, 2], 2), None).unwrap();
    assert_eq!(got.shape(), &[0, 2, 8, 8]);
    // Zero input channels: only the bias remains.
    let z = rand::<f32>(&[1, 0, 2, 2], 1);
    let b = HostTensor::from_vec(vec![1.5f32, -2.0], &[2]).unwrap();
    let got = run(&a, &z, &rand::<f32>(&[0, 2, 2, 2], 2), Some(&b)).unwrap();
    assert_eq!(got.to_f64_vec(), [vec![1.5; 16], vec![-2.0; 16]].concat());
}

#[test]
fn bad_shapes_attributes_and_dtypes_are_errors() {
    let ok = attrs([1, 1], [0; 4], [0, 0], [1, 1], 1);
    let (x, w) = (rand::<f32>(&[1, 4, 3, 3], 1), rand::<f32>(&[4, 2, 3, 3], 2));
    assert!(run(&ok, &x, &w, None).is_ok());
    let shape_err = |r: kiln_ir::Result<HostTensor>| matches!(r, Err(Error::Shape(_)));
    assert!(
        shape_err(run(&attrs([1, 1], [0; 4], [0, 0], [1, 1], 3), &x, &w, None)),
        "groups must divide C"
    );
    assert!(
        shape_err(run(&ok, &x, &rand::<f32>(&[3, 2, 3, 3], 2), None)),
        "w dim 0 must be C"
    );
    assert!(
        shape_err(run(&ok, &x, &w, Some(&rand::<f32>(&[3], 3)))),
        "bias must be [O]"
    );
    assert!(
        shape_err(run(
            &attrs([1, 1], [3, 0, 3, 0], [0, 0], [1, 1], 1),
            &x,
            &w,
            None
        )),
        "over-cropped"
    );
    assert!(
        shape_err(run(&ok, &rand::<f32>(&[4, 3, 3], 1), &w, None)),
        "rank 3 x"
    );
    assert!(
        shape_err(run(&ok, &rand::<f32>(&[1, 4, 0, 3], 1), &w, None)),
        "empty spatial input"
    );
    assert!(matches!(
        run(&attrs([0, 1], [0; 4], [0, 0], [1, 1], 1), &x, &w, None),
        Err(Error::Value(_))
    ));
    assert!(matches!(
        run(&attrs([1, 1], [0; 4], [0, 0], [1, 0], 1), &x, &w, None),
        Err(Error::Value(_))
    ));
    let xi = HostTensor::from_vec(vec![1i32; 36], &[1, 4, 3, 3]).unwrap();
    let wi = HostTensor::from_vec(vec![1i32; 72], &[4, 2, 3, 3]).unwrap();
    assert!(matches!(run(&ok, &xi, &wi, None), Err(Error::DType(_))));
    assert!(matches!(
        run(&ok, &x, &rand::<f64>(&[4, 2, 3, 3], 2), None),
        Err(Error::DType(_))
    ));
    assert!(matches!(
        eval(&Op::ConvTranspose2d(ok), &[&x]),
        Err(Error::Graph(_))
    ));
}

#[test]
fn printed_attributes() {
    let a = attrs([2, 2], [1, 1, 1, 1], [1, 0], [1, 1], 2);
    assert_eq!(
        op_attrs(&Op::ConvTranspose2d(a)),
        "stride=[2, 2] pad=[1, 1, 1, 1] output_padding=[1, 0] groups=2"
    );
    assert_eq!(Op::ConvTranspose2d(a).name(), "conv_transpose2d");
}
