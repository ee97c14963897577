//! `compile`: runs the pipeline stages in order, timing each, and falls back to eager
//! execution (with one warning) when no C compiler is available.

use super::report::{CompileReport, StageTimes};
use super::{Mode, specialize};
use kiln_cpu::compiled::{Executable, LaunchKernel};
use kiln_cpu::native::NativeKernels;
use kiln_cpu::toolchain::Toolchain;
use kiln_ir::{Graph, HostTensor, Result};
use kiln_opt::OptOptions;
use kiln_sched::{CacheKey, CacheOutcome, DiskCache, Program, ScheduleOptions};
use std::sync::{Arc, Once, OnceLock};
use std::time::Instant;

/// What to compile for.
#[derive(Clone, Debug, Default)]
pub struct CompileOptions {
    pub mode: Mode,
    /// Passes to skip and whether to decompose composites.
    pub opt: OptOptions,
    /// `None`: `$KILN_CACHE_DIR`, else the user's cache dir.
    pub cache_dir: Option<std::path::PathBuf>,
    /// max-autotune's search budget; `None`: `$KILN_AUTOTUNE_BUDGET_S`, else 60 s.
    pub autotune_budget: Option<std::time::Duration>,
    /// Where the compiled graph runs. On CUDA, `eager` means one kernel per op (fusion off).
    pub device: crate::Device,
}

/// A graph ready to run: compiled kernels, or the reference interpreter.
pub struct Compiled {
    runner: Runner,
    report: CompileReport,
}

enum Runner {
    Eager(Graph),
    Program(Executable),
    #[cfg(feature = "cuda")]
    Cuda(kiln_cuda::Executable),
}

impl Compiled {
    /// A compiled program and its report.
    pub(super) fn from_program(exe: Executable, report: CompileReport) -> Compiled {
        Compiled { runner: Runner::Program(exe), report }
    }

    /// Runs on `inputs` (in the graph's input order).
    pub fn run(&self, inputs: &[HostTensor]) -> Result<Vec<HostTensor>> {
        match &self.runner {
            Runner::Eager(g) => kiln_cpu::run(g, inputs),
            Runner::Program(exe) => exe.run(inputs),
            #[cfg(feature = "cuda")]
            Runner::Cuda(exe) => exe.run(inputs),
        }
    }

    /// GPU time of `iters` runs after `warmup`, in milliseconds, measured with CUDA events
    /// (inputs copied up once); `None` when this does not run on a GPU.
    pub fn time_device(&self, inputs: &[HostTensor], warmup: usize, iters: usize) -> Result<Option<Vec<f64>>> {
        match &self.runner {
            #[cfg(feature = "cuda")]
            Runner::Cuda(exe) => exe.time_runs(inputs, warmup, iters).map(Some),
            _ => {
                let _ = (inputs, warmup, iters);
                Ok(None)
            }
        }
    }

    /// Times every step over `runs` runs (see [`kiln_cpu::compiled::profile`]; on a GPU, device
    /// times of each library call and epilogue apart); `None` when this runs eagerly.
    pub fn profile(
        &self,
        inputs: &[HostTensor],
        runs: usize,
    ) -> Result<Option<(Vec<kiln_cpu::compiled::StepTime>, std::time::Duration)>> {
        match &self.runner {
            Runner::Program(exe) => kiln_cpu::compiled::profile(exe, inputs, runs).map(Some),
            #[cfg(feature = "cuda")]
            Runner::Cuda(exe) => exe.profile(inputs, runs).map(Some),
            _ => Ok(None),
        }
    }

    /// The name of each op a GPU build runs on the host (reference kernels) rather than the
    /// GPU, in step order; empty on the CPU.
    pub fn host_ops(&self) -> Vec<String> {
        match &self.runner {
            #[cfg(feature = "cuda")]
            Runner::Cuda(exe) => exe.host_ops().map(|op| op.name().to_string()).collect(),
            _ => Vec::new(),
        }
    }

    /// How each CPU extern step with a constant packed for it runs, as (step, algorithm):
    /// "conv winograd", "conv tiles", "conv packed gemm", "matmul packed gemm", or after a
    /// first run "matmul strassen" (see [`Executable::packed_algorithms`]); the other externs
    /// use the `gemm` crate. Empty on the GPU and in eager mode.
    pub fn packed_algorithms(&self) -> Vec<(usize, &'static str)> {
        match &self.runner {
            Runner::Program(exe) => {
                exe.packed_algorithms().into_iter().enumerate().filter_map(|(i, a)| Some((i, a?))).collect()
            }
            _ => Vec::new(),
        }
    }

    /// Device memory a run uses beyond its weights and inputs (arena, library workspaces);
    /// `None` off the GPU.
    pub fn device_working_bytes(&self) -> Option<usize> {
        match &self.runner {
            #[cfg(feature = "cuda")]
            Runner::Cuda(exe) => Some(exe.working_bytes()),
            _ => None,
        }
    }

    /// What the compile did.
    pub fn report(&self) -> &CompileReport {
        &self.report
    }

    /// Launches per run.
    pub fn kernels(&self) -> usize {
        self.report.kernels
    }
}

/// The system C compiler, found once per process (`cc --version`: its identity is part of
/// every cache key). Whether it can build OpenMP libraries is [`c_toolchain_works`].
pub fn c_toolchain() -> std::result::Result<&'static Toolchain, &'static str> {
    static TOOLCHAIN: OnceLock<std::result::Result<Toolchain, String>> = OnceLock::new();
    TOOLCHAIN.get_or_init(|| Toolchain::find().map_err(|e| e.to_string())).as_ref().map_err(|e| e.as_str())
}

/// Whether the C compiler builds OpenMP shared libraries (a probe build, once per process;
/// only paid when a library must be built, so a warm start from the cache skips it).
pub fn c_toolchain_works() -> std::result::Result<&'static Toolchain, &'static str> {
    static PROBED: OnceLock<std::result::Result<(), String>> = OnceLock::new();
    let tc = c_toolchain()?;
    PROBED.get_or_init(|| tc.probe().map_err(|e| e.to_string())).as_ref().map_err(|e| e.as_str())?;
    Ok(tc)
}

/// The graph run by the reference interpreter because no C compiler works here, with one
/// warning per process saying what to install.
fn eager_fallback(graph: &Graph, mode: Mode, eager_kernels: usize, why: &str) -> Compiled {
    static WARN: Once = Once::new();
    WARN.call_once(|| tracing::warn!("{why}; running eagerly through the reference interpreter"));
    Compiled { runner: Runner::Eager(graph.clone()), report: CompileReport::eager(mode, eager_kernels, Some(why.to_string())) }
}

/// The disk cache `opts` names (else the default one), or a temporary one when that cannot
/// be used (said once per compile in the log).
pub(super) fn open_cache(opts: &CompileOptions) -> Result<DiskCache> {
    match opts.cache_dir.as_ref().map(DiskCache::open).unwrap_or_else(DiskCache::open_default) {
        Ok(cache) => Ok(cache),
        Err(e) => {
            tracing::warn!(target: "kiln::cache", "disk cache unusable ({e}); building in a temporary directory");
            DiskCache::temp()
        }
    }
}

/// `hit`, `miss` or `rebuilt (why)`, as the report and `kiln bench` show a cache outcome.
pub(super) fn cache_label(outcome: &CacheOutcome) -> String {
    match outcome {
        CacheOutcome::Hit => "hit".to_string(),
        CacheOutcome::Miss => "miss".to_string(),
        CacheOutcome::Rebuilt { reason } => format!("rebuilt ({reason})"),
    }
}

/// Compiles `graph` for inputs of the given shapes (symbolic dims are bound to them).
pub fn compile(graph: &Graph, input_shapes: &[Vec<usize>], opts: &CompileOptions) -> Result<Compiled> {
    if let crate::Device::Cuda(ordinal) = opts.device {
        return compile_cuda(graph, input_shapes, opts, ordinal);
    }
    let eager_kernels = graph.compute_nodes();
    if opts.mode == Mode::Eager {
        return Ok(Compiled { runner: Runner::Eager(graph.clone()), report: CompileReport::eager(opts.mode, eager_kernels, None) });
    }
    if opts.mode == Mode::ReduceOverhead {
        static ONCE: Once = Once::new();
        ONCE.call_once(|| tracing::info!("mode reduce-overhead on the CPU behaves as default (CUDA graphs are a GPU feature)"));
    }
    // Finding the compiler runs `cc --version` (a process, ~10 ms: a tenth of a warm start), so
    // it overlaps planning; a missing compiler still wins over a planning error, as before.
    let (toolchain, planned) = std::thread::scope(|s| {
        let finding = s.spawn(c_toolchain);
        let planned = plan(graph, input_shapes, opts);
        (finding.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic)), planned)
    });
    let toolchain = match toolchain {
        Ok(t) => t,
        Err(why) => return Ok(eager_fallback(graph, opts.mode, eager_kernels, why)),
    };
    let (program, mut report) = planned?;
    let mut times = std::mem::take(&mut report.times);

    let t = Instant::now();
    let source = kiln_cpu::codegen::render_c(&program)?;
    times.render = t.elapsed();
    tracing::info!(target: "kiln::output_code", "generated C ({} kernels):\n{source}", program.kernels().count());

    let t = Instant::now();
    let cache = open_cache(opts)?;
    let key = library_key(&source, toolchain);
    let (lib_path, outcome) = match build_library(&source, &key, toolchain, &cache) {
        Ok(r) => r,
        Err(e) => match c_toolchain_works() {
            // The compiler cannot build anything here: run eagerly, as without a compiler.
            Err(why) => return Ok(eager_fallback(graph, opts.mode, report.eager_kernels, why)),
            Ok(_) => return Err(e),
        },
    };
    times.build = t.elapsed();

    let t = Instant::now();
    let launcher: Arc<dyn LaunchKernel> = Arc::new(NativeKernels::load(&lib_path, &program)?);
    let mut exe = Executable::new(program, launcher)?;
    times.load = t.elapsed();

    if opts.mode == Mode::MaxAutotune {
        let t = Instant::now();
        let key = key.part("tuning-for-threads", rayon::current_num_threads().to_string());
        report.autotune = Some(super::tune::tune(&mut exe, &cache, key, input_shapes, opts.autotune_budget)?);
        times.autotune = t.elapsed();
    }

    report.cache = Some(cache_label(&outcome));
    report.source = Some(source);
    report.times = times;
    tracing::info!(target: "kiln::graph", "compiled in {:.1} ms", report.times.total().as_secs_f64() * 1e3);
    Ok(Compiled { runner: Runner::Program(exe), report })
}

/// The disk-cache key of the shared library built from `source`: everything that changes it.
pub(super) fn library_key(source: &str, toolchain: &Toolchain) -> CacheKey {
    CacheKey::new("cpu-lib")
        .part("source", source)
        .part("kiln", env!("CARGO_PKG_VERSION"))
        .part("cc", &toolchain.id())
        .part("cpu", &kiln_cpu::toolchain::cpu_features())
}

/// The shared library of `source`: from the disk cache, else built by the C compiler (whose
/// probe runs only then: its error says what to install).
pub(super) fn build_library(
    source: &str,
    key: &CacheKey,
    toolchain: &Toolchain,
    cache: &DiskCache,
) -> Result<(std::path::PathBuf, CacheOutcome)> {
    cache.get_or_build(key, "kernels.so", |path: &std::path::Path| {
        c_toolchain_works().map_err(|why| kiln_ir::Error::Unsupported(why.to_string()))?;
        toolchain.compile_shared(source, path)
    })
}

/// [`compile`] for a CUDA device: the same front half, then CUDA C through NVRTC and library
/// calls ([`kiln_cuda::Executable`]).
#[cfg(feature = "cuda")]
fn compile_cuda(graph: &Graph, input_shapes: &[Vec<usize>], opts: &CompileOptions, ordinal: usize) -> Result<Compiled> {
    // The passes need no GPU, so the device opens, and the libraries the graph will call load
    // (cuDNN, cuBLASLt: 100+ ms each on a first compile), on another thread meanwhile. The
    // device is sent back as soon as it is open; the libraries go on loading while the
    // executable is built, which waits for a handle only when it first needs it.
    let began = Instant::now();
    let uses = |f: fn(&kiln_ir::Op) -> bool| graph.nodes.iter().any(|n| f(&n.op));
    let (convs, matmuls) = (uses(|op| matches!(op, kiln_ir::Op::Conv2d(_))), uses(|op| matches!(op, kiln_ir::Op::MatMul)));
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let gpu = kiln_cuda::Gpu::open(ordinal);
        let loading = gpu.as_ref().ok().cloned();
        let _ = tx.send((gpu, began.elapsed()));
        if let Some(gpu) = loading {
            gpu.preload(convs, matmuls);
        }
    });
    let planned = plan(graph, input_shapes, opts);
    // While the device is still opening (this thread would only wait): NVRTC, which the
    // executable needs first (its version keys the cubin cache), loads here rather than after.
    // Loading cuDNN and cuBLASLt here too was tried: context creation slowed by as much as it
    // saved later, on the H200.
    kiln_cuda::Lib::Nvrtc.present();
    let (gpu, opened) = rx.recv().map_err(|_| kiln_ir::Error::Device(format!("cuda:{ordinal}: the thread opening the device stopped")))?;
    let gpu = gpu?;
    let (program, mut report) = planned?;
    let mut times = std::mem::take(&mut report.times);
    let t = Instant::now();
    let cache = open_cache(opts)?;
    let mut exe = kiln_cuda::Executable::new(program, &gpu, &cache)?;
    times.build = t.elapsed();
    if opts.mode == Mode::MaxAutotune {
        let t = Instant::now();
        // The knobs depend on the program, the device and the libraries' algorithms.
        let key = CacheKey::new("cuda-tuning")
            .part("steps", format!("{:?}", exe.program().steps))
            .part("kiln", env!("CARGO_PKG_VERSION"))
            .part("device", format!("{} sm_{}", gpu.name(), gpu.sm()))
            .part("libraries", gpu.library_versions())
            .part("tf32", std::env::var("KILN_CUDA_TF32").unwrap_or_default());
        report.autotune = Some(super::tune::tune(&mut exe, &cache, key, input_shapes, opts.autotune_budget)?);
        times.autotune = t.elapsed();
    }
    // max-autotune replays CUDA graphs too, as torch.compile's mode="max-autotune" does.
    if matches!(opts.mode, Mode::ReduceOverhead | Mode::MaxAutotune) {
        exe.replay_as_graph();
    }
    if exe.host_steps() > 0 {
        tracing::warn!(target: "kiln::cuda", "{} step(s) run on the host (no GPU path yet); see KILN_LOG=kiln::cuda=info", exe.host_steps());
    }
    report.cache = exe.cache_outcome().map(cache_label);
    report.source = Some(exe.source().source.clone());
    // The executable plans memory again once the libraries' fusions are known, and may have
    // dropped steps (an attention writing the merge of its heads makes the copy go).
    report.arena_bytes = exe.arena_bytes();
    report.kernels = exe.program().launches();
    report.times = times;
    let ms = |d: std::time::Duration| d.as_secs_f64() * 1e3;
    tracing::info!(
        target: "kiln::cuda",
        "compiled in {:.1} ms (device open {:.1}, alongside passes {:.1} and schedule {:.1}; executable {:.1}, autotune {:.1})",
        ms(began.elapsed()),
        ms(opened),
        ms(report.times.passes),
        ms(report.times.schedule),
        ms(report.times.build),
        ms(report.times.autotune)
    );
    Ok(Compiled { runner: Runner::Cuda(exe), report })
}

#[cfg(not(feature = "cuda"))]
fn compile_cuda(_: &Graph, _: &[Vec<usize>], _: &CompileOptions, ordinal: usize) -> Result<Compiled> {
    Err(without_cuda(ordinal))
}

#[cfg(not(feature = "cuda"))]
fn without_cuda(ordinal: usize) -> kiln_ir::Error {
    kiln_ir::Error::Unsupported(format!("cuda:{ordinal}: this kiln was built without the `cuda` feature"))
}

/// Ok when [`compile`] can build for `device` on this machine: always for the CPU; for a CUDA
/// device when kiln has its CUDA backend and the device opens (the error names the missing
/// library, or that there is no such device). Lets a server refuse at start-up rather than
/// fail each model in the background.
pub fn check_device(device: crate::Device) -> Result<()> {
    match device {
        crate::Device::Cpu => Ok(()),
        #[cfg(feature = "cuda")]
        crate::Device::Cuda(ordinal) => kiln_cuda::Gpu::open(ordinal).map(|_| ()),
        #[cfg(not(feature = "cuda"))]
        crate::Device::Cuda(ordinal) => Err(without_cuda(ordinal)),
    }
}

/// The front half of [`compile`]: binds dims, runs the passes, schedules and plans memory.
/// The [`Program`] it returns can run on any kernel launcher (the generated C, or the kernel-IR
/// interpreter in tests); the report has everything but the code-generation stages.
pub fn plan(graph: &Graph, input_shapes: &[Vec<usize>], opts: &CompileOptions) -> Result<(Program, CompileReport)> {
    let eager_kernels = graph.compute_nodes();
    let mut times = StageTimes::default();

    let t = Instant::now();
    let syms = specialize::bind_dims(graph, input_shapes)?;
    let fixed = specialize::specialize(graph, &syms)?;
    times.specialize = t.elapsed();

    let t = Instant::now();
    let (target, keep) = match opts.device {
        crate::Device::Cpu => (kiln_opt::Target::Cpu, Some(kiln_cpu::compiled::attention_runs_composite as kiln_opt::KeepComposite)),
        #[cfg(feature = "cuda")]
        crate::Device::Cuda(_) => (kiln_opt::Target::Gpu, Some(kiln_cuda::runs_composite as kiln_opt::KeepComposite)),
        #[cfg(not(feature = "cuda"))]
        crate::Device::Cuda(_) => (kiln_opt::Target::Gpu, None),
    };
    let packs_weights = target == kiln_opt::Target::Cpu && kiln_cpu::gemm::available();
    let (optimized, passes) =
        kiln_opt::optimize(&fixed, &OptOptions { target, keep, packs_weights, ..opts.opt.clone() })?;
    times.passes = t.elapsed();

    let t = Instant::now();
    // Eager on a GPU is the one-kernel-per-op baseline; on the CPU eager never gets here.
    let fuse = !(opts.mode == Mode::Eager && opts.device != crate::Device::Cpu);
    // cuBLAS / cuDNN take f16 / bf16 (accumulating in f32); the CPU runner's externs are f32.
    let extern_dtypes = match opts.device {
        crate::Device::Cpu => kiln_sched::CPU_EXTERN_DTYPES,
        crate::Device::Cuda(_) => kiln_sched::GPU_EXTERN_DTYPES,
    };
    let row_epilogues = opts.device == crate::Device::Cpu;
    let (mut program, mut fusion) =
        kiln_sched::schedule(&optimized, &ScheduleOptions { fuse, extern_dtypes, row_epilogues })?;
    // The CPU runner's attention writes its heads' merge itself (kiln-cuda folds the same
    // copies when it builds its executable).
    if opts.device == crate::Device::Cpu {
        fusion.fold_next_steps(&kiln_sched::write_attention_through_copies(&mut program));
        // 1x1 convs that read what the conv before them stores run inside it.
        if fuse {
            fusion.with_previous = kiln_sched::chain_steps(&mut program, &kiln_cpu::compiled::runs_chained);
        }
    }
    times.schedule = t.elapsed();
    tracing::info!(target: "kiln::fusion", "{} launches per run (eager {eager_kernels})\n{fusion}", program.launches());

    let t = Instant::now();
    let plan = kiln_sched::plan_memory(&program);
    let naive_bytes = kiln_sched::naive_bytes(&program);
    let arena_bytes = plan.arena_bytes;
    program.memory = Some(plan);
    times.memory = t.elapsed();

    let report = CompileReport {
        mode: opts.mode,
        eager_kernels,
        optimized: Some(optimized),
        passes,
        fusion: Some(fusion.to_string()),
        kernels: program.launches(),
        arena_bytes,
        naive_bytes,
        times,
        cache: None,
        fallback: None,
        source: None,
        autotune: None,
    };
    Ok((program, report))
}
