//! The memory planner: places every [`BufKind::Temp`] buffer of a [`Program`] at a byte offset
//! in one arena, so buffers that are never live at the same step share memory.
//!
//! - Liveness is by step index: a temporary is live from the first step that touches it
//!   (normally the one that writes it) to the last step that reads it, both inclusive; an
//!   extern's epilogue arguments count at the extern's step; program outputs stay live to the
//!   end. Two buffers live at the same step never share bytes, so a step never reads memory
//!   it is overwriting — except for the in-place case below. Steps that run as one launch
//!   ([`Step::with_previous`](crate::Step::with_previous)) count as one step: their work
//!   interleaves, so nothing either touches may share bytes with anything the other does.
//! - In place: a pointwise kernel (one `Store` stage writing one temporary, as many points as
//!   output elements) may write into the place of a temporary input that dies at that step,
//!   has the same element size and count, and is only loaded at exactly the store's index:
//!   each point reads its element before writing the same element, and no other point touches
//!   it. The pair (and chains of such pairs: `x → relu → sigmoid`) becomes one allocation.
//!   The same holds for an extern's epilogue and the extern's own result when nothing else
//!   reads that result: the library call writes it whole (or, on the CPU, each block of rows
//!   before the epilogue runs on them), and the epilogue then overwrites it element by
//!   element (conv + BatchNorm + ReLU keeps one feature map, not two).
//!   And for a conv extern with a residual input (the fused form of
//!   [`ExternOp::Conv2d`](crate::ExternOp::Conv2d): a backend's one library call computing
//!   `act(conv + bias + z)`), the output may take the place of `z` when `z` dies there and is
//!   dense in the output's shape: each output element is computed from its own `z` element.
//!   A renderer must not mark such a pair's pointers `restrict`.
//! - Placement is greedy by size with best fit (as TFLite's arena planner): allocations are
//!   placed largest first, each into the smallest gap left between the already placed ones
//!   that overlap it in time, else above them all. Placing big activations first keeps a
//!   resnet-like chain of shrinking/growing feature maps close to the true peak (two or three
//!   live maps); placing by start time tends to strand small buffers under big later ones.
//!   Offsets and sizes are rounded up to [`ALIGN`] bytes.

use crate::kernel::{Expr, Idx, Kernel, Stage};
use crate::program::{BufId, BufKind, BufView, ExternOp, MemoryPlan, Program, StepKind};

/// Alignment of every offset in the arena, in bytes (a cache line; enough for AVX-512 loads).
pub const ALIGN: usize = 64;

fn align_up(n: usize) -> usize {
    n.div_ceil(ALIGN) * ALIGN
}

/// Bytes the temporaries take when each has its own (aligned) allocation: what the plan saves
/// against (`kiln explain` shows both).
pub fn naive_bytes(p: &Program) -> usize {
    p.buffers
        .iter()
        .filter(|b| b.kind == BufKind::Temp)
        .map(|b| align_up(b.bytes()))
        .sum()
}

/// First and last step (inclusive) at which a temporary is live, each the first step of its
/// launch (see [`Program::launch_of_steps`]); `None` when no step uses it.
type Interval = Option<(usize, usize)>;

/// Per buffer: the live interval of each temporary (see the module docs).
pub fn live_intervals(p: &Program) -> Vec<Interval> {
    let mut live: Vec<Interval> = vec![None; p.buffers.len()];
    let mut touch = |b: BufId, step: usize| {
        if let Some(slot) = live.get_mut(b.index()) {
            *slot = Some(match *slot {
                None => (step, step),
                Some((s, e)) => (s.min(step), e.max(step)),
            });
        }
    };
    let launch = p.launch_of_steps();
    for (step, &i) in p.steps.iter().zip(&launch) {
        match &step.kind {
            StepKind::Kernel { args, .. } => args.iter().for_each(|&b| touch(b, i)),
            StepKind::Extern {
                inputs,
                out,
                epilogue,
                ..
            } => {
                inputs.iter().for_each(|v| touch(v.buf, i));
                touch(*out, i);
                if let Some(e) = epilogue {
                    e.args.iter().for_each(|&b| touch(b, i));
                }
            }
            StepKind::Eval { inputs, out, .. } => {
                inputs.iter().for_each(|v| touch(v.buf, i));
                touch(*out, i);
            }
        }
    }
    let end = launch.last().copied().unwrap_or(0);
    for (b, _) in &p.outputs {
        if let Some(slot) = live.get_mut(b.index()) {
            *slot = Some(slot.map_or((end, end), |(s, _)| (s, end)));
        }
    }
    for (slot, buf) in live.iter_mut().zip(&p.buffers) {
        if buf.kind != BufKind::Temp {
            *slot = None;
        }
    }
    live
}

/// For step `step` (a kernel, or an extern's epilogue with `extern_out` the extern's result),
/// the temporary input whose place its output may take, if the in-place rule of the module
/// docs holds: `(input, output)`. Only `extern_out` qualifies in an epilogue.
fn in_place_pair(
    p: &Program,
    live: &[Interval],
    step: usize,
    kernel: &Kernel,
    args: &[BufId],
    extern_out: Option<BufId>,
) -> Option<(BufId, BufId)> {
    let [
        Stage::Store {
            loops,
            arg: out_arg,
            index,
            ..
        },
    ] = kernel.stages.as_slice()
    else {
        return None;
    };
    let written_only_out = kernel
        .args
        .iter()
        .enumerate()
        .all(|(i, a)| a.written == (i == *out_arg as usize));
    if !written_only_out {
        return None;
    }
    let out = *args.get(*out_arg as usize)?;
    let out_buf = p.buffers.get(out.index())?;
    if out_buf.kind != BufKind::Temp || live[out.index()]?.0 != step {
        return None;
    }
    // As many points as elements: the store covers the whole output, so its index is a
    // bijection and no point can read an element another point already overwrote.
    let points = kernel.outer_points() * loops.iter().map(|l| l.extent).product::<usize>();
    if points != out_buf.numel {
        return None;
    }
    let loads_of = |b: BufId| {
        kernel.exprs.iter().filter_map(move |e| match &e.expr {
            Expr::Load { arg, index } if args.get(*arg as usize) == Some(&b) => Some(index),
            _ => None,
        })
    };
    let same_index = |i: &Idx| i == index;
    if loads_of(out).next().is_some() {
        return None;
    }
    let is_output = |b: BufId| p.outputs.iter().any(|(o, _)| *o == b);
    args.iter()
        .copied()
        .filter(|&b| b != out && extern_out.is_none_or(|x| x == b))
        .find(|&b| {
            let Some(buf) = p.buffers.get(b.index()) else {
                return false;
            };
            // An extern's result is written at this very step, before its epilogue runs.
            let born_before = |s: usize| s < step || extern_out == Some(b);
            buf.kind == BufKind::Temp
                && buf.numel == out_buf.numel
                && buf.dtype.size_of() == out_buf.dtype.size_of()
                && !is_output(b)
                && matches!(live[b.index()], Some((s, e)) if born_before(s) && e == step)
                && loads_of(b).next().is_some()
                && loads_of(b).all(same_index)
        })
        .map(|inp| (inp, out))
}

/// For a fused conv step `step` writing `out` (shape `shape`) with residual `z`: `(z, out)` when
/// `out` may take `z`'s place (see the module docs).
fn residual_pair(p: &Program, live: &[Interval], step: usize, z: &BufView, out: BufId, shape: &[usize]) -> Option<(BufId, BufId)> {
    let (zb, ob) = (p.buffers.get(z.buf.index())?, p.buffers.get(out.index())?);
    let dense = *z == BufView::dense(z.buf, shape);
    let is_output = |b: BufId| p.outputs.iter().any(|(o, _)| *o == b);
    let fits = zb.kind == BufKind::Temp
        && ob.kind == BufKind::Temp
        && zb.numel == ob.numel
        && zb.dtype.size_of() == ob.dtype.size_of()
        && !is_output(z.buf)
        && matches!(live[z.buf.index()], Some((s, e)) if s < step && e == step)
        && live[out.index()]?.0 == step;
    (dense && fits && z.buf != out).then_some((z.buf, out))
}

/// One region of the arena: buffers chained in place share it over the union of their lives.
struct Alloc {
    size: usize,
    start: usize,
    end: usize,
    offset: usize,
}

/// Plans the arena of `p`'s temporaries (see the module docs for the rules). Inputs and
/// constants get `None`.
pub fn plan_memory(p: &Program) -> MemoryPlan {
    let live = live_intervals(p);
    // `root[b]`: the buffer whose allocation `b` shares (itself unless written in place).
    let mut root: Vec<usize> = (0..p.buffers.len()).collect();
    let mut in_place = 0usize;
    for (step, &i) in p.steps.iter().zip(&p.launch_of_steps()) {
        let pair = match &step.kind {
            StepKind::Kernel { kernel, args } => in_place_pair(p, &live, i, kernel, args, None),
            StepKind::Extern { op: ExternOp::Conv2d(_), inputs, out, out_shape, epilogue: None } => inputs.get(3).and_then(|z| residual_pair(p, &live, i, z, *out, out_shape)),
            StepKind::Extern {
                out,
                epilogue: Some(e),
                ..
            } => in_place_pair(p, &live, i, &e.kernel, &e.args, Some(*out)),
            _ => None,
        };
        if let Some((inp, out)) = pair {
            root[out.index()] = root[inp.index()];
            in_place += 1;
        }
    }
    let mut allocs: Vec<Option<Alloc>> = (0..p.buffers.len()).map(|_| None).collect();
    for (b, iv) in live.iter().enumerate() {
        if p.buffers[b].kind != BufKind::Temp {
            continue;
        }
        // A temporary no step touches still gets its own bytes (at step 0), so every
        // offset + size stays inside the arena whatever a runtime does with it.
        let (s, e) = iv.unwrap_or((0, 0));
        let size = align_up(p.buffers[b].bytes());
        let a = allocs[root[b]].get_or_insert(Alloc {
            size,
            start: s,
            end: e,
            offset: 0,
        });
        a.start = a.start.min(s);
        a.end = a.end.max(e);
    }
    let mut order: Vec<usize> = (0..allocs.len()).filter(|&i| allocs[i].is_some()).collect();
    let key = |i: &usize| {
        allocs[*i]
            .as_ref()
            .map(|a| (std::cmp::Reverse(a.size), a.start, *i))
    };
    order.sort_by_key(key);
    let mut placed: Vec<usize> = Vec::with_capacity(order.len());
    let mut arena = 0usize;
    for &i in &order {
        let Some(a) = allocs[i].as_ref() else {
            continue;
        };
        let (size, start, end) = (a.size, a.start, a.end);
        let mut busy: Vec<(usize, usize)> = placed
            .iter()
            .filter_map(|&j| allocs[j].as_ref())
            .filter(|o| o.size > 0 && o.start <= end && start <= o.end)
            .map(|o| (o.offset, o.offset + o.size))
            .collect();
        busy.sort_unstable();
        let mut best: Option<(usize, usize)> = None; // (gap, offset)
        let mut cursor = 0usize;
        for (lo, hi) in busy {
            if lo >= cursor + size && best.is_none_or(|(g, _)| lo - cursor < g) {
                best = Some((lo - cursor, cursor));
            }
            cursor = cursor.max(hi);
        }
        let offset = best.map_or(cursor, |(_, o)| o);
        if let Some(a) = allocs[i].as_mut() {
            a.offset = offset;
        }
        arena = arena.max(offset + size);
        placed.push(i);
    }
    let offsets = p
        .buffers
        .iter()
        .enumerate()
        .map(|(b, buf)| match buf.kind {
            BufKind::Temp => allocs[root[b]].as_ref().map(|a| a.offset),
            _ => None,
        })
        .collect();
    let naive = naive_bytes(p);
    tracing::info!(
        target: "kiln::memory",
        "planned {} temporaries: arena {} bytes, naive {} bytes ({} written in place)",
        p.buffers.iter().filter(|b| b.kind == BufKind::Temp).count(),
        arena,
        naive,
        in_place
    );
    MemoryPlan {
        offsets,
        arena_bytes: arena,
    }
}
