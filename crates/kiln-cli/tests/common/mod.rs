//! Running the built `kiln` binary from the CLI tests, and the checks they share.

use std::process::{Command, Output};

/// Runs `kiln` with `args` (logs off, so stderr holds only what the command says).
pub fn kiln(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kiln"))
        .args(args)
        .env_remove("KILN_LOG")
        // Compiled modes write their libraries here, not into the user's cache.
        .env("KILN_CACHE_DIR", std::env::temp_dir().join("kiln-cli-test-cache"))
        .output()
        .expect("the kiln binary runs")
}

/// The command's stdout as text.
pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// The command's stderr as text.
pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Bad input must end in one `error:` line and exit `code`, never a panic. Returns stderr.
pub fn assert_clean_failure(o: &Output, code: i32) -> String {
    let err = stderr(o);
    assert_eq!(o.status.code(), Some(code), "stdout: {}\nstderr: {err}", stdout(o));
    assert!(err.starts_with("error:"), "stderr: {err}");
    assert!(!err.contains("panicked"), "stderr: {err}");
    err
}
