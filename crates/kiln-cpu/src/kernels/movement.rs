//! Movement ops: views (reshape, permute, expand, slice) and copies (pad, concat).

use kiln_ir::{Element, Error, HostTensor, Op, PadMode, Result};

/// Reshape / Permute / Expand / Slice as a view of `x` when possible (reshape of a
/// non-contiguous tensor copies first); `shape` is the inferred output shape.
pub fn view(op: &Op, x: &HostTensor, shape: &[usize]) -> Result<HostTensor> {
    let layout = match op {
        Op::Reshape(_) => {
            if let Some(l) = x.layout.reshape(shape) {
                return Ok(x.with_layout(l));
            }
            let dense = x.contiguous();
            let l = dense.layout.reshape(shape).ok_or_else(|| {
                Error::Shape(format!("reshape: cannot reshape {:?} to {shape:?}", x.shape()))
            })?;
            return Ok(dense.with_layout(l));
        }
        Op::Permute(perm) => x.layout.permute(perm)?,
        Op::Expand(_) => x.layout.broadcast_to(shape)?,
        Op::Slice(axes) => {
            if axes.len() != x.layout.rank() {
                return Err(Error::Shape(format!(
                    "slice: {} slice ranges for a tensor of shape {:?}",
                    axes.len(),
                    x.shape()
                )));
            }
            let mut l = x.layout.clone();
            for (axis, s) in axes.iter().enumerate() {
                let (start, end, _) = s.resolve(l.shape[axis]);
                l = l.slice(axis, start, end, s.step)?;
            }
            l
        }
        _ => return Err(Error::Graph(format!("{} is not a view op", op.name()))),
    };
    if layout.shape != shape {
        return Err(Error::Shape(format!(
            "{}: view of {:?} has shape {:?}, inference said {shape:?}",
            op.name(),
            x.shape(),
            layout.shape
        )));
    }
    Ok(x.with_layout(layout))
}

/// Pads `x`; `shape` is the inferred output shape.
pub fn pad(x: &HostTensor, pads: &[(usize, usize)], mode: PadMode, shape: &[usize]) -> Result<HostTensor> {
    let in_shape = x.shape();
    if pads.len() != in_shape.len() || shape.len() != in_shape.len() {
        return Err(Error::Shape(format!(
            "pad: {} pad pairs for input {in_shape:?} (output {shape:?})",
            pads.len()
        )));
    }
    // For each axis, the input coordinate each output coordinate reads (None: the fill value).
    let maps = (0..in_shape.len())
        .map(|a| axis_map(in_shape[a], pads[a], mode, a))
        .collect::<Result<Vec<_>>>()?;
    if let Some(a) = (0..shape.len()).find(|&a| maps[a].len() != shape[a]) {
        return Err(Error::Shape(format!(
            "pad: input {in_shape:?} padded by {pads:?} does not give the output shape {shape:?} (axis {a})"
        )));
    }
    let numel: usize = shape.iter().product();
    let storage = kiln_ir::with_dtype!(x.dtype(), T, {
        let src = T::slice(&x.storage).ok_or_else(|| Error::DType(format!("pad: storage is not {}", x.dtype())))?;
        let fill = match mode {
            PadMode::Constant(v) => T::from_f64(v),
            PadMode::Reflect | PadMode::Edge => T::zero(),
        };
        let mut out: Vec<T> = Vec::with_capacity(numel);
        let strides = &x.layout.strides;
        match shape.split_last() {
            None => out.push(src[x.layout.offset]),
            Some((&last, outer_dims)) if numel > 0 => {
                let rows: usize = outer_dims.iter().product();
                let mut idx = vec![0usize; outer_dims.len()];
                for row in 0..rows {
                    // Row-major decomposition of `row` into the outer output coordinates.
                    let mut rem = row;
                    for a in (0..outer_dims.len()).rev() {
                        idx[a] = rem % outer_dims[a];
                        rem /= outer_dims[a];
                    }
                    let base = idx.iter().enumerate().try_fold(x.layout.offset as isize, |acc, (a, &i)| {
                        maps[a][i].map(|s| acc + s as isize * strides[a])
                    });
                    match base {
                        None => out.extend(std::iter::repeat_n(fill, last)),
                        Some(base) => {
                            let last_map = &maps[outer_dims.len()];
                            let stride = strides[outer_dims.len()];
                            out.extend(last_map.iter().map(|m| match m {
                                Some(s) => src[(base + *s as isize * stride) as usize],
                                None => fill,
                            }));
                        }
                    }
                }
            }
            Some(_) => {}
        }
        T::into_storage(out)
    });
    HostTensor::new(storage, shape)
}

/// The input coordinate read by each output coordinate of one padded axis of size `n`.
fn axis_map(n: usize, (before, after): (usize, usize), mode: PadMode, axis: usize) -> Result<Vec<Option<usize>>> {
    let len = n + before + after;
    let ni = n as i64;
    (0..len)
        .map(|o| {
            let p = o as i64 - before as i64;
            if (0..ni).contains(&p) {
                return Ok(Some(p as usize));
            }
            match mode {
                PadMode::Constant(_) => Ok(None),
                PadMode::Edge if n > 0 => Ok(Some(p.clamp(0, ni - 1) as usize)),
                PadMode::Reflect if n > 1 => {
                    // Mirror without repeating the edge: the pattern repeats every 2(n-1).
                    let period = 2 * (ni - 1);
                    let q = p.rem_euclid(period);
                    Ok(Some((if q >= ni { period - q } else { q }) as usize))
                }
                _ => Err(Error::Shape(format!(
                    "pad: {mode:?} padding ({before}, {after}) of axis {axis} needs a larger dim than {n}"
                ))),
            }
        })
        .collect()
}

/// Joins `inputs` along `axis`.
pub fn concat(inputs: &[&HostTensor], axis: usize, shape: &[usize]) -> Result<HostTensor> {
    let first = inputs.first().ok_or_else(|| Error::Graph("concat: needs at least one input".into()))?;
    let dtype = first.dtype();
    if axis >= shape.len() {
        return Err(Error::Shape(format!("concat: axis {axis} is out of range for output {shape:?}")));
    }
    let outer: usize = shape[..axis].iter().product();
    let row: usize = shape[axis..].iter().product();
    let numel = outer * row;
    let mut widths = Vec::with_capacity(inputs.len());
    for t in inputs {
        let s = t.shape();
        let ok = t.dtype() == dtype
            && s.len() == shape.len()
            && s[..axis] == shape[..axis]
            && s[axis + 1..] == shape[axis + 1..];
        if !ok {
            return Err(Error::Shape(format!(
                "concat: input {} {s:?} does not fit output {dtype} {shape:?} along axis {axis}",
                t.dtype()
            )));
        }
        widths.push(s[axis..].iter().product::<usize>());
    }
    if widths.iter().sum::<usize>() != row {
        return Err(Error::Shape(format!("concat: inputs do not add up to the output {shape:?} along axis {axis}")));
    }
    let storage = kiln_ir::with_dtype!(dtype, T, {
        let mut out: Vec<T> = vec![T::zero(); numel];
        // Each input fills a `w`-wide column band of the output seen as [outer, row].
        let mut col = 0;
        for (t, &w) in inputs.iter().zip(&widths) {
            if w > 0 {
                copy_band::<T>(t, &mut out, row, col, w)?;
            }
            col += w;
        }
        T::into_storage(out)
    });
    HostTensor::new(storage, shape)
}

/// Copies `t` (seen as `[outer, w]`) into columns `col..col + w` of `out` (seen as `[outer, row]`).
fn copy_band<T: Element>(t: &HostTensor, out: &mut [T], row: usize, col: usize, w: usize) -> Result<()> {
    let src = T::slice(&t.storage).ok_or_else(|| Error::DType(format!("concat: storage is not {}", T::DTYPE)))?;
    if t.layout.is_contiguous() {
        // Dense input: one block copy per output row.
        let data = &src[t.layout.offset..t.layout.offset + t.numel()];
        for (dst, blk) in out.chunks_mut(row).zip(data.chunks(w)) {
            dst[col..col + w].copy_from_slice(blk);
        }
    } else {
        let (mut r, mut c) = (0, 0);
        t.layout.for_each_offset(|o| {
            out[r * row + col + c] = src[o];
            c += 1;
            if c == w {
                c = 0;
                r += 1;
            }
        });
    }
    Ok(())
}
