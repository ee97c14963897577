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
                BinaryOp::Shl | BinaryOp::Shr if !d.is_int() => {
                    return Err(Error::DType(format!("{}: bit shifts need integer inputs, got {d}", ctx())));
                }
                BinaryOp::Add
                | BinaryOp::Sub
                | BinaryOp::Mul
                | BinaryOp::Div
                | BinaryOp::Rem
                | BinaryOp::Mod
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
        Op::BitCast(d) => {
            arity(1, 1)?;
            let from = inputs[0].dtype;
            if *d == DType::Bool || from.size_of() != d.size_of() {
                return Err(Error::DType(format!(
                    "{}: cannot reinterpret {from} as {d} (the sizes must match and the result cannot be bool)",
                    ctx()
                )));
            }
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
        Op::Cumulative { axis, .. } => {
            arity(1, 1)?;
            let t = inputs[0];
            rank_axis(*axis, t.shape.rank())?;
            if t.dtype == DType::Bool {
                return Err(Error::DType(format!("{}: needs a numeric input", ctx())));
            }
            Ok(t.clone())
        }
        Op::TopK { axis, k, output, .. } => {
            arity(1, 1)?;
            let t = inputs[0];
            rank_axis(*axis, t.shape.rank())?;
            if t.dtype == DType::Bool {
                return Err(Error::DType(format!("{}: needs a numeric input", ctx())));
            }
            if let Some(n) = t.shape.0[*axis].fixed()
                && *k > n
            {
                return Err(Error::Shape(format!("{}: k = {k} exceeds the size {n} of axis {axis}", ctx())));
            }
            let mut dims = t.shape.0.clone();
            dims[*axis] = Dim::Fixed(*k);
            let dtype = match output {
                crate::TopKOutput::Values => t.dtype,
                crate::TopKOutput::Indices => DType::I64,
            };
            Ok(TensorType { dtype, shape: Shape(dims) })
        }
        Op::GatherElements { axis } => {
            arity(2, 2)?;
            let (data, idx) = (inputs[0], inputs[1]);
            elements_indexing(data, idx, *axis, &ctx())?;
            Ok(TensorType { dtype: data.dtype, shape: idx.shape.clone() })
        }
        Op::ScatterElements { axis, reduction } => {
            arity(3, 3)?;
            let (data, idx, upd) = (inputs[0], inputs[1], inputs[2]);
            elements_indexing(data, idx, *axis, &ctx())?;
            scatter_updates(data, upd, &idx.shape, *reduction, &ctx())?;
            Ok(data.clone())
        }
        Op::GatherNd { batch_dims: b } => {
            arity(2, 2)?;
            let (data, idx) = (inputs[0], inputs[1]);
            let (r, q) = (data.shape.rank(), idx.shape.rank());
            index_dtype(idx, &ctx())?;
            if r == 0 || q == 0 || *b >= r.min(q) {
                return Err(Error::Shape(format!(
                    "{}: needs data and indices of rank >= 1 and batch_dims {b} below both ranks",
                    ctx()
                )));
            }
            if data.shape.0[..*b] != idx.shape.0[..*b] {
                return Err(Error::Shape(format!("{}: the first {b} (batch) dims of data and indices differ", ctx())));
            }
            let m = tuple_len(idx, r - b, &ctx())?;
            let mut dims = idx.shape.0[..q - 1].to_vec();
            dims.extend(data.shape.0[b + m..].iter().cloned());
            Ok(TensorType { dtype: data.dtype, shape: Shape(dims) })
        }
        Op::ScatterNd { reduction } => {
            arity(3, 3)?;
            let (data, idx, upd) = (inputs[0], inputs[1], inputs[2]);
            let (r, q) = (data.shape.rank(), idx.shape.rank());
            index_dtype(idx, &ctx())?;
            if r == 0 || q == 0 {
                return Err(Error::Shape(format!("{}: needs data and indices of rank >= 1", ctx())));
            }
            let k = tuple_len(idx, r, &ctx())?;
            let mut want = idx.shape.0[..q - 1].to_vec();
            want.extend(data.shape.0[k..].iter().cloned());
            scatter_updates(data, upd, &Shape(want), *reduction, &ctx())?;
            Ok(data.clone())
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
        Op::Resize(a) => {
            arity(1, 1)?;
            resize_type(a, inputs[0], &ctx())
        }
        Op::ConvTranspose2d(a) => {
            arity(2, 3)?;
            let d = same_dtype()?;
            float_only(inputs[0])?;
            conv_transpose2d_type(a, inputs, d, &ctx())
        }
        Op::GridSample(_) => {
            arity(2, 2)?;
            float_only(inputs[0])?;
            float_only(inputs[1])?;
            grid_sample_type(inputs[0], inputs[1], &ctx())
        }
        Op::EncodeLowp { to, .. } => {
            arity(1, 1)?;
            Ok(TensorType { dtype: to.pattern_dtype(), shape: inputs[0].shape.clone() })
        }
        Op::DecodeLowp { from } => {
            arity(1, 1)?;
            if inputs[0].dtype != from.pattern_dtype() {
                return Err(Error::DType(format!(
                    "{}: {} patterns are held as {}, got {}",
                    ctx(),
                    from.name(),
                    from.pattern_dtype(),
                    inputs[0].dtype
                )));
            }
            Ok(TensorType { dtype: DType::F32, shape: inputs[0].shape.clone() })
        }
    }
}

/// Index tensors of the indexing ops are i64 or i32.
fn index_dtype(idx: &TensorType, ctx: &str) -> Result<()> {
    if !matches!(idx.dtype, DType::I64 | DType::I32) {
        return Err(Error::DType(format!("{ctx}: indices must be i64 or i32, got {}", idx.dtype)));
    }
    Ok(())
}

/// GatherElements/ScatterElements: indices of data's rank, no dim other than `axis` larger
/// than data's (symbolic dims are checked at run time).
fn elements_indexing(data: &TensorType, idx: &TensorType, axis: usize, ctx: &str) -> Result<()> {
    index_dtype(idx, ctx)?;
    let r = data.shape.rank();
    if axis >= r {
        return Err(Error::Shape(format!("{ctx}: axis {axis} is out of range for rank {r}")));
    }
    if idx.shape.rank() != r {
        return Err(Error::Shape(format!("{ctx}: indices must have the rank of data ({r})")));
    }
    for (i, (d, n)) in data.shape.0.iter().zip(&idx.shape.0).enumerate() {
        if let (Some(d), Some(n)) = (d.fixed(), n.fixed())
            && i != axis
            && n > d
        {
            return Err(Error::Shape(format!(
                "{ctx}: indices dim {i} ({n}) exceeds data's ({d}); only axis {axis} may be larger"
            )));
        }
    }
    Ok(())
}

/// The updates of a scatter: data's dtype and exactly the shape `want`; sum/product
/// reductions need a numeric dtype.
fn scatter_updates(data: &TensorType, upd: &TensorType, want: &Shape, red: crate::ScatterReduction, ctx: &str) -> Result<()> {
    if upd.dtype != data.dtype {
        return Err(Error::DType(format!("{ctx}: updates must have data's dtype {}", data.dtype)));
    }
    if &upd.shape != want {
        return Err(Error::Shape(format!("{ctx}: updates must have shape {want}, got {}", upd.shape)));
    }
    if data.dtype == DType::Bool && matches!(red, crate::ScatterReduction::Add | crate::ScatterReduction::Mul) {
        return Err(Error::DType(format!("{ctx}: reduction {red:?} needs a numeric dtype, got bool")));
    }
    Ok(())
}

/// The length of the index tuples of GatherND/ScatterND (the indices' last dim), which must be
/// fixed and in `1..=max`.
fn tuple_len(idx: &TensorType, max: usize, ctx: &str) -> Result<usize> {
    let q = idx.shape.rank();
    match idx.shape.0[q - 1].fixed() {
        Some(m) if (1..=max).contains(&m) => Ok(m),
        Some(m) => Err(Error::Shape(format!("{ctx}: index tuples have length {m}, which must be in 1..={max}"))),
        None => Err(Error::Unsupported(format!("{ctx}: the last dim of indices (tuple length) must be fixed"))),
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
        return Err(Error::Shape(match a.channels_last {
            false => format!("{ctx}: conv2d needs x [N, C, H, W] and w [O, C/groups, KH, KW]"),
            true => format!("{ctx}: channels-last conv2d needs x [N, H, W, C] and w [O, KH, KW, C/groups]"),
        }));
    }
    // Both layouts are checked in NCHW order.
    let nchw = |s: &Shape| Shape(a.nchw_axes().iter().map(|&i| s.0[i].clone()).collect());
    let (x, w) = (&nchw(x), &nchw(w));
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
    let dims = match a.channels_last {
        false => vec![x.0[0].clone(), Dim::Fixed(o), h, wd],
        true => vec![x.0[0].clone(), h, wd, Dim::Fixed(o)],
    };
    Ok(TensorType { dtype, shape: Shape(dims) })
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

fn resize_type(a: &crate::ResizeAttrs, t: &TensorType, ctx: &str) -> Result<TensorType> {
    let r = t.shape.rank();
    if a.out_shape.len() != r || a.scales.len() != r {
        return Err(Error::Shape(format!(
            "{ctx}: resize needs one output size and one scale per input axis (rank {r}), got {} sizes and {} scales",
            a.out_shape.len(),
            a.scales.len()
        )));
    }
    if let Some(s) = a.scales.iter().find(|s| !(s.is_finite() && **s > 0.0)) {
        return Err(Error::Value(format!("{ctx}: resize scales must be finite and > 0, got {s}")));
    }
    if a.mode != crate::ResizeMode::Nearest && !t.dtype.is_float() {
        return Err(Error::DType(format!(
            "{ctx}: {:?} resize needs a float input, got {} (only nearest takes other dtypes)",
            a.mode, t.dtype
        )));
    }
    if !a.cubic_a.is_finite() {
        return Err(Error::Value(format!("{ctx}: resize cubic_a must be finite, got {}", a.cubic_a)));
    }
    if let crate::ResizeCoord::TfCropAndResize { roi, .. } = &a.coord
        && (roi.len() != r || roi.iter().any(|(s, e)| !s.is_finite() || !e.is_finite()))
    {
        return Err(Error::Value(format!(
            "{ctx}: tf_crop_and_resize needs one finite (start, end) roi pair per axis (rank {r}), got {roi:?}"
        )));
    }
    for (i, (d, &o)) in t.shape.0.iter().zip(&a.out_shape).enumerate() {
        if *d == Dim::Fixed(0) && o > 0 {
            return Err(Error::Shape(format!("{ctx}: cannot resize the empty axis {i} to {o}")));
        }
    }
    Ok(TensorType { dtype: t.dtype, shape: Shape::fixed(&a.out_shape) })
}

fn conv_transpose2d_type(
    a: &crate::ConvTranspose2dAttrs,
    inputs: &[&TensorType],
    dtype: DType,
    ctx: &str,
) -> Result<TensorType> {
    let (x, w) = (&inputs[0].shape, &inputs[1].shape);
    if x.rank() != 4 || w.rank() != 4 {
        return Err(Error::Shape(format!("{ctx}: conv_transpose2d needs x [N, C, H, W] and w [C, O/groups, KH, KW]")));
    }
    let (c, wc, og, kh, kw) = (x.0[1].fixed(), w.0[0].fixed(), w.0[1].fixed(), w.0[2].fixed(), w.0[3].fixed());
    let (Some(c), Some(wc), Some(og), Some(kh), Some(kw)) = (c, wc, og, kh, kw) else {
        return Err(Error::Unsupported(format!("{ctx}: symbolic channel or kernel dims")));
    };
    let g = a.groups;
    if g == 0 || c % g != 0 || wc != c {
        return Err(Error::Shape(format!(
            "{ctx}: {c} input channels and weight dim 0 = {wc} do not fit groups={g} (w must be [C, O/groups, KH, KW])"
        )));
    }
    if a.stride.contains(&0) || a.dilation.contains(&0) {
        return Err(Error::Value(format!("{ctx}: stride and dilation must be >= 1")));
    }
    let o = og * g;
    if let Some(b) = inputs.get(2)
        && b.shape != Shape::fixed(&[o])
    {
        return Err(Error::Shape(format!("{ctx}: bias must be [{o}]")));
    }
    let mut dims = vec![x.0[0].clone(), Dim::Fixed(o)];
    for ax in 0..2 {
        let k = if ax == 0 { kh } else { kw };
        let Some(len) = x.0[2 + ax].fixed() else {
            return Err(Error::Unsupported(format!("{ctx}: symbolic spatial dims")));
        };
        let out = conv_transpose_out(len, k, a.stride[ax], (a.padding[ax], a.padding[ax + 2]), a.dilation[ax], a.output_padding[ax])
            .ok_or_else(|| {
                Error::Shape(format!(
                    "{ctx}: spatial size {len} with kernel {k}, stride {}, dilation {}, padding ({}, {}) and output_padding {} gives no output (input must be >= 1, padding must not exceed the full output)",
                    a.stride[ax], a.dilation[ax], a.padding[ax], a.padding[ax + 2], a.output_padding[ax]
                ))
            })?;
        dims.push(Dim::Fixed(out));
    }
    Ok(TensorType { dtype, shape: Shape(dims) })
}

/// Output size of a transposed convolution along one axis:
/// `(len-1)*stride - pad.0 - pad.1 + dilation*(kernel-1) + output_padding + 1`, or `None`
/// when `len` is 0 or the padding crops more than the full output.
pub fn conv_transpose_out(len: usize, kernel: usize, stride: usize, pad: (usize, usize), dilation: usize, output_padding: usize) -> Option<usize> {
    if len == 0 {
        return None;
    }
    let full = (len - 1)
        .checked_mul(stride)?
        .checked_add(dilation.checked_mul(kernel.max(1) - 1)?)?
        .checked_add(output_padding)?
        .checked_add(1)?;
    full.checked_sub(pad.0.checked_add(pad.1)?)
}

fn grid_sample_type(x: &TensorType, grid: &TensorType, ctx: &str) -> Result<TensorType> {
    let (xs, gs) = (&x.shape, &grid.shape);
    if xs.rank() != 4 || gs.rank() != 4 || gs.0[3] != Dim::Fixed(2) || gs.0[0] != xs.0[0] {
        return Err(Error::Shape(format!("{ctx}: grid_sample needs x [N, C, H, W] and grid [N, Hout, Wout, 2]")));
    }
    Ok(TensorType { dtype: x.dtype, shape: Shape(vec![xs.0[0].clone(), xs.0[1].clone(), gs.0[1].clone(), gs.0[2].clone()]) })
}
