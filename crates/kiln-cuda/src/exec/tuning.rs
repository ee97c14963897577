//! The knobs `max-autotune` sets on a CUDA program, one set per step, and their text form (what
//! the disk cache stores so the next process skips the search). A knob left `None` is the
//! built-in choice, so an empty [`GpuTuning`] is the default mode.

use kiln_ir::{Error, Result};
use std::fmt::Write;

/// The largest [`GpuStepTuning::spread`].
pub const MAX_SPREAD: u32 = 64;

/// The first line of [`GpuTuning::to_text`]; another first line is refused.
const HEADER: &str = "kiln-cuda-tuning v1";

/// The choices for one step.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GpuStepTuning {
    /// Threads per block of the step's kernel (a kernel step).
    pub block: Option<u32>,
    /// Outer points each thread (or block) of the step's kernel covers: its grid shrinks by this
    /// factor, more work per thread (a kernel step).
    pub spread: Option<u32>,
    /// Threads per block of the kernel after a library call (its epilogue).
    pub epilogue_block: Option<u32>,
    /// The cuDNN forward algorithm (a conv step), by its number.
    pub conv_algo: Option<i32>,
    /// A matmul step: the cuBLASLt algorithm configuration that runs it, instead of cuBLAS's
    /// own call.
    pub lt_algo: Option<LtAlgo>,
}

/// A cuBLASLt algorithm with its configuration (`cublasLtMatmulAlgo_t`'s bytes), which cuBLAS
/// documents as safe to store and reuse with the same library version (the cache key names
/// it); a stored one is checked again by cuBLASLt before use.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct LtAlgo(pub [u64; 8]);

impl LtAlgo {
    /// 128 hex digits.
    pub fn to_hex(&self) -> String {
        self.0.iter().map(|w| format!("{w:016x}")).collect()
    }

    /// Parses [`LtAlgo::to_hex`].
    pub fn from_hex(s: &str) -> Option<LtAlgo> {
        if s.len() != 128 || !s.is_ascii() {
            return None;
        }
        let mut words = [0u64; 8];
        for (i, w) in words.iter_mut().enumerate() {
            *w = u64::from_str_radix(&s[16 * i..16 * (i + 1)], 16).ok()?;
        }
        Some(LtAlgo(words))
    }
}

impl GpuStepTuning {
    /// True when every knob is the built-in choice.
    pub fn is_default(&self) -> bool {
        *self == GpuStepTuning::default()
    }
}

/// One [`GpuStepTuning`] per step of a program (missing trailing entries are defaults).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GpuTuning {
    /// Indexed by step.
    pub steps: Vec<GpuStepTuning>,
}

impl GpuTuning {
    /// The knobs of step `i`.
    pub fn step(&self, i: usize) -> GpuStepTuning {
        self.steps.get(i).copied().unwrap_or_default()
    }

    /// Steps with a non-default choice.
    pub fn tuned_steps(&self) -> usize {
        self.steps.iter().filter(|s| !s.is_default()).count()
    }

    /// One line per non-default step: `STEP block=N spread=N epilogue_block=N conv_algo=N lt_algo=HEX`
    /// (knobs left out are default).
    pub fn to_text(&self) -> String {
        let mut s = format!("{HEADER}\n");
        for (i, t) in self.steps.iter().enumerate().filter(|(_, t)| !t.is_default()) {
            let _ = write!(s, "{i}");
            let knobs = [
                ("block", t.block.map(|v| v.to_string())),
                ("spread", t.spread.map(|v| v.to_string())),
                ("epilogue_block", t.epilogue_block.map(|v| v.to_string())),
                ("conv_algo", t.conv_algo.map(|v| v.to_string())),
                ("lt_algo", t.lt_algo.map(|a| a.to_hex())),
            ];
            for (name, v) in knobs {
                if let Some(v) = v {
                    let _ = write!(s, " {name}={v}");
                }
            }
            s.push('\n');
        }
        s
    }

    /// Parses [`GpuTuning::to_text`] for a program of `steps` steps; anything else (another
    /// header, a step out of range, an unknown knob or a bad number) is an error naming the line.
    pub fn from_text(text: &str, steps: usize) -> Result<GpuTuning> {
        let mut lines = text.lines();
        if lines.next() != Some(HEADER) {
            return Err(Error::Value(format!("a CUDA tuning starts with {HEADER:?}")));
        }
        let mut t = GpuTuning { steps: vec![GpuStepTuning::default(); steps] };
        for (n, line) in lines.enumerate().filter(|(_, l)| !l.trim().is_empty()) {
            let bad = |why: &str| Error::Value(format!("CUDA tuning line {}: {why}: {line:?}", n + 2));
            let mut words = line.split_whitespace();
            let step: usize = words.next().and_then(|w| w.parse().ok()).ok_or_else(|| bad("no step number"))?;
            let slot = t.steps.get_mut(step).ok_or_else(|| bad(&format!("step past the program's {steps}")))?;
            for w in words {
                let (name, value) = w.split_once('=').ok_or_else(|| bad("a knob is NAME=VALUE"))?;
                let number = |lo: i64| value.parse::<i64>().ok().filter(|&v| v >= lo).ok_or_else(|| bad(&format!("{name} needs a number of at least {lo}")));
                match name {
                    "block" => slot.block = Some(block(number(32)?).ok_or_else(|| bad("a block is 32 to 1024 threads"))?),
                    "spread" => slot.spread = Some(u32::try_from(number(2)?).ok().filter(|&v| v <= MAX_SPREAD).ok_or_else(|| bad(&format!("spread is 2 to {MAX_SPREAD}")))?),
                    "epilogue_block" => slot.epilogue_block = Some(block(number(32)?).ok_or_else(|| bad("a block is 32 to 1024 threads"))?),
                    "conv_algo" => slot.conv_algo = Some(i32::try_from(number(0)?).map_err(|_| bad("conv_algo out of range"))?),
                    "lt_algo" => slot.lt_algo = Some(LtAlgo::from_hex(value).ok_or_else(|| bad("lt_algo is 128 hex digits"))?),
                    _ => return Err(bad(&format!("unknown knob {name:?}"))),
                }
            }
        }
        Ok(t)
    }
}

/// `v` as a block size, when it is one a launch takes (a multiple of 32, at most 1024).
fn block(v: i64) -> Option<u32> {
    (v % 32 == 0 && (32..=1024).contains(&v)).then_some(v as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tuning_round_trips_through_its_text() {
        let mut t = GpuTuning { steps: vec![GpuStepTuning::default(); 4] };
        t.steps[0].block = Some(128);
        t.steps[0].spread = Some(4);
        let algo = LtAlgo([1, 2, 3, 0xffff_ffff_ffff_ffff, 0, 0, 7, 0x10]);
        t.steps[2] = GpuStepTuning { block: None, spread: None, epilogue_block: Some(1024), conv_algo: Some(6), lt_algo: Some(algo) };
        let text = t.to_text();
        let hex = "000000000000000100000000000000020000000000000003ffffffffffffffff0000000000000000000000000000000000000000000000070000000000000010";
        assert_eq!(text, format!("kiln-cuda-tuning v1\n0 block=128 spread=4\n2 epilogue_block=1024 conv_algo=6 lt_algo={hex}\n"));
        assert_eq!(GpuTuning::from_text(&text, 4).unwrap(), t);
        assert_eq!(t.tuned_steps(), 2);
        assert_eq!(GpuTuning::from_text(&text, 5).unwrap().step(4), GpuStepTuning::default());
    }

    #[test]
    fn malformed_tunings_are_errors_naming_the_line() {
        let cases = [
            ("kiln-tuning v1\n", "starts with"),
            ("kiln-cuda-tuning v1\n9 block=64\n", "step past"),
            ("kiln-cuda-tuning v1\n0 block=100\n", "32 to 1024"),
            ("kiln-cuda-tuning v1\n0 block=2048\n", "32 to 1024"),
            ("kiln-cuda-tuning v1\n0 conv_algo=-1\n", "at least 0"),
            ("kiln-cuda-tuning v1\n0 warp=3\n", "unknown knob"),
            ("kiln-cuda-tuning v1\nx block=64\n", "no step"),
            ("kiln-cuda-tuning v1\n0 block\n", "NAME=VALUE"),
            ("kiln-cuda-tuning v1\n0 lt_algo=12ab\n", "128 hex digits"),
            ("kiln-cuda-tuning v1\n0 spread=1\n", "at least 2"),
            ("kiln-cuda-tuning v1\n0 spread=65\n", "2 to 64"),
        ];
        for (text, why) in cases {
            let e = GpuTuning::from_text(text, 3).unwrap_err().to_string();
            assert!(e.contains(why), "{text:?}: {e}");
        }
    }
}
