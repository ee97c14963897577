//! Tracing a forward pass into a graph. [`trace`] runs a closure with placeholder tensors;
//! while it runs, [`crate::dispatch::dispatch`] records every op into the trace's [`Graph`]
//! instead of computing it. Concrete tensors the closure uses (weights) become constants,
//! sharing the tensors' storage, once per storage: a weight used twice, or used both as
//! itself and as a permuted/expanded view (`w.t()`), is held once.
//!
//! Traces are per thread: one active trace at a time (a trace started inside another takes
//! over until it ends). Placeholders of a finished or another trace are refused.
//!
//! [`crate::capture`] records in *segments*: [`start_capture`] opens a trace whose
//! placeholders carry the call's data, [`cut`] ends the current segment at a graph break (its
//! graph's outputs are every traced value of the segment still alive) and opens the next one,
//! in which values computed by earlier segments become graph inputs when used.

use crate::Tensor;
use crate::tensor::{Repr, WeakTensor};
use kiln_ir::{DType, Error, Graph, HostTensor, Layout, NodeId, Op, Result, Shape, Storage, TensorType};
use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// Ids of traces, unique in the process so a placeholder never matches a later trace.
static NEXT_TRACE_ID: AtomicU64 = AtomicU64::new(1);

thread_local! {
    /// Active traces on this thread; the last one records.
    static STACK: RefCell<Vec<ActiveTrace>> = const { RefCell::new(Vec::new()) };
}

/// Runs `f` on placeholders for the inputs `specs` (name, dtype, dims) and returns the graph
/// of every op it dispatched, with `f`'s results as the outputs (in order). A concrete tensor
/// returned by `f` becomes a constant output.
pub fn trace(
    specs: &[(&str, DType, &[usize])],
    f: impl FnOnce(&[Tensor]) -> Result<Vec<Tensor>>,
) -> Result<Graph> {
    let id = NEXT_TRACE_ID.fetch_add(1, Ordering::Relaxed);
    let mut active = ActiveTrace::new(id, None);
    let mut placeholders = Vec::with_capacity(specs.len());
    for (i, &(name, dtype, dims)) in specs.iter().enumerate() {
        if specs[..i].iter().any(|s| s.0 == name) {
            return Err(Error::Value(format!("trace: input name '{name}' is given twice")));
        }
        let node = active.graph.input(name, TensorType::new(dtype, dims));
        placeholders.push(Tensor::traced(node, dtype, dims.to_vec(), id));
    }
    STACK.with(|s| s.borrow_mut().push(active));
    let guard = PopOnDrop(id);
    let result = f(&placeholders);
    let mut active = guard.finish()?;
    for out in &result? {
        let node = active.node_of(out, "trace output")?;
        active.graph.output(node);
    }
    Ok(active.graph)
}

/// True while a trace is active on this thread.
pub(crate) fn is_active() -> bool {
    STACK.with(|s| !s.borrow().is_empty())
}

/// Records `op` on `inputs` into the active trace and returns the traced result.
pub(crate) fn record(op: Op, inputs: &[&Tensor]) -> Result<Tensor> {
    STACK.with(|s| {
        let mut stack = s.borrow_mut();
        let name = op.name();
        let Some(active) = stack.last_mut() else {
            return Err(Error::Value(format!(
                "{name}: an input is a placeholder of a trace that has finished; \
                 placeholders only exist inside the closure given to kiln::trace"
            )));
        };
        let ids = inputs.iter().map(|t| active.node_of(t, &name)).collect::<Result<Vec<_>>>()?;
        let node = active.graph.add(op, &ids)?;
        let ty = active.graph.ty(node);
        let dims = ty.shape.as_fixed().ok_or_else(|| {
            Error::Unsupported(format!("{name}: traced result {} has symbolic dims", ty.shape))
        })?;
        let t = Tensor::traced(node, ty.dtype, dims, active.id);
        if let Some(seg) = &mut active.segment {
            seg.made.push(t.downgrade());
        }
        Ok(t)
    })
}

/// One segment of a capture, ended by [`cut`]: its graph, the data of its inputs (in order)
/// and the tensors its outputs belong to (in order).
pub(crate) struct Segment {
    pub graph: Graph,
    pub inputs: Vec<HostTensor>,
    pub values: Vec<Tensor>,
}

/// Opens a capture trace on this thread for a call on `inputs` (tensors with data): returns
/// its root id and the placeholders, which carry the inputs' data. The trace ends when the
/// returned guard drops.
pub(crate) fn start_capture(inputs: &[Tensor]) -> Result<(CaptureGuard, Vec<Tensor>)> {
    let id = NEXT_TRACE_ID.fetch_add(1, Ordering::Relaxed);
    let mut active = ActiveTrace::new(id, Some(SegmentState::default()));
    let mut placeholders = Vec::with_capacity(inputs.len());
    for (i, x) in inputs.iter().enumerate() {
        let data = x.data().ok_or_else(|| Error::Value(format!("capture: input {i} has no data ({x:?})")))?;
        let node = active.graph.input(&format!("x{i}"), TensorType::new(x.dtype(), x.shape()));
        let p = Tensor::traced(node, x.dtype(), x.dims(), id);
        p.set_value(data.clone());
        if let Some(seg) = &mut active.segment {
            seg.inputs.push(data.clone());
        }
        placeholders.push(p);
    }
    STACK.with(|s| s.borrow_mut().push(active));
    Ok((CaptureGuard(PopOnDrop(id)), placeholders))
}

/// Ends the active segment of the capture `root` and opens the next. The segment's outputs are
/// `results` when given (the end of the call: concrete results become constant outputs),
/// else every traced value made in the segment that is still alive and has no data yet.
pub(crate) fn cut(root: u64, results: Option<&[Tensor]>) -> Result<Segment> {
    STACK.with(|s| {
        let mut stack = s.borrow_mut();
        let active = match stack.last_mut() {
            Some(a) if a.root == root && a.segment.is_some() => a,
            _ => return Err(Error::Graph(format!("capture #{root} is not the active trace"))),
        };
        let values: Vec<Tensor> = match results {
            Some(r) => r.to_vec(),
            None => {
                let made = active.segment.as_ref().map(|s| s.made.as_slice()).unwrap_or_default();
                made.iter().filter_map(WeakTensor::upgrade).filter(|t| t.data().is_none()).collect()
            }
        };
        for t in &values {
            let node = active.node_of(t, "capture output")?;
            active.graph.output(node);
        }
        let next = ActiveTrace::new(NEXT_TRACE_ID.fetch_add(1, Ordering::Relaxed), Some(SegmentState::default()));
        let done = std::mem::replace(active, ActiveTrace { root, ..next });
        let inputs = done.segment.map(|s| s.inputs).unwrap_or_default();
        Ok(Segment { graph: done.graph, inputs, values })
    })
}

/// The root id of the capture recording on this thread, and the id of its current segment.
pub(crate) fn active_capture() -> Option<(u64, u64)> {
    STACK.with(|s| s.borrow().last().filter(|a| a.segment.is_some()).map(|a| (a.root, a.id)))
}

/// The id of the trace (segment) a traced tensor belongs to.
pub(crate) fn trace_id_of(t: &Tensor) -> Option<u64> {
    match t.repr() {
        Repr::Traced(v) => Some(v.trace_id),
        Repr::Host(_) => None,
    }
}

/// Ends a capture trace when dropped (also on panic).
pub(crate) struct CaptureGuard(PopOnDrop);

impl CaptureGuard {
    /// The capture's root id.
    pub(crate) fn root(&self) -> u64 {
        (self.0).0
    }
}

/// A trace being recorded.
struct ActiveTrace {
    /// The current segment's id (placeholders carry it).
    id: u64,
    /// The id the trace started with (a capture's segments share it).
    root: u64,
    graph: Graph,
    /// Node of each concrete tensor already used, by storage address and layout. The stored
    /// storage handle keeps the address from being reused by another tensor during the trace.
    views: HashMap<(usize, Layout), (Arc<Storage>, NodeId)>,
    /// The one constant holding a whole storage, and its shape, by storage address.
    bases: HashMap<usize, (Vec<usize>, NodeId)>,
    /// Captures only: what the segment keeps besides its graph.
    segment: Option<SegmentState>,
}

/// A capture segment's bookkeeping.
#[derive(Default)]
struct SegmentState {
    /// Every traced value made in this segment, in order (weak: the dead ones are not outputs).
    made: Vec<WeakTensor>,
    /// The data bound to each graph input, in order.
    inputs: Vec<HostTensor>,
    /// The input node of each value computed by an earlier segment and used in this one, by
    /// tensor identity (the stored handle keeps the identity from being reused).
    carried: HashMap<usize, (Tensor, NodeId)>,
}

impl ActiveTrace {
    fn new(id: u64, segment: Option<SegmentState>) -> ActiveTrace {
        ActiveTrace { id, root: id, graph: Graph::new(), views: HashMap::new(), bases: HashMap::new(), segment }
    }

    /// The node of `t` in this trace: its own node for a placeholder of this trace, a
    /// constant (plus view ops) for concrete data, a graph input for a value an earlier segment
    /// of this capture computed; an error for another trace's placeholder.
    fn node_of(&mut self, t: &Tensor, op: &str) -> Result<NodeId> {
        match t.repr() {
            Repr::Traced(v) if v.trace_id == self.id => Ok(v.node),
            Repr::Traced(v) if self.segment.is_some() && v.value.get().is_some() => {
                let seg = self.segment.as_mut().expect("checked");
                if let Some((_, id)) = seg.carried.get(&t.ptr()) {
                    return Ok(*id);
                }
                let data = v.value.get().expect("checked").clone();
                let id = self.graph.input(&format!("x{}", seg.inputs.len()), TensorType::new(v.dtype, v.shape.as_slice()));
                seg.inputs.push(data);
                seg.carried.insert(t.ptr(), (t.clone(), id));
                Ok(id)
            }
            Repr::Traced(v) => Err(Error::Value(format!(
                "{op}: an input ({}{:?}) is a placeholder of another or a finished trace (#{}), \
                 not of the active trace #{}",
                v.dtype, v.shape, v.trace_id, self.id
            ))),
            Repr::Host(h) => self.constant(h),
        }
    }

    /// The node for concrete data `h`, holding each storage once where the layout allows.
    fn constant(&mut self, h: &HostTensor) -> Result<NodeId> {
        let key = (Arc::as_ptr(&h.storage) as usize, h.layout.clone());
        if let Some((_, id)) = self.views.get(&key) {
            return Ok(*id);
        }
        let id = if h.is_dense() {
            self.base(h, h.shape())?
        } else if let Some(v) = StridedView::of(h) {
            self.strided_view(h, &v)?
        } else {
            // Offsets, gaps or reversed axes: a dense copy of just this view.
            self.graph.constant(h.contiguous())
        };
        self.views.insert(key, (h.storage.clone(), id));
        Ok(id)
    }

    /// The node of `h`'s whole storage viewed as `dims`: the storage's one constant, reshaped
    /// when an earlier use saw it with other dims.
    fn base(&mut self, h: &HostTensor, dims: &[usize]) -> Result<NodeId> {
        let ptr = Arc::as_ptr(&h.storage) as usize;
        let (root_dims, root) = match self.bases.get(&ptr) {
            Some((d, n)) => (d.clone(), *n),
            None => {
                let whole = HostTensor { storage: h.storage.clone(), layout: Layout::contiguous(dims) };
                let n = self.graph.constant_shared(Arc::new(whole));
                self.bases.insert(ptr, (dims.to_vec(), n));
                (dims.to_vec(), n)
            }
        };
        if root_dims == dims {
            return Ok(root);
        }
        self.graph.add(Op::Reshape(Shape::fixed(dims)), &[root])
    }

    /// Rebuilds a permuted/expanded view of a whole storage from the storage's constant.
    fn strided_view(&mut self, h: &HostTensor, v: &StridedView) -> Result<NodeId> {
        let mut id = self.base(h, &v.base_dims)?;
        if v.perm.iter().enumerate().any(|(i, &p)| i != p) {
            id = self.graph.add(Op::Permute(v.perm.clone()), &[id])?;
        }
        if v.squeezed.len() != v.base_dims.len() {
            id = self.graph.add(Op::Reshape(Shape::fixed(&v.squeezed)), &[id])?;
        }
        if v.squeezed != h.shape() {
            id = self.graph.add(Op::Expand(Shape::fixed(h.shape())), &[id])?;
        }
        Ok(id)
    }
}

/// How a strided layout over a whole storage arises from a dense tensor: `base_dims` (the
/// non-1 dims in storage order) permuted by `perm`, reshaped to `squeezed` (size-1 axes back,
/// broadcast axes as 1), then expanded to the layout's shape.
struct StridedView {
    base_dims: Vec<usize>,
    perm: Vec<usize>,
    squeezed: Vec<usize>,
}

impl StridedView {
    /// The decomposition of `h`'s layout, or `None` when it is not a permutation and
    /// broadcast of its whole storage (offset, gaps, overlaps or negative strides).
    fn of(h: &HostTensor) -> Option<StridedView> {
        let l = &h.layout;
        if l.offset != 0 {
            return None;
        }
        let squeezed: Vec<usize> =
            l.shape.iter().zip(&l.strides).map(|(&n, &s)| if s == 0 { 1 } else { n }).collect();
        // Axes that move through memory, outermost (largest stride) first.
        let mut order: Vec<usize> = (0..l.rank()).filter(|&i| squeezed[i] > 1).collect();
        if order.iter().any(|&i| l.strides[i] < 0) {
            return None;
        }
        order.sort_by_key(|&i| std::cmp::Reverse(l.strides[i]));
        let base_dims: Vec<usize> = order.iter().map(|&i| l.shape[i]).collect();
        let base_strides: Vec<isize> = order.iter().map(|&i| l.strides[i]).collect();
        if base_strides != kiln_ir::data::contiguous_strides(&base_dims)
            || base_dims.iter().product::<usize>() != h.storage.len()
        {
            return None;
        }
        // Output axis k (the k-th moving axis in logical order) is base axis perm[k].
        let logical: Vec<usize> = (0..l.rank()).filter(|&i| squeezed[i] > 1).collect();
        let perm = logical.iter().map(|a| order.iter().position(|o| o == a).unwrap_or(0)).collect();
        Some(StridedView { base_dims, perm, squeezed })
    }
}

/// Pops the trace whose root is `0` from this thread's stack when dropped, so a panicking
/// closure does not leave its trace active.
struct PopOnDrop(u64);

impl PopOnDrop {
    /// Pops and returns the trace (it must be the active one).
    fn finish(self) -> Result<ActiveTrace> {
        let id = self.0;
        std::mem::forget(self);
        STACK.with(|s| {
            let mut stack = s.borrow_mut();
            match stack.last() {
                Some(t) if t.root == id => Ok(stack.pop().expect("checked non-empty")),
                _ => Err(Error::Graph(format!("trace #{id} is not the active trace when it ends"))),
            }
        })
    }
}

impl Drop for PopOnDrop {
    fn drop(&mut self) {
        let _ = STACK.try_with(|s| {
            if let Ok(mut stack) = s.try_borrow_mut()
                && let Some(pos) = stack.iter().rposition(|t| t.root == self.0)
            {
                stack.truncate(pos);
            }
        });
    }
}
