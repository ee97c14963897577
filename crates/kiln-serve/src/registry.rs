//! The served models: each has a worker thread that compiles it for every batch size it will
//! run (logging progress), runs warm-up passes on zeros, and only then marks it ready; requests
//! reach the worker through a bounded queue, so overload is refused (503) instead of queued
//! without bound.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError, sync_channel};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use kiln::compile::{CompileOptions, Compiled, GenericKernels};
use kiln_ir::HostTensor;
use tokio::sync::oneshot;

use crate::batcher::{self, Job, Plans};
use crate::config::ServeConfig;
use crate::error::{ServeError, ServeResult};
use crate::metrics::{CompileLabels, Metrics, ModelLabel};
use crate::model::ModelDef;

const LOADING: u8 = 0;
const READY: u8 = 1;
const FAILED: u8 = 2;

/// One served model: its description, readiness and queue.
pub struct ModelHandle {
    /// What the model takes and gives.
    pub def: Arc<ModelDef>,
    state: AtomicU8,
    failure: Mutex<Option<String>>,
    queue: Mutex<Option<SyncSender<Job>>>,
    metrics: Arc<Metrics>,
}

impl ModelHandle {
    /// True once compiled and warmed up.
    pub fn is_ready(&self) -> bool {
        self.state.load(Ordering::Acquire) == READY
    }

    /// `Ok` when ready, else 503 saying why: still warming up, or failed to load.
    pub fn check_ready(&self) -> ServeResult<()> {
        match self.state.load(Ordering::Acquire) {
            READY => Ok(()),
            FAILED => {
                let why = self.failure.lock().unwrap_or_else(|p| p.into_inner()).clone().unwrap_or_default();
                Err(ServeError::Unavailable(format!("model '{}' failed to load: {why}", self.def.name)))
            }
            _ => Err(ServeError::Unavailable(format!("model '{}' is warming up; retry when /v2/models/{}/ready says so", self.def.name, self.def.name))),
        }
    }

    /// Queues a decoded request; the receiver gets its outputs. A full queue is refused at once.
    pub fn submit(&self, inputs: Vec<HostTensor>, rows: usize) -> ServeResult<oneshot::Receiver<ServeResult<Vec<HostTensor>>>> {
        self.check_ready()?;
        let (tx, rx) = oneshot::channel();
        let queue = self.queue.lock().unwrap_or_else(|p| p.into_inner());
        let Some(q) = queue.as_ref() else {
            return Err(ServeError::Unavailable("the server is shutting down".into()));
        };
        let gauge = self.metrics.queue_depth.get_or_create(&Metrics::model(&self.def.name)).clone();
        gauge.inc();
        match q.try_send(Job { inputs, rows, reply: tx }) {
            Ok(()) => Ok(rx),
            Err(TrySendError::Full(_)) => {
                gauge.dec();
                Err(ServeError::Unavailable(format!("model '{}' is overloaded: its queue is full; retry later", self.def.name)))
            }
            Err(TrySendError::Disconnected(_)) => {
                gauge.dec();
                Err(ServeError::Unavailable(format!("model '{}' is not running", self.def.name)))
            }
        }
    }

    /// Closes the queue: the worker finishes what is queued, then exits.
    pub fn close(&self) {
        self.queue.lock().unwrap_or_else(|p| p.into_inner()).take();
    }
}

/// All served models by name, with their worker threads.
pub struct Registry {
    /// Models by name.
    pub models: BTreeMap<String, Arc<ModelHandle>>,
}

impl Registry {
    /// Starts a worker per model (compile, warm up, serve). Names must be unique.
    pub fn start(defs: Vec<ModelDef>, cfg: &ServeConfig, metrics: Arc<Metrics>) -> ServeResult<Registry> {
        let mut models = BTreeMap::new();
        for def in defs {
            if models.contains_key(&def.name) {
                return Err(ServeError::Setup(format!("two models are named '{}'; serve each name once", def.name)));
            }
            let (tx, rx) = sync_channel(cfg.queue_capacity.max(1));
            let handle = Arc::new(ModelHandle {
                def: Arc::new(def),
                state: AtomicU8::new(LOADING),
                failure: Mutex::new(None),
                queue: Mutex::new(Some(tx)),
                metrics: metrics.clone(),
            });
            metrics.model_ready.get_or_create(&Metrics::model(&handle.def.name)).set(0);
            let (h, c) = (handle.clone(), cfg.clone());
            std::thread::Builder::new()
                .name(format!("kiln-serve-{}", handle.def.name))
                .spawn(move || worker(&h, &c, &rx))
                .map_err(|e| ServeError::Setup(format!("cannot start a worker thread: {e}")))?;
            models.insert(handle.def.name.clone(), handle);
        }
        Ok(Registry { models })
    }

    /// True when every model is ready.
    pub fn all_ready(&self) -> bool {
        self.models.values().all(|m| m.is_ready())
    }

    /// Closes every queue: each worker answers what is queued, then exits (a worker still
    /// compiling exits when it is done).
    pub fn shutdown(&self) {
        self.models.values().for_each(|m| m.close());
    }
}

/// Compiles `def` for each batch size (one plan for a model that is not batchable).
fn compile_all(def: &ModelDef, cfg: &ServeConfig, metrics: &Metrics) -> ServeResult<Plans> {
    let sizes = if def.batchable { batcher::batch_sizes(cfg.max_batch) } else { vec![0] };
    let opts = CompileOptions {
        mode: cfg.mode,
        device: cfg.device,
        opt: kiln_opt::OptOptions::from_env().map_err(|e| ServeError::Setup(e.to_string()))?,
        ..CompileOptions::default()
    };
    let generic = if sizes.len() > 1 { generic_kernels(def, &sizes, &opts) } else { None };
    let mut by_size = BTreeMap::new();
    let mut on_generic = 0;
    for (i, &b) in sizes.iter().enumerate() {
        let start = Instant::now();
        let batch = b.max(1);
        tracing::info!(model = %def.name, batch = b, step = i + 1, of = sizes.len(), mode = ?cfg.mode, device = %cfg.device, "compiling");
        let (graph, shapes) = graph_at(def, batch)?;
        let failed = |e: kiln_ir::Error| ServeError::Setup(format!("compiling '{}' for batch {b}: {e}", def.name));
        let on_library = match &generic {
            Some(k) => k.compile(&graph, &shapes, &[batch], &opts).map_err(failed)?,
            None => None,
        };
        on_generic += usize::from(on_library.is_some());
        let compiled: Compiled = match on_library {
            Some(c) => c,
            None => kiln::compile::compile(&graph, &shapes, &opts).map_err(failed)?,
        };
        let secs = start.elapsed().as_secs_f64();
        metrics.compile_seconds.get_or_create(&CompileLabels { model: def.name.clone(), batch: b.to_string() }).set(secs);
        tracing::info!(model = %def.name, batch = b, secs, kernels = compiled.kernels(), cache = ?compiled.report().cache, "compiled");
        by_size.insert(b, compiled);
    }
    metrics.size_generic_batches.get_or_create(&ModelLabel { model: def.name.clone() }).set(on_generic as i64);
    Ok(Plans { by_size })
}

/// The model's graph at `batch` and its inputs' shapes there.
fn graph_at(def: &ModelDef, batch: usize) -> ServeResult<(kiln_ir::Graph, Vec<Vec<usize>>)> {
    Ok((def.graph_for(batch)?, def.inputs.iter().map(|s| s.at_batch(batch)).collect()))
}

/// One C library whose kernels take the batch size as an argument, fitted on the model's
/// graphs at three batch sizes (see `kiln::compile::generic`); `None` (logged) when the model
/// has no such form or this target has no such libraries (a GPU, eager mode): each batch size
/// is then compiled on its own.
fn generic_kernels(def: &ModelDef, sizes: &[usize], opts: &CompileOptions) -> Option<GenericKernels> {
    let start = sizes.iter().copied().find(|&b| b >= 2)?;
    let mut program_at = |b: &[usize]| -> kiln_ir::Result<kiln_sched::Program> {
        let (graph, shapes) = graph_at(def, b[0]).map_err(|e| kiln_ir::Error::Value(e.to_string()))?;
        Ok(kiln::compile::plan(&graph, &shapes, opts)?.0)
    };
    match GenericKernels::build(&[start], &mut program_at, opts) {
        Ok(k) => {
            tracing::info!(model = %def.name, secs = k.build_time().as_secs_f64(), library = k.cache_outcome(), "size-generic kernels built");
            Some(k)
        }
        Err(why) => {
            tracing::info!(model = %def.name, %why, "no size-generic kernels: each batch size compiles on its own");
            None
        }
    }
}

/// Runs `passes` passes of every plan on zeros.
fn warm_up(def: &ModelDef, plans: &Plans, passes: usize) -> ServeResult<()> {
    for pass in 0..passes {
        for (&b, plan) in &plans.by_size {
            batcher::run_guarded(plan, &def.dummy_inputs(b.max(1)))
                .map_err(|e| ServeError::Setup(format!("warm-up pass {} of '{}' at batch {b}: {e}", pass + 1, def.name)))?;
        }
    }
    Ok(())
}

/// The worker thread: compile, warm up, mark ready, then serve the queue.
fn worker(h: &ModelHandle, cfg: &ServeConfig, rx: &Receiver<Job>) {
    let def = h.def.clone();
    let label = Metrics::model(&def.name);
    let started = Instant::now();
    let plans = compile_all(&def, cfg, &h.metrics).and_then(|plans| {
        let t = Instant::now();
        warm_up(&def, &plans, cfg.warmup_passes)?;
        h.metrics.warmup_seconds.get_or_create(&label).set(t.elapsed().as_secs_f64());
        Ok(plans)
    });
    let plans = match plans {
        Ok(p) => p,
        Err(e) => {
            tracing::error!(model = %def.name, "model failed to load: {e}");
            *h.failure.lock().unwrap_or_else(|p| p.into_inner()) = Some(e.to_string());
            h.state.store(FAILED, Ordering::Release);
            return;
        }
    };
    h.state.store(READY, Ordering::Release);
    h.metrics.model_ready.get_or_create(&label).set(1);
    tracing::info!(model = %def.name, secs = started.elapsed().as_secs_f64(), plans = plans.by_size.len(), "ready");
    let depth = h.metrics.queue_depth.get_or_create(&label).clone();
    let sizes = h.metrics.batch_size.get_or_create(&label).clone();
    batcher::serve_queue(&def, &plans, rx, cfg.max_batch, cfg.batch_timeout, &|| {
        depth.dec();
    }, &|rows| sizes.observe(rows as f64));
}
