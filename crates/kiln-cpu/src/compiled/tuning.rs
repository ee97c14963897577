//! The knobs `max-autotune` sets, one set per program step, and their text form (what the
//! disk cache stores so the next process skips the search). A knob left `None` means the
//! built-in heuristic, so an empty [`Tuning`] is the default mode.

use kiln_ir::{Error, Result};
use std::fmt::Write;

/// The choices for one step.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StepTuning {
    /// Pieces a kernel launch's range is split into over the thread pool (1: one thread).
    /// For an extern, its epilogue's launches.
    pub chunks: Option<usize>,
    /// Extern steps: output rows per GEMM call; the epilogue runs after each block.
    pub block_rows: Option<usize>,
}

impl StepTuning {
    /// True when every knob is the heuristic's.
    pub fn is_default(&self) -> bool {
        *self == StepTuning::default()
    }
}

/// One [`StepTuning`] per step of a program (missing trailing entries are defaults).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Tuning {
    /// Indexed by step.
    pub steps: Vec<StepTuning>,
}

impl Tuning {
    /// The knobs of step `i`.
    pub fn step(&self, i: usize) -> StepTuning {
        self.steps.get(i).copied().unwrap_or_default()
    }

    /// Steps with a non-default choice.
    pub fn tuned_steps(&self) -> usize {
        self.steps.iter().filter(|s| !s.is_default()).count()
    }

    /// One line per non-default step: `STEP chunks=N block_rows=N` (knobs left out are default).
    pub fn to_text(&self) -> String {
        let mut s = String::from("kiln-tuning v1\n");
        for (i, t) in self.steps.iter().enumerate().filter(|(_, t)| !t.is_default()) {
            let _ = write!(s, "{i}");
            if let Some(c) = t.chunks {
                let _ = write!(s, " chunks={c}");
            }
            if let Some(b) = t.block_rows {
                let _ = write!(s, " block_rows={b}");
            }
            s.push('\n');
        }
        s
    }

    /// Parses [`Tuning::to_text`] for a program of `steps` steps; anything else (another
    /// version, a step out of range, a zero or unknown knob) is an error naming the line.
    pub fn from_text(text: &str, steps: usize) -> Result<Tuning> {
        let bad = |n: usize, why: &str| Error::Value(format!("tuning line {}: {why}", n + 1));
        let mut lines = text.lines();
        if lines.next() != Some("kiln-tuning v1") {
            return Err(bad(0, "expected the header 'kiln-tuning v1'"));
        }
        let mut t = Tuning { steps: vec![StepTuning::default(); steps] };
        for (n, line) in lines.enumerate().map(|(n, l)| (n + 1, l)) {
            let mut words = line.split_whitespace();
            let Some(step) = words.next() else { continue };
            let i: usize = step.parse().map_err(|_| bad(n, "expected a step number"))?;
            let slot = t.steps.get_mut(i).ok_or_else(|| bad(n, &format!("step {i} of {steps}")))?;
            for w in words {
                let (k, v) = w.split_once('=').ok_or_else(|| bad(n, &format!("'{w}' is not knob=value")))?;
                let v: usize = v.parse().ok().filter(|&v| v > 0).ok_or_else(|| bad(n, &format!("'{w}' needs a positive integer")))?;
                match k {
                    "chunks" => slot.chunks = Some(v),
                    "block_rows" => slot.block_rows = Some(v),
                    _ => return Err(bad(n, &format!("unknown knob '{k}'"))),
                }
            }
        }
        Ok(t)
    }
}
