//! Copies between host tensors and device memory, ordered on kiln's stream.

use super::{DeviceBuffer, Gpu, driver_error};
use cudarc::driver::{result, sys};
use kiln_ir::{DType, HostTensor, Result, Storage};
use std::sync::Arc;

impl Gpu {
    /// Writes `bytes` to device address `dst` (which holds at least that many bytes).
    pub fn write(&self, dst: sys::CUdeviceptr, bytes: &[u8]) -> Result<()> {
        if bytes.is_empty() {
            return Ok(());
        }
        self.bind()?;
        // SAFETY: the caller guarantees `dst` holds `bytes.len()` bytes; the copy from pageable
        // memory completes before this returns.
        unsafe { result::memcpy_htod_async(dst, bytes, self.cu_stream()) }.map_err(|e| driver_error("copying to the GPU", e))
    }

    /// Reads `len` bytes from device address `src`, after all earlier work on kiln's stream.
    pub fn read(&self, src: sys::CUdeviceptr, len: usize) -> Result<Vec<u8>> {
        let mut out = vec![0u8; len];
        if len == 0 {
            return Ok(out);
        }
        self.bind()?;
        // SAFETY: the caller guarantees `src` holds `len` bytes; the stream is synchronised
        // before `out` is used.
        unsafe { result::memcpy_dtoh_async(&mut out, src, self.cu_stream()) }.map_err(|e| driver_error("copying from the GPU", e))?;
        self.synchronize()?;
        Ok(out)
    }

    /// A new device buffer holding `t`'s elements, dense and row-major.
    pub fn upload(self: &Arc<Self>, t: &HostTensor) -> Result<DeviceBuffer> {
        let dense = t.contiguous();
        let bytes = dense.storage.as_bytes();
        let buf = self.alloc(bytes.len())?;
        self.write(buf.ptr(), &bytes)?;
        Ok(buf)
    }

    /// The `shape` tensor of `dtype` stored densely at `src`.
    pub fn download(&self, src: sys::CUdeviceptr, dtype: DType, shape: &[usize]) -> Result<HostTensor> {
        let n: usize = shape.iter().product();
        let bytes = self.read(src, n * dtype.size_of())?;
        HostTensor::new(Storage::from_le_bytes(dtype, &bytes)?, shape)
    }
}
