//! `kiln run MODEL.onnx`: one forward pass of an ONNX file on the reference interpreter, with
//! inputs from `.npy` files or seeded random values, a checksum of every output and, with
//! `--out DIR`, each output written as `DIR/<name>.npy`.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::time::Instant;

use kiln_ir::HostTensor;

use crate::args::RunArgs;
use crate::exit::{CliError, CliResult};
use crate::model_setup;
use crate::npy;
use crate::onnx_inputs::InputRequest;
use crate::onnx_setup;

/// Sum and sum of absolute values of a tensor's elements, in f64.
pub fn checksum(t: &HostTensor) -> (f64, f64) {
    t.to_f64_vec()
        .iter()
        .fold((0.0, 0.0), |(s, a), &x| (s + x, a + x.abs()))
}

/// Runs the command for an ONNX file.
pub fn run(args: &RunArgs) -> CliResult<()> {
    let path = Path::new(&args.model);
    let m = &args.model_args;
    onnx_setup::check_model_args(path, m)?;
    let threads = model_setup::init_threads(m.threads)?;
    let to_usize = |flag: &str, v: u64| {
        usize::try_from(v).map_err(|_| CliError::Failed(format!("--{flag} {v} is too large")))
    };
    let req = InputRequest {
        files: args.inputs.clone(),
        dims: args.dim_args.dims.clone(),
        batch: to_usize("batch", m.batch)?,
        seq: to_usize("seq", m.seq)?,
        seed: m.seed,
    };
    let ready = onnx_setup::prepare(path, &req)?;
    let (params, param_bytes) = onnx_setup::param_counts(&ready.model);
    println!(
        "{}: {params} parameters ({param_bytes} bytes), {threads} threads, loaded and imported in {:.3} s",
        path.display(),
        ready.setup_s
    );
    println!("dims: {}", ready.prepared.dims_report());
    for v in &ready.prepared.inputs {
        let from = match &v.file {
            Some(f) => format!("from {}", f.display()),
            None => format!("random, seed {}", m.seed),
        };
        println!(
            "input  {}: shape {:?} dtype {} ({from})",
            v.name,
            v.tensor.shape(),
            v.tensor.dtype()
        );
    }
    let start = Instant::now();
    let outputs = onnx_setup::forward(&ready)?;
    let forward_s = start.elapsed().as_secs_f64();
    for (name, t) in ready.imported.output_names.iter().zip(&outputs) {
        let (sum, abs_sum) = checksum(t);
        println!(
            "output {name}: shape {:?} dtype {} sum {sum:.6e} abs_sum {abs_sum:.6e}",
            t.shape(),
            t.dtype()
        );
    }
    println!("forward: {:.3} ms (eager, cpu)", forward_s * 1e3);
    if let Some(dir) = &args.out {
        for written in write_outputs(dir, &ready.imported.output_names, &outputs)? {
            println!("wrote {}", written.display());
        }
    }
    Ok(())
}

/// Writes each output to `dir/<sanitised name>.npy`; names that sanitise to the same file get
/// their output index appended, so no output overwrites another.
fn write_outputs(dir: &Path, names: &[String], outputs: &[HostTensor]) -> CliResult<Vec<PathBuf>> {
    std::fs::create_dir_all(dir).map_err(|e| {
        CliError::Failed(format!(
            "--out {}: cannot create the folder: {e}",
            dir.display()
        ))
    })?;
    let mut used = HashSet::new();
    let mut written = Vec::new();
    for (i, (name, t)) in names.iter().zip(outputs).enumerate() {
        let mut stem = onnx_setup::file_stem_for(name, i);
        if !used.insert(stem.to_ascii_lowercase()) {
            stem = format!("{stem}_{i}");
            used.insert(stem.to_ascii_lowercase());
        }
        let path = dir.join(format!("{stem}.npy"));
        npy::write(&path, t)
            .map_err(|e| CliError::Failed(format!("writing output '{name}': {e}")))?;
        written.push(path);
    }
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn colliding_output_names_get_distinct_files() {
        let dir = std::env::temp_dir().join(format!("kiln-run-onnx-unit-{}", std::process::id()));
        let t = HostTensor::from_vec(vec![1i64, 2], &[2]).unwrap();
        let names = ["a/b".to_string(), "a:b".to_string(), "".to_string()];
        let paths = write_outputs(&dir, &names, &[t.clone(), t.clone(), t]).unwrap();
        let files: Vec<String> = paths
            .iter()
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        assert_eq!(files, ["a_b.npy", "a_b_1.npy", "output_2.npy"]);
        for p in &paths {
            assert_eq!(npy::read(p).unwrap().to_vec::<i64>().unwrap(), [1, 2]);
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn checksum_of_host_tensors() {
        let t = HostTensor::from_vec(vec![true, false, true], &[3]).unwrap();
        assert_eq!(checksum(&t), (2.0, 2.0));
        let t = HostTensor::from_vec(vec![-1.5f64, 0.5], &[2]).unwrap();
        assert_eq!(checksum(&t), (-1.0, 2.0));
    }
}
