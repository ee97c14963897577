//! Loop collapsing: merges adjacent loops `u` (outer) and `w` (inner) into one when every
//! index in the kernel steps by `b` in `w` and by `b * extent(w)` in `u` — a dense pointwise
//! kernel becomes one flat loop, a reduction over `[H, W]` one inner loop.

use crate::kernel::{Expr, Idx, Kernel, Loop, Stage, VarId};

/// Collapses the kernel's loops (its outer loops too unless `keep_outer`).
pub(crate) fn collapse(k: &mut Kernel, keep_outer: bool) {
    if !keep_outer {
        let mut loops = std::mem::take(&mut k.outer);
        collapse_list(k, &mut loops);
        k.outer = loops;
    }
    for s in 0..k.stages.len() {
        let mut loops = match &mut k.stages[s] {
            Stage::Reduce { loops, .. } | Stage::Store { loops, .. } => std::mem::take(loops),
        };
        collapse_list(k, &mut loops);
        match &mut k.stages[s] {
            Stage::Reduce { loops: l, .. } | Stage::Store { loops: l, .. } => *l = loops,
        }
    }
}

fn collapse_list(k: &mut Kernel, loops: &mut Vec<Loop>) {
    let mut i = 0;
    while i + 1 < loops.len() {
        let (u, w) = (loops[i], loops[i + 1]);
        if mergeable(k, u.var, w.var, w.extent as i64) {
            rewrite(k, u.var);
            loops[i + 1].extent = u.extent * w.extent;
            loops.remove(i);
            // The merged loop may now merge with the one before it.
            i = i.saturating_sub(1);
        } else {
            i += 1;
        }
    }
}

/// Every index of the kernel.
fn for_each_idx(k: &Kernel, mut f: impl FnMut(&Idx, bool)) {
    for e in &k.exprs {
        match &e.expr {
            Expr::Load { index, .. } => f(index, true),
            Expr::InRange { index, .. } | Expr::Index(index) => f(index, false),
            _ => {}
        }
    }
    for s in &k.stages {
        if let Stage::Store { index, .. } = s {
            f(index, true);
        }
    }
}

/// The coefficients of `u` and `w` when they appear only as top-level terms `u*a`, `w*b`.
fn coefs(x: &Idx, u: VarId, w: VarId) -> Option<(i64, i64)> {
    let terms: &[Idx] = match x {
        Idx::Add(ts) => ts,
        t => std::slice::from_ref(t),
    };
    let (mut a, mut b) = (0i64, 0i64);
    for t in terms {
        match t {
            Idx::Var(v) if *v == u => a += 1,
            Idx::Var(v) if *v == w => b += 1,
            Idx::Mul(inner, c) if **inner == Idx::Var(u) => a += c,
            Idx::Mul(inner, c) if **inner == Idx::Var(w) => b += c,
            t if t.uses(u) || t.uses(w) => return None,
            _ => {}
        }
    }
    Some((a, b))
}

fn mergeable(k: &Kernel, u: VarId, w: VarId, w_extent: i64) -> bool {
    let mut ok = true;
    for_each_idx(k, |x, affine_ok| {
        if !ok {
            return;
        }
        if !affine_ok {
            ok = !x.uses(u) && !x.uses(w);
            return;
        }
        ok = matches!(coefs(x, u, w), Some((a, b)) if a == b.saturating_mul(w_extent));
    });
    ok
}

/// Drops the `u` terms: with `w` now running over both loops, `w*b` covers `u*a + w*b`.
fn drop_var(x: &Idx, u: VarId) -> Idx {
    let terms: Vec<Idx> = match x {
        Idx::Add(ts) => ts.clone(),
        t => vec![t.clone()],
    };
    terms
        .into_iter()
        .filter(|t| !t.uses(u))
        .fold(Idx::Const(0), |acc, t| acc.add(t))
}

fn rewrite(k: &mut Kernel, u: VarId) {
    for e in &mut k.exprs {
        if let Expr::Load { index, .. } = &mut e.expr
            && index.uses(u)
        {
            *index = drop_var(index, u);
        }
    }
    for s in &mut k.stages {
        if let Stage::Store { index, .. } = s
            && index.uses(u)
        {
            *index = drop_var(index, u);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel::{Arg, Kernel};
    use kiln_ir::DType;

    #[test]
    fn dense_copy_becomes_one_loop_and_broadcast_does_not() {
        let mut k = Kernel::new("t");
        k.args = vec![
            Arg {
                dtype: DType::F32,
                len: 12,
                written: false,
            },
            Arg {
                dtype: DType::F32,
                len: 12,
                written: true,
            },
        ];
        k.outer = vec![Loop { var: 0, extent: 3 }, Loop { var: 1, extent: 4 }];
        let ix = Idx::var(0).mul(4).add(Idx::var(1));
        let v = k.push(
            Expr::Load {
                arg: 0,
                index: ix.clone(),
            },
            DType::F32,
        );
        k.stages.push(Stage::Store {
            loops: vec![],
            arg: 1,
            index: ix,
            value: v,
        });
        collapse(&mut k, false);
        assert_eq!(k.outer, vec![Loop { var: 1, extent: 12 }]);
        assert_eq!(
            k.exprs[0].expr,
            Expr::Load {
                arg: 0,
                index: Idx::var(1)
            }
        );

        // A bias read (index v1 only) keeps the two loops.
        let mut k2 = Kernel::new("t2");
        k2.outer = vec![Loop { var: 0, extent: 3 }, Loop { var: 1, extent: 4 }];
        let v = k2.push(
            Expr::Load {
                arg: 0,
                index: Idx::var(1),
            },
            DType::F32,
        );
        k2.stages.push(Stage::Store {
            loops: vec![],
            arg: 1,
            index: Idx::var(0).mul(4).add(Idx::var(1)),
            value: v,
        });
        collapse(&mut k2, false);
        assert_eq!(k2.outer.len(), 2);
    }
}
