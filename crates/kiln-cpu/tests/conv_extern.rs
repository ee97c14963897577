//! The compiled Conv2d extern against the reference interpreter: graphs with one convolution
//! (strides, asymmetric padding, dilation, 1x1/3x3/7x7 kernels, groups, depthwise, bias,
//! batches, non-contiguous inputs, odd and 1x1 outputs, relu/add epilogues) are scheduled
//! with externs, run through `Executable` and compared with `kiln_cpu::run`.

mod hot_common;

use kiln_ir::{
    BinaryOp, Conv2dAttrs, DType, Graph, HostTensor, NodeId, Op, Shape, SliceAxis, TensorType,
    UnaryOp,
};
use kiln_sched::{ExternOp, ScheduleOptions, StepKind, schedule};

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
/// result with the interpreter's within a relative 1e-4.
fn check(c: &Case) {
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
        let conv = prog.steps.iter().find_map(|s| match &s.kind {
            StepKind::Extern {
                op: ExternOp::Conv2d(_),
                inputs,
                epilogue,
                ..
            } => Some((inputs, epilogue.is_some())),
            _ => None,
        });
        let Some((conv_inputs, has_epilogue)) = conv else {
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
        let got = kiln_cpu::compiled::run_interpreted(&prog, &inputs)
            .unwrap_or_else(|e| panic!("{e}\n{rep}"));
        let (w, o) = (want[0].to_f64_vec(), got[0].to_f64_vec());
        assert_eq!(want[0].shape(), got[0].shape());
        for (i, (a, b)) in w.iter().zip(&o).enumerate() {
            assert!(
                (a - b).abs() <= 1e-4 * a.abs().max(b.abs()).max(1.0),
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
        ([1, 37, 9, 14], 20, 3, 1, [1, 1, 1, 1]),
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
