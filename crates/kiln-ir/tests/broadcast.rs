//! NumPy broadcasting of shapes against a naive definition, and axis normalisation.

use kiln_ir::{Dim, Shape, broadcast, broadcast_fixed, normalize_axis};
use proptest::prelude::*;

/// NumPy's rule, pairwise from the right: equal dims or a 1 on either side; missing dims are 1.
fn naive(a: &[usize], b: &[usize]) -> Option<Vec<usize>> {
    let r = a.len().max(b.len());
    let pad = |s: &[usize]| -> Vec<usize> { std::iter::repeat_n(1, r - s.len()).chain(s.iter().copied()).collect() };
    let (a, b) = (pad(a), pad(b));
    a.iter()
        .zip(&b)
        .map(|(&x, &y)| if x == y || y == 1 { Some(x) } else if x == 1 { Some(y) } else { None })
        .collect()
}

#[test]
fn examples() {
    assert_eq!(broadcast_fixed(&[8, 1, 6, 1], &[7, 1, 5], "t").unwrap(), vec![8, 7, 6, 5]);
    assert_eq!(broadcast_fixed(&[], &[3], "t").unwrap(), vec![3]);
    assert_eq!(broadcast_fixed(&[0], &[1], "t").unwrap(), vec![0]);
    assert_eq!(broadcast_fixed(&[2, 0], &[2, 1], "t").unwrap(), vec![2, 0]);
    let e = broadcast_fixed(&[0], &[2], "myop").unwrap_err().to_string();
    assert!(e.contains("myop") && e.contains("[0]") && e.contains("[2]"), "{e}");
    let b = Shape(vec![Dim::sym("batch"), Dim::Fixed(1)]);
    assert_eq!(broadcast(&b, &Shape::fixed(&[4]), "t").unwrap(), Shape(vec![Dim::sym("batch"), Dim::Fixed(4)]));
    // A symbolic dim against a fixed one other than 1 is not provably equal.
    assert!(broadcast(&b, &Shape::fixed(&[3, 1]), "t").is_err());
}

#[test]
fn axes() {
    assert_eq!(normalize_axis(-1, 3, "t").unwrap(), 2);
    assert_eq!(normalize_axis(-3, 3, "t").unwrap(), 0);
    assert_eq!(normalize_axis(2, 3, "t").unwrap(), 2);
    let e = normalize_axis(-4, 3, "softmax").unwrap_err().to_string();
    assert!(e.contains("softmax") && e.contains("-4") && e.contains("rank 3"), "{e}");
    assert!(normalize_axis(3, 3, "t").is_err());
    assert!(normalize_axis(0, 0, "t").is_err());
    assert_eq!(Shape::fixed(&[2, 3]).axis(-1, "t").unwrap(), 1);
}

proptest! {
    #[test]
    fn matches_naive(a in prop::collection::vec(0usize..4, 0..5), b in prop::collection::vec(0usize..4, 0..5)) {
        let got = broadcast_fixed(&a, &b, "t").ok();
        prop_assert_eq!(got.clone(), naive(&a, &b));
        prop_assert_eq!(broadcast_fixed(&b, &a, "t").ok(), got);
    }

    #[test]
    fn ones_and_dropped_leading_dims_always_fit(base in prop::collection::vec(0usize..5, 0..5),
                                                ones in prop::collection::vec(any::<bool>(), 5), drop in 0usize..5) {
        let drop = drop.min(base.len());
        let small: Vec<usize> = base[drop..].iter().enumerate()
            .map(|(i, &d)| if ones[i] { 1 } else { d }).collect();
        prop_assert_eq!(broadcast_fixed(&base, &small, "t").unwrap(), base.clone());
        prop_assert_eq!(broadcast(&Shape::fixed(&small), &Shape::fixed(&base), "t").unwrap(), Shape::fixed(&base));
    }
}
