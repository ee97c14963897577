//! Gather (ONNX semantics, embedding lookups) against a naive reference.

mod common_kernels;

use common_kernels::*;
use kiln_cpu::eval;
use kiln_ir::{DType, Error, HostTensor, Op};

fn idx64(v: &[i64], shape: &[usize]) -> HostTensor {
    HostTensor::from_vec(v.to_vec(), shape).unwrap()
}

fn idx32(v: &[i64], shape: &[usize]) -> HostTensor {
    HostTensor::from_vec(v.iter().map(|&i| i as i32).collect::<Vec<_>>(), shape).unwrap()
}

/// `out[i.., j.., k..] = data[i.., indices[j..], k..]`, negative indices wrapped once.
fn naive_gather(data: &HostTensor, indices: &[i64], ishape: &[usize], axis: usize) -> (Vec<usize>, Vec<f64>) {
    let ds = data.shape();
    let v = data.to_f64_vec();
    let mut shape = ds[..axis].to_vec();
    shape.extend_from_slice(ishape);
    shape.extend_from_slice(&ds[axis + 1..]);
    let vals = (0..shape.iter().product())
        .map(|i| {
            let o = unravel(i, &shape);
            let j = ravel(&o[axis..axis + ishape.len()], ishape);
            let mut k = indices[j];
            if k < 0 {
                k += ds[axis] as i64;
            }
            let mut src = o[..axis].to_vec();
            src.push(k as usize);
            src.extend_from_slice(&o[axis + ishape.len()..]);
            v[ravel(&src, ds)]
        })
        .collect();
    (shape, vals)
}

#[test]
fn embedding_lookup_copies_whole_rows() {
    let table = tensor(DType::F32, &(0..15).map(|i| i as f64).collect::<Vec<_>>(), &[5, 3]);
    let ids = idx64(&[2, 4, 0, -1], &[2, 2]);
    let out = eval(&Op::Gather { axis: 0 }, &[&table, &ids]).unwrap();
    assert_eq!(out.shape(), &[2, 2, 3]);
    assert_eq!(out.to_f64_vec(), vec![6., 7., 8., 12., 13., 14., 0., 1., 2., 12., 13., 14.]);
}

#[test]
fn gather_matches_naive_in_every_dtype_axis_and_layout() {
    let shape = [3, 4, 5];
    let indices = [3i64, -1, 0, 1, -3, 2];
    for dtype in DType::ALL {
        let data = ramp_tensor(dtype, &shape);
        for (axis, &len) in shape.iter().enumerate() {
            let n = len as i64;
            let ids: Vec<i64> = indices.iter().map(|&i| i.clamp(-n, n - 1)).collect();
            let (want_shape, want) = naive_gather(&data, &ids, &[2, 3], axis);
            for d in [data.clone(), transposed(&data), strided(&data), reversed(&data)] {
                for ix in [idx64(&ids, &[2, 3]), idx32(&ids, &[2, 3]), transposed(&idx64(&ids, &[2, 3])), strided(&idx32(&ids, &[2, 3]))] {
                    let (ws, w) = (&want_shape, &want);
                    let out = eval(&Op::Gather { axis }, &[&d, &ix]).unwrap();
                    assert_eq!(out.shape(), ws.as_slice(), "{dtype} axis {axis}");
                    assert_eq!(out.dtype(), dtype);
                    assert_eq!(&out.to_f64_vec(), w, "{dtype} axis {axis}");
                }
            }
        }
    }
}

#[test]
fn gather_from_expanded_data_and_with_scalar_or_empty_indices() {
    let row = ramp_tensor(DType::I64, &[1, 4]);
    let ex = eval(&Op::Expand(kiln_ir::Shape::fixed(&[3, 4])), &[&row]).unwrap();
    let out = eval(&Op::Gather { axis: 1 }, &[&ex, &idx64(&[3, 0], &[2])]).unwrap();
    let r = row.to_f64_vec();
    assert_eq!(out.to_f64_vec(), vec![r[3], r[0], r[3], r[0], r[3], r[0]]);
    // A rank-0 index removes the axis.
    let data = ramp_tensor(DType::F64, &[3, 2]);
    let out = eval(&Op::Gather { axis: 0 }, &[&data, &HostTensor::scalar(-2i64)]).unwrap();
    assert_eq!(out.shape(), &[2]);
    assert_eq!(out.to_f64_vec(), data.to_f64_vec()[2..4].to_vec());
    // No indices: an empty result, even from an empty axis.
    let out = eval(&Op::Gather { axis: 1 }, &[&data, &idx64(&[], &[0])]).unwrap();
    assert_eq!(out.shape(), &[3, 0]);
    let empty = ramp_tensor(DType::F32, &[0, 2]);
    let out = eval(&Op::Gather { axis: 0 }, &[&empty, &idx64(&[], &[0, 4])]).unwrap();
    assert_eq!(out.shape(), &[0, 4, 2]);
    // Size-1 dims everywhere.
    let one = tensor(DType::U8, &[7.0], &[1, 1]);
    let out = eval(&Op::Gather { axis: 1 }, &[&one, &idx32(&[0, -1, 0], &[3, 1])]).unwrap();
    assert_eq!(out.shape(), &[1, 3, 1]);
    assert_eq!(out.to_f64_vec(), vec![7.0; 3]);
}

#[test]
fn out_of_range_indices_are_value_errors_naming_index_and_size() {
    let data = ramp_tensor(DType::F32, &[4, 3]);
    for (ix, bad) in [(idx64(&[0, 4], &[2]), "4"), (idx64(&[-5], &[1]), "-5"), (idx32(&[1, 2, 3, 9], &[2, 2]), "9"), (idx64(&[i64::MIN], &[1]), &i64::MIN.to_string())] {
        let err = eval(&Op::Gather { axis: 0 }, &[&data, &ix]).unwrap_err();
        let Error::Value(msg) = &err else { panic!("not a value error: {err}") };
        assert!(msg.contains(&format!("index {bad} ")) && msg.contains("size 4"), "{msg}");
    }
    let err = eval(&Op::Gather { axis: 1 }, &[&data, &idx64(&[3], &[1])]).unwrap_err();
    assert!(matches!(&err, Error::Value(m) if m.contains("size 3")), "{err}");
    // Any index into an empty axis is out of range.
    let empty = ramp_tensor(DType::F32, &[0, 3]);
    assert!(matches!(eval(&Op::Gather { axis: 0 }, &[&empty, &idx64(&[0], &[1])]), Err(Error::Value(_))));
    // Float indices are rejected by inference.
    let f = tensor(DType::F32, &[0.0], &[1]);
    assert!(matches!(eval(&Op::Gather { axis: 0 }, &[&data, &f]), Err(Error::DType(_))));
}

#[test]
fn large_gathers_take_the_parallel_path_correctly() {
    let (vocab, dim) = (1000, 64);
    let vals: Vec<f64> = (0..vocab * dim).map(|i| i as f64).collect();
    let table = tensor(DType::F32, &vals, &[vocab, dim]);
    let ids: Vec<i64> = (0..900).map(|i| (i * 37 % vocab) as i64 - if i % 2 == 0 { 0 } else { vocab as i64 }).collect();
    let ix = idx64(&ids, &[30, 30]);
    let (shape, want) = naive_gather(&table, &ids, &[30, 30], 0);
    let out = eval(&Op::Gather { axis: 0 }, &[&table, &ix]).unwrap();
    assert_eq!(out.shape(), shape.as_slice());
    assert_eq!(out.to_f64_vec(), want);
    // The same through a non-contiguous table (rows are strided, not whole blocks).
    let t = transposed(&table);
    let out = eval(&Op::Gather { axis: 0 }, &[&t, &ix]).unwrap();
    assert_eq!(out.to_f64_vec(), want);
}
