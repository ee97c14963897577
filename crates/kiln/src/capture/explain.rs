//! `explain`: what capturing a function did, as `torch._dynamo.explain` reports it: the graphs
//! compiled (ops, kernels, fusion), the graph breaks (reason and source location), the guards of
//! each cache entry, the recompiles and their reasons, and sizes compiled under dynamic dims.

use super::breaks::Break;
use super::guards::Guard;
use crate::compile::CompileReport;
use kiln_ir::Graph;
use std::fmt;
use std::time::Duration;

/// One compiled graph (a whole function, or a segment between breaks).
#[derive(Clone, Debug)]
pub struct GraphInfo {
    /// Compute ops of the captured graph (what eager mode would launch).
    pub ops: usize,
    pub inputs: usize,
    pub outputs: usize,
    /// Launches per run after fusion.
    pub kernels: usize,
    /// The fusion report's first line (`N steps for M compute ops`), when compiled.
    pub fusion: Option<String>,
    /// Why it runs eagerly, when it does.
    pub fallback: Option<String>,
    pub compile_time: Duration,
}

impl GraphInfo {
    pub(crate) fn new(g: &Graph, report: &CompileReport, compile_time: Duration) -> GraphInfo {
        GraphInfo {
            ops: g.compute_nodes(),
            inputs: g.inputs.len(),
            outputs: g.outputs.len(),
            kernels: report.kernels,
            fusion: report.fusion.as_ref().and_then(|f| f.lines().next()).map(str::to_string),
            fallback: report.fallback.clone(),
            compile_time,
        }
    }
}

impl fmt::Display for GraphInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} ops, {} inputs, {} outputs -> {} kernels per run, compiled in {:.1} ms",
            self.ops,
            self.inputs,
            self.outputs,
            self.kernels,
            self.compile_time.as_secs_f64() * 1e3
        )?;
        if let Some(fu) = &self.fusion {
            write!(f, " (fusion: {fu})")?;
        }
        if let Some(why) = &self.fallback {
            write!(f, " (runs eagerly: {why})")?;
        }
        Ok(())
    }
}

/// A distinct graph break and how often it happened.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BreakInfo {
    pub brk: Break,
    pub count: usize,
}

/// A cache entry: its guards, how many input sizes were compiled under its dynamic dims, and
/// whether calls re-run the function (it has breaks) or only the compiled graph.
#[derive(Clone, Debug)]
pub struct EntryInfo {
    pub guard: Guard,
    pub sizes: usize,
    pub reruns: bool,
    /// With dynamic dims: the size-generic kernels new sizes run on, or why there are none.
    pub generic: Option<GenericInfo>,
}

/// An entry's size-generic kernels: one C library whose kernels take the dynamic sizes as
/// arguments.
#[derive(Clone, Debug)]
pub enum GenericInfo {
    Built {
        /// Which input dims each size argument is (`s0 = input 0 dim 0`).
        symbols: String,
        /// Input sizes run on it (each traced and scheduled, none compiled by the C compiler).
        sizes: usize,
        /// Fitting it and compiling its C (or finding it in the disk cache).
        build_time: Duration,
        /// The library's disk-cache outcome.
        library: String,
        /// Its C source.
        source: String,
    },
    /// Why the entry has none: each new size is compiled on its own.
    Refused(String),
}

impl fmt::Display for GenericInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GenericInfo::Built { symbols, sizes, build_time, library, .. } => write!(
                f,
                "size-generic kernels ({symbols}), built in {:.1} ms (library: {library}), {sizes} size(s) run on them",
                build_time.as_secs_f64() * 1e3
            ),
            GenericInfo::Refused(why) => write!(f, "no size-generic kernels: {why}"),
        }
    }
}

/// What `CompiledFn::explain` reports.
#[derive(Clone, Debug)]
pub struct Explanation {
    /// Where the function was compiled (`file:line:col` of the `kiln::compile` call).
    pub name: String,
    pub calls: usize,
    pub graphs: Vec<GraphInfo>,
    pub breaks: Vec<BreakInfo>,
    pub entries: Vec<EntryInfo>,
    /// One reason per recompile.
    pub recompiles: Vec<String>,
    /// Input sizes compiled under dynamic dims beyond each entry's first (not recompiles).
    pub specialisations: usize,
    /// Calls run eagerly because the recompile limit was reached.
    pub eager_calls: usize,
    /// Time spent tracing (running the function on placeholders), over all captures.
    pub trace_time: Duration,
}

impl Explanation {
    /// Number of graph breaks seen (every occurrence).
    pub fn break_count(&self) -> usize {
        self.breaks.iter().map(|b| b.count).sum()
    }
}

impl fmt::Display for Explanation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "function compiled at {}: {} calls", self.name, self.calls)?;
        writeln!(f, "graphs: {}", self.graphs.len())?;
        for (i, g) in self.graphs.iter().enumerate() {
            writeln!(f, "  graph {i}: {g}")?;
        }
        writeln!(f, "graph breaks: {}", self.break_count())?;
        for b in &self.breaks {
            let cut = if b.brk.cut { "" } else { " (value already computed: no cut)" };
            writeln!(f, "  {} at {} (x{}){cut}", b.brk, b.brk.location, b.count)?;
        }
        writeln!(f, "cache entries: {}", self.entries.len())?;
        for e in &self.entries {
            let runs = if e.reruns { "re-runs the function (breaks)" } else { "runs the compiled graph only" };
            writeln!(f, "  guards: {}; {} size(s) compiled; {runs}", e.guard, e.sizes)?;
            if let Some(g) = &e.generic {
                writeln!(f, "    {g}")?;
            }
        }
        writeln!(f, "recompiles: {}", self.recompiles.len())?;
        for r in &self.recompiles {
            writeln!(f, "  {r}")?;
        }
        if self.specialisations > 0 {
            writeln!(
                f,
                "dynamic dims: {} new size(s) compiled on their own without a recompile (not on size-generic kernels)",
                self.specialisations
            )?;
        }
        if self.eager_calls > 0 {
            writeln!(f, "eager calls (recompile limit reached): {}", self.eager_calls)?;
        }
        writeln!(f, "trace time: {:.1} ms", self.trace_time.as_secs_f64() * 1e3)
    }
}
