//! `kiln run`: one eager forward pass of a zoo model, with a checksum of every output so that
//! runs can be compared across machines, dtypes and (later) compiled modes.

use std::time::Instant;

use kiln::Tensor;

use crate::args::RunArgs;
use crate::cmd_run_onnx;
use crate::exit::{CliError, CliResult};
use crate::model_setup;
use crate::onnx_setup;

/// Sum and sum of absolute values of a tensor's elements, in f64.
fn checksum(t: &Tensor) -> CliResult<(f64, f64)> {
    let values = t.to_f64_vec()?;
    Ok(values.iter().fold((0.0, 0.0), |(s, a), &x| (s + x, a + x.abs())))
}

/// Runs the command: ONNX files go to [`cmd_run_onnx`], names to the zoo.
pub fn run(args: &RunArgs) -> CliResult<()> {
    if onnx_setup::is_onnx(&args.model) {
        return cmd_run_onnx::run(args);
    }
    if !args.inputs.is_empty() || !args.dim_args.dims.is_empty() || args.out.is_some() {
        return Err(CliError::Failed(format!(
            "--input, --dim and --out apply to .onnx models only; '{}' is a zoo model name",
            args.model
        )));
    }
    let threads = model_setup::init_threads(args.model_args.threads)?;
    let (model, build_s) = model_setup::build(&args.model, &args.model_args)?;
    let inputs = model.example_inputs(args.model_args.seed)?;
    println!(
        "{}: {} parameters, dtype {}, {threads} threads, built in {build_s:.3} s",
        model.name(),
        model.num_parameters(),
        args.model_args.dtype.dtype()
    );
    for (spec, t) in model.inputs().iter().zip(&inputs) {
        println!("input  {}: shape {:?} dtype {}", spec.name, t.shape(), t.dtype());
    }
    let start = Instant::now();
    let outputs = model.forward(&inputs)?;
    let forward_s = start.elapsed().as_secs_f64();
    for (i, t) in outputs.iter().enumerate() {
        let (sum, abs_sum) = checksum(t)?;
        println!(
            "output {i}: shape {:?} dtype {} sum {sum:.6e} abs_sum {abs_sum:.6e}",
            t.shape(),
            t.dtype()
        );
    }
    println!("forward: {:.3} ms (eager, cpu)", forward_s * 1e3);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checksum_sums_signed_and_absolute_values() {
        let t = Tensor::from_vec(vec![1.5f32, -2.0, 0.5, -0.25], &[2, 2]).unwrap();
        assert_eq!(checksum(&t).unwrap(), (-0.25, 4.25));
    }

    #[test]
    fn checksum_of_integers_and_empty() {
        let t = Tensor::from_vec(vec![3i64, -4], &[2]).unwrap();
        assert_eq!(checksum(&t).unwrap(), (-1.0, 7.0));
        let e = Tensor::zeros(&[0, 3], kiln::DType::F32);
        assert_eq!(checksum(&e).unwrap(), (0.0, 0.0));
    }

    #[test]
    fn checksum_propagates_nan() {
        let t = Tensor::from_vec(vec![f32::NAN, 1.0], &[2]).unwrap();
        let (s, a) = checksum(&t).unwrap();
        assert!(s.is_nan() && a.is_nan());
    }
}
