//! What the scheduler does with each graph op: generate it (pointwise, reduction), leave it to
//! a library (extern) or to the reference kernels (eval). Also finds constants that are one
//! repeated value (they become literals) and views that a strided [`Layout`] can describe.

use crate::kernel::Literal;
use crate::program::ExternOp;
use kiln_ir::{BinaryOp, DType, Graph, HostTensor, Layout, NodeId, Op, PadMode, Storage};

/// How one node is scheduled.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Class {
    /// A graph input or constant: a buffer (or a literal) that nothing computes.
    Source,
    /// Reshape, permute, expand or slice: composed into the index of its readers.
    View,
    /// Elementwise work that can be inlined into a consumer's expression.
    Pointwise,
    /// A reduction generated as a [`crate::Stage::Reduce`].
    Reduce,
    /// A library call.
    Extern(ExternOp),
    /// Run by the reference kernels; the string says why it is not generated.
    Eval(String),
}

impl Class {
    /// True for work a generated kernel can hold.
    pub(crate) fn is_generated(&self) -> bool {
        matches!(self, Class::View | Class::Pointwise | Class::Reduce)
    }
}

/// Classifies `id` (its inputs' literals are in `literals`). MatMul / Conv2d become externs
/// when every input has one dtype listed in `extern_dtypes` (empty: externs disabled).
pub(crate) fn classify(
    graph: &Graph,
    id: NodeId,
    extern_dtypes: &[DType],
    literals: &[Option<Literal>],
) -> Class {
    let node = graph.node(id);
    let dtype = node.ty.dtype;
    let lit = |i: usize| {
        node.inputs
            .get(i)
            .and_then(|n| view_literal(graph, *n, literals))
    };
    match &node.op {
        Op::Input { .. } | Op::Constant(_) => Class::Source,
        op if op.is_view() => Class::View,
        Op::Unary(_) | Op::Where | Op::Cast(_) | Op::Concat { .. } => Class::Pointwise,
        Op::Pad {
            mode: PadMode::Constant(_),
            ..
        } => Class::Pointwise,
        Op::Pad { .. } => Class::Eval("op not generated: pad with reflect/edge mode".into()),
        Op::Binary(b) => {
            let in_dtype = node
                .inputs
                .first()
                .map(|i| graph.ty(*i).dtype)
                .unwrap_or(dtype);
            if !in_dtype.is_int() {
                return Class::Pointwise;
            }
            // The kernel IR has no run-time errors: ops that can fail on some right-hand
            // values are only generated when that value is a known good constant.
            let ok = match b {
                BinaryOp::Div | BinaryOp::Rem | BinaryOp::Mod => {
                    matches!(lit(1), Some(Literal::Int(v)) if v != 0)
                }
                BinaryOp::Pow | BinaryOp::Shl | BinaryOp::Shr => {
                    matches!(lit(1), Some(Literal::Int(v)) if v >= 0)
                }
                _ => true,
            };
            if ok {
                Class::Pointwise
            } else {
                Class::Eval(format!(
                    "integer {} by a non-constant (may fail at run time)",
                    node.op.name()
                ))
            }
        }
        Op::Reduce { .. } if dtype != DType::Bool => Class::Reduce,
        Op::MatMul | Op::Conv2d(_) => {
            let dtype_ok = extern_dtypes.contains(&dtype)
                && node.inputs.iter().all(|i| graph.ty(*i).dtype == dtype);
            let ranks_ok = match &node.op {
                Op::MatMul => node.inputs.iter().all(|i| graph.ty(*i).shape.rank() >= 2),
                _ => true,
            };
            if extern_dtypes.is_empty() {
                Class::Eval(format!(
                    "op not generated: {} (externs disabled)",
                    node.op.name()
                ))
            } else if !dtype_ok {
                Class::Eval(format!("op not generated: {} on {dtype}", node.op.name()))
            } else if !ranks_ok {
                Class::Eval("op not generated: matmul of a 1-D operand".into())
            } else {
                match &node.op {
                    Op::Conv2d(a) => Class::Extern(ExternOp::Conv2d(*a)),
                    _ => Class::Extern(ExternOp::MatMul),
                }
            }
        }
        op => Class::Eval(format!("op not generated: {}", op.name())),
    }
}

/// The literal a node reads as when it is a repeated-value constant, seen through views.
pub(crate) fn view_literal(
    graph: &Graph,
    mut id: NodeId,
    literals: &[Option<Literal>],
) -> Option<Literal> {
    loop {
        let node = graph.node(id);
        if node.op.is_view() {
            id = *node.inputs.first()?;
            continue;
        }
        return literals.get(id.index()).copied().flatten();
    }
}

/// The single value of a constant whose elements are all equal (bit for bit), if any.
pub(crate) fn constant_literal(t: &HostTensor) -> Option<Literal> {
    let n = t.numel();
    if n == 0 || !t.is_dense() {
        return None;
    }
    let off = t.layout.offset;
    fn same<T: PartialEq + Copy>(v: &[T]) -> Option<T> {
        let first = *v.first()?;
        v.iter().all(|x| *x == first).then_some(first)
    }
    fn same_float<T: Copy, B: PartialEq>(v: &[T], bits: impl Fn(T) -> B) -> Option<T> {
        let first = *v.first()?;
        let b = bits(first);
        v.iter().all(|x| bits(*x) == b).then_some(first)
    }
    let r = off..off + n;
    Some(match &*t.storage {
        Storage::F32(v) => Literal::Float(same_float(v.get(r)?, f32::to_bits)? as f64),
        Storage::F64(v) => Literal::Float(same_float(v.get(r)?, f64::to_bits)?),
        Storage::F16(v) => Literal::Float(same_float(v.get(r)?, |x| x.to_bits())?.to_f64()),
        Storage::BF16(v) => Literal::Float(same_float(v.get(r)?, |x| x.to_bits())?.to_f64()),
        Storage::I64(v) => Literal::Int(same(v.get(r)?)? as i128),
        Storage::I32(v) => Literal::Int(same(v.get(r)?)? as i128),
        Storage::I16(v) => Literal::Int(same(v.get(r)?)? as i128),
        Storage::I8(v) => Literal::Int(same(v.get(r)?)? as i128),
        Storage::U64(v) => Literal::Int(same(v.get(r)?)? as i128),
        Storage::U32(v) => Literal::Int(same(v.get(r)?)? as i128),
        Storage::U16(v) => Literal::Int(same(v.get(r)?)? as i128),
        Storage::U8(v) => Literal::Int(same(v.get(r)?)? as i128),
        Storage::Bool(v) => Literal::Int(same(v.get(r)?)? as i128),
    })
}

/// The literal of `v` converted to `dtype` as the reference kernels convert an f64 attribute
/// (`Element::from_f64`: saturating for integers, `!= 0` for bool).
pub(crate) fn literal_of_f64(v: f64, dtype: DType) -> Literal {
    if dtype.is_float() {
        // Rounded through the dtype so the literal is exactly representable in it.
        let t = kiln_ir::with_dtype!(
            dtype,
            T,
            HostTensor::scalar(<T as kiln_ir::Element>::from_f64(v))
        );
        return Literal::Float(t.storage.get_f64(0));
    }
    match dtype {
        DType::Bool => Literal::Int((v != 0.0) as i128),
        DType::I64 => Literal::Int(v as i64 as i128),
        DType::I32 => Literal::Int(v as i32 as i128),
        DType::I16 => Literal::Int(v as i16 as i128),
        DType::I8 => Literal::Int(v as i8 as i128),
        DType::U64 => Literal::Int(v as u64 as i128),
        DType::U32 => Literal::Int(v as u32 as i128),
        DType::U16 => Literal::Int(v as u16 as i128),
        _ => Literal::Int(v as u8 as i128),
    }
}

/// The strided layout in which view node `id` reads its first non-view ancestor (returned
/// with it), or `None` when the views cannot be one strided layout with non-negative strides
/// (a reshape of a non-contiguous view, or a reversed slice).
pub(crate) fn strided_view(
    graph: &Graph,
    id: NodeId,
    shapes: &[Vec<usize>],
) -> Option<(NodeId, Layout)> {
    let node = graph.node(id);
    if !node.op.is_view() {
        return Some((id, Layout::contiguous(&shapes[id.index()])));
    }
    let (base, l) = strided_view(graph, *node.inputs.first()?, shapes)?;
    let out = &shapes[id.index()];
    let mut l = match &node.op {
        Op::Reshape(_) => l.reshape(out)?,
        Op::Permute(p) => l.permute(p).ok()?,
        Op::Expand(_) => l.broadcast_to(out).ok()?,
        Op::Slice(axes) => {
            let mut l = l;
            for (a, s) in axes.iter().enumerate() {
                let len = *l.shape.get(a)?;
                let (start, end, _) = s.resolve(len);
                l = l.slice(a, start, end, s.step).ok()?;
            }
            l
        }
        _ => return None,
    };
    for (s, &d) in l.strides.iter_mut().zip(&l.shape) {
        if d <= 1 {
            *s = 0;
        } else if *s < 0 {
            return None;
        }
    }
    (l.shape == *out).then_some((base, l))
}
