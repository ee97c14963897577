//! Resize (opsets 10-19: scales or sizes, roi, axes, keep_aspect_ratio_policy) and Upsample
//! (opsets 7 and 9), as the IR's Resize with the output shape fixed at import.

use crate::import::{Ctx, Val, attrs, one};
use crate::proto::NodeProto;
use kiln_ir::{Error, Op, ResizeAttrs, ResizeCoord, ResizeMode, ResizeNearest, Result};

fn mode_of(node: &NodeProto, s: &str) -> Result<ResizeMode> {
    Ok(match s {
        "nearest" => ResizeMode::Nearest,
        "linear" | "bilinear" => ResizeMode::Linear,
        "cubic" | "bicubic" => ResizeMode::Cubic,
        _ => {
            return Err(Error::Unsupported(format!(
                "{} mode '{s}' is not supported",
                node.op_type()
            )));
        }
    })
}

/// `floor(in * scale)` per axis, as ONNX computes output sizes from scales.
fn sizes_from_scales(node: &NodeProto, input: &[usize], scales: &[f64]) -> Result<Vec<usize>> {
    input
        .iter()
        .zip(scales)
        .map(|(&n, &s)| {
            if !(s.is_finite() && s > 0.0) {
                return Err(Error::Value(format!(
                    "{}: scales must be finite and > 0, got {scales:?}",
                    node.op_type()
                )));
            }
            Ok((n as f64 * s).floor() as usize)
        })
        .collect()
}

/// align_corners when the output size came from scales: ONNX maps `y` to
/// `y * (in - 1) / (in * scale - 1)` with the unrounded output length `in * scale`. Where that
/// differs from the integer length, the same map is a crop-and-resize over the roi
/// `(0, (out - 1) / (in * scale - 1))` (never outside the input, so never extrapolated).
fn align_corners_of_scales(shape: &[usize], out: &[usize], scales: &[f64]) -> ResizeCoord {
    let width = |i: usize| shape[i] as f64 * scales[i];
    if (0..shape.len()).all(|i| (width(i) - out[i] as f64).abs() < 1e-9) {
        return ResizeCoord::AlignCorners;
    }
    let roi = (0..shape.len())
        .map(|i| match out[i] {
            _ if (width(i) - out[i] as f64).abs() < 1e-9 => (0.0, 1.0),
            0 | 1 => (0.0, 0.0),
            o => (0.0, (o - 1) as f64 / (width(i) - 1.0)),
        })
        .collect();
    ResizeCoord::TfCropAndResize {
        roi,
        extrapolation: 0.0,
    }
}

/// ONNX Resize.
pub(super) fn resize(ctx: &mut Ctx, node: &NodeProto) -> Result<Vec<Val>> {
    attrs::check_known(
        node,
        &[
            "antialias",
            "axes",
            "coordinate_transformation_mode",
            "cubic_coeff_a",
            "exclude_outside",
            "extrapolation_value",
            "keep_aspect_ratio_policy",
            "mode",
            "nearest_mode",
        ],
    )?;
    let x = ctx.input(node, 0)?;
    let shape = ctx.fixed_shape(x, "Resize")?;
    let r = shape.len();
    let mode = mode_of(
        node,
        &attrs::string(node, "mode")?.unwrap_or_else(|| "nearest".into()),
    )?;
    let opset10 = ctx.opset < 11;
    let (roi, scales_in, sizes_in) = if opset10 {
        (None, ctx.const_floats(node, 1, "scales")?, None)
    } else {
        (
            ctx.const_floats(node, 1, "roi")?,
            ctx.const_floats(node, 2, "scales")?,
            ctx.const_ints(node, 3, "sizes")?,
        )
    };
    let axes: Vec<usize> = match attrs::ints(node, "axes")? {
        Some(a) => a
            .iter()
            .map(|&a| kiln_ir::normalize_axis(a, r, "Resize"))
            .collect::<Result<_>>()?,
        None => (0..r).collect(),
    };
    if (1..axes.len()).any(|i| axes[..i].contains(&axes[i])) {
        return Err(Error::Value(format!(
            "Resize: axes {axes:?} repeat an axis"
        )));
    }
    let n = axes.len();
    let scales_in = scales_in.filter(|s| !s.is_empty());
    let sizes_in = sizes_in.filter(|s| !s.is_empty());
    let from_scales = scales_in.is_some();
    let (out_shape, scales) = match (scales_in, sizes_in) {
        (Some(s), None) => {
            if s.len() != n {
                return Err(Error::Value(format!(
                    "Resize: {} scales for {n} axes",
                    s.len()
                )));
            }
            let mut full = vec![1.0; r];
            for (i, &a) in axes.iter().enumerate() {
                full[a] = s[i];
            }
            (sizes_from_scales(node, &shape, &full)?, full)
        }
        (None, Some(z)) => {
            if z.len() != n || z.iter().any(|&v| v < 0) {
                return Err(Error::Value(format!(
                    "Resize: sizes {z:?} must be {n} non-negative values"
                )));
            }
            let mut out = shape.clone();
            let mut full = vec![1.0; r];
            for (i, &a) in axes.iter().enumerate() {
                out[a] = z[i] as usize;
                full[a] = z[i] as f64 / shape[a] as f64;
            }
            let policy = attrs::string(node, "keep_aspect_ratio_policy")?
                .unwrap_or_else(|| "stretch".into());
            let pick = match policy.as_str() {
                "stretch" => None,
                "not_larger" => Some(axes.iter().map(|&a| full[a]).fold(f64::INFINITY, f64::min)),
                "not_smaller" => Some(
                    axes.iter()
                        .map(|&a| full[a])
                        .fold(f64::NEG_INFINITY, f64::max),
                ),
                p => {
                    return Err(Error::Value(format!(
                        "Resize: keep_aspect_ratio_policy '{p}' is not known"
                    )));
                }
            };
            if let Some(s) = pick {
                for &a in &axes {
                    full[a] = s;
                    // round half up, as ONNX's reference
                    out[a] = (s * shape[a] as f64 + 0.5).floor() as usize;
                }
            }
            if full.iter().any(|s| !(s.is_finite() && *s > 0.0)) {
                return Err(Error::Unsupported(format!(
                    "Resize from {shape:?} to sizes {z:?}: a zero-length axis has no finite scale"
                )));
            }
            (out, full)
        }
        (Some(_), Some(_)) => {
            return Err(Error::Value(
                "Resize: give scales or sizes, not both".into(),
            ));
        }
        (None, None) => return Err(Error::Value("Resize needs scales or sizes".into())),
    };
    let ct = if opset10 {
        "asymmetric".to_string()
    } else {
        attrs::string(node, "coordinate_transformation_mode")?
            .unwrap_or_else(|| "half_pixel".into())
    };
    let coord = match ct.as_str() {
        "half_pixel" => ResizeCoord::HalfPixel,
        "half_pixel_symmetric" => ResizeCoord::HalfPixelSymmetric,
        "pytorch_half_pixel" => ResizeCoord::PytorchHalfPixel,
        "align_corners" if from_scales => align_corners_of_scales(&shape, &out_shape, &scales),
        "align_corners" => ResizeCoord::AlignCorners,
        "asymmetric" => ResizeCoord::Asymmetric,
        "tf_crop_and_resize" => {
            let roi = roi.ok_or_else(|| {
                Error::Value("Resize tf_crop_and_resize needs the roi input".into())
            })?;
            if roi.len() != 2 * n {
                return Err(Error::Value(format!(
                    "Resize: roi {roi:?} must hold {} values",
                    2 * n
                )));
            }
            let mut full = vec![(0.0, 1.0); r];
            for (i, &a) in axes.iter().enumerate() {
                full[a] = (roi[i], roi[n + i]);
            }
            let extrapolation = attrs::float(node, "extrapolation_value", 0.0)? as f64;
            ResizeCoord::TfCropAndResize {
                roi: full,
                extrapolation,
            }
        }
        c => {
            return Err(Error::Unsupported(format!(
                "Resize coordinate_transformation_mode '{c}' is not supported"
            )));
        }
    };
    let nearest = if opset10 {
        // Resize-10 is Upsample generalised: nearest replicates (floor). Downsampling there
        // has no agreed rounding, so it is refused.
        if mode == ResizeMode::Nearest && scales.iter().any(|&s| s < 1.0) {
            return Err(Error::Unsupported(
                "Resize-10 nearest downsampling is not supported (opset >= 11 is)".into(),
            ));
        }
        ResizeNearest::Floor
    } else {
        match attrs::string(node, "nearest_mode")?
            .as_deref()
            .unwrap_or("round_prefer_floor")
        {
            "round_prefer_floor" => ResizeNearest::RoundPreferFloor,
            "round_prefer_ceil" => ResizeNearest::RoundPreferCeil,
            "floor" => ResizeNearest::Floor,
            "ceil" => ResizeNearest::Ceil,
            m => {
                return Err(Error::Value(format!(
                    "Resize nearest_mode '{m}' is not known"
                )));
            }
        }
    };
    let antialias = attrs::int(node, "antialias", 0)? != 0;
    if antialias && mode == ResizeMode::Nearest {
        return Err(Error::Value(
            "Resize: antialias is not defined for nearest mode".into(),
        ));
    }
    let a = ResizeAttrs {
        out_shape,
        scales,
        mode,
        coord,
        nearest,
        cubic_a: attrs::float(node, "cubic_coeff_a", -0.75)? as f64,
        exclude_outside: attrs::int(node, "exclude_outside", 0)? != 0,
        antialias,
    };
    one(ctx.add(Op::Resize(a), &[x])?)
}

/// ONNX Upsample (opset 7: `scales` attribute; 9: input): nearest replicates, linear
/// interpolates, both with asymmetric coordinates.
pub(super) fn upsample(ctx: &mut Ctx, node: &NodeProto) -> Result<Vec<Val>> {
    attrs::check_known(node, &["mode", "scales"])?;
    let x = ctx.input(node, 0)?;
    let shape = ctx.fixed_shape(x, "Upsample")?;
    let scales: Vec<f64> = match attrs::floats(node, "scales")? {
        Some(s) => s.iter().map(|&v| v as f64).collect(),
        None => ctx
            .const_floats(node, 1, "scales")?
            .ok_or_else(|| Error::Value("Upsample needs scales (attribute or input)".into()))?,
    };
    if scales.len() != shape.len() || scales.iter().any(|&s| s < 1.0) {
        return Err(Error::Value(format!(
            "Upsample: scales {scales:?} must be >= 1, one per axis of {shape:?}"
        )));
    }
    let mode = mode_of(
        node,
        &attrs::string(node, "mode")?.unwrap_or_else(|| "nearest".into()),
    )?;
    if mode == ResizeMode::Cubic {
        return Err(Error::Value(
            "Upsample mode must be nearest or linear".into(),
        ));
    }
    let a = ResizeAttrs {
        out_shape: sizes_from_scales(node, &shape, &scales)?,
        scales,
        mode,
        coord: ResizeCoord::Asymmetric,
        nearest: ResizeNearest::Floor,
        cubic_a: -0.75,
        exclude_outside: false,
        antialias: false,
    };
    one(ctx.add(Op::Resize(a), &[x])?)
}
