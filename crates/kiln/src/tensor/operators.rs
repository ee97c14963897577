//! Arithmetic operators on tensor references: `&a + &b` and friends yield `Result<Tensor>`,
//! since shapes or dtypes may not fit.

use super::Tensor;
use kiln_ir::Result;
use std::ops::{Add, Div, Mul, Neg, Sub};

/// Implements `&Tensor op &Tensor` (and the owned forms) through the inherent method, called
/// by path so the trait method (same name) cannot recurse into itself.
macro_rules! binary_operator {
    ($trait:ident, $fn:ident, $method:ident) => {
        impl $trait<&Tensor> for &Tensor {
            type Output = Result<Tensor>;
            fn $fn(self, rhs: &Tensor) -> Result<Tensor> {
                Tensor::$method(self, rhs)
            }
        }
        impl $trait<Tensor> for Tensor {
            type Output = Result<Tensor>;
            fn $fn(self, rhs: Tensor) -> Result<Tensor> {
                Tensor::$method(&self, &rhs)
            }
        }
        impl $trait<&Tensor> for Tensor {
            type Output = Result<Tensor>;
            fn $fn(self, rhs: &Tensor) -> Result<Tensor> {
                Tensor::$method(&self, rhs)
            }
        }
    };
}

binary_operator!(Add, add, add);
binary_operator!(Sub, sub, sub);
binary_operator!(Mul, mul, mul);
binary_operator!(Div, div, div);

impl Neg for &Tensor {
    type Output = Result<Tensor>;
    fn neg(self) -> Result<Tensor> {
        Tensor::neg(self)
    }
}

impl Neg for Tensor {
    type Output = Result<Tensor>;
    fn neg(self) -> Result<Tensor> {
        Tensor::neg(&self)
    }
}
