//! Kernels compiled to native code: a loaded [`NativeLibrary`] of generated C, launched through
//! the same [`LaunchKernel`] interface as the kernel-IR interpreter.
//!
//! Parallelism: a big launch's range of the first outer loop is split over rayon's pool — the
//! pool the GEMMs use — rather than an OpenMP team inside the C, because two pools on the same
//! cores fight (an OpenMP team spinning after each kernel made resnet50 8x slower next to the
//! GEMM's threads).

use crate::compiled::LaunchKernel;
use crate::toolchain::{ColsFn, KernelFn, NativeLibrary};
use kiln_ir::{Error, Result};
use kiln_sched::{Kernel, Program};
use std::collections::HashMap;
use std::ffi::c_void;
use std::path::Path;
use std::sync::Arc;

/// The compiled kernels of one program, looked up by name once at load time.
pub struct NativeKernels {
    loaded: Arc<Loaded>,
    /// The values of a size-generic library's symbols, passed to every kernel after its
    /// buffers (see [`crate::codegen::generic`]); empty for a library of fixed sizes.
    sizes: Vec<i64>,
}

struct Loaded {
    fns: HashMap<String, KernelFn>,
    /// The column-block twins of the kernels that have one, by kernel name.
    cols: HashMap<String, ColsFn>,
    // Declared after `fns` so the functions are dropped before the library they point into.
    _lib: NativeLibrary,
}

impl NativeKernels {
    /// Loads the library at `path` and resolves every kernel `program` launches.
    pub fn load(path: &Path, program: &Program) -> Result<NativeKernels> {
        let lib = NativeLibrary::load(path)?;
        let (mut fns, mut cols) = (HashMap::new(), HashMap::new());
        for k in program.kernels() {
            fns.insert(k.name.clone(), lib.kernel(&k.name)?);
            if crate::codegen::has_cols(k)
                && let Some(f) = lib.kernel_cols(&crate::codegen::cols_name(k))
            {
                cols.insert(k.name.clone(), f);
            }
        }
        Ok(NativeKernels { loaded: Arc::new(Loaded { fns, cols, _lib: lib }), sizes: Vec::new() })
    }

    /// The same library's kernels launched with the symbols of a size-generic library set to
    /// `sizes` (the library stays loaded once). Every kernel of the programs run through them
    /// must have been in the program given to [`NativeKernels::load`].
    pub fn with_sizes(&self, sizes: Vec<i64>) -> NativeKernels {
        NativeKernels { loaded: self.loaded.clone(), sizes }
    }
}

impl LaunchKernel for NativeKernels {
    fn cols_fn(&self, kernel: &Kernel) -> Option<ColsFn> {
        // A size-generic library has no twins (its kernels also take the sizes).
        self.loaded.cols.get(&kernel.name).copied().filter(|_| self.sizes.is_empty())
    }

    fn launch(&self, kernel: &Kernel, args: &[*mut u8], begin: i64, end: i64) -> Result<()> {
        self.launch_split(kernel, args, begin, end, None)
    }

    fn launch_split(
        &self,
        kernel: &Kernel,
        args: &[*mut u8],
        begin: i64,
        end: i64,
        chunks: Option<usize>,
    ) -> Result<()> {
        let f = self
            .loaded
            .fns
            .get(&kernel.name)
            .ok_or_else(|| Error::Unsupported(format!("kernel {} is not in the compiled library", kernel.name)))?;
        if args.len() != kernel.args.len() {
            return Err(Error::Value(format!("kernel {} takes {} buffers, {} were bound", kernel.name, kernel.args.len(), args.len())));
        }
        let f = *f;
        // A size-generic kernel reads its sizes from one argument after its buffers.
        let sized: Vec<*mut u8>;
        let args = if self.sizes.is_empty() {
            args
        } else {
            sized = args.iter().copied().chain([self.sizes.as_ptr() as *mut u8]).collect();
            &sized[..]
        };
        let rows = end - begin;
        let chunks = match chunks {
            Some(c) => (c as i64).min(rows),
            None => {
                let threads = rayon::current_num_threads() as i64;
                let work = crate::codegen::work_per_row(kernel).saturating_mul(rows.max(0) as u64);
                if threads < 2 || work < crate::codegen::PAR_MIN_WORK { 1 } else { threads.min(rows) }
            }
        };
        if kernel.outer.is_empty() || chunks < 2 {
            // SAFETY: the caller guarantees (LaunchKernel's contract) that each pointer holds
            // its argument's elements; the function was generated from this very kernel.
            unsafe { f(args.as_ptr() as *const *mut c_void, begin, end) };
            return Ok(());
        }
        let args = &SendPtrs(args);
        crate::par::for_each_task(chunks as usize, |c| {
            let c = c as i64;
            let (b, e) = (begin + rows * c / chunks, begin + rows * (c + 1) / chunks);
            // SAFETY: as above; outer points are independent (the kernel IR's rule), so
            // disjoint ranges write disjoint elements.
            unsafe { f(args.as_ptr(), b, e) };
        });
        Ok(())
    }
}

/// Buffer pointers shared by the threads of one launch (each writes its own points).
struct SendPtrs<'a>(&'a [*mut u8]);

// SAFETY: the pointers are only dereferenced by the kernel, on disjoint outer points.
unsafe impl Sync for SendPtrs<'_> {}

impl SendPtrs<'_> {
    /// The pointer array, as a kernel takes it (a method, so that closures capture the whole
    /// wrapper rather than its non-`Sync` field).
    fn as_ptr(&self) -> *const *mut c_void {
        self.0.as_ptr() as *const *mut c_void
    }
}
