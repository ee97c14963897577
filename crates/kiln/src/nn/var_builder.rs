//! [`VarBuilder`]: where layers get their named parameters, either freshly initialised from a
//! seed or loaded by name from a safetensors checkpoint (candle's `VarBuilder` idea).

use super::init::Init;
use super::safetensors_io::SafetensorsFile;
use crate::rng::Rng;
use crate::{DType, Result, Tensor};
use kiln_ir::Error;
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};

/// Prefixes that whole-model checkpoints often put before the base model's names
/// (`bert.` in `BertForPreTraining`, `transformer.` in `GPT2LMHeadModel`); a name missing
/// from the file is also looked up under each of them.
const CHECKPOINT_PREFIXES: [&str; 3] = ["bert", "transformer", "model"];

enum Source {
    Random { seed: u64 },
    File(SafetensorsFile),
}

struct Var {
    tensor: Tensor,
    trainable: bool,
}

#[derive(Default)]
struct State {
    /// Every variable handed out, by full name, so a second `get` of one name returns the
    /// same tensor (weight tying) and callers can list or save what a model uses.
    vars: BTreeMap<String, Var>,
    num_parameters: usize,
}

struct Inner {
    source: Source,
    dtype: DType,
    state: Mutex<State>,
}

/// A source of named parameters with a name prefix. Cloning is cheap and clones share the
/// source, the parameter counter and the record of created variables.
#[derive(Clone)]
pub struct VarBuilder {
    inner: Arc<Inner>,
    prefix: String,
}

impl std::fmt::Debug for VarBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let source = match &self.inner.source {
            Source::Random { seed } => format!("random(seed {seed})"),
            Source::File(file) => format!("{}", file.path().display()),
        };
        write!(f, "VarBuilder({source}, {}, prefix '{}')", self.inner.dtype, self.prefix)
    }
}

impl VarBuilder {
    fn with_source(source: Source, dtype: DType) -> VarBuilder {
        VarBuilder {
            inner: Arc::new(Inner { source, dtype, state: Mutex::new(State::default()) }),
            prefix: String::new(),
        }
    }

    /// Parameters initialised deterministically from `seed`: each one from its own stream
    /// keyed by its full name, so the same seed gives bitwise the same weights.
    pub fn random(seed: u64, dtype: DType) -> VarBuilder {
        VarBuilder::with_source(Source::Random { seed }, dtype)
    }

    /// Parameters loaded by name from the safetensors file at `path`. Stored tensors must have
    /// exactly the requested shape and `dtype`.
    pub fn from_safetensors(path: &Path, dtype: DType) -> Result<VarBuilder> {
        Ok(VarBuilder::with_source(Source::File(SafetensorsFile::open(path)?), dtype))
    }

    /// The same source with `name` pushed onto the prefix (joined with `.`).
    pub fn pp(&self, name: &str) -> VarBuilder {
        VarBuilder { inner: self.inner.clone(), prefix: self.path(name) }
    }

    /// The current prefix (empty at the root).
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The dtype parameters are created or loaded in.
    pub fn dtype(&self) -> DType {
        self.inner.dtype
    }

    fn path(&self, name: &str) -> String {
        if self.prefix.is_empty() { name.to_string() } else { format!("{}.{name}", self.prefix) }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // A panic elsewhere while holding the lock leaves the map consistent (inserts are
        // single calls), so a poisoned lock is still safe to use.
        self.inner.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A trainable parameter called `name` (under the prefix) of `shape`, created with `init`
    /// or loaded from the checkpoint. Counted by [`VarBuilder::num_parameters`].
    pub fn get(&self, name: &str, shape: &[usize], init: Init) -> Result<Tensor> {
        self.get_var(name, shape, init, true)
    }

    /// A non-trainable buffer (BatchNorm running statistics...): like [`VarBuilder::get`] but
    /// not counted as a parameter.
    pub fn get_buffer(&self, name: &str, shape: &[usize], init: Init) -> Result<Tensor> {
        self.get_var(name, shape, init, false)
    }

    fn get_var(&self, name: &str, shape: &[usize], init: Init, trainable: bool) -> Result<Tensor> {
        let full = self.path(name);
        if let Some(v) = self.state().vars.get(&full) {
            if v.tensor.shape() != shape {
                return Err(Error::Shape(format!(
                    "variable '{full}' was created with shape {:?} and is now asked for with shape {shape:?}",
                    v.tensor.shape()
                )));
            }
            return Ok(v.tensor.clone());
        }
        let tensor = match &self.inner.source {
            Source::Random { seed } => init.make(shape, self.inner.dtype, &mut Rng::for_name(*seed, &full))?,
            Source::File(f) => self.load(f, &full, shape)?,
        };
        let mut st = self.state();
        if trainable {
            st.num_parameters += tensor.numel();
        }
        st.vars.insert(full, Var { tensor: tensor.clone(), trainable });
        Ok(tensor)
    }

    fn load(&self, f: &SafetensorsFile, full: &str, shape: &[usize]) -> Result<Tensor> {
        let key = if f.contains(full) {
            full.to_string()
        } else {
            CHECKPOINT_PREFIXES
                .iter()
                .map(|p| format!("{p}.{full}"))
                .find(|k| f.contains(k))
                .unwrap_or_else(|| full.to_string())
        };
        let host = f.load(&key)?;
        let file = f.path().display();
        if host.shape() != shape {
            return Err(Error::Shape(format!(
                "tensor '{key}' in {file} has shape {:?} but the model expects {shape:?}",
                host.shape()
            )));
        }
        if host.dtype() != self.inner.dtype {
            return Err(Error::DType(format!(
                "tensor '{key}' in {file} has dtype {} but the model expects {}",
                host.dtype(),
                self.inner.dtype
            )));
        }
        Ok(Tensor::from_host(host))
    }

    /// Total elements of all trainable parameters created so far through this builder or any
    /// builder sharing its source (buffers excluded).
    pub fn num_parameters(&self) -> usize {
        self.state().num_parameters
    }

    /// Full names of all parameters and buffers created so far, sorted.
    pub fn names(&self) -> Vec<String> {
        self.state().vars.keys().cloned().collect()
    }

    /// Every parameter and buffer created so far, by full name, sorted (what
    /// [`super::save_safetensors`] needs to write a checkpoint of a model).
    pub fn vars(&self) -> Vec<(String, Tensor)> {
        self.state().vars.iter().map(|(k, v)| (k.clone(), v.tensor.clone())).collect()
    }

    /// Full names of the trainable parameters only, sorted.
    pub fn parameter_names(&self) -> Vec<String> {
        self.state().vars.iter().filter(|(_, v)| v.trainable).map(|(k, _)| k.clone()).collect()
    }
}
