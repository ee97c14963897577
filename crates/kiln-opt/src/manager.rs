//! The pass manager: runs the passes in their fixed order, logs and times each one, and checks
//! the graph after each so a broken pass is named where it breaks.

use crate::passes::{BnFold, ChannelsLast, Cse, Dce, Decompose, Fold, Layout, MergeMatmuls, Pass, PoolFirst, Simplify, SpaceToDepth};
use kiln_ir::{Error, Graph, Op, Result, TensorType};
use std::time::Instant;

/// The environment variable listing passes to skip (`KILN_DISABLE_PASSES=cse,bn_fold`).
pub const DISABLE_ENV: &str = "KILN_DISABLE_PASSES";

/// The names of every pass, as `KILN_DISABLE_PASSES` and [`OptOptions::disabled`] accept them.
pub fn pass_names() -> &'static [&'static str] {
    &["fold", "simplify", "bn_fold", "pool_first", "decompose", "channels_last", "space_to_depth", "cse", "merge_matmuls", "layout", "dce"]
}

/// What [`optimize`] does.
#[derive(Clone, Debug)]
pub struct OptOptions {
    /// Names of passes to skip (each one of [`pass_names`]).
    pub disabled: Vec<String>,
    /// Whether composite ops are decomposed into primitives (the compiler wants it; a graph
    /// for the interpreter may keep the composites).
    pub decompose: bool,
    /// The backend the graph is optimised for.
    pub target: Target,
    /// Composites the backend runs as one op (`decompose` keeps them): kiln-cuda's
    /// `runs_composite` (its fused attention kernel). `None`: every composite is decomposed.
    pub keep: Option<KeepComposite>,
    /// The backend packs constant matmul weights itself, from any layout (kiln-cpu's GEMM on
    /// AVX2 CPUs): `layout` then makes no row-major copies, which would only double the
    /// weights' memory.
    pub packs_weights: bool,
}

/// Whether a backend runs a composite op, given its input types, as one op of its own.
pub type KeepComposite = fn(&Op, &[&TensorType]) -> bool;

/// The backend a graph is optimised for: `bn_fold` trades differently on each, and
/// `channels_last` and `space_to_depth` run for a GPU only (the CPU's convs take NCHW).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Target {
    /// BatchNorm becomes a per-channel multiply-add (the weights stay shared with the source
    /// graph).
    #[default]
    Cpu,
    /// BatchNorm folds into its conv's weights and bias (they are copied to the device anyway,
    /// and cuDNN then applies bias and activation in the conv call). `layout` still runs:
    /// bert-base bs8 on the H200 took 6.98 ms with cuBLAS reading the transposed weights,
    /// against 6.33 ms with the row-major copies.
    Gpu,
}

impl Default for OptOptions {
    /// Every pass, decomposition included.
    fn default() -> Self {
        OptOptions {
            disabled: Vec::new(),
            decompose: true,
            target: Target::Cpu,
            keep: None,
            packs_weights: false,
        }
    }
}

impl OptOptions {
    /// The defaults, with the passes named in `KILN_DISABLE_PASSES` disabled.
    pub fn from_env() -> Result<OptOptions> {
        let disabled = match std::env::var(DISABLE_ENV) {
            Ok(v) => parse_disabled(&v)?,
            Err(_) => Vec::new(),
        };
        Ok(OptOptions {
            disabled,
            ..OptOptions::default()
        })
    }
}

/// Parses a comma list of pass names (spaces and empty items ignored); an unknown name is an
/// error listing the known ones.
pub fn parse_disabled(list: &str) -> Result<Vec<String>> {
    let names: Vec<String> = list
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect();
    check_names(&names)?;
    Ok(names)
}

fn check_names(names: &[String]) -> Result<()> {
    match names.iter().find(|n| !pass_names().contains(&n.as_str())) {
        Some(bad) => Err(Error::Value(format!(
            "{DISABLE_ENV}: unknown pass '{bad}'; the passes are: {}",
            pass_names().join(", ")
        ))),
        None => Ok(()),
    }
}

/// What one pass did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PassReport {
    /// The pass name.
    pub name: &'static str,
    /// Node count before the pass.
    pub nodes_before: usize,
    /// Node count after the pass.
    pub nodes_after: usize,
    /// Time the pass took, in microseconds.
    pub micros: u64,
}

/// Runs fold → simplify → bn_fold → pool_first → decompose → fold → simplify → channels_last → space_to_depth →
/// cse → merge_matmuls → layout → dce on a copy of `graph`, skipping disabled passes (and
/// channels_last and space_to_depth but for [`Target::Gpu`], pool_first but for the CPU). The result computes the same outputs from the same
/// inputs (in order) and passes [`kiln_ir::verify`]. Each pass logs one line at target
/// `kiln::graph` (info) and the graph after it (debug).
pub fn optimize(graph: &Graph, opts: &OptOptions) -> Result<(Graph, Vec<PassReport>)> {
    check_names(&opts.disabled)?;
    kiln_ir::verify(graph).map_err(|e| e.context("optimize: the input graph"))?;
    let gpu = opts.target == Target::Gpu;
    let bn_fold = BnFold { into_weights: gpu, channels_last: gpu && !opts.disabled.iter().any(|d| d == "channels_last") };
    let decompose = Decompose { keep: opts.keep };
    let merge_matmuls = MergeMatmuls { join_rows: opts.packs_weights };
    let pipeline: [&dyn Pass; 13] = [
        &Fold, &Simplify, &bn_fold, &PoolFirst, &decompose, &Fold, &Simplify, &ChannelsLast, &SpaceToDepth, &Cse, &merge_matmuls, &Layout, &Dce,
    ];
    let mut g = graph.clone();
    let mut reports = Vec::new();
    for pass in pipeline {
        let name = pass.name();
        let not_here = (matches!(name, "channels_last" | "space_to_depth") && opts.target != Target::Gpu)
            || (name == "pool_first" && opts.target == Target::Gpu)
            || (name == "layout" && opts.packs_weights);
        if opts.disabled.iter().any(|d| d == name) || (name == "decompose" && !opts.decompose) || not_here {
            continue;
        }
        let start = Instant::now();
        let next = pass
            .run(&g)
            .map_err(|e| e.context(&format!("pass {name}")))?;
        let micros = start.elapsed().as_micros() as u64;
        kiln_ir::verify(&next).map_err(|e| e.context(&format!("the graph after pass {name}")))?;
        let r = PassReport {
            name,
            nodes_before: g.nodes.len(),
            nodes_after: next.nodes.len(),
            micros,
        };
        tracing::info!(target: "kiln::graph", "pass {name}: {} -> {} nodes in {} us", r.nodes_before, r.nodes_after, micros);
        tracing::debug!(target: "kiln::graph", "graph after {name}:\n{next}");
        reports.push(r);
        g = next;
    }
    Ok((g, reports))
}
