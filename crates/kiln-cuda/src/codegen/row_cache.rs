//! Rows kept in registers: in a warp-per-row kernel ([`Launch::PerWarp`]) whose stages all walk
//! rows of the same shape (softmax's max, sum and store; a layer norm's mean, variance and
//! store), an operand that several stages read at the same point of the row is loaded once per
//! lane and point into a small register array, and the later stages read it from there instead
//! of memory. Each lane takes the row's points `lane, lane + 32, ...` in every stage, so the
//! value a later stage needs is the one this lane loaded. Values are unchanged.

use super::Launch;
pub(crate) use kiln_cpu::codegen::common::{canon, stage_vars};
use kiln_cpu::codegen::common::{CANON, needed, stage_loops};
use kiln_ir::Result;
use kiln_sched::kernel::{Expr, Idx, Kernel, Stage, VarId};

/// Longest row a warp caches: 32 registers per lane and cached operand.
const MAX_ROW: usize = 1024;

/// One operand a lane keeps: the kernel argument and its index with the stage's loop variables
/// made canonical (the same for every stage that reads the same point).
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct CachedLoad {
    pub arg: u32,
    pub key: Idx,
    /// The first stage that reads it: that stage fills the registers.
    pub first_stage: usize,
}

/// The row cache of a kernel.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct RowCache {
    /// Points of the row each lane takes (the row's points / 32, rounded up).
    pub iters: usize,
    /// Points of the row.
    pub points: usize,
    pub loads: Vec<CachedLoad>,
}

/// A canonical index `key` back in terms of a stage's loop variables `vars`.
pub(crate) fn at(key: &Idx, vars: &[VarId]) -> Idx {
    key.rename(&|v| if v >= CANON { vars.get((v - CANON) as usize).copied().unwrap_or(v) } else { v })
}

/// The row cache of `k` (launched as `launch`), or `None`: a warp-per-row kernel of two or
/// more stages over rows of one shape (at most [`MAX_ROW`] points), with operands that two
/// stages read at the same point, unconditionally (not only under a `Where` branch), from an
/// argument the kernel does not write.
pub(crate) fn plan(k: &Kernel, launch: Launch) -> Result<Option<RowCache>> {
    let first = match k.stages.first() {
        Some(s) if matches!(launch, Launch::PerWarp { .. }) && k.stages.len() >= 2 => stage_loops(s),
        _ => return Ok(None),
    };
    let extents: Vec<usize> = first.iter().map(|l| l.extent).collect();
    let same_rows = k.stages.iter().all(|s| stage_loops(s).iter().map(|l| l.extent).eq(extents.iter().copied()));
    let points: usize = extents.iter().product();
    if !same_rows || points == 0 || points > MAX_ROW {
        return Ok(None);
    }
    // Every (argument, canonical index) each stage reads for sure, with the stages reading it.
    let mut reads: Vec<(u32, Idx, Vec<usize>)> = Vec::new();
    for (s, stage) in k.stages.iter().enumerate() {
        let root = match stage {
            Stage::Reduce { value, .. } | Stage::Store { value, .. } => *value,
        };
        let vars = stage_vars(k, s);
        for (id, mark) in needed(k, root)?.iter().enumerate() {
            let Expr::Load { arg, index } = &k.exprs[id].expr else { continue };
            let written = k.args.get(*arg as usize).is_none_or(|a| a.written);
            if *mark != Some(true) || written || !vars.iter().any(|&v| index.uses(v)) {
                continue;
            }
            let key = canon(index, &vars);
            match reads.iter_mut().find(|(a, i, _)| a == arg && *i == key) {
                Some((_, _, stages)) if !stages.contains(&s) => stages.push(s),
                Some(_) => {}
                None => reads.push((*arg, key, vec![s])),
            }
        }
    }
    let loads: Vec<CachedLoad> = reads
        .into_iter()
        .filter(|(_, _, stages)| stages.len() >= 2)
        .map(|(arg, key, stages)| CachedLoad { arg, key, first_stage: stages[0] })
        .collect();
    Ok((!loads.is_empty()).then_some(RowCache { iters: points.div_ceil(32), points, loads }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use kiln_ir::{DType, ReduceOp};
    use kiln_sched::kernel::{Arg, Loop};

    /// Two stages over rows of `n`: a max of `in[row * n + i]`, then a store of it minus the
    /// max to argument 1 (or back to argument 0 when `in_place`).
    fn two_stages(n: usize, in_place: bool) -> Kernel {
        let mut k = Kernel::new("k");
        k.args = vec![Arg { dtype: DType::F32, len: 4096 * n, written: in_place }, Arg { dtype: DType::F32, len: 4096 * n, written: true }];
        k.outer = vec![Loop { var: 0, extent: 4096 }];
        let row = |v: VarId| Idx::var(0).mul(n as i64).add(Idx::var(v));
        let a = k.push(Expr::Load { arg: 0, index: row(1) }, DType::F32);
        let b = k.push(Expr::Load { arg: 0, index: row(2) }, DType::F32);
        let m = k.push(Expr::Local(0), DType::F32);
        let d = k.push(Expr::Binary { op: kiln_ir::BinaryOp::Sub, a: b, b: m }, DType::F32);
        k.stages = vec![
            Stage::Reduce { loops: vec![Loop { var: 1, extent: n }], op: ReduceOp::Max, value: a, local: 0, dtype: DType::F32 },
            Stage::Store { loops: vec![Loop { var: 2, extent: n }], arg: u32::from(!in_place), index: row(2), value: d },
        ];
        k
    }

    #[test]
    fn operands_several_stages_read_at_the_same_point_are_cached() {
        let warp = Launch::PerWarp { block: 256 };
        let c = plan(&two_stages(100, false), warp).unwrap().unwrap();
        assert_eq!((c.iters, c.points, c.loads.len(), c.loads[0].first_stage), (4, 100, 1, 0));
        // Not cached: another launch, rows over 1024, an argument the kernel writes.
        assert_eq!(plan(&two_stages(100, false), Launch::PerBlock { block: 64 }).unwrap(), None);
        assert_eq!(plan(&two_stages(1100, false), warp).unwrap(), None);
        assert_eq!(plan(&two_stages(100, true), warp).unwrap(), None);
    }
}
