//! Lowering a fusion [`Plan`] to a [`Program`]: buffers for roots, one step per group
//! (a kernel built by [`builder`], an extern call with its epilogue kernel, or an eval of one
//! op on strided views of its inputs), and copies for outputs that are inputs or constants.

pub(crate) mod builder;
mod collapse;
pub(crate) mod index;

use crate::fuse::classify::{Class, strided_view};
use crate::fuse::{GroupKind, Plan, StepInfo, StepKindName, extern_row_dims};
use crate::kernel::{Idx, Kernel, Loop, Stage};
use crate::program::{BufId, BufKind, BufView, Buffer, Epilogue, Program, Step, StepKind};
use builder::{ExternOut, KernelBuilder, Stop};
use index::{delinearize, linear};
use kiln_ir::{Error, Graph, NodeId, Op};

/// The program's buffers and the buffer of each node that has one.
pub(crate) struct Buffers {
    pub buffers: Vec<Buffer>,
    of_node: Vec<Option<BufId>>,
}

impl Buffers {
    fn push(&mut self, b: Buffer) -> BufId {
        self.buffers.push(b);
        BufId(self.buffers.len() as u32 - 1)
    }

    /// The buffer holding node `x`'s value (created on first use).
    pub fn of(&mut self, graph: &Graph, plan: &Plan, x: NodeId) -> Result<BufId, Error> {
        if let Some(b) = self.of_node[x.index()] {
            return Ok(b);
        }
        let node = graph.node(x);
        let numel = plan.shapes[x.index()].iter().product();
        let kind = match &node.op {
            Op::Constant(c) => BufKind::Const(*c),
            Op::Input { .. } => {
                return Err(Error::Graph(format!(
                    "schedule: {x} is an input node that is not in the graph's inputs"
                )));
            }
            _ if plan.mat[x.index()] => BufKind::Temp,
            _ => {
                return Err(Error::Graph(format!(
                    "schedule: internal: {x} ({}) has no buffer",
                    node.op.name()
                )));
            }
        };
        let b = self.push(Buffer {
            dtype: node.ty.dtype,
            numel,
            kind,
        });
        self.of_node[x.index()] = Some(b);
        Ok(b)
    }
}

/// Lowers `plan`; `Err(Ok(node))` asks to plan again with `node` kept alone.
pub(crate) fn lower(
    graph: &Graph,
    plan: &Plan,
) -> Result<(Program, Vec<StepInfo>), Result<NodeId, Error>> {
    let mut bufs = Buffers {
        buffers: Vec::new(),
        of_node: vec![None; graph.nodes.len()],
    };
    let mut inputs = Vec::new();
    for (i, &x) in graph.inputs.iter().enumerate() {
        let numel = plan.shapes.get(x.index()).map_or(0, |s| s.iter().product());
        let b = bufs.push(Buffer {
            dtype: graph.ty(x).dtype,
            numel,
            kind: BufKind::Input(i),
        });
        bufs.of_node[x.index()] = Some(b);
        inputs.push(b);
    }
    let mut steps = Vec::new();
    let mut infos = Vec::new();
    for g in 0..plan.groups.len() {
        let (step, info) =
            lower_group(graph, plan, g, steps.len(), &mut bufs).map_err(|s| match s {
                Stop::Retry(n) => Ok(n),
                Stop::Fail(e) => Err(e),
            })?;
        steps.push(step);
        infos.push(info);
    }
    let mut outputs = Vec::new();
    for &o in &graph.outputs {
        let shape = plan.shapes[o.index()].clone();
        let b = if plan.class[o.index()] == Class::Source {
            let (step, info, b) =
                copy_source(graph, plan, o, steps.len(), &mut bufs).map_err(Err)?;
            steps.push(step);
            infos.push(info);
            b
        } else {
            bufs.of(graph, plan, o).map_err(Err)?
        };
        outputs.push((b, shape));
    }
    let program = Program {
        buffers: bufs.buffers,
        steps,
        inputs,
        outputs,
        consts: graph.consts.clone(),
        memory: None,
    };
    Ok((program, infos))
}

/// A C identifier `k{step}_{op}_{op}..` naming the first distinct ops of a step.
fn kernel_name(graph: &Graph, step: usize, nodes: &[NodeId]) -> String {
    let mut ops: Vec<String> = Vec::new();
    for n in nodes {
        let name: String = graph
            .node(*n)
            .op
            .name()
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
            .collect();
        if !ops.contains(&name) {
            ops.push(name);
        }
        if ops.len() == 3 {
            break;
        }
    }
    if ops.is_empty() {
        format!("k{step}")
    } else {
        format!("k{step}_{}", ops.join("_"))
    }
}

/// The strided view in which an extern or eval reads its input `x`.
fn input_view(graph: &Graph, plan: &Plan, x: NodeId, bufs: &mut Buffers) -> Result<BufView, Stop> {
    let (base, layout) = match strided_view(graph, x, &plan.shapes) {
        Some((b, l)) if plan.mat[b.index()] || plan.class[b.index()] == Class::Source => (b, l),
        _ => (x, kiln_ir::Layout::contiguous(&plan.shapes[x.index()])),
    };
    let buf = bufs.of(graph, plan, base)?;
    Ok(BufView {
        buf,
        offset: layout.offset,
        shape: layout.shape,
        strides: layout.strides.iter().map(|&s| s.max(0) as usize).collect(),
    })
}

fn lower_group(
    graph: &Graph,
    plan: &Plan,
    g: usize,
    step: usize,
    bufs: &mut Buffers,
) -> Result<(Step, StepInfo), Stop> {
    let grp = &plan.groups[g];
    let notes = |members: &[NodeId]| -> Vec<(NodeId, String)> {
        members
            .iter()
            .filter(|m| plan.stored[m.index()])
            .map(|&m| {
                let why = if plan.is_output[m.index()] {
                    "graph output".to_string()
                } else {
                    plan.reason[m.index()]
                        .clone()
                        .unwrap_or_else(|| "read by another step".into())
                };
                (m, why)
            })
            .collect()
    };
    match grp.kind {
        GroupKind::Eval(x) => {
            let node = graph.node(x);
            let inputs = node
                .inputs
                .iter()
                .map(|&i| input_view(graph, plan, i, bufs))
                .collect::<Result<Vec<_>, _>>()?;
            let out = bufs.of(graph, plan, x)?;
            let kind = StepKind::Eval {
                op: node.op.clone(),
                inputs,
                out,
                out_shape: plan.shapes[x.index()].clone(),
                out_strides: None,
            };
            let info = StepInfo {
                name: format!("eval{step}_{}", node.op.name()),
                kind: StepKindName::Eval,
                nodes: vec![x],
                notes: notes(&[x]),
            };
            Ok((
                Step {
                    kind,
                    nodes: vec![x],
                    with_previous: false,
                },
                info,
            ))
        }
        GroupKind::Extern(x) => {
            let node = graph.node(x);
            let op = match &plan.class[x.index()] {
                Class::Extern(op) => op.clone(),
                _ => {
                    return Err(Stop::Fail(Error::Graph(format!(
                        "schedule: internal: {x} is not an extern"
                    ))));
                }
            };
            let inputs = node
                .inputs
                .iter()
                .map(|&i| input_view(graph, plan, i, bufs))
                .collect::<Result<Vec<_>, _>>()?;
            let out = bufs.of(graph, plan, x)?;
            let out_shape = plan.shapes[x.index()].clone();
            let rest: Vec<NodeId> = grp.members.iter().copied().filter(|&m| m != x).collect();
            let mut nodes = vec![x];
            let epilogue = if rest.iter().any(|m| plan.stored[m.index()]) {
                let (k, args, touched) =
                    epilogue_kernel(graph, plan, g, step, x, out, &out_shape, &rest, bufs)?;
                nodes.extend(touched);
                Some(Epilogue { kernel: k, args })
            } else {
                None
            };
            nodes.sort();
            nodes.dedup();
            let kind_name = if epilogue.is_some() {
                StepKindName::ExternEpilogue
            } else {
                StepKindName::Extern
            };
            let info = StepInfo {
                name: format!("extern{step}_{}", node.op.name()),
                kind: kind_name,
                nodes: nodes.clone(),
                notes: notes(&grp.members),
            };
            Ok((
                Step {
                    kind: StepKind::Extern {
                        op,
                        inputs,
                        out,
                        out_shape,
                        epilogue,
                    },
                    nodes,
                    with_previous: false,
                },
                info,
            ))
        }
        GroupKind::Kernel => {
            let mut kb = KernelBuilder::new(graph, plan, g);
            let mut outer = Vec::new();
            let mut ix = Vec::with_capacity(grp.shape.len());
            for (d, &e) in grp.shape.iter().enumerate() {
                ix.push(if grp.axes.contains(&d) {
                    Idx::Const(0)
                } else {
                    kb.loop_var(e, &mut outer)
                });
            }
            kb.outer_ix = ix;
            kb.k.outer = outer;
            for &m in &grp.members {
                if plan.class[m.index()] == Class::Reduce {
                    kb.reduce_stage(m, bufs)?;
                }
            }
            for &m in &grp.members {
                if plan.stored[m.index()] {
                    let buf = bufs.of(graph, plan, m)?;
                    kb.store_stage(m, buf, bufs)?;
                }
            }
            let mut nodes = kb.touched.clone();
            nodes.extend(grp.members.iter().copied());
            nodes.sort();
            nodes.dedup();
            let has_reduce = nodes.iter().any(|n| plan.class[n.index()] == Class::Reduce);
            let computes = nodes
                .iter()
                .any(|n| !matches!(plan.class[n.index()], Class::View | Class::Source));
            let kind = if has_reduce {
                StepKindName::Reduction
            } else if computes {
                StepKindName::Pointwise
            } else {
                StepKindName::Copy
            };
            let mut k = kb.k;
            k.name = kernel_name(graph, step, &nodes);
            collapse::collapse(&mut k, false);
            let info = StepInfo {
                name: k.name.clone(),
                kind,
                nodes: nodes.clone(),
                notes: notes(&grp.members),
            };
            Ok((
                Step {
                    kind: StepKind::Kernel {
                        kernel: k,
                        args: kb.args,
                    },
                    nodes,
                    with_previous: false,
                },
                info,
            ))
        }
    }
}

/// The epilogue of extern `x`: outer loops (row, column) over its output's rows, or for a row
/// epilogue (the group reduces the columns) one outer loop over the rows, its reductions and
/// stores each looping over the row's columns.
#[allow(clippy::too_many_arguments)]
fn epilogue_kernel(
    graph: &Graph,
    plan: &Plan,
    g: usize,
    step: usize,
    x: NodeId,
    out: BufId,
    shape: &[usize],
    members: &[NodeId],
    bufs: &mut Buffers,
) -> Result<(Kernel, Vec<BufId>, Vec<NodeId>), Stop> {
    let row_dims = extern_row_dims(&graph.node(x).op, shape.len());
    let rows: usize = shape[..row_dims].iter().product();
    let cols: usize = shape[row_dims..].iter().product();
    let reduces = !plan.groups[g].axes.is_empty();
    let mut kb = KernelBuilder::new(graph, plan, g);
    let r = kb.vars.fresh(rows);
    kb.k.outer = vec![Loop {
        var: r,
        extent: rows,
    }];
    let mut ix = delinearize(&kb.vars, &Idx::var(r), &shape[..row_dims]);
    let lin = if reduces {
        ix.extend(shape[row_dims..].iter().map(|_| Idx::Const(0)));
        Idx::var(r).mul(cols as i64)
    } else {
        let c = kb.vars.fresh(cols);
        kb.k.outer.push(Loop {
            var: c,
            extent: cols,
        });
        ix.extend(delinearize(&kb.vars, &Idx::var(c), &shape[row_dims..]));
        Idx::var(r).mul(cols as i64).add(Idx::var(c))
    };
    kb.outer_ix = ix;
    kb.extern_out = Some(ExternOut {
        buf: out,
        row_dims,
        row: Idx::var(r),
        lin,
    });
    for &m in members {
        if plan.class[m.index()] == Class::Reduce {
            kb.reduce_stage(m, bufs)?;
        }
    }
    for &m in members {
        if plan.stored[m.index()] {
            let buf = bufs.of(graph, plan, m)?;
            kb.store_stage(m, buf, bufs)?;
        }
    }
    let mut touched = kb.touched.clone();
    touched.extend(members.iter().copied());
    let mut k = kb.k;
    k.name = kernel_name(graph, step, &touched);
    k.name.push_str("_epilogue");
    collapse::collapse(&mut k, true);
    Ok((k, kb.args, touched))
}

/// A copy of an input or constant that is a graph output (outputs are always temporaries).
fn copy_source(
    graph: &Graph,
    plan: &Plan,
    x: NodeId,
    step: usize,
    bufs: &mut Buffers,
) -> Result<(Step, StepInfo, BufId), Error> {
    let src = bufs.of(graph, plan, x)?;
    let numel: usize = plan.shapes[x.index()].iter().product();
    let dtype = graph.ty(x).dtype;
    let dst = bufs.push(Buffer {
        dtype,
        numel,
        kind: BufKind::Temp,
    });
    let mut k = Kernel::new(format!("k{step}_copy"));
    k.args = vec![
        crate::kernel::Arg {
            dtype,
            len: numel,
            written: false,
        },
        crate::kernel::Arg {
            dtype,
            len: numel,
            written: true,
        },
    ];
    let index = if numel == 1 {
        Idx::Const(0)
    } else {
        k.outer = vec![Loop {
            var: 0,
            extent: numel,
        }];
        Idx::var(0)
    };
    let v = k.push(
        crate::kernel::Expr::Load {
            arg: 0,
            index: index.clone(),
        },
        dtype,
    );
    k.stages.push(Stage::Store {
        loops: vec![],
        arg: 1,
        index: linear(&[numel], &[index]),
        value: v,
    });
    let info = StepInfo {
        name: k.name.clone(),
        kind: StepKindName::Copy,
        nodes: vec![x],
        notes: vec![(x, "graph output that is an input or constant".into())],
    };
    Ok((
        Step {
            kind: StepKind::Kernel {
                kernel: k,
                args: vec![src, dst],
            },
            nodes: vec![x],
            with_previous: false,
        },
        info,
        dst,
    ))
}
