//! Ops without a family of their own: BitCast, AffineGrid, TensorScatter, MaxUnpool, and the
//! ai.onnx.ml ops kiln runs (Binarizer, ArrayFeatureExtractor).

use crate::import::{Convert, Ctx, Val, attrs, one};
use crate::proto::NodeProto;
use crate::tensor::{dtype_from_onnx, onnx_type_name};
use kiln_ir::{
    BinaryOp, DType, Error, HostTensor, NodeId, Op, PadMode, Result, ScatterReduction, Shape,
    Storage, normalize_axis,
};

pub(super) fn lookup(op: &str) -> Option<Convert> {
    Some(match op {
        "BitCast" => bitcast,
        "AffineGrid" => affine_grid,
        "TensorScatter" => tensor_scatter,
        "MaxUnpool" => max_unpool,
        _ => return None,
    })
}

/// Converters of the `ai.onnx.ml` domain.
pub(super) fn lookup_ml(op: &str) -> Option<Convert> {
    Some(match op {
        "Binarizer" => binarizer,
        "ArrayFeatureExtractor" => array_feature_extractor,
        _ => return None,
    })
}

fn reshape(ctx: &mut Ctx, x: NodeId, dims: &[usize]) -> Result<NodeId> {
    ctx.add(Op::Reshape(Shape::fixed(dims)), &[x])
}

fn to_i64(ctx: &mut Ctx, x: NodeId) -> Result<NodeId> {
    if ctx.dtype(x) == DType::I64 {
        Ok(x)
    } else {
        ctx.add(Op::Cast(DType::I64), &[x])
    }
}

/// BitCast (opset 26): the bits of each element read as the `to` type, which must have the
/// input's size.
fn bitcast(ctx: &mut Ctx, node: &NodeProto) -> Result<Vec<Val>> {
    attrs::check_known(node, &["to"])?;
    let code = attrs::opt_int(node, "to")?
        .ok_or_else(|| Error::Value("BitCast needs the 'to' attribute".into()))?;
    let to = i32::try_from(code)
        .ok()
        .and_then(|c| dtype_from_onnx(c).ok())
        .ok_or_else(|| {
            Error::Unsupported(format!(
                "BitCast to {} (ONNX type {code}) is not supported: kiln has no such dtype",
                onnx_type_name(code as i32)
            ))
        })?;
    if to == DType::Bool {
        return Err(Error::Unsupported(
            "BitCast to bool is not supported (bytes other than 0 and 1 are not valid bools in kiln)".into(),
        ));
    }
    let x = ctx.input(node, 0)?;
    let from = ctx.dtype(x);
    if from.size_of() != to.size_of() {
        return Err(Error::DType(format!(
            "BitCast needs types of one size, but {from} has {} bytes and {to} {}",
            from.size_of(),
            to.size_of()
        )));
    }
    one(ctx.add(Op::BitCast(to), &[x])?)
}

/// AffineGrid (opset 20): `grid[n, d.., :] = theta[n] @ [x, y, (z,) 1]` where the base grid
/// holds the normalized coordinates of each output position (x along the last axis).
fn affine_grid(ctx: &mut Ctx, node: &NodeProto) -> Result<Vec<Val>> {
    attrs::check_known(node, &["align_corners"])?;
    let align = attrs::int(node, "align_corners", 0)? != 0;
    let theta = ctx.input(node, 0)?;
    let size = ctx
        .const_ints(node, 1, "size")?
        .ok_or_else(|| Error::Value("AffineGrid needs the size input".into()))?;
    let dtype = ctx.dtype(theta);
    if !dtype.is_float() {
        return Err(Error::DType(format!(
            "AffineGrid needs a float theta, got {dtype}"
        )));
    }
    let tshape = ctx.fixed_shape(theta, "AffineGrid")?;
    let k = size.len().saturating_sub(2);
    let spatial: Vec<usize> = size
        .iter()
        .skip(2)
        .map(|&s| {
            usize::try_from(s)
                .map_err(|_| Error::Value(format!("AffineGrid: negative size {size:?}")))
        })
        .collect::<Result<_>>()?;
    if !(k == 2 || k == 3)
        || tshape != [tshape[0], k, k + 1]
        || i64::try_from(tshape[0]).ok() != Some(size[0])
    {
        return Err(Error::Shape(format!(
            "AffineGrid needs theta [N, 2, 3] with size [N, C, H, W] or theta [N, 3, 4] with size [N, C, D, H, W], \
             got theta {tshape:?} and size {size:?}"
        )));
    }
    let coords = |n: usize| -> Vec<f64> {
        (0..n)
            .map(|i| match (align, n) {
                (true, 1) => -1.0,
                (true, _) => -1.0 + 2.0 * i as f64 / (n - 1) as f64,
                (false, _) => -1.0 + (2 * i + 1) as f64 / n as f64,
            })
            .collect()
    };
    let axes: Vec<Vec<f64>> = spatial.iter().map(|&n| coords(n)).collect();
    let points: usize = spatial.iter().product();
    // Row p of the base grid: the coordinates of position p, innermost axis first, then 1.
    let mut base = Vec::with_capacity(points * (k + 1));
    for p in 0..points {
        let mut rest = p;
        let mut idx = vec![0; k];
        for a in (0..k).rev() {
            idx[a] = rest % spatial[a];
            rest /= spatial[a];
        }
        base.extend((0..k).rev().map(|a| axes[a][idx[a]]));
        base.push(1.0);
    }
    let b = ctx.constant(HostTensor::new(Storage::F64(base), &[points, k + 1])?);
    let b = if dtype == DType::F64 {
        b
    } else {
        ctx.add(Op::Cast(dtype), &[b])?
    };
    let tt = ctx.add(Op::Permute(vec![0, 2, 1]), &[theta])?;
    let g = ctx.add(Op::MatMul, &[b, tt])?;
    let mut out = vec![tshape[0]];
    out.extend(&spatial);
    out.push(k);
    one(reshape(ctx, g, &out)?)
}

/// TensorScatter (opset 24): writes `update` into the cache along `axis` starting at
/// `write_indices[batch]` (0 when absent); `circular` wraps positions modulo the cache length.
fn tensor_scatter(ctx: &mut Ctx, node: &NodeProto) -> Result<Vec<Val>> {
    attrs::check_known(node, &["axis", "mode"])?;
    let cache = ctx.input(node, 0)?;
    let update = ctx.input(node, 1)?;
    let cshape = ctx.fixed_shape(cache, "TensorScatter")?;
    let ushape = ctx.fixed_shape(update, "TensorScatter")?;
    let r = cshape.len();
    let axis = normalize_axis(attrs::int(node, "axis", -2)?, r, "TensorScatter")?;
    let circular = match attrs::string(node, "mode")?.as_deref() {
        None | Some("linear") => false,
        Some("circular") => true,
        Some(m) => {
            return Err(Error::Unsupported(format!(
                "TensorScatter mode '{m}' (kiln has linear and circular)"
            )));
        }
    };
    let fits = ushape.len() == r
        && (0..r).all(|i| {
            if i == axis {
                ushape[i] <= cshape[i]
            } else {
                ushape[i] == cshape[i]
            }
        });
    if axis == 0 || !fits {
        return Err(Error::Shape(format!(
            "TensorScatter needs update {ushape:?} to match past_cache {cshape:?} except along axis {axis} \
             (not the batch axis 0), where it may be shorter"
        )));
    }
    let seq = ushape[axis];
    let mut along = vec![1; r];
    along[axis] = seq;
    let steps = ctx.constant(HostTensor::from_vec(
        (0..seq as i64).collect::<Vec<_>>(),
        &along,
    )?);
    let pos = match ctx.opt_input(node, 2)? {
        Some(w) => {
            let w = to_i64(ctx, w)?;
            let mut col = vec![1; r];
            col[0] = cshape[0];
            let w = reshape(ctx, w, &col)?;
            ctx.add(Op::Binary(BinaryOp::Add), &[w, steps])?
        }
        None => steps,
    };
    let pos = if circular {
        let len = ctx.scalar(DType::I64, cshape[axis] as f64)?;
        ctx.add(Op::Binary(BinaryOp::Mod), &[pos, len])?
    } else {
        pos
    };
    let idx = ctx.add(Op::Expand(Shape::fixed(&ushape)), &[pos])?;
    one(ctx.add(
        Op::ScatterElements {
            axis,
            reduction: ScatterReduction::None,
        },
        &[cache, idx, update],
    )?)
}

/// MaxUnpool: scatters X into zeros at the flat indices I of the unpooled shape
/// `(in - 1) * stride - pads + kernel`. With `output_shape`, that result is placed at the start
/// of a zero tensor of the given shape, as ONNX's reference and its test data do (the indices
/// index the inferred shape, not `output_shape`).
fn max_unpool(ctx: &mut Ctx, node: &NodeProto) -> Result<Vec<Val>> {
    attrs::check_known(node, &["kernel_shape", "pads", "strides"])?;
    let x = ctx.input(node, 0)?;
    let ind = ctx.input(node, 1)?;
    let xs = ctx.fixed_shape(x, "MaxUnpool")?;
    let is = ctx.fixed_shape(ind, "MaxUnpool")?;
    let kernel = attrs::ints(node, "kernel_shape")?
        .ok_or_else(|| Error::Value("MaxUnpool needs the kernel_shape attribute".into()))?;
    let k = kernel.len();
    if xs.len() != k + 2 || is != xs || !ctx.dtype(ind).is_int() {
        return Err(Error::Shape(format!(
            "MaxUnpool needs X [N, C, {k} spatial dims] and integer indices of the same shape, got X {xs:?} and \
             indices {} {is:?}",
            ctx.dtype(ind)
        )));
    }
    let strides = attrs::ints(node, "strides")?.unwrap_or_else(|| vec![1; k]);
    let pads = attrs::ints(node, "pads")?.unwrap_or_else(|| vec![0; 2 * k]);
    if strides.len() != k || pads.len() != 2 * k {
        return Err(Error::Value(format!(
            "MaxUnpool: strides {strides:?} and pads {pads:?} must have {k} and {} entries",
            2 * k
        )));
    }
    let mut inferred = xs[..2].to_vec();
    for d in 0..k {
        let n = (xs[d + 2] as i64 - 1) * strides[d] - pads[d] - pads[k + d] + kernel[d];
        let n = usize::try_from(n).map_err(|_| {
            Error::Value(format!(
                "MaxUnpool: the unpooled size along spatial axis {d} is negative ({n})"
            ))
        })?;
        inferred.push(n);
    }
    let total: usize = inferred.iter().product();
    let count: usize = xs.iter().product();
    let zero = ctx.scalar(ctx.dtype(x), 0.0)?;
    let zeros = ctx.add(Op::Expand(Shape::fixed(&[total])), &[zero])?;
    let flat_i = reshape(ctx, ind, &[count])?;
    let flat_x = reshape(ctx, x, &[count])?;
    let y = ctx.add(
        Op::ScatterElements {
            axis: 0,
            reduction: ScatterReduction::None,
        },
        &[zeros, flat_i, flat_x],
    )?;
    let y = reshape(ctx, y, &inferred)?;
    let Some(out) = ctx.const_ints(node, 2, "output_shape")? else {
        return one(y);
    };
    let ok =
        out.len() == inferred.len() && out[..2].iter().zip(&inferred).all(|(&o, &i)| o == i as i64);
    let pads: Option<Vec<(usize, usize)>> = out
        .iter()
        .zip(&inferred)
        .map(|(&o, &i)| usize::try_from(o).ok()?.checked_sub(i).map(|p| (0, p)))
        .collect();
    match pads {
        Some(pads) if ok => one(ctx.add(
            Op::Pad {
                pads,
                mode: PadMode::Constant(0.0),
            },
            &[y],
        )?),
        _ => Err(Error::Unsupported(format!(
            "MaxUnpool: output_shape {out:?} smaller than the unpooled shape {inferred:?} (or with other N, C) is \
             not supported"
        ))),
    }
}

/// Binarizer (ai.onnx.ml): 1 where `x > threshold`, else 0, in x's dtype (NaN gives 0).
fn binarizer(ctx: &mut Ctx, node: &NodeProto) -> Result<Vec<Val>> {
    attrs::check_known(node, &["threshold"])?;
    let x = ctx.input(node, 0)?;
    let d = ctx.dtype(x);
    if d == DType::Bool {
        return Err(Error::DType(
            "Binarizer needs a numeric input, got bool".into(),
        ));
    }
    let t = attrs::float(node, "threshold", 0.0)? as f64;
    // For integers, x > t exactly when x > floor(t).
    let t = if d.is_float() {
        ctx.scalar(d, t)?
    } else {
        ctx.scalar(d, t.floor())?
    };
    let gt = ctx.add(Op::Binary(BinaryOp::Gt), &[x, t])?;
    one(ctx.add(Op::Cast(d), &[gt])?)
}

/// ArrayFeatureExtractor (ai.onnx.ml): `x[..., indices]` along the last axis with the indices
/// flattened; a 1-D x gives `[1, n]` (as onnxruntime and ONNX's reference).
fn array_feature_extractor(ctx: &mut Ctx, node: &NodeProto) -> Result<Vec<Val>> {
    attrs::check_known(node, &[])?;
    let x = ctx.input(node, 0)?;
    let ind = ctx.input(node, 1)?;
    if !ctx.dtype(ind).is_int() {
        return Err(Error::DType(format!(
            "ArrayFeatureExtractor needs integer indices, got {}",
            ctx.dtype(ind)
        )));
    }
    let xs = ctx.fixed_shape(x, "ArrayFeatureExtractor")?;
    let n: usize = ctx
        .fixed_shape(ind, "ArrayFeatureExtractor")?
        .iter()
        .product();
    let Some(last) = xs.len().checked_sub(1) else {
        return Err(Error::Shape(
            "ArrayFeatureExtractor needs an input of rank >= 1, got a scalar".into(),
        ));
    };
    let flat = reshape(ctx, ind, &[n])?;
    let y = ctx.add(Op::Gather { axis: last }, &[x, flat])?;
    if xs.len() == 1 {
        return one(reshape(ctx, y, &[1, n])?);
    }
    one(y)
}
