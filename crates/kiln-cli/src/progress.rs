//! Progress display on stderr, drawn only when stderr is a terminal, so that piped or `--json`
//! output is never mixed with bar redraws.

use std::io::IsTerminal;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};

fn visible() -> bool {
    std::io::stderr().is_terminal()
}

/// A spinner with a message, for work of unknown length (building a model's weights).
pub fn spinner(message: impl Into<String>) -> ProgressBar {
    if !visible() {
        return ProgressBar::hidden();
    }
    let pb = ProgressBar::new_spinner().with_message(message.into());
    pb.enable_steady_tick(Duration::from_millis(100));
    pb
}

/// A bar over `len` steps (forward passes of a benchmark).
pub fn bar(len: u64, message: impl Into<String>) -> ProgressBar {
    if !visible() {
        return ProgressBar::hidden();
    }
    let pb = ProgressBar::new(len).with_message(message.into());
    // The template is a constant, so failing to parse it is a bug here, not a user error;
    // fall back to the default style rather than stop the benchmark.
    if let Ok(style) = ProgressStyle::with_template("{msg} [{bar:30}] {pos}/{len} {elapsed_precise}") {
        pb.set_style(style.progress_chars("=> "));
    }
    pb
}
