//! Size-generic kernels: one C library for every size of some dims (a dynamic batch, a
//! sequence length), whose kernels take those sizes as arguments, as Inductor's kernels take
//! `ks0` under dynamic shapes.
//!
//! The front half of the compiler stays concrete: a graph is scheduled at given sizes (each
//! pass, fusion decision and extern shape sees plain integers). [`GenericKernels::build`]
//! schedules it on a small grid of sizes and lets [`kiln_cpu::codegen::Template`] turn
//! the C that differs only in size literals into C over symbols `s0, s1, ..`, which is compiled
//! once. A new size then costs a schedule and a render, checked against the template, and no C
//! compile ([`GenericKernels::compile`]); host-side parts (extern shapes, the memory plan) come
//! from the schedule at that size. A size whose code is not the template's (a size-1 dim that
//! the scheduler collapses) gets `None`, and its caller compiles it on its own.

use super::driver::{build_library, cache_label, library_key, open_cache, plan};
use super::{CompileOptions, Compiled, Mode};
use kiln_cpu::codegen::{Template, render_c_sized};
use kiln_cpu::compiled::{Executable, LaunchKernel};
use kiln_cpu::native::NativeKernels;
use kiln_ir::{Error, Graph, Result};
use kiln_sched::Program;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Smallest sample size: size 1 is special (broadcasts, collapsed dims), as for Inductor's
/// 0/1 specialisation, so the corners start at 2.
const MIN_SAMPLE: usize = 2;

/// How far past the grid's lowest point the fit is checked (a fourth value of every symbol).
const CHECK_OFFSET: usize = 5;

/// A C library compiled once for every value of its symbols.
pub struct GenericKernels {
    template: Template,
    kernels: NativeKernels,
    source: String,
    /// The library's disk-cache outcome (`hit`, `miss`, ..).
    cache: String,
    build_time: Duration,
    /// The constants of a sample program: holding the ones passes derived (row-major weights,
    /// merged Q/K/V) lets each size's compile share them through kiln-opt's memo rather than
    /// derive them again (bert-base: 0.5 s a size). The sizes' plans share the same storage.
    _consts: Vec<Arc<kiln_ir::HostTensor>>,
}

impl GenericKernels {
    /// Fits and compiles the kernels of the programs `program_at` schedules, one symbol per
    /// entry of `now` (see [`GenericKernels::fit`]).
    pub fn build(now: &[usize], program_at: &mut dyn FnMut(&[usize]) -> Result<Program>, opts: &CompileOptions) -> Result<GenericKernels> {
        let start = Instant::now();
        let fit = GenericKernels::fit(now, program_at, opts)?;
        GenericKernels::compile_fit(fit, opts, start)
    }

    /// The template of the programs `program_at` schedules, one symbol per entry of `now` (the
    /// sizes of the call being compiled; samples start at them, at least at 2). An error says
    /// why these programs have no size-generic form: code that differs between sizes beyond
    /// its size literals, more than [`kiln_cpu::codegen::generic::MAX_SYMBOLS`] symbols, a GPU
    /// or eager target.
    pub fn fit(now: &[usize], program_at: &mut dyn FnMut(&[usize]) -> Result<Program>, opts: &CompileOptions) -> Result<Fit> {
        GenericKernels::check_target(opts)?;
        let k = now.len();
        if k == 0 || k > kiln_cpu::codegen::generic::MAX_SYMBOLS {
            return Err(Error::Unsupported(format!(
                "size-generic kernels take 1 to {} sizes, not {k}",
                kiln_cpu::codegen::generic::MAX_SYMBOLS
            )));
        }
        let lo: Vec<usize> = now.iter().map(|&n| n.max(MIN_SAMPLE)).collect();
        let points = kiln_cpu::codegen::generic::SAMPLES_PER_SYMBOL.pow(k as u32);
        let mut corners = Vec::with_capacity(points);
        let mut base = None;
        for m in 0..points {
            let sizes: Vec<usize> = Template::grid_point(&as_i64(&lo), m).into_iter().map(|n| n as usize).collect();
            let program = program_at(&sizes)?;
            corners.push(render_c_sized(&program, k)?);
            base.get_or_insert(program);
        }
        let check: Vec<usize> = lo.iter().map(|&a| a + CHECK_OFFSET).collect();
        let check_src = render_c_sized(&program_at(&check)?, k)?;
        let template = Template::fit(&as_i64(&lo), &corners, (&as_i64(&check), &check_src))?;
        let base = base.ok_or_else(|| Error::Value("size-generic kernels: no sample".into()))?;
        Ok(Fit { template, base })
    }

    /// Ok when `opts` compile for a target that has size-generic kernels: the CPU, in default
    /// (or reduce-overhead) mode.
    pub fn check_target(opts: &CompileOptions) -> Result<()> {
        if opts.device != crate::Device::Cpu || !matches!(opts.mode, Mode::Default | Mode::ReduceOverhead) {
            return Err(Error::Unsupported(format!(
                "size-generic kernels are built for the CPU in default mode (not {} in {} mode)",
                opts.device, opts.mode
            )));
        }
        Ok(())
    }

    /// Compiles a fitted template's C (or finds it in the disk cache) and loads it; `start` is
    /// when the fit began (for [`GenericKernels::build_time`]).
    pub fn compile_fit(fit: Fit, opts: &CompileOptions, start: Instant) -> Result<GenericKernels> {
        let Fit { template, base } = fit;
        let source = template.source();
        let toolchain = super::c_toolchain().map_err(|why| Error::Unsupported(why.to_string()))?;
        let cache = open_cache(opts)?;
        let key = library_key(&source, toolchain);
        let (path, outcome) = build_library(&source, &key, toolchain, &cache)?;
        // The kernels' names are those of every program that renders to the template.
        let kernels = NativeKernels::load(&path, &base)?;
        tracing::info!(target: "kiln::output_code", "generated size-generic C ({} sizes):\n{source}", template.symbols());
        Ok(GenericKernels { template, kernels, source, cache: cache_label(&outcome), build_time: start.elapsed(), _consts: base.consts })
    }

    /// The generic C source.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// Number of sizes the kernels take.
    pub fn symbols(&self) -> usize {
        self.template.symbols()
    }

    /// Time [`GenericKernels::build`] took (samples, fit, C compile or cache lookup, load).
    pub fn build_time(&self) -> Duration {
        self.build_time
    }

    /// `hit`, `miss` or `rebuilt (..)`: where the library came from.
    pub fn cache_outcome(&self) -> &str {
        &self.cache
    }

    /// `graph` compiled for inputs of `input_shapes`, its symbols at `sizes`, on these kernels:
    /// scheduled as [`super::compile`] does, and run by this library when the C of that schedule
    /// is the template's at `sizes`; `None` when it is not.
    pub fn compile(&self, graph: &Graph, input_shapes: &[Vec<usize>], sizes: &[usize], opts: &CompileOptions) -> Result<Option<Compiled>> {
        let (program, mut report) = plan(graph, input_shapes, opts)?;
        let t = Instant::now();
        let Some(exe) = self.executable(program, sizes)? else {
            return Ok(None);
        };
        report.times.render = t.elapsed();
        report.cache = Some(format!("size-generic library ({})", self.cache));
        report.source = Some(self.source.clone());
        Ok(Some(Compiled::from_program(exe, report)))
    }

    /// `program` (scheduled with the symbols at `sizes`) run on these kernels, when its C is
    /// the template's at `sizes`.
    pub fn executable(&self, program: Program, sizes: &[usize]) -> Result<Option<Executable>> {
        let rendered = render_c_sized(&program, self.symbols())?;
        match self.template.instantiate(&as_i64(sizes)) {
            Ok(expected) if expected == rendered => {}
            _ => return Ok(None),
        }
        let launcher: Arc<dyn LaunchKernel> = Arc::new(self.kernels.with_sizes(as_i64(sizes)));
        Executable::new(program, launcher).map(Some)
    }
}

/// A fitted template and one program that renders to it (whose kernels name the library's).
pub struct Fit {
    template: Template,
    base: Program,
}

fn as_i64(sizes: &[usize]) -> Vec<i64> {
    sizes.iter().map(|&n| n as i64).collect()
}
