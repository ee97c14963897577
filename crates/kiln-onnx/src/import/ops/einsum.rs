//! Einsum, lowered to permutes, reshapes, reductions and batched matmuls.
//!
//! The equation is parsed into one label per axis (letters, and numbered labels for the
//! dims an ellipsis covers, right-aligned across operands as NumPy broadcasts them). Each
//! operand first takes diagonals of repeated labels (`ii` → a strided slice of the flattened
//! pair) and sums labels no other operand and not the output use; operands are then
//! contracted left to right as `[batch.., M, K] @ [batch.., K, N]`; the result is permuted
//! to the output's order. Without `->`, the output is the ellipsis dims then the labels used
//! exactly once, alphabetically (as ONNX and NumPy).

use super::transformer::build::{matmul, permute, reduce, reshape, slice};
use crate::import::{Convert, Ctx, Val, attrs, one};
use crate::proto::NodeProto;
use kiln_ir::{Dim, Error, NodeId, ReduceOp, Result};

pub(super) fn lookup(op: &str) -> Option<Convert> {
    Some(match op {
        "Einsum" => einsum,
        _ => return None,
    })
}

/// One axis label: a letter, or the `k`-th ellipsis dim counted from the left of the
/// broadcast ellipsis block.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Label {
    Ell(usize),
    Char(char),
}

/// A term of the equation: letters, with the ellipsis (at most once) at `ell` letters in.
struct Term {
    letters: Vec<char>,
    ell: Option<usize>,
}

fn parse_term(s: &str, eq: &str) -> Result<Term> {
    let mut letters = Vec::new();
    let mut ell = None;
    let mut rest = s;
    while !rest.is_empty() {
        if let Some(r) = rest.strip_prefix("...") {
            if ell.is_some() {
                return Err(Error::Value(format!(
                    "Einsum '{eq}': more than one ellipsis in a term"
                )));
            }
            ell = Some(letters.len());
            rest = r;
            continue;
        }
        let mut chars = rest.chars();
        let c = chars
            .next()
            .ok_or_else(|| Error::Value(format!("Einsum '{eq}': empty term")))?;
        if !c.is_ascii_alphabetic() {
            return Err(Error::Value(format!(
                "Einsum '{eq}': unexpected character '{c}'"
            )));
        }
        letters.push(c);
        rest = chars.as_str();
    }
    Ok(Term { letters, ell })
}

/// Labels of a term for an operand of `rank` dims, with the ellipsis block `max_ell` long.
fn labels_of(term: &Term, rank: usize, max_ell: usize, eq: &str) -> Result<Vec<Label>> {
    let n = term.letters.len();
    let e = match term.ell {
        Some(_) if rank >= n => rank - n,
        None if rank == n => 0,
        _ => {
            return Err(Error::Shape(format!(
                "Einsum '{eq}': a term with {n} labels does not fit an operand of rank {rank}"
            )));
        }
    };
    let at = term.ell.unwrap_or(n);
    let mut out: Vec<Label> = term.letters[..at].iter().map(|&c| Label::Char(c)).collect();
    out.extend((max_ell - e..max_ell).map(Label::Ell));
    out.extend(term.letters[at..].iter().map(|&c| Label::Char(c)));
    Ok(out)
}

/// An operand being lowered: its node, one label per axis, and its fixed dims.
struct Operand {
    id: NodeId,
    labels: Vec<Label>,
    dims: Vec<usize>,
}

fn einsum(ctx: &mut Ctx, node: &NodeProto) -> Result<Vec<Val>> {
    attrs::check_known(node, &["equation"])?;
    let eq_raw = attrs::string(node, "equation")?
        .ok_or_else(|| Error::Value("Einsum needs 'equation'".into()))?;
    let eq: String = eq_raw.chars().filter(|c| !c.is_whitespace()).collect();
    let (lhs, rhs) = match eq.split_once("->") {
        Some((l, r)) => (l, Some(r)),
        None => (eq.as_str(), None),
    };
    let terms: Vec<Term> = lhs
        .split(',')
        .map(|s| parse_term(s, &eq))
        .collect::<Result<_>>()?;
    if terms.len() != node.input.len() {
        return Err(Error::Value(format!(
            "Einsum '{eq}' has {} terms but {} inputs",
            terms.len(),
            node.input.len()
        )));
    }
    let mut ops = Vec::new();
    let mut ranks = Vec::new();
    for i in 0..terms.len() {
        let id = ctx.input(node, i)?;
        let dims = ctx.fixed_shape(id, "Einsum")?;
        ranks.push(dims.len());
        ops.push((id, dims));
    }
    let max_ell = terms
        .iter()
        .zip(&ranks)
        .filter(|(t, _)| t.ell.is_some())
        .map(|(t, &r)| r.saturating_sub(t.letters.len()))
        .max()
        .unwrap_or(0);
    let mut operands = Vec::new();
    for ((id, dims), term) in ops.into_iter().zip(&terms) {
        let labels = labels_of(term, dims.len(), max_ell, &eq)?;
        operands.push(Operand { id, labels, dims });
    }
    let out: Vec<Label> = match rhs {
        Some(r) => {
            let t = parse_term(r, &eq)?;
            let mut v: Vec<Label> = Vec::new();
            let at = t.ell.unwrap_or(t.letters.len());
            v.extend(t.letters[..at].iter().map(|&c| Label::Char(c)));
            if t.ell.is_some() {
                v.extend((0..max_ell).map(Label::Ell));
            } else if max_ell > 0 {
                return Err(Error::Unsupported(format!(
                    "Einsum '{eq}': an output without '...' for operands with ellipsis dims is not supported"
                )));
            }
            v.extend(t.letters[at..].iter().map(|&c| Label::Char(c)));
            v
        }
        None => {
            let mut v: Vec<Label> = (0..max_ell).map(Label::Ell).collect();
            let mut letters: Vec<char> = Vec::new();
            for t in &terms {
                letters.extend(&t.letters);
            }
            let mut once: Vec<char> = letters
                .iter()
                .copied()
                .filter(|c| letters.iter().filter(|d| *d == c).count() == 1)
                .collect();
            once.sort_unstable();
            v.extend(once.into_iter().map(Label::Char));
            v
        }
    };
    for (i, l) in out.iter().enumerate() {
        if out[..i].contains(l) {
            return Err(Error::Value(format!(
                "Einsum '{eq}': output label {l:?} repeats"
            )));
        }
        if !operands.iter().any(|o| o.labels.contains(l)) {
            return Err(Error::Value(format!(
                "Einsum '{eq}': output label {l:?} is in no input"
            )));
        }
    }

    let n = operands.len();
    let mut prepared = Vec::with_capacity(n);
    for (i, o) in operands.iter().enumerate() {
        let o = diagonals(
            ctx,
            Operand {
                id: o.id,
                labels: o.labels.clone(),
                dims: o.dims.clone(),
            },
            &eq,
        )?;
        let needed: Vec<Label> = operands
            .iter()
            .enumerate()
            .filter(|(j, _)| *j != i)
            .flat_map(|(_, p)| p.labels.iter().copied())
            .chain(out.iter().copied())
            .collect();
        prepared.push(sum_unneeded(ctx, o, &needed)?);
    }
    let mut it = prepared.into_iter();
    let mut acc = it
        .next()
        .ok_or_else(|| Error::Value(format!("Einsum '{eq}' has no inputs")))?;
    let rest: Vec<Operand> = it.collect();
    for k in 0..rest.len() {
        let needed: Vec<Label> = rest[k + 1..]
            .iter()
            .flat_map(|p| p.labels.iter().copied())
            .chain(out.iter().copied())
            .collect();
        let b = Operand {
            id: rest[k].id,
            labels: rest[k].labels.clone(),
            dims: rest[k].dims.clone(),
        };
        acc = contract(ctx, acc, b, &needed, &eq)?;
    }
    let acc = sum_unneeded(ctx, acc, &out)?;
    let perm: Vec<usize> = out
        .iter()
        .map(|l| {
            acc.labels
                .iter()
                .position(|m| m == l)
                .ok_or_else(|| Error::Graph(format!("Einsum '{eq}': lost label {l:?}")))
        })
        .collect::<Result<_>>()?;
    one(permute(ctx, acc.id, &perm)?)
}

/// Takes the diagonal of every label repeated within the operand.
fn diagonals(ctx: &mut Ctx, mut o: Operand, eq: &str) -> Result<Operand> {
    loop {
        let Some((a, b)) = (0..o.labels.len()).find_map(|a| {
            (a + 1..o.labels.len())
                .find(|&b| o.labels[b] == o.labels[a])
                .map(|b| (a, b))
        }) else {
            return Ok(o);
        };
        let len = o.dims[a];
        if o.dims[b] != len {
            return Err(Error::Shape(format!(
                "Einsum '{eq}': repeated label {:?} spans dims of sizes {len} and {}",
                o.labels[a], o.dims[b]
            )));
        }
        // Move the pair last, flatten it, and step by len+1: element i*len + i is [i, i].
        let mut perm: Vec<usize> = (0..o.labels.len()).filter(|&k| k != a && k != b).collect();
        perm.extend([a, b]);
        let x = permute(ctx, o.id, &perm)?;
        let mut dims: Vec<usize> = perm.iter().map(|&k| o.dims[k]).collect();
        let mut labels: Vec<Label> = perm.iter().map(|&k| o.labels[k]).collect();
        dims.truncate(dims.len() - 2);
        labels.truncate(labels.len() - 1);
        let mut flat: Vec<Dim> = dims.iter().map(|&d| Dim::Fixed(d)).collect();
        flat.push(Dim::Fixed(len * len));
        let x = reshape(ctx, x, flat)?;
        let x = slice(ctx, x, dims.len(), 0, (len * len) as i64, len as i64 + 1)?;
        dims.push(len);
        o = Operand {
            id: x,
            labels,
            dims,
        };
    }
}

/// Sums the axes whose labels are not in `needed`.
fn sum_unneeded(ctx: &mut Ctx, o: Operand, needed: &[Label]) -> Result<Operand> {
    let axes: Vec<usize> = (0..o.labels.len())
        .filter(|&k| !needed.contains(&o.labels[k]))
        .collect();
    if axes.is_empty() {
        return Ok(o);
    }
    let id = reduce(ctx, ReduceOp::Sum, o.id, axes.clone(), false)?;
    let keep: Vec<usize> = (0..o.labels.len()).filter(|k| !axes.contains(k)).collect();
    Ok(Operand {
        id,
        labels: keep.iter().map(|&k| o.labels[k]).collect(),
        dims: keep.iter().map(|&k| o.dims[k]).collect(),
    })
}

/// `a` and `b` contracted over their shared labels not in `needed`, as one batched matmul.
fn contract(ctx: &mut Ctx, a: Operand, b: Operand, needed: &[Label], eq: &str) -> Result<Operand> {
    let both: Vec<Label> = a
        .labels
        .iter()
        .copied()
        .filter(|l| b.labels.contains(l))
        .collect();
    let keep_both = |l: &Label| needed.contains(l);
    let batch: Vec<Label> = both.iter().copied().filter(keep_both).collect();
    let inner: Vec<Label> = both.iter().copied().filter(|l| !keep_both(l)).collect();
    let a = sum_unneeded(ctx, a, &[needed, &b.labels].concat())?;
    let b = sum_unneeded(ctx, b, &[needed, &a.labels].concat())?;
    let a_only: Vec<Label> = a
        .labels
        .iter()
        .copied()
        .filter(|l| !b.labels.contains(l))
        .collect();
    let b_only: Vec<Label> = b
        .labels
        .iter()
        .copied()
        .filter(|l| !a.labels.contains(l))
        .collect();
    let size = |o: &Operand, l: &Label| {
        o.labels
            .iter()
            .position(|m| m == l)
            .map(|k| o.dims[k])
            .unwrap_or(1)
    };
    let mut k_size = 1;
    for l in &inner {
        let (sa, sb) = (size(&a, l), size(&b, l));
        if sa != sb {
            return Err(Error::Unsupported(format!(
                "Einsum '{eq}': summed label {l:?} has sizes {sa} and {sb} (broadcast summed labels are not supported)"
            )));
        }
        k_size *= sa;
    }
    for l in &batch {
        let (sa, sb) = (size(&a, l), size(&b, l));
        if sa != sb && sa != 1 && sb != 1 {
            return Err(Error::Shape(format!(
                "Einsum '{eq}': label {l:?} has sizes {sa} and {sb}"
            )));
        }
    }
    let m: usize = a_only.iter().map(|l| size(&a, l)).product();
    let n: usize = b_only.iter().map(|l| size(&b, l)).product();
    let order = |o: &Operand, ls: &[Label]| -> Vec<usize> {
        ls.iter()
            .filter_map(|l| o.labels.iter().position(|m| m == l))
            .collect()
    };
    let a_perm = order(&a, &[batch.as_slice(), &a_only, &inner].concat());
    let b_perm = order(&b, &[batch.as_slice(), &inner, &b_only].concat());
    let mut a_shape: Vec<Dim> = batch.iter().map(|l| Dim::Fixed(size(&a, l))).collect();
    let mut b_shape: Vec<Dim> = batch.iter().map(|l| Dim::Fixed(size(&b, l))).collect();
    a_shape.extend([Dim::Fixed(m), Dim::Fixed(k_size)]);
    b_shape.extend([Dim::Fixed(k_size), Dim::Fixed(n)]);
    let ax = permute(ctx, a.id, &a_perm)?;
    let ax = reshape(ctx, ax, a_shape)?;
    let bx = permute(ctx, b.id, &b_perm)?;
    let bx = reshape(ctx, bx, b_shape)?;
    let y = matmul(ctx, ax, bx)?;
    let mut labels = batch.clone();
    let mut dims: Vec<usize> = batch.iter().map(|l| size(&a, l).max(size(&b, l))).collect();
    for l in &a_only {
        labels.push(*l);
        dims.push(size(&a, l));
    }
    for l in &b_only {
        labels.push(*l);
        dims.push(size(&b, l));
    }
    let id = reshape(ctx, y, dims.iter().map(|&d| Dim::Fixed(d)).collect())?;
    Ok(Operand { id, labels, dims })
}
