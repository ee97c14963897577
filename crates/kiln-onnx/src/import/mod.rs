//! ONNX graph → kiln graph IR. Walks the nodes in order, converting each with the converter
//! registered for its op type (`ops/`, one file per op family), folding constants as it goes,
//! then keeps only what the outputs need.

pub mod attrs;
mod control;
mod ctx;
pub mod ops;
mod prune;

pub use ctx::{Ctx, SymInt, Val, ints_of, one};
pub use ops::sequence::{InputValue, OutputKind, element_name};
pub use ops::{Convert, lookup};

use crate::model::{OnnxModel, op_key};
use crate::proto::NodeProto;
use kiln_ir::{Error, Graph, HostTensor, Result, Shape, TensorType};
use std::collections::{HashMap, HashSet};

/// Most nodes that inlining model-local functions may add, so that nested calls cannot blow
/// a small file up exponentially.
const MAX_INLINED_NODES: usize = 1 << 20;

/// How to import: shapes or values to specialise graph inputs to.
#[derive(Clone, Debug, Default)]
pub struct ImportOptions {
    /// Shapes that replace the declared ones (e.g. a concrete batch size).
    pub input_shapes: HashMap<String, Shape>,
    /// Inputs whose values are fixed at import: they become constants and leave the graph's
    /// inputs (for inputs that decide shapes, such as a Reshape target given as an input).
    pub input_values: HashMap<String, HostTensor>,
    /// Sequence-typed inputs: the type of each element (so also how many). Element `i` of
    /// input `x` becomes graph input `x[i]` ([`element_name`]); `input_values` may fix it.
    pub input_sequences: HashMap<String, Vec<TensorType>>,
    /// Optional-typed inputs that are given empty; other optional inputs hold their element.
    pub absent_optionals: HashSet<String>,
}

/// Why an import failed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ImportError {
    /// A node needs the value of this graph input at import time (it decides a shape or an
    /// attribute); importing again with the value in `input_values` can succeed.
    #[error("{message}")]
    NeedsValue { input: String, message: String },
    /// Anything else: an unsupported op or attribute, a malformed model, a bad shape.
    #[error(transparent)]
    Ir(#[from] Error),
}

/// A kiln graph made from an ONNX model.
#[derive(Clone, Debug)]
pub struct Imported {
    pub graph: Graph,
    /// ONNX names of `graph.inputs`, in order (specialised inputs are not among them).
    pub input_names: Vec<String>,
    /// ONNX names of `graph.outputs`, in order (`x[i]` for element `i` of a sequence `x`).
    pub output_names: Vec<String>,
    /// What each ONNX graph output became, in the model's order: together they cover
    /// `graph.outputs` in order (a sequence or optional output becomes zero or more of them).
    pub output_kinds: Vec<OutputKind>,
    /// Per entry of `graph.outputs`: the ONNX low-precision type (float8, int4...) whose bit
    /// patterns the output holds (see [`kiln_ir::Op::EncodeLowp`]), `None` for plain values.
    pub output_types: Vec<Option<kiln_ir::LowpType>>,
    /// Graph inputs that were fixed to given values at import (`ImportOptions::input_values`):
    /// the graph is valid only for those values.
    pub specialised: Vec<String>,
}

/// Imports `model`'s main graph.
pub fn import(model: &OnnxModel, opts: &ImportOptions) -> std::result::Result<Imported, ImportError> {
    let g = model.proto.graph.as_ref().ok_or_else(|| Error::Value("the model has no graph".into()))?;
    let mut ctx = Ctx::new(model.dir.clone());
    let opsets: HashMap<String, i64> = model.opsets().into_iter().collect();
    ctx.opsets = opsets.clone();
    let functions: HashMap<(String, String), &crate::proto::FunctionProto> = model
        .proto
        .functions
        .iter()
        .map(|f| ((f.domain().to_string(), f.name().to_string()), f))
        .collect();

    for t in &g.initializer {
        let (v, lowp) = crate::lowp::tensor_from_proto_lowp(t, ctx.model_dir.as_deref())?;
        let id = ctx.constant(v);
        if let Some(lt) = lowp {
            ctx.lowp.insert(id, lt);
        }
        ctx.bind(t.name(), Val::Node(id));
    }
    if !g.sparse_initializer.is_empty() {
        return Err(Error::Unsupported("sparse initializers are not supported".into()).into());
    }
    let mut input_names = Vec::new();
    for info in model.inputs() {
        if ops::sequence::bind_input(&mut ctx, &info, opts, &mut input_names)? {
            continue;
        }
        // Low-precision inputs are given as their patterns (`crate::lowp`).
        let lowp = g.input.iter().find(|v| v.name() == info.name).and_then(crate::lowp::declared_lowp);
        if let Some(v) = opts.input_values.get(&info.name) {
            let id = ctx.constant(v.clone());
            ctx.bind(&info.name, Val::Node(id));
            if let Some(lt) = lowp {
                ctx.lowp.insert(id, lt);
            }
            continue;
        }
        let dtype = lowp
            .map(|lt| Ok(lt.pattern_dtype()))
            .unwrap_or_else(|| info.dtype.clone())
            .map_err(|t| Error::Unsupported(format!("graph input '{}' has type {t}, which kiln does not support", info.name)))?;
        let shape = match opts.input_shapes.get(&info.name) {
            Some(s) => s.clone(),
            None => info.shape().ok_or_else(|| {
                Error::Unsupported(format!(
                    "graph input '{}' declares no rank; give its shape when importing",
                    info.name
                ))
            })?,
        };
        let id = ctx.graph_input(&info.name, TensorType::new(dtype, shape));
        if let Some(lt) = lowp {
            ctx.lowp.insert(id, lt);
        }
        input_names.push(info.name.clone());
    }

    let sizes = expanded_sizes(&functions);
    let mut env = Env { opsets: &opsets, functions: &functions, sizes: &sizes, depth: 0 };
    convert_nodes(&mut ctx, &g.node, &mut env)?;

    let mut output_names = Vec::new();
    let mut output_kinds = Vec::new();
    for o in &g.output {
        if let Ok(v @ (Val::Seq(_) | Val::Opt(_))) = ctx.value(o.name()) {
            let v = v.clone();
            output_kinds.push(ops::sequence::bind_output(&mut ctx, o.name(), &v, &mut output_names)?);
            continue;
        }
        output_kinds.push(OutputKind::Tensor);
        let id = match ctx.value(o.name()) {
            Ok(Val::Node(id)) => *id,
            Ok(_) => {
                // A shape value: materialise it through an Identity-like lookup.
                let probe = NodeProto { input: vec![o.name().to_string()], ..Default::default() };
                ctx.input(&probe, 0)?
            }
            Err(e) => return Err(Error::Graph(format!("graph output '{}': {e}", o.name())).into()),
        };
        ctx.graph.output(id);
        output_names.push(o.name().to_string());
    }
    let output_types = ctx.graph.outputs.iter().map(|id| ctx.lowp.get(id).copied()).collect();
    let graph = prune::prune(&ctx.graph)?;
    let mut specialised: Vec<String> = opts.input_values.keys().cloned().collect();
    specialised.sort();
    Ok(Imported { graph, input_names, output_names, output_kinds, output_types, specialised })
}

/// Imports `model` with `inputs` given (name → value), specialising to their shapes, and to
/// their values where a node needs a value at import time. Returns the import and the inputs
/// to bind to its graph, in order.
pub fn import_for_inputs(
    model: &OnnxModel,
    inputs: &HashMap<String, HostTensor>,
) -> std::result::Result<(Imported, Vec<HostTensor>), ImportError> {
    let values = inputs.iter().map(|(n, t)| (n.clone(), InputValue::Tensor(t.clone()))).collect();
    import_for_values(model, &values)
}

/// [`import_for_inputs`] for inputs of any type kiln imports: tensors, sequences (element `i`
/// of `x` is bound as graph input `x[i]`) and optionals.
pub fn import_for_values(
    model: &OnnxModel,
    values: &HashMap<String, InputValue>,
) -> std::result::Result<(Imported, Vec<HostTensor>), ImportError> {
    let mut opts = ImportOptions::default();
    // Every given tensor under its graph input name.
    let mut inputs = HashMap::new();
    for (name, v) in values {
        ops::sequence::describe_input(name, v, &mut opts, &mut inputs)?;
    }
    loop {
        match import(model, &opts) {
            Ok(imp) => {
                let mut bound = Vec::new();
                for n in &imp.input_names {
                    let t = inputs
                        .get(n)
                        .ok_or_else(|| Error::Value(format!("no value given for graph input '{n}'")))?;
                    bound.push(t.clone());
                }
                return Ok((imp, bound));
            }
            Err(ImportError::NeedsValue { input, message }) => match inputs.get(&input) {
                Some(v) if !opts.input_values.contains_key(&input) => {
                    opts.input_values.insert(input, v.clone());
                }
                _ => return Err(Error::Unsupported(message).into()),
            },
            Err(e) => return Err(e),
        }
    }
}

/// What node conversion needs besides the context: opsets and local functions.
pub(crate) struct Env<'a> {
    opsets: &'a HashMap<String, i64>,
    functions: &'a HashMap<(String, String), &'a crate::proto::FunctionProto>,
    /// Nodes each function expands to with its nested calls inlined (see [`expanded_sizes`]).
    sizes: &'a HashMap<(String, String), usize>,
    depth: usize,
}

/// Function (domain, name) → how many nodes inlining it adds, nested calls included
/// (saturating; `usize::MAX` for a function that reaches itself). Memoised, so a chain of
/// functions each calling the next twice costs one visit per function.
fn expanded_sizes(functions: &HashMap<(String, String), &crate::proto::FunctionProto>) -> HashMap<(String, String), usize> {
    fn size(
        key: &(String, String),
        functions: &HashMap<(String, String), &crate::proto::FunctionProto>,
        memo: &mut HashMap<(String, String), usize>,
        stack: &mut Vec<(String, String)>,
    ) -> usize {
        if let Some(&n) = memo.get(key) {
            return n;
        }
        let Some(f) = functions.get(key) else { return 1 };
        if stack.contains(key) {
            return usize::MAX;
        }
        stack.push(key.clone());
        let n = f.node.iter().fold(0usize, |acc, node| {
            let callee = (node.domain().to_string(), node.op_type().to_string());
            acc.saturating_add(size(&callee, functions, memo, stack))
        });
        stack.pop();
        memo.insert(key.clone(), n);
        n
    }
    let mut memo = HashMap::new();
    for key in functions.keys() {
        size(key, functions, &mut memo, &mut Vec::new());
    }
    memo
}

/// Converts `nodes` in order into `ctx` (used for the main graph and for inlined subgraphs).
pub(crate) fn convert_nodes(
    ctx: &mut Ctx,
    nodes: &[NodeProto],
    env: &mut Env,
) -> std::result::Result<(), ImportError> {
    // Which node produces each value, so that a use before its producer (a cycle, or nodes
    // out of topological order) is reported as that rather than as a missing value.
    let producers: HashMap<&str, &NodeProto> = nodes
        .iter()
        .flat_map(|n| n.output.iter().filter(|o| !o.is_empty()).map(move |o| (o.as_str(), n)))
        .collect();
    for node in nodes {
        let domain = if node.domain() == "ai.onnx" { "" } else { node.domain() };
        let opset = env.opsets.get(domain).copied();
        let at = format!(
            "node '{}' ({}, opset {})",
            node.name(),
            op_key(domain, node.op_type()),
            opset.map(|o| o.to_string()).unwrap_or_else(|| "?".into())
        );
        if let Some((name, producer)) = node
            .input
            .iter()
            .filter(|i| !i.is_empty() && ctx.value(i).is_err())
            .find_map(|i| producers.get(i.as_str()).map(|p| (i, p)))
        {
            return Err(ImportError::Ir(Error::Graph(format!(
                "{at}: input '{name}' is produced by node '{}' ({}), which does not come before it: the graph has a \
                 cycle or its nodes are not in topological order",
                producer.name(),
                producer.op_type()
            ))));
        }
        ctx.needs_value = None;
        let result = check_lowp_inputs(ctx, node).and_then(|()| convert_node(ctx, node, domain, opset, env));
        match result {
            Ok(outs) => {
                for (i, name) in node.output.iter().enumerate() {
                    if name.is_empty() {
                        continue;
                    }
                    let v = outs.get(i).cloned().unwrap_or_else(|| {
                        Val::Unavailable(format!("output {i} of {at} is not supported by kiln"))
                    });
                    ctx.bind(name, v);
                }
            }
            Err(e) => {
                let e = e.context(&at);
                return Err(match ctx.needs_value.take() {
                    Some(input) => ImportError::NeedsValue { input, message: e.to_string() },
                    None => ImportError::Ir(e),
                });
            }
        }
    }
    Ok(())
}

/// Ops whose converters know that an input may hold low-precision bit patterns
/// (`Ctx::lowp`); any other op reading one would compute on the patterns as numbers.
const LOWP_AWARE_OPS: [&str; 5] = ["Cast", "CastLike", "QuantizeLinear", "DequantizeLinear", "Identity"];

/// Refuses a node that reads a low-precision value unless its converter handles those.
fn check_lowp_inputs(ctx: &Ctx, node: &NodeProto) -> Result<()> {
    if LOWP_AWARE_OPS.contains(&node.op_type()) && matches!(node.domain(), "" | "ai.onnx") {
        return Ok(());
    }
    for name in node.input.iter().filter(|n| !n.is_empty()) {
        if let Ok(Val::Node(id)) = ctx.value(name)
            && let Some(lt) = ctx.lowp.get(id)
        {
            return Err(Error::Unsupported(format!(
                "input '{name}' has the low-precision type {}, which kiln supports only in {} (cast it to a \
                 wider type first)",
                lt.name(),
                LOWP_AWARE_OPS.join("/")
            )));
        }
    }
    Ok(())
}

fn convert_node(
    ctx: &mut Ctx,
    node: &NodeProto,
    domain: &str,
    opset: Option<i64>,
    env: &mut Env,
) -> Result<Vec<Val>> {
    if let Some(f) = env.functions.get(&(node.domain().to_string(), node.op_type().to_string())) {
        return inline_function(ctx, node, f, env);
    }
    // Identity passes sequences and optionals on (its converter reads tensors).
    if domain.is_empty()
        && node.op_type() == "Identity"
        && let Some(Ok(v @ (Val::Seq(_) | Val::Opt(_)))) = node.input.first().map(|i| ctx.value(i))
    {
        return Ok(vec![v.clone()]);
    }
    if domain.is_empty() && control::is_control(node.op_type()) {
        ctx.opset = opset.unwrap_or(0);
        return control::convert(ctx, node, env);
    }
    let opset = opset.ok_or_else(|| {
        Error::Unsupported(format!(
            "domain '{domain}' is not imported by the model (opset_import lists {:?})",
            env.opsets.keys().collect::<Vec<_>>()
        ))
    })?;
    let convert = lookup(domain, node.op_type()).ok_or_else(|| {
        Error::Unsupported(format!(
            "ONNX op {} is not supported by kiln yet (`kiln inspect MODEL` lists every unsupported op); \
             re-export the model without it or file an issue",
            op_key(domain, node.op_type())
        ))
    })?;
    ctx.opset = opset;
    convert(ctx, node)
}

/// Expands a call of a model-local function (`FunctionProto`, as exporters emit) in place:
/// its body's value names are prefixed so they cannot clash, formal inputs and outputs are
/// bound to the call's, and attribute references take the call's attribute values.
fn inline_function(
    ctx: &mut Ctx,
    call: &NodeProto,
    f: &crate::proto::FunctionProto,
    env: &mut Env,
) -> Result<Vec<Val>> {
    if env.depth > 32 {
        return Err(Error::Graph(format!("function '{}' nests more than 32 deep (recursive?)", f.name())));
    }
    if env.depth == 0 {
        // Checked before any work: a function calling another twice, 32 deep, is a small file
        // that would expand to 2^32 nodes. Nested calls are counted in the top call's size.
        let key = (f.domain().to_string(), f.name().to_string());
        let size = env.sizes.get(&key).copied().unwrap_or(usize::MAX);
        ctx.inlined = ctx.inlined.saturating_add(size);
        if ctx.inlined > MAX_INLINED_NODES {
            return Err(Error::Graph(format!(
                "inlining function '{}' ({} nodes once its nested calls are expanded) takes the model past \
                 {MAX_INLINED_NODES} inlined nodes; a function that calls itself never fits",
                f.name(),
                if size == usize::MAX { "unboundedly many".to_string() } else { size.to_string() }
            )));
        }
    }
    let prefix = format!("{}::{}#{}/", f.domain(), f.name(), call.output.first().map(String::as_str).unwrap_or(""));
    let rename = |n: &str| if n.is_empty() { String::new() } else { format!("{prefix}{n}") };
    for (i, formal) in f.input.iter().enumerate() {
        match call.input.get(i).filter(|s| !s.is_empty()) {
            Some(actual) => {
                let v = ctx.value(actual)?.clone();
                ctx.bind(&rename(formal), v);
            }
            None => ctx.bind(&rename(formal), Val::Unavailable(format!("optional input '{formal}' not given"))),
        }
    }
    let mut body = Vec::with_capacity(f.node.len());
    for n in &f.node {
        let mut n = n.clone();
        n.input = n.input.iter().map(|s| rename(s)).collect();
        n.output = n.output.iter().map(|s| rename(s)).collect();
        let mut attrs = Vec::new();
        for a in n.attribute {
            if let Some(r) = a.ref_attr_name.as_deref() {
                // Refers to an attribute of the call; absent means "use the op's default".
                if let Some(actual) = call.attribute.iter().find(|c| c.name() == r) {
                    let mut actual = actual.clone();
                    actual.name = a.name.clone();
                    attrs.push(actual);
                } else if let Some(def) = f.attribute_proto.iter().find(|d| d.name() == r) {
                    let mut def = def.clone();
                    def.name = a.name.clone();
                    attrs.push(def);
                }
            } else {
                attrs.push(a);
            }
        }
        n.attribute = attrs;
        body.push(n);
    }
    let mut opsets = env.opsets.clone();
    for o in &f.opset_import {
        let d = if o.domain() == "ai.onnx" { "" } else { o.domain() };
        opsets.insert(d.to_string(), o.version());
    }
    let mut inner = Env { opsets: &opsets, functions: env.functions, sizes: env.sizes, depth: env.depth + 1 };
    convert_nodes(ctx, &body, &mut inner).map_err(|e| match e {
        ImportError::Ir(e) => e,
        ImportError::NeedsValue { message, .. } => Error::Unsupported(message),
    })?;
    f.output.iter().map(|o| ctx.value(&rename(o)).cloned()).collect()
}
