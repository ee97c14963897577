//! What a compile did, for logs, `kiln explain` and benchmarks.

use super::Mode;
use kiln_ir::Graph;
use std::fmt;
use std::time::Duration;

/// Time spent in each compile stage.
#[derive(Clone, Debug, Default)]
pub struct StageTimes {
    pub specialize: Duration,
    pub passes: Duration,
    pub schedule: Duration,
    pub memory: Duration,
    pub render: Duration,
    /// The C compiler, or the cache lookup on a hit.
    pub build: Duration,
    pub load: Duration,
    /// max-autotune: the search, or reading its result from the cache.
    pub autotune: Duration,
}

impl StageTimes {
    /// Total compile time.
    pub fn total(&self) -> Duration {
        self.specialize + self.passes + self.schedule + self.memory + self.render + self.build + self.load + self.autotune
    }
}

/// The outcome of one compile.
#[derive(Clone, Debug)]
pub struct CompileReport {
    pub mode: Mode,
    /// Compute nodes of the input graph (what eager mode launches per run).
    pub eager_kernels: usize,
    /// The graph after passes.
    pub optimized: Option<Graph>,
    /// Per pass: name, nodes before/after, microseconds.
    pub passes: Vec<kiln_opt::PassReport>,
    /// The fusion groups and why nodes were or were not fused (printable).
    pub fusion: Option<String>,
    /// Launches per run (kernels, extern calls and reference-kernel steps).
    pub kernels: usize,
    /// Planned arena bytes (the peak of temporaries) and what they would take unplanned.
    pub arena_bytes: usize,
    pub naive_bytes: usize,
    pub times: StageTimes,
    /// `hit`, `miss` or `rebuilt (...)` for the compiled library.
    pub cache: Option<String>,
    /// Why the graph runs eagerly although a compiled mode was asked for.
    pub fallback: Option<String>,
    /// The generated C source.
    pub source: Option<String>,
    /// max-autotune: what the search found (or that the cache had it).
    pub autotune: Option<String>,
}

impl CompileReport {
    /// A report for a graph that runs eagerly.
    pub fn eager(mode: Mode, eager_kernels: usize, fallback: Option<String>) -> CompileReport {
        CompileReport {
            mode,
            eager_kernels,
            optimized: None,
            passes: Vec::new(),
            fusion: None,
            kernels: eager_kernels,
            arena_bytes: 0,
            naive_bytes: 0,
            times: StageTimes::default(),
            cache: None,
            fallback,
            source: None,
            autotune: None,
        }
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

impl fmt::Display for CompileReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "mode: {}", self.mode)?;
        if let Some(why) = &self.fallback {
            writeln!(f, "running eagerly: {why}")?;
        }
        if let Some(g) = &self.optimized {
            writeln!(f, "\n== optimised graph ({} nodes) ==\n{g}", g.nodes.len())?;
        }
        if !self.passes.is_empty() {
            writeln!(f, "== passes ==")?;
            for p in &self.passes {
                writeln!(f, "  {:<10} {:>5} -> {:<5} nodes  {:>8.3} ms", p.name, p.nodes_before, p.nodes_after, p.micros as f64 / 1e3)?;
            }
        }
        if let Some(fusion) = &self.fusion {
            writeln!(f, "\n== fusion groups ==\n{fusion}")?;
        }
        let saved = if self.eager_kernels > 0 {
            100.0 * (1.0 - self.kernels as f64 / self.eager_kernels as f64)
        } else {
            0.0
        };
        writeln!(f, "kernels per run: {} (eager: {}, {saved:.0}% fewer)", self.kernels, self.eager_kernels)?;
        writeln!(
            f,
            "planned peak memory: {:.2} MB (unplanned: {:.2} MB)",
            self.arena_bytes as f64 / 1e6,
            self.naive_bytes as f64 / 1e6
        )?;
        let t = &self.times;
        writeln!(
            f,
            "compile time: {:.1} ms (specialize {:.1}, passes {:.1}, schedule {:.1}, memory {:.1}, render {:.1}, build {:.1}{}, load {:.1}, autotune {:.1})",
            ms(t.total()),
            ms(t.specialize),
            ms(t.passes),
            ms(t.schedule),
            ms(t.memory),
            ms(t.render),
            ms(t.build),
            self.cache.as_deref().map(|c| format!(" [cache {c}]")).unwrap_or_default(),
            ms(t.load),
            ms(t.autotune)
        )?;
        if let Some(a) = &self.autotune {
            writeln!(f, "autotune: {a}")?;
        }
        Ok(())
    }
}
