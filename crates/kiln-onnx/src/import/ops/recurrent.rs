//! Recurrent layers (RNN, GRU, LSTM, opsets 7-22), unrolled over the static sequence length
//! into IR ops, following the ONNX spec's equations (and onnx's reference implementation):
//!
//! - RNN: `H = f(X Wᵀ + H Rᵀ + Wb + Rb)`.
//! - GRU (gates z, r, h): `z = f(..)`, `r = f(..)`, `h = g(X Whᵀ + (r ⊙ H) Rhᵀ + Rbh + Wbh)`, or
//!   with `linear_before_reset` `h = g(X Whᵀ + r ⊙ (H Rhᵀ + Rbh) + Wbh)`; `H = (1 - z) ⊙ h + z ⊙ H`.
//! - LSTM (gates i, o, f, c; peepholes P = [Pi, Po, Pf]): `i = f(.. + Pi ⊙ C)`, `f = f(.. + Pf ⊙ C)`
//!   (or `1 - i` with `input_forget`), `c = g(..)`, `C = f ⊙ C + i ⊙ c`, `o = f(.. + Po ⊙ C)`,
//!   `H = o ⊙ h(C)`.
//!
//! `clip` bounds the inputs of f and g (gate pre-activations, peepholes included) to
//! `[-clip, clip]`, as onnxruntime does; the input of LSTM's h is not clipped. Reverse
//! directions walk the sequence from its end; Y keeps time order.
//! `sequence_lens` must be known at import and equal the sequence length for every batch entry
//! (shorter sequences would need per-entry masking, which is not implemented).

mod act;

use super::transformer::build::{bin, concat, fixed, lit, matmul, permute, reshape, slice};
use crate::import::{Convert, Ctx, Val, attrs};
use crate::proto::NodeProto;
use act::Act;
use kiln_ir::{BinaryOp, Dim, Error, NodeId, Result};

pub(super) fn lookup(op: &str) -> Option<Convert> {
    Some(match op {
        "RNN" => |c, n| recurrent(c, n, Cell::Rnn),
        "GRU" => |c, n| recurrent(c, n, Cell::Gru),
        "LSTM" => |c, n| recurrent(c, n, Cell::Lstm),
        _ => return None,
    })
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Cell {
    Rnn,
    Gru,
    Lstm,
}

impl Cell {
    fn name(self) -> &'static str {
        match self {
            Cell::Rnn => "RNN",
            Cell::Gru => "GRU",
            Cell::Lstm => "LSTM",
        }
    }
    fn gates(self) -> usize {
        match self {
            Cell::Rnn => 1,
            Cell::Gru => 3,
            Cell::Lstm => 4,
        }
    }
    /// Activation functions per direction and their defaults.
    fn default_acts(self) -> &'static [Act] {
        match self {
            Cell::Rnn => &[Act::Tanh],
            Cell::Gru => &[Act::Sigmoid, Act::Tanh],
            Cell::Lstm => &[Act::Sigmoid, Act::Tanh, Act::Tanh],
        }
    }
}

/// What every step of one direction needs.
struct Dir {
    /// `X Wᵀ + Wb (+ Rb)` for all steps: `[S, B, G*H]`.
    xw: NodeId,
    /// `Rᵀ`: `[H, G*H]`.
    rt: NodeId,
    /// GRU with `linear_before_reset`: `Rbh` (`[H]`), added inside the reset product.
    rbh: Option<NodeId>,
    /// LSTM peepholes `[Pi, Po, Pf]`, each `[H]`.
    peep: Option<[NodeId; 3]>,
    h0: NodeId,
    c0: Option<NodeId>,
    acts: Vec<Act>,
    reverse: bool,
}

fn recurrent(ctx: &mut Ctx, node: &NodeProto, cell: Cell) -> Result<Vec<Val>> {
    let op = cell.name();
    if ctx.opset < 7 {
        return Err(Error::Unsupported(format!(
            "{op} opset {} is not supported (7 and later are)",
            ctx.opset
        )));
    }
    let mut known = vec![
        "activation_alpha",
        "activation_beta",
        "activations",
        "clip",
        "direction",
        "hidden_size",
    ];
    if ctx.opset >= 14 {
        known.push("layout");
    }
    match cell {
        Cell::Gru => known.push("linear_before_reset"),
        Cell::Lstm => known.push("input_forget"),
        Cell::Rnn => {}
    }
    attrs::check_known(node, &known)?;
    if attrs::has(node, "activation_alpha") || attrs::has(node, "activation_beta") {
        return Err(Error::Unsupported(format!(
            "{op}: activation_alpha/activation_beta are not supported (only the activations' default parameters)"
        )));
    }
    let direction = attrs::string(node, "direction")?.unwrap_or_else(|| "forward".into());
    let dirs: Vec<bool> = match direction.as_str() {
        "forward" => vec![false],
        "reverse" => vec![true],
        "bidirectional" => vec![false, true],
        d => return Err(Error::Value(format!("{op}: unknown direction '{d}'"))),
    };
    let nd = dirs.len();
    let layout = attrs::int(node, "layout", 0)?;
    if layout != 0 && layout != 1 {
        return Err(Error::Value(format!(
            "{op}: layout must be 0 or 1, not {layout}"
        )));
    }
    let clip = attrs::float(node, "clip", 0.0)?;
    let clip = if attrs::has(node, "clip") {
        Some(clip as f64)
    } else {
        None
    };
    let linear_before_reset = attrs::int(node, "linear_before_reset", 0)? != 0;
    let input_forget = attrs::int(node, "input_forget", 0)? != 0;
    let per_dir = cell.default_acts().len();
    let acts: Vec<Act> = match attrs::strings(node, "activations")? {
        Some(names) => {
            if names.len() != per_dir * nd {
                return Err(Error::Value(format!(
                    "{op}: activations lists {} functions, expected {} ({per_dir} per direction)",
                    names.len(),
                    per_dir * nd
                )));
            }
            names
                .iter()
                .map(|s| Act::parse(s, op))
                .collect::<Result<_>>()?
        }
        None => cell
            .default_acts()
            .iter()
            .copied()
            .cycle()
            .take(per_dir * nd)
            .collect(),
    };

    let x = ctx.input(node, 0)?;
    let w = ctx.input(node, 1)?;
    let r = ctx.input(node, 2)?;
    let t = ctx.dtype(x);
    if !t.is_float() || ctx.dtype(w) != t || ctx.dtype(r) != t {
        return Err(Error::DType(format!(
            "{op} needs X, W and R of one float dtype"
        )));
    }
    // Time-major X: [S, B, I].
    let x = if layout == 1 {
        permute(ctx, x, &[1, 0, 2])?
    } else {
        x
    };
    let xd = ctx.dims(x);
    let rd = ctx.dims(r);
    if xd.len() != 3 || rd.len() != 3 || ctx.rank(w) != 3 {
        return Err(Error::Shape(format!("{op}: X, W and R must be 3-D")));
    }
    let seq = fixed(&xd[0], op, "sequence length")?;
    let hidden = fixed(&rd[2], op, "hidden size")?;
    let g = cell.gates();
    if let Some(h) = attrs::opt_int(node, "hidden_size")?
        && h != hidden as i64
    {
        return Err(Error::Shape(format!(
            "{op}: hidden_size {h} but R is {rd:?}"
        )));
    }
    if rd[0] != Dim::Fixed(nd) || rd[1] != Dim::Fixed(g * hidden) {
        return Err(Error::Shape(format!(
            "{op}: R must be [{nd}, {}, {hidden}], got {rd:?}",
            g * hidden
        )));
    }
    if let Some(lens) = ctx.const_ints(node, 4, "sequence_lens")?
        && lens.iter().any(|&l| l != seq as i64)
    {
        return Err(Error::Unsupported(format!(
            "{op}: sequence_lens {lens:?} differ from the sequence length {seq}; variable-length sequences are not supported"
        )));
    }
    let batch = xd[1].clone();
    let state = |ctx: &mut Ctx, i: usize| -> Result<Option<NodeId>> {
        let Some(s) = ctx.opt_input(node, i)? else {
            return Ok(None);
        };
        Ok(Some(if layout == 1 {
            permute(ctx, s, &[1, 0, 2])?
        } else {
            s
        }))
    };
    let h_init = state(ctx, 5)?;
    let c_init = if cell == Cell::Lstm {
        state(ctx, 6)?
    } else {
        None
    };
    let bias = ctx.opt_input(node, 3)?;
    let peep = if cell == Cell::Lstm {
        ctx.opt_input(node, 7)?
    } else {
        None
    };
    let zeros = {
        let z = ctx.scalar(t, 0.0)?;
        ctx.add(
            kiln_ir::Op::Expand(kiln_ir::Shape(vec![batch.clone(), Dim::Fixed(hidden)])),
            &[z],
        )?
    };
    let bh = vec![batch.clone(), Dim::Fixed(hidden)];
    let gh = (g * hidden) as i64;

    let mut ys = Vec::new();
    let mut hs = Vec::new();
    let mut cs = Vec::new();
    for (d, &reverse) in dirs.iter().enumerate() {
        let pick = |ctx: &mut Ctx, v: NodeId, shape: Vec<Dim>| -> Result<NodeId> {
            let s = slice(ctx, v, 0, d as i64, d as i64 + 1, 1)?;
            reshape(ctx, s, shape)
        };
        let wd = pick(ctx, w, vec![Dim::Fixed(g * hidden), xd[2].clone()])?;
        let wt = permute(ctx, wd, &[1, 0])?;
        let rdn = pick(ctx, r, vec![Dim::Fixed(g * hidden), Dim::Fixed(hidden)])?;
        let rt = permute(ctx, rdn, &[1, 0])?;
        let mut xw = matmul(ctx, x, wt)?;
        let mut rbh = None;
        if let Some(b) = bias {
            let bd = pick(ctx, b, vec![Dim::Fixed(2 * g * hidden)])?;
            let wb = slice(ctx, bd, 0, 0, gh, 1)?;
            let rb = slice(ctx, bd, 0, gh, 2 * gh, 1)?;
            let both = if cell == Cell::Gru && linear_before_reset {
                // Rbh stays inside the reset product; only Rbz, Rbr join the input bias.
                let h0 = 2 * hidden as i64;
                let rzr = slice(ctx, rb, 0, 0, h0, 1)?;
                let zero = {
                    let z = ctx.scalar(t, 0.0)?;
                    ctx.add(
                        kiln_ir::Op::Expand(kiln_ir::Shape(vec![Dim::Fixed(hidden)])),
                        &[z],
                    )?
                };
                rbh = Some(slice(ctx, rb, 0, h0, gh, 1)?);
                let rb = concat(ctx, &[rzr, zero], 0)?;
                bin(ctx, BinaryOp::Add, wb, rb)?
            } else {
                bin(ctx, BinaryOp::Add, wb, rb)?
            };
            xw = bin(ctx, BinaryOp::Add, xw, both)?;
        }
        let h0 = match h_init {
            Some(h) => pick(ctx, h, bh.clone())?,
            None => zeros,
        };
        let c0 = match (cell, c_init) {
            (Cell::Lstm, Some(c)) => Some(pick(ctx, c, bh.clone())?),
            (Cell::Lstm, None) => Some(zeros),
            _ => None,
        };
        let peep = match peep {
            Some(p) => {
                let pd = pick(ctx, p, vec![Dim::Fixed(3 * hidden)])?;
                let hh = hidden as i64;
                Some([
                    slice(ctx, pd, 0, 0, hh, 1)?,
                    slice(ctx, pd, 0, hh, 2 * hh, 1)?,
                    slice(ctx, pd, 0, 2 * hh, 3 * hh, 1)?,
                ])
            }
            None => None,
        };
        let dir = Dir {
            xw,
            rt,
            rbh,
            peep,
            h0,
            c0,
            acts: acts[d * per_dir..(d + 1) * per_dir].to_vec(),
            reverse,
        };
        let (y, h, c) = run_direction(ctx, cell, &dir, seq, hidden, &batch, clip, input_forget)?;
        ys.push(y);
        hs.push(h);
        if let Some(c) = c {
            cs.push(c);
        }
    }
    // Y: [S, D, B, H]; Y_h, Y_c: [D, B, H] (layout 1: [B, S, D, H] and [B, D, H]).
    let y = concat(ctx, &ys, 1)?;
    let y = if layout == 1 {
        permute(ctx, y, &[2, 0, 1, 3])?
    } else {
        y
    };
    let mut outs = vec![Val::Node(y)];
    for finals in [hs, cs] {
        if finals.is_empty() {
            break;
        }
        let mut parts = Vec::new();
        for f in finals {
            parts.push(reshape(
                ctx,
                f,
                vec![Dim::Fixed(1), batch.clone(), Dim::Fixed(hidden)],
            )?);
        }
        let s = concat(ctx, &parts, 0)?;
        outs.push(Val::Node(if layout == 1 {
            permute(ctx, s, &[1, 0, 2])?
        } else {
            s
        }));
    }
    Ok(outs)
}

/// Unrolls one direction; returns Y `[S, 1, B, H]` in time order, the last H and (LSTM) C.
#[allow(clippy::too_many_arguments)]
fn run_direction(
    ctx: &mut Ctx,
    cell: Cell,
    dir: &Dir,
    seq: usize,
    hidden: usize,
    batch: &Dim,
    clip: Option<f64>,
    input_forget: bool,
) -> Result<(NodeId, NodeId, Option<NodeId>)> {
    let hh = hidden as i64;
    let gate = |ctx: &mut Ctx, v: NodeId, k: i64| slice(ctx, v, 1, k * hh, (k + 1) * hh, 1);
    let clipped = |ctx: &mut Ctx, v: NodeId| -> Result<NodeId> {
        match clip {
            Some(c) => {
                let lo = lit(ctx, v, -c)?;
                let hi = lit(ctx, v, c)?;
                let v = bin(ctx, BinaryOp::Max, v, lo)?;
                bin(ctx, BinaryOp::Min, v, hi)
            }
            None => Ok(v),
        }
    };
    let gw = (cell.gates() * hidden) as i64;
    let mut h = dir.h0;
    let mut c = dir.c0;
    let mut outs: Vec<NodeId> = vec![h; seq];
    for step in 0..seq {
        let ti = if dir.reverse { seq - 1 - step } else { step };
        let xt = slice(ctx, dir.xw, 0, ti as i64, ti as i64 + 1, 1)?;
        let xt = reshape(ctx, xt, vec![batch.clone(), Dim::Fixed(gw as usize)])?;
        match cell {
            Cell::Rnn => {
                let hr = matmul(ctx, h, dir.rt)?;
                let a = bin(ctx, BinaryOp::Add, xt, hr)?;
                let a = clipped(ctx, a)?;
                h = dir.acts[0].apply(ctx, a)?;
            }
            Cell::Gru => {
                let (f, gf) = (dir.acts[0], dir.acts[1]);
                let hr = matmul(ctx, h, dir.rt)?;
                let zr_x = slice(ctx, xt, 1, 0, 2 * hh, 1)?;
                let zr_h = slice(ctx, hr, 1, 0, 2 * hh, 1)?;
                let zr = bin(ctx, BinaryOp::Add, zr_x, zr_h)?;
                let zr = clipped(ctx, zr)?;
                let zr = f.apply(ctx, zr)?;
                let z = gate(ctx, zr, 0)?;
                let rg = gate(ctx, zr, 1)?;
                let hx = gate(ctx, xt, 2)?;
                let rh = slice(ctx, dir.rt, 1, 2 * hh, 3 * hh, 1)?;
                let hpre = match dir.rbh {
                    // linear_before_reset: r ⊙ (H Rhᵀ + Rbh)
                    Some(rbh) => {
                        let hrh = gate(ctx, hr, 2)?;
                        let hrh = bin(ctx, BinaryOp::Add, hrh, rbh)?;
                        let p = bin(ctx, BinaryOp::Mul, rg, hrh)?;
                        bin(ctx, BinaryOp::Add, hx, p)?
                    }
                    None => {
                        let rh_in = bin(ctx, BinaryOp::Mul, rg, h)?;
                        let p = matmul(ctx, rh_in, rh)?;
                        bin(ctx, BinaryOp::Add, hx, p)?
                    }
                };
                let hpre = clipped(ctx, hpre)?;
                let hc = gf.apply(ctx, hpre)?;
                // (1 - z) ⊙ h + z ⊙ H
                let one = lit(ctx, z, 1.0)?;
                let omz = bin(ctx, BinaryOp::Sub, one, z)?;
                let a = bin(ctx, BinaryOp::Mul, omz, hc)?;
                let b = bin(ctx, BinaryOp::Mul, z, h)?;
                h = bin(ctx, BinaryOp::Add, a, b)?;
            }
            Cell::Lstm => {
                let (f, gf, hf) = (dir.acts[0], dir.acts[1], dir.acts[2]);
                let cp = c.ok_or_else(|| Error::Graph("LSTM: missing cell state".into()))?;
                let hr = matmul(ctx, h, dir.rt)?;
                let gates = bin(ctx, BinaryOp::Add, xt, hr)?;
                let mut i = gate(ctx, gates, 0)?;
                let mut o = gate(ctx, gates, 1)?;
                let mut fg = gate(ctx, gates, 2)?;
                let cg = gate(ctx, gates, 3)?;
                if let Some([pi, _, pf]) = dir.peep {
                    let a = bin(ctx, BinaryOp::Mul, pi, cp)?;
                    i = bin(ctx, BinaryOp::Add, i, a)?;
                    let a = bin(ctx, BinaryOp::Mul, pf, cp)?;
                    fg = bin(ctx, BinaryOp::Add, fg, a)?;
                }
                let i = clipped(ctx, i)?;
                let i = f.apply(ctx, i)?;
                let fg = if input_forget {
                    let one = lit(ctx, i, 1.0)?;
                    bin(ctx, BinaryOp::Sub, one, i)?
                } else {
                    let fg = clipped(ctx, fg)?;
                    f.apply(ctx, fg)?
                };
                let cg = clipped(ctx, cg)?;
                let cg = gf.apply(ctx, cg)?;
                let a = bin(ctx, BinaryOp::Mul, fg, cp)?;
                let b = bin(ctx, BinaryOp::Mul, i, cg)?;
                let cn = bin(ctx, BinaryOp::Add, a, b)?;
                if let Some([_, po, _]) = dir.peep {
                    let a = bin(ctx, BinaryOp::Mul, po, cn)?;
                    o = bin(ctx, BinaryOp::Add, o, a)?;
                }
                let o = clipped(ctx, o)?;
                let o = f.apply(ctx, o)?;
                let hc = hf.apply(ctx, cn)?;
                h = bin(ctx, BinaryOp::Mul, o, hc)?;
                c = Some(cn);
            }
        }
        outs[ti] = h;
    }
    let mut parts = Vec::with_capacity(seq);
    for o in outs {
        parts.push(reshape(
            ctx,
            o,
            vec![
                Dim::Fixed(1),
                Dim::Fixed(1),
                batch.clone(),
                Dim::Fixed(hidden),
            ],
        )?);
    }
    let y = concat(ctx, &parts, 0)?;
    Ok((y, h, if cell == Cell::Lstm { c } else { None }))
}
