//! Strided layouts: how a tensor's logical indices map to places in its storage. Views
//! (permute, expand, slice, reshape of contiguous data) only change the layout, never the data.

use crate::{Error, Result};

/// Shape, strides (in elements, may be 0 for broadcast or negative for reversed slices) and
/// the offset of element `[0, 0, ...]` in the storage.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Layout {
    pub shape: Vec<usize>,
    pub strides: Vec<isize>,
    pub offset: usize,
}

/// Row-major strides of a contiguous tensor of `shape`.
pub fn contiguous_strides(shape: &[usize]) -> Vec<isize> {
    let mut strides = vec![0isize; shape.len()];
    let mut acc = 1isize;
    for i in (0..shape.len()).rev() {
        strides[i] = acc;
        acc *= shape[i].max(1) as isize;
    }
    strides
}

impl Layout {
    /// The row-major contiguous layout of `shape`, starting at offset 0.
    pub fn contiguous(shape: &[usize]) -> Layout {
        Layout { shape: shape.to_vec(), strides: contiguous_strides(shape), offset: 0 }
    }

    /// Number of axes.
    pub fn rank(&self) -> usize {
        self.shape.len()
    }

    /// Number of elements.
    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }

    /// True when the elements are stored row-major without gaps, starting at `offset`
    /// (size-1 dims may have any stride).
    pub fn is_contiguous(&self) -> bool {
        if self.shape.contains(&0) {
            // No element is ever addressed, so any strides describe a dense (empty) tensor.
            return true;
        }
        let mut expected = 1isize;
        for i in (0..self.rank()).rev() {
            if self.shape[i] == 1 {
                continue;
            }
            if self.strides[i] != expected {
                return false;
            }
            expected *= self.shape[i] as isize;
        }
        true
    }

    /// Storage index of the element at `index` (one entry per axis).
    pub fn offset_of(&self, index: &[usize]) -> usize {
        let mut off = self.offset as isize;
        for (i, s) in index.iter().zip(&self.strides) {
            off += *i as isize * s;
        }
        off as usize
    }

    /// Calls `f` with the storage index of every element, in row-major logical order.
    pub fn for_each_offset(&self, mut f: impl FnMut(usize)) {
        let n = self.numel();
        if n == 0 {
            return;
        }
        let rank = self.rank();
        if rank == 0 {
            f(self.offset);
            return;
        }
        // The innermost axis runs in a tight loop; the outer axes advance like an odometer.
        let inner = self.shape[rank - 1];
        let inner_stride = self.strides[rank - 1];
        let mut idx = vec![0usize; rank - 1];
        let mut base = self.offset as isize;
        loop {
            let mut off = base;
            for _ in 0..inner {
                f(off as usize);
                off += inner_stride;
            }
            // advance the odometer over the outer axes
            let mut axis = rank - 1;
            loop {
                if axis == 0 {
                    return;
                }
                axis -= 1;
                idx[axis] += 1;
                base += self.strides[axis];
                if idx[axis] < self.shape[axis] {
                    break;
                }
                base -= self.strides[axis] * self.shape[axis] as isize;
                idx[axis] = 0;
            }
        }
    }

    /// The elements this layout reaches in `src`, in row-major logical order: the dense copy
    /// of a view. Rows with a unit inner stride are copied whole; otherwise the last two axes
    /// are copied in square tiles, so a transposed matrix is read a cache line at a time
    /// instead of one element per line.
    pub fn gather<T: Copy + Send + Sync>(&self, src: &[T]) -> Vec<T> {
        let n = self.numel();
        let rank = self.rank();
        if n == 0 {
            return Vec::new();
        }
        if rank < 2 || self.strides[rank - 1] == 1 {
            let mut out = Vec::with_capacity(n);
            if rank == 0 {
                out.push(src[self.offset]);
                return out;
            }
            let (inner, stride) = (self.shape[rank - 1], self.strides[rank - 1]);
            self.outer(1).for_each_offset(|start| {
                if stride == 1 {
                    out.extend_from_slice(&src[start..start + inner]);
                } else {
                    out.extend((0..inner).map(|i| src[(start as isize + i as isize * stride) as usize]));
                }
            });
            return out;
        }
        let (rows, cols) = (self.shape[rank - 2], self.shape[rank - 1]);
        let (sr, sc) = (self.strides[rank - 2], self.strides[rank - 1]);
        let mut out = vec![src[self.offset]; n];
        let plane_len = rows * cols;
        let bases = self.outer(2).offsets();
        // Big copies (prepacked weights, transposed activations) use every core, spawning
        // once: whole planes per thread when there are enough of them, else bands of rows.
        let threads = if n >= 1 << 20 {
            std::thread::available_parallelism().map_or(1, |t| t.get()).min(8)
        } else {
            1
        };
        let planes = |bases: &[usize], dst: &mut [T]| {
            for (&base, plane) in bases.iter().zip(dst.chunks_exact_mut(plane_len)) {
                tile_copy(src, base as isize, sr, sc, cols, plane);
            }
        };
        if threads == 1 {
            planes(&bases, &mut out);
        } else if bases.len() >= threads {
            let per = bases.len().div_ceil(threads);
            std::thread::scope(|s| {
                for (b, dst) in bases.chunks(per).zip(out.chunks_mut(per * plane_len)) {
                    s.spawn(move || planes(b, dst));
                }
            });
        } else {
            let band = rows.div_ceil(threads).max(1);
            std::thread::scope(|s| {
                for (&base, plane) in bases.iter().zip(out.chunks_exact_mut(plane_len)) {
                    for (b, dst) in plane.chunks_mut(band * cols).enumerate() {
                        s.spawn(move || tile_copy(src, base as isize + (b * band) as isize * sr, sr, sc, cols, dst));
                    }
                }
            });
        }
        out
    }

    /// The layout of the first `rank - inner` axes (same offset): one storage index per
    /// block of the `inner` innermost axes.
    fn outer(&self, inner: usize) -> Layout {
        let r = self.rank() - inner;
        Layout { shape: self.shape[..r].to_vec(), strides: self.strides[..r].to_vec(), offset: self.offset }
    }

    /// The storage indices of every element, in row-major logical order.
    pub fn offsets(&self) -> Vec<usize> {
        let mut v = Vec::with_capacity(self.numel());
        self.for_each_offset(|o| v.push(o));
        v
    }

    /// Reorders the axes: axis `i` of the result is axis `perm[i]` of `self`.
    pub fn permute(&self, perm: &[usize]) -> Result<Layout> {
        check_perm(perm, self.rank())?;
        Ok(Layout {
            shape: perm.iter().map(|&p| self.shape[p]).collect(),
            strides: perm.iter().map(|&p| self.strides[p]).collect(),
            offset: self.offset,
        })
    }

    /// Broadcasts to `shape` (NumPy rules: right-aligned, size-1 dims stretch with stride 0).
    pub fn broadcast_to(&self, shape: &[usize]) -> Result<Layout> {
        if shape.len() < self.rank() {
            return Err(Error::Shape(format!(
                "expand: cannot broadcast shape {:?} to the lower-rank shape {:?}",
                self.shape, shape
            )));
        }
        let lead = shape.len() - self.rank();
        let mut strides = vec![0isize; shape.len()];
        for i in 0..self.rank() {
            let (from, to) = (self.shape[i], shape[lead + i]);
            strides[lead + i] = if from == to {
                self.strides[i]
            } else if from == 1 {
                0
            } else {
                return Err(Error::Shape(format!(
                    "expand: cannot broadcast shape {:?} to {:?} (dim {i}: {from} vs {to})",
                    self.shape, shape
                )));
            };
        }
        Ok(Layout { shape: shape.to_vec(), strides, offset: self.offset })
    }

    /// Takes elements `start, start+step, ...` (before `end`) along `axis`. `start`/`end` are
    /// already clamped indices; a negative `step` walks backwards from `start` down to past `end`.
    pub fn slice(&self, axis: usize, start: i64, end: i64, step: i64) -> Result<Layout> {
        if axis >= self.rank() || step == 0 {
            return Err(Error::Shape(format!(
                "slice: axis {axis} / step {step} invalid for shape {:?}",
                self.shape
            )));
        }
        // Written with unsigned division so that steps near the i64 extremes cannot overflow.
        let span = if step > 0 { end.saturating_sub(start) } else { start.saturating_sub(end) };
        let len = if span <= 0 { 0 } else { ((span as u64 - 1) / step.unsigned_abs() + 1) as usize };
        let mut out = self.clone();
        if len > 0 {
            out.offset = (self.offset as isize + start as isize * self.strides[axis]) as usize;
        }
        out.shape[axis] = len;
        // With at most one element the stride is never used (and `stride * step` could overflow).
        if len > 1 {
            out.strides[axis] = self.strides[axis] * step as isize;
        }
        Ok(out)
    }

    /// A view of the same elements with a new shape, when the strides allow it without a copy
    /// (always for contiguous layouts, and for non-contiguous ones as PyTorch's `view` allows);
    /// `None` when a copy is needed.
    pub fn reshape(&self, shape: &[usize]) -> Option<Layout> {
        if shape.iter().product::<usize>() != self.numel() {
            return None;
        }
        if self.is_contiguous() {
            return Some(Layout {
                shape: shape.to_vec(),
                strides: contiguous_strides(shape),
                offset: self.offset,
            });
        }
        let strides = view_strides(&self.shape, &self.strides, shape)?;
        Some(Layout { shape: shape.to_vec(), strides, offset: self.offset })
    }
}

/// Strides that view a non-contiguous layout under `new_shape` without a copy, when they exist
/// (as PyTorch's `view`): the old axes are cut into chunks that are contiguous among themselves,
/// and each chunk must be covered by whole new axes. Adding or removing size-1 axes, and merging or
/// splitting axes within a chunk, always works. The element count is already known to match.
fn view_strides(old_shape: &[usize], old_strides: &[isize], new_shape: &[usize]) -> Option<Vec<isize>> {
    let mut new_strides = vec![0isize; new_shape.len()];
    if old_shape.is_empty() {
        // A scalar: every new axis has size 1, any stride addresses the one element.
        return Some(new_strides);
    }
    let mut view_d = new_shape.len() as isize - 1;
    let mut chunk_base_stride = *old_strides.last()?;
    let (mut tensor_numel, mut view_numel) = (1usize, 1usize);
    for tensor_d in (0..old_shape.len()).rev() {
        tensor_numel *= old_shape[tensor_d];
        let chunk_ends = tensor_d == 0
            || (old_shape[tensor_d - 1] != 1
                && old_strides[tensor_d - 1] != tensor_numel as isize * chunk_base_stride);
        if chunk_ends {
            while view_d >= 0 && (view_numel < tensor_numel || new_shape[view_d as usize] == 1) {
                new_strides[view_d as usize] = view_numel as isize * chunk_base_stride;
                view_numel *= new_shape[view_d as usize];
                view_d -= 1;
            }
            if view_numel != tensor_numel {
                return None;
            }
            if tensor_d > 0 {
                chunk_base_stride = old_strides[tensor_d - 1];
                tensor_numel = 1;
                view_numel = 1;
            }
        }
    }
    (view_d == -1).then_some(new_strides)
}

/// Checks that `perm` is a permutation of `0..rank`.
pub fn check_perm(perm: &[usize], rank: usize) -> Result<()> {
    let mut seen = vec![false; rank];
    if perm.len() != rank {
        return Err(Error::Shape(format!(
            "permute: permutation {perm:?} has {} entries for a tensor of rank {rank}",
            perm.len()
        )));
    }
    for &p in perm {
        if p >= rank || seen[p] {
            return Err(Error::Shape(format!(
                "permute: {perm:?} is not a permutation of 0..{rank}"
            )));
        }
        seen[p] = true;
    }
    Ok(())
}

/// Copies the `dst.len() / cols` rows of `cols` elements starting at storage index `base`
/// (row stride `sr`, column stride `sc`) into dense `dst`, in square tiles so that reads along
/// a column and writes along a row both stay in cache.
fn tile_copy<T: Copy>(src: &[T], base: isize, sr: isize, sc: isize, cols: usize, dst: &mut [T]) {
    const TILE: usize = 32;
    let rows = dst.len() / cols.max(1);
    for i0 in (0..rows).step_by(TILE) {
        for j0 in (0..cols).step_by(TILE) {
            let j1 = (j0 + TILE).min(cols);
            for i in i0..(i0 + TILE).min(rows) {
                let row = base + i as isize * sr;
                for (j, d) in (j0..j1).zip(&mut dst[i * cols + j0..i * cols + j1]) {
                    *d = src[(row + j as isize * sc) as usize];
                }
            }
        }
    }
}
