//! Guards: what a compiled plan assumes about its inputs. A plan is reused only while every
//! input has the guarded dtype, device, rank and sizes; a dim marked dynamic accepts any size.
//!
//! Strides are not guarded: a compiled plan copies non-contiguous inputs to dense ones before
//! it runs (`Executable::run`), so any layout gives the same values (a copy costs time, not
//! correctness).

use crate::{DType, Device, Tensor};
use std::fmt;

/// What one dim of an input must be.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DimGuard {
    /// Exactly this size.
    Exact(usize),
    /// Any size (a dynamic dim).
    Dynamic,
}

/// What one input must be.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InputGuard {
    pub dtype: DType,
    pub device: Device,
    pub dims: Vec<DimGuard>,
}

/// The guards of one cache entry: one per input, in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Guard {
    pub inputs: Vec<InputGuard>,
}

impl Guard {
    /// Guards that hold for `xs`, with the dims `dynamic(input, dim)` says dynamic.
    pub(crate) fn new(xs: &[Tensor], dynamic: impl Fn(usize, usize) -> bool) -> Guard {
        let inputs = xs
            .iter()
            .enumerate()
            .map(|(i, x)| InputGuard {
                dtype: x.dtype(),
                device: x.device(),
                dims: x
                    .shape()
                    .iter()
                    .enumerate()
                    .map(|(d, &n)| if dynamic(i, d) { DimGuard::Dynamic } else { DimGuard::Exact(n) })
                    .collect(),
            })
            .collect();
        Guard { inputs }
    }

    /// True when every guard holds for `xs` (the warm path: no allocation).
    pub(crate) fn holds(&self, xs: &[Tensor]) -> bool {
        self.inputs.len() == xs.len()
            && self.inputs.iter().zip(xs).all(|(g, x)| {
                g.dtype == x.dtype()
                    && g.device == x.device()
                    && g.dims.len() == x.rank()
                    && g.dims.iter().zip(x.shape()).all(|(d, &n)| matches!(d, DimGuard::Dynamic) || *d == DimGuard::Exact(n))
            })
    }

    /// Why the guards fail for `xs` (every failing guard), or `None` when they hold.
    pub(crate) fn failures(&self, xs: &[Tensor]) -> Option<String> {
        if self.inputs.len() != xs.len() {
            return Some(format!("{} inputs, expected {}", xs.len(), self.inputs.len()));
        }
        let mut why = Vec::new();
        for (i, (g, x)) in self.inputs.iter().zip(xs).enumerate() {
            if g.dtype != x.dtype() {
                why.push(format!("input {i}: dtype {} (expected {})", x.dtype(), g.dtype));
            }
            if g.device != x.device() {
                why.push(format!("input {i}: device {} (expected {})", x.device(), g.device));
            }
            if g.dims.len() != x.rank() {
                why.push(format!("input {i}: rank {} (expected {})", x.rank(), g.dims.len()));
                continue;
            }
            for (d, (want, &n)) in g.dims.iter().zip(x.shape()).enumerate() {
                if let DimGuard::Exact(m) = want
                    && *m != n
                {
                    why.push(format!("input {i} dim {d}: size {n} (expected {m})"));
                }
            }
        }
        (!why.is_empty()).then(|| why.join("; "))
    }

    /// Automatic dynamic shapes: when `xs` differ from these guards only in sizes, the same
    /// guards with those dims dynamic.
    pub(crate) fn generalise(&self, xs: &[Tensor]) -> Option<Guard> {
        let same_kind = self.inputs.len() == xs.len()
            && self.inputs.iter().zip(xs).all(|(g, x)| g.dtype == x.dtype() && g.device == x.device() && g.dims.len() == x.rank());
        if !same_kind {
            return None;
        }
        let inputs = self
            .inputs
            .iter()
            .zip(xs)
            .map(|(g, x)| InputGuard {
                dims: g
                    .dims
                    .iter()
                    .zip(x.shape())
                    .map(|(d, &n)| if *d == DimGuard::Exact(n) { *d } else { DimGuard::Dynamic })
                    .collect(),
                ..g.clone()
            })
            .collect();
        Some(Guard { inputs })
    }

    /// True when some dim is dynamic.
    pub fn is_dynamic(&self) -> bool {
        self.inputs.iter().any(|g| g.dims.contains(&DimGuard::Dynamic))
    }
}

impl fmt::Display for InputGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let dims: Vec<String> = self
            .dims
            .iter()
            .map(|d| match d {
                DimGuard::Exact(n) => n.to_string(),
                DimGuard::Dynamic => "*".to_string(),
            })
            .collect();
        write!(f, "{}[{}] on {}", self.dtype, dims.join(", "), self.device)
    }
}

impl fmt::Display for Guard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ins: Vec<String> = self.inputs.iter().enumerate().map(|(i, g)| format!("input {i}: {g}")).collect();
        write!(f, "{}", ins.join(", "))?;
        if self.is_dynamic() {
            write!(f, " (* = dynamic)")?;
        }
        Ok(())
    }
}
