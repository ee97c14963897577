//! Values computed once per point of a row: in a kernel whose stages all walk rows of one shape
//! (softmax's max, sum and store), an expression a later stage needs that an earlier stage has
//! already computed at the same point of the row (softmax's `exp(x - max)`, in the sum and again
//! in the store) is written by the earlier stage into a small array, one per outer point, and the
//! later stage reads it from there instead of computing it again. Values are unchanged: it is
//! the same expression of the same inputs (no argument the kernel writes) at the same point.

use super::common::{canon, needed, stage_loops, stage_value, stage_vars};
use kiln_ir::{BinaryOp, DType, Result, UnaryOp};
use kiln_sched::kernel::{Expr, ExprId, Kernel, VarId};
use std::collections::HashMap;

/// Longest row kept (elements per array): the arrays live on the stack of the thread running
/// the kernel, and a row this long is already far larger than L1.
pub const MAX_ROW: usize = 4096;

/// Cost (see [`cost`]) from which an expression is worth a store and a load: one
/// transcendental function, or a handful of arithmetic operations.
const MIN_COST: u32 = 8;

/// One value kept per point of the row.
#[derive(Clone, Debug, PartialEq)]
pub struct Kept {
    /// The stage that computes it and writes it to the array `row{slot}`.
    pub stage: usize,
    /// Its expression in that stage.
    pub expr: ExprId,
    /// Its dtype (the array's element type).
    pub dtype: DType,
    /// `(stage, expr)`: the later stages' expressions it stands for.
    pub uses: Vec<(usize, ExprId)>,
}

/// The kept values of one kernel.
#[derive(Clone, Debug, PartialEq)]
pub struct RowValues {
    /// Points of the row (the product of every stage's loop extents).
    pub points: usize,
    /// Slot `i` is `row{i}`.
    pub kept: Vec<Kept>,
}

impl RowValues {
    /// The values `k` keeps, or `None`: two or more stages over rows of one shape (at most
    /// [`MAX_ROW`] points), where a later stage needs an expression of cost [`MIN_COST`] or
    /// more that an earlier stage computes at the same point.
    pub fn plan(k: &Kernel) -> Result<Option<RowValues>> {
        let Some(first) = k.stages.first() else { return Ok(None) };
        let extents: Vec<usize> = stage_loops(first).iter().map(|l| l.extent).collect();
        let same_rows = k
            .stages
            .iter()
            .all(|s| stage_loops(s).iter().map(|l| l.extent).eq(extents.iter().copied()));
        let points: usize = extents.iter().product();
        if k.stages.len() < 2 || extents.is_empty() || !same_rows || points == 0 || points > MAX_ROW {
            return Ok(None);
        }
        let mut m = Matcher { k, memo: HashMap::new() };
        let mut kept: Vec<Kept> = Vec::new();
        let mut computed: Vec<Vec<ExprId>> = Vec::new();
        for s in 0..k.stages.len() {
            let vars = stage_vars(k, s);
            let root = stage_value(&k.stages[s]);
            // Checks the stage's expressions (ids in range, operands before their users).
            let marks = needed(k, root)?;
            // Top down: an expression found in an earlier stage is kept whole, so its operands
            // are not looked at (nor computed) unless something else needs them.
            let mut reach = vec![false; k.exprs.len()];
            reach[root as usize] = true;
            let mut own = Vec::new();
            for id in (0..=root).rev() {
                if !reach[id as usize] {
                    continue;
                }
                if let Some(slot) = m.earlier(&mut kept, &computed, id, &vars)? {
                    kept[slot].uses.push((s, id));
                    continue;
                }
                own.push(id);
                for x in k.exprs[id as usize].expr.operands().into_iter().filter(|&x| x < id) {
                    reach[x as usize] = true;
                }
            }
            // Expressions of this stage a later one may reuse: those it computes itself, of
            // cost enough, depending on its loop variables.
            let mut mine = Vec::new();
            for id in own {
                if marks[id as usize].is_some() && m.uses_vars(id, &vars) && cost(k, id) >= MIN_COST {
                    mine.push(id);
                }
            }
            computed.push(mine);
        }
        Ok((!kept.is_empty()).then_some(RowValues { points, kept }))
    }

    /// The slots stage `s` writes: `(slot, expression)`.
    pub fn written_by(&self, s: usize) -> impl Iterator<Item = (usize, ExprId)> + '_ {
        self.kept.iter().enumerate().filter(move |(_, v)| v.stage == s).map(|(i, v)| (i, v.expr))
    }

    /// The expressions of stage `s` read from a slot: `(expression, slot)`.
    pub fn read_by(&self, s: usize) -> Vec<(ExprId, usize)> {
        let mut out = Vec::new();
        for (i, v) in self.kept.iter().enumerate() {
            out.extend(v.uses.iter().filter(|(us, _)| *us == s).map(|(_, e)| (*e, i)));
        }
        out
    }
}

/// Structural equality of expressions of two stages, with each stage's loop variables named by
/// their position in its nest.
struct Matcher<'a> {
    k: &'a Kernel,
    memo: HashMap<(ExprId, ExprId, Vec<VarId>, Vec<VarId>), bool>,
}

impl Matcher<'_> {
    /// The slot of an expression of an earlier stage equal to `id` (in a stage over `vars`),
    /// adding a slot the first time an earlier expression is reused.
    fn earlier(
        &mut self,
        kept: &mut Vec<Kept>,
        computed: &[Vec<ExprId>],
        id: ExprId,
        vars: &[VarId],
    ) -> Result<Option<usize>> {
        if !self.uses_vars(id, vars) || cost(self.k, id) < MIN_COST {
            return Ok(None);
        }
        for (s0, ids) in computed.iter().enumerate() {
            let vars0 = stage_vars(self.k, s0);
            for &e in ids {
                if self.same(e, &vars0, id, vars) {
                    if let Some(slot) = kept.iter().position(|v| v.stage == s0 && v.expr == e) {
                        return Ok(Some(slot));
                    }
                    let dtype = self.k.exprs[e as usize].dtype;
                    kept.push(Kept { stage: s0, expr: e, dtype, uses: Vec::new() });
                    return Ok(Some(kept.len() - 1));
                }
            }
        }
        Ok(None)
    }

    /// True when `id` depends on one of `vars` (an expression that does not is the same
    /// variable in every stage already).
    fn uses_vars(&self, id: ExprId, vars: &[VarId]) -> bool {
        let mut stack = vec![id];
        let mut seen = vec![false; self.k.exprs.len()];
        while let Some(e) = stack.pop() {
            if std::mem::replace(&mut seen[e as usize], true) {
                continue;
            }
            let uses = |i: &kiln_sched::kernel::Idx| vars.iter().any(|&v| i.uses(v));
            match &self.k.exprs[e as usize].expr {
                Expr::Load { index, .. } | Expr::InRange { index, .. } | Expr::Index(index) if uses(index) => {
                    return true;
                }
                x => stack.extend(x.operands().into_iter().filter(|&o| o < e)),
            }
        }
        false
    }

    /// `a` (over `va`) and `b` (over `vb`) compute the same value at the same point of the row,
    /// from arguments the kernel does not write.
    fn same(&mut self, a: ExprId, va: &[VarId], b: ExprId, vb: &[VarId]) -> bool {
        if a == b {
            return true;
        }
        let key = (a, b, va.to_vec(), vb.to_vec());
        if let Some(&r) = self.memo.get(&key) {
            return r;
        }
        let (Some(na), Some(nb)) = (self.k.exprs.get(a as usize), self.k.exprs.get(b as usize)) else {
            return false;
        };
        // Operands come before their users (the IR's order): anything else is not matched.
        let below = na.expr.operands().iter().all(|&x| x < a) && nb.expr.operands().iter().all(|&x| x < b);
        let r = below
            && na.dtype == nb.dtype
            && match (&na.expr, &nb.expr) {
                (Expr::Load { arg: x, index: i }, Expr::Load { arg: y, index: j }) => {
                    let written = self.k.args.get(*x as usize).is_none_or(|a| a.written);
                    x == y && !written && canon(i, va) == canon(j, vb)
                }
                (Expr::Const(x), Expr::Const(y)) => x == y,
                (Expr::Local(x), Expr::Local(y)) => x == y,
                (Expr::Index(i), Expr::Index(j)) => canon(i, va) == canon(j, vb),
                (Expr::InRange { index: i, lo: l0, hi: h0 }, Expr::InRange { index: j, lo: l1, hi: h1 }) => {
                    l0 == l1 && h0 == h1 && canon(i, va) == canon(j, vb)
                }
                (Expr::Unary { op: o, x }, Expr::Unary { op: p, x: y }) => o == p && self.same(*x, va, *y, vb),
                (Expr::Cast { x }, Expr::Cast { x: y }) => self.same(*x, va, *y, vb),
                (Expr::Binary { op: o, a: a0, b: b0 }, Expr::Binary { op: p, a: a1, b: b1 }) => {
                    o == p && self.same(*a0, va, *a1, vb) && self.same(*b0, va, *b1, vb)
                }
                (Expr::Where { cond: c0, a: a0, b: b0 }, Expr::Where { cond: c1, a: a1, b: b1 }) => {
                    self.same(*c0, va, *c1, vb) && self.same(*a0, va, *a1, vb) && self.same(*b0, va, *b1, vb)
                }
                _ => false,
            };
        self.memo.insert(key, r);
        r
    }
}

/// A rough count of the machine operations computing `id` takes (a transcendental function is
/// 10), each shared operand counted once.
fn cost(k: &Kernel, id: ExprId) -> u32 {
    let mut stack = vec![id];
    let mut seen = vec![false; k.exprs.len()];
    let mut total = 0u32;
    while let Some(e) = stack.pop() {
        if std::mem::replace(&mut seen[e as usize], true) {
            continue;
        }
        let x = &k.exprs[e as usize].expr;
        total = total.saturating_add(match x {
            Expr::Unary { op, .. } => match op {
                UnaryOp::Neg | UnaryOp::Abs | UnaryOp::Sign | UnaryOp::Relu | UnaryOp::Not => 1,
                UnaryOp::Floor | UnaryOp::Ceil | UnaryOp::Round | UnaryOp::IsNan | UnaryOp::IsInf => 1,
                UnaryOp::Sqrt | UnaryOp::Rsqrt | UnaryOp::Reciprocal => 3,
                _ => 10,
            },
            Expr::Binary { op: BinaryOp::Pow, .. } => 10,
            Expr::Binary { op: BinaryOp::Div | BinaryOp::Rem | BinaryOp::Mod, .. } => 3,
            Expr::Binary { .. } | Expr::Where { .. } | Expr::Cast { .. } => 1,
            Expr::Load { .. } | Expr::Const(_) | Expr::InRange { .. } | Expr::Index(_) | Expr::Local(_) => 0,
        });
        stack.extend(x.operands().into_iter().filter(|&o| o < e));
    }
    total
}
