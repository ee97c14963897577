//! The C code generator against the reference interpreter: hand-built kernels covering every
//! expression, dtype and stage kind are rendered into ONE translation unit, compiled once,
//! launched (whole range and split ranges) and compared with `kiln_cpu::eval` of the
//! equivalent graph ops (bit-exact where the interpreter's arithmetic is the same, within a
//! few ulps for reassociated sums and erf). Skipped, with a note, when no C compiler exists.

use kiln_cpu::codegen::{render_kernel, render_kernels};
use kiln_cpu::toolchain::{NativeLibrary, Toolchain, cpu_features, parallel_flags, vector_flags};
use kiln_ir::{BinaryOp, DType, HostTensor, Op, PadMode, ReduceOp, Storage, UnaryOp};
use kiln_sched::kernel::{Arg, Expr, ExprId, Idx, Kernel, Literal, Loop, Stage};
use std::ffi::c_void;
use std::sync::OnceLock;

#[derive(Clone, Copy, Debug)]
enum Tol {
    Exact,
    Ulp(f64),
}

/// One kernel, its inputs (its first arguments) and the expected value of each written
/// argument (the arguments after the inputs).
struct Case {
    group: &'static str,
    kernel: Kernel,
    inputs: Vec<HostTensor>,
    expected: Vec<(String, HostTensor, Tol)>,
}

fn eval(op: Op, inputs: &[&HostTensor]) -> HostTensor {
    kiln_cpu::eval(&op, inputs)
        .unwrap_or_else(|e| panic!("eval {op:?}: {e}"))
        .contiguous()
}

fn cast(t: &HostTensor, to: DType) -> HostTensor {
    eval(Op::Cast(to), &[t])
}

fn f64s(v: &[f64]) -> HostTensor {
    HostTensor::from_vec(v.to_vec(), &[v.len()]).unwrap()
}

/// Integers as a tensor of `dt` (values wrap into the type).
fn ints(v: &[i128], dt: DType) -> HostTensor {
    let n = [v.len()];
    match dt {
        DType::I64 => HostTensor::from_vec(v.iter().map(|&x| x as i64).collect(), &n),
        DType::I32 => HostTensor::from_vec(v.iter().map(|&x| x as i32).collect(), &n),
        DType::I16 => HostTensor::from_vec(v.iter().map(|&x| x as i16).collect(), &n),
        DType::I8 => HostTensor::from_vec(v.iter().map(|&x| x as i8).collect(), &n),
        DType::U64 => HostTensor::from_vec(v.iter().map(|&x| x as u64).collect(), &n),
        DType::U32 => HostTensor::from_vec(v.iter().map(|&x| x as u32).collect(), &n),
        DType::U16 => HostTensor::from_vec(v.iter().map(|&x| x as u16).collect(), &n),
        DType::U8 => HostTensor::from_vec(v.iter().map(|&x| x as u8).collect(), &n),
        DType::Bool => HostTensor::from_vec(v.iter().map(|&x| x != 0).collect(), &n),
        _ => panic!("not an integer dtype: {dt}"),
    }
    .unwrap()
}

const FLOATS: [DType; 4] = [DType::F32, DType::F64, DType::F16, DType::BF16];
const INTS: [DType; 8] = [
    DType::I64,
    DType::I32,
    DType::I16,
    DType::I8,
    DType::U64,
    DType::U32,
    DType::U16,
    DType::U8,
];

fn is_signed(dt: DType) -> bool {
    matches!(dt, DType::I64 | DType::I32 | DType::I16 | DType::I8)
}

/// (min, max) of an integer dtype.
fn int_limits(dt: DType) -> (i128, i128) {
    let bits = dt.size_of() as u32 * 8;
    if is_signed(dt) {
        (-(1i128 << (bits - 1)), (1i128 << (bits - 1)) - 1)
    } else {
        (0, (1i128 << bits) - 1)
    }
}

fn int_values(dt: DType) -> Vec<i128> {
    let (lo, hi) = int_limits(dt);
    let mut v = vec![0, 1, 2, 3, 7, 100, 127, hi, hi - 1, hi / 2 + 1];
    if is_signed(dt) {
        v.extend([-1, -2, -3, -7, -100, -128, lo, lo + 1]);
    }
    v
}

fn suffix(dt: DType) -> String {
    dt.to_string().to_lowercase()
}

/// A kernel over one outer loop `v0 < n`, with `inputs` as its first arguments and outputs
/// of `n` elements appended by [`Builder::store`].
struct Builder {
    k: Kernel,
    n: usize,
}

impl Builder {
    fn new(name: &str, n: usize, inputs: &[&HostTensor]) -> Builder {
        let mut k = Kernel::new(name);
        k.outer = vec![Loop { var: 0, extent: n }];
        for t in inputs {
            k.args.push(Arg {
                dtype: t.dtype(),
                len: t.numel(),
                written: false,
            });
        }
        Builder { k, n }
    }

    fn load(&mut self, arg: u32) -> ExprId {
        let dt = self.k.args[arg as usize].dtype;
        self.k.push(
            Expr::Load {
                arg,
                index: Idx::var(0),
            },
            dt,
        )
    }

    /// Stores `value` to a new output argument.
    fn store(&mut self, value: ExprId) {
        let dt = self.k.expr(value).dtype;
        self.k.args.push(Arg {
            dtype: dt,
            len: self.n,
            written: true,
        });
        let arg = self.k.args.len() as u32 - 1;
        self.k.stages.push(Stage::Store {
            loops: vec![],
            arg,
            index: Idx::var(0),
            value,
        });
    }
}

fn unary_float_case(dt: DType) -> Case {
    let vals = [
        0.0,
        -0.0,
        1.0,
        -1.0,
        0.5,
        -0.5,
        1.5,
        2.5,
        -2.5,
        3.7,
        -3.7,
        0.3,
        10.0,
        -10.0,
        100.0,
        1e-3,
        0.9,
        -0.9,
        1e-30,
        7.0,
        0.49999997,
        20.0,
        -20.0,
        1e30,
        f64::INFINITY,
        f64::NEG_INFINITY,
        f64::NAN,
    ];
    let x = cast(&f64s(&vals), dt);
    let mut b = Builder::new(&format!("unary_{}", suffix(dt)), vals.len(), &[&x]);
    let xv = b.load(0);
    let mut expected = Vec::new();
    use UnaryOp as U;
    let ops = [
        U::Neg,
        U::Abs,
        U::Sign,
        U::Exp,
        U::Log,
        U::Sqrt,
        U::Rsqrt,
        U::Reciprocal,
        U::Sin,
        U::Cos,
        U::Tan,
        U::Asin,
        U::Acos,
        U::Atan,
        U::Sinh,
        U::Cosh,
        U::Tanh,
        U::Asinh,
        U::Acosh,
        U::Atanh,
        U::Sigmoid,
        U::Relu,
        U::Erf,
        U::Erfc,
        U::Floor,
        U::Ceil,
        U::Round,
        U::IsNan,
        U::IsInf,
    ];
    for op in ops {
        let want = eval(Op::Unary(op), &[&x]);
        let e = b.k.push(Expr::Unary { op, x: xv }, want.dtype());
        b.store(e);
        let tol = match op {
            // f64 erf/erfc: libm's against the interpreter's port of fdlibm.
            U::Erf | U::Erfc if dt == DType::F64 => Tol::Ulp(1.0),
            U::Exp | U::Sigmoid if dt == DType::F64 => Tol::Exact,
            // The prelude's branch-free f32 versions against the interpreter's f32 results
            // (f32::exp; the f64 erf/erfc rounded), the max over every f32 input (measured
            // by a sweep; see prelude.h). f16/bf16 results differ by at most one rounding.
            U::Exp | U::Erf => Tol::Ulp(1.0),
            U::Erfc => Tol::Ulp(3.0),
            // Against 1 / (1 + f32::exp(-x)), itself a few roundings from the true value.
            U::Sigmoid => Tol::Ulp(4.0),
            _ => Tol::Exact,
        };
        expected.push((format!("{op:?}"), want, tol));
    }
    Case {
        group: "unary",
        kernel: b.k,
        inputs: vec![x],
        expected,
    }
}

fn unary_int_case(dt: DType) -> Case {
    let x = ints(&int_values(dt), dt);
    let mut b = Builder::new(&format!("unary_{}", suffix(dt)), x.numel(), &[&x]);
    let xv = b.load(0);
    let mut expected = Vec::new();
    use UnaryOp as U;
    for op in [U::Neg, U::Abs, U::Sign, U::Relu, U::Not, U::IsNan, U::IsInf] {
        let want = eval(Op::Unary(op), &[&x]);
        let e = b.k.push(Expr::Unary { op, x: xv }, want.dtype());
        b.store(e);
        expected.push((format!("{op:?}"), want, Tol::Exact));
    }
    Case {
        group: "unary",
        kernel: b.k,
        inputs: vec![x],
        expected,
    }
}

fn unary_bool_case() -> Case {
    let x = ints(&[0, 1, 1, 0], DType::Bool);
    let mut b = Builder::new("unary_bool", 4, &[&x]);
    let xv = b.load(0);
    let e = b.k.push(
        Expr::Unary {
            op: UnaryOp::Not,
            x: xv,
        },
        DType::Bool,
    );
    b.store(e);
    let want = eval(Op::Unary(UnaryOp::Not), &[&x]);
    Case {
        group: "unary",
        kernel: b.k,
        inputs: vec![x],
        expected: vec![("Not".into(), want, Tol::Exact)],
    }
}

/// Every pair of `a` and `b` (a grid, flattened).
fn grid<T: Copy>(a: &[T], b: &[T]) -> (Vec<T>, Vec<T>) {
    let mut xa = Vec::new();
    let mut xb = Vec::new();
    for &x in a {
        for &y in b {
            xa.push(x);
            xb.push(y);
        }
    }
    (xa, xb)
}

/// A kernel applying each of `ops` to the two inputs, one output each.
fn binary_case(
    name: String,
    group: &'static str,
    a: HostTensor,
    b_: HostTensor,
    ops: &[BinaryOp],
) -> Case {
    let mut b = Builder::new(&name, a.numel(), &[&a, &b_]);
    let (av, bv) = (b.load(0), b.load(1));
    let mut expected = Vec::new();
    for &op in ops {
        let want = eval(Op::Binary(op), &[&a, &b_]);
        let e = b.k.push(Expr::Binary { op, a: av, b: bv }, want.dtype());
        b.store(e);
        expected.push((format!("{op:?}"), want, Tol::Exact));
    }
    Case {
        group,
        kernel: b.k,
        inputs: vec![a, b_],
        expected,
    }
}

fn binary_float_case(dt: DType) -> Case {
    let vals = [
        0.0,
        -0.0,
        1.0,
        -1.0,
        2.5,
        -2.5,
        3.0,
        -3.0,
        0.1,
        7.0,
        1e-3,
        1e3,
        f64::INFINITY,
        f64::NEG_INFINITY,
        f64::NAN,
    ];
    let (a, b) = grid(&vals, &vals);
    use BinaryOp as B;
    let ops = [
        B::Add,
        B::Sub,
        B::Mul,
        B::Div,
        B::Rem,
        B::Mod,
        B::Pow,
        B::Max,
        B::Min,
        B::Eq,
        B::Ne,
        B::Lt,
        B::Le,
        B::Gt,
        B::Ge,
    ];
    binary_case(
        format!("binary_{}", suffix(dt)),
        "binary",
        cast(&f64s(&a), dt),
        cast(&f64s(&b), dt),
        &ops,
    )
}

/// Integer binary ops, in four kernels whose operands avoid the interpreter's errors (zero
/// divisors, negative exponents and shifts).
fn binary_int_cases(dt: DType) -> Vec<Case> {
    use BinaryOp as B;
    let vals = int_values(dt);
    let s = suffix(dt);
    let (a, b) = grid(&vals, &vals);
    let general = [
        B::Add,
        B::Sub,
        B::Mul,
        B::Max,
        B::Min,
        B::Eq,
        B::Ne,
        B::Lt,
        B::Le,
        B::Gt,
        B::Ge,
        B::And,
        B::Or,
        B::Xor,
    ];
    let nonzero: Vec<i128> = vals.iter().copied().filter(|&v| v != 0).collect();
    let (da, db) = grid(&vals, &nonzero);
    let (pa, pb) = grid(&vals, &[0, 1, 2, 3, 7, 31, 63, 64, 100]);
    let bits = dt.size_of() as i128 * 8;
    let (sa, sb) = grid(&vals, &[0, 1, 3, 7, bits - 1, bits, bits + 1, 100]);
    vec![
        binary_case(
            format!("binary_{s}"),
            "binary",
            ints(&a, dt),
            ints(&b, dt),
            &general,
        ),
        binary_case(
            format!("div_{s}"),
            "binary",
            ints(&da, dt),
            ints(&db, dt),
            &[B::Div, B::Rem, B::Mod],
        ),
        binary_case(
            format!("pow_{s}"),
            "binary",
            ints(&pa, dt),
            ints(&pb, dt),
            &[B::Pow],
        ),
        binary_case(
            format!("shift_{s}"),
            "binary",
            ints(&sa, dt),
            ints(&sb, dt),
            &[B::Shl, B::Shr],
        ),
    ]
}

fn binary_bool_case() -> Case {
    use BinaryOp as B;
    let (a, b) = grid(&[0, 1], &[0, 1]);
    let ops = [
        B::Eq,
        B::Ne,
        B::Xor,
        B::Lt,
        B::Le,
        B::Gt,
        B::Ge,
        B::Max,
        B::Min,
        B::And,
        B::Or,
    ];
    binary_case(
        "binary_bool".into(),
        "binary",
        ints(&a, DType::Bool),
        ints(&b, DType::Bool),
        &ops,
    )
}

/// Casts from `from` to every dtype.
fn cast_case(from: DType) -> Case {
    let x = if FLOATS.contains(&from) {
        let vals = [
            0.0,
            -0.0,
            0.5,
            -0.5,
            1.9,
            -1.9,
            2.5,
            -2.5,
            127.5,
            128.0,
            255.9,
            256.0,
            -129.0,
            -128.9,
            32767.5,
            65535.9,
            2147483647.9,
            4294967296.0,
            1e10,
            -1e10,
            9.3e18,
            1.9e19,
            1e20,
            -1e20,
            65504.0,
            65520.0,
            1e-8,
            3.0e38,
            0.1,
            f64::INFINITY,
            f64::NEG_INFINITY,
            f64::NAN,
        ];
        cast(&f64s(&vals), from)
    } else if from == DType::Bool {
        ints(&[0, 1, 1, 0], DType::Bool)
    } else {
        ints(&int_values(from), from)
    };
    let mut b = Builder::new(&format!("cast_{}", suffix(from)), x.numel(), &[&x]);
    let xv = b.load(0);
    let mut expected = Vec::new();
    for to in DType::ALL {
        let e = b.k.push(Expr::Cast { x: xv }, to);
        b.store(e);
        expected.push((format!("to {to}"), cast(&x, to), Tol::Exact));
    }
    Case {
        group: "cast",
        kernel: b.k,
        inputs: vec![x],
        expected,
    }
}

/// `where(cond, a, b)` for a float and an integer dtype.
fn where_case(dt: DType) -> Case {
    let c = ints(&[1, 0, 1, 1, 0, 0, 1], DType::Bool);
    let a = cast(&f64s(&[1.5, -2.0, f64::NAN, 4.0, 5.0, -0.0, 7.25]), dt);
    let bb = cast(&f64s(&[-1.0, 2.5, 3.0, f64::INFINITY, -5.0, 6.0, 0.0]), dt);
    let mut b = Builder::new(&format!("where_{}", suffix(dt)), 7, &[&c, &a, &bb]);
    let (cv, av, bv) = (b.load(0), b.load(1), b.load(2));
    let e = b.k.push(
        Expr::Where {
            cond: cv,
            a: av,
            b: bv,
        },
        dt,
    );
    b.store(e);
    let want = eval(Op::Where, &[&c, &a, &bb]);
    Case {
        group: "where",
        kernel: b.k,
        inputs: vec![c, a, bb],
        expected: vec![("where".into(), want, Tol::Exact)],
    }
}

/// Constant padding: the load on the taken branch only is out of range elsewhere.
fn pad_case() -> Case {
    let x = f64s(&[1.0, 2.0, 3.0, 4.0, 5.0]);
    let x = cast(&x, DType::F32);
    let mut b = Builder::new("pad_f32", 9, &[&x]);
    let src = Idx::var(0).add(Idx::Const(-2));
    let inr = b.k.push(
        Expr::InRange {
            index: src.clone(),
            lo: 0,
            hi: 5,
        },
        DType::Bool,
    );
    let ld = b.k.push(Expr::Load { arg: 0, index: src }, DType::F32);
    let zero = b.k.push(Expr::Const(Literal::Float(-1.5)), DType::F32);
    let e = b.k.push(
        Expr::Where {
            cond: inr,
            a: ld,
            b: zero,
        },
        DType::F32,
    );
    b.store(e);
    let want = eval(
        Op::Pad {
            pads: vec![(2, 2)],
            mode: PadMode::Constant(-1.5),
        },
        &[&x],
    );
    Case {
        group: "where",
        kernel: b.k,
        inputs: vec![x],
        expected: vec![("pad".into(), want, Tol::Exact)],
    }
}

/// A 2-D kernel whose inner loop the renderer peels: `out[i, j]` (6 x 11) sums two padded
/// reads of `x` [4, 6], row `i - 1` of both, columns `a0 * j + b0` and `a1 * j + b1`
/// (`cols`), each -1.5 outside `x`. Every guard is affine in `j`, so the interior runs
/// unguarded.
fn peeled_pad_case(name: &str, cols: [(i64, i64); 2]) -> Case {
    let x = cast(
        &f64s(&(0..24).map(|i| i as f64 * 0.25 - 2.0).collect::<Vec<_>>()),
        DType::F32,
    );
    let mut k = Kernel::new(name);
    k.args = vec![
        Arg {
            dtype: DType::F32,
            len: 24,
            written: false,
        },
        Arg {
            dtype: DType::F32,
            len: 66,
            written: true,
        },
    ];
    k.outer = vec![Loop { var: 0, extent: 6 }, Loop { var: 1, extent: 11 }];
    let row = Idx::var(0).add(Idx::Const(-1));
    let fill = k.push(Expr::Const(Literal::Float(-1.5)), DType::F32);
    let row_ok = k.push(
        Expr::InRange {
            index: row.clone(),
            lo: 0,
            hi: 4,
        },
        DType::Bool,
    );
    let read = |k: &mut Kernel, col: Idx| {
        let col_ok = k.push(
            Expr::InRange {
                index: col.clone(),
                lo: 0,
                hi: 6,
            },
            DType::Bool,
        );
        let ld = k.push(
            Expr::Load {
                arg: 0,
                index: row.clone().mul(6).add(col),
            },
            DType::F32,
        );
        let inner = k.push(
            Expr::Where {
                cond: col_ok,
                a: ld,
                b: fill,
            },
            DType::F32,
        );
        k.push(
            Expr::Where {
                cond: row_ok,
                a: inner,
                b: fill,
            },
            DType::F32,
        )
    };
    let col = |(a, b): (i64, i64)| Idx::var(1).mul(a).add(Idx::Const(b));
    let a = read(&mut k, col(cols[0]));
    let b = read(&mut k, col(cols[1]));
    let sum = k.push(
        Expr::Binary {
            op: BinaryOp::Add,
            a,
            b,
        },
        DType::F32,
    );
    k.stages.push(Stage::Store {
        loops: vec![],
        arg: 1,
        index: Idx::var(0).mul(11).add(Idx::var(1)),
        value: sum,
    });
    let xs = x.to_f64_vec();
    let at = |r: i64, c: i64| {
        if (0..4).contains(&r) && (0..6).contains(&c) {
            xs[(r * 6 + c) as usize]
        } else {
            -1.5
        }
    };
    let want: Vec<f64> = (0..66i64)
        .map(|p| (p / 11 - 1, p % 11))
        .map(|(r, j)| at(r, cols[0].0 * j + cols[0].1) + at(r, cols[1].0 * j + cols[1].1))
        .collect();
    Case {
        group: "peel",
        kernel: k,
        inputs: vec![x],
        expected: vec![("out".into(), cast(&f64s(&want), DType::F32), Tol::Exact)],
    }
}

/// Sum, prod, max and min of each row in one kernel (four reduce stages, four stores);
/// `cols == 0` is the empty reduction.
fn reduce_case(dt: DType, rows: usize, cols: usize) -> Case {
    let n = rows * cols;
    let x = if FLOATS.contains(&dt) {
        let mut v: Vec<f64> = (0..n)
            .map(|i| ((i * 37 % 23) as f64 - 11.0) / 8.0)
            .collect();
        if n > 10 {
            v[cols + 3] = f64::NAN; // row 1
            v[2 * cols + 1] = f64::INFINITY; // row 2
        }
        if rows >= 5 && cols > 16 {
            // Wide rows run vectorised: a NaN in the tail past the vectors, and one in a
            // later vector.
            v[4 * cols - 1] = f64::NAN; // row 3
            v[4 * cols + 9] = f64::NAN; // row 4
        }
        cast(&f64s(&v), dt)
    } else {
        let (lo, hi) = int_limits(dt);
        let v: Vec<i128> = (0..n)
            .map(|i| match i % 9 {
                0 => hi,
                4 => lo,
                k => k as i128 * 13 - 40,
            })
            .collect();
        ints(&v, dt)
    };
    let shape = [rows, cols];
    let x2 = x.with_layout(kiln_ir::Layout::contiguous(&shape));
    let mut k = Kernel::new(format!("reduce_{}_{rows}x{cols}", suffix(dt)));
    k.args.push(Arg {
        dtype: dt,
        len: n,
        written: false,
    });
    k.outer = vec![Loop {
        var: 0,
        extent: rows,
    }];
    let acc = if matches!(dt, DType::F16 | DType::BF16) {
        DType::F32
    } else {
        dt
    };
    let mut expected = Vec::new();
    for (l, op) in [ReduceOp::Sum, ReduceOp::Prod, ReduceOp::Max, ReduceOp::Min]
        .into_iter()
        .enumerate()
    {
        let l = l as u32;
        let var = 1 + l;
        let ld = k.push(
            Expr::Load {
                arg: 0,
                index: Idx::var(0).mul(cols as i64).add(Idx::var(var)),
            },
            dt,
        );
        k.stages.push(Stage::Reduce {
            loops: vec![Loop { var, extent: cols }],
            op,
            value: ld,
            local: l,
            dtype: acc,
        });
        let loc = k.push(Expr::Local(l), acc);
        let value = if acc != dt {
            k.push(Expr::Cast { x: loc }, dt)
        } else {
            loc
        };
        k.args.push(Arg {
            dtype: dt,
            len: rows,
            written: true,
        });
        let arg = k.args.len() as u32 - 1;
        k.stages.push(Stage::Store {
            loops: vec![],
            arg,
            index: Idx::var(0),
            value,
        });
        let want = eval(
            Op::Reduce {
                op,
                axes: vec![1],
                keep_dims: false,
            },
            &[&x2],
        );
        let tol = if matches!(op, ReduceOp::Sum | ReduceOp::Prod) {
            Tol::Ulp(4.0)
        } else {
            Tol::Exact
        };
        expected.push((format!("{op:?}"), want, tol));
    }
    Case {
        group: "reduce",
        kernel: k,
        inputs: vec![x],
        expected,
    }
}

/// Softmax over rows in one kernel: reduce max, reduce sum of exp, store normalised. Each stage
/// walks a row of `cols` points as a nest of one loop per entry of `dims` (their product).
fn softmax_case(dt: DType, rows: usize, dims: &[usize]) -> Case {
    let cols: usize = dims.iter().product();
    let v: Vec<f64> = (0..rows * cols)
        .map(|i| ((i * 7919) % 101) as f64 / 10.0 - 5.0)
        .collect();
    let x = cast(&f64s(&v), dt);
    let x2 = x.with_layout(kiln_ir::Layout::contiguous(&[rows, cols]));
    let acc = if matches!(dt, DType::F16 | DType::BF16) {
        DType::F32
    } else {
        dt
    };
    let name = if dims.len() == 1 { String::new() } else { format!("_{}d", dims.len()) };
    let mut k = Kernel::new(format!("softmax{name}_{}", suffix(dt)));
    k.args.push(Arg {
        dtype: dt,
        len: rows * cols,
        written: false,
    });
    k.args.push(Arg {
        dtype: dt,
        len: rows * cols,
        written: true,
    });
    k.outer = vec![Loop {
        var: 0,
        extent: rows,
    }];
    // Stage `s` (0, 1, 2) loops over vars 1 + s * n.. (n = dims.len()).
    let n = dims.len() as u32;
    let loops = |s: u32| -> Vec<Loop> {
        dims.iter()
            .enumerate()
            .map(|(d, &extent)| Loop { var: 1 + s * n + d as u32, extent })
            .collect()
    };
    let row = |s: u32| {
        loops(s).iter().fold(Idx::var(0), |acc, l| acc.mul(l.extent as i64).add(Idx::var(l.var)))
    };
    let ld = k.push(
        Expr::Load {
            arg: 0,
            index: row(0),
        },
        dt,
    );
    let ldc = k.push(Expr::Cast { x: ld }, acc);
    k.stages.push(Stage::Reduce {
        loops: loops(0),
        op: ReduceOp::Max,
        value: ldc,
        local: 0,
        dtype: acc,
    });
    // exp(x - max) in the accumulation type, for the sum and for the store.
    let exp_of = |k: &mut Kernel, s: u32| {
        let ld = k.push(
            Expr::Load {
                arg: 0,
                index: row(s),
            },
            dt,
        );
        let ldc = k.push(Expr::Cast { x: ld }, acc);
        let m = k.push(Expr::Local(0), acc);
        let d = k.push(
            Expr::Binary {
                op: BinaryOp::Sub,
                a: ldc,
                b: m,
            },
            acc,
        );
        k.push(
            Expr::Unary {
                op: UnaryOp::Exp,
                x: d,
            },
            acc,
        )
    };
    let e = exp_of(&mut k, 1);
    k.stages.push(Stage::Reduce {
        loops: loops(1),
        op: ReduceOp::Sum,
        value: e,
        local: 1,
        dtype: acc,
    });
    let e = exp_of(&mut k, 2);
    let s = k.push(Expr::Local(1), acc);
    let q = k.push(
        Expr::Binary {
            op: BinaryOp::Div,
            a: e,
            b: s,
        },
        acc,
    );
    let out = k.push(Expr::Cast { x: q }, dt);
    k.stages.push(Stage::Store {
        loops: loops(2),
        arg: 1,
        index: row(2),
        value: out,
    });
    let want = eval(Op::Softmax { axis: 1 }, &[&x2]);
    let tol = if acc == dt {
        Tol::Ulp(8.0)
    } else {
        Tol::Ulp(1.0)
    };
    Case {
        group: "multistage",
        kernel: k,
        inputs: vec![x],
        expected: vec![("softmax".into(), want, tol)],
    }
}

/// Two outer loops (collapsed), a transposed load, float literals; a flat index split by
/// Div/Mod; an Index expression as i32; an empty-outer kernel (one point).
fn layout_cases() -> Vec<Case> {
    let mut out = Vec::new();
    // out[i, j] = x[j, i] * 2 + 0.25 for x [4, 6].
    let x = cast(
        &f64s(&(0..24).map(|i| i as f64 * 0.5 - 3.0).collect::<Vec<_>>()),
        DType::F32,
    );
    let mut k = Kernel::new("transpose_affine");
    k.args = vec![
        Arg {
            dtype: DType::F32,
            len: 24,
            written: false,
        },
        Arg {
            dtype: DType::F32,
            len: 24,
            written: true,
        },
    ];
    k.outer = vec![Loop { var: 0, extent: 6 }, Loop { var: 1, extent: 4 }];
    let ld = k.push(
        Expr::Load {
            arg: 0,
            index: Idx::var(1).mul(6).add(Idx::var(0)),
        },
        DType::F32,
    );
    let two = k.push(Expr::Const(Literal::Float(2.0)), DType::F32);
    let q = k.push(Expr::Const(Literal::Float(0.25)), DType::F32);
    let m = k.push(
        Expr::Binary {
            op: BinaryOp::Mul,
            a: ld,
            b: two,
        },
        DType::F32,
    );
    let s = k.push(
        Expr::Binary {
            op: BinaryOp::Add,
            a: m,
            b: q,
        },
        DType::F32,
    );
    k.stages.push(Stage::Store {
        loops: vec![],
        arg: 1,
        index: Idx::var(0).mul(4).add(Idx::var(1)),
        value: s,
    });
    let xt = eval(
        Op::Permute(vec![1, 0]),
        &[&x.with_layout(kiln_ir::Layout::contiguous(&[4, 6]))],
    );
    let m = eval(
        Op::Binary(BinaryOp::Mul),
        &[&xt, &HostTensor::scalar(2.0f32)],
    );
    let want = eval(
        Op::Binary(BinaryOp::Add),
        &[&m, &HostTensor::scalar(0.25f32)],
    );
    let want = want.with_layout(kiln_ir::Layout::contiguous(&[24]));
    out.push(Case {
        group: "layout",
        kernel: k,
        inputs: vec![x.clone()],
        expected: vec![("t".into(), want, Tol::Exact)],
    });

    // out[i] = x[(i % 6) * 4 + i / 6] (the transpose of x viewed [6, 4], flattened), and
    // idx[i] = 3 * i - 5 as i32.
    let mut b = Builder::new("flat_divmod", 24, &[&x]);
    let i = Idx::var(0);
    let src = i.clone().rem(6).mul(4).add(i.clone().div(6));
    let ld = b.k.push(Expr::Load { arg: 0, index: src }, DType::F32);
    b.store(ld);
    let ix =
        b.k.push(Expr::Index(i.mul(3).add(Idx::Const(-5))), DType::I32);
    b.store(ix);
    let xs = x.to_vec::<f32>().unwrap();
    let want: Vec<f32> = (0..24).map(|i| xs[(i % 6) * 4 + i / 6]).collect();
    let want_ix: Vec<i32> = (0..24).map(|i| 3 * i - 5).collect();
    out.push(Case {
        group: "layout",
        kernel: b.k,
        inputs: vec![x],
        expected: vec![
            (
                "divmod".into(),
                HostTensor::from_vec(want, &[24]).unwrap(),
                Tol::Exact,
            ),
            (
                "index".into(),
                HostTensor::from_vec(want_ix, &[24]).unwrap(),
                Tol::Exact,
            ),
        ],
    });

    // No outer loop: a full sum of 5 i64 values into one element, plus integer literals.
    let y = ints(&[5, -7, i64::MAX as i128, 3, 1], DType::I64);
    let mut k = Kernel::new("scalar_sum_i64");
    k.args = vec![
        Arg {
            dtype: DType::I64,
            len: 5,
            written: false,
        },
        Arg {
            dtype: DType::I64,
            len: 1,
            written: true,
        },
    ];
    let ld = k.push(
        Expr::Load {
            arg: 0,
            index: Idx::var(0),
        },
        DType::I64,
    );
    k.stages.push(Stage::Reduce {
        loops: vec![Loop { var: 0, extent: 5 }],
        op: ReduceOp::Sum,
        value: ld,
        local: 0,
        dtype: DType::I64,
    });
    let loc = k.push(Expr::Local(0), DType::I64);
    let c = k.push(Expr::Const(Literal::Int(i64::MIN as i128)), DType::I64);
    let s = k.push(
        Expr::Binary {
            op: BinaryOp::Add,
            a: loc,
            b: c,
        },
        DType::I64,
    );
    k.stages.push(Stage::Store {
        loops: vec![],
        arg: 1,
        index: Idx::Const(0),
        value: s,
    });
    let sum = eval(
        Op::Reduce {
            op: ReduceOp::Sum,
            axes: vec![0],
            keep_dims: true,
        },
        &[&y],
    );
    let want = eval(
        Op::Binary(BinaryOp::Add),
        &[&sum, &HostTensor::scalar(i64::MIN)],
    );
    out.push(Case {
        group: "layout",
        kernel: k,
        inputs: vec![y],
        expected: vec![("sum".into(), want, Tol::Exact)],
    });

    // Large enough for the OpenMP parallel loop: x * y + x over 200k elements.
    let n = 200_000;
    let a = cast(
        &f64s(
            &(0..n)
                .map(|i| (i % 1000) as f64 * 0.01 - 3.0)
                .collect::<Vec<_>>(),
        ),
        DType::F32,
    );
    let c = cast(
        &f64s(
            &(0..n)
                .map(|i| (i % 777) as f64 * 0.02 + 0.5)
                .collect::<Vec<_>>(),
        ),
        DType::F32,
    );
    let mut b = Builder::new("big_fma_f32", n, &[&a, &c]);
    let (av, cv) = (b.load(0), b.load(1));
    let m = b.k.push(
        Expr::Binary {
            op: BinaryOp::Mul,
            a: av,
            b: cv,
        },
        DType::F32,
    );
    let s = b.k.push(
        Expr::Binary {
            op: BinaryOp::Add,
            a: m,
            b: av,
        },
        DType::F32,
    );
    b.store(s);
    let want = eval(
        Op::Binary(BinaryOp::Add),
        &[&eval(Op::Binary(BinaryOp::Mul), &[&a, &c]), &a],
    );
    out.push(Case {
        group: "layout",
        kernel: b.k,
        inputs: vec![a, c],
        expected: vec![("fma".into(), want, Tol::Exact)],
    });
    out
}

fn all_cases() -> Vec<Case> {
    let mut cases = Vec::new();
    for dt in FLOATS {
        cases.push(unary_float_case(dt));
        cases.push(binary_float_case(dt));
        cases.push(where_case(dt));
        cases.push(reduce_case(dt, 5, 7));
        cases.push(reduce_case(dt, 3, 0));
        cases.push(reduce_case(dt, 6, 37));
        cases.push(softmax_case(dt, 6, &[37]));
        cases.push(softmax_case(dt, 5, &[3, 7]));
    }
    for dt in INTS {
        cases.push(unary_int_case(dt));
        cases.extend(binary_int_cases(dt));
        cases.push(reduce_case(dt, 5, 7));
        cases.push(reduce_case(dt, 3, 0));
    }
    cases.push(where_case(DType::I32));
    cases.push(unary_bool_case());
    cases.push(binary_bool_case());
    cases.push(pad_case());
    // The interior's bounds come from the negative step (10 - 2j), then from the positive one.
    cases.push(peeled_pad_case("peeled_pad_neg", [(-2, 10), (1, -1)]));
    cases.push(peeled_pad_case("peeled_pad_pos", [(1, -1), (1, 2)]));
    for dt in DType::ALL {
        cases.push(cast_case(dt));
    }
    cases.extend(layout_cases());
    cases
}

struct Compiled {
    lib: NativeLibrary,
    cases: Vec<Case>,
}

/// Every case compiled into one library (one compiler run for the whole file), or None
/// when this machine has no C compiler.
fn compiled() -> Option<&'static Compiled> {
    static LIB: OnceLock<Option<Compiled>> = OnceLock::new();
    LIB.get_or_init(|| {
        let tc = match Toolchain::detect() {
            Ok(tc) => tc,
            Err(e) => {
                eprintln!("note: skipping the compiled C tests: {e}");
                return None;
            }
        };
        let cases = all_cases();
        let src = render_kernels(cases.iter().map(|c| &c.kernel))
            .unwrap_or_else(|e| panic!("render: {e}"));
        let dir = std::env::temp_dir().join(format!("kiln-codegen-c-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let so = dir.join("kernels.so");
        tc.compile_shared(&src, &so)
            .unwrap_or_else(|e| panic!("compile: {e}"));
        let lib = NativeLibrary::load(&so).unwrap();
        Some(Compiled { lib, cases })
    })
    .as_ref()
}

/// Launches `case` over `ranges` of its first outer loop and returns its written arguments.
fn launch(lib: &NativeLibrary, case: &Case, ranges: &[(i64, i64)]) -> Vec<HostTensor> {
    let k = &case.kernel;
    let f = lib.kernel(&k.name).unwrap();
    let mut bufs: Vec<Vec<u64>> = k
        .args
        .iter()
        .map(|a| vec![0u64; (a.len * a.dtype.size_of()).div_ceil(8).max(1)])
        .collect();
    for (buf, t) in bufs.iter_mut().zip(&case.inputs) {
        let bytes = t.contiguous().storage.as_bytes().into_owned();
        // SAFETY: the buffer holds at least `bytes.len()` bytes.
        unsafe {
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), buf.as_mut_ptr() as *mut u8, bytes.len())
        };
    }
    let ptrs: Vec<*mut c_void> = bufs
        .iter_mut()
        .map(|b| b.as_mut_ptr() as *mut c_void)
        .collect();
    for &(b, e) in ranges {
        // SAFETY: every argument buffer has its declared length.
        unsafe { f(ptrs.as_ptr(), b, e) };
    }
    k.args[case.inputs.len()..]
        .iter()
        .zip(&bufs[case.inputs.len()..])
        .map(|(a, buf)| {
            let n = a.len * a.dtype.size_of();
            // SAFETY: the buffer holds at least `n` bytes.
            let bytes = unsafe { std::slice::from_raw_parts(buf.as_ptr() as *const u8, n) };
            HostTensor::new(Storage::from_le_bytes(a.dtype, bytes).unwrap(), &[a.len]).unwrap()
        })
        .collect()
}

/// The spacing of `dt` values near `w`.
fn ulp(dt: DType, w: f64) -> f64 {
    let (mant, min_exp) = match dt {
        DType::F64 => (52, -1022),
        DType::F32 => (23, -126),
        DType::F16 => (10, -14),
        _ => (7, -126),
    };
    let e = if w == 0.0 {
        min_exp
    } else {
        (w.abs().log2().floor() as i32).max(min_exp)
    };
    2f64.powi(e - mant)
}

/// The first mismatch of `got` against `want`, if any.
fn compare(what: &str, got: &HostTensor, want: &HostTensor, tol: Tol) -> Result<(), String> {
    if got.dtype() != want.dtype() || got.numel() != want.numel() {
        return Err(format!(
            "{what}: got {} {:?}, want {} {:?}",
            got.dtype(),
            got.shape(),
            want.dtype(),
            want.shape()
        ));
    }
    let dt = want.dtype();
    if !FLOATS.contains(&dt) {
        let (g, w) = (got.storage.as_bytes(), want.storage.as_bytes());
        if g != w {
            let size = dt.size_of();
            let i = (0..want.numel())
                .find(|&i| g[i * size..(i + 1) * size] != w[i * size..(i + 1) * size])
                .unwrap_or(0);
            return Err(format!(
                "{what}: element {i}: got {} want {} (bytes {:?} vs {:?})",
                got.storage.get_f64(i),
                want.storage.get_f64(i),
                &g[i * size..(i + 1) * size],
                &w[i * size..(i + 1) * size]
            ));
        }
        return Ok(());
    }
    for i in 0..want.numel() {
        let (g, w) = (got.storage.get_f64(i), want.storage.get_f64(i));
        let ok = match tol {
            _ if w.is_nan() => g.is_nan(),
            Tol::Exact => g.to_bits() == w.to_bits(),
            _ if w.is_infinite() => g == w,
            Tol::Ulp(n) => (g - w).abs() <= n * ulp(dt, w),
        };
        if !ok {
            return Err(format!(
                "{what}: element {i}: got {g:e} want {w:e} ({tol:?})"
            ));
        }
    }
    Ok(())
}

/// Runs every case of `group`, whole and in split ranges.
fn check_group(group: &str) {
    let Some(c) = compiled() else { return };
    let mut ran = 0;
    let mut failures = Vec::new();
    for case in c.cases.iter().filter(|c| c.group == group) {
        let n = case.kernel.outer.first().map_or(0, |l| l.extent as i64);
        let mut splits = vec![vec![(0, n)]];
        if n >= 2 {
            splits.push(vec![(0, n / 3), (n / 3, n)]);
            splits.push(
                (0..n)
                    .map(|i| (i, i + 1))
                    .take(64)
                    .chain([(n.min(64), n)])
                    .collect(),
            );
        }
        for ranges in &splits {
            let got = launch(&c.lib, case, ranges);
            for (g, (name, want, tol)) in got.iter().zip(&case.expected) {
                let want = want.contiguous();
                if let Err(e) = compare(
                    &format!(
                        "{} / {name} / ranges {:?}",
                        case.kernel.name,
                        &ranges[..ranges.len().min(3)]
                    ),
                    g,
                    &want,
                    *tol,
                ) {
                    failures.push(e);
                }
            }
        }
        ran += 1;
    }
    assert!(ran > 0, "no case in group {group}");
    assert!(
        failures.is_empty(),
        "{} mismatches:\n{}",
        failures.len(),
        failures[..failures.len().min(40)].join("\n")
    );
}

#[test]
fn unary_ops_match_the_interpreter() {
    check_group("unary");
}

#[test]
fn binary_ops_match_the_interpreter() {
    check_group("binary");
}

#[test]
fn casts_match_the_interpreter() {
    check_group("cast");
}

#[test]
fn where_and_guarded_loads_match_the_interpreter() {
    check_group("where");
}

#[test]
fn reductions_match_the_interpreter() {
    check_group("reduce");
}

#[test]
fn softmax_in_one_kernel_matches_the_interpreter() {
    check_group("multistage");
}

#[test]
fn layouts_indices_and_parallel_launches_are_right() {
    check_group("layout");
}

#[test]
fn rendered_c_is_readable() {
    let c = softmax_case(DType::F32, 64, &[1024]);
    let src = render_kernel(&c.kernel).unwrap();
    assert!(
        src.contains("void softmax_f32(void* const* args, int64_t begin, int64_t end)"),
        "{src}"
    );
    assert!(
        src.contains("const float* in0 = (const float*)args[0];"),
        "{src}"
    );
    assert!(src.contains("float* out1 = (float*)args[1];"), "{src}");
    // The runtime splits launch ranges over its threads: no OpenMP team inside the C.
    assert!(!src.contains("omp parallel"), "{src}");
    assert!(
        src.contains("for (int64_t i0 = begin; i0 < end; i0++)"),
        "{src}"
    );
    assert!(src.contains("#pragma omp simd reduction(+:acc1)"), "{src}");
    assert!(src.contains("acc0 = kc_maxf(acc0, v1);"), "{src}");
}

#[test]
fn softmax_computes_exp_once_per_point() {
    // The sum keeps exp(x - max) per point of the row; the store divides the kept value.
    for dims in [&[1024][..], &[3, 7]] {
        let c = softmax_case(DType::F32, 64, dims);
        let src = render_kernel(&c.kernel).unwrap();
        assert_eq!(src.matches("kc_expf_v(").count(), 1, "{src}");
        let points: usize = dims.iter().product();
        assert!(src.contains(&format!("float row0[{points}];")), "{src}");
    }
    // Not when the kernel writes the argument exp reads (the store could change it first),
    // nor over rows longer than the kept arrays may be.
    let mut c = softmax_case(DType::F32, 4, &[37]);
    c.kernel.args[0].written = true;
    let src = render_kernel(&c.kernel).unwrap();
    assert_eq!(src.matches("kc_expf_v(").count(), 2, "{src}");
    let c = softmax_case(DType::F32, 1, &[kiln_cpu::codegen::row_values::MAX_ROW + 1]);
    let src = render_kernel(&c.kernel).unwrap();
    assert_eq!(src.matches("kc_expf_v(").count(), 2, "{src}");
    // The values themselves: the multistage group runs these kernels against the interpreter.
    check_group("multistage");
}

#[test]
fn padded_kernels_are_peeled_and_match_the_interpreter() {
    let c = peeled_pad_case("peeled", [(-2, 10), (1, -1)]);
    let src = render_kernel(&c.kernel).unwrap();
    // Edge, interior and edge loops over j, the interior without tests or clamps.
    assert_eq!(src.matches("kc_peel(").count(), 5, "{src}");
    assert_eq!(src.matches("for (int64_t i1 = ").count(), 3, "{src}");
    check_group("peel");
}

#[test]
fn unrenderable_kernels_are_unsupported_errors() {
    let x = cast(&f64s(&[1.0]), DType::F32);
    // Bitwise not of a float.
    let mut b = Builder::new("not_f32", 1, &[&x]);
    let xv = b.load(0);
    let e = b.k.push(
        Expr::Unary {
            op: UnaryOp::Not,
            x: xv,
        },
        DType::F32,
    );
    b.store(e);
    let err = render_kernel(&b.k).unwrap_err();
    assert!(
        matches!(err, kiln_ir::Error::Unsupported(_)) && err.to_string().contains("Not"),
        "{err}"
    );
    // Mean must be lowered before codegen.
    let mut k = reduce_case(DType::F32, 2, 3).kernel;
    if let Stage::Reduce { op, .. } = &mut k.stages[0] {
        *op = ReduceOp::Mean;
    }
    let err = render_kernel(&k).unwrap_err();
    assert!(err.to_string().contains("Mean"), "{err}");
    // A store of the wrong dtype, and a name that is not a C identifier.
    let mut b = Builder::new("bad store", 1, &[&x]);
    let xv = b.load(0);
    b.store(xv);
    assert!(
        render_kernel(&b.k)
            .unwrap_err()
            .to_string()
            .contains("C identifier")
    );
    let mut b = Builder::new("wrong_dtype", 1, &[&x]);
    let xv = b.load(0);
    let c = b.k.push(Expr::Cast { x: xv }, DType::F64);
    b.store(c);
    b.k.args[1].dtype = DType::F32;
    assert!(render_kernel(&b.k).is_err());
    // Duplicate names in one unit.
    let k = unary_bool_case().kernel;
    assert!(render_kernels([&k, &k]).is_err());
}

#[test]
fn toolchain_reports_missing_compilers_and_compile_errors() {
    let err = Toolchain::with_compiler("/nonexistent/kiln-cc".into()).unwrap_err();
    assert!(err.to_string().contains("apt install gcc"), "{err}");
    assert!(!cpu_features().is_empty());
    let Ok(tc) = Toolchain::detect() else {
        eprintln!("note: no C compiler, skipping the compile-error check");
        return;
    };
    assert!(tc.id().contains("-O3") && tc.id().contains(&tc.version));
    let dir = std::env::temp_dir().join(format!("kiln-codegen-c-err-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let err = tc
        .compile_shared("void broken( {", &dir.join("bad.so"))
        .unwrap_err();
    assert!(err.to_string().contains("bad.c"), "{err}");
    assert!(dir.join("bad.c").exists() && !dir.join("bad.so").exists());
    let lib_err = NativeLibrary::load(&dir.join("missing.so")).unwrap_err();
    assert!(lib_err.to_string().contains("missing.so"), "{lib_err}");
    // A build whose parallel flags the compiler rejects is done again without them.
    let odd = Toolchain { parallel: vec!["--kiln-no-such-flag".into()], ..tc.clone() };
    odd.compile_shared("int kiln_fallback(void) { return 7; }", &dir.join("fallback.so"))
        .expect("the build without the rejected flag");
    assert!(dir.join("fallback.so").exists());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn gcc_builds_in_parallel_partitions_and_other_compilers_in_one_process() {
    let gcc = "gcc (Debian 12.2.0-14) 12.2.0\nCopyright (C) 2022 Free Software Foundation, Inc.\n";
    assert_eq!(parallel_flags(gcc, 2), ["-flto=2", "--param=lto-min-partition=500"]);
    assert_eq!(parallel_flags(gcc, 8)[0], "-flto=8");
    assert!(parallel_flags(gcc, 1).is_empty(), "one thread: nothing to spread");
    let clang = "Debian clang version 14.0.6\nTarget: x86_64-pc-linux-gnu\n";
    assert!(parallel_flags(clang, 4).is_empty());
    if let Ok(tc) = Toolchain::detect() {
        // The flags are part of the cache key: a library built otherwise is not reused.
        assert!(tc.id().ends_with(&tc.parallel.join(" ")), "{}", tc.id());
    }
}

#[test]
fn avx2_cpus_without_avx512_get_256_bit_vectors() {
    let gcc = "gcc (Debian 12.2.0-14) 12.2.0\nCopyright (C) 2022 Free Software Foundation, Inc.\n";
    let clang = "Debian clang version 14.0.6\nTarget: x86_64-pc-linux-gnu\n";
    let wide = ["-mprefer-vector-width=256"];
    if cfg!(target_arch = "x86_64") {
        assert_eq!(vector_flags(gcc, true, false), wide);
        assert_eq!(vector_flags(clang, true, false), wide);
    }
    assert!(vector_flags(gcc, true, true).is_empty(), "AVX-512: the compiler's own choice");
    assert!(vector_flags(gcc, false, false).is_empty(), "no AVX2: nothing to widen");
    assert!(vector_flags("tcc version 0.9.27", true, false).is_empty(), "a compiler that may not know the flag");
    if let Ok(tc) = Toolchain::detect() {
        // Part of the cache key, and given to every build (the compile tests build with it).
        assert!(tc.id().contains(&tc.vector.join(" ")), "{}", tc.id());
    }
}

/// Float max / min reductions are `simd` reductions through the prelude's NaN-wins operators
/// (the compiled cases above check they still give the interpreter's values, NaN included).
#[test]
fn float_max_and_min_reduce_as_simd_reductions() {
    for (dt, max, min) in [(DType::F32, "kc_maxf_r", "kc_minf_r"), (DType::F64, "kc_max_r", "kc_min_r")] {
        let src = render_kernel(&reduce_case(dt, 6, 37).kernel).unwrap();
        for op in [max, min] {
            assert!(src.contains(&format!("#pragma omp simd reduction({op}:")), "{dt}: no {op} reduction in\n{src}");
        }
    }
}
