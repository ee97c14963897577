//! The compiled Conv2d extern against the reference interpreter: graphs with one convolution
//! (strides, asymmetric padding, dilation, 1x1/3x3/7x7 kernels, groups, depthwise, bias,
//! batches, non-contiguous inputs, odd and 1x1 outputs, relu/add epilogues) are scheduled
//! with externs, run through `Executable` and compared with `kiln_cpu::run`.

mod hot_common;

use kiln_ir::{
    BinaryOp, Conv2dAttrs, DType, Graph, HostTensor, NodeId, Op, Shape, SliceAxis, TensorType,
    UnaryOp,
};
use kiln_cpu::compiled::{Executable, InterpKernels};
use kiln_sched::{ExternOp, ScheduleOptions, StepKind, schedule};
use std::sync::Arc;

/// Deterministic f32 values in [-1, 1).
fn tensor(shape: &[usize], seed: u64) -> HostTensor {
    hot_common::rand::<f32>(shape, seed)
}

/// How the conv's input reaches it.
#[derive(Clone, Copy, Debug)]
enum View {
    /// A dense `[N, C, H, W]` input.
    Dense,
    /// An `[N, H, C, W]` input permuted to NCHW (channel stride not H*W).
    ChannelsInside,
    /// An `[N, W, C, H]` input permuted to NCHW (innermost stride not 1).
    Transposed,
    /// Every other column of an `[N, C, H, 2W]` input.
    EveryOtherColumn,
}

/// What runs after the conv (the extern's fused epilogue).
#[derive(Clone, Copy, Debug, PartialEq)]
enum After {
    Nothing,
    Relu,
    /// `relu(conv + skip)` with `skip` a graph input.
    AddRelu,
}

struct Case {
    x: [usize; 4],
    o: usize,
    k: [usize; 2],
    attrs: Conv2dAttrs,
    bias: bool,
    view: View,
    after: After,
}

fn attrs(stride: usize, padding: [usize; 4], dilation: usize, groups: usize) -> Conv2dAttrs {
    Conv2dAttrs {
        stride: [stride, stride],
        padding,
        dilation: [dilation, dilation],
        groups,
        channels_last: false,
    }
}

fn case(x: [usize; 4], o: usize, k: usize, attrs: Conv2dAttrs) -> Case {
    Case {
        x,
        o,
        k: [k, k],
        attrs,
        bias: true,
        view: View::Dense,
        after: After::Nothing,
    }
}

/// The graph input holding `x` (NCHW) seen through `view`, and the tensor to feed it.
fn conv_input(g: &mut Graph, x: [usize; 4], view: View) -> (NodeId, HostTensor) {
    let [n, c, h, w] = x;
    let mut input = |shape: &[usize]| {
        let id = g.input("x", TensorType::new(DType::F32, Shape::fixed(shape)));
        (id, tensor(shape, 1))
    };
    match view {
        View::Dense => input(&x),
        View::ChannelsInside => {
            let (id, t) = input(&[n, h, c, w]);
            (g.add(Op::Permute(vec![0, 2, 1, 3]), &[id]).unwrap(), t)
        }
        View::Transposed => {
            let (id, t) = input(&[n, w, c, h]);
            (g.add(Op::Permute(vec![0, 2, 3, 1]), &[id]).unwrap(), t)
        }
        View::EveryOtherColumn => {
            let (id, t) = input(&[n, c, h, 2 * w]);
            let all = SliceAxis {
                start: 0,
                end: i64::MAX,
                step: 1,
            };
            let odd = SliceAxis {
                start: 1,
                end: i64::MAX,
                step: 2,
            };
            let s = Op::Slice(vec![all, all, all, odd]);
            (g.add(s, &[id]).unwrap(), t)
        }
    }
}

/// Builds the case's graph, checks the conv runs as an extern, and compares the compiled
/// result with the interpreter's within a relative 1e-4 (of the outputs' RMS by Winograd);
/// returns the algorithm the conv ran
/// with (see `Executable::packed_algorithms`).
fn check(c: &Case) -> Option<&'static str> {
    let mut algorithm = None;
    let mut g = Graph::new();
    let (x, xt) = conv_input(&mut g, c.x, c.view);
    let cg = c.x[1] / c.attrs.groups;
    let w = g.constant(tensor(&[c.o, cg, c.k[0], c.k[1]], 2));
    let mut args = vec![x, w];
    if c.bias {
        args.push(g.constant(tensor(&[c.o], 3)));
    }
    let mut y = g.add(Op::Conv2d(c.attrs), &args).unwrap();
    let dims = g.ty(y).shape.as_fixed().unwrap();
    let mut inputs = vec![xt];
    if c.after == After::AddRelu {
        let skip = g.input("skip", TensorType::new(DType::F32, Shape::fixed(&dims)));
        inputs.push(tensor(&dims, 4));
        y = g.add(Op::Binary(BinaryOp::Add), &[y, skip]).unwrap();
    }
    if c.after != After::Nothing {
        y = g.add(Op::Unary(UnaryOp::Relu), &[y]).unwrap();
    }
    g.output(y);

    let want = kiln_cpu::run(&g, &inputs).unwrap();
    for fuse in [true, false] {
        let opts = ScheduleOptions {
            fuse,
            ..ScheduleOptions::default()
        };
        let (prog, rep) = schedule(&g, &opts).unwrap();
        let conv = prog.steps.iter().enumerate().find_map(|(i, s)| match &s.kind {
            StepKind::Extern {
                op: ExternOp::Conv2d(_),
                inputs,
                epilogue,
                ..
            } => Some((i, inputs, epilogue.is_some())),
            _ => None,
        });
        let Some((conv_step, conv_inputs, has_epilogue)) = conv else {
            panic!("no conv extern for {:?}\n{rep}", c.x);
        };
        if fuse {
            assert_eq!(has_epilogue, c.after != After::Nothing, "{rep}");
        }
        assert_eq!(conv_inputs.len(), if c.bias { 3 } else { 2 }, "{rep}");
        // The views must reach the extern as they lie (not copied dense first).
        let x_view = &conv_inputs[0];
        let dense = kiln_ir::data::contiguous_strides(&x_view.shape);
        let is_dense = x_view
            .strides
            .iter()
            .zip(&dense)
            .all(|(&s, &d)| s as isize == d);
        assert_eq!(
            is_dense,
            matches!(c.view, View::Dense),
            "{:?} {x_view:?}",
            c.view
        );
        let exe = Executable::new(prog.clone(), Arc::new(InterpKernels)).unwrap();
        algorithm = exe.packed_algorithms()[conv_step];
        let got = exe.run(&inputs).unwrap_or_else(|e| panic!("{e}\n{rep}"));
        let (w, o) = (want[0].to_f64_vec(), got[0].to_f64_vec());
        assert_eq!(want[0].shape(), got[0].shape());
        // Winograd's rounding errors scale with the output's magnitude as a whole, not with
        // each output's (see `conv_winograd`): up to ~3e-5 of the outputs' RMS here.
        let floor = match algorithm {
            Some("conv winograd" | "conv winograd f2") => (w.iter().map(|v| v * v).sum::<f64>() / w.len() as f64).sqrt().max(1.0),
            _ => 1.0,
        };
        for (i, (a, b)) in w.iter().zip(&o).enumerate() {
            assert!(
                (a - b).abs() <= 1e-4 * a.abs().max(b.abs()).max(floor),
                "element {i}: want {a}, got {b}; x {:?} o {} k {:?} {:?} bias {} {:?} {:?} fuse {fuse}",
                c.x,
                c.o,
                c.k,
                c.attrs,
                c.bias,
                c.view,
                c.after,
            );
        }
    }
    algorithm
}

#[test]
fn strides_padding_dilation_kernels() {
    for (k, stride, pad, dil) in [
        (3, 1, [1, 1, 1, 1], 1),
        (3, 2, [1, 1, 1, 1], 1),
        (3, 1, [0, 2, 1, 0], 1),
        (3, 2, [2, 0, 0, 1], 1),
        (3, 1, [2, 2, 2, 2], 2),
        (3, 2, [1, 3, 0, 2], 2),
        (7, 2, [3, 3, 3, 3], 1),
        (7, 1, [0, 0, 0, 0], 1),
        (1, 1, [0, 0, 0, 0], 1),
        (1, 2, [0, 0, 0, 0], 1),
        (1, 1, [1, 0, 0, 1], 1),
    ] {
        for bias in [true, false] {
            check(&Case {
                bias,
                ..case([1, 3, 9, 11], 4, k, attrs(stride, pad, dil, 1))
            });
        }
    }
}

#[test]
fn groups_and_depthwise() {
    for (c, o, groups) in [(4, 6, 2), (6, 6, 6), (5, 10, 5)] {
        for (k, stride, pad, dil) in [
            (3, 1, [1, 1, 1, 1], 1),
            (3, 2, [1, 0, 2, 1], 1),
            (3, 1, [2, 2, 2, 2], 2),
            (7, 2, [3, 3, 3, 3], 1),
            (1, 2, [0; 4], 1),
        ] {
            for bias in [true, false] {
                check(&Case {
                    bias,
                    ..case([1, c, 9, 10], o, k, attrs(stride, pad, dil, groups))
                });
            }
        }
    }
}

#[test]
fn batches_odd_sizes_and_one_pixel_outputs() {
    for groups in [1, 2, 4] {
        // Batch 2, odd 5x7 images.
        check(&case([2, 4, 5, 7], 8, 3, attrs(1, [1, 1, 1, 1], 1, groups)));
        check(&case([2, 4, 5, 7], 8, 3, attrs(2, [0, 1, 1, 0], 1, groups)));
        // A 1x1 output: the window covers the whole (padded) image, or a 1x1 image.
        check(&case([2, 4, 3, 3], 4, 3, attrs(1, [0; 4], 1, groups)));
        check(&case([2, 4, 1, 1], 8, 3, attrs(1, [1, 1, 1, 1], 1, groups)));
        check(&case([2, 4, 1, 1], 8, 1, attrs(1, [0; 4], 1, groups)));
        // A kernel wider than the image where the padding alone is read at the edges.
        check(&case([1, 4, 2, 3], 4, 7, attrs(1, [3, 3, 3, 3], 1, groups)));
    }
}

#[test]
fn non_contiguous_inputs() {
    for view in [
        View::ChannelsInside,
        View::Transposed,
        View::EveryOtherColumn,
    ] {
        for (k, stride, pad, groups, o) in [
            (3, 1, [1, 1, 1, 1], 1, 4),
            (3, 2, [0, 1, 2, 1], 1, 4),
            (1, 1, [0; 4], 1, 4),
            (1, 2, [0; 4], 1, 4),
            (3, 1, [1, 1, 1, 1], 2, 4),
            (3, 1, [1, 1, 1, 1], 4, 4),
            (3, 2, [1, 1, 1, 1], 4, 8),
        ] {
            check(&Case {
                view,
                ..case([2, 4, 5, 7], o, k, attrs(stride, pad, 1, groups))
            });
        }
    }
}

#[test]
fn relu_and_add_epilogues() {
    for after in [After::Relu, After::AddRelu] {
        for (c, o, k, groups, stride, pad) in [
            (3, 5, 3, 1, 1, [1, 1, 1, 1]),
            (3, 5, 3, 1, 2, [1, 0, 0, 1]),
            (4, 8, 1, 1, 1, [0; 4]),
            (4, 8, 1, 1, 2, [0; 4]),
            (4, 4, 3, 4, 1, [1, 1, 1, 1]),
            (4, 4, 3, 2, 2, [1, 1, 1, 1]),
        ] {
            for bias in [true, false] {
                check(&Case {
                    bias,
                    after,
                    view: View::ChannelsInside,
                    ..case([2, c, 7, 5], o, k, attrs(stride, pad, 1, groups))
                });
            }
        }
    }
}

/// Outputs big enough that the extern splits channels into row blocks for the epilogue,
/// adds the bias on the pool, and im2col packs many short rows per task.
#[test]
fn row_blocks_and_many_im2col_rows() {
    for after in [After::Nothing, After::AddRelu] {
        // 130 channels of 46x46: blocks of 128 rows then 2 (with an epilogue).
        check(&Case {
            after,
            ..case([1, 2, 46, 46], 130, 3, attrs(1, [1, 1, 1, 1], 1, 1))
        });
        check(&Case {
            after,
            ..case([1, 130, 46, 46], 130, 3, attrs(1, [1, 1, 1, 1], 1, 130))
        });
        // K = 64*9 rows of 5*7 pixels: more rows than one im2col task takes.
        check(&Case {
            after,
            ..case([1, 64, 5, 7], 8, 3, attrs(1, [1, 1, 1, 1], 1, 1))
        });
    }
}

/// Shapes that reach every tile of the conv tiles (where the CPU has AVX-512 or AVX2, for KxK
/// convs of at least 64 output pixels): AVX-512's 14- and 7-wide tiles, paired 7-wide rows
/// with an odd row left over, single-pixel remainders, AVX2's 6-wide tiles and remainders of
/// 1 to 5, channel panels of 32 / 16 with a partial last one, input channels in blocks of 16
/// with a partial last one, strides 1 and 2 (stride 2 on the AVX2 tiles only over at most 4
/// input channels, else through im2col), padded and unpadded inputs, many tasks per thread;
/// and 1x1 convs beside them.
#[test]
fn tile_widths_channel_panels_and_remainders() {
    for (x, o, k, stride, pad) in [
        ([1, 5, 20, 31], 40, 3, 1, [1, 1, 1, 1]),
        ([2, 3, 11, 7], 33, 3, 1, [1, 1, 1, 1]),
        ([1, 3, 12, 12], 8, 3, 1, [0; 4]),
        ([1, 6, 15, 15], 70, 3, 2, [1, 1, 1, 1]),
        ([1, 4, 11, 6], 31, 3, 1, [1, 1, 1, 1]),
        ([1, 3, 9, 10], 17, 3, 1, [1, 1, 1, 1]),
        ([1, 2, 8, 11], 16, 3, 1, [1, 1, 1, 1]),
        ([1, 3, 18, 19], 20, 3, 2, [1, 1, 1, 1]),
        ([1, 3, 30, 30], 64, 7, 2, [3, 3, 3, 3]),
        ([1, 9, 7, 9], 65, 1, 1, [0; 4]),
        ([2, 16, 13, 5], 32, 1, 2, [0; 4]),
        ([1, 8, 28, 28], 96, 1, 1, [0; 4]),
        // Input channels in blocks of 16 and a part block, over groups of two output rows
        // (an odd one left), 7-wide rows paired on AVX-512, a 5x5 kernel.
        ([1, 37, 9, 10], 20, 3, 1, [1, 1, 1, 1]),
        ([1, 40, 11, 7], 33, 3, 1, [1, 1, 1, 1]),
        ([1, 20, 12, 12], 24, 5, 1, [2, 2, 2, 2]),
        ([1, 33, 17, 17], 16, 3, 2, [1, 1, 1, 1]),
    ] {
        for after in [After::Nothing, After::AddRelu] {
            check(&Case { after, ..case(x, o, k, attrs(stride, pad, 1, 1)) });
        }
        check(&Case { view: View::EveryOtherColumn, bias: false, ..case(x, o, k, attrs(stride, pad, 1, 1)) });
    }
}

/// Convs on kiln's GEMM, whose im2col matrix is built in the GEMM's panels of 16 pixels
/// (`im2col_panels`): stride 2 (rows gathered 8 at a time) with asymmetric padding and more
/// rows than one block of the GEMM takes (K = 576), more columns than one sweep of 8 panels
/// with panels that end inside an output row, a last part panel, dilation, a strided 1x1
/// downsample, a batch, bias on and off, epilogues and non-dense inputs.
#[test]
fn im2col_in_panels_for_the_gemm() {
    for (x, o, k, stride, pad, dil) in [
        ([1, 64, 23, 19], 13, 3, 2, [1, 0, 2, 1], 1),
        ([1, 16, 40, 40], 8, 3, 2, [1, 1, 1, 1], 1),
        ([2, 8, 7, 7], 16, 3, 1, [2, 2, 2, 2], 2),
        ([1, 32, 14, 14], 20, 1, 2, [0; 4], 1),
        ([1, 6, 9, 30], 7, 5, 3, [2, 1, 0, 2], 1),
        // Stride 2 with fewer than 64 output pixels, which AVX-512's conv tiles leave to the
        // GEMM (they take the stride-2 cases above on such a CPU).
        ([1, 24, 13, 11], 10, 3, 2, [1, 1, 1, 1], 1),
    ] {
        for (after, bias, view) in [
            (After::Nothing, true, View::Dense),
            (After::Relu, false, View::ChannelsInside),
            (After::AddRelu, true, View::EveryOtherColumn),
        ] {
            let alg = check(&Case { after, bias, view, ..case(x, o, k, attrs(stride, pad, dil, 1)) });
            if kiln_cpu::gemm::available() {
                #[cfg(target_arch = "x86_64")]
                let avx512 = std::arch::is_x86_feature_detected!("avx512f");
                #[cfg(not(target_arch = "x86_64"))]
                let avx512 = false;
                let tiles_may_take = stride == 2 && k > 1 && avx512;
                assert!(
                    alg == Some("conv packed gemm") || (tiles_may_take && alg == Some("conv tiles")),
                    "{x:?} -> {o}, {k}x{k} stride {stride}: {alg:?}"
                );
            }
        }
    }
}

/// What the Winograd tests run each conv with: epilogue, bias, input view.
const VARIANTS: [(After, bool, View); 4] = [
    (After::Nothing, true, View::Dense),
    (After::Relu, false, View::Dense),
    (After::AddRelu, true, View::EveryOtherColumn),
    (After::Nothing, true, View::ChannelsInside),
];

/// Whether this process runs 3x3 stride-1 convs by Winograd where they fit (where kiln's
/// GEMM runs, unless `KILN_DISABLE_WINOGRAD` is set).
fn winograd_here() -> bool {
    kiln_cpu::gemm::available() && std::env::var_os("KILN_DISABLE_WINOGRAD").is_none()
}

/// 3x3 stride-1 convs by Winograd's F(4x4, 3x3): outputs that end inside a 4x4 tile (tiles
/// cut at the right and bottom edges), tile counts that leave part of the last vector of 8
/// tiles empty, tile rows of 3 to 10 tiles (vectors of tiles from one, two or three rows), asymmetric and no padding, output channels that leave a part tile of the
/// GEMM's 6 rows, more than 256 input channels (the GEMM's depth blocks), batches, bias on
/// and off, epilogues and non-dense inputs. Smaller convs stay on the conv tiles.
#[test]
fn winograd_tiles_edges_and_epilogues() {
    for (x, o, pad) in [
        ([1, 8, 10, 10], 8, [1, 1, 1, 1]),
        ([2, 9, 13, 17], 10, [0, 2, 1, 0]),
        ([1, 16, 12, 12], 13, [0; 4]),
        ([1, 20, 16, 16], 32, [1, 1, 1, 1]),
        ([1, 64, 14, 14], 64, [1, 1, 1, 1]),
        ([1, 300, 10, 11], 8, [1, 1, 1, 1]),
        ([1, 12, 34, 37], 16, [1, 1, 1, 1]),
    ] {
        for (after, bias, view) in VARIANTS {
            let alg = check(&Case { after, bias, view, ..case(x, o, 3, attrs(1, pad, 1, 1)) });
            assert_eq!(alg == Some("conv winograd"), winograd_here(), "{x:?} -> {o}: {alg:?}");
        }
    }
    // Too few channels or pixels for the transforms to pay: the conv tiles.
    for (x, o) in [([1, 4, 16, 16], 16), ([1, 16, 7, 7], 16), ([1, 16, 16, 16], 4)] {
        let alg = check(&case(x, o, 3, attrs(1, [1, 1, 1, 1], 1, 1)));
        assert_ne!(alg, Some("conv winograd"), "{x:?} -> {o}");
    }
}

/// 3x3 stride-1 convs on maps too small for F(4x4, 3x3) (under 100 output pixels) with at
/// least 64 input and output channels, by Winograd's F(2x2, 3x3): resnet50's 7x7 layer, odd
/// and even sides (2x2 tiles cut at the edges), more than 16 tiles (a second GEMM panel, part
/// empty), asymmetric and no padding, more than 256 input channels, output channels that leave
/// a part tile of the GEMM's 6 rows, batches, bias on and off, epilogues and non-dense inputs.
/// Fewer channels keep the im2col GEMM.
#[test]
fn winograd_f2_on_small_maps() {
    for (x, o, pad) in [
        ([1, 64, 7, 7], 64, [1, 1, 1, 1]),
        ([2, 72, 5, 6], 80, [0, 1, 1, 0]),
        ([1, 64, 9, 9], 70, [1, 1, 1, 1]),
        ([1, 96, 7, 7], 64, [0; 4]),
        ([1, 300, 6, 6], 64, [1, 1, 1, 1]),
    ] {
        for (after, bias, view) in VARIANTS {
            let alg = check(&Case { after, bias, view, ..case(x, o, 3, attrs(1, pad, 1, 1)) });
            assert_eq!(alg == Some("conv winograd f2"), winograd_here(), "{x:?} -> {o}: {alg:?}");
        }
    }
    for (x, o) in [([1, 32, 7, 7], 64), ([1, 64, 7, 7], 48)] {
        let alg = check(&case(x, o, 3, attrs(1, [1, 1, 1, 1], 1, 1)));
        assert_ne!(alg, Some("conv winograd f2"), "{x:?} -> {o}");
    }
}

/// Winograd mixes the values of each 6x6 input tile before the products, so a NaN or an
/// infinity in the input reaches every output of the 4x4 tiles whose input holds it (a
/// direct conv reaches only the windows that hold it): every output the interpreter makes
/// non-finite is non-finite here too, the others in those tiles may be, and every output
/// outside them is finite and matches. The same for F(2x2, 3x3)'s 2x2 tiles of 4x4 inputs.
#[test]
fn winograd_nan_and_inf_stay_in_their_tiles() {
    if !winograd_here() {
        return;
    }
    // (channels, side, tile side, algorithm, NaN's and infinity's (row, column))
    nan_and_inf_stay_in_tiles(8, 12, 4, "conv winograd", [(2, 3), (9, 9)]);
    nan_and_inf_stay_in_tiles(64, 9, 2, "conv winograd f2", [(2, 3), (5, 5)]);
}

/// [`winograd_nan_and_inf_stay_in_their_tiles`] for one conv of `c` channels on an `hw` x `hw`
/// map, padded by 1, run by `alg` on tiles of `m` x `m` outputs, with a NaN in channel 1 and an
/// infinity in channel 5 at `at`.
fn nan_and_inf_stay_in_tiles(c: usize, hw: usize, m: usize, alg: &str, at: [(usize, usize); 2]) {
    let (o, h, w) = (c, hw, hw);
    let mut g = Graph::new();
    let x = g.input("x", TensorType::new(DType::F32, Shape::fixed(&[1, c, h, w])));
    let wt = g.constant(tensor(&[o, c, 3, 3], 2));
    let y = g.add(Op::Conv2d(attrs(1, [1, 1, 1, 1], 1, 1)), &[x, wt]).unwrap();
    g.output(y);
    let mut xv = tensor(&[1, c, h, w], 1).to_vec::<f32>().unwrap();
    let [(ny, nx), (iy, ix)] = at;
    xv[h * w + ny * w + nx] = f32::NAN;
    xv[5 * h * w + iy * w + ix] = f32::INFINITY;
    let inputs = [HostTensor::from_vec(xv, &[1, c, h, w]).unwrap()];
    let want = kiln_cpu::run(&g, &inputs).unwrap()[0].to_f64_vec();
    let (prog, _) = schedule(&g, &ScheduleOptions::default()).unwrap();
    let exe = Executable::new(prog, Arc::new(InterpKernels)).unwrap();
    assert!(exe.packed_algorithms().contains(&Some(alg)), "{alg}: {:?}", exe.packed_algorithms());
    let got = exe.run(&inputs).unwrap()[0].to_f64_vec();
    // The output tiles whose (m + 2)-square input (rows and columns mt..mt+m+2 of the padded
    // input) hold a padded position.
    let reaches = |p: usize, t: usize| (m * t..m * t + m + 2).contains(&p);
    let in_hit_tile = |i: usize, j: usize| at.iter().any(|&(y, x)| reaches(y + 1, i / m) && reaches(x + 1, j / m));
    let mut outside = 0;
    for (idx, (a, b)) in want.iter().zip(&got).enumerate() {
        let (i, j) = ((idx / w) % h, idx % w);
        if !a.is_finite() {
            assert!(!b.is_finite(), "element {idx}: want {a}, got {b}");
        } else if !in_hit_tile(i, j) {
            outside += 1;
            assert!((a - b).abs() <= 1e-4 * a.abs().max(1.0), "element {idx}: want {a}, got {b}");
        }
    }
    assert!(want.iter().any(|v| v.is_nan()) && want.iter().any(|v| v.is_infinite()));
    assert!(outside > want.len() / 2, "{outside} outputs outside the hit tiles");
}
