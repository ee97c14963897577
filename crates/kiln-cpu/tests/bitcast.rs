//! `Op::BitCast` against a reference built from each element's bytes (`to_le_bytes` /
//! `from_le_bytes`): every equal-sized pair of dtypes, special floats (NaN payloads, -0, Inf,
//! subnormals), non-contiguous inputs, scalars and empty tensors, and refused pairs.

use kiln_cpu::eval;
use kiln_ir::half::{bf16, f16};
use kiln_ir::{DType, HostTensor, Op};

/// The little-endian bytes of every element of `t`, row-major.
fn bytes(t: &HostTensor) -> Vec<Vec<u8>> {
    macro_rules! each {
        ($T:ty) => {
            t.to_vec::<$T>()
                .unwrap()
                .into_iter()
                .map(|v| v.to_le_bytes().to_vec())
                .collect()
        };
    }
    match t.dtype() {
        DType::F32 => each!(f32),
        DType::F16 => each!(f16),
        DType::BF16 => each!(bf16),
        DType::F64 => each!(f64),
        DType::I64 => each!(i64),
        DType::I32 => each!(i32),
        DType::I16 => each!(i16),
        DType::I8 => each!(i8),
        DType::U64 => each!(u64),
        DType::U32 => each!(u32),
        DType::U16 => each!(u16),
        DType::U8 => each!(u8),
        DType::Bool => t
            .to_vec::<bool>()
            .unwrap()
            .into_iter()
            .map(|v| vec![v as u8])
            .collect(),
    }
}

/// Test values of `d`, covering the sign bit and special floats, shape `[2, 3]`.
fn values(d: DType) -> HostTensor {
    let t = match d {
        DType::F32 => HostTensor::from_vec(
            vec![
                1.0f32,
                -0.0,
                f32::INFINITY,
                f32::from_bits(0x7fc0_1234),
                f32::from_bits(1),
                -2.5,
            ],
            &[2, 3],
        ),
        DType::F64 => HostTensor::from_vec(
            vec![
                1.0f64,
                -0.0,
                f64::NEG_INFINITY,
                f64::from_bits(0x7ff8_0000_0000_0042),
                f64::from_bits(1),
                -2.5,
            ],
            &[2, 3],
        ),
        DType::F16 => HostTensor::from_vec(
            [0x3c00u16, 0x8000, 0x7c00, 0x7e01, 0x0001, 0xc100]
                .map(f16::from_bits)
                .to_vec(),
            &[2, 3],
        ),
        DType::BF16 => HostTensor::from_vec(
            [0x3f80u16, 0x8000, 0x7f80, 0x7fc1, 0x0001, 0xc020]
                .map(bf16::from_bits)
                .to_vec(),
            &[2, 3],
        ),
        DType::I64 => HostTensor::from_vec(
            vec![0i64, -1, i64::MIN, i64::MAX, 4607182418800017408, -7],
            &[2, 3],
        ),
        DType::I32 => {
            HostTensor::from_vec(vec![0i32, -1, i32::MIN, i32::MAX, 1065353216, -7], &[2, 3])
        }
        DType::I16 => HostTensor::from_vec(vec![0i16, -1, i16::MIN, i16::MAX, 15360, -7], &[2, 3]),
        DType::I8 => HostTensor::from_vec(vec![0i8, -1, i8::MIN, i8::MAX, 1, -7], &[2, 3]),
        DType::U64 => HostTensor::from_vec(vec![0u64, 1, u64::MAX, 1 << 63, 12345, 7], &[2, 3]),
        DType::U32 => HostTensor::from_vec(vec![0u32, 1, u32::MAX, 1 << 31, 12345, 7], &[2, 3]),
        DType::U16 => HostTensor::from_vec(vec![0u16, 1, u16::MAX, 1 << 15, 12345, 7], &[2, 3]),
        DType::U8 => HostTensor::from_vec(vec![0u8, 1, 255, 128, 45, 7], &[2, 3]),
        DType::Bool => HostTensor::from_vec(vec![true, false, true, true, false, false], &[2, 3]),
    };
    t.unwrap()
}

#[test]
fn every_equal_sized_pair_keeps_the_bytes() {
    let mut pairs = 0;
    for from in DType::ALL {
        let x = values(from);
        // A transposed view, so the kernel must walk strides.
        let xt = eval(&Op::Permute(vec![1, 0]), &[&x]).unwrap();
        for to in DType::ALL {
            if to == DType::Bool || from.size_of() != to.size_of() {
                continue;
            }
            for input in [&x, &xt] {
                let y = eval(&Op::BitCast(to), &[input]).unwrap();
                assert_eq!(y.dtype(), to);
                assert_eq!(y.shape(), input.shape());
                assert_eq!(bytes(&y), bytes(input), "{from} -> {to}");
            }
            pairs += 1;
        }
    }
    // 8-byte: 3x3, 4-byte: 3x3, 2-byte: 4x4, 1-byte: 3 sources (i8, u8, bool) x 2 targets.
    assert_eq!(pairs, 9 + 9 + 16 + 6);
}

#[test]
fn scalars_and_empty_tensors() {
    let s = HostTensor::scalar(1.0f32);
    let y = eval(&Op::BitCast(DType::I32), &[&s]).unwrap();
    assert_eq!(y.shape(), &[] as &[usize]);
    assert_eq!(y.to_vec::<i32>().unwrap(), vec![0x3f80_0000]);
    let e = HostTensor::from_vec(Vec::<u16>::new(), &[0, 3]).unwrap();
    let y = eval(&Op::BitCast(DType::F16), &[&e]).unwrap();
    assert_eq!(y.shape(), &[0, 3]);
}

#[test]
fn refuses_other_sizes_and_bool_results() {
    let x = values(DType::F32);
    assert!(eval(&Op::BitCast(DType::I64), &[&x]).is_err());
    assert!(eval(&Op::BitCast(DType::F16), &[&x]).is_err());
    let b = values(DType::U8);
    assert!(eval(&Op::BitCast(DType::Bool), &[&b]).is_err());
}
