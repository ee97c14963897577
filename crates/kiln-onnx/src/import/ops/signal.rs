//! Signal processing: window functions, MelWeightMatrix, DFT and STFT.
//!
//! DFT and STFT are matmuls with constant cos/sin bases: the bases are computed in f64 (angles
//! reduced modulo the length first, so they stay exact for long transforms) and rounded once
//! to the input dtype, which keeps the result within a rounding of the exact transform. Window
//! functions and MelWeightMatrix are constants computed from their (import-time) inputs.

use crate::import::{Convert, Ctx, Val, attrs, one};
use crate::proto::NodeProto;
use crate::tensor::dtype_from_onnx;
use kiln_ir::{DType, Error, HostTensor, NodeId, Op, Result, Shape, Storage, normalize_axis};
use std::f64::consts::PI;

pub(super) fn lookup(op: &str) -> Option<Convert> {
    Some(match op {
        "DFT" => dft,
        "STFT" => stft,
        "HannWindow" => |c, n| window(c, n, Window::Hann),
        "HammingWindow" => |c, n| window(c, n, Window::Hamming),
        "BlackmanWindow" => |c, n| window(c, n, Window::Blackman),
        "MelWeightMatrix" => mel_weight_matrix,
        _ => return None,
    })
}

/// A constant of `dtype` holding `data` (computed in f64) with `shape`.
fn f64_const(ctx: &mut Ctx, data: Vec<f64>, shape: &[usize], dtype: DType) -> Result<NodeId> {
    let t = HostTensor::new(Storage::F64(data), shape)?;
    let id = ctx.constant(t);
    if dtype == DType::F64 {
        Ok(id)
    } else {
        ctx.add(Op::Cast(dtype), &[id])
    }
}

/// The single integer of an import-time input (a scalar or a 1-element tensor).
fn one_int(ctx: &mut Ctx, node: &NodeProto, i: usize, what: &str) -> Result<Option<i64>> {
    let Some(v) = ctx.const_ints(node, i, what)? else {
        return Ok(None);
    };
    match v.as_slice() {
        [x] => Ok(Some(*x)),
        _ => Err(Error::Value(format!(
            "{} input {i} ({what}) must hold one value, got {v:?}",
            node.op_type()
        ))),
    }
}

/// The output dtype an `output_datatype` attribute names (default f32).
fn output_dtype(node: &NodeProto) -> Result<DType> {
    let code = attrs::int(node, "output_datatype", 1)?;
    i32::try_from(code)
        .ok()
        .and_then(|c| dtype_from_onnx(c).ok())
        .filter(|d| *d != DType::Bool)
        .ok_or_else(|| {
            Error::Unsupported(format!(
                "{}: output_datatype {code} is not a numeric type kiln supports",
                node.op_type()
            ))
        })
}

// ---------------------------------------------------------------------------------------------
// DFT bases.

/// A real matrix `[m * c_in, k_out * c_out]` that maps a signal of `m` samples (`c_in` = 1 for
/// real, 2 for interleaved complex) to its transform of length `n`, as `np.fft` does: the
/// input is truncated or zero-padded to `n`; `onesided` keeps bins `0..=n/2` (forward) or,
/// with `inverse`, reads a one-sided spectrum and yields the real signal (irfft).
struct Basis {
    data: Vec<f64>,
    rows: usize,
    k_out: usize,
    c_out: usize,
}

fn dft_basis(m: usize, c_in: usize, n: usize, inverse: bool, onesided: bool) -> Basis {
    let irfft = inverse && onesided;
    let k_out = if onesided && !inverse { n / 2 + 1 } else { n };
    let c_out = if irfft { 1 } else { 2 };
    let rows = m * c_in;
    let cols = k_out * c_out;
    let mut data = vec![0.0; rows * cols];
    // Angle of `exp(sign * 2πi * k * t / n)`, reduced modulo n so large k*t stay exact.
    let angle =
        |k: usize, t: usize| 2.0 * PI * (((k as u128 * t as u128) % n as u128) as f64) / n as f64;
    let scale = if inverse { 1.0 / n as f64 } else { 1.0 };
    let sign = if inverse { 1.0 } else { -1.0 };
    if irfft {
        // y[t] = 1/n Σ_j a_j (Re X_j cos - Im X_j sin), with the Hermitian half folded in
        // (a_j = 2) except for the bins that are their own mirror (DC, and Nyquist for even n),
        // whose imaginary parts np.fft.irfft ignores.
        for j in 0..m.min(n / 2 + 1) {
            let own_mirror = j == 0 || 2 * j == n;
            let a = if own_mirror { 1.0 } else { 2.0 } * scale;
            for t in 0..n {
                let (s, c) = angle(j, t).sin_cos();
                data[(j * c_in) * cols + t] = a * c;
                if c_in == 2 && !own_mirror {
                    data[(j * c_in + 1) * cols + t] = -a * s;
                }
            }
        }
        return Basis {
            data,
            rows,
            k_out,
            c_out,
        };
    }
    for t in 0..m.min(n) {
        for k in 0..k_out {
            let (s, c) = angle(k, t).sin_cos();
            let (c, s) = (c * scale, sign * s * scale);
            // (xr + i xi)(c + i s) = (xr c - xi s) + i (xr s + xi c)
            data[(t * c_in) * cols + k * 2] = c;
            data[(t * c_in) * cols + k * 2 + 1] = s;
            if c_in == 2 {
                data[(t * c_in + 1) * cols + k * 2] = -s;
                data[(t * c_in + 1) * cols + k * 2 + 1] = c;
            }
        }
    }
    Basis {
        data,
        rows,
        k_out,
        c_out,
    }
}

/// `x` (`[.., m, c_in]`, the signal axis second to last) transformed by `basis`:
/// `[.., k_out, c_out]`.
fn apply_basis(ctx: &mut Ctx, x: NodeId, lead: &[usize], basis: Basis) -> Result<NodeId> {
    let dtype = ctx.dtype(x);
    let cols = basis.k_out * basis.c_out;
    let b = f64_const(ctx, basis.data, &[basis.rows, cols], dtype)?;
    let mut flat: Vec<usize> = lead.to_vec();
    flat.push(basis.rows);
    let xf = ctx.add(Op::Reshape(Shape::fixed(&flat)), &[x])?;
    let y = ctx.add(Op::MatMul, &[xf, b])?;
    let mut out: Vec<usize> = lead.to_vec();
    out.extend([basis.k_out, basis.c_out]);
    ctx.add(Op::Reshape(Shape::fixed(&out)), &[y])
}

/// Errors unless `x` is a float tensor `[.., 1 or 2]` of static shape; returns the shape.
fn signal_shape(ctx: &Ctx, node: &NodeProto, x: NodeId, min_rank: usize) -> Result<Vec<usize>> {
    let op = node.op_type();
    let d = ctx.dtype(x);
    if !d.is_float() {
        return Err(Error::DType(format!(
            "{op} needs a float input, got {d} {}",
            ctx.ty(x).shape
        )));
    }
    let shape = ctx.fixed_shape(x, op)?;
    if shape.len() < min_rank || !matches!(shape.last(), Some(1 | 2)) {
        return Err(Error::Shape(format!(
            "{op} needs an input of rank >= {min_rank} whose last dim is 1 (real) or 2 (complex), got {shape:?}"
        )));
    }
    Ok(shape)
}

/// DFT (opsets 17 and 20; the axis is an attribute before 20 and an input from 20).
fn dft(ctx: &mut Ctx, node: &NodeProto) -> Result<Vec<Val>> {
    if ctx.opset < 17 {
        return Err(Error::Unsupported(format!(
            "DFT of opset {} is not supported (kiln has 17 and 20)",
            ctx.opset
        )));
    }
    let v20 = ctx.opset >= 20;
    if v20 {
        attrs::check_known(node, &["inverse", "onesided"])?;
    } else {
        attrs::check_known(node, &["axis", "inverse", "onesided"])?;
    }
    let x = ctx.input(node, 0)?;
    let shape = signal_shape(ctx, node, x, 2)?;
    let r = shape.len();
    let axis = if v20 {
        one_int(ctx, node, 2, "axis")?.unwrap_or(-2)
    } else {
        attrs::int(node, "axis", 1)?
    };
    let axis = normalize_axis(axis, r, "DFT")?;
    if axis == r - 1 {
        return Err(Error::Value(format!(
            "DFT: axis {axis} is the real/imaginary dim of input {shape:?}"
        )));
    }
    let inverse = attrs::int(node, "inverse", 0)? != 0;
    let onesided = attrs::int(node, "onesided", 0)? != 0;
    let m = shape[axis];
    let n = match one_int(ctx, node, 1, "dft_length")? {
        Some(n) => usize::try_from(n)
            .ok()
            .filter(|&n| n > 0)
            .ok_or_else(|| Error::Value(format!("DFT: dft_length must be positive, got {n}")))?,
        None if inverse && onesided => 2 * m.saturating_sub(1),
        None => m,
    };
    if n == 0 {
        return Err(Error::Value(format!(
            "DFT of an empty signal (axis {axis} of {shape:?})"
        )));
    }
    let c_in = shape[r - 1];
    // Move the signal axis next to the complex dim, transform, and move it back.
    let perm: Vec<usize> = (0..r - 1)
        .filter(|&i| i != axis)
        .chain([axis, r - 1])
        .collect();
    let moved = perm != (0..r).collect::<Vec<_>>();
    let xt = if moved {
        ctx.add(Op::Permute(perm.clone()), &[x])?
    } else {
        x
    };
    let lead: Vec<usize> = perm[..r - 2].iter().map(|&i| shape[i]).collect();
    let y = apply_basis(ctx, xt, &lead, dft_basis(m, c_in, n, inverse, onesided))?;
    if !moved {
        return one(y);
    }
    let mut inv = vec![0; r];
    for (pos, &src) in perm.iter().enumerate() {
        inv[src] = pos;
    }
    one(ctx.add(Op::Permute(inv), &[y])?)
}

/// STFT (opset 17): frames `[batch, frames, frame_length, c]` gathered from the signal,
/// weighted by the window, each transformed (onesided by default).
fn stft(ctx: &mut Ctx, node: &NodeProto) -> Result<Vec<Val>> {
    attrs::check_known(node, &["onesided"])?;
    let x = ctx.input(node, 0)?;
    let shape = signal_shape(ctx, node, x, 3)?;
    if shape.len() != 3 {
        return Err(Error::Shape(format!(
            "STFT needs a signal [batch, length, 1 or 2], got {shape:?}"
        )));
    }
    let (batch, len, c_in) = (shape[0], shape[1], shape[2]);
    let step = one_int(ctx, node, 1, "frame_step")?
        .ok_or_else(|| Error::Value("STFT needs the frame_step input".into()))?;
    let step = usize::try_from(step)
        .ok()
        .filter(|&s| s > 0)
        .ok_or_else(|| Error::Value(format!("STFT: frame_step must be positive, got {step}")))?;
    let window = ctx.opt_input(node, 2)?;
    let win_len = match window {
        Some(w) => match ctx.fixed_shape(w, "STFT")?.as_slice() {
            [n] => Some(*n),
            s => {
                return Err(Error::Shape(format!(
                    "STFT: the window must be 1-D, got {s:?}"
                )));
            }
        },
        None => None,
    };
    let fl = match (one_int(ctx, node, 3, "frame_length")?, win_len) {
        (Some(f), w) => {
            let f = usize::try_from(f).ok().filter(|&f| f > 0).ok_or_else(|| {
                Error::Value(format!("STFT: frame_length must be positive, got {f}"))
            })?;
            if w.is_some_and(|w| w != f) {
                return Err(Error::Shape(format!(
                    "STFT: frame_length {f} differs from the window length {w:?}"
                )));
            }
            f
        }
        (None, Some(w)) => w,
        (None, None) => len,
    };
    if fl == 0 || fl > len {
        return Err(Error::Shape(format!(
            "STFT: frame length {fl} must be in 1..={len} (the signal length)"
        )));
    }
    let onesided = attrs::int(node, "onesided", 1)? != 0;
    let frames = 1 + (len - fl) / step;
    let idx: Vec<i64> = (0..frames)
        .flat_map(|f| (0..fl).map(move |j| (f * step + j) as i64))
        .collect();
    let idx = ctx.constant(HostTensor::from_vec(idx, &[frames, fl])?);
    let mut xf = ctx.add(Op::Gather { axis: 1 }, &[x, idx])?;
    if let Some(w) = window {
        let dtype = ctx.dtype(x);
        let w = if ctx.dtype(w) == dtype {
            w
        } else {
            ctx.add(Op::Cast(dtype), &[w])?
        };
        let w = ctx.add(Op::Reshape(Shape::fixed(&[fl, 1])), &[w])?;
        xf = ctx.add(Op::Binary(kiln_ir::BinaryOp::Mul), &[xf, w])?;
    }
    one(apply_basis(
        ctx,
        xf,
        &[batch, frames],
        dft_basis(fl, c_in, fl, false, onesided),
    )?)
}

// ---------------------------------------------------------------------------------------------
// Constants.

#[derive(Clone, Copy)]
enum Window {
    Hann,
    Hamming,
    Blackman,
}

/// HannWindow / HammingWindow / BlackmanWindow (opset 17): the size must be known at import.
fn window(ctx: &mut Ctx, node: &NodeProto, kind: Window) -> Result<Vec<Val>> {
    attrs::check_known(node, &["output_datatype", "periodic"])?;
    let op = node.op_type();
    let size = one_int(ctx, node, 0, "size")?
        .ok_or_else(|| Error::Value(format!("{op} needs the size input")))?;
    let size = usize::try_from(size)
        .ok()
        .filter(|&s| s <= 1 << 24)
        .ok_or_else(|| Error::Value(format!("{op}: size must be in 0..=2^24, got {size}")))?;
    let periodic = attrs::int(node, "periodic", 1)? != 0;
    let dtype = output_dtype(node)?;
    let denom = if periodic {
        size as f64
    } else {
        size as f64 - 1.0
    };
    let data: Vec<f64> = (0..size)
        .map(|i| {
            let a = 2.0 * PI * i as f64 / denom;
            match kind {
                Window::Hann => 0.5 - 0.5 * a.cos(),
                Window::Hamming => 25.0 / 46.0 - (21.0 / 46.0) * a.cos(),
                Window::Blackman => 0.42 - 0.5 * a.cos() + 0.08 * (2.0 * a).cos(),
            }
        })
        .collect();
    one(f64_const(ctx, data, &[size], dtype)?)
}

/// MelWeightMatrix (opset 17), `[dft_length/2 + 1, num_mel_bins]`, computed as ONNX's reference
/// does (including its use of `num_mel_bins + 2` steps and f32 for the edge conversion).
fn mel_weight_matrix(ctx: &mut Ctx, node: &NodeProto) -> Result<Vec<Val>> {
    attrs::check_known(node, &["output_datatype"])?;
    let dtype = output_dtype(node)?;
    let need = |ctx: &mut Ctx, i: usize, what: &str| -> Result<i64> {
        one_int(ctx, node, i, what)?
            .ok_or_else(|| Error::Value(format!("MelWeightMatrix needs the {what} input")))
    };
    let bins = need(ctx, 0, "num_mel_bins")?;
    let dft_len = need(ctx, 1, "dft_length")?;
    let rate = need(ctx, 2, "sample_rate")?;
    let edge = |ctx: &mut Ctx, i: usize, what: &str| -> Result<(f64, DType)> {
        let t = ctx
            .const_input(node, i, what)?
            .ok_or_else(|| Error::Value(format!("MelWeightMatrix needs the {what} input")))?;
        match t.to_f64_vec().as_slice() {
            [v] => Ok((*v, t.dtype())),
            v => Err(Error::Value(format!(
                "MelWeightMatrix: {what} must hold one value, got {v:?}"
            ))),
        }
    };
    let lo = edge(ctx, 3, "lower_edge_hertz")?;
    let hi = edge(ctx, 4, "upper_edge_hertz")?;
    let (Ok(bins), true, true) = (
        usize::try_from(bins),
        (1..=1 << 20).contains(&dft_len),
        rate > 0,
    ) else {
        return Err(Error::Value(format!(
            "MelWeightMatrix: num_mel_bins {bins}, dft_length {dft_len} and sample_rate {rate} must be positive"
        )));
    };
    let spec_bins = dft_len as usize / 2 + 1;
    // The reference computes log1p(edge / 700) in the edge's own dtype.
    let to_mel = |(v, d): (f64, DType)| {
        let l = if d == DType::F64 {
            (v / 700.0).ln_1p()
        } else {
            ((v as f32) / 700.0f32).ln_1p() as f64
        };
        2595.0 * l / 10f64.ln()
    };
    let (lo_mel, hi_mel) = (to_mel(lo), to_mel(hi));
    let step = (hi_mel - lo_mel) / (bins + 2) as f64;
    let points: Vec<i64> = (0..bins + 2)
        .map(|i| {
            let hz = 700.0 * ((i as f64 * step + lo_mel) / 2595.0 * 10f64.ln()).exp_m1();
            ((dft_len + 1) as f64 * hz / rate as f64).floor() as i64
        })
        .collect();
    let mut out = vec![0.0; spec_bins * bins];
    let bad = || {
        Error::Value(format!(
            "MelWeightMatrix: the mel bands {points:?} fall outside the {spec_bins} spectrogram bins"
        ))
    };
    let mut set = |j: i64, i: usize, v: f64| -> Result<()> {
        let j = usize::try_from(j)
            .ok()
            .filter(|&j| j < spec_bins)
            .ok_or_else(bad)?;
        out[j * bins + i] = v;
        Ok(())
    };
    for i in 0..bins {
        let (l, c, h) = (points[i], points[i + 1], points[i + 2]);
        if c == l {
            set(c, i, 1.0)?;
        } else {
            for j in l..=c {
                set(j, i, (j - l) as f64 / (c - l) as f64)?;
            }
        }
        if h > c {
            for j in c..h {
                set(j, i, (h - j) as f64 / (h - c) as f64)?;
            }
        }
    }
    one(f64_const(ctx, out, &[spec_bins, bins], dtype)?)
}
