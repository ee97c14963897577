//! Vectorised pointwise kernels: each thread takes [`VECTOR`] consecutive points of the
//! innermost outer loop, and every operand read with unit stride along that loop (and the
//! result) moves as one 16-byte (f32) or 8-byte (f16 / bf16) access instead of four, so a
//! memory-bound epilogue issues a quarter of the memory instructions. Operands read any other
//! way (broadcast, transposed) are read per point as before. The values are those of the scalar
//! kernel: each lane computes its point's expression unchanged.

use super::Launch;
use kiln_ir::DType;
use kiln_sched::kernel::{Expr, Idx, Kernel, Stage, VarId};

/// Consecutive points per thread of a vectorised kernel.
pub const VECTOR: u32 = 4;

/// The lanes of a CUDA vector type, in memory order.
pub(crate) const LANES: [&str; VECTOR as usize] = ["x", "y", "z", "w"];

/// How a pointwise kernel is vectorised.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Vectorised {
    /// The innermost outer loop, whose points a thread takes [`VECTOR`] at a time.
    pub var: VarId,
    /// The loads that move as vectors (argument, index), each once.
    pub loads: Vec<(u32, Idx)>,
    /// The vectorised loop is the first outer loop: a launch range that does not begin at a
    /// multiple of [`VECTOR`] takes the per-point path (its vectors would be misaligned).
    pub check_begin: bool,
    /// Some lane reads the loop variable itself (a per-point load, an index value), so each
    /// lane declares its own.
    pub lanes_read_var: bool,
}

/// The CUDA vector type of [`VECTOR`] elements of `dtype`'s storage, when it has one.
pub(crate) fn vector_type(dtype: DType) -> Option<&'static str> {
    match dtype {
        DType::F32 => Some("float4"),
        DType::F16 | DType::BF16 => Some("ushort4"),
        _ => None,
    }
}

/// Whether `index` steps by one along `var` and, at every multiple of [`VECTOR`] of `var`, is
/// itself a multiple of it (every other term and the constant are): the [`VECTOR`] elements a
/// thread reads are then one aligned vector (buffers start 64-byte aligned).
fn unit_aligned(index: &Idx, var: VarId) -> bool {
    let v = i64::from(VECTOR);
    let Some((coefs, konst)) = index.affine() else { return false };
    coefs.get(&var) == Some(&1) && konst % v == 0 && coefs.iter().all(|(x, c)| *x == var || c % v == 0)
}

/// How `k` (launched as `launch`) is vectorised, or `None`: a one-thread-per-point kernel with
/// one store and no inner loops, whose innermost outer loop's extent is a multiple of
/// [`VECTOR`] (or is the only loop), whose store is a unit-stride aligned vector of f32, f16 or
/// bf16, and without `Where` (a vector read is not guarded by a branch).
pub(crate) fn vectorise(k: &Kernel, launch: Launch) -> Option<Vectorised> {
    if !matches!(launch, Launch::PerThread { .. }) {
        return None;
    }
    let [Stage::Store { loops, arg, index, .. }] = k.stages.as_slice() else {
        return None;
    };
    let last = k.outer.last()?;
    let fits = if k.outer.len() > 1 { last.extent % VECTOR as usize == 0 } else { last.extent >= VECTOR as usize };
    if !loops.is_empty() || !fits || k.exprs.iter().any(|e| matches!(e.expr, Expr::Where { .. })) {
        return None;
    }
    vector_type(k.args.get(*arg as usize)?.dtype)?;
    if !unit_aligned(index, last.var) {
        return None;
    }
    let mut loads: Vec<(u32, Idx)> = Vec::new();
    for e in &k.exprs {
        if let Expr::Load { arg, index } = &e.expr
            && k.args.get(*arg as usize).is_some_and(|a| vector_type(a.dtype).is_some())
            && unit_aligned(index, last.var)
            && !loads.iter().any(|(a, i)| a == arg && i == index)
        {
            loads.push((*arg, index.clone()));
        }
    }
    let lanes_read_var = k.exprs.iter().any(|e| match &e.expr {
        Expr::Load { arg, index } => index.uses(last.var) && !loads.iter().any(|(a, i)| a == arg && i == index),
        Expr::Index(index) | Expr::InRange { index, .. } => index.uses(last.var),
        _ => false,
    });
    Some(Vectorised { var: last.var, loads, check_begin: k.outer.len() == 1, lanes_read_var })
}

#[cfg(test)]
mod tests {
    use super::*;
    use kiln_sched::kernel::{Arg, Loop};

    /// `out[i0 * 64 + i1] = in[load]` over `[rows, cols]`, of `dtype`.
    fn copy(dtype: DType, rows: usize, cols: usize, load: Idx) -> Kernel {
        let mut k = Kernel::new("k");
        k.args = vec![Arg { dtype, len: 1 << 20, written: false }, Arg { dtype, len: 1 << 20, written: true }];
        k.outer = vec![Loop { var: 0, extent: rows }, Loop { var: 1, extent: cols }];
        let v = k.push(Expr::Load { arg: 0, index: load }, dtype);
        k.stages = vec![Stage::Store { loops: vec![], arg: 1, index: Idx::var(0).mul(64).add(Idx::var(1)), value: v }];
        k
    }

    #[test]
    fn unit_stride_aligned_operands_move_as_vectors() {
        let t = Launch::PerThread { block: 256 };
        let dense = Idx::var(0).mul(64).add(Idx::var(1));
        let v = vectorise(&copy(DType::F32, 8, 64, dense.clone()), t).unwrap();
        assert_eq!((v.var, v.loads.len(), v.check_begin, v.lanes_read_var), (1, 1, false, false));
        assert!(vectorise(&copy(DType::BF16, 8, 64, dense.clone()), t).is_some());
        // A bias along the rows moves as a vector too.
        assert_eq!(vectorise(&copy(DType::F32, 8, 64, Idx::var(1)), t).unwrap().loads.len(), 1);
        // A transposed, broadcast or misaligned operand is read per point; the store still
        // vectorises.
        for per_point in [Idx::var(1).mul(8).add(Idx::var(0)), Idx::var(0), dense.clone().add(Idx::Const(2))] {
            let v = vectorise(&copy(DType::F32, 8, 64, per_point.clone()), t).unwrap();
            assert_eq!(v.loads, vec![]);
            assert_eq!(v.lanes_read_var, per_point.uses(1));
        }
        // Not vectorised: f64, rows of 62, another launch.
        assert!(vectorise(&copy(DType::F64, 8, 64, dense.clone()), t).is_none());
        assert!(vectorise(&copy(DType::F32, 8, 62, dense.clone()), t).is_none());
        assert!(vectorise(&copy(DType::F32, 8, 64, dense), Launch::PerBlock { block: 64 }).is_none());
    }
}
