//! Size-generic plans for dynamic dims: an entry whose guards have dynamic dims compiles one C
//! library whose kernels take those dims' sizes as arguments ([`GenericKernels`]); each new
//! size is traced and scheduled (milliseconds) and runs on that library without a C compile.
//!
//! Dynamic dims of equal size in the first call share a symbol (a batch dim of two inputs);
//! a dynamic dim that cannot change alone (the function errs when it does: a feature dim that
//! must match a weight) stays fixed. Sizes whose code is not the library's, and calls whose
//! shared dims differ, are compiled per size as before.

use super::guards::{DimGuard, Guard};
use crate::compile::generic::Fit;
use crate::compile::{CompileOptions, Compiled, GenericKernels, plan};
use crate::{Result, Tensor};
use kiln_ir::{Error, Graph};
use kiln_sched::Program;
use std::sync::Arc;
use std::time::Instant;

/// A function traced on placeholders.
pub(crate) type TracedFn<'a> = &'a dyn Fn(&[Tensor]) -> Result<Vec<Tensor>>;

/// Where one symbol's size is read: (input, dim) pairs.
pub(crate) type SymbolDims = Vec<(usize, usize)>;

/// An entry's size-generic library and how the call's sizes map onto its symbols.
#[derive(Clone)]
pub(crate) struct GenericPlan {
    /// Per symbol, the dims that hold its size.
    pub symbols: Vec<SymbolDims>,
    /// Dynamic dims kept at one size, and that size.
    pub fixed: Vec<((usize, usize), usize)>,
    pub kernels: Arc<GenericKernels>,
}

impl GenericPlan {
    /// Fits and compiles the library for `f` from the call on `xs` under `guard`.
    pub(crate) fn build(guard: &Guard, xs: &[Tensor], f: TracedFn<'_>, opts: &CompileOptions) -> Result<GenericPlan> {
        GenericKernels::check_target(opts)?;
        let mut candidates: Vec<(usize, SymbolDims)> = Vec::new();
        for (i, g) in guard.inputs.iter().enumerate() {
            for (d, dim) in g.dims.iter().enumerate() {
                if *dim != DimGuard::Dynamic {
                    continue;
                }
                let n = xs[i].shape()[d];
                match candidates.iter_mut().find(|(m, _)| *m == n) {
                    Some((_, dims)) => dims.push((i, d)),
                    None => candidates.push((n, vec![(i, d)])),
                }
            }
        }
        // A function that reads tensor data (a graph break) does not trace on placeholders.
        let own: Vec<Vec<usize>> = xs.iter().map(|x| x.shape().to_vec()).collect();
        trace_at(f, xs, &own).map_err(|e| Error::Unsupported(format!("the function does not trace on placeholders ({e})")))?;
        let now: Vec<usize> = candidates.iter().map(|c| c.0).collect();
        let all: Vec<SymbolDims> = candidates.into_iter().map(|c| c.1).collect();
        // A symbol the function cannot take at another size stays fixed.
        let mut symbols = Vec::new();
        let mut symbol_now = Vec::new();
        let mut fixed = Vec::new();
        for (j, dims) in all.iter().enumerate() {
            let mut sizes = now.clone();
            sizes[j] = now[j].max(2) + 1;
            if trace_at(f, xs, &shapes_at(xs, &all, &sizes)).is_ok() {
                symbols.push(dims.clone());
                symbol_now.push(now[j]);
            } else {
                fixed.extend(dims.iter().map(|&id| (id, now[j])));
            }
        }
        if symbols.is_empty() {
            return Err(Error::Unsupported("no dynamic dim can change size on its own".into()));
        }
        // All symbols; when their code is not multilinear in them (a conv's output size in its
        // input's), the largest set found adding them one at a time, the others fixed.
        let start = Instant::now();
        let now = symbol_now;
        let fit_with = |kept: &[usize]| -> Result<Fit> {
            let dims: Vec<SymbolDims> = kept.iter().map(|&j| symbols[j].clone()).collect();
            let mut program_at = |sizes: &[usize]| -> Result<Program> {
                let shapes = shapes_at(xs, &dims, sizes);
                Ok(plan(&trace_at(f, xs, &shapes)?, &shapes, opts)?.0)
            };
            GenericKernels::fit(&kept.iter().map(|&j| now[j]).collect::<Vec<_>>(), &mut program_at, opts)
        };
        let all: Vec<usize> = (0..symbols.len()).collect();
        let (kept, fit) = match fit_with(&all) {
            Ok(fit) => (all, fit),
            Err(first) if symbols.len() > 1 => {
                let mut best: Option<(Vec<usize>, Fit)> = None;
                for j in 0..symbols.len() {
                    let mut trial: Vec<usize> = best.as_ref().map(|b| b.0.clone()).unwrap_or_default();
                    trial.push(j);
                    if trial == all {
                        break; // that one failed above
                    }
                    if let Ok(fit) = fit_with(&trial) {
                        best = Some((trial, fit));
                    }
                }
                best.ok_or(first)?
            }
            Err(e) => return Err(e),
        };
        for (j, dims) in symbols.iter().enumerate() {
            if !kept.contains(&j) {
                fixed.extend(dims.iter().map(|&id| (id, now[j])));
            }
        }
        let symbols: Vec<SymbolDims> = kept.iter().map(|&j| symbols[j].clone()).collect();
        let kernels = GenericKernels::compile_fit(fit, opts, start)?;
        Ok(GenericPlan { symbols, fixed, kernels: Arc::new(kernels) })
    }

    /// The symbols' sizes in a call on `xs`, when the call fits this plan (dims sharing a
    /// symbol agree; fixed dims have their size).
    pub(crate) fn sizes_of(&self, xs: &[Tensor]) -> Option<Vec<usize>> {
        let size = |(i, d): (usize, usize)| xs.get(i).and_then(|x| x.shape().get(d).copied());
        if self.fixed.iter().any(|&(id, n)| size(id) != Some(n)) {
            return None;
        }
        self.symbols
            .iter()
            .map(|dims| {
                let n = size(dims[0])?;
                dims.iter().all(|&id| size(id) == Some(n)).then_some(n)
            })
            .collect()
    }

    /// `f` compiled for the call on `xs` on this library; `None` when the call does not fit or
    /// its code is not the library's.
    pub(crate) fn compile(&self, xs: &[Tensor], f: TracedFn<'_>, opts: &CompileOptions) -> Result<Option<(Graph, Compiled)>> {
        let Some(sizes) = self.sizes_of(xs) else {
            return Ok(None);
        };
        let shapes: Vec<Vec<usize>> = xs.iter().map(|x| x.shape().to_vec()).collect();
        let graph = trace_at(f, xs, &shapes)?;
        Ok(self.kernels.compile(&graph, &shapes, &sizes, opts)?.map(|c| (graph, c)))
    }

    /// The symbols as text: `s0 = input 0 dim 0, input 1 dim 0; s1 = input 0 dim 1`.
    pub(crate) fn describe(&self) -> String {
        let syms: Vec<String> = self
            .symbols
            .iter()
            .enumerate()
            .map(|(s, dims)| {
                let at: Vec<String> = dims.iter().map(|(i, d)| format!("input {i} dim {d}")).collect();
                format!("s{s} = {}", at.join(", "))
            })
            .collect();
        syms.join("; ")
    }
}

/// The inputs' shapes with each symbol's dims at `sizes`.
fn shapes_at(xs: &[Tensor], symbols: &[SymbolDims], sizes: &[usize]) -> Vec<Vec<usize>> {
    let mut shapes: Vec<Vec<usize>> = xs.iter().map(|x| x.shape().to_vec()).collect();
    for (dims, &n) in symbols.iter().zip(sizes) {
        for &(i, d) in dims {
            shapes[i][d] = n;
        }
    }
    shapes
}

/// `f` traced on placeholders of `xs`' dtypes and the given shapes (no data: a function that
/// reads tensor data fails here). The function never ran at these sizes before, so a panic in
/// it (an assertion on a size) is an error here, and the sizes are not used.
fn trace_at(f: TracedFn<'_>, xs: &[Tensor], shapes: &[Vec<usize>]) -> Result<Graph> {
    let names: Vec<String> = (0..xs.len()).map(|i| format!("x{i}")).collect();
    let specs: Vec<(&str, crate::DType, &[usize])> =
        xs.iter().zip(&names).zip(shapes).map(|((x, name), s)| (name.as_str(), x.dtype(), s.as_slice())).collect();
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| crate::trace::trace(&specs, |p| f(p))))
        .unwrap_or_else(|_| Err(Error::Value(format!("the function panicked on inputs of shapes {shapes:?}"))))
}
