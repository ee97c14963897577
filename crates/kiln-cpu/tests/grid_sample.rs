//! GridSample kernel against values from ONNX's Python reference (every mode, padding and
//! align_corners, with grid points inside, on and far outside the borders) and against a
//! per-element port of that reference on random data: f32/f64/f16, strided inputs, a grid of
//! another float dtype, NaN, empty outputs and the errors.

mod hot_common;

use hot_common::{assert_close, rand, stored_permuted};
use kiln_cpu::eval;
use kiln_ir::{
    Error, GridSampleAttrs, GridSampleMode, GridSamplePadding, HostTensor, Op, op_attrs,
};

#[rustfmt::skip]
mod onnx_values {
    use super::{GridSampleMode, GridSamplePadding};
    /// x `[1, 2, 3, 4]`.
    pub const X: [f64; 24] = [
        2.0, 1.2432199365413288, -0.4544041893861742, -1.8081442840341224,
        -1.793516832668294, -0.4215915988615594, 1.2693857518852694, 1.9997172727668302,
        1.216702629064509, -0.4870883074715822, -1.8222605237693539, -1.7783823052507217,
        -0.3886598129106696, 1.2951926773077547, 1.9988691710020094, 1.189841326619784,
        -0.5196347124275117, -1.8358615608285864, -1.7627449807244693, -0.3556181422462313,
        1.3206334164881603, 1.9974559344870029, 1.1626436236288713, -0.5520342024989341,
    ];
    pub const GRID: [f64; 20] = [-1.0, -1.0, 1.0, 1.0, 0.1, -0.3, -1.7, 0.4, 2.3, -0.95, 0.5, 3.1, -2.9, -1.2, 0.75, 0.25, -0.25, 0.8, 1.05, -0.6,];
    /// (mode, padding, align_corners, output [1, 2, 2, 5]) from ONNX's Python reference.
    pub const EXPECTED: [(GridSampleMode, GridSamplePadding, bool, [f64; 20]); 18] = [
        (GridSampleMode::Bilinear, GridSamplePadding::Zeros, false, [
            0.5, -0.44459557631268043, 0.443848288791286, 0.0, 0.0,
            0.0, 0.0, 0.5829299310102483, -0.3896706227510853, -0.5709433690293532,
            -0.0971649532276674, -0.13800855062473352, -0.17707920038351682, 0.0, 0.0,
            0.0, 0.0, -0.42927416484099484, 1.5979646523434812, 0.4141182390675555,
        ]),
        (GridSampleMode::Bilinear, GridSamplePadding::Zeros, true, [
            2.0, -1.7783823052507217, 0.5162098293035465, 0.0, 0.0,
            0.0, 0.0, 0.8456730550283815, -0.5652317324503007, -0.26362470197637106,
            -0.3886598129106696, -0.5520342024989341, -0.7260602932122482, 0.0, 0.0,
            0.0, 0.0, -0.6397255344319296, 1.1491389414655304, 0.5287832206638677,
        ]),
        (GridSampleMode::Bilinear, GridSamplePadding::Border, false, [
            2.0, -1.7783823052507217, 0.443848288791286, 0.012614916140612524, -1.8081442840341224,
            -1.8003214145100377, 2.0, 0.5829299310102483, -0.4870883074715822, -1.427358082264697,
            -0.3886598129106696, -0.5520342024989341, -0.17707920038351682, 0.5845262087973028, 1.189841326619784,
            0.3053047105649686, -0.3886598129106696, -0.42927416484099484, 1.9974559344870029, 1.0352953508352425,
        ]),
        (GridSampleMode::Bilinear, GridSamplePadding::Border, true, [
            2.0, -1.7783823052507217, 0.5162098293035465, -0.5894291197443974, -1.6177511831494098,
            -1.8112909691396957, 2.0, 0.8456730550283815, -0.5652317324503007, -0.28499969250401674,
            -0.3886598129106696, -0.5520342024989341, -0.7260602932122482, 0.2164724952633459, 1.1125683387275132,
            0.73397416709692, -0.3886598129106696, -0.6397255344319296, 1.1491389414655304, 0.5716575653217564,
        ]),
        (GridSampleMode::Bilinear, GridSamplePadding::Reflection, false, [
            2.0, -1.7783823052507217, 0.443848288791286, -0.4135391601269334, 1.318897870715025,
            -1.1312742367101483, -1.8081442840341224, 0.5829299310102483, -0.4870883074715822, -1.427358082264697,
            -0.3886598129106696, -0.5520342024989341, -0.17707920038351682, 0.4761687487289832, 1.1268075888705995,
            1.5943552488108967, 1.189841326619784, -0.42927416484099484, 1.9974559344870029, 1.0352953508352425,
        ]),
        (GridSampleMode::Bilinear, GridSamplePadding::Reflection, true, [
            2.0, -1.7783823052507217, 0.5162098293035465, -0.42376442385296903, 1.0835693516270253,
            -0.568358642614338, -0.9060330310913645, 0.8456730550283815, -0.5652317324503007, -0.24599130697626556,
            -0.3886598129106696, -0.5520342024989341, -0.7260602932122482, -0.31703738799656717, 1.172247501279402,
            1.4758549677035522, 0.9356190178450221, -0.6397255344319296, 1.1491389414655304, 0.5658500102898876,
        ]),
        (GridSampleMode::Nearest, GridSamplePadding::Zeros, false, [
            2.0, 0.0, 1.2693857518852694, 0.0, 0.0,
            0.0, 0.0, 1.9997172727668302, -0.4870883074715822, 0.0,
            -0.3886598129106696, 0.0, -1.7627449807244693, 0.0, 0.0,
            0.0, 0.0, -0.3556181422462313, 1.9974559344870029, 0.0,
        ]),
        (GridSampleMode::Nearest, GridSamplePadding::Zeros, true, [
            2.0, -1.7783823052507217, 1.2693857518852694, 0.0, 0.0,
            0.0, 0.0, 1.9997172727668302, -0.4870883074715822, -1.8081442840341224,
            -0.3886598129106696, -0.5520342024989341, -1.7627449807244693, 0.0, 0.0,
            0.0, 0.0, -0.3556181422462313, 1.9974559344870029, 1.189841326619784,
        ]),
        (GridSampleMode::Nearest, GridSamplePadding::Border, false, [
            2.0, -1.7783823052507217, 1.2693857518852694, 1.216702629064509, -1.8081442840341224,
            -1.8222605237693539, 2.0, 1.9997172727668302, -0.4870883074715822, -1.8081442840341224,
            -0.3886598129106696, -0.5520342024989341, -1.7627449807244693, 1.3206334164881603, 1.189841326619784,
            1.1626436236288713, -0.3886598129106696, -0.3556181422462313, 1.9974559344870029, 1.189841326619784,
        ]),
        (GridSampleMode::Nearest, GridSamplePadding::Border, true, [
            2.0, -1.7783823052507217, 1.2693857518852694, -1.793516832668294, -1.8081442840341224,
            -1.8222605237693539, 2.0, 1.9997172727668302, -0.4870883074715822, -1.8081442840341224,
            -0.3886598129106696, -0.5520342024989341, -1.7627449807244693, -0.5196347124275117, 1.189841326619784,
            1.1626436236288713, -0.3886598129106696, -0.3556181422462313, 1.9974559344870029, 1.189841326619784,
        ]),
        (GridSampleMode::Nearest, GridSamplePadding::Reflection, false, [
            2.0, -1.7783823052507217, 1.2693857518852694, -0.4870883074715822, 1.2432199365413288,
            -0.4544041893861742, -1.8081442840341224, 1.9997172727668302, -0.4870883074715822, -1.8081442840341224,
            -0.3886598129106696, -0.5520342024989341, -1.7627449807244693, 1.9974559344870029, 1.2951926773077547,
            1.9988691710020094, 1.189841326619784, -0.3556181422462313, 1.9974559344870029, 1.189841326619784,
        ]),
        (GridSampleMode::Nearest, GridSamplePadding::Reflection, true, [
            2.0, -1.7783823052507217, 1.2693857518852694, -0.4215915988615594, 1.2432199365413288,
            -0.4544041893861742, -1.8081442840341224, 1.9997172727668302, -0.4870883074715822, -1.8081442840341224,
            -0.3886598129106696, -0.5520342024989341, -1.7627449807244693, -1.8358615608285864, 1.2951926773077547,
            1.9988691710020094, 1.189841326619784, -0.3556181422462313, 1.9974559344870029, 1.189841326619784,
        ]),
        (GridSampleMode::Bicubic, GridSamplePadding::Zeros, false, [
            0.7320044909076981, -0.6256704835169915, 0.7414297937165297, 0.0006276858341373647, 0.0,
            0.0, 0.0, 0.9393900025004306, -0.40764844697439323, -0.7038868254687146,
            -0.1963239751038895, -0.2550288128588339, -0.44236244211506154, -0.004993604953036674, 0.0,
            0.0, 0.0, -0.6325751980561455, 2.0139020033086332, 0.3938610219382744,
        ]),
        (GridSampleMode::Bicubic, GridSamplePadding::Zeros, true, [
            2.0, -1.7783823052507217, 0.8220007232072235, 0.03207177761966508, 0.00305148890618515,
            0.0, 0.0, 1.4455800574142712, -0.7447908869216473, -0.2695415485802602,
            -0.3886598129106696, -0.5520342024989341, -1.2270494467618283, -0.009318122447064042, -0.002083785862092858,
            0.0, 0.0, -0.9762737346713024, 1.3949022680234875, 0.6977476811654072,
        ]),
        (GridSampleMode::Bicubic, GridSamplePadding::Border, false, [
            2.44529965791365, -2.134498838681545, 0.7303431526257482, -0.22439623972221598, -2.2094420537416046,
            -1.925493809787954, 2.0, 1.0566173517235007, -0.49337619185394693, -1.4703975385057984,
            -0.5606099718510285, -0.7586369906571209, -0.6070279419893381, 0.5971792887824252, 1.3527120398263224,
            0.22704105642201883, -0.3886598129106696, -0.5961862247468895, 2.365455079276983, 1.0644393426106882,
        ]),
        (GridSampleMode::Bicubic, GridSamplePadding::Border, true, [
            2.0, -1.7783823052507217, 0.8118068633835586, -1.0352519795472963, -1.651717189291373,
            -1.953138309573882, 2.0, 1.3488427027788616, -0.6728536189393275, -0.058670381107484376,
            -0.3886598129106696, -0.5520342024989341, -1.3194172459153248, 0.18024365467860848, 1.1294359978199242,
            0.6861153177359718, -0.3886598129106696, -0.9126562737145111, 1.205169179860019, 0.6043451494081625,
        ]),
        (GridSampleMode::Bicubic, GridSamplePadding::Reflection, false, [
            2.9280179636307926, -2.502681934067966, 0.7303431526257482, -0.5572958135125967, 1.783256981415774,
            -1.8165494650392517, -2.5176902912736328, 1.0566173517235007, -0.4949480926227281, -1.6824758130418704,
            -0.7852959004155581, -1.0201152514353355, -0.6070279419893381, 0.34238868189861893, 1.636123799012197,
            2.1231709043035165, 1.2059898470788843, -0.5961862247468895, 2.45745351470595, 0.9553173058041717,
        ]),
        (GridSampleMode::Bicubic, GridSamplePadding::Reflection, true, [
            2.0, -1.7783823052507217, 0.7885794879912227, -0.6001915156112247, 1.1457913402685302,
            -0.9076979192866238, -1.3779408659646857, 1.3023496814286009, -0.7300152189559729, -0.4632491364588239,
            -0.3886598129106696, -0.5520342024989341, -1.131521651935637, -0.4517684922064962, 1.356553260851255,
            1.778739817024299, 1.1064403922201, -0.791608314514598, 1.580866208297969, 0.7731269844295707,
        ]),
    ];
}
use onnx_values::{EXPECTED, GRID, X};

const MODES: [GridSampleMode; 3] = [
    GridSampleMode::Bilinear,
    GridSampleMode::Nearest,
    GridSampleMode::Bicubic,
];
const PADS: [GridSamplePadding; 3] = [
    GridSamplePadding::Zeros,
    GridSamplePadding::Border,
    GridSamplePadding::Reflection,
];

fn run(a: GridSampleAttrs, x: &HostTensor, g: &HostTensor) -> kiln_ir::Result<HostTensor> {
    eval(&Op::GridSample(a), &[x, g])
}

// ---- the naive reference: ONNX's GridSample `_run`, one output element at a time ----

fn reflect(x: f64, lo: f64, hi: f64) -> f64 {
    let rng = hi - lo;
    // ONNX's reference divides by zero here (a size-1 axis with align_corners); PyTorch gives lo.
    if rng == 0.0 {
        return lo;
    }
    if x < lo {
        let dx = lo - x;
        let n = (dx / rng) as i64;
        let r = dx - n as f64 * rng;
        if n % 2 == 0 { lo + r } else { hi - r }
    } else if x > hi {
        let dx = x - hi;
        let n = (dx / rng) as i64;
        let r = dx - n as f64 * rng;
        if n % 2 == 0 { hi - r } else { lo + r }
    } else {
        x
    }
}

/// `plane[i]` (1-D) with ONNX's padding rules for an integer index.
fn pixel_1d(plane: &[f64], i: i64, pad: GridSamplePadding, lo: f64, hi: f64) -> f64 {
    let d = plane.len() as i64;
    match pad {
        GridSamplePadding::Zeros => {
            if i >= 0 && i < d {
                plane[i as usize]
            } else {
                0.0
            }
        }
        GridSamplePadding::Border => plane[i.clamp(0, d - 1) as usize],
        GridSamplePadding::Reflection => plane[reflect(i as f64, lo, hi) as i64 as usize],
    }
}

/// 1-D interpolation of `plane` at `x` (linear: 2 taps, cubic: 4 taps).
fn interp_1d(
    plane: &[f64],
    x: f64,
    mode: GridSampleMode,
    pad: GridSamplePadding,
    lo: f64,
    hi: f64,
) -> f64 {
    let x0 = x.floor() as i64;
    let t = x - x0 as f64;
    if mode == GridSampleMode::Bilinear {
        return (1.0 - t) * pixel_1d(plane, x0, pad, lo, hi)
            + t * pixel_1d(plane, x0 + 1, pad, lo, hi);
    }
    let a = -0.75;
    let c = [
        ((a * (t + 1.0) - 5.0 * a) * (t + 1.0) + 8.0 * a) * (t + 1.0) - 4.0 * a,
        ((a + 2.0) * t - (a + 3.0)) * t * t + 1.0,
        ((a + 2.0) * (1.0 - t) - (a + 3.0)) * (1.0 - t) * (1.0 - t) + 1.0,
        ((a * (2.0 - t) - 5.0 * a) * (2.0 - t) + 8.0 * a) * (2.0 - t) - 4.0 * a,
    ];
    (0..4)
        .map(|k| c[k] * pixel_1d(plane, x0 - 1 + k as i64, pad, lo, hi))
        .sum()
}

fn naive(a: GridSampleAttrs, x: &HostTensor, g: &HostTensor) -> Vec<f64> {
    let (xs, gs) = (x.shape(), g.shape());
    let (n, c, h, w) = (xs[0], xs[1], xs[2], xs[3]);
    let (gh, gw) = (gs[1], gs[2]);
    let (xv, gv) = (x.to_f64_vec(), g.to_f64_vec());
    let bounds = |len: usize| {
        if a.align_corners {
            (0.0, len as f64 - 1.0)
        } else {
            (-0.5, len as f64 - 0.5)
        }
    };
    let denorm = |v: f64, len: usize| {
        let l = len as f64;
        if a.align_corners {
            (v + 1.0) / 2.0 * (l - 1.0)
        } else {
            ((v + 1.0) * l - 1.0) / 2.0
        }
    };
    let mut out = Vec::with_capacity(n * c * gh * gw);
    for b in 0..n {
        for ch in 0..c {
            let plane = &xv[(b * c + ch) * h * w..][..h * w];
            for p in 0..gh * gw {
                // the grid holds (x, y); axis 0 of the plane is y
                let mut pos = [
                    denorm(gv[(b * gh * gw + p) * 2 + 1], h),
                    denorm(gv[(b * gh * gw + p) * 2], w),
                ];
                let dims = [h, w];
                if a.mode == GridSampleMode::Nearest {
                    pos = pos.map(|v| v.round_ties_even());
                }
                for k in 0..2 {
                    let (lo, hi) = bounds(dims[k]);
                    if pos[k] < lo || pos[k] > hi {
                        pos[k] = match a.padding {
                            GridSamplePadding::Border => pos[k].clamp(0.0, dims[k] as f64 - 1.0),
                            GridSamplePadding::Reflection => reflect(pos[k], lo, hi),
                            GridSamplePadding::Zeros => pos[k],
                        };
                    }
                }
                let (ylo, yhi) = bounds(h);
                let (xlo, xhi) = bounds(w);
                let v = if a.mode == GridSampleMode::Nearest {
                    let (iy, ix) = (pos[0] as i64, pos[1] as i64);
                    let row: Vec<f64> = match a.padding {
                        GridSamplePadding::Zeros if iy < 0 || iy >= h as i64 => vec![0.0; w],
                        GridSamplePadding::Zeros => plane[iy as usize * w..][..w].to_vec(),
                        GridSamplePadding::Border => {
                            plane[iy.clamp(0, h as i64 - 1) as usize * w..][..w].to_vec()
                        }
                        GridSamplePadding::Reflection => {
                            plane[reflect(iy as f64, ylo, yhi) as i64 as usize * w..][..w].to_vec()
                        }
                    };
                    pixel_1d(&row, ix, a.padding, xlo, xhi)
                } else {
                    // rows first (inner axis), then along y, as the reference recursion does
                    let col: Vec<f64> = (0..h)
                        .map(|r| {
                            interp_1d(&plane[r * w..][..w], pos[1], a.mode, a.padding, xlo, xhi)
                        })
                        .collect();
                    interp_1d(&col, pos[0], a.mode, a.padding, ylo, yhi)
                };
                out.push(v);
            }
        }
    }
    out
}

#[test]
fn matches_onnx_reference_values() {
    let x = HostTensor::from_vec(X.to_vec(), &[1, 2, 3, 4]).unwrap();
    let g = HostTensor::from_vec(GRID.to_vec(), &[1, 2, 5, 2]).unwrap();
    for (mode, padding, align_corners, want) in EXPECTED {
        let a = GridSampleAttrs {
            mode,
            padding,
            align_corners,
        };
        let got = run(a, &x, &g).unwrap();
        assert_eq!(got.shape(), &[1, 2, 2, 5]);
        // The reference denormalizes in f32, hence the tolerance.
        assert_close(&got.to_f64_vec(), &want, 1e-5, &format!("{a:?}"));
        assert_close(&naive(a, &x, &g), &want, 1e-5, &format!("naive {a:?}"));
    }
}

/// Grid points spread over [-2.5, 2.5] (outside on every side), plus exact borders.
fn grid(shape: &[usize], seed: u64) -> HostTensor {
    let mut v = rand::<f64>(shape, seed).to_vec::<f64>().unwrap();
    v.iter_mut().for_each(|p| *p *= 2.5);
    for (i, b) in [-1.0, 1.0, 0.0, -1.0].into_iter().enumerate() {
        if i < v.len() {
            v[i] = b;
        }
    }
    HostTensor::from_vec(v, shape).unwrap()
}

#[test]
fn matches_naive_in_every_mode_f64_f32_f16() {
    for (xs, gs) in [
        ([2, 3, 5, 7], [2, 4, 6, 2]),
        ([1, 2, 1, 4], [1, 3, 3, 2]),
        ([2, 1, 6, 1], [2, 2, 5, 2]),
    ] {
        let (x, g) = (rand::<f64>(&xs, 3), grid(&gs, 4));
        for mode in MODES {
            for padding in PADS {
                for align_corners in [false, true] {
                    let a = GridSampleAttrs {
                        mode,
                        padding,
                        align_corners,
                    };
                    let what = format!("{a:?} x {xs:?}");
                    let got = run(a, &x, &g).unwrap();
                    assert_eq!(got.shape(), &[xs[0], xs[1], gs[1], gs[2]]);
                    assert_close(&got.to_f64_vec(), &naive(a, &x, &g), 1e-12, &what);
                    let x32 = rand::<f32>(&xs, 3);
                    let got = run(a, &x32, &g).unwrap();
                    assert_eq!(got.dtype(), kiln_ir::DType::F32);
                    assert_close(&got.to_f64_vec(), &naive(a, &x32, &g), 1e-6, &what);
                    let x16 = rand::<half::f16>(&xs, 3);
                    let g16 = grid(&gs, 4)
                        .to_vec::<f64>()
                        .unwrap()
                        .into_iter()
                        .map(half::f16::from_f64);
                    let g16 = HostTensor::from_vec(g16.collect::<Vec<_>>(), &gs).unwrap();
                    assert_close(
                        &run(a, &x16, &g16).unwrap().to_f64_vec(),
                        &naive(a, &x16, &g16),
                        2e-3,
                        &what,
                    );
                }
            }
        }
    }
}

#[test]
fn strided_inputs_match_dense_ones() {
    let (x, g) = (rand::<f64>(&[2, 3, 4, 5], 8), grid(&[2, 3, 4, 2], 9));
    let (px, pg) = (
        stored_permuted(&x, &[1, 3, 0, 2]),
        stored_permuted(&g, &[3, 0, 2, 1]),
    );
    for mode in MODES {
        let a = GridSampleAttrs {
            mode,
            padding: GridSamplePadding::Reflection,
            align_corners: false,
        };
        assert_eq!(
            run(a, &px, &pg).unwrap().to_f64_vec(),
            run(a, &x, &g).unwrap().to_f64_vec(),
            "{mode:?}"
        );
    }
}

#[test]
fn nan_grid_gives_nan_and_empty_outputs_work() {
    let x = rand::<f32>(&[1, 2, 3, 3], 1);
    let g = HostTensor::from_vec(vec![f32::NAN, 0.0, 0.2, 0.2], &[1, 1, 2, 2]).unwrap();
    for mode in MODES {
        for padding in PADS {
            let a = GridSampleAttrs {
                mode,
                padding,
                align_corners: false,
            };
            let v = run(a, &x, &g).unwrap().to_f64_vec();
            assert!(v[0].is_nan() && v[2].is_nan(), "{a:?}: {v:?}");
            assert!(v[1].is_finite() && v[3].is_finite(), "{a:?}: {v:?}");
        }
    }
    // An infinite coordinate reads zeros or the clamped edge.
    let g = HostTensor::from_vec(vec![f32::INFINITY, 0.0], &[1, 1, 1, 2]).unwrap();
    let a = GridSampleAttrs {
        mode: GridSampleMode::Bilinear,
        padding: GridSamplePadding::Zeros,
        align_corners: true,
    };
    assert_eq!(run(a, &x, &g).unwrap().to_f64_vec(), vec![0.0, 0.0]);
    let a = GridSampleAttrs {
        padding: GridSamplePadding::Border,
        ..a
    };
    let xv = x.to_f64_vec();
    assert_eq!(run(a, &x, &g).unwrap().to_f64_vec(), vec![xv[5], xv[14]]);
    let e = run(a, &x, &rand::<f32>(&[1, 0, 4, 2], 1)).unwrap();
    assert_eq!(e.shape(), &[1, 2, 0, 4]);
    let e = run(
        a,
        &rand::<f32>(&[0, 2, 3, 3], 1),
        &rand::<f32>(&[0, 2, 2, 2], 1),
    )
    .unwrap();
    assert_eq!(e.shape(), &[0, 2, 2, 2]);
}

#[test]
fn bad_shapes_and_dtypes_are_errors() {
    let a = GridSampleAttrs {
        mode: GridSampleMode::Bilinear,
        padding: GridSamplePadding::Zeros,
        align_corners: false,
    };
    let (x, g) = (rand::<f32>(&[2, 3, 4, 4], 1), rand::<f32>(&[2, 5, 5, 2], 2));
    assert!(run(a, &x, &g).is_ok());
    assert!(matches!(
        run(a, &x, &rand::<f32>(&[2, 5, 5, 3], 2)),
        Err(Error::Shape(_))
    ));
    assert!(matches!(
        run(a, &x, &rand::<f32>(&[1, 5, 5, 2], 2)),
        Err(Error::Shape(_))
    ));
    assert!(matches!(
        run(a, &rand::<f32>(&[2, 3, 4], 1), &g),
        Err(Error::Shape(_))
    ));
    let xi = HostTensor::from_vec(vec![1i64; 96], &[2, 3, 4, 4]).unwrap();
    assert!(matches!(run(a, &xi, &g), Err(Error::DType(_))));
    let gi = HostTensor::from_vec(vec![0i32; 100], &[2, 5, 5, 2]).unwrap();
    assert!(matches!(run(a, &x, &gi), Err(Error::DType(_))));
    assert!(matches!(
        eval(&Op::GridSample(a), &[&x]),
        Err(Error::Graph(_))
    ));
    assert_eq!(
        op_attrs(&Op::GridSample(GridSampleAttrs {
            align_corners: true,
            ..a
        })),
        "mode=Bilinear padding=Zeros align_corners"
    );
}
