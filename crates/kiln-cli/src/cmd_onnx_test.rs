//! `kiln onnx-test DIR`: the ONNX conformance runner. Prints the cases that did not pass and a
//! summary; exits non-zero when any case gave a wrong answer (unsupported cases are reported,
//! not failures).

use crate::args::OnnxTestArgs;
use crate::exit::{CliError, CliResult};
use kiln_onnx::conformance::{Status, discover, run_case};
use std::io::Write;

/// Runs the cases under `a.dir`.
pub fn onnx_test(a: &OnnxTestArgs) -> CliResult<()> {
    let mut cases = discover(&a.dir).map_err(|e| CliError::Failed(e.to_string()))?;
    if let Some(f) = &a.filter {
        cases.retain(|c| c.file_name().is_some_and(|n| n.to_string_lossy().contains(f.as_str())));
    }
    if cases.is_empty() {
        return Err(CliError::Failed(format!("no test cases (folders with model.onnx) under {}", a.dir.display())));
    }
    let mut json = match &a.json {
        Some(p) => Some(std::fs::File::create(p).map_err(|e| CliError::Failed(format!("{}: {e}", p.display())))?),
        None => None,
    };
    let (mut pass, mut fail, mut unsupported) = (0, 0, 0);
    for dir in &cases {
        let r = run_case(dir);
        match r.status {
            Status::Pass => pass += 1,
            Status::Fail => fail += 1,
            Status::Unsupported => unsupported += 1,
        }
        if a.verbose || r.status != Status::Pass {
            println!("{:<12} {:<60} {}", r.status.name(), r.case, r.message);
        }
        if let Some(f) = json.as_mut() {
            writeln!(f, "{}", r.to_json()).map_err(|e| CliError::Failed(format!("writing the report: {e}")))?;
        }
    }
    println!("{} cases: {pass} passed, {fail} failed, {unsupported} unsupported", cases.len());
    if fail > 0 {
        return Err(CliError::Failed(format!("{fail} cases gave wrong answers")));
    }
    Ok(())
}
