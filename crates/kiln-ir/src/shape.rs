//! Shapes with fixed and symbolic dimensions, and NumPy broadcasting over them.

use crate::{Error, Result};
use std::fmt;
use std::sync::Arc;

/// One dimension of a shape: a known size, or a named symbol (`batch`, `seq`) whose value
/// is only known when the graph runs. Two symbolic dims are equal when their names are.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Dim {
    Fixed(usize),
    Sym(Arc<str>),
}

impl Dim {
    /// A symbolic dim with the given name.
    pub fn sym(name: &str) -> Dim {
        Dim::Sym(Arc::from(name))
    }

    /// The size, when known.
    pub fn fixed(&self) -> Option<usize> {
        match self {
            Dim::Fixed(n) => Some(*n),
            Dim::Sym(_) => None,
        }
    }
}

impl From<usize> for Dim {
    fn from(n: usize) -> Self {
        Dim::Fixed(n)
    }
}

impl fmt::Display for Dim {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Dim::Fixed(n) => write!(f, "{n}"),
            Dim::Sym(s) => f.write_str(s),
        }
    }
}

/// The shape of a tensor: one [`Dim`] per axis, outermost first. A scalar has rank 0.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Default, PartialOrd, Ord)]
pub struct Shape(pub Vec<Dim>);

impl Shape {
    /// A shape whose dims are all known.
    pub fn fixed(dims: &[usize]) -> Shape {
        Shape(dims.iter().map(|&d| Dim::Fixed(d)).collect())
    }

    /// The scalar shape (rank 0).
    pub fn scalar() -> Shape {
        Shape(Vec::new())
    }

    /// This shape with every symbolic dim replaced by its size in `syms`; `what` names the
    /// op or value in the error for a symbol `syms` does not bind.
    pub fn bind(&self, syms: &std::collections::HashMap<String, usize>, what: &str) -> Result<Shape> {
        self.0
            .iter()
            .map(|d| match d {
                Dim::Fixed(n) => Ok(Dim::Fixed(*n)),
                Dim::Sym(name) => syms.get(&**name).map(|&n| Dim::Fixed(n)).ok_or_else(|| {
                    Error::Shape(format!("{what}: symbolic dim {name} is not bound by any input"))
                }),
            })
            .collect::<Result<Vec<_>>>()
            .map(Shape)
    }

    /// Number of axes.
    pub fn rank(&self) -> usize {
        self.0.len()
    }

    /// The dims as sizes, when every dim is known.
    pub fn as_fixed(&self) -> Option<Vec<usize>> {
        self.0.iter().map(Dim::fixed).collect()
    }

    /// True when no dim is symbolic.
    pub fn is_fixed(&self) -> bool {
        self.0.iter().all(|d| d.fixed().is_some())
    }

    /// Number of elements, when every dim is known.
    pub fn numel(&self) -> Option<usize> {
        self.as_fixed().map(|d| d.iter().product())
    }

    /// The dims.
    pub fn dims(&self) -> &[Dim] {
        &self.0
    }

    /// Turns a possibly negative axis (`-1` = last) into an index, or an error naming `op`.
    pub fn axis(&self, axis: i64, op: &str) -> Result<usize> {
        normalize_axis(axis, self.rank(), op)
    }
}

impl From<&[usize]> for Shape {
    fn from(d: &[usize]) -> Self {
        Shape::fixed(d)
    }
}

impl From<Vec<usize>> for Shape {
    fn from(d: Vec<usize>) -> Self {
        Shape::fixed(&d)
    }
}

impl fmt::Display for Shape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[")?;
        for (i, d) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{d}")?;
        }
        f.write_str("]")
    }
}

/// Turns a possibly negative axis into an index in `0..rank`; the error names `op`.
pub fn normalize_axis(axis: i64, rank: usize, op: &str) -> Result<usize> {
    let r = rank as i64;
    let a = if axis < 0 { axis + r } else { axis };
    if a < 0 || a >= r {
        return Err(Error::Shape(format!(
            "{op}: axis {axis} is out of range for a tensor of rank {rank}"
        )));
    }
    Ok(a as usize)
}

/// The NumPy broadcast of two shapes (right-aligned; a dim of 1 stretches). The error names `op`
/// and both shapes.
pub fn broadcast(a: &Shape, b: &Shape, op: &str) -> Result<Shape> {
    let rank = a.rank().max(b.rank());
    let mut out = Vec::with_capacity(rank);
    for i in 0..rank {
        let da = dim_from_right(a, rank - 1 - i);
        let db = dim_from_right(b, rank - 1 - i);
        let d = match (&da, &db) {
            (Dim::Fixed(1), d) | (d, Dim::Fixed(1)) => d.clone(),
            (x, y) if x == y => x.clone(),
            _ => {
                return Err(Error::Shape(format!(
                    "{op}: shapes {a} and {b} cannot be broadcast together (dim {da} vs {db})"
                )));
            }
        };
        out.push(d);
    }
    Ok(Shape(out))
}

/// The dim `from_right` places from the end, or 1 past the start (for broadcasting).
fn dim_from_right(s: &Shape, from_right: usize) -> Dim {
    if from_right < s.rank() {
        s.0[s.rank() - 1 - from_right].clone()
    } else {
        Dim::Fixed(1)
    }
}

/// The NumPy broadcast of concrete shapes.
pub fn broadcast_fixed(a: &[usize], b: &[usize], op: &str) -> Result<Vec<usize>> {
    let s = broadcast(&Shape::fixed(a), &Shape::fixed(b), op)?;
    Ok(s.as_fixed().unwrap_or_default())
}
