//! An attention step whose result only feeds a copy that permutes it (the transformers' merge
//! of the heads, `[b, h, s, d]` → `[b, s, h * d]`, which the next matmul needs dense) writes
//! the copy's output itself, through strides (`StepKind::Eval::out_strides`), and the copy step
//! goes. Decided on the program alone, before memory is planned, so `kiln explain` shows the
//! same steps; the CPU runner and kiln-cuda both run it.
//!
//! The copy's load index is read exactly: each loop variable that appears only as `v / c` and
//! `v % c` (one `c` dividing its extent) is split into its quotient and remainder, after which
//! the load and the store must both be affine; the load must then read the attention's dense
//! result one dim per variable, and the store must cover its output once.

use crate::kernel::{Expr, Idx, Loop, Stage, VarId};
use crate::memory::live_intervals;
use crate::{BufId, BufKind, Program, StepKind};
use kiln_ir::Op;
use std::collections::HashMap;

/// Folds every such copy into its attention step: the step's `out` becomes the copy's output
/// (its own result, now written by no step, takes no memory), its `out_strides` say where each
/// element goes, and the copy step is removed. Returns, for each step of the new program,
/// whether a copy was folded into it (for [`crate::FusionReport::fold_next_steps`]).
pub fn write_attention_through_copies(program: &mut Program) -> Vec<bool> {
    let live = live_intervals(program);
    let n = program.steps.len();
    let found: Vec<Option<(BufId, Vec<usize>)>> = (0..n).map(|i| if i + 1 < n { through(program, &live, i) } else { None }).collect();
    let mut folded = Vec::with_capacity(n);
    let mut steps = Vec::with_capacity(n);
    let mut old = std::mem::take(&mut program.steps).into_iter();
    let mut orphans = Vec::new();
    let mut i = 0;
    while let Some(mut step) = old.next() {
        match &found[i] {
            Some((y, s)) => {
                if let StepKind::Eval { out, out_strides, .. } = &mut step.kind {
                    orphans.push(std::mem::replace(out, *y));
                    *out_strides = Some(s.clone());
                }
                // The copy's graph nodes are now computed here.
                if let Some(copy) = old.next() {
                    step.nodes.extend(copy.nodes);
                }
                folded.push(true);
                steps.push(step);
                i += 2;
            }
            None => {
                folded.push(false);
                steps.push(step);
                i += 1;
            }
        }
    }
    program.steps = steps;
    for r in orphans {
        program.buffers[r.index()].numel = 0;
    }
    folded
}

/// Step `i`'s output buffer and strides when it is an attention whose result only step `i + 1`
/// reads, and that step copies it into a new dense buffer through a permutation.
fn through(p: &Program, live: &[Option<(usize, usize)>], i: usize) -> Option<(BufId, Vec<usize>)> {
    let StepKind::Eval { op: Op::Attention { .. }, out: a, out_shape, .. } = &p.steps[i].kind else {
        return None;
    };
    let StepKind::Kernel { kernel: k, args } = &p.steps[i + 1].kind else {
        return None;
    };
    if live.get(a.index()).copied().flatten() != Some((i, i + 1)) || p.outputs.iter().any(|(o, _)| o == a) {
        return None;
    }
    let [Stage::Store { loops, arg, index, value }] = k.stages.as_slice() else {
        return None;
    };
    let Expr::Load { arg: src, index: load } = &k.exprs.get(*value as usize)?.expr else {
        return None;
    };
    let y = *args.get(*arg as usize)?;
    let (ab, yb) = (p.buffer(*a), p.buffer(y));
    let only_y_written = k.args.iter().enumerate().all(|(j, g)| g.written == (j == *arg as usize));
    if args.get(*src as usize) != Some(a) || yb.kind != BufKind::Temp || yb.dtype != ab.dtype || yb.numel != ab.numel || !only_y_written {
        return None;
    }
    let all: Vec<Loop> = k.outer.iter().chain(loops).copied().collect();
    let Split { vars, load, store } = split(&all, load, index)?;
    let ((lc, l0), (sc, s0)) = (load.affine()?, store.affine()?);
    if l0 != 0 || s0 != 0 {
        return None;
    }
    // The load reads the result densely: every dim of more than one element is one variable
    // whose coefficient is the dim's dense stride and whose extent is the dim's size.
    let mut dense = vec![1usize; out_shape.len()];
    for d in (0..out_shape.len().saturating_sub(1)).rev() {
        dense[d] = dense[d + 1] * out_shape[d + 1];
    }
    let mut out = vec![0usize; out_shape.len()];
    let mut matched = vec![false; out_shape.len()];
    for &(v, extent) in vars.iter().filter(|(_, e)| *e > 1) {
        let coef = usize::try_from(*lc.get(&v)?).ok()?;
        let d = (0..out_shape.len()).find(|&d| !matched[d] && out_shape[d] == extent && dense[d] == coef)?;
        matched[d] = true;
        out[d] = usize::try_from(*sc.get(&v)?).ok()?;
    }
    if (0..out_shape.len()).any(|d| out_shape[d] > 1 && !matched[d]) {
        return None;
    }
    // The store covers its output once.
    is_permuted_dense(out_shape, &out).then_some((y, out))
}

/// Whether `strides` lay `shape` out as a permutation of a dense layout: sorted by stride, the
/// dims of more than one element are a dense row-major layout, so each element has its own
/// offset below the element count (what a runtime checks before writing through strides).
pub fn is_permuted_dense(shape: &[usize], strides: &[usize]) -> bool {
    if shape.len() != strides.len() {
        return false;
    }
    if shape.contains(&0) {
        return true;
    }
    let mut dims: Vec<(usize, usize)> =
        shape.iter().zip(strides).filter(|(e, _)| **e > 1).map(|(&e, &s)| (s, e)).collect();
    dims.sort_unstable();
    let mut next = 1;
    for (stride, extent) in dims {
        if stride != next {
            return false;
        }
        next *= extent;
    }
    true
}

/// A copy's loop variables (with their extents) and its load and store indices over them.
struct Split {
    vars: Vec<(VarId, usize)>,
    load: Idx,
    store: Idx,
}

/// The loop variables with their extents, and `load` and `store` rewritten so that each
/// variable read only as `v / c` and `v % c` becomes two (`v / c` and `v % c`); `None` when a
/// `/` or `%` is of anything else, or divides a variable by two constants or one that does not
/// divide its extent.
fn split(loops: &[Loop], load: &Idx, store: &Idx) -> Option<Split> {
    fn divisors(i: &Idx, out: &mut HashMap<VarId, Vec<i64>>) -> Option<()> {
        match i {
            Idx::Var(_) | Idx::Const(_) => Some(()),
            Idx::Add(ts) => ts.iter().try_for_each(|t| divisors(t, out)),
            Idx::Mul(x, _) => divisors(x, out),
            Idx::Div(x, c) | Idx::Mod(x, c) => match **x {
                Idx::Var(v) => {
                    out.entry(v).or_default().push(*c);
                    Some(())
                }
                _ => None,
            },
        }
    }
    let mut found = HashMap::new();
    divisors(load, &mut found)?;
    divisors(store, &mut found)?;
    let mut fresh = loops.iter().map(|l| l.var).max().unwrap_or(0) + 1;
    let mut parts: HashMap<VarId, (i64, VarId, VarId)> = HashMap::new();
    let mut vars = Vec::new();
    for l in loops {
        match found.get(&l.var) {
            None => vars.push((l.var, l.extent)),
            Some(cs) => {
                let c = cs[0];
                if cs.iter().any(|&x| x != c) || c <= 1 || l.extent % c as usize != 0 {
                    return None;
                }
                parts.insert(l.var, (c, fresh, fresh + 1));
                vars.push((fresh, l.extent / c as usize));
                vars.push((fresh + 1, c as usize));
                fresh += 2;
            }
        }
    }
    fn sub(i: &Idx, parts: &HashMap<VarId, (i64, VarId, VarId)>) -> Idx {
        match i {
            Idx::Var(v) => match parts.get(v) {
                Some(&(c, q, r)) => Idx::var(q).mul(c).add(Idx::var(r)),
                None => Idx::Var(*v),
            },
            Idx::Const(c) => Idx::Const(*c),
            Idx::Add(ts) => ts.iter().fold(Idx::Const(0), |acc, t| acc.add(sub(t, parts))),
            Idx::Mul(x, c) => sub(x, parts).mul(*c),
            // `divisors` let through only `/` and `%` of a variable, by the one constant it splits by.
            Idx::Div(x, _) | Idx::Mod(x, _) => {
                let split = match **x {
                    Idx::Var(v) => parts.get(&v).copied(),
                    _ => None,
                };
                match split {
                    Some((_, q, r)) => Idx::var(if matches!(i, Idx::Div(..)) { q } else { r }),
                    None => i.clone(),
                }
            }
        }
    }
    Some(Split { vars, load: sub(load, &parts), store: sub(store, &parts) })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{GPU_EXTERN_DTYPES, ScheduleOptions, schedule};
    use kiln_ir::{DType, Graph, HostTensor, Shape, TensorType};

    /// `merge_heads(attention(q, k, v)) @ w`, heads `[2, 4, 8, 16]`, and `perm` for the merge.
    fn program(perm: Vec<usize>, merged: &[usize]) -> Program {
        let mut g = Graph::new();
        let ty = TensorType::new(DType::F32, Shape::fixed(&[2, 4, 8, 16]));
        let (q, k, v) = (g.input("q", ty.clone()), g.input("k", ty.clone()), g.input("v", ty));
        let a = g.add(Op::Attention { causal: false, scale: None }, &[q, k, v]).unwrap();
        let p = g.add(Op::Permute(perm), &[a]).unwrap();
        let m = g.add(Op::Reshape(Shape::fixed(merged)), &[p]).unwrap();
        let n = *merged.last().unwrap();
        let w = g.constant(HostTensor::from_vec(vec![0.5f32; n * 3], &[n, 3]).unwrap());
        let y = g.add(Op::MatMul, &[m, w]).unwrap();
        g.output(y);
        schedule(&g, &ScheduleOptions { fuse: true, extern_dtypes: GPU_EXTERN_DTYPES, row_epilogues: false }).unwrap().0
    }

    #[test]
    fn attention_writes_the_merge_of_its_heads_and_the_copy_goes() {
        let mut p = program(vec![0, 2, 1, 3], &[2, 8, 64]);
        let before = p.steps.len();
        let copy_out = match &p.steps[1].kind {
            StepKind::Kernel { kernel, args } => args[match kernel.stages.as_slice() {
                [Stage::Store { arg, .. }] => *arg as usize,
                _ => panic!("step 1 is not one store"),
            }],
            _ => panic!("step 1 is not the copy"),
        };
        let folded = write_attention_through_copies(&mut p);
        assert_eq!(p.steps.len(), before - 1, "the copy step is gone");
        // [b, h, s, d] written into [b, s, h * d]: b by 8 * 64, h by 16, s by 64, d by 1.
        assert!(matches!(&p.steps[0].kind, StepKind::Eval { out, out_strides: Some(s), .. } if *out == copy_out && s == &[512, 16, 64, 1]));
        assert_eq!(folded.len(), p.steps.len());
        assert!(folded[0] && !folded[1..].iter().any(|&f| f));
    }

    #[test]
    fn a_copy_that_is_not_a_permutation_of_the_result_stays() {
        // The heads merged as [b, h * s, d]: a plain reshape of the dense result, no copy at all.
        let mut p = program(vec![0, 1, 2, 3], &[2, 32, 16]);
        let before = p.steps.len();
        let folded = write_attention_through_copies(&mut p);
        assert_eq!(p.steps.len(), before);
        assert!(!folded.iter().any(|&f| f));
        // A result that is also a graph output is kept as it is.
        let mut p = program(vec![0, 2, 1, 3], &[2, 8, 64]);
        p.outputs.push((match &p.steps[0].kind {
            StepKind::Eval { out, .. } => *out,
            _ => panic!("step 0 is not the attention"),
        }, vec![2, 4, 8, 16]));
        let before = p.steps.len();
        write_attention_through_copies(&mut p);
        assert_eq!(p.steps.len(), before, "a result that is also a graph output keeps its copy");
    }
}
