//! GPU metrics through NVML (`libnvidia-ml.so.1`, which the NVIDIA driver ships), loaded at run
//! time: kiln builds without CUDA, and on a machine without the library or a GPU this reports
//! no GPU. Read at each `/metrics` scrape: utilisation, memory, temperature and power per GPU.

use std::ffi::{c_int, c_uint, c_ulonglong, c_void};

type Device = *mut c_void;
type Ret = c_int;

/// `nvmlUtilization_t`.
#[repr(C)]
#[derive(Default)]
struct Utilization {
    gpu: c_uint,
    memory: c_uint,
}

/// `nvmlMemory_t`.
#[repr(C)]
#[derive(Default)]
struct Memory {
    total: c_ulonglong,
    free: c_ulonglong,
    used: c_ulonglong,
}

/// One GPU's readings; a field is `None` when NVML could not read it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct GpuReading {
    /// Percent of time a kernel ran over the last sample period.
    pub utilization_percent: Option<u32>,
    /// Bytes of device memory in use.
    pub memory_used_bytes: Option<u64>,
    /// Bytes of device memory in all.
    pub memory_total_bytes: Option<u64>,
    /// Core temperature.
    pub temperature_celsius: Option<u32>,
    /// Power draw.
    pub power_watts: Option<f64>,
}

/// The NVML functions kiln reads, resolved once.
struct Api {
    count: unsafe extern "C" fn(*mut c_uint) -> Ret,
    handle: unsafe extern "C" fn(c_uint, *mut Device) -> Ret,
    utilization: unsafe extern "C" fn(Device, *mut Utilization) -> Ret,
    memory: unsafe extern "C" fn(Device, *mut Memory) -> Ret,
    temperature: unsafe extern "C" fn(Device, c_int, *mut c_uint) -> Ret,
    power: unsafe extern "C" fn(Device, *mut c_uint) -> Ret,
}

/// A loaded and initialised NVML.
pub struct Nvml {
    api: Api,
    // Kept alive: the function pointers in `api` point into it.
    _lib: libloading::Library,
}

impl Nvml {
    /// Loads and initialises NVML; the reason when there is none (no driver, no GPU).
    pub fn load() -> Result<Nvml, String> {
        // SAFETY: loading the driver's NVML runs its initialisers, which have no preconditions.
        let lib = unsafe { libloading::Library::new("libnvidia-ml.so.1") }.map_err(|e| format!("no NVML (libnvidia-ml.so.1): {e}"))?;
        // SAFETY: each symbol is looked up with the signature of NVML's C API (nvml.h).
        let api = unsafe {
            let init = *lib.get::<unsafe extern "C" fn() -> Ret>(b"nvmlInit_v2\0").map_err(|e| e.to_string())?;
            let rc = init();
            if rc != 0 {
                return Err(format!("nvmlInit_v2 failed (NVML error {rc})"));
            }
            Api {
                count: *lib.get(b"nvmlDeviceGetCount_v2\0").map_err(|e| e.to_string())?,
                handle: *lib.get(b"nvmlDeviceGetHandleByIndex_v2\0").map_err(|e| e.to_string())?,
                utilization: *lib.get(b"nvmlDeviceGetUtilizationRates\0").map_err(|e| e.to_string())?,
                memory: *lib.get(b"nvmlDeviceGetMemoryInfo\0").map_err(|e| e.to_string())?,
                temperature: *lib.get(b"nvmlDeviceGetTemperature\0").map_err(|e| e.to_string())?,
                power: *lib.get(b"nvmlDeviceGetPowerUsage\0").map_err(|e| e.to_string())?,
            }
        };
        Ok(Nvml { api, _lib: lib })
    }

    /// The readings of every GPU, in NVML's index order.
    pub fn read(&self) -> Vec<GpuReading> {
        let a = &self.api;
        let mut n: c_uint = 0;
        // SAFETY: NVML is initialised; every out-pointer points at a live, correctly laid out value.
        unsafe {
            if (a.count)(&mut n) != 0 {
                return Vec::new();
            }
            (0..n)
                .filter_map(|i| {
                    let mut dev: Device = std::ptr::null_mut();
                    if (a.handle)(i, &mut dev) != 0 {
                        return None;
                    }
                    let mut r = GpuReading::default();
                    let mut u = Utilization::default();
                    if (a.utilization)(dev, &mut u) == 0 {
                        r.utilization_percent = Some(u.gpu);
                    }
                    let mut m = Memory::default();
                    if (a.memory)(dev, &mut m) == 0 {
                        r.memory_used_bytes = Some(m.used);
                        r.memory_total_bytes = Some(m.total);
                    }
                    let mut t: c_uint = 0;
                    if (a.temperature)(dev, 0, &mut t) == 0 {
                        r.temperature_celsius = Some(t);
                    }
                    let mut mw: c_uint = 0;
                    if (a.power)(dev, &mut mw) == 0 {
                        r.power_watts = Some(f64::from(mw) / 1e3);
                    }
                    Some(r)
                })
                .collect()
        }
    }
}

// SAFETY: NVML's API is thread-safe (nvml.h: "NVML is thread-safe"), and `Nvml` holds only the
// library and function pointers into it.
unsafe impl Send for Nvml {}
// SAFETY: as above.
unsafe impl Sync for Nvml {}
