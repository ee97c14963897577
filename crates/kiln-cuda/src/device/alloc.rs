//! The caching allocator: device memory is taken from the driver in rounded blocks and, when a
//! [`DeviceBuffer`] is dropped, kept for the next request of a similar size instead of being
//! freed (`cuMemAlloc`/`cuMemFree` synchronise the device and cost tens of microseconds), as
//! PyTorch's allocator does. When the driver is out of memory, the cached blocks are released
//! and the request is tried once more; if it still fails the error gives the sizes involved,
//! and everything allocated before stays valid.

use super::gpu::{Gpu, driver_error};
use cudarc::driver::{result, sys};
use kiln_ir::{Error, Result};
use std::collections::BTreeMap;
use std::sync::Arc;

/// Requests below this are rounded to 512 bytes, larger ones to 2 MiB.
const SMALL: usize = 1 << 20;
const MIB: f64 = (1 << 20) as f64;

/// Byte counts of the allocator, as `torch.cuda.memory_stats` reports them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MemoryStats {
    /// Bytes in live buffers.
    pub allocated: usize,
    /// Bytes taken from the driver (live and cached).
    pub reserved: usize,
    /// The most `allocated` has been since the last [`Gpu::reset_peak`].
    pub peak_allocated: usize,
    /// Requests served from the cache, and from the driver.
    pub cache_hits: usize,
    pub driver_allocs: usize,
}

/// Free cached blocks by size, and the statistics.
#[derive(Default)]
pub(crate) struct Pools {
    free: BTreeMap<usize, Vec<sys::CUdeviceptr>>,
    stats: MemoryStats,
}

/// The size a request of `bytes` is served with.
fn rounded(bytes: usize) -> usize {
    let unit = if bytes < SMALL { 512 } else { 2 << 20 };
    bytes.max(1).div_ceil(unit) * unit
}

/// A block of device memory, returned to the cache when dropped.
pub struct DeviceBuffer {
    gpu: Arc<Gpu>,
    ptr: sys::CUdeviceptr,
    bytes: usize,
}

impl DeviceBuffer {
    /// The device address.
    pub fn ptr(&self) -> sys::CUdeviceptr {
        self.ptr
    }

    /// The usable size in bytes (the request rounded up).
    pub fn bytes(&self) -> usize {
        self.bytes
    }
}

impl Drop for DeviceBuffer {
    fn drop(&mut self) {
        let mut pools = self.gpu.pools();
        pools.stats.allocated -= self.bytes;
        pools.free.entry(self.bytes).or_default().push(self.ptr);
    }
}

impl Gpu {
    /// `bytes` of device memory (uninitialised), from the cache when a free block of between
    /// the rounded size and twice it is there, else from the driver.
    pub fn alloc(self: &Arc<Self>, bytes: usize) -> Result<DeviceBuffer> {
        let size = rounded(bytes);
        let mut pools = self.pools();
        let cached = pools.free.range(size..=size * 2).next().map(|(&s, _)| s);
        let (ptr, size) = match cached {
            Some(s) => {
                let list = pools.free.get_mut(&s).expect("a listed size has blocks");
                let ptr = list.pop().expect("a listed size has blocks");
                if list.is_empty() {
                    pools.free.remove(&s);
                }
                pools.stats.cache_hits += 1;
                (ptr, s)
            }
            None => {
                self.bind()?;
                // SAFETY: plain driver allocation in the bound context.
                let ptr = match unsafe { result::malloc_sync(size) } {
                    Ok(p) => p,
                    Err(e) if e.0 == sys::CUresult::CUDA_ERROR_OUT_OF_MEMORY => {
                        release_cached(&mut pools)?;
                        // SAFETY: as above.
                        unsafe { result::malloc_sync(size) }.map_err(|_| self.oom(bytes, &pools))?
                    }
                    Err(e) => return Err(driver_error(&format!("allocating {bytes} bytes"), e)),
                };
                pools.stats.reserved += size;
                pools.stats.driver_allocs += 1;
                (ptr, size)
            }
        };
        pools.stats.allocated += size;
        pools.stats.peak_allocated = pools.stats.peak_allocated.max(pools.stats.allocated);
        drop(pools);
        Ok(DeviceBuffer { gpu: self.clone(), ptr, bytes: size })
    }

    /// The out-of-memory error for a request of `bytes`, with the sizes involved.
    fn oom(&self, bytes: usize, pools: &Pools) -> Error {
        let (free, total) = self.mem_info().unwrap_or((0, 0));
        Error::Device(format!(
            "out of GPU memory on cuda:{}: asked for {:.1} MiB; kiln holds {:.1} MiB in live buffers \
             ({:.1} MiB reserved); the device has {:.1} MiB free of {:.1} MiB",
            self.ordinal(),
            bytes as f64 / MIB,
            pools.stats.allocated as f64 / MIB,
            pools.stats.reserved as f64 / MIB,
            free as f64 / MIB,
            total as f64 / MIB
        ))
    }

    /// The allocator's statistics.
    pub fn memory_stats(&self) -> MemoryStats {
        self.pools().stats
    }

    /// Starts a new peak measurement at the current allocation.
    pub fn reset_peak(&self) {
        let mut pools = self.pools();
        pools.stats.peak_allocated = pools.stats.allocated;
    }

    /// Gives every cached (free) block back to the driver.
    pub fn empty_cache(&self) -> Result<()> {
        self.bind()?;
        self.synchronize()?;
        release_cached(&mut self.pools())
    }
}

/// Frees every cached block (the caller has bound the context).
fn release_cached(pools: &mut Pools) -> Result<()> {
    for (size, ptrs) in std::mem::take(&mut pools.free) {
        for p in ptrs {
            // SAFETY: a block this allocator took from the driver and nobody holds.
            unsafe { result::free_sync(p) }.map_err(|e| driver_error("freeing device memory", e))?;
            pools.stats.reserved -= size;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_round_to_512_bytes_then_2_mib() {
        assert_eq!(rounded(0), 512);
        assert_eq!(rounded(1), 512);
        assert_eq!(rounded(513), 1024);
        assert_eq!(rounded(SMALL - 1), SMALL);
        assert_eq!(rounded(SMALL), 2 << 20);
        assert_eq!(rounded((2 << 20) + 1), 4 << 20);
    }
}
