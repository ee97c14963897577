//! EncodeLowp / DecodeLowp against an independent reference: each format's value table is
//! written here from its definition (sign, exponent, mantissa, bias, special codes), not
//! from the kernel's codec.

use kiln_cpu::eval;
use kiln_ir::half::{bf16, f16};
use kiln_ir::{DType, HostTensor, LowpType, Op};

/// The value of `code` in a float format, from the format's definition.
fn reference_value(t: LowpType, code: u8) -> f64 {
    let p2 = |e: i32| 2f64.powi(e);
    let sign = |neg: bool, v: f64| if neg { -v } else { v };
    match t {
        LowpType::F8E4M3FN => {
            let (s, e, m) = (code >> 7, ((code >> 3) & 15) as i32, (code & 7) as f64);
            if e == 15 && m == 7.0 {
                return f64::NAN;
            }
            sign(
                s == 1,
                if e == 0 {
                    m / 8.0 * p2(-6)
                } else {
                    (1.0 + m / 8.0) * p2(e - 7)
                },
            )
        }
        LowpType::F8E4M3FNUZ => {
            if code == 0x80 {
                return f64::NAN;
            }
            let (s, e, m) = (code >> 7, ((code >> 3) & 15) as i32, (code & 7) as f64);
            sign(
                s == 1,
                if e == 0 {
                    m / 8.0 * p2(-7)
                } else {
                    (1.0 + m / 8.0) * p2(e - 8)
                },
            )
        }
        LowpType::F8E5M2 => {
            let (s, e, m) = (code >> 7, ((code >> 2) & 31) as i32, (code & 3) as f64);
            if e == 31 {
                return if m == 0.0 {
                    sign(s == 1, f64::INFINITY)
                } else {
                    f64::NAN
                };
            }
            sign(
                s == 1,
                if e == 0 {
                    m / 4.0 * p2(-14)
                } else {
                    (1.0 + m / 4.0) * p2(e - 15)
                },
            )
        }
        LowpType::F8E5M2FNUZ => {
            if code == 0x80 {
                return f64::NAN;
            }
            let (s, e, m) = (code >> 7, ((code >> 2) & 31) as i32, (code & 3) as f64);
            sign(
                s == 1,
                if e == 0 {
                    m / 4.0 * p2(-15)
                } else {
                    (1.0 + m / 4.0) * p2(e - 16)
                },
            )
        }
        LowpType::F8E8M0 => {
            if code == 0xFF {
                f64::NAN
            } else {
                p2(code as i32 - 127)
            }
        }
        LowpType::F4E2M1 => {
            let table = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0];
            sign(code & 8 != 0, table[(code & 7) as usize])
        }
        _ => unreachable!("not a float format"),
    }
}

const FLOATS: [LowpType; 6] = [
    LowpType::F8E4M3FN,
    LowpType::F8E4M3FNUZ,
    LowpType::F8E5M2,
    LowpType::F8E5M2FNUZ,
    LowpType::F8E8M0,
    LowpType::F4E2M1,
];

fn ncodes(t: LowpType) -> u16 {
    1 << t.bits()
}

fn decode_codes(t: LowpType, codes: &[u8]) -> Vec<f32> {
    let x = HostTensor::from_vec(codes.to_vec(), &[codes.len()]).unwrap();
    eval(&Op::DecodeLowp { from: t }, &[&x])
        .unwrap()
        .to_vec::<f32>()
        .unwrap()
}

fn encode_f64(t: LowpType, xs: &[f64], saturate: bool) -> Vec<i64> {
    let x = HostTensor::from_vec(xs.to_vec(), &[xs.len()]).unwrap();
    let y = eval(&Op::EncodeLowp { to: t, saturate }, &[&x]).unwrap();
    assert_eq!(y.dtype(), t.pattern_dtype());
    y.to_f64_vec().into_iter().map(|v| v as i64).collect()
}

fn same(a: f64, b: f64) -> bool {
    (a.is_nan() && b.is_nan()) || (a == b && a.is_sign_negative() == b.is_sign_negative())
}

#[test]
fn every_float_code_decodes_to_its_defined_value() {
    for t in FLOATS {
        let codes: Vec<u8> = (0..ncodes(t)).map(|c| c as u8).collect();
        let got = decode_codes(t, &codes);
        for (&c, &g) in codes.iter().zip(&got) {
            let want = reference_value(t, c) as f32;
            assert!(
                same(g as f64, want as f64),
                "{} code {c:#04x}: got {g}, want {want}",
                t.name()
            );
        }
    }
    // Anchors from the ONNX/OCP spec tables.
    assert_eq!(
        decode_codes(LowpType::F8E4M3FN, &[0x7E, 0x01, 0xFE]),
        [448.0, 2f32.powi(-9), -448.0]
    );
    assert_eq!(
        decode_codes(LowpType::F8E4M3FNUZ, &[0x7F, 0x01]),
        [240.0, 2f32.powi(-10)]
    );
    assert_eq!(
        decode_codes(LowpType::F8E5M2, &[0x7B, 0x01, 0x7C, 0xFC]),
        [57344.0, 2f32.powi(-16), f32::INFINITY, f32::NEG_INFINITY]
    );
    assert_eq!(
        decode_codes(LowpType::F8E5M2FNUZ, &[0x7F, 0x01]),
        [57344.0, 2f32.powi(-17)]
    );
    assert_eq!(
        decode_codes(LowpType::F8E8M0, &[0, 127, 254]),
        [2f32.powi(-127), 1.0, 2f32.powi(127)]
    );
    assert!(
        decode_codes(LowpType::F8E4M3FN, &[0x7F, 0xFF])
            .iter()
            .all(|v| v.is_nan())
    );
    assert!(
        decode_codes(LowpType::F8E5M2, &[0x7D, 0x7E, 0x7F, 0xFF])
            .iter()
            .all(|v| v.is_nan())
    );
}

#[test]
fn integer_patterns_decode_to_their_values() {
    let i4: Vec<i8> = (-8..=7).collect();
    let x = HostTensor::from_vec(i4.clone(), &[16]).unwrap();
    let got = eval(&Op::DecodeLowp { from: LowpType::I4 }, &[&x])
        .unwrap()
        .to_vec::<f32>()
        .unwrap();
    assert_eq!(got, i4.iter().map(|&v| v as f32).collect::<Vec<_>>());
    let x = HostTensor::from_vec(vec![-2i8, -1, 0, 1], &[4]).unwrap();
    assert_eq!(
        eval(&Op::DecodeLowp { from: LowpType::I2 }, &[&x])
            .unwrap()
            .to_vec::<f32>()
            .unwrap(),
        [-2.0, -1.0, 0.0, 1.0]
    );
    assert_eq!(
        decode_codes(LowpType::U4, &(0..16).collect::<Vec<u8>>()),
        (0..16).map(|v| v as f32).collect::<Vec<_>>()
    );
    assert_eq!(
        decode_codes(LowpType::U2, &[0, 1, 2, 3]),
        [0.0, 1.0, 2.0, 3.0]
    );
    // A pattern of the wrong holding dtype is a type error, not a reinterpretation.
    let x = HostTensor::from_vec(vec![1u8], &[1]).unwrap();
    assert!(eval(&Op::DecodeLowp { from: LowpType::I4 }, &[&x]).is_err());
}

#[test]
fn encode_inverts_decode_for_every_code() {
    for t in FLOATS {
        let codes: Vec<u8> = (0..ncodes(t))
            .map(|c| c as u8)
            .filter(|&c| !reference_value(t, c).is_nan())
            .collect();
        let vals: Vec<f64> = codes.iter().map(|&c| reference_value(t, c)).collect();
        for saturate in [true, false] {
            let got = encode_f64(t, &vals, saturate);
            for ((&c, &g), &v) in codes.iter().zip(&got).zip(&vals) {
                if v.is_infinite() && saturate {
                    continue; // saturates to the max instead
                }
                assert_eq!(
                    g,
                    c as i64,
                    "{} value {v}: got {g:#04x}, want {c:#04x}",
                    t.name()
                );
            }
        }
    }
    for t in [LowpType::I4, LowpType::U4, LowpType::I2, LowpType::U2] {
        let (lo, hi) = match t {
            LowpType::I4 => (-8, 7),
            LowpType::U4 => (0, 15),
            LowpType::I2 => (-2, 1),
            _ => (0, 3),
        };
        let vals: Vec<f64> = (lo..=hi).map(|v| v as f64).collect();
        assert_eq!(
            encode_f64(t, &vals, true),
            (lo..=hi).collect::<Vec<i64>>(),
            "{}",
            t.name()
        );
    }
}

#[test]
fn rounding_is_to_nearest_with_ties_to_even() {
    for t in [
        LowpType::F8E4M3FN,
        LowpType::F8E4M3FNUZ,
        LowpType::F8E5M2,
        LowpType::F8E5M2FNUZ,
        LowpType::F4E2M1,
    ] {
        // Positive finite codes in increasing order of value.
        let mut pos: Vec<(f64, u8)> = (0..ncodes(t))
            .map(|c| (reference_value(t, c as u8), c as u8))
            .filter(|(v, _)| v.is_finite() && *v >= 0.0 && !(v == &0.0 && v.is_sign_negative()))
            .collect();
        pos.sort_by(|a, b| a.0.total_cmp(&b.0));
        pos.dedup_by(|a, b| a.0 == b.0);
        for w in pos.windows(2) {
            let ((a, ca), (b, cb)) = (w[0], w[1]);
            let mid = (a + b) / 2.0;
            let even = if ca % 2 == 0 { ca } else { cb };
            let step = (b - a) / 16.0;
            let got = encode_f64(t, &[mid, mid - step, mid + step, -mid], true);
            assert_eq!(
                got[0],
                even as i64,
                "{} tie {mid} between {a} and {b}",
                t.name()
            );
            assert_eq!(got[1], ca as i64, "{} below {mid}", t.name());
            assert_eq!(got[2], cb as i64, "{} above {mid}", t.name());
            let neg = reference_value(t, got[3] as u8);
            assert_eq!(neg, -reference_value(t, even), "{} tie -{mid}", t.name());
        }
    }
}

#[test]
fn overflow_infinity_nan_and_zero_follow_the_cast_tables() {
    let big = [1e6, -1e6, f64::INFINITY, f64::NEG_INFINITY];
    // saturate: the signed max everywhere.
    assert_eq!(
        encode_f64(LowpType::F8E4M3FN, &big, true),
        [0x7E, 0xFE, 0x7E, 0xFE]
    );
    assert_eq!(
        encode_f64(LowpType::F8E4M3FNUZ, &big, true),
        [0x7F, 0xFF, 0x7F, 0xFF]
    );
    assert_eq!(
        encode_f64(LowpType::F8E5M2, &big, true),
        [0x7B, 0xFB, 0x7B, 0xFB]
    );
    assert_eq!(
        encode_f64(LowpType::F8E5M2FNUZ, &big, true),
        [0x7F, 0xFF, 0x7F, 0xFF]
    );
    // no saturate: NaN, except E5M2 which has Inf.
    assert_eq!(
        encode_f64(LowpType::F8E4M3FN, &big, false),
        [0x7F, 0xFF, 0x7F, 0xFF]
    );
    assert_eq!(encode_f64(LowpType::F8E4M3FNUZ, &big, false), [0x80; 4]);
    assert_eq!(
        encode_f64(LowpType::F8E5M2, &big, false),
        [0x7C, 0xFC, 0x7C, 0xFC]
    );
    assert_eq!(encode_f64(LowpType::F8E5M2FNUZ, &big, false), [0x80; 4]);
    // Just above the max rounds back to it below the midpoint (449 → 448), past it overflows.
    assert_eq!(
        encode_f64(LowpType::F8E4M3FN, &[449.0, 464.0, 465.0], false),
        [0x7E, 0x7E, 0x7F]
    );
    assert_eq!(
        encode_f64(LowpType::F8E5M2, &[61439.0, 61440.0], false),
        [0x7B, 0x7C]
    );
    // Float4 has no special values: it always saturates, NaN → 0.
    assert_eq!(
        encode_f64(
            LowpType::F4E2M1,
            &[100.0, -100.0, f64::INFINITY, f64::NAN],
            false
        ),
        [7, 15, 7, 0]
    );
    // NaN and signed zero.
    for (t, nan) in [
        (LowpType::F8E4M3FN, 0x7F),
        (LowpType::F8E5M2, 0x7E),
        (LowpType::F8E4M3FNUZ, 0x80),
        (LowpType::F8E5M2FNUZ, 0x80),
    ] {
        let got = encode_f64(t, &[f64::NAN, 0.0, -0.0, 1e-30, -1e-30], true);
        assert_eq!(got[0], nan, "{}", t.name());
        let neg_zero = if matches!(t, LowpType::F8E4M3FNUZ | LowpType::F8E5M2FNUZ) {
            0
        } else {
            0x80
        };
        assert_eq!(&got[1..], [0, neg_zero, 0, neg_zero], "{}", t.name());
    }
}

#[test]
fn e8m0_rounds_up_and_saturates() {
    let vals = [
        0.0,
        0.124,
        0.125,
        0.25,
        1.1,
        2.0,
        -4.0,
        f64::NAN,
        1.5 * 2f64.powi(127),
        f64::INFINITY,
    ];
    assert_eq!(
        encode_f64(LowpType::F8E8M0, &vals, true),
        [0, 124, 124, 125, 128, 128, 129, 255, 254, 254]
    );
    assert_eq!(encode_f64(LowpType::F8E8M0, &vals, false)[8..], [255, 255]);
}

#[test]
fn integers_truncate_and_wrap() {
    let vals = [2.7, -2.7, -9.0, 8.0, 16.0, 100.0, f64::NAN, f64::INFINITY];
    assert_eq!(
        encode_f64(LowpType::I4, &vals, true),
        [2, -2, 7, -8, 0, 4, 0, 0]
    );
    assert_eq!(
        encode_f64(LowpType::U4, &vals, true),
        [2, 14, 7, 8, 0, 4, 0, 0]
    );
    assert_eq!(
        encode_f64(LowpType::I2, &vals, true),
        [-2, -2, -1, 0, 0, 0, 0, 0]
    );
    assert_eq!(
        encode_f64(LowpType::U2, &vals, true),
        [2, 2, 3, 0, 0, 0, 0, 0]
    );
    // Integer inputs wrap exactly, also beyond 2^53.
    let x = HostTensor::from_vec(vec![200i64, -9, (1 << 60) + 5], &[3]).unwrap();
    let y = eval(
        &Op::EncodeLowp {
            to: LowpType::I4,
            saturate: true,
        },
        &[&x],
    )
    .unwrap();
    assert_eq!(y.to_vec::<i8>().unwrap(), [-8, 7, 5]);
    let x = HostTensor::from_vec(vec![true, false], &[2]).unwrap();
    let y = eval(
        &Op::EncodeLowp {
            to: LowpType::U2,
            saturate: true,
        },
        &[&x],
    )
    .unwrap();
    assert_eq!(y.to_vec::<u8>().unwrap(), [1, 0]);
}

#[test]
fn half_and_strided_inputs_encode_their_values() {
    let vals = [0.3f32, -1.7, 300.0, 1e-3, 448.0, -0.0];
    let want = encode_f64(LowpType::F8E4M3FN, &vals.map(|v| v as f64), true);
    let h = HostTensor::from_vec(vals.map(f16::from_f32).to_vec(), &[6]).unwrap();
    let b = HostTensor::from_vec(vals.map(bf16::from_f32).to_vec(), &[6]).unwrap();
    for x in [h, b] {
        // f16/bf16 round the inputs first; compare with encoding those rounded values.
        let rounded: Vec<f64> = x.to_f64_vec();
        let y = eval(
            &Op::EncodeLowp {
                to: LowpType::F8E4M3FN,
                saturate: true,
            },
            &[&x],
        )
        .unwrap();
        assert_eq!(
            y.to_f64_vec().iter().map(|&v| v as i64).collect::<Vec<_>>(),
            encode_f64(LowpType::F8E4M3FN, &rounded, true)
        );
    }
    // A transposed (non-contiguous) view encodes in its logical order.
    let x = HostTensor::from_vec(vals.to_vec(), &[2, 3]).unwrap();
    let xt = eval(&Op::Permute(vec![1, 0]), &[&x]).unwrap();
    let y = eval(
        &Op::EncodeLowp {
            to: LowpType::F8E4M3FN,
            saturate: true,
        },
        &[&xt],
    )
    .unwrap();
    assert_eq!(y.shape(), [3, 2]);
    let got: Vec<i64> = y
        .to_vec::<u8>()
        .unwrap()
        .into_iter()
        .map(i64::from)
        .collect();
    assert_eq!(got, [want[0], want[3], want[1], want[4], want[2], want[5]]);
    // Empty tensors and a scalar keep their shapes.
    let e = HostTensor::from_vec(Vec::<f32>::new(), &[0, 3]).unwrap();
    assert_eq!(
        eval(
            &Op::EncodeLowp {
                to: LowpType::F4E2M1,
                saturate: true
            },
            &[&e]
        )
        .unwrap()
        .shape(),
        [0, 3]
    );
    let s = HostTensor::from_vec(vec![3.0f32], &[]).unwrap();
    let y = eval(
        &Op::EncodeLowp {
            to: LowpType::F4E2M1,
            saturate: true,
        },
        &[&s],
    )
    .unwrap();
    assert_eq!((y.shape().len(), y.to_vec::<u8>().unwrap()), (0, vec![5]));
    assert_eq!(y.dtype(), DType::U8);
}
