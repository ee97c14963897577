//! Size-generic C: one translation unit for every value of some sizes ("symbols" `s0, s1, ..`),
//! found by comparing the C rendered for the same graph at sample sizes.
//!
//! The renderer writes sizes as decimal literals. Render a program at the `3^k` points of a grid
//! of sizes (each symbol `si` at `a_i`, `a_i + 1` and `a_i + 2`): where the texts differ only in
//! integer literals, each literal is a function of the sizes, and its values on the grid
//! determine the one polynomial of degree at most 2 in each symbol through them (`768*s0*s1`, an
//! attention's `s0*s1*s1*4`), which must have integer coefficients. The literal becomes that
//! polynomial in C, over the symbols, which each kernel reads from one extra argument
//! ([`super::render_c_sized`]). A [`Template`] is the text with those holes.
//!
//! Fitting at corners proves nothing about other sizes, so a template is used only where it is
//! checked: [`Template::fit`] checks it at a further sample, and a runtime checks, for each new
//! size, that the program scheduled at that size renders exactly to the template's text there
//! ([`Template::instantiate`]). Code that only some sizes share (a fused path chosen by
//! divisibility, a size-1 dim collapsed away) then fails the check and is compiled on its own.

use kiln_ir::{Error, Result};
use std::fmt::Write;

/// Most symbols a template may have (fitting renders `3^k + 1` samples).
pub const MAX_SYMBOLS: usize = 3;

/// Samples per symbol: a polynomial of degree at most 2 in each.
pub const SAMPLES_PER_SYMBOL: usize = 3;

/// C source with holes where sizes go.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Template {
    symbols: usize,
    parts: Vec<Part>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Part {
    Text(String),
    /// Coefficient of each monomial: digit `i` of the index in base 3 is the power of `si`.
    Size(Vec<i128>),
}

/// One source's tokens: text, and the integer literals between them.
fn tokens(src: &str) -> Vec<(&str, bool)> {
    let bytes = src.as_bytes();
    let mut out: Vec<(&str, bool)> = Vec::new();
    let mut text_start = 0;
    let mut i = 0;
    while i < bytes.len() {
        let c = bytes[i];
        if c.is_ascii_alphabetic() || c == b'_' {
            // An identifier (its digits are part of it: `i12`, `k3_add`).
            while i < bytes.len() && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'_') {
                i += 1;
            }
        } else if c.is_ascii_digit() {
            let start = i;
            // A numeric token, with any suffix, fraction or exponent (`1.5e-05f`, `0x1p-3`).
            while i < bytes.len() {
                let b = bytes[i];
                let exp_sign = (b == b'+' || b == b'-') && matches!(bytes[i - 1], b'e' | b'E' | b'p' | b'P');
                if b.is_ascii_alphanumeric() || b == b'_' || b == b'.' || exp_sign {
                    i += 1;
                } else {
                    break;
                }
            }
            let tok = &src[start..i];
            if tok.bytes().all(|b| b.is_ascii_digit()) {
                if text_start < start {
                    out.push((&src[text_start..start], false));
                }
                out.push((tok, true));
                text_start = i;
            }
        } else {
            i += 1;
        }
    }
    if text_start < src.len() {
        out.push((&src[text_start..], false));
    }
    out
}

impl Template {
    /// The sizes of grid point `m` of [`Template::fit`]: symbol `i` at `lo[i] + d`, `d` the
    /// base-3 digit `i` of `m`.
    pub fn grid_point(lo: &[i64], m: usize) -> Vec<i64> {
        lo.iter().enumerate().map(|(i, &a)| a + digit(m, i) as i64).collect()
    }

    /// The template through `corners` (the source rendered at each point of the grid, in the
    /// order of [`Template::grid_point`]), checked against `check` (sizes, source). An error
    /// says where the sources differ other than in integer literals, or that a literal is not
    /// such a polynomial.
    pub fn fit(lo: &[i64], corners: &[String], check: (&[i64], &str)) -> Result<Template> {
        let k = lo.len();
        if k > MAX_SYMBOLS {
            return Err(Error::Unsupported(format!("size-generic code: {k} symbols (at most {MAX_SYMBOLS})")));
        }
        if corners.len() != SAMPLES_PER_SYMBOL.pow(k as u32) {
            return Err(Error::Value(format!("size-generic code: {} corner sources for {k} symbols", corners.len())));
        }
        let toks: Vec<Vec<(&str, bool)>> = corners.iter().map(|s| tokens(s)).collect();
        let n = toks[0].len();
        if let Some(m) = toks.iter().position(|t| t.len() != n) {
            let j = (0..n).find(|&j| toks[m].get(j) != Some(&toks[0][j])).unwrap_or(0);
            return Err(differ(&corners[0], &corners[m], &toks[0], &toks[m], j));
        }
        let mut parts: Vec<Part> = Vec::with_capacity(n);
        for j in 0..n {
            let (first, first_num) = toks[0][j];
            if toks.iter().all(|t| t[j].0 == first) {
                push_text(&mut parts, first);
                continue;
            }
            if !first_num || toks.iter().any(|t| !t[j].1) {
                let m = toks.iter().position(|t| t[j].0 != first).unwrap_or(0);
                return Err(differ(&corners[0], &corners[m], &toks[0], &toks[m], j));
            }
            let mut values = Vec::with_capacity(corners.len());
            for t in &toks {
                values.push(t[j].0.parse::<i128>().map_err(|_| Error::Unsupported(format!("size-generic code: literal {} is too large", t[j].0)))?);
            }
            let c = coefficients(lo, values).ok_or_else(|| {
                Error::Unsupported(format!("size-generic code: literal {first} is not a polynomial in the sizes with integer coefficients"))
            })?;
            parts.push(Part::Size(c));
        }
        let template = Template { symbols: k, parts };
        let (sizes, src) = check;
        if template.instantiate(sizes)? != src {
            return Err(Error::Unsupported(format!(
                "size-generic code: the sizes are not polynomials of degree 2 in the symbols (the source at {sizes:?} is not the fitted one)"
            )));
        }
        Ok(template)
    }

    /// Number of symbols.
    pub fn symbols(&self) -> usize {
        self.symbols
    }

    /// True when some literal depends on the symbols.
    pub fn is_generic(&self) -> bool {
        self.parts.iter().any(|p| matches!(p, Part::Size(_)))
    }

    /// The source at `sizes` (one per symbol): what the renderer gives for a program at those
    /// sizes, when the template holds there.
    pub fn instantiate(&self, sizes: &[i64]) -> Result<String> {
        if sizes.len() != self.symbols {
            return Err(Error::Value(format!("size-generic code: {} sizes for {} symbols", sizes.len(), self.symbols)));
        }
        let mut out = String::new();
        for p in &self.parts {
            match p {
                Part::Text(t) => out.push_str(t),
                Part::Size(c) => {
                    let v = evaluate(c, sizes);
                    // A literal is a non-negative decimal (signs are text): a negative value
                    // cannot be this source's.
                    if v < 0 {
                        return Err(Error::Value(format!("size-generic code: a literal is {v} at sizes {sizes:?}")));
                    }
                    let _ = write!(out, "{v}");
                }
            }
        }
        Ok(out)
    }

    /// The generic source: each size-dependent literal as a C expression over `s0, s1, ..`.
    pub fn source(&self) -> String {
        let mut out = String::new();
        for p in &self.parts {
            match p {
                Part::Text(t) => out.push_str(t),
                Part::Size(c) => out.push_str(&c_expr(c)),
            }
        }
        out
    }
}

/// Appends text to the last text part.
fn push_text(parts: &mut Vec<Part>, t: &str) {
    match parts.last_mut() {
        Some(Part::Text(s)) => s.push_str(t),
        _ => parts.push(Part::Text(t.to_string())),
    }
}

/// The error for two grid sources that differ in more than integer literals, at token `j`:
/// the line of each source holding it.
fn differ(a: &str, b: &str, ta: &[(&str, bool)], tb: &[(&str, bool)], j: usize) -> Error {
    let (x, y) = (ta.get(j).map_or("", |t| t.0), tb.get(j).map_or("", |t| t.0));
    let same = x.bytes().zip(y.bytes()).take_while(|(p, q)| p == q).count();
    let line = |src: &str, toks: &[(&str, bool)]| {
        let at: usize = toks[..j.min(toks.len())].iter().map(|t| t.0.len()).sum::<usize>() + same;
        let begin = src[..at.min(src.len())].rfind('\n').map_or(0, |p| p + 1);
        src[begin..].lines().next().unwrap_or_default().trim().to_string()
    };
    Error::Unsupported(format!(
        "size-generic code: the code differs between sizes, not only in sizes: `{}` vs `{}`",
        line(a, ta),
        line(b, tb)
    ))
}

/// Base-3 digit `i` of `m`.
fn digit(m: usize, i: usize) -> usize {
    m / SAMPLES_PER_SYMBOL.pow(i as u32) % SAMPLES_PER_SYMBOL
}

/// The coefficients of the polynomial through the grid values (`None` unless they are
/// integers). Along one symbol the samples are `a, a + 1, a + 2`, so for `v = c0 + c1 s + c2
/// s^2`: `c2` is half the second difference, `c1 = v(a+1) - v(a) - c2 (2a + 1)` and
/// `c0 = v(a) - c1 a - c2 a^2`. Applied symbol by symbol (the basis is a tensor product).
fn coefficients(lo: &[i64], mut v: Vec<i128>) -> Option<Vec<i128>> {
    for (i, &a) in lo.iter().enumerate() {
        let (a, step) = (a as i128, SAMPLES_PER_SYMBOL.pow(i as u32));
        for m in 0..v.len() {
            if digit(m, i) != 0 {
                continue;
            }
            let (v0, v1, v2) = (v[m], v[m + step], v[m + 2 * step]);
            let d2 = v2 - 2 * v1 + v0;
            if d2 % 2 != 0 {
                return None;
            }
            let c2 = d2 / 2;
            let c1 = v1 - v0 - c2 * (2 * a + 1);
            v[m] = v0 - c1 * a - c2 * a * a;
            v[m + step] = c1;
            v[m + 2 * step] = c2;
        }
    }
    Some(v)
}

/// `Σ c_m Π sizes[i]^digit(m, i)`.
fn evaluate(c: &[i128], sizes: &[i64]) -> i128 {
    c.iter()
        .enumerate()
        .map(|(m, &cm)| {
            (0..sizes.len()).fold(cm, |acc, i| (0..digit(m, i)).fold(acc, |acc, _| acc.saturating_mul(sizes[i] as i128)))
        })
        .fold(0i128, |a, b| a.saturating_add(b))
}

/// The polynomial as a parenthesised C expression (`(s0*768)`, `(s0*s1*s1*4 + 3)`), in int64.
fn c_expr(c: &[i128]) -> String {
    let mut terms = Vec::new();
    for (m, &cm) in c.iter().enumerate().skip(1) {
        if cm == 0 {
            continue;
        }
        let vars: Vec<String> =
            (0..MAX_SYMBOLS).flat_map(|i| std::iter::repeat_n(format!("s{i}"), digit(m, i))).collect();
        let mut t = vars.join("*");
        if cm != 1 {
            t = format!("{t}*{cm}");
        }
        terms.push(t);
    }
    let mut out = terms.join(" + ");
    match c.first().copied().unwrap_or(0) {
        0 if !out.is_empty() => {}
        c0 if out.is_empty() => out = c0.to_string(),
        c0 => {
            let _ = write!(out, " + {c0}");
        }
    }
    format!("({})", out.replace("+ -", "- "))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A made-up source whose literals are functions of the sizes (b, s).
    fn src(b: i64, s: i64) -> String {
        format!(
            "void k0_add(void* const* args, int64_t begin, int64_t end) {{ /* f32 [{}] */\n  if (end > {}) end = {};\n  x = in0[i0*{} + i12] * 1.5e-05f + {} - {};\n  y = {};\n}}\n",
            b * s * 768,
            b * s,
            b * s,
            s * 64,
            3,
            b + 2,
            b * s * s * 4
        )
    }

    fn grid(lo: &[i64], f: impl Fn(&[i64]) -> String) -> Vec<String> {
        (0..SAMPLES_PER_SYMBOL.pow(lo.len() as u32)).map(|m| f(&Template::grid_point(lo, m))).collect()
    }

    #[test]
    fn fits_polynomial_literals_and_reproduces_other_sizes() {
        let lo = [2, 3];
        let t = Template::fit(&lo, &grid(&lo, |s| src(s[0], s[1])), (&[5, 7], &src(5, 7))).unwrap();
        assert!(t.is_generic());
        for (b, s) in [(2, 3), (9, 128), (64, 1), (1000, 17)] {
            assert_eq!(t.instantiate(&[b, s]).unwrap(), src(b, s));
        }
        let generic = t.source();
        assert!(generic.contains("[(s0*s1*768)]"), "{generic}");
        assert!(generic.contains("end > (s0*s1)"), "{generic}");
        assert!(generic.contains("i0*(s1*64) + i12"), "{generic}");
        assert!(generic.contains("- (s0 + 2)"), "{generic}");
        assert!(generic.contains("y = (s0*s1*s1*4);"), "{generic}");
        // Identifiers and float literals are text: `i12`, `1.5e-05f`, the constant 3.
        assert!(generic.contains("1.5e-05f + 3 -"), "{generic}");
    }

    #[test]
    fn refuses_code_that_differs_beyond_literals() {
        let lo = [2];
        let f = |s: &[i64]| if s[0] % 2 == 0 { format!("a;\nvec8(x, {});\n", s[0] * 8) } else { format!("a;\nscalar(x, {});\n", s[0] * 8) };
        let e = Template::fit(&lo, &grid(&lo, f), (&[5], &f(&[5]))).unwrap_err();
        assert!(e.to_string().contains("differs between sizes, not only in sizes: `vec8(x, 16);` vs `scalar(x, 24);`"), "{e}");
        // A float literal that changes with the size (a mean's 1/n) is not a size.
        let f = |s: &[i64]| format!("x * {:?}f;", 1.0 / s[0] as f64);
        assert!(Template::fit(&lo, &grid(&lo, f), (&[5], &f(&[5]))).is_err());
    }

    #[test]
    fn refuses_literals_that_are_not_such_polynomials() {
        let lo = [2];
        // (s + 1) / 2 has no integer-coefficient fit; s^3 agrees with a quadratic on the grid,
        // not at the check; s / 3 fails one way or the other.
        let e = Template::fit(&lo, &grid(&lo, |s| format!("n = {};", (s[0] + 1) / 2)), (&[5], "n = 3;")).unwrap_err();
        assert!(e.to_string().contains("integer coefficients"), "{e}");
        let cube = |s: &[i64]| format!("n = {};", s[0] * s[0] * s[0]);
        let e = Template::fit(&lo, &grid(&lo, cube), (&[5], &cube(&[5]))).unwrap_err();
        assert!(e.to_string().contains("not polynomials"), "{e}");
        let third = |s: &[i64]| format!("n = {};", s[0] / 3);
        assert!(Template::fit(&[3], &grid(&[3], third), (&[8], &third(&[8]))).is_err());
    }

    #[test]
    fn a_source_without_sizes_is_its_own_template() {
        let f = |_: &[i64]| "int x = 7;".to_string();
        let t = Template::fit(&[4], &grid(&[4], f), (&[9], "int x = 7;")).unwrap();
        assert!(!t.is_generic());
        assert_eq!(t.source(), "int x = 7;");
        assert_eq!(t.instantiate(&[100]).unwrap(), "int x = 7;");
        assert!(t.instantiate(&[1, 2]).is_err());
    }

    #[test]
    fn negative_coefficients_render_as_subtraction() {
        assert_eq!(c_expr(&[10, -2]), "(s0*-2 + 10)");
        assert_eq!(c_expr(&[-3, 4]), "(s0*4 - 3)");
        // Index 4 in base 3 is s0*s1; index 2 is s0*s0.
        assert_eq!(c_expr(&[0, 1, 0, 0, 2]), "(s0 + s0*s1*2)");
        assert_eq!(c_expr(&[0, 0, 3]), "(s0*s0*3)");
        assert_eq!(c_expr(&[5]), "(5)");
    }
}
