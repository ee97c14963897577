//! Index arithmetic with loop-variable bounds: the maps views induce (reshape, broadcast,
//! slice) and division / remainder that simplify when bounds allow, so that reshaping a
//! contiguous value back and forth leaves plain `v0*s0 + v1` indices.

use crate::kernel::{Idx, VarId};

/// Extents of a kernel's loop variables (`ext[v]`), for bounds.
pub(crate) struct Vars {
    pub ext: Vec<usize>,
}

impl Vars {
    /// A new variable running over `0..extent`.
    pub fn fresh(&mut self, extent: usize) -> VarId {
        self.ext.push(extent);
        self.ext.len() as VarId - 1
    }

    /// Inclusive bounds of `x` (an empty loop counts as `0..=0`).
    pub fn bounds(&self, x: &Idx) -> (i64, i64) {
        match x {
            Idx::Var(v) => (
                0,
                self.ext.get(*v as usize).map_or(0, |e| e.saturating_sub(1)) as i64,
            ),
            Idx::Const(c) => (*c, *c),
            Idx::Add(ts) => ts.iter().map(|t| self.bounds(t)).fold((0, 0), |a, b| {
                (a.0.saturating_add(b.0), a.1.saturating_add(b.1))
            }),
            Idx::Mul(t, c) => {
                let (lo, hi) = self.bounds(t);
                let (a, b) = (lo.saturating_mul(*c), hi.saturating_mul(*c));
                (a.min(b), a.max(b))
            }
            Idx::Div(t, c) => {
                let (lo, hi) = self.bounds(t);
                (lo.div_euclid(*c), hi.div_euclid(*c))
            }
            Idx::Mod(t, c) => {
                let (lo, hi) = self.bounds(t);
                if lo >= 0 && hi < *c {
                    (lo, hi)
                } else {
                    (0, c - 1)
                }
            }
        }
    }

    /// Splits `x` into terms that are multiples of `c` (returned divided by `c`) and the rest.
    fn split(&self, x: &Idx, c: i64) -> (Idx, Idx) {
        let terms: Vec<Idx> = match x {
            Idx::Add(ts) => ts.clone(),
            t => vec![t.clone()],
        };
        let (mut q, mut r) = (Idx::Const(0), Idx::Const(0));
        for t in terms {
            match &t {
                Idx::Const(k) if k % c == 0 => q = q.add(Idx::Const(k / c)),
                Idx::Mul(inner, k) if k % c == 0 => q = q.add((**inner).clone().mul(k / c)),
                _ => r = r.add(t),
            }
        }
        (q, r)
    }

    /// `x / c` (floor; `x` is non-negative), simplified when the non-multiple part of `x`
    /// stays within `0..c`.
    pub fn div(&self, x: Idx, c: i64) -> Idx {
        if c == 1 {
            return x;
        }
        if let Idx::Div(inner, a) = &x {
            return self.div((**inner).clone(), a.saturating_mul(c));
        }
        let (lo, hi) = self.bounds(&x);
        if lo >= 0 && hi < c {
            return Idx::Const(0);
        }
        let (q, r) = self.split(&x, c);
        let (rlo, rhi) = self.bounds(&r);
        if rlo >= 0 && rhi < c {
            return q;
        }
        x.div(c)
    }

    /// `x % c` (`x` non-negative), simplified likewise.
    pub fn rem(&self, x: Idx, c: i64) -> Idx {
        if c == 1 {
            return Idx::Const(0);
        }
        let (lo, hi) = self.bounds(&x);
        if lo >= 0 && hi < c {
            return x;
        }
        let (_, r) = self.split(&x, c);
        let (rlo, rhi) = self.bounds(&r);
        if rlo >= 0 && rhi < c {
            return r;
        }
        if rlo >= 0 {
            return r.rem(c);
        }
        x.rem(c)
    }
}

/// Row-major strides of `shape` (size-1 dims get stride 0: they are always at index 0).
pub(crate) fn strides(shape: &[usize]) -> Vec<i64> {
    let mut s = vec![0i64; shape.len()];
    let mut acc = 1i64;
    for d in (0..shape.len()).rev() {
        s[d] = if shape[d] == 1 { 0 } else { acc };
        acc = acc.saturating_mul(shape[d].max(1) as i64);
    }
    s
}

/// The flat row-major offset of `ix` in a dense value of `shape`.
pub(crate) fn linear(shape: &[usize], ix: &[Idx]) -> Idx {
    strides(shape)
        .iter()
        .zip(ix)
        .fold(Idx::Const(0), |acc, (&s, i)| acc.add(i.clone().mul(s)))
}

/// `flat` (an offset in `0..Π shape`) split into per-dim indices of `shape`. An empty
/// `shape` (a zero dim) has no points: its indices are never evaluated, so they are all 0.
pub(crate) fn delinearize(vars: &Vars, flat: &Idx, shape: &[usize]) -> Vec<Idx> {
    if shape.contains(&0) {
        return vec![Idx::Const(0); shape.len()];
    }
    let st = strides(shape);
    shape
        .iter()
        .enumerate()
        .map(|(d, &e)| {
            if e == 1 {
                return Idx::Const(0);
            }
            let q = vars.div(flat.clone(), st[d]);
            vars.rem(q, e as i64)
        })
        .collect()
}

/// Indices into the input of a reshape `from -> to`, given indices `ix` into its output.
/// Dims are matched in groups of equal element count, so a reshape that only splits, merges
/// or adds size-1 dims needs no division outside the group it touches.
pub(crate) fn reshape_index(vars: &Vars, ix: &[Idx], to: &[usize], from: &[usize]) -> Vec<Idx> {
    if from.contains(&0) || to.contains(&0) {
        return vec![Idx::Const(0); from.len()];
    }
    let mut out = Vec::with_capacity(from.len());
    let (mut i, mut j) = (0usize, 0usize);
    while i < from.len() || j < to.len() {
        // Size-1 dims on either side are index 0 and need no grouping.
        if i < from.len() && from[i] == 1 {
            out.push(Idx::Const(0));
            i += 1;
            continue;
        }
        if j < to.len() && to[j] == 1 {
            j += 1;
            continue;
        }
        let (i0, j0) = (i, j);
        let (mut pf, mut pt) = (1usize, 1usize);
        loop {
            if pf <= pt && i < from.len() {
                pf *= from[i];
                i += 1;
            } else if j < to.len() {
                pt *= to[j];
                j += 1;
            } else {
                break;
            }
            if pf == pt {
                break;
            }
        }
        // Trailing size-1 dims of the target belong to no group; skip them too.
        let group_to: Vec<usize> = to[j0..j].to_vec();
        let flat = linear(&group_to, &ix[j0..j]);
        let group_from = &from[i0..i];
        if group_from.len() == 1 {
            out.push(flat);
        } else {
            out.extend(delinearize(vars, &flat, group_from));
        }
    }
    out
}

/// Indices into an input of `in_shape` broadcast (NumPy, right-aligned) to `ix`.
pub(crate) fn broadcast_index(ix: &[Idx], in_shape: &[usize]) -> Vec<Idx> {
    let lead = ix.len().saturating_sub(in_shape.len());
    in_shape
        .iter()
        .enumerate()
        .map(|(k, &e)| {
            if e == 1 {
                Idx::Const(0)
            } else {
                ix.get(k + lead).cloned().unwrap_or(Idx::Const(0))
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all_points(ext: &[usize]) -> Vec<Vec<i64>> {
        let mut pts = vec![vec![]];
        for &e in ext {
            pts = pts
                .into_iter()
                .flat_map(|p| (0..e as i64).map(move |v| [p.clone(), vec![v]].concat()))
                .collect();
        }
        pts
    }

    #[test]
    fn reshape_index_matches_row_major_order() {
        for (from, to) in [
            (vec![2usize, 3, 4], vec![6usize, 4]),
            (vec![6, 4], vec![2, 3, 4]),
            (vec![2, 3, 4], vec![4, 6]),
            (vec![1, 6, 1], vec![3, 1, 2]),
            (vec![24], vec![2, 1, 3, 4]),
            (vec![4, 3, 2], vec![2, 12]),
        ] {
            let vars = Vars { ext: to.clone() };
            let ix: Vec<Idx> = (0..to.len() as u32)
                .map(|v| {
                    if to[v as usize] == 1 {
                        Idx::Const(0)
                    } else {
                        Idx::Var(v)
                    }
                })
                .collect();
            let inx = reshape_index(&vars, &ix, &to, &from);
            assert_eq!(inx.len(), from.len());
            let fs = strides(&from);
            let ts = strides(&to);
            for p in all_points(&to) {
                let flat_out: i64 = p.iter().zip(&ts).map(|(a, b)| a * b).sum();
                let flat_in: i64 = inx.iter().zip(&fs).map(|(i, s)| i.eval(&p) * s).sum();
                assert_eq!(flat_out, flat_in, "{from:?} -> {to:?} at {p:?}");
            }
        }
    }

    #[test]
    fn div_rem_simplify_with_bounds() {
        let vars = Vars { ext: vec![5, 7] };
        let x = Idx::var(0).mul(7).add(Idx::var(1));
        assert_eq!(vars.div(x.clone(), 7), Idx::var(0));
        assert_eq!(vars.rem(x.clone(), 7), Idx::var(1));
        assert_eq!(vars.div(Idx::var(1), 7), Idx::Const(0));
        // No simplification when the remainder part can reach the divisor.
        let y = Idx::var(0).mul(3).add(Idx::var(1));
        for p in all_points(&[5, 7]) {
            assert_eq!(vars.div(y.clone(), 3).eval(&p), y.eval(&p) / 3);
            assert_eq!(vars.rem(y.clone(), 3).eval(&p), y.eval(&p) % 3);
        }
    }
}
