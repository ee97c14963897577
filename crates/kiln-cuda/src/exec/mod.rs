//! [`Executable`]: a scheduled [`Program`] bound to one GPU — constants uploaded once, one
//! arena for the temporaries (the memory plan's offsets), input staging buffers, the kernels
//! compiled (through the disk cache) and loaded, and every library call planned. A run copies
//! the inputs up, issues every step on kiln's stream and copies the outputs back.

mod attention;
mod conv;
mod conv_algos;
mod conv_fusion;
mod event;
mod fusion;
mod gemm_fusion;
mod gather;
mod graph;
mod host;
mod lt;
mod matmul;
mod profile;
mod tuning;
mod autotune;

use crate::codegen::{CudaSource, Launch, NVRTC_OPTIONS, render_cuda};
use crate::device::{DeviceBuffer, Gpu, driver_error};
use crate::module::Module;
use conv::ConvPlan;
use event::Event;
use attention::AttentionCall;
use gather::GatherCall;
pub(crate) use gather::fits as gather_fits;
use graph::GraphReplay;
use cudarc::driver::{result, sys};
use kiln_ir::{Error, HostTensor, Op, Result};
use kiln_sched::{BufKind, BufView, CacheOutcome, DiskCache, Epilogue, ExternOp, Program, StepKind};
pub(crate) use conv::{cudnn_refusal, warm_up as warm_up_cudnn};
pub(crate) use lt::warm_up as warm_up_cublaslt;
pub use attention::{AttentionPlan, runs_composite};
pub use autotune::{GpuAutotuneReport, GpuStepResult};
pub use conv_fusion::ConvFusion;
pub use fusion::LibraryFusion;
pub use gemm_fusion::{GemmBias, GemmFusion};
pub use tuning::{GpuStepTuning, GpuTuning, LtAlgo};
pub(crate) use matmul::{Batching, MatmulPlan};
use std::ffi::c_void;
use std::sync::{Arc, Mutex};

/// A kernel launch with its arguments bound.
struct KernelCall {
    func: sys::CUfunction,
    name: String,
    grid: (u32, u32),
    /// How the renderer meant it to be launched, and over how many outer points: the grid
    /// follows from these and the block size, which max-autotune may change.
    launch: Launch,
    points: u64,
    /// Buffer addresses, then `begin`, `end` of the first outer loop.
    args: Vec<u64>,
    range: [i64; 2],
}

impl KernelCall {
    /// Launches with `block` threads per block and `spread` outer points per thread (or per
    /// block) from now on (`None`: the renderer's choices). Any such launch computes the same
    /// values: kernels loop grid-stride over their points and combine per-warp partials for any
    /// number of warps.
    fn set_launch(&mut self, block: Option<u32>, spread: Option<u32>) {
        let launch = match (self.launch, block) {
            (l, None) => l,
            (Launch::PerThread { .. }, Some(block)) => Launch::PerThread { block },
            (Launch::PerBlock { .. }, Some(block)) => Launch::PerBlock { block },
            (Launch::PerWarp { .. }, Some(block)) => Launch::PerWarp { block },
        };
        let (blocks, threads) = launch.grid(self.points);
        self.grid = (blocks.div_ceil(spread.unwrap_or(1).max(1)), threads);
    }
}

/// One step, resolved to device addresses.
enum GpuStep {
    Kernel(KernelCall),
    Matmul { plan: MatmulPlan, a: u64, b: u64, c: u64, epilogue: Option<KernelCall> },
    /// `z`: the residual a fused call adds ([`ConvFusion`]).
    Conv { plan: ConvPlan, x: u64, w: u64, bias: Option<u64>, z: Option<u64>, y: u64, epilogue: Option<KernelCall> },
    Gather(GatherCall),
    Attention(AttentionCall),
    Host { op: Op, inputs: Vec<BufView>, out: u64, epilogue: Option<KernelCall> },
}

impl GpuStep {
    /// The kernel that runs after the step's library call or host evaluation, if any.
    fn epilogue(&self) -> Option<&KernelCall> {
        match self {
            GpuStep::Matmul { epilogue, .. } | GpuStep::Conv { epilogue, .. } | GpuStep::Host { epilogue, .. } => epilogue.as_ref(),
            GpuStep::Kernel(_) | GpuStep::Gather(_) | GpuStep::Attention(_) => None,
        }
    }
}

/// A program ready to run on a GPU.
pub struct Executable {
    gpu: Arc<Gpu>,
    program: Program,
    steps: Vec<GpuStep>,
    /// Device address of every buffer.
    ptrs: Vec<u64>,
    _module: Option<Module>,
    _consts: Vec<DeviceBuffer>,
    _arena: DeviceBuffer,
    _staging: Vec<DeviceBuffer>,
    /// Bytes of the arena of temporaries (the memory plan made after the libraries' fusions).
    arena_bytes: usize,
    workspace: Option<DeviceBuffer>,
    source: CudaSource,
    cache: Option<CacheOutcome>,
    /// Set by a gather that met an out-of-range index (4 bytes, zeroed before each run).
    error_flag: DeviceBuffer,
    /// reduce-overhead: the steps captured once as a CUDA graph and replayed.
    replay: Option<GraphReplay>,
    /// Runs share the staging buffers and arena: one at a time.
    lock: Mutex<()>,
}

// SAFETY: raw handles in the steps are context-wide; runs are serialised by `lock`.
unsafe impl Send for Executable {}
unsafe impl Sync for Executable {}

fn addr(base: u64, v: &BufView, elem: usize) -> u64 {
    base + (v.offset * elem) as u64
}

/// Folds into their steps, before memory is planned, the work kiln-cuda does there: an
/// attention writing the merge of its heads (the copy step goes), then the epilogues cuDNN and
/// cuBLASLt apply (`lt_accepts`, asked with the matmul's plan, says cuBLASLt runs one). The
/// runtime and `kiln explain --device cuda` both fold through here, so they show the same steps.
/// Returns, per step, the epilogue a library call applies itself; an attention step's strides
/// are in the step (`StepKind::Eval::out_strides`).
pub(crate) fn fold_steps(program: &mut Program, lt_accepts: &mut dyn FnMut(MatmulPlan, &GemmFusion) -> bool) -> Vec<Option<LibraryFusion>> {
    kiln_sched::write_attention_through_copies(program);
    fusion::fuse_library_epilogues(program, lt_accepts)
}

impl Executable {
    /// Binds `program` to `gpu`: renders and compiles its kernels (cubin from `cache` when
    /// there), uploads its constants and allocates its memory.
    pub fn new(mut program: Program, gpu: &Arc<Gpu>, cache: &DiskCache) -> Result<Executable> {
        let began = std::time::Instant::now();
        kiln_cpu::compiled::check_steps(&program)?;
        // Before placing memory: an attention may write its heads' merge itself, a fused conv
        // its output over its residual.
        let folds = fold_steps(&mut program, &mut |plan, f| plan.lt_accepts_epilogue(gpu, f.relu));
        program.memory = Some(kiln_sched::plan_memory(&program));
        let (offsets, arena_bytes) = kiln_cpu::compiled::place_temps(&program)?;
        let source = render_cuda(&program)?;
        tracing::info!(target: "kiln::output_code", "generated CUDA C ({} kernels):\n{}", source.kernels.len(), source.source);
        let rendered = began.elapsed();
        let mut cubin_done = rendered;
        let (module, cache_outcome) = if source.kernels.is_empty() {
            (None, None)
        } else {
            let (cubin, outcome) = crate::nvrtc::cached_cubin(cache, &source.source, gpu.sm(), NVRTC_OPTIONS)?;
            cubin_done = began.elapsed();
            let names: Vec<&str> = source.kernels.iter().map(|k| k.name.as_str()).collect();
            (Some(Module::load(gpu, &cubin, &names)?), Some(outcome))
        };

        let kernels_done = began.elapsed();
        let arena = gpu.alloc(arena_bytes)?;
        let mut consts = Vec::new();
        let mut staging = Vec::new();
        let mut ptrs = vec![0u64; program.buffers.len()];
        for (i, b) in program.buffers.iter().enumerate() {
            ptrs[i] = match b.kind {
                BufKind::Temp => arena.ptr() + offsets[i].unwrap_or(0) as u64,
                BufKind::Input(_) => {
                    staging.push(gpu.alloc(b.bytes())?);
                    staging.last().map_or(0, DeviceBuffer::ptr)
                }
                BufKind::Const(id) => {
                    let t = program.consts.get(id.0 as usize).ok_or_else(|| Error::Graph(format!("buffer {i} names constant {} of {}", id.0, program.consts.len())))?;
                    consts.push(gpu.upload(t)?);
                    consts.last().map_or(0, DeviceBuffer::ptr)
                }
            };
        }

        let call = |kernel: &kiln_sched::kernel::Kernel, args: &[kiln_sched::BufId]| -> Result<KernelCall> {
            let name = &kernel.name;
            let info = source.kernels.iter().find(|k| &k.name == name).ok_or_else(|| Error::Device(format!("kernel {name} was not rendered")))?;
            let module = module.as_ref().ok_or_else(|| Error::Device("no kernels were compiled".into()))?;
            let end = kernel.outer.first().map_or(1, |l| l.extent);
            let points = info.points(0, end);
            Ok(KernelCall {
                func: module.function(name)?,
                name: name.clone(),
                grid: info.launch.grid(points),
                launch: info.launch,
                points,
                args: args.iter().map(|a| ptrs[a.index()]).collect(),
                range: [0, end as i64],
            })
        };
        let epilogue = |e: &Option<Epilogue>| e.as_ref().map(|e| call(&e.kernel, &e.args)).transpose();

        let memory_done = began.elapsed();
        let has_convs = program.steps.iter().any(|s| matches!(&s.kind, StepKind::Extern { op: ExternOp::Conv2d(_), .. }));
        if has_convs {
            conv_algos::load(cache, gpu);
        }
        let mut steps = Vec::with_capacity(program.steps.len());
        for (step, fusion) in program.steps.iter().zip(&folds) {
            steps.push(match &step.kind {
                StepKind::Kernel { kernel, args } => GpuStep::Kernel(call(kernel, args)?),
                StepKind::Extern { op, inputs, out, out_shape, epilogue: e } => {
                    let y = ptrs[out.index()];
                    // Inputs and output share the extern's dtype (f32, f16 or bf16).
                    let dtype = program.buffer(*out).dtype;
                    let host = |op: Op| -> Result<GpuStep> {
                        tracing::info!(target: "kiln::cuda", "{} {:?} -> {out_shape:?} in {dtype} runs on the host (no library path for these strides or this type)", op.name(), inputs.iter().map(|v| &v.shape).collect::<Vec<_>>());
                        Ok(GpuStep::Host { op, inputs: inputs.clone(), out: y, epilogue: epilogue(e)? })
                    };
                    match op {
                        ExternOp::MatMul => match MatmulPlan::new(inputs, out_shape, dtype)? {
                            Some(mut plan) => {
                                let (a, b) = (ptrs[inputs[0].buf.index()], ptrs[inputs[1].buf.index()]);
                                plan.bind(gpu, a, b, y)?;
                                if let Some(f) = fusion.and_then(|f| f.gemm()) {
                                    let bias = match f.bias {
                                        // A column bias is the fused step's third input.
                                        GemmBias::Column(_) => inputs.get(2).map(|v| addr(ptrs[v.buf.index()], v, dtype.size_of())).ok_or_else(|| Error::Graph("a fused matmul without its bias input".into()))?,
                                        GemmBias::Splat(v) => {
                                            let n = out_shape.last().copied().unwrap_or(0);
                                            let splat = kiln_cpu::eval(&Op::Cast(dtype), &[&HostTensor::from_vec(vec![v; n], &[n])?])?;
                                            consts.push(gpu.upload(&splat)?);
                                            consts.last().map_or(0, DeviceBuffer::ptr)
                                        }
                                    };
                                    plan.fuse_epilogue(gpu, f.relu, bias)?;
                                }
                                GpuStep::Matmul { plan, a, b, c: y, epilogue: epilogue(e)? }
                            }
                            None => host(Op::MatMul)?,
                        },
                        ExternOp::Conv2d(attrs) => match ConvPlan::new(gpu, attrs, inputs, out_shape, dtype, fusion.and_then(|f| f.conv()))? {
                            Some(plan) => {
                                let at = |v: &BufView| addr(ptrs[v.buf.index()], v, dtype.size_of());
                                // A fused residual is the step's fourth input.
                                let (x, w, bias, z) = (at(&inputs[0]), at(&inputs[1]), inputs.get(2).map(at), inputs.get(3).map(at));
                                GpuStep::Conv { plan, x, w, bias, z, y, epilogue: epilogue(e)? }
                            }
                            None => host(Op::Conv2d(*attrs))?,
                        },
                    }
                }
                StepKind::Eval { op, inputs, out, out_shape, out_strides } => {
                    let host = || GpuStep::Host { op: op.clone(), inputs: inputs.clone(), out: ptrs[out.index()], epilogue: None };
                    match op {
                        Op::Gather { axis } => match GatherCall::new(gpu, cache, &program, &ptrs, *axis, inputs, ptrs[out.index()])? {
                            Some(g) => GpuStep::Gather(g),
                            None => host(),
                        },
                        Op::Attention { causal, scale } => match AttentionPlan::new(*causal, *scale, inputs, out_shape, program.buffer(*out).dtype, out_strides.as_deref()) {
                            Some(plan) => GpuStep::Attention(AttentionCall::new(gpu, cache, &plan, inputs, &ptrs, ptrs[out.index()])?),
                            None => {
                                tracing::info!(target: "kiln::cuda", "attention {:?} runs on the host (the fused kernel does not take these shapes)", inputs.iter().map(|v| &v.shape).collect::<Vec<_>>());
                                host()
                            }
                        },
                        _ => {
                            tracing::info!(target: "kiln::cuda", "{} runs on the host (no GPU kernel for it yet)", op.name());
                            host()
                        }
                    }
                }
            });
        }
        if has_convs {
            conv_algos::store(cache, gpu);
        }
        let error_flag = gpu.alloc(4)?;
        let ms = |d: std::time::Duration| d.as_secs_f64() * 1e3;
        tracing::info!(
            target: "kiln::cuda",
            "executable built in {:.1} ms: kernels {:.1} ms (epilogue checks with the libraries and render {:.1}, cubin from NVRTC or the cache {:.1}, load {:.1}), arena and constants {:.1} ms, library plans {:.1} ms",
            ms(began.elapsed()),
            ms(kernels_done),
            ms(rendered),
            ms(cubin_done - rendered),
            ms(kernels_done - cubin_done),
            ms(memory_done - kernels_done),
            ms(began.elapsed() - memory_done),
        );
        let mut exe = Executable {
            gpu: gpu.clone(),
            program,
            steps,
            ptrs,
            _module: module,
            _consts: consts,
            _arena: arena,
            _staging: staging,
            arena_bytes,
            workspace: None,
            source,
            cache: cache_outcome,
            error_flag,
            replay: None,
            lock: Mutex::new(()),
        };
        exe.fit_workspace()?;
        Ok(exe)
    }

    /// Grows the workspace the conv and cuBLASLt calls share to what the steps' current
    /// choices need (at build, and after max-autotune changes a choice).
    fn fit_workspace(&mut self) -> Result<()> {
        let need = self
            .steps
            .iter()
            .map(|s| match s {
                GpuStep::Conv { plan, .. } => plan.workspace,
                GpuStep::Matmul { plan, .. } => plan.workspace(),
                _ => 0,
            })
            .max()
            .unwrap_or(0);
        if need > self.workspace.as_ref().map_or(0, DeviceBuffer::bytes) {
            self.workspace = None;
            self.workspace = Some(self.gpu.alloc(need)?);
        }
        Ok(())
    }

    /// The program this runs (epilogues cuDNN and cuBLASLt took over already folded in).
    pub fn program(&self) -> &Program {
        &self.program
    }

    /// Bytes of the arena the temporaries live in.
    pub fn arena_bytes(&self) -> usize {
        self.arena_bytes
    }

    /// Device bytes a run uses beyond its weights and inputs: the arena, the shared conv /
    /// cuBLASLt workspace, and cuBLAS's own workspace when a matmul calls cuBLAS. This is what
    /// PyTorch's allocator peak less the model and its inputs counts (its workspaces included).
    pub fn working_bytes(&self) -> usize {
        let workspace = self.workspace.as_ref().map_or(0, DeviceBuffer::bytes);
        let cublas = self.steps.iter().any(|s| matches!(s, GpuStep::Matmul { plan, .. } if plan.lt_algo().is_none()));
        self.arena_bytes + workspace + if cublas { crate::device::CUBLAS_WORKSPACE } else { 0 }
    }

    /// The generated CUDA C and each kernel's launch shape.
    pub fn source(&self) -> &CudaSource {
        &self.source
    }

    /// Whether the kernels' cubin came from the disk cache (`None`: no kernels).
    pub fn cache_outcome(&self) -> Option<&CacheOutcome> {
        self.cache.as_ref()
    }

    /// Steps that run on the host (reference kernels) rather than the GPU.
    pub fn host_steps(&self) -> usize {
        self.steps.iter().filter(|s| matches!(s, GpuStep::Host { .. })).count()
    }

    /// The op of each step that runs on the host, in step order.
    pub fn host_ops(&self) -> impl Iterator<Item = &Op> {
        self.steps.iter().filter_map(|s| match s {
            GpuStep::Host { op, .. } => Some(op),
            _ => None,
        })
    }

    /// The GPU this runs on.
    pub fn gpu(&self) -> &Arc<Gpu> {
        &self.gpu
    }

    /// reduce-overhead: from the next run on, the steps are captured once as a CUDA graph and
    /// replayed (inputs are copied into the same static buffers before each replay). A program
    /// with host steps cannot be captured; it keeps launching step by step (logged once).
    pub fn replay_as_graph(&mut self) {
        if self.host_steps() > 0 {
            tracing::warn!(target: "kiln::cuda", "reduce-overhead: {} host step(s) cannot be captured in a CUDA graph; launching step by step", self.host_steps());
            return;
        }
        self.replay = Some(GraphReplay::default());
    }

    /// Whether runs replay a captured CUDA graph.
    pub fn replays_graph(&self) -> bool {
        self.replay.is_some()
    }

    /// Runs on `inputs` (in the program's input order) and returns the outputs.
    pub fn run(&self, inputs: &[HostTensor]) -> Result<Vec<HostTensor>> {
        let _one = self.lock.lock().unwrap_or_else(|p| p.into_inner());
        self.stage_inputs(inputs)?;
        // Only gathers set the flag: programs without one skip its two copies.
        let gathers = self.steps.iter().any(|s| matches!(s, GpuStep::Gather(_)));
        if gathers {
            self.gpu.write(self.error_flag.ptr(), &[0; 4])?;
        }
        self.issue()?;
        let outs = self
            .program
            .outputs
            .iter()
            .map(|(id, shape)| self.gpu.download(self.ptrs[id.index()], self.program.buffer(*id).dtype, shape))
            .collect::<Result<Vec<_>>>()?;
        if gathers && self.gpu.read(self.error_flag.ptr(), 4)? != [0; 4] {
            return Err(Error::Value("gather: an index is out of range of the axis it indexes".into()));
        }
        Ok(outs)
    }

    /// Device times of `iters` runs after `warmup` (inputs copied up once, outputs left on
    /// the device), each measured with CUDA events, in milliseconds.
    pub fn time_runs(&self, inputs: &[HostTensor], warmup: usize, iters: usize) -> Result<Vec<f64>> {
        let _one = self.lock.lock().unwrap_or_else(|p| p.into_inner());
        self.stage_inputs(inputs)?;
        for _ in 0..warmup {
            self.issue()?;
        }
        self.gpu.synchronize()?;
        let (start, end) = (Event::new()?, Event::new()?);
        let mut times = Vec::with_capacity(iters);
        for _ in 0..iters {
            start.record(&self.gpu)?;
            self.issue()?;
            end.record(&self.gpu)?;
            end.synchronize()?;
            times.push(start.ms_until(&end)?);
        }
        Ok(times)
    }

    /// Checks `inputs` against the program and copies them into the staging buffers.
    fn stage_inputs(&self, inputs: &[HostTensor]) -> Result<()> {
        let p = &self.program;
        if inputs.len() != p.inputs.len() {
            return Err(Error::Value(format!("the program takes {} inputs, got {}", p.inputs.len(), inputs.len())));
        }
        for (i, (t, id)) in inputs.iter().zip(&p.inputs).enumerate() {
            let b = p.buffer(*id);
            if t.dtype() != b.dtype || t.numel() != b.numel {
                return Err(Error::Value(format!(
                    "input {i}: expected {} elements of {}, got {:?} of {}",
                    b.numel, b.dtype, t.shape(), t.dtype()
                )));
            }
            self.gpu.write(self.ptrs[id.index()], &t.contiguous().storage.as_bytes())?;
        }
        Ok(())
    }

    /// Issues every step on kiln's stream: the captured graph under reduce-overhead.
    fn issue(&self) -> Result<()> {
        self.gpu.bind()?;
        match &self.replay {
            Some(r) => r.launch(&self.gpu, || self.issue_steps()),
            None => self.issue_steps(),
        }
    }

    /// Issues the steps one by one.
    fn issue_steps(&self) -> Result<()> {
        for step in &self.steps {
            self.issue_step(step, &mut || Ok(()))?;
        }
        Ok(())
    }

    /// Issues one step; `between` runs after its kernel or library call, before its epilogue.
    fn issue_step(&self, step: &GpuStep, between: &mut dyn FnMut() -> Result<()>) -> Result<()> {
        match step {
            GpuStep::Kernel(k) => self.launch(k)?,
            GpuStep::Matmul { plan, a, b, c, .. } => {
                let ws = self.workspace.as_ref().map_or(0, DeviceBuffer::ptr);
                // SAFETY: the addresses are this program's buffers, which the plan was made for;
                // the workspace is the largest any plan asked for.
                unsafe { plan.run(&self.gpu, *a, *b, *c, ws)? }
            }
            GpuStep::Conv { plan, x, w, bias, z, y, .. } => {
                let ws = self.workspace.as_ref().map_or(0, DeviceBuffer::ptr);
                // SAFETY: as above; the workspace is the largest any plan asked for.
                unsafe { plan.run(&self.gpu, *x, *w, *bias, *z, *y, ws)? }
            }
            GpuStep::Gather(g) => g.launch(&self.gpu, self.error_flag.ptr())?,
            GpuStep::Attention(a) => a.launch(&self.gpu)?,
            GpuStep::Host { op, inputs, out, .. } => host::eval_on_host(&self.gpu, &self.program, &self.ptrs, op, inputs, *out)?,
        }
        between()?;
        step.epilogue().map_or(Ok(()), |k| self.launch(k))
    }

    fn launch(&self, k: &KernelCall) -> Result<()> {
        if k.grid.0 == 0 {
            return Ok(());
        }
        let mut params: Vec<*mut c_void> = k.args.iter().map(|a| a as *const u64 as *mut c_void).collect();
        params.extend(k.range.iter().map(|r| r as *const i64 as *mut c_void));
        // SAFETY: the function was compiled from this kernel's source, whose parameters are the
        // buffer pointers then begin/end; every pointer addresses a live buffer of the program.
        unsafe { result::launch_kernel(k.func, (k.grid.0, 1, 1), (k.grid.1, 1, 1), 0, self.gpu.cu_stream(), &mut params) }
            .map_err(|e| driver_error(&format!("launching kernel {}", k.name), e))
    }
}
