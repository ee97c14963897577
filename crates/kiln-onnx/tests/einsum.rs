//! Einsum converter on tiny models built here, checked against a naive sum over all label
//! assignments: ellipsis broadcasting, diagonals, implicit output, three operands, full
//! contraction, integer dtype, and refused equations.

use kiln_ir::{DType, HostTensor};
use kiln_onnx::builder::{attr_string, graph, model, node, tensor_info, tensor_info_fixed};
use kiln_onnx::{OnnxModel, import_for_inputs};
use std::collections::HashMap;

fn einsum_model(eq: &str, shapes: &[Vec<usize>], dtype: DType) -> OnnxModel {
    let names: Vec<String> = (0..shapes.len()).map(|i| format!("x{i}")).collect();
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let n = node("Einsum", &refs, &["y"], vec![attr_string("equation", eq)]);
    let inputs = names
        .iter()
        .zip(shapes)
        .map(|(n, s)| tensor_info_fixed(n, dtype, s))
        .collect();
    model(
        graph(vec![n], inputs, vec![tensor_info("y", dtype, &[])], &[]),
        12,
    )
}

fn run(eq: &str, xs: &[HostTensor]) -> kiln_ir::Result<HostTensor> {
    let shapes: Vec<Vec<usize>> = xs.iter().map(|x| x.shape().to_vec()).collect();
    let m = einsum_model(eq, &shapes, xs[0].dtype());
    let map: HashMap<String, HostTensor> = xs
        .iter()
        .enumerate()
        .map(|(i, x)| (format!("x{i}"), x.clone()))
        .collect();
    let (imp, bound) =
        import_for_inputs(&m, &map).map_err(|e| kiln_ir::Error::Value(e.to_string()))?;
    Ok(kiln_cpu::run(&imp.graph, &bound)?.remove(0))
}

/// Naive einsum over letter-only terms (explicit output): loops over every assignment.
fn naive(eq: &str, xs: &[(Vec<f64>, Vec<usize>)]) -> (Vec<f64>, Vec<usize>) {
    let (lhs, rhs) = eq.split_once("->").unwrap();
    let terms: Vec<Vec<char>> = lhs.split(',').map(|t| t.chars().collect()).collect();
    let out: Vec<char> = rhs.chars().collect();
    let mut size: HashMap<char, usize> = HashMap::new();
    for (t, (_, s)) in terms.iter().zip(xs) {
        for (c, &d) in t.iter().zip(s) {
            size.insert(*c, d);
        }
    }
    let mut all: Vec<char> = size.keys().copied().collect();
    all.sort_unstable();
    let out_shape: Vec<usize> = out.iter().map(|c| size[c]).collect();
    let mut res = vec![0.0; out_shape.iter().product()];
    let total: usize = all.iter().map(|c| size[c]).product();
    for mut flat in 0..total {
        let mut val: HashMap<char, usize> = HashMap::new();
        for c in all.iter().rev() {
            val.insert(*c, flat % size[c]);
            flat /= size[c];
        }
        let index =
            |t: &[char], s: &[usize]| t.iter().zip(s).fold(0, |acc, (c, &d)| acc * d + val[c]);
        let prod: f64 = terms
            .iter()
            .zip(xs)
            .map(|(t, (v, s))| v[index(t, s)])
            .product();
        res[index(&out, &out_shape)] += prod;
    }
    (res, out_shape)
}

fn data(shape: &[usize], k: f64) -> (Vec<f64>, Vec<usize>) {
    let n: usize = shape.iter().product();
    (
        (0..n).map(|i| ((i as f64 + 1.0) * k).sin()).collect(),
        shape.to_vec(),
    )
}

fn f32_tensor(d: &(Vec<f64>, Vec<usize>)) -> HostTensor {
    HostTensor::from_vec(d.0.iter().map(|&x| x as f32).collect::<Vec<f32>>(), &d.1).unwrap()
}

fn check(eq: &str, naive_eq: &str, inputs: &[(Vec<f64>, Vec<usize>)]) {
    let xs: Vec<HostTensor> = inputs.iter().map(f32_tensor).collect();
    // Round inputs to f32 for the reference too.
    let rounded: Vec<(Vec<f64>, Vec<usize>)> = inputs
        .iter()
        .map(|(v, s)| (v.iter().map(|&x| x as f32 as f64).collect(), s.clone()))
        .collect();
    let got = run(eq, &xs).unwrap_or_else(|e| panic!("{eq}: {e}"));
    let (want, shape) = naive(naive_eq, &rounded);
    assert_eq!(got.shape(), shape.as_slice(), "{eq}");
    for (i, (a, b)) in got.to_f64_vec().iter().zip(&want).enumerate() {
        assert!(
            (a - b).abs() <= 1e-4 * (1.0 + b.abs()),
            "{eq} element {i}: got {a}, want {b}"
        );
    }
}

#[test]
fn contractions_match_naive() {
    check(
        "bij,bjk->bik",
        "bij,bjk->bik",
        &[data(&[2, 3, 4], 0.3), data(&[2, 4, 5], 0.7)],
    );
    check(
        "ij,jk,kl->li",
        "ij,jk,kl->li",
        &[data(&[2, 3], 0.3), data(&[3, 4], 0.5), data(&[4, 2], 0.9)],
    );
    check(
        "ij,ij->",
        "ij,ij->",
        &[data(&[3, 4], 0.3), data(&[3, 4], 0.8)],
    );
    // Implicit output: labels used once, alphabetically ("ba,ac" → "bc").
    check(
        "ba,ac",
        "ba,ac->bc",
        &[data(&[3, 2], 0.3), data(&[2, 4], 0.6)],
    );
    // A label summed within one operand only, and an outer product.
    check(
        "ij,k->ik",
        "ij,k->ik",
        &[data(&[2, 3], 0.4), data(&[5], 0.2)],
    );
}

#[test]
fn ellipsis_broadcasts_and_diagonals_match_naive() {
    // "...ij,jk->...ik" with batch dims [2, 3]: same as "abij,jk->abik".
    check(
        "...ij,jk->...ik",
        "abij,jk->abik",
        &[data(&[2, 3, 2, 4], 0.3), data(&[4, 2], 0.7)],
    );
    // Implicit output with ellipsis: the ellipsis dims come first.
    check(
        "...i,i",
        "abi,i->ab",
        &[data(&[2, 3, 4], 0.3), data(&[4], 0.7)],
    );
    // Diagonal of a batch of matrices, and a trace.
    let x = data(&[3, 4, 4], 0.37);
    let got = run("...ii->...i", &[f32_tensor(&x)]).unwrap();
    let want: Vec<f64> = (0..3)
        .flat_map(|b| (0..4).map(move |i| (b, i)))
        .map(|(b, i)| x.0[(b * 4 + i) * 4 + i] as f32 as f64)
        .collect();
    assert_eq!(got.shape(), &[3, 4]);
    for (a, b) in got.to_f64_vec().iter().zip(&want) {
        assert!((a - b).abs() < 1e-6);
    }
    let got = run("ii", &[f32_tensor(&data(&[4, 4], 0.37))]).unwrap();
    let trace: f64 = (0..4)
        .map(|i| data(&[4, 4], 0.37).0[i * 5] as f32 as f64)
        .sum();
    assert!((got.to_f64_vec()[0] - trace).abs() < 1e-5);
}

#[test]
fn integer_einsum_is_exact_and_bad_equations_are_refused() {
    let a = HostTensor::from_vec(vec![1i64, 2, 3, 4, 5, 6], &[2, 3]).unwrap();
    let b = HostTensor::from_vec(vec![7i64, 8, 9], &[3]).unwrap();
    let got = run("ij,j->i", &[a.clone(), b]).unwrap();
    assert_eq!(
        got.to_vec::<i64>().unwrap(),
        vec![7 + 16 + 27, 28 + 40 + 54]
    );
    assert!(run("ij->k", &[a.clone()]).is_err());
    assert!(run("ij,jk->ik", &[a.clone()]).is_err());
    assert!(run("i1->i", &[a]).is_err());
}
