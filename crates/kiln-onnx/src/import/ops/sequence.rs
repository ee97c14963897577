//! ONNX sequence and optional values, resolved at import time. kiln graphs hold only tensors,
//! so a sequence is a list of values ([`Val::Seq`]) and an optional is a value or nothing
//! ([`Val::Opt`]), both known while importing — the way shape values are. The sequence ops
//! (SequenceConstruct/Insert/At/Erase/Length/Empty, SplitToSequence, ConcatFromSequence) and
//! the optional ops only rearrange values; element counts and positions must be known at import.
//! `SequenceMap` lives with the other body-unrolling ops in `import/control.rs`.
//!
//! Also here: how graph inputs and outputs of these types map onto graph tensors. A sequence
//! input or output `x` of `n` elements becomes the graph inputs/outputs `x[0]`..`x[n-1]`; an
//! optional one is its element's inputs/outputs, or none when it is empty.

use crate::import::{Convert, Ctx, ImportOptions, Val, attrs, ints_of};
use crate::model::{Container, ValueInfo};
use crate::proto::NodeProto;
use kiln_ir::{
    Dim, Error, HostTensor, NodeId, Op, Result, Shape, SliceAxis, TensorType, normalize_axis,
};
use std::collections::HashMap;

pub(super) fn lookup(op: &str) -> Option<Convert> {
    Some(match op {
        "SequenceEmpty" => sequence_empty,
        "SequenceConstruct" => sequence_construct,
        "SequenceInsert" => sequence_insert,
        "SequenceAt" => sequence_at,
        "SequenceErase" => sequence_erase,
        "SequenceLength" => sequence_length,
        "SplitToSequence" => split_to_sequence,
        "ConcatFromSequence" => concat_from_sequence,
        "Optional" => optional,
        "OptionalHasElement" => optional_has_element,
        "OptionalGetElement" => optional_get_element,
        _ => return None,
    })
}

/// Input `i` as a sequence's elements; an error when it is not a sequence.
fn seq_input(ctx: &Ctx, node: &NodeProto, i: usize) -> Result<Vec<Val>> {
    let name = node.input.get(i).filter(|s| !s.is_empty()).ok_or_else(|| {
        Error::Graph(format!(
            "{} needs input {i} (a sequence), which is missing",
            node.op_type()
        ))
    })?;
    match ctx.value(name)? {
        Val::Seq(items) => Ok(items.clone()),
        Val::Unavailable(why) => Err(Error::Unsupported(format!("value '{name}': {why}"))),
        _ => Err(Error::Value(format!(
            "{} input {i} ('{name}') must be a sequence, but it is a tensor",
            node.op_type()
        ))),
    }
}

/// Input `i` as a tensor-like value (a node or a shape value) kept as it is, so that shape
/// values stay symbolic inside sequences.
fn tensor_val(ctx: &mut Ctx, node: &NodeProto, i: usize) -> Result<Val> {
    if let Some(name) = node.input.get(i).filter(|s| !s.is_empty())
        && let v @ (Val::Node(_) | Val::Dims { .. }) = ctx.value(name)?
    {
        return Ok(v.clone());
    }
    // Anything else (missing, unavailable, a sequence) gets `input`'s error.
    Ok(Val::Node(ctx.input(node, i)?))
}

/// A tensor-like value as a graph node (shape values become constants when fully known).
fn tensor_of(ctx: &mut Ctx, v: &Val, what: &str) -> Result<NodeId> {
    match v {
        Val::Node(id) => Ok(*id),
        Val::Seq(_) | Val::Opt(_) => Err(Error::Unsupported(format!(
            "{what} is a sequence or optional inside a sequence or optional; kiln supports only tensors there"
        ))),
        _ => {
            // Materialised through a binding, as any named value is (`Ctx::input`).
            let key = format!("\u{1}sequence element/{what}");
            ctx.bind(&key, v.clone());
            let probe = NodeProto {
                input: vec![key],
                ..Default::default()
            };
            ctx.input(&probe, 0)
        }
    }
}

/// The position input `i` (a scalar or 1-element integer tensor, known at import) as an index
/// into a sequence of `len` elements; `len` itself is allowed when `at_end` (an insert).
fn position(
    ctx: &mut Ctx,
    node: &NodeProto,
    i: usize,
    len: usize,
    at_end: bool,
) -> Result<Option<usize>> {
    let Some(p) = ctx.const_ints(node, i, "position")? else {
        return Ok(None);
    };
    let [p] = p[..] else {
        return Err(Error::Shape(format!(
            "{} position must hold one element, it has {}",
            node.op_type(),
            p.len()
        )));
    };
    let n = len as i64;
    let hi = if at_end { n } else { n - 1 };
    if p < -n || p > hi {
        return Err(Error::Value(format!(
            "{} position {p} is out of range for a sequence of {len} elements (allowed: {} to {hi})",
            node.op_type(),
            -n
        )));
    }
    Ok(Some(if p < 0 { (p + n) as usize } else { p as usize }))
}

fn sequence_empty(_ctx: &mut Ctx, node: &NodeProto) -> Result<Vec<Val>> {
    // The element dtype matters only to ops on elements, and there are none.
    attrs::check_known(node, &["dtype"])?;
    Ok(vec![Val::Seq(Vec::new())])
}

fn sequence_construct(ctx: &mut Ctx, node: &NodeProto) -> Result<Vec<Val>> {
    attrs::check_known(node, &[])?;
    let items = (0..node.input.len())
        .map(|i| tensor_val(ctx, node, i))
        .collect::<Result<Vec<_>>>()?;
    Ok(vec![Val::Seq(items)])
}

fn sequence_insert(ctx: &mut Ctx, node: &NodeProto) -> Result<Vec<Val>> {
    attrs::check_known(node, &[])?;
    let mut items = seq_input(ctx, node, 0)?;
    let t = tensor_val(ctx, node, 1)?;
    let at = position(ctx, node, 2, items.len(), true)?.unwrap_or(items.len());
    items.insert(at, t);
    Ok(vec![Val::Seq(items)])
}

fn sequence_at(ctx: &mut Ctx, node: &NodeProto) -> Result<Vec<Val>> {
    attrs::check_known(node, &[])?;
    let items = seq_input(ctx, node, 0)?;
    let at = position(ctx, node, 1, items.len(), false)?
        .ok_or_else(|| Error::Graph("SequenceAt needs its position input".into()))?;
    Ok(vec![items[at].clone()])
}

fn sequence_erase(ctx: &mut Ctx, node: &NodeProto) -> Result<Vec<Val>> {
    attrs::check_known(node, &[])?;
    let mut items = seq_input(ctx, node, 0)?;
    if items.is_empty() {
        return Err(Error::Value("SequenceErase of an empty sequence".into()));
    }
    let at = position(ctx, node, 1, items.len(), false)?.unwrap_or(items.len() - 1);
    items.remove(at);
    Ok(vec![Val::Seq(items)])
}

fn sequence_length(ctx: &mut Ctx, node: &NodeProto) -> Result<Vec<Val>> {
    attrs::check_known(node, &[])?;
    let n = seq_input(ctx, node, 0)?.len() as i64;
    Ok(vec![Val::Node(
        ctx.constant(HostTensor::from_vec(vec![n], &[])?),
    )])
}

/// SplitToSequence: no `split` gives size-1 pieces (squeezed unless `keepdims`), a scalar
/// `split` pieces of that size (the last may be smaller), a 1-D `split` the listed sizes.
fn split_to_sequence(ctx: &mut Ctx, node: &NodeProto) -> Result<Vec<Val>> {
    attrs::check_known(node, &["axis", "keepdims"])?;
    let x = ctx.input(node, 0)?;
    let dims = ctx.dims(x);
    let axis = normalize_axis(attrs::int(node, "axis", 0)?, dims.len(), "SplitToSequence")?;
    let Dim::Fixed(d) = dims[axis] else {
        return Err(Error::Unsupported(format!(
            "SplitToSequence needs a static size along axis {axis}, but the input is {}; import with concrete \
             input shapes",
            Shape(dims.clone())
        )));
    };
    let d = d as i64;
    let split = ctx.const_input(node, 1, "split")?;
    let (sizes, squeeze) = match split {
        None => (vec![1; d as usize], attrs::int(node, "keepdims", 1)? == 0),
        Some(t) => {
            if !t.dtype().is_int() || t.shape().len() > 1 {
                return Err(Error::Value(format!(
                    "SplitToSequence's split must be an integer scalar or 1-D tensor, got {} {:?}",
                    t.dtype(),
                    t.shape()
                )));
            }
            let v = ints_of(&t);
            if t.shape().is_empty() {
                let s = v[0];
                if s <= 0 {
                    return Err(Error::Value(format!(
                        "SplitToSequence: split size {s} must be positive"
                    )));
                }
                let mut sizes = vec![s; (d / s) as usize];
                if d % s != 0 {
                    sizes.push(d % s);
                }
                (sizes, false)
            } else {
                if v.iter().any(|&s| s < 0) || v.iter().sum::<i64>() != d {
                    return Err(Error::Shape(format!(
                        "SplitToSequence: sizes {v:?} do not add up to dim {d} of axis {axis}"
                    )));
                }
                (v, false)
            }
        }
    };
    let mut items = Vec::with_capacity(sizes.len());
    let mut start = 0;
    for s in sizes {
        let mut sl = vec![SliceAxis::FULL; dims.len()];
        sl[axis] = SliceAxis {
            start,
            end: start + s,
            step: 1,
        };
        let mut piece = ctx.add(Op::Slice(sl), &[x])?;
        if squeeze {
            let mut out = ctx.dims(piece);
            out.remove(axis);
            piece = ctx.add(Op::Reshape(Shape(out)), &[piece])?;
        }
        items.push(Val::Node(piece));
        start += s;
    }
    Ok(vec![Val::Seq(items)])
}

/// ConcatFromSequence: the elements joined along `axis`, or stacked along a new `axis` when
/// `new_axis` is 1.
fn concat_from_sequence(ctx: &mut Ctx, node: &NodeProto) -> Result<Vec<Val>> {
    attrs::check_known(node, &["axis", "new_axis"])?;
    let items = seq_input(ctx, node, 0)?;
    if items.is_empty() {
        return Err(Error::Value(
            "ConcatFromSequence of an empty sequence (it has no result shape)".into(),
        ));
    }
    let axis = attrs::opt_int(node, "axis")?
        .ok_or_else(|| Error::Value("ConcatFromSequence needs the 'axis' attribute".into()))?;
    let new_axis = match attrs::int(node, "new_axis", 0)? {
        0 => false,
        1 => true,
        v => {
            return Err(Error::Value(format!(
                "ConcatFromSequence's new_axis must be 0 or 1, got {v}"
            )));
        }
    };
    let mut ids = Vec::with_capacity(items.len());
    for (i, v) in items.iter().enumerate() {
        ids.push(tensor_of(ctx, v, &format!("{}[{i}]", node.input[0]))?);
    }
    let rank = ctx.rank(ids[0]);
    let axis = if new_axis {
        let axis = normalize_axis(axis, rank + 1, "ConcatFromSequence")?;
        for id in ids.iter_mut() {
            let mut dims = ctx.dims(*id);
            if dims.len() != rank {
                return Err(Error::Shape(
                    "ConcatFromSequence: the elements differ in rank".into(),
                ));
            }
            dims.insert(axis, Dim::Fixed(1));
            *id = ctx.add(Op::Reshape(Shape(dims)), &[*id])?;
        }
        axis
    } else {
        normalize_axis(axis, rank, "ConcatFromSequence")?
    };
    Ok(vec![Val::Node(ctx.add(Op::Concat { axis }, &ids)?)])
}

/// Optional: wraps its input, or is empty (of the `type` attribute) without one.
fn optional(ctx: &mut Ctx, node: &NodeProto) -> Result<Vec<Val>> {
    attrs::check_known(node, &["type"])?;
    if Ctx::has_input(node, 0) {
        let v = match ctx.value(&node.input[0])? {
            v @ (Val::Seq(_) | Val::Opt(_)) => v.clone(),
            _ => tensor_val(ctx, node, 0)?,
        };
        return Ok(vec![Val::Opt(Some(Box::new(v)))]);
    }
    if !attrs::has(node, "type") {
        return Err(Error::Value(
            "Optional without an input needs the 'type' attribute".into(),
        ));
    }
    Ok(vec![Val::Opt(None)])
}

/// OptionalHasElement: a bool scalar, known at import; a missing input is an empty optional.
fn optional_has_element(ctx: &mut Ctx, node: &NodeProto) -> Result<Vec<Val>> {
    attrs::check_known(node, &[])?;
    let has = if Ctx::has_input(node, 0) {
        match ctx.value(&node.input[0])? {
            Val::Opt(v) => v.is_some(),
            Val::Unavailable(why) => {
                return Err(Error::Unsupported(format!(
                    "value '{}': {why}",
                    node.input[0]
                )));
            }
            _ => true,
        }
    } else {
        false
    };
    Ok(vec![Val::Node(
        ctx.constant(HostTensor::from_vec(vec![has], &[])?),
    )])
}

/// OptionalGetElement: the optional's value (an error when empty); a tensor or sequence
/// input (allowed from opset 18) is passed through.
fn optional_get_element(ctx: &mut Ctx, node: &NodeProto) -> Result<Vec<Val>> {
    attrs::check_known(node, &[])?;
    let name = node
        .input
        .first()
        .filter(|s| !s.is_empty())
        .ok_or_else(|| Error::Graph("OptionalGetElement needs its input".into()))?;
    match ctx.value(name)? {
        Val::Opt(Some(v)) => Ok(vec![(**v).clone()]),
        Val::Opt(None) => Err(Error::Value(format!(
            "OptionalGetElement of '{name}', which is an empty optional (it has no value)"
        ))),
        v @ Val::Seq(_) => Ok(vec![v.clone()]),
        _ => Ok(vec![tensor_val(ctx, node, 0)?]),
    }
}

/// A value given for a graph input of any type kiln imports: a tensor, a sequence of tensors,
/// or an optional (`None`: empty).
#[derive(Clone, Debug)]
pub enum InputValue {
    /// A tensor-typed input (or an optional's tensor).
    Tensor(HostTensor),
    /// A sequence-typed input: its elements, in order.
    Sequence(Vec<HostTensor>),
    /// An optional-typed input: its value, or `None` when empty.
    Optional(Option<Box<InputValue>>),
}

/// What one ONNX graph output became among the kiln graph's outputs ([`crate::Imported`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OutputKind {
    /// A tensor: one graph output.
    Tensor,
    /// A sequence of `n` tensors: `n` consecutive graph outputs named `NAME[0]`..`NAME[n-1]`.
    Sequence(usize),
    /// An optional: `None` when it is empty (no graph outputs), else what its value became.
    Optional(Option<Box<OutputKind>>),
}

impl OutputKind {
    /// How many graph outputs this ONNX output became.
    pub fn count(&self) -> usize {
        match self {
            OutputKind::Tensor => 1,
            OutputKind::Sequence(n) => *n,
            OutputKind::Optional(None) => 0,
            OutputKind::Optional(Some(k)) => k.count(),
        }
    }
}

/// The graph input or output name of element `i` of sequence `name`.
pub fn element_name(name: &str, i: usize) -> String {
    format!("{name}[{i}]")
}

/// Records input `name` with value `v` in `opts` (its shapes; the sequence element types;
/// whether an optional is empty) and its tensors in `flat` under their graph input names.
pub(crate) fn describe_input(
    name: &str,
    v: &InputValue,
    opts: &mut ImportOptions,
    flat: &mut HashMap<String, HostTensor>,
) -> Result<()> {
    match v {
        InputValue::Tensor(t) => {
            opts.input_shapes.insert(name.to_string(), t.ir_shape());
            flat.insert(name.to_string(), t.clone());
        }
        InputValue::Sequence(ts) => {
            let types = ts
                .iter()
                .map(|t| TensorType::new(t.dtype(), t.ir_shape()))
                .collect();
            opts.input_sequences.insert(name.to_string(), types);
            for (i, t) in ts.iter().enumerate() {
                flat.insert(element_name(name, i), t.clone());
            }
        }
        InputValue::Optional(None) => {
            opts.absent_optionals.insert(name.to_string());
        }
        InputValue::Optional(Some(inner)) => {
            if matches!(**inner, InputValue::Optional(_)) {
                return Err(Error::Unsupported(format!(
                    "input '{name}': an optional of an optional"
                )));
            }
            describe_input(name, inner, opts, flat)?;
        }
    }
    Ok(())
}

/// Binds graph input `info` when it is a sequence or optional (returning `true`): sequence
/// elements become graph inputs `NAME[i]` (or constants, when fixed in `opts.input_values`),
/// whose names are appended to `input_names`. Returns `false` for tensor inputs.
pub(crate) fn bind_input(
    ctx: &mut Ctx,
    info: &ValueInfo,
    opts: &ImportOptions,
    input_names: &mut Vec<String>,
) -> Result<bool> {
    let v = match &info.container {
        Container::None => return Ok(false),
        Container::Sequence(elem) => sequence_input(ctx, &info.name, elem, opts, input_names)?,
        Container::Optional(_) if opts.absent_optionals.contains(&info.name) => Val::Opt(None),
        Container::Optional(elem) => {
            let inner = match &elem.container {
                Container::Sequence(e) => sequence_input(ctx, &info.name, e, opts, input_names)?,
                Container::None => {
                    let ty = match opts.input_shapes.get(&info.name) {
                        Some(s) => declared_type(elem, Some(s.clone()))?,
                        None => declared_type(elem, None)?,
                    };
                    leaf_input(ctx, &info.name, ty, opts, input_names)
                }
                Container::Optional(_) => {
                    return Err(Error::Unsupported(format!(
                        "graph input '{}' is an optional of an optional",
                        info.name
                    )));
                }
            };
            Val::Opt(Some(Box::new(inner)))
        }
    };
    ctx.bind(&info.name, v);
    Ok(true)
}

/// The tensor type of a declared tensor `info`, with `shape` replacing the declared one.
fn declared_type(info: &ValueInfo, shape: Option<Shape>) -> Result<TensorType> {
    let dtype = info.dtype.clone().map_err(|t| {
        Error::Unsupported(format!(
            "graph input '{}' holds values of type {t}, which kiln does not support",
            info.name
        ))
    })?;
    let shape = match shape {
        Some(s) => s,
        None => info.shape().ok_or_else(|| {
            Error::Unsupported(format!(
                "graph input '{}' declares no rank; give its shape when importing",
                info.name
            ))
        })?,
    };
    Ok(TensorType::new(dtype, shape))
}

fn sequence_input(
    ctx: &mut Ctx,
    name: &str,
    elem: &ValueInfo,
    opts: &ImportOptions,
    input_names: &mut Vec<String>,
) -> Result<Val> {
    if !matches!(elem.container, Container::None) {
        return Err(Error::Unsupported(format!(
            "graph input '{name}' is a sequence of sequences or optionals"
        )));
    }
    let types = opts.input_sequences.get(name).ok_or_else(|| {
        Error::Unsupported(format!(
            "graph input '{name}' is a sequence; kiln needs its element count and types when importing \
             (ImportOptions::input_sequences, or the value with import_for_values)"
        ))
    })?;
    let mut items = Vec::with_capacity(types.len());
    for (i, ty) in types.iter().enumerate() {
        if let Ok(d) = &elem.dtype
            && *d != ty.dtype
        {
            return Err(Error::DType(format!(
                "element {i} of sequence input '{name}' is {}, but the model declares {d}",
                ty.dtype
            )));
        }
        items.push(leaf_input(
            ctx,
            &element_name(name, i),
            ty.clone(),
            opts,
            input_names,
        ));
    }
    Ok(Val::Seq(items))
}

/// A tensor graph input `name` of type `ty`, or a constant when its value is fixed in `opts`.
fn leaf_input(
    ctx: &mut Ctx,
    name: &str,
    ty: TensorType,
    opts: &ImportOptions,
    input_names: &mut Vec<String>,
) -> Val {
    if let Some(v) = opts.input_values.get(name) {
        return Val::Node(ctx.constant(v.clone()));
    }
    input_names.push(name.to_string());
    Val::Node(ctx.graph_input(name, ty))
}

/// Makes graph output(s) of the value `v` of ONNX output `name` (appending their names to
/// `output_names`) and says what they are.
pub(crate) fn bind_output(
    ctx: &mut Ctx,
    name: &str,
    v: &Val,
    output_names: &mut Vec<String>,
) -> Result<OutputKind> {
    match v {
        Val::Seq(items) => {
            for (i, item) in items.iter().enumerate() {
                let n = element_name(name, i);
                let id = tensor_of(ctx, item, &n)?;
                ctx.graph.output(id);
                output_names.push(n);
            }
            Ok(OutputKind::Sequence(items.len()))
        }
        Val::Opt(None) => Ok(OutputKind::Optional(None)),
        Val::Opt(Some(inner)) => {
            if matches!(**inner, Val::Opt(_)) {
                return Err(Error::Unsupported(format!(
                    "graph output '{name}' is an optional of an optional"
                )));
            }
            Ok(OutputKind::Optional(Some(Box::new(bind_output(
                ctx,
                name,
                inner,
                output_names,
            )?))))
        }
        Val::Unavailable(why) => Err(Error::Unsupported(format!("graph output '{name}': {why}"))),
        _ => {
            let id = tensor_of(ctx, v, name)?;
            ctx.graph.output(id);
            output_names.push(name.to_string());
            Ok(OutputKind::Tensor)
        }
    }
}
