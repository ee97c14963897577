//! `SliceAxis::resolve` against Python's slicing of `list(range(len))`.

use kiln_ir::SliceAxis;
use proptest::prelude::*;

/// Python's `list(range(len))[start:end:step]`, written from the language reference: bounds
/// are normalised (negative counts from the end) and clamped to the valid range for the
/// direction, then indices are taken from start towards end.
fn python_slice(len: usize, start: i64, end: i64, step: i64) -> Vec<i64> {
    let n = len as i128;
    let (start, end, step) = (start as i128, end as i128, step as i128);
    let adjust = |v: i128, lo: i128, hi: i128| {
        let v = if v < 0 { v + n } else { v };
        v.clamp(lo, hi)
    };
    let (s, e) = if step > 0 { (adjust(start, 0, n), adjust(end, 0, n)) } else { (adjust(start, -1, n - 1), adjust(end, -1, n - 1)) };
    let mut out = Vec::new();
    let mut i = s;
    while (step > 0 && i < e) || (step < 0 && i > e) {
        out.push(i as i64);
        i += step;
    }
    out
}

/// The indices `resolve` describes.
fn resolved(len: usize, a: SliceAxis) -> Vec<i64> {
    let (start, _end, count) = a.resolve(len);
    (0..count as i64).map(|k| start + k * a.step).collect()
}

/// Cases computed by CPython 3 (`list(range(n))[start:end:step]`; an omitted bound is
/// written as the i64 extreme kiln's frontends use for it).
const PYTHON: &[(usize, i64, i64, i64, &[i64])] = &[
    (5, -7, 1, 1, &[0]),
    (1, 6, -8, -3, &[0]),
    (0, 5, -5, 1, &[]),
    (1, 2, 2, 2, &[]),
    (3, -9, 6, 5, &[0]),
    (0, 7, -8, -1, &[]),
    (0, 7, 7, 5, &[]),
    (0, -4, -10, 3, &[]),
    (4, 2, -7, 2, &[]),
    (4, 6, 10, 3, &[]),
    (1, 7, 7, -1, &[]),
    (5, -8, 6, 2, &[0, 2, 4]),
    (0, 8, -5, -5, &[]),
    (6, -1, 3, -5, &[5]),
    (5, -2, -4, 3, &[]),
    (3, -9, 7, -2, &[]),
    (7, -1, 3, -2, &[6, 4]),
    (1, -8, 5, 5, &[0]),
    (2, -1, -7, -5, &[1]),
    (6, -10, 10, 2, &[0, 2, 4]),
    (5, -1, 0, -5, &[4]),
    (7, -9, -9, -2, &[]),
    (7, 10, -9, 1, &[]),
    (4, 9, 7, -5, &[]),
    (4, 1, 10, -3, &[]),
    (0, 3, 0, 3, &[]),
    (1, 4, -10, -1, &[0]),
    (4, -7, -4, 5, &[]),
    (6, 4, -9, 3, &[]),
    (7, 1, 6, -2, &[]),
    (2, 2, 6, -2, &[]),
    (6, 0, 10, 5, &[0, 5]),
    (3, -7, -9, 3, &[]),
    (2, -4, 10, -1, &[]),
    (0, 4, 7, 3, &[]),
    (4, -2, i64::MAX, 3, &[2]),
    (6, 6, 0, -3, &[5, 2]),
    (2, 5, 8, 1, &[]),
    (7, 10, 6, 5, &[]),
    (6, 1, 1, 2, &[]),
    (7, 9, 1, 1, &[]),
    (3, -9, -5, -5, &[]),
    (2, -8, -1, 1, &[0]),
    (1, 0, 7, 3, &[0]),
    (1, 0, 8, 1, &[0]),
    (1, -5, 8, 5, &[0]),
    (2, 9, -3, -3, &[1]),
    (5, 4, -8, 2, &[]),
    (7, 3, 4, -5, &[]),
    (4, -9, -7, 2, &[]),
    (5, -3, 4, 3, &[2]),
    (0, -5, 5, -3, &[]),
    (2, 6, i64::MIN, -2, &[1]),
    (1, -3, 5, -3, &[]),
    (2, 0, -4, -3, &[0]),
    (3, 8, -5, -1, &[2, 1, 0]),
    (6, -4, -5, -5, &[2]),
    (5, i64::MAX, i64::MIN, -2, &[4, 2, 0]),
    (7, -3, -5, -3, &[4]),
    (7, 0, 0, 2, &[]),
];

#[test]
fn matches_cpython_table() {
    for &(n, start, end, step, want) in PYTHON {
        let got = resolved(n, SliceAxis { start, end, step });
        assert_eq!(got, want, "list(range({n}))[{start}:{end}:{step}]");
        assert_eq!(python_slice(n, start, end, step), want, "oracle on [{start}:{end}:{step}]");
    }
}

#[test]
fn full_axis_and_reverse() {
    assert_eq!(resolved(4, SliceAxis::FULL), vec![0, 1, 2, 3]);
    assert_eq!(resolved(0, SliceAxis::FULL), Vec::<i64>::new());
    assert_eq!(resolved(4, SliceAxis { start: -1, end: i64::MIN, step: -1 }), vec![3, 2, 1, 0]);
    assert_eq!(resolved(4, SliceAxis { start: i64::MIN, end: i64::MAX, step: 1 }), vec![0, 1, 2, 3]);
}

/// ONNX files may carry any i64 step; `resolve` computes `span + step - 1` and `-step`, which
/// overflow for steps near the i64 extremes (a panic in debug builds, a wrong count in release).
/// The fix belongs in op.rs (e.g. count = `(span - 1) / |step| + 1` for a positive span).
#[test]
fn huge_steps_do_not_overflow() {
    assert_eq!(resolved(4, SliceAxis { start: 0, end: i64::MAX, step: i64::MAX }), vec![0]);
    assert_eq!(resolved(4, SliceAxis { start: i64::MAX, end: i64::MIN, step: i64::MIN }), vec![3]);
}

fn bound() -> impl Strategy<Value = i64> {
    prop_oneof![-25i64..25, Just(i64::MIN), Just(i64::MAX)]
}

proptest! {
    #[test]
    fn resolve_matches_python(len in 0usize..12, start in bound(), end in bound(),
                              step in prop_oneof![1i64..6, -6i64..0, 1_000i64..1_000_000, -1_000_000i64..-1_000]) {
        let a = SliceAxis { start, end, step };
        let want = python_slice(len, start, end, step);
        prop_assert_eq!(resolved(len, a), want.clone());
        let (s, _, count) = a.resolve(len);
        prop_assert_eq!(count, want.len());
        if let Some(&first) = want.first() {
            prop_assert_eq!(s, first);
        }
    }
}
