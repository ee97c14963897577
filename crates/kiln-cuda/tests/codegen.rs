//! The CUDA C generator on real programs (graphs scheduled by kiln-sched: pointwise chains over
//! every dtype, broadcasts, softmax, layer norm, reductions, casts, padding) and hand-built
//! kernels: every rendered unit is compiled by NVRTC with `NVRTC_OPTIONS` (no errors, no
//! warnings) when libnvrtc can be loaded — else one line says the check was skipped — and
//! the structure is checked (strategy, index width, signature, launch range).
//! Run for real with `LD_LIBRARY_PATH=/path/to/nvrtc/lib`.

use kiln_cuda::codegen::{
    CudaSource, Launch, NVRTC_OPTIONS, render_cuda, render_cuda_kernels, render_kernel,
};
use kiln_ir::{
    BinaryOp, DType, Graph, HostTensor, NodeId, Op, PadMode, Pool2dAttrs, PoolKind, ReduceOp,
    Shape, TensorType, UnaryOp, decompose,
};
use kiln_sched::kernel::{Arg, Expr, Idx, Kernel, Literal, Loop, Stage};
use kiln_sched::{GPU_EXTERN_DTYPES, Program, ScheduleOptions, schedule};
use std::ffi::{CStr, CString};
use std::sync::{Arc, OnceLock};

/// Whether libnvrtc loads (cudarc panics on a missing library, so ask first); says once why
/// not.
fn nvrtc_present() -> bool {
    static PRESENT: OnceLock<bool> = OnceLock::new();
    *PRESENT.get_or_init(|| {
        // SAFETY: only tries to dlopen the library's candidate names.
        let present = unsafe { cudarc::nvrtc::sys::is_culib_present() };
        if !present {
            eprintln!(
                "NVRTC check skipped: libnvrtc could not be loaded (set LD_LIBRARY_PATH to a CUDA 13 \
                 NVRTC lib folder to compile every rendered kernel)"
            );
        }
        present
    })
}

/// Compiles `src` with NVRTC and the generator's options: the PTX, or the log of a failure.
fn nvrtc_compile(src: &str) -> Result<(String, String), String> {
    use cudarc::nvrtc::result;
    let text = |v: Vec<std::ffi::c_char>| {
        // SAFETY: NVRTC returns NUL-terminated strings.
        unsafe { CStr::from_ptr(v.as_ptr()) }
            .to_string_lossy()
            .into_owned()
    };
    let csrc = CString::new(src).map_err(|e| e.to_string())?;
    let prog = result::create_program(&csrc, None).map_err(|e| format!("{e:?}"))?;
    let opts: Vec<String> = NVRTC_OPTIONS.iter().map(|s| s.to_string()).collect();
    // SAFETY: `prog` is a live program created above and destroyed once below.
    unsafe {
        let compiled = result::compile_program(prog, &opts);
        let log = result::get_program_log(prog).map(text).unwrap_or_default();
        let out = match compiled {
            Ok(()) => result::get_ptx(prog)
                .map(text)
                .map(|ptx| (ptx, log))
                .map_err(|e| format!("{e:?}")),
            Err(e) => Err(format!("{e:?}\n{log}")),
        };
        result::destroy_program(prog).map_err(|e| format!("{e:?}"))?;
        out
    }
}

/// Compiles a rendered unit (when NVRTC is present): no error, no warning, every kernel in
/// the PTX.
fn check_compiles(what: &str, src: &CudaSource) {
    if !nvrtc_present() {
        return;
    }
    let numbered = || {
        src.source
            .lines()
            .enumerate()
            .map(|(i, l)| format!("{:4} {l}\n", i + 1))
            .collect::<String>()
    };
    match nvrtc_compile(&src.source) {
        Ok((ptx, log)) => {
            assert!(
                !log.contains("warning"),
                "{what}: NVRTC warned:\n{log}\n{}",
                numbered()
            );
            for k in &src.kernels {
                assert!(
                    ptx.contains(&format!(".entry {}(", k.name)),
                    "{what}: {} missing from the PTX",
                    k.name
                );
            }
        }
        Err(log) => panic!("{what}: NVRTC failed:\n{log}\n{}", numbered()),
    }
}

fn input(g: &mut Graph, name: &str, dtype: DType, shape: &[usize]) -> NodeId {
    g.input(name, TensorType::new(dtype, Shape::fixed(shape)))
}

fn bin(g: &mut Graph, op: BinaryOp, a: NodeId, b: NodeId) -> NodeId {
    g.add(Op::Binary(op), &[a, b]).unwrap()
}

fn un(g: &mut Graph, op: UnaryOp, x: NodeId) -> NodeId {
    g.add(Op::Unary(op), &[x]).unwrap()
}

fn reduce(g: &mut Graph, op: ReduceOp, axes: &[usize], keep_dims: bool, x: NodeId) -> NodeId {
    g.add(
        Op::Reduce {
            op,
            axes: axes.to_vec(),
            keep_dims,
        },
        &[x],
    )
    .unwrap()
}

/// Schedules `g` (fused, with and without externs), renders and compiles each program.
fn programs(what: &str, g: &Graph) -> Vec<(Program, CudaSource)> {
    let g = decompose(g).unwrap();
    [GPU_EXTERN_DTYPES, &[]]
        .into_iter()
        .map(|extern_dtypes| {
            let (p, _) = schedule(
                &g,
                &ScheduleOptions {
                    fuse: true,
                    extern_dtypes,
                    row_epilogues: false,
                },
            )
            .unwrap();
            let src = render_cuda(&p).unwrap_or_else(|e| panic!("{what}: {e}"));
            assert_eq!(src.kernels.len(), p.kernels().count(), "{what}");
            check_compiles(what, &src);
            (p, src)
        })
        .collect()
}

/// The kernel whose name contains `part` and its launch.
fn launch_of(src: &CudaSource, p: &Program, pred: impl Fn(&Kernel) -> bool) -> Launch {
    let (i, _) = p
        .kernels()
        .enumerate()
        .find(|(_, k)| pred(k))
        .unwrap_or_else(|| {
            panic!(
                "no such kernel in {:#?}",
                p.kernels().map(|k| &k.name).collect::<Vec<_>>()
            )
        });
    src.kernels[i].launch
}

fn reduce_stages(k: &Kernel) -> usize {
    k.stages
        .iter()
        .filter(|s| matches!(s, Stage::Reduce { .. }))
        .count()
}

/// A pointwise chain over `dt`: broadcasts, a constant, arithmetic, compares, where, casts.
fn pointwise_graph(dt: DType) -> Graph {
    {
        let mut g = Graph::new();
        let x = input(&mut g, "x", dt, &[4, 1, 5]);
        let y = input(&mut g, "y", dt, &[3, 1]);
        let s = bin(&mut g, BinaryOp::Add, x, y);
        let m = bin(&mut g, BinaryOp::Mul, s, x);
        let mx = bin(&mut g, BinaryOp::Max, m, y);
        let r = un(&mut g, UnaryOp::Relu, mx);
        let two = g.constant(HostTensor::scalar(2.0f64));
        let two = g.add(Op::Cast(dt), &[two]).unwrap();
        let d = bin(&mut g, BinaryOp::Div, r, two);
        let md = bin(&mut g, BinaryOp::Mod, d, two);
        let c = bin(&mut g, BinaryOp::Gt, md, x);
        let w = g.add(Op::Where, &[c, md, y]).unwrap();
        let f = g.add(Op::Cast(DType::F32), &[w]).unwrap();
        let back = g.add(Op::Cast(dt), &[f]).unwrap();
        g.output(back);
        g.output(c);
        if matches!(dt, DType::F32 | DType::F64 | DType::F16 | DType::BF16) {
            let mut v = x;
            for op in [
                UnaryOp::Exp,
                UnaryOp::Tanh,
                UnaryOp::Sigmoid,
                UnaryOp::Erf,
                UnaryOp::Log,
                UnaryOp::Sqrt,
            ] {
                v = un(&mut g, op, v);
            }
            let p = bin(&mut g, BinaryOp::Pow, v, y);
            let nan = un(&mut g, UnaryOp::IsNan, p);
            g.output(p);
            g.output(nan);
        } else {
            let sh = bin(&mut g, BinaryOp::Shl, x, two);
            let a = bin(&mut g, BinaryOp::And, sh, y);
            let n = un(&mut g, UnaryOp::Neg, a);
            g.output(n);
        }
        g
    }
}

const POINTWISE_DTYPES: [DType; 8] = [
    DType::F32,
    DType::F64,
    DType::F16,
    DType::BF16,
    DType::I32,
    DType::I64,
    DType::U8,
    DType::I8,
];

#[test]
fn pointwise_chains_over_every_dtype_compile() {
    for dt in POINTWISE_DTYPES {
        let g = pointwise_graph(dt);
        for (p, src) in programs(&format!("pointwise {dt}"), &g) {
            for (k, info) in p.kernels().zip(&src.kernels) {
                if reduce_stages(k) == 0 {
                    assert!(
                        matches!(info.launch, Launch::PerThread { .. }),
                        "{dt} {}",
                        k.name
                    );
                }
            }
            assert!(
                src.source.contains("int i0 = (int)begin"),
                "{dt}: small kernels index in 32 bits"
            );
        }
    }
}

/// Bool logic, and casts between every pair of dtypes.
fn casts_graph() -> Graph {
    let mut g = Graph::new();
    let a = input(&mut g, "a", DType::Bool, &[3, 4]);
    let b = input(&mut g, "b", DType::Bool, &[4]);
    let o = bin(&mut g, BinaryOp::Or, a, b);
    let x = bin(&mut g, BinaryOp::Xor, o, a);
    let n = un(&mut g, UnaryOp::Not, x);
    g.output(n);
    let all = [
        DType::F32,
        DType::F64,
        DType::F16,
        DType::BF16,
        DType::I64,
        DType::I32,
        DType::I16,
        DType::I8,
        DType::U64,
        DType::U32,
        DType::U16,
        DType::U8,
        DType::Bool,
    ];
    for from in all {
        let x = input(&mut g, &format!("x_{from}"), from, &[2, 3]);
        for to in all {
            let c = g.add(Op::Cast(to), &[x]).unwrap();
            let e = bin(&mut g, BinaryOp::Ne, c, c);
            g.output(c);
            g.output(e);
        }
    }
    g
}

#[test]
fn bool_ops_casts_and_compares_compile() {
    let g = casts_graph();
    programs("bool and casts", &g);
}

/// Softmax and log-softmax over long rows, layer norm in f16, softmax over short rows.
/// A layer norm over `rows` rows of `n` in `dtype` (its input, weight and bias graph inputs
/// named after `n`), as an output of `g`.
fn layer_norm_output(g: &mut Graph, dtype: DType, rows: usize, n: usize) {
    let x = input(g, &format!("x{n}"), dtype, &[rows, n]);
    let w = input(g, &format!("w{n}"), dtype, &[n]);
    let b = input(g, &format!("b{n}"), dtype, &[n]);
    let y = g.add(Op::LayerNorm { axis: 1, eps: 1e-5 }, &[x, w, b]).unwrap();
    g.output(y);
}

fn softmax_graph() -> Graph {
    let mut g = Graph::new();
    let x = input(&mut g, "x", DType::F32, &[64, 1000]);
    let s = g.add(Op::Softmax { axis: 1 }, &[x]).unwrap();
    let l = g.add(Op::LogSoftmax { axis: 1 }, &[x]).unwrap();
    g.output(s);
    g.output(l);
    layer_norm_output(&mut g, DType::F16, 16, 768);
    // Short rows over many points: a thread per row.
    let t = input(&mut g, "t", DType::F32, &[20000, 5]);
    let ts = g.add(Op::Softmax { axis: 1 }, &[t]).unwrap();
    g.output(ts);
    g
}

#[test]
fn softmax_rows_run_per_block_and_layer_norm_compiles() {
    let g = softmax_graph();
    for (p, src) in programs("softmax", &g) {
        let row = |len: usize| {
            move |k: &Kernel| {
                reduce_stages(k) >= 1 && k.outer.first().is_some_and(|l| l.extent == len)
            }
        };
        let sm = launch_of(&src, &p, |k| {
            row(64)(k) && k.args.iter().any(|a| a.len == 64000)
        });
        assert!(
            matches!(sm, Launch::PerBlock { block } if block % 32 == 0 && block >= 256),
            "{sm:?}"
        );
        let ln = launch_of(&src, &p, row(16));
        assert!(matches!(ln, Launch::PerBlock { .. }), "{ln:?}");
        let short = launch_of(&src, &p, row(20000));
        assert!(matches!(short, Launch::PerThread { .. }), "{short:?}");
        assert!(src.source.contains("kc_shfl_xor(") && src.source.contains("__syncthreads();"));
    }
}

/// Pointwise kernels a thread takes 4 points of: a bias over rows of 64 and a GELU in f32, a
/// transposed operand (read per point) in bf16, a 1-D chain of 1003 elements (the launch split
/// at 501 leaves the second range misaligned, and the last group short).
fn vector_graph() -> Graph {
    let mut g = Graph::new();
    let x = input(&mut g, "x", DType::F32, &[37, 64]);
    let b = input(&mut g, "b", DType::F32, &[64]);
    let y = bin(&mut g, BinaryOp::Add, x, b);
    let y = g.add(Op::Gelu { tanh_approx: false }, &[y]).unwrap();
    g.output(y);
    let h = input(&mut g, "h", DType::BF16, &[24, 40]);
    let t = input(&mut g, "t", DType::BF16, &[40, 24]);
    let tt = g.add(Op::Permute(vec![1, 0]), &[t]).unwrap();
    let z = bin(&mut g, BinaryOp::Mul, h, tt);
    g.output(z);
    let v = input(&mut g, "v", DType::F32, &[1003]);
    let w = un(&mut g, UnaryOp::Exp, v);
    let w = un(&mut g, UnaryOp::Neg, w);
    g.output(w);
    g
}

#[test]
fn pointwise_rows_of_multiples_of_4_take_4_points_a_thread() {
    for (p, src) in programs("vector", &vector_graph()) {
        let vectorised = src.kernels.iter().filter(|k| k.vector == 4).count();
        assert!(vectorised >= 2, "{} of {} kernels vectorised:\n{}", vectorised, p.kernels().count(), src.source);
        assert!(src.source.contains("float4") && src.source.contains("ushort4"), "{}", src.source);
    }
}

/// Rows of moderate length over many points, which a warp each takes: softmax over 100
/// (not a multiple of 32) in f32, layer norm over 384 in f16 and over 768 in f32, an i32 row
/// sum over 40; the row counts leave the last block partly empty.
fn warp_rows_graph() -> Graph {
    let mut g = Graph::new();
    let x = input(&mut g, "x", DType::F32, &[3001, 100]);
    let s = g.add(Op::Softmax { axis: 1 }, &[x]).unwrap();
    g.output(s);
    layer_norm_output(&mut g, DType::F16, 2003, 384);
    let i = input(&mut g, "i", DType::I32, &[1500, 40]);
    let r = reduce(&mut g, ReduceOp::Sum, &[1], false, i);
    g.output(r);
    // BERT's layer norm: rows of 768 (24 points a lane) in f32.
    layer_norm_output(&mut g, DType::F32, 1030, 768);
    g
}

#[test]
fn rows_over_many_points_run_a_warp_each() {
    let g = warp_rows_graph();
    for (p, src) in programs("warp rows", &g) {
        let reductions: Vec<Launch> = p.kernels().filter(|k| reduce_stages(k) >= 1).map(|k| launch_of(&src, &p, |x| x.name == k.name)).collect();
        assert!(reductions.len() >= 3, "{reductions:?}");
        for l in reductions {
            assert!(matches!(l, Launch::PerWarp { block } if block % 32 == 0), "{l:?}");
        }
        assert!(src.source.contains("__syncwarp();") || !src.source.contains("__syncthreads();"));
        // Softmax and layer norm read their row in every stage: each lane keeps its points of
        // it in registers (f32 and f16 storage), loaded once.
        assert!(src.source.contains("float kc_c0[4];") && src.source.contains("uint16_t kc_c0[12];") && src.source.contains("float kc_c0[24];"), "{}", src.source);
    }
}

/// Every reduce op over rows and columns, several dtypes, keepdims, empty reduce dims, a global pool and a whole-tensor sum.
fn reductions_graph() -> Graph {
    let mut g = Graph::new();
    let x = input(&mut g, "x", DType::F32, &[8, 4096]);
    let i = input(&mut g, "i", DType::I32, &[6, 300]);
    let u = input(&mut g, "u", DType::U8, &[6, 300]);
    let h = input(&mut g, "h", DType::BF16, &[3, 40]);
    let e = input(&mut g, "e", DType::F32, &[2, 0, 3]);
    let big = input(&mut g, "big", DType::F32, &[2, 64, 56, 56]);
    for op in [
        ReduceOp::Sum,
        ReduceOp::Max,
        ReduceOp::Min,
        ReduceOp::Prod,
        ReduceOp::Mean,
    ] {
        for keep in [false, true] {
            for t in [x, i, u, h] {
                let r = reduce(&mut g, op, &[1], keep, t);
                g.output(r);
            }
            let r = reduce(&mut g, op, &[0], keep, x);
            g.output(r);
            let r = reduce(&mut g, op, &[1], keep, e);
            g.output(r);
            let r = reduce(&mut g, op, &[0, 2], keep, e);
            g.output(r);
        }
    }
    // A global average pool, then a pointwise use of it.
    let pool = reduce(&mut g, ReduceOp::Mean, &[2, 3], true, big);
    let d = bin(&mut g, BinaryOp::Sub, big, pool);
    g.output(d);
    let all = reduce(&mut g, ReduceOp::Sum, &[0, 1], false, x);
    g.output(all);
    g
}

#[test]
fn reductions_keepdims_empty_dims_and_dtypes_compile() {
    let g = reductions_graph();
    for (p, src) in programs("reductions", &g) {
        let pb = launch_of(&src, &p, |k| {
            reduce_stages(k) >= 1 && k.outer.iter().map(|l| l.extent).product::<usize>() == 8
        });
        assert!(matches!(pb, Launch::PerBlock { .. }), "{pb:?}");
        // The whole-tensor sum has no outer loops: one point, the range ignored.
        let (n, k) = p
            .kernels()
            .enumerate()
            .find(|(_, k)| k.outer.is_empty())
            .expect("a kernel without outer loops");
        assert!(
            matches!(src.kernels[n].launch, Launch::PerBlock { .. }),
            "{}",
            k.name
        );
        assert_eq!(src.kernels[n].grid(0, 0).0, 1);
    }
}

/// Constant and reflect padding, a max pool, a permuted view, a concat.
fn padding_graph() -> Graph {
    let mut g = Graph::new();
    let x = input(&mut g, "x", DType::F32, &[2, 8, 14, 14]);
    let p = g
        .add(
            Op::Pad {
                pads: vec![(0, 0), (0, 0), (1, 1), (2, 1)],
                mode: PadMode::Constant(-1.5),
            },
            &[x],
        )
        .unwrap();
    let r = un(&mut g, UnaryOp::Relu, p);
    let pool = Pool2dAttrs {
        kind: PoolKind::Max,
        kernel: [3, 3],
        stride: [2, 2],
        padding: [1, 1, 1, 1],
        dilation: [1, 1],
        ceil_mode: false,
    };
    let m = g.add(Op::Pool2d(pool), &[r]).unwrap();
    let t = g.add(Op::Permute(vec![0, 2, 3, 1]), &[m]).unwrap();
    let e = un(&mut g, UnaryOp::Exp, t);
    g.output(e);
    let y = input(&mut g, "y", DType::F16, &[2, 3, 4]);
    let c = g.add(Op::Concat { axis: 2 }, &[y, y]).unwrap();
    let pr = g
        .add(
            Op::Pad {
                pads: vec![(1, 0), (0, 2), (3, 3)],
                mode: PadMode::Reflect,
            },
            &[c],
        )
        .unwrap();
    g.output(pr);
    g
}

#[test]
fn padded_pooled_and_strided_views_compile() {
    let g = padding_graph();
    programs("padding", &g);
}

fn f32_arg(len: usize, written: bool) -> Arg {
    Arg {
        dtype: DType::F32,
        len,
        written,
    }
}

/// `out[i0 * inner + i1] = in0[...] + in1[...]` over `outer x inner`.
fn add_kernel(name: &str, outer: usize, inner: usize, in_place_shape: bool) -> Kernel {
    let n = outer * inner;
    let mut k = Kernel::new(name);
    k.outer = vec![
        Loop {
            var: 0,
            extent: outer,
        },
        Loop {
            var: 1,
            extent: inner,
        },
    ];
    k.args = vec![f32_arg(n, false), f32_arg(inner, false), f32_arg(n, true)];
    let at = Idx::var(0).mul(inner as i64).add(Idx::var(1));
    let other = Idx::var(1).mul(outer as i64).add(Idx::var(0));
    let a = k.push(
        Expr::Load {
            arg: 0,
            index: if in_place_shape { at.clone() } else { other },
        },
        DType::F32,
    );
    let b = k.push(
        Expr::Load {
            arg: 1,
            index: Idx::var(1),
        },
        DType::F32,
    );
    let s = k.push(
        Expr::Binary {
            op: BinaryOp::Add,
            a,
            b,
        },
        DType::F32,
    );
    k.stages = vec![Stage::Store {
        loops: vec![],
        arg: 2,
        index: at,
        value: s,
    }];
    k
}

#[test]
fn index_width_signature_and_launch_range() {
    // Small: 32-bit indices; in0 is loaded at the store index (it may be the output's memory
    // in place), so neither it nor the output is restrict; in1 is.
    let small = add_kernel("small", 7, 9, true);
    let (text, info) = render_kernel(&small).unwrap();
    assert_eq!(info.launch, Launch::PerThread { block: 256 });
    assert_eq!((info.row_points, info.vector), (Some(9), 1));
    assert!(
        text.contains(
            "small(const float* in0, const float* __restrict__ in1, float* out2, long long begin, long long end)"
        ),
        "{text}"
    );
    assert!(
        text.contains("if (begin < 0) begin = 0;") && text.contains("if (end > 7LL) end = 7LL;"),
        "{text}"
    );
    assert!(
        text.contains("const unsigned int kc_n = (unsigned int)(end - begin) * 9u;"),
        "{text}"
    );
    assert!(text.contains("const int i1 = (int)(kc_q % 9u);"), "{text}");
    assert!(
        text.contains("const int i0 = (int)begin + (int)kc_q;"),
        "{text}"
    );
    assert!(text.contains("out2[(i0 * 9 + i1)]"), "{text}");
    assert!(!text.contains("INT64_C"), "{text}");
    // > 2^31 elements: 64-bit indices and counters.
    let big = add_kernel("big", 1 << 16, 1 << 16, false);
    let (text, info) = render_kernel(&big).unwrap();
    assert!(text.contains("const unsigned long long kc_n"), "{text}");
    assert!(
        text.contains("const long long i0 = (long long)begin + (long long)kc_q;"),
        "{text}"
    );
    assert!(text.contains("out2[(i0 * 65536 + i1)]"), "{text}");
    assert!(text.contains("const float* __restrict__ in0"), "{text}");
    // Rows of 2^16 (a multiple of 4): each thread takes 4 points.
    assert_eq!(info.vector, 4, "{text}");
    assert_eq!(info.points(10, 12), (2 << 16) / 4);
    assert_eq!(info.grid(10, 12), (128, 256));
    assert_eq!(info.grid(0, 1 << 16).0, kiln_cuda::codegen::MAX_GRID);
    // A loop extent under 2^31 whose index intermediate overflows 32 bits is 64-bit too.
    let mut wide = add_kernel("wide", 4, 4, false);
    wide.args[0].len = 1 << 20;
    if let Expr::Load { index, .. } = &mut wide.exprs[0].expr {
        *index = Idx::var(0).mul(1 << 30).div(3);
    }
    let (text, _) = render_kernel(&wide).unwrap();
    assert!(text.contains("long long i0"), "{text}");
    // No outer loops: one point.
    let mut one = Kernel::new("one");
    one.args = vec![f32_arg(1, true)];
    let c = one.push(Expr::Const(Literal::Float(1.5)), DType::F32);
    one.stages = vec![Stage::Store {
        loops: vec![],
        arg: 0,
        index: Idx::Const(0),
        value: c,
    }];
    let (text, info) = render_kernel(&one).unwrap();
    assert!(
        text.contains("(void)begin;") && text.contains("kc_n = 1;"),
        "{text}"
    );
    assert_eq!(info.row_points, None);
    assert_eq!(info.grid(0, 0), (1, 256));
    assert_eq!(Launch::PerBlock { block: 128 }.grid(0), (0, 128));
    let src = render_cuda_kernels([&small, &big, &wide, &one]).unwrap();
    check_compiles("hand-built", &src);
    if nvrtc_present() {
        assert!(
            nvrtc_compile("this is not CUDA").is_err(),
            "the NVRTC check checks"
        );
    }
}

#[test]
fn unsupported_kernels_are_errors() {
    let mut k = add_kernel("not_f32", 2, 2, false);
    let x = k.push(
        Expr::Unary {
            op: UnaryOp::Not,
            x: 0,
        },
        DType::F32,
    );
    if let Stage::Store { value, .. } = &mut k.stages[0] {
        *value = x;
    }
    let err = render_kernel(&k).unwrap_err();
    assert!(
        matches!(err, kiln_ir::Error::Unsupported(_)) && err.to_string().contains("Not"),
        "{err}"
    );
    let bad = add_kernel("bad name", 2, 2, false);
    assert!(
        render_kernel(&bad)
            .unwrap_err()
            .to_string()
            .contains("C identifier")
    );
    let k = add_kernel("twice", 2, 2, false);
    assert!(render_cuda_kernels([&k, &k]).is_err());
}

/// The GPU (context and stream) when the CUDA driver loads and device 0 opens; says once why
/// not.
fn gpu() -> Option<Arc<cudarc::driver::CudaStream>> {
    static GPU: OnceLock<Option<Arc<cudarc::driver::CudaStream>>> = OnceLock::new();
    GPU.get_or_init(|| {
        // SAFETY: only tries to dlopen the library's candidate names.
        if !unsafe { cudarc::driver::sys::is_culib_present() } {
            eprintln!("GPU check skipped: the CUDA driver library could not be loaded");
            return None;
        }
        match cudarc::driver::CudaContext::new(0) {
            Ok(ctx) => Some(ctx.default_stream()),
            Err(e) => {
                eprintln!("GPU check skipped: no CUDA device 0 ({e:?})");
                None
            }
        }
    })
    .clone()
}

/// Deterministic inputs for `g`: floats in [-2, 2), integers in [-8, 8) ([0, 16) unsigned),
/// alternating bools.
fn inputs_for(g: &Graph) -> Vec<HostTensor> {
    g.inputs
        .iter()
        .enumerate()
        .map(|(n, &id)| {
            let ty = g.ty(id);
            let shape = ty.shape.as_fixed().unwrap();
            let len: usize = shape.iter().product();
            let mut s = (n as u64 + 1).wrapping_mul(0x9e3779b97f4a7c15);
            let vals: Vec<f64> = (0..len)
                .map(|_| {
                    s = s
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    (s >> 40) as f64 / (1u64 << 24) as f64
                })
                .collect();
            let f = HostTensor::from_vec(
                vals.iter().map(|v| v * 4.0 - 2.0).collect::<Vec<f64>>(),
                &shape,
            )
            .unwrap();
            let i = HostTensor::from_vec(
                vals.iter()
                    .map(|v| (v * 16.0).floor() - 8.0)
                    .collect::<Vec<f64>>(),
                &shape,
            )
            .unwrap();
            let t = match ty.dtype {
                DType::F32 | DType::F64 | DType::F16 | DType::BF16 => f,
                DType::U8 | DType::U16 | DType::U32 | DType::U64 => {
                    let u = HostTensor::from_vec(
                        vals.iter()
                            .map(|v| (v * 16.0).floor())
                            .collect::<Vec<f64>>(),
                        &shape,
                    );
                    u.unwrap()
                }
                DType::Bool => HostTensor::from_vec(
                    (0..len).map(|k| k % 3 == 1).collect::<Vec<bool>>(),
                    &shape,
                )
                .unwrap(),
                _ => i,
            };
            kiln_cpu::eval(&Op::Cast(ty.dtype), &[&t])
                .unwrap()
                .contiguous()
        })
        .collect()
}

/// Runs a program of kernel steps on the GPU, each launch split in two ranges of its first
/// outer loop; None when it has other steps.
fn run_on_gpu(
    stream: &Arc<cudarc::driver::CudaStream>,
    p: &Program,
    src: &CudaSource,
    inputs: &[HostTensor],
) -> Option<Vec<HostTensor>> {
    use cudarc::driver::{LaunchConfig, PushKernelArg};
    use kiln_sched::{BufKind, StepKind};
    if p.steps
        .iter()
        .any(|s| !matches!(s.kind, StepKind::Kernel { .. }))
    {
        return None;
    }
    let (ptx, _) = nvrtc_compile(&src.source).unwrap();
    let module = stream
        .context()
        .load_module(cudarc::nvrtc::Ptx::from_src(ptx))
        .unwrap();
    let bytes = |t: &HostTensor| t.contiguous().storage.as_bytes().into_owned();
    let bufs: Vec<_> = p
        .buffers
        .iter()
        .map(|b| {
            let mut data = match b.kind {
                BufKind::Input(i) => bytes(&inputs[i]),
                BufKind::Const(c) => bytes(&p.consts[c.0 as usize]),
                BufKind::Temp => vec![0u8; b.bytes()],
            };
            data.resize(data.len().max(1), 0);
            stream.clone_htod(&data).unwrap()
        })
        .collect();
    for (step, info) in p.steps.iter().zip(&src.kernels) {
        let StepKind::Kernel { kernel, args } = &step.kind else {
            unreachable!()
        };
        let f = module.load_function(&info.name).unwrap();
        let rows = kernel.outer.first().map_or(1, |l| l.extent);
        let mid = rows / 2;
        for (begin, end) in [(0, mid), (mid, rows)] {
            let (grid, block) = info.grid(begin, end);
            if grid == 0 {
                continue;
            }
            let (b, e) = (begin as i64, end as i64);
            let mut launch = stream.launch_builder(&f);
            for a in args {
                launch.arg(&bufs[a.index()]);
            }
            launch.arg(&b).arg(&e);
            let cfg = LaunchConfig {
                grid_dim: (grid, 1, 1),
                block_dim: (block, 1, 1),
                shared_mem_bytes: 0,
            };
            // SAFETY: the arguments match the kernel's signature: one pointer per argument,
            // each buffer as large as the argument's length, then begin and end.
            unsafe { launch.launch(cfg) }.unwrap();
        }
    }
    stream.synchronize().unwrap();
    Some(
        p.outputs
            .iter()
            .map(|(b, shape)| {
                let buf = p.buffer(*b);
                let data = stream.clone_dtoh(&bufs[b.index()]).unwrap();
                let storage =
                    kiln_ir::Storage::from_le_bytes(buf.dtype, &data[..buf.bytes()]).unwrap();
                HostTensor::new(storage, shape).unwrap()
            })
            .collect(),
    )
}

fn close(a: f64, b: f64, tol: f64) -> bool {
    (a.is_nan() && b.is_nan()) || a == b || (a - b).abs() <= tol * (1.0 + a.abs().max(b.abs()))
}

#[test]
fn gpu_results_match_the_interpreter() {
    if !nvrtc_present() {
        return;
    }
    let Some(stream) = gpu() else { return };
    let mut graphs: Vec<(String, Graph)> = POINTWISE_DTYPES
        .iter()
        .map(|dt| (format!("pointwise {dt}"), pointwise_graph(*dt)))
        .collect();
    graphs.push(("casts".into(), casts_graph()));
    graphs.push(("softmax".into(), softmax_graph()));
    graphs.push(("warp rows".into(), warp_rows_graph()));
    graphs.push(("vector".into(), vector_graph()));
    graphs.push(("reductions".into(), reductions_graph()));
    graphs.push(("padding".into(), padding_graph()));
    let mut ran = 0;
    for (what, g) in &graphs {
        let g = decompose(g).unwrap();
        let inputs = inputs_for(&g);
        let want = kiln_cpu::run(&g, &inputs).unwrap();
        let (p, _) = schedule(
            &g,
            &ScheduleOptions {
                extern_dtypes: &[],
                ..ScheduleOptions::default()
            },
        )
        .unwrap();
        let src = render_cuda(&p).unwrap();
        // Kernel-only programs run here with every launch split in two ranges; programs with
        // reference-kernel steps run through the runtime's Executable (whole launches).
        let got = match run_on_gpu(&stream, &p, &src, &inputs) {
            Some(got) => got,
            None => {
                let gpu = kiln_cuda::Gpu::open(0).unwrap();
                let cache = kiln_sched::DiskCache::temp().unwrap();
                kiln_cuda::Executable::new(p.clone(), &gpu, &cache).unwrap().run(&inputs).unwrap()
            }
        };
        ran += 1;
        for (o, (w, g)) in want.iter().zip(&got).enumerate() {
            let tol = match w.dtype() {
                DType::F16 | DType::BF16 => 1e-2,
                DType::F32 => 1e-5,
                DType::F64 => 1e-12,
                _ => 0.0,
            };
            let (wv, gv) = (w.to_f64_vec(), g.to_f64_vec());
            for (i, (a, b)) in wv.iter().zip(&gv).enumerate() {
                assert!(
                    close(*a, *b, tol),
                    "{what}: output {o} ({}) element {i}: interpreter {a}, GPU {b}",
                    w.dtype()
                );
            }
        }
    }
    assert_eq!(ran, graphs.len(), "every graph runs on the GPU");
    eprintln!("GPU check: {ran} programs matched the interpreter");
}

/// The GPU's erfc and erf (CUDA's `erfcf` / `erff`, which the prelude uses on a GPU) over a
/// sweep of f32 inputs, against the interpreter's f64 functions: within the CUDA Math API's
/// bounds (4 and 2 ulp of the f64 value; ulps of the smallest normal below it), NaN for NaN,
/// erfc(0) = 1 and erf(±0) = ±0 exactly.
#[test]
fn gpu_erfc_and_erf_are_within_cudas_ulp_bounds() {
    if !nvrtc_present() {
        return;
    }
    let Some(stream) = gpu() else { return };
    let mut xs: Vec<f32> = (0..200_000).map(|i| -12.0 + 24.0 * i as f32 / 199_999.0).collect();
    for bits in 1..=254u32 {
        for m in [0u32, 0x40_0000, 0x7f_ffff] {
            let x = f32::from_bits((bits << 23) | m);
            xs.extend([x, -x]);
        }
    }
    xs.extend([0.0, -0.0, f32::INFINITY, f32::NEG_INFINITY, f32::NAN, 0.75, 9.19, 10.05]);
    let n = xs.len();
    let mut g = Graph::new();
    let x = input(&mut g, "x", DType::F32, &[n]);
    for op in [UnaryOp::Erfc, UnaryOp::Erf] {
        let y = un(&mut g, op, x);
        g.output(y);
    }
    let (p, _) = schedule(&g, &ScheduleOptions { extern_dtypes: &[], ..ScheduleOptions::default() }).unwrap();
    let src = render_cuda(&p).unwrap();
    let xt = HostTensor::from_vec(xs.clone(), &[n]).unwrap();
    let got = run_on_gpu(&stream, &p, &src, &[xt]).expect("a kernel-only program");
    let x64 = HostTensor::from_vec(xs.iter().map(|&v| v as f64).collect::<Vec<f64>>(), &[n]).unwrap();
    let ulp = |w: f64| 2f64.powi(if w == 0.0 { -126 } else { (w.abs().log2().floor() as i32).max(-126) } - 23);
    for ((op, bound), y) in [(UnaryOp::Erfc, 4.0), (UnaryOp::Erf, 2.0)].into_iter().zip(&got) {
        let want = kiln_cpu::eval(&Op::Unary(op), &[&x64]).unwrap().to_f64_vec();
        let y = y.to_f64_vec();
        let mut worst = 0f64;
        for ((x, w), g) in xs.iter().zip(&want).zip(&y) {
            if w.is_nan() {
                assert!(g.is_nan(), "{op:?}({x}): got {g}, want NaN");
                continue;
            }
            let err = (g - w).abs() / ulp(*w);
            worst = worst.max(err);
            assert!(err <= bound, "{op:?}({x:e}): got {g:e}, want {w:e} ({err:.2} ulp, bound {bound})");
        }
        eprintln!("GPU {op:?}: max error {worst:.2} ulp over {n} inputs");
    }
    let at = |i: usize, x: f32| xs.iter().position(|v| v.to_bits() == x.to_bits()).map(|k| got[i].to_f64_vec()[k]).unwrap();
    assert_eq!(at(0, 0.0), 1.0);
    assert_eq!(at(1, -0.0).to_bits(), (-0.0f64).to_bits());
}

/// The fused attention kernel compiles (no error, no warning) for every storage type, head dims
/// that are and are not multiples of 4, causal or not, with and without a mask.
#[test]
fn attention_kernels_compile() {
    use kiln_cuda::exec::AttentionPlan;
    use kiln_sched::{BufId, BufView};
    if !nvrtc_present() {
        return;
    }
    let view = |shape: &[usize]| {
        let mut strides = vec![1; shape.len()];
        for i in (0..shape.len() - 1).rev() {
            strides[i] = strides[i + 1] * shape[i + 1];
        }
        BufView { buf: BufId(0), offset: 0, shape: shape.to_vec(), strides }
    };
    for dt in [DType::F32, DType::F16, DType::BF16] {
        for (d, dv, causal, mask) in [(64, 64, false, false), (5, 3, true, true), (32, 17, false, true), (1, 64, true, false)] {
            let mut inputs = vec![view(&[2, 40, d]), view(&[2, 70, d]), view(&[2, 70, dv])];
            if mask {
                inputs.push(view(&[40, 70]));
            }
            let plan = AttentionPlan::new(causal, None, &inputs, &[2, 40, dv], dt, None).expect("the kernel takes these shapes");
            let what = format!("attention {dt} d {d} dv {dv} causal {causal} mask {mask}");
            match nvrtc_compile(&plan.source) {
                Ok((ptx, log)) => {
                    assert!(!log.contains("warning"), "{what}: NVRTC warned:\n{log}");
                    assert!(ptx.contains(".entry kiln_attention("), "{what}: no kernel in the PTX");
                }
                Err(log) => panic!("{what}: NVRTC failed:\n{log}"),
            }
        }
    }
}
