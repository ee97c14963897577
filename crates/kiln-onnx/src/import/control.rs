//! Control flow: `If`, `Loop` and `Scan`, expanded at import time. kiln's graphs have no
//! control flow, so a branch is taken when its condition is known at import (a constant, or
//! an input fixed to its value), and loops are unrolled when their trip count is known. The
//! body of each unrolled iteration gets its own value names, so iterations cannot clash.

use super::attrs;
use super::{Ctx, Env, ImportError, Val, convert_nodes, ints_of};
use crate::proto::{GraphProto, NodeProto};
use crate::tensor::tensor_from_proto;
use kiln_ir::{Error, HostTensor, NodeId, Op, Result};
use std::collections::HashSet;

/// Unrolled iterations are capped so that a huge trip count is an error, not a huge graph.
const MAX_ITERATIONS: i64 = 4096;

/// The converter for a control-flow op, if `op_type` is one.
pub(super) fn is_control(op_type: &str) -> bool {
    matches!(op_type, "If" | "Loop" | "Scan" | "SequenceMap")
}

/// Converts an `If`, `Loop` or `Scan` node.
pub(super) fn convert(ctx: &mut Ctx, node: &NodeProto, env: &mut Env) -> Result<Vec<Val>> {
    match node.op_type() {
        "If" => convert_if(ctx, node, env),
        "Loop" => convert_loop(ctx, node, env),
        "SequenceMap" => convert_sequence_map(ctx, node, env),
        _ => convert_scan(ctx, node, env),
    }
}

fn body<'a>(node: &'a NodeProto, name: &str) -> Result<&'a GraphProto> {
    attrs::graph(node, name)
        .ok_or_else(|| Error::Graph(format!("{} has no '{name}' graph attribute", node.op_type())))
}

fn scalar_bool(t: &HostTensor, what: &str) -> Result<bool> {
    if t.numel() != 1 {
        return Err(Error::Shape(format!("{what} must hold one element, it has shape {:?}", t.shape())));
    }
    Ok(t.to_f64_vec()[0] != 0.0)
}

fn convert_if(ctx: &mut Ctx, node: &NodeProto, env: &mut Env) -> Result<Vec<Val>> {
    attrs::check_known(node, &["then_branch", "else_branch"])?;
    let cond = ctx
        .const_input(node, 0, "condition")?
        .ok_or_else(|| Error::Graph("If needs its condition input".into()))?;
    let branch = if scalar_bool(&cond, "If's condition")? { "then_branch" } else { "else_branch" };
    let g = body(node, branch)?;
    let prefix = format!("{}#{}/", branch, node.output.first().map(String::as_str).unwrap_or(""));
    run_body(ctx, g, &prefix, &[], env)
}

/// Converts one pass over `g` (renamed under `prefix`) with its formal inputs bound to `args`,
/// returning its outputs.
pub(crate) fn run_body(ctx: &mut Ctx, g: &GraphProto, prefix: &str, args: &[Val], env: &mut Env) -> Result<Vec<Val>> {
    if args.len() > g.input.len() {
        return Err(Error::Graph(format!("a body with {} inputs was given {} values", g.input.len(), args.len())));
    }
    let g = renamed(g, prefix);
    for (formal, v) in g.input.iter().zip(args) {
        ctx.bind(formal.name(), v.clone());
    }
    for t in &g.initializer {
        let v = tensor_from_proto(t, ctx.model_dir.as_deref())?;
        let id = ctx.constant(v);
        ctx.bind(t.name(), Val::Node(id));
    }
    convert_nodes(ctx, &g.node, env).map_err(|e| match e {
        ImportError::Ir(e) => e,
        ImportError::NeedsValue { message, .. } => Error::Unsupported(message),
    })?;
    g.output.iter().map(|o| ctx.value(o.name()).cloned()).collect()
}

/// A copy of `g` whose own names (inputs, initializers, node outputs) carry `prefix`, in nested
/// bodies too; names from enclosing scopes are left alone.
fn renamed(g: &GraphProto, prefix: &str) -> GraphProto {
    let mut own: HashSet<String> = HashSet::new();
    collect_defs(g, &mut own);
    let mut g = g.clone();
    rename_graph(&mut g, &own, prefix);
    g
}

fn collect_defs(g: &GraphProto, own: &mut HashSet<String>) {
    own.extend(g.input.iter().map(|v| v.name().to_string()));
    own.extend(g.initializer.iter().map(|t| t.name().to_string()));
    for n in &g.node {
        own.extend(n.output.iter().filter(|o| !o.is_empty()).cloned());
        for a in &n.attribute {
            a.g.iter().chain(a.graphs.iter()).for_each(|sub| collect_defs(sub, own));
        }
    }
}

fn rename_graph(g: &mut GraphProto, own: &HashSet<String>, prefix: &str) {
    let r = |s: &mut String| {
        if own.contains(s.as_str()) {
            *s = format!("{prefix}{s}");
        }
    };
    g.input.iter_mut().for_each(|v| v.name.iter_mut().for_each(r));
    g.output.iter_mut().for_each(|v| v.name.iter_mut().for_each(r));
    g.initializer.iter_mut().for_each(|t| t.name.iter_mut().for_each(r));
    for n in &mut g.node {
        n.input.iter_mut().for_each(r);
        n.output.iter_mut().for_each(r);
        for a in &mut n.attribute {
            a.g.iter_mut().chain(a.graphs.iter_mut()).for_each(|sub| rename_graph(sub, own, prefix));
        }
    }
}

/// The value of a `Val` as a constant, if it is one.
fn const_val(ctx: &mut Ctx, v: &Val) -> Option<HostTensor> {
    match v {
        Val::Node(id) => ctx.const_of(*id).cloned(),
        _ => None,
    }
}

fn i64_scalar(ctx: &mut Ctx, v: i64) -> Result<Val> {
    Ok(Val::Node(ctx.constant(HostTensor::from_vec(vec![v], &[])?)))
}

/// Stacks per-iteration values along a new axis 0 (a scan output).
fn stack(ctx: &mut Ctx, items: &[Val], axis_of: impl Fn(usize) -> usize, what: &str) -> Result<Val> {
    if items.is_empty() {
        return Err(Error::Unsupported(format!("{what} with zero iterations has no element shape to stack")));
    }
    let mut ids: Vec<NodeId> = Vec::with_capacity(items.len());
    for v in items {
        let Val::Node(id) = v else {
            return Err(Error::Unsupported(format!("{what}: a per-iteration value is not a tensor")));
        };
        let rank = ctx.rank(*id);
        let axis = axis_of(rank + 1);
        let mut dims = ctx.dims(*id);
        dims.insert(axis, kiln_ir::Dim::Fixed(1));
        ids.push(ctx.add(Op::Reshape(kiln_ir::Shape(dims)), &[*id])?);
    }
    let axis = axis_of(ctx.rank(ids[0]));
    Ok(Val::Node(ctx.add(Op::Concat { axis }, &ids)?))
}

fn convert_loop(ctx: &mut Ctx, node: &NodeProto, env: &mut Env) -> Result<Vec<Val>> {
    attrs::check_known(node, &["body"])?;
    let g = body(node, "body")?;
    let max_trips = match ctx.const_input(node, 0, "trip count M")? {
        Some(t) => Some(ints_of(&t).first().copied().ok_or_else(|| Error::Shape("Loop's M is empty".into()))?),
        None => None,
    };
    let mut cond = match ctx.const_input(node, 1, "condition")? {
        Some(t) => Some(scalar_bool(&t, "Loop's condition")?),
        None => None,
    };
    let mut carried: Vec<Val> = Vec::new();
    for i in 2..node.input.len() {
        // Sequences and optionals are carried as they are (they are import-time values).
        if let Some(Ok(v @ (Val::Seq(_) | Val::Opt(_)))) = node.input.get(i).map(|n| ctx.value(n)) {
            carried.push(v.clone());
            continue;
        }
        let id = ctx.input(node, i)?;
        carried.push(Val::Node(id));
    }
    let n_carried = carried.len();
    let n_scan = g.output.len().saturating_sub(1 + n_carried);
    let mut scans: Vec<Vec<Val>> = vec![Vec::new(); n_scan];
    let limit = max_trips.unwrap_or(MAX_ITERATIONS + 1);
    if max_trips.is_none() && cond.is_none() {
        return Err(Error::Unsupported("Loop without a trip count or condition runs forever".into()));
    }
    let mut k = 0i64;
    while k < limit && cond != Some(false) {
        if k >= MAX_ITERATIONS {
            return Err(Error::Unsupported(format!(
                "Loop would unroll more than {MAX_ITERATIONS} iterations; kiln unrolls loops at import"
            )));
        }
        let cond_in = match cond {
            Some(c) => Val::Node(ctx.constant(HostTensor::from_vec(vec![c], &[])?)),
            None => Val::Node(ctx.constant(HostTensor::from_vec(vec![true], &[])?)),
        };
        let mut args = vec![i64_scalar(ctx, k)?, cond_in];
        args.extend(carried.iter().cloned());
        let prefix = format!("loop#{}#{k}/", node.output.first().map(String::as_str).unwrap_or(""));
        let outs = run_body(ctx, g, &prefix, &args, env)?;
        if outs.len() != 1 + n_carried + n_scan {
            return Err(Error::Graph("Loop body outputs do not match its carried values".into()));
        }
        if cond.is_some() {
            let c = const_val(ctx, &outs[0]).ok_or_else(|| {
                Error::Unsupported(
                    "Loop's condition depends on run-time data; kiln unrolls loops at import and needs it known".into(),
                )
            })?;
            cond = Some(scalar_bool(&c, "Loop body's condition output")?);
        }
        carried = outs[1..1 + n_carried].to_vec();
        for (s, v) in scans.iter_mut().zip(&outs[1 + n_carried..]) {
            s.push(v.clone());
        }
        k += 1;
    }
    let mut result = carried;
    for s in &scans {
        result.push(stack(ctx, s, |_| 0, "Loop scan output")?);
    }
    Ok(result)
}

fn convert_scan(ctx: &mut Ctx, node: &NodeProto, env: &mut Env) -> Result<Vec<Val>> {
    attrs::check_known(
        node,
        &["body", "num_scan_inputs", "scan_input_axes", "scan_input_directions", "scan_output_axes", "scan_output_directions"],
    )?;
    if ctx.opset < 9 {
        return Err(Error::Unsupported("Scan before opset 9 (with sequence_lens and a batch axis)".into()));
    }
    let g = body(node, "body")?;
    let n_scan_in = attrs::int(node, "num_scan_inputs", 0)? as usize;
    let n_in = node.input.len();
    let n_state = n_in
        .checked_sub(n_scan_in)
        .ok_or_else(|| Error::Graph("Scan has fewer inputs than num_scan_inputs".into()))?;
    let n_scan_out = g.output.len().saturating_sub(n_state);
    let list = |name: &str, n: usize| -> Result<Vec<i64>> {
        Ok(attrs::ints(node, name)?.unwrap_or_else(|| vec![0; n]))
    };
    let in_axes = list("scan_input_axes", n_scan_in)?;
    let in_dirs = list("scan_input_directions", n_scan_in)?;
    let out_axes = list("scan_output_axes", n_scan_out)?;
    let out_dirs = list("scan_output_directions", n_scan_out)?;
    if in_axes.len() != n_scan_in || in_dirs.len() != n_scan_in || out_axes.len() != n_scan_out || out_dirs.len() != n_scan_out {
        return Err(Error::Value("Scan's axes/directions lists do not match its scan inputs/outputs".into()));
    }
    let mut state: Vec<Val> = Vec::new();
    for i in 0..n_state {
        state.push(Val::Node(ctx.input(node, i)?));
    }
    let mut scan_in = Vec::new();
    let mut len = None;
    for j in 0..n_scan_in {
        let id = ctx.input(node, n_state + j)?;
        let rank = ctx.rank(id);
        let axis = kiln_ir::normalize_axis(in_axes[j], rank, "Scan")?;
        let n = ctx.fixed_shape(id, "Scan")?[axis];
        if len.is_some_and(|l| l != n) {
            return Err(Error::Shape("Scan inputs differ in sequence length".into()));
        }
        len = Some(n);
        scan_in.push((id, axis, rank));
    }
    let len = len.unwrap_or(0);
    if len as i64 > MAX_ITERATIONS {
        return Err(Error::Unsupported(format!("Scan over {len} steps; kiln unrolls at most {MAX_ITERATIONS}")));
    }
    let mut scans: Vec<Vec<Val>> = vec![Vec::new(); n_scan_out];
    for t in 0..len {
        let mut args = state.clone();
        for (j, &(id, axis, rank)) in scan_in.iter().enumerate() {
            let idx = if in_dirs[j] == 1 { len - 1 - t } else { t };
            let mut sl = vec![kiln_ir::SliceAxis::FULL; rank];
            sl[axis] = kiln_ir::SliceAxis { start: idx as i64, end: idx as i64 + 1, step: 1 };
            let s = ctx.add(Op::Slice(sl), &[id])?;
            let mut dims = ctx.dims(s);
            dims.remove(axis);
            args.push(Val::Node(ctx.add(Op::Reshape(kiln_ir::Shape(dims)), &[s])?));
        }
        let prefix = format!("scan#{}#{t}/", node.output.first().map(String::as_str).unwrap_or(""));
        let outs = run_body(ctx, g, &prefix, &args, env)?;
        state = outs[..n_state].to_vec();
        for (s, v) in scans.iter_mut().zip(&outs[n_state..]) {
            s.push(v.clone());
        }
    }
    let mut result = state;
    for (k, s) in scans.iter_mut().enumerate() {
        if out_dirs[k] == 1 {
            s.reverse();
        }
        let axis = out_axes[k];
        result.push(stack(
            ctx,
            s,
            |rank| if axis < 0 { (axis + rank as i64).max(0) as usize } else { axis as usize },
            "Scan output",
        )?);
    }
    Ok(result)
}

/// SequenceMap: the body applied to element `i` of each sequence input (tensor inputs are
/// passed whole to every pass), one pass per element of the first input; each body output
/// collects into a sequence.
fn convert_sequence_map(ctx: &mut Ctx, node: &NodeProto, env: &mut Env) -> Result<Vec<Val>> {
    attrs::check_known(node, &["body"])?;
    let g = body(node, "body")?;
    let mut ins = Vec::with_capacity(node.input.len());
    for (i, name) in node.input.iter().enumerate() {
        if name.is_empty() {
            return Err(Error::Graph(format!("SequenceMap input {i} is missing")));
        }
        ins.push(ctx.value(name)?.clone());
    }
    let Some(Val::Seq(first)) = ins.first() else {
        return Err(Error::Value("SequenceMap's first input must be a sequence".into()));
    };
    let n = first.len();
    if ins.iter().any(|v| matches!(v, Val::Seq(s) if s.len() != n)) {
        return Err(Error::Shape("SequenceMap's sequence inputs differ in length".into()));
    }
    let mut outs: Vec<Vec<Val>> = vec![Vec::with_capacity(n); g.output.len()];
    for i in 0..n {
        let args: Vec<Val> = ins.iter().map(|v| if let Val::Seq(s) = v { s[i].clone() } else { v.clone() }).collect();
        let prefix = format!("seqmap#{}#{i}/", node.output.first().map(String::as_str).unwrap_or(""));
        let res = run_body(ctx, g, &prefix, &args, env)?;
        for (o, r) in outs.iter_mut().zip(res) {
            o.push(r);
        }
    }
    Ok(outs.into_iter().map(Val::Seq).collect())
}
