//! Graph breaks: a read of a traced tensor's data (`to_vec`, `item`, `to_host`, ...) inside a
//! compiled function. The capture cuts there: the graph so far is compiled (or found in the
//! function's cache) and run, with every traced value still alive as an output; those values
//! get their data, the read returns its value, and capture continues in a new segment whose
//! inputs are the computed values it uses. Under `fullgraph` a break is an error instead.

use super::Shared;
use crate::Tensor;
use crate::trace;
use kiln_ir::{Error, HostTensor, Result};
use std::cell::RefCell;
use std::fmt;
use std::panic::Location;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// One graph break: which read, and where in the user's code.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Break {
    /// The method that read the data (`item`, `to_vec`, ...).
    pub op: String,
    /// The caller of that method.
    pub location: &'static Location<'static>,
    /// Whether the capture had to cut (false: the value was already computed, e.g. an input;
    /// the read still makes the function's control flow data-dependent).
    pub cut: bool,
}

impl Break {
    /// The error a break is under `fullgraph`.
    pub(crate) fn fullgraph_error(&self, function: &str) -> Error {
        Error::Unsupported(format!(
            "fullgraph: graph break at {}: {self}; in the function compiled at {function} (drop .fullgraph(true) to allow breaks)",
            self.location
        ))
    }
}

impl fmt::Display for Break {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}() reads the data of a traced tensor", self.op)
    }
}

/// A capture in progress on this thread.
pub(crate) struct Session {
    root: u64,
    shared: Arc<Shared>,
    pub breaks: Vec<Break>,
    /// Time spent compiling and running segments at breaks (not tracing).
    pub segment_time: Duration,
}

thread_local! {
    static SESSIONS: RefCell<Vec<Session>> = const { RefCell::new(Vec::new()) };
}

/// Removes its session from this thread's stack when dropped (also on panic).
pub(crate) struct SessionGuard(u64);

impl SessionGuard {
    /// Starts the session of the capture `root` of `shared`'s function.
    pub(crate) fn push(root: u64, shared: Arc<Shared>) -> SessionGuard {
        SESSIONS.with(|s| s.borrow_mut().push(Session { root, shared, breaks: Vec::new(), segment_time: Duration::ZERO }));
        SessionGuard(root)
    }

    /// Ends the session and returns what it recorded.
    pub(crate) fn finish(self) -> Option<Session> {
        let root = self.0;
        std::mem::forget(self);
        SESSIONS.with(|s| {
            let mut s = s.borrow_mut();
            let pos = s.iter().rposition(|x| x.root == root)?;
            Some(s.remove(pos))
        })
    }
}

impl Drop for SessionGuard {
    fn drop(&mut self) {
        let _ = SESSIONS.try_with(|s| {
            if let Ok(mut s) = s.try_borrow_mut() {
                s.retain(|x| x.root != self.0);
            }
        });
    }
}

/// Runs `f` on the session of the capture `root`, if it is on this thread.
fn with_session<R>(root: u64, f: impl FnOnce(&mut Session) -> R) -> Option<R> {
    SESSIONS.with(|s| s.borrow_mut().iter_mut().rev().find(|x| x.root == root).map(f))
}

/// A read of traced tensor `t`'s data by `op` at `at`. `None` when no capture on this thread
/// owns `t` (the caller then answers as a plain trace does); otherwise the data, produced by a
/// graph break, or under `fullgraph` the error naming the break.
pub(crate) fn read_traced(t: &Tensor, op: &str, at: &'static Location<'static>) -> Option<Result<HostTensor>> {
    let (root, segment) = trace::active_capture()?;
    let shared = with_session(root, |s| s.shared.clone())?;
    let computed = t.data().cloned();
    if computed.is_none() && trace::trace_id_of(t) != Some(segment) {
        return None;
    }
    let brk = Break { op: op.to_string(), location: at, cut: computed.is_none() };
    tracing::info!(target: "kiln::graph_breaks", "graph break at {at}: {brk} (function compiled at {})", shared.name);
    with_session(root, |s| s.breaks.push(brk.clone()));
    if shared.opts.fullgraph {
        return Some(Err(brk.fullgraph_error(&shared.name)));
    }
    if let Some(v) = computed {
        return Some(Ok(v));
    }
    let start = Instant::now();
    let read = (|| {
        let seg = trace::cut(root, None)?;
        let outs = super::segments::run(&shared, &seg, true)?.0;
        for (v, out) in seg.values.iter().zip(outs) {
            v.set_value(out);
        }
        t.data().cloned().ok_or_else(|| Error::Graph(format!("{op}: the graph break did not compute the value read")))
    })();
    with_session(root, |s| s.segment_time += start.elapsed());
    Some(read)
}
