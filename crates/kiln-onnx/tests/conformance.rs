//! The ONNX backend conformance suite as a test: generates the cases with
//! `scripts/onnx-cases.sh` (a local Python venv with the pinned onnx package), runs every case
//! through the importer and the reference interpreter, and fails on any wrong answer or on
//! fewer passes than `MIN_PASSED` (raise it as coverage grows, so a regression fails CI).
//! Per-case results go to `target/onnx-conformance.jsonl` (input of scripts/conformance_table.py).

use kiln_onnx::conformance::{Status, discover, run_case};
use std::io::Write;
use std::path::PathBuf;
use std::process::Command;

/// Cases whose expected outputs are themselves off by more than the tolerance, so that an exact
/// answer fails: the generator ran `np.fft.ifft` on complex64, which NumPy 2 computes in single
/// precision, leaving 1.9e-7 where the exact value is 0 (atol is 1e-7). kiln's answer is within
/// 3e-15 of the float64 result; ONNX Runtime fails these too. They are reported, not hidden.
const REFERENCE_DEFECTS: &[&str] = &["test_dft_inverse", "test_dft_inverse_opset19"];

/// Cases that passed when this floor was last raised (of 2,024: 1,884 node cases + 140 shipped).
const MIN_PASSED: usize = 1923;

#[test]
fn onnx_backend_conformance() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let cases_dir = root.join("target/onnx-cases");
    let status = Command::new(root.join("scripts/onnx-cases.sh"))
        .arg(&cases_dir)
        .status()
        .expect("scripts/onnx-cases.sh could not be started (needs bash and python3)");
    assert!(status.success(), "scripts/onnx-cases.sh failed: {status}");

    let cases = discover(&cases_dir).expect("listing the generated cases");
    assert!(cases.len() > 1800, "only {} cases were generated", cases.len());
    let report_path = root.join("target/onnx-conformance.jsonl");
    let mut report = std::fs::File::create(&report_path).expect("creating the report");
    let (mut passed, mut unsupported) = (0, 0);
    let mut failed = Vec::new();
    for dir in &cases {
        let r = run_case(dir);
        writeln!(report, "{}", r.to_json()).expect("writing the report");
        match r.status {
            Status::Pass => passed += 1,
            Status::Unsupported => unsupported += 1,
            Status::Fail if REFERENCE_DEFECTS.contains(&r.case.as_str()) => {
                println!("known reference defect: {}: {}", r.case, r.message)
            }
            Status::Fail => failed.push(format!("{}: {}", r.case, r.message)),
        }
    }
    println!(
        "ONNX conformance: {} cases, {passed} passed, {} wrong, {unsupported} unsupported (report: {})",
        cases.len(),
        failed.len(),
        report_path.display()
    );
    assert!(failed.is_empty(), "{} cases gave wrong answers:\n{}", failed.len(), failed.join("\n"));
    assert!(passed >= MIN_PASSED, "only {passed} cases passed; at least {MIN_PASSED} did before");
}
