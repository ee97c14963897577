//! What a served model is: its name, its inputs and outputs as the protocol describes them
//! (dim 0 is `-1` when requests may carry any batch), and how to get its graph for a given
//! batch size. Zoo models are traced anew per batch size (their forward pass takes any batch);
//! ONNX models are imported with their leading symbolic dim fixed to the batch size.

use std::collections::HashMap;
use std::path::Path;

use kiln::zoo::{Model, ModelConfig};
use kiln_ir::{DType, Graph, HostTensor, Shape};
use kiln_onnx::{DeclaredDim, ImportOptions, OnnxModel};

use crate::error::{ServeError, ServeResult};

/// One input or output: its name, dtype and shape (`-1` marks the batch dim).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorSpec {
    /// Name used in requests and responses.
    pub name: String,
    /// Element type.
    pub dtype: DType,
    /// Dims; `-1` for the batch dim of a batchable model.
    pub shape: Vec<i64>,
}

impl TensorSpec {
    /// The concrete shape at batch size `batch` (`-1` becomes `batch`).
    pub fn at_batch(&self, batch: usize) -> Vec<usize> {
        self.shape.iter().map(|&d| if d < 0 { batch } else { d as usize }).collect()
    }
}

/// Where a model's graph comes from.
enum Source {
    Zoo(Box<dyn Model>),
    Onnx(Box<OnnxModel>),
}

/// A model the server can compile and run.
pub struct ModelDef {
    /// The name in URLs (`/v2/models/{name}`).
    pub name: String,
    /// Inputs in the order the graph takes them.
    pub inputs: Vec<TensorSpec>,
    /// Outputs in the order the graph gives them.
    pub outputs: Vec<TensorSpec>,
    /// Whether dim 0 of every input and output is a batch dim that requests may size and the
    /// batcher may concatenate along. A model with fixed input shapes runs one request at a time.
    pub batchable: bool,
    source: Source,
}

impl std::fmt::Debug for ModelDef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ModelDef").field("name", &self.name).field("inputs", &self.inputs).field("outputs", &self.outputs).finish()
    }
}

/// Output specs from a graph traced or imported at batch 1, with dim 0 as `-1` when batchable.
fn output_specs(graph: &Graph, names: &[String], batchable: bool) -> ServeResult<Vec<TensorSpec>> {
    graph
        .outputs
        .iter()
        .zip(names)
        .map(|(&id, name)| {
            let ty = graph.ty(id);
            let dims = ty.shape.as_fixed().ok_or_else(|| {
                ServeError::Setup(format!("output '{name}' has a shape that depends on data ({}); kiln serve needs static output shapes", ty.shape))
            })?;
            let mut shape: Vec<i64> = dims.iter().map(|&d| d as i64).collect();
            if batchable {
                match shape.first_mut() {
                    Some(d) if *d == 1 => *d = -1,
                    _ => {
                        return Err(ServeError::Setup(format!(
                            "output '{name}' has shape {dims:?} at batch 1; a batchable model's outputs must lead with the batch dim"
                        )));
                    }
                }
            }
            Ok(TensorSpec { name: name.clone(), dtype: ty.dtype, shape })
        })
        .collect()
}

impl ModelDef {
    /// A zoo model (`resnet18`, `resnet50`, `bert-base`, `gpt2`) built as `cfg` says; its
    /// batch dim is free (the `batch` of `cfg` is ignored).
    pub fn zoo(name: &str, cfg: &ModelConfig) -> ServeResult<ModelDef> {
        let cfg = ModelConfig { batch: 1, ..cfg.clone() };
        let model = kiln::zoo::build(name, &cfg).map_err(|e| ServeError::Setup(e.to_string()))?;
        let inputs: Vec<TensorSpec> = model
            .inputs()
            .into_iter()
            .map(|s| {
                let mut shape: Vec<i64> = s.shape.iter().map(|&d| d as i64).collect();
                shape[0] = -1;
                TensorSpec { name: s.name, dtype: s.dtype, shape }
            })
            .collect();
        let mut def = ModelDef { name: name.to_string(), inputs, outputs: Vec::new(), batchable: true, source: Source::Zoo(model) };
        let graph = def.graph_for(1)?;
        let names: Vec<String> = if graph.outputs.len() == 1 {
            vec!["output".to_string()]
        } else {
            (0..graph.outputs.len()).map(|i| format!("output_{i}")).collect()
        };
        def.outputs = output_specs(&graph, &names, true)?;
        Ok(def)
    }

    /// An ONNX file, served under its file stem. `dims` sizes symbolic dims other than the
    /// leading batch dim (by name, or `INPUT.AXIS` for unnamed ones).
    pub fn onnx_file(path: &Path, dims: &HashMap<String, usize>) -> ServeResult<ModelDef> {
        if !path.is_file() {
            return Err(ServeError::Setup(format!("ONNX model '{}' does not exist or is not a file", path.display())));
        }
        let model = OnnxModel::load(path).map_err(|e| ServeError::Setup(format!("{}: {e}", path.display())))?;
        let name = path.file_stem().map_or_else(|| "model".to_string(), |s| s.to_string_lossy().into_owned());
        ModelDef::onnx(&name, model, dims)
    }

    /// A decoded ONNX model served as `name`. It is batchable when every input's dim 0 is
    /// symbolic; every other symbolic dim must be sized by `dims`.
    pub fn onnx(name: &str, model: OnnxModel, dims: &HashMap<String, usize>) -> ServeResult<ModelDef> {
        let declared = model.inputs();
        let batchable = !declared.is_empty()
            && declared.iter().all(|v| matches!(v.dims.as_deref(), Some([DeclaredDim::Named(_) | DeclaredDim::Unknown, ..])));
        let mut inputs = Vec::new();
        for v in &declared {
            let dtype = v.dtype.clone().map_err(|t| {
                ServeError::Setup(format!("model '{name}': input '{}' has type {t}, which kiln serve cannot take", v.name))
            })?;
            let Some(ds) = &v.dims else {
                return Err(ServeError::Setup(format!("model '{name}': input '{}' declares no rank", v.name)));
            };
            let mut shape = Vec::with_capacity(ds.len());
            for (axis, d) in ds.iter().enumerate() {
                let sized = |key: String| -> ServeResult<i64> {
                    dims.get(&key).map(|&n| n as i64).ok_or_else(|| {
                        ServeError::Setup(format!(
                            "model '{name}': input '{}' dim {axis} is symbolic ('{key}'); give its size with --dim {key}=SIZE",
                            v.name
                        ))
                    })
                };
                shape.push(match d {
                    DeclaredDim::Fixed(n) => *n as i64,
                    _ if axis == 0 && batchable => -1,
                    DeclaredDim::Named(s) => sized(s.clone())?,
                    DeclaredDim::Unknown => sized(format!("{}.{axis}", v.name))?,
                });
            }
            inputs.push(TensorSpec { name: v.name.clone(), dtype, shape });
        }
        let mut def = ModelDef { name: name.to_string(), inputs, outputs: Vec::new(), batchable, source: Source::Onnx(Box::new(model)) };
        let (graph, names) = def.import(1)?;
        def.outputs = output_specs(&graph, &names, batchable)?;
        Ok(def)
    }

    /// Imports the ONNX model with inputs of batch `batch`; the graph and its output names.
    fn import(&self, batch: usize) -> ServeResult<(Graph, Vec<String>)> {
        let Source::Onnx(model) = &self.source else {
            return Err(ServeError::Internal("not an ONNX model".into()));
        };
        let opts = ImportOptions {
            input_shapes: self.inputs.iter().map(|s| (s.name.clone(), Shape::fixed(&s.at_batch(batch)))).collect(),
            ..ImportOptions::default()
        };
        let imported = kiln_onnx::import(model, &opts).map_err(|e| ServeError::Setup(format!("model '{}': {e}", self.name)))?;
        if imported.input_names.len() != self.inputs.len() {
            return Err(ServeError::Setup(format!(
                "model '{}': the import needs input values at load time ({} of {} inputs left); kiln serve cannot serve it",
                self.name,
                imported.input_names.len(),
                self.inputs.len()
            )));
        }
        Ok((imported.graph, imported.output_names))
    }

    /// The model's graph for inputs of batch size `batch` (for a model that is not batchable,
    /// its declared shapes whatever `batch` is).
    pub fn graph_for(&self, batch: usize) -> ServeResult<Graph> {
        match &self.source {
            Source::Zoo(model) => {
                let shapes: Vec<Vec<usize>> = self.inputs.iter().map(|s| s.at_batch(batch)).collect();
                let specs: Vec<(&str, DType, &[usize])> =
                    self.inputs.iter().zip(&shapes).map(|(s, sh)| (s.name.as_str(), s.dtype, sh.as_slice())).collect();
                kiln::trace(&specs, |xs| model.forward(xs)).map_err(|e| ServeError::Setup(format!("tracing '{}': {e}", self.name)))
            }
            Source::Onnx(_) => Ok(self.import(batch)?.0),
        }
    }

    /// Zeros shaped like the inputs at `batch` (warm-up and padding).
    pub fn dummy_inputs(&self, batch: usize) -> Vec<HostTensor> {
        self.inputs.iter().map(|s| HostTensor::zeros(s.dtype, &s.at_batch(batch))).collect()
    }
}
