//! Integer index expressions over loop variables: how a kernel turns its loop counters into
//! an element offset. Views (reshape, permute, expand, slice) compose into these instead of
//! copying. The constructors simplify as they build (constants fold, `x*1`, `x+0`, `x*0`), so
//! a contiguous access stays `v0*s0 + v1*s1 + ...`.

use super::VarId;

/// An index expression. Variables are non-negative, so `Div` and `Mod` by a positive constant
/// are floor division and remainder (C's `/` and `%` on non-negative values).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Idx {
    Var(VarId),
    Const(i64),
    /// Sum of terms (at least two, none a `Const(0)`).
    Add(Vec<Idx>),
    /// `x * c`, `c` not 0 or 1.
    Mul(Box<Idx>, i64),
    /// `x / c`, `c > 1`, `x` non-negative.
    Div(Box<Idx>, i64),
    /// `x % c`, `c > 1`, `x` non-negative.
    Mod(Box<Idx>, i64),
}

impl Idx {
    /// The loop variable `v`.
    pub fn var(v: VarId) -> Idx {
        Idx::Var(v)
    }

    /// `self + other`, flattening sums and folding constants.
    pub fn add(self, other: Idx) -> Idx {
        let mut terms = Vec::new();
        let mut konst = 0i64;
        for t in [self, other] {
            match t {
                Idx::Add(ts) => {
                    for t in ts {
                        match t {
                            Idx::Const(c) => konst += c,
                            t => terms.push(t),
                        }
                    }
                }
                Idx::Const(c) => konst += c,
                t => terms.push(t),
            }
        }
        if konst != 0 {
            terms.push(Idx::Const(konst));
        }
        match terms.len() {
            0 => Idx::Const(0),
            1 => terms.pop().unwrap_or(Idx::Const(0)),
            _ => Idx::Add(terms),
        }
    }

    /// `self * c`.
    pub fn mul(self, c: i64) -> Idx {
        match (self, c) {
            (_, 0) => Idx::Const(0),
            (x, 1) => x,
            (Idx::Const(a), c) => Idx::Const(a * c),
            (Idx::Mul(x, a), c) => Idx::Mul(x, a * c),
            (Idx::Add(ts), c) => ts.into_iter().fold(Idx::Const(0), |acc, t| acc.add(t.mul(c))),
            (x, c) => Idx::Mul(Box::new(x), c),
        }
    }

    /// `self / c` for `c >= 1` (floor division of a non-negative value).
    pub fn div(self, c: i64) -> Idx {
        match (self, c) {
            (x, 1) => x,
            (Idx::Const(a), c) => Idx::Const(a.div_euclid(c)),
            (Idx::Mul(x, a), c) if a % c == 0 => x.mul(a / c),
            (x, c) => Idx::Div(Box::new(x), c),
        }
    }

    /// `self % c` for `c >= 1` (remainder of a non-negative value).
    pub fn rem(self, c: i64) -> Idx {
        match (self, c) {
            (_, 1) => Idx::Const(0),
            (Idx::Const(a), c) => Idx::Const(a.rem_euclid(c)),
            (Idx::Mul(_, a), c) if a % c == 0 => Idx::Const(0),
            (x, c) => Idx::Mod(Box::new(x), c),
        }
    }

    /// The value at the given variable assignment (`vars[v]` is variable `v`).
    pub fn eval(&self, vars: &[i64]) -> i64 {
        match self {
            Idx::Var(v) => vars[*v as usize],
            Idx::Const(c) => *c,
            Idx::Add(ts) => ts.iter().map(|t| t.eval(vars)).sum(),
            Idx::Mul(x, c) => x.eval(vars) * c,
            Idx::Div(x, c) => x.eval(vars).div_euclid(*c),
            Idx::Mod(x, c) => x.eval(vars).rem_euclid(*c),
        }
    }

    /// The expression as `sum(coef * var) + constant` when it has no `/` or `%`: each
    /// variable's coefficient (zero ones included when terms cancel) and the constant.
    pub fn affine(&self) -> Option<(std::collections::HashMap<VarId, i64>, i64)> {
        fn walk(i: &Idx, scale: i64, coefs: &mut std::collections::HashMap<VarId, i64>) -> Option<i64> {
            match i {
                Idx::Var(v) => {
                    let c = coefs.entry(*v).or_insert(0);
                    *c = c.checked_add(scale)?;
                    Some(0)
                }
                Idx::Const(c) => c.checked_mul(scale),
                Idx::Add(terms) => terms.iter().try_fold(0i64, |acc, t| acc.checked_add(walk(t, scale, coefs)?)),
                Idx::Mul(x, c) => walk(x, scale.checked_mul(*c)?, coefs),
                Idx::Div(..) | Idx::Mod(..) => None,
            }
        }
        let mut coefs = std::collections::HashMap::new();
        let konst = walk(self, 1, &mut coefs)?;
        Some((coefs, konst))
    }

    /// The expression with each variable `v` renamed `f(v)`.
    pub fn rename(&self, f: &impl Fn(VarId) -> VarId) -> Idx {
        match self {
            Idx::Var(v) => Idx::Var(f(*v)),
            Idx::Const(c) => Idx::Const(*c),
            Idx::Add(ts) => Idx::Add(ts.iter().map(|t| t.rename(f)).collect()),
            Idx::Mul(x, c) => Idx::Mul(Box::new(x.rename(f)), *c),
            Idx::Div(x, c) => Idx::Div(Box::new(x.rename(f)), *c),
            Idx::Mod(x, c) => Idx::Mod(Box::new(x.rename(f)), *c),
        }
    }

    /// True when the expression mentions variable `v`.
    pub fn uses(&self, v: VarId) -> bool {
        match self {
            Idx::Var(w) => *w == v,
            Idx::Const(_) => false,
            Idx::Add(ts) => ts.iter().any(|t| t.uses(v)),
            Idx::Mul(x, _) | Idx::Div(x, _) | Idx::Mod(x, _) => x.uses(v),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn affine_forms_give_coefficients_and_constant() {
        let (a, b) = (Idx::var(0), Idx::var(1));
        let e = a.clone().mul(12).add(b.clone().mul(3)).add(Idx::Const(5)).add(a.clone().mul(2));
        let (c, k) = e.affine().unwrap();
        assert_eq!((c[&0], c[&1], k), (14, 3, 5));
        assert!(a.clone().rem(4).add(b.clone()).affine().is_none());
        assert!(b.div(2).affine().is_none());
        assert_eq!(Idx::Const(7).affine().unwrap().1, 7);
    }

    #[test]
    fn rename_maps_every_variable() {
        let e = Idx::var(0).mul(12).add(Idx::var(1).rem(5)).add(Idx::Const(3));
        let r = e.rename(&|v| v + 10);
        assert!(r.uses(10) && r.uses(11) && !r.uses(0) && !r.uses(1));
        assert_eq!(r.eval(&[0; 10].iter().chain(&[2, 7]).copied().collect::<Vec<i64>>()), e.eval(&[2, 7]));
    }

    #[test]
    fn constructors_simplify_and_eval_matches() {
        let (a, b) = (Idx::var(0), Idx::var(1));
        let e = a.clone().mul(12).add(b.clone().mul(1)).add(Idx::Const(0));
        assert_eq!(e, Idx::Add(vec![Idx::Mul(Box::new(Idx::Var(0)), 12), Idx::Var(1)]));
        assert_eq!(e.eval(&[2, 5]), 29);
        // Reshape of a contiguous [2,12] to [24] and back: (i/12, i%12).
        let flat = Idx::var(0);
        assert_eq!(flat.clone().div(12).eval(&[29]), 2);
        assert_eq!(flat.rem(12).eval(&[29]), 5);
        assert_eq!(a.clone().mul(4).div(2), Idx::Mul(Box::new(Idx::Var(0)), 2));
        assert_eq!(a.clone().mul(4).rem(2), Idx::Const(0));
        assert_eq!(Idx::Const(3).add(Idx::Const(-3)), Idx::Const(0));
        assert!(e.uses(1) && !e.uses(2));
    }
}
