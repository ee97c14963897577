//! Sibling matmul merging: matmuls that read the same left operand, each by a constant
//! `[K, N_i]` weight (each followed by the add of a constant `[N_i]` bias, or none), become one
//! matmul by the weights concatenated along N (and one add of the concatenated biases); each
//! original value is a slice of the result, a view. Bert's Q, K and V projections are the
//! case: one GEMM with N = 2304 instead of three with 768, and one launch instead of three.
//!
//! A weight may be a view of a constant (a `Linear`'s transposed weight): the concatenation is
//! a new dense row-major constant, or, where the backend packs weights from any layout
//! (`join_rows`) and every weight is such a transpose, the constants joined along their rows,
//! read through a transpose. Runs before `layout`, so the merged weights are made from the
//! model's own weights (which `memo` can key on across compiles) and `layout` has nothing
//! left to copy for them.

use super::Pass;
use super::layout::const_view;
use crate::rewrite::{Rewrite, Step, use_counts};
use kiln_ir::{BinaryOp, DType, Graph, HostTensor, NodeId, Op, Result, SliceAxis};
use std::collections::HashMap;

/// Merges sibling matmuls by constant weights (see the module doc).
pub struct MergeMatmuls {
    /// Where every weight is the transpose of a dense constant (`Linear`s), join those
    /// constants' rows and read the transpose of the result (see
    /// [`concat_rows_of_transposes`]) rather than make the merged weight row-major: for a
    /// backend that packs weights from any layout ([`crate::OptOptions::packs_weights`]),
    /// where the `layout` pass, which would copy the transpose row-major, does not run.
    pub join_rows: bool,
}

/// One matmul of a group, with its bias add.
#[derive(Clone, Copy)]
struct Member {
    mm: NodeId,
    /// The add of the bias and the bias constant node.
    add: Option<(NodeId, NodeId)>,
    /// Its columns in the merged result.
    cols: (usize, usize),
}

/// Where a source node goes: the group it belongs to and its member index.
#[derive(Clone, Copy)]
enum Role {
    Matmul(usize, usize),
    Add(usize, usize),
}

impl Pass for MergeMatmuls {
    fn name(&self) -> &'static str {
        "merge_matmuls"
    }

    fn run(&self, graph: &Graph) -> Result<Graph> {
        let groups = find(graph);
        let mut role: HashMap<NodeId, Role> = HashMap::new();
        for (g, members) in groups.iter().enumerate() {
            for (i, m) in members.iter().enumerate() {
                role.insert(m.mm, Role::Matmul(g, i));
                if let Some((a, _)) = m.add {
                    role.insert(a, Role::Add(g, i));
                }
            }
        }
        let mut merged: Vec<Option<NodeId>> = vec![None; groups.len()];
        Rewrite::new(graph)?.run(|rw, old, node| {
            let Some(&r) = role.get(&old) else {
                return Ok(Step::Copy);
            };
            let (g, i, is_add) = match r {
                Role::Matmul(g, i) => (g, i, false),
                Role::Add(g, i) => (g, i, true),
            };
            let members = &groups[g];
            let y = match merged[g] {
                Some(y) => y,
                None => {
                    // The first member's matmul (the earliest node of the group).
                    let src = rw.src();
                    let konst = |id: NodeId| const_view(src, id).ok().flatten();
                    let weights: Option<Vec<HostTensor>> =
                        members.iter().map(|m| konst(src.node(m.mm).inputs[1])).collect();
                    let biases: Option<Vec<HostTensor>> =
                        members.iter().filter_map(|m| m.add).map(|(_, b)| konst(b)).collect();
                    // `find` only groups constant weights and biases.
                    let (Some(weights), Some(biases)) = (weights, biases) else {
                        return Err(kiln_ir::Error::Graph("merge_matmuls: internal: a grouped weight or bias is not a constant".into()));
                    };
                    let lhs = rw.mapped(src.node(members[0].mm).inputs[0])?;
                    let rows = if self.join_rows { concat_rows_of_transposes(&weights)? } else { None };
                    let w = match rows {
                        Some(rows) => {
                            let c = rw.constant(rows);
                            rw.add(Op::Permute(vec![1, 0]), &[c])?
                        }
                        None => rw.constant(concat_columns(&weights)?),
                    };
                    let mut y = rw.add(Op::MatMul, &[lhs, w])?;
                    if !biases.is_empty() {
                        let b = rw.constant(concat_columns(&biases)?);
                        y = rw.add(Op::Binary(BinaryOp::Add), &[y, b])?;
                    }
                    merged[g] = Some(y);
                    y
                }
            };
            let m = members[i];
            if m.add.is_some() && !is_add {
                return Ok(Step::Drop); // read only by its add, which becomes the slice
            }
            let rank = node.ty.shape.rank();
            let mut axes = vec![SliceAxis::FULL; rank];
            axes[rank - 1] = SliceAxis { start: m.cols.0 as i64, end: m.cols.1 as i64, step: 1 };
            Ok(Step::Replace(rw.add(Op::Slice(axes), &[y])?))
        })
    }
}

/// Tensors of shape `[.., N_i]` (same leading dims) joined along the last dim, as one dense
/// tensor `[.., sum N_i]` (the reference concat, as `fold` evaluates constants).
fn concat_columns(parts: &[HostTensor]) -> Result<HostTensor> {
    let axis = parts[0].shape().len() - 1;
    let refs: Vec<&HostTensor> = parts.iter().collect();
    crate::memo::derived("merge_matmuls", &refs, &[], || kiln_cpu::eval(&Op::Concat { axis }, &refs))
}

/// When every `[K, N_i]` weight is the transpose of a dense `[N_i, K]` constant (a `Linear`'s
/// weight as its matmul reads it), those constants joined along their rows, `[sum N_i, K]`,
/// whose transpose is the merged weight: a copy at memory speed, where joining the columns of
/// the transposes read each weight across its rows (bert-base's 12 QKV merges: 95 ms of a
/// 120 ms warm start). `None` when some weight is not such a transpose.
fn concat_rows_of_transposes(parts: &[HostTensor]) -> Result<Option<HostTensor>> {
    let mut rows = Vec::with_capacity(parts.len());
    for w in parts {
        let t = w.with_layout(w.layout.permute(&[1, 0])?);
        if !t.layout.is_contiguous() {
            return Ok(None);
        }
        rows.push(t);
    }
    let refs: Vec<&HostTensor> = rows.iter().collect();
    crate::memo::derived("merge_matmuls_rows", &refs, &[], || kiln_cpu::eval(&Op::Concat { axis: 0 }, &refs)).map(Some)
}

/// Groups of at least two matmuls to merge, members in node order.
fn find(g: &Graph) -> Vec<Vec<Member>> {
    let uses = use_counts(g);
    let mut users: Vec<Vec<NodeId>> = vec![Vec::new(); g.nodes.len()];
    for (i, n) in g.nodes.iter().enumerate() {
        for &x in &n.inputs {
            users[x.index()].push(NodeId(i as u32));
        }
    }
    let konst = |id: NodeId| matches!(const_view(g, id), Ok(Some(_)));
    // Key: (left operand, K, dtype, has bias) -> members.
    let mut by_key: HashMap<(NodeId, usize, DType, bool), Vec<Member>> = HashMap::new();
    for (i, n) in g.nodes.iter().enumerate() {
        let (Op::MatMul, &[x, w]) = (&n.op, n.inputs.as_slice()) else {
            continue;
        };
        let Some(&[k, cols]) = g.ty(w).shape.as_fixed().as_deref() else {
            continue;
        };
        let dtype = n.ty.dtype;
        let out = n.ty.shape.as_fixed();
        if !konst(w) || !dtype.is_float() || g.ty(w).dtype != dtype || out.as_ref().and_then(|s| s.last()) != Some(&cols) {
            continue;
        }
        let mm = NodeId(i as u32);
        // The bias add: the matmul's only reader, adding a constant [N].
        let add = match users[i].as_slice() {
            [u] if uses[i] == 1 => {
                let un = g.node(*u);
                let other = match un.inputs.as_slice() {
                    [a, b] if *a == mm => Some(*b),
                    [a, b] if *b == mm => Some(*a),
                    _ => None,
                };
                let bias_ok = |b: NodeId| {
                    konst(b)
                        && g.ty(b).dtype == dtype
                        && g.ty(b).shape.as_fixed().is_some_and(|s| s == [cols])
                };
                match (un.op == Op::Binary(BinaryOp::Add) && un.ty == n.ty, other) {
                    (true, Some(b)) if bias_ok(b) && b != mm => Some((*u, b)),
                    _ => None,
                }
            }
            _ => None,
        };
        by_key.entry((x, k, dtype, add.is_some())).or_default().push(Member { mm, add, cols: (0, cols) });
    }
    let mut groups: Vec<Vec<Member>> = by_key.into_values().filter(|m| m.len() >= 2).collect();
    for members in &mut groups {
        members.sort_by_key(|m| m.mm);
        let mut start = 0;
        for m in members.iter_mut() {
            let n = m.cols.1;
            m.cols = (start, start + n);
            start += n;
        }
    }
    groups.sort_by_key(|m| m[0].mm);
    groups
}
