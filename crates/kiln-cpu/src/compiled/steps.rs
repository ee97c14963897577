//! Running one step of a program on bound buffers.

use super::launch::LaunchKernel;
use crate::toolchain::ColsFn;
use super::tuning::StepTuning;
use super::views::{read_view, write_dense};
use super::prepack::Prepacked;
use super::{attention, conv, matmul};
use kiln_ir::{DType, Error, HostTensor, Op, Result};
use kiln_sched::kernel::{Expr, Idx, Stage};
use kiln_sched::{BufId, BufKind, BufView, Epilogue, ExternOp, Program, StepKind};
use std::ops::Range;

/// Runs one step with the knobs `tune`; `ptrs[i]` is the memory of buffer `i` (checked by
/// `Executable::new`).
pub(crate) fn run_step(
    p: &Program,
    step: &StepKind,
    ptrs: &[*mut u8],
    kernels: &dyn LaunchKernel,
    scratch: &mut Vec<f32>,
    tune: StepTuning,
    packed: Option<&Prepacked>,
) -> Result<()> {
    match step {
        StepKind::Kernel { kernel, args } => {
            let end = kernel.outer.first().map_or(1, |l| l.extent as i64);
            kernels.launch_split(kernel, &bind(ptrs, args), 0, end, tune.chunks)
        }
        StepKind::Eval {
            op: Op::Attention { causal, scale },
            inputs,
            out,
            out_shape,
            out_strides,
        } if inputs.iter().map(|v| v.buf).chain([*out]).all(|b| p.buffer(b).dtype == DType::F32) => {
            let dense: Vec<usize>;
            let strides = match out_strides {
                Some(s) => &s[..],
                None => {
                    dense = kiln_sched::BufView::dense(*out, out_shape).strides;
                    &dense
                }
            };
            // SAFETY: `Executable::new` checked every view inside its buffer, the output
            // buffer's size and its strides (a permutation of a dense layout); the memory plan
            // never overlaps an eval's output with its inputs.
            unsafe {
                let o = ptrs[out.index()] as *mut f32;
                attention::run(*causal, *scale, inputs, ptrs, o, out_shape, strides)
            }
        }
        StepKind::Eval {
            op,
            inputs,
            out,
            out_shape,
            out_strides,
        } => eval_step(p, op, inputs, *out, out_shape, out_strides.as_deref(), ptrs),
        StepKind::Extern {
            op,
            inputs,
            out,
            out_shape,
            epilogue,
        } => {
            check_f32(p, op, inputs, *out)?;
            let epi = Epi::new(kernels, epilogue.as_ref(), ptrs, tune.chunks, written_spans(p, None, ptrs, *out));
            match op {
                ExternOp::MatMul => {
                    matmul::run(
                    inputs,
                    ptrs,
                    *out,
                    out_shape,
                    &epi,
                    tune.block_rows,
                    packed.and_then(Prepacked::matmul_rhs),
                )
                }
                ExternOp::Conv2d(a) => conv::run(
                    a,
                    inputs,
                    ptrs,
                    *out,
                    out_shape,
                    &epi,
                    scratch,
                    tune.block_rows,
                    packed,
                    &[],
                ),
            }
        }
    }
}

/// Runs `chain[0]` with the steps after it in `chain` inside it (see `kiln_sched::chain`), when
/// this runner can: the first a conv on kiln's GEMM, the others 1x1 convs whose inputs the
/// chain can give them a range of pixels at a time ([`chained_input`]), each epilogue running
/// in blocks, if any. `packed`: each step's cell. `Ok(false)` (nothing run) when it cannot.
#[allow(clippy::too_many_arguments)]
pub(crate) fn run_chained(
    p: &Program,
    chain: &[&StepKind],
    ptrs: &[*mut u8],
    kernels: &dyn LaunchKernel,
    scratch: &mut Vec<f32>,
    tune: StepTuning,
    packed: &[Option<&Prepacked>],
) -> Result<bool> {
    let Some((&first, rest)) = chain.split_first() else {
        return Ok(false);
    };
    let StepKind::Extern { op: op1 @ ExternOp::Conv2d(a1), inputs: in1, out: out1, out_shape: s1, epilogue: e1 } = first else {
        return Ok(false);
    };
    if !conv::heads_chains(packed.first().copied().flatten(), s1) {
        return Ok(false);
    }
    check_f32(p, op1, in1, *out1)?;
    let epi1 = Epi::new(kernels, e1.as_ref(), ptrs, tune.chunks, written_spans(p, None, ptrs, *out1));
    if epi1.present() && !epi1.blocks() {
        return Ok(false);
    }
    // Each later epilogue may read what the chain writes only at its own points, the only
    // ones final when it runs.
    let mut written = written_spans(p, e1.as_ref(), ptrs, *out1);
    let mut epis = Vec::with_capacity(rest.len());
    for (j, &step) in rest.iter().enumerate() {
        let StepKind::Extern { op: op @ ExternOp::Conv2d(_), inputs, out, epilogue, .. } = step else {
            return Ok(false);
        };
        if !chained_input(&chain[..=j], step) {
            return Ok(false);
        }
        check_f32(p, op, inputs, *out)?;
        let mut mine = written_spans(p, None, ptrs, *out);
        mine.extend(written.iter().cloned());
        epis.push(Epi::new(kernels, epilogue.as_ref(), ptrs, None, mine));
        written.extend(written_spans(p, epilogue.as_ref(), ptrs, *out));
    }
    let mut then = Vec::with_capacity(rest.len());
    for ((&step, epi), cell) in rest.iter().zip(&epis).zip(&packed[1..]) {
        let StepKind::Extern { op: ExternOp::Conv2d(a), inputs, out, out_shape, .. } = step else {
            return Ok(false);
        };
        let Some(c) = conv::Chained::new(a, inputs, ptrs, *out, out_shape, epi, *cell) else {
            return Ok(false);
        };
        then.push(c);
    }
    conv::run(a1, in1, ptrs, *out1, s1, &epi1, scratch, tune.block_rows, packed[0], &then)?;
    Ok(true)
}

/// True when the 1x1 conv `next` can run inside `chain` (the first step leading), a range of
/// pixels at a time: its input view is dense, of the first step's images and pixels, and is
/// either what a step of the chain stores (final for a range once that step has run on it) or
/// a buffer no step of the chain writes.
pub(crate) fn chained_input(chain: &[&StepKind], next: &StepKind) -> bool {
    let (Some(StepKind::Extern { out_shape, .. }), StepKind::Extern { inputs, .. }) = (chain.first(), next) else {
        return false;
    };
    let Some(x) = inputs.first() else {
        return false;
    };
    let (&[n, _, h, w], &[xn, _, xh, xw]) = (&out_shape[..], &x.shape[..]) else {
        return false;
    };
    let stored = chain.iter().any(|s| chain_source(s) == Some(x.buf));
    let written = chain.iter().any(|s| step_writes(s).contains(&x.buf));
    *x == BufView::dense(x.buf, &x.shape) && (n, h, w) == (xn, xh, xw) && (stored || !written)
}

/// The buffer that holds an extern step's final values: its epilogue's one store, else its
/// own output (`None` for other steps, or an epilogue of several stores).
pub(crate) fn chain_source(step: &StepKind) -> Option<BufId> {
    let StepKind::Extern { out, epilogue, .. } = step else {
        return None;
    };
    let Some(e) = epilogue else {
        return Some(*out);
    };
    match &e.kernel.stages[..] {
        [Stage::Store { arg, .. }] => e.args.get(*arg as usize).copied(),
        _ => None,
    }
}

/// Errors unless every buffer an extern reads or writes is f32.
pub(crate) fn check_f32(p: &Program, op: &ExternOp, inputs: &[BufView], out: BufId) -> Result<()> {
    for v in inputs.iter().map(|v| v.buf).chain([out]) {
        if p.buffer(v).dtype != DType::F32 {
            return Err(Error::Unsupported(format!(
                "extern {op:?}: buffer {} is {}, externs take f32 only (schedule other dtypes as Eval)",
                v.0,
                p.buffer(v).dtype
            )));
        }
    }
    Ok(())
}

/// A one-line description of a step for reports (`kiln bench --profile`, max-autotune's log):
/// `kernel NAME`, `matmul [inputs' shapes] -> [out] + EPILOGUE`, `conv2d s[stride] ..`,
/// `eval OP -> [out]`.
pub fn describe(k: &StepKind) -> String {
    match k {
        StepKind::Kernel { kernel, .. } => format!("kernel {}", kernel.name),
        StepKind::Eval { op, out_shape, .. } => format!("eval {} -> {out_shape:?}", op.name()),
        StepKind::Extern {
            op,
            inputs,
            out_shape,
            epilogue,
            ..
        } => {
            let shapes: Vec<&[usize]> = inputs.iter().map(|v| &v.shape[..]).collect();
            let name = match op {
                ExternOp::MatMul => "matmul".to_string(),
                ExternOp::Conv2d(a) => format!("conv2d s{:?}", a.stride),
            };
            let epi = epilogue
                .as_ref()
                .map(|e| format!(" + {}", e.kernel.name))
                .unwrap_or_default();
            format!("{name} {shapes:?} -> {out_shape:?}{epi}")
        }
    }
}

/// The pointers of `args`, in order.
fn bind(ptrs: &[*mut u8], args: &[BufId]) -> Vec<*mut u8> {
    args.iter().map(|a| ptrs[a.index()]).collect()
}

/// An extern's epilogue, launched on each block of finished output rows.
pub(crate) struct Epi<'a> {
    kernels: &'a dyn LaunchKernel,
    epilogue: Option<&'a Epilogue>,
    ptrs: &'a [*mut u8],
    /// How each epilogue launch is split over threads (`None`: the runner decides).
    chunks: Option<usize>,
    /// The epilogue's column-block twin and its bound arguments, when the epilogue may run on
    /// any block of rows and columns once it is final ([`Epi::block`]).
    block: Option<(ColsFn, Vec<*mut u8>)>,
}

// SAFETY: an `Epi` only hands its buffer pointers to the kernels it launches; threads that
// share one launch it on disjoint blocks of the output ([`Epi::block`]), which write disjoint
// elements (`col_blocks_safe`).
unsafe impl Sync for Epi<'_> {}

impl<'a> Epi<'a> {
    /// The epilogue of an extern, run in blocks where `kernels` has its column-block twin and
    /// [`col_blocks_safe`] holds of the memory the step writes (`written`: the extern's
    /// output, and what a step it runs inside of writes).
    pub(crate) fn new(
        kernels: &'a dyn LaunchKernel,
        epilogue: Option<&'a Epilogue>,
        ptrs: &'a [*mut u8],
        chunks: Option<usize>,
        written: Vec<Range<usize>>,
    ) -> Epi<'a> {
        let span = |b: BufId| {
            let len = epilogue
                .and_then(|e| e.args.iter().position(|&a| a == b).map(|i| e.kernel.args[i].len * e.kernel.args[i].dtype.size_of()))
                .unwrap_or(0);
            ptrs[b.index()] as usize..ptrs[b.index()] as usize + len
        };
        let block = epilogue.and_then(|e| {
            let f = kernels.cols_fn(&e.kernel)?;
            col_blocks_safe(e, &span, written).then(|| (f, bind(ptrs, &e.args)))
        });
        Epi {
            kernels,
            epilogue,
            ptrs,
            chunks,
            block,
        }
    }

    /// True when there is an epilogue (externs then work in row blocks).
    pub(crate) fn present(&self) -> bool {
        self.epilogue.is_some()
    }

    /// Runs the epilogue on output rows `begin..end` (no-op without one).
    pub(crate) fn rows(&self, begin: usize, end: usize) -> Result<()> {
        let Some(e) = self.epilogue else {
            return Ok(());
        };
        self.kernels.launch_split(
            &e.kernel,
            &bind(self.ptrs, &e.args),
            begin as i64,
            end as i64,
            self.chunks,
        )
    }

    /// Runs the epilogue on output rows `begin..end` on this thread (no-op without one): for
    /// an extern that already spreads its work over the pool in tasks.
    pub(crate) fn rows_here(&self, begin: usize, end: usize) -> Result<()> {
        let Some(e) = self.epilogue else {
            return Ok(());
        };
        self.kernels.launch_split(&e.kernel, &bind(self.ptrs, &e.args), begin as i64, end as i64, Some(1))
    }

    /// True when [`Epi::block`] runs the epilogue: the runner has the kernel's column-block
    /// twin and the kernel reads and writes what the extern writes only at the point it runs.
    pub(crate) fn blocks(&self) -> bool {
        self.block.is_some()
    }

    /// Runs the epilogue on the block of output rows `rows` by columns `cols` (the points of
    /// each row), on this thread; an error where [`Epi::blocks`] is false.
    pub(crate) fn block(&self, rows: Range<usize>, cols: Range<usize>) -> Result<()> {
        let Some((f, args)) = &self.block else {
            return Err(Error::Value("this epilogue does not run in blocks".into()));
        };
        // SAFETY: the arguments were bound to this step's buffers (LaunchKernel's contract,
        // checked when the executable was built); `col_blocks_safe` held, so the block writes
        // only its own points.
        unsafe {
            f(args.as_ptr() as *const *mut std::ffi::c_void, rows.start as i64, rows.end as i64, cols.start as i64, cols.end as i64)
        };
        Ok(())
    }

    /// Checks that the epilogue's first outer loop covers the extern's `rows` output rows.
    pub(crate) fn check_rows(&self, rows: usize) -> Result<()> {
        let Some(e) = self.epilogue else {
            return Ok(());
        };
        match e.kernel.outer.first() {
            Some(l) if l.extent == rows => Ok(()),
            l => Err(Error::Graph(format!(
                "epilogue {} runs over {:?} rows, the extern's output has {rows}",
                e.kernel.name,
                l.map(|l| l.extent)
            ))),
        }
    }
}

/// True when epilogue `e` gives the same results run block by block, each block as soon as
/// the extern has written it: its one store and every load of memory that the epilogue or the
/// extern writes (`written`, the extern's output among them) are at the point it runs
/// (`row * cols + col`), so no block reads what another block writes. Other loads (a
/// residual, per-channel constants) may be anywhere. `span(b)` is the memory of buffer `b`:
/// its addresses when run, or any disjoint ranges (one per buffer) to decide it from the
/// program alone.
pub(crate) fn col_blocks_safe(e: &Epilogue, span: &dyn Fn(BufId) -> Range<usize>, mut written: Vec<Range<usize>>) -> bool {
    let k = &e.kernel;
    let [row, col] = &k.outer[..] else {
        return false;
    };
    let at_point = |ix: &Idx| {
        ix.affine().is_some_and(|(coef, c)| {
            let of = |v| coef.get(&v).copied().unwrap_or(0);
            c == 0
                && of(col.var) == 1
                && (row.extent == 1 || of(row.var) == col.extent as i64)
                && coef.iter().all(|(&v, &a)| a == 0 || v == row.var || v == col.var)
        })
    };
    let arg_span = |i: u32| span(e.args[i as usize]);
    for stage in &k.stages {
        match stage {
            Stage::Store { loops, arg, index, .. } if loops.is_empty() && at_point(index) => written.push(arg_span(*arg)),
            _ => return false,
        }
    }
    let overlaps = |r: &Range<usize>| written.iter().any(|w| w.start < r.end && r.start < w.end);
    k.exprs.iter().all(|n| match &n.expr {
        Expr::Load { arg, index } => !overlaps(&arg_span(*arg)) || at_point(index),
        _ => true,
    })
}

/// The buffers an extern step writes: its output `out` and the stores of its epilogue `e`.
pub(crate) fn written_bufs(e: Option<&Epilogue>, out: BufId) -> Vec<BufId> {
    let stores = e.into_iter().flat_map(|e| {
        e.kernel.stages.iter().filter_map(|s| match s {
            Stage::Store { arg, .. } => e.args.get(*arg as usize).copied(),
            _ => None,
        })
    });
    [out].into_iter().chain(stores).collect()
}

/// The buffers an extern step writes (see [`written_bufs`]); none for other steps.
pub(crate) fn step_writes(s: &StepKind) -> Vec<BufId> {
    match s {
        StepKind::Extern { out, epilogue, .. } => written_bufs(epilogue.as_ref(), *out),
        _ => Vec::new(),
    }
}

/// [`written_bufs`] as address ranges.
fn written_spans(p: &Program, e: Option<&Epilogue>, ptrs: &[*mut u8], out: BufId) -> Vec<Range<usize>> {
    let span = |b: BufId| ptrs[b.index()] as usize..ptrs[b.index()] as usize + p.buffer(b).bytes();
    written_bufs(e, out).into_iter().map(span).collect()
}

/// f32 elements of scratch an extern needs (`None` when it needs none), given the constant
/// it packs (which says how a conv runs).
pub(crate) fn scratch_elems(
    op: &ExternOp,
    inputs: &[BufView],
    out_shape: &[usize],
    packed: Option<&Prepacked>,
) -> Option<usize> {
    match op {
        ExternOp::Conv2d(a) => conv::scratch_elems(a, inputs, out_shape, packed),
        ExternOp::MatMul => None,
    }
}

/// One op through the reference kernels on copies of its input views.
fn eval_step(
    p: &Program,
    op: &Op,
    inputs: &[BufView],
    out: BufId,
    out_shape: &[usize],
    out_strides: Option<&[usize]>,
    ptrs: &[*mut u8],
) -> Result<()> {
    // A view of a constant (an embedding table, say) shares the constant's storage rather than
    // being copied on every run.
    let args: Vec<HostTensor> = inputs
        .iter()
        .map(|v| match p.buffer(v.buf).kind {
            BufKind::Const(c) => match p.consts.get(c.0 as usize) {
                Some(t) => Ok(t.with_layout(v.layout())),
                None => read_view(p, ptrs, v),
            },
            _ => read_view(p, ptrs, v),
        })
        .collect::<Result<_>>()?;
    let refs: Vec<&HostTensor> = args.iter().collect();
    let r = crate::eval(op, &refs)?;
    let b = p.buffer(out);
    if r.dtype() != b.dtype || r.shape() != out_shape {
        return Err(Error::Graph(format!(
            "eval of {} gave {} {:?}, the program expects {} {out_shape:?}",
            op.name(),
            r.dtype(),
            r.shape(),
            b.dtype
        )));
    }
    write_dense(&r.contiguous(), ptrs[out.index()], out_strides)
}
