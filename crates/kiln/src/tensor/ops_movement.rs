//! Movement methods. Reshape, permute, expand and slice are views in eager mode (the CPU
//! runtime shares storage); pad, cat and index_select copy.

use super::{Repr, Tensor};
use crate::dispatch::dispatch;
use kiln_ir::{Error, Op, PadMode, Result, Shape, SliceAxis};

impl Tensor {
    /// Same elements with a new shape; one entry may be `-1` and is inferred from the others.
    pub fn reshape(&self, shape: &[i64]) -> Result<Tensor> {
        let dims = resolve_reshape(self.shape(), shape)?;
        dispatch(Op::Reshape(Shape::fixed(&dims)), &[self])
    }

    /// Reorders axes: axis `i` of the result is axis `perm[i]` of `self` (negative allowed).
    pub fn permute(&self, perm: &[i64]) -> Result<Tensor> {
        let perm = perm.iter().map(|&a| self.axis(a, "permute")).collect::<Result<Vec<_>>>()?;
        dispatch(Op::Permute(perm), &[self])
    }

    /// Swaps two axes.
    pub fn transpose(&self, a: i64, b: i64) -> Result<Tensor> {
        let (a, b) = (self.axis(a, "transpose")?, self.axis(b, "transpose")?);
        let mut perm: Vec<usize> = (0..self.rank()).collect();
        perm.swap(a, b);
        dispatch(Op::Permute(perm), &[self])
    }

    /// Swaps the last two axes; a tensor of rank 0 or 1 is returned as it is (as PyTorch).
    pub fn t(&self) -> Result<Tensor> {
        if self.rank() < 2 {
            return Ok(self.clone());
        }
        self.transpose(-2, -1)
    }

    /// Broadcasts to `shape` (size-1 dims stretch, new leading dims are added); a view.
    pub fn expand(&self, shape: &[usize]) -> Result<Tensor> {
        dispatch(Op::Expand(Shape::fixed(shape)), &[self])
    }

    /// The same as [`Tensor::expand`].
    pub fn broadcast_to(&self, shape: &[usize]) -> Result<Tensor> {
        self.expand(shape)
    }

    /// Inserts a size-1 axis at `axis` (in `-(rank+1)..=rank`).
    pub fn unsqueeze(&self, axis: i64) -> Result<Tensor> {
        let a = kiln_ir::normalize_axis(axis, self.rank() + 1, "unsqueeze")?;
        let mut dims = self.dims();
        dims.insert(a, 1);
        dispatch(Op::Reshape(Shape::fixed(&dims)), &[self])
    }

    /// Removes axis `axis` when its size is 1; otherwise returns `self` unchanged (as PyTorch).
    pub fn squeeze(&self, axis: i64) -> Result<Tensor> {
        let a = self.axis(axis, "squeeze")?;
        if self.shape()[a] != 1 {
            return Ok(self.clone());
        }
        let mut dims = self.dims();
        dims.remove(a);
        dispatch(Op::Reshape(Shape::fixed(&dims)), &[self])
    }

    /// Merges axes `start..=end` into one (a rank-0 tensor becomes `[1]`).
    pub fn flatten(&self, start: i64, end: i64) -> Result<Tensor> {
        if self.rank() == 0 {
            return dispatch(Op::Reshape(Shape::fixed(&[1])), &[self]);
        }
        let (s, e) = (self.axis(start, "flatten")?, self.axis(end, "flatten")?);
        if s > e {
            return Err(Error::Shape(format!(
                "flatten: start axis {start} comes after end axis {end} for shape {:?}",
                self.shape()
            )));
        }
        let d = self.shape();
        let mut dims = d[..s].to_vec();
        dims.push(d[s..=e].iter().product());
        dims.extend_from_slice(&d[e + 1..]);
        dispatch(Op::Reshape(Shape::fixed(&dims)), &[self])
    }

    /// Python `start:end:step` along `axis` (negative start/end count from the end and are
    /// clamped; `step` is non-zero and may be negative); a view.
    pub fn slice(&self, axis: i64, start: i64, end: i64, step: i64) -> Result<Tensor> {
        let a = self.axis(axis, "slice")?;
        if step == 0 {
            return Err(Error::Value(format!("slice: step must not be zero (shape {:?}, axis {axis})", self.shape())));
        }
        let mut axes = vec![SliceAxis::FULL; self.rank()];
        axes[a] = SliceAxis { start, end, step };
        dispatch(Op::Slice(axes), &[self])
    }

    /// Elements `start..start+len` along `axis`; errors when they run past the end. A view.
    pub fn narrow(&self, axis: i64, start: usize, len: usize) -> Result<Tensor> {
        let a = self.axis(axis, "narrow")?;
        let d = self.shape()[a];
        if start.checked_add(len).is_none_or(|e| e > d) {
            return Err(Error::Shape(format!(
                "narrow: range {start}..{start}+{len} exceeds dim {a} of size {d} (shape {:?})",
                self.shape()
            )));
        }
        let mut axes = vec![SliceAxis::FULL; self.rank()];
        axes[a] = SliceAxis { start: start as i64, end: (start + len) as i64, step: 1 };
        dispatch(Op::Slice(axes), &[self])
    }

    /// A row-major copy when the layout is not already contiguous (`self` otherwise). Traced
    /// values have no layout, so this is a no-op there and records nothing.
    pub fn contiguous(&self) -> Result<Tensor> {
        match self.repr() {
            Repr::Host(h) if !h.layout.is_contiguous() => Ok(Tensor::from_host(h.contiguous())),
            _ => Ok(self.clone()),
        }
    }

    /// Pads with `(before, after)` pairs for the last `pads.len()` axes, outermost first (one
    /// pair per axis pads every axis); the filled values follow `mode`.
    pub fn pad(&self, pads: &[(usize, usize)], mode: PadMode) -> Result<Tensor> {
        let r = self.rank();
        if pads.len() > r {
            return Err(Error::Shape(format!(
                "pad: {} (before, after) pairs for a tensor of shape {:?}",
                pads.len(),
                self.shape()
            )));
        }
        let mut all = vec![(0, 0); r - pads.len()];
        all.extend_from_slice(pads);
        dispatch(Op::Pad { pads: all, mode }, &[self])
    }

    /// Joins tensors of one dtype and equal dims (except `axis`) along `axis`.
    pub fn cat(tensors: &[&Tensor], axis: i64) -> Result<Tensor> {
        let Some(first) = tensors.first() else {
            return Err(Error::Value("cat: needs at least one tensor".into()));
        };
        let axis = first.axis(axis, "cat")?;
        dispatch(Op::Concat { axis }, tensors)
    }

    /// Splits into `n` views along `axis` of `ceil(dim / n)` elements each (the last may be
    /// smaller, and fewer than `n` come back when the dim is small, as PyTorch).
    pub fn chunk(&self, n: usize, axis: i64) -> Result<Vec<Tensor>> {
        let a = self.axis(axis, "chunk")?;
        if n == 0 {
            return Err(Error::Value(format!("chunk: number of chunks must be >= 1 (shape {:?})", self.shape())));
        }
        let d = self.shape()[a];
        if d == 0 {
            return Ok(vec![self.clone()]);
        }
        let size = d.div_ceil(n);
        (0..d).step_by(size).map(|s| self.narrow(a as i64, s, size.min(d - s))).collect()
    }

    /// Picks entries along `axis` by i64/i32 `indices` (ONNX Gather: the indices' dims replace
    /// `axis`; negative indices count from the end).
    pub fn index_select(&self, axis: i64, indices: &Tensor) -> Result<Tensor> {
        let axis = self.axis(axis, "index_select")?;
        dispatch(Op::Gather { axis }, &[self, indices])
    }
}

/// The dims a reshape to `spec` gives a tensor of `from` dims, inferring a single `-1`.
fn resolve_reshape(from: &[usize], spec: &[i64]) -> Result<Vec<usize>> {
    let numel: usize = from.iter().product();
    let bad = |why: &str| Error::Shape(format!("reshape: cannot reshape {from:?} ({numel} elements) to {spec:?}: {why}"));
    let mut infer_at = None;
    let mut known = 1usize;
    for (i, &d) in spec.iter().enumerate() {
        match d {
            -1 if infer_at.is_some() => return Err(bad("only one dim may be -1")),
            -1 => infer_at = Some(i),
            d if d < 0 => return Err(bad("dims must be >= 0 or -1")),
            d => known = known.checked_mul(d as usize).ok_or_else(|| bad("the size overflows"))?,
        }
    }
    let mut dims: Vec<usize> = spec.iter().map(|&d| d.max(0) as usize).collect();
    match infer_at {
        Some(i) => {
            if known == 0 {
                return Err(bad("the -1 dim is ambiguous when the other dims hold 0 elements"));
            }
            if !numel.is_multiple_of(known) {
                return Err(bad("the element count is not divisible by the other dims"));
            }
            dims[i] = numel / known;
        }
        None if known != numel => return Err(bad("the element counts differ")),
        None => {}
    }
    Ok(dims)
}
