//! What `run`, `bench` and `inspect` share for ONNX models: telling a file from a zoo name,
//! loading it with errors that say what to do, importing it for concrete inputs, counting its
//! parameters and running the imported graph on the reference interpreter.

use std::panic::AssertUnwindSafe;
use std::path::Path;
use std::time::Instant;

use kiln_ir::HostTensor;
use kiln_onnx::{Imported, OnnxModel};

use crate::args::{FloatDType, ModelArgs};
use crate::exit::{CliError, CliResult};
use crate::onnx_inputs::{self, InputRequest, Prepared};

/// True when `model` names an ONNX file rather than a zoo model.
pub fn is_onnx(model: &str) -> bool {
    Path::new(model)
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("onnx"))
}

/// Loads and decodes an ONNX file.
pub fn load(path: &Path) -> CliResult<OnnxModel> {
    if !path.is_file() {
        return Err(CliError::Failed(format!(
            "ONNX model '{}' does not exist or is not a file",
            path.display()
        )));
    }
    OnnxModel::load(path).map_err(|e| CliError::Failed(e.to_string()))
}

/// Refuses the zoo-only flags for an ONNX model: its weights and dtypes are in the file.
pub fn check_model_args(path: &Path, args: &ModelArgs) -> CliResult<()> {
    if let Some(w) = &args.weights {
        return Err(CliError::Failed(format!(
            "--weights {} applies to zoo models only; {} holds its own weights",
            w.display(),
            path.display()
        )));
    }
    if args.dtype != FloatDType::F32 {
        return Err(CliError::Failed(format!(
            "--dtype {} applies to zoo models only; {} runs in the dtypes it declares",
            args.dtype.dtype(),
            path.display()
        )));
    }
    Ok(())
}

/// Element count and bytes of the initializers (the model's parameters). Element types kiln
/// cannot hold count their raw data's bytes.
pub fn param_counts(model: &OnnxModel) -> (usize, usize) {
    let Some(g) = &model.proto.graph else {
        return (0, 0);
    };
    g.initializer
        .iter()
        .fold((0usize, 0usize), |(count, bytes), t| {
            let n = t
                .dims
                .iter()
                .try_fold(1usize, |n, &d| n.checked_mul(usize::try_from(d).ok()?))
                .unwrap_or(0);
            let size = kiln_onnx::tensor::dtype_from_onnx(t.data_type())
                .map(|d| n.saturating_mul(d.size_of()))
                .unwrap_or_else(|_| t.raw_data.as_ref().map_or(0, Vec::len));
            (count.saturating_add(n), bytes.saturating_add(size))
        })
}

/// A model ready to run: imported for its prepared inputs.
pub struct Ready {
    pub model: OnnxModel,
    pub prepared: Prepared,
    pub imported: Imported,
    /// The inputs in the imported graph's order.
    pub bound: Vec<HostTensor>,
    /// Seconds to load, prepare the inputs and import.
    pub setup_s: f64,
}

impl Ready {
    /// Kernels per forward pass: the interpreter runs one per op node.
    pub fn kernels(&self) -> u64 {
        self.imported.graph.compute_nodes() as u64
    }
}

/// Loads `path`, prepares its inputs and imports it for them.
pub fn prepare(path: &Path, req: &InputRequest) -> CliResult<Ready> {
    let start = Instant::now();
    let model = load(path)?;
    let prepared = onnx_inputs::prepare(&model, req)?;
    let (imported, bound) = guarded("importing the model", || {
        kiln_onnx::import_for_inputs(&model, &prepared.by_name())
            .map_err(|e| import_error(path, &model, &e.to_string()))
    })?;
    Ok(Ready {
        model,
        prepared,
        imported,
        bound,
        setup_s: start.elapsed().as_secs_f64(),
    })
}

/// The import error with the model's name, and every unsupported op when more than the one
/// the import stopped at.
fn import_error(path: &Path, model: &OnnxModel, message: &str) -> CliError {
    let unsupported = model.unsupported_ops();
    let more = if unsupported.len() > 1 {
        format!(
            " (all unsupported ops of the model: {})",
            unsupported.join(", ")
        )
    } else {
        String::new()
    };
    CliError::Failed(format!("{}: {message}{more}", path.display()))
}

/// One forward pass of the imported graph on the reference interpreter.
pub fn forward(ready: &Ready) -> CliResult<Vec<HostTensor>> {
    guarded("running the model", || {
        kiln_cpu::run(&ready.imported.graph, &ready.bound)
            .map_err(|e| CliError::Failed(e.to_string()))
    })
}

/// Runs `f`, turning a panic inside kiln (a bug, never the user's fault) into an error that
/// says so, so the command still ends with an `error:` line and exit code 1.
fn guarded<T>(what: &str, f: impl FnOnce() -> CliResult<T>) -> CliResult<T> {
    std::panic::catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|p| {
        let msg = p
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_default();
        Err(CliError::Failed(format!(
            "internal error while {what} (a bug in kiln; please report it): {msg}"
        )))
    })
}

/// A name that is safe as a file name on every platform: characters other than ASCII letters,
/// digits, `-`, `_` and `.` become `_`; empty names and dot-only names become `output_INDEX`.
pub fn file_stem_for(name: &str, index: usize) -> String {
    let s: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') {
                c
            } else {
                '_'
            }
        })
        .collect();
    if s.chars().all(|c| c == '.') {
        format!("output_{index}")
    } else {
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn onnx_paths_are_told_from_zoo_names() {
        assert!(is_onnx("model.onnx") && is_onnx("dir/m.ONNX") && is_onnx("./a.b.onnx"));
        assert!(!is_onnx("resnet18") && !is_onnx("onnx") && !is_onnx("model.onnx.bak"));
    }

    #[test]
    fn output_names_are_sanitised_for_the_filesystem() {
        assert_eq!(file_stem_for("logits", 0), "logits");
        assert_eq!(file_stem_for("out/1:0", 0), "out_1_0");
        assert_eq!(file_stem_for("../../etc/passwd", 0), ".._.._etc_passwd");
        assert_eq!(file_stem_for("..", 3), "output_3");
        assert_eq!(file_stem_for("", 2), "output_2");
        assert_eq!(file_stem_for("naïve name", 0), "na_ve_name");
    }

    #[test]
    fn a_panic_becomes_an_error() {
        let r: CliResult<()> = guarded("testing", || panic!("boom"));
        let e = r.unwrap_err().to_string();
        assert!(
            e.contains("internal error while testing") && e.contains("boom"),
            "{e}"
        );
    }
}
