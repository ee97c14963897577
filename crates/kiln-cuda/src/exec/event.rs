//! CUDA events for device timing (`time_runs`, `profile`), destroyed when dropped (also when
//! a timed run fails part way).

use crate::device::{Gpu, driver_error};
use cudarc::driver::{result, sys};
use kiln_ir::Result;

/// A CUDA event of the current context.
pub(super) struct Event(sys::CUevent);

impl Event {
    pub fn new() -> Result<Event> {
        result::event::create(sys::CUevent_flags::CU_EVENT_DEFAULT).map(Event).map_err(|e| driver_error("creating an event", e))
    }

    /// Records the event on kiln's stream.
    pub fn record(&self, gpu: &Gpu) -> Result<()> {
        // SAFETY: a live event recorded on kiln's live stream.
        unsafe { result::event::record(self.0, gpu.cu_stream()) }.map_err(|e| driver_error("recording an event", e))
    }

    /// Waits until the work recorded before this event has finished.
    pub fn synchronize(&self) -> Result<()> {
        // SAFETY: a live event.
        unsafe { result::event::synchronize(self.0) }.map_err(|e| driver_error("waiting for an event", e))
    }

    /// Milliseconds from this event to `end`; both recorded, `end` completed.
    pub fn ms_until(&self, end: &Event) -> Result<f64> {
        // SAFETY: two live events; the driver reports an error if either has not completed.
        unsafe { result::event::elapsed(self.0, end.0) }.map(f64::from).map_err(|e| driver_error("reading an event", e))
    }
}

impl Drop for Event {
    fn drop(&mut self) {
        // SAFETY: an event this module created; nothing uses it after this.
        let _ = unsafe { result::event::destroy(self.0) };
    }
}
