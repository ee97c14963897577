//! Fusion planning: which graph values get a buffer, and which of them are computed together
//! in one step.
//!
//! 1. Every node is classified ([`classify`]): source, view, pointwise, reduction, extern, eval.
//! 2. Values that need a buffer are *materialised* (roots): graph outputs, reductions, extern
//!    and eval results and their inputs, and pointwise values with several consumers unless
//!    cheap (cost ≤ [`CHEAP`] ops: those are recomputed inline in each consumer, which is what
//!    lets decomposed softmax / layer norm read `exp(x - max)` or `x - mean` twice in one
//!    kernel). Everything else is inlined into the expressions of the roots that read it.
//! 3. Roots are merged into groups (one step each): pointwise consumers of an extern's output
//!    become its epilogue; reductions merge with the roots over the same rows (their
//!    consumers and producers) — and, when the options allow it, a reduction over exactly the
//!    columns of an extern's output rows (layer norm after a matmul, a global pool after a
//!    conv) joins the extern as a *row epilogue*, run on each finished block of rows; sibling
//!    groups over the same domain that read one buffer merge horizontally. A merge is refused
//!    when it would make a cycle between steps.
//! 4. Groups are ordered topologically.

pub(crate) mod classify;
mod report;

pub use report::{FusionReport, StepInfo, StepKindName};

use crate::kernel::Literal;
use classify::{Class, classify, constant_literal, strided_view};
use kiln_ir::{DType, Error, Graph, NodeId, Op, Result};
use std::collections::{BTreeMap, BinaryHeap, HashSet};

/// A pointwise value with several consumers is recomputed in each when inlining it costs at
/// most this many ops (reads of buffers are free), else it is materialised.
pub(crate) const CHEAP: usize = 4;

/// What one group runs as.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum GroupKind {
    /// A generated kernel.
    Kernel,
    /// The library call computing this node, with its members (other than it) as epilogue.
    Extern(NodeId),
    /// The reference kernels on this node.
    Eval(NodeId),
}

/// One step's worth of roots and the iteration domain they share: `shape` is the full domain,
/// `axes` the reduced dims (empty for pointwise kernels; rows are the other dims). An extern's
/// group has its output's shape; its `axes` are the output's column dims when its epilogue
/// reduces rows ([`extern_row_dims`]), else empty.
#[derive(Clone, Debug)]
pub(crate) struct Group {
    pub kind: GroupKind,
    pub members: Vec<NodeId>,
    pub shape: Vec<usize>,
    pub axes: Vec<usize>,
}

/// The fusion decisions for a graph.
pub(crate) struct Plan {
    pub shapes: Vec<Vec<usize>>,
    pub class: Vec<Class>,
    pub literal: Vec<Option<Literal>>,
    /// The node is a root (has its own store or is an extern/eval result).
    pub mat: Vec<bool>,
    /// Why a root is not inlined into its consumers (for the report).
    pub reason: Vec<Option<String>>,
    /// Index into `groups` for roots.
    pub group_of: Vec<usize>,
    /// Groups in execution order.
    pub groups: Vec<Group>,
    /// The root's value is written to a buffer (read by another step or a graph output).
    pub stored: Vec<bool>,
    pub is_output: Vec<bool>,
}

const NONE: usize = usize::MAX;

/// The dims of extern `op`'s output (of rank `rank`) that make its epilogue rows; the rest are
/// the columns of each row (see [`crate::ExternOp`]).
pub(crate) fn extern_row_dims(op: &Op, rank: usize) -> usize {
    match op {
        Op::Conv2d(a) if !a.channels_last => 2.min(rank),
        _ => rank.saturating_sub(1),
    }
}

/// Plans `graph`. `extern_dtypes`: the dtypes MatMul / Conv2d externs may take (empty:
/// none). `row_epilogues`: reductions over an extern's output columns may join it.
/// `isolate` names roots that must stay alone (lowering found they cannot be fused as
/// planned).
pub(crate) fn plan(
    graph: &Graph,
    fuse: bool,
    extern_dtypes: &[DType],
    row_epilogues: bool,
    isolate: &HashSet<NodeId>,
) -> Result<Plan> {
    let n = graph.nodes.len();
    let mut shapes = Vec::with_capacity(n);
    for (i, node) in graph.nodes.iter().enumerate() {
        let Some(s) = node.ty.shape.as_fixed() else {
            return Err(Error::Shape(format!(
                "schedule: %{i} ({}) has the symbolic shape {}; bind the dims first (the scheduler needs fixed shapes)",
                node.op.name(),
                node.ty.shape
            )));
        };
        for &inp in &node.inputs {
            if inp.index() >= i {
                return Err(Error::Graph(format!(
                    "schedule: %{i} reads %{} which is not defined before it",
                    inp.0
                )));
            }
        }
        shapes.push(s);
    }
    let mut is_output = vec![false; n];
    let mut live = vec![false; n];
    for &o in &graph.outputs {
        if o.index() >= n {
            return Err(Error::Graph(format!("schedule: output {o} does not exist")));
        }
        is_output[o.index()] = true;
        live[o.index()] = true;
    }
    for i in (0..n).rev() {
        if live[i] {
            for &inp in &graph.nodes[i].inputs {
                live[inp.index()] = true;
            }
        }
    }
    let mut consumers: Vec<Vec<NodeId>> = vec![Vec::new(); n];
    for i in 0..n {
        if live[i] {
            for &inp in &graph.nodes[i].inputs {
                let c = &mut consumers[inp.index()];
                if c.last() != Some(&NodeId(i as u32)) {
                    c.push(NodeId(i as u32));
                }
            }
        }
    }
    let mut literal = vec![None; n];
    let mut class = Vec::with_capacity(n);
    for (i, node) in graph.nodes.iter().enumerate() {
        if let Op::Constant(c) = node.op
            && live[i]
        {
            let t = graph.consts.get(c.0 as usize).ok_or_else(|| {
                Error::Graph(format!(
                    "schedule: %{i} reads constant {} which does not exist",
                    c.0
                ))
            })?;
            literal[i] = constant_literal(t);
        }
        class.push(if live[i] {
            classify(graph, NodeId(i as u32), extern_dtypes, &literal)
        } else {
            Class::Source
        });
    }

    // 2. Roots.
    let mut mat = vec![false; n];
    let mut reason: Vec<Option<String>> = vec![None; n];
    let set = |mat: &mut Vec<bool>, reason: &mut Vec<Option<String>>, i: usize, why: String| {
        if !mat[i] {
            mat[i] = true;
            reason[i] = Some(why);
        }
    };
    for i in 0..n {
        if !live[i] {
            continue;
        }
        if is_output[i] && class[i] != Class::Source {
            set(&mut mat, &mut reason, i, "graph output".into());
        }
        match &class[i] {
            Class::Extern(_) | Class::Eval(_) => {
                let why = match &class[i] {
                    Class::Eval(w) => w.clone(),
                    _ => "extern result".into(),
                };
                set(&mut mat, &mut reason, i, why);
                let what = if matches!(class[i], Class::Extern(_)) {
                    "extern input"
                } else {
                    "eval input"
                };
                for &inp in &graph.nodes[i].inputs {
                    match strided_view(graph, inp, &shapes) {
                        Some((base, _)) if class[base.index()] == Class::Source => {}
                        Some((base, _)) => set(&mut mat, &mut reason, base.index(), what.into()),
                        None => set(
                            &mut mat,
                            &mut reason,
                            inp.index(),
                            format!("{what} (not a strided view)"),
                        ),
                    }
                }
            }
            Class::Reduce => set(&mut mat, &mut reason, i, "reduction".into()),
            Class::Pointwise if !fuse => set(&mut mat, &mut reason, i, "fusion disabled".into()),
            _ => {}
        }
    }
    if fuse {
        let mut cost = vec![0usize; n];
        for i in 0..n {
            if !live[i] || class[i] != Class::Pointwise {
                continue;
            }
            cost[i] = 1 + graph.nodes[i]
                .inputs
                .iter()
                .map(|&x| inline_cost(graph, x, &mat, &class, &cost))
                .sum::<usize>();
            if mat[i] {
                continue;
            }
            let mut uses = Vec::new();
            value_uses(NodeId(i as u32), &consumers, &class, &mat, &mut uses);
            uses.sort();
            uses.dedup();
            let numel: usize = shapes[i].iter().product();
            let broadcast = uses.iter().any(|c| {
                let dom = match class[c.index()] {
                    Class::Reduce => graph.nodes[c.index()]
                        .inputs
                        .first()
                        .map(|x| &shapes[x.index()]),
                    _ => Some(&shapes[c.index()]),
                };
                dom.is_some_and(|d| d.iter().product::<usize>() > numel)
            });
            if (uses.len() > 1 || broadcast) && cost[i] > CHEAP {
                let why = if uses.len() > 1 {
                    format!("{} consumers", uses.len())
                } else {
                    "broadcast to a larger domain".into()
                };
                set(&mut mat, &mut reason, i, why);
            }
        }
    }

    // Sinks (roots reached through inlined values) and reads (buffers read when inlining).
    let mut flow: Vec<Vec<NodeId>> = vec![Vec::new(); n];
    for i in (0..n).rev() {
        if !live[i] {
            continue;
        }
        let mut s = Vec::new();
        for &c in &consumers[i] {
            if mat[c.index()] {
                s.push(c);
            } else {
                s.extend_from_slice(&flow[c.index()]);
            }
        }
        s.sort();
        s.dedup();
        flow[i] = s;
    }
    let mut front: Vec<Vec<NodeId>> = vec![Vec::new(); n];
    let mut reads: Vec<Vec<NodeId>> = vec![Vec::new(); n];
    for i in 0..n {
        if !live[i] {
            continue;
        }
        let mut r = Vec::new();
        match &class[i] {
            Class::Extern(_) | Class::Eval(_) => {
                for &inp in &graph.nodes[i].inputs {
                    match strided_view(graph, inp, &shapes) {
                        Some((base, _))
                            if mat[base.index()] || class[base.index()] == Class::Source =>
                        {
                            r.push(base)
                        }
                        _ => r.push(inp),
                    }
                }
            }
            _ => {
                for &inp in &graph.nodes[i].inputs {
                    let k = inp.index();
                    if mat[k] || (class[k] == Class::Source && literal[k].is_none()) {
                        r.push(inp);
                    } else {
                        r.extend_from_slice(&front[k]);
                    }
                }
            }
        }
        r.sort();
        r.dedup();
        if mat[i] {
            reads[i] = r;
        } else {
            front[i] = r;
        }
    }

    // 3. Groups.
    let mut b = Builder {
        graph,
        shapes: &shapes,
        class: &class,
        mat: &mat,
        consumers: &consumers,
        group_of: vec![NONE; n],
        groups: Vec::new(),
        isolate,
        row_epilogues,
    };
    for i in 0..n {
        if !mat[i] {
            continue;
        }
        let id = NodeId(i as u32);
        let (kind, shape, axes) = match &class[i] {
            Class::Extern(_) => (GroupKind::Extern(id), shapes[i].clone(), vec![]),
            Class::Eval(_) => (GroupKind::Eval(id), shapes[i].clone(), vec![]),
            Class::Reduce => {
                let (s, a) = b.reduce_domain(id);
                (GroupKind::Kernel, s, a)
            }
            _ => (GroupKind::Kernel, shapes[i].clone(), vec![]),
        };
        b.group_of[i] = b.groups.len();
        b.groups.push(Some(Group {
            kind,
            members: vec![id],
            shape,
            axes,
        }));
    }
    if fuse {
        for i in 0..n {
            if !matches!(class[i], Class::Extern(_)) {
                continue;
            }
            for &s in &flow_of(i, &consumers, &mat, &flow) {
                if matches!(class[s.index()], Class::Pointwise | Class::View)
                    && shapes[s.index()] == shapes[i]
                {
                    let _ = b.try_merge(b.group_of[i], b.group_of[s.index()]);
                }
            }
        }
        for i in 0..n {
            if class[i] != Class::Reduce || isolate.contains(&NodeId(i as u32)) {
                continue;
            }
            let mut failed = None;
            for &s in &flow_of(i, &consumers, &mat, &flow) {
                let (gi, gs) = (b.group_of[i], b.group_of[s.index()]);
                if gi == gs {
                    continue;
                }
                let why = match b.try_merge(gi, gs) {
                    Ok(()) => continue,
                    Err(w) => w,
                };
                failed.get_or_insert(why);
            }
            for &p in &reads[i] {
                if matches!(class[p.index()], Class::Pointwise | Class::View)
                    && b.group_of[p.index()] != b.group_of[i]
                {
                    let _ = b.try_merge(b.group_of[i], b.group_of[p.index()]);
                }
            }
            // The extern whose output rows this reduction reduces takes it as its epilogue,
            // whether it reads the extern's result or a value the extern's epilogue stores
            // (gpt2's next LayerNorm over `h = ffn2(x) + bias + h`).
            for &p in &reads[i] {
                let (gp, gi) = (b.group_of[p.index()], b.group_of[i]);
                // Sources (inputs, constants) have no group.
                let extern_group = gp != NONE
                    && b.groups[gp]
                        .as_ref()
                        .is_some_and(|g| matches!(g.kind, GroupKind::Extern(_)));
                if extern_group && gp != gi {
                    let _ = b.try_merge(gp, gi);
                }
            }
            if let Some(w) = failed {
                reason[i] = Some(format!("reduction; a consumer has a {w}"));
            }
        }
        // Horizontal: groups over one domain reading one buffer.
        let mut readers: BTreeMap<NodeId, Vec<NodeId>> = BTreeMap::new();
        for i in 0..n {
            if mat[i] && class[i].is_generated() {
                for &r in &reads[i] {
                    readers.entry(r).or_default().push(NodeId(i as u32));
                }
            }
        }
        for (_, rs) in readers {
            for k in 1..rs.len() {
                let ga = b.group_of[rs[0].index()];
                let gb = b.group_of[rs[k].index()];
                if ga != gb && b.same_domain(ga, gb) {
                    let _ = b.try_merge(ga, gb);
                }
            }
        }
    }

    // 4. Order and stores.
    let Builder {
        group_of, groups, ..
    } = b;
    let live_groups: Vec<usize> = (0..groups.len()).filter(|g| groups[*g].is_some()).collect();
    let mut deps: Vec<Vec<usize>> = vec![Vec::new(); groups.len()];
    let mut indeg = vec![0usize; groups.len()];
    for &g in &live_groups {
        let Some(grp) = &groups[g] else { continue };
        let mut d: Vec<usize> = grp
            .members
            .iter()
            .flat_map(|m| reads[m.index()].iter())
            .filter(|r| mat[r.index()])
            .map(|r| group_of[r.index()])
            .filter(|&h| h != g)
            .collect();
        d.sort();
        d.dedup();
        for &h in &d {
            deps[h].push(g);
        }
        indeg[g] = d.len();
    }
    let first = |g: usize| {
        groups[g]
            .as_ref()
            .and_then(|x| x.members.iter().min().copied())
            .unwrap_or(NodeId(0))
    };
    let mut ready: BinaryHeap<std::cmp::Reverse<(NodeId, usize)>> = live_groups
        .iter()
        .filter(|g| indeg[**g] == 0)
        .map(|&g| std::cmp::Reverse((first(g), g)))
        .collect();
    let mut order = Vec::with_capacity(live_groups.len());
    while let Some(std::cmp::Reverse((_, g))) = ready.pop() {
        order.push(g);
        for &h in &deps[g] {
            indeg[h] -= 1;
            if indeg[h] == 0 {
                ready.push(std::cmp::Reverse((first(h), h)));
            }
        }
    }
    if order.len() != live_groups.len() {
        return Err(Error::Graph(
            "schedule: internal error: fusion groups depend on each other in a cycle".into(),
        ));
    }
    let mut groups = groups;
    let mut final_groups = Vec::with_capacity(order.len());
    let mut new_index = vec![NONE; groups.len()];
    for g in order {
        if let Some(mut grp) = groups[g].take() {
            grp.members.sort();
            new_index[g] = final_groups.len();
            final_groups.push(grp);
        }
    }
    let group_of: Vec<usize> = group_of
        .iter()
        .map(|&g| if g == NONE { NONE } else { new_index[g] })
        .collect();
    let mut stored = vec![false; n];
    for i in 0..n {
        if mat[i] {
            stored[i] = is_output[i]
                || matches!(class[i], Class::Extern(_) | Class::Eval(_))
                || flow_of(i, &consumers, &mat, &flow)
                    .iter()
                    .any(|s| group_of[s.index()] != group_of[i]);
        }
    }
    // An extern or eval may read a root through a view whose own node is a root too (an
    // output reshape of a reduction): the flow above ends at that view, so mark the base here.
    for i in 0..n {
        if matches!(class[i], Class::Extern(_) | Class::Eval(_)) {
            for r in &reads[i] {
                if mat[r.index()] && group_of[r.index()] != group_of[i] {
                    stored[r.index()] = true;
                }
            }
        }
    }
    Ok(Plan {
        shapes,
        class,
        literal,
        mat,
        reason,
        group_of,
        groups: final_groups,
        stored,
        is_output,
    })
}

/// The roots that read root `i`'s value (directly or through inlined values).
fn flow_of(i: usize, consumers: &[Vec<NodeId>], mat: &[bool], flow: &[Vec<NodeId>]) -> Vec<NodeId> {
    let mut s = Vec::new();
    for &c in &consumers[i] {
        if mat[c.index()] {
            s.push(c);
        } else {
            s.extend_from_slice(&flow[c.index()]);
        }
    }
    s.sort();
    s.dedup();
    s
}

/// Ops inlined when reading `x` (views are free).
fn inline_cost(graph: &Graph, x: NodeId, mat: &[bool], class: &[Class], cost: &[usize]) -> usize {
    let i = x.index();
    if mat[i] {
        return 0;
    }
    match class[i] {
        Class::Pointwise => cost[i],
        Class::View => graph.nodes[i]
            .inputs
            .iter()
            .map(|&y| inline_cost(graph, y, mat, class, cost))
            .sum(),
        _ => 0,
    }
}

/// The non-view consumers of `x`'s value (through inlined views).
fn value_uses(
    x: NodeId,
    consumers: &[Vec<NodeId>],
    class: &[Class],
    mat: &[bool],
    out: &mut Vec<NodeId>,
) {
    for &c in &consumers[x.index()] {
        if class[c.index()] == Class::View && !mat[c.index()] {
            value_uses(c, consumers, class, mat, out);
        } else {
            out.push(c);
        }
    }
}

/// Groups being merged.
struct Builder<'a> {
    graph: &'a Graph,
    shapes: &'a [Vec<usize>],
    class: &'a [Class],
    mat: &'a [bool],
    consumers: &'a [Vec<NodeId>],
    group_of: Vec<usize>,
    groups: Vec<Option<Group>>,
    isolate: &'a HashSet<NodeId>,
    row_epilogues: bool,
}

impl Builder<'_> {
    /// The full domain and reduced axes of a reduce node.
    fn reduce_domain(&self, r: NodeId) -> (Vec<usize>, Vec<usize>) {
        let node = self.graph.node(r);
        let s = node
            .inputs
            .first()
            .map(|x| self.shapes[x.index()].clone())
            .unwrap_or_default();
        let a = match &node.op {
            Op::Reduce { axes, .. } => axes.clone(),
            _ => vec![],
        };
        (s, a)
    }

    fn same_domain(&self, a: usize, b: usize) -> bool {
        match (&self.groups[a], &self.groups[b]) {
            (Some(x), Some(y)) => {
                x.kind == GroupKind::Kernel
                    && y.kind == GroupKind::Kernel
                    && x.shape == y.shape
                    && x.axes == y.axes
            }
            _ => false,
        }
    }

    /// Whether root `x` can be computed in a kernel over `shape` reducing `axes`.
    fn fits(&self, x: NodeId, shape: &[usize], axes: &[usize]) -> bool {
        let sx = &self.shapes[x.index()];
        match self.class[x.index()] {
            Class::Reduce => {
                let (s, a) = self.reduce_domain(x);
                s == shape && a == axes
            }
            Class::Pointwise | Class::View => {
                sx == shape
                    || (!axes.is_empty()
                        && (*sx == kept(shape, axes, true) || *sx == kept(shape, axes, false)))
            }
            _ => false,
        }
    }

    /// Merges group `b` into group `a`, or says why not.
    fn try_merge(&mut self, a: usize, b: usize) -> std::result::Result<(), &'static str> {
        if a == b {
            return Ok(());
        }
        let (Some(ga), Some(gb)) = (&self.groups[a], &self.groups[b]) else {
            return Err("different iteration domain");
        };
        if ga
            .members
            .iter()
            .chain(&gb.members)
            .any(|m| self.isolate.contains(m))
        {
            return Err("read at a different index");
        }
        let (kind, shape, axes) = match (ga.kind, gb.kind) {
            (GroupKind::Kernel, GroupKind::Kernel) => {
                if !ga.axes.is_empty()
                    && !gb.axes.is_empty()
                    && (ga.axes != gb.axes || ga.shape != gb.shape)
                {
                    return Err("different iteration domain");
                }
                if ga.axes.is_empty() && gb.axes.is_empty() && ga.shape != gb.shape {
                    return Err("different iteration domain");
                }
                let g = if ga.axes.is_empty() { gb } else { ga };
                (GroupKind::Kernel, g.shape.clone(), g.axes.clone())
            }
            (GroupKind::Extern(e), GroupKind::Kernel) => {
                if gb.shape != ga.shape {
                    return Err("different iteration domain");
                }
                if gb.axes.is_empty() {
                    (GroupKind::Extern(e), ga.shape.clone(), ga.axes.clone())
                } else {
                    // A row epilogue: it reduces exactly the columns of the output's rows.
                    let rows = extern_row_dims(&self.graph.node(e).op, ga.shape.len());
                    let cols: Vec<usize> = (rows..ga.shape.len()).collect();
                    if !self.row_epilogues
                        || gb.axes != cols
                        || (!ga.axes.is_empty() && ga.axes != gb.axes)
                    {
                        return Err("different iteration domain");
                    }
                    (GroupKind::Extern(e), ga.shape.clone(), cols)
                }
            }
            (GroupKind::Eval(_), _) | (_, GroupKind::Eval(_)) => return Err("eval input"),
            _ => return Err("extern input"),
        };
        let all_fit = ga.members.iter().chain(&gb.members).all(|&m| match kind {
            GroupKind::Extern(e) if axes.is_empty() => {
                m == e
                    || (self.class[m.index()] != Class::Reduce && self.shapes[m.index()] == shape)
            }
            GroupKind::Extern(e) => m == e || self.fits(m, &shape, &axes),
            _ => self.fits(m, &shape, &axes),
        });
        if !all_fit {
            return Err("different iteration domain");
        }
        if self.makes_cycle(a, b) {
            return Err("dependency through another step");
        }
        let Some(gb) = self.groups[b].take() else {
            return Err("different iteration domain");
        };
        for m in &gb.members {
            self.group_of[m.index()] = a;
        }
        if let Some(ga) = &mut self.groups[a] {
            ga.members.extend(gb.members);
            ga.kind = kind;
            ga.shape = shape;
            ga.axes = axes;
        }
        Ok(())
    }

    /// True when a path leaves groups `a`∪`b` through another root and comes back. Another
    /// group runs as one step, so reaching any of its roots continues from all of them.
    fn makes_cycle(&self, a: usize, b: usize) -> bool {
        let inside = |x: NodeId| self.group_of[x.index()] == a || self.group_of[x.index()] == b;
        let mut seen = vec![0u8; self.shapes.len()];
        let mut left = vec![false; self.groups.len()];
        let mut stack: Vec<(NodeId, bool)> = Vec::new();
        for g in [a, b] {
            if let Some(grp) = &self.groups[g] {
                for &m in &grp.members {
                    stack.extend(self.consumers[m.index()].iter().map(|&c| (c, false)));
                }
            }
        }
        while let Some((v, out)) = stack.pop() {
            if self.mat[v.index()] && inside(v) {
                if out {
                    return true;
                }
                continue;
            }
            let out = out || self.mat[v.index()];
            let bit = if out { 2 } else { 1 };
            if seen[v.index()] & bit != 0 {
                continue;
            }
            seen[v.index()] |= bit;
            stack.extend(self.consumers[v.index()].iter().map(|&c| (c, out)));
            let g = self.group_of[v.index()];
            if self.mat[v.index()] && g != NONE && !left[g] {
                left[g] = true;
                if let Some(grp) = &self.groups[g] {
                    for &m in &grp.members {
                        stack.extend(self.consumers[m.index()].iter().map(|&c| (c, true)));
                    }
                }
            }
        }
        false
    }
}

/// `shape` with `axes` reduced (kept as 1 or dropped).
pub(crate) fn kept(shape: &[usize], axes: &[usize], keep: bool) -> Vec<usize> {
    shape
        .iter()
        .enumerate()
        .filter_map(|(d, &e)| {
            if axes.contains(&d) {
                keep.then_some(1)
            } else {
                Some(e)
            }
        })
        .collect()
}
