//! Builds one fused kernel: turns graph values at index vectors into expressions, inlining
//! pointwise work and views, loading roots from their buffers and reading reductions of the
//! same kernel as locals.

use super::Buffers;
use super::index::{Vars, broadcast_index, linear, reshape_index};
use crate::fuse::Plan;
use crate::fuse::classify::{Class, literal_of_f64};
use crate::kernel::{Arg, Expr, ExprId, Idx, Kernel, Literal, Loop, Stage};
use crate::program::BufId;
use kiln_ir::{BinaryOp, DType, Error, Graph, NodeId, Op, PadMode, ReduceOp};
use std::collections::HashMap;

/// Why building a kernel stopped.
pub(crate) enum Stop {
    /// The plan fused this root where it cannot be read as planned: plan again with it alone.
    Retry(NodeId),
    Fail(Error),
}

impl From<Error> for Stop {
    fn from(e: Error) -> Stop {
        Stop::Fail(e)
    }
}

type R<T> = std::result::Result<T, Stop>;

/// An epilogue's view of its extern's output: `[rows.., cols..]` read as `row * cols + col`.
#[derive(Clone)]
pub(crate) struct ExternOut {
    /// The output buffer.
    pub buf: BufId,
    /// How many leading dims make the rows.
    pub row_dims: usize,
    /// The flat row index (the kernel's first outer loop).
    pub row: Idx,
    /// The flat index of `outer_ix` (the point a pointwise epilogue runs at).
    pub lin: Idx,
}

/// A kernel under construction for group `group` of the plan.
pub(crate) struct KernelBuilder<'a> {
    pub graph: &'a Graph,
    pub plan: &'a Plan,
    pub group: usize,
    pub k: Kernel,
    pub args: Vec<BufId>,
    pub vars: Vars,
    /// Index of each dim of the domain at the current outer point (reduced dims: unused).
    pub outer_ix: Vec<Idx>,
    /// For epilogues: the extern whose output rows the kernel runs over.
    pub extern_out: Option<ExternOut>,
    /// The root whose value is being built (blamed when an epilogue read does not fit).
    pub current: NodeId,
    pub touched: Vec<NodeId>,
    memo: HashMap<(NodeId, Vec<Idx>), ExprId>,
    locals: HashMap<NodeId, ExprId>,
    arg_of: HashMap<BufId, u32>,
}

impl<'a> KernelBuilder<'a> {
    /// An empty kernel for `group`.
    pub fn new(graph: &'a Graph, plan: &'a Plan, group: usize) -> Self {
        KernelBuilder {
            graph,
            plan,
            group,
            k: Kernel::new(""),
            args: Vec::new(),
            vars: Vars { ext: Vec::new() },
            outer_ix: Vec::new(),
            extern_out: None,
            current: NodeId(0),
            touched: Vec::new(),
            memo: HashMap::new(),
            locals: HashMap::new(),
            arg_of: HashMap::new(),
        }
    }

    /// A loop over `extent` (index `Const(0)` and no loop when the extent is 1).
    pub fn loop_var(&mut self, extent: usize, loops: &mut Vec<Loop>) -> Idx {
        if extent == 1 {
            return Idx::Const(0);
        }
        let v = self.vars.fresh(extent);
        loops.push(Loop { var: v, extent });
        Idx::Var(v)
    }

    /// The kernel argument bound to `buf`.
    pub fn arg(&mut self, buf: BufId, bufs: &Buffers, written: bool) -> u32 {
        if let Some(&a) = self.arg_of.get(&buf) {
            if written {
                self.k.args[a as usize].written = true;
            }
            return a;
        }
        let b = &bufs.buffers[buf.index()];
        self.k.args.push(Arg {
            dtype: b.dtype,
            len: b.numel,
            written,
        });
        self.args.push(buf);
        let a = self.k.args.len() as u32 - 1;
        self.arg_of.insert(buf, a);
        a
    }

    fn konst(&mut self, lit: Literal, dtype: DType) -> ExprId {
        let lit = match (lit, dtype.is_float()) {
            (Literal::Int(v), true) => Literal::Float(v as f64),
            (Literal::Float(v), false) => literal_of_f64(v, dtype),
            (l, _) => l,
        };
        self.k.push(Expr::Const(lit), dtype)
    }

    /// Emits the reduce stage of reduce root `r` (a member of this kernel).
    pub fn reduce_stage(&mut self, r: NodeId, bufs: &mut Buffers) -> R<()> {
        let node = self.graph.node(r);
        let (op, axes) = match &node.op {
            Op::Reduce { op, axes, .. } => (*op, axes.clone()),
            _ => {
                return Err(Stop::Fail(Error::Graph(format!(
                    "schedule: internal: {r} is not a reduction"
                ))));
            }
        };
        let input = node.inputs[0];
        let shape = self.plan.shapes[input.index()].clone();
        let mut loops = Vec::new();
        let mut ix = self.outer_ix.clone();
        let mut n = 1usize;
        for &a in &axes {
            n *= shape[a];
            ix[a] = self.loop_var(shape[a], &mut loops);
        }
        self.current = r;
        let mut value = self.value(input, &ix, bufs)?;
        let vdt = node.ty.dtype;
        let mut acc = match vdt {
            DType::F16 | DType::BF16 => DType::F32,
            d => d,
        };
        if op == ReduceOp::Mean && vdt.is_int() {
            // Integer means divide the exact sum, as the reference does in a wide type.
            acc = if vdt == DType::U64 {
                DType::U64
            } else {
                DType::I64
            };
            if acc != vdt {
                value = self.k.push(Expr::Cast { x: value }, acc);
            }
        }
        let local = self
            .k
            .stages
            .iter()
            .filter(|s| matches!(s, Stage::Reduce { .. }))
            .count() as u32;
        let sop = if op == ReduceOp::Mean {
            ReduceOp::Sum
        } else {
            op
        };
        self.k.stages.push(Stage::Reduce {
            loops,
            op: sop,
            value,
            local,
            dtype: acc,
        });
        let mut out = self.k.push(Expr::Local(local), acc);
        if op == ReduceOp::Mean {
            out = if acc.is_float() {
                let inv = self.konst(Literal::Float(1.0 / n as f64), acc);
                self.k.push(
                    Expr::Binary {
                        op: BinaryOp::Mul,
                        a: out,
                        b: inv,
                    },
                    acc,
                )
            } else if n == 0 {
                self.konst(Literal::Int(0), acc)
            } else {
                let c = self.konst(Literal::Int(n as i128), acc);
                self.k.push(
                    Expr::Binary {
                        op: BinaryOp::Div,
                        a: out,
                        b: c,
                    },
                    acc,
                )
            };
        }
        if acc != vdt {
            out = self.k.push(Expr::Cast { x: out }, vdt);
        }
        self.locals.insert(r, out);
        self.touched.push(r);
        Ok(())
    }

    /// Emits the store stage writing root `x` (a member of this kernel) to `buf`.
    pub fn store_stage(&mut self, x: NodeId, buf: BufId, bufs: &mut Buffers) -> R<()> {
        let shape = self.plan.shapes[x.index()].clone();
        let grp = &self.plan.groups[self.group];
        let (dom, axes) = (grp.shape.clone(), grp.axes.clone());
        let mut loops = Vec::new();
        let ix: Vec<Idx> = if shape == dom {
            let mut ix = self.outer_ix.clone();
            for &a in &axes {
                ix[a] = self.loop_var(dom[a], &mut loops);
            }
            ix
        } else if shape.len() == dom.len() {
            (0..dom.len())
                .map(|d| {
                    if axes.contains(&d) {
                        Idx::Const(0)
                    } else {
                        self.outer_ix[d].clone()
                    }
                })
                .collect()
        } else {
            (0..dom.len())
                .filter(|d| !axes.contains(d))
                .map(|d| self.outer_ix[d].clone())
                .collect()
        };
        self.current = x;
        let value = self.value(x, &ix, bufs)?;
        let index = self.flat(&shape, &ix);
        let arg = self.arg(buf, bufs, true);
        self.k.stages.push(Stage::Store {
            loops,
            arg,
            index,
            value,
        });
        Ok(())
    }

    /// The flat index of `ix` in a dense value of `shape`.
    fn flat(&self, shape: &[usize], ix: &[Idx]) -> Idx {
        if let Some(e) = &self.extern_out
            && shape == self.plan.groups[self.group].shape.as_slice()
            && ix == self.outer_ix.as_slice()
        {
            return e.lin.clone();
        }
        linear(shape, ix)
    }

    fn load(&mut self, x: NodeId, ix: &[Idx], bufs: &mut Buffers) -> R<ExprId> {
        let buf = bufs.of(self.graph, self.plan, x)?;
        let index = self.flat(&self.plan.shapes[x.index()].clone(), ix);
        let arg = self.arg(buf, bufs, false);
        Ok(self
            .k
            .push(Expr::Load { arg, index }, self.graph.ty(x).dtype))
    }

    /// The expression for value `x` at indices `ix` (one per dim of `x`).
    pub fn value(&mut self, x: NodeId, ix: &[Idx], bufs: &mut Buffers) -> R<ExprId> {
        let key = (x, ix.to_vec());
        if let Some(&e) = self.memo.get(&key) {
            return Ok(e);
        }
        let i = x.index();
        let plan = self.plan;
        let dtype = self.graph.ty(x).dtype;
        let e = if let Some(lit) = plan.literal[i] {
            self.konst(lit, dtype)
        } else if plan.class[i] == Class::Source {
            self.load(x, ix, bufs)?
        } else if plan.mat[i] && plan.group_of[i] == self.group {
            match &plan.class[i] {
                Class::Reduce => self.local(x, ix)?,
                Class::Extern(_) => match self.extern_out.clone() {
                    Some(e) if ix == self.outer_ix.as_slice() => {
                        let arg = self.arg(e.buf, bufs, false);
                        self.k.push(Expr::Load { arg, index: e.lin }, dtype)
                    }
                    // A row epilogue reads anywhere in the current row.
                    Some(e) if ix[..e.row_dims] == self.outer_ix[..e.row_dims] => {
                        let shape = &plan.shapes[i][e.row_dims..];
                        let cols: usize = shape.iter().product();
                        let index = e.row.clone().mul(cols as i64).add(linear(shape, &ix[e.row_dims..]));
                        let arg = self.arg(e.buf, bufs, false);
                        self.k.push(Expr::Load { arg, index }, dtype)
                    }
                    _ => return Err(Stop::Retry(self.current)),
                },
                _ => self.compute(x, ix, bufs)?,
            }
        } else if plan.mat[i] {
            self.load(x, ix, bufs)?
        } else {
            self.compute(x, ix, bufs)?
        };
        self.memo.insert(key, e);
        Ok(e)
    }

    /// A reduction of this kernel read at `ix`: its local, when `ix` is the current row.
    fn local(&mut self, r: NodeId, ix: &[Idx]) -> R<ExprId> {
        let grp = &self.plan.groups[self.group];
        let keep = matches!(
            self.graph.node(r).op,
            Op::Reduce {
                keep_dims: true,
                ..
            }
        );
        let want: Vec<Idx> = (0..grp.shape.len())
            .filter_map(|d| {
                if grp.axes.contains(&d) {
                    keep.then_some(Idx::Const(0))
                } else {
                    Some(self.outer_ix[d].clone())
                }
            })
            .collect();
        match self.locals.get(&r) {
            Some(&e) if want == ix => Ok(e),
            _ => Err(Stop::Retry(r)),
        }
    }

    fn compute(&mut self, x: NodeId, ix: &[Idx], bufs: &mut Buffers) -> R<ExprId> {
        let node = self.graph.node(x);
        let dtype = node.ty.dtype;
        let out = self.plan.shapes[x.index()].clone();
        let ins = node.inputs.clone();
        let shape_of = |k: usize| self.plan.shapes[ins[k].index()].clone();
        self.touched.push(x);
        let e = match &node.op {
            Op::Unary(u) => {
                let a = self.value(ins[0], ix, bufs)?;
                self.k.push(Expr::Unary { op: *u, x: a }, dtype)
            }
            Op::Binary(b) => {
                let a = self.value(ins[0], &broadcast_index(ix, &shape_of(0)), bufs)?;
                let c = self.value(ins[1], &broadcast_index(ix, &shape_of(1)), bufs)?;
                self.k.push(Expr::Binary { op: *b, a, b: c }, dtype)
            }
            Op::Where => {
                let c = self.value(ins[0], &broadcast_index(ix, &shape_of(0)), bufs)?;
                let a = self.value(ins[1], &broadcast_index(ix, &shape_of(1)), bufs)?;
                let b = self.value(ins[2], &broadcast_index(ix, &shape_of(2)), bufs)?;
                self.k.push(Expr::Where { cond: c, a, b }, dtype)
            }
            Op::Cast(d) => {
                let a = self.value(ins[0], ix, bufs)?;
                if self.graph.ty(ins[0]).dtype == *d {
                    a
                } else {
                    self.k.push(Expr::Cast { x: a }, *d)
                }
            }
            Op::Reshape(_) => {
                let inx = reshape_index(&self.vars, ix, &out, &shape_of(0));
                self.value(ins[0], &inx, bufs)?
            }
            Op::Permute(p) => {
                let mut inx = vec![Idx::Const(0); p.len()];
                for (k, &pk) in p.iter().enumerate() {
                    inx[pk] = ix[k].clone();
                }
                self.value(ins[0], &inx, bufs)?
            }
            Op::Expand(_) => self.value(ins[0], &broadcast_index(ix, &shape_of(0)), bufs)?,
            Op::Slice(axes) => {
                let from = shape_of(0);
                let inx: Vec<Idx> = axes
                    .iter()
                    .zip(&from)
                    .zip(ix)
                    .map(|((s, &len), i)| {
                        let (start, _, count) = s.resolve(len);
                        if count <= 1 {
                            Idx::Const(start.max(0))
                        } else {
                            i.clone().mul(s.step).add(Idx::Const(start))
                        }
                    })
                    .collect();
                self.value(ins[0], &inx, bufs)?
            }
            Op::Pad {
                pads,
                mode: PadMode::Constant(v),
            } => {
                let from = shape_of(0);
                let mut cond: Option<ExprId> = None;
                let mut inx = Vec::with_capacity(ix.len());
                for (d, (&(before, after), i)) in pads.iter().zip(ix).enumerate() {
                    inx.push(i.clone().add(Idx::Const(-(before as i64))));
                    if before > 0 || after > 0 {
                        let r = self.k.push(
                            Expr::InRange {
                                index: i.clone(),
                                lo: before as i64,
                                hi: (before + from[d]) as i64,
                            },
                            DType::Bool,
                        );
                        cond = Some(match cond {
                            None => r,
                            Some(c) => self.k.push(
                                Expr::Binary {
                                    op: BinaryOp::And,
                                    a: c,
                                    b: r,
                                },
                                DType::Bool,
                            ),
                        });
                    }
                }
                let inner = self.value(ins[0], &inx, bufs)?;
                match cond {
                    None => inner,
                    Some(c) => {
                        let fill = self.konst(literal_of_f64(*v, dtype), dtype);
                        self.k.push(
                            Expr::Where {
                                cond: c,
                                a: inner,
                                b: fill,
                            },
                            dtype,
                        )
                    }
                }
            }
            Op::Concat { axis } => {
                let axis = *axis;
                // Pieces that have elements, with their offsets along the axis.
                let mut parts = Vec::new();
                let mut off = 0usize;
                for k in 0..ins.len() {
                    let len = shape_of(k)[axis];
                    if len > 0 {
                        parts.push((k, off, len));
                    }
                    off += len;
                }
                let mut acc: Option<ExprId> = None;
                for &(k, o, len) in parts.iter().rev() {
                    let mut inx = ix.to_vec();
                    inx[axis] = ix[axis].clone().add(Idx::Const(-(o as i64)));
                    let v = self.value(ins[k], &inx, bufs)?;
                    acc = Some(match acc {
                        None => v,
                        Some(rest) => {
                            let c = self.k.push(
                                Expr::InRange {
                                    index: ix[axis].clone(),
                                    lo: o as i64,
                                    hi: (o + len) as i64,
                                },
                                DType::Bool,
                            );
                            self.k.push(
                                Expr::Where {
                                    cond: c,
                                    a: v,
                                    b: rest,
                                },
                                dtype,
                            )
                        }
                    });
                }
                match acc {
                    Some(e) => e,
                    None => self.konst(Literal::Int(0), dtype),
                }
            }
            op => {
                return Err(Stop::Fail(Error::Graph(format!(
                    "schedule: internal: {} ({x}) was planned into a generated kernel",
                    op.name()
                ))));
            }
        };
        Ok(e)
    }
}
