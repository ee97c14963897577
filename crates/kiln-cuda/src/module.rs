//! A loaded cubin and its kernels.

use crate::device::{Gpu, driver_error};
use cudarc::driver::{result, sys};
use kiln_ir::{Error, Result};
use std::collections::HashMap;
use std::ffi::CString;
use std::sync::Arc;

/// A module loaded into a [`Gpu`]'s context, with its functions looked up by name.
pub struct Module {
    gpu: Arc<Gpu>,
    handle: sys::CUmodule,
    functions: HashMap<String, sys::CUfunction>,
}

// SAFETY: module and function handles are context-wide, usable from any thread that binds the
// context (every use binds it first).
unsafe impl Send for Module {}
unsafe impl Sync for Module {}

impl Module {
    /// Loads `cubin` and looks up `names`.
    pub fn load(gpu: &Arc<Gpu>, cubin: &[u8], names: &[&str]) -> Result<Module> {
        gpu.bind()?;
        // SAFETY: `cubin` is an image NVRTC produced for this device's architecture.
        let handle = unsafe { result::module::load_data(cubin.as_ptr().cast()) }.map_err(|e| driver_error("loading the kernels' cubin", e))?;
        let mut module = Module { gpu: gpu.clone(), handle, functions: HashMap::new() };
        for &name in names {
            let c = CString::new(name).map_err(|_| Error::Device(format!("kernel name {name:?} holds a NUL byte")))?;
            // SAFETY: a live module.
            let f = unsafe { result::module::get_function(handle, c) }.map_err(|e| driver_error(&format!("finding kernel {name}"), e))?;
            module.functions.insert(name.to_string(), f);
        }
        Ok(module)
    }

    /// The function `name` (one of the names given to [`Module::load`]).
    pub fn function(&self, name: &str) -> Result<sys::CUfunction> {
        self.functions.get(name).copied().ok_or_else(|| Error::Device(format!("kernel {name} is not in the module")))
    }
}

impl Drop for Module {
    fn drop(&mut self) {
        if self.gpu.bind().is_ok() {
            // SAFETY: the module is not used after this.
            let _ = unsafe { result::module::unload(self.handle) };
        }
    }
}
