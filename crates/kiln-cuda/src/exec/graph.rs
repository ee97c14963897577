//! reduce-overhead: a program's launches captured once into a CUDA graph and replayed with one
//! `cuGraphLaunch`, which removes the per-kernel launch cost that dominates small batches (as
//! `torch.compile(mode="reduce-overhead")` does). Every address a step uses is fixed when the
//! executable is built (arena, staging buffers, constants), so the captured graph stays valid.

use crate::device::{Gpu, driver_error};
use cudarc::driver::{result, sys};
use kiln_ir::Result;
use std::sync::Mutex;

/// The captured graph, made on the first launch.
#[derive(Default)]
pub(crate) struct GraphReplay {
    exec: Mutex<Option<Exec>>,
}

struct Exec(sys::CUgraphExec, sys::CUgraph);
// SAFETY: graph handles are context-wide and used under the mutex.
unsafe impl Send for Exec {}

impl GraphReplay {
    /// Launches the graph, capturing `issue` (which issues every step on kiln's stream) first
    /// if this is the first launch.
    pub fn launch(&self, gpu: &Gpu, issue: impl FnOnce() -> Result<()>) -> Result<()> {
        let mut exec = self.exec.lock().unwrap_or_else(|p| p.into_inner());
        if exec.is_none() {
            let stream = gpu.cu_stream();
            // SAFETY: kiln's live stream; capture ends below whatever `issue` returns.
            unsafe { result::stream::begin_capture(stream, sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED) }
                .map_err(|e| driver_error("starting a CUDA graph capture", e))?;
            let issued = issue();
            // SAFETY: the capture begun above.
            let graph = unsafe { result::stream::end_capture(stream) }.map_err(|e| driver_error("ending a CUDA graph capture", e));
            issued?;
            let graph = graph?;
            // SAFETY: a graph just captured.
            let instance = unsafe { result::graph::instantiate(graph, sys::CUgraphInstantiate_flags(0)) }
                .map_err(|e| driver_error("instantiating the CUDA graph", e))?;
            tracing::info!(target: "kiln::cuda", "reduce-overhead: captured the run as a CUDA graph");
            *exec = Some(Exec(instance, graph));
        }
        let Some(Exec(instance, _)) = exec.as_ref() else { unreachable!("set above") };
        // SAFETY: an instantiated graph of this context, launched on kiln's stream.
        unsafe { result::graph::launch(*instance, gpu.cu_stream()) }.map_err(|e| driver_error("launching the CUDA graph", e))
    }
}

impl Drop for GraphReplay {
    fn drop(&mut self) {
        if let Some(Exec(instance, graph)) = self.exec.get_mut().ok().and_then(Option::take) {
            // SAFETY: handles this replay made; nothing uses them after this.
            unsafe {
                let _ = result::graph::exec_destroy(instance);
                let _ = result::graph::destroy(graph);
            }
        }
    }
}
