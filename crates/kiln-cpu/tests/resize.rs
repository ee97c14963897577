//! Resize kernel against a per-element port of ONNX's reference algorithm (recursive 1-D
//! interpolation, taps picked by sorting distances) and against values computed by ONNX's
//! Python reference: every mode, coordinate transform and nearest rounding, up and down
//! scaling, antialias, exclude_outside, crop-and-resize extrapolation, integer dtypes,
//! strided inputs, NaN, empty dims and the errors.

mod hot_common;

use hot_common::{assert_close, rand, stored_permuted};
use kiln_cpu::eval;
use kiln_ir::{
    DType, Error, Graph, HostTensor, Op, ResizeAttrs, ResizeCoord, ResizeMode, ResizeNearest,
    TensorType, op_attrs, structural_hash,
};

fn attrs(out_shape: &[usize], scales: &[f64], mode: ResizeMode, coord: ResizeCoord) -> ResizeAttrs {
    ResizeAttrs {
        out_shape: out_shape.to_vec(),
        scales: scales.to_vec(),
        mode,
        coord,
        nearest: ResizeNearest::RoundPreferFloor,
        cubic_a: -0.75,
        exclude_outside: false,
        antialias: false,
    }
}

/// Scales as ONNX derives them from sizes.
fn size_scales(ins: &[usize], outs: &[usize]) -> Vec<f64> {
    ins.iter()
        .zip(outs)
        .map(|(&i, &o)| o as f64 / i as f64)
        .collect()
}

// ---- the naive reference: ONNX's `_interpolate_nd_with_x`, one output element at a time ----

fn coeffs(a: &ResizeAttrs, ratio: f64, scale: f64) -> Vec<f64> {
    let ca = a.cubic_a;
    match a.mode {
        ResizeMode::Nearest => {
            if ratio == 1.0 {
                return vec![0.0, 1.0];
            }
            let up = match a.nearest {
                ResizeNearest::RoundPreferFloor => ratio > 0.5,
                ResizeNearest::RoundPreferCeil => ratio >= 0.5,
                ResizeNearest::Floor => false,
                ResizeNearest::Ceil => true,
            };
            if up { vec![0.0, 1.0] } else { vec![1.0, 0.0] }
        }
        ResizeMode::Linear if a.antialias => {
            let s = scale.min(1.0);
            let start = (-1.0 / s).floor() as i64 + 1;
            let c: Vec<f64> = (start..start + 2 - 2 * start)
                .map(|i| (1.0 - ((i as f64 - ratio) * s).abs()).clamp(0.0, 1.0))
                .collect();
            let sum: f64 = c.iter().sum();
            c.iter().map(|v| v / sum).collect()
        }
        ResizeMode::Linear => vec![1.0 - ratio, ratio],
        ResizeMode::Cubic if a.antialias => {
            let s = scale.min(1.0);
            let f = |x: f64| {
                let x = x.abs();
                if x <= 1.0 {
                    (ca + 2.0) * x.powi(3) - (ca + 3.0) * x * x + 1.0
                } else if x < 2.0 {
                    ca * x.powi(3) - 5.0 * ca * x * x + 8.0 * ca * x - 4.0 * ca
                } else {
                    0.0
                }
            };
            let start = (-2.0 / s).floor() as i64 + 1;
            let c: Vec<f64> = (start..2 - start)
                .map(|i| f(s * (i as f64 - ratio)))
                .collect();
            let sum: f64 = c.iter().sum();
            c.iter().map(|v| v / sum).collect()
        }
        ResizeMode::Cubic => {
            let r = ratio;
            vec![
                ((ca * (r + 1.0) - 5.0 * ca) * (r + 1.0) + 8.0 * ca) * (r + 1.0) - 4.0 * ca,
                ((ca + 2.0) * r - (ca + 3.0)) * r * r + 1.0,
                ((ca + 2.0) * (1.0 - r) - (ca + 3.0)) * (1.0 - r) * (1.0 - r) + 1.0,
                ((ca * (2.0 - r) - 5.0 * ca) * (2.0 - r) + 8.0 * ca) * (2.0 - r) - 4.0 * ca,
            ]
        }
    }
}

/// The `n` indices nearest to `x` in the edge-padded array (ties to the smaller), unpadded.
fn neighbors(x: f64, n: usize, len: usize) -> Vec<i64> {
    let pad = n.div_ceil(2) as i64;
    let xp = x + pad as f64;
    let mut all: Vec<i64> = (0..len as i64 + 2 * pad).collect();
    all.sort_by(|&a, &b| {
        (xp - a as f64)
            .abs()
            .total_cmp(&(xp - b as f64).abs())
            .then(a.cmp(&b))
    });
    let mut pick: Vec<i64> = all[..n].to_vec();
    pick.sort();
    pick.into_iter().map(|i| i - pad).collect()
}

fn interp_1d(
    a: &ResizeAttrs,
    data: &[f64],
    scale: f64,
    out: usize,
    y: usize,
    roi: Option<(f64, f64)>,
) -> f64 {
    let (len, yf, lenf, outf) = (data.len(), y as f64, data.len() as f64, out as f64);
    let x = match &a.coord {
        ResizeCoord::HalfPixel => (yf + 0.5) / scale - 0.5,
        ResizeCoord::HalfPixelSymmetric => {
            let out_w = scale * lenf;
            lenf / 2.0 * (1.0 - outf / out_w) + (yf + 0.5) / scale - 0.5
        }
        ResizeCoord::PytorchHalfPixel => {
            if out > 1 {
                (yf + 0.5) / scale - 0.5
            } else {
                0.0
            }
        }
        ResizeCoord::AlignCorners => {
            if out == 1 {
                0.0
            } else {
                yf * (lenf - 1.0) / (outf - 1.0)
            }
        }
        ResizeCoord::Asymmetric => yf / scale,
        ResizeCoord::TfCropAndResize { extrapolation, .. } => {
            let (s, e) = roi.unwrap_or((0.0, 1.0));
            let x = if out == 1 {
                (e - s) * (lenf - 1.0) / 2.0
            } else {
                yf * (e - s) * (lenf - 1.0) / (outf - 1.0)
            };
            let x = x + s * (lenf - 1.0);
            if x < 0.0 || x > lenf - 1.0 {
                return *extrapolation;
            }
            x
        }
    };
    let ratio = if x == x.floor() { 1.0 } else { x - x.floor() };
    let mut c = coeffs(a, ratio, scale);
    let idx = neighbors(x, c.len(), len);
    if a.exclude_outside && a.mode != ResizeMode::Nearest {
        for (ci, &i) in c.iter_mut().zip(&idx) {
            if i < 0 || i >= len as i64 {
                *ci = 0.0;
            }
        }
        let s: f64 = c.iter().sum();
        c.iter_mut().for_each(|v| *v /= s);
    }
    c.iter()
        .zip(&idx)
        .map(|(ci, &i)| ci * data[i.clamp(0, len as i64 - 1) as usize])
        .sum()
}

fn interp_nd(a: &ResizeAttrs, data: &[f64], dims: &[usize], ax: usize, y: &[usize]) -> f64 {
    let roi = match &a.coord {
        ResizeCoord::TfCropAndResize { roi, .. } => Some(roi[ax]),
        _ => None,
    };
    let (scale, out) = (a.scales[ax], a.out_shape[ax]);
    if dims.len() == 1 {
        return interp_1d(a, data, scale, out, y[0], roi);
    }
    let inner: usize = dims[1..].iter().product();
    let res: Vec<f64> = (0..dims[0])
        .map(|i| interp_nd(a, &data[i * inner..][..inner], &dims[1..], ax + 1, &y[1..]))
        .collect();
    interp_1d(a, &res, scale, out, y[0], roi)
}

fn naive(a: &ResizeAttrs, x: &HostTensor) -> Vec<f64> {
    let data = x.to_f64_vec();
    let numel: usize = a.out_shape.iter().product();
    let mut out = Vec::with_capacity(numel);
    for flat in 0..numel {
        let mut y = vec![0; a.out_shape.len()];
        let mut rest = flat;
        for ax in (0..y.len()).rev() {
            y[ax] = rest % a.out_shape[ax];
            rest /= a.out_shape[ax];
        }
        out.push(interp_nd(a, &data, x.shape(), 0, &y));
    }
    out
}

fn run(a: &ResizeAttrs, x: &HostTensor) -> HostTensor {
    eval(&Op::Resize(a.clone()), &[x]).unwrap_or_else(|e| panic!("{a:?} on {:?}: {e}", x.shape()))
}

fn check(a: &ResizeAttrs, x: &HostTensor, tol: f64) {
    let got = run(a, x);
    assert_eq!(got.shape(), &a.out_shape[..], "{a:?}: shape");
    assert_eq!(got.dtype(), x.dtype(), "{a:?}: dtype");
    assert_close(
        &got.to_f64_vec(),
        &naive(a, x),
        tol,
        &format!("{a:?} on {:?}", x.shape()),
    );
}

fn coords() -> Vec<ResizeCoord> {
    vec![
        ResizeCoord::HalfPixel,
        ResizeCoord::HalfPixelSymmetric,
        ResizeCoord::PytorchHalfPixel,
        ResizeCoord::AlignCorners,
        ResizeCoord::Asymmetric,
        ResizeCoord::TfCropAndResize {
            roi: vec![],
            extrapolation: -7.5,
        },
    ]
}

/// `coord` with a crop-and-resize roi fitting rank `r` (cropping inside and reaching outside).
fn with_roi(coord: &ResizeCoord, r: usize) -> ResizeCoord {
    match coord {
        ResizeCoord::TfCropAndResize { extrapolation, .. } => {
            let choices = [(0.0, 1.0), (0.1, 0.8), (-0.2, 1.3), (0.6, 0.3)];
            ResizeCoord::TfCropAndResize {
                roi: (0..r).map(|i| choices[(i + 1) % 4]).collect(),
                extrapolation: *extrapolation,
            }
        }
        c => c.clone(),
    }
}

/// (input shape, output shape, scales: None = derived from sizes).
type ShapeCase = (Vec<usize>, Vec<usize>, Option<Vec<f64>>);

fn shapes() -> Vec<ShapeCase> {
    vec![
        (vec![2, 3, 4, 5], vec![2, 3, 7, 3], None), // up H, down W
        (vec![1, 2, 5, 4], vec![1, 2, 2, 9], None), // down H, up W
        (vec![3, 4, 5], vec![5, 2, 9], None),       // every axis, rank 3
        (vec![6], vec![13], None),                  // rank 1
        (vec![1, 1, 1, 4], vec![1, 1, 3, 1], None), // size-1 in and out
        (
            vec![2, 2, 4, 5],
            vec![2, 2, 6, 3],
            Some(vec![1.0, 1.0, 1.7, 0.6]),
        ), // scales, not sizes
        (vec![1, 2, 9, 8], vec![1, 2, 2, 3], None), // strong downscale (antialias taps)
    ]
}

#[test]
fn matches_onnx_algorithm_in_every_mode_and_transform() {
    let nearests = [
        ResizeNearest::RoundPreferFloor,
        ResizeNearest::RoundPreferCeil,
        ResizeNearest::Floor,
        ResizeNearest::Ceil,
    ];
    let mut count = 0;
    for (si, (ins, outs, scales)) in shapes().into_iter().enumerate() {
        let x = rand::<f64>(&ins, 10 + si as u64);
        let scales = scales.unwrap_or_else(|| size_scales(&ins, &outs));
        for coord in coords() {
            let coord = with_roi(&coord, ins.len());
            for nearest in nearests {
                let mut a = attrs(&outs, &scales, ResizeMode::Nearest, coord.clone());
                a.nearest = nearest;
                check(&a, &x, 0.0);
                count += 1;
            }
            for mode in [ResizeMode::Linear, ResizeMode::Cubic] {
                for (exclude_outside, antialias, cubic_a) in [
                    (false, false, -0.75),
                    (true, false, -0.5),
                    (false, true, -0.75),
                    (true, true, -0.5),
                ] {
                    let mut a = attrs(&outs, &scales, mode, coord.clone());
                    (a.exclude_outside, a.antialias, a.cubic_a) =
                        (exclude_outside, antialias, cubic_a);
                    check(&a, &x, 1e-12);
                    count += 1;
                }
            }
        }
    }
    assert_eq!(count, 7 * 6 * 12);
}

#[test]
fn f32_and_half_types_round_once() {
    let ins = [2, 3, 5, 4];
    let outs = [2, 3, 8, 3];
    let scales = size_scales(&ins, &outs);
    for mode in [ResizeMode::Nearest, ResizeMode::Linear, ResizeMode::Cubic] {
        let a = attrs(&outs, &scales, mode, ResizeCoord::HalfPixel);
        check(&a, &rand::<f32>(&ins, 3), 1e-6);
        check(&a, &rand::<half::f16>(&ins, 3), 2e-3);
        check(&a, &rand::<half::bf16>(&ins, 3), 1e-2);
    }
}

/// Values from ONNX's Python reference (`onnx.reference`, opset 19).
#[test]
#[rustfmt::skip]
fn matches_onnx_reference_values() {
    let x16 = HostTensor::from_vec(
        (1..=16).map(|v| v as f32).collect::<Vec<_>>(),
        &[1, 1, 4, 4],
    )
    .unwrap();
    // f32 values written out in full (exact as f64).
    let x2: [f64; 20] = [
            0.0, 2.974994421005249, -0.766623318195343, -2.7774441242218018, 1.4823400974273682, 2.395461320877075,
            -2.0996241569519043, -1.8544113636016846, 2.5774855613708496, 1.1902216672897339, -2.88419246673584, -0.4469970762729645,
            2.9993786811828613, -0.3259097933769226, -2.9153952598571777, 1.0771750211715698, 2.637819290161133, -1.7569119930267334,
            -2.185082197189331, 2.319983720779419,
    ];
    let x2 = HostTensor::from_vec(x2.map(|v| v as f32).to_vec(), &[1, 1, 4, 5]).unwrap();
    let f = |v: f32| v as f64; // ONNX scales are float32
    let case = |x: &HostTensor,
                outs: &[usize],
                scales: Option<Vec<f64>>,
                mode: ResizeMode,
                coord: ResizeCoord,
                tweak: &dyn Fn(&mut ResizeAttrs),
                want: &[f64]| {
        let scales = scales.unwrap_or_else(|| size_scales(x.shape(), outs));
        let mut a = attrs(outs, &scales, mode, coord);
        tweak(&mut a);
        let got = run(&a, x);
        assert_eq!(got.shape(), outs);
        assert_close(&got.to_f64_vec(), want, 1e-6, &format!("{a:?}"));
    };
    let none = |_: &mut ResizeAttrs| {};
    case(
        &x16,
        &[1, 1, 8, 8],
        Some(vec![1.0, 1.0, 2.0, 2.0]),
        ResizeMode::Cubic,
        ResizeCoord::HalfPixel,
        &none,
        &[
            0.47265625, 0.76953125, 1.24609375, 1.875, 2.28125, 2.91015625,
            3.38671875, 3.68359375, 1.66015625, 1.95703125, 2.43359375, 3.0625,
            3.46875, 4.09765625, 4.57421875, 4.87109375, 3.56640625, 3.86328125,
            4.33984375, 4.96875, 5.375, 6.00390625, 6.48046875, 6.77734375,
            6.08203125, 6.37890625, 6.85546875, 7.484375, 7.890625, 8.51953125,
            8.99609375, 9.29296875, 7.70703125, 8.00390625, 8.48046875, 9.109375,
            9.515625, 10.14453125, 10.62109375, 10.91796875, 10.22265625, 10.51953125,
            10.99609375, 11.625, 12.03125, 12.66015625, 13.13671875, 13.43359375,
            12.12890625, 12.42578125, 12.90234375, 13.53125, 13.9375, 14.56640625,
            15.04296875, 15.33984375, 13.31640625, 13.61328125, 14.08984375, 14.71875,
            15.125, 15.75390625, 16.23046875, 16.52734375,
        ],
    );
    case(
        &x16,
        &[1, 1, 3, 3],
        None,
        ResizeMode::Cubic,
        ResizeCoord::AlignCorners,
        &none,
        &[1.0, 2.5, 4.0, 7.0, 8.5, 10.0, 13.0, 14.5, 16.0],
    );
    case(
        &x2,
        &[1, 1, 3, 2],
        None,
        ResizeMode::Cubic,
        ResizeCoord::HalfPixel,
        &|a| a.antialias = true,
        &[
            0.5459878444671631, -0.14160820841789246, -0.5095707774162292, 0.2831606864929199, 0.5093232989311218, -0.44481199979782104,
        ],
    );
    case(
        &x2,
        &[1, 1, 2, 3],
        None,
        ResizeMode::Linear,
        ResizeCoord::HalfPixel,
        &|a| a.antialias = true,
        &[
            0.5777075290679932, -0.3506942689418793, 0.3408353328704834, 0.1810922771692276, 0.007230026181787252, -0.20002911984920502,
        ],
    );
    case(
        &x2,
        &[1, 1, 7, 1],
        None,
        ResizeMode::Linear,
        ResizeCoord::PytorchHalfPixel,
        &none,
        &[
            0.0, 0.8555219173431396, 2.2243568897247314, -0.24436557292938232, -2.6012375354766846, -0.3375990688800812,
            1.0771750211715698,
        ],
    );
    let s = Some(vec![1.0, 1.0, f(1.5), f(0.6)]);
    case(
        &x2,
        &[1, 1, 6, 3],
        s,
        ResizeMode::Cubic,
        ResizeCoord::HalfPixel,
        &|a| (a.cubic_a, a.exclude_outside) = (-0.5, true),
        &[
            0.9367307424545288, -0.6950587630271912, 0.14000317454338074, 1.2471129894256592, -1.5640413761138916, 1.1757863759994507,
            0.693607747554779, -1.2780603170394897, 1.2862709760665894, -2.1407082080841064, 2.6777851581573486, -2.0075221061706543,
            -0.4229499399662018, 0.7668599486351013, -0.765014111995697, 1.9217346906661987, -2.0698254108428955, 1.2846883535385132,
        ],
    );
    let roi = vec![(0.0, 1.0), (0.0, 1.0), (f(0.4), f(1.2)), (f(0.6), f(0.7))];
    let crop = ResizeCoord::TfCropAndResize {
        roi,
        extrapolation: 10.0,
    };
    case(
        &x16,
        &[1, 1, 3, 3],
        None,
        ResizeMode::Linear,
        crop,
        &none,
        &[
            7.600000381469727, 7.75, 7.900000095367432, 12.40000057220459, 12.550000190734863, 12.700000762939453,
            10.0, 10.0, 10.0,
        ],
    );
    let s = Some(vec![1.0, 1.0, f(1.7), f(0.6)]);
    case(
        &x2,
        &[1, 1, 6, 3],
        s,
        ResizeMode::Nearest,
        ResizeCoord::Asymmetric,
        &|a| a.nearest = ResizeNearest::Ceil,
        &[
            0.0, -0.766623318195343, 1.4823400974273682, 2.395461320877075, -1.8544113636016846, 1.1902216672897339,
            -2.88419246673584, 2.9993786811828613, -2.9153952598571777, -2.88419246673584, 2.9993786811828613, -2.9153952598571777,
            1.0771750211715698, -1.7569119930267334, 2.319983720779419, 1.0771750211715698, -1.7569119930267334, 2.319983720779419,
        ],
    );
    let s = Some(vec![1.0, 1.0, f(0.7), f(1.7)]);
    case(
        &x2,
        &[1, 1, 2, 8],
        s,
        ResizeMode::Linear,
        ResizeCoord::HalfPixelSymmetric,
        &none,
        &[
            1.8821481466293335, 0.34984299540519714, -1.0838656425476074, -1.4421645402908325, -0.7238684892654419, 1.0710222721099854,
            1.346620798110962, 1.2528184652328491, -2.035327911376953, -0.8444886207580566, 0.4218160808086395, 1.4607210159301758,
            1.1847389936447144, -0.40613001585006714, -1.2274682521820068, -1.7935283184051514,
        ],
    );
    let s = Some(vec![1.0, 1.0, f(1.5), f(1.7)]);
    let ceil = |a: &mut ResizeAttrs| a.nearest = ResizeNearest::RoundPreferCeil;
    case(&x2, &[1, 1, 6, 8], s, ResizeMode::Nearest, ResizeCoord::HalfPixelSymmetric, &ceil, &[
            0.0, 2.974994421005249, 2.974994421005249, -0.766623318195343, -0.766623318195343, -2.7774441242218018, -2.7774441242218018, 1.4823400974273682,
            2.395461320877075, -2.0996241569519043, -2.0996241569519043, -1.8544113636016846, -1.8544113636016846, 2.5774855613708496, 2.5774855613708496, 1.1902216672897339,
            2.395461320877075, -2.0996241569519043, -2.0996241569519043, -1.8544113636016846, -1.8544113636016846, 2.5774855613708496, 2.5774855613708496, 1.1902216672897339,
            -2.88419246673584, -0.4469970762729645, -0.4469970762729645, 2.9993786811828613, 2.9993786811828613, -0.3259097933769226, -0.3259097933769226, -2.9153952598571777,
            1.0771750211715698, 2.637819290161133, 2.637819290161133, -1.7569119930267334, -1.7569119930267334, -2.185082197189331, -2.185082197189331, 2.319983720779419,
            1.0771750211715698, 2.637819290161133, 2.637819290161133, -1.7569119930267334, -1.7569119930267334, -2.185082197189331, -2.185082197189331, 2.319983720779419,
    ]);
}

#[test]
fn nearest_copies_integers_and_bools_exactly() {
    let big: Vec<i64> = (0..12).map(|i| (1i64 << 62) + i * 7 - 40).collect();
    let x = HostTensor::from_vec(big.clone(), &[3, 4]).unwrap();
    let a = attrs(
        &[5, 7],
        &size_scales(&[3, 4], &[5, 7]),
        ResizeMode::Nearest,
        ResizeCoord::Asymmetric,
    );
    let got = run(&a, &x).to_vec::<i64>().unwrap();
    // asymmetric, round_prefer_floor: rows 0,1,1,2,2 (x = y*0.6), cols 0,1,1,2,2,3,3 (x = y*4/7)
    let (rows, cols) = ([0, 1, 1, 2, 2], [0, 1, 1, 2, 2, 3, 3]);
    let big_ref = &big;
    let want: Vec<i64> = rows
        .iter()
        .flat_map(|&r| cols.iter().map(move |&c| big_ref[r * 4 + c]))
        .collect();
    assert_eq!(got, want);
    for dtype in [DType::U8, DType::I32, DType::I8, DType::Bool] {
        let xs = HostTensor::from_vec(
            (0..24).map(|i| (i * 5 % 11) as f64).collect::<Vec<_>>(),
            &[2, 3, 4],
        )
        .unwrap();
        let xd = eval(&Op::Cast(dtype), &[&xs]).unwrap();
        let mut a = attrs(
            &[2, 5, 3],
            &size_scales(&[2, 3, 4], &[2, 5, 3]),
            ResizeMode::Nearest,
            ResizeCoord::HalfPixel,
        );
        a.nearest = ResizeNearest::RoundPreferCeil;
        let got = run(&a, &xd);
        assert_eq!(got.dtype(), dtype);
        assert_eq!(got.to_f64_vec(), naive(&a, &xd), "{dtype}");
    }
    // Crop-and-resize extrapolation converts to the integer dtype.
    let x = HostTensor::from_vec(vec![1i32, 2, 3, 4], &[4]).unwrap();
    let crop = ResizeCoord::TfCropAndResize {
        roi: vec![(-0.5, 1.5)],
        extrapolation: 9.0,
    };
    let got = run(&attrs(&[5], &[1.25], ResizeMode::Nearest, crop), &x)
        .to_vec::<i32>()
        .unwrap();
    // x = 1.5y - 1.5: -1.5 (outside), 0, 1.5 (halves round down), 3, 4.5 (outside).
    assert_eq!(got, vec![9, 1, 2, 4, 9]);
}

#[test]
fn strided_inputs_match_dense_ones() {
    let x = rand::<f64>(&[2, 3, 5, 4], 21);
    for perm in [[0, 2, 3, 1], [3, 1, 0, 2]] {
        let xs = stored_permuted(&x, &perm);
        for mode in [ResizeMode::Nearest, ResizeMode::Linear, ResizeMode::Cubic] {
            let a = attrs(
                &[2, 3, 3, 7],
                &size_scales(&[2, 3, 5, 4], &[2, 3, 3, 7]),
                mode,
                ResizeCoord::AlignCorners,
            );
            assert_eq!(
                run(&a, &xs).to_f64_vec(),
                run(&a, &x).to_f64_vec(),
                "{mode:?} {perm:?}"
            );
        }
    }
    // A reversed slice (negative stride) and a broadcast (stride 0) view.
    let rev = x.with_layout(x.layout.slice(3, 3, -1, -1).unwrap());
    let a = attrs(
        &[2, 3, 6, 6],
        &size_scales(&[2, 3, 5, 4], &[2, 3, 6, 6]),
        ResizeMode::Nearest,
        ResizeCoord::HalfPixel,
    );
    assert_eq!(run(&a, &rev).to_f64_vec(), naive(&a, &rev));
    let b = rand::<f32>(&[1, 1, 1, 4], 2);
    let bx = b.with_layout(b.layout.broadcast_to(&[2, 3, 5, 4]).unwrap());
    let a = attrs(
        &[2, 3, 2, 3],
        &size_scales(&[2, 3, 5, 4], &[2, 3, 2, 3]),
        ResizeMode::Cubic,
        ResizeCoord::HalfPixel,
    );
    assert_close(
        &run(&a, &bx).to_f64_vec(),
        &naive(&a, &bx),
        1e-6,
        "broadcast view",
    );
}

#[test]
fn nan_reaches_only_outputs_it_weighs_on() {
    let x = HostTensor::from_vec(vec![1.0f64, 2.0, f64::NAN, 4.0], &[4]).unwrap();
    let got = run(
        &attrs(&[8], &[2.0], ResizeMode::Linear, ResizeCoord::Asymmetric),
        &x,
    )
    .to_f64_vec();
    let want = [1.0, 1.5, 2.0, f64::NAN, f64::NAN, f64::NAN, 4.0, 4.0];
    assert_close(&got, &want, 0.0, "linear with NaN");
    let inf = HostTensor::from_vec(vec![f32::INFINITY, 1.0], &[2]).unwrap();
    let got = run(
        &attrs(&[4], &[2.0], ResizeMode::Nearest, ResizeCoord::HalfPixel),
        &inf,
    )
    .to_f64_vec();
    assert_eq!(got, vec![f64::INFINITY, f64::INFINITY, 1.0, 1.0]);
}

#[test]
fn empty_and_identity_axes() {
    let x = rand::<f32>(&[0, 3, 4], 1);
    let a = attrs(
        &[0, 3, 8],
        &[1.0, 1.0, 2.0],
        ResizeMode::Linear,
        ResizeCoord::HalfPixel,
    );
    let got = run(&a, &x);
    assert_eq!(got.shape(), &[0, 3, 8]);
    let x = rand::<f32>(&[2, 3], 1);
    let got = run(
        &attrs(
            &[2, 0],
            &[1.0, 0.1],
            ResizeMode::Cubic,
            ResizeCoord::HalfPixel,
        ),
        &x,
    );
    assert_eq!(got.shape(), &[2, 0]);
    // All-identity resize returns the values unchanged, for every transform.
    for coord in coords() {
        let coord = with_roi(&coord, 2);
        let coord = match coord {
            ResizeCoord::TfCropAndResize { extrapolation, .. } => ResizeCoord::TfCropAndResize {
                roi: vec![(0.0, 1.0); 2],
                extrapolation,
            },
            c => c,
        };
        let got = run(&attrs(&[2, 3], &[1.0, 1.0], ResizeMode::Cubic, coord), &x);
        assert_eq!(got.to_f64_vec(), x.to_f64_vec());
    }
    // Rank 0.
    let s = HostTensor::scalar(3.5f64);
    assert_eq!(
        run(
            &attrs(&[], &[], ResizeMode::Linear, ResizeCoord::HalfPixel),
            &s
        )
        .to_f64_vec(),
        vec![3.5]
    );
    assert_eq!(
        run(
            &attrs(&[], &[], ResizeMode::Nearest, ResizeCoord::HalfPixel),
            &s
        )
        .to_f64_vec(),
        vec![3.5]
    );
}

#[test]
fn bad_attributes_and_dtypes_are_errors() {
    let x = rand::<f32>(&[2, 3], 1);
    let xi = HostTensor::from_vec(vec![1i64; 6], &[2, 3]).unwrap();
    let err = |a: ResizeAttrs, t: &HostTensor| eval(&Op::Resize(a), &[t]).expect_err("should fail");
    let ok = attrs(
        &[4, 6],
        &[2.0, 2.0],
        ResizeMode::Linear,
        ResizeCoord::HalfPixel,
    );
    assert!(
        matches!(err(ok.clone(), &xi), Error::DType(m) if m.contains("resize") && m.contains("float"))
    );
    assert!(matches!(
        err(
            ResizeAttrs {
                out_shape: vec![4],
                ..ok.clone()
            },
            &x
        ),
        Error::Shape(_)
    ));
    assert!(matches!(
        err(
            ResizeAttrs {
                scales: vec![2.0],
                ..ok.clone()
            },
            &x
        ),
        Error::Shape(_)
    ));
    for bad in [0.0, -1.0, f64::NAN, f64::INFINITY] {
        assert!(
            matches!(
                err(
                    ResizeAttrs {
                        scales: vec![2.0, bad],
                        ..ok.clone()
                    },
                    &x
                ),
                Error::Value(_)
            ),
            "{bad}"
        );
    }
    let crop = ResizeCoord::TfCropAndResize {
        roi: vec![(0.0, 1.0)],
        extrapolation: 0.0,
    };
    assert!(
        matches!(err(ResizeAttrs { coord: crop, ..ok.clone() }, &x), Error::Value(m) if m.contains("roi"))
    );
    let e = rand::<f32>(&[0, 3], 1);
    assert!(matches!(err(ok.clone(), &e), Error::Shape(m) if m.contains("empty")));
    assert!(matches!(
        eval(&Op::Resize(ok), &[&x, &x]),
        Err(Error::Graph(_))
    ));
    // An antialias scale so small that the stretched kernel cannot be held.
    let mut tiny = attrs(
        &[1, 3],
        &[1e-300, 1.0],
        ResizeMode::Linear,
        ResizeCoord::HalfPixel,
    );
    tiny.antialias = true;
    assert!(matches!(err(tiny, &x), Error::Unsupported(m) if m.contains("antialias")));
}

#[test]
fn print_and_hash_cover_every_attribute() {
    let base = attrs(
        &[1, 3, 8, 8],
        &[1.0, 1.0, 2.0, 2.0],
        ResizeMode::Cubic,
        ResizeCoord::HalfPixel,
    );
    let text = op_attrs(&Op::Resize(base.clone()));
    assert!(
        text.contains("out_shape=[1, 3, 8, 8]")
            && text.contains("mode=Cubic")
            && text.contains("cubic_a=-0.75"),
        "{text}"
    );
    let hash = |a: &ResizeAttrs| {
        let mut g = Graph::new();
        let x = g.input(
            "x",
            TensorType::new(DType::F32, [1usize, 3, 4, 4].as_slice()),
        );
        let y = g.add(Op::Resize(a.clone()), &[x]).unwrap();
        g.output(y);
        structural_hash(&g)
    };
    let h0 = hash(&base);
    let variants = [
        ResizeAttrs {
            scales: vec![1.0, 1.0, 2.0, 2.0000001],
            ..base.clone()
        },
        ResizeAttrs {
            mode: ResizeMode::Linear,
            ..base.clone()
        },
        ResizeAttrs {
            coord: ResizeCoord::AlignCorners,
            ..base.clone()
        },
        ResizeAttrs {
            coord: ResizeCoord::TfCropAndResize {
                roi: vec![(0.0, 1.0); 4],
                extrapolation: 0.0,
            },
            ..base.clone()
        },
        ResizeAttrs {
            coord: ResizeCoord::TfCropAndResize {
                roi: vec![(0.0, 1.0); 4],
                extrapolation: 1.0,
            },
            ..base.clone()
        },
        ResizeAttrs {
            nearest: ResizeNearest::Ceil,
            ..base.clone()
        },
        ResizeAttrs {
            cubic_a: -0.5,
            ..base.clone()
        },
        ResizeAttrs {
            exclude_outside: true,
            ..base.clone()
        },
        ResizeAttrs {
            antialias: true,
            ..base.clone()
        },
    ];
    let mut seen = vec![h0];
    for v in &variants {
        let h = hash(v);
        assert!(!seen.contains(&h), "{v:?} hashes like another variant");
        seen.push(h);
    }
    assert_eq!(hash(&base.clone()), h0);
}
