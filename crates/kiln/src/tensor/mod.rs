//! The Tensor type: a cheap handle to either concrete host data (eager mode) or a value of a
//! graph being traced. Every op method lives in a sibling file by family and ends in
//! [`crate::dispatch::dispatch`]; this file holds the type, constructors and inspectors.

mod operators;
mod ops_elementwise;
mod ops_movement;
mod ops_nn;
mod ops_reduce;

use crate::Device;
use kiln_ir::{DType, Element, Error, HostTensor, Layout, NodeId, Op, Result, with_dtype};
use std::fmt;
use std::sync::{Arc, OnceLock, Weak};

/// A tensor. Cloning is cheap (a shared handle). In eager mode it holds host data, and view
/// ops (permute, slice, expand, reshape of contiguous data) share that data; inside
/// [`crate::trace`] it may instead be a placeholder for a value of the graph being built.
#[derive(Clone)]
pub struct Tensor(Arc<Inner>);

struct Inner {
    repr: Repr,
    device: Device,
}

/// What a tensor is made of.
pub(crate) enum Repr {
    /// Concrete data.
    Host(HostTensor),
    /// The value of `node` in the trace `trace_id` (no data).
    Traced(TracedValue),
}

/// A value of a graph under construction: its node, its (fixed) type and which trace owns it.
/// Under [`crate::capture`] the value may also be computed: a graph break runs the graph so far
/// and stores each live traced value's data in `value`, which later segments read as inputs.
pub(crate) struct TracedValue {
    pub node: NodeId,
    pub dtype: DType,
    pub shape: Vec<usize>,
    pub trace_id: u64,
    pub value: OnceLock<HostTensor>,
}

/// A weak handle to a tensor: captures find the traced values still alive at a graph break.
pub(crate) struct WeakTensor(Weak<Inner>);

impl WeakTensor {
    /// The tensor, while some handle to it is alive.
    pub(crate) fn upgrade(&self) -> Option<Tensor> {
        self.0.upgrade().map(Tensor)
    }
}

impl Tensor {
    /// A contiguous tensor of `shape` from row-major `data`; errors when the sizes disagree.
    pub fn from_vec<T: Element>(data: Vec<T>, shape: &[usize]) -> Result<Tensor> {
        HostTensor::from_vec(data, shape).map(Tensor::from_host)
    }

    /// Wraps host data (a view keeps its layout and shares its storage).
    pub fn from_host(host: HostTensor) -> Tensor {
        Tensor(Arc::new(Inner { repr: Repr::Host(host), device: Device::Cpu }))
    }

    /// A rank-0 tensor holding `x`.
    pub fn scalar<T: Element>(x: T) -> Tensor {
        Tensor::from_host(HostTensor::scalar(x))
    }

    /// Zeros (false for bool) of `shape` and `dtype`.
    pub fn zeros(shape: &[usize], dtype: DType) -> Tensor {
        Tensor::from_host(HostTensor::zeros(dtype, shape))
    }

    /// Ones (true for bool) of `shape` and `dtype`.
    pub fn ones(shape: &[usize], dtype: DType) -> Tensor {
        Tensor::full(shape, 1.0, dtype)
    }

    /// `value` (converted to `dtype` as [`Element::from_f64`] does) repeated over `shape`.
    pub fn full(shape: &[usize], value: f64, dtype: DType) -> Tensor {
        let n: usize = shape.iter().product();
        let storage = with_dtype!(dtype, T, T::into_storage(vec![T::from_f64(value); n]));
        Tensor::from_host(HostTensor { storage: Arc::new(storage), layout: Layout::contiguous(shape) })
    }

    /// The 1-D tensor `0, 1, ..., n-1` of `dtype`.
    pub fn arange(n: usize, dtype: DType) -> Tensor {
        let storage = with_dtype!(dtype, T, T::into_storage((0..n).map(|i| T::from_f64(i as f64)).collect()));
        Tensor::from_host(HostTensor { storage: Arc::new(storage), layout: Layout::contiguous(&[n]) })
    }

    /// A placeholder for the value of `node` in the trace `trace_id`.
    pub(crate) fn traced(node: NodeId, dtype: DType, shape: Vec<usize>, trace_id: u64) -> Tensor {
        Tensor(Arc::new(Inner {
            repr: Repr::Traced(TracedValue { node, dtype, shape, trace_id, value: OnceLock::new() }),
            device: Device::Cpu,
        }))
    }

    /// A weak handle to this tensor.
    pub(crate) fn downgrade(&self) -> WeakTensor {
        WeakTensor(Arc::downgrade(&self.0))
    }

    /// Identity of the handle (equal for clones of one tensor).
    pub(crate) fn ptr(&self) -> usize {
        Arc::as_ptr(&self.0) as usize
    }

    /// Stores the computed data of a traced value (a capture's graph break); false when the
    /// tensor is not traced or already has its data.
    pub(crate) fn set_value(&self, value: HostTensor) -> bool {
        match &self.0.repr {
            Repr::Traced(t) => t.value.set(value).is_ok(),
            Repr::Host(_) => false,
        }
    }

    /// The data: host data, or a traced value's data computed at a graph break; `None` for a
    /// placeholder without data.
    pub(crate) fn data(&self) -> Option<&HostTensor> {
        match &self.0.repr {
            Repr::Host(h) => Some(h),
            Repr::Traced(t) => t.value.get(),
        }
    }

    /// What the tensor is made of (for dispatch and tracing).
    pub(crate) fn repr(&self) -> &Repr {
        &self.0.repr
    }

    /// The host data, or an error naming `op` when the tensor is a traced placeholder.
    pub(crate) fn host_ref(&self, op: &Op) -> Result<&HostTensor> {
        match &self.0.repr {
            Repr::Host(h) => Ok(h),
            Repr::Traced(t) => t.value.get().ok_or_else(|| traced_error(&op.name())),
        }
    }

    /// The dims, outermost first.
    pub fn shape(&self) -> &[usize] {
        match &self.0.repr {
            Repr::Host(h) => h.shape(),
            Repr::Traced(t) => &t.shape,
        }
    }

    /// The dims as an owned vector (same as [`Tensor::shape`]).
    pub fn dims(&self) -> Vec<usize> {
        self.shape().to_vec()
    }

    /// The size of axis `axis` (negative counts from the end).
    pub fn dim(&self, axis: i64) -> Result<usize> {
        Ok(self.shape()[self.axis(axis, "dim")?])
    }

    /// Number of axes.
    pub fn rank(&self) -> usize {
        self.shape().len()
    }

    /// Number of elements.
    pub fn numel(&self) -> usize {
        self.shape().iter().product()
    }

    /// The element dtype.
    pub fn dtype(&self) -> DType {
        match &self.0.repr {
            Repr::Host(h) => h.dtype(),
            Repr::Traced(t) => t.dtype,
        }
    }

    /// Where the data lives.
    pub fn device(&self) -> Device {
        self.0.device
    }

    /// Moves to `device`: a no-op for the CPU; CUDA is refused until its backend lands.
    pub fn to_device(&self, device: Device) -> Result<Tensor> {
        device.ensure_supported()?;
        Ok(self.clone())
    }

    /// Element strides of the eager layout (0 for broadcast axes, negative for reversed
    /// slices). A traced value has no layout: its row-major strides are returned.
    pub fn strides(&self) -> Vec<isize> {
        match &self.0.repr {
            Repr::Host(h) => h.layout.strides.clone(),
            Repr::Traced(t) => kiln_ir::data::contiguous_strides(&t.shape),
        }
    }

    /// True when the elements are stored row-major without gaps (always for traced values).
    pub fn is_contiguous(&self) -> bool {
        match &self.0.repr {
            Repr::Host(h) => h.layout.is_contiguous(),
            Repr::Traced(_) => true,
        }
    }

    /// True for a placeholder inside [`crate::trace`] without data (a value a capture has
    /// computed at a graph break has data, and is not counted).
    pub fn is_traced(&self) -> bool {
        matches!(&self.0.repr, Repr::Traced(t) if t.value.get().is_none())
    }

    /// The host data (a cheap clone sharing storage). For a traced placeholder: inside a
    /// [`crate::compile()`]d function this is a graph break (the graph so far runs and the value
    /// is produced); inside a plain [`crate::trace`], an error.
    #[track_caller]
    pub fn to_host(&self) -> Result<HostTensor> {
        self.read("to_host")
    }

    /// The elements in row-major order; errors when `T` is not the dtype or the tensor is a
    /// traced placeholder (in a compiled function: a graph break, see [`Tensor::to_host`]).
    #[track_caller]
    pub fn to_vec<T: Element>(&self) -> Result<Vec<T>> {
        self.read("to_vec")?.to_vec()
    }

    /// The elements converted to f64 in row-major order (any dtype; bool as 0/1).
    #[track_caller]
    pub fn to_f64_vec(&self) -> Result<Vec<f64>> {
        Ok(self.read("to_f64_vec")?.to_f64_vec())
    }

    /// The value of a one-element tensor as f64 (as PyTorch's `item`); errors for other sizes.
    #[track_caller]
    pub fn item(&self) -> Result<f64> {
        if self.numel() != 1 {
            return Err(Error::Shape(format!("item: needs a one-element tensor, got shape {:?}", self.shape())));
        }
        Ok(self.read("item")?.to_f64_vec()[0])
    }

    /// The data for a read by `what`: graph breaks inside captures go through
    /// [`crate::capture`], which records `what` and the caller's location.
    #[track_caller]
    fn read(&self, what: &str) -> Result<HostTensor> {
        match &self.0.repr {
            Repr::Host(h) => Ok(h.clone()),
            Repr::Traced(t) => match crate::capture::read_traced(self, what, std::panic::Location::caller()) {
                Some(read) => read,
                None => t.value.get().cloned().ok_or_else(|| traced_error(what)),
            },
        }
    }

    /// Normalizes a possibly negative axis against this tensor's rank; errors name `op`.
    pub(crate) fn axis(&self, axis: i64, op: &str) -> Result<usize> {
        kiln_ir::normalize_axis(axis, self.rank(), op)
    }

    /// A rank-0 tensor of this tensor's dtype holding `x` (scalar operands of binary ops).
    pub(crate) fn scalar_like(&self, x: f64) -> Tensor {
        Tensor::full(&[], x, self.dtype())
    }
}

/// The error for asking a traced placeholder for data.
fn traced_error(what: &str) -> Error {
    Error::Value(format!(
        "{what}: this tensor is a placeholder of a trace and holds no data; \
         run the traced graph (kiln_cpu::run) or call the model eagerly to get values"
    ))
}

impl fmt::Debug for Tensor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0.repr {
            Repr::Host(h) => write!(f, "Tensor({}{:?}, {}, strides {:?})", h.dtype(), h.shape(), self.0.device, h.layout.strides),
            Repr::Traced(t) => write!(f, "Tensor({}{:?}, traced {} of trace #{})", t.dtype, t.shape, t.node, t.trace_id),
        }
    }
}

impl From<HostTensor> for Tensor {
    fn from(h: HostTensor) -> Tensor {
        Tensor::from_host(h)
    }
}
