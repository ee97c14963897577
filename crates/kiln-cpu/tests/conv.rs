//! Conv2d kernel against a direct 7-loop convolution in f64: groups, depthwise, dilation,
//! stride, asymmetric padding, 1x1 fast path, bias, strided inputs, half types, NaN/Inf,
//! empty batches, and the threaded paths.

mod hot_common;

use half::{bf16, f16};
use hot_common::{assert_close, permuted, rand, stored_permuted};
use kiln_cpu::eval;
use kiln_ir::{Conv2dAttrs, Error, HostTensor, Op};

fn attrs(stride: [usize; 2], padding: [usize; 4], dilation: [usize; 2], groups: usize) -> Conv2dAttrs {
    Conv2dAttrs { stride, padding, dilation, groups, channels_last: false }
}

/// Direct convolution on logical values in f64; returns the values and the output shape.
fn naive(a: &Conv2dAttrs, x: &HostTensor, w: &HostTensor, bias: Option<&HostTensor>) -> (Vec<f64>, Vec<usize>) {
    let (xs, ws) = (x.shape(), w.shape());
    let (n, c, h, wd) = (xs[0], xs[1], xs[2], xs[3]);
    let (o, cg, kh, kw) = (ws[0], ws[1], ws[2], ws[3]);
    let og = o / a.groups;
    let [pt, pl, pb, pr] = a.padding;
    let oh = (h + pt + pb - a.dilation[0] * (kh - 1) - 1) / a.stride[0] + 1;
    let ow = (wd + pl + pr - a.dilation[1] * (kw - 1) - 1) / a.stride[1] + 1;
    let (xv, wv) = (x.to_f64_vec(), w.to_f64_vec());
    let bv = bias.map(|b| b.to_f64_vec());
    let mut out = vec![0.0; n * o * oh * ow];
    for b in 0..n {
        for oc in 0..o {
            let g = oc / og;
            for y in 0..oh {
                for xo in 0..ow {
                    let mut s = bv.as_ref().map_or(0.0, |bv| bv[oc]);
                    for ci in 0..cg {
                        let ic = g * cg + ci;
                        for i in 0..kh {
                            for j in 0..kw {
                                let ih = (y * a.stride[0] + i * a.dilation[0]) as isize - pt as isize;
                                let iw = (xo * a.stride[1] + j * a.dilation[1]) as isize - pl as isize;
                                if ih < 0 || iw < 0 || ih >= h as isize || iw >= wd as isize {
                                    continue;
                                }
                                let xi = ((b * c + ic) * h + ih as usize) * wd + iw as usize;
                                s += xv[xi] * wv[((oc * cg + ci) * kh + i) * kw + j];
                            }
                        }
                    }
                    out[((b * o + oc) * oh + y) * ow + xo] = s;
                }
            }
        }
    }
    (out, vec![n, o, oh, ow])
}

fn check(a: &Conv2dAttrs, x: &HostTensor, w: &HostTensor, bias: Option<&HostTensor>, tol: f64, what: &str) {
    let mut inputs = vec![x, w];
    inputs.extend(bias);
    let got = eval(&Op::Conv2d(*a), &inputs).unwrap_or_else(|e| panic!("{what}: {e}"));
    let (want, shape) = naive(a, x, w, bias);
    assert_eq!(got.shape(), &shape[..], "{what}: shape");
    assert_eq!(got.dtype(), x.dtype(), "{what}: dtype");
    assert_close(&got.to_f64_vec(), &want, tol, what);
}

/// (x shape, w shape, attrs) covering every path of the kernel.
fn cases() -> Vec<(Vec<usize>, Vec<usize>, Conv2dAttrs)> {
    vec![
        (vec![2, 3, 7, 6], vec![4, 3, 3, 3], attrs([1, 1], [1, 1, 1, 1], [1, 1], 1)),
        (vec![1, 3, 9, 8], vec![5, 3, 3, 2], attrs([2, 3], [1, 0, 2, 1], [2, 1], 1)),
        (vec![2, 4, 6, 7], vec![6, 2, 3, 3], attrs([1, 2], [0, 1, 1, 0], [1, 2], 2)),
        (vec![1, 6, 5, 5], vec![6, 1, 3, 3], attrs([1, 1], [1, 1, 1, 1], [1, 1], 6)), // depthwise
        (vec![2, 5, 9, 8], vec![5, 1, 3, 2], attrs([2, 1], [2, 0, 1, 1], [2, 3], 5)), // depthwise, odd
        (vec![1, 3, 5, 5], vec![6, 1, 3, 3], attrs([1, 1], [1, 1, 1, 1], [1, 1], 3)), // channel multiplier
        (vec![2, 8, 5, 4], vec![6, 8, 1, 1], attrs([1, 1], [0; 4], [1, 1], 1)),       // 1x1 fast path
        (vec![1, 8, 5, 4], vec![6, 4, 1, 1], attrs([1, 1], [0; 4], [3, 2], 2)),       // grouped 1x1
        (vec![1, 8, 7, 7], vec![4, 8, 1, 1], attrs([2, 2], [0; 4], [1, 1], 1)),       // 1x1 stride 2
        (vec![1, 2, 3, 3], vec![3, 2, 3, 3], attrs([1, 1], [0; 4], [1, 1], 1)),       // 1x1 output
        (vec![1, 1, 1, 1], vec![1, 1, 1, 1], attrs([1, 1], [0; 4], [1, 1], 1)),
        (vec![1, 2, 4, 4], vec![3, 2, 2, 2], attrs([3, 3], [2, 2, 2, 2], [1, 1], 1)), // windows in padding only
        (vec![0, 3, 5, 5], vec![4, 3, 3, 3], attrs([1, 1], [1; 4], [1, 1], 1)),       // empty batch
        (vec![1, 3, 5, 5], vec![0, 3, 3, 3], attrs([1, 1], [1; 4], [1, 1], 1)),       // no output channels
        (vec![2, 0, 4, 4], vec![3, 0, 3, 3], attrs([1, 1], [0; 4], [1, 1], 1)),       // no input channels: bias only
        (vec![1, 3, 23, 21], vec![16, 3, 7, 7], attrs([2, 2], [3; 4], [1, 1], 1)),   // resnet stem shape
        (vec![1, 32, 24, 24], vec![64, 32, 3, 3], attrs([1, 1], [1; 4], [1, 1], 1)), // threaded gemm
        (vec![2, 32, 24, 24], vec![64, 32, 3, 3], attrs([1, 1], [1; 4], [1, 1], 1)), // units in sequence
        (vec![3, 16, 10, 10], vec![32, 16, 3, 3], attrs([1, 1], [1; 4], [1, 1], 1)), // units in parallel
        (vec![1, 8, 13, 20], vec![16, 8, 3, 3], attrs([1, 1], [1; 4], [1, 1], 1)),   // uneven row tiles
        (vec![1, 4, 30, 30], vec![8, 4, 3, 3], attrs([2, 2], [1, 2, 0, 1], [2, 2], 1)), // tiles, stride+dilation
        (vec![1, 4, 30, 30], vec![8, 2, 3, 3], attrs([1, 1], [1; 4], [1, 1], 2)),     // tiles per group
    ]
}

#[test]
fn matches_direct_convolution_f32_f64() {
    for (i, (xs, ws, a)) in cases().into_iter().enumerate() {
        let s = 10 * i as u64;
        let o = ws[0];
        let (x, w, b) = (rand::<f32>(&xs, s), rand::<f32>(&ws, s + 1), rand::<f32>(&[o], s + 2));
        check(&a, &x, &w, None, 1e-4, &format!("case {i} f32 {xs:?} {ws:?} {a:?}"));
        check(&a, &x, &w, Some(&b), 1e-4, &format!("case {i} f32+bias {xs:?} {ws:?} {a:?}"));
        let (x, w, b) = (rand::<f64>(&xs, s), rand::<f64>(&ws, s + 1), rand::<f64>(&[o], s + 2));
        check(&a, &x, &w, Some(&b), 1e-12, &format!("case {i} f64+bias {xs:?} {ws:?} {a:?}"));
    }
}

#[test]
fn half_types() {
    for (i, (xs, ws, a)) in cases().into_iter().enumerate().take(12) {
        let s = 10 * i as u64;
        let o = ws[0];
        check(&a, &rand::<f16>(&xs, s), &rand::<f16>(&ws, s + 1), Some(&rand::<f16>(&[o], s + 2)), 2e-2, &format!("f16 case {i}"));
        check(&a, &rand::<bf16>(&xs, s), &rand::<bf16>(&ws, s + 1), None, 4e-2, &format!("bf16 case {i}"));
    }
}

#[test]
fn strided_inputs() {
    // NHWC storage seen as NCHW, for a plain, a depthwise and a 1x1 conv; weights stored HWIO
    let x = stored_permuted(&rand::<f32>(&[2, 6, 7, 5], 1), &[0, 2, 3, 1]);
    let w = stored_permuted(&rand::<f32>(&[4, 6, 3, 3], 2), &[2, 3, 1, 0]);
    let b = hot_common::sliced(&rand::<f32>(&[8], 3), 0, 0, 8, 2);
    check(&attrs([1, 2], [1, 0, 1, 2], [1, 1], 1), &x, &w, Some(&b), 1e-4, "nhwc x, hwio w");
    let dw = stored_permuted(&rand::<f32>(&[6, 1, 3, 3], 4), &[2, 3, 1, 0]);
    check(&attrs([1, 1], [1; 4], [1, 1], 6), &x, &dw, None, 1e-4, "nhwc depthwise");
    let pw = rand::<f32>(&[3, 6, 1, 1], 5);
    check(&attrs([1, 1], [0; 4], [1, 1], 1), &x, &pw, None, 1e-4, "nhwc 1x1");
    // a spatially flipped input (negative strides)
    let f = hot_common::sliced(&rand::<f64>(&[1, 2, 6, 6], 6), 3, 5, -1, -1);
    check(&attrs([1, 1], [1; 4], [1, 1], 1), &f, &rand::<f64>(&[3, 2, 3, 3], 7), None, 1e-12, "flipped");
}

#[test]
fn nan_and_inf_propagate() {
    let mut xv = vec![1.0f32; 16];
    xv[5] = f32::NAN; // (1, 1)
    xv[15] = f32::INFINITY; // (3, 3)
    let x = HostTensor::from_vec(xv, &[1, 1, 4, 4]).unwrap();
    let w = HostTensor::from_vec(vec![1.0f32; 4], &[1, 1, 2, 2]).unwrap();
    let out = eval(&Op::Conv2d(attrs([1, 1], [0; 4], [1, 1], 1)), &[&x, &w]).unwrap().to_f64_vec();
    // 3x3 output: windows covering (1,1) are NaN, the one covering (3,3) is +inf
    let want = [f64::NAN, f64::NAN, 4.0, f64::NAN, f64::NAN, 4.0, 4.0, 4.0, f64::INFINITY];
    assert_close(&out, &want, 0.0, "nan/inf");
    // depthwise path too
    let x2 = HostTensor::from_vec([x.to_vec::<f32>().unwrap(), vec![2.0; 16]].concat(), &[1, 2, 4, 4]).unwrap();
    let w2 = HostTensor::from_vec(vec![1.0f32; 8], &[2, 1, 2, 2]).unwrap();
    let out = eval(&Op::Conv2d(attrs([1, 1], [0; 4], [1, 1], 2)), &[&x2, &w2]).unwrap().to_f64_vec();
    assert_close(&out[..9], &want, 0.0, "depthwise nan/inf");
    assert!(out[9..].iter().all(|&v| v == 8.0));
}

#[test]
fn hand_computed() {
    // 1x1x3x3 input 1..9, 2x2 kernel of ones, pad 1 on top/left only, stride 2, bias 10
    let x = HostTensor::from_vec((1..=9).map(|v| v as f32).collect::<Vec<_>>(), &[1, 1, 3, 3]).unwrap();
    let w = HostTensor::from_vec(vec![1.0f32; 4], &[1, 1, 2, 2]).unwrap();
    let b = HostTensor::from_vec(vec![10.0f32], &[1]).unwrap();
    let out = eval(&Op::Conv2d(attrs([2, 2], [1, 1, 0, 0], [1, 1], 1)), &[&x, &w, &b]).unwrap();
    assert_eq!(out.shape(), &[1, 1, 2, 2]);
    assert_eq!(out.to_vec::<f32>().unwrap(), vec![11.0, 15.0, 21.0, 38.0]);
}

#[test]
fn bad_inputs_are_errors() {
    let a = attrs([1, 1], [0; 4], [1, 1], 1);
    let xi = HostTensor::from_vec(vec![1i32; 9], &[1, 1, 3, 3]).unwrap();
    let wi = HostTensor::from_vec(vec![1i32; 4], &[1, 1, 2, 2]).unwrap();
    assert!(matches!(eval(&Op::Conv2d(a), &[&xi, &wi]), Err(Error::DType(_))));
    let (x, w) = (rand::<f32>(&[1, 4, 3, 3], 1), rand::<f32>(&[2, 4, 2, 2], 2));
    assert!(matches!(eval(&Op::Conv2d(a), &[&x, &rand::<f32>(&[3], 3)]), Err(Error::Shape(_))));
    assert!(matches!(eval(&Op::Conv2d(a), &[&x, &w, &rand::<f32>(&[3], 3)]), Err(Error::Shape(_))));
    assert!(eval(&Op::Conv2d(attrs([1, 1], [0; 4], [1, 1], 3)), &[&x, &w]).is_err());
    assert!(matches!(eval(&Op::Conv2d(a), &[&x, &rand::<f64>(&[2, 4, 2, 2], 2)]), Err(Error::DType(_))));
    // the kernel itself checks the result shape it is handed
    let r = kiln_cpu::kernels::conv::conv2d(&a, &x, &w, None, &[1, 2, 3, 3]);
    assert!(matches!(r, Err(Error::Shape(_))));
}

#[test]
fn channels_last_equals_nchw_with_transposed_operands() {
    for (i, (xs, ws, a)) in cases().into_iter().enumerate() {
        let (x, w, b) = (rand::<f32>(&xs, 10 + i as u64), rand::<f32>(&ws, 20 + i as u64), rand::<f32>(&ws[..1], 30 + i as u64));
        let want = eval(&Op::Conv2d(a), &[&x, &w, &b]).unwrap();
        let nhwc = Conv2dAttrs { channels_last: true, ..a };
        let got = eval(&Op::Conv2d(nhwc), &[&permuted(&x, &[0, 2, 3, 1]), &permuted(&w, &[0, 2, 3, 1]), &b]).unwrap();
        // [N, OH, OW, O] back to [N, O, OH, OW]: the same values, bit for bit.
        assert_eq!(permuted(&got, &[0, 3, 1, 2]).to_f64_vec(), want.to_f64_vec(), "case {i}");
    }
    // A transposed (non-dense) channels-last input gives the same result as its dense copy.
    let (x, w) = (rand::<f32>(&[2, 5, 6, 3], 1), rand::<f32>(&[4, 3, 3, 3], 2));
    let a = Conv2dAttrs { channels_last: true, ..attrs([1, 1], [1, 1, 1, 1], [1, 1], 1) };
    let strided = permuted(&x, &[0, 2, 1, 3]);
    let dense = strided.contiguous();
    assert_eq!(eval(&Op::Conv2d(a), &[&strided, &w]).unwrap().to_f64_vec(), eval(&Op::Conv2d(a), &[&dense, &w]).unwrap().to_f64_vec());
    // Shapes are checked in the channels-last order.
    let err = eval(&Op::Conv2d(a), &[&x, &rand::<f32>(&[4, 3, 3, 5], 3)]).unwrap_err().to_string();
    assert!(err.contains("channel") || err.contains("groups"), "{err}");
}
