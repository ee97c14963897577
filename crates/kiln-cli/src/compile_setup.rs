//! What `bench --mode ...` and `explain` share for compiled modes: a model (zoo name or .onnx
//! file) as a graph with concrete inputs, and compiling it.

use std::path::Path;

use kiln::compile::{CompileOptions, CompileReport, Compiled, Mode};
use kiln_ir::{Graph, HostTensor};

use crate::args::{ModeArg, ModelArgs, OnnxDimArgs};
use crate::exit::{CliError, CliResult};
use crate::onnx_inputs::InputRequest;
use crate::{model_setup, onnx_setup};

/// A model captured as a graph, with inputs to run it on.
pub struct GraphModel {
    pub name: String,
    pub graph: Graph,
    pub inputs: Vec<HostTensor>,
    /// Parameters (elements of constants or initializers).
    pub params: usize,
    /// Seconds to build or load, and capture.
    pub setup_s: f64,
    /// The batch and, for models fed token ids, the sequence length used.
    pub batch: usize,
    pub seq: Option<usize>,
}

/// The kiln mode of a `--mode` flag.
pub fn mode(m: ModeArg) -> Mode {
    match m {
        ModeArg::Eager => Mode::Eager,
        ModeArg::Default => Mode::Default,
        ModeArg::ReduceOverhead => Mode::ReduceOverhead,
        ModeArg::MaxAutotune => Mode::MaxAutotune,
    }
}

/// Builds a zoo model and traces its forward pass, or imports an ONNX file for random inputs.
pub fn graph_model(name: &str, args: &ModelArgs, dims: &OnnxDimArgs) -> CliResult<GraphModel> {
    let to_usize = |flag: &str, v: u64| usize::try_from(v).map_err(|_| CliError::Failed(format!("--{flag} {v} is too large")));
    if onnx_setup::is_onnx(name) {
        let path = Path::new(name);
        onnx_setup::check_model_args(path, args)?;
        let req = InputRequest {
            files: Vec::new(),
            dims: dims.dims.clone(),
            batch: to_usize("batch", args.batch)?,
            seq: to_usize("seq", args.seq)?,
            seed: args.seed,
        };
        let ready = onnx_setup::prepare(path, &req)?;
        let stem = path.file_stem().map_or_else(|| name.to_string(), |s| s.to_string_lossy().into_owned());
        return Ok(GraphModel {
            name: stem,
            params: onnx_setup::param_counts(&ready.model).0,
            batch: ready.prepared.batch(),
            seq: ready.prepared.used_seq().then_some(req.seq),
            setup_s: ready.setup_s,
            graph: ready.imported.graph,
            inputs: ready.bound,
        });
    }
    let (model, build_s) = model_setup::build(name, args)?;
    let start = std::time::Instant::now();
    let graph = kiln::zoo::trace_model(model.as_ref())?;
    let inputs = model
        .example_inputs(args.seed)?
        .iter()
        .map(|t| t.to_host())
        .collect::<kiln_ir::Result<Vec<_>>>()?;
    let takes_tokens = model.inputs().iter().any(|s| s.dtype.is_int());
    Ok(GraphModel {
        name: model.name().to_string(),
        params: model.num_parameters(),
        batch: to_usize("batch", args.batch)?,
        seq: takes_tokens.then_some(to_usize("seq", args.seq)?),
        setup_s: build_s + start.elapsed().as_secs_f64(),
        graph,
        inputs,
    })
}

/// The model's input shapes and the options to compile it with.
fn setup(m: &GraphModel, mode: Mode, device: kiln::Device) -> CliResult<(Vec<Vec<usize>>, CompileOptions)> {
    let shapes: Vec<Vec<usize>> = m.inputs.iter().map(|t| t.shape().to_vec()).collect();
    Ok((shapes, CompileOptions { mode, device, opt: kiln_opt::OptOptions::from_env()?, ..CompileOptions::default() }))
}

/// Compiles a captured model for its inputs in `mode`.
pub fn compile(m: &GraphModel, mode: Mode, device: kiln::Device) -> CliResult<Compiled> {
    let (shapes, opts) = setup(m, mode, device)?;
    Ok(kiln::compile::compile(&m.graph, &shapes, &opts)?)
}

/// The front half of [`compile`] (passes, schedule, memory plan): the program and a report
/// without code-generation stages. Needs no device.
pub fn plan(m: &GraphModel, mode: Mode, device: kiln::Device) -> CliResult<(kiln_sched::Program, CompileReport)> {
    let (shapes, opts) = setup(m, mode, device)?;
    Ok(kiln::compile::plan(&m.graph, &shapes, &opts)?)
}
