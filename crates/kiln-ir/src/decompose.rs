//! Decomposition of composite ops into primitives. Softmax, LogSoftmax, LayerNorm, BatchNorm,
//! Gelu and Attention become unary/binary/reduce/movement/matmul/where/cast nodes, so the
//! scheduler only needs to fuse primitives (and re-discovers the composites as fusion groups).
//! A float max pool with a small window becomes the max of its taps, each a strided slice of
//! the input padded with -inf: views and pointwise ops, which fuse into one kernel.
//! Half-precision inputs (f16, bf16) are computed in f32 and cast back, as the direct kernels do.

use crate::{
    BinaryOp, ConstId, DType, Dim, Error, Graph, HostTensor, Node, NodeId, Op, ReduceOp, Result,
    Shape, TensorType, UnaryOp,
};
use std::collections::HashMap;

/// A copy of `graph` with every composite op replaced by primitives computing the same values.
/// Inputs (order, names, types), outputs and all other nodes are kept; constants are shared.
/// The node that replaces a composite carries its name.
pub fn decompose(graph: &Graph) -> Result<Graph> {
    decompose_keeping(graph, &|_, _| false)
}

/// [`decompose`], but a composite for which `keep(op, input types)` is true stays one node (a
/// backend with its own kernel for it: kiln-cuda's fused attention).
pub fn decompose_keeping(graph: &Graph, keep: &dyn Fn(&Op, &[&TensorType]) -> bool) -> Result<Graph> {
    let mut b = Builder { g: Graph::new(), scalars: HashMap::new() };
    b.g.consts = graph.consts.clone();
    let mut map: Vec<Option<NodeId>> = vec![None; graph.nodes.len()];
    // Inputs first, in binding order, so the new graph's inputs match the old one's.
    for &i in &graph.inputs {
        let node = graph.nodes.get(i.index()).ok_or_else(|| {
            Error::Graph(format!("decompose: graph input {i} does not exist"))
        })?;
        let Op::Input { name } = &node.op else {
            return Err(Error::Graph(format!("decompose: graph input {i} is a {} node", node.op.name())));
        };
        map[i.index()] = Some(b.g.input(name, node.ty.clone()));
    }
    for (idx, node) in graph.nodes.iter().enumerate() {
        if map[idx].is_some() {
            continue;
        }
        let args = node
            .inputs
            .iter()
            .map(|i| map.get(i.index()).copied().flatten().filter(|_| i.index() < idx))
            .collect::<Option<Vec<NodeId>>>()
            .ok_or_else(|| Error::Graph(format!("decompose: %{idx} reads a value not defined before it")))?;
        let new = match &node.op {
            Op::Input { .. } => {
                return Err(Error::Graph(format!("decompose: input node %{idx} is not in the graph's inputs")));
            }
            Op::Constant(c) => b.constant_node(*c, &node.ty),
            op => match b.composite(op, &args, keep)? {
                Some(id) => id,
                None => b.g.add(op.clone(), &args)?,
            },
        };
        b.g.nodes[new.index()].name = node.name.clone();
        map[idx] = Some(new);
    }
    for &o in &graph.outputs {
        let id = map.get(o.index()).copied().flatten().ok_or_else(|| {
            Error::Graph(format!("decompose: output {o} does not exist"))
        })?;
        b.g.output(id);
    }
    Ok(b.g)
}

/// Windows of more taps than this stay one max-pool op (the reference kernel), as a max chain
/// that long would be slower than it.
const MAX_POOL_TAPS: usize = 16;

/// The graph being built, with scalar constants shared by (dtype, value bits).
struct Builder {
    g: Graph,
    scalars: HashMap<(DType, u64), NodeId>,
}

impl Builder {
    /// A node for an existing constant of the source graph (same id, same shared tensor).
    fn constant_node(&mut self, c: ConstId, ty: &TensorType) -> NodeId {
        self.g.nodes.push(Node { op: Op::Constant(c), inputs: vec![], ty: ty.clone(), name: None });
        NodeId(self.g.nodes.len() as u32 - 1)
    }

    /// The primitive expansion of `op` on `args`, or `None` when `op` is already primitive or
    /// a composite that `keep` (given the input types) keeps whole.
    fn composite(&mut self, op: &Op, args: &[NodeId], keep: &dyn Fn(&Op, &[&TensorType]) -> bool) -> Result<Option<NodeId>> {
        let is_composite = matches!(
            op,
            Op::Softmax { .. }
                | Op::LogSoftmax { .. }
                | Op::LayerNorm { .. }
                | Op::BatchNorm { .. }
                | Op::Gelu { .. }
                | Op::Attention { .. }
        );
        if let Op::Pool2d(p) = op {
            return self.max_pool(args[0], p);
        }
        if !is_composite {
            return Ok(None);
        }
        // Arity and types are checked by inferring the composite's type once, up front.
        let tys: Vec<&TensorType> = args.iter().map(|a| self.g.ty(*a)).collect();
        if keep(op, &tys) {
            return Ok(None);
        }
        let out_ty = crate::infer::infer(op, &tys)?;
        let (work, up) = self.upcast(args)?;
        let y = match op {
            Op::Softmax { axis } => self.softmax(work[0], *axis, false)?,
            Op::LogSoftmax { axis } => self.softmax(work[0], *axis, true)?,
            Op::LayerNorm { axis, eps } => self.layer_norm(&work, *axis, *eps)?,
            Op::BatchNorm { eps } => self.batch_norm(&work, *eps)?,
            Op::Gelu { tanh_approx } => self.gelu(work[0], *tanh_approx)?,
            Op::Attention { causal, scale } => self.attention(&work, *causal, *scale)?,
            _ => return Ok(None),
        };
        let y = if up { self.g.add(Op::Cast(out_ty.dtype), &[y])? } else { y };
        Ok(Some(y))
    }

    /// A float max pool of at most [`MAX_POOL_TAPS`] taps on a fixed NCHW shape as `max` over
    /// the taps, tap `(i, j)` being rows `i*dh, i*dh + sh, ..` and columns `j*dw, ..` of the
    /// input padded with -inf (top/left as the op says, bottom/right as far as the last
    /// window reaches, which covers ceil mode); `None` for any other pool. NaN wins in `max`
    /// as in the pool.
    fn max_pool(&mut self, x: NodeId, p: &crate::Pool2dAttrs) -> Result<Option<NodeId>> {
        let ty = self.g.ty(x).clone();
        let out = crate::infer::infer(&Op::Pool2d(*p), &[&ty])?;
        let (Some(&[n, c, h, w]), Some(&[_, _, oh, ow])) = (ty.shape.as_fixed().as_deref(), out.shape.as_fixed().as_deref())
        else {
            return Ok(None);
        };
        let [kh, kw] = p.kernel;
        if p.kind != crate::PoolKind::Max || !ty.dtype.is_float() || kh * kw > MAX_POOL_TAPS || n * c * oh * ow == 0 {
            return Ok(None);
        }
        let ([sh, sw], [dh, dw]) = (p.stride, p.dilation);
        let reach = |o: usize, s: usize, k: usize, d: usize| (o - 1) * s + (k - 1) * d + 1;
        let (bottom, right) = (
            reach(oh, sh, kh, dh).saturating_sub(h + p.padding[0]),
            reach(ow, sw, kw, dw).saturating_sub(w + p.padding[1]),
        );
        let xp = if p.padding[0] + p.padding[1] + bottom + right > 0 {
            let pads = vec![(0, 0), (0, 0), (p.padding[0], bottom), (p.padding[1], right)];
            self.g.add(Op::Pad { pads, mode: crate::PadMode::Constant(f64::NEG_INFINITY) }, &[x])?
        } else {
            x
        };
        let axis = |first: usize, s: usize, o: usize| crate::SliceAxis {
            start: first as i64,
            end: (first + (o - 1) * s + 1) as i64,
            step: s as i64,
        };
        let mut acc: Option<NodeId> = None;
        for i in 0..kh {
            for j in 0..kw {
                let full = crate::SliceAxis::FULL;
                let tap = self.g.add(Op::Slice(vec![full, full, axis(i * dh, sh, oh), axis(j * dw, sw, ow)]), &[xp])?;
                acc = Some(match acc {
                    Some(a) => self.bin(BinaryOp::Max, a, tap)?,
                    None => tap,
                });
            }
        }
        Ok(acc)
    }

    /// Casts f16/bf16 arguments to f32 (returns whether it did).
    fn upcast(&mut self, args: &[NodeId]) -> Result<(Vec<NodeId>, bool)> {
        let d = self.g.ty(args[0]).dtype;
        if !matches!(d, DType::F16 | DType::BF16) {
            return Ok((args.to_vec(), false));
        }
        let v = args.iter().map(|&a| self.g.add(Op::Cast(DType::F32), &[a])).collect::<Result<_>>()?;
        Ok((v, true))
    }

    fn un(&mut self, u: UnaryOp, x: NodeId) -> Result<NodeId> {
        self.g.add(Op::Unary(u), &[x])
    }

    fn bin(&mut self, b: BinaryOp, x: NodeId, y: NodeId) -> Result<NodeId> {
        self.g.add(Op::Binary(b), &[x, y])
    }

    fn reduce(&mut self, op: ReduceOp, x: NodeId, axes: Vec<usize>) -> Result<NodeId> {
        self.g.add(Op::Reduce { op, axes, keep_dims: true }, &[x])
    }

    /// A rank-0 constant of `x`'s dtype, shared between uses.
    fn scalar_like(&mut self, x: NodeId, v: f64) -> Result<NodeId> {
        let d = self.g.ty(x).dtype;
        if let Some(&id) = self.scalars.get(&(d, v.to_bits())) {
            return Ok(id);
        }
        let t = crate::with_dtype!(d, T, HostTensor::scalar(<T as crate::Element>::from_f64(v)));
        let id = self.g.constant(t);
        self.scalars.insert((d, v.to_bits()), id);
        Ok(id)
    }

    /// `exp(x - max) / sum(exp(x - max))`, or its log form `x - max - log(sum(exp(x - max)))`.
    fn softmax(&mut self, x: NodeId, axis: usize, log: bool) -> Result<NodeId> {
        let m = self.reduce(ReduceOp::Max, x, vec![axis])?;
        let s = self.bin(BinaryOp::Sub, x, m)?;
        let e = self.un(UnaryOp::Exp, s)?;
        let z = self.reduce(ReduceOp::Sum, e, vec![axis])?;
        if log {
            let lz = self.un(UnaryOp::Log, z)?;
            self.bin(BinaryOp::Sub, s, lz)
        } else {
            self.bin(BinaryOp::Div, e, z)
        }
    }

    /// `(x - mean) / sqrt(var + eps) * scale + bias` over axes `axis..rank`. Scale and bias
    /// broadcast against the trailing (normalized) dims, which is plain right-aligned
    /// broadcasting against `x`.
    fn layer_norm(&mut self, a: &[NodeId], axis: usize, eps: f64) -> Result<NodeId> {
        let x = a[0];
        let axes: Vec<usize> = (axis..self.g.ty(x).shape.rank()).collect();
        let mean = self.reduce(ReduceOp::Mean, x, axes.clone())?;
        let xc = self.bin(BinaryOp::Sub, x, mean)?;
        let sq = self.bin(BinaryOp::Mul, xc, xc)?;
        let var = self.reduce(ReduceOp::Mean, sq, axes)?;
        let mut y = self.normalize(xc, var, eps)?;
        if let Some(&scale) = a.get(1) {
            y = self.bin(BinaryOp::Mul, y, scale)?;
        }
        if let Some(&bias) = a.get(2) {
            y = self.bin(BinaryOp::Add, y, bias)?;
        }
        Ok(y)
    }

    /// `xc / sqrt(var + eps)`.
    fn normalize(&mut self, xc: NodeId, var: NodeId, eps: f64) -> Result<NodeId> {
        let e = self.scalar_like(var, eps)?;
        let ve = self.bin(BinaryOp::Add, var, e)?;
        let sd = self.un(UnaryOp::Sqrt, ve)?;
        self.bin(BinaryOp::Div, xc, sd)
    }

    /// `(x - mean) / sqrt(var + eps) * scale + bias` with `[C]` parameters on axis 1.
    fn batch_norm(&mut self, a: &[NodeId], eps: f64) -> Result<NodeId> {
        let x = a[0];
        let rank = self.g.ty(x).shape.rank();
        // [C] -> [C, 1, ..., 1] so it broadcasts along axis 1 of [N, C, ...].
        let mut per_channel = Vec::with_capacity(4);
        for &p in &a[1..5] {
            per_channel.push(if rank > 2 {
                let mut dims: Vec<Dim> = self.g.ty(p).shape.0.clone();
                dims.extend(std::iter::repeat_n(Dim::Fixed(1), rank - 2));
                self.g.add(Op::Reshape(Shape(dims)), &[p])?
            } else {
                p
            });
        }
        let [scale, bias, mean, var] = [per_channel[0], per_channel[1], per_channel[2], per_channel[3]];
        let xc = self.bin(BinaryOp::Sub, x, mean)?;
        let y = self.normalize(xc, var, eps)?;
        let y = self.bin(BinaryOp::Mul, y, scale)?;
        self.bin(BinaryOp::Add, y, bias)
    }

    /// Exact GELU as `x/2 * erfc(-x/√2)`, or the tanh form as `x / (1 + exp(-2u))` with
    /// `u = √(2/π) (x + 0.044715 x³)`. Both equal the textbook `0.5 x (1 + erf|tanh)` but keep
    /// their relative accuracy in the negative tail, where `1 + erf` and `1 + tanh` cancel.
    fn gelu(&mut self, x: NodeId, tanh_approx: bool) -> Result<NodeId> {
        if tanh_approx {
            let x2 = self.bin(BinaryOp::Mul, x, x)?;
            let x3 = self.bin(BinaryOp::Mul, x2, x)?;
            let c = self.scalar_like(x, 0.044715)?;
            let cx3 = self.bin(BinaryOp::Mul, x3, c)?;
            let s = self.bin(BinaryOp::Add, x, cx3)?;
            let k = self.scalar_like(x, -2.0 * (2.0 / std::f64::consts::PI).sqrt())?;
            let e = self.bin(BinaryOp::Mul, s, k)?;
            let e = self.un(UnaryOp::Exp, e)?;
            let one = self.scalar_like(x, 1.0)?;
            let d = self.bin(BinaryOp::Add, e, one)?;
            self.bin(BinaryOp::Div, x, d)
        } else {
            let k = self.scalar_like(x, -std::f64::consts::FRAC_1_SQRT_2)?;
            let z = self.bin(BinaryOp::Mul, x, k)?;
            let c = self.un(UnaryOp::Erfc, z)?;
            let half = self.scalar_like(x, 0.5)?;
            let hx = self.bin(BinaryOp::Mul, x, half)?;
            self.bin(BinaryOp::Mul, hx, c)
        }
    }

    /// `softmax(q kᵀ * scale + mask [+ causal mask]) v`. The causal mask is a bool constant
    /// `[Lq, Lk]` (true where query `i` may see key `j <= i + Lk - Lq`) used by a `where`
    /// that puts -inf elsewhere, so it needs fixed Lq and Lk; the default scale needs a fixed D.
    fn attention(&mut self, a: &[NodeId], causal: bool, scale: Option<f64>) -> Result<NodeId> {
        let (q, k, v) = (a[0], a[1], a[2]);
        let qs = self.g.ty(q).shape.clone();
        let ks = self.g.ty(k).shape.clone();
        let r = qs.rank();
        let scale = match scale {
            Some(s) => s,
            None => match qs.0[r - 1] {
                // With D = 0 every score is an empty sum (0); 1 keeps it finite, as the kernel does.
                Dim::Fixed(0) => 1.0,
                Dim::Fixed(d) => 1.0 / (d as f64).sqrt(),
                ref d => {
                    return Err(Error::Unsupported(format!(
                        "decompose attention: the default scale needs a fixed head dim, got {d} in q {qs}"
                    )));
                }
            },
        };
        let mut perm: Vec<usize> = (0..r).collect();
        perm.swap(r - 2, r - 1);
        let kt = self.g.add(Op::Permute(perm), &[k])?;
        let s = self.g.add(Op::MatMul, &[q, kt])?;
        let sc = self.scalar_like(s, scale)?;
        let mut s = self.bin(BinaryOp::Mul, s, sc)?;
        if let Some(&mask) = a.get(3) {
            s = self.bin(BinaryOp::Add, s, mask)?;
        }
        if causal {
            let (Some(lq), Some(lk)) = (qs.0[r - 2].fixed(), ks.0[r - 2].fixed()) else {
                return Err(Error::Unsupported(format!(
                    "decompose attention: a causal mask needs fixed sequence lengths, got q {qs} and k {ks}"
                )));
            };
            let allowed: Vec<bool> =
                (0..lq).flat_map(|i| (0..lk).map(move |j| j + lq <= i + lk)).collect();
            let cond = self.g.constant(HostTensor::from_vec(allowed, &[lq, lk])?);
            let ninf = self.scalar_like(s, f64::NEG_INFINITY)?;
            s = self.g.add(Op::Where, &[cond, s, ninf])?;
        }
        let p = self.softmax(s, r - 1, false)?;
        self.g.add(Op::MatMul, &[p, v])
    }
}
