//! Random graphs for differential tests: a seed picks inputs (shapes with size-1 and empty dims,
//! f32 with NaN/Inf, integers, bools) and a chain of ops drawn from the whole primitive and
//! composite op set; ops whose operands do not fit are skipped (Graph::add refuses them).

use kiln_ir::{
    BinaryOp, DType, Graph, HostTensor, NodeId, Op, PadMode, ReduceOp, Shape, SliceAxis, TensorType, UnaryOp,
};

/// A small deterministic generator (xorshift64*), so a failing seed reproduces.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
    pub fn pick<T: Clone>(&mut self, xs: &[T]) -> T {
        xs[self.below(xs.len())].clone()
    }
    pub fn f32(&mut self) -> f32 {
        match self.below(40) {
            0 => f32::NAN,
            1 => f32::INFINITY,
            2 => f32::NEG_INFINITY,
            3 => 0.0,
            _ => (self.below(2001) as f32 - 1000.0) / 250.0,
        }
    }
}

fn random_shape(r: &mut Rng) -> Vec<usize> {
    let rank = r.below(5);
    (0..rank)
        .map(|_| {
            let d = r.pick(&[1, 1, 2, 3, 4, 5, 7, 8, 0]);
            // Empty dims now and then, not in most graphs.
            if r.below(12) == 0 { d } else { d.max(1) }
        })
        .collect()
}

/// Random data of `dtype` and `shape`.
pub fn random_tensor(r: &mut Rng, dtype: DType, shape: &[usize]) -> HostTensor {
    let n: usize = shape.iter().product();
    let t = match dtype {
        DType::F32 => HostTensor::from_vec((0..n).map(|_| r.f32()).collect::<Vec<f32>>(), shape),
        DType::I32 => HostTensor::from_vec((0..n).map(|_| r.below(21) as i32 - 10).collect::<Vec<i32>>(), shape),
        DType::I64 => HostTensor::from_vec((0..n).map(|_| r.below(2001) as i64 - 1000).collect::<Vec<i64>>(), shape),
        _ => HostTensor::from_vec((0..n).map(|_| r.below(2) == 1).collect::<Vec<bool>>(), shape),
    };
    t.unwrap_or_else(|_| HostTensor::zeros(dtype, shape))
}

/// A random graph and inputs for it.
pub fn random_graph(seed: u64) -> (Graph, Vec<HostTensor>) {
    let mut r = Rng::new(seed);
    let mut g = Graph::new();
    let mut inputs = Vec::new();
    let mut pool: Vec<NodeId> = Vec::new();
    let base = random_shape(&mut r);
    for i in 0..1 + r.below(3) {
        let dtype = r.pick(&[DType::F32, DType::F32, DType::F32, DType::I32, DType::I64, DType::Bool]);
        // Inputs share a broadcast-compatible shape most of the time so binary ops apply.
        let shape = if r.below(3) == 0 { random_shape(&mut r) } else { base.clone() };
        let shape = if r.below(4) == 0 && !shape.is_empty() { shape[1..].to_vec() } else { shape };
        let id = g.input(&format!("x{i}"), TensorType::new(dtype, Shape::fixed(&shape)));
        inputs.push(random_tensor(&mut r, dtype, &shape));
        pool.push(id);
    }
    for _ in 0..2 + r.below(10) {
        let x = r.pick(&pool);
        let ty = g.ty(x).clone();
        let rank = ty.shape.rank();
        let dims: Vec<usize> = ty.shape.0.iter().map(|d| d.fixed().unwrap_or(1)).collect();
        let float = ty.dtype.is_float();
        let op_and_args: Option<(Op, Vec<NodeId>)> = match r.below(16) {
            0 | 1 => {
                let u = if float {
                    r.pick(&[UnaryOp::Neg, UnaryOp::Abs, UnaryOp::Exp, UnaryOp::Relu, UnaryOp::Sigmoid, UnaryOp::Tanh,
                        UnaryOp::Sqrt, UnaryOp::Log, UnaryOp::Floor, UnaryOp::Round, UnaryOp::Erf, UnaryOp::Sign,
                        UnaryOp::IsNan, UnaryOp::Reciprocal, UnaryOp::Sin])
                } else if ty.dtype == DType::Bool {
                    UnaryOp::Not
                } else {
                    r.pick(&[UnaryOp::Neg, UnaryOp::Abs, UnaryOp::Sign, UnaryOp::Not])
                };
                // sqrt, log and 1/x blow a last-ulp difference near zero up without bound, and
                // computed values can be cancellation noise near zero (layer norm of a padded,
                // constant row): only raw inputs get them.
                // sign, floor and round jump where a computed value may sit a last ulp away
                // (0 against a subnormal, 1 against 0.99999994), and exp of exp reaches
                // 1e38 where layer norm's variance overflows: raw inputs only, likewise.
                let raw = matches!(g.node(x).op, Op::Input { .. });
                let fragile = matches!(
                    u,
                    UnaryOp::Sqrt
                        | UnaryOp::Log
                        | UnaryOp::Reciprocal
                        | UnaryOp::Sign
                        | UnaryOp::Floor
                        | UnaryOp::Round
                        | UnaryOp::Exp
                );
                let u = if fragile && float && !raw { UnaryOp::Abs } else { u };
                Some((Op::Unary(u), vec![x]))
            }
            2..=4 => {
                let y = r.pick(&pool);
                let b = if float {
                    r.pick(&[BinaryOp::Add, BinaryOp::Sub, BinaryOp::Mul, BinaryOp::Div, BinaryOp::Max, BinaryOp::Min,
                        BinaryOp::Pow, BinaryOp::Lt, BinaryOp::Eq, BinaryOp::Rem])
                } else if ty.dtype == DType::Bool {
                    r.pick(&[BinaryOp::And, BinaryOp::Or, BinaryOp::Xor, BinaryOp::Eq])
                } else {
                    r.pick(&[BinaryOp::Add, BinaryOp::Sub, BinaryOp::Mul, BinaryOp::Max, BinaryOp::Min, BinaryOp::Ge,
                        BinaryOp::And, BinaryOp::Xor])
                };
                // rem is discontinuous (it jumps by the divisor where the quotient crosses an
                // integer), and div is singular at a zero divisor (0/0 is NaN, a subnormal
                // over 0 is Inf: exp's underflow decides), so on computed operands a last-ulp
                // difference between two correct implementations can change the result by
                // anything: only raw inputs get them.
                let raw = |id: NodeId| matches!(g.node(id).op, Op::Input { .. });
                // pow is singular at a zero base and comparisons jump: the same rule.
                let fragile = matches!(b, BinaryOp::Rem | BinaryOp::Div | BinaryOp::Pow | BinaryOp::Lt | BinaryOp::Eq);
                let b = if fragile && float && !(raw(x) && raw(y)) { BinaryOp::Sub } else { b };
                Some((Op::Binary(b), vec![x, y]))
            }
            5 => {
                // A scalar constant operand (a literal in the kernel).
                let c = random_tensor(&mut r, ty.dtype, &[]);
                let b = r.pick(&[BinaryOp::Add, BinaryOp::Mul, BinaryOp::Max]);
                // Inf times a computed 0 (exp underflow) or a subnormal is NaN or Inf.
                let finite = c.to_f64_vec().iter().all(|x| x.is_finite());
                let raw = matches!(g.node(x).op, Op::Input { .. });
                let b = if b == BinaryOp::Mul && !finite && !raw { BinaryOp::Add } else { b };
                let c = g.constant(c);
                Some((Op::Binary(b), vec![x, c]))
            }
            6 if rank > 0 && ty.dtype != DType::Bool => {
                let mut axes: Vec<usize> = (0..rank).filter(|_| r.below(2) == 0).collect();
                if axes.is_empty() {
                    axes.push(rank - 1);
                }
                // A product of computed values compounds their rounding (and reaches 1e12,
                // where sin is noise): raw inputs only.
                let raw = matches!(g.node(x).op, Op::Input { .. });
                let op = if float && raw {
                    r.pick(&[ReduceOp::Sum, ReduceOp::Mean, ReduceOp::Max, ReduceOp::Min, ReduceOp::Prod])
                } else if float {
                    r.pick(&[ReduceOp::Sum, ReduceOp::Mean, ReduceOp::Max, ReduceOp::Min])
                } else {
                    r.pick(&[ReduceOp::Sum, ReduceOp::Max, ReduceOp::Min])
                };
                Some((Op::Reduce { op, axes, keep_dims: r.below(2) == 0 }, vec![x]))
            }
            7 if rank > 0 && float => Some((Op::Softmax { axis: r.below(rank) }, vec![x])),
            // A large eps: over equal values (a broadcast scalar, say) layer norm divides a
            // last-ulp difference of the mean by sqrt(eps), which no tolerance should absorb.
            // Raw inputs only: over a constant computed row (a broadcast scalar, say) the
            // centred values are rounding noise of the values' size, which a later Inf turns
            // into Inf against NaN, and near f32's range the variance overflows. (The zoo
            // tests fuse layer norm into computed values.)
            8 if rank > 0 && float && matches!(g.node(x).op, Op::Input { .. }) => {
                Some((Op::LayerNorm { axis: r.below(rank), eps: 0.1 }, vec![x]))
            }
            9 if float => Some((Op::Gelu { tanh_approx: r.below(2) == 0 }, vec![x])),
            10 if rank > 1 => {
                let mut perm: Vec<usize> = (0..rank).collect();
                for i in (1..rank).rev() {
                    perm.swap(i, r.below(i + 1));
                }
                Some((Op::Permute(perm), vec![x]))
            }
            11 => {
                let n: usize = dims.iter().product();
                let target = if n > 0 && n % 2 == 0 && r.below(2) == 0 { vec![2, n / 2] } else { vec![n] };
                Some((Op::Reshape(Shape::fixed(&target)), vec![x]))
            }
            12 if rank > 0 => {
                let axes = dims
                    .iter()
                    .map(|&d| {
                        if d > 1 && r.below(2) == 0 {
                            SliceAxis { start: 1, end: d as i64, step: r.pick(&[1, 2]) }
                        } else if d > 1 && r.below(3) == 0 {
                            SliceAxis { start: d as i64 - 1, end: i64::MIN, step: -1 }
                        } else {
                            SliceAxis::FULL
                        }
                    })
                    .collect();
                Some((Op::Slice(axes), vec![x]))
            }
            13 => {
                let to = r.pick(&[DType::F32, DType::I32, DType::Bool, DType::I64]);
                // Float to integer or bool truncates: computed floats a last ulp below an
                // integer (or off 0) would cast to another value.
                let raw = matches!(g.node(x).op, Op::Input { .. });
                let to = if float && !raw { DType::F32 } else { to };
                Some((Op::Cast(to), vec![x]))
            }
            14 if rank >= 1 && float => {
                // x @ W with a constant weight.
                let k = dims[rank - 1];
                let n = 1 + r.below(5);
                // No Inf in the weight: Inf times a computed 0 (against a last-ulp 1e-9) is
                // NaN against Inf. NaN weights stay (NaN wins either way).
                let w = random_tensor(&mut r, DType::F32, &[k, n]);
                let w = HostTensor::from_vec(
                    w.to_f64_vec().iter().map(|&v| if v.is_infinite() { f32::NAN } else { v as f32 }).collect::<Vec<f32>>(),
                    &[k, n],
                )
                .unwrap_or(w);
                let w = g.constant(w);
                Some((Op::MatMul, vec![x, w]))
            }
            15 if rank > 0 => {
                let pads = dims.iter().map(|_| (r.below(2), r.below(2))).collect();
                Some((Op::Pad { pads, mode: PadMode::Constant(0.5) }, vec![x]))
            }
            _ => {
                let y = r.pick(&pool);
                // A computed float's truth is fragile at 0 (see cast above); is_nan is not.
                let raw = matches!(g.node(x).op, Op::Input { .. });
                let cond = if float && !raw { Op::Unary(UnaryOp::IsNan) } else { Op::Cast(DType::Bool) };
                let c = g.add(cond, &[x]).ok();
                c.map(|c| (Op::Where, vec![c, y, x]))
            }
        };
        if let Some((op, args)) = op_and_args
            && let Ok(id) = g.add(op, &args)
        {
            // Keep tensors small: the interpreter and the compiled program both run them.
            if g.ty(id).shape.0.iter().map(|d| d.fixed().unwrap_or(1)).product::<usize>() <= 4096 {
                pool.push(id);
            }
        }
    }
    // The last value and one random earlier one are outputs (fusion must keep both).
    let last = *pool.last().unwrap_or(&g.inputs[0]);
    g.output(last);
    let other = r.pick(&pool);
    if other != last {
        g.output(other);
    }
    (g, inputs)
}

/// Checks two output lists agree: exact for integers and bools, NaN where NaN, and floats within
/// `rtol * |want| + atol`. Returns a message naming the first difference.
pub fn compare(got: &[HostTensor], want: &[HostTensor], rtol: f64, atol: f64) -> Result<(), String> {
    if got.len() != want.len() {
        return Err(format!("{} outputs, expected {}", got.len(), want.len()));
    }
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        if g.dtype() != w.dtype() || g.shape() != w.shape() {
            return Err(format!("output {i}: {}{:?}, expected {}{:?}", g.dtype(), g.shape(), w.dtype(), w.shape()));
        }
        for (j, (a, b)) in g.to_f64_vec().into_iter().zip(w.to_f64_vec()).enumerate() {
            let ok = if w.dtype().is_float() {
                (a.is_nan() && b.is_nan()) || a == b || (a - b).abs() <= rtol * b.abs() + atol
            } else {
                a == b
            };
            if !ok {
                return Err(format!("output {i} element {j}: got {a}, expected {b}"));
            }
        }
    }
    Ok(())
}
