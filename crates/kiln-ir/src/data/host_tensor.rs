//! A tensor in host memory: shared storage plus a strided layout.

use super::{Element, Layout, Storage};
use crate::{DType, Error, Result, Shape};
use std::sync::Arc;

/// A tensor in host memory. Cloning is cheap (the storage is shared); views share storage
/// and differ only in [`Layout`]. Constants of a graph and CPU eager tensors are these.
#[derive(Clone, Debug)]
pub struct HostTensor {
    pub storage: Arc<Storage>,
    pub layout: Layout,
}

impl HostTensor {
    /// A contiguous tensor owning `storage`, checked against `shape`.
    pub fn new(storage: Storage, shape: &[usize]) -> Result<HostTensor> {
        let n: usize = shape.iter().product();
        if storage.len() != n {
            return Err(Error::Shape(format!(
                "tensor data has {} elements but shape {shape:?} needs {n}",
                storage.len()
            )));
        }
        Ok(HostTensor { storage: Arc::new(storage), layout: Layout::contiguous(shape) })
    }

    /// A contiguous tensor from a vector of elements.
    pub fn from_vec<T: Element>(data: Vec<T>, shape: &[usize]) -> Result<HostTensor> {
        HostTensor::new(T::into_storage(data), shape)
    }

    /// A rank-0 tensor.
    pub fn scalar<T: Element>(x: T) -> HostTensor {
        HostTensor { storage: Arc::new(T::into_storage(vec![x])), layout: Layout::contiguous(&[]) }
    }

    /// Zeros of `dtype` and `shape`.
    pub fn zeros(dtype: DType, shape: &[usize]) -> HostTensor {
        let n = shape.iter().product();
        HostTensor { storage: Arc::new(Storage::zeros(dtype, n)), layout: Layout::contiguous(shape) }
    }

    /// A view of the same storage with another layout.
    pub fn with_layout(&self, layout: Layout) -> HostTensor {
        HostTensor { storage: self.storage.clone(), layout }
    }

    /// The element dtype.
    pub fn dtype(&self) -> DType {
        self.storage.dtype()
    }

    /// The dims.
    pub fn shape(&self) -> &[usize] {
        &self.layout.shape
    }

    /// The shape as an IR [`Shape`].
    pub fn ir_shape(&self) -> Shape {
        Shape::fixed(&self.layout.shape)
    }

    /// Number of elements.
    pub fn numel(&self) -> usize {
        self.layout.numel()
    }

    /// True when the layout is contiguous and starts at offset 0 and covers the whole storage,
    /// so the storage can be used as it is.
    pub fn is_dense(&self) -> bool {
        self.layout.is_contiguous() && self.layout.offset == 0 && self.storage.len() == self.numel()
    }

    /// The elements, row-major, as a slice when dense (no copy).
    pub fn dense_slice<T: Element>(&self) -> Option<&[T]> {
        if self.is_dense() { T::slice(&self.storage) } else { None }
    }

    /// The elements in row-major logical order: the storage itself when dense, else a copy.
    /// Errors when `T` is not the dtype.
    pub fn values<T: Element>(&self) -> Result<std::borrow::Cow<'_, [T]>> {
        match self.dense_slice::<T>() {
            Some(v) => Ok(std::borrow::Cow::Borrowed(v)),
            None => self.to_vec::<T>().map(std::borrow::Cow::Owned),
        }
    }

    /// The elements in row-major logical order (a copy). Errors when `T` is not the dtype.
    pub fn to_vec<T: Element>(&self) -> Result<Vec<T>> {
        let s = T::slice(&self.storage).ok_or_else(|| {
            Error::DType(format!("asked for {} elements of a {} tensor", T::DTYPE, self.dtype()))
        })?;
        if self.is_dense() {
            return Ok(s.to_vec());
        }
        let mut out = Vec::with_capacity(self.numel());
        self.layout.for_each_offset(|o| out.push(s[o]));
        Ok(out)
    }

    /// The elements as f64 in row-major logical order (any dtype; for tests, checksums, printing).
    pub fn to_f64_vec(&self) -> Vec<f64> {
        let mut out = Vec::with_capacity(self.numel());
        self.layout.for_each_offset(|o| out.push(self.storage.get_f64(o)));
        out
    }

    /// A dense copy (or `self` when already dense).
    pub fn contiguous(&self) -> HostTensor {
        if self.is_dense() {
            return self.clone();
        }
        let storage = crate::with_dtype!(self.dtype(), T, {
            let s = T::slice(&self.storage).unwrap_or(&[]);
            T::into_storage(self.layout.gather(s))
        });
        HostTensor { storage: Arc::new(storage), layout: Layout::contiguous(&self.layout.shape) }
    }
}
