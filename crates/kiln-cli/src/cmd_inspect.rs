//! `kiln inspect MODEL.onnx`: what an ONNX file declares and whether kiln can run it, without
//! importing it: producer, IR version, opsets, inputs, outputs, ops, parameters, unsupported ops.

use std::collections::BTreeMap;

use kiln_onnx::{OnnxModel, ValueInfo};
use serde::Serialize;

use crate::args::InspectArgs;
use crate::exit::{CliError, CliResult};
use crate::onnx_setup;

/// One declared input or output.
#[derive(Debug, Serialize)]
pub struct ValueReport {
    pub name: String,
    /// `f32[batch,3,224,224]`-style text.
    pub describe: String,
    /// The dtype name, or `null` when kiln cannot hold the type.
    pub dtype: Option<String>,
    /// Each dim: a number, a name, or `null` when unknown; `null` when the rank is not declared.
    pub dims: Option<Vec<serde_json::Value>>,
}

/// Everything `inspect` reports; `--json` prints it as one object.
#[derive(Debug, Serialize)]
pub struct InspectReport {
    pub path: String,
    pub producer: String,
    pub producer_version: String,
    pub ir_version: i64,
    /// Domain (`""` is ai.onnx) → opset version.
    pub opsets: BTreeMap<String, i64>,
    pub inputs: Vec<ValueReport>,
    pub outputs: Vec<ValueReport>,
    /// Nodes of the main graph.
    pub nodes: usize,
    /// Op type → count in the main graph.
    pub op_histogram: BTreeMap<String, usize>,
    pub initializers: usize,
    /// Elements of all initializers.
    pub params: usize,
    /// Bytes of all initializers.
    pub param_bytes: usize,
    /// `Op (opset N)` for each op kiln cannot import; empty when every op is supported.
    pub unsupported_ops: Vec<String>,
}

fn value_report(v: &ValueInfo) -> ValueReport {
    use kiln_onnx::DeclaredDim;
    ValueReport {
        name: v.name.clone(),
        describe: v.describe(),
        dtype: v.dtype.as_ref().ok().map(|d| d.name().to_string()),
        dims: v.dims.as_ref().map(|dims| {
            dims.iter()
                .map(|d| match d {
                    DeclaredDim::Fixed(n) => serde_json::Value::from(*n),
                    DeclaredDim::Named(s) => serde_json::Value::from(s.as_str()),
                    DeclaredDim::Unknown => serde_json::Value::Null,
                })
                .collect()
        }),
    }
}

/// Gathers the report of a loaded model.
pub fn report(path: &str, model: &OnnxModel) -> InspectReport {
    let p = &model.proto;
    let graph = p.graph.as_ref();
    let (params, param_bytes) = onnx_setup::param_counts(model);
    InspectReport {
        path: path.to_string(),
        producer: p.producer_name().to_string(),
        producer_version: p.producer_version().to_string(),
        ir_version: p.ir_version(),
        opsets: model.opsets(),
        inputs: model.inputs().iter().map(value_report).collect(),
        outputs: model.outputs().iter().map(value_report).collect(),
        nodes: graph.map_or(0, |g| g.node.len()),
        op_histogram: model.op_histogram(),
        initializers: graph.map_or(0, |g| g.initializer.len()),
        params,
        param_bytes,
        unsupported_ops: model.unsupported_ops(),
    }
}

/// The report as text for people.
pub fn text(r: &InspectReport) -> String {
    let mut out = String::new();
    let producer = match (r.producer.as_str(), r.producer_version.as_str()) {
        ("", _) => "(not recorded)".to_string(),
        (p, "") => p.to_string(),
        (p, v) => format!("{p} {v}"),
    };
    out += &format!("model:        {}\n", r.path);
    out += &format!("producer:     {producer}\n");
    out += &format!("ir version:   {}\n", r.ir_version);
    let opsets: Vec<String> = r
        .opsets
        .iter()
        .map(|(d, v)| format!("{} {v}", if d.is_empty() { "ai.onnx" } else { d }))
        .collect();
    out += &format!("opsets:       {}\n", opsets.join(", "));
    for (label, values) in [("inputs", &r.inputs), ("outputs", &r.outputs)] {
        out += &format!("{:<14}{}\n", format!("{label}:"), values.len());
        for v in values {
            out += &format!("  {}: {}\n", v.name, v.describe);
        }
    }
    out += &format!("nodes:        {}\n", r.nodes);
    for (op, n) in &r.op_histogram {
        out += &format!("  {op:<24} {n}\n");
    }
    out += &format!("initializers: {}\n", r.initializers);
    out += &format!(
        "parameters:   {} ({} bytes, {:.2} MB)\n",
        r.params,
        r.param_bytes,
        r.param_bytes as f64 / 1e6
    );
    if r.unsupported_ops.is_empty() {
        out += "unsupported:  none (all ops supported)\n";
    } else {
        out += &format!("unsupported:  {}\n", r.unsupported_ops.join(", "));
    }
    out
}

/// Runs the command.
pub fn inspect(args: &InspectArgs) -> CliResult<()> {
    let model = onnx_setup::load(&args.model)?;
    let r = report(&args.model.display().to_string(), &model);
    if args.json {
        let line = serde_json::to_string(&r)
            .map_err(|e| CliError::Failed(format!("cannot encode the report as JSON: {e}")))?;
        println!("{line}");
    } else {
        print!("{}", text(&r));
    }
    Ok(())
}
