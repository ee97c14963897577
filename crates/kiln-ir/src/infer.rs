//! Shape and dtype inference: the type of an op's result from its inputs' types. The
//! interpreter and every backend call this too, so there is one definition of each op's
//! output shape. Errors name the op and the input types.

use crate::shape::broadcast;
use crate::{
    BinaryOp, Conv2dAttrs, DType, Dim, Error, Op, Pool2dAttrs, Result, Shape, SliceAxis,
    TensorType, UnaryOp,
};

/// The result type of `op` applied to inputs of types `inputs`.
pub fn infer(op: &Op, inputs: &[&TensorType]) -> Result<TensorType> {
    let name = op.name();
    let ctx = || {
        let tys: Vec<String> = inputs.iter().map(|t| t.to_string()).collect();
        format!("{name}({})", tys.join(", "))
    };
    let arity = |lo: usize, hi: usize| -> Result<()> {
        if inputs.len() < lo || inputs.len() > hi {
            let want = if lo == hi { format!("{lo}") } else { format!("{lo} to {hi}") };
            return Err(Error::Graph(format!("{}: takes {want} inputs, got {}", ctx(), inputs.len())));
        }
        Ok(())
    };
    let float_only = |t: &TensorType| -> Result<()> {
        if !t.dtype.is_float() {
            return Err(Error::DType(format!("{}: needs a float input, got {}", ctx(), t.dtype)));
        }
        Ok(())
    };
    let same_dtype = || -> Result<DType> {
        let d = inputs[0].dtype;
        if let Some(t) = inputs.iter().find(|t| t.dtype != d) {
            return Err(Error::DType(format!(
                "{}: inputs must share one dtype ({} vs {})",
                ctx(),
                d,
                t.dtype
            )));
        }
        Ok(d)
    };
    let rank_axis = |axis: usize, rank: usize| -> Result<()> {
        if axis >= rank {
            return Err(Error::Shape(format!("{}: axis {axis} is out of range for rank {rank}", ctx())));
        }
        Ok(())
    };

    match op {
        Op::Input { .. } | Op::Constant(_) => {
            Err(Error::Graph(format!("{name}: its type comes from the graph, not from inference")))
        }
        Op::Unary(u) => {
            arity(1, 1)?;
            let t = inputs[0];
            match u {
                UnaryOp::Not => {
                    if t.dtype.is_float() {
                        return Err(Error::DType(format!("{}: needs bool or integer input", ctx())));
                    }
                }
                UnaryOp::IsNan | UnaryOp::IsInf => {
                    if t.dtype == DType::Bool {
                        return Err(Error::DType(format!("{}: needs a numeric input", ctx())));
                    }
                    return Ok(TensorType { dtype: DType::Bool, shape: t.shape.clone() });
                }
                UnaryOp::Neg | UnaryOp::Abs | UnaryOp::Sign | UnaryOp::Relu => {
                    if t.dtype == DType::Bool {
                        return Err(Error::DType(format!("{}: needs a numeric input", ctx())));
                    }
                }
                _ => float_only(t)?,
            }
            Ok(t.clone())
        }
        Op::Binary(b) => {
            arity(2, 2)?;
            let d = same_dtype()?;
            let shape = broadcast(&inputs[0].shape, &inputs[1].shape, &ctx())?;
            match b {
                BinaryOp::And | BinaryOp::Or | BinaryOp::Xor if d.is_float() => {
                    return Err(Error::DType(format!("{}: needs bool or integer inputs", ctx())));
                }
                BinaryOp::Add
                | BinaryOp::Sub
                | BinaryOp::Mul
                | BinaryOp::Div
                | BinaryOp::Rem
                | BinaryOp::Pow
                    if d == DType::Bool =>
                {
                    return Err(Error::DType(format!("{}: needs numeric inputs, got bool", ctx())));
                }
                _ => {}
            }
            let dtype = if b.is_comparison() { DType::Bool } else { d };
            Ok(TensorType { dtype, shape })
        }
        Op::Where => {
            arity(3, 3)?;
            if inputs[0].dtype != DType::Bool {
                return Err(Error::DType(format!("{}: the condition must be bool", ctx())));
            }
            if inputs[1].dtype != inputs[2].dtype {
                return Err(Error::DType(format!("{}: both branches must share one dtype", ctx())));
            }
            let s = broadcast(&inputs[0].shape, &inputs[1].shape, &ctx())?;
            let s = broadcast(&s, &inputs[2].shape, &ctx())?;
            Ok(TensorType { dtype: inputs[1].dtype, shape: s })
        }
        Op::Cast(d) => {
            arity(1, 1)?;
            Ok(TensorType { dtype: *d, shape: inputs[0].shape.clone() })
        }
        Op::Reduce { op: r, axes, keep_dims } => {
            arity(1, 1)?;
            let t = inputs[0];
            if t.dtype == DType::Bool {
                return Err(Error::DType(format!("{}: {r:?} needs a numeric input", ctx())));
            }
            for (i, &a) in axes.iter().enumerate() {
                rank_axis(a, t.shape.rank())?;
                if i > 0 && axes[i - 1] >= a {
                    return Err(Error::Shape(format!("{}: axes {axes:?} must be sorted and unique", ctx())));
                }
            }
            Ok(TensorType { dtype: t.dtype, shape: reduced_shape(&t.shape, axes, *keep_dims) })
        }
        Op::ArgReduce { axis, keep_dims, .. } => {
            arity(1, 1)?;
            let t = inputs[0];
            rank_axis(*axis, t.shape.rank())?;
            if t.dtype == DType::Bool {
                return Err(Error::DType(format!("{}: needs a numeric input", ctx())));
            }
            if t.shape.0[*axis] == Dim::Fixed(0) {
                return Err(Error::Shape(format!("{}: cannot take arg-extreme of an empty axis", ctx())));
            }
            Ok(TensorType { dtype: DType::I64, shape: reduced_shape(&t.shape, &[*axis], *keep_dims) })
        }
        Op::Reshape(to) => {
            arity(1, 1)?;
            let t = inputs[0];
            if let (Some(a), Some(b)) = (t.shape.numel(), to.numel())
                && a != b
            {
                return Err(Error::Shape(format!(
                    "{}: cannot reshape {} ({a} elements) to {to} ({b} elements)",
                    ctx(),
                    t.shape
                )));
            }
            Ok(TensorType { dtype: t.dtype, shape: to.clone() })
        }
        Op::Permute(perm) => {
            arity(1, 1)?;
            let t = inputs[0];
            crate::data::check_perm(perm, t.shape.rank()).map_err(|e| Error::Shape(format!("{}: {e}", ctx())))?;
            Ok(TensorType { dtype: t.dtype, shape: Shape(perm.iter().map(|&p| t.shape.0[p].clone()).collect()) })
        }
        Op::Expand(to) => {
            arity(1, 1)?;
            let t = inputs[0];
            let b = broadcast(&t.shape, to, &ctx())?;
            if &b != to {
                return Err(Error::Shape(format!("{}: cannot expand {} to {to}", ctx(), t.shape)));
            }
            Ok(TensorType { dtype: t.dtype, shape: to.clone() })
        }
        Op::Slice(axes) => {
            arity(1, 1)?;
            let t = inputs[0];
            if axes.len() != t.shape.rank() {
                return Err(Error::Shape(format!(
                    "{}: {} slice ranges for a tensor of rank {}",
                    ctx(),
                    axes.len(),
                    t.shape.rank()
                )));
            }
            let mut dims = Vec::with_capacity(axes.len());
            for (d, s) in t.shape.0.iter().zip(axes) {
                if s.step == 0 {
                    return Err(Error::Value(format!("{}: slice step must not be zero", ctx())));
                }
                dims.push(match d {
                    Dim::Fixed(n) => Dim::Fixed(s.resolve(*n).2),
                    Dim::Sym(_) if *s == SliceAxis::FULL => d.clone(),
                    Dim::Sym(name) => Dim::sym(&format!("{name}[{}:{}:{}]", s.start, s.end, s.step)),
                });
            }
            Ok(TensorType { dtype: t.dtype, shape: Shape(dims) })
        }
        Op::Pad { pads, mode } => {
            arity(1, 1)?;
            let t = inputs[0];
            if pads.len() != t.shape.rank() {
                return Err(Error::Shape(format!("{}: {} pad pairs for rank {}", ctx(), pads.len(), t.shape.rank())));
            }
            let mut dims = Vec::with_capacity(pads.len());
            for (d, &(a, b)) in t.shape.0.iter().zip(pads) {
                dims.push(match d {
                    Dim::Fixed(n) => {
                        if matches!(mode, crate::PadMode::Reflect) && (a, b) != (0, 0) && (a >= *n || b >= *n) {
                            return Err(Error::Shape(format!(
                                "{}: reflect padding ({a}, {b}) must be smaller than the dim {n}",
                                ctx()
                            )));
                        }
                        if matches!(mode, crate::PadMode::Edge) && *n == 0 && a + b > 0 {
                            return Err(Error::Shape(format!("{}: edge padding of an empty dim", ctx())));
                        }
                        Dim::Fixed(n + a + b)
                    }
                    Dim::Sym(_) if a + b == 0 => d.clone(),
                    Dim::Sym(name) => Dim::sym(&format!("{name}+{}", a + b)),
                });
            }
            Ok(TensorType { dtype: t.dtype, shape: Shape(dims) })
        }
        Op::Concat { axis } => {
            arity(1, usize::MAX)?;
            let d = same_dtype()?;
            let first = &inputs[0].shape;
            rank_axis(*axis, first.rank())?;
            let mut total = Some(0usize);
            for t in inputs {
                if t.shape.rank() != first.rank() {
                    return Err(Error::Shape(format!("{}: inputs must share one rank", ctx())));
                }
                for (i, (x, y)) in t.shape.0.iter().zip(&first.0).enumerate() {
                    if i != *axis && x != y {
                        return Err(Error::Shape(format!("{}: dims other than axis {axis} must match", ctx())));
                    }
                }
                total = match (total, t.shape.0[*axis].fixed()) {
                    (Some(a), Some(b)) => Some(a + b),
                    _ => None,
                };
            }
            let mut dims = first.0.clone();
            dims[*axis] = match total {
                Some(n) => Dim::Fixed(n),
                None => Dim::sym(&inputs.iter().map(|t| t.shape.0[*axis].to_string()).collect::<Vec<_>>().join("+")),
            };
            Ok(TensorType { dtype: d, shape: Shape(dims) })
        }
        Op::Gather { axis } => {
            arity(2, 2)?;
            let (data, idx) = (inputs[0], inputs[1]);
            rank_axis(*axis, data.shape.rank())?;
            if !matches!(idx.dtype, DType::I64 | DType::I32) {
                return Err(Error::DType(format!("{}: indices must be i64 or i32", ctx())));
            }
            let mut dims = data.shape.0[..*axis].to_vec();
            dims.extend(idx.shape.0.iter().cloned());
            dims.extend(data.shape.0[axis + 1..].iter().cloned());
            Ok(TensorType { dtype: data.dtype, shape: Shape(dims) })
        }
        Op::MatMul => {
            arity(2, 2)?;
            let d = same_dtype()?;
            if d == DType::Bool {
                return Err(Error::DType(format!("{}: needs numeric inputs", ctx())));
            }
            Ok(TensorType { dtype: d, shape: matmul_shape(&inputs[0].shape, &inputs[1].shape, &ctx())? })
        }
        Op::Conv2d(a) => {
            arity(2, 3)?;
            let d = same_dtype()?;
            float_only(inputs[0])?;
            conv2d_type(a, inputs, d, &ctx())
        }
        Op::Pool2d(p) => {
            arity(1, 1)?;
            let t = inputs[0];
            if t.dtype == DType::Bool {
                return Err(Error::DType(format!("{}: needs a numeric input", ctx())));
            }
            if matches!(p.kind, crate::PoolKind::Avg { .. }) {
                float_only(t)?;
            }
            pool2d_type(p, t, &ctx())
        }
        Op::Softmax { axis } | Op::LogSoftmax { axis } => {
            arity(1, 1)?;
            float_only(inputs[0])?;
            rank_axis(*axis, inputs[0].shape.rank())?;
            Ok(inputs[0].clone())
        }
        Op::LayerNorm { axis, .. } => {
            arity(1, 3)?;
            let d = same_dtype()?;
            float_only(inputs[0])?;
            let x = &inputs[0].shape;
            rank_axis(*axis, x.rank())?;
            let normalized = Shape(x.0[*axis..].to_vec());
            for p in &inputs[1..] {
                if broadcast(&p.shape, &normalized, &ctx())? != normalized {
                    return Err(Error::Shape(format!(
                        "{}: scale/bias must broadcast to the normalized dims {normalized}",
                        ctx()
                    )));
                }
            }
            Ok(TensorType { dtype: d, shape: x.clone() })
        }
        Op::BatchNorm { .. } => {
            arity(5, 5)?;
            let d = same_dtype()?;
            float_only(inputs[0])?;
            let x = &inputs[0].shape;
            if x.rank() < 2 {
                return Err(Error::Shape(format!("{}: input needs a channel axis (rank >= 2)", ctx())));
            }
            let c = Shape(vec![x.0[1].clone()]);
            for p in &inputs[1..] {
                if p.shape != c {
                    return Err(Error::Shape(format!("{}: scale, bias, mean and var must be {c}", ctx())));
                }
            }
            Ok(TensorType { dtype: d, shape: x.clone() })
        }
        Op::Gelu { .. } => {
            arity(1, 1)?;
            float_only(inputs[0])?;
            Ok(inputs[0].clone())
        }
        Op::Attention { .. } => {
            arity(3, 4)?;
            let d = same_dtype()?;
            float_only(inputs[0])?;
            let (q, k, v) = (&inputs[0].shape, &inputs[1].shape, &inputs[2].shape);
            let bad = || Error::Shape(format!("{}: needs q [.., Lq, D], k [.., Lk, D], v [.., Lk, Dv]", ctx()));
            if q.rank() < 2 || k.rank() != q.rank() || v.rank() != q.rank() {
                return Err(bad());
            }
            let r = q.rank();
            if q.0[r - 1] != k.0[r - 1] || k.0[r - 2] != v.0[r - 2] {
                return Err(bad());
            }
            let batch = broadcast(&Shape(q.0[..r - 2].to_vec()), &Shape(k.0[..r - 2].to_vec()), &ctx())?;
            let batch = broadcast(&batch, &Shape(v.0[..r - 2].to_vec()), &ctx())?;
            let mut dims = batch.0;
            dims.push(q.0[r - 2].clone());
            dims.push(v.0[r - 1].clone());
            if let Some(m) = inputs.get(3) {
                let mut scores = dims.clone();
                scores[r - 1] = k.0[r - 2].clone();
                let scores = Shape(scores);
                if broadcast(&m.shape, &scores, &ctx())? != scores {
                    return Err(Error::Shape(format!("{}: mask must broadcast to the scores {scores}", ctx())));
                }
            }
            Ok(TensorType { dtype: d, shape: Shape(dims) })
        }
    }
}

/// `shape` with `axes` removed (or set to 1 with `keep_dims`).
pub fn reduced_shape(shape: &Shape, axes: &[usize], keep_dims: bool) -> Shape {
    let mut dims = Vec::with_capacity(shape.rank());
    for (i, d) in shape.0.iter().enumerate() {
        if axes.contains(&i) {
            if keep_dims {
                dims.push(Dim::Fixed(1));
            }
        } else {
            dims.push(d.clone());
        }
    }
    Shape(dims)
}

/// Output shape of NumPy matmul.
pub fn matmul_shape(a: &Shape, b: &Shape, ctx: &str) -> Result<Shape> {
    if a.rank() == 0 || b.rank() == 0 {
        return Err(Error::Shape(format!("{ctx}: matmul needs operands of rank >= 1")));
    }
    let a2 = if a.rank() == 1 { Shape(vec![Dim::Fixed(1), a.0[0].clone()]) } else { a.clone() };
    let b2 = if b.rank() == 1 { Shape(vec![b.0[0].clone(), Dim::Fixed(1)]) } else { b.clone() };
    let (ra, rb) = (a2.rank(), b2.rank());
    if a2.0[ra - 1] != b2.0[rb - 2] {
        return Err(Error::Shape(format!(
            "{ctx}: inner dims differ ({a} @ {b}: {} vs {})",
            a2.0[ra - 1],
            b2.0[rb - 2]
        )));
    }
    let batch = broadcast(&Shape(a2.0[..ra - 2].to_vec()), &Shape(b2.0[..rb - 2].to_vec()), ctx)?;
    let mut dims = batch.0;
    if a.rank() > 1 {
        dims.push(a2.0[ra - 2].clone());
    }
    if b.rank() > 1 {
        dims.push(b2.0[rb - 1].clone());
    }
    Ok(Shape(dims))
}

/// Output size of a sliding window along one axis (conv and pooling).
pub fn window_out(len: usize, kernel: usize, stride: usize, pad: (usize, usize), dilation: usize, ceil: bool) -> Option<usize> {
    let eff = dilation * (kernel.max(1) - 1) + 1;
    let padded = len + pad.0 + pad.1;
    if padded < eff || stride == 0 {
        return None;
    }
    let span = padded - eff;
    let mut out = if ceil { span.div_ceil(stride) + 1 } else { span / stride + 1 };
    // PyTorch: the last window must start inside the input or the left padding.
    if ceil && (out - 1) * stride >= len + pad.0 {
        out -= 1;
    }
    Some(out)
}

fn spatial(d: &Dim, kernel: usize, stride: usize, pad: (usize, usize), dilation: usize, ceil: bool, ctx: &str) -> Result<Dim> {
    match d {
        Dim::Fixed(n) => window_out(*n, kernel, stride, pad, dilation, ceil)
            .map(Dim::Fixed)
            .ok_or_else(|| Error::Shape(format!("{ctx}: window {kernel} (dilation {dilation}) does not fit input size {n} with padding {pad:?}"))),
        Dim::Sym(_) => Err(Error::Unsupported(format!("{ctx}: symbolic spatial dims"))),
    }
}

fn conv2d_type(a: &Conv2dAttrs, inputs: &[&TensorType], dtype: DType, ctx: &str) -> Result<TensorType> {
    let (x, w) = (&inputs[0].shape, &inputs[1].shape);
    if x.rank() != 4 || w.rank() != 4 {
        return Err(Error::Shape(format!("{ctx}: conv2d needs x [N, C, H, W] and w [O, C/groups, KH, KW]")));
    }
    let g = a.groups;
    let (c, o) = (x.0[1].fixed(), w.0[0].fixed());
    let (wc, kh, kw) = (w.0[1].fixed(), w.0[2].fixed(), w.0[3].fixed());
    let (Some(c), Some(o), Some(wc), Some(kh), Some(kw)) = (c, o, wc, kh, kw) else {
        return Err(Error::Unsupported(format!("{ctx}: symbolic channel or kernel dims")));
    };
    if g == 0 || c % g != 0 || o % g != 0 || wc * g != c {
        return Err(Error::Shape(format!(
            "{ctx}: {c} input channels, {o} output channels and weight channels {wc} do not fit groups={g}"
        )));
    }
    if a.stride.contains(&0) || a.dilation.contains(&0) {
        return Err(Error::Value(format!("{ctx}: stride and dilation must be >= 1")));
    }
    if let Some(b) = inputs.get(2)
        && b.shape != Shape::fixed(&[o])
    {
        return Err(Error::Shape(format!("{ctx}: bias must be [{o}]")));
    }
    let h = spatial(&x.0[2], kh, a.stride[0], (a.padding[0], a.padding[2]), a.dilation[0], false, ctx)?;
    let wd = spatial(&x.0[3], kw, a.stride[1], (a.padding[1], a.padding[3]), a.dilation[1], false, ctx)?;
    Ok(TensorType { dtype, shape: Shape(vec![x.0[0].clone(), Dim::Fixed(o), h, wd]) })
}

fn pool2d_type(p: &Pool2dAttrs, t: &TensorType, ctx: &str) -> Result<TensorType> {
    let x = &t.shape;
    if x.rank() != 4 {
        return Err(Error::Shape(format!("{ctx}: pooling needs x [N, C, H, W]")));
    }
    if p.stride.contains(&0) || p.dilation.contains(&0) || p.kernel.contains(&0) {
        return Err(Error::Value(format!("{ctx}: kernel, stride and dilation must be >= 1")));
    }
    if p.padding[0] * 2 > p.kernel[0] || p.padding[1] * 2 > p.kernel[1] {
        return Err(Error::Value(format!("{ctx}: padding must be at most half the kernel")));
    }
    let h = spatial(&x.0[2], p.kernel[0], p.stride[0], (p.padding[0], p.padding[2]), p.dilation[0], p.ceil_mode, ctx)?;
    let w = spatial(&x.0[3], p.kernel[1], p.stride[1], (p.padding[1], p.padding[3]), p.dilation[1], p.ceil_mode, ctx)?;
    Ok(TensorType { dtype: t.dtype, shape: Shape(vec![x.0[0].clone(), x.0[1].clone(), h, w]) })
}
